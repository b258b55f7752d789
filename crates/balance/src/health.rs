//! Active health checks (HAProxy `check`, `inter`, `rise`, `fall`; configuration manual §5.2):
//! every `interval`, each server not in maintenance gets a TCP connect, or an HTTP/1.0 GET of
//! `path` whose status must equal `expect_status`, within `timeout`. `fall` consecutive
//! failures take a server down (no new work); `rise` consecutive successes bring it back, and
//! slow start ramps its weight from there. Checks run concurrently, one task per round.

use crate::config::{Health, HealthKind, SendProxy};
use crate::service::Service;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Most bytes read of a check response (the status line is all we need).
const MAX_CHECK_READ: usize = 1024;

pub async fn run(svc: Arc<Service>) {
    loop {
        // Registered before the configuration is read, so a reload that adds checks between
        // the read and the wait is not missed.
        let changed = svc.servers_changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let rt = svc.runtime();
        let Some(h) = rt.health.clone() else {
            // No checks configured: wait for a reload that may add them.
            changed.await;
            continue;
        };
        let round = tokio::time::Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for (id, addr, send_proxy) in svc.check_targets() {
            let h = h.clone();
            tasks.spawn(async move { (id, check(addr, send_proxy, &h).await) });
        }
        while let Some(Ok((id, r))) = tasks.join_next().await {
            let (ok, detail) = match r {
                Ok(d) => (true, d.to_string()),
                Err(d) => (false, d.to_string()),
            };
            svc.health_result(id, ok, detail);
        }
        tokio::time::sleep_until(round + Duration::from_nanos(h.interval)).await;
    }
}

/// A check that passed; its text is the short description `show-servers` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckPass {
    /// The TCP connect succeeded.
    Tcp,
    /// The HTTP status was the one expected.
    Http(u16),
}

impl fmt::Display for CheckPass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckPass::Tcp => f.write_str("tcp connect ok"),
            CheckPass::Http(c) => write!(f, "http {c}"),
        }
    }
}

/// Why a check failed; its text is the short description `show-servers` shows.
#[derive(Debug)]
pub enum CheckFailure {
    Connect(std::io::Error),
    Send(std::io::Error),
    Read(std::io::Error),
    /// Another status than `expect_status`.
    Status {
        got: u16,
        expected: u16,
    },
    /// The first line (at most 64 bytes of it) is no HTTP status line.
    NotHttp(String),
    /// No answer within `timeout` (the configured value).
    Timeout(Duration),
}

impl fmt::Display for CheckFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckFailure::Connect(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                f.write_str("connect refused")
            }
            CheckFailure::Connect(e) => write!(f, "connect: {e}"),
            CheckFailure::Send(e) => write!(f, "send: {e}"),
            CheckFailure::Read(e) => write!(f, "read: {e}"),
            CheckFailure::Status { got, expected } => {
                write!(f, "status {got}, expected {expected}")
            }
            CheckFailure::NotHttp(line) => write!(f, "not an HTTP status line: {line:?}"),
            CheckFailure::Timeout(t) => write!(f, "timeout after {} ms", t.as_millis()),
        }
    }
}

impl std::error::Error for CheckFailure {}

/// One check. A server with `send_proxy` gets its PROXY protocol header before an HTTP
/// check's request (`proxy_proto::check_header`); a TCP check sends nothing.
pub async fn check(
    addr: SocketAddr,
    send_proxy: Option<SendProxy>,
    h: &Health,
) -> Result<CheckPass, CheckFailure> {
    let timeout = Duration::from_nanos(h.timeout);
    let fut = async {
        let mut s = TcpStream::connect(addr)
            .await
            .map_err(CheckFailure::Connect)?;
        if h.kind == HealthKind::Tcp {
            return Ok(CheckPass::Tcp);
        }
        let mut req = match (send_proxy, s.local_addr(), s.peer_addr()) {
            (Some(v), Ok(local), Ok(peer)) => crate::proxy_proto::check_header(v, local, peer),
            _ => Vec::new(),
        };
        req.extend_from_slice(
            format!(
                "GET {} HTTP/1.0\r\nHost: {addr}\r\nUser-Agent: netsched-balance-check\r\n\r\n",
                h.path
            )
            .as_bytes(),
        );
        s.write_all(&req).await.map_err(CheckFailure::Send)?;
        let mut buf = vec![0u8; MAX_CHECK_READ];
        let mut len = 0;
        while len < buf.len() && !buf[..len].contains(&b'\n') {
            let n = s.read(&mut buf[len..]).await.map_err(CheckFailure::Read)?;
            if n == 0 {
                break;
            }
            len += n;
        }
        let line = String::from_utf8_lossy(&buf[..len]);
        let line = line.lines().next().unwrap_or("");
        let status: Option<u16> = line
            .strip_prefix("HTTP/1.")
            .and_then(|r| r.get(2..5))
            .and_then(|c| c.parse().ok());
        match status {
            Some(c) if c == h.expect_status => Ok(CheckPass::Http(c)),
            Some(c) => Err(CheckFailure::Status {
                got: c,
                expected: h.expect_status,
            }),
            None => {
                // At most 64 bytes, cut on a character boundary.
                let mut end = line.len().min(64);
                while !line.is_char_boundary(end) {
                    end -= 1;
                }
                Err(CheckFailure::NotHttp(line[..end].to_string()))
            }
        }
    };
    match tokio::time::timeout(timeout, fut).await {
        Ok(r) => r,
        Err(_) => Err(CheckFailure::Timeout(timeout)),
    }
}

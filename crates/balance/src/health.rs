//! Active health checks (HAProxy `check`, `inter`, `rise`, `fall`; configuration manual §5.2):
//! every `interval`, each server not in maintenance gets a TCP connect, or an HTTP/1.0 GET of
//! `path` whose status must equal `expect_status`, within `timeout`. `fall` consecutive
//! failures take a server down (no new work); `rise` consecutive successes bring it back, and
//! slow start ramps its weight from there. Checks run concurrently, one task per round.

use crate::config::{Health, HealthKind};
use crate::service::Service;
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
        for (id, addr) in svc.check_targets() {
            let h = h.clone();
            tasks.spawn(async move { (id, check(addr, &h).await) });
        }
        while let Some(Ok((id, r))) = tasks.join_next().await {
            let (ok, detail) = match r {
                Ok(d) => (true, d),
                Err(d) => (false, d),
            };
            svc.health_result(id, ok, detail);
        }
        tokio::time::sleep_until(round + Duration::from_nanos(h.interval)).await;
    }
}

/// One check. `Ok` and `Err` both carry a short description for `show-servers` and for the
/// log line of a state change: `connect refused`, `connect: <error>`, `timeout after N ms`,
/// `status 503, expected 200`, `not an HTTP status line: ...`.
pub async fn check(addr: SocketAddr, h: &Health) -> Result<String, String> {
    let timeout = Duration::from_nanos(h.timeout);
    let fut = async {
        let mut s = TcpStream::connect(addr).await.map_err(|e| match e.kind() {
            std::io::ErrorKind::ConnectionRefused => "connect refused".to_string(),
            _ => format!("connect: {e}"),
        })?;
        if h.kind == HealthKind::Tcp {
            return Ok("tcp connect ok".to_string());
        }
        let req = format!(
            "GET {} HTTP/1.0\r\nHost: {addr}\r\nUser-Agent: netsched-balance-check\r\n\r\n",
            h.path
        );
        s.write_all(req.as_bytes())
            .await
            .map_err(|e| format!("send: {e}"))?;
        let mut buf = vec![0u8; MAX_CHECK_READ];
        let mut len = 0;
        while len < buf.len() && !buf[..len].contains(&b'\n') {
            let n = s
                .read(&mut buf[len..])
                .await
                .map_err(|e| format!("read: {e}"))?;
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
            Some(c) if c == h.expect_status => Ok(format!("http {c}")),
            Some(c) => Err(format!("status {c}, expected {}", h.expect_status)),
            None => Err(format!(
                "not an HTTP status line: {:?}",
                &line[..line.len().min(64)]
            )),
        }
    };
    match tokio::time::timeout(timeout, fut).await {
        Ok(r) => r,
        Err(_) => Err(format!("timeout after {} ms", timeout.as_millis())),
    }
}

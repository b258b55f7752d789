//! Test backends and clients on loopback (no privileges needed): tiny HTTP and TCP servers of
//! our own that say who they are, and a raw HTTP client that sees exactly what the balancer
//! sends.
#![allow(dead_code)]

pub mod haproxy;
pub mod https;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use netsched_balance::config::Config;
use netsched_balance::Running;
use netsched_testbed::TempDir;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinSet;

/// Generous bound for anything that must happen "soon" on a loaded 2-core machine.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// Every core balancer kind, by its configuration name (the core's one list).
pub fn kinds() -> Vec<&'static str> {
    netsched_core::balance::BalancerConfig::all_defaults()
        .iter()
        .map(|c| c.name())
        .collect()
}

/// L4: connect through the balancer; return the stream (reader) and the name the TCP backend
/// greets with.
pub async fn open(addr: SocketAddr) -> (BufReader<TcpStream>, String) {
    let s = TcpStream::connect(addr).await.unwrap();
    let mut r = BufReader::new(s);
    let mut name = String::new();
    tokio::time::timeout(PATIENCE, r.read_line(&mut name))
        .await
        .unwrap()
        .unwrap();
    (r, name.trim().to_string())
}

/// L4: send a line through an open connection and read the backend's echo.
pub async fn echo(r: &mut BufReader<TcpStream>, text: &str) -> String {
    r.get_mut().write_all(text.as_bytes()).await.unwrap();
    let mut line = String::new();
    tokio::time::timeout(PATIENCE, r.read_line(&mut line))
        .await
        .unwrap()
        .unwrap();
    line
}

pub struct Backend {
    pub name: String,
    pub addr: SocketAddr,
    pub hits: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Backend {
    /// Stop accepting and drop every open connection (a killed server).
    pub fn kill(&self) {
        self.task.abort();
    }
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::SeqCst)
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// HTTP backend: `/sleep/<ms>` waits before answering; every answer's body is the name.
pub async fn http_backend(name: &str) -> Backend {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let hits = Arc::new(AtomicU64::new(0));
    let (n, h) = (name.to_string(), hits.clone());
    let task = tokio::spawn(async move {
        let mut conns = JoinSet::new();
        loop {
            let Ok((s, _)) = l.accept().await else {
                continue;
            };
            let (n, h) = (n.clone(), h.clone());
            conns.spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let (n, h) = (n.clone(), h.clone());
                    async move {
                        let path = req.uri().path().to_string();
                        if path != "/health" {
                            h.fetch_add(1, Ordering::SeqCst);
                        }
                        if let Some(ms) = path.strip_prefix("/sleep/") {
                            let ms: u64 = ms.parse().unwrap_or(0);
                            tokio::time::sleep(Duration::from_millis(ms)).await;
                        }
                        Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from(n))))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
            while conns.try_join_next().is_some() {}
        }
    });
    Backend {
        name: name.into(),
        addr,
        hits,
        task,
    }
}

/// HTTP backend answering every request with `page` as `text/html` (for a browser).
pub async fn html_backend(name: &str, page: &'static str) -> Backend {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let hits = Arc::new(AtomicU64::new(0));
    let h = hits.clone();
    let task = tokio::spawn(async move {
        let mut conns = JoinSet::new();
        loop {
            let Ok((s, _)) = l.accept().await else {
                continue;
            };
            let h = h.clone();
            conns.spawn(async move {
                let svc =
                    hyper::service::service_fn(move |_req: Request<hyper::body::Incoming>| {
                        h.fetch_add(1, Ordering::SeqCst);
                        let resp = Response::builder()
                            .header("content-type", "text/html; charset=utf-8")
                            .body(Full::new(Bytes::from_static(page.as_bytes())));
                        async move { resp }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
            while conns.try_join_next().is_some() {}
        }
    });
    Backend {
        name: name.into(),
        addr,
        hits,
        task,
    }
}

/// HTTP backend whose every answer's body is the request's header fields, one
/// `name: value` line each, in the order received (a field sent twice gives two lines).
pub async fn header_echo_backend(name: &str) -> Backend {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let hits = Arc::new(AtomicU64::new(0));
    let h = hits.clone();
    let task = tokio::spawn(async move {
        let mut conns = JoinSet::new();
        loop {
            let Ok((s, _)) = l.accept().await else {
                continue;
            };
            let h = h.clone();
            conns.spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let h = h.clone();
                    async move {
                        h.fetch_add(1, Ordering::SeqCst);
                        let mut text = String::new();
                        for (n, v) in req.headers() {
                            text += &format!("{n}: {}\n", String::from_utf8_lossy(v.as_bytes()));
                        }
                        Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from(
                            text,
                        ))))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
            while conns.try_join_next().is_some() {}
        }
    });
    Backend {
        name: name.into(),
        addr,
        hits,
        task,
    }
}

/// TCP backend: writes `<name>\n`, echoes until the client's FIN, then holds its side open
/// until `release` is notified, then closes.
pub async fn tcp_backend(name: &str, release: Arc<Notify>) -> Backend {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let hits = Arc::new(AtomicU64::new(0));
    let (n, h) = (name.to_string(), hits.clone());
    let task = tokio::spawn(async move {
        let mut conns = JoinSet::new();
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                // Out of descriptors: wait for one to free instead of spinning.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            h.fetch_add(1, Ordering::SeqCst);
            let n = n.clone();
            let release = release.clone();
            conns.spawn(async move {
                let wait = release.notified();
                tokio::pin!(wait);
                wait.as_mut().enable();
                if s.write_all(format!("{n}\n").as_bytes()).await.is_err() {
                    return;
                }
                let mut buf = [0u8; 4096];
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(k) => {
                            if s.write_all(&buf[..k]).await.is_err() {
                                return;
                            }
                        }
                    }
                }
                wait.await;
            });
            while conns.try_join_next().is_some() {}
        }
    });
    Backend {
        name: name.into(),
        addr,
        hits,
        task,
    }
}

/// A configuration for `backends`, listening on an ephemeral loopback port, control socket in
/// `dir`. `extra` is appended before the servers (top-level keys must come first: pass
/// tables only).
pub fn config_text(
    mode: &str,
    algorithm: &str,
    top: &str,
    tables: &str,
    backends: &[&Backend],
    dir: &TempDir,
) -> String {
    let mut t = format!(
        "mode = \"{mode}\"\nlisten = [\"127.0.0.1:0\"]\nalgorithm = {algorithm}\ncontrol_socket = \"{}\"\n{top}\n{tables}\n",
        dir.path().join("ctl.sock").display()
    );
    for b in backends {
        t += &format!("[[server]]\nname = \"{}\"\naddr = \"{}\"\n", b.name, b.addr);
    }
    t
}

pub async fn start(text: &str, dir: &TempDir) -> Running {
    let path = dir.path().join("balance.toml");
    std::fs::write(&path, text).unwrap();
    let cfg = Config::load(&path).unwrap_or_else(|e| panic!("{e}\n{text}"));
    netsched_balance::start(cfg, &path).await.unwrap()
}

/// One HTTP/1.1 request with `Connection: close`; (status, body). Status 0 = no response.
pub async fn get(addr: SocketAddr, path: &str, host: &str) -> (u16, String) {
    let Ok(mut s) = TcpStream::connect(addr).await else {
        return (0, String::new());
    };
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).await.is_err() {
        return (0, String::new());
    }
    let mut out = Vec::new();
    let _ = tokio::time::timeout(PATIENCE, s.read_to_end(&mut out)).await;
    parse(&out)
}

pub fn parse(out: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(out);
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// Where a response head ends (after its blank line), if it has.
pub fn head_end(b: &[u8]) -> Option<usize> {
    b.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

/// Send `req` on `s` (plain or TLS) and read one response whose body has a Content-Length:
/// (status line, head, body), the status line and head in lower case; `no_body` for the
/// answer to a HEAD. Err when the connection fails or ends first, or after [`PATIENCE`].
pub async fn exchange<S>(
    s: &mut S,
    req: &str,
    no_body: bool,
) -> Result<(String, String, String), String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| format!("sending {req:?}: {e}"))?;
    let mut buf = Vec::new();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(end) = head_end(&buf) {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            let want = if no_body { 0 } else { len };
            if buf.len() >= end + want {
                let status = head.lines().next().unwrap_or("").to_string();
                let body = String::from_utf8_lossy(&buf[end..end + want]).to_string();
                return Ok((status, head, body));
            }
        }
        let mut chunk = [0u8; 4096];
        match tokio::time::timeout_at(deadline, s.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            other => {
                return Err(format!(
                    "no complete response to {req:?}: {other:?}, got {:?}",
                    String::from_utf8_lossy(&buf)
                ))
            }
        }
    }
}

/// Poll `f` every 20 ms until it is true or PATIENCE passes; returns whether it became true.
pub async fn eventually(mut f: impl FnMut() -> bool) -> bool {
    let end = tokio::time::Instant::now() + PATIENCE;
    while tokio::time::Instant::now() < end {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    f()
}

pub fn row(r: &Running, name: &str) -> netsched_balance::service::ServerView {
    r.service
        .show()
        .into_iter()
        .find(|s| s.name == name)
        .unwrap()
}

pub fn metrics_text(r: &Running) -> String {
    let a = r.admin.expect("admin configured");
    let mut s = std::net::TcpStream::connect(a).unwrap();
    use std::io::{Read, Write};
    s.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// The value of the first metrics line starting with `prefix` (0 if absent).
pub fn metric(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

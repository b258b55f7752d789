//! One way every netsched daemon exports Prometheus metrics.
//!
//! A daemon registers its metric families in a [`prometheus_client::registry::Registry`],
//! wraps it in [`Shared`] and calls [`serve`]: a small HTTP/1.0-style listener on its **own
//! thread** (no async runtime needed, so the NFQUEUE and AF_PACKET daemons, which are plain
//! poll loops, can use it as well as the tokio balancer) answers `GET /metrics` with the text
//! exposition format. The listener binds loopback unless the operator names another address.
//! A daemon that passes a [`Page`] to [`serve_with_page`] also gets its live status page there:
//! `GET /` (one self-contained HTML page) and `GET /status.json` (what it reads every second,
//! made from the same registry; `status.rs`). `HEAD` answers the head of a `GET`.
//!
//! Bounds: at most [`MAX_CONNECTIONS`] scrapes at once, each on its own short-lived thread (a
//! connection beyond them gets 503 at once, so stuck or half-open clients cannot queue up the
//! others), a request head of at most [`MAX_REQUEST_BYTES`], and [`IO_DEADLINE`] for reading the
//! head and again for writing the answer (in total, not per system call), a status JSON of at
//! most [`MAX_STATUS_BYTES`]; anything else gets 404, 405 (with `Allow: GET, HEAD`) or 400 and
//! the connection is closed. Encoding takes the registry lock briefly; metric
//! updates themselves are atomics and never wait for the scraper.
//!
//! Daemons whose counters live in a single packet thread (no atomics there) publish a copy
//! instead: [`Latest`] is a one-value slot the packet thread fills with `try_lock` (it never
//! waits: when a scrape is copying the slot out, that publication is skipped and counted), and
//! [`register_snapshot`] turns the latest copy into families at scrape time through a
//! [`Writer`]. [`parse_addr`] reads a `--metrics ADDR` flag the same way for every daemon;
//! [`scrape`], [`parse_exposition`] and [`scrape_samples`] (the two, answered 200) are the
//! scraping side, for tests and tools. [`register_daemon`] adds what every daemon exports about
//! itself: `process_*`, `netsched_build_info` and the log writer's dropped lines (`process.rs`).

#![forbid(unsafe_code)]

mod client;
mod port_families;
mod process;
mod read_counter;
mod reloads;
mod snapshot;
mod status;

pub use client::{
    hammer, parse_exposition, scrape, scrape_samples, HammerOutcome, Sample, MAX_SCRAPE_BYTES,
};
pub use port_families::PortCounters;
pub use process::{register_daemon, MAX_FDS_COUNTED};
/// The crate the registries and families come from, for daemons that only need its types.
pub use prometheus_client;
pub use read_counter::{register_log_drops, register_read_counter};
pub use reloads::Reloads;
pub use snapshot::{parse_addr, register_snapshot, AddrError, Latest, Writer};
pub use status::{status_json, Page, MAX_STATUS_BYTES};

use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest request head read before answering 400.
pub const MAX_REQUEST_BYTES: usize = 8 * 1024;
/// Read and write deadline for one scrape connection (each in total).
pub const IO_DEADLINE: Duration = Duration::from_secs(2);
/// Scrape connections served at once; one more gets 503 and is closed.
pub const MAX_CONNECTIONS: usize = 8;
/// The default admin address: loopback only.
pub const DEFAULT_ADDR: &str = "127.0.0.1:9100";

/// A registry shared between the daemon (which registers families) and the listener.
pub type Shared = Arc<Mutex<Registry>>;

/// A running `/metrics` listener. Dropping it stops the thread.
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// The bound address (useful with port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the blocking accept.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Errors of [`serve`].
#[derive(Debug)]
pub enum MetricsError {
    /// The address could not be bound.
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

impl std::fmt::Display for MetricsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MetricsError::Bind { addr, source } => {
                write!(f, "metrics listener: cannot bind {addr}: {source}")
            }
        }
    }
}

impl std::error::Error for MetricsError {}

/// Bind `addr` and serve `GET /metrics` from `registry` on a new thread.
pub fn serve(addr: SocketAddr, registry: Shared) -> Result<MetricsServer, MetricsError> {
    serve_with_page(addr, registry, None)
}

/// Like [`serve`], and with `page` also `GET /` (the daemon's live status page) and
/// `GET /status.json` (what the page reads every second), on the same thread and bounds.
pub fn serve_with_page(
    addr: SocketAddr,
    registry: Shared,
    page: Option<Page>,
) -> Result<MetricsServer, MetricsError> {
    let listener = TcpListener::bind(addr).map_err(|source| MetricsError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| MetricsError::Bind { addr, source })?;
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let site = Arc::new(Site {
        registry,
        page,
        started: Instant::now(),
    });
    let thread = std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            let active = Arc::new(AtomicUsize::new(0));
            for conn in listener.incoming() {
                if stop2.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(stream) = conn else { continue };
                if active.load(Ordering::Acquire) >= MAX_CONNECTIONS {
                    busy(stream);
                    continue;
                }
                active.fetch_add(1, Ordering::AcqRel);
                let (site, done) = (Arc::clone(&site), Arc::clone(&active));
                let spawned = std::thread::Builder::new()
                    .name("metrics-conn".into())
                    .spawn(move || {
                        let _ = answer(stream, &site);
                        done.fetch_sub(1, Ordering::AcqRel);
                    });
                if spawned.is_err() {
                    active.fetch_sub(1, Ordering::AcqRel);
                }
            }
        })
        .map_err(|source| MetricsError::Bind { addr, source })?;
    Ok(MetricsServer {
        addr: bound,
        stop,
        thread: Some(thread),
    })
}

/// Render the registry in the text exposition format.
pub fn render(registry: &Shared) -> String {
    let mut out = String::new();
    let reg = registry.lock().unwrap_or_else(|p| p.into_inner());
    // Encoding into a String cannot fail except on a formatter error, which String never gives.
    let _ = encode(&mut out, &reg);
    out
}

/// Over [`MAX_CONNECTIONS`]: answer 503 without waiting (a fresh socket's send buffer takes
/// the few bytes) and close.
fn busy(stream: TcpStream) {
    let _ = stream.set_nonblocking(true);
    let _ = (&stream).write_all(
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    // FIN after the answer; a request still unread may turn the close into a reset, which a
    // scraper sees as a failed scrape all the same.
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let _ = (&stream).read(&mut [0u8; 1024]);
}

/// Time left until `deadline`, or a timeout error.
fn left(deadline: Instant) -> std::io::Result<Duration> {
    let d = deadline.saturating_duration_since(Instant::now());
    if d.is_zero() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "scrape deadline",
        ));
    }
    Ok(d)
}

/// What one listener serves: the registry, and the status page when the daemon has one.
struct Site {
    registry: Shared,
    page: Option<Page>,
    started: Instant,
}

/// An answer: status line, content type, body.
type Reply = (&'static str, &'static str, String);

fn answer(mut stream: TcpStream, site: &Site) -> std::io::Result<()> {
    let read_by = Instant::now() + IO_DEADLINE;
    let mut buf = vec![0u8; MAX_REQUEST_BYTES];
    let mut len = 0;
    let head_end = loop {
        if let Some(p) = find(&buf[..len], b"\r\n\r\n") {
            break Some(p);
        }
        if len == buf.len() {
            break None;
        }
        stream.set_read_timeout(Some(left(read_by)?))?;
        let n = stream.read(&mut buf[len..])?;
        if n == 0 {
            return Ok(());
        }
        len += n;
    };
    let mut head_only = false;
    let (status, ctype, body) = match head_end {
        None => (
            "400 Bad Request",
            "text/plain",
            "request head too long\n".to_string(),
        ),
        Some(end) => {
            let head = String::from_utf8_lossy(&buf[..end]);
            let mut first = head.lines().next().unwrap_or("").split_whitespace();
            match (first.next(), first.next()) {
                (Some(m @ ("GET" | "HEAD")), Some(target)) => {
                    head_only = m == "HEAD";
                    route(site, target.split('?').next().unwrap_or(""))
                }
                (Some(_), Some(_)) => (
                    "405 Method Not Allowed",
                    "text/plain",
                    "only GET and HEAD\n".into(),
                ),
                _ => ("400 Bad Request", "text/plain", "bad request line\n".into()),
            }
        }
    };
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if status.starts_with("405") {
        head.push_str("Allow: GET, HEAD\r\n");
    }
    if ctype.starts_with("text/html") {
        // The page is self-contained: it may run its own inline script and style and fetch
        // from this listener, nothing else.
        head.push_str(
            "Content-Security-Policy: default-src 'none'; script-src 'unsafe-inline'; \
             style-src 'unsafe-inline'; connect-src 'self'; img-src data:\r\n\
             X-Content-Type-Options: nosniff\r\nCache-Control: no-store\r\n",
        );
    } else if ctype.starts_with("application/json") {
        head.push_str("X-Content-Type-Options: nosniff\r\nCache-Control: no-store\r\n");
    }
    head.push_str("\r\n");
    let body = if head_only { "" } else { body.as_str() };
    let write_by = Instant::now() + IO_DEADLINE;
    for mut part in [head.as_bytes(), body.as_bytes()] {
        while !part.is_empty() {
            stream.set_write_timeout(Some(left(write_by)?))?;
            let n = stream.write(part)?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            part = &part[n..];
        }
    }
    Ok(())
}

/// The answer to a GET (or HEAD) of `path`.
fn route(site: &Site, path: &str) -> Reply {
    match (path, &site.page) {
        ("/metrics", _) => (
            "200 OK",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            render(&site.registry),
        ),
        ("/", Some(page)) => ("200 OK", "text/html; charset=utf-8", page.html()),
        ("/status.json", Some(page)) => match status_json(&site.registry, page, site.started) {
            Ok(j) => ("200 OK", "application/json", j),
            Err(e) => ("503 Service Unavailable", "text/plain", e + "\n"),
        },
        (_, Some(_)) => (
            "404 Not Found",
            "text/plain",
            "try / (status page), /status.json or /metrics\n".into(),
        ),
        (_, None) => ("404 Not Found", "text/plain", "try /metrics\n".into()),
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;

    fn get(addr: SocketAddr, req: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(req.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn serves_registered_counters_and_refuses_other_paths() {
        let mut reg = Registry::default();
        let c: Counter = Counter::default();
        reg.register("demo_requests", "Requests seen", c.clone());
        let shared: Shared = Arc::new(Mutex::new(reg));
        let srv = serve("127.0.0.1:0".parse().unwrap(), shared).unwrap();
        c.inc_by(7);
        let text = get(srv.addr(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        assert!(text.contains("demo_requests_total 7"), "{text}");
        let text = get(srv.addr(), "GET /other HTTP/1.1\r\n\r\n");
        assert!(text.starts_with("HTTP/1.1 404"), "{text}");
        let text = get(srv.addr(), "POST /metrics HTTP/1.1\r\n\r\n");
        assert!(text.starts_with("HTTP/1.1 405"), "{text}");
        let long = format!(
            "GET /metrics HTTP/1.1\r\nX: {}\r\n",
            "a".repeat(MAX_REQUEST_BYTES)
        );
        let mut s = TcpStream::connect(srv.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = s.write_all(long.as_bytes());
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        assert!(out.starts_with("HTTP/1.1 400"), "{out}");
    }

    #[test]
    fn the_status_page_and_its_json_are_served_beside_metrics_head_included() {
        let mut reg = Registry::default();
        let c: Counter = Counter::default();
        reg.register("demo_requests", "Requests seen", c.clone());
        c.inc_by(5);
        let page = Page {
            prefix: "demo_",
            layout: r#"{"title":"demo"}"#,
        };
        let srv = serve_with_page(
            "127.0.0.1:0".parse().unwrap(),
            Arc::new(Mutex::new(reg)),
            Some(page),
        )
        .unwrap();
        let html = get(srv.addr(), "GET / HTTP/1.1\r\n\r\n");
        assert!(html.starts_with("HTTP/1.1 200"), "{html}");
        assert!(html.contains("Content-Type: text/html"), "{html}");
        assert!(html.contains("Content-Security-Policy: default-src 'none'"));
        assert!(html.contains(r#"const LAYOUT = {"title":"demo"};"#));
        let json = get(srv.addr(), "GET /status.json?x=1 HTTP/1.1\r\n\r\n");
        assert!(json.starts_with("HTTP/1.1 200"), "{json}");
        assert!(json.contains(r#"["demo_requests_total",{},5]"#), "{json}");
        // HEAD: the same head (length included), no body.
        let head = get(srv.addr(), "HEAD / HTTP/1.1\r\n\r\n");
        let (h, body) = head.split_once("\r\n\r\n").unwrap();
        let full = html.split_once("\r\n\r\n").unwrap().1.len();
        assert!(h.contains(&format!("Content-Length: {full}")), "{h}");
        assert!(body.is_empty(), "{body}");
        let other = get(srv.addr(), "GET /stats HTTP/1.1\r\n\r\n");
        assert!(other.starts_with("HTTP/1.1 404"), "{other}");
        let post = get(srv.addr(), "POST / HTTP/1.1\r\n\r\n");
        assert!(post.starts_with("HTTP/1.1 405"), "{post}");
        assert!(post.contains("Allow: GET, HEAD"), "{post}");
        // Without a page, `/` stays unknown.
        let bare = serve("127.0.0.1:0".parse().unwrap(), Arc::default()).unwrap();
        let root = get(bare.addr(), "GET / HTTP/1.1\r\n\r\n");
        assert!(root.starts_with("HTTP/1.1 404"), "{root}");
        let json = get(bare.addr(), "GET /status.json HTTP/1.1\r\n\r\n");
        assert!(json.starts_with("HTTP/1.1 404"), "{json}");
    }

    #[test]
    fn half_open_clients_get_no_more_than_their_slots_and_then_time_out() {
        let shared: Shared = Arc::new(Mutex::new(Registry::default()));
        let srv = serve("127.0.0.1:0".parse().unwrap(), shared).unwrap();
        // MAX_CONNECTIONS clients that send half a request and wait.
        let stuck: Vec<TcpStream> = (0..MAX_CONNECTIONS)
            .map(|_| {
                let mut s = TcpStream::connect(srv.addr()).unwrap();
                s.write_all(b"GET /metr").unwrap();
                s
            })
            .collect();
        // Let the accept loop take them all (it is a separate thread).
        // What a refused client reads: the 503, or a reset before it (nothing).
        let try_get = |req: &str| {
            let mut s = TcpStream::connect(srv.addr()).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let _ = s.write_all(req.as_bytes());
            let mut out = Vec::new();
            let _ = s.read_to_end(&mut out);
            String::from_utf8_lossy(&out).into_owned()
        };
        let t0 = Instant::now();
        loop {
            let text = try_get("GET /metrics HTTP/1.1\r\n\r\n");
            if text.starts_with("HTTP/1.1 503") || text.is_empty() {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "never refused: {text}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // The stuck ones are closed after the read deadline; then scrapes are served again.
        for mut s in stuck {
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let mut out = Vec::new();
            let _ = s.read_to_end(&mut out);
        }
        let t0 = Instant::now();
        loop {
            let text = try_get("GET /metrics HTTP/1.1\r\n\r\n");
            if text.starts_with("HTTP/1.1 200") {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "not served again: {text}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

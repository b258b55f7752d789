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
//! Bounds (`listener.rs` has the why and the cost): one reader thread reads the request heads
//! of at most [`MAX_PENDING`] connections at once with `poll(2)`, at most [`MAX_PER_ADDRESS`]
//! of them from one client address (its oldest is dropped for its newest; when all places are
//! taken, the oldest of the address holding the most is dropped), each head complete within
//! [`HEAD_DEADLINE`] of the accept and at most [`MAX_REQUEST_BYTES`] long (CRLF or bare LF
//! line ends); [`WORKERS`] threads answer complete requests from a queue of at most
//! [`MAX_QUEUED`], each answer written within [`IO_DEADLINE`]; a status JSON of at most
//! [`MAX_STATUS_BYTES`]. A head too long gets 431, a bad request line 400, a full queue 503
//! (the only case of 503: half-open or silent clients never cause it), an unknown path 404,
//! another method 405 (with `Allow: GET, HEAD`); the connection is then closed, lingering
//! so the client reads the status rather than a reset. [`MetricsServer::stats`] counts what
//! was dropped. Encoding takes the registry lock briefly; metric updates themselves are
//! atomics and never wait for the scraper.
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
mod listener;
mod port_families;
mod process;
mod read_counter;
mod reloads;
mod snapshot;
mod status;

pub use client::{
    hammer, parse_exposition, scrape, scrape_samples, HammerOutcome, Sample, MAX_SCRAPE_BYTES,
};
pub use listener::{
    ListenerStats, HEAD_DEADLINE, LINGER, LINGER_BYTES, MAX_PENDING, MAX_PER_ADDRESS, MAX_QUEUED,
    WORKERS,
};
pub use port_families::PortCounters;
pub use process::{register_daemon, MAX_FDS_COUNTED};
/// The crate the registries and families come from, for daemons that only need its types.
pub use prometheus_client;
pub use read_counter::{register_control_audit, register_log_drops, register_read_counter};
pub use reloads::Reloads;
pub use snapshot::{parse_addr, register_snapshot, AddrError, Latest, Writer};
pub use status::{status_json, Page, MAX_STATUS_BYTES};

use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest request head read; a longer one is answered 431.
pub const MAX_REQUEST_BYTES: usize = 8 * 1024;
/// Deadline for writing one answer (in total, not per system call).
pub const IO_DEADLINE: Duration = Duration::from_secs(2);
/// The default admin address: loopback only.
pub const DEFAULT_ADDR: &str = "127.0.0.1:9100";

/// A registry shared between the daemon (which registers families) and the listener.
pub type Shared = Arc<Mutex<Registry>>;

/// A running `/metrics` listener. Dropping it stops the thread.
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    stats: Arc<ListenerStats>,
    threads: Vec<JoinHandle<()>>,
}

impl MetricsServer {
    /// The bound address (useful with port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What the listener served, dropped and refused since it started.
    pub fn stats(&self) -> &ListenerStats {
        &self.stats
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        // The reader looks at the flag at least every 100 ms; the workers end when its queue
        // goes with it, each within its answer's deadline.
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
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
    let stats = Arc::new(ListenerStats::default());
    registry
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .register_collector(Box::new(listener::StatsCollector(stats.clone())));
    let site = Arc::new(Site {
        registry,
        page,
        started: Instant::now(),
    });
    let spawn_err = |source| MetricsError::Bind { addr, source };
    let (jobs, mut threads) = listener::start_workers(&site).map_err(spawn_err)?;
    let (stop2, stats2) = (Arc::clone(&stop), Arc::clone(&stats));
    let reader = std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || listener::read_loop(listener, jobs, &stop2, &stats2))
        .map_err(spawn_err)?;
    threads.insert(0, reader);
    Ok(MetricsServer {
        addr: bound,
        stop,
        stats,
        threads,
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

/// What one listener serves: the registry, and the status page when the daemon has one.
pub(crate) struct Site {
    registry: Shared,
    page: Option<Page>,
    started: Instant,
}

/// An answer: status line, content type, body.
type Reply = (&'static str, &'static str, String);

/// Answer one complete request (on a worker thread) and close.
fn answer(mut job: listener::Job, site: &Site) -> std::io::Result<()> {
    let (status, ctype, body) = if job.other_method {
        (
            "405 Method Not Allowed",
            "text/plain",
            "only GET and HEAD\n".to_string(),
        )
    } else {
        route(site, &job.path)
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
    let body = if job.head_only { "" } else { body.as_str() };
    listener::write_all_by(&mut job.stream, [head.as_bytes(), body.as_bytes()])
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

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use std::io::{Read, Write};
    use std::net::TcpStream;

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
        assert!(out.starts_with("HTTP/1.1 431"), "{out}");
        let text = get(srv.addr(), "garbage\r\n\r\n");
        assert!(text.starts_with("HTTP/1.1 400"), "{text}");
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
    fn half_open_clients_are_closed_at_the_head_deadline_and_counted() {
        let shared: Shared = Arc::new(Mutex::new(Registry::default()));
        let srv = serve("127.0.0.1:0".parse().unwrap(), shared).unwrap();
        let t0 = Instant::now();
        let stuck: Vec<TcpStream> = (0..8)
            .map(|_| {
                let mut s = TcpStream::connect(srv.addr()).unwrap();
                s.write_all(b"GET /metr").unwrap();
                s
            })
            .collect();
        for mut s in stuck {
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let mut out = Vec::new();
            let _ = s.read_to_end(&mut out);
            assert!(out.is_empty(), "{out:?}");
        }
        // Closed no sooner than the deadline, and well within it plus a loaded machine's slack.
        let took = t0.elapsed();
        assert!(took >= HEAD_DEADLINE, "{took:?}");
        assert!(took < HEAD_DEADLINE + Duration::from_secs(8), "{took:?}");
        assert_eq!(srv.stats().head_timeouts.load(Ordering::Relaxed), 8);
    }
}

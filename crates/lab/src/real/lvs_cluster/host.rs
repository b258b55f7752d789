//! One emulated P4 host: a small HTTP/1.x server inside a backend namespace that has the
//! capacity of ONE of the paper's machines, not of this one.
//!
//! P4's hosts were separate PCs (Squid + JPEG distiller, P4 Table 1); this machine has 2 cores
//! shared by everything. So a host does not burn CPU per request: it keeps a virtual
//! single-server FIFO queue. A request arriving at `now` completes at
//! `done = max(now, busy_until) + service`, `busy_until = done`, and the answer is written when
//! the wall clock reaches `done`. The host is therefore busy exactly `Σ service` seconds and
//! serves at most `1 / mean service` requests/s however late the kernel wakes our thread (a
//! late wake delays one answer, it does not add capacity or lose it). Service times follow the
//! simulated model: `mean × (1 − cv + cv × Exp(1))`, the mean calibrated from P4 Table 3's
//! one-host column (scenario `service.rate_1host`).
//!
//! A new cell ([`Host::configure`]) starts with an empty queue *and* free workers: a worker still
//! waiting for the completion time of a request of the previous cell (its client was cut when
//! that cell ended) abandons it and closes the connection. Without that, 30 requests of 100 KB
//! objects (435 ms each) cut at the end of a one-host cell kept 30 of the host's workers asleep
//! for up to 13 s into the next cell, its health checks found no free worker, the balancer
//! marked the only host down, and the next cells answered 503s (the first full grid through
//! `netsched balance`, docs/lvs-real.md).
//!
//! Bounds: `workers` threads (each one connection at a time; more connections wait in the
//! listen backlog), request head ≤ [`MAX_HEAD`] bytes, idle keep-alive ≤ [`IDLE`], body ≤
//! [`MAX_BODY`] bytes (one shared buffer).

use anyhow::{bail, Context, Result};
use netsched_core::rng::SplitMix64;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest request head a host reads (request line + headers).
pub const MAX_HEAD: usize = 8 * 1024;
/// Largest object a host serves.
pub const MAX_BODY: usize = 1 << 20;
/// A keep-alive connection idle this long is closed.
pub const IDLE: Duration = Duration::from_secs(2);
/// Worker threads of one host, at most.
pub const MAX_WORKERS: usize = 256;

/// What a host serves in one cell: mean service time and body size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Service {
    pub mean_s: f64,
    pub jitter_cv: f64,
    pub body_bytes: usize,
}

/// Counters of one host (since the last [`Host::reset`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct HostStats {
    /// Object requests (`GET /o/…`) whose head was read (each then gets its emulated service).
    pub received: u64,
    /// Health checks (any other path), answered at once and not counted in `received`.
    pub health_checks: u64,
    pub served: u64,
    /// Seconds of emulated service (the host's busy time).
    pub busy_s: f64,
    /// Requests whose head was malformed or too long (answered 400).
    pub bad_requests: u64,
    /// Answers that could not be written (peer gone).
    pub write_errors: u64,
}

impl HostStats {
    /// Requests received and not yet answered (since the last reset).
    pub fn in_flight(&self) -> u64 {
        self.received
            .saturating_sub(self.served + self.write_errors)
    }
}

struct Queue {
    busy_until: Instant,
    /// Bumped by [`Host::configure`]: requests of an older cell are abandoned.
    generation: u64,
    rng: SplitMix64,
    service: Service,
    stats: HostStats,
}

/// A running host; [`Host::stop`] (or drop) ends its threads.
pub struct Host {
    queue: Arc<Mutex<Queue>>,
    /// Paired with `queue`: wakes the workers waiting for a completion time when a new cell
    /// starts.
    wake: Arc<Condvar>,
    body: Arc<Mutex<Arc<Vec<u8>>>>,
    stop: Arc<AtomicBool>,
    addr: SocketAddr,
    ns: String,
    workers: Vec<JoinHandle<()>>,
    /// Kernel thread ids of the workers (for CPU accounting).
    tids: Arc<Mutex<Vec<u32>>>,
    wakeups: Arc<AtomicU64>,
    /// The connection each worker serves now (a clone), so [`Host::kill`] can cut it.
    serving: Arc<Mutex<Vec<Option<TcpStream>>>>,
}

impl Host {
    /// Start a host listening on `addr` inside namespace `ns`, with `workers` threads.
    pub fn start(ns: &str, addr: SocketAddr, workers: usize, seed: u64) -> Result<Host> {
        if workers == 0 || workers > MAX_WORKERS {
            bail!("host workers = {workers} is outside 1..={MAX_WORKERS}");
        }
        let ns_owned = ns.to_string();
        // Bind inside the namespace from a short-lived thread, then share the listener.
        let listener = std::thread::spawn(move || -> Result<TcpListener> {
            netsched_testbed::enter_netns(&ns_owned)?;
            TcpListener::bind(addr).with_context(|| format!("host {addr} in {ns_owned}: bind"))
        })
        .join()
        .map_err(|_| anyhow::anyhow!("host bind thread panicked"))??;
        let queue = Arc::new(Mutex::new(Queue {
            busy_until: Instant::now(),
            generation: 0,
            rng: SplitMix64::new(seed),
            service: Service {
                mean_s: 0.001,
                jitter_cv: 0.0,
                body_bytes: 0,
            },
            stats: HostStats::default(),
        }));
        let mut h = Host {
            queue,
            wake: Arc::new(Condvar::new()),
            body: Arc::new(Mutex::new(Arc::new(Vec::new()))),
            stop: Arc::new(AtomicBool::new(false)),
            addr,
            ns: ns.to_string(),
            workers: Vec::new(),
            tids: Arc::new(Mutex::new(Vec::new())),
            wakeups: Arc::new(AtomicU64::new(0)),
            serving: Arc::new(Mutex::new((0..workers).map(|_| None).collect())),
        };
        for i in 0..workers {
            let l = listener.try_clone().context("host listener clone")?;
            let (q, c, b, s, t) = (
                h.queue.clone(),
                h.wake.clone(),
                h.body.clone(),
                h.stop.clone(),
                h.tids.clone(),
            );
            let w = h.wakeups.clone();
            let serving = h.serving.clone();
            let handle = std::thread::Builder::new()
                .name(format!("host-{}-{i}", addr.ip()))
                .spawn(move || {
                    if let Some(tid) = super::cpu::thread_id() {
                        t.lock().unwrap().push(tid);
                    }
                    worker(i, l, (q, c), b, s, w, serving)
                })
                .context("spawning a host worker")?;
            h.workers.push(handle);
        }
        // Wait until every worker runs (named, its id known for CPU accounting), bounded.
        let until = Instant::now() + Duration::from_secs(5);
        while h.tids.lock().unwrap().len() < workers && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(h)
    }

    /// Serve `service` from now on, with an empty queue and every worker free (requests of the
    /// previous cell still waiting are abandoned), and zero the counters.
    pub fn configure(&self, service: Service) -> Result<()> {
        if !(service.mean_s > 0.0 && service.mean_s <= 60.0) {
            bail!("host service time {} s is outside (0, 60]", service.mean_s);
        }
        if service.body_bytes > MAX_BODY {
            bail!(
                "host body {} bytes is above the bound {MAX_BODY}",
                service.body_bytes
            );
        }
        *self.body.lock().unwrap() = Arc::new(vec![b'x'; service.body_bytes]);
        let mut q = self.queue.lock().unwrap();
        q.service = service;
        q.stats = HostStats::default();
        q.busy_until = Instant::now();
        q.generation += 1;
        drop(q);
        self.wake.notify_all();
        Ok(())
    }

    /// Zero the counters (start of a measurement window).
    pub fn reset(&self) {
        self.queue.lock().unwrap().stats = HostStats::default();
    }

    pub fn stats(&self) -> HostStats {
        self.queue.lock().unwrap().stats
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// CPU time of the worker threads so far, ns.
    pub fn cpu_ns(&self) -> u64 {
        self.tids
            .lock()
            .unwrap()
            .iter()
            .map(|t| super::cpu::thread_cpu_ns(*t))
            .sum()
    }

    /// A host that dies: every open connection is shut down at once (requests in flight
    /// fail), then the workers stop and the listener closes (new connections are refused).
    pub fn kill(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for c in self.serving.lock().unwrap().iter().flatten() {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
        self.stop();
    }

    /// Stop the workers (each finishes the request it serves) and wait for them.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Each worker blocks in accept(): one connection per worker wakes it. The connect
        // itself must come from inside the namespace, so it runs on a thread that enters it.
        let n = self.workers.len();
        let addr = self.addr;
        let ns = self.ns.clone();
        let _ = std::thread::spawn(move || {
            if netsched_testbed::enter_netns(&ns).is_ok() {
                for _ in 0..n {
                    let _ = TcpStream::connect_timeout(&addr, Duration::from_millis(200));
                }
            }
        })
        .join();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if !self.workers.is_empty() {
            self.stop();
        }
    }
}

fn worker(
    index: usize,
    listener: TcpListener,
    (queue, wake): (Arc<Mutex<Queue>>, Arc<Condvar>),
    body: Arc<Mutex<Arc<Vec<u8>>>>,
    stop: Arc<AtomicBool>,
    wakeups: Arc<AtomicU64>,
    serving: Arc<Mutex<Vec<Option<TcpStream>>>>,
) {
    while !stop.load(Ordering::SeqCst) {
        let Ok((conn, _)) = listener.accept() else {
            // EMFILE and the like: back off instead of spinning.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        if stop.load(Ordering::SeqCst) {
            wakeups.fetch_add(1, Ordering::Relaxed);
            break;
        }
        serving.lock().unwrap()[index] = conn.try_clone().ok();
        // A kill between accept and the line above: cut this connection too.
        if stop.load(Ordering::SeqCst) {
            let _ = conn.shutdown(std::net::Shutdown::Both);
        }
        serve(conn, (&queue, &wake), &body, &stop);
        serving.lock().unwrap()[index] = None;
    }
}

/// Serve requests on one connection until the peer closes, asks to close, idles or errs.
fn serve(
    mut conn: TcpStream,
    (queue, wake): (&Mutex<Queue>, &Condvar),
    body: &Mutex<Arc<Vec<u8>>>,
    stop: &AtomicBool,
) {
    let _ = conn.set_read_timeout(Some(IDLE));
    let _ = conn.set_write_timeout(Some(Duration::from_secs(10)));
    let _ = conn.set_nodelay(true);
    let mut buf = vec![0u8; MAX_HEAD];
    let mut have = 0usize;
    while !stop.load(Ordering::Relaxed) {
        // Read one head (requests carry no body: GET only).
        let end = loop {
            if let Some(i) = find_head_end(&buf[..have]) {
                break Some(i);
            }
            if have == buf.len() {
                break None;
            }
            match conn.read(&mut buf[have..]) {
                Ok(0) | Err(_) => return,
                Ok(n) => have += n,
            }
        };
        let Some(end) = end else {
            queue.lock().unwrap().stats.bad_requests += 1;
            let _ = conn.write_all(
                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
            return;
        };
        let head = std::str::from_utf8(&buf[..end]).unwrap_or("");
        let Some(keep_alive) = parse_head(head) else {
            queue.lock().unwrap().stats.bad_requests += 1;
            let _ = conn.write_all(
                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
            return;
        };
        let object = head.split(' ').nth(1).is_some_and(|p| p.starts_with("/o/"));
        buf.copy_within(end..have, 0);
        have -= end;
        if !object {
            // A health check (`GET /`): answered at once, outside the emulated queue. P4's
            // capacity is the cost of distilling an object; a check that waited behind 13 s
            // of queued 100 KB objects would time out and take a busy host out of rotation.
            queue.lock().unwrap().stats.health_checks += 1;
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: {}\r\n\r\n",
                if keep_alive { "keep-alive" } else { "close" }
            );
            if conn.write_all(head.as_bytes()).is_err() || !keep_alive {
                return;
            }
            continue;
        }
        // The emulated host's FIFO queue: reserve this request's completion time, then wait
        // for it, unless a new cell starts first (then the request is abandoned).
        let current = {
            let mut q = queue.lock().unwrap();
            q.stats.received += 1;
            let now = Instant::now();
            let s = q.service;
            let service = s.mean_s * (1.0 - s.jitter_cv + s.jitter_cv * q.rng.exp(1.0));
            let start = q.busy_until.max(now);
            let done = start + Duration::from_secs_f64(service);
            q.busy_until = done;
            q.stats.busy_s += service;
            let generation = q.generation;
            loop {
                if q.generation != generation {
                    break false;
                }
                let now = Instant::now();
                if now >= done {
                    break true;
                }
                q = wake.wait_timeout(q, done - now).unwrap().0;
            }
        };
        if !current {
            return;
        }
        let body = body.lock().unwrap().clone();
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: {}\r\n\r\n",
            body.len(),
            if keep_alive { "keep-alive" } else { "close" }
        );
        let ok = conn.write_all(head.as_bytes()).is_ok() && conn.write_all(&body).is_ok();
        {
            let mut q = queue.lock().unwrap();
            if ok {
                q.stats.served += 1;
            } else {
                q.stats.write_errors += 1;
            }
        }
        if !ok || !keep_alive {
            return;
        }
    }
}

/// Index just past `\r\n\r\n`, if present.
pub fn find_head_end(b: &[u8]) -> Option<usize> {
    b.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// `Some(keep_alive)` for a well-formed `GET <path> HTTP/1.x` head, `None` otherwise.
pub fn parse_head(head: &str) -> Option<bool> {
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, path, version) = (first.next()?, first.next()?, first.next()?);
    if first.next().is_some() || !path.starts_with('/') {
        return None;
    }
    if !matches!(method, "GET" | "HEAD") {
        return None;
    }
    let mut keep_alive = match version {
        "HTTP/1.1" => true,
        "HTTP/1.0" => false,
        _ => return None,
    };
    for l in lines.filter(|l| !l.is_empty()) {
        let (k, v) = l.split_once(':')?;
        if k.trim().eq_ignore_ascii_case("connection") {
            let v = v.trim().to_ascii_lowercase();
            if v.contains("close") {
                keep_alive = false;
            } else if v.contains("keep-alive") {
                keep_alive = true;
            }
        }
    }
    Some(keep_alive)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_parse_and_bad_ones_are_refused() {
        assert_eq!(parse_head("GET / HTTP/1.1\r\nHost: a"), Some(true));
        assert_eq!(parse_head("GET /o/3 HTTP/1.0\r\nHost: a"), Some(false));
        assert_eq!(
            parse_head("GET / HTTP/1.1\r\nConnection: close\r\n"),
            Some(false)
        );
        assert_eq!(parse_head("POST / HTTP/1.1"), None);
        assert_eq!(parse_head("GET nopath HTTP/1.1"), None);
        assert_eq!(parse_head("GET / HTTP/2"), None);
        assert_eq!(parse_head("GET / HTTP/1.1\r\nbroken header"), None);
        assert_eq!(find_head_end(b"GET / HTTP/1.1\r\n\r\nrest"), Some(18));
    }
}

//! The listener's two halves: one **reader** thread that accepts connections and reads their
//! request heads, all at once, with `poll(2)` on non-blocking sockets (the way nginx and
//! HAProxy read headers), and a fixed pool of [`WORKERS`] threads that answer complete
//! requests taken from a bounded queue.
//!
//! Why: a connection that sends half a head (or nothing) costs the reader one pollfd and a
//! buffer, never a thread, so a few clients holding connections open cannot stop the others'
//! scrapes. What one client can hold is bounded three ways: every head must be complete within
//! [`HEAD_DEADLINE`] of the accept; one client address holds at most [`MAX_PER_ADDRESS`] of the
//! [`MAX_PENDING`] places (its oldest connection is dropped for its newest); and when all
//! places are taken, the oldest connection of the address holding the most is dropped, so a
//! newcomer is always read. 503 is answered only when [`MAX_QUEUED`] complete requests are
//! already waiting for a worker: the listener is overloaded, not merely held.
//!
//! Errors found while reading (a head over [`crate::MAX_REQUEST_BYTES`]: 431; a request line
//! that does not parse: 400; the queue full: 503) are answered by the reader itself without
//! waiting (a fresh socket's send buffer takes the few bytes), then the connection is closed
//! *lingering*: the write side is shut and what the client still sends is read and dropped
//! (at most [`LINGER_BYTES`], for at most [`LINGER`]), so the client reads the status instead
//! of a reset. A head may end its lines with CRLF or a bare LF (RFC 9112 §2.2).
//!
//! Cost: per pending connection one pollfd and a head buffer of at most
//! `MAX_REQUEST_BYTES + 4 KiB`; a poll and a scan of the pending set (at most [`MAX_PENDING`])
//! per wake-up; memory at most `MAX_PENDING × 12 KiB` (3 MiB). Every connection dropped is
//! counted in [`ListenerStats`].

use crate::{Site, IO_DEADLINE, MAX_REQUEST_BYTES};
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Connections whose request head is being read (or that linger after an error answer).
pub const MAX_PENDING: usize = 256;
/// Of those, at most this many from one client address.
pub const MAX_PER_ADDRESS: usize = 64;
/// A request head must be complete this long after the accept, or the connection is closed.
pub const HEAD_DEADLINE: Duration = Duration::from_secs(1);
/// Threads answering complete requests.
pub const WORKERS: usize = 4;
/// Complete requests waiting for a worker; one more is answered 503.
pub const MAX_QUEUED: usize = 64;
/// How long a connection answered with an error is read (and dropped) before it is closed.
pub const LINGER: Duration = Duration::from_secs(1);
/// How much a lingering connection may still send before it is closed.
pub const LINGER_BYTES: usize = 2 << 20;
/// Connections accepted per wake-up, so reading the pending ones is never starved.
const ACCEPT_BATCH: usize = 32;
/// Longest sleep of the reader (it looks at its stop flag at least this often).
const TICK: Duration = Duration::from_millis(100);

/// What the listener dropped or refused, since it started.
#[derive(Debug, Default)]
pub struct ListenerStats {
    /// Complete requests handed to a worker.
    pub requests: AtomicU64,
    /// Heads not complete within [`HEAD_DEADLINE`].
    pub head_timeouts: AtomicU64,
    /// Connections dropped to make room for a newer one ([`MAX_PER_ADDRESS`], [`MAX_PENDING`]).
    pub evicted: AtomicU64,
    /// Answered 503: [`MAX_QUEUED`] requests were already waiting.
    pub overloaded: AtomicU64,
    /// Answered 431 or 400 by the reader.
    pub bad_heads: AtomicU64,
    /// Accepts that failed (out of descriptors or memory).
    pub accept_errors: AtomicU64,
}

/// [`ListenerStats`] in the registry the listener serves, read at each scrape:
/// `netsched_metrics_listener_requests_total` and
/// `netsched_metrics_listener_refused_total{reason}` (`head_timeout`, `evicted`,
/// `overloaded`, `bad_head`, `accept_error`).
#[derive(Debug)]
pub(crate) struct StatsCollector(pub Arc<ListenerStats>);

impl prometheus_client::collector::Collector for StatsCollector {
    fn encode(&self, mut enc: prometheus_client::encoding::DescriptorEncoder) -> std::fmt::Result {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::{counter::ConstCounter, MetricType};
        let s = &self.0;
        let read = |c: &AtomicU64| ConstCounter::new(c.load(Ordering::Relaxed));
        let m = enc.encode_descriptor(
            "netsched_metrics_listener_requests",
            "Complete requests the metrics listener handed to a worker",
            None,
            MetricType::Counter,
        )?;
        read(&s.requests).encode(m)?;
        let mut family = enc.encode_descriptor(
            "netsched_metrics_listener_refused",
            "Connections the metrics listener closed or answered with an error, by reason",
            None,
            MetricType::Counter,
        )?;
        for (reason, c) in [
            ("head_timeout", &s.head_timeouts),
            ("evicted", &s.evicted),
            ("overloaded", &s.overloaded),
            ("bad_head", &s.bad_heads),
            ("accept_error", &s.accept_errors),
        ] {
            let labels = [("reason", reason)];
            read(c).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

/// A request the reader read whole: what a worker answers.
pub(crate) struct Job {
    pub stream: TcpStream,
    /// `HEAD` (the answer has no body).
    pub head_only: bool,
    /// Method token, when it is neither GET nor HEAD (answered 405).
    pub other_method: bool,
    /// The path, query removed.
    pub path: String,
}

enum State {
    Reading(Vec<u8>),
    Lingering { until: Instant, dropped: usize },
}

struct Pending {
    stream: TcpStream,
    peer: IpAddr,
    accepted: Instant,
    state: State,
}

/// Start the workers; the returned sender is the reader's end of their queue.
pub(crate) fn start_workers(
    site: &Arc<Site>,
) -> std::io::Result<(SyncSender<Job>, Vec<std::thread::JoinHandle<()>>)> {
    let (tx, rx) = sync_channel::<Job>(MAX_QUEUED);
    let rx = Arc::new(Mutex::new(rx));
    let mut threads = Vec::with_capacity(WORKERS);
    for _ in 0..WORKERS {
        let (rx, site) = (Arc::clone(&rx), Arc::clone(site));
        threads.push(
            std::thread::Builder::new()
                .name("metrics-worker".into())
                .spawn(move || work(&rx, &site))?,
        );
    }
    Ok((tx, threads))
}

fn work(rx: &Mutex<Receiver<Job>>, site: &Site) {
    loop {
        let job = match rx.lock().unwrap_or_else(|p| p.into_inner()).recv() {
            Ok(job) => job,
            Err(_) => return,
        };
        let _ = crate::answer(job, site);
    }
}

/// The reader: accept, read heads, hand complete requests to the workers, until `stop`.
pub(crate) fn read_loop(
    listener: TcpListener,
    jobs: SyncSender<Job>,
    stop: &AtomicBool,
    stats: &ListenerStats,
) {
    if listener.set_nonblocking(true).is_err() {
        return;
    }
    let mut pending: Vec<Pending> = Vec::new();
    let mut fds: Vec<libc::pollfd> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        fds.clear();
        for fd in std::iter::once(listener.as_raw_fd()).chain(pending.iter().map(|p| p.fd())) {
            fds.push(libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            });
        }
        let wait = next_deadline(&pending).map_or(TICK, |d| {
            d.saturating_duration_since(Instant::now()).min(TICK)
        });
        if netsched_sys::poll(&mut fds, wait).is_err() {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        // Read before accepting: a newcomer must not push out a head that has arrived.
        let ready: Vec<bool> = fds[1..].iter().map(|f| f.revents != 0).collect();
        let mut keep = Vec::with_capacity(pending.len());
        for (mut p, ready) in pending.drain(..).zip(ready) {
            let alive = !ready || p.advance(&jobs, stats);
            if alive && !p.expired(stats) {
                keep.push(p);
            }
        }
        pending = keep;
        if fds[0].revents != 0 {
            accept_some(&listener, &mut pending, &jobs, stats);
        }
    }
}

/// The earliest instant a pending connection must be looked at again.
fn next_deadline(pending: &[Pending]) -> Option<Instant> {
    pending.iter().map(Pending::deadline).min()
}

fn accept_some(
    listener: &TcpListener,
    pending: &mut Vec<Pending>,
    jobs: &SyncSender<Job>,
    stats: &ListenerStats,
) {
    for _ in 0..ACCEPT_BATCH {
        let (stream, peer) = match listener.accept() {
            Ok(x) => x,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return,
            Err(_) => {
                // Out of descriptors or memory: the backlog stays readable, so pause rather
                // than spin; the pending ones are still read and timed out meanwhile.
                stats.accept_errors.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(10));
                return;
            }
        };
        if stream.set_nonblocking(true).is_err() {
            continue;
        }
        make_room(pending, peer.ip(), stats);
        let mut p = Pending {
            stream,
            peer: peer.ip(),
            accepted: Instant::now(),
            state: State::Reading(Vec::new()),
        };
        // The head often arrives with the connection: read it at once.
        if p.advance(jobs, stats) {
            pending.push(p);
        }
    }
}

/// Drop one pending connection if `peer` holds [`MAX_PER_ADDRESS`] (its oldest) or all
/// [`MAX_PENDING`] places are taken (the oldest of the address holding the most).
fn make_room(pending: &mut Vec<Pending>, peer: IpAddr, stats: &ListenerStats) {
    let held = |ip: IpAddr| pending.iter().filter(|p| p.peer == ip).count();
    let victim = if held(peer) >= MAX_PER_ADDRESS {
        peer
    } else if pending.len() >= MAX_PENDING {
        match pending.iter().map(|p| p.peer).max_by_key(|ip| held(*ip)) {
            Some(ip) => ip,
            None => return,
        }
    } else {
        return;
    };
    // `pending` is in accept order: the first match is the oldest.
    if let Some(i) = pending.iter().position(|p| p.peer == victim) {
        pending.remove(i);
        stats.evicted.fetch_add(1, Ordering::Relaxed);
    }
}

impl Pending {
    fn fd(&self) -> i32 {
        self.stream.as_raw_fd()
    }

    fn deadline(&self) -> Instant {
        match self.state {
            State::Reading(_) => self.accepted + HEAD_DEADLINE,
            State::Lingering { until, .. } => until,
        }
    }

    /// Past its deadline: to be closed (a head timeout is counted).
    fn expired(&self, stats: &ListenerStats) -> bool {
        if Instant::now() < self.deadline() {
            return false;
        }
        if matches!(self.state, State::Reading(_)) {
            stats.head_timeouts.fetch_add(1, Ordering::Relaxed);
        }
        true
    }

    /// Read what has arrived; `false` when the connection is done with (handed to a worker,
    /// closed by the client, or finished lingering).
    fn advance(&mut self, jobs: &SyncSender<Job>, stats: &ListenerStats) -> bool {
        let mut chunk = [0u8; 4096];
        loop {
            let n = match (&self.stream).read(&mut chunk) {
                Ok(0) => return false,
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return e.kind() == ErrorKind::WouldBlock,
            };
            match &mut self.state {
                State::Lingering { dropped, .. } => {
                    *dropped += n;
                    if *dropped > LINGER_BYTES {
                        return false;
                    }
                }
                State::Reading(buf) => {
                    buf.extend_from_slice(&chunk[..n]);
                    let end = head_end(buf);
                    if let Some(end) = end.filter(|&e| e <= MAX_REQUEST_BYTES) {
                        return self.dispatch(end, jobs, stats);
                    }
                    if end.is_some() || buf.len() > MAX_REQUEST_BYTES {
                        stats.bad_heads.fetch_add(1, Ordering::Relaxed);
                        self.refuse(
                            "431 Request Header Fields Too Large",
                            "request head too long\n",
                        );
                    }
                }
            }
        }
    }

    /// The head ends at `end`: a job for the workers, or an error answered here.
    fn dispatch(&mut self, end: usize, jobs: &SyncSender<Job>, stats: &ListenerStats) -> bool {
        let State::Reading(buf) = &self.state else {
            return false;
        };
        let Some(job) = parse_line(&buf[..end], &self.stream) else {
            stats.bad_heads.fetch_add(1, Ordering::Relaxed);
            self.refuse("400 Bad Request", "bad request line\n");
            return true;
        };
        match jobs.try_send(job) {
            Ok(()) => {
                stats.requests.fetch_add(1, Ordering::Relaxed);
                false
            }
            Err(TrySendError::Full(_)) => {
                stats.overloaded.fetch_add(1, Ordering::Relaxed);
                self.refuse("503 Service Unavailable", "overloaded; try again\n");
                true
            }
            Err(TrySendError::Disconnected(_)) => false,
        }
    }

    /// Answer `status` without waiting, shut the write side and linger.
    fn refuse(&mut self, status: &str, body: &str) {
        let text = format!(
            "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = (&self.stream).write_all(text.as_bytes());
        let _ = self.stream.shutdown(Shutdown::Write);
        self.state = State::Lingering {
            until: Instant::now() + LINGER,
            dropped: 0,
        };
    }
}

/// The request line of a complete head; `None` when it is not `METHOD TARGET [VERSION]`.
fn parse_line(head: &[u8], stream: &TcpStream) -> Option<Job> {
    let line = head.split(|&b| b == b'\n').next()?;
    let line = std::str::from_utf8(line.strip_suffix(b"\r").unwrap_or(line)).ok()?;
    let mut words = line.split(' ');
    let (method, target) = (words.next()?, words.next()?);
    if method.is_empty() || !target.starts_with('/') || words.count() > 1 {
        return None;
    }
    Some(Job {
        stream: stream.try_clone().ok()?,
        head_only: method == "HEAD",
        other_method: !matches!(method, "GET" | "HEAD"),
        path: target.split('?').next().unwrap_or("").to_string(),
    })
}

/// Where the head ends (just past its empty line), lines ending in CRLF or a bare LF.
pub(crate) fn head_end(buf: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = buf[from..].iter().position(|&b| b == b'\n') {
        let next = from + i + 1;
        match buf.get(next..) {
            Some([b'\n', ..]) => return Some(next + 1),
            Some([b'\r', b'\n', ..]) => return Some(next + 2),
            _ => from = next,
        }
    }
    None
}

/// Write `parts` to a blocking `stream`, all of it within [`IO_DEADLINE`].
pub(crate) fn write_all_by(stream: &mut TcpStream, parts: [&[u8]; 2]) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    let by = Instant::now() + IO_DEADLINE;
    for mut part in parts {
        while !part.is_empty() {
            let left = by.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ErrorKind::TimedOut.into());
            }
            stream.set_write_timeout(Some(left))?;
            let n = stream.write(part)?;
            if n == 0 {
                return Err(ErrorKind::WriteZero.into());
            }
            part = &part[n..];
        }
    }
    stream.shutdown(Shutdown::Write)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_ends_at_its_empty_line_with_crlf_or_bare_lf() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\n"), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\n"), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.1\nHost: x\r\n\nrest"), Some(25));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: x\r\n"), None);
        assert_eq!(head_end(b""), None);
    }
}

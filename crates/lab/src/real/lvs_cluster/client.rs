//! The client: an ApacheBench-like closed loop (`ab -c C`, no keep-alive: one HTTP/1.0
//! connection per request, as `ab` without `-k`), inside the client namespace.
//!
//! `concurrency` threads each repeat: connect to the virtual IP, `GET /o/<origin>`, read the
//! whole answer, until the cell's time is up or `max_requests` were started. The origin is drawn
//! uniformly from `origins` names (the simulated model's "uniform" client: the URI is the
//! destination dh and lblc hash, P4 Table 2's many image URLs).
//!
//! Every request started is accounted exactly once: answered (2xx with the full body), an
//! error with its reason ([`ErrorReason`]), or cut at the end of the cell (still in flight when
//! the time was up; not a failure, counted apart). `sent == ok + errors + cut` is checked by
//! the report.

use super::host::MAX_BODY;
use anyhow::{anyhow, Result};
use netsched_core::rng::SplitMix64;
use netsched_util::http1::{Event, Framing, ResponseReader};
use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bounds of one client run.
pub const MAX_CONCURRENCY: usize = 1024;
/// Latency samples kept per run (the rest are counted, not stored).
pub const MAX_SAMPLES: usize = 1 << 20;

/// Why a request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ErrorReason {
    ConnectRefused,
    ConnectTimeout,
    Connect,
    Write,
    Reset,
    ClosedEarly,
    BadResponse,
    Status5xx,
    StatusOther,
    Timeout,
}

impl ErrorReason {
    pub fn name(self) -> &'static str {
        match self {
            ErrorReason::ConnectRefused => "connect_refused",
            ErrorReason::ConnectTimeout => "connect_timeout",
            ErrorReason::Connect => "connect_other",
            ErrorReason::Write => "write",
            ErrorReason::Reset => "reset",
            ErrorReason::ClosedEarly => "closed_before_complete",
            ErrorReason::BadResponse => "bad_response",
            ErrorReason::Status5xx => "status_5xx",
            ErrorReason::StatusOther => "status_other",
            ErrorReason::Timeout => "response_timeout",
        }
    }
}

/// One client run.
#[derive(Debug, Clone)]
pub struct ClientSpec {
    pub vip: SocketAddr,
    pub concurrency: usize,
    /// Requests are started until this much time has passed.
    pub duration: Duration,
    /// Completions before this are warm-up (counted, not in the rate).
    pub warmup: Duration,
    pub origins: usize,
    pub max_requests: u64,
    pub response_timeout: Duration,
    pub seed: u64,
}

/// What one client run measured.
#[derive(Debug, Clone, Default)]
pub struct ClientResult {
    pub sent: u64,
    pub ok: u64,
    pub ok_in_window: u64,
    pub window_s: f64,
    pub errors: BTreeMap<&'static str, u64>,
    pub cut_at_end: u64,
    /// Response times (s) of the requests answered inside the window (≤ [`MAX_SAMPLES`]).
    pub latencies_s: Vec<f64>,
    pub cpu_ns: u64,
    /// When the last failed request ended (to bound how long failures last).
    pub last_error: Option<Instant>,
}

impl ClientResult {
    pub fn errors_total(&self) -> u64 {
        self.errors.values().sum()
    }
    pub fn rate(&self) -> f64 {
        if self.window_s > 0.0 {
            self.ok_in_window as f64 / self.window_s
        } else {
            0.0
        }
    }
    /// Requests neither answered, nor counted as an error, nor cut: must be 0.
    pub fn unaccounted(&self) -> i64 {
        self.sent as i64 - (self.ok + self.errors_total() + self.cut_at_end) as i64
    }
}

enum Outcome {
    Ok,
    Err(ErrorReason),
    Cut,
}

/// Run the closed loop from inside namespace `ns`.
pub fn run(ns: &str, spec: &ClientSpec) -> Result<ClientResult> {
    if spec.concurrency == 0 || spec.concurrency > MAX_CONCURRENCY {
        return Err(anyhow!(
            "client concurrency {} is outside 1..={MAX_CONCURRENCY}",
            spec.concurrency
        ));
    }
    if spec.warmup >= spec.duration {
        return Err(anyhow!("client warm-up must be shorter than the run"));
    }
    let start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicU64::new(0));
    let mut seeds = SplitMix64::new(spec.seed);
    let mut threads = Vec::new();
    for i in 0..spec.concurrency {
        let (spec, ns) = (spec.clone(), ns.to_string());
        let (stop, started) = (stop.clone(), started.clone());
        let mut rng = SplitMix64::new(seeds.next_u64());
        let h = std::thread::Builder::new()
            .name(format!("client-{i}"))
            .spawn(move || -> Result<ClientResult> {
                netsched_testbed::enter_netns(&ns)?;
                let cpu0 = super::cpu::this_thread_cpu_ns();
                let mut r = ClientResult::default();
                let mut reader = ResponseReader::new(64 * 1024);
                loop {
                    if stop.load(Ordering::Relaxed)
                        || start.elapsed() >= spec.duration
                        || netsched_testbed::interrupted()
                    {
                        break;
                    }
                    if started.fetch_add(1, Ordering::Relaxed) >= spec.max_requests {
                        break;
                    }
                    r.sent += 1;
                    let origin = rng.below(spec.origins.max(1) as u64);
                    let t0 = Instant::now();
                    match one_request(&spec, origin, &mut reader, start) {
                        Outcome::Ok => {
                            r.ok += 1;
                            let t1 = Instant::now();
                            if t1.duration_since(start) >= spec.warmup {
                                r.ok_in_window += 1;
                                if r.latencies_s.len() < MAX_SAMPLES / spec.concurrency {
                                    r.latencies_s.push((t1 - t0).as_secs_f64());
                                }
                            }
                        }
                        Outcome::Err(e) => {
                            *r.errors.entry(e.name()).or_default() += 1;
                            r.last_error = Some(Instant::now());
                        }
                        Outcome::Cut => r.cut_at_end += 1,
                    }
                }
                r.cpu_ns = super::cpu::this_thread_cpu_ns().saturating_sub(cpu0);
                Ok(r)
            })
            .map_err(|e| anyhow!("spawning client thread: {e}"))?;
        threads.push(h);
    }
    let mut total = ClientResult {
        window_s: (spec.duration - spec.warmup).as_secs_f64(),
        ..Default::default()
    };
    let mut first_err = None;
    for h in threads {
        match h.join() {
            Ok(Ok(r)) => {
                total.sent += r.sent;
                total.ok += r.ok;
                total.ok_in_window += r.ok_in_window;
                total.cut_at_end += r.cut_at_end;
                total.cpu_ns += r.cpu_ns;
                for (k, v) in r.errors {
                    *total.errors.entry(k).or_default() += v;
                }
                total.latencies_s.extend(r.latencies_s);
                total.last_error = total.last_error.max(r.last_error);
            }
            Ok(Err(e)) => {
                stop.store(true, Ordering::Relaxed);
                first_err.get_or_insert(e);
            }
            Err(_) => {
                stop.store(true, Ordering::Relaxed);
                first_err.get_or_insert(anyhow!("a client thread panicked"));
            }
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    Ok(total)
}

/// One request on a fresh connection, its answer read by the workspace's HTTP/1 reader
/// (`netsched_util::http1`; HTTP/1.0, so the body is length- or close-delimited). Reads poll
/// every 100 ms so a request still in flight when the cell ends is cut promptly.
fn one_request(
    spec: &ClientSpec,
    origin: u64,
    reader: &mut ResponseReader,
    start: Instant,
) -> Outcome {
    let mut conn = match TcpStream::connect_timeout(&spec.vip, Duration::from_secs(2)) {
        Ok(c) => c,
        Err(e) => {
            return Outcome::Err(match e.kind() {
                ErrorKind::ConnectionRefused => ErrorReason::ConnectRefused,
                ErrorKind::TimedOut | ErrorKind::WouldBlock => ErrorReason::ConnectTimeout,
                _ => ErrorReason::Connect,
            })
        }
    };
    let _ = conn.set_nodelay(true);
    let _ = conn.set_read_timeout(Some(Duration::from_millis(100)));
    let _ = conn.set_write_timeout(Some(Duration::from_secs(2)));
    let req = format!(
        "GET /o/{origin} HTTP/1.0\r\nHost: lvs-cluster\r\nUser-Agent: netsched-lab\r\n\r\n"
    );
    if conn.write_all(req.as_bytes()).is_err() {
        return Outcome::Err(ErrorReason::Write);
    }
    let deadline = Instant::now() + spec.response_timeout;
    reader.reset();
    loop {
        let Ok(room) = reader.space() else {
            return Outcome::Err(ErrorReason::BadResponse);
        };
        match conn.read(room) {
            Ok(0) => {
                // EOF: complete if the body was close-delimited (no Content-Length).
                return match reader.at_eof() {
                    Ok(Some(s)) => status_outcome(s.status),
                    _ => Outcome::Err(ErrorReason::ClosedEarly),
                };
            }
            Ok(n) => {
                reader.filled(n);
                loop {
                    match reader.advance() {
                        Err(_) => return Outcome::Err(ErrorReason::BadResponse),
                        Ok(Event::Head(h)) => {
                            if matches!(h.framing, Framing::Length(l) if l > MAX_BODY as u64) {
                                return Outcome::Err(ErrorReason::BadResponse);
                            }
                        }
                        Ok(Event::Done(h)) => return status_outcome(h.status),
                        Ok(Event::Interim(_)) => {}
                        Ok(Event::NeedMore) => break,
                    }
                }
                if reader.body_bytes() > MAX_BODY as u64 {
                    return Outcome::Err(ErrorReason::BadResponse);
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if start.elapsed() >= spec.duration || netsched_testbed::interrupted() {
                    return Outcome::Cut;
                }
                if Instant::now() >= deadline {
                    return Outcome::Err(ErrorReason::Timeout);
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return Outcome::Err(ErrorReason::Reset),
        }
    }
}

fn status_outcome(status: u16) -> Outcome {
    match status {
        200..=299 => Outcome::Ok,
        500..=599 => Outcome::Err(ErrorReason::Status5xx),
        _ => Outcome::Err(ErrorReason::StatusOther),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Status code and Content-Length of a response head, as the client's reader sees it.
    fn parse_status(head: &[u8]) -> Option<(u16, Option<usize>)> {
        let mut r = ResponseReader::new(0);
        r.push(head).ok()?;
        match r.advance().ok()? {
            Event::Head(h) => Some((
                h.status,
                match h.framing {
                    Framing::Length(n) => Some(n as usize),
                    _ => None,
                },
            )),
            _ => None,
        }
    }

    #[test]
    fn status_lines_parse() {
        assert_eq!(
            parse_status(b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n"),
            Some((200, Some(12)))
        );
        assert_eq!(
            parse_status(b"HTTP/1.0 503 Service Unavailable\r\n\r\n"),
            Some((503, None))
        );
        assert_eq!(parse_status(b"SPDY 200 OK\r\n\r\n"), None);
        assert_eq!(
            parse_status(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n"),
            None
        );
    }

    #[test]
    fn accounting_identity() {
        let mut r = ClientResult {
            sent: 10,
            ok: 7,
            cut_at_end: 1,
            ..Default::default()
        };
        r.errors.insert("reset", 2);
        assert_eq!(r.unaccounted(), 0);
        r.sent = 11;
        assert_eq!(r.unaccounted(), 1);
    }
}

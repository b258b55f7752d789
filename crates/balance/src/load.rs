//! `netsched balance load`: an open-loop HTTP/1.1 load generator that corrects for coordinated
//! omission, for the added-latency benchmark of issue #12 (`scripts/bench-lb-vs-haproxy`).
//!
//! **Why our own.** oha (`-q R --latency-corrected`) keeps every result in one growing vector;
//! each time it doubles (at 2^14, 2^15, 2^16 … results) the generator stalls for milliseconds,
//! and the requests scheduled meanwhile are counted late. At 9.4k req/s those stalls landed at
//! 1.7, 3.5 and 7.0 s of every 10 s run, straight to nginx as through either director, and made
//! up the largest clusters of slow requests — the p99 measured the generator
//! (docs/lvs-real.md, "Session 8: the generator's own stalls").
//!
//! **Principles.**
//! - Open loop: request `k` is due at `t0 + k / rate`, whatever happened before it. Connection
//!   `i` of `C` sends requests `i, i + C, i + 2C, …` in order on one keep-alive connection
//!   (like oha and wrk2, a connection has one request in flight).
//! - Coordinated omission is corrected: a request's latency is measured from when it was
//!   *due*, not from when it was sent, so a stall (of the server, the path or the generator)
//!   counts for every request it delayed.
//! - The generator's own lateness (sent − due) is measured too and printed, so a late
//!   generator is visible rather than blamed on the server.
//! - Nothing is lost silently: every due request is answered (latency recorded), failed
//!   (counted by reason) or, if still unsent when the run's grace period ends, counted
//!   `not_sent`.
//!
//! **Memory.** Fixed: per connection thread one 64 KiB response-head buffer and two
//! log-linear histograms of [`BUCKETS`] counters (< 1 % relative error), merged at the end.
//! Connections are bounded by [`MAX_CONNECTIONS`], the rate by [`MAX_RATE`], the run by
//! [`MAX_DURATION`]; bodies are read and discarded, never stored.
//!
//! The framing handled is what HTTP/1.1 servers send to a GET (RFC 9112 §6.3): a status
//! without a body (1xx, 204, 304), `Content-Length`, `Transfer-Encoding: chunked`
//! (chunk extensions and trailers skipped), and `Connection: close` (the connection is
//! reopened for the next request). A response read to the close is refused (`framing`).

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use netsched_core::units::{format_duration, parse_duration_in};
use netsched_core::Nanos;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Most connections (one thread each).
pub const MAX_CONNECTIONS: usize = 4096;
/// Highest offered rate, requests/s.
pub const MAX_RATE: f64 = 1e6;
/// Longest run.
pub const MAX_DURATION: Nanos = 3600 * netsched_core::SEC;
/// Largest response head.
pub const MAX_HEAD: usize = 64 * 1024;

/// `netsched balance load URL --rate R`: open-loop HTTP/1.1 GETs, latency corrected for
/// coordinated omission.
#[derive(Args, Debug, Clone)]
#[command(
    after_help = "Example:\n  netsched balance load http://10.89.0.1/ --rate 9000 \
    --connections 50 --duration 10s --json\n\nLatency is measured from when each request was \
    due (k / rate after the start), so stalls count for every request they delay. The \
    generator's own lateness (sent - due) is printed beside it."
)]
pub struct LoadArgs {
    /// Target, `http://HOST[:PORT][/PATH]` (plain HTTP/1.1).
    pub url: String,
    /// Offered requests per second, spread evenly over time.
    #[arg(long)]
    pub rate: f64,
    /// Keep-alive connections, one request in flight on each.
    #[arg(long, default_value_t = 50)]
    pub connections: usize,
    /// How long requests are due (units as tc: 10s, 500ms).
    #[arg(long, default_value = "10s")]
    pub duration: String,
    /// Give up on a request (connect, or the whole response) after this long.
    #[arg(long, default_value = "5s")]
    pub timeout: String,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Counters: values below 128 ns exactly, above with 64 sub-buckets per power of two.
pub const BUCKETS: usize = 59 * 64;

/// A log-linear histogram of nanoseconds (relative error < 1/64).
#[derive(Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            counts: vec![0; BUCKETS],
            total: 0,
            max: 0,
        }
    }
}

fn bucket(v: u64) -> usize {
    if v < 128 {
        return v as usize;
    }
    let msb = 63 - v.leading_zeros() as usize; // ≥ 7
    let shift = msb - 6;
    (shift + 1) * 64 + ((v >> shift) as usize - 64)
}

/// The largest value that falls in bucket `i`.
fn bucket_high(i: usize) -> u64 {
    if i < 128 {
        return i as u64;
    }
    let shift = i / 64 - 1;
    ((64 + (i % 64) as u64 + 1) << shift) - 1
}

impl Histogram {
    pub fn record(&mut self, v: u64) {
        self.counts[bucket(v)] += 1;
        self.total += 1;
        self.max = self.max.max(v);
    }
    pub fn merge(&mut self, o: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&o.counts) {
            *a += b;
        }
        self.total += o.total;
        self.max = self.max.max(o.max);
    }
    pub fn count(&self) -> u64 {
        self.total
    }
    /// The value at quantile `q` (0..=1): the top of the bucket holding the
    /// `ceil(q · n)`-th smallest value (never below the true value), at most the maximum.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return bucket_high(i).min(self.max);
            }
        }
        self.max
    }
}

/// Host, port and path of an `http://` URL.
fn parse_url(url: &str) -> Result<(String, SocketAddr, String)> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| anyhow!("{url:?}: only http:// URLs are supported"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() {
        bail!("{url:?}: no host");
    }
    let with_port = if authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    let addr = with_port
        .to_socket_addrs()
        .with_context(|| format!("{url:?}: cannot resolve {with_port}"))?
        .next()
        .ok_or_else(|| anyhow!("{url:?}: {with_port} resolves to nothing"))?;
    if path.bytes().any(|b| b <= b' ' || b == 0x7f) {
        bail!("{url:?}: the path must not contain spaces or control characters");
    }
    Ok((authority.to_string(), addr, path.to_string()))
}

/// Why a request failed.
#[derive(Debug)]
enum Failure {
    Connect,
    Timeout,
    Closed,
    Malformed,
    Framing,
    Status(u16),
}

impl Failure {
    fn reason(&self) -> String {
        match self {
            Failure::Connect => "connect".into(),
            Failure::Timeout => "timeout".into(),
            Failure::Closed => "closed".into(),
            Failure::Malformed => "malformed".into(),
            Failure::Framing => "framing".into(),
            Failure::Status(s) => format!("status_{s}"),
        }
    }
}

fn io_failure(e: std::io::Error) -> Failure {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Failure::Timeout,
        _ => Failure::Closed,
    }
}

/// One keep-alive connection and its read buffer.
struct Conn {
    s: TcpStream,
    buf: Vec<u8>,
    /// Bytes of `buf` not yet consumed.
    start: usize,
    end: usize,
}

impl Conn {
    fn open(addr: SocketAddr, timeout: Duration) -> Result<Conn, Failure> {
        let s = TcpStream::connect_timeout(&addr, timeout).map_err(|_| Failure::Connect)?;
        let _ = s.set_nodelay(true);
        s.set_read_timeout(Some(timeout))
            .map_err(|_| Failure::Connect)?;
        s.set_write_timeout(Some(timeout))
            .map_err(|_| Failure::Connect)?;
        Ok(Conn {
            s,
            buf: vec![0; MAX_HEAD],
            start: 0,
            end: 0,
        })
    }

    /// Read more bytes into the buffer (compacting it first if it is full).
    fn fill(&mut self) -> Result<(), Failure> {
        if self.end == self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if self.end == self.buf.len() {
                return Err(Failure::Malformed); // a head or chunk line larger than the buffer
            }
        }
        match self.s.read(&mut self.buf[self.end..]) {
            Ok(0) => Err(Failure::Closed),
            Ok(n) => {
                self.end += n;
                Ok(())
            }
            Err(e) => Err(io_failure(e)),
        }
    }

    /// Consume `n` body bytes.
    fn skip(&mut self, mut n: u64) -> Result<(), Failure> {
        loop {
            let have = (self.end - self.start) as u64;
            if have >= n {
                self.start += n as usize;
                return Ok(());
            }
            n -= have;
            self.start = 0;
            self.end = 0;
            self.fill()?;
        }
    }

    /// One CRLF-terminated line (without the CRLF).
    fn line(&mut self) -> Result<Vec<u8>, Failure> {
        loop {
            if let Some(i) = self.buf[self.start..self.end]
                .windows(2)
                .position(|w| w == b"\r\n")
            {
                let l = self.buf[self.start..self.start + i].to_vec();
                self.start += i + 2;
                return Ok(l);
            }
            self.fill()?;
        }
    }

    /// Send one GET and read its whole response. Ok(keep the connection open).
    fn exchange(&mut self, request: &[u8]) -> Result<bool, Failure> {
        self.s.write_all(request).map_err(io_failure)?;
        // The head.
        let head_end = loop {
            if let Some(i) = self.buf[self.start..self.end]
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
            {
                break self.start + i + 4;
            }
            self.fill()?;
        };
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut resp = httparse::Response::new(&mut headers);
        match resp.parse(&self.buf[self.start..head_end]) {
            Ok(httparse::Status::Complete(_)) => {}
            _ => return Err(Failure::Malformed),
        }
        let status = resp.code.ok_or(Failure::Malformed)?;
        let mut length = None;
        let mut chunked = false;
        let mut close = resp.version == Some(0);
        for h in resp.headers.iter() {
            if h.name.eq_ignore_ascii_case("content-length") {
                let v = std::str::from_utf8(h.value).map_err(|_| Failure::Malformed)?;
                length = Some(v.trim().parse::<u64>().map_err(|_| Failure::Malformed)?);
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = h.value.eq_ignore_ascii_case(b"chunked");
            } else if h.name.eq_ignore_ascii_case("connection") {
                let v = String::from_utf8_lossy(h.value).to_ascii_lowercase();
                if v.split(',').any(|t| t.trim() == "close") {
                    close = true;
                }
                if v.split(',').any(|t| t.trim() == "keep-alive") {
                    close = false;
                }
            }
        }
        self.start = head_end;
        if (100..200).contains(&status) {
            return Err(Failure::Framing); // interim responses are not expected for a GET
        }
        if status == 204 || status == 304 {
            // No body (RFC 9112 §6.3, rule 1).
        } else if chunked {
            loop {
                let l = self.line()?;
                let size = l.split(|&b| b == b';').next().unwrap_or(&[]);
                let size = std::str::from_utf8(size).map_err(|_| Failure::Malformed)?;
                let size = u64::from_str_radix(size.trim(), 16).map_err(|_| Failure::Malformed)?;
                if size == 0 {
                    // Trailers, up to the empty line.
                    while !self.line()?.is_empty() {}
                    break;
                }
                self.skip(size)?;
                if !self.line()?.is_empty() {
                    return Err(Failure::Malformed);
                }
            }
        } else if let Some(n) = length {
            self.skip(n)?;
        } else {
            return Err(Failure::Framing); // read-to-close bodies are not timed here
        }
        if !(200..400).contains(&status) {
            return Err(Failure::Status(status));
        }
        Ok(!close)
    }
}

/// What one connection thread measured.
#[derive(Default)]
struct Tally {
    latency: Histogram,
    lateness: Histogram,
    errors: BTreeMap<String, u64>,
    not_sent: u64,
}

/// The whole run's result.
pub struct Report {
    pub due: u64,
    pub answered: u64,
    pub errors: BTreeMap<String, u64>,
    pub not_sent: u64,
    pub latency: Histogram,
    pub lateness: Histogram,
    pub elapsed: Duration,
}

/// Run the load (blocking). `t0` is a little after every connection is open.
pub fn run_load(
    url: &str,
    rate: f64,
    connections: usize,
    duration: Nanos,
    timeout: Nanos,
) -> Result<Report> {
    if !(rate > 0.0 && rate <= MAX_RATE) {
        bail!("--rate {rate}: must be above 0 and at most {MAX_RATE}");
    }
    if connections == 0 || connections > MAX_CONNECTIONS {
        bail!("--connections {connections}: must be between 1 and {MAX_CONNECTIONS}");
    }
    let (host, addr, path) = parse_url(url)?;
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: netsched-load\r\n\r\n")
            .into_bytes();
    let timeout_d = Duration::from_nanos(timeout);
    // Open every connection before the clock starts, so connection setup is not timed.
    let mut conns = Vec::with_capacity(connections);
    for i in 0..connections {
        conns.push(
            Conn::open(addr, timeout_d)
                .map_err(|f| anyhow!("connection {i} to {addr}: {}", f.reason()))?,
        );
    }
    let t0 = Instant::now() + Duration::from_millis(20);
    let period = 1e9 / rate;
    let total_due = (duration as f64 / period).floor() as u64;
    let grace = t0 + Duration::from_nanos(duration) + timeout_d;
    let tallies: Vec<Tally> = std::thread::scope(|s| {
        let handles: Vec<_> = conns
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                let request = &request;
                std::thread::Builder::new()
                    .name(format!("load-{i}"))
                    .stack_size(256 * 1024)
                    .spawn_scoped(s, move || {
                        connection_loop(
                            c,
                            i,
                            connections,
                            total_due,
                            period,
                            t0,
                            grace,
                            addr,
                            timeout_d,
                            request,
                        )
                    })
                    .expect("spawn a load thread")
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let mut r = Report {
        due: total_due,
        answered: 0,
        errors: BTreeMap::new(),
        not_sent: 0,
        latency: Histogram::default(),
        lateness: Histogram::default(),
        elapsed: t0.elapsed(),
    };
    for t in tallies {
        r.latency.merge(&t.latency);
        r.lateness.merge(&t.lateness);
        for (k, v) in t.errors {
            *r.errors.entry(k).or_default() += v;
        }
        r.not_sent += t.not_sent;
    }
    r.answered = r.latency.count();
    Ok(r)
}

#[allow(clippy::too_many_arguments)]
fn connection_loop(
    first: Conn,
    i: usize,
    connections: usize,
    total_due: u64,
    period: f64,
    t0: Instant,
    grace: Instant,
    addr: SocketAddr,
    timeout: Duration,
    request: &[u8],
) -> Tally {
    let mut t = Tally::default();
    let mut conn = Some(first);
    let mut k = i as u64;
    while k < total_due {
        let due = t0 + Duration::from_nanos((k as f64 * period) as u64);
        let now = Instant::now();
        if now >= grace {
            // Still behind when the grace period ends: the rest is counted, not sent.
            t.not_sent += (total_due - k).div_ceil(connections as u64);
            break;
        }
        if due > now {
            std::thread::sleep(due - now);
        }
        let sent = Instant::now();
        t.lateness
            .record(sent.saturating_duration_since(due).as_nanos() as u64);
        let result = match conn.take() {
            Some(c) => Ok(c),
            None => Conn::open(addr, timeout),
        }
        .and_then(|mut c| c.exchange(request).map(|keep| (c, keep)));
        match result {
            Ok((c, keep)) => {
                t.latency.record(due.elapsed().as_nanos() as u64);
                if keep {
                    conn = Some(c);
                }
            }
            Err(f) => *t.errors.entry(f.reason()).or_default() += 1,
        }
        k += connections as u64;
    }
    t
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

impl Report {
    pub fn to_json(&self, rate: f64) -> serde_json::Value {
        let q = |h: &Histogram| {
            serde_json::json!({
                "p50": ms(h.quantile(0.5)), "p90": ms(h.quantile(0.9)),
                "p99": ms(h.quantile(0.99)), "p999": ms(h.quantile(0.999)),
                "max": ms(h.quantile(1.0)),
            })
        };
        serde_json::json!({
            "offered_rate": rate,
            "due": self.due,
            "answered": self.answered,
            "errors": self.errors,
            "not_sent": self.not_sent,
            "elapsed_s": self.elapsed.as_secs_f64(),
            "latency_ms": q(&self.latency),
            "generator_lateness_ms": q(&self.lateness),
        })
    }
}

pub fn run(a: &LoadArgs) -> Result<()> {
    let duration = parse_duration_in(&a.duration, netsched_core::MS, MAX_DURATION)
        .map_err(|e| anyhow!("--duration {}: {e}", a.duration))?;
    let timeout = parse_duration_in(&a.timeout, netsched_core::MS, 600 * netsched_core::SEC)
        .map_err(|e| anyhow!("--timeout {}: {e}", a.timeout))?;
    if !a.json {
        eprintln!(
            "netsched balance load: {} at {} req/s over {} connections for {}",
            a.url,
            a.rate,
            a.connections,
            format_duration(duration)
        );
    }
    let r = run_load(&a.url, a.rate, a.connections, duration, timeout)?;
    if a.json {
        println!("{}", r.to_json(a.rate));
        return Ok(());
    }
    let errors: u64 = r.errors.values().sum();
    println!(
        "due {}  answered {}  errors {} {:?}  not sent {}  in {:.2} s",
        r.due,
        r.answered,
        errors,
        r.errors,
        r.not_sent,
        r.elapsed.as_secs_f64()
    );
    for (name, h) in [
        ("latency (from due)", &r.latency),
        ("generator lateness", &r.lateness),
    ] {
        println!(
            "{name:20} p50 {:.3}  p90 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3} ms",
            ms(h.quantile(0.5)),
            ms(h.quantile(0.9)),
            ms(h.quantile(0.99)),
            ms(h.quantile(0.999)),
            ms(h.quantile(1.0))
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_within_one_64th() {
        // Monotone and gap-free over the small values, where every bucket is reached.
        let mut last = 0;
        for v in 0..100_000u64 {
            let b = bucket(v);
            assert!(b == last || b == last + 1, "{v}: bucket {b} after {last}");
            last = b;
        }
        for v in (0..100_000u64).chain((12..63).map(|s| (1u64 << s) + 12345)) {
            let b = bucket(v);
            assert!(b < BUCKETS);
            let hi = bucket_high(b);
            assert!(hi >= v, "{v} above its bucket's top {hi}");
            assert!((hi - v) as f64 <= v as f64 / 64.0 + 1.0, "{v} -> {hi}");
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_of_a_known_set() {
        let mut h = Histogram::default();
        for v in 1..=1000u64 {
            h.record(v * 1000);
        }
        let p50 = h.quantile(0.5) as f64;
        assert!((500_000.0..=500_000.0 * 1.016).contains(&p50), "{p50}");
        let p99 = h.quantile(0.99) as f64;
        assert!((990_000.0..=990_000.0 * 1.016).contains(&p99), "{p99}");
        assert_eq!(h.quantile(1.0), 1_000_000);
        assert_eq!(Histogram::default().quantile(0.99), 0);
    }

    #[test]
    fn urls_are_checked() {
        assert!(parse_url("https://x/").is_err());
        assert!(parse_url("http:///").is_err());
        let (h, a, p) = parse_url("http://127.0.0.1:8080/a?b=1").unwrap();
        assert_eq!(
            (h.as_str(), a.port(), p.as_str()),
            ("127.0.0.1:8080", 8080, "/a?b=1")
        );
        assert_eq!(parse_url("http://127.0.0.1").unwrap().1.port(), 80);
    }

    /// A tiny server on loopback that answers each request with `responses[i % n]`.
    fn server(responses: Vec<&'static [u8]>) -> SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let mut i = 0;
            while let Ok((mut s, _)) = l.accept() {
                let mut buf = [0u8; 4096];
                let mut have = Vec::new();
                loop {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => have.extend_from_slice(&buf[..n]),
                    }
                    while let Some(p) = have.windows(4).position(|w| w == b"\r\n\r\n") {
                        have.drain(..p + 4);
                        let r = responses[i % responses.len()];
                        i += 1;
                        if s.write_all(r).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        addr
    }

    #[test]
    fn every_due_request_is_answered_or_counted() {
        let addr = server(vec![
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nT: 1\r\n\r\n",
            b"HTTP/1.1 204 No Content\r\n\r\n",
            b"HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n",
        ]);
        let r = run_load(
            &format!("http://{addr}/"),
            400.0,
            1,
            100 * netsched_core::MS,
            netsched_core::SEC,
        )
        .unwrap();
        assert_eq!(r.due, 40);
        let errors: u64 = r.errors.values().sum();
        assert_eq!(r.answered + errors + r.not_sent, r.due, "{:?}", r.errors);
        assert_eq!(r.errors.get("status_503"), Some(&10), "{:?}", r.errors);
        assert_eq!(r.answered, 30);
    }

    #[test]
    fn a_read_to_close_body_is_refused_by_name() {
        let addr = server(vec![b"HTTP/1.1 200 OK\r\n\r\nbody"]);
        let r = run_load(
            &format!("http://{addr}/"),
            100.0,
            1,
            30 * netsched_core::MS,
            netsched_core::SEC,
        )
        .unwrap();
        assert_eq!(r.answered, 0);
        assert_eq!(r.errors.get("framing"), Some(&r.due));
    }
}

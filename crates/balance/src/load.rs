//! `netsched balance load`: an open-loop HTTP/1.1 load generator that corrects for coordinated
//! omission, for the added-latency benchmark of issue #12 (`scripts/bench-lb-vs-haproxy`).
//!
//! **Why our own.** oha (`-q R --latency-correction`) keeps every successful result in one
//! growing `Vec` (`ResultData::success` in hatoo/oha's `src/result_data.rs`); at 2^14, 2^15,
//! 2^16 … results, where such a vector reallocates, the generator stalled for milliseconds,
//! and the requests scheduled meanwhile are counted late. At 9.4k req/s those stalls landed at
//! 1.7, 3.5 and 7.0 s of every 10 s run, straight to nginx as through either director, and made
//! up the largest clusters of slow requests — the p99 measured the generator
//! (docs/balance-bench.md, "Why it is built so").
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
//! - With `--header "NAME: VALUE"` given k times, connection `i` sends the `i mod k`-th on
//!   every request, so k client classes (say, an `x-class` header per class) share the rate
//!   equally, each on its own connections.
//! - With `--retry`, a request whose reused keep-alive connection closes before any byte of
//!   its response is sent once more on a new connection, as a client may do for an
//!   idempotent request (RFC 9112 §9.3.1; RFC 9110 §9.2.2): a server that closes an idle
//!   connection (a balancer being stopped) races with the client's next request on it. Each
//!   is counted `retried`; its latency still runs from when it was due.
//!
//! **One thread.** An `epoll_pwait2` loop (ns timeouts) sends what is due and reads what has
//! arrived on every connection: a thread per connection cost the shared CPU a context switch
//! per request, and at 11k req/s that CPU (generator and backends) was 85–90 % busy.
//!
//! **Memory.** Fixed: per connection one [`MAX_HEAD`] buffer (the incremental parser's; bodies
//! stream through it and are discarded), and two log-linear histograms of [`BUCKETS`]
//! counters (< 1 % relative error) for the run. Connections are bounded by
//! [`MAX_CONNECTIONS`], the rate by [`MAX_RATE`], the run by [`MAX_DURATION`].
//!
//! The framing is the workspace's one HTTP/1 reader's (`netsched_util::http1`, RFC 9112 §6.3):
//! a status without a body (204, 304), `Content-Length`, `Transfer-Encoding: chunked`
//! (chunk extensions and trailers skipped), and `Connection: close` (the connection is
//! reopened for the next request). An interim 1xx response and a response read to the close
//! are refused (`framing`).

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use netsched_core::units::{format_duration, parse_duration_in};
use netsched_core::Nanos;
use netsched_sys::Epoll;
use netsched_util::http1::{Event, Framing, HeadError, ReadError, ResponseReader};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Most connections (one thread each).
pub const MAX_CONNECTIONS: usize = 4096;
/// Highest offered rate, requests/s.
pub const MAX_RATE: f64 = 1e6;
/// Longest run.
pub const MAX_DURATION: Nanos = 3600 * netsched_core::SEC;
/// Most `--header` values, and the longest one (bytes).
pub const MAX_HEADERS: usize = 64;
pub const MAX_HEADER_LEN: usize = 1024;
/// A connection's read buffer (a response head is at most
/// `netsched_util::http1::MAX_RESPONSE_HEAD`).
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
    /// Send a request once more on a new connection when its reused keep-alive connection
    /// closes before any byte of the response (RFC 9112 §9.3.1); counted `retried`.
    #[arg(long)]
    pub retry: bool,
    /// `NAME: VALUE` added to the request; given k times, connection i sends the (i mod k)-th,
    /// so k classes of clients share the rate equally.
    #[arg(long = "header", value_name = "NAME: VALUE")]
    pub headers: Vec<String>,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// What the parser found when a response ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Done {
    status: u16,
    keep_alive: bool,
}

/// The workspace's HTTP/1 response reader (`netsched_util::http1`, its cheap mode: no header
/// map) over a fixed buffer of [`MAX_HEAD`] bytes, refusing what a load generator cannot time:
/// an interim response to a GET, a body read to the close.
struct Parser(ResponseReader);

impl Parser {
    fn new() -> Self {
        Parser(ResponseReader::new(MAX_HEAD))
    }

    /// Room to read into (compacting first); `Err` when a head or line fills the buffer.
    fn space(&mut self) -> Result<&mut [u8], Failure> {
        self.0.space().map_err(failure)
    }

    /// Parse what has arrived. `Ok(Some)` when a whole response has been read (the bytes
    /// after it stay for the next one), `Ok(None)` when more is needed.
    fn advance(&mut self) -> Result<Option<Done>, Failure> {
        loop {
            match self.0.advance().map_err(failure)? {
                Event::NeedMore => return Ok(None),
                // Interim responses are not expected for a GET.
                Event::Interim(_) => return Err(Failure::Framing),
                // Read to the close (RFC 9112 §6.3 item 8): not timed here.
                Event::Head(h) if h.framing == Framing::Close => return Err(Failure::Framing),
                Event::Head(_) => {}
                Event::Done(h) => {
                    return Ok(Some(Done {
                        status: h.status,
                        keep_alive: h.keep_alive,
                    }))
                }
            }
        }
    }
}

/// The failure a reader error is counted as: an unasked-for 101 is framing, the rest is
/// malformed.
fn failure(e: ReadError) -> Failure {
    match e {
        ReadError::Head(HeadError::Upgrade) => Failure::Framing,
        _ => Failure::Malformed,
    }
}

/// One connection and the request in flight on it.
struct Slot {
    stream: Option<TcpStream>,
    parser: Parser,
    /// The next request this connection sends (its index in the whole run).
    next: u64,
    /// The request in flight: when it was due.
    in_flight: Option<Instant>,
    /// The connection has carried a whole response (it is a reused keep-alive connection).
    reused: bool,
    /// Bytes of the response in flight have arrived.
    got_bytes: bool,
    /// The request in flight has been sent again already.
    retried: bool,
}

impl Slot {
    fn close(&mut self, epoll: &Epoll) {
        if let Some(s) = self.stream.take() {
            let _ = epoll.remove(s.as_raw_fd());
        }
        self.parser = Parser::new();
        self.reused = false;
    }

    /// Whether the request in flight may be sent again after `f` (`--retry`): its reused
    /// connection closed before any byte of the response, and it was not sent again yet.
    fn may_retry(&self, f: Failure) -> bool {
        f == Failure::Closed && self.reused && !self.got_bytes && !self.retried
    }

    /// Send the request in flight again on a new connection.
    fn resend(
        &mut self,
        addr: SocketAddr,
        timeout: Duration,
        epoll: &Epoll,
        token: u64,
        request: &[u8],
    ) -> Result<(), Failure> {
        self.close(epoll);
        let mut s = connect(addr, timeout, epoll, token)?;
        self.retried = true;
        match s.write(request) {
            Ok(n) if n == request.len() => {
                self.stream = Some(s);
                Ok(())
            }
            _ => {
                let _ = epoll.remove(s.as_raw_fd());
                Err(Failure::Closed)
            }
        }
    }
}

/// The whole run's result.
pub struct Report {
    /// Connections the server closed (or wrote to) while nothing was asked on them.
    pub idle_closes: u64,
    /// Requests sent again on a new connection (`--retry`).
    pub retried: u64,
    pub due: u64,
    pub answered: u64,
    pub errors: BTreeMap<String, u64>,
    pub not_sent: u64,
    pub latency: Histogram,
    pub lateness: Histogram,
    pub elapsed: Duration,
}

fn connect(
    addr: SocketAddr,
    timeout: Duration,
    epoll: &Epoll,
    token: u64,
) -> Result<TcpStream, Failure> {
    let s = TcpStream::connect_timeout(&addr, timeout).map_err(|_| Failure::Connect)?;
    let _ = s.set_nodelay(true);
    s.set_nonblocking(true).map_err(|_| Failure::Connect)?;
    epoll
        .add(s.as_raw_fd(), token)
        .map_err(|_| Failure::Connect)?;
    Ok(s)
}

/// What every request of a run goes to and how: the fixed part of the loop's work.
struct Target<'a> {
    addr: SocketAddr,
    timeout: Duration,
    epoll: &'a Epoll,
    /// One request per `--header` (or one without): connection `i` sends `requests[i % len]`.
    requests: &'a [Vec<u8>],
    connections: usize,
    retry: bool,
}

impl Target<'_> {
    /// A request failed: count it, close its connection (reopened when the next one is due).
    fn fail(&self, r: &mut Report, slot: &mut Slot, f: Failure) {
        *r.errors.entry(f.reason()).or_default() += 1;
        slot.close(self.epoll);
        slot.in_flight = None;
        slot.next += self.connections as u64;
    }

    /// Open every connection (before the clock starts, so setup is not timed).
    fn open_slots(&self) -> Result<Vec<Slot>> {
        let mut slots = Vec::with_capacity(self.connections);
        for i in 0..self.connections {
            let s = connect(self.addr, self.timeout, self.epoll, i as u64)
                .map_err(|f| anyhow!("connection {i} to {}: {}", self.addr, f.reason()))?;
            slots.push(Slot {
                stream: Some(s),
                parser: Parser::new(),
                next: i as u64,
                in_flight: None,
                reused: false,
                got_bytes: false,
                retried: false,
            });
        }
        Ok(slots)
    }

    /// Send request `slot.next` of connection `i`, due at `due`; false when its connection
    /// could not be opened (counted as failed, nothing sent).
    fn request(&self, i: usize) -> &[u8] {
        &self.requests[i % self.requests.len()]
    }

    fn send(&self, r: &mut Report, slot: &mut Slot, i: usize, due: Instant) -> bool {
        if slot.stream.is_none() {
            match connect(self.addr, self.timeout, self.epoll, i as u64) {
                Ok(s) => slot.stream = Some(s),
                Err(f) => {
                    self.fail(r, slot, f);
                    return false;
                }
            }
        }
        r.lateness
            .record(Instant::now().saturating_duration_since(due).as_nanos() as u64);
        // One small request on a connection with nothing in flight: the socket buffer
        // takes it whole.
        let request = self.request(i);
        let sent = slot.stream.as_mut().map(|s| s.write(request));
        slot.got_bytes = false;
        slot.retried = false;
        match sent {
            Some(Ok(n)) if n == request.len() => slot.in_flight = Some(due),
            _ if self.retry && slot.may_retry(Failure::Closed) => {
                match slot.resend(self.addr, self.timeout, self.epoll, i as u64, request) {
                    Ok(()) => {
                        r.retried += 1;
                        slot.in_flight = Some(due);
                    }
                    Err(f) => self.fail(r, slot, f),
                }
            }
            _ => self.fail(r, slot, Failure::Closed),
        }
        true
    }

    /// Input on connection `token`: read its response, or count an idle close.
    fn on_input(&self, r: &mut Report, slot: &mut Slot, token: u64) {
        let Some(due) = slot.in_flight else {
            // Input with nothing asked: the server closed an idle connection (or sent
            // what nobody asked for). No request is affected; the connection is reopened
            // when its next request is due.
            slot.close(self.epoll);
            r.idle_closes += 1;
            return;
        };
        match read_response(slot) {
            Ok(None) => {}
            Ok(Some(d)) => {
                if (200..400).contains(&d.status) {
                    r.latency.record(due.elapsed().as_nanos() as u64);
                    slot.in_flight = None;
                    slot.next += self.connections as u64;
                    slot.reused = true;
                    if !d.keep_alive {
                        slot.close(self.epoll);
                    }
                } else {
                    self.fail(r, slot, Failure::Status(d.status));
                }
            }
            Err(f) if self.retry && slot.may_retry(f) => {
                let request = self.request(token as usize);
                match slot.resend(self.addr, self.timeout, self.epoll, token, request) {
                    Ok(()) => r.retried += 1,
                    Err(f) => self.fail(r, slot, f),
                }
            }
            Err(f) => self.fail(r, slot, f),
        }
    }
}

/// At the end of the grace time: what is still in flight timed out, what was never sent is
/// counted as not sent.
fn give_up(r: &mut Report, slots: &mut [Slot], total_due: u64, connections: usize) {
    for slot in slots {
        if slot.in_flight.take().is_some() {
            *r.errors.entry(Failure::Timeout.reason()).or_default() += 1;
            slot.next += connections as u64;
        }
        if slot.next < total_due {
            r.not_sent += (total_due - slot.next).div_ceil(connections as u64);
        }
    }
}

/// Run the load on the calling thread (one `epoll` loop over every connection). Every
/// connection is opened before the clock starts, so connection setup is not timed.
pub fn run_load(
    url: &str,
    rate: f64,
    connections: usize,
    duration: Nanos,
    timeout: Nanos,
    retry: bool,
) -> Result<Report> {
    run_load_with_headers(url, rate, connections, duration, timeout, retry, &[])
}

/// The GET requests of a run: one per header (`NAME: VALUE`), or one with none.
pub fn build_requests(host: &str, path: &str, headers: &[String]) -> Result<Vec<Vec<u8>>> {
    if headers.len() > MAX_HEADERS {
        bail!(
            "--header given {} times: at most {MAX_HEADERS}",
            headers.len()
        );
    }
    let head = |extra: &str| {
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: netsched-load\r\n{extra}\r\n")
            .into_bytes()
    };
    if headers.is_empty() {
        return Ok(vec![head("")]);
    }
    let mut out = Vec::with_capacity(headers.len());
    for h in headers {
        let ok_name = |n: &str| {
            !n.is_empty()
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
        };
        match h.split_once(':') {
            Some((name, value))
                if h.len() <= MAX_HEADER_LEN
                    && ok_name(name)
                    && !value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) =>
            {
                out.push(head(&format!("{name}: {}\r\n", value.trim())));
            }
            _ => bail!(
                "--header {h:?}: must be NAME: VALUE (a token name, no CR/LF/NUL, at most \
                 {MAX_HEADER_LEN} bytes)"
            ),
        }
    }
    Ok(out)
}

/// [`run_load`] with `--header` values (connection `i` sends the `i mod k`-th of k).
pub fn run_load_with_headers(
    url: &str,
    rate: f64,
    connections: usize,
    duration: Nanos,
    timeout: Nanos,
    retry: bool,
    headers: &[String],
) -> Result<Report> {
    if !(rate > 0.0 && rate <= MAX_RATE) {
        bail!("--rate {rate}: must be above 0 and at most {MAX_RATE}");
    }
    if connections == 0 || connections > MAX_CONNECTIONS {
        bail!("--connections {connections}: must be between 1 and {MAX_CONNECTIONS}");
    }
    let (host, addr, path) = parse_url(url)?;
    let requests = build_requests(&host, &path, headers)?;
    let timeout_d = Duration::from_nanos(timeout);
    let epoll = Epoll::new().context("epoll_create1")?;
    let target = Target {
        addr,
        timeout: timeout_d,
        epoll: &epoll,
        requests: &requests,
        connections,
        retry,
    };
    let mut slots = target.open_slots()?;
    let period = 1e9 / rate;
    let total_due = (duration as f64 / period).floor() as u64;
    let t0 = Instant::now() + Duration::from_millis(20);
    let grace = t0 + Duration::from_nanos(duration) + timeout_d;
    let due_at = |k: u64| t0 + Duration::from_nanos((k as f64 * period) as u64);
    let mut r = Report {
        idle_closes: 0,
        retried: 0,
        due: total_due,
        answered: 0,
        errors: BTreeMap::new(),
        not_sent: 0,
        latency: Histogram::default(),
        lateness: Histogram::default(),
        elapsed: Duration::ZERO,
    };
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; connections];
    loop {
        let now = Instant::now();
        if now >= grace {
            give_up(&mut r, &mut slots, total_due, connections);
            break;
        }
        // Send what is due; time out what waited too long; find the next thing to wait for.
        let mut wake = grace;
        let mut busy = false;
        for (i, slot) in slots.iter_mut().enumerate() {
            if let Some(due) = slot.in_flight {
                busy = true;
                if now >= due + timeout_d {
                    target.fail(&mut r, slot, Failure::Timeout);
                } else {
                    wake = wake.min(due + timeout_d);
                }
                continue;
            }
            if slot.next >= total_due {
                continue;
            }
            busy = true;
            let due = due_at(slot.next);
            if due > now {
                wake = wake.min(due);
                continue;
            }
            if target.send(&mut r, slot, i, due) {
                wake = now;
            }
        }
        if !busy {
            break;
        }
        let now = Instant::now();
        let wait = wake.saturating_duration_since(now).as_nanos() as u64;
        let n = epoll.wait(&mut events, wait).context("epoll_pwait2")?;
        for e in &events[..n] {
            let token = e.u64;
            if let Some(slot) = slots.get_mut(token as usize) {
                target.on_input(&mut r, slot, token);
            }
        }
    }
    r.elapsed = t0.elapsed();
    r.answered = r.latency.count();
    Ok(r)
}

/// Read what the socket has and parse it; `Ok(Some)` once the response is complete.
fn read_response(slot: &mut Slot) -> Result<Option<Done>, Failure> {
    let Some(s) = slot.stream.as_mut() else {
        return Err(Failure::Closed);
    };
    loop {
        let space = slot.parser.space()?;
        match s.read(space) {
            Ok(0) => return Err(Failure::Closed),
            Ok(n) => {
                slot.got_bytes = true;
                slot.parser.0.filled(n);
                if let Some(d) = slot.parser.advance()? {
                    return Ok(Some(d));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Err(Failure::Closed),
        }
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

impl Report {
    /// `--json`: times in whole nanoseconds, the rate per second (docs/cli.md, "JSON outputs").
    pub fn to_json(&self, rate: f64) -> serde_json::Value {
        let q = |h: &Histogram| {
            serde_json::json!({
                "p50_ns": h.quantile(0.5), "p90_ns": h.quantile(0.9),
                "p99_ns": h.quantile(0.99), "p999_ns": h.quantile(0.999),
                "max_ns": h.quantile(1.0),
            })
        };
        serde_json::json!({
            "offered_per_s": rate,
            "due": self.due,
            "answered": self.answered,
            "errors": self.errors,
            "not_sent": self.not_sent,
            "idle_closes": self.idle_closes,
            "retried": self.retried,
            "elapsed_ns": u64::try_from(self.elapsed.as_nanos()).unwrap_or(u64::MAX),
            "latency": q(&self.latency),
            "generator_lateness": q(&self.lateness),
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
    let r = run_load_with_headers(
        &a.url,
        a.rate,
        a.connections,
        duration,
        timeout,
        a.retry,
        &a.headers,
    )?;
    if a.json {
        println!("{}", r.to_json(a.rate));
        return Ok(());
    }
    let errors: u64 = r.errors.values().sum();
    println!(
        "due {}  answered {}  errors {} {:?}  not sent {}  retried {}  in {:.2} s ({} idle connections closed by the server)",
        r.due,
        r.answered,
        errors,
        r.errors,
        r.not_sent,
        r.retried,
        r.elapsed.as_secs_f64(),
        r.idle_closes
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
    fn headers_make_one_request_each_and_bad_ones_are_refused() {
        let one = build_requests("h", "/", &[]).unwrap();
        assert_eq!(one.len(), 1);
        assert!(one[0].ends_with(b"netsched-load\r\n\r\n"));
        let hs: Vec<String> = (0..5).map(|k| format!("x-class: c{k}")).collect();
        let five = build_requests("h", "/p", &hs).unwrap();
        assert_eq!(five.len(), 5);
        assert!(five[3].ends_with(b"\r\nx-class: c3\r\n\r\n"));
        for bad in ["no-colon", ": v", "a b: v", "x: a\r\nevil: 1"] {
            let e = build_requests("h", "/", &[bad.to_string()]).unwrap_err();
            assert!(e.to_string().contains("--header"), "{bad}: {e}");
        }
        let many: Vec<String> = (0..=MAX_HEADERS).map(|k| format!("x: {k}")).collect();
        assert!(build_requests("h", "/", &many).is_err());
    }

    #[test]
    fn the_json_report_names_every_number_with_its_unit() {
        let mut latency = Histogram::default();
        latency.record(1_500_000);
        let r = Report {
            idle_closes: 1,
            retried: 2,
            due: 10,
            answered: 8,
            errors: BTreeMap::from([("timeout".to_string(), 2)]),
            not_sent: 0,
            latency,
            lateness: Histogram::default(),
            elapsed: Duration::from_millis(2500),
        };
        let v = r.to_json(4.0);
        let bad = netsched_util::json_units::violations(&v);
        assert!(bad.is_empty(), "{bad:?}\n{v}");
        assert_eq!(v["elapsed_ns"], 2_500_000_000u64);
        let p50 = v["latency"]["p50_ns"].as_u64().unwrap();
        assert!(
            (1_500_000..=1_500_000 + 1_500_000 / 64 + 1).contains(&p50),
            "{v}"
        );
    }

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

    /// Feed `bytes` to a parser in pieces of every size; the responses it completes.
    fn parse_in_pieces(bytes: &[u8], piece: usize) -> Result<Vec<Done>, Failure> {
        let mut p = Parser::new();
        let mut done = Vec::new();
        for c in bytes.chunks(piece) {
            p.0.push(c).map_err(failure)?;
            while let Some(d) = p.advance()? {
                done.push(d);
            }
        }
        Ok(done)
    }

    #[test]
    fn the_parser_finds_every_response_end_however_the_bytes_arrive() {
        let stream: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello\
HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\nX-T: 1\r\n\r\n\
HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n\
HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n\
HTTP/1.1 503 Busy\r\nConnection: close\r\nContent-Length: 2\r\n\r\nno";
        let want = vec![
            Done {
                status: 200,
                keep_alive: true,
            },
            Done {
                status: 200,
                keep_alive: true,
            },
            Done {
                status: 304,
                keep_alive: true,
            },
            Done {
                status: 200,
                keep_alive: false,
            },
            Done {
                status: 503,
                keep_alive: false,
            },
        ];
        for piece in 1..=stream.len() {
            assert_eq!(
                parse_in_pieces(stream, piece).unwrap(),
                want,
                "pieces of {piece}"
            );
        }
    }

    #[test]
    fn the_parser_refuses_what_it_cannot_time() {
        let cases: [(&[u8], Failure); 4] = [
            (b"HTTP/1.1 200 OK\r\n\r\nto the close", Failure::Framing),
            (b"HTTP/1.1 100 Continue\r\n\r\n", Failure::Framing),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
                Failure::Malformed,
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                Failure::Malformed,
            ),
        ];
        for (bytes, want) in cases {
            assert_eq!(
                parse_in_pieces(bytes, 7),
                Err(want),
                "{:?}",
                String::from_utf8_lossy(bytes)
            );
        }
        // A head that never ends fills the buffer and is refused, not grown.
        let endless = vec![b'a'; MAX_HEAD + 10];
        assert_eq!(parse_in_pieces(&endless, 4096), Err(Failure::Malformed));
    }

    /// A tiny server on loopback that answers each request with `responses[i % n]`.
    fn server(responses: Vec<&'static [u8]>) -> SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        std::thread::spawn(move || {
            while let Ok((mut s, _)) = l.accept() {
                let (responses, next) = (responses.clone(), next.clone());
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    let mut have = Vec::new();
                    'conn: loop {
                        match s.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => have.extend_from_slice(&buf[..n]),
                        }
                        while let Some(p) = have.windows(4).position(|w| w == b"\r\n\r\n") {
                            have.drain(..p + 4);
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            let r = responses[i % responses.len()];
                            if s.write_all(r).is_err()
                                || r.windows(17).any(|w| w == b"Connection: close")
                            {
                                break 'conn;
                            }
                        }
                    }
                });
            }
        });
        addr
    }

    #[test]
    fn connections_share_the_schedule_and_reopen_after_a_close() {
        let addr = server(vec![
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
            b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
        ]);
        let r = run_load(
            &format!("http://{addr}/"),
            500.0,
            4,
            100 * netsched_core::MS,
            netsched_core::SEC,
            false,
        )
        .unwrap();
        assert_eq!(r.due, 50);
        assert_eq!(r.answered, 50, "{:?}", r.errors);
        assert_eq!(r.lateness.count(), 50);
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
            false,
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
            false,
        )
        .unwrap();
        assert_eq!(r.answered, 0);
        assert_eq!(r.errors.get("framing"), Some(&r.due));
    }
}

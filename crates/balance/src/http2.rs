//! HTTP/2 from clients (RFC 9113), served by hyper's HTTP/2 server (the `h2` crate), to the
//! same HTTP/1.1 backends: every stream is one request through `l7::forward`, so the
//! balancer, the service classes, the queue, the timeouts, the access log and the metrics are
//! those of HTTP/1.1.
//!
//! **Which protocol.** Over TLS, ALPN decides (`h2`, else HTTP/1.1; RFC 9113 §3.2). On a
//! plain listener a connection that opens with the client preface (§3.4) is HTTP/2 with prior
//! knowledge (h2c, §3.3), as HAProxy detects it on clear-text listeners; any other first bytes
//! are HTTP/1.1. Reading the preface is bounded by `timeouts.header` ([`sniff`]).
//!
//! **Translation to HTTP/1.1 without smuggling** (RFC 9113 §8.2–8.3). The `h2` crate treats
//! as malformed (stream reset, `PROTOCOL_ERROR`) a request with a connection-specific field
//! (`connection`, `keep-alive`, `proxy-connection`, `transfer-encoding`, `upgrade`), a `te`
//! other than `trailers`, an upper-case field name (its HPACK decoder takes lower-case names
//! only), a value with CR, LF or NUL (`HeaderValue::from_bytes`), a pseudo-header after a
//! regular field, twice, unknown, or missing (`:method`, `:scheme`, `:path`), and DATA whose
//! length disagrees with `content-length` (§8.1.1). On top of that, [`check_request`] refuses
//! (400) a value with leading or trailing white space (§8.2.1), a Host that disagrees with
//! `:authority` (§8.3.1), and a request with neither; and joins split `cookie` fields with
//! `"; "` before the request is written as HTTP/1.1 (§8.2.3). `l7::forward` then applies the
//! HTTP/1.1 checks every request gets (CONNECT refused, framing from the fields).
//!
//! **Bounds** ([`builder`]; each a flood of CVE-2023-44487 and its family):
//! - at most [`MAX_STREAMS`] concurrent streams per connection (`SETTINGS_MAX_CONCURRENT_STREAMS`;
//!   a stream past it is refused by `h2` with `REFUSED_STREAM`);
//! - decoded header list at most `l7::MAX_HEAD_BYTES` (`SETTINGS_MAX_HEADER_LIST_SIZE`, given to
//!   [`builder`]), which
//!   bounds HPACK decompression bombs and CONTINUATION floods (`h2` counts the decoded size
//!   across CONTINUATION frames and answers 431 or ends the connection);
//! - rapid reset (CVE-2023-44487): a stream reset before hyper took it never reaches this
//!   code; one the client resets later drops its request at once (its queue place, its
//!   lease, its backend connection; it counts from the moment hyper takes it, before its
//!   future first runs), and a connection whose client resets
//!   more than [`MAX_RESETS_PER_SECOND`] streams in a second ends (`h2_rapid_reset`); `h2`
//!   itself ends one with `GOAWAY(ENHANCE_YOUR_CALM)` past [`MAX_PENDING_RESETS`] streams reset
//!   before they were accepted or [`MAX_ERROR_RESETS`] the server reset for the client's
//!   errors (`h2_calm`);
//! - SETTINGS and PING floods: `h2` keeps one pending SETTINGS acknowledgement and one pending
//!   PONG, so a client that sends them without reading holds no growing queue, and its
//!   connection ends when the socket's writes stall past `timeouts.client` (`client_io.rs`);
//!   PRIORITY frames are read and ignored (§5.3.2, RFC 9218 deprecates the scheme);
//! - response data waiting for the client's flow-control window: at most [`MAX_SEND_BUFFER`]
//!   per stream, and a connection on which a stream's response has waited for window longer
//!   than `timeouts.client` while no stream's response moved is ended ([`Starved`]), so a
//!   client that never opens its window cannot hold server slots;
//! - a connection with no stream for `timeouts.header` is closed with `GOAWAY(NO_ERROR)`, as an
//!   idle HTTP/1.1 keep-alive connection is.
//!
//! Counted: connections by protocol, HTTP/2 streams, and connection ends by reason in
//! `refused{reason}` (`h2_rapid_reset`, `h2_calm`, `h2_protocol`, `h2_flow_control`,
//! `h2_compression`, `h2_frame_size`, `h2_starved`).

use bytes::Bytes;
use hyper::header::{HeaderValue, COOKIE, HOST};
use hyper::Request;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

/// The client connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Concurrent streams per connection: HAProxy's `tune.h2.max-concurrent-streams` default, and
/// RFC 9113 §6.5.2's advice of no fewer than 100.
pub const MAX_STREAMS: u32 = 100;
/// Streams reset by the client before the server accepted them (h2's default, 20).
pub const MAX_PENDING_RESETS: usize = 20;
/// Streams the server reset for the client's errors before `GOAWAY(ENHANCE_YOUR_CALM)`.
pub const MAX_ERROR_RESETS: usize = 256;
/// Streams the client may reset in one second (each reset drops its request: its queue place,
/// its backend connection) before its connection ends, counted `h2_rapid_reset`. A browser
/// cancels a handful when the user leaves a page; CVE-2023-44487's clients reset thousands.
pub const MAX_RESETS_PER_SECOND: u64 = 100;
/// Response bytes buffered per stream waiting for the client's window.
pub const MAX_SEND_BUFFER: usize = 64 * 1024;
/// Flow-control windows offered to the client for request bodies (per stream, per
/// connection): what a client can send before the balancer has read it.
pub const STREAM_WINDOW: u32 = 256 * 1024;
pub const CONNECTION_WINDOW: u32 = 1024 * 1024;

/// The protocol a client connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http1,
    Http2,
}

impl Protocol {
    /// The ALPN name and the `protocol` label of the metrics.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Http1 => "http/1.1",
            Protocol::Http2 => "h2",
        }
    }

    /// The protocol ALPN chose (RFC 7301); HTTP/1.1 when the client offered none.
    pub fn from_alpn(alpn: Option<&[u8]>) -> Protocol {
        match alpn {
            Some(b"h2") => Protocol::Http2,
            _ => Protocol::Http1,
        }
    }
}

/// Whether a plain connection opens with the HTTP/2 preface, without consuming a byte: the
/// bytes at hand are compared as they arrive, and the answer is HTTP/1.1 at the first byte
/// that differs (an HTTP/1.1 request's first byte usually), HTTP/2 once all 24 match. A
/// client that sends nothing within `limit`, or closes, is `Err`.
pub async fn sniff(stream: &TcpStream, limit: Duration) -> std::io::Result<Protocol> {
    let deadline = tokio::time::Instant::now() + limit;
    let mut buf = [0u8; PREFACE.len()];
    loop {
        let peeked = tokio::time::timeout_at(deadline, stream.peek(&mut buf)).await;
        let n = match peeked {
            Err(_) => return Err(std::io::ErrorKind::TimedOut.into()),
            Ok(r) => r?,
        };
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if buf[..n] != PREFACE[..n] {
            return Ok(Protocol::Http1);
        }
        if n == PREFACE.len() {
            return Ok(Protocol::Http2);
        }
        // A proper prefix of the preface: wait for more (peek returns at once while the
        // bytes at hand are unchanged, so wait for the socket to have more first).
        let more = async {
            loop {
                stream.readable().await?;
                let mut probe = [0u8; PREFACE.len()];
                if stream.peek(&mut probe).await? > n {
                    return Ok::<_, std::io::Error>(());
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        };
        match tokio::time::timeout_at(deadline, more).await {
            Err(_) => return Err(std::io::ErrorKind::TimedOut.into()),
            Ok(r) => r?,
        }
    }
}

/// hyper's HTTP/2 server with the bounds above. No keep-alive PINGs: a peer that is gone is
/// found as an HTTP/1.1 one is, by a write that stalls past `timeouts.client`
/// (`client_io.rs`), a starved stream, or the idle limit.
/// `max_head` bounds a request's decoded header list, as `l7::MAX_HEAD_BYTES` bounds an
/// HTTP/1.1 head.
pub fn builder(
    max_head: u32,
) -> hyper::server::conn::http2::Builder<hyper_util::rt::TokioExecutor> {
    let mut b = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new());
    b.timer(hyper_util::rt::TokioTimer::new())
        .max_concurrent_streams(MAX_STREAMS)
        .max_header_list_size(max_head)
        .max_pending_accept_reset_streams(MAX_PENDING_RESETS)
        .max_local_error_reset_streams(MAX_ERROR_RESETS)
        .max_send_buf_size(MAX_SEND_BUFFER)
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW);
    b
}

/// Why a request is malformed beyond what `h2` checks (RFC 9113 §8.2.1, §8.3.1); its cookies
/// joined for HTTP/1.1 (§8.2.3).
pub fn check_request<B>(req: &mut Request<B>) -> Result<(), &'static str> {
    let h = req.headers();
    let ws = |b: &[u8]| {
        matches!(b.first(), Some(b' ' | b'\t')) || matches!(b.last(), Some(b' ' | b'\t'))
    };
    if h.values().any(|v| ws(v.as_bytes())) {
        return Err("bad request: a field value begins or ends with white space");
    }
    let authority = req.uri().authority().map(|a| a.as_str().to_owned());
    let hosts = h.get_all(HOST).iter().count();
    if hosts > 1 {
        return Err("bad request: more than one Host");
    }
    match (authority.as_deref(), h.get(HOST)) {
        (None, None) => return Err("bad request: neither :authority nor Host"),
        (Some(a), Some(host)) if !host.as_bytes().eq_ignore_ascii_case(a.as_bytes()) => {
            return Err("bad request: Host disagrees with :authority");
        }
        _ => {}
    }
    let cookies = h.get_all(COOKIE).iter().count();
    if cookies > 1 {
        let mut joined = Vec::new();
        for (i, c) in h.get_all(COOKIE).iter().enumerate() {
            if i > 0 {
                joined.extend_from_slice(b"; ");
            }
            joined.extend_from_slice(c.as_bytes());
        }
        let v = HeaderValue::from_maybe_shared(Bytes::from(joined))
            .map_err(|_| "bad request: invalid cookie")?;
        req.headers_mut().insert(COOKIE, v);
    }
    Ok(())
}

/// Why an HTTP/2 connection ended in error, for `refused{reason}`; `None` for a clean end (the
/// client's `GOAWAY(NO_ERROR)`, or its close).
pub fn end_reason(e: &hyper::Error) -> Option<&'static str> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(h) = c.downcast_ref::<h2::Error>() {
            if h.is_io() {
                return Some("client_error");
            }
            return match h.reason() {
                Some(h2::Reason::NO_ERROR) | Some(h2::Reason::CANCEL) | None => None,
                Some(h2::Reason::ENHANCE_YOUR_CALM) => Some("h2_calm"),
                Some(h2::Reason::FLOW_CONTROL_ERROR) => Some("h2_flow_control"),
                Some(h2::Reason::COMPRESSION_ERROR) => Some("h2_compression"),
                Some(h2::Reason::FRAME_SIZE_ERROR) => Some("h2_frame_size"),
                Some(_) => Some("h2_protocol"),
            };
        }
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::TimedOut {
                return Some("client_timeout");
            }
        }
        cause = c.source();
    }
    Some("client_error")
}

/// One HTTP/2 connection's streams as its watchdog sees them: how many are open, when the
/// last one ended, how many streams' next response bytes wait for the client's window, and
/// when a waiting stream last moved.
///
/// A stream's body hands hyper a frame and is polled again only once hyper has window to
/// send it (hyper's `PipeToSendStream` waits for capacity before it polls the body), so a
/// body that has not been polled since its last frame for long is starved by the client. A
/// body waiting for its backend *is* polled (it returned `Pending`) and is not starved: the
/// backend's wait has `timeouts.server`.
///
/// The rule ([`Starved::starved`]): some stream has waited longer than the limit while no
/// waiting stream moved for as long. It needs no time per stream: "moved" is the last time a
/// waiting stream was polled or ended, or the set of waiting streams became non-empty. When
/// that is older than the limit while streams wait, no stream left the set since then, so one
/// of those waiting then still waits, since before the limit; and conversely a stream waiting
/// since before the limit, with no stream moved since, has kept the set non-empty since it
/// began to wait, so "moved" is no later.
///
/// Cost, per response frame: one atomic add or subtract on the count of waiting streams and
/// one clock read with an atomic store; per stream one atomic add and subtract on the count
/// of open ones (and a clock read when the last ends); per watchdog tick three atomic loads.
/// No lock.
pub struct Starved {
    /// Times are nanoseconds since this, plus one (0: never).
    epoch: Instant,
    open: AtomicUsize,
    /// Streams whose response waits for hyper to poll it.
    waiting: AtomicUsize,
    /// When a waiting stream last moved (see above).
    moved: AtomicU64,
    /// When the last stream ended (or the connection began), for the idle limit.
    idle_since: AtomicU64,
    /// Streams the client reset in the current second; past the limit `flood` is notified.
    resets: AtomicU64,
    pub flood: tokio::sync::Notify,
}

impl Starved {
    pub fn new() -> Arc<Starved> {
        Arc::new(Starved {
            epoch: Instant::now(),
            open: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            moved: AtomicU64::new(0),
            idle_since: AtomicU64::new(1),
            resets: AtomicU64::new(0),
            flood: tokio::sync::Notify::new(),
        })
    }

    /// Now, as stored (never 0).
    fn now(&self) -> u64 {
        (self.epoch.elapsed().as_nanos() as u64).saturating_add(1)
    }

    /// Whether the time stored in `at` (0: never) is more than `limit` ago.
    fn older(&self, at: &AtomicU64, limit: Duration) -> bool {
        let at = at.load(Ordering::Relaxed);
        let since = self.now().saturating_sub(at.max(1));
        at == 0 || since > limit.as_nanos() as u64
    }

    /// A stream has begun.
    fn begin(&self) {
        self.open.fetch_add(1, Ordering::Relaxed);
    }

    /// A stream has ended (its response sent, or dropped).
    fn end(&self) {
        if self.open.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.idle_since.store(self.now(), Ordering::Relaxed);
        }
    }

    /// A stream gave hyper a frame; it waits to be polled again.
    fn handed(&self) {
        if self.waiting.fetch_add(1, Ordering::Relaxed) == 0 {
            self.moved.store(self.now(), Ordering::Relaxed);
        }
    }

    /// A waiting stream is polled (or ends): it moved.
    fn polled(&self) {
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        self.moved.store(self.now(), Ordering::Relaxed);
    }

    /// A stream ended before its response did (the client reset it, or left).
    fn reset(&self) {
        if self.resets.fetch_add(1, Ordering::Relaxed) + 1 > MAX_RESETS_PER_SECOND {
            self.flood.notify_one();
        }
    }

    /// A new second for [`MAX_RESETS_PER_SECOND`].
    pub fn tick(&self) {
        self.resets.store(0, Ordering::Relaxed);
    }

    /// Whether some stream has waited for window longer than `limit`, and no stream's
    /// response has moved for as long (a client reading slowly but steadily is not starving
    /// its streams; one that opens no window is).
    pub fn starved(&self, limit: Duration) -> bool {
        self.waiting.load(Ordering::Relaxed) > 0 && self.older(&self.moved, limit)
    }

    /// Whether the connection has had no stream for longer than `limit`.
    pub fn idle(&self, limit: Duration) -> bool {
        self.open.load(Ordering::Relaxed) == 0 && self.older(&self.idle_since, limit)
    }
}

/// A stream's place in its connection's [`Starved`]; ends the stream when dropped, as a
/// reset unless [`StreamMark::finished`] was called.
pub struct StreamMark {
    conn: Arc<Starved>,
    /// Counted in the connection's waiting streams.
    waiting: bool,
    done: bool,
}

impl StreamMark {
    pub fn new(conn: Arc<Starved>) -> StreamMark {
        conn.begin();
        StreamMark {
            conn,
            waiting: false,
            done: false,
        }
    }

    /// The stream gave hyper a frame; it waits to be polled again (for the client's window,
    /// if it gives none).
    pub fn handed(&mut self) {
        if !self.waiting {
            self.waiting = true;
            self.conn.handed();
        }
    }

    /// The stream is polled: it is not starved.
    pub fn polled(&mut self) {
        if self.waiting {
            self.waiting = false;
            self.conn.polled();
        }
    }

    /// The stream's response has been given whole.
    pub fn finished(&mut self) {
        self.done = true;
    }
}

impl Drop for StreamMark {
    fn drop(&mut self) {
        if !self.done {
            self.conn.reset();
        }
        self.polled();
        self.conn.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(authority: Option<&str>, fields: &[(&str, &str)]) -> Request<()> {
        let uri = match authority {
            Some(a) => format!("https://{a}/p"),
            None => "/p".to_string(),
        };
        let mut b = Request::builder().uri(uri);
        for (n, v) in fields {
            b = b.header(*n, *v);
        }
        b.body(()).unwrap()
    }

    #[test]
    fn authority_and_host_must_agree() {
        assert!(check_request(&mut req(Some("a.example"), &[])).is_ok());
        assert!(check_request(&mut req(None, &[("host", "a.example")])).is_ok());
        assert!(check_request(&mut req(Some("a.example"), &[("host", "A.example")])).is_ok());
        assert!(check_request(&mut req(Some("a.example"), &[("host", "b.example")])).is_err());
        assert!(check_request(&mut req(None, &[])).is_err());
        let two = [("host", "a.example"), ("host", "a.example")];
        assert!(check_request(&mut req(None, &two)).is_err());
    }

    #[test]
    fn white_space_at_either_end_of_a_value_is_refused() {
        for v in [" x", "x ", "\tx", "x\t"] {
            let r = check_request(&mut req(Some("a"), &[("x-a", v)]));
            assert!(r.is_err(), "{v:?}");
        }
        assert!(check_request(&mut req(Some("a"), &[("x-a", "x y")])).is_ok());
    }

    #[test]
    fn split_cookies_are_joined() {
        let mut r = req(Some("a"), &[("cookie", "a=1"), ("cookie", "b=2")]);
        check_request(&mut r).unwrap();
        let all: Vec<_> = r.headers().get_all(COOKIE).iter().collect();
        assert_eq!(all, ["a=1; b=2"]);
    }

    #[test]
    fn alpn_chooses_the_protocol() {
        assert_eq!(Protocol::from_alpn(Some(b"h2")), Protocol::Http2);
        assert_eq!(Protocol::from_alpn(Some(b"http/1.1")), Protocol::Http1);
        assert_eq!(Protocol::from_alpn(None), Protocol::Http1);
    }

    #[test]
    fn a_stream_not_polled_since_its_frame_is_starved() {
        let c = Starved::new();
        assert!(c.idle(Duration::ZERO));
        let mut m = StreamMark::new(c.clone());
        assert!(!c.idle(Duration::ZERO));
        m.handed();
        std::thread::sleep(Duration::from_millis(5));
        assert!(c.starved(Duration::from_millis(1)));
        m.polled();
        assert!(!c.starved(Duration::ZERO));
        m.handed();
        drop(m);
        assert!(!c.starved(Duration::ZERO));
        assert!(c.idle(Duration::ZERO));
    }

    #[test]
    fn a_slow_stream_beside_moving_ones_is_not_starved() {
        let c = Starved::new();
        let (mut slow, mut fast) = (StreamMark::new(c.clone()), StreamMark::new(c.clone()));
        slow.handed();
        std::thread::sleep(Duration::from_millis(5));
        fast.handed();
        fast.polled();
        assert!(!c.starved(Duration::from_millis(2)));
        std::thread::sleep(Duration::from_millis(5));
        assert!(c.starved(Duration::from_millis(2)));
    }

    /// A stream that has just begun to wait on a connection where nothing moved for long is
    /// not starved; it is once it has waited past the limit with nothing moving.
    #[test]
    fn a_stream_just_handed_on_a_quiet_connection_is_not_starved() {
        let c = Starved::new();
        let mut old = StreamMark::new(c.clone());
        old.handed();
        old.polled();
        std::thread::sleep(Duration::from_millis(10));
        let mut m = StreamMark::new(c.clone());
        m.handed();
        assert!(!c.starved(Duration::from_millis(5)));
        m.handed();
        std::thread::sleep(Duration::from_millis(10));
        assert!(
            c.starved(Duration::from_millis(5)),
            "handed twice: still one wait"
        );
        drop(old);
        assert!(
            c.starved(Duration::from_millis(5)),
            "a stream not waiting ended: no move"
        );
        m.polled();
        assert!(!c.starved(Duration::ZERO));
    }

    #[tokio::test]
    async fn resets_past_the_limit_notify_the_watchdog() {
        let c = Starved::new();
        for _ in 0..MAX_RESETS_PER_SECOND {
            drop(StreamMark::new(c.clone()));
        }
        let notified = c.flood.notified();
        tokio::pin!(notified);
        assert!(futures_poll_once(notified.as_mut()).is_pending());
        let mut done = StreamMark::new(c.clone());
        done.finished();
        drop(done);
        assert!(futures_poll_once(notified.as_mut()).is_pending());
        drop(StreamMark::new(c.clone()));
        assert!(futures_poll_once(notified.as_mut()).is_ready());
        c.tick();
        drop(StreamMark::new(c.clone()));
        let again = c.flood.notified();
        tokio::pin!(again);
        assert!(futures_poll_once(again.as_mut()).is_pending());
    }

    fn futures_poll_once<F: std::future::Future>(
        f: std::pin::Pin<&mut F>,
    ) -> std::task::Poll<F::Output> {
        let waker = std::task::Waker::noop();
        f.poll(&mut std::task::Context::from_waker(waker))
    }
}

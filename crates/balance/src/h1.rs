//! Our HTTP/1.1 client to a backend, driven in the request's own task.
//!
//! Why: hyper's client connection (`hyper::client::conn::http1`) runs each backend connection
//! in a task of its own; a request goes to it over a channel, the response head comes back
//! over a oneshot, and the body flows through a channel-backed `Incoming`: two task hand-offs
//! and their allocations per request, the largest user-space cost of the director against
//! HAProxy in its profile (docs/balance-bench.md, "Why it is built so"). Here the task that
//! serves the client request writes it to the backend, reads the response head, and later (as
//! hyper's server polls the response body) reads the body from the same socket. No task is spawned, no channel crossed.
//!
//! Principles and bounds:
//! - A backend connection ([`Conn`]) is a `TcpStream`, its read buffer and a reused write
//!   buffer. The read buffer keeps the bytes read past what has been consumed (a head read
//!   often brings part of the body); it holds at most a response head ([`MAX_RESPONSE_HEAD`])
//!   or a read of [`READ_CHUNK`] plus a partial chunk-size line or trailer section (bounded
//!   by [`http1::MAX_CHUNK_LINE`], [`http1::MAX_TRAILERS`]). Nothing else is buffered: body bytes go to the
//!   client as they are read.
//! - The request is written as HTTP/1.1 in origin form with the headers `l7.rs` prepared. The
//!   head and as much of the body as is already at hand (up to [`COALESCE`] bytes) leave in
//!   one `send(2)` (no `writev`: see pool.rs); the rest streams as the client sends it.
//!   The body's framing is decided by `l7.rs` from the fields as received ([`RequestBody`])
//!   and written here, never copied: a body with Content-Length goes as is; a chunked one is
//!   decoded by hyper's server and chunked again (RFC 9112 §7.1); a request without a body
//!   sends none.
//! - Every wait has an inactivity limit, through the whole exchange (HAProxy's `timeout
//!   client` / `timeout server`): the client's next body piece `timeouts.client`; the backend
//!   taking request bytes, sending its head, and each read of its body `timeouts.server`.
//! - The response head and body are framed by the workspace's one HTTP/1 reader,
//!   `netsched_util::http1` (RFC 9112 §6.3, §7.1; at most [`MAX_RESPONSE_HEAD`] bytes and
//!   [`MAX_RESPONSE_HEADERS`] fields): interim 1xx responses are skipped (RFC 9110 §15.2), a
//!   101 (we never ask to upgrade), a malformed or oversized head or an invalid
//!   Content-Length is a [`Error::BadResponse`]; none for a response to HEAD and for 204/304,
//!   chunked-last Transfer-Encoding decoded, any other read to close, else Content-Length or
//!   read to close. Here the head's fields become the header map passed on, and body data
//!   goes to the client as the decoder finds it.
//! - A connection is reusable only when its response was read to its end with nothing left
//!   over ([`NotReusable::Leftover`] otherwise: counted, closed), its length was not "until
//!   close", and the backend kept it alive (HTTP/1.1 without `Connection: close`, or HTTP/1.0
//!   with `Connection: keep-alive`; RFC 9112 §9.3). A Transfer-Encoding with a Content-Length
//!   beside it is honoured but the connection is not reused (§6.3 item 3).
//! - Answer order. HTTP/1.1 pairs responses with requests by order alone (RFC 9112 §9.3): a
//!   response the backend sends unasked is read as the next request's answer, and every later
//!   answer on that connection is one behind. So a connection on which the order is in doubt
//!   never carries another request. It is in doubt when bytes arrive while no request is
//!   outstanding, when bytes follow a response's end, and when the read buffer holds more
//!   than the response just read (beyond its own Content-Length). The look before reuse
//!   ([`Conn::idle_state`], also at each sweep of the pool and when a connection is closed
//!   instead of pooled) asks the kernel (`MSG_PEEK`, one system call), not the reactor's
//!   cached readiness, which can lag bytes that arrived an instant ago. When a response ends
//!   only the read buffer is checked ([`BackendBody::take_reusable`]): the look before reuse
//!   comes later and sees all that a look then would. Bytes that are already there when a request has
//!   just been written on a reused connection ([`Conn::answered_early`]) are suspect, not
//!   proof: they are what a backend's answer one request behind looks like (a backend that
//!   holds each small answer until its last one is acknowledged, Nagle's algorithm against
//!   delayed ACKs, releases it as the next request arrives), and also what a very fast
//!   answer on loopback looks like.
//! - Limit, true of any HTTP/1.1 connection reuse: bytes that arrive after the look before
//!   a request is sent and before its real answer cannot be told from that answer, so a
//!   stray landing there is read as the answer. The real answer follows; if it is there by
//!   the next look (in the read buffer at the response's end, or on the socket at the next
//!   reuse or sweep of the pool) the connection is closed, after one wrong answer. Each response is acknowledged at its end (`TCP_QUICKACK`) so
//!   that an answer held back for that acknowledgement arrives before the next request. A backend whose answers keep arriving only after the next
//!   request on the connection was sent passes the shift on from request to request, each
//!   looking in order, until a look catches an answer in between. `l7.rs` therefore keeps
//!   the first request of each client connection and every request that may not be sent
//!   twice off reused connections (`http_reuse = "safe"`): a new connection's first
//!   response cannot be a stray, so those requests never read another's answer.
//! - A backend that closed an idle connection just as it was reused is noticed when the
//!   request reads EOF or a reset before any response byte ([`Error::Closed`]); `l7.rs` then
//!   sends the request once more on a new connection only if its method is idempotent
//!   ([`idempotent`], RFC 9110 §9.2.2) and the whole request is still in the write buffer.

use bytes::{Buf, Bytes, BytesMut};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{HeaderMap, HeaderName, HeaderValue, CONNECTION, CONTENT_LENGTH};
use hyper::header::{TRANSFER_ENCODING, UPGRADE};
use hyper::http::{request, response};
use hyper::{Response, StatusCode, Version};
use netsched_util::http1::{self, BodyDecoder, Framing, Parsed, Step};
pub use netsched_util::http1::{MAX_RESPONSE_HEAD, MAX_RESPONSE_HEADERS};

static KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
use std::fmt;
use std::future::{poll_fn, Future};
use std::io::{self, ErrorKind};
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// Free space ensured in the read buffer before a read.
pub const READ_CHUNK: usize = 16 * 1024;
/// Request bytes (head and body at hand) gathered into the first `send`.
pub const COALESCE: usize = 16 * 1024;
/// Body pieces up to this size are copied out of the read buffer (so the buffer is reused, not
/// reallocated per response); larger ones are handed over without a copy.
const SMALL_FRAME: usize = 4096;

/// Why an exchange with the backend failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// `connect(2)` failed or timed out.
    Connect,
    /// EOF or an error before any byte of a response: the backend closed the connection
    /// (on a reused one, most likely while it was idle).
    Closed,
    /// An I/O error or EOF after part of the response head.
    Server,
    /// The response head is malformed, too large, a 101, or its framing is invalid.
    BadResponse,
    /// The client's request body failed (it left, or sent a bad chunk).
    ClientBody,
    /// The client sent no byte of its request body for `timeouts.client`.
    ClientTimeout,
    /// The backend took no byte of the request, or sent no byte of the response head, for
    /// `timeouts.server`.
    ServerTimeout,
    /// On a reused connection, the answer's order was in doubt (more than one response at
    /// hand) and the request may not be sent twice: no answer is given rather than maybe
    /// another request's.
    InDoubt,
}

/// What an idle pooled connection shows when it is looked at before reuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdleState {
    /// Nothing arrived since its last response: it may carry the next request.
    Ready,
    /// The backend closed it (EOF or an error): the ordinary end of an idle connection.
    Closed,
    /// Bytes arrived that no request asked for (a second response, a body on a HEAD answer):
    /// reading them as the next request's answer would give one client another's response.
    Unexpected,
}

/// One keep-alive connection to a backend.
pub struct Conn {
    stream: TcpStream,
    buf: BytesMut,
    wbuf: Vec<u8>,
    /// The write buffer holds the whole request (head and all its body): it can be sent again.
    whole: bool,
    /// Taken from the pool: it carried an earlier exchange.
    reused: bool,
    /// The order of answers on it is in doubt: it carries no further request.
    in_doubt: bool,
    /// Reused, and bytes were there the instant its request had been written.
    early: bool,
}

impl fmt::Debug for Conn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Conn({:?}, {} buffered)",
            self.stream.peer_addr(),
            self.buf.len()
        )
    }
}

/// How the request body is framed towards the backend, decided by `l7.rs` from the request's
/// header fields as received (RFC 9112 §6.3), before any hop-by-hop field is removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestBody {
    None,
    /// Content-Length: the bytes as they are.
    Length(u64),
    /// Chunked again (hyper's server decoded it).
    Chunked,
}

/// RFC 9110 §9.2.2: the methods whose request a proxy may send again on its own.
pub fn idempotent(m: &hyper::Method) -> bool {
    use hyper::Method as M;
    [M::GET, M::HEAD, M::OPTIONS, M::TRACE, M::PUT, M::DELETE].contains(m)
}

impl Conn {
    /// A new connection (TCP_NODELAY) within `timeout`.
    pub async fn connect(addr: SocketAddr, timeout: Duration) -> Result<Conn, Error> {
        Self::connect_with(addr, timeout, &[]).await
    }

    /// [`Conn::connect`], and `first` (a PROXY protocol header, `proxy_proto.rs`) written
    /// before anything else, within the same `timeout`.
    pub async fn connect_with(
        addr: SocketAddr,
        timeout: Duration,
        first: &[u8],
    ) -> Result<Conn, Error> {
        let open = async {
            let mut s = TcpStream::connect(addr).await?;
            if !first.is_empty() {
                s.write_all(first).await?;
            }
            Ok::<_, std::io::Error>(s)
        };
        let stream = match tokio::time::timeout(timeout, open).await {
            Ok(Ok(s)) => s,
            _ => return Err(Error::Connect),
        };
        let _ = stream.set_nodelay(true);
        Ok(Conn {
            stream,
            buf: BytesMut::with_capacity(READ_CHUNK),
            wbuf: Vec::with_capacity(1024),
            whole: false,
            reused: false,
            in_doubt: false,
            early: false,
        })
    }

    /// Whether an idle connection looks usable: nothing was read from it since its last
    /// response (no EOF, no stray bytes). Costs no system call unless the reactor saw the
    /// socket readable.
    pub fn idle_ok(&self) -> bool {
        self.idle_state() == IdleState::Ready
    }

    /// What an idle connection shows: nothing, a close, or bytes nobody asked for (also
    /// when its order was already in doubt). Asks the kernel (one `recv(2)` with
    /// `MSG_PEEK`), so bytes that arrived an instant ago are seen.
    pub fn idle_state(&self) -> IdleState {
        if !self.buf.is_empty() || self.in_doubt {
            return IdleState::Unexpected;
        }
        match crate::sys::peek_pending(&self.stream) {
            Err(e) if e.kind() == ErrorKind::WouldBlock => IdleState::Ready,
            Ok(0) | Err(_) => IdleState::Closed,
            Ok(_) => IdleState::Unexpected,
        }
    }

    /// Mark a connection taken from the pool (its state since its last exchange is unknown).
    pub fn mark_reused(&mut self) {
        self.reused = true;
    }

    /// Whether it was taken from the pool.
    pub fn reused(&self) -> bool {
        self.reused
    }

    /// Whether the order of answers on it is in doubt (it is closed after this response).
    pub fn in_doubt(&self) -> bool {
        self.in_doubt
    }

    /// Whether, on a reused connection, bytes were there the instant the request had been
    /// written (one `recv(2)` with `MSG_PEEK` after the first write): the answer read may be
    /// one behind. The connection is closed after this response.
    pub fn answered_early(&self) -> bool {
        self.early
    }

    /// Put the order of answers in doubt: the connection is closed after this response.
    pub fn mark_in_doubt(&mut self) {
        self.in_doubt = true;
    }

    /// Forget the request in the write buffer (a connection given back unused).
    pub fn clear_request(&mut self) {
        self.wbuf.clear();
        self.whole = false;
    }

    /// Move the request written into `self` to `to` (a retry on a new connection).
    pub fn hand_request_to(&mut self, to: &mut Conn) {
        std::mem::swap(&mut self.wbuf, &mut to.wbuf);
        to.whole = self.whole;
    }

    /// Whether the whole request is still in the write buffer (it may be sent again).
    pub fn request_resendable(&self) -> bool {
        self.whole
    }

    /// Write the request head into the write buffer: `METHOD target HTTP/1.1`, `parts`' header
    /// fields but the framing ones, then the framing `body` says: `Content-Length` for a body
    /// of known length (also `0` when the client sent `Content-Length: 0`), the client's
    /// `Transfer-Encoding` (or `chunked`) for a chunked one, never both (RFC 9112 §6.3 item 3).
    /// The framing fields are written here, not copied, so no header removal in `l7.rs` can
    /// leave a body without its framing. `close`: ask the backend to close the connection
    /// after its answer (`Connection: close`, RFC 9112 §9.6), for a connection never reused.
    pub fn encode_head(&mut self, parts: &request::Parts, body: RequestBody, close: bool) {
        let w = &mut self.wbuf;
        w.clear();
        w.extend_from_slice(parts.method.as_str().as_bytes());
        w.push(b' ');
        let target = parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/");
        w.extend_from_slice(if target.is_empty() {
            b"/"
        } else {
            target.as_bytes()
        });
        w.extend_from_slice(b" HTTP/1.1\r\n");
        for (n, v) in &parts.headers {
            if n == CONTENT_LENGTH || n == TRANSFER_ENCODING {
                continue;
            }
            put_field(w, n.as_str().as_bytes(), v.as_bytes());
        }
        match body {
            RequestBody::None if parts.headers.contains_key(CONTENT_LENGTH) => {
                put_field(w, b"content-length", b"0")
            }
            RequestBody::None => {}
            RequestBody::Length(n) => put_field(w, b"content-length", n.to_string().as_bytes()),
            RequestBody::Chunked => {
                let mut any = false;
                for v in parts.headers.get_all(TRANSFER_ENCODING) {
                    put_field(w, b"transfer-encoding", v.as_bytes());
                    any = true;
                }
                if !any {
                    put_field(w, b"transfer-encoding", b"chunked");
                }
            }
        }
        if close {
            put_field(w, b"connection", b"close");
        }
        w.extend_from_slice(b"\r\n");
        self.whole = body == RequestBody::None;
    }

    /// Gather the body already at hand behind the head, up to [`COALESCE`] bytes: poll the
    /// client's body without waiting. When it ends there, the whole request is in the write
    /// buffer ([`Conn::request_resendable`]).
    pub async fn gather(&mut self, body: &mut Incoming, kind: RequestBody) -> Result<(), Error> {
        if kind == RequestBody::None || self.whole {
            return Ok(());
        }
        let mut ended = false;
        while self.wbuf.len() < COALESCE {
            match poll_fn(|cx| Poll::Ready(Pin::new(&mut *body).poll_frame(cx))).await {
                Poll::Ready(None) => {
                    ended = true;
                    break;
                }
                Poll::Ready(Some(Ok(f))) => {
                    if let Ok(d) = f.into_data() {
                        encode_data(&mut self.wbuf, &d, kind);
                    }
                }
                Poll::Ready(Some(Err(_))) => return Err(Error::ClientBody),
                Poll::Pending => break,
            }
        }
        if ended {
            if kind == RequestBody::Chunked {
                self.wbuf.extend_from_slice(b"0\r\n\r\n");
            }
            self.whole = true;
        }
        Ok(())
    }

    /// Send the request encoded by [`Conn::encode_head`] and gathered by [`Conn::gather`],
    /// then the rest of its body. On a failure before the body was streamed past the write
    /// buffer, the buffer still holds the whole request.
    /// Each wait has its side's inactivity limit: for the next piece of the client's body,
    /// `client_idle` ([`Error::ClientTimeout`]); for the backend to take bytes, `server_idle`
    /// ([`Error::ServerTimeout`]).
    pub async fn send_request(
        &mut self,
        body: &mut Incoming,
        kind: RequestBody,
        client_idle: Duration,
        server_idle: Duration,
    ) -> Result<(), Error> {
        // A write on a connection the backend has closed usually succeeds (the reset comes
        // later); when it fails, nothing of a response was read: `Closed`.
        match tokio::time::timeout(server_idle, self.stream.write_all(&self.wbuf)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err(Error::Closed),
            Err(_) => return Err(Error::ServerTimeout),
        }
        if self.reused && (!self.buf.is_empty() || self.look_after_write()) {
            self.early = true;
        }
        if self.whole {
            return Ok(());
        }
        let mut chunk = Vec::new();
        loop {
            let next = poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx));
            match tokio::time::timeout(client_idle, next).await {
                Err(_) => return Err(Error::ClientTimeout),
                Ok(None) => break,
                Ok(Some(Ok(f))) => {
                    let Ok(d) = f.into_data() else { continue };
                    chunk.clear();
                    encode_data(&mut chunk, &d, kind);
                    if !chunk.is_empty() {
                        self.write_body(&chunk, server_idle).await?;
                    }
                }
                Ok(Some(Err(_))) => return Err(Error::ClientBody),
            }
        }
        if kind == RequestBody::Chunked {
            self.write_body(b"0\r\n\r\n", server_idle).await?;
        }
        Ok(())
    }

    /// Whether bytes are on the socket the instant after the request was written (one
    /// `recv(2)` with `MSG_PEEK`, asked of the kernel whatever the reactor believes).
    ///
    /// When the reactor still holds the readiness the last response's bytes set, the look is
    /// made through it (`try_io`): a look that finds nothing then clears that readiness, as a
    /// read that returns `WouldBlock` does, so reading the response head waits for the next
    /// readiness event instead of beginning with a `recv(2)` that returns `EAGAIN` (one system
    /// call per request). tokio clears it only if no event came since it read the readiness,
    /// before the look: bytes that arrive after the look raise an event that sets it again, so
    /// no wake-up is lost (with a reactor on another thread too). When the reactor holds no
    /// readiness, the kernel is asked directly: readiness can lag bytes that arrived an
    /// instant ago.
    fn look_after_write(&self) -> bool {
        let mut looked = false;
        let r = self.stream.try_io(tokio::io::Interest::READABLE, || {
            looked = true;
            crate::sys::peek_pending(&self.stream)
        });
        let r = if looked {
            r
        } else {
            crate::sys::peek_pending(&self.stream)
        };
        matches!(r, Ok(n) if n > 0)
    }

    /// Write body bytes past the first `send`; the backend has `server_idle` to take them.
    async fn write_body(&mut self, bytes: &[u8], server_idle: Duration) -> Result<(), Error> {
        match tokio::time::timeout(server_idle, self.stream.write_all(bytes)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(Error::Server),
            Err(_) => Err(Error::ServerTimeout),
        }
    }

    /// Read into the buffer, at least [`READ_CHUNK`] bytes of room; `Ok(0)` is EOF.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.buf.capacity() - self.buf.len() < READ_CHUNK / 4 {
            self.buf.reserve(READ_CHUNK);
        }
        loop {
            match self.stream.try_read_buf(&mut self.buf) {
                Ok(n) => return Poll::Ready(Ok(n)),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    ready!(self.stream.poll_read_ready(cx))?;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    /// Read the response head (skipping interim 1xx responses) and decide how its body is
    /// framed. `head_request`: the request was HEAD (the response has no body).
    pub async fn read_head(&mut self, head_request: bool) -> Result<ResponseHead, Error> {
        let mut got_any = !self.buf.is_empty();
        loop {
            if !self.buf.is_empty() {
                if let Some((used, head)) = parse_head(&self.buf, head_request)? {
                    self.buf.advance(used);
                    if let Some(head) = head {
                        return Ok(head);
                    }
                    // An interim response: read the next head.
                    continue;
                }
            }
            let n = poll_fn(|cx| self.poll_fill(cx)).await;
            match n {
                Ok(n) if n > 0 => got_any = true,
                _ if got_any => return Err(Error::Server),
                _ => return Err(Error::Closed),
            }
        }
    }
}

fn put_field(w: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    w.extend_from_slice(name);
    w.extend_from_slice(b": ");
    w.extend_from_slice(value);
    w.extend_from_slice(b"\r\n");
}

fn encode_data(w: &mut Vec<u8>, d: &[u8], kind: RequestBody) {
    if d.is_empty() {
        // An empty chunk would end a chunked body.
        return;
    }
    if kind == RequestBody::Chunked {
        w.extend_from_slice(format!("{:X}\r\n", d.len()).as_bytes());
        w.extend_from_slice(d);
        w.extend_from_slice(b"\r\n");
    } else {
        w.extend_from_slice(d);
    }
}

/// A parsed final response head.
#[derive(Debug)]
pub struct ResponseHead {
    pub parts: response::Parts,
    framing: Framing,
    keep_alive: bool,
}

impl ResponseHead {
    /// Whether the read buffer already holds more than this response (its Content-Length,
    /// 0 for HEAD, 204 and 304): bytes past its end, whose order is in doubt. A chunked or
    /// read-to-close body is checked at its end instead.
    pub fn overflows(&self, conn: &Conn) -> bool {
        matches!(self.framing, Framing::Length(n) if conn.buf.len() as u64 > n)
    }

    /// The response (its head) with a body that reads the rest from `conn`, failing with
    /// [`BodyError::Timeout`] when the backend sends nothing for `idle`.
    pub fn into_response(self, conn: Conn, idle: Duration) -> Response<BackendBody> {
        let body = BackendBody {
            conn: Some(conn),
            idle,
            last_read: tokio::time::Instant::now(),
            timer: None,
            decoder: BodyDecoder::new(self.framing),
            reusable: self.keep_alive && self.framing != Framing::Close,
        };
        Response::from_parts(self.parts, body)
    }
}

/// Parse a response head from `buf`: `Ok(None)` if incomplete; `Ok(Some((used, None)))` for an
/// interim 1xx response to skip; else the head and its framing (RFC 9112 §6.3, decided by
/// `netsched_util::http1`), its fields as the header map to pass on. Public for the fuzz
/// targets (crates/fuzz).
#[doc(hidden)]
pub fn parse_head(
    buf: &[u8],
    head_request: bool,
) -> Result<Option<(usize, Option<ResponseHead>)>, Error> {
    let mut fields = [http1::EMPTY_HEADER; MAX_RESPONSE_HEADERS];
    let h = match http1::parse_response_head(buf, head_request, &mut fields) {
        Ok(Parsed::Final(h)) => h,
        Ok(Parsed::Interim { used, .. }) => return Ok(Some((used, None))),
        Ok(Parsed::Partial) => return Ok(None),
        Err(_) => return Err(Error::BadResponse),
    };
    let status = StatusCode::from_u16(h.status).map_err(|_| Error::BadResponse)?;
    // One copy of the head, which every field value then shares (no allocation per field).
    let head = Bytes::copy_from_slice(&buf[..h.used]);
    let base = buf.as_ptr() as usize;
    let mut headers = HeaderMap::with_capacity(h.fields);
    for f in &fields[..h.fields] {
        let name = HeaderName::from_bytes(f.name.as_bytes()).map_err(|_| Error::BadResponse)?;
        // `Connection` with only `close` / `keep-alive` (read by the framing) and
        // `Keep-Alive` are not passed on (hop-by-hop, RFC 9110 §7.6.1), which spares `l7.rs`
        // a removal per response (nginx sends `Connection: keep-alive` on every one). Other
        // names stay, for `l7.rs` to strip the fields they name. Upgrade is never asked for;
        // the header means nothing on a response we forward. A Content-Length that
        // Transfer-Encoding overrode is not passed on (§6.3 item 3).
        if (name == CONNECTION && !http1::connection_tokens(f.value).other)
            || name == KEEP_ALIVE
            || name == UPGRADE
            || (name == CONTENT_LENGTH && h.length_overridden)
        {
            continue;
        }
        let at = f.value.as_ptr() as usize - base;
        let value = HeaderValue::from_maybe_shared(head.slice(at..at + f.value.len()))
            .map_err(|_| Error::BadResponse)?;
        headers.append(name, value);
    }
    let mut parts = Response::new(()).into_parts().0;
    parts.status = status;
    parts.version = Version::HTTP_11;
    parts.headers = headers;
    Ok(Some((
        h.used,
        Some(ResponseHead {
            parts,
            framing: h.framing,
            keep_alive: h.keep_alive,
        }),
    )))
}

/// A body error: the backend's bytes broke the framing, or the connection failed mid-body.
#[derive(Debug)]
pub enum BodyError {
    Io(io::Error),
    /// EOF before the body's end.
    Truncated,
    /// A bad chunk-size line, chunk end or trailer section.
    BadChunk,
    /// The backend sent nothing for `timeouts.server` mid-body.
    Timeout,
}

impl BodyError {
    /// The reason the backend's error is counted under (`errors{reason}`).
    pub fn reason(&self) -> &'static str {
        match self {
            BodyError::Io(_) => "server_error",
            BodyError::Truncated => "truncated_response",
            BodyError::BadChunk => "bad_response",
            BodyError::Timeout => "server_timeout",
        }
    }
}

/// Why a backend connection was not given back to its pool after a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotReusable {
    /// The body ended early, failed, was read until close, or the backend did not keep the
    /// connection alive: nothing unusual.
    Ended,
    /// Bytes followed the response's end (a second response, a body on a HEAD answer), at
    /// once or by the look when it ended: the backend misbehaved; the connection is closed
    /// so no other client reads them.
    Leftover,
    /// The order of answers was in doubt during the exchange ([`Conn::in_doubt`],
    /// [`Conn::answered_early`]).
    InDoubt,
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyError::Io(e) => write!(f, "backend body: {e}"),
            BodyError::Truncated => write!(f, "backend body: connection closed before its end"),
            BodyError::BadChunk => write!(f, "backend body: malformed chunked encoding"),
            BodyError::Timeout => write!(f, "backend body: no byte within the server timeout"),
        }
    }
}

impl std::error::Error for BodyError {}

/// A response body read from its backend connection as the server polls it.
pub struct BackendBody {
    conn: Option<Conn>,
    decoder: BodyDecoder,
    reusable: bool,
    /// Longest wait for the next byte of the body (`timeouts.server`).
    idle: Duration,
    /// When the backend last sent a byte (or the head was read).
    last_read: tokio::time::Instant,
    /// Armed only when a read has to wait (a body at hand with its head needs no timer).
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl fmt::Debug for BackendBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BackendBody({:?})", self.decoder)
    }
}

impl BackendBody {
    /// The connection, if the body was read to its end, nothing followed it in the buffer,
    /// its order was never in doubt, and it may carry another request; else why not (and the
    /// connection closes when the body is dropped). Cost: one system call (`TCP_QUICKACK`).
    ///
    /// The socket itself is not looked at here: whoever keeps the connection looks before
    /// anything else is done with it. A pooled connection is looked at (`MSG_PEEK`,
    /// [`Conn::idle_state`]) when a request takes it and at every sweep of the pool
    /// (pool.rs); one that is not kept is looked at as it is closed, so that a stray is
    /// counted (`InFlight::finish` in l7.rs, [`crate::pool::ConnPool::give`]). One look is
    /// enough: bytes that reach the socket stay there until read, and nothing reads an idle
    /// connection, so whatever a look here at the response's end would see, the look before
    /// reuse sees too, later and with whatever came in between. A look here would only
    /// repeat it, one system call per request.
    pub fn take_reusable(&mut self) -> Result<Conn, NotReusable> {
        if !self.decoder.is_done() {
            return Err(NotReusable::Ended);
        }
        match self.conn.take() {
            Some(c) if !c.buf.is_empty() => Err(NotReusable::Leftover),
            Some(c) if c.in_doubt || c.early => Err(NotReusable::InDoubt),
            Some(c) if self.reusable => {
                // Acknowledge the response now rather than with the next request: a backend
                // that holds a small answer back until its last one is acknowledged (Nagle's
                // algorithm) then lets it go while no request is outstanding, where the look
                // before reuse sees it, instead of just after the next request, where it
                // would be read as that request's answer.
                let _ = crate::sys::quickack(&c.stream);
                Ok(c)
            }
            _ => Err(NotReusable::Ended),
        }
    }

    /// Wait for the backend within the idle limit: `Ready` when the limit has passed since
    /// the last byte.
    fn poll_idle_timer(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let deadline = self.last_read + self.idle;
        let t = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if t.deadline() != deadline {
            t.as_mut().reset(deadline);
        }
        t.as_mut().poll(cx)
    }

    fn fail(&mut self, e: BodyError) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        self.conn = None;
        self.decoder = BodyDecoder::new(Framing::Length(0));
        self.reusable = false;
        Poll::Ready(Some(Err(e)))
    }
}

/// Take `n` bytes off the front of `buf`: copied when small (the buffer stays whole and is
/// reused), else split off without a copy.
fn take(buf: &mut BytesMut, n: usize) -> Bytes {
    if n <= SMALL_FRAME {
        let b = Bytes::copy_from_slice(&buf[..n]);
        buf.advance(n);
        b
    } else {
        buf.split_to(n).freeze()
    }
}

impl Body for BackendBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        loop {
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            let buf = &mut conn.buf;
            match this.decoder.step(buf) {
                Ok(Step::Data(n)) => return Poll::Ready(Some(Ok(Frame::data(take(buf, n))))),
                Ok(Step::Skip(n)) => {
                    buf.advance(n);
                    continue;
                }
                Ok(Step::End(n)) => {
                    // Trailer fields are dropped (the client was not told of trailers;
                    // `Trailer` is hop-by-hop here).
                    buf.advance(n);
                    return Poll::Ready(None);
                }
                Ok(Step::NeedMore) => {}
                Err(_) => return this.fail(BodyError::BadChunk),
            }
            // More bytes are needed.
            let filled = match conn.poll_fill(cx) {
                Poll::Ready(r) => r,
                Poll::Pending => {
                    if this.poll_idle_timer(cx).is_ready() {
                        return this.fail(BodyError::Timeout);
                    }
                    return Poll::Pending;
                }
            };
            match filled {
                Ok(0) if this.decoder.at_eof().is_ok() => return Poll::Ready(None),
                Ok(0) => return this.fail(BodyError::Truncated),
                Ok(_) => this.last_read = tokio::time::Instant::now(),
                Err(e) => return this.fail(BodyError::Io(e)),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.decoder.is_done()
    }

    fn size_hint(&self) -> SizeHint {
        match self.decoder.remaining() {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(
        text: &str,
        head_request: bool,
    ) -> Result<Option<(usize, Option<ResponseHead>)>, Error> {
        parse_head(text.as_bytes(), head_request)
    }

    fn framing(text: &str) -> (Framing, bool) {
        let (used, h) = head(text, false).unwrap().expect("complete");
        assert_eq!(used, text.find("\r\n\r\n").unwrap() + 4);
        let h = h.expect("final response");
        (h.framing, h.keep_alive)
    }

    /// The framing is `netsched_util::http1`'s (its tests go through RFC 9112 §6.3 item by
    /// item); here, what the header map passed on to the client keeps and drops.
    #[test]
    fn the_header_map_keeps_end_to_end_fields_and_drops_overridden_framing() {
        use Framing::*;
        // HEAD: no body, and its Content-Length is passed on.
        let ok5 = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
        let h = head(ok5, true).unwrap().unwrap().1.unwrap();
        assert_eq!(h.framing, Length(0));
        assert_eq!(h.parts.headers["content-length"], "5", "passed on for HEAD");
        assert_eq!(framing(ok5), (Length(5), true));
        // Transfer-Encoding beats Content-Length, which is dropped; no reuse.
        let (_, h) = head(
            "HTTP/1.1 200 OK\r\nContent-Length: 9\r\nTransfer-Encoding: chunked\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        let h = h.unwrap();
        assert_eq!((h.framing, h.keep_alive), (Chunked, false));
        assert!(!h.parts.headers.contains_key(CONTENT_LENGTH));
        assert_eq!(h.parts.headers[TRANSFER_ENCODING], "chunked");
        // Connection with only close / keep-alive, Keep-Alive and Upgrade are hop-by-hop;
        // a Connection naming another field stays for l7.rs to act on.
        let t = "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nKeep-Alive: timeout=5\r\nUpgrade: x\r\nContent-Length: 0\r\n\r\n";
        let h = head(t, false).unwrap().unwrap().1.unwrap();
        assert!(h.keep_alive);
        assert_eq!(h.parts.headers.keys().collect::<Vec<_>>(), [CONTENT_LENGTH]);
        let t = "HTTP/1.1 200 OK\r\nConnection: close, X-A\r\nContent-Length: 0\r\n\r\n";
        let h = head(t, false).unwrap().unwrap().1.unwrap();
        assert!(!h.keep_alive);
        assert_eq!(h.parts.headers[CONNECTION], "close, X-A");
        // An invalid Content-Length is a bad response.
        let t = "HTTP/1.1 200 OK\r\nContent-Length: 7, 8\r\n\r\n";
        assert_eq!(head(t, false).err(), Some(Error::BadResponse));
    }

    #[test]
    fn interim_partial_malformed_and_upgrade_heads() {
        // 1xx other than 101 is skipped: `used` covers it, no head.
        let t = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n";
        let (used, h) = head(t, false).unwrap().unwrap();
        assert_eq!((used, h.is_none()), (25, true));
        assert!(head("HTTP/1.1 200 OK\r\nContent-Le", false)
            .unwrap()
            .is_none());
        for bad in [
            "HTTP/1.1 2x0 OK\r\n\r\n",
            "HTTP/2.0 200 OK\r\n\r\n",
            "HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
            "garbage\r\n\r\n",
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n",
        ] {
            assert_eq!(head(bad, false).err(), Some(Error::BadResponse), "{bad:?}");
        }
        let many: String = (0..=MAX_RESPONSE_HEADERS)
            .map(|i| format!("X-{i}: v\r\n"))
            .collect();
        let t = format!("HTTP/1.1 200 OK\r\n{many}\r\n");
        assert_eq!(head(&t, false).err(), Some(Error::BadResponse));
    }

    #[test]
    fn field_values_share_one_copy_of_the_head() {
        let t = "HTTP/1.1 200 OK\r\nServer: x\r\nX-A: one\r\nx-a: two\r\nContent-Length: 0\r\n\r\n";
        let h = head(t, false).unwrap().unwrap().1.unwrap();
        let a: Vec<_> = h.parts.headers.get_all("x-a").iter().collect();
        assert_eq!(a, ["one", "two"]);
        assert_eq!(h.parts.status, StatusCode::OK);
    }
}

//! L7 mode: HTTP/1.1 with keep-alive; every request is scheduled on its own (HAProxy
//! `mode http`), forwarded over the chosen backend's own keep-alive pool (`pool.rs`: idle
//! connections kept per backend) by our HTTP/1.1 client (`h1.rs`), in the request's own task.
//! The client side is hyper's server. Requests go to the backend as
//! HTTP/1.1 in origin form whatever the client spoke (a proxy sends its own version, RFC 9110
//! §6.2), so an HTTP/1.0 keep-alive client still reuses backend connections.
//!
//! Hashing balancers see a [`FlowKey`] whose source and destination are both the chosen key —
//! the client address (`hash_key = "source"`), or a 128-bit hash of the Host header or of the
//! URI mapped into an IPv6 address — so dh/lblc/lblcr (which hash the destination) and sh/mh
//! (which hash the source) all key on it, as HAProxy's `balance source|hdr(host)|uri`.
//!
//! The client's address reaches the backends in request headers, as `forwarded` chooses
//! (forwarded.rs), and, for a server with `send_proxy`, in a PROXY protocol header first on
//! each of its connections, which then carry one request each (proxy_proto.rs, [`send`]).
//!
//! Malformed requests are answered 400 by hyper's parser and the connection closed; a request
//! head that does not arrive within `timeouts.header` closes the connection (hyper
//! `header_read_timeout`). Heads are at most [`MAX_HEAD_BYTES`].
//!
//! Safety as a proxy (docs/balance.md, "Security"):
//! - The request body's framing is decided from the fields as received (RFC 9112 §6.3), before
//!   any hop-by-hop field is removed, and `h1.rs` writes it itself. A request whose
//!   `Connection` names `Content-Length` or `Transfer-Encoding`, or whose Transfer-Encoding
//!   does not end in one `chunked`, is refused with 400 and its connection closed: such a
//!   request is only ever an attempt to make two parsers disagree on where it ends.
//! - Host follows RFC 9112 §3.2: one valid Host on every HTTP/1.1 request (else 400), an
//!   absolute-form target's authority replaces it; CONNECT is refused (405).
//!   `tests/conformance.rs` runs a corpus of such cases, beside HAProxy when it is installed.
//! - Every wait has its side's inactivity limit (`timeouts.client` for the client's body and
//!   for a client that stops reading the response, [`crate::client_io`]; `timeouts.server`
//!   for the backend through the whole body), and each failure is counted against the side
//!   that caused it.
//! - A request goes again on a new connection only when it is idempotent and whole (`h1.rs`).
//! - Which requests may take an idle pooled connection is `http_reuse` (HAProxy's
//!   `http-reuse`, configuration manual section 4.2): under `safe` (the default) only those
//!   that may be sent twice, so a backend closing an idle connection (RFC 9112 §9.3.1) never
//!   fails a request that cannot be resent, and, as HAProxy's `safe`, only those that are not
//!   the first of their client connection. The others get a new connection, whose first
//!   response cannot be an answer to anything else: a client that sends one request per
//!   connection, and every request that may not be sent twice, never meets a stray response
//!   (`h1.rs`, "Answer order"). Cost: a connect per client connection and per such request.

use crate::access_log::{self, AccessLog, ClientCert, Entry, Pending, TlsSession};
use crate::classes::Classifier;
use crate::client_io::{ClientStream, WriteIdleLimit};
use crate::config::{HashKey, HttpReuse};
use crate::forwarded::ClientFor;
use crate::h1::{self, BackendBody, Conn, IdleState, NotReusable, RequestBody};
use crate::http2::{self, Protocol, Starved, StreamMark};
use crate::proxy_proto;
use crate::sent_bytes::SentBytes;
use crate::service::{Lease, Refusal, Service};
use crate::stop::{Acceptor, Stop};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{HeaderName, HeaderValue, CONNECTION, CONTENT_LENGTH, HOST, TRANSFER_ENCODING};
use hyper::http::{request, response};
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::{TokioIo, TokioTimer};
use netsched_core::balance::FlowKey;
use std::convert::Infallible;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// Largest request head (request line + headers) accepted.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// A response body: a short one of ours, or the backend's, holding the lease and the backend
/// connection until it ends; with the request's access log entry when the log is on.
pub struct ProxyBody {
    kind: Kind,
    log: Option<Box<Tail>>,
    /// An HTTP/2 stream's place in its connection's watchdog (http2.rs).
    stream: Option<StreamMark>,
}

enum Kind {
    Local(Full<Bytes>),
    Backend(BackendBody, InFlight),
}

/// Where a response's bytes are counted for the access log.
enum Counted {
    /// HTTP/1.1: where they leave the connection's socket, head included
    /// ([`crate::sent_bytes`]).
    Connection(Arc<SentBytes>),
    /// HTTP/2: the stream's DATA bytes so far (its HPACK-coded head shares the connection's
    /// compression state with every other stream and is not anyone's alone).
    Stream(u64),
}

/// The access log's view of a response being sent: how it ended, and where its bytes are
/// counted.
struct Tail {
    pending: Pending,
    sent: Counted,
    /// The state when the body ends normally (`--`, or the local answer's own state).
    normal: [u8; 2],
    ended: Option<[u8; 2]>,
    /// The connection's mark: the next request's Tq starts when this response ends.
    mark: Arc<Mutex<Instant>>,
}

impl ProxyBody {
    fn local(body: Full<Bytes>) -> Self {
        ProxyBody {
            kind: Kind::Local(body),
            log: None,
            stream: None,
        }
    }

    /// The entry is sent when this body ends and is flushed (or is dropped unfinished: the
    /// client left).
    fn attach(
        &mut self,
        pending: Pending,
        sent: Counted,
        normal: [u8; 2],
        mark: Arc<Mutex<Instant>>,
    ) {
        self.log = Some(Box::new(Tail {
            pending,
            sent,
            normal,
            ended: None,
            mark,
        }));
    }

    fn log_frame(&mut self, r: &Poll<Option<Result<Frame<Bytes>, h1::BodyError>>>) {
        let end = self.is_end_stream();
        let Some(t) = self.log.as_mut() else { return };
        match r {
            Poll::Ready(Some(Ok(f))) => {
                if let (Counted::Stream(n), Some(d)) = (&mut t.sent, f.data_ref()) {
                    *n += d.len() as u64;
                }
                if end {
                    t.ended = Some(t.normal);
                }
            }
            Poll::Ready(None) => t.ended = Some(t.normal),
            Poll::Ready(Some(Err(h1::BodyError::Timeout))) => t.ended = Some(*b"sD"),
            Poll::Ready(Some(Err(_))) => t.ended = Some(*b"SD"),
            Poll::Pending => {}
        }
    }
}

/// A backend's lease and connection while its response body is forwarded. When the body has
/// been read to its end the connection goes back to the backend's pool, then the lease is
/// released (so queued work woken by the release finds the connection idle). A body that
/// fails, or is dropped unfinished (the client left), closes the connection; the lease is
/// released either way.
pub struct InFlight {
    lease: Option<Lease>,
}

impl InFlight {
    fn finish(&mut self, body: &mut BackendBody) {
        if let Some(lease) = self.lease.take() {
            let (m, name) = (lease.metrics(), &lease.backend.name);
            let stray = || {
                m.error(name, "unexpected_data");
                m.closed_in_doubt(name);
            };
            match body.take_reusable() {
                // `never`, or a server with `send_proxy` (its connection's header names one
                // client): no pool; the connection closes here (it asked for the close), after
                // the look a pooled one gets before reuse (h1.rs, "One look is enough").
                Ok(conn)
                    if lease.runtime.http_reuse == HttpReuse::Never
                        || lease.backend.send_proxy.is_some() =>
                {
                    if conn.idle_state() == IdleState::Unexpected {
                        stray();
                    }
                }
                Ok(conn) => lease.backend.conns.give(conn, stray),
                Err(NotReusable::Leftover) => stray(),
                Err(NotReusable::InDoubt) => m.closed_in_doubt(name),
                Err(NotReusable::Ended) => {}
            }
        }
    }

    /// The backend's body failed: counted against the backend (the client connection then
    /// ends, and `serve` does not count it again).
    fn failed(&self, e: &h1::BodyError) {
        if let Some(lease) = &self.lease {
            lease.metrics().error(&lease.backend.name, e.reason());
        }
    }
}

impl Drop for ProxyBody {
    fn drop(&mut self) {
        // hyper stops polling a body once it says it has ended (and never polls one that is
        // empty: HEAD, 204, 304, Content-Length: 0), so the end is also decided here.
        let end = self.is_end_stream();
        if let (Some(m), true) = (&mut self.stream, end) {
            m.finished();
        }
        if let Kind::Backend(b, flight) = &mut self.kind {
            flight.finish(b);
        }
        if let Some(t) = self.log.take() {
            *t.mark.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
            let state = t.ended.or(if end { Some(t.normal) } else { None });
            match (t.sent, state) {
                // Its last bytes are in hyper's buffer: logged once they are flushed.
                (Counted::Connection(sent), Some(state)) => sent.ended(t.pending, state),
                // Dropped before its end: the client connection went away mid-response.
                (Counted::Connection(sent), None) => sent.cut(t.pending, *b"CD"),
                // An HTTP/2 stream's end, or its reset by the client.
                (Counted::Stream(n), state) => t.pending.finish(n, state.unwrap_or(*b"CD")),
            }
        }
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = h1::BodyError;
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, h1::BodyError>>> {
        let this = self.get_mut();
        if let Some(m) = &mut this.stream {
            m.polled();
        }
        let r = match &mut this.kind {
            Kind::Local(f) => Pin::new(f).poll_frame(cx).map_err(|never| match never {}),
            Kind::Backend(b, flight) => {
                let r = Pin::new(&mut *b).poll_frame(cx);
                match &r {
                    // The request is done on the backend: reuse its connection (if it read
                    // to its end and may be kept), free its slot.
                    Poll::Ready(None) => flight.finish(b),
                    Poll::Ready(Some(Err(e))) => {
                        flight.failed(e);
                        flight.finish(b);
                    }
                    Poll::Ready(Some(Ok(_))) if b.is_end_stream() => flight.finish(b),
                    _ => {}
                }
                r
            }
        };
        if this.log.is_some() {
            this.log_frame(&r);
        }
        let more = matches!(r, Poll::Ready(Some(Ok(_))));
        if this.stream.is_some() && more && !this.is_end_stream() {
            if let Some(m) = &mut this.stream {
                m.handed();
            }
        }
        r
    }
    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Local(f) => f.is_end_stream(),
            Kind::Backend(b, _) => b.is_end_stream(),
        }
    }
    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Local(f) => f.size_hint(),
            Kind::Backend(b, _) => b.size_hint(),
        }
    }
}

fn local(status: StatusCode, text: &str) -> Response<ProxyBody> {
    let mut r = Response::new(ProxyBody::local(Full::new(Bytes::from(format!(
        "{text}\n"
    )))));
    *r.status_mut() = status;
    r.headers_mut()
        .insert("content-type", HeaderValue::from_static("text/plain"));
    r
}

/// A local answer after which the client connection is closed (hyper closes after a
/// response that says `Connection: close`): the request's body, if any, is not read.
fn local_closing(status: StatusCode, text: &str) -> Response<ProxyBody> {
    let mut r = local(status, text);
    r.headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    r
}

/// Why a client connection ended in error, as counted in `refused{reason}`; `None` when the
/// backend's body failed (already counted against the backend by [`InFlight::failed`]).
fn client_end_reason(e: &hyper::Error) -> Option<&'static str> {
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        if c.is::<h1::BodyError>() {
            return None;
        }
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::TimedOut {
                return Some("client_timeout");
            }
        }
        cause = c.source();
    }
    Some(if e.is_timeout() {
        "header_timeout"
    } else if e.is_parse() || e.is_parse_too_large() {
        "bad_request"
    } else {
        "client_error"
    })
}

/// A request head as received, checked before it is forwarded: its target and Host
/// ([`check_target`]), then its body's framing ([`request_framing`]); `Err` with the status and
/// reason of the refusal. Public for the fuzz targets (crates/fuzz), which feed it every head
/// hyper's server reads.
pub fn check_request(
    req: &mut Request<Incoming>,
) -> Result<RequestBody, (StatusCode, &'static str)> {
    check_target(req)
        .and_then(|()| request_framing(req).map_err(|why| (StatusCode::BAD_REQUEST, why)))
}

/// hyper's HTTP/1 server as the balancer reads a client connection with it: heads of at most
/// [`MAX_HEAD_BYTES`] (the buffer at least 8 KiB), `header_timeout` for a whole head,
/// keep-alive, one `send` per flush. Public for the fuzz targets (crates/fuzz).
pub fn h1_server(header_timeout: Duration) -> hyper::server::conn::http1::Builder {
    let mut b = hyper::server::conn::http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .max_buf_size(MAX_HEAD_BYTES.max(8192))
        .keep_alive(true)
        // One `send` per flush (head and body copied into one buffer) instead of
        // a `writev`: the kernel's writev path costs more (see pool.rs).
        .writev(false);
    b
}

/// Whether the request's target and Host agree with RFC 9112 §3.2: an HTTP/1.1 request has
/// exactly one Host field, any Host is a valid authority, and CONNECT (a tunnel, which a
/// load balancer does not open) is refused. An absolute-form target's authority replaces the
/// Host field (§3.2.2), so the backend and the hashing see the same host.
fn check_target(req: &mut Request<Incoming>) -> Result<(), (StatusCode, &'static str)> {
    if req.method() == Method::CONNECT {
        return Err((StatusCode::METHOD_NOT_ALLOWED, "CONNECT is not served"));
    }
    let bad = |why| Err((StatusCode::BAD_REQUEST, why));
    let hosts = req.headers().get_all(HOST).iter().count();
    if hosts > 1 {
        return bad("bad request: more than one Host");
    }
    // HTTP/2 names the host in `:authority` (http2.rs checks it against Host).
    if hosts == 0 && req.version() == hyper::Version::HTTP_11 {
        return bad("bad request: no Host");
    }
    if let Some(h) = req.headers().get(HOST) {
        let valid = !h.is_empty()
            && !h.as_bytes().contains(&b'@')
            && hyper::http::uri::Authority::try_from(h.as_bytes()).is_ok();
        if !valid {
            return bad("bad request: invalid Host");
        }
    }
    if let Some(a) = req.uri().authority() {
        match HeaderValue::from_str(a.as_str()) {
            Ok(v) if !a.as_str().contains('@') => {
                req.headers_mut().insert(HOST, v);
            }
            _ => return bad("bad request: invalid target authority"),
        }
    }
    Ok(())
}

/// Whether a Transfer-Encoding list ends in `chunked` and names it once (RFC 9112 §6.1,
/// §6.3 item 4: any other request framing cannot be read, so it is refused).
fn chunked_once_last(h: &hyper::HeaderMap) -> bool {
    let codings: Vec<&[u8]> = h
        .get_all(TRANSFER_ENCODING)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&c| c == b','))
        .map(|t| t.trim_ascii())
        .filter(|t| !t.is_empty())
        .collect();
    let chunked = |t: &[u8]| t.eq_ignore_ascii_case(b"chunked");
    codings.last().is_some_and(|t| chunked(t)) && codings.iter().filter(|t| chunked(t)).count() == 1
}

/// How the request's body is framed, from its fields as received (RFC 9112 §6.3): `Err` with
/// the reason for a request that must be refused (framing named in `Connection`, a
/// Transfer-Encoding that is not `chunked` once and last). A request with both
/// Content-Length and Transfer-Encoding reaches here without the Content-Length: hyper's
/// server drops it, reads the chunked body and closes the connection after the response
/// (§6.3 item 3).
fn request_framing(req: &Request<Incoming>) -> Result<RequestBody, &'static str> {
    let h = req.headers();
    let names_framing = h
        .get_all(CONNECTION)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&c| c == b','))
        .map(|t| t.trim_ascii())
        .any(|t| {
            t.eq_ignore_ascii_case(b"content-length")
                || t.eq_ignore_ascii_case(b"transfer-encoding")
        });
    if names_framing {
        return Err("bad request: Connection names a framing field");
    }
    let (te, cl) = (
        h.contains_key(TRANSFER_ENCODING),
        h.contains_key(CONTENT_LENGTH),
    );
    if te && !chunked_once_last(h) {
        return Err("bad request: Transfer-Encoding must end in chunked, named once");
    }
    let body = req.body();
    Ok(if body.is_end_stream() {
        RequestBody::None
    } else if te {
        RequestBody::Chunked
    } else {
        // hyper's server gives a body only with one of the two (§6.3 item 7); its length is
        // the exact size hint of a Content-Length body.
        match body.size_hint().exact() {
            Some(n) if cl => RequestBody::Length(n),
            _ => RequestBody::Chunked,
        }
    })
}

pub async fn serve(
    listener: TcpListener,
    svc: Arc<Service>,
    conns: Arc<Semaphore>,
    hash_key: HashKey,
    tls: Option<Arc<crate::tls::Certificates>>,
    stop: Stop,
) {
    // Accepted sockets inherit TCP_NODELAY from the listener; else it is set per connection.
    let inherited = crate::sys::set_nodelay(&listener).is_ok();
    let frontend = listener
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    // A listener bound to one address: every connection's local address is that one, so
    // no getsockname per connection.
    let bound = (!frontend.ip().is_unspecified()).then_some(frontend);
    let mut acceptor = Acceptor::new(listener, stop.clone());
    while let Some((stream, peer)) = acceptor.next().await {
        let Ok(permit) = conns.clone().try_acquire_owned() else {
            svc.metrics.refuse("max_connections");
            continue;
        };
        let local = bound
            .or_else(|| stream.local_addr().ok())
            .unwrap_or(frontend);
        if !inherited {
            let _ = stream.set_nodelay(true);
        }
        let conn = Connection {
            svc: svc.clone(),
            peer,
            local,
            frontend,
            hash_key,
            stop: stop.clone(),
        };
        let tls = tls.clone();
        tokio::spawn(async move {
            let mut conn = conn;
            conn.svc.metrics.client_connections.inc();
            if let Some((stream, protocol, client)) = conn.open(stream, tls).await {
                conn.svc.metrics.client_protocol(protocol.name());
                conn.serve(stream, protocol, client).await;
            }
            conn.svc.metrics.client_connections.dec();
            drop(permit);
        });
    }
}

/// One client connection: what its requests need of it.
struct Connection {
    svc: Arc<Service>,
    peer: SocketAddr,
    local: SocketAddr,
    frontend: SocketAddr,
    hash_key: HashKey,
    stop: Stop,
}

impl Connection {
    /// The PROXY header of a client from an `accept_proxy` network (before TLS; its addresses
    /// stand for the connection's from here on: proxy_proto.rs), then the TLS handshake, or
    /// on a plain listener the first bytes: the stream and the protocol it speaks
    /// (`http2.rs`), each bounded by the time allowed for a request head (`timeouts.header`).
    /// `None`: the client failed or left; counted.
    async fn open(
        &mut self,
        mut stream: TcpStream,
        tls: Option<Arc<crate::tls::Certificates>>,
    ) -> Option<(ClientStream, Protocol, ClientTls)> {
        let rt = self.svc.runtime();
        let ends = (self.peer, self.local);
        (self.peer, self.local) =
            crate::proxy_proto::accept_for(&mut stream, ends, &self.svc, &rt).await?;
        let limit = Duration::from_nanos(rt.timeouts.header);
        let m = &self.svc.metrics;
        let Some(tls) = tls else {
            return match http2::sniff(&stream, limit).await {
                Ok(p) => Some((ClientStream::Plain(stream), p, ClientTls::default())),
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                    m.refuse("header_timeout");
                    None
                }
                Err(_) => None,
            };
        };
        let (s, (client, protocol)) = handshake(&tls, stream, &self.svc, limit).await?;
        Some((ClientStream::Tls(Box::new(s)), protocol, client))
    }

    /// Serve the connection's requests until it ends, the stop ends it, or the stop's cut.
    async fn serve(&self, stream: ClientStream, protocol: Protocol, tls: ClientTls) {
        let rt = self.svc.runtime();
        let svc = self.svc.clone();
        let stop = self.stop.clone();
        let client_limit = Duration::from_nanos(rt.timeouts.client);
        // For the stop: whether a request has begun here.
        let begun = Arc::new(AtomicBool::new(false));
        // HTTP/1.1 counts a response's bytes where they leave the socket (sent_bytes.rs); an
        // HTTP/2 stream counts its own DATA bytes.
        let sent = (protocol == Protocol::Http1 && svc.access.get().is_some())
            .then(|| Arc::new(SentBytes::default()));
        let streams = (protocol == Protocol::Http2).then(Starved::new);
        let over_tls = matches!(stream, ClientStream::Tls(_));
        let io = WriteIdleLimit::new(TokioIo::new(stream), client_limit).counting(sent.clone());
        let handler = Arc::new(Handler {
            client: ClientSide {
                headers: ClientFor::new(self.peer.ip()).over_tls(over_tls),
                local: self.local,
                cert: tls.cert,
                session: tls.session,
            },
            peer: self.peer,
            frontend: self.frontend,
            hash_key: self.hash_key,
            begun: begun.clone(),
            stopping: stop.stopping(),
            log: svc.access.get().cloned(),
            mark: Arc::new(Mutex::new(Instant::now())),
            sent,
            streams: streams.clone(),
        });
        let service = hyper::service::service_fn(move |req| {
            let (svc, h) = (svc.clone(), handler.clone());
            // An HTTP/2 stream is marked when hyper takes it, before its future first runs:
            // one the client resets before that is counted as a reset too (http2.rs).
            let stream = h.streams.clone().map(StreamMark::new);
            async move { Ok::<_, Infallible>(h.request(req, stream, &svc).await) }
        });
        // The reason is counted before the connection is dropped (and its socket closed), so a
        // client that sees the end also sees it counted.
        let count = |ended: Option<&'static str>| {
            if let Some(reason) = ended {
                self.svc.metrics.refuse(reason);
            }
        };
        match streams {
            None => {
                let b = h1_server(Duration::from_nanos(rt.timeouts.header));
                let conn = std::pin::pin!(b.serve_connection(io, service));
                count(drive(conn, &stop, &begun, None, client_limit).await);
            }
            Some(streams) => {
                let conn = http2::builder(MAX_HEAD_BYTES as u32).serve_connection(io, service);
                let conn = std::pin::pin!(conn);
                count(drive(conn, &stop, &begun, Some(&streams), client_limit).await);
            }
        }
    }
}

/// What hyper's two server connections have in common here.
trait ServerConn: Future<Output = Result<(), hyper::Error>> {
    fn graceful_shutdown(self: Pin<&mut Self>);
}

impl<I, S, B> ServerConn for hyper::server::conn::http1::Connection<I, S>
where
    S: hyper::service::HttpService<Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    B: Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn graceful_shutdown(self: Pin<&mut Self>) {
        hyper::server::conn::http1::Connection::graceful_shutdown(self)
    }
}

impl<I, S, B, E> ServerConn for hyper::server::conn::http2::Connection<I, S, E>
where
    S: hyper::service::HttpService<Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    B: Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    E: hyper::rt::bounds::Http2ServerConnExec<S::Future, B>,
{
    fn graceful_shutdown(self: Pin<&mut Self>) {
        hyper::server::conn::http2::Connection::graceful_shutdown(self)
    }
}

/// Run a client connection until it ends; the reason it ended in error, for `refused{reason}`.
/// The caller owns the connection and drops it (closing its socket) after counting the reason.
///
/// At the stop, keep-alive goes off: an idle connection closes now, one with a request in
/// flight after its response (HTTP/1.1 `Connection: close`, HTTP/2 `GOAWAY`); stop.rs. Not
/// before the first request has begun: hyper would close the connection unread, and a client
/// that connected before the listener closed (maybe from its accept queue) would lose its
/// request. Its first request is answered with `Connection: close` instead (`Handler`); one
/// that never comes ends at `timeouts.header`.
///
/// An HTTP/2 connection (`streams`) is also watched once a second: one whose stream has
/// waited longer than `timeouts.client` for the client's window ends (`h2_starved`), and one
/// without a stream for as long gets `GOAWAY` (http2.rs). An HTTP/1.1 connection has no
/// such timer.
async fn drive<C: ServerConn>(
    mut conn: Pin<&mut C>,
    stop: &Stop,
    begun: &AtomicBool,
    streams: Option<&Starved>,
    client_limit: Duration,
) -> Option<&'static str> {
    let h2 = streams.is_some();
    let watched = async {
        // The watchdog's second, HTTP/2 only: an HTTP/1.1 connection has no timer of its own.
        let mut tick = streams.map(|_| tokio::time::interval(Duration::from_secs(1)));
        let mut closing = false;
        loop {
            tokio::select! {
                r = conn.as_mut() => return r.map(Ok),
                _ = stop.draining(), if !closing => {
                    if begun.load(Ordering::SeqCst) {
                        conn.as_mut().graceful_shutdown();
                    }
                    closing = true;
                }
                _ = async { streams?.flood.notified().await; Some(()) }, if h2 => {
                    return Ok(Err("h2_rapid_reset"));
                }
                _ = async { tick.as_mut()?.tick().await; Some(()) }, if h2 => {
                    let Some(s) = streams else { continue };
                    s.tick();
                    if s.starved(client_limit) {
                        return Ok(Err("h2_starved"));
                    }
                    if !closing && s.idle(client_limit) {
                        conn.as_mut().graceful_shutdown();
                        closing = true;
                    }
                }
            }
        }
    };
    match stop.until_cut(watched).await {
        Some(Ok(Err(reason))) => Some(reason),
        Some(Ok(Ok(()))) | None => None,
        Some(Err(e)) if h2 => http2::end_reason(&e),
        Some(Err(e)) => client_end_reason(&e),
    }
}

/// A client connection's per-request work, shared by its requests (its HTTP/2 streams run
/// in tasks of their own).
struct Handler {
    client: ClientSide,
    peer: SocketAddr,
    frontend: SocketAddr,
    hash_key: HashKey,
    /// Whether a request has begun here (`http_reuse = "safe"`, the stop).
    begun: Arc<AtomicBool>,
    /// Whether the stop has begun.
    stopping: Arc<AtomicBool>,
    log: Option<Arc<AccessLog>>,
    /// Where the next request's Tq starts (the accept, then each response's end).
    mark: Arc<Mutex<Instant>>,
    /// HTTP/1.1 with the access log on: the bytes the connection wrote.
    sent: Option<Arc<SentBytes>>,
    /// HTTP/2: the connection's streams, for its watchdog.
    streams: Option<Arc<Starved>>,
}

impl Handler {
    /// One request; `stream` is its HTTP/2 stream's mark (`None` for HTTP/1.1).
    async fn request(
        &self,
        mut req: Request<Incoming>,
        mut stream: Option<StreamMark>,
        svc: &Arc<Service>,
    ) -> Response<ProxyBody> {
        // The first request of this client connection (`http_reuse = "safe"`).
        let first = !self.begun.swap(true, Ordering::SeqCst);
        let last = self.stopping.load(Ordering::SeqCst);
        let logged = self.log.clone().map(|log| {
            let line = access_log::request_line(
                req.method().as_str(),
                &req.uri().to_string(),
                &format!("{:?}", req.version()),
            );
            (log, line, Instant::now())
        });
        let mut t = Timing::new(logged.is_some());
        if t.on {
            t.cert = self.client.cert.clone();
            t.tls = self.client.session;
        }
        let mut resp = match stream.is_some().then(|| http2::check_request(&mut req)) {
            Some(Err(why)) => {
                svc.metrics.refuse("bad_request");
                t.state = *b"PR";
                local(StatusCode::BAD_REQUEST, why)
            }
            _ => {
                forward(
                    req,
                    self.peer,
                    &self.client,
                    svc,
                    self.hash_key,
                    first,
                    &mut t,
                )
                .await
            }
        };
        let code = crate::metrics::code_index(resp.status().as_u16());
        match &t.backend {
            Some(b) => b.responses[code].inc(),
            None => svc.metrics.no_backend_responses[code].inc(),
        };
        if stream.is_some() {
            svc.metrics.h2_streams.inc();
            // Framing is HTTP/2's own (RFC 9113 §8.2.2).
            resp.headers_mut().remove(TRANSFER_ENCODING);
        } else if last {
            resp.headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
        }
        if let Some((log, line, head_at)) = logged {
            let pending = t.pending(
                log,
                &self.mark,
                head_at,
                self.peer,
                self.frontend,
                line,
                &resp,
            );
            let counted = match &self.sent {
                Some(sent) => Counted::Connection(sent.clone()),
                None => Counted::Stream(0),
            };
            resp.body_mut()
                .attach(pending, counted, t.state, self.mark.clone());
        }
        if let Some(m) = &mut stream {
            // Waiting for hyper to poll it (for the client's window, if it gives none).
            m.handed();
        }
        resp.body_mut().stream = stream;
        resp
    }
}

fn key_addr(req: &Request<Incoming>, peer: SocketAddr, hash_key: HashKey) -> IpAddr {
    let hashed = |part: &[u8]| {
        let mut a = std::collections::hash_map::DefaultHasher::new();
        part.hash(&mut a);
        let mut b = std::collections::hash_map::DefaultHasher::new();
        (part, 0x9e37u16).hash(&mut b);
        let v = ((a.finish() as u128) << 64) | b.finish() as u128;
        IpAddr::V6(Ipv6Addr::from(v))
    };
    match hash_key {
        HashKey::Source => peer.ip(),
        HashKey::Host => {
            let host = req
                .headers()
                .get(HOST)
                .map(|h| h.as_bytes())
                .or(req.uri().host().map(|h| h.as_bytes()))
                .unwrap_or(b"");
            hashed(&host.to_ascii_lowercase())
        }
        HashKey::Uri => hashed(
            req.uri()
                .path_and_query()
                .map(|p| p.as_str())
                .unwrap_or("/")
                .as_bytes(),
        ),
    }
}

/// Hop-by-hop headers (RFC 9110 §7.6.1) are not forwarded.
static HOP: [HeaderName; 7] = [
    CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    hyper::header::TE,
    hyper::header::TRAILER,
    hyper::header::UPGRADE,
    hyper::header::PROXY_AUTHORIZATION,
];

/// Remove the hop-by-hop headers, and those named in `Connection`. One pass over the names in
/// the common case that there are none (a request or response has a handful of headers; a
/// removal per hop-by-hop name would hash every one of them).
fn strip_hop_by_hop(h: &mut hyper::HeaderMap) {
    if !h.keys().any(|k| HOP.contains(k)) {
        return;
    }
    let named: Vec<HeaderName> = h
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for n in named {
        h.remove(n);
    }
    for n in &HOP {
        h.remove(n);
    }
}

/// The inactivity limits of one exchange.
#[derive(Clone, Copy)]
struct Limits {
    connect: Duration,
    client: Duration,
    server: Duration,
}

/// Send the request to an idle connection of `b`, or a new one, and read the response head.
///
/// `http_reuse` decides which requests may take an idle pooled connection: `never` none (a new
/// connection, which asks the backend to close it after its answer), `always` all, `safe`
/// only a request that is not the first of its client connection (`first`) and may be sent
/// twice (RFC 9110 §9.2.2): idempotent, and whole in the write buffer once the body at hand
/// is gathered (no body, or all of it in ≤ 16 KiB). Any other gets a new connection (counted
/// in `reuse_new_connections`); an idle one taken before its body turned out incomplete goes
/// back to the pool unused.
///
/// On a reused connection, two outcomes send the request once more on a new connection (each
/// counted in `retries`), only if it may be sent twice: EOF or a reset before any response
/// byte (the backend closed the idle connection), or an answer whose order is in doubt (more
/// than its own Content-Length at hand: which response is this request's is not known; the
/// connection is closed and counted in `closed_in_doubt`). A request that may not be sent
/// twice (only under `always` on a reused connection) gets 502 `server_error` in the first
/// case and 502 `unexpected_data` in the second, rather than an answer that may be another
/// request's. Bytes already there the instant the request was written (an early answer) are
/// given as the answer, and the connection closes after it. A new connection's failure is
/// final.
///
/// `proxy` is the PROXY protocol header of a server with `send_proxy` (empty for the others),
/// written first on every new connection. Such a connection describes one client, so it
/// carries this one request and is closed after its response, as under `never`, whatever
/// `http_reuse` says (proxy_proto.rs).
#[allow(clippy::too_many_arguments)]
async fn send(
    lease: &Lease,
    parts: &request::Parts,
    mut body: Incoming,
    kind: RequestBody,
    first: bool,
    limits: Limits,
    proxy: &[u8],
    t: &mut Timing,
) -> Result<(h1::ResponseHead, Conn), h1::Error> {
    let b = &lease.backend;
    let metrics = lease.metrics();
    let policy = if b.send_proxy.is_some() {
        HttpReuse::Never
    } else {
        lease.runtime.http_reuse
    };
    let idempotent = h1::idempotent(&parts.method);
    let may_reuse = match policy {
        HttpReuse::Never => false,
        HttpReuse::Safe => idempotent && !first,
        HttpReuse::Always => true,
    };
    let connecting = Instant::now();
    // The requests in flight on the backend (its leases, this one's included) bound the
    // connections in use: the pool's idle bound follows their peak (pool.rs).
    b.conns.in_use(b.active.get().max(1) as usize);
    let stray = || {
        metrics.error(&b.name, "unexpected_data");
        metrics.closed_in_doubt(&b.name);
    };
    let idle = if may_reuse {
        b.conns.take(stray)
    } else {
        metrics.reuse_new_connection(&b.name);
        None
    };
    let mut conn = match idle {
        Some(c) => c,
        None => Conn::connect_with(b.addr, limits.connect, proxy).await?,
    };
    conn.encode_head(parts, kind, policy == HttpReuse::Never);
    conn.gather(&mut body, kind).await?;
    if conn.reused() && policy == HttpReuse::Safe && !conn.request_resendable() {
        // Its body is not wholly at hand: it may not be sent twice, so not over a connection
        // whose state is unknown. The idle connection carried nothing and goes back.
        metrics.reuse_new_connection(&b.name);
        let fresh = match Conn::connect_with(b.addr, limits.connect, proxy).await {
            Ok(c) => c,
            Err(e) => {
                conn.clear_request();
                b.conns.give(conn, stray);
                return Err(e);
            }
        };
        let mut idle = std::mem::replace(&mut conn, fresh);
        idle.hand_request_to(&mut conn);
        idle.clear_request();
        b.conns.give(idle, stray);
    }
    t.tc = access_log::ms(connecting.elapsed());
    let mut sent = Instant::now();
    let head_request = parts.method == Method::HEAD;
    loop {
        let r = match conn
            .send_request(&mut body, kind, limits.client, limits.server)
            .await
        {
            Ok(()) => tokio::time::timeout(limits.server, conn.read_head(head_request))
                .await
                .unwrap_or(Err(h1::Error::ServerTimeout)),
            Err(e) => Err(e),
        };
        let resendable = conn.reused() && conn.request_resendable() && idempotent;
        match r {
            Ok(head) => {
                if head.overflows(&conn) {
                    conn.mark_in_doubt();
                }
                // A new connection's first response is this request's answer, whatever
                // follows it (the connection then closes after it). An early answer on a
                // reused one is given: it is far more often a fast answer than a shifted one,
                // and sending the request again would hand a well-behaved backend a duplicate.
                // The connection closes after it (`take_reusable`, counted then).
                let doubt = conn.in_doubt();
                if !conn.reused() || !doubt {
                    t.tr = access_log::ms(sent.elapsed());
                    return Ok((head, conn));
                }
                // Which of the answers at hand is this request's is not known: none is given
                // to the client; the connection closes.
                metrics.closed_in_doubt(&b.name);
                if !resendable {
                    return Err(h1::Error::InDoubt);
                }
            }
            Err(h1::Error::Closed) if resendable => {}
            Err(h1::Error::Closed) => return Err(h1::Error::Server),
            Err(e) => return Err(e),
        }
        metrics.retry(&b.name);
        let connecting = Instant::now();
        let mut fresh = Conn::connect_with(b.addr, limits.connect, proxy).await?;
        t.tc += access_log::ms(connecting.elapsed());
        sent = Instant::now();
        conn.hand_request_to(&mut fresh);
        conn = fresh;
    }
}

/// What the access log records of one request's way through [`forward`] (timers in ms, -1
/// for a step not reached; access_log.rs).
struct Timing {
    on: bool,
    tw: i64,
    tc: i64,
    tr: i64,
    server: Option<String>,
    /// The termination state if the response ends normally (docs/balance.md).
    state: [u8; 2],
    /// The server chosen, whose `http_responses_total` counts the response.
    backend: Option<Arc<crate::service::BackendRef>>,
    cert: ClientCert,
    tls: Option<TlsSession>,
}

impl Timing {
    fn new(on: bool) -> Self {
        Timing {
            on,
            tw: -1,
            tc: -1,
            tr: -1,
            server: None,
            state: *b"--",
            backend: None,
            cert: ClientCert::NotAsked,
            tls: None,
        }
    }

    /// The entry for this request, sent when its response ends.
    #[allow(clippy::too_many_arguments)]
    fn pending(
        &mut self,
        log: Arc<AccessLog>,
        mark: &Mutex<Instant>,
        head_at: Instant,
        client: SocketAddr,
        frontend: SocketAddr,
        request: String,
        resp: &Response<ProxyBody>,
    ) -> Pending {
        let start = *mark.lock().unwrap_or_else(|p| p.into_inner());
        let date = SystemTime::now()
            .checked_sub(start.elapsed())
            .unwrap_or_else(SystemTime::now);
        Pending {
            log,
            start,
            entry: Entry {
                client,
                date,
                frontend,
                server: self.server.take(),
                tq: access_log::ms(head_at.saturating_duration_since(start)),
                tw: self.tw,
                tc: self.tc,
                tr: self.tr,
                tt: -1,
                status: resp.status().as_u16(),
                bytes: 0,
                state: self.state,
                request,
                cert: std::mem::take(&mut self.cert),
                tls: self.tls,
            },
        }
    }
}

/// What a client connection's requests need of it besides its address: the headers naming it,
/// the address it connected to (a PROXY protocol header's destination) and its TLS client
/// certificate (for the class rules and the access log only; never sent to a backend) and
/// its TLS version, ALPN protocol and cipher suite (for the access log).
struct ClientSide {
    headers: ClientFor,
    local: SocketAddr,
    cert: ClientCert,
    session: Option<TlsSession>,
}

/// What a client connection's TLS handshake settled, for its requests: the client
/// certificate and the session's version, ALPN protocol and cipher suite. Empty on a plain
/// connection.
#[derive(Default)]
struct ClientTls {
    cert: ClientCert,
    session: Option<TlsSession>,
}

/// The TLS handshake of a new connection, bounded by `limit` (`timeouts.header`) and counted
/// by outcome; `None` when it failed. With a client certificate asked for, the verified
/// leaf's subject (tls.rs); the version; the protocol ALPN chose (http2.rs).
async fn handshake(
    tls: &crate::tls::Certificates,
    stream: TcpStream,
    svc: &Service,
    limit: Duration,
) -> Option<(
    tokio_rustls::server::TlsStream<TcpStream>,
    (ClientTls, Protocol),
)> {
    let acceptor = tls.acceptor();
    let done = tokio::time::timeout(limit, acceptor.tls.accept(stream)).await;
    svc.metrics.tls_handshake(match &done {
        Ok(Ok(_)) => "ok",
        Ok(Err(e)) => crate::tls::handshake_failure(e),
        Err(_) => "timeout",
    });
    let s = done.ok()?.ok()?;
    let cert = match acceptor.client_auth {
        crate::tls::ClientAuth::Off => ClientCert::NotAsked,
        _ => ClientCert::Asked(
            s.get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .and_then(|leaf| crate::tls::client_subject(leaf))
                .map(Arc::from),
        ),
    };
    let server = s.get_ref().1;
    let protocol = Protocol::from_alpn(server.alpn_protocol());
    let session = TlsSession::of(
        server.protocol_version(),
        server.alpn_protocol(),
        server.negotiated_cipher_suite().map(|s| s.suite()),
    );
    let client = ClientTls {
        cert,
        session: Some(session),
    };
    Some((s, (client, protocol)))
}

async fn forward(
    mut req: Request<Incoming>,
    peer: SocketAddr,
    client: &ClientSide,
    svc: &Arc<Service>,
    hash_key: HashKey,
    first: bool,
    t: &mut Timing,
) -> Response<ProxyBody> {
    // The request head has been read: the class's response time starts here.
    let head_at = Instant::now();
    let kind = match check_request(&mut req) {
        Ok(k) => k,
        Err((status, why)) => {
            svc.metrics.refuse("bad_request");
            t.state = *b"PR";
            return local_closing(status, why);
        }
    };
    let k = key_addr(&req, peer, hash_key);
    let key = FlowKey::new(k, 0, k, 0);
    let subject = client.cert.subject();
    let classify = |k: &Classifier| k.classify(peer.ip(), subject, req.uri().path(), req.headers());
    let queued = Instant::now();
    let acquired = svc.acquire(key, None, classify).await;
    t.tw = access_log::ms(queued.elapsed());
    let mut lease = match acquired {
        Ok(l) => l,
        Err(r) => {
            svc.metrics.refuse(r.reason());
            t.state = match r {
                Refusal::NoServer | Refusal::NoRoute => *b"SC",
                Refusal::QueueFull => *b"PQ",
                Refusal::QueueTimeout => *b"sQ",
                // HAProxy's `K`: ended by an administrative action (here a reload that
                // rebuilt the queue), while `Q`ueued.
                Refusal::Reload => *b"KQ",
            };
            return local(StatusCode::SERVICE_UNAVAILABLE, r.reason());
        }
    };
    let b = &lease.backend;
    t.backend = Some(b.clone());
    if t.on {
        t.server = Some(b.name.clone());
    }
    // Origin form (`/path?query`; an absolute-form target's authority is dropped, its Host
    // header stays); the path is shared, not copied (`PathAndQuery` is reference-counted).
    if req.uri().scheme().is_some() || req.uri().authority().is_some() {
        let path = req.uri().path_and_query().cloned();
        let mut parts = hyper::http::uri::Parts::default();
        parts.path_and_query =
            Some(path.unwrap_or_else(|| hyper::http::uri::PathAndQuery::from_static("/")));
        *req.uri_mut() = match Uri::from_parts(parts) {
            Ok(u) => u,
            Err(_) => {
                t.state = *b"PR";
                return local(StatusCode::BAD_REQUEST, "bad request target");
            }
        };
    }
    let h = req.headers_mut();
    strip_hop_by_hop(h);
    if !h.contains_key(HOST) {
        // An HTTP/1.0 request may come without one (`check_target` refuses HTTP/1.1 without);
        // the backend gets its own address.
        h.insert(HOST, b.host.clone());
    }
    let rt = &lease.runtime;
    client.headers.add(rt.forwarded, h);
    let proxy = b
        .send_proxy
        .map(|v| proxy_proto::header(v, peer, client.local))
        .unwrap_or_default();
    let started = Instant::now();
    let limits = Limits {
        connect: Duration::from_nanos(rt.timeouts.connect),
        client: Duration::from_nanos(rt.timeouts.client),
        server: Duration::from_nanos(rt.timeouts.server),
    };
    // The request is written from its head as l7 prepared it (HTTP/1.1, origin form).
    let (parts, body) = req.into_parts();
    let reason = match send(&lease, &parts, body, kind, first, limits, &proxy, t).await {
        Ok((head, conn)) => {
            b.response_seconds.observe(started.elapsed().as_secs_f64());
            // The response head goes to the client connection now: the class's response
            // time ends here (a failure below is counted when the lease drops).
            lease.complete(Some(head_at.elapsed()));
            let (mut rparts, body): (response::Parts, BackendBody) =
                head.into_response(conn, limits.server).into_parts();
            strip_hop_by_hop(&mut rparts.headers);
            let flight = InFlight { lease: Some(lease) };
            return Response::from_parts(
                rparts,
                ProxyBody {
                    kind: Kind::Backend(body, flight),
                    log: None,
                    stream: None,
                },
            );
        }
        Err(h1::Error::ClientBody) => {
            t.state = *b"CD";
            svc.metrics.refuse("client_error");
            return local_closing(StatusCode::BAD_REQUEST, "client_error");
        }
        Err(h1::Error::ClientTimeout) => {
            t.state = *b"cD";
            svc.metrics.refuse("client_timeout");
            return local_closing(StatusCode::REQUEST_TIMEOUT, "client_timeout");
        }
        Err(h1::Error::ServerTimeout) => "server_timeout",
        Err(h1::Error::Connect) => "connect",
        Err(h1::Error::BadResponse) => "bad_response",
        Err(h1::Error::Closed | h1::Error::Server) => "server_error",
        Err(h1::Error::InDoubt) => "unexpected_data",
    };
    t.state = match reason {
        "server_timeout" => *b"sH",
        "connect" => *b"SC",
        "bad_response" => *b"PH",
        _ => *b"SH",
    };
    svc.metrics.error(&b.name, reason);
    let status = if reason == "server_timeout" {
        StatusCode::GATEWAY_TIMEOUT
    } else {
        StatusCode::BAD_GATEWAY
    };
    local(status, reason)
}

//! L7 mode: HTTP/1.1 with keep-alive; every request is scheduled on its own (HAProxy
//! `mode http`), forwarded over the chosen backend's own keep-alive pool (`pool.rs`: hyper's
//! HTTP/1 client connections, idle ones kept per backend). Requests go to the backend as
//! HTTP/1.1 in origin form whatever the client spoke (a proxy sends its own version, RFC 9110
//! §6.2), so an HTTP/1.0 keep-alive client still reuses backend connections.
//!
//! Hashing balancers see a [`FlowKey`] whose source and destination are both the chosen key —
//! the client address (`hash_key = "source"`), or a 128-bit hash of the Host header or of the
//! URI mapped into an IPv6 address — so dh/lblc/lblcr (which hash the destination) and sh/mh
//! (which hash the source) all key on it, as HAProxy's `balance source|hdr(host)|uri`.
//!
//! Malformed requests are answered 400 by hyper's parser and the connection closed; a request
//! head that does not arrive within `timeouts.header` closes the connection (hyper
//! `header_read_timeout`). Heads are at most [`MAX_HEAD_BYTES`].

use crate::config::HashKey;
use crate::pool::{self, ConnectError, Sender};
use crate::service::{BackendRef, Lease, Service};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{HeaderName, HeaderValue, CONNECTION, HOST};
use hyper::{Request, Response, StatusCode, Uri, Version};
use hyper_util::rt::{TokioIo, TokioTimer};
use netsched_core::balance::FlowKey;
use std::convert::Infallible;
use std::hash::{Hash, Hasher};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// Largest request head (request line + headers) accepted.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// A response body: a short one of ours, or the backend's, holding the lease and the backend
/// connection until it ends.
pub enum ProxyBody {
    Local(Full<Bytes>),
    Backend(Incoming, InFlight),
}

/// A backend's lease and connection while its response body is forwarded. When the body has
/// been read to its end the connection goes back to the backend's pool, then the lease is
/// released (so queued work woken by the release finds the connection idle). A body that
/// fails, or is dropped unfinished (the client left), closes the connection; the lease is
/// released either way.
pub struct InFlight {
    tx: Option<Sender>,
    lease: Option<Lease>,
}

impl InFlight {
    fn finish(&mut self, complete: bool) {
        if let (Some(tx), Some(lease)) = (self.tx.take(), self.lease.as_ref()) {
            if complete {
                lease.backend.conns.give(tx);
            }
        }
        self.lease.take();
    }
}

impl Drop for ProxyBody {
    fn drop(&mut self) {
        // hyper stops polling a body once it says it has ended (and never polls one that is
        // empty: HEAD, 204, 304, Content-Length: 0), so the end is also decided here.
        if let ProxyBody::Backend(b, flight) = self {
            let complete = b.is_end_stream();
            flight.finish(complete);
        }
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = hyper::Error;
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            ProxyBody::Local(f) => Pin::new(f).poll_frame(cx).map_err(|never| match never {}),
            ProxyBody::Backend(b, flight) => {
                let r = Pin::new(&mut *b).poll_frame(cx);
                match &r {
                    // The request is done on the backend: reuse its connection, free its slot.
                    Poll::Ready(None) => flight.finish(true),
                    Poll::Ready(Some(Err(_))) => flight.finish(false),
                    Poll::Ready(Some(Ok(_))) if b.is_end_stream() => flight.finish(true),
                    _ => {}
                }
                r
            }
        }
    }
    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Local(f) => f.is_end_stream(),
            ProxyBody::Backend(b, _) => b.is_end_stream(),
        }
    }
    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Local(f) => f.size_hint(),
            ProxyBody::Backend(b, _) => b.size_hint(),
        }
    }
}

fn local(status: StatusCode, text: &str) -> Response<ProxyBody> {
    let mut r = Response::new(ProxyBody::Local(Full::new(Bytes::from(format!(
        "{text}\n"
    )))));
    *r.status_mut() = status;
    r.headers_mut()
        .insert("content-type", HeaderValue::from_static("text/plain"));
    r
}

pub async fn serve(
    listener: TcpListener,
    svc: Arc<Service>,
    conns: Arc<Semaphore>,
    hash_key: HashKey,
) {
    // Accepted sockets inherit TCP_NODELAY from the listener; else it is set per connection.
    let inherited = crate::sys::set_nodelay(&listener).is_ok();
    loop {
        let Ok((stream, peer)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let Ok(permit) = conns.clone().try_acquire_owned() else {
            svc.metrics.refuse("max_connections");
            continue;
        };
        if !inherited {
            let _ = stream.set_nodelay(true);
        }
        let svc = svc.clone();
        tokio::spawn(async move {
            svc.metrics.client_connections.inc();
            let rt = svc.runtime();
            let svc2 = svc.clone();
            // Once per connection, not per request.
            let xff = HeaderValue::from_str(&peer.ip().to_string()).ok();
            let service = hyper::service::service_fn(move |req| {
                let svc = svc2.clone();
                let xff = xff.clone();
                async move { Ok::<_, Infallible>(forward(req, peer, xff, &svc, hash_key).await) }
            });
            let mut b = hyper::server::conn::http1::Builder::new();
            b.timer(TokioTimer::new())
                .header_read_timeout(Duration::from_nanos(rt.timeouts.header))
                .max_buf_size(MAX_HEAD_BYTES.max(8192))
                .keep_alive(true)
                // One `send` per flush (head and body copied into one buffer) instead of a
                // `writev`: the kernel's writev path costs more (see pool.rs).
                .writev(false);
            if let Err(e) = b.serve_connection(TokioIo::new(stream), service).await {
                let reason = if e.is_timeout() {
                    "header_timeout"
                } else if e.is_parse() || e.is_parse_too_large() {
                    "bad_request"
                } else {
                    "client_error"
                };
                svc.metrics.refuse(reason);
            }
            svc.metrics.client_connections.dec();
            drop(permit);
        });
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

static XFF: HeaderName = HeaderName::from_static("x-forwarded-for");

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

/// Why a request could not be sent to its backend.
enum SendError {
    Connect,
    Server,
}

/// Send `req` on an idle connection of `b`, or a new one. A reused connection the backend has
/// closed meanwhile (keep-alive timeout) is dropped and the request tried on the next one, as
/// long as hyper hands the request back unsent; a new connection's failure is final.
async fn send(
    b: &BackendRef,
    mut req: Request<Incoming>,
    connect: Duration,
) -> Result<(Response<Incoming>, Sender), SendError> {
    loop {
        let (mut tx, reused) = match b.conns.take() {
            Some(tx) => (tx, true),
            None => match pool::connect(b.addr, connect).await {
                Ok(tx) => (tx, false),
                Err(ConnectError::Failed | ConnectError::Timeout) => {
                    return Err(SendError::Connect)
                }
            },
        };
        // A new connection takes its first request before its task has run; a reused one is
        // ready once its task has read the previous response to the end (usually already).
        if reused && !tx.is_ready() && tx.ready().await.is_err() {
            continue;
        }
        match tx.try_send_request(req).await {
            Ok(resp) => return Ok((resp, tx)),
            Err(mut e) => match e.take_message() {
                Some(r) if reused => req = r,
                _ => return Err(SendError::Server),
            },
        }
    }
}

async fn forward(
    mut req: Request<Incoming>,
    peer: SocketAddr,
    xff: Option<HeaderValue>,
    svc: &Arc<Service>,
    hash_key: HashKey,
) -> Response<ProxyBody> {
    let k = key_addr(&req, peer, hash_key);
    let key = FlowKey::new(k, 0, k, 0);
    let lease = match svc.acquire(key).await {
        Ok(l) => l,
        Err(r) => {
            svc.metrics.refuse(r.reason());
            return local(StatusCode::SERVICE_UNAVAILABLE, r.reason());
        }
    };
    let b = &lease.backend;
    // Origin form (`/path?query`; an absolute-form target's authority is dropped, its Host
    // header stays); the path is shared, not copied (`PathAndQuery` is reference-counted).
    if req.uri().scheme().is_some() || req.uri().authority().is_some() {
        let path = req.uri().path_and_query().cloned();
        let mut parts = hyper::http::uri::Parts::default();
        parts.path_and_query =
            Some(path.unwrap_or_else(|| hyper::http::uri::PathAndQuery::from_static("/")));
        *req.uri_mut() = match Uri::from_parts(parts) {
            Ok(u) => u,
            Err(_) => return local(StatusCode::BAD_REQUEST, "bad request target"),
        };
    }
    *req.version_mut() = Version::HTTP_11;
    let h = req.headers_mut();
    strip_hop_by_hop(h);
    if !h.contains_key(HOST) {
        // An HTTP/1.0 request may come without one; HTTP/1.1 requires it: the backend's address.
        h.insert(HOST, b.host.clone());
    }
    if let Some(v) = xff {
        h.append(XFF.clone(), v);
    }
    let started = Instant::now();
    let rt = &lease.runtime;
    let server = Duration::from_nanos(rt.timeouts.server);
    let connect = Duration::from_nanos(rt.timeouts.connect);
    match tokio::time::timeout(server, send(b, req, connect)).await {
        Ok(Ok((resp, tx))) => {
            b.response_seconds.observe(started.elapsed().as_secs_f64());
            let (mut parts, body) = resp.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            let flight = InFlight {
                tx: Some(tx),
                lease: Some(lease),
            };
            Response::from_parts(parts, ProxyBody::Backend(body, flight))
        }
        Ok(Err(e)) => {
            let reason = match e {
                SendError::Connect => "connect",
                SendError::Server => "server_error",
            };
            svc.metrics.error(&b.name, reason);
            local(StatusCode::BAD_GATEWAY, reason)
        }
        Err(_) => {
            svc.metrics.error(&b.name, "server_timeout");
            local(StatusCode::GATEWAY_TIMEOUT, "server_timeout")
        }
    }
}

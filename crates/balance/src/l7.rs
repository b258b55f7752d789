//! L7 mode: HTTP/1.1 with keep-alive; every request is scheduled on its own (HAProxy
//! `mode http`), forwarded over a per-backend keep-alive pool (hyper-util's legacy client,
//! pooled by backend address).
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
use crate::metrics::Metrics;
use crate::service::{Lease, Service};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{HeaderName, HeaderValue, HOST};
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
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
/// Idle keep-alive connections kept per backend.
pub const POOL_IDLE_PER_BACKEND: usize = 64;

pub type Pool = Client<HttpConnector, Incoming>;

pub fn pool(connect: Duration) -> Pool {
    let mut conn = HttpConnector::new();
    conn.set_connect_timeout(Some(connect));
    conn.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(POOL_IDLE_PER_BACKEND)
        .pool_timer(TokioTimer::new())
        .build(conn)
}

/// A response body: a short one of ours, or the backend's, holding the lease until it ends.
pub enum ProxyBody {
    Local(Full<Bytes>),
    Backend(Incoming, Option<Lease>),
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
            ProxyBody::Backend(b, lease) => {
                let r = Pin::new(b).poll_frame(cx);
                if let Poll::Ready(None) | Poll::Ready(Some(Err(_))) = r {
                    lease.take(); // the request is done on the backend: release its slot
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
    pool: Pool,
    hash_key: HashKey,
) {
    loop {
        let Ok((stream, peer)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let Ok(permit) = conns.clone().try_acquire_owned() else {
            svc.metrics.refuse("max_connections");
            continue;
        };
        let _ = stream.set_nodelay(true);
        let svc = svc.clone();
        let pool = pool.clone();
        tokio::spawn(async move {
            svc.metrics.client_connections.inc();
            let rt = svc.runtime();
            let svc2 = svc.clone();
            // Once per connection, not per request.
            let xff = HeaderValue::from_str(&peer.ip().to_string()).ok();
            let service = hyper::service::service_fn(move |req| {
                let svc = svc2.clone();
                let pool = pool.clone();
                let xff = xff.clone();
                async move { Ok::<_, Infallible>(forward(req, peer, xff, &svc, &pool, hash_key).await) }
            });
            let mut b = hyper::server::conn::http1::Builder::new();
            b.timer(TokioTimer::new())
                .header_read_timeout(Duration::from_nanos(rt.timeouts.header))
                .max_buf_size(MAX_HEAD_BYTES.max(8192))
                .keep_alive(true);
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
    hyper::header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    hyper::header::TE,
    hyper::header::TRAILER,
    hyper::header::UPGRADE,
    hyper::header::PROXY_AUTHORIZATION,
];

async fn forward(
    mut req: Request<Incoming>,
    peer: SocketAddr,
    xff: Option<HeaderValue>,
    svc: &Arc<Service>,
    pool: &Pool,
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
    let rt = svc.runtime();
    // http://BACKEND/path?query: the path is shared (`PathAndQuery` is reference-counted).
    let mut parts = hyper::http::uri::Parts::default();
    parts.scheme = Some(hyper::http::uri::Scheme::HTTP);
    parts.authority = hyper::http::uri::Authority::try_from(lease.addr.to_string()).ok();
    parts.path_and_query = Some(
        req.uri()
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| hyper::http::uri::PathAndQuery::from_static("/")),
    );
    let uri = match hyper::Uri::from_parts(parts) {
        Ok(u) => u,
        Err(_) => return local(StatusCode::BAD_REQUEST, "bad request target"),
    };
    *req.uri_mut() = uri;
    let h = req.headers_mut();
    // Headers named in Connection are hop-by-hop too.
    let named: Vec<HeaderName> = h
        .get_all("connection")
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
    if let Some(v) = xff {
        h.append("x-forwarded-for", v);
    }
    let started = Instant::now();
    let server = Duration::from_nanos(rt.timeouts.server);
    match tokio::time::timeout(server, pool.request(req)).await {
        Ok(Ok(resp)) => {
            svc.metrics
                .response_seconds
                .get_or_create(&Metrics::backend(&lease.name))
                .observe(started.elapsed().as_secs_f64());
            let (mut parts, body) = resp.into_parts();
            for n in &HOP {
                parts.headers.remove(n);
            }
            Response::from_parts(parts, ProxyBody::Backend(body, Some(lease)))
        }
        Ok(Err(e)) => {
            let reason = if e.is_connect() {
                "connect"
            } else {
                "server_error"
            };
            svc.metrics.error(&lease.name, reason);
            local(StatusCode::BAD_GATEWAY, reason)
        }
        Err(_) => {
            svc.metrics.error(&lease.name, "server_timeout");
            local(StatusCode::GATEWAY_TIMEOUT, "server_timeout")
        }
    }
}

//! HTTP/2 from clients (http2.rs, docs/balance.md "HTTP/2"), on loopback, no privileges:
//! hyper's HTTP/2 client over h2c and over TLS with ALPN `h2`, and a raw frame client
//! ([`Raw`]) for what no well-behaved client sends: the translation corpus (`CASES`, each
//! malformed request refused before any byte of it reaches the backend) and the floods
//! (rapid reset, CONTINUATION, HPACK bomb, SETTINGS and PING, a window never opened, too
//! many streams), each bounded and counted while another client is still served.

mod common;

use bytes::Bytes;
use common::{start, PATIENCE};
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use netsched_balance::metrics::ReasonLabel;
use netsched_balance::Running;
use netsched_testbed::TempDir;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

// ---------------------------------------------------------------------------------------------
// A backend that tells what it received.

/// What the backend saw: requests begun, requests in flight now and at most.
#[derive(Default)]
struct Seen {
    requests: AtomicU64,
    in_flight: AtomicU64,
    peak: AtomicU64,
}

/// HTTP/1.1 backend. `/sleep/<ms>` waits; `/big/<n>` answers `n` bytes; any other path answers
/// the request as text: method, path, each field (`name: value`), then `body <len>`.
async fn backend() -> (SocketAddr, Arc<Seen>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let s2 = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else { return };
            let seen = s2.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let seen = seen.clone();
                    async move {
                        seen.requests.fetch_add(1, Ordering::SeqCst);
                        let now = seen.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                        seen.peak.fetch_max(now, Ordering::SeqCst);
                        let r = answer(req).await;
                        seen.in_flight.fetch_sub(1, Ordering::SeqCst);
                        Ok::<_, std::convert::Infallible>(r)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    (addr, seen)
}

async fn answer(req: Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_string();
    if let Some(ms) = path.strip_prefix("/sleep/") {
        tokio::time::sleep(Duration::from_millis(ms.parse().unwrap_or(0))).await;
    }
    if let Some(n) = path.strip_prefix("/big/") {
        let n: usize = n.parse().unwrap_or(0);
        return Response::new(Full::new(Bytes::from(vec![b'x'; n])));
    }
    let mut text = format!("{} {}\n", req.method(), path);
    for (n, v) in req.headers() {
        text += &format!("{n}: {}\n", String::from_utf8_lossy(v.as_bytes()));
    }
    let body = req.into_body().collect().await.map(|b| b.to_bytes());
    text += &format!("body {}\n", body.map(|b| b.len() as i64).unwrap_or(-1));
    Response::new(Full::new(Bytes::from(text)))
}

async fn balancer(backend: SocketAddr, top: &str, tables: &str) -> (Running, TempDir) {
    let dir = TempDir::new("balance-h2").unwrap();
    let text = format!(
        "mode = \"l7\"\nlisten = [\"127.0.0.1:0\"]\nalgorithm = {{ kind = \"rr\" }}\n\
         control_socket = \"{}\"\n{top}\n{tables}\n[[server]]\nname = \"b\"\naddr = \"{backend}\"\n",
        dir.path().join("ctl.sock").display()
    );
    (start(&text, &dir).await, dir)
}

fn refused(r: &Running, reason: &str) -> u64 {
    r.service
        .metrics
        .refused
        .get_or_create(&ReasonLabel {
            reason: reason.into(),
        })
        .get()
}

/// A GET over a new HTTP/1.1 connection: the balancer still serves other clients.
async fn still_serves(addr: SocketAddr) {
    let (status, _) = common::get(addr, "/", "x").await;
    assert_eq!(status, 200, "another client is served");
}

// ---------------------------------------------------------------------------------------------
// hyper's client: h2c (prior knowledge) and h2 over TLS.

type Sender = hyper::client::conn::http2::SendRequest<Full<Bytes>>;

async fn h2_over<T>(io: T) -> Sender
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io))
            .await
            .unwrap();
    tokio::spawn(conn);
    send
}

async fn fetch(send: &mut Sender, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    let req = Request::builder()
        .method(method)
        .uri(format!("http://h2.test{path}"))
        .header("cookie", "a=1")
        .header("cookie", "b=2")
        .body(Full::new(Bytes::copy_from_slice(body)))
        .unwrap();
    let resp = tokio::time::timeout(PATIENCE, send.clone().send_request(req))
        .await
        .unwrap()
        .unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// Many streams on one h2c connection, GET and POST, reach the HTTP/1.1 backend as HTTP/1.1
/// requests with the Host from `:authority`, joined cookies and their bodies; counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_of_one_h2c_connection_each_reach_the_backend_as_http1() {
    let (b, seen) = backend().await;
    let (r, _dir) = balancer(b, "", "").await;
    let mut send = h2_over(TcpStream::connect(r.listen[0]).await.unwrap()).await;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..200u32 {
        let mut send = send.clone();
        tasks.spawn(async move {
            let body = vec![b'p'; i as usize * 37];
            let method = if i % 2 == 0 { "GET" } else { "POST" };
            let body = if method == "GET" { Vec::new() } else { body };
            (
                i,
                body.len(),
                fetch(&mut send, method, &format!("/r/{i}"), &body).await,
            )
        });
    }
    while let Some(t) = tasks.join_next().await {
        let (i, len, (status, text)) = t.unwrap();
        assert_eq!(status, 200, "stream {i}: {text}");
        let method = if i % 2 == 0 { "GET" } else { "POST" };
        assert!(text.starts_with(&format!("{method} /r/{i}\n")), "{text}");
        assert!(text.contains("host: h2.test\n"), "{text}");
        assert!(text.contains("cookie: a=1; b=2\n"), "{text}");
        assert!(text.contains(&format!("body {len}\n")), "{text}");
    }
    assert_eq!(seen.requests.load(Ordering::SeqCst), 200);
    let m = &r.service.metrics;
    assert_eq!(m.h2_streams.get(), 200);
    let h2 = netsched_balance::metrics::ProtocolLabel { protocol: "h2" };
    assert_eq!(m.client_protocols.get_or_create(&h2).get(), 1);
    // HTTP/1.1 on the same listener.
    let (status, _) = fetch(&mut send, "GET", "/after", b"").await;
    assert_eq!(status, 200);
    still_serves(r.listen[0]).await;
}

/// A client offering `h2` by ALPN gets HTTP/2 over TLS; one offering only `http/1.1` gets
/// HTTP/1.1 on the same listener.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alpn_h2_over_tls_serves_http2_and_http1_still_works() {
    let (b, _seen) = backend().await;
    let dir = TempDir::new("balance-h2-tls").unwrap();
    let site = common::https::Site::new(&dir);
    let (r, _d) = balancer(b, "", &site.table()).await;
    let versions = [
        (&b"h2"[..], hyper::Version::HTTP_2),
        (b"http/1.1", hyper::Version::HTTP_11),
    ];
    for (alpn, want) in versions {
        let tls = site
            .connect(alpn, TcpStream::connect(r.listen[0]).await.unwrap())
            .await;
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(alpn));
        let version = if want == hyper::Version::HTTP_2 {
            let mut send = h2_over(tls).await;
            let req = Request::get("https://h2.test/v")
                .body(Full::new(Bytes::new()))
                .unwrap();
            send.send_request(req).await.unwrap().version()
        } else {
            let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
                .await
                .unwrap();
            tokio::spawn(conn);
            let req = Request::get("/v")
                .header("host", "h2.test")
                .body(Full::new(Bytes::new()))
                .unwrap();
            send.send_request(req).await.unwrap().version()
        };
        assert_eq!(version, want, "ALPN {:?}", String::from_utf8_lossy(alpn));
    }
}

// ---------------------------------------------------------------------------------------------
// A raw HTTP/2 client: frames as written (RFC 9113 §4.1), fields HPACK-coded as given.

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0;
const HEADERS: u8 = 1;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const PING: u8 = 6;
const GOAWAY: u8 = 7;
const CONTINUATION: u8 = 9;
const END_STREAM: u8 = 1;
const END_HEADERS: u8 = 4;
const REFUSED_STREAM: u32 = 7;

fn frame(ty: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let n = payload.len() as u32;
    let mut f = vec![(n >> 16) as u8, (n >> 8) as u8, n as u8, ty, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// How a stream ended for the client.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Status(u16),
    Reset(u32),
    GoAway(u32),
    Closed,
}

impl Outcome {
    fn refused(&self) -> bool {
        !matches!(self, Outcome::Status(s) if *s < 400)
    }
}

struct Raw {
    s: TcpStream,
    rbuf: Vec<u8>,
    dec: hpack::Decoder<'static>,
    next: u32,
}

impl Raw {
    /// Preface and SETTINGS (`settings`: id, value), then the server's SETTINGS acknowledged.
    async fn open(addr: SocketAddr, settings: &[(u16, u32)]) -> Raw {
        let s = TcpStream::connect(addr).await.unwrap();
        let mut r = Raw {
            s,
            rbuf: Vec::new(),
            dec: hpack::Decoder::new(),
            next: 1,
        };
        let mut p = Vec::new();
        for (id, v) in settings {
            p.extend_from_slice(&id.to_be_bytes());
            p.extend_from_slice(&v.to_be_bytes());
        }
        let mut out = PREFACE.to_vec();
        out.extend(frame(SETTINGS, 0, 0, &p));
        r.send(&out).await;
        while let Some((ty, flags, _, _)) = r.frame().await {
            if ty == SETTINGS && flags & 1 == 0 {
                r.send(&frame(SETTINGS, 1, 0, &[])).await;
                break;
            }
        }
        r
    }

    async fn send(&mut self, b: &[u8]) -> bool {
        matches!(
            tokio::time::timeout(PATIENCE, self.s.write_all(b)).await,
            Ok(Ok(()))
        )
    }

    /// The next frame, or `None` at EOF, an error or [`PATIENCE`] of silence.
    async fn frame(&mut self) -> Option<(u8, u8, u32, Vec<u8>)> {
        loop {
            if self.rbuf.len() >= 9 {
                let n = u32::from_be_bytes([0, self.rbuf[0], self.rbuf[1], self.rbuf[2]]) as usize;
                if self.rbuf.len() >= 9 + n {
                    let h: Vec<u8> = self.rbuf.drain(..9 + n).collect();
                    let id = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
                    return Some((h[3], h[4], id, h[9..].to_vec()));
                }
            }
            let mut b = [0u8; 16384];
            match tokio::time::timeout(PATIENCE, self.s.read(&mut b)).await {
                Ok(Ok(n)) if n > 0 => self.rbuf.extend_from_slice(&b[..n]),
                _ => return None,
            }
        }
    }

    /// A new stream's id.
    fn id(&mut self) -> u32 {
        let id = self.next;
        self.next += 2;
        id
    }

    /// A HEADERS frame (END_HEADERS) carrying `fields` as literals without indexing
    /// (RFC 7541 §6.2.2), names and values exactly as given.
    fn headers(id: u32, fields: &[(&[u8], &[u8])], end_stream: bool) -> Vec<u8> {
        let mut block = Vec::new();
        for (n, v) in fields {
            block.push(0);
            block.extend(hpack::encoder::encode_integer(n.len(), 7));
            block.extend_from_slice(n);
            block.extend(hpack::encoder::encode_integer(v.len(), 7));
            block.extend_from_slice(v);
        }
        let flags = END_HEADERS | if end_stream { END_STREAM } else { 0 };
        frame(HEADERS, flags, id, &block)
    }

    /// Read until stream `id` has an answer (its `:status`), is reset, or the connection ends.
    async fn outcome(&mut self, id: u32) -> Outcome {
        while let Some((ty, flags, sid, p)) = self.frame().await {
            match ty {
                HEADERS => {
                    let block = strip_padding(flags, &p);
                    let Ok(fields) = self.dec.decode(block) else {
                        return Outcome::Closed;
                    };
                    if sid == id {
                        let status = fields
                            .iter()
                            .find(|(n, _)| n == b":status")
                            .and_then(|(_, v)| std::str::from_utf8(v).ok()?.parse().ok());
                        return Outcome::Status(status.unwrap_or(0));
                    }
                }
                RST_STREAM if sid == id => {
                    return Outcome::Reset(u32::from_be_bytes([p[0], p[1], p[2], p[3]]));
                }
                GOAWAY => return Outcome::GoAway(u32::from_be_bytes([p[4], p[5], p[6], p[7]])),
                PING if flags & 1 == 0 => {
                    self.send(&frame(PING, 1, 0, &p)).await;
                }
                _ => {}
            }
        }
        Outcome::Closed
    }

    /// Read until the connection ends, answering PINGs (a live client): its GOAWAY's code, if
    /// one came.
    async fn until_end(&mut self) -> Option<u32> {
        let mut code = None;
        while let Some((ty, flags, _, p)) = self.frame().await {
            if ty == GOAWAY {
                code = Some(u32::from_be_bytes([p[4], p[5], p[6], p[7]]));
            }
            if ty == PING && flags & 1 == 0 {
                self.send(&frame(PING, 1, 0, &p)).await;
            }
        }
        code
    }
}

fn strip_padding(flags: u8, p: &[u8]) -> &[u8] {
    let mut p = p;
    let mut pad = 0;
    if flags & 0x8 != 0 {
        pad = p[0] as usize;
        p = &p[1..];
    }
    if flags & 0x20 != 0 {
        p = &p[5..];
    }
    &p[..p.len() - pad]
}

// ---------------------------------------------------------------------------------------------
// The translation corpus (RFC 9113 §8.2–8.3).

type Fields = &'static [(&'static [u8], &'static [u8])];

/// One request as a client writes it, and whether it may reach the backend.
struct Case {
    name: &'static str,
    fields: Fields,
    /// DATA after the HEADERS (END_STREAM on the DATA), or none (END_STREAM on HEADERS).
    data: Option<&'static [u8]>,
    forwarded: bool,
}

const GET: (&[u8], &[u8]) = (b":method", b"GET");
const POST: (&[u8], &[u8]) = (b":method", b"POST");
const SCHEME: (&[u8], &[u8]) = (b":scheme", b"http");
const PATH: (&[u8], &[u8]) = (b":path", b"/c");
const AUTH: (&[u8], &[u8]) = (b":authority", b"h2.test");

const fn case(name: &'static str, fields: Fields, forwarded: bool) -> Case {
    Case {
        name,
        fields,
        data: None,
        forwarded,
    }
}

const CASES: &[Case] = &[
    case("a plain GET", &[GET, SCHEME, PATH, AUTH], true),
    case(
        "Host without :authority",
        &[GET, SCHEME, PATH, (b"host", b"h2.test")],
        true,
    ),
    case(
        "te: trailers",
        &[GET, SCHEME, PATH, AUTH, (b"te", b"trailers")],
        true,
    ),
    case(
        "te: gzip",
        &[GET, SCHEME, PATH, AUTH, (b"te", b"gzip")],
        false,
    ),
    case(
        "connection",
        &[GET, SCHEME, PATH, AUTH, (b"connection", b"close")],
        false,
    ),
    case(
        "keep-alive",
        &[GET, SCHEME, PATH, AUTH, (b"keep-alive", b"5")],
        false,
    ),
    case(
        "proxy-connection",
        &[GET, SCHEME, PATH, AUTH, (b"proxy-connection", b"x")],
        false,
    ),
    case(
        "upgrade",
        &[GET, SCHEME, PATH, AUTH, (b"upgrade", b"websocket")],
        false,
    ),
    case(
        "transfer-encoding",
        &[POST, SCHEME, PATH, AUTH, (b"transfer-encoding", b"chunked")],
        false,
    ),
    case(
        "upper-case name",
        &[GET, SCHEME, PATH, AUTH, (b"X-Up", b"1")],
        false,
    ),
    case(
        "CR LF in a value",
        &[GET, SCHEME, PATH, AUTH, (b"x-a", b"1\r\nx-injected: 1")],
        false,
    ),
    case(
        "LF in a value",
        &[GET, SCHEME, PATH, AUTH, (b"x-a", b"1\nx-injected: 1")],
        false,
    ),
    case(
        "NUL in a value",
        &[GET, SCHEME, PATH, AUTH, (b"x-a", b"1\x002")],
        false,
    ),
    case(
        "space in a name",
        &[GET, SCHEME, PATH, AUTH, (b"x a", b"1")],
        false,
    ),
    case(
        "colon in a name",
        &[GET, SCHEME, PATH, AUTH, (b"x:a", b"1")],
        false,
    ),
    case(
        "leading space in a value",
        &[GET, SCHEME, PATH, AUTH, (b"x-a", b" 1")],
        false,
    ),
    case(
        "trailing tab in a value",
        &[GET, SCHEME, PATH, AUTH, (b"x-a", b"1\t")],
        false,
    ),
    case("no :method", &[SCHEME, PATH, AUTH], false),
    case("no :path", &[GET, SCHEME, AUTH], false),
    case("no :scheme", &[GET, PATH, AUTH], false),
    case("empty :path", &[GET, SCHEME, (b":path", b""), AUTH], false),
    case("two :method", &[GET, GET, SCHEME, PATH, AUTH], false),
    case("two :path", &[GET, SCHEME, PATH, PATH, AUTH], false),
    case(
        "unknown pseudo-header",
        &[GET, SCHEME, PATH, AUTH, (b":foo", b"1")],
        false,
    ),
    case(
        "pseudo-header after a field",
        &[GET, SCHEME, (b"x-a", b"1"), PATH, AUTH],
        false,
    ),
    case(
        ":status in a request",
        &[GET, SCHEME, PATH, AUTH, (b":status", b"200")],
        false,
    ),
    case("neither :authority nor Host", &[GET, SCHEME, PATH], false),
    case(
        "Host disagrees with :authority",
        &[GET, SCHEME, PATH, AUTH, (b"host", b"evil.test")],
        false,
    ),
    case(
        "two Host",
        &[
            GET,
            SCHEME,
            PATH,
            (b"host", b"h2.test"),
            (b"host", b"h2.test"),
        ],
        false,
    ),
    case("CONNECT", &[(b":method", b"CONNECT"), AUTH], false),
    case(
        "path with a space",
        &[GET, SCHEME, (b":path", b"/a b"), AUTH],
        false,
    ),
    Case {
        name: "content-length below the DATA",
        fields: &[POST, SCHEME, PATH, AUTH, (b"content-length", b"3")],
        data: Some(b"0123456789"),
        forwarded: false,
    },
    Case {
        name: "content-length above the DATA",
        fields: &[POST, SCHEME, PATH, AUTH, (b"content-length", b"30")],
        data: Some(b"0123456789"),
        forwarded: false,
    },
    Case {
        name: "two content-length that differ",
        fields: &[
            POST,
            SCHEME,
            PATH,
            AUTH,
            (b"content-length", b"10"),
            (b"content-length", b"11"),
        ],
        data: Some(b"0123456789"),
        forwarded: false,
    },
    Case {
        name: "a POST whose content-length matches",
        fields: &[POST, SCHEME, PATH, AUTH, (b"content-length", b"10")],
        data: Some(b"0123456789"),
        forwarded: true,
    },
];

/// Send one case on a connection of its own: how it ended, and whether a request reached the
/// backend.
async fn run_case(addr: SocketAddr, seen: &Seen, c: &Case) -> (Outcome, bool) {
    let before = seen.requests.load(Ordering::SeqCst);
    let mut raw = Raw::open(addr, &[]).await;
    let id = raw.id();
    let mut out = Raw::headers(id, c.fields, c.data.is_none());
    if let Some(d) = c.data {
        out.extend(frame(DATA, END_STREAM, id, d));
    }
    raw.send(&out).await;
    let got = raw.outcome(id).await;
    // A request head the backend read is counted at once; give the proxy's side its time
    // before looking.
    tokio::time::sleep(Duration::from_millis(50)).await;
    (got, seen.requests.load(Ordering::SeqCst) > before)
}

/// Every case on a connection of its own, through the balancer and, when it is installed,
/// through Debian's HAProxy (`bind … proto h2`, the same kind of backend): a malformed request
/// gets a reset, a GOAWAY or a 4xx from the balancer, and the backend sees no complete request
/// from it; a valid one gets 200; and nothing HAProxy keeps from its backend reaches the
/// balancer's. The table is docs/balance.md's HTTP/2 table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_are_refused_before_the_backend() {
    let (b, seen) = backend().await;
    let (r, _dir) = balancer(b, "", "[timeouts]\nclient = \"2s\"\nserver = \"2s\"").await;
    let (hb, hseen) = backend().await;
    let haproxy = common::haproxy::start(1, |f| {
        format!(
            "global\n  maxconn 1000\ndefaults\n  mode http\n  timeout connect 2s\n  \
             timeout client 2s\n  timeout server 2s\nfrontend f\n  bind {} proto h2\n  \
             default_backend b\nbackend b\n  server s {hb}\n",
            f[0]
        )
    })
    .await;
    if let Err(why) = &haproxy {
        eprintln!("HAProxy column skipped: {why}");
    }
    let mut wrong = Vec::new();
    eprintln!("| request | netsched | HAProxy |\n|---|---|---|");
    for c in CASES {
        let (got, reached) = run_case(r.listen[0], &seen, c).await;
        let ok = if c.forwarded {
            got == Outcome::Status(200) && reached
        } else {
            // A request whose body turns out wrong may have had its head sent; the backend
            // then never gets a body that ends, so it cannot answer it.
            got.refused() && (!reached || c.data.is_some())
        };
        if !ok {
            wrong.push(format!(
                "{}: {got:?}, reached the backend: {reached}",
                c.name
            ));
        }
        let theirs = match &haproxy {
            Ok(h) => {
                let (hgot, hreached) = run_case(h.frontends[0], &hseen, c).await;
                if hgot.refused() && !hreached && reached && c.data.is_none() {
                    wrong.push(format!(
                        "{}: HAProxy refuses it, netsched forwards it",
                        c.name
                    ));
                }
                format!("{hgot:?}{}", if hreached { ", forwarded" } else { "" })
            }
            Err(_) => "-".into(),
        };
        let ours = format!("{got:?}{}", if reached { ", forwarded" } else { "" });
        eprintln!("| {} | {ours} | {theirs} |", c.name);
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    still_serves(r.listen[0]).await;
}

// ---------------------------------------------------------------------------------------------
// Floods.

fn get_fields(path: &'static [u8]) -> Vec<(&'static [u8], &'static [u8])> {
    vec![GET, SCHEME, (b":path", path), AUTH]
}

/// CVE-2023-44487, both ways. Streams reset as soon as they are opened never reach the
/// balancer's code: `h2` drops them before the server takes them (and ends the connection,
/// `h2_calm`, when more than 20 wait at once), so the backend sees next to none. Streams reset
/// 20 ms later, once their requests are under way (100 at a time): the connection ends long
/// before the client's 10,000 streams, counted as `h2_rapid_reset` (past 100 resets a second)
/// or `h2_calm`, and the backend saw a bounded share of the requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rapid_reset_ends_the_connection() {
    let (b, seen) = backend().await;
    let (r, _dir) = balancer(b, "", "").await;
    let fields = get_fields(b"/sleep/2000");
    for (batch, pause) in [(100, Duration::ZERO), (100, Duration::from_millis(20))] {
        let mut raw = Raw::open(r.listen[0], &[]).await;
        let mut opened = 0;
        let before = seen.requests.load(Ordering::SeqCst);
        for _ in 0..100 {
            let ids: Vec<u32> = (0..batch).map(|_| raw.id()).collect();
            let mut out = Vec::new();
            for &id in &ids {
                out.extend(Raw::headers(id, &fields, true));
                if pause.is_zero() {
                    out.extend(frame(RST_STREAM, 0, id, &8u32.to_be_bytes()));
                }
            }
            if !raw.send(&out).await {
                break;
            }
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
                let resets: Vec<u8> = ids
                    .iter()
                    .flat_map(|&id| frame(RST_STREAM, 0, id, &8u32.to_be_bytes()))
                    .collect();
                if !raw.send(&resets).await {
                    break;
                }
            }
            opened += batch;
        }
        raw.until_end().await;
        let reached = seen.requests.load(Ordering::SeqCst) - before;
        if pause.is_zero() {
            assert!(
                reached <= 100,
                "{reached} of {opened} streams reset at once reached it"
            );
        } else {
            assert!(
                opened < 10_000,
                "the connection took every stream ({opened})"
            );
        }
    }
    // The balancer counts a connection's end once its task has finished, maybe after the
    // client saw it close: each phase's end at most once, the second phase's for sure.
    let ends = || refused(&r, "h2_calm") + refused(&r, "h2_rapid_reset");
    assert!(common::eventually(|| ends() >= 1).await, "no end counted");
    assert!(ends() <= 2, "{} ends counted for two connections", ends());
    let reached = seen.requests.load(Ordering::SeqCst);
    // Of the 20,000 streams the client would have opened.
    assert!(
        reached <= 1000,
        "{reached} reset requests reached the backend"
    );
    still_serves(r.listen[0]).await;
}

/// A header block that never ends (CONTINUATION after CONTINUATION, CVE-2024-27316's family)
/// and one that decodes past the header list bound (an HPACK bomb: one 4 KB field indexed
/// once, then referenced a thousand times) are refused; nothing reaches the backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continuation_floods_and_hpack_bombs_are_refused() {
    let (b, seen) = backend().await;
    let (r, _dir) = balancer(b, "", "").await;
    // CONTINUATION flood: 64 MB offered in 16 KB frames.
    let mut raw = Raw::open(r.listen[0], &[]).await;
    let id = raw.id();
    let mut start = Raw::headers(id, &get_fields(b"/"), true);
    start[4] &= !END_HEADERS;
    raw.send(&start).await;
    let mut junk = Vec::new();
    for i in 0..400 {
        junk.extend([0x00, 0x05]);
        junk.extend(format!("x-{i:03}").as_bytes());
        junk.extend([0x20]);
        junk.extend([b'v'; 32]);
    }
    let cont = frame(CONTINUATION, 0, id, &junk[..16384.min(junk.len())]);
    let mut sent = 0usize;
    while sent < 64 << 20 {
        if !raw.send(&cont).await {
            break;
        }
        sent += cont.len();
    }
    let end = raw.outcome(id).await;
    assert!(
        end.refused(),
        "CONTINUATION flood: {end:?} after {sent} bytes"
    );
    assert!(
        sent < 64 << 20,
        "the flood was read to its end: {sent} bytes"
    );
    // HPACK bomb: index a 4000-byte field (literal with incremental indexing, §6.2.1), then
    // name it 1000 times by index 62 (the first dynamic entry): 4 MB decoded from 4 KB.
    let mut raw = Raw::open(r.listen[0], &[]).await;
    let id = raw.id();
    let mut block = Vec::new();
    for (n, v) in get_fields(b"/") {
        block.push(0);
        block.extend(hpack::encoder::encode_integer(n.len(), 7));
        block.extend_from_slice(n);
        block.extend(hpack::encoder::encode_integer(v.len(), 7));
        block.extend_from_slice(v);
    }
    block.push(0x40);
    block.extend(hpack::encoder::encode_integer(5, 7));
    block.extend_from_slice(b"x-big");
    let mut v = hpack::encoder::encode_integer(4000, 7);
    v.extend(vec![b'b'; 4000]);
    block.extend(v);
    block.extend(std::iter::repeat_n(0x80 | 62, 1000));
    raw.send(&frame(HEADERS, END_HEADERS | END_STREAM, id, &block))
        .await;
    let end = raw.outcome(id).await;
    assert!(end.refused(), "HPACK bomb: {end:?}");
    assert_eq!(seen.requests.load(Ordering::SeqCst), 0);
    still_serves(r.listen[0]).await;
}

/// The process's resident memory, in bytes.
fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = s.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// SETTINGS and PING frames sent without reading a byte back: the balancer holds one pending
/// answer of each, so its memory does not grow with the flood, and other clients are served
/// meanwhile. (The bound is loose: the whole test process's resident memory.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_and_ping_floods_hold_no_growing_queue() {
    let (b, _seen) = backend().await;
    let (r, _dir) = balancer(b, "", "[timeouts]\nclient = \"2s\"").await;
    let before = rss();
    let mut raw = Raw::open(r.listen[0], &[]).await;
    let mut chunk = Vec::new();
    for i in 0..1000u64 {
        chunk.extend(frame(PING, 0, 0, &i.to_be_bytes()));
        chunk.extend(frame(SETTINGS, 0, 0, &[0, 3, 0, 0, 0, 100]));
    }
    // 200k frames (3.4 MB), or until the balancer stops reading; never read back.
    let flood = async {
        let mut frames = 0;
        for _ in 0..100 {
            if raw.s.write_all(&chunk).await.is_err() {
                break;
            }
            frames += 2000;
        }
        frames
    };
    let frames = tokio::time::timeout(Duration::from_secs(10), flood)
        .await
        .unwrap_or(0);
    still_serves(r.listen[0]).await;
    let grown = rss().saturating_sub(before);
    assert!(
        grown < 64 << 20,
        "memory grew by {grown} bytes during a flood of {frames} frames"
    );
}

/// A client that opens its window to 0 (SETTINGS_INITIAL_WINDOW_SIZE) and asks for a large
/// response loses its connection after `timeouts.client` (`h2_starved`), and the backend's
/// slot is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_never_opened_does_not_hold_a_server() {
    let (b, _seen) = backend().await;
    let (r, _dir) = balancer(b, "", "[timeouts]\nclient = \"1s\"").await;
    let mut raw = Raw::open(r.listen[0], &[(4, 0)]).await;
    let id = raw.id();
    raw.send(&Raw::headers(id, &get_fields(b"/big/1000000"), true))
        .await;
    let t0 = std::time::Instant::now();
    raw.until_end().await;
    let took = t0.elapsed();
    assert!(took < PATIENCE, "the connection ended after {took:?}");
    let reasons = r.service.metrics.refused.clone();
    let mut text = String::new();
    let mut reg = prometheus_client::registry::Registry::default();
    reg.register("refused", "", reasons);
    prometheus_client::encoding::text::encode(&mut text, &reg).unwrap();
    assert_eq!(refused(&r, "h2_starved"), 1, "{text}");
    assert!(
        common::eventually(|| common::row(&r, "b").active == 0).await,
        "the server's slot is released"
    );
    still_serves(r.listen[0]).await;
}

/// Streams past `SETTINGS_MAX_CONCURRENT_STREAMS` (100) are refused (`REFUSED_STREAM`), and
/// the backend never has more than 100 of one connection's requests at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_past_the_limit_are_refused() {
    let (b, seen) = backend().await;
    let (r, _dir) = balancer(b, "", "").await;
    let mut raw = Raw::open(r.listen[0], &[]).await;
    let fields = get_fields(b"/sleep/1000");
    let mut out = Vec::new();
    let ids: Vec<u32> = (0..150).map(|_| raw.id()).collect();
    for &id in &ids {
        out.extend(Raw::headers(id, &fields, true));
    }
    raw.send(&out).await;
    let (mut ok, mut refused_streams) = (0, 0);
    let mut dec_left = ids.len();
    while dec_left > 0 {
        let Some((ty, flags, _, p)) = raw.frame().await else {
            break;
        };
        match ty {
            HEADERS => {
                let _ = raw.dec.decode(strip_padding(flags, &p));
                ok += 1;
                dec_left -= 1;
            }
            RST_STREAM => {
                let code = u32::from_be_bytes([p[0], p[1], p[2], p[3]]);
                assert_eq!(code, REFUSED_STREAM);
                refused_streams += 1;
                dec_left -= 1;
            }
            GOAWAY => break,
            _ => {}
        }
    }
    assert_eq!((ok, refused_streams), (100, 50));
    assert!(seen.peak.load(Ordering::SeqCst) <= 100);
    still_serves(r.listen[0]).await;
}

/// A connection without a stream for `timeouts.client` gets `GOAWAY(NO_ERROR)` and closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_is_closed_with_goaway() {
    let (b, _seen) = backend().await;
    let (r, _dir) = balancer(b, "", "[timeouts]\nclient = \"1s\"").await;
    let mut raw = Raw::open(r.listen[0], &[]).await;
    let id = raw.id();
    raw.send(&Raw::headers(id, &get_fields(b"/"), true)).await;
    assert_eq!(raw.outcome(id).await, Outcome::Status(200));
    let t0 = std::time::Instant::now();
    assert_eq!(raw.until_end().await, Some(0));
    assert!(
        t0.elapsed() >= Duration::from_millis(900),
        "{:?}",
        t0.elapsed()
    );
}

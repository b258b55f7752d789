//! Property tests of both HTTP/1.1 readers L7 mode relies on, against a reference reading of
//! RFC 9112 §6.3 written here: our response reader (`h1::Conn` over loopback) and hyper's
//! server reading requests (as `l7.rs` configures it, over `tokio::io::duplex`). Random
//! messages (well-formed, perturbed framing, mutated bytes, or plain noise) must never make
//! either panic, and whenever the reference and the reader both accept a message they must
//! agree on where its head ends, how long its body is, and where the next message starts.

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use netsched_balance::h1::Conn;
use proptest::prelude::*;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A reader that needs more than this is waiting for bytes that will not come.
const WAIT: Duration = Duration::from_secs(2);
const NEXT_RESPONSE: &[u8] = b"HTTP/1.1 299 Next\r\nContent-Length: 0\r\n\r\n";
const NEXT_REQUEST: &[u8] = b"GET /next HTTP/1.1\r\nHost: n\r\n\r\n";

fn find(b: &[u8], pat: &[u8]) -> Option<usize> {
    b.windows(pat.len()).position(|w| w == pat)
}

fn tchar(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c)
}

/// A tiny deterministic generator driven by one proptest seed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len() as u64) as usize]
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

// ---- the reference (RFC 9112, strict) --------------------------------------------------------

struct RefHead {
    start: Vec<String>,
    fields: Vec<(String, String)>,
    len: usize,
}

/// A head with CRLF line ends, token names, no whitespace before a colon, no obs-fold, no
/// control bytes; None if not.
fn ref_head(b: &[u8]) -> Option<RefHead> {
    let end = find(b, b"\r\n\r\n")? + 4;
    let head = &b[..end];
    for (i, &c) in head.iter().enumerate() {
        let bare_lf = c == b'\n' && (i == 0 || head[i - 1] != b'\r');
        let bare_cr = c == b'\r' && head.get(i + 1) != Some(&b'\n');
        let ctl = (c < 0x20 && c != b'\t' && c != b'\r' && c != b'\n') || c >= 0x7f;
        if bare_lf || bare_cr || ctl {
            return None;
        }
    }
    let text = std::str::from_utf8(&head[..end - 4]).ok()?;
    let mut lines = text.split("\r\n");
    let start: Vec<String> = lines.next()?.splitn(3, ' ').map(str::to_string).collect();
    let mut fields = Vec::new();
    for line in lines {
        let (n, v) = line.split_once(':')?;
        if n.is_empty() || !n.bytes().all(tchar) {
            return None;
        }
        fields.push((
            n.to_ascii_lowercase(),
            v.trim_matches([' ', '\t']).to_string(),
        ));
    }
    Some(RefHead {
        start,
        fields,
        len: end,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RefFraming {
    Length(usize),
    Chunked,
    Close,
}

/// §6.3 items 3–8; None where no length can be determined (or the reference refuses).
fn ref_framing(h: &RefHead, request: bool) -> Option<RefFraming> {
    let all = |n: &str| -> Vec<&str> {
        h.fields
            .iter()
            .filter(|(k, _)| k == n)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    let te = all("transfer-encoding");
    let cl = all("content-length");
    if !te.is_empty() {
        let joined = te.join(",");
        let last = joined.split(',').next_back()?.trim().to_ascii_lowercase();
        return match last.as_str() {
            "chunked" => Some(RefFraming::Chunked),
            _ if request => None,
            _ => Some(RefFraming::Close),
        };
    }
    if cl.is_empty() {
        return Some(if request {
            RefFraming::Length(0)
        } else {
            RefFraming::Close
        });
    }
    let mut len = None;
    for v in cl.iter().flat_map(|v| v.split(',')) {
        let v = v.trim();
        if v.is_empty() || v.len() > 15 || !v.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        let n: usize = v.parse().ok()?;
        if len.is_some_and(|l| l != n) {
            return None;
        }
        len = Some(n);
    }
    len.map(RefFraming::Length)
}

/// A chunked body: (decoded, bytes used); None if malformed or incomplete.
fn ref_dechunk(b: &[u8]) -> Option<(Vec<u8>, usize)> {
    let mut pos = 0;
    let mut out = Vec::new();
    loop {
        let eol = find(&b[pos..], b"\r\n")?;
        let line = &b[pos..pos + eol];
        if line.contains(&b'\n') || line.contains(&b'\r') {
            return None;
        }
        let size = line.split(|&c| c == b';').next()?;
        if size.is_empty() || size.len() > 15 || !size.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        let size = usize::from_str_radix(std::str::from_utf8(size).ok()?, 16).ok()?;
        pos += eol + 2;
        if size == 0 {
            loop {
                let eol = find(&b[pos..], b"\r\n")?;
                pos += eol + 2;
                if eol == 0 {
                    return Some((out, pos));
                }
            }
        }
        if b.len() < pos + size + 2 || &b[pos + size..pos + size + 2] != b"\r\n" {
            return None;
        }
        out.extend_from_slice(&b[pos..pos + size]);
        pos += size + 2;
    }
}

/// A response per the reference: (head length, body, where the message ends: None = at EOF,
/// whether the connection stays open after it).
struct RefResponse {
    head_len: usize,
    body: Vec<u8>,
    end: Option<usize>,
    keep_alive: bool,
}

fn ref_response(b: &[u8], head_request: bool) -> Option<RefResponse> {
    let mut skip = 0;
    // Interim 1xx responses (not 101) come before the final one.
    let h = loop {
        let h = ref_head(&b[skip..])?;
        let [version, code, ..] = &h.start[..] else {
            return None;
        };
        if !matches!(version.as_str(), "HTTP/1.1" | "HTTP/1.0")
            || code.len() != 3
            || !code.bytes().all(|c| c.is_ascii_digit())
        {
            return None;
        }
        let code: u16 = code.parse().ok()?;
        if !(100..600).contains(&code) || code == 101 {
            return None;
        }
        if code < 200 {
            skip += h.len;
            continue;
        }
        break h;
    };
    let code: u16 = h.start[1].parse().ok()?;
    let http11 = h.start[0] == "HTTP/1.1";
    let tokens: Vec<String> = h
        .fields
        .iter()
        .filter(|(k, _)| k == "connection")
        .flat_map(|(_, v)| v.split(',').map(|t| t.trim().to_ascii_lowercase()))
        .collect();
    let mut keep_alive = if http11 {
        !tokens.iter().any(|t| t == "close")
    } else {
        tokens.iter().any(|t| t == "keep-alive")
    };
    let start = skip + h.len;
    let framing = if head_request || code == 204 || code == 304 {
        RefFraming::Length(0)
    } else {
        let f = ref_framing(&h, false)?;
        let both = h.fields.iter().any(|(k, _)| k == "content-length")
            && h.fields.iter().any(|(k, _)| k == "transfer-encoding");
        if both {
            keep_alive = false;
        }
        f
    };
    let rest = &b[start..];
    let (body, end) = match framing {
        RefFraming::Length(n) if rest.len() >= n => (rest[..n].to_vec(), Some(start + n)),
        RefFraming::Length(_) => return None,
        RefFraming::Chunked => {
            let (body, used) = ref_dechunk(rest)?;
            (body, Some(start + used))
        }
        RefFraming::Close => {
            keep_alive = false;
            (rest.to_vec(), None)
        }
    };
    Some(RefResponse {
        head_len: start,
        body,
        end,
        keep_alive,
    })
}

// ---- generated messages ----------------------------------------------------------------

fn chunked(r: &mut Rng, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let n = 1 + r.below(rest.len() as u64) as usize;
        let ext = if r.chance(20) { ";e=1" } else { "" };
        out.extend_from_slice(format!("{n:x}{ext}\r\n").as_bytes());
        out.extend_from_slice(&rest[..n]);
        out.extend_from_slice(b"\r\n");
        rest = &rest[n..];
    }
    out.extend_from_slice(b"0\r\n");
    if r.chance(20) {
        out.extend_from_slice(b"X-Trailer: t\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// Header lines and the body encoding, shared by requests and responses.
fn fields_and_body(r: &mut Rng, out: &mut Vec<u8>, body: &[u8], request: bool) {
    let len = body.len();
    let mut lines: Vec<String> = Vec::new();
    let encoding = r.below(10);
    match encoding {
        0..=3 => lines.push(format!("Content-Length: {len}")),
        4..=5 => lines.push("Transfer-Encoding: chunked".into()),
        6 => lines.push(
            r.pick(&[
                "Content-Length: 3, 3",
                "Content-Length: 1, 2",
                "Content-Length: -1",
                "Content-Length: 1e2",
                "Content-Length:",
            ])
            .to_string(),
        ),
        7 => lines.push(format!(
            "Content-Length: {len}\r\nTransfer-Encoding: chunked"
        )),
        8 => lines.push(
            r.pick(&[
                "Transfer-Encoding: gzip, chunked",
                "Transfer-Encoding: chunked, gzip",
                "Transfer-Encoding: identity",
                "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked",
            ])
            .to_string(),
        ),
        _ => {}
    }
    if r.chance(30) {
        lines.push(
            r.pick(&[
                "Connection: close",
                "Connection: keep-alive",
                "Connection: x-a, close",
            ])
            .to_string(),
        );
    }
    if r.chance(20) {
        lines.push(
            r.pick(&[
                "X-Fold: a\r\n b",
                "X-Cr: a\rb",
                "X-Sp : a",
                "X-Lf: a\nX-B: b",
                "X-Tab:\ta\t",
            ])
            .to_string(),
        );
    }
    if request && r.chance(90) {
        lines.push("Host: t".into());
    }
    r.0 ^= lines.len() as u64;
    for i in 0..lines.len() {
        let j = r.below(lines.len() as u64) as usize;
        lines.swap(i, j);
    }
    for l in lines {
        out.extend_from_slice(l.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if encoding == 4 || encoding == 5 || encoding == 7 || encoding == 8 {
        out.extend_from_slice(&chunked(r, body));
    } else {
        out.extend_from_slice(body);
    }
}

/// Flip, insert or drop a byte now and then.
fn mutate(r: &mut Rng, mut m: Vec<u8>) -> Vec<u8> {
    if r.chance(30) && !m.is_empty() {
        let at = r.below(m.len() as u64) as usize;
        let b = *r.pick(b"\r\n :;,0aZ\x00\x7f\t-");
        match r.below(3) {
            0 => m[at] = b,
            1 => m.insert(at, b),
            _ => {
                m.remove(at);
            }
        }
    }
    m
}

fn response_bytes(seed: u64, noise: &[u8]) -> Vec<u8> {
    let mut r = Rng(seed | 1);
    if r.chance(10) {
        return noise.to_vec();
    }
    let mut out = Vec::new();
    if r.chance(10) {
        out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
    }
    let version = r.pick(&["HTTP/1.1", "HTTP/1.1", "HTTP/1.0"]);
    let code = r.pick(&[200u16, 200, 404, 204, 304, 500]);
    out.extend_from_slice(format!("{version} {code} X\r\n").as_bytes());
    let body: Vec<u8> = noise.iter().map(|b| b'a' + b % 26).collect();
    fields_and_body(&mut r, &mut out, &body, false);
    mutate(&mut r, out)
}

fn request_bytes(seed: u64, noise: &[u8]) -> Vec<u8> {
    let mut r = Rng(seed | 1);
    if r.chance(10) {
        return noise.to_vec();
    }
    let method = r.pick(&["GET", "POST", "PUT", "POST"]);
    let version = r.pick(&["HTTP/1.1", "HTTP/1.1", "HTTP/1.0"]);
    let mut out = format!("{method} /x {version}\r\n").into_bytes();
    let body: Vec<u8> = noise.iter().map(|b| b'a' + b % 26).collect();
    fields_and_body(&mut r, &mut out, &body, true);
    mutate(&mut r, out)
}

// ---- our response reader -----------------------------------------------------------------

/// What our reader made of `bytes`.
#[derive(Debug)]
enum Ours {
    /// It refused the head or the body.
    Refused,
    /// It was still waiting for bytes after [`WAIT`].
    Waited,
    /// The body, and whether the next response on the connection was read as the next
    /// response (if the connection was kept).
    Read(Vec<u8>, Option<bool>),
}

async fn ours_response(bytes: Vec<u8>, head_request: bool) -> Ours {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<bool>();
    let server = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let _ = s.write_all(&bytes).await;
        // true: send the next response and hold; false (or the reader gone): close.
        if rx.await == Ok(true) {
            let _ = s.write_all(NEXT_RESPONSE).await;
            tokio::time::sleep(WAIT * 2).await;
        }
    });
    let Ok(mut conn) = Conn::connect(addr, WAIT).await else {
        return Ours::Refused;
    };
    let head = match tokio::time::timeout(WAIT, conn.read_head(head_request)).await {
        Err(_) => return Ours::Waited,
        Ok(Err(_)) => return Ours::Refused,
        Ok(Ok(h)) => h,
    };
    let mut body = head.into_response(conn, WAIT).into_body();
    let mut got = Vec::new();
    let mut tx = Some(tx);
    let ended = tokio::time::timeout(WAIT, async {
        loop {
            match body.frame().await {
                None => return true,
                Some(Ok(f)) => {
                    if let Ok(d) = f.into_data() {
                        got.extend_from_slice(&d);
                    }
                }
                Some(Err(_)) => return false,
            }
        }
    })
    .await;
    if ended != Ok(true) {
        server.abort();
        return if ended.is_err() {
            Ours::Waited
        } else {
            Ours::Refused
        };
    }
    let next = match body.take_reusable() {
        Ok(mut c) => {
            let _ = tx.take().map(|t| t.send(true));
            let h = tokio::time::timeout(WAIT, c.read_head(false)).await;
            Some(matches!(h, Ok(Ok(h)) if h.parts.status.as_u16() == 299))
        }
        Err(_) => None,
    };
    server.abort();
    Ours::Read(got, next)
}

/// Our reader on a body read to EOF: the server closes right after the bytes.
async fn ours_response_to_close(bytes: Vec<u8>, head_request: bool) -> Option<Vec<u8>> {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let _ = s.write_all(&bytes).await;
    });
    let mut conn = Conn::connect(addr, WAIT).await.ok()?;
    let head = tokio::time::timeout(WAIT, conn.read_head(head_request))
        .await
        .ok()?
        .ok()?;
    let body = head.into_response(conn, WAIT).into_body();
    let got = tokio::time::timeout(WAIT, body.collect())
        .await
        .ok()?
        .ok()?;
    server.abort();
    Some(got.to_bytes().to_vec())
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, failure_persistence: None, ..ProptestConfig::default() })]

    /// Our response reader never panics, and agrees with the reference whenever both accept.
    #[test]
    fn response_reader_agrees_with_rfc_9112_framing(
        seed in any::<u64>(),
        noise in prop::collection::vec(any::<u8>(), 0..48),
        head_request in prop::bool::weighted(0.15),
    ) {
        let bytes = response_bytes(seed, &noise);
        let reference = ref_response(&bytes, head_request);
        let shown = bytes.escape_ascii().to_string();
        match reference {
            Some(want) if want.end.is_none() => {
                // Until close: the whole rest is the body.
                if let Some(body) = rt().block_on(ours_response_to_close(bytes.clone(), head_request)) {
                    prop_assert_eq!(body, want.body, "close-delimited body of {} (head {} bytes)", shown, want.head_len);
                }
            }
            Some(want) => {
                let end = want.end.unwrap();
                // Only the message itself is sent: the next one comes once the body is read.
                let msg = bytes[..end].to_vec();
                match rt().block_on(ours_response(msg, head_request)) {
                    Ours::Read(body, next) => {
                        prop_assert_eq!(&body, &want.body, "body of {} (head {} bytes)", shown, want.head_len);
                        if let Some(next) = next {
                            prop_assert!(want.keep_alive, "reused a connection the reference closes: {}", shown);
                            prop_assert!(next, "the next response was not read where it starts: {}", shown);
                        }
                    }
                    Ours::Waited => prop_assert!(false, "waited past the message's end: {}", shown),
                    Ours::Refused => {}
                }
            }
            None => {
                // Only that it neither panics nor hangs past its bounds.
                let _ = rt().block_on(ours_response(bytes, head_request));
            }
        }
    }
}

// ---- hyper's server reading requests ----------------------------------------------------------

/// A request per the reference: its target, body, length, and whether the connection stays
/// open after it. Only origin-form targets are taken.
fn ref_request(b: &[u8]) -> Option<(String, Vec<u8>, usize, bool)> {
    let h = ref_head(b)?;
    let [method, target, version] = &h.start[..] else {
        return None;
    };
    if method.is_empty()
        || !method.bytes().all(tchar)
        || !target.starts_with('/')
        || !target.bytes().all(|c| c.is_ascii_graphic())
        || !matches!(version.as_str(), "HTTP/1.1" | "HTTP/1.0")
    {
        return None;
    }
    let has = |n: &str| h.fields.iter().any(|(k, _)| k == n);
    // Reference refusals: TE with CL, TE in HTTP/1.0 (§6.1), several Host lines (§3.2).
    if (has("transfer-encoding") && (has("content-length") || version == "HTTP/1.0"))
        || h.fields.iter().filter(|(k, _)| k == "host").count() > 1
    {
        return None;
    }
    let tokens: Vec<String> = h
        .fields
        .iter()
        .filter(|(k, _)| k == "connection")
        .flat_map(|(_, v)| v.split(',').map(|t| t.trim().to_ascii_lowercase()))
        .collect();
    let keep = if version == "HTTP/1.1" {
        !tokens.iter().any(|t| t == "close")
    } else {
        tokens.iter().any(|t| t == "keep-alive")
    };
    let rest = &b[h.len..];
    match ref_framing(&h, true)? {
        RefFraming::Length(n) if rest.len() >= n => {
            Some((target.clone(), rest[..n].to_vec(), h.len + n, keep))
        }
        RefFraming::Chunked => {
            let (body, used) = ref_dechunk(rest)?;
            Some((target.clone(), body, h.len + used, keep))
        }
        _ => None,
    }
}

type Seen = Arc<Mutex<Vec<(String, Option<Vec<u8>>)>>>;

/// The requests hyper's server (configured as `l7.rs` does) hands to the service for `bytes`:
/// (target, body if read whole). The client side reads until `answers` responses have begun,
/// the server closes, or [`WAIT`] passes (it never half-closes: hyper's server may stop at a
/// half-close before answering what it has buffered).
async fn hyper_requests(bytes: Vec<u8>, answers: usize) -> Vec<(String, Option<Vec<u8>>)> {
    let (client, server) = tokio::io::duplex(64 * 1024);
    let seen: Seen = Arc::default();
    let s2 = seen.clone();
    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
        let seen = s2.clone();
        async move {
            let target = req.uri().to_string();
            let body = Limited::new(req.into_body(), 1 << 20).collect().await;
            seen.lock()
                .unwrap()
                .push((target, body.ok().map(|b| b.to_bytes().to_vec())));
            Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::new())))
        }
    });
    let mut b = hyper::server::conn::http1::Builder::new();
    b.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(WAIT)
        .max_buf_size(netsched_balance::l7::MAX_HEAD_BYTES.max(8192))
        .keep_alive(true)
        .writev(false);
    let conn = b.serve_connection(TokioIo::new(server), svc);
    let mut client = client;
    let drive = async move {
        let _ = client.write_all(&bytes).await;
        let mut got = Vec::new();
        let mut chunk = [0u8; 4096];
        let begun = |b: &[u8]| b.windows(9).filter(|w| w == b"HTTP/1.1 ").count();
        while begun(&got) < answers {
            match client.read(&mut chunk).await {
                Ok(n) if n > 0 => got.extend_from_slice(&chunk[..n]),
                _ => break,
            }
        }
        // Let the last answer be written whole (hyper's service has run by now).
        let _ = tokio::time::timeout(Duration::from_millis(20), client.read(&mut chunk)).await;
    };
    tokio::pin!(conn);
    let _ = tokio::time::timeout(WAIT, async {
        tokio::select! {
            _ = &mut conn => {}
            _ = drive => {}
        }
    })
    .await;
    let v = seen.lock().unwrap().clone();
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// hyper's server (the balancer's client side) never panics, and where the reference and
    /// hyper both accept a request they agree on its body and on where the next one starts.
    #[test]
    fn request_reader_agrees_with_rfc_9112_framing(
        seed in any::<u64>(),
        noise in prop::collection::vec(any::<u8>(), 0..48),
    ) {
        let first = request_bytes(seed, &noise);
        let reference = ref_request(&first);
        let mut bytes = first.clone();
        if let Some((_, _, end, _)) = &reference {
            bytes.truncate(*end);
        }
        bytes.extend_from_slice(NEXT_REQUEST);
        let answers = match reference {
            Some((_, _, _, true)) => 2,
            // A refused or a closing request: at most one answer to wait for.
            _ => 1,
        };
        let seen = rt().block_on(hyper_requests(bytes.clone(), answers));
        let shown = bytes.escape_ascii().to_string();
        if let (Some((want, body, _, keep)), Some((target, Some(got)))) = (reference, seen.first()) {
            prop_assert_eq!(target, &want, "{}", shown);
            prop_assert_eq!(got, &body, "body of {}", shown);
            if keep {
                prop_assert_eq!(seen.len(), 2, "the next request of {}", shown);
                prop_assert_eq!(seen[1].0.as_str(), "/next", "{}", shown);
            } else {
                prop_assert_eq!(seen.len(), 1, "a request after a close: {}", shown);
            }
        }
        // The bytes hold at most two requests.
        prop_assert!(seen.len() <= 2, "{} requests from {}", seen.len(), shown);
    }
}

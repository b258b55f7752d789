//! L7's own HTTP/1.1 backend client (`h1.rs`) against a scripted raw backend: every response
//! framing of RFC 9112 §6.3, request bodies both ways, connection reuse and its limits, and the
//! bad responses (502 with a reason, or 504).

mod common;
use common::*;
use netsched_balance::Running;
use netsched_testbed::TempDir;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the scripted backend does after writing its answer.
enum Then {
    /// Keep the connection for the next request.
    Keep,
    /// Close it (as a backend whose keep-alive timeout fires right after the response).
    Close,
    /// Keep it open but read nothing more.
    Stall,
}

/// The scripted answer to a request path (the whole response as bytes).
fn answer(method: &str, path: &str, body: &[u8]) -> (Vec<u8>, Then) {
    let ok = |b: &str| format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{b}", b.len());
    let (text, then) = match path {
        "/chunked" => (
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n\
             6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"
                .to_string(),
            Then::Keep,
        ),
        "/big-chunked" => {
            // 100 kB in chunks of 30 kB (more than a read of the balancer), plus a tail.
            let mut t = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_string();
            for c in ["a", "b", "c"] {
                t += &format!("{:x}\r\n{}\r\n", 30_000, c.repeat(30_000));
            }
            t += &format!("{:x}\r\n{}\r\n0\r\n\r\n", 10_000, "d".repeat(10_000));
            (t, Then::Keep)
        }
        "/length-big" => (ok(&"x".repeat(100_000)), Then::Keep),
        "/head" => (
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n".into(),
            Then::Keep,
        ),
        "/204" => ("HTTP/1.1 204 No Content\r\n\r\n".into(), Then::Keep),
        "/304" => (
            "HTTP/1.1 304 Not Modified\r\nETag: \"e\"\r\n\r\n".into(),
            Then::Keep,
        ),
        "/empty" => (ok(""), Then::Keep),
        "/to-close" => ("HTTP/1.1 200 OK\r\n\r\nuntil close".into(), Then::Close),
        // Says close but leaves the socket open: only the header may stop its reuse.
        "/says-close" => (
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok".into(),
            Then::Stall,
        ),
        "/interim" => (
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nfin".into(),
            Then::Keep,
        ),
        // A keep-alive response, then the backend closes the idle connection.
        "/then-close" => (ok("bye"), Then::Close),
        "/malformed" => ("HTTP/1.1 2x0 OK\r\n\r\n".into(), Then::Stall),
        "/bad-length" => (
            "HTTP/1.1 200 OK\r\nContent-Length: 2, 3\r\n\r\nok".into(),
            Then::Stall,
        ),
        "/endless-head" => {
            let fill: String = (0..2000)
                .map(|i| format!("X-Fill-{i}: aaaaaaaa\r\n"))
                .collect();
            (format!("HTTP/1.1 200 OK\r\n{fill}"), Then::Stall)
        }
        "/stalled-head" => ("HTTP/1.1 200 OK\r\nContent-".into(), Then::Stall),
        "/truncated" => (
            "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort".into(),
            Then::Close,
        ),
        "/echo" => (
            ok(&format!("{method} {}", String::from_utf8_lossy(body))),
            Then::Keep,
        ),
        _ => (ok("ok"), Then::Keep),
    };
    (text.into_bytes(), then)
}

/// A request as the backend read it: head, decoded body.
type Seen = (String, Vec<u8>);

/// A raw backend answering by [`answer`]; it counts connections and keeps every request
/// (head, decoded body).
struct Scripted {
    addr: SocketAddr,
    conns: Arc<AtomicU64>,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Scripted {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn find(b: &[u8], pat: &[u8]) -> Option<usize> {
    b.windows(pat.len()).position(|w| w == pat)
}

async fn fill(s: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 16384];
    matches!(s.read(&mut chunk).await, Ok(n) if n > 0 && { buf.extend_from_slice(&chunk[..n]); true })
}

/// Read one request (head, body by Content-Length or chunked) from `s`; None at EOF.
async fn read_request(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<(String, Vec<u8>)> {
    while find(buf, b"\r\n\r\n").is_none() {
        if !fill(s, buf).await {
            return None;
        }
    }
    let end = find(buf, b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&buf[..end]).to_string();
    buf.drain(..end);
    let lower = head.to_ascii_lowercase();
    let mut body = Vec::new();
    if let Some(len) = lower
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .and_then(|v| v.trim().parse::<usize>().ok())
    {
        while buf.len() < len {
            if !fill(s, buf).await {
                return None;
            }
        }
        body = buf.drain(..len).collect();
    } else if lower.contains("\r\ntransfer-encoding: chunked\r\n") {
        loop {
            while find(buf, b"\r\n").is_none() {
                if !fill(s, buf).await {
                    return None;
                }
            }
            let line = find(buf, b"\r\n").unwrap();
            let size = usize::from_str_radix(
                String::from_utf8_lossy(&buf[..line])
                    .split(';')
                    .next()
                    .unwrap()
                    .trim(),
                16,
            )
            .expect("chunk size");
            buf.drain(..line + 2);
            while buf.len() < size + 2 {
                if !fill(s, buf).await {
                    return None;
                }
            }
            if size == 0 {
                assert_eq!(&buf[..2], b"\r\n", "no trailers sent");
                buf.drain(..2);
                break;
            }
            body.extend_from_slice(&buf[..size]);
            assert_eq!(&buf[size..size + 2], b"\r\n");
            buf.drain(..size + 2);
        }
    }
    Some((head, body))
}

async fn scripted() -> Scripted {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let conns = Arc::new(AtomicU64::new(0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (c, seen2) = (conns.clone(), seen.clone());
    let task = tokio::spawn(async move {
        let mut set = tokio::task::JoinSet::new();
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                continue;
            };
            c.fetch_add(1, Ordering::SeqCst);
            let seen = seen2.clone();
            set.spawn(async move {
                let mut buf = Vec::new();
                while let Some((head, body)) = read_request(&mut s, &mut buf).await {
                    seen.lock().unwrap().push((head.clone(), body.clone()));
                    let mut words = head.split(' ');
                    let (method, path) = (words.next().unwrap(), words.next().unwrap_or("/"));
                    let (resp, then) = answer(method, path, &body);
                    if s.write_all(&resp).await.is_err() {
                        return;
                    }
                    match then {
                        Then::Keep => {}
                        Then::Close => return,
                        Then::Stall => {
                            tokio::time::sleep(PATIENCE * 2).await;
                            return;
                        }
                    }
                }
            });
            while set.try_join_next().is_some() {}
        }
    });
    Scripted {
        addr,
        conns,
        seen,
        task,
    }
}

/// Decode a chunked body as the client receives it.
fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line = find(b, b"\r\n").expect("chunk line");
        let size = usize::from_str_radix(std::str::from_utf8(&b[..line]).unwrap().trim(), 16)
            .expect("chunk size");
        b = &b[line + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
}

/// One request through the balancer with `Connection: close`, read to EOF: (status, lower-case
/// head, decoded body).
async fn call(
    l: SocketAddr,
    method: &str,
    path: &str,
    extra: &str,
    body: &[u8],
) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(l).await.unwrap();
    let mut req =
        format!("{method} {path} HTTP/1.1\r\nHost: t.test\r\nConnection: close\r\n{extra}\r\n")
            .into_bytes();
    req.extend_from_slice(body);
    s.write_all(&req).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(PATIENCE, s.read_to_end(&mut out))
        .await
        .expect("response within PATIENCE")
        .unwrap();
    let end = find(&out, b"\r\n\r\n").map(|e| e + 4).unwrap_or(out.len());
    let head = String::from_utf8_lossy(&out[..end]).to_ascii_lowercase();
    let status = head.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let raw = &out[end..];
    let body = if head.contains("\r\ntransfer-encoding: chunked\r\n") {
        dechunk(raw)
    } else {
        raw.to_vec()
    };
    (status, head, body)
}

async fn balancer(b: &Scripted, dir: &TempDir, server_timeout: &str) -> Running {
    balancer_reusing(b, dir, server_timeout, "safe").await
}

/// A balancer with `http_reuse = reuse`.
async fn balancer_reusing(
    b: &Scripted,
    dir: &TempDir,
    server_timeout: &str,
    reuse: &str,
) -> Running {
    let mut text = config_text(
        "l7",
        "{ kind = \"rr\" }",
        &format!("admin = \"127.0.0.1:0\"\nhttp_reuse = \"{reuse}\""),
        &format!("[timeouts]\nserver = \"{server_timeout}\""),
        &[],
        dir,
    );
    text += &format!("[[server]]\nname = \"s\"\naddr = \"{}\"\n", b.addr);
    start(&text, dir).await
}

fn errors(r: &Running, reason: &str) -> f64 {
    metric(
        &metrics_text(r),
        &format!("netsched_balance_errors_total{{backend=\"s\",reason=\"{reason}\"}}"),
    )
}

/// Every response framing reaches the client intact, and the connection is reused exactly
/// when the response was read to its end and kept alive: chunked (extensions and trailers,
/// and chunks larger than a read), Content-Length large and 0, HEAD, 204, 304, a skipped
/// 100 Continue, read-to-close, `Connection: close`. Each client here sends one request per
/// connection, which `http_reuse = "safe"` would send over a new backend connection every
/// time: `always` lets them share one, so that reuse shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_response_framing_is_forwarded_and_reuse_follows_it() {
    let b = scripted().await;
    let dir = TempDir::new("bal-h1-framing").unwrap();
    let r = balancer_reusing(&b, &dir, "5s", "always").await;
    let l = r.listen[0];
    let conns = || b.conns.load(Ordering::SeqCst);

    let (st, head, body) = call(l, "GET", "/chunked", "", b"").await;
    assert_eq!((st, body.as_slice()), (200, &b"hello world"[..]), "{head}");
    assert!(!head.contains("x-trailer"), "{head}");
    let (st, _, body) = call(l, "GET", "/big-chunked", "", b"").await;
    let want: Vec<u8> = ["a", "b", "c"]
        .iter()
        .flat_map(|c| c.repeat(30_000).into_bytes())
        .chain("d".repeat(10_000).into_bytes())
        .collect();
    assert_eq!(st, 200);
    assert!(body == want, "big chunked body: {} bytes", body.len());
    let (st, _, body) = call(l, "GET", "/length-big", "", b"").await;
    assert_eq!((st, body.len()), (200, 100_000));
    assert!(body.iter().all(|&c| c == b'x'));
    let (st, head, body) = call(l, "HEAD", "/head", "", b"").await;
    assert_eq!((st, body.len()), (200, 0), "{head}");
    assert!(head.contains("\r\ncontent-length: 5\r\n"), "{head}");
    for (path, status) in [("/204", 204), ("/304", 304), ("/empty", 200)] {
        let (st, head, body) = call(l, "GET", path, "", b"").await;
        assert_eq!((st, body.len()), (status, 0), "{path}: {head}");
    }
    let (st, _, body) = call(l, "GET", "/interim", "", b"").await;
    assert_eq!((st, body.as_slice()), (200, &b"fin"[..]));
    // All of that on one backend connection.
    assert_eq!(conns(), 1, "{:?}", b.seen.lock().unwrap());

    // Read to close: the body is whole, the connection is not reused.
    let (st, _, body) = call(l, "GET", "/to-close", "", b"").await;
    assert_eq!((st, body.as_slice()), (200, &b"until close"[..]));
    assert_eq!(call(l, "GET", "/", "", b"").await.2, b"ok");
    assert_eq!(conns(), 2);
    // `Connection: close` from the backend (which leaves the socket open): not reused.
    let (st, _, body) = call(l, "GET", "/says-close", "", b"").await;
    assert_eq!((st, body.as_slice()), (200, &b"ok"[..]));
    assert_eq!(call(l, "GET", "/", "", b"").await.2, b"ok");
    assert_eq!(conns(), 3);
    // No errors on the way.
    let m = metrics_text(&r);
    assert!(!m.contains("netsched_balance_errors_total{"), "{m}");
}

/// Request bodies reach the backend whole: Content-Length as is, chunked decoded by hyper and
/// chunked again, in one piece or streamed in parts after a pause (past the first write).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_bodies_both_ways_reach_the_backend() {
    let b = scripted().await;
    let dir = TempDir::new("bal-h1-bodies").unwrap();
    let r = balancer(&b, &dir, "5s").await;
    let l = r.listen[0];

    let (st, _, body) = call(l, "POST", "/echo", "Content-Length: 11\r\n", b"hello world").await;
    assert_eq!((st, body.as_slice()), (200, &b"POST hello world"[..]));
    let chunked = b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
    let (st, _, body) = call(l, "PUT", "/echo", "Transfer-Encoding: chunked\r\n", chunked).await;
    assert_eq!((st, body.as_slice()), (200, &b"PUT hello world"[..]));
    let (st, _, body) = call(l, "POST", "/echo", "Content-Length: 0\r\n", b"").await;
    assert_eq!((st, body.as_slice()), (200, &b"POST "[..]));

    // 100 kB with Content-Length, the second half sent after a pause; then chunked the same way.
    let big = "y".repeat(100_000);
    for chunked in [false, true] {
        let mut s = TcpStream::connect(l).await.unwrap();
        let framing = if chunked {
            "Transfer-Encoding: chunked".to_string()
        } else {
            format!("Content-Length: {}", big.len())
        };
        let head =
            format!("POST /echo HTTP/1.1\r\nHost: t\r\nConnection: close\r\n{framing}\r\n\r\n");
        let (one, two) = big.split_at(50_000);
        let part = |p: &str| {
            if chunked {
                format!("{:x}\r\n{p}\r\n", p.len())
            } else {
                p.to_string()
            }
        };
        s.write_all(format!("{head}{}", part(one)).as_bytes())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let tail = if chunked { "0\r\n\r\n" } else { "" };
        s.write_all(format!("{}{tail}", part(two)).as_bytes())
            .await
            .unwrap();
        let mut out = Vec::new();
        tokio::time::timeout(PATIENCE, s.read_to_end(&mut out))
            .await
            .unwrap()
            .unwrap();
        let text = String::from_utf8_lossy(&out);
        assert!(
            text.starts_with("HTTP/1.1 200 "),
            "{}",
            &text[..text.len().min(200)]
        );
        assert!(text.ends_with(&format!("POST {big}")), "chunked={chunked}");
    }
    let seen = b.seen.lock().unwrap().clone();
    let te: Vec<_> = seen.iter().filter(|(h, _)| h.starts_with("PUT ")).collect();
    assert_eq!(te.len(), 1);
    let lower = te[0].0.to_ascii_lowercase();
    assert!(
        lower.contains("\r\ntransfer-encoding: chunked\r\n"),
        "{lower}"
    );
    assert!(!lower.contains("content-length"), "{lower}");
    // Bodyless requests went without a body or framing of ours.
    let (st, _, _) = call(l, "GET", "/echo", "", b"").await;
    assert_eq!(st, 200);
    let seen = b.seen.lock().unwrap();
    let (h, body) = seen.last().unwrap();
    assert!(
        body.is_empty() && !h.to_ascii_lowercase().contains("transfer-encoding"),
        "{h}"
    );
}

/// A pooled connection the backend closed while idle is replaced by a new one: the client never
/// sees it, with or without a request body, and nothing is counted as an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_connection_the_backend_closed_is_retried_on_a_new_one() {
    let b = scripted().await;
    let dir = TempDir::new("bal-h1-stale").unwrap();
    let r = balancer(&b, &dir, "5s").await;
    let l = r.listen[0];
    for i in 0..5 {
        let (st, _, body) = call(l, "GET", "/then-close", "", b"").await;
        assert_eq!((st, body.as_slice()), (200, &b"bye"[..]), "round {i}");
        // The next request takes the pooled connection the backend has just closed.
        let (st, _, body) = if i % 2 == 0 {
            call(l, "GET", "/then-close", "", b"").await
        } else {
            call(l, "POST", "/then-close", "Content-Length: 3\r\n", b"abc").await
        };
        assert_eq!((st, body.as_slice()), (200, &b"bye"[..]), "round {i}");
    }
    assert_eq!(
        b.conns.load(Ordering::SeqCst),
        10,
        "a connection per request"
    );
    assert_eq!(
        b.seen.lock().unwrap().len(),
        10,
        "each request reached it once"
    );
    let m = metrics_text(&r);
    assert!(!m.contains("netsched_balance_errors_total{"), "{m}");
}

/// Bad responses: a malformed head, a bad Content-Length and a head past the bound are 502
/// `bad_response` at once; a head that stops arriving is 504 at the server timeout; a body cut
/// short ends the client connection early. Each is counted, and the balancer keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_responses_get_502_or_504_with_a_reason() {
    let b = scripted().await;
    let dir = TempDir::new("bal-h1-bad").unwrap();
    let r = balancer(&b, &dir, "1s").await;
    let l = r.listen[0];
    for path in ["/malformed", "/bad-length", "/endless-head"] {
        let t = std::time::Instant::now();
        let (st, _, body) = call(l, "GET", path, "", b"").await;
        assert_eq!(
            (st, body.as_slice()),
            (502, &b"bad_response\n"[..]),
            "{path}"
        );
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "{path}: not at the timeout"
        );
    }
    assert_eq!(errors(&r, "bad_response"), 3.0);
    let (st, _, body) = call(l, "GET", "/stalled-head", "", b"").await;
    assert_eq!((st, body.as_slice()), (504, &b"server_timeout\n"[..]));
    assert_eq!(errors(&r, "server_timeout"), 1.0);
    let (_, head, body) = call(l, "GET", "/truncated", "", b"").await;
    assert!(
        body.len() < 10,
        "a cut body is not completed: {head} {body:?}"
    );
    assert_eq!(call(l, "GET", "/", "", b"").await.2, b"ok");
    assert!(
        eventually(|| r.service.show().iter().all(|s| s.active == 0)).await,
        "leases released"
    );
}

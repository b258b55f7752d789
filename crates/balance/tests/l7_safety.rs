//! L7 as a safe HTTP/1.1 proxy, each case against a backend scripted in the test: no request
//! desync through `Connection`-listed framing, no response crossing between clients, inactivity
//! timeouts through the whole exchange with each failure counted against the side that caused
//! it, and no automatic resend of a non-idempotent request.

mod common;
use common::*;
use netsched_balance::Running;
use netsched_testbed::TempDir;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Everything a scripted backend received, one entry per connection.
type Seen = Arc<Mutex<Vec<Vec<u8>>>>;

/// A backend that runs `script` on each accepted connection (with the connection's index),
/// recording every byte it reads through [`Peer::read_head`].
async fn scripted<F, Fut>(script: F) -> (SocketAddr, Seen, tokio::task::JoinHandle<()>)
where
    F: Fn(usize, Peer) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let s2 = seen.clone();
    let task = tokio::spawn(async move {
        let mut i = 0;
        while let Ok((s, _)) = l.accept().await {
            let slot = {
                let mut g = s2.lock().unwrap();
                g.push(Vec::new());
                g.len() - 1
            };
            tokio::spawn(script(
                i,
                Peer {
                    s,
                    buf: Vec::new(),
                    seen: s2.clone(),
                    slot,
                },
            ));
            i += 1;
        }
    });
    (addr, seen, task)
}

struct Peer {
    s: TcpStream,
    buf: Vec<u8>,
    seen: Seen,
    slot: usize,
}

impl Peer {
    /// Read up to the end of a request head; `None` on EOF. Body bytes stay in `buf`.
    async fn read_head(&mut self) -> Option<String> {
        loop {
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head: Vec<u8> = self.buf.drain(..end + 4).collect();
                return Some(String::from_utf8_lossy(&head).into_owned());
            }
            let mut chunk = [0u8; 4096];
            match self.s.read(&mut chunk).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => {
                    self.seen.lock().unwrap()[self.slot].extend_from_slice(&chunk[..n]);
                    self.buf.extend_from_slice(&chunk[..n]);
                }
            }
        }
    }

    /// Read until EOF (recording), for at most `limit`.
    async fn drain(&mut self, limit: Duration) {
        let mut chunk = [0u8; 4096];
        while let Ok(Ok(n)) = tokio::time::timeout(limit, self.s.read(&mut chunk)).await {
            if n == 0 {
                return;
            }
            self.seen.lock().unwrap()[self.slot].extend_from_slice(&chunk[..n]);
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        let _ = self.s.write_all(bytes).await;
    }
}

fn ok(body: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Every request head a backend connection received, in order.
fn requests(seen: &Seen) -> Vec<String> {
    seen.lock()
        .unwrap()
        .iter()
        .flat_map(|c| {
            String::from_utf8_lossy(c)
                .split("\r\n\r\n")
                .filter_map(|p| p.lines().next().map(str::to_string))
                .filter(|l| l.contains(" HTTP/1."))
                .collect::<Vec<_>>()
        })
        .collect()
}

async fn balancer(backend: SocketAddr, timeouts: &str, top: &str, tag: &str) -> (Running, TempDir) {
    let dir = TempDir::new(tag).unwrap();
    let mut text = config_text(
        "l7",
        "{ kind = \"rr\" }",
        &format!("admin = \"127.0.0.1:0\"\n{top}"),
        &format!("[timeouts]\n{timeouts}"),
        &[],
        &dir,
    );
    text += &format!("[[server]]\nname = \"raw\"\naddr = \"{backend}\"\n");
    let r = start(&text, &dir).await;
    (r, dir)
}

/// Send raw bytes on a new connection and read until the balancer closes it (bounded).
async fn raw_exchange(at: SocketAddr, req: &[u8]) -> String {
    let mut s = TcpStream::connect(at).await.unwrap();
    s.write_all(req).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(PATIENCE, s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// A request that names `Content-Length` or `Transfer-Encoding` in `Connection` used to lose
/// its framing field on the way to the backend, which then read the body as a second request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn framing_fields_named_in_connection_are_refused_not_smuggled() {
    let (addr, seen, _t) = scripted(|_, mut p| async move {
        while p.read_head().await.is_some() {
            p.send(ok("ok").as_bytes()).await;
        }
    })
    .await;
    let (r, _dir) = balancer(addr, "", "", "bal-smuggle").await;
    let smuggled = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
    let cases = [
        format!(
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\nConnection: content-length\r\n\r\n{smuggled}",
            smuggled.len()
        ),
        format!(
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive, Transfer-Encoding\r\n\r\n{:x}\r\n{smuggled}\r\n0\r\n\r\n",
            smuggled.len()
        ),
    ];
    for req in &cases {
        let out = raw_exchange(r.listen[0], req.as_bytes()).await;
        assert!(out.starts_with("HTTP/1.1 400 "), "{req:?} -> {out:?}");
    }
    // Both Content-Length and Transfer-Encoding: hyper's server drops the Content-Length and
    // reads the chunked body (RFC 9112 §6.3 item 3), then closes the connection, so what
    // follows the body is never read as a request.
    let both = format!(
        "POST /both HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{smuggled}"
    );
    let out = raw_exchange(r.listen[0], both.as_bytes()).await;
    assert!(
        out.starts_with("HTTP/1.1 200 ") && out.to_ascii_lowercase().contains("connection: close"),
        "{out:?}"
    );
    // A fair request still passes, with its framing.
    let fair =
        "POST /fair HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc";
    let out = raw_exchange(r.listen[0], fair.as_bytes()).await;
    assert!(out.starts_with("HTTP/1.1 200 "), "{out}");
    let reqs = requests(&seen);
    assert_eq!(
        reqs,
        ["POST /both HTTP/1.1", "POST /fair HTTP/1.1"],
        "the backend saw {reqs:?}"
    );
    let all = String::from_utf8_lossy(&seen.lock().unwrap().concat()).to_ascii_lowercase();
    assert!(all.contains("content-length: 3\r\n"), "{all}");
    assert!(
        all.contains("post /both http/1.1\r\nhost: a\r\nx-forwarded-for: 127.0.0.1\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n"),
        "one framing field, chunked: {all}"
    );
    let m = metrics_text(&r);
    assert_eq!(
        metric(&m, "netsched_balance_refused_total{reason=\"bad_request\"}"),
        2.0,
        "{m}"
    );
}

/// Bytes a backend sends after a complete response (an unrequested second response, a body
/// on a HEAD answer; at once or a little later) never reach the next client: the connection is
/// closed and counted, and each client gets its own answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_after_a_response_never_reach_the_next_client() {
    let (addr, seen, _t) = scripted(|_, mut p| async move {
        while let Some(head) = p.read_head().await {
            let path = head.split(' ').nth(1).unwrap_or("").to_string();
            let own = format!("for {path}");
            match path.as_str() {
                "/extra-now" => {
                    p.send(format!("{}{}", ok(&own), ok("STOLEN")).as_bytes())
                        .await
                }
                "/extra-later" => {
                    p.send(ok(&own).as_bytes()).await;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    p.send(ok("STOLEN").as_bytes()).await;
                }
                "/head" => {
                    p.send(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nSTOLEN")
                        .await
                }
                _ => p.send(ok(&own).as_bytes()).await,
            }
        }
    })
    .await;
    let (r, _dir) = balancer(addr, "", "", "bal-extra").await;
    let l = r.listen[0];
    for first in ["/extra-now", "/extra-later", "/head"] {
        let method = if first == "/head" { "HEAD" } else { "GET" };
        let req = format!("{method} {first} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
        let out = raw_exchange(l, req.as_bytes()).await;
        assert!(out.starts_with("HTTP/1.1 200 "), "{out}");
        assert!(!out.contains("STOLEN"), "{first}: {out}");
        // Let the late bytes arrive at the idle connection before the next request.
        tokio::time::sleep(Duration::from_millis(300)).await;
        for i in 0..3 {
            let path = format!("/next{i}");
            let req = format!("GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
            let out = raw_exchange(l, req.as_bytes()).await;
            assert!(
                out.ends_with(&format!("for {path}")),
                "after {first}, {path} got {out:?}"
            );
        }
    }
    let m = metrics_text(&r);
    let unexpected = metric(
        &m,
        "netsched_balance_errors_total{backend=\"raw\",reason=\"unexpected_data\"}",
    );
    assert_eq!(unexpected, 3.0, "one per misbehaving response: {m}");
    assert_eq!(requests(&seen).len(), 12);
}

/// A backend that stalls mid-body is cut after `timeouts.server` (not held while the client
/// waits), counted as the backend's timeout, and its slot is freed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_stalled_mid_body_times_out_and_frees_its_slot() {
    let (addr, _seen, _t) = scripted(|_, mut p| async move {
        while let Some(head) = p.read_head().await {
            if head.starts_with("GET /stall ") {
                p.send(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
                    .await;
                tokio::time::sleep(Duration::from_secs(60)).await;
            } else {
                p.send(ok("ok").as_bytes()).await;
            }
        }
    })
    .await;
    let (r, _dir) = balancer(addr, "server = \"400ms\"", "", "bal-midbody").await;
    let t0 = Instant::now();
    let out = raw_exchange(
        r.listen[0],
        b"GET /stall HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    )
    .await;
    let took = t0.elapsed();
    assert!(
        out.starts_with("HTTP/1.1 200 ") && out.ends_with("0123456789"),
        "{out:?}"
    );
    assert!(took >= Duration::from_millis(400), "cut early: {took:?}");
    assert!(took < PATIENCE, "never cut: {took:?}");
    let m = metrics_text(&r);
    assert_eq!(
        metric(
            &m,
            "netsched_balance_errors_total{backend=\"raw\",reason=\"server_timeout\"}"
        ),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            "netsched_balance_refused_total{reason=\"client_error\"}"
        ),
        0.0,
        "the backend's fault is not the client's: {m}"
    );
    assert!(eventually(|| row(&r, "raw").active == 0).await);
}

/// A backend that closes mid-body is counted as a truncated response from the backend, not as
/// a client error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_response_is_counted_against_the_backend() {
    let (addr, _seen, _t) = scripted(|_, mut p| async move {
        if p.read_head().await.is_some() {
            p.send(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
                .await;
        }
    })
    .await;
    let (r, _dir) = balancer(addr, "", "", "bal-trunc").await;
    let out = raw_exchange(
        r.listen[0],
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    )
    .await;
    // hyper's server drops the connection when the body fails, before or after flushing
    // what it had: the client never sees a complete response.
    let body = out.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    assert!(body.len() < 100, "{out:?}");
    let m = metrics_text(&r);
    assert_eq!(
        metric(
            &m,
            "netsched_balance_errors_total{backend=\"raw\",reason=\"truncated_response\"}"
        ),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            "netsched_balance_refused_total{reason=\"client_error\"}"
        ),
        0.0,
        "{m}"
    );
}

/// Clients that never read a large response lose their connection after `timeouts.client`,
/// and their `maxconn` slots go back to everyone else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_never_read_lose_their_slot_after_the_client_timeout() {
    const BIG: usize = 32 << 20;
    let (addr, _seen, _t) = scripted(|_, mut p| async move {
        while let Some(head) = p.read_head().await {
            if head.starts_with("GET /big ") {
                let mut resp =
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {BIG}\r\n\r\n").into_bytes();
                resp.resize(resp.len() + BIG, b'x');
                p.send(&resp).await;
            } else {
                p.send(ok("small").as_bytes()).await;
            }
        }
    })
    .await;
    let (r, _dir) = balancer(
        addr,
        "client = \"500ms\"\nqueue = \"20s\"",
        "[defaults]\nmaxconn = 1",
        "bal-noread",
    )
    .await;
    // Two clients ask for the big response and never read it.
    let mut stuck = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(r.listen[0]).await.unwrap();
        s.write_all(b"GET /big HTTP/1.1\r\nHost: a\r\n\r\n")
            .await
            .unwrap();
        stuck.push(s);
    }
    // Everyone else is served once their slot is released (the queue waits up to 20 s).
    let t0 = Instant::now();
    let out = raw_exchange(
        r.listen[0],
        b"GET /small HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(out.ends_with("small"), "{out:?} after {:?}", t0.elapsed());
    // The connection's end is counted by its task just after the slot is released.
    let timed_out = || {
        metric(
            &metrics_text(&r),
            "netsched_balance_refused_total{reason=\"client_timeout\"}",
        ) >= 1.0
    };
    assert!(eventually(timed_out).await, "{}", metrics_text(&r));
    drop(stuck);
}

/// A slow-uploading client is the client's timeout (408, `refused{client_timeout}`), not the
/// server's, even when the server timeout is the shorter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_upload_is_the_clients_timeout() {
    let (addr, _seen, _t) = scripted(|_, mut p| async move {
        if p.read_head().await.is_some() {
            p.drain(Duration::from_secs(30)).await;
        }
    })
    .await;
    let (r, _dir) = balancer(
        addr,
        "server = \"300ms\"\nclient = \"700ms\"",
        "",
        "bal-upload",
    )
    .await;
    let mut s = TcpStream::connect(r.listen[0]).await.unwrap();
    s.write_all(b"POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n0123456789")
        .await
        .unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(PATIENCE, s.read_to_end(&mut out)).await;
    let out = String::from_utf8_lossy(&out);
    assert!(out.starts_with("HTTP/1.1 408 "), "{out:?}");
    let m = metrics_text(&r);
    assert_eq!(
        metric(
            &m,
            "netsched_balance_refused_total{reason=\"client_timeout\"}"
        ),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            "netsched_balance_errors_total{backend=\"raw\",reason=\"server_timeout\"}"
        ),
        0.0,
        "{m}"
    );
}

/// A reused backend connection that turns out closed: an idempotent request whole at hand is
/// sent once more on a new connection (counted); a POST is not (RFC 9110 §9.2.2), it gets 502
/// under `http_reuse = "always"`. Under `safe` (the default) the same POST never meets a
/// reused connection: it is answered, sent once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_idempotent_requests_are_retried_on_a_new_connection() {
    // Each connection answers its first request and then closes, without answering, on the
    // second: the close a reused connection can meet at any time.
    let script = |_: usize, mut p: Peer| async move {
        if p.read_head().await.is_some() {
            p.send(ok("first").as_bytes()).await;
        }
        let _ = p.read_head().await;
        p.drain(Duration::from_millis(50)).await;
    };
    let (addr, seen, _t) = scripted(script).await;
    let (r, _dir) = balancer(addr, "", "http_reuse = \"always\"", "bal-retry").await;
    let l = r.listen[0];
    let get = b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
    assert!(raw_exchange(l, get).await.ends_with("first"));
    let post =
        b"POST /pay HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc";
    let out = raw_exchange(l, post).await;
    assert!(out.starts_with("HTTP/1.1 502 "), "{out:?}");
    let posts = requests(&seen)
        .iter()
        .filter(|r| r.starts_with("POST "))
        .count();
    assert_eq!(
        posts,
        1,
        "the POST was sent {posts} times: {:?}",
        requests(&seen)
    );
    // A GET on the next reused connection is sent again, once, and answered.
    assert!(raw_exchange(l, get).await.ends_with("first"));
    let out = raw_exchange(l, get).await;
    assert!(out.ends_with("first"), "{out:?}");
    let m = metrics_text(&r);
    assert_eq!(
        metric(&m, "netsched_balance_retries_total{backend=\"raw\"}"),
        1.0,
        "{m}"
    );

    let (addr, seen, _t) = scripted(script).await;
    let (r, _dir) = balancer(addr, "", "", "bal-retry-safe").await;
    let l = r.listen[0];
    assert!(raw_exchange(l, get).await.ends_with("first"));
    let out = raw_exchange(l, post).await;
    assert!(
        out.starts_with("HTTP/1.1 200 ") && out.ends_with("first"),
        "{out:?}"
    );
    let posts = requests(&seen)
        .iter()
        .filter(|r| r.starts_with("POST "))
        .count();
    assert_eq!(posts, 1, "{:?}", requests(&seen));
    let m = metrics_text(&r);
    assert_eq!(
        metric(
            &m,
            "netsched_balance_reuse_new_connections_total{backend=\"raw\"}"
        ),
        2.0,
        "both first requests of their client connections: {m}"
    );
}

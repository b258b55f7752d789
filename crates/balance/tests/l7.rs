//! L7 mode on loopback with our own backends.

mod common;
use common::*;
use netsched_testbed::TempDir;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Pure hashes spread distinct keys; lblc/lblcr send a new key to the least-loaded server
/// (the first, when idle) and then keep it there.
const HASHING: [&str; 3] = ["dh", "sh", "mh"];
const STICKY: [&str; 5] = ["lblc", "lblcr", "dh", "sh", "mh"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_balancer_kind_schedules_real_requests() {
    let bs = [
        http_backend("a").await,
        http_backend("b").await,
        http_backend("c").await,
    ];
    for kind in kinds() {
        let dir = TempDir::new("bal-kinds").unwrap();
        let refs: Vec<&Backend> = bs.iter().collect();
        let text = config_text(
            "l7",
            &format!("{{ kind = \"{kind}\" }}"),
            "hash_key = \"uri\"",
            "",
            &refs,
            &dir,
        );
        let r = start(&text, &dir).await;
        let mut seen: HashMap<String, u32> = HashMap::new();
        let n = 30;
        for i in 0..n {
            let (status, body) = get(r.listen[0], &format!("/item/{i}"), "x").await;
            assert_eq!(status, 200, "{kind}: request {i} got {status} {body}");
            *seen.entry(body).or_default() += 1;
        }
        assert_eq!(seen.values().sum::<u32>(), n, "{kind}: {seen:?}");
        assert!(
            seen.keys().all(|k| ["a", "b", "c"].contains(&k.as_str())),
            "{kind}: {seen:?}"
        );
        if kind == "rr" || kind == "wrr" {
            // Equal weights, one request at a time: exactly even.
            assert!(seen.values().all(|&v| v == n / 3), "{kind}: {seen:?}");
        }
        if HASHING.contains(&kind) {
            // 30 distinct URIs hash onto more than one of three servers.
            assert!(
                seen.len() >= 2,
                "{kind} with hash_key = uri used one server: {seen:?}"
            );
        }
        if STICKY.contains(&kind) {
            // And the same URI goes to the same server again.
            let (_, first) = get(r.listen[0], "/item/7", "x").await;
            let (_, again) = get(r.listen[0], "/item/7", "x").await;
            assert_eq!(first, again, "{kind}: same uri, different server");
        }
        // Every lease was released.
        assert!(
            eventually(|| r
                .service
                .show()
                .iter()
                .all(|s| s.active == 0 && s.inactive == 0))
            .await,
            "{kind}: {:?}",
            r.service.show()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_key_host_keeps_a_host_on_one_server_and_keep_alive_works() {
    let bs = [
        http_backend("a").await,
        http_backend("b").await,
        http_backend("c").await,
    ];
    let dir = TempDir::new("bal-host").unwrap();
    let refs: Vec<&Backend> = bs.iter().collect();
    let r = start(
        &config_text(
            "l7",
            "{ kind = \"dh\" }",
            "hash_key = \"host\"",
            "",
            &refs,
            &dir,
        ),
        &dir,
    )
    .await;
    let mut by_host = HashMap::new();
    for i in 0..40 {
        let host = format!("site{}.example", i % 8);
        let (s, body) = get(r.listen[0], &format!("/p{i}"), &host).await;
        assert_eq!(s, 200);
        let prev = by_host.insert(host.clone(), body.clone());
        if let Some(p) = prev {
            assert_eq!(p, body, "host {host} moved between servers");
        }
    }
    let distinct: std::collections::HashSet<_> = by_host.values().collect();
    assert!(
        distinct.len() >= 2,
        "8 hosts all on one server: {by_host:?}"
    );

    // Three requests on one keep-alive client connection all get answers.
    let mut s = TcpStream::connect(r.listen[0]).await.unwrap();
    for i in 0..3 {
        s.write_all(format!("GET /k{i} HTTP/1.1\r\nHost: site1.example\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut buf = vec![0u8; 4096];
        let n = tokio::time::timeout(PATIENCE, s.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        let (status, body) = parse(&buf[..n]);
        assert_eq!(
            (status, body.as_str()),
            (200, by_host["site1.example"].as_str())
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_http_gets_400_and_slow_headers_time_out() {
    let b = http_backend("a").await;
    let dir = TempDir::new("bal-bad").unwrap();
    let r = start(
        &config_text(
            "l7",
            "{ kind = \"rr\" }",
            "admin = \"127.0.0.1:0\"",
            "[timeouts]\nheader = \"300ms\"",
            &[&b],
            &dir,
        ),
        &dir,
    )
    .await;
    // Malformed: a request line that is not HTTP.
    let mut s = TcpStream::connect(r.listen[0]).await.unwrap();
    s.write_all(b"THIS IS NOT HTTP\r\n\r\n").await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(PATIENCE, s.read_to_end(&mut out))
        .await
        .expect("connection closed")
        .unwrap();
    assert_eq!(parse(&out).0, 400, "{}", String::from_utf8_lossy(&out));
    // Slow headers: half a head, then nothing. The balancer closes within its header timeout
    // (bounded here by PATIENCE, never measured tightly).
    let mut s = TcpStream::connect(r.listen[0]).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").await.unwrap();
    let t = Instant::now();
    let mut out = Vec::new();
    tokio::time::timeout(PATIENCE, s.read_to_end(&mut out))
        .await
        .expect("slow header connection was never closed")
        .ok();
    assert!(
        t.elapsed() >= Duration::from_millis(250),
        "closed before the header timeout"
    );
    assert_eq!(b.hits(), 0, "nothing reached the backend");
    let m = metrics_text(&r);
    assert!(
        metric(&m, "netsched_balance_refused_total{reason=\"bad_request\"}") >= 1.0,
        "{m}"
    );
    assert!(
        metric(
            &m,
            "netsched_balance_refused_total{reason=\"header_timeout\"}"
        ) >= 1.0,
        "{m}"
    );
    // And the balancer still serves.
    assert_eq!(get(r.listen[0], "/", "x").await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maxconn_queue_full_and_queue_timeout_give_503_with_counts() {
    let b = http_backend("a").await;
    let dir = TempDir::new("bal-queue").unwrap();
    let r = start(
        &config_text(
            "l7",
            "{ kind = \"wlc\" }",
            "admin = \"127.0.0.1:0\"",
            "[timeouts]\nqueue = \"300ms\"\n[defaults]\nmaxconn = 1\nqueue_limit = 1",
            &[&b],
            &dir,
        ),
        &dir,
    )
    .await;
    let addr = r.listen[0];
    // A holds the only slot for 3 s.
    let a = tokio::spawn(async move { get(addr, "/sleep/3000", "x").await });
    assert!(eventually(|| row(&r, "a").active == 1).await);
    // B waits in the queue and expires after 300 ms.
    let bq = tokio::spawn(async move { get(addr, "/", "x").await });
    assert!(
        eventually(|| metric(&metrics_text(&r), "netsched_balance_queue_length ") == 1.0).await
    );
    // C finds the queue full.
    let (c, body) = get(addr, "/", "x").await;
    assert_eq!((c, body.trim()), (503, "queue_full"));
    let (bs, body) = bq.await.unwrap();
    assert_eq!((bs, body.trim()), (503, "queue_timeout"));
    let (as_, body) = a.await.unwrap();
    assert_eq!((as_, body.as_str()), (200, "a"));
    let m = metrics_text(&r);
    assert_eq!(
        metric(&m, "netsched_balance_refused_total{reason=\"queue_full\"}"),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            "netsched_balance_refused_total{reason=\"queue_timeout\"}"
        ),
        1.0,
        "{m}"
    );
    assert_eq!(metric(&m, "netsched_balance_queue_length "), 0.0, "{m}");
    assert_eq!(b.hits(), 1, "only A reached the backend");
    assert_eq!(
        metric(&m, "netsched_balance_requests_total{backend=\"a\"}"),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric(&m, "netsched_balance_response_seconds_count{backend=\"a\"}"),
        1.0,
        "{m}"
    );
    // A queued request that gets a slot in time is served: two at once with maxconn 1.
    let x = tokio::spawn(async move { get(addr, "/sleep/50", "x").await });
    let y = tokio::spawn(async move { get(addr, "/sleep/50", "x").await });
    let (x, y) = (x.await.unwrap(), y.await.unwrap());
    // Each either got served or timed out in the queue (300 ms vs a 50 ms request: served on any
    // sane machine, but a stalled machine may expire it, which is still a counted 503).
    for (s, body) in [x, y] {
        assert!(
            s == 200 || (s == 503 && body.trim() == "queue_timeout"),
            "{s} {body}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_backend_is_taken_out_and_failures_are_counted_and_bounded() {
    let (a, b) = (http_backend("a").await, http_backend("b").await);
    let dir = TempDir::new("bal-kill").unwrap();
    let r = start(
        &config_text(
            "l7",
            "{ kind = \"rr\" }",
            "admin = \"127.0.0.1:0\"",
            "[health]\nkind = \"http\"\npath = \"/health\"\ninterval = \"100ms\"\nrise = 2\nfall = 2\ntimeout = \"500ms\"",
            &[&a, &b],
            &dir,
        ),
        &dir,
    )
    .await;
    for _ in 0..4 {
        assert_eq!(get(r.listen[0], "/", "x").await.0, 200);
    }
    b.kill();
    let killed = Instant::now();
    let (mut ok, mut failed) = (0u32, 0u32);
    while row(&r, "b").health == "up" {
        assert!(killed.elapsed() < PATIENCE, "b never marked down");
        match get(r.listen[0], "/", "x").await.0 {
            200 => ok += 1,
            _ => failed += 1,
        }
    }
    let took = killed.elapsed();
    // After it is down: every request succeeds on a.
    for _ in 0..20 {
        let (s, body) = get(r.listen[0], "/", "x").await;
        assert_eq!((s, body.as_str()), (200, "a"));
    }
    let m = metrics_text(&r);
    let errors = metric(
        &m,
        "netsched_balance_errors_total{backend=\"b\",reason=\"connect\"}",
    );
    assert_eq!(
        errors, failed as f64,
        "every failed request is counted: {m}"
    );
    // Bounded: rr sends b at most every other request while it is still up.
    assert!(failed <= ok + 1, "failed {failed}, ok {ok}");
    assert_eq!(
        metric(&m, "netsched_balance_health_up{backend=\"b\"}"),
        0.0,
        "{m}"
    );
    eprintln!("b marked down {took:?} after the kill (fall 2 x interval 100ms); {failed} failed, {ok} ok meanwhile");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_weight_drain_ready_and_slow_start_take_effect_without_restart() {
    let (a, b) = (http_backend("a").await, http_backend("b").await);
    let dir = TempDir::new("bal-weight").unwrap();
    let r = start(
        &config_text(
            "l7",
            "{ kind = \"wrr\" }",
            "",
            "[defaults]\nslow_start = \"1h\"",
            &[&a, &b],
            &dir,
        ),
        &dir,
    )
    .await;
    let sock = r.control_socket.clone();
    let ctl = move |line: &str| {
        netsched_balance::control::request(&sock, line).map_err(|e| e.to_string())
    };
    let count = |n: u32| {
        let addr = r.listen[0];
        async move {
            let mut m: HashMap<String, u32> = HashMap::new();
            for _ in 0..n {
                let (s, body) = get(addr, "/", "x").await;
                assert_eq!(s, 200);
                *m.entry(body).or_default() += 1;
            }
            m
        }
    };
    ctl("set-weight a 3").unwrap();
    let m = count(40).await;
    assert_eq!((m["a"], m["b"]), (30, 10), "wrr 3:1");
    ctl("drain b").unwrap();
    let m = count(10).await;
    assert_eq!(m.get("b"), None, "{m:?}");
    // Back from drain with a 1-hour slow start: weight ramps from 1 (of 1): b gets its share,
    // but a (weight 3) with no ramp. Effective weight of b is reported.
    ctl("ready b").unwrap();
    assert_eq!(row(&r, "b").effective_weight, 1);
    ctl("set-weight b 100").unwrap();
    // Slow start began at `ready`: after well under 1 h, b is far below 100.
    assert!(row(&r, "b").effective_weight < 50, "{:?}", row(&r, "b"));
    let e = ctl("set-weight nobody 3").unwrap_err();
    assert!(e.contains("nobody"), "{e}");
    let e = ctl("set-weight a lots").unwrap_err();
    assert!(e.contains("lots"), "{e}");
    let e = ctl("frobnicate").unwrap_err();
    assert!(e.contains("frobnicate"), "{e}");
    let json = ctl("show-servers --json").unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 2, "{json}");
    let bad = netsched_util::json_units::violations(&v);
    assert!(
        bad.is_empty(),
        "numbers without their unit: {bad:?}\n{json}"
    );
    // `show` (the CLI's verb) is the same request on the wire (b's effective weight may have
    // moved on in between: slow start).
    let names = |v: &serde_json::Value| -> Vec<String> {
        let rows = v.as_array().unwrap().iter();
        rows.map(|r| r["name"].to_string()).collect()
    };
    let again: serde_json::Value = serde_json::from_str(&ctl("show --json").unwrap()).unwrap();
    assert_eq!(names(&again), names(&v), "{again}");
    // add-server / del-server.
    let c = http_backend("c").await;
    ctl(&format!("add-server c {} --weight 1", c.addr)).unwrap();
    ctl("del-server a").unwrap();
    ctl("del-server b").unwrap();
    let m = count(5).await;
    assert_eq!(m.get("c"), Some(&5), "{m:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_backend_gets_504_and_a_dead_one_502_both_counted() {
    let a = http_backend("a").await;
    // A port nobody listens on: bind, learn the port, close.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let dir = TempDir::new("bal-stall").unwrap();
    let mut text = config_text(
        "l7",
        "{ kind = \"rr\" }",
        "admin = \"127.0.0.1:0\"",
        "[timeouts]\nserver = \"300ms\"",
        &[&a],
        &dir,
    );
    text += &format!("[[server]]\nname = \"dead\"\naddr = \"{dead}\"\n");
    let r = start(&text, &dir).await;
    let (s1, b1) = get(r.listen[0], "/sleep/5000", "x").await; // a, stalls past 300 ms
    let (s2, b2) = get(r.listen[0], "/", "x").await; // dead
    assert_eq!((s1, b1.trim()), (504, "server_timeout"));
    assert_eq!((s2, b2.trim()), (502, "connect"));
    let m = metrics_text(&r);
    assert_eq!(
        metric(
            &m,
            "netsched_balance_errors_total{backend=\"a\",reason=\"server_timeout\"}"
        ),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            "netsched_balance_errors_total{backend=\"dead\",reason=\"connect\"}"
        ),
        1.0,
        "{m}"
    );
    // The slots were released: nothing active.
    assert!(
        eventually(|| r.service.show().iter().all(|s| s.active == 0)).await,
        "{:?}",
        r.service.show()
    );
    // And a keeps serving.
    assert_eq!(get(r.listen[0], "/", "x").await, (200, "a".to_string()));
}

/// An idle keep-alive client is closed after `timeouts.header` (HAProxy's `timeout
/// http-keep-alive` falls back to `timeout http-request` the same way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keep_alive_connections_are_closed_after_the_header_timeout() {
    let a = http_backend("a").await;
    let dir = TempDir::new("bal-idle").unwrap();
    let r = start(
        &config_text(
            "l7",
            "{ kind = \"rr\" }",
            "",
            "[timeouts]\nheader = \"300ms\"",
            &[&a],
            &dir,
        ),
        &dir,
    )
    .await;
    let mut s = TcpStream::connect(r.listen[0]).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(PATIENCE, s.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(parse(&buf[..n]).0, 200);
    let t = Instant::now();
    let n = tokio::time::timeout(PATIENCE, s.read(&mut buf))
        .await
        .expect("idle connection never closed")
        .unwrap();
    assert_eq!(n, 0, "expected EOF");
    assert!(
        t.elapsed() >= Duration::from_millis(250),
        "closed too early: {:?}",
        t.elapsed()
    );
}

/// Stuck control clients (connected, never sending) neither block the data path nor other
/// control requests; each is dropped after the control deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stuck_control_clients_do_not_stall_requests_or_control() {
    let a = http_backend("a").await;
    let dir = TempDir::new("bal-ctlstall").unwrap();
    let r = start(
        &config_text("l7", "{ kind = \"rr\" }", "", "", &[&a], &dir),
        &dir,
    )
    .await;
    let mut stuck = Vec::new();
    for _ in 0..50 {
        stuck.push(
            tokio::net::UnixStream::connect(&r.control_socket)
                .await
                .unwrap(),
        );
    }
    for _ in 0..5 {
        assert_eq!(get(r.listen[0], "/", "x").await, (200, "a".to_string()));
    }
    let sock = r.control_socket.clone();
    let out = tokio::task::spawn_blocking(move || {
        netsched_balance::control::request(&sock, "show-servers")
    })
    .await
    .unwrap()
    .unwrap();
    assert!(out.contains("\na "), "{out}");
    // Each stuck connection is closed by the server after its deadline.
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(PATIENCE, stuck[0].read(&mut buf))
        .await
        .expect("stuck control client never dropped")
        .unwrap_or(0);
    assert_eq!(n, 0, "{:?}", &buf[..n]);
}

/// A raw HTTP/1 backend that counts its connections and keeps every request head it reads. It
/// answers `ok` (no body to HEAD) and keeps the connection unless the request says
/// `Connection: close`, or is HTTP/1.0 without `Connection: keep-alive` (as nginx does).
struct RawBackend {
    addr: std::net::SocketAddr,
    conns: std::sync::Arc<std::sync::atomic::AtomicU64>,
    heads: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RawBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn raw_backend() -> RawBackend {
    use std::sync::atomic::Ordering;
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let conns = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let heads = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (c, h) = (conns.clone(), heads.clone());
    let task = tokio::spawn(async move {
        let mut set = tokio::task::JoinSet::new();
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                continue;
            };
            c.fetch_add(1, Ordering::SeqCst);
            let h = h.clone();
            set.spawn(async move {
                let mut buf = Vec::new();
                loop {
                    while head_end(&buf).is_none() {
                        let mut chunk = [0u8; 4096];
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let end = head_end(&buf).unwrap();
                    let head = String::from_utf8_lossy(&buf[..end]).to_string();
                    buf.drain(..end);
                    h.lock().unwrap().push(head.clone());
                    let lower = head.to_ascii_lowercase();
                    let http10 = head.lines().next().unwrap_or("").ends_with("HTTP/1.0");
                    let close = lower.contains("\r\nconnection: close")
                        || (http10 && !lower.contains("\r\nconnection: keep-alive"));
                    let body = if head.starts_with("HEAD ") { "" } else { "ok" };
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n{}\r\n{body}",
                        if close { "Connection: close\r\n" } else { "" }
                    );
                    if s.write_all(resp.as_bytes()).await.is_err() || close {
                        return;
                    }
                }
            });
            while set.try_join_next().is_some() {}
        }
    });
    RawBackend {
        addr,
        conns,
        heads,
        task,
    }
}

/// Requests reach the backend as HTTP/1.1 in origin form over one reused keep-alive connection,
/// whatever the client spoke: HTTP/1.1 clients that close, an HTTP/1.0 keep-alive client (which
/// used to reach the backend as HTTP/1.0 without keep-alive: a new backend connection per
/// request), a HEAD (a response hyper never polls a body of), an absolute-form target. Hop-by-hop
/// headers, and those the client's `Connection` names, are not forwarded; a missing Host is the
/// backend's address. `http_reuse = "always"`: under `safe` the first request of each client
/// connection goes over a new backend connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_connections_are_reused_whatever_the_client_speaks() {
    use std::sync::atomic::Ordering;
    let raw = raw_backend().await;
    let dir = TempDir::new("bal-reuse").unwrap();
    let mut text = config_text(
        "l7",
        "{ kind = \"rr\" }",
        "http_reuse = \"always\"\nadmin = \"127.0.0.1:0\"",
        "",
        &[],
        &dir,
    );
    text += &format!("[[server]]\nname = \"raw\"\naddr = \"{}\"\n", raw.addr);
    let r = start(&text, &dir).await;
    let l = r.listen[0];
    for i in 0..5 {
        let mut s = TcpStream::connect(l).await.unwrap();
        let req = format!("GET /close{i} HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n");
        let (status, _, body) = exchange(&mut s, &req, false).await.unwrap();
        assert_eq!((status.as_str(), body.as_str()), ("http/1.1 200 ok", "ok"));
    }
    let mut s = TcpStream::connect(l).await.unwrap();
    for i in 0..3 {
        let req = format!(
            "GET /ten{i} HTTP/1.0\r\nConnection: keep-alive, x-hop\r\nX-Hop: secret\r\n\
             Keep-Alive: timeout=5\r\n\r\n"
        );
        let (status, head, body) = exchange(&mut s, &req, false).await.unwrap();
        assert!(status.ends_with(" 200 ok"), "{status}");
        assert_eq!(body, "ok");
        assert!(
            head.contains("\r\nconnection: keep-alive"),
            "an HTTP/1.0 keep-alive client is kept: {head}"
        );
    }
    drop(s);
    let mut s = TcpStream::connect(l).await.unwrap();
    let (status, _, body) = exchange(
        &mut s,
        "HEAD /head HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n",
        true,
    )
    .await
    .unwrap();
    assert_eq!((status.as_str(), body.as_str()), ("http/1.1 200 ok", ""));
    let mut s = TcpStream::connect(l).await.unwrap();
    let (status, _, body) = exchange(
        &mut s,
        "GET http://abs.test/abs?q=1 HTTP/1.1\r\nHost: abs.test\r\nConnection: close\r\n\r\n",
        false,
    )
    .await
    .unwrap();
    assert_eq!((status.as_str(), body.as_str()), ("http/1.1 200 ok", "ok"));

    // A request sent once more on a new connection is counted (`retries`); a connection on
    // which an answer was already there the instant a request was written (a fast answer,
    // on a loaded machine) passes that answer on and is closed after it, counted
    // (`closed_in_doubt`): each adds one backend connection.
    let m = metrics_text(&r);
    let retries = metric(&m, "netsched_balance_retries_total{backend=\"raw\"}") as usize;
    let in_doubt = metric(
        &m,
        "netsched_balance_closed_in_doubt_total{backend=\"raw\"}",
    ) as usize;
    let heads = raw.heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 10 + retries, "{heads:?}");
    assert_eq!(
        raw.conns.load(Ordering::SeqCst) as usize,
        1 + retries + in_doubt,
        "every request on one backend connection ({retries} retried, {in_doubt} closed in \
         doubt): {heads:?}"
    );
    for h in &heads {
        let lower = h.to_ascii_lowercase();
        assert!(h.lines().next().unwrap().ends_with(" HTTP/1.1"), "{h}");
        assert!(lower.contains("\r\nx-forwarded-for: 127.0.0.1\r\n"), "{h}");
        for hop in ["x-hop", "keep-alive:", "connection:"] {
            assert!(!lower.contains(hop), "{hop} forwarded: {h}");
        }
    }
    let ten = heads.iter().find(|h| h.starts_with("GET /ten0 ")).unwrap();
    assert!(
        ten.to_ascii_lowercase()
            .contains(&format!("\r\nhost: {}\r\n", raw.addr)),
        "{ten}"
    );
    assert!(
        heads
            .iter()
            .any(|h| h.starts_with("GET /abs?q=1 HTTP/1.1\r\n")
                && h.to_ascii_lowercase().contains("\r\nhost: abs.test\r\n")),
        "{heads:?}"
    );
    assert!(heads
        .iter()
        .any(|h| h.starts_with("HEAD /head HTTP/1.1\r\n")));
}

/// `http_responses_total` counts each response once by its server and status class: the
/// backend's 200s and the 502 of a server that refuses connections under their servers, a
/// 400 given before any server was chosen under `(none)`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_are_counted_by_server_and_status_class() {
    let live = http_backend("live").await;
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let dir = TempDir::new("bal-codes").unwrap();
    let mut text = config_text("l7", "{ kind = \"rr\" }", "", "", &[&live], &dir);
    text += &format!("[[server]]\nname = \"dead\"\naddr = \"{dead}\"\n");
    let r = start(&text, &dir).await;
    for _ in 0..4 {
        let (status, _) = get(r.listen[0], "/", "x").await;
        assert!(status == 200 || status == 502, "{status}");
    }
    // HTTP/1.1 without Host: 400, no server chosen.
    let mut s = TcpStream::connect(r.listen[0]).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    assert_eq!(parse(&out).0, 400);
    let m = &r.service.metrics;
    let n = |backend: &str, code: &'static str| {
        m.responses
            .get_or_create(&netsched_balance::metrics::CodeLabel {
                backend: backend.into(),
                code,
            })
            .get()
    };
    assert_eq!((n("live", "2xx"), n("dead", "5xx")), (2, 2));
    assert_eq!(n("(none)", "4xx"), 1);
    assert_eq!(n("live", "5xx") + n("dead", "2xx") + n("(none)", "5xx"), 0);
}

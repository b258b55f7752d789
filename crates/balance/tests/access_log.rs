//! The L7 access log against known requests on loopback (access_log.rs, docs/balance.md
//! "Access log"): a slow backend shows in Tr, a refused backend gets its error status and
//! state `SC`, a server taken down gets 503 `<NOSRV>`, a client that hangs up mid-response
//! is logged `CD` with the bytes it got; and a balancer whose stderr is a pipe nobody reads
//! keeps answering (the log writer never holds the data path).

mod common;
use common::*;
use netsched_testbed::TempDir;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One parsed access log line.
#[derive(Debug)]
struct Line {
    client: String,
    server: String,
    t: [i64; 5],
    status: u16,
    bytes: u64,
    state: String,
    request: String,
}

fn parse_line(l: &str) -> Line {
    let w: Vec<&str> = l.split(' ').collect();
    let t: Vec<i64> = w[4].split('/').map(|v| v.parse().unwrap()).collect();
    let request = l
        .split_once(" \"")
        .unwrap()
        .1
        .trim_end_matches('"')
        .to_string();
    assert!(w[1].starts_with('[') && w[1].ends_with("Z]"), "{l}");
    Line {
        client: w[0].into(),
        server: w[3].into(),
        t: [t[0], t[1], t[2], t[3], t[4]],
        status: w[5].parse().unwrap(),
        bytes: w[6].parse().unwrap(),
        state: w[7].into(),
        request,
    }
}

/// The log's lines once it has `n` of them (the writer flushes when its queue is empty).
async fn lines(path: &std::path::Path, n: usize) -> Vec<Line> {
    let ok =
        eventually(|| std::fs::read_to_string(path).is_ok_and(|t| t.lines().count() >= n)).await;
    let text = std::fs::read_to_string(path).unwrap_or_default();
    assert!(ok, "expected {n} lines in the access log:\n{text}");
    text.lines().map(parse_line).collect()
}

fn with_log(dir: &TempDir) -> (String, std::path::PathBuf) {
    let p = dir.path().join("access.log");
    (format!("access_log = \"{}\"", p.display()), p)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_backend_shows_in_tr_and_a_normal_request_ends_dash_dash() {
    let b = http_backend("a").await;
    let dir = TempDir::new("bal-alog-slow").unwrap();
    let (top, path) = with_log(&dir);
    let r = start(
        &config_text("l7", "{ kind = \"rr\" }", &top, "", &[&b], &dir),
        &dir,
    )
    .await;
    let raw = get_raw(r.listen[0], "/sleep/300").await;
    let (s2, _) = get(r.listen[0], "/fast", "x").await;
    assert_eq!((parse(&raw).0, s2), (200, 200));
    let ls = lines(&path, 2).await;
    let slow = ls
        .iter()
        .find(|l| l.request == "GET /sleep/300 HTTP/1.1")
        .unwrap();
    // The backend waits 300 ms before its head: Tr holds that, Tt holds every step before.
    assert!(slow.t[3] >= 300, "{slow:?}");
    assert!(
        slow.t[4] >= slow.t[0] + slow.t[1] + slow.t[2] + slow.t[3],
        "{slow:?}"
    );
    // Every byte the client read, head included (HAProxy's bytes_read), the 1-byte body too.
    assert_eq!(
        (slow.status, slow.bytes, slow.state.as_str()),
        (200, raw.len() as u64, "--")
    );
    assert!(raw.ends_with(b"\r\n\r\na"), "{raw:?}");
    assert_eq!(slow.server, "a");
    assert!(slow.client.starts_with("127.0.0.1:"), "{slow:?}");
    let fast = ls
        .iter()
        .find(|l| l.request == "GET /fast HTTP/1.1")
        .unwrap();
    assert_eq!((fast.status, fast.state.as_str()), (200, "--"));
    assert!(fast.t.iter().all(|&v| v >= 0), "{fast:?}");
    drop(r);
}

/// One `Connection: close` request; every byte of the response as read.
async fn get_raw(addr: SocketAddr, path: &str) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(PATIENCE, s.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    out
}

/// One response on a kept-alive connection, read to the end of its `Content-Length` body:
/// every byte of it as read.
async fn read_response(c: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = out.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&out[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|h| h.strip_prefix("content-length:"))
                .map(|v| v.trim().parse().unwrap())
                .expect("a Content-Length response");
            if out.len() >= end + 4 + len {
                assert_eq!(out.len(), end + 4 + len, "nothing past the response");
                return out;
            }
        }
        let n = tokio::time::timeout(PATIENCE, c.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "closed mid-response: {out:?}");
        out.extend_from_slice(&buf[..n]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_count_each_response_head_included_on_a_kept_alive_connection() {
    let b = http_backend("abc").await;
    let dir = TempDir::new("bal-alog-bytes").unwrap();
    let (top, path) = with_log(&dir);
    let r = start(
        &config_text("l7", "{ kind = \"rr\" }", &top, "", &[&b], &dir),
        &dir,
    )
    .await;
    let mut c = TcpStream::connect(r.listen[0]).await.unwrap();
    let mut got = Vec::new();
    for path in ["/one", "/two-longer-path", "/three"] {
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
        c.write_all(req.as_bytes()).await.unwrap();
        got.push(read_response(&mut c).await);
    }
    drop(c);
    let ls = lines(&path, 3).await;
    assert_eq!(ls.len(), 3, "{ls:?}");
    for (l, raw) in ls.iter().zip(&got) {
        assert!(raw.ends_with(b"\r\n\r\nabc"), "{raw:?}");
        assert_eq!(
            (l.status, l.bytes, l.state.as_str()),
            (200, raw.len() as u64, "--"),
            "{l:?}"
        );
    }
    drop(r);
}

/// A loopback port with nobody listening: connecting to it is refused.
fn refused_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_backend_is_logged_sc_and_once_down_503_nosrv() {
    let dir = TempDir::new("bal-alog-refused").unwrap();
    let (top, path) = with_log(&dir);
    let dead = refused_addr();
    let text = format!(
        "mode = \"l7\"\nlisten = [\"127.0.0.1:0\"]\nalgorithm = {{ kind = \"rr\" }}\n\
         control_socket = \"{}\"\n{top}\n[[server]]\nname = \"gone\"\naddr = \"{dead}\"\n",
        dir.path().join("ctl.sock").display()
    );
    let r = start(&text, &dir).await;
    let (status, body) = get(r.listen[0], "/a", "x").await;
    assert_eq!((status, body.trim()), (502, "connect"));
    let l = &lines(&path, 1).await[0];
    assert_eq!(
        (l.server.as_str(), l.state.as_str()),
        ("gone", "SC"),
        "{l:?}"
    );
    assert_eq!((l.status, l.t[2], l.t[3]), (502, -1, -1), "{l:?}");
    // Taken out of rotation: no server to choose, 503 and <NOSRV>.
    netsched_balance::control::execute("maint gone", &r.service).unwrap();
    let raw = get_raw(r.listen[0], "/b").await;
    assert_eq!(parse(&raw).0, 503);
    let l = &lines(&path, 2).await[1];
    // The balancer's own answer is counted as sent, head included.
    assert_eq!(l.bytes, raw.len() as u64, "{l:?}");
    assert_eq!(
        (l.server.as_str(), l.state.as_str()),
        ("<NOSRV>", "SC"),
        "{l:?}"
    );
    assert_eq!((l.status, l.t[2], l.t[3]), (503, -1, -1), "{l:?}");
    drop(r);
}

/// A backend that answers every request with a 4 MiB body, 64 KiB every 10 ms.
async fn trickle_backend() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let total = 4 << 20;
                let h = format!("HTTP/1.1 200 OK\r\nContent-Length: {total}\r\n\r\n");
                if s.write_all(h.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = vec![b'x'; 64 << 10];
                for _ in 0..total / chunk.len() {
                    if s.write_all(&chunk).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            });
        }
    });
    (addr, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_mid_response_is_logged_cd_with_the_bytes_it_got() {
    let (addr, backend) = trickle_backend().await;
    let dir = TempDir::new("bal-alog-hangup").unwrap();
    let (top, path) = with_log(&dir);
    let text = format!(
        "mode = \"l7\"\nlisten = [\"127.0.0.1:0\"]\nalgorithm = {{ kind = \"rr\" }}\n\
         control_socket = \"{}\"\n{top}\n[[server]]\nname = \"big\"\naddr = \"{addr}\"\n",
        dir.path().join("ctl.sock").display()
    );
    let r = start(&text, &dir).await;
    let mut c = TcpStream::connect(r.listen[0]).await.unwrap();
    c.write_all(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    // Read a little over 100 KB of the 4 MiB (which take at least 640 ms to come), then leave.
    let mut got = 0;
    let mut buf = vec![0u8; 16 << 10];
    while got < 100_000 {
        let n = tokio::time::timeout(PATIENCE, c.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "closed after {got} bytes");
        got += n;
    }
    drop(c);
    let l = &lines(&path, 1).await[0];
    assert_eq!(
        (l.status, l.state.as_str(), l.server.as_str()),
        (200, "CD", "big"),
        "{l:?}"
    );
    assert!(l.bytes > 0 && l.bytes < 4 << 20, "{l:?}");
    drop(r);
    backend.abort();
}

/// Ends the daemon (by its pid) when the test ends, also on failure.
struct Daemon(std::process::Child);
impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Keep-alive GETs of `/` on one connection; the number answered 200 (stops at the first
/// failure or after `deadline`).
fn keep_alive_gets(addr: SocketAddr, n: usize, deadline: Instant) -> usize {
    let Ok(s) = std::net::TcpStream::connect(addr) else {
        return 0;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    for i in 0..n {
        if Instant::now() > deadline || w.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").is_err() {
            return i;
        }
        let mut status = String::new();
        if r.read_line(&mut status).is_err() || !status.starts_with("HTTP/1.1 200") {
            return i;
        }
        let mut len = 0;
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).is_err() || h.is_empty() {
                return i;
            }
            if h == "\r\n" {
                break;
            }
            if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0u8; len];
        if r.read_exact(&mut body).is_err() {
            return i;
        }
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stderr_nobody_reads_never_holds_the_data_path() {
    let b = http_backend("a").await;
    let dir = TempDir::new("bal-alog-stall").unwrap();
    let listen = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let admin = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let text = format!(
        "mode = \"l7\"\nlisten = [\"{listen}\"]\nadmin = \"{admin}\"\nthreads = 2\n\
         algorithm = {{ kind = \"rr\" }}\ncontrol_socket = \"{}\"\naccess_log = \"stderr\"\n\
         [[server]]\nname = \"a\"\naddr = \"{}\"\n",
        dir.path().join("ctl.sock").display(),
        b.addr
    );
    let path = dir.path().join("balance.toml");
    std::fs::write(&path, text).unwrap();
    // stderr is a pipe this test holds open and never reads: once its ~64 KiB are full,
    // every write to it waits forever.
    let child = Command::new(env!("CARGO_BIN_EXE_netsched-balanced"))
        .arg("--config")
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let d = Daemon(child);
    let sock = dir.path().join("ctl.sock");
    assert!(
        eventually(|| sock.exists() && std::net::TcpStream::connect(listen).is_ok()).await,
        "daemon did not start"
    );
    // Each request writes a ~90-byte access log line: 4 connections x 2,500 requests is
    // ~900 KB, far past the pipe, the writer's buffer and its 4,096-line queue.
    let per_conn = 2_500;
    let deadline = Instant::now() + Duration::from_secs(120);
    let answered: usize = tokio::task::spawn_blocking(move || {
        let hs: Vec<_> = (0..4)
            .map(|_| std::thread::spawn(move || keep_alive_gets(listen, per_conn, deadline)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum()
    })
    .await
    .unwrap();
    assert_eq!(
        answered,
        4 * per_conn,
        "requests answered while stderr was full"
    );
    // The control plane too: a state change (logged) is answered while the log cannot drain.
    let t = Instant::now();
    let out = netsched_balance::control::request(&sock, "set-weight a 2").unwrap();
    assert!(out.contains("a weight 2"), "{out}");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "ctl took {:?}",
        t.elapsed()
    );
    // And the stall was real: lines were dropped (counted), not waited for.
    let m = std::net::TcpStream::connect(admin).map(|mut s| {
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut t = String::new();
        s.read_to_string(&mut t).unwrap();
        t
    });
    let m = m.unwrap();
    let dropped = metric(&m, "netsched_balance_access_log_dropped_total");
    let written = metric(&m, "netsched_balance_access_log_lines_total");
    assert!(dropped > 0.0, "no access log line dropped:\n{m}");
    assert!(
        written < (4 * per_conn) as f64,
        "{written} lines written:\n{m}"
    );
    assert!(m.contains("netsched_log_dropped_lines_total"), "{m}");
    drop(d);
}

/// The disk under the access log fills (root: a 16 KiB tmpfs mounted for the test): every
/// request is still answered, each line the file refused is counted in
/// `netsched_balance_access_log_write_errors_total` and only whole lines in `lines_total`,
/// the lines on disk stay whole, and the balancer runs on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_under_the_access_log_is_counted_and_fails_no_request() {
    if !netsched_testbed::privileged_test_allowed(
        "a_full_disk_under_the_access_log_is_counted_and_fails_no_request",
    ) {
        return;
    }
    let b = http_backend("a").await;
    let dir = TempDir::new("bal-alog-full").unwrap();
    let disk = netsched_testbed::Tmpfs::mount(&dir.path().join("small"), 16 << 10).unwrap();
    let path = disk.path().join("access.log");
    let top = format!(
        "admin = \"127.0.0.1:0\"\naccess_log = \"{}\"",
        path.display()
    );
    let r = start(
        &config_text("l7", "{ kind = \"rr\" }", &top, "", &[&b], &dir),
        &dir,
    )
    .await;
    // About 100 bytes a line: 400 lines are more than twice the disk.
    let n = 400;
    for i in 0..n {
        assert_eq!(get(r.listen[0], &format!("/fill/{i}"), "x").await.0, 200);
    }
    let counted = |name: &str| {
        metric(
            &metrics_text(&r),
            &format!("netsched_balance_access_log_{name}_total "),
        )
    };
    assert!(
        eventually(|| counted("lines") + counted("write_errors") >= n as f64).await,
        "every line counted once: written {} + write errors {}",
        counted("lines"),
        counted("write_errors")
    );
    let (written, errors) = (counted("lines"), counted("write_errors"));
    assert!(errors > 0.0 && written > 0.0, "{written} {errors}");
    let text = std::fs::read_to_string(&path).unwrap();
    let whole: Vec<&str> = text.lines().filter(|l| l.ends_with("HTTP/1.1\"")).collect();
    assert_eq!(whole.len() as f64, written, "{text}");
    assert_eq!(get(r.listen[0], "/after", "x").await.0, 200);
    drop(r);
}

/// One parsed L4 line: `client [date] frontend server Tw/Tc/Tt bytes state bytes_up`.
#[derive(Debug)]
struct TcpLine {
    server: String,
    t: [i64; 3],
    bytes: u64,
    state: String,
    bytes_up: u64,
}

async fn tcp_lines(path: &std::path::Path, n: usize) -> Vec<TcpLine> {
    let ok =
        eventually(|| std::fs::read_to_string(path).is_ok_and(|t| t.lines().count() >= n)).await;
    let text = std::fs::read_to_string(path).unwrap_or_default();
    assert!(ok, "expected {n} lines in the access log:\n{text}");
    text.lines()
        .map(|l| {
            let w: Vec<&str> = l.split(' ').collect();
            assert_eq!(w.len(), 8, "{l}");
            assert!(w[1].starts_with('[') && w[1].ends_with("Z]"), "{l}");
            let t: Vec<i64> = w[4].split('/').map(|v| v.parse().unwrap()).collect();
            TcpLine {
                server: w[3].into(),
                t: [t[0], t[1], t[2]],
                bytes: w[5].parse().unwrap(),
                state: w[6].into(),
                bytes_up: w[7].parse().unwrap(),
            }
        })
        .collect()
}

/// L4 (`option tcplog`'s shape): a connection that ends normally is one `--` line with the
/// bytes of each direction; one refused by its only server is `SC`, one cut by the
/// balancer's stop `KD`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l4_connections_are_logged_one_line_each_with_both_directions_bytes() {
    let release = std::sync::Arc::new(tokio::sync::Notify::new());
    let b = tcp_backend("t1", release.clone()).await;
    let dir = TempDir::new("bal-alog-l4").unwrap();
    let (top, path) = with_log(&dir);
    let r = start(
        &config_text("l4", "{ kind = \"rr\" }", &top, "", &[&b], &dir),
        &dir,
    )
    .await;
    // Normal: greeting (3 bytes) + the echo of 6 bytes to the client; 6 bytes from it.
    let (mut c, name) = open(r.listen[0]).await;
    assert_eq!(name, "t1");
    assert_eq!(echo(&mut c, "hello\n").await, "hello\n");
    c.get_mut().shutdown().await.unwrap();
    release.notify_waiters();
    let mut rest = Vec::new();
    tokio::time::timeout(PATIENCE, c.read_to_end(&mut rest))
        .await
        .unwrap()
        .unwrap();
    let l = &tcp_lines(&path, 1).await[0];
    assert_eq!(
        (l.server.as_str(), l.state.as_str(), l.bytes, l.bytes_up),
        ("t1", "--", 3 + 6, 6),
        "{l:?}"
    );
    assert!(
        l.t.iter().all(|&v| v >= 0) && l.t[2] >= l.t[0] + l.t[1],
        "{l:?}"
    );
    // Cut by the stop while relaying: `KD`, with what it had moved so far.
    let (mut c2, _) = open(r.listen[0]).await;
    assert_eq!(echo(&mut c2, "abc\n").await, "abc\n");
    let report = r.stop(Some(Duration::from_millis(50))).await;
    assert_eq!(report.cut, 1, "{report:?}");
    let ls = tcp_lines(&path, 2).await;
    assert_eq!(
        (ls[1].state.as_str(), ls[1].bytes, ls[1].bytes_up),
        ("KD", 3 + 4, 4),
        "{:?}",
        ls[1]
    );
    drop(c2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_l4_connection_its_server_refuses_is_logged_sc() {
    let dir = TempDir::new("bal-alog-l4sc").unwrap();
    let (top, path) = with_log(&dir);
    let text = format!(
        "mode = \"l4\"\nlisten = [\"127.0.0.1:0\"]\nalgorithm = {{ kind = \"rr\" }}\n\
         control_socket = \"{}\"\n{top}\n[[server]]\nname = \"gone\"\naddr = \"{}\"\n",
        dir.path().join("ctl.sock").display(),
        refused_addr()
    );
    let r = start(&text, &dir).await;
    let mut s = TcpStream::connect(r.listen[0]).await.unwrap();
    let mut buf = Vec::new();
    // The balancer closes the client's connection once the server refused.
    let _ = tokio::time::timeout(PATIENCE, s.read_to_end(&mut buf)).await;
    let l = &tcp_lines(&path, 1).await[0];
    assert_eq!(
        (l.server.as_str(), l.state.as_str(), l.bytes, l.t[1]),
        ("gone", "SC", 0, -1),
        "{l:?}"
    );
    drop(r);
}

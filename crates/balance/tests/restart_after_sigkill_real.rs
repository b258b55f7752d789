//! The balancer SIGKILLed, then started again with the same settings (root; skipped with a
//! reason otherwise): nothing the killed process left blocks or misleads the one started after
//! it. Its listener goes with the process (connections to the address are refused, nobody
//! answers on the control socket or its `admin` address); its control socket file, left behind,
//! is found stale and replaced (not reported as taken over from a running balancer); the
//! restarted balancer binds the same listen and `admin` addresses (neither reported in use),
//! answers `show-servers`, serves `/metrics` and forwards requests to the backend, and SIGTERM
//! ends it with status 0 and the socket file removed.
//!
//! The backend is a tiny HTTP server of the test's own on a thread inside the namespace.
//! Everything runs in a namespace of the test's own, removed when the test ends, also on
//! failure; the balancers are killed by their own handles.

use netsched_testbed::{namespaces_with, privileged_test_allowed, TempDir, Testbed};
use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const LISTEN: &str = "127.0.0.1:8080";
const BACKEND: &str = "127.0.0.1:8081";
const ADMIN: &str = "127.0.0.1:8090";

/// Kills and reaps a balancer (by its own handle) when the test fails midway.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Run `f` on a thread that has entered namespace `ns`.
fn in_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        netsched_testbed::enter_netns(&ns).expect("setns");
        f()
    })
    .join()
    .expect("client thread")
}

/// One request on a connection of its own: its status and body, or what went wrong (a refused
/// connection is `Err("connect: …")`).
fn fetch(addr: &str) -> Result<(u16, String), String> {
    let mut s = std::net::TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .map_err(|e| format!("write: {e}"))?;
    let mut out = String::new();
    let read = s.read_to_string(&mut out);
    let status = out.get(9..12).and_then(|c| c.parse().ok());
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string());
    match (status, body) {
        (Some(st), Some(b)) => Ok((st, b)),
        _ => Err(format!("read: {read:?}, {} bytes", out.len())),
    }
}

/// A scrape of `/metrics` at the `admin` address inside namespace `ns`: its status, or what
/// went wrong.
fn scrape(ns: &str) -> std::io::Result<u16> {
    in_ns(ns, || {
        netsched_metrics::scrape(ADMIN.parse().unwrap(), Duration::from_secs(2)).map(|r| r.0)
    })
}

/// An HTTP backend on a thread of its own inside a namespace: every request answered 200 with
/// the body `backend`, counted in `hits`. Dropping it stops and joins the thread, also when
/// the test fails midway.
struct Backend {
    stop: Arc<AtomicBool>,
    hits: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A [`Backend`] on `addr` in namespace `ns`.
fn backend(ns: &str, addr: &str) -> Backend {
    let stop = Arc::new(AtomicBool::new(false));
    let hits = Arc::new(AtomicU64::new(0));
    let (ns, addr, stop2, hits2) = (ns.to_string(), addr.to_string(), stop.clone(), hits.clone());
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        netsched_testbed::enter_netns(&ns).expect("setns");
        let l = std::net::TcpListener::bind(&addr).expect("backend bind");
        l.set_nonblocking(true).unwrap();
        ready_tx.send(()).unwrap();
        while !stop2.load(Ordering::Relaxed) {
            let Ok((mut s, _)) = l.accept() else {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            };
            let _ = s.set_nonblocking(false);
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(n) if n > 0 => head.extend_from_slice(&buf[..n]),
                    _ => break,
                }
            }
            if head.windows(4).any(|w| w == b"\r\n\r\n") {
                hits2.fetch_add(1, Ordering::Relaxed);
                let _ = s.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\nbackend",
                );
            }
        }
    });
    let b = Backend {
        stop,
        hits,
        thread: Some(t),
    };
    ready_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the backend did not start");
    b
}

#[test]
fn a_balancer_killed_and_started_again_finds_nothing_in_its_way() {
    if !privileged_test_allowed("a_balancer_killed_and_started_again_finds_nothing_in_its_way") {
        return;
    }
    let tag;
    {
        let mut tb = Testbed::new("balkill").unwrap();
        tag = tb.tag().to_string();
        let ns = tb.add_ns("lb").unwrap();
        let dir = TempDir::new("bal-kill").unwrap();
        let sock = dir.path().join("ctl.sock");
        let cfg = dir
            .create_file(
                "balance.toml",
                format!(
                    "mode = \"l7\"\nlisten = [\"{LISTEN}\"]\nalgorithm = {{ kind = \"rr\" }}\n\
                     control_socket = \"{}\"\nadmin = \"{ADMIN}\"\n\
                     [[server]]\nname = \"a\"\naddr = \"{BACKEND}\"\n",
                    sock.display()
                )
                .as_bytes(),
            )
            .unwrap();
        let backend = backend(&ns, BACKEND);
        let hits = &backend.hits;
        let start = |n: u32| {
            let err = std::fs::File::create(dir.path().join(format!("stderr-{n}"))).unwrap();
            // `ip netns exec` execs in place: the child's pid is the balancer's.
            let child = Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &ns,
                    env!("CARGO_BIN_EXE_netsched-balanced"),
                ])
                .arg("--config")
                .arg(&cfg)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(err)
                .spawn()
                .unwrap();
            Guard(child)
        };
        let log = |n: u32| {
            std::fs::read_to_string(dir.path().join(format!("stderr-{n}"))).unwrap_or_default()
        };
        // Answering `show-servers`: the balancer is up (the socket file alone says nothing
        // after a kill).
        let answers = || netsched_balance::control::request(&sock, "show-servers --json").is_ok();
        // Up: answering on the control socket and at `admin`, and a request through it
        // reaches the backend.
        let wait_up = |g: &mut Guard, n: u32| {
            let until = Instant::now() + Duration::from_secs(20);
            loop {
                let ended = g.0.try_wait().unwrap();
                assert!(
                    ended.is_none() && Instant::now() < until,
                    "balancer {n} did not come up ({ended:?}):\n{}",
                    log(n)
                );
                if answers()
                    && scrape(&ns).is_ok_and(|s| s == 200)
                    && in_ns(&ns, || fetch(LISTEN)) == Ok((200, "backend".into()))
                {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        };

        let mut first = start(1);
        wait_up(&mut first, 1);
        let served_by_first = hits.load(Ordering::Relaxed);
        assert!(served_by_first > 0);
        first.0.kill().unwrap(); // SIGKILL, by its own handle
        first.0.wait().unwrap();
        assert!(
            sock.exists(),
            "the killed balancer's socket file is left behind"
        );
        assert!(!answers(), "nobody answers on it");
        assert!(scrape(&ns).is_err(), "nobody answers at its admin address");
        // Its listener went with the process: the address refuses connections.
        let after_kill = in_ns(&ns, || fetch(LISTEN));
        assert!(
            after_kill
                .as_ref()
                .is_err_and(|e| e.starts_with("connect:")),
            "the killed balancer's address still takes connections: {after_kill:?}"
        );

        let mut second = start(2);
        wait_up(&mut second, 2);
        assert!(hits.load(Ordering::Relaxed) > served_by_first);
        let show = netsched_balance::control::request(&sock, "show-servers --json").unwrap();
        assert!(show.contains("\"a\""), "{show}");
        // The stale file was replaced, not taken for a running balancer; nothing the killed
        // one held is reported in use.
        assert!(
            !log(2).contains("taken over") && !log(2).contains("in use"),
            "the killed balancer's leftovers were taken for a running one's:\n{}",
            log(2)
        );
        // Ten requests in a row, each on a connection of its own, all answered by the backend.
        for i in 0..10 {
            let r = in_ns(&ns, || fetch(LISTEN));
            assert_eq!(r, Ok((200, "backend".into())), "request {i}:\n{}", log(2));
        }

        assert!(netsched_sys::process::signal_pid(
            second.0.id(),
            libc::SIGTERM
        ));
        let until = Instant::now() + Duration::from_secs(15);
        let status = loop {
            if let Some(s) = second.0.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < until, "no exit after SIGTERM:\n{}", log(2));
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "{status:?}\n{}", log(2));
        assert!(!sock.exists(), "the socket file is removed at the stop");
    }
    let left = namespaces_with(&tag);
    assert!(left.is_empty(), "namespaces left behind: {left:?}");
}

//! The balancer as its own process (`netsched-balanced`): SIGHUP reload, SIGTERM cleanup, and
//! the memory of thousands of idle connections.

mod common;
use common::*;
use netsched_testbed::TempDir;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::Notify;

/// Kills the child by pid when the test ends, also on failure.
struct Daemon(Child);
impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn signal(d: &Daemon, sig: i32) {
    // A child we spawned and have not reaped.
    let sent = netsched_sys::process::signal_pid(d.0.id(), sig);
    assert!(sent, "kill: {}", std::io::Error::last_os_error());
}

/// The tests of this file run one at a time: each starts daemons and up to thousands of
/// connections, and beside one another they starved each other's accept loops on a 2-core
/// machine (the idle-connections test then saw a few dozen of its 2,050 connections never
/// reach its backend). Each test holds this for its whole run.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Write `text` to dir/balance.toml and start the daemon on it; wait until it listens.
async fn spawn(dir: &TempDir, text: &str, listen: std::net::SocketAddr) -> Daemon {
    let path = dir.path().join("balance.toml");
    std::fs::write(&path, text).unwrap();
    let log = std::fs::File::create(dir.path().join("log")).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_netsched-balanced"))
        .arg("--config")
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let d = Daemon(child);
    let sock = dir.path().join("ctl.sock");
    assert!(
        eventually(|| sock.exists() && std::net::TcpStream::connect(listen).is_ok()).await,
        "daemon did not start: {}",
        std::fs::read_to_string(dir.path().join("log")).unwrap_or_default()
    );
    d
}

fn text_with_listen(
    mode: &str,
    algo: &str,
    listen: std::net::SocketAddr,
    backends: &[&Backend],
    dir: &TempDir,
) -> String {
    config_text(mode, algo, "", "", backends, dir).replace("127.0.0.1:0", &listen.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reload_keeps_established_connections_and_a_bad_file_keeps_the_old_config() {
    let _one = ONE_AT_A_TIME.lock().await;
    let release = Arc::new(Notify::new());
    let (a, b) = (
        tcp_backend("a", release.clone()).await,
        tcp_backend("b", release.clone()).await,
    );
    let dir = TempDir::new("bal-hup").unwrap();
    let listen = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let d = spawn(
        &dir,
        &text_with_listen("l4", "{ kind = \"rr\" }", listen, &[&a], &dir),
        listen,
    )
    .await;
    let sock = dir.path().join("ctl.sock");
    let (mut held, name) = open(listen).await;
    assert_eq!(name, "a");
    // New file: another algorithm, a new server b, a dropped server a.
    std::fs::write(
        dir.path().join("balance.toml"),
        text_with_listen("l4", "{ kind = \"wlc\" }", listen, &[&b], &dir),
    )
    .unwrap();
    signal(&d, libc::SIGHUP);
    assert!(
        eventually(|| netsched_balance::control::request(&sock, "show-servers")
            .is_ok_and(|s| s.contains("127.0.0.1") && s.contains("\nb ") && !s.contains("\na ")))
        .await,
        "reload not applied: {:?}",
        netsched_balance::control::request(&sock, "show-servers")
    );
    assert_eq!(echo(&mut held, "after reload\n").await, "after reload\n");
    // The CLI side of ctl (same arguments as `netsched balance ctl`).
    let out = Command::new(env!("CARGO_BIN_EXE_netsched-balanced"))
        .args([
            "ctl",
            "--control-socket",
            sock.to_str().unwrap(),
            "show",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["name"], "b", "{v}");
    let out = Command::new(env!("CARGO_BIN_EXE_netsched-balanced"))
        .args([
            "ctl",
            "--control-socket",
            sock.to_str().unwrap(),
            "drain",
            "nobody",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nobody"));
    let (_c, name) = open(listen).await;
    assert_eq!(name, "b");
    // A bad file: the error is logged with file and key, the old configuration stays.
    std::fs::write(dir.path().join("balance.toml"), "mode = \"l4\"\nlisten = [\"127.0.0.1:1\"]\nalgorithm = { kind = \"wlc\" }\nbogus_key = 3\n").unwrap();
    signal(&d, libc::SIGHUP);
    let log = dir.path().join("log");
    assert!(
        eventually(|| std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("reload failed"))
        .await
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("balance.toml") && text.contains("bogus_key"),
        "{text}"
    );
    let (_c, name) = open(listen).await;
    assert_eq!(name, "b");
    assert_eq!(echo(&mut held, "still\n").await, "still\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_removes_the_control_socket_and_exits_cleanly() {
    let _one = ONE_AT_A_TIME.lock().await;
    let a = http_backend("a").await;
    let dir = TempDir::new("bal-term").unwrap();
    let listen = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut d = spawn(
        &dir,
        &text_with_listen("l7", "{ kind = \"rr\" }", listen, &[&a], &dir),
        listen,
    )
    .await;
    assert_eq!(get(listen, "/", "x").await.0, 200);
    signal(&d, libc::SIGTERM);
    let mut status = None;
    assert!(
        eventually(|| {
            status = d.0.try_wait().unwrap();
            status.is_some()
        })
        .await,
        "did not exit"
    );
    assert!(status.unwrap().success(), "{status:?}");
    assert!(
        !dir.path().join("ctl.sock").exists(),
        "control socket left behind"
    );
    // A second daemon refuses a socket path that is a regular file, and leaves it alone.
    std::fs::write(dir.path().join("ctl.sock"), "not ours").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_netsched-balanced"))
        .arg("--config")
        .arg(dir.path().join("balance.toml"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a socket"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("ctl.sock")).unwrap(),
        "not ours"
    );
}

/// Longest wait of [`wait_while_rising`], however steadily the count rises.
const RISING_AT_MOST: Duration = Duration::from_secs(300);

/// Wait until `count()` reaches `target`, for as long as it keeps rising: give up when it has
/// not risen for [`PATIENCE`], or after [`RISING_AT_MOST`] in all. The error says how far it
/// got and why the wait ended.
async fn wait_while_rising(target: usize, mut count: impl FnMut() -> usize) -> Result<(), String> {
    let start = std::time::Instant::now();
    let mut last = count();
    let mut rose = start;
    while last < target {
        if rose.elapsed() > PATIENCE {
            return Err(format!(
                "{last} of {target}: no rise for {PATIENCE:?} (after {:.1?})",
                start.elapsed()
            ));
        }
        if start.elapsed() > RISING_AT_MOST {
            return Err(format!(
                "{last} of {target}: still rising after {RISING_AT_MOST:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = count();
        if now > last {
            last = now;
            rose = std::time::Instant::now();
        }
    }
    Ok(())
}

/// `--check` runs what a start would check on this host and starts nothing: a free
/// configuration passes and leaves its address free (the daemon then starts on it); a
/// listen address in use, an unknown control group, an address given twice, a backend at
/// 0.0.0.0 and `relay` in L7 are each refused, naming the key and value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_refuses_what_a_start_would_and_binds_nothing() {
    let _one = ONE_AT_A_TIME.lock().await;
    let a = http_backend("a").await;
    let dir = TempDir::new("bal-check").unwrap();
    let path = dir.path().join("balance.toml");
    let check = |text: &str| {
        std::fs::write(&path, text).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_netsched-balanced"))
            .arg("--config")
            .arg(&path)
            .arg("--check")
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let listen: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let good = text_with_listen("l7", "{ kind = \"rr\" }", listen, &[&a], &dir);
    let (ok, out, err) = check(&good);
    assert!(ok && out.contains(": ok ("), "{out} {err}");
    assert!(
        std::net::TcpStream::connect(listen).is_err(),
        "--check left {listen} listening"
    );
    assert!(
        !dir.path().join("ctl.sock").exists(),
        "--check made the control socket"
    );

    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = held.local_addr().unwrap();
    let refused = |text: String, wants: &[String]| {
        let (ok, out, err) = check(&text);
        assert!(!ok, "--check passed: {out}\n{text}");
        for w in wants {
            assert!(err.contains(w.as_str()), "{w:?} not in {err:?}\n{text}");
        }
    };
    refused(
        text_with_listen("l7", "{ kind = \"rr\" }", busy, &[&a], &dir),
        &[
            format!("listen[0] = {busy}"),
            "in use".into(),
            "balance.toml".into(),
        ],
    );
    refused(
        format!("control_group = \"no-such-group-7f3a\"\n{good}"),
        &["control_group".into(), "no-such-group-7f3a".into()],
    );
    refused(
        good.replacen(
            &format!("listen = [\"{listen}\"]"),
            &format!("listen = [\"{listen}\", \"{listen}\"]"),
            1,
        ),
        &[format!("listen[1] = {listen}")],
    );
    refused(
        good.replacen(
            &a.addr.to_string(),
            &format!("0.0.0.0:{}", a.addr.port()),
            1,
        ),
        &["server[0] (a).addr".into(), "unspecified".into()],
    );
    refused(
        format!("relay = \"copy\"\n{good}"),
        &["relay = \"copy\"".into()],
    );
    drop(held);

    // What passed --check starts.
    let _d = spawn(&dir, &good, listen).await;
    assert_eq!(get(listen, "/", "x").await, (200, "a".to_string()));
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Thousands of idle connections: the balancer's RSS grows by a bounded amount per connection.
/// The bound asserted (64 KiB) is far above the measured value (docs/balance.md); it catches
/// unbounded buffering, not a few kilobytes of drift.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_idle_connections_stay_within_bounded_memory() {
    let _one = ONE_AT_A_TIME.lock().await;
    // Each idle connection holds two descriptors in this process (the client and the test
    // backend's end) and two in the balancer, which inherits this process's limits. A
    // machine's limit may be as low as 4096 descriptors, which run out at about 2,040
    // connections (accept then fails with EMFILE and the rest wait in the backlog for good):
    // raise it where this process may, else measure with fewer connections.
    const WANT: usize = 2000;
    let limit = netsched_sys::process::raise_nofile_limit_to(2 * (WANT as u64 + 50) + 256)
        .expect("getrlimit");
    let n = WANT.min((limit as usize).saturating_sub(256) / 2 - 50);
    if n < 500 {
        eprintln!("SKIP: the open-file limit ({limit}) allows only {n} idle connections");
        return;
    }
    if n < WANT {
        eprintln!("the open-file limit ({limit}) allows {n} idle connections, not {WANT}");
    }
    let release = Arc::new(Notify::new());
    let t = tcp_backend("t", release.clone()).await;
    let h = http_backend("h").await;
    let certs = TempDir::new("bal-rss-tls").unwrap();
    let site = https::Site::new(&certs);
    let tls_table = site.table();
    for (mode, backend) in [
        ("l4", &t),
        ("l7", &h),
        ("tls", &h),
        ("h2", &h),
        ("h2-tls", &h),
    ] {
        let dir = TempDir::new("bal-rss").unwrap();
        let listen: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        // The balancer opens n backend connections at once: when the test's backend is slow to
        // accept, its queue fills and SYNs are dropped and sent again after 1, 3, 7 s; a long
        // connect timeout lets every one arrive instead of failing at the default 2 s.
        let l = if mode == "l4" { "l4" } else { "l7" };
        let tables = if mode.ends_with("tls") {
            tls_table.as_str()
        } else {
            ""
        };
        let text = config_text(l, "{ kind = \"wlc\" }", "", tables, &[backend], &dir)
            .replace("127.0.0.1:0", &listen.to_string())
            + "[timeouts]\nconnect = \"30s\"\n";
        let d = spawn(&dir, &text, listen).await;
        // Warm up (runtime threads, pools), then measure.
        let mut warm = Vec::new();
        for _ in 0..50 {
            warm.push(TcpStream::connect(listen).await.unwrap());
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = rss_kib(d.0.id());
        let mut conns: Vec<Box<dyn Idle>> = Vec::with_capacity(n);
        for _ in 0..n {
            let tcp = TcpStream::connect(listen).await.unwrap();
            let mut s: Box<dyn Idle> = match mode {
                "tls" | "h2-tls" => {
                    let alpn = if mode == "tls" { "http/1.1" } else { "h2" };
                    Box::new(site.connect(alpn.as_bytes(), tcp).await)
                }
                _ => Box::new(tcp),
            };
            // An idle client after one request: HTTP/1.1 keep-alive, or HTTP/2 (the preface,
            // SETTINGS and one stream; `Raw` of tests/http2.rs writes the same frames).
            match mode {
                "l7" | "tls" => s
                    .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                    .await
                    .unwrap(),
                "h2" | "h2-tls" => s.write_all(&h2_get()).await.unwrap(),
                _ => {}
            }
            conns.push(s);
        }
        if mode != "l4" {
            for s in conns.iter_mut() {
                let mut buf = [0u8; 512];
                let _ = tokio::time::timeout(PATIENCE, tokio::io::AsyncReadExt::read(s, &mut buf))
                    .await;
            }
        } else {
            // The balancer accepts and connects at the pace the machine allows (another
            // program's thousands of connections slowed it down): wait while the count rises.
            if let Err(e) = wait_while_rising(n + 50, || t.hits() as usize).await {
                panic!("backend saw {e}");
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let after = rss_kib(d.0.id());
        let per = (after.saturating_sub(before) * 1024) as f64 / n as f64;
        eprintln!("{mode}: RSS {before} KiB -> {after} KiB with {n} idle connections: {per:.0} bytes per connection");
        assert!(
            per < 64.0 * 1024.0,
            "{mode}: {per} bytes per idle connection"
        );
        drop(conns);
        drop(warm);
        release.notify_waiters();
    }
}

/// A client connection kept idle: TCP or TLS.
trait Idle: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Idle for T {}

/// The HTTP/2 preface, an empty SETTINGS and one GET / (HEADERS, HPACK literals without
/// indexing: RFC 9113 §3.4, §6.5, RFC 7541 §6.2.2).
fn h2_get() -> Vec<u8> {
    let mut block = Vec::new();
    for (n, v) in [
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        (":authority", "x"),
    ] {
        block.push(0);
        block.push(n.len() as u8);
        block.extend_from_slice(n.as_bytes());
        block.push(v.len() as u8);
        block.extend_from_slice(v.as_bytes());
    }
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend([0, 0, 0, 4, 0, 0, 0, 0, 0]);
    out.extend([0, 0, block.len() as u8, 1, 5, 0, 0, 0, 1]);
    out.extend(block);
    out
}

fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of proc(5); `after` starts at field 3.
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    ticks / netsched_sys::clock::clock_ticks_per_second() as f64
}

/// Benchmark, not a test (needs a quiet machine; run by hand with `--ignored --nocapture`):
/// how much CPU the L4 relay costs per gigabyte, `relay = "copy"` against `relay = "splice"`,
/// in the same run (alternating, `ROUNDS` times each, so load from elsewhere hits both).
/// Numbers in docs/balance.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn bench_l4_relay_cpu_per_gigabyte() {
    let _one = ONE_AT_A_TIME.lock().await;
    use tokio::io::AsyncReadExt;
    const BYTES: u64 = 2 << 30;
    const ROUNDS: usize = 3;
    let sink = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sink_addr = sink.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = sink.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 256 * 1024];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                }
            });
        }
    });
    let mut daemons = Vec::new();
    for relay in ["copy", "splice"] {
        let dir = TempDir::new("bal-bench").unwrap();
        let listen = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let text = format!(
            "mode = \"l4\"\nlisten = [\"{listen}\"]\nalgorithm = {{ kind = \"rr\" }}\nrelay = \"{relay}\"\nthreads = 1\ncontrol_socket = \"{}\"\n[[server]]\nname = \"sink\"\naddr = \"{sink_addr}\"\n",
            dir.path().join("ctl.sock").display()
        );
        let d = spawn(&dir, &text, listen).await;
        daemons.push((relay, listen, d, dir));
    }
    let chunk = vec![7u8; 256 * 1024];
    let mut targets = vec![("direct", sink_addr, None)];
    for (relay, listen, d, _) in &daemons {
        targets.push((*relay, *listen, Some(d.0.id())));
    }
    for round in 1..=ROUNDS {
        for (label, target, pid) in &targets {
            let cpu0 = pid.map_or(0.0, cpu_seconds);
            let t = std::time::Instant::now();
            let mut s = TcpStream::connect(target).await.unwrap();
            let mut sent = 0;
            while sent < BYTES {
                s.write_all(&chunk).await.unwrap();
                sent += chunk.len() as u64;
            }
            s.shutdown().await.unwrap();
            let secs = t.elapsed().as_secs_f64();
            let gib = sent as f64 / (1u64 << 30) as f64;
            match pid {
                Some(p) => eprintln!(
                    "round {round} {label}: {:.2} Gbit/s, balancer CPU {:.3} s per GiB",
                    sent as f64 * 8.0 / secs / 1e9,
                    (cpu_seconds(*p) - cpu0) / gib
                ),
                None => eprintln!(
                    "round {round} {label}: {:.2} Gbit/s",
                    sent as f64 * 8.0 / secs / 1e9
                ),
            }
        }
    }
}

/// Out of file descriptors: the daemon (open-file limit 64, soft and hard, so it cannot raise
/// it) neither panics nor exits; connections it cannot serve wait in the backlog or are closed,
/// those it serves relay correctly (splice falls back to copying without pipes), and once the
/// clients are gone it serves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_descriptors_the_daemon_keeps_serving_what_it_can_and_recovers() {
    let _one = ONE_AT_A_TIME.lock().await;
    let release = Arc::new(Notify::new());
    let t = tcp_backend("t", release.clone()).await;
    for relay in ["splice", "copy"] {
        let dir = TempDir::new("bal-nofile").unwrap();
        let listen = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        // A top-level key must come before the first table: put `relay` first.
        let text = format!("relay = \"{relay}\"\n")
            + &text_with_listen("l4", "{ kind = \"rr\" }", listen, &[&t], &dir);
        let path = dir.path().join("balance.toml");
        std::fs::write(&path, &text).unwrap();
        let log = std::fs::File::create(dir.path().join("log")).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_netsched-balanced"));
        cmd.arg("--config")
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(log);
        netsched_sys::process::limit_child(
            &mut cmd,
            netsched_sys::process::ChildLimit::OpenFiles,
            64,
        );
        let mut d = Daemon(cmd.spawn().unwrap());
        let sock = dir.path().join("ctl.sock");
        assert!(
            eventually(|| sock.exists() && std::net::TcpStream::connect(listen).is_ok()).await,
            "daemon did not start: {}",
            std::fs::read_to_string(dir.path().join("log")).unwrap_or_default()
        );
        // 40 connections need 80 descriptors: more than 64.
        let mut conns = Vec::new();
        for _ in 0..40 {
            conns.push(BufReader::new(TcpStream::connect(listen).await.unwrap()));
        }
        let (mut served, mut closed, mut waiting) = (0, 0, 0);
        for (i, r) in conns.iter_mut().enumerate() {
            let mut name = String::new();
            match tokio::time::timeout(Duration::from_millis(200), r.read_line(&mut name)).await {
                Err(_) => waiting += 1,
                Ok(Ok(0)) | Ok(Err(_)) => closed += 1,
                Ok(Ok(_)) => {
                    assert_eq!(name, "t\n", "{relay}");
                    let msg = format!("conn {i}\n");
                    assert_eq!(echo(r, &msg).await, msg, "{relay}");
                    served += 1;
                }
            }
        }
        eprintln!("{relay}: 40 connections at a 64-descriptor limit: {served} served, {closed} closed, {waiting} waiting");
        assert!(served > 0 && served < 40, "{relay}: {served} served");
        assert!(
            d.0.try_wait().unwrap().is_none(),
            "{relay}: the daemon exited"
        );
        drop(conns);
        release.notify_waiters();
        // Descriptors free again: new connections are served.
        let mut ok = false;
        for _ in 0..40 {
            // Clients that waited in the backlog are relayed now; let their backends close.
            release.notify_waiters();
            if let Ok(s) = TcpStream::connect(listen).await {
                let mut r = BufReader::new(s);
                let mut name = String::new();
                let got =
                    tokio::time::timeout(Duration::from_secs(2), r.read_line(&mut name)).await;
                if matches!(got, Ok(Ok(2))) && name == "t\n" {
                    ok = echo(&mut r, "again\n").await == "again\n";
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(ok, "{relay}: not serving after the clients left");
        assert!(
            d.0.try_wait().unwrap().is_none(),
            "{relay}: the daemon exited"
        );
        let log = std::fs::read_to_string(dir.path().join("log")).unwrap();
        assert!(!log.contains("panicked"), "{relay}: {log}");
        if waiting > 0 {
            // A client left waiting means an accept failed: it is logged with its reason.
            assert!(
                log.contains("accept failed") && log.contains("process_nofile"),
                "{relay}: {waiting} waited, no accept failure logged: {log}"
            );
        }
    }
}

/// Start one more daemon on dir/balance.toml, logging to dir/`log`; wait until it listens.
async fn spawn_another(dir: &TempDir, log: &str) -> Daemon {
    let path = dir.path().join(log);
    let child = Command::new(env!("CARGO_BIN_EXE_netsched-balanced"))
        .arg("--config")
        .arg(dir.path().join("balance.toml"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&path).unwrap())
        .spawn()
        .unwrap();
    let d = Daemon(child);
    assert!(
        eventually(|| std::fs::read_to_string(&path)
            .unwrap_or_default()
            .contains("listening on"))
        .await,
        "second daemon did not start: {}",
        std::fs::read_to_string(&path).unwrap_or_default()
    );
    d
}

/// Wait up to `limit` for the daemon to exit; its status.
async fn exit_within(d: &mut Daemon, limit: Duration) -> Option<std::process::ExitStatus> {
    let end = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < end {
        if let Some(s) = d.0.try_wait().unwrap() {
            return Some(s);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// A backend that answers every request with a `BODY`-byte body sent slowly: 64 KiB every
/// 100 ms, then closes.
async fn slow_download_backend() -> std::net::SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tokio::io::AsyncReadExt::read(&mut s, &mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let h = format!("HTTP/1.1 200 OK\r\nContent-Length: {BODY}\r\n\r\n");
                if s.write_all(h.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = vec![b'x'; 64 * 1024];
                for _ in 0..BODY / chunk.len() {
                    if s.write_all(&chunk).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            });
        }
    });
    addr
}
const BODY: usize = 1 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_a_download_in_flight_finish_and_exits_zero_within_the_grace() {
    let _one = ONE_AT_A_TIME.lock().await;
    use tokio::io::AsyncReadExt;
    let backend = slow_download_backend().await;
    let dir = TempDir::new("bal-drain").unwrap();
    let listen: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let text = format!(
        "mode = \"l7\"\nlisten = [\"{listen}\"]\nalgorithm = {{ kind = \"rr\" }}\ncontrol_socket = \"{}\"\n\
[timeouts]\nhard_stop_after = \"15s\"\n[[server]]\nname = \"dl\"\naddr = \"{backend}\"\n",
        dir.path().join("ctl.sock").display()
    );
    let mut d = spawn(&dir, &text, listen).await;
    let mut s = TcpStream::connect(listen).await.unwrap();
    s.write_all(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    // The head and the first bytes of the body have arrived: the download is in flight.
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(PATIENCE, s.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    let termed = std::time::Instant::now();
    signal(&d, libc::SIGTERM);
    let log = dir.path().join("log");
    assert!(
        eventually(|| std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("stopping"))
        .await
    );
    // No new connections once the stop has begun.
    assert!(
        eventually(|| std::net::TcpStream::connect(listen).is_err()).await,
        "still accepting after SIGTERM"
    );
    tokio::time::timeout(PATIENCE, s.read_to_end(&mut got))
        .await
        .expect("download did not end")
        .unwrap();
    let text = String::from_utf8_lossy(&got);
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body.len(), BODY, "download cut: {head}");
    let status = exit_within(&mut d, PATIENCE).await.expect("did not exit");
    let took = termed.elapsed();
    assert!(status.success(), "{status:?}");
    // The download took ~1.6 s; the grace is 15 s: it ended with the download, not the grace.
    assert!(took < Duration::from_secs(12), "{took:?}");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("connections finished, 0 cut"), "{text}");
    assert!(
        !dir.path().join("ctl.sock").exists(),
        "control socket left behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_balancer_starts_beside_a_running_one_and_the_old_one_leaves_its_socket_path_alone() {
    let _one = ONE_AT_A_TIME.lock().await;
    let a = http_backend("a").await;
    let dir = TempDir::new("bal-restart").unwrap();
    let listen: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let admin: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let text = config_text(
        "l7",
        "{ kind = \"rr\" }",
        &format!("admin = \"{admin}\""),
        "",
        &[&a],
        &dir,
    )
    .replace("127.0.0.1:0", &listen.to_string());
    let mut old = spawn(&dir, &text, listen).await;
    let mut new = spawn_another(&dir, "log.new").await;
    let new_log = std::fs::read_to_string(dir.path().join("log.new")).unwrap();
    assert!(new_log.contains("taken over"), "{new_log}");
    let sock = dir.path().join("ctl.sock");
    signal(&old, libc::SIGTERM);
    let status = exit_within(&mut old, PATIENCE)
        .await
        .expect("old did not exit");
    assert!(status.success(), "{status:?}");
    // The path is the new balancer's: still there, and it answers.
    assert!(
        sock.exists(),
        "the old balancer removed the new one's socket"
    );
    netsched_balance::control::request(&sock, "show-servers").unwrap();
    for _ in 0..20 {
        assert_eq!(get(listen, "/", "x").await, (200, "a".to_string()));
    }
    // The admin address the old one held is the new one's now.
    let scrape = || {
        use std::io::{Read, Write};
        let mut out = String::new();
        if let Ok(mut s) = std::net::TcpStream::connect(admin) {
            let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = s.read_to_string(&mut out);
        }
        out
    };
    assert!(
        eventually(|| scrape().contains("netsched_balance_client_connections")).await,
        "/metrics not served after the restart: {}",
        std::fs::read_to_string(dir.path().join("log.new")).unwrap_or_default()
    );
    // `ctl soft-stop` stops the new one; with nothing open it exits at once.
    let out = Command::new(env!("CARGO_BIN_EXE_netsched-balanced"))
        .args([
            "ctl",
            "--control-socket",
            sock.to_str().unwrap(),
            "soft-stop",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = exit_within(&mut new, PATIENCE)
        .await
        .expect("new did not exit");
    assert!(status.success(), "{status:?}");
    assert!(!sock.exists(), "control socket left behind");
}

/// SIGUSR1 stops without a deadline: a relay outlives `hard_stop_after` and the daemon waits
/// for it; a SIGTERM afterwards sets the deadline from then and the relay is cut and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigusr1_waits_for_every_connection_and_a_later_sigterm_bounds_the_wait() {
    let _one = ONE_AT_A_TIME.lock().await;
    let release = Arc::new(Notify::new());
    let t = tcp_backend("t", release.clone()).await;
    let dir = TempDir::new("bal-usr1").unwrap();
    let listen: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let text = config_text(
        "l4",
        "{ kind = \"rr\" }",
        "",
        "[timeouts]\nhard_stop_after = \"300ms\"",
        &[&t],
        &dir,
    )
    .replace("127.0.0.1:0", &listen.to_string());
    let mut d = spawn(&dir, &text, listen).await;
    let (mut held, name) = open(listen).await;
    assert_eq!(name, "t");
    signal(&d, libc::SIGUSR1);
    let log = dir.path().join("log");
    assert!(
        eventually(|| std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("with no deadline"))
        .await
    );
    // Well past hard_stop_after: still running, still relaying.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(
        d.0.try_wait().unwrap().is_none(),
        "exited with a relay open"
    );
    assert_eq!(echo(&mut held, "still here\n").await, "still here\n");
    let termed = std::time::Instant::now();
    signal(&d, libc::SIGTERM);
    let status = exit_within(&mut d, PATIENCE).await.expect("did not exit");
    let took = termed.elapsed();
    assert!(status.success(), "{status:?}");
    assert!(took >= Duration::from_millis(300), "{took:?}");
    let text = std::fs::read_to_string(&log).unwrap();
    // The held relay (and the start-up probe's, whose backend side stays open) were cut.
    assert!(
        text.contains("stopped in") && !text.contains(", 0 cut"),
        "{text}"
    );
    release.notify_waiters();
}

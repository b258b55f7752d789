//! Root test: three `balance` instances behind a router's ECMP, the virtual address announced
//! by Debian's BIRD 2, one instance SIGKILLed and another soft-stopped (docs/scale-out.md).
//!
//! Topology (namespaces of our own): a client; a router running BIRD 2 that installs the
//! kernel's ECMP route to 192.0.2.10 (`fib_multipath_hash_policy = 1`, L4) and pins each
//! connection to the instance its first packet went to (examples/scale-out/router-pin.nft);
//! three instances on one LAN with the router, each with the address on `lo`, `balance` in
//! mode l4 (a connection stays on one instance, as ECMP's L4 hash keeps a flow on one next
//! hop), its own BIRD (examples/scale-out/bird-instance.conf) and `netsched-announce`; four
//! Debian nginx behind the router, each answering with its address and the instance's.
//!
//! Clients hold 48 keep-alive connections (a request every 50 ms each) and open a new
//! connection every 10 ms. Steps: SIGKILL instance 1 — its connections end, every other
//! continues on its instance, new connections fail only until the router's route has lost
//! the next hop (measured, bounded); soft stop of instance 2 (the announcer withdraws, waits
//! for the router, then `ctl soft-stop`) — no connection lost, no new connection refused;
//! after the clients: instance 3's host falls silent, and the router drops its route when
//! BGP's hold time expires (measured, bounded). Figures are printed (`--nocapture`).
//!
//! Skips with a reason without root (or without BIRD: `apt-get install bird2`); every
//! process it starts is stopped by pid and the namespaces deleted, also on failure.

use netsched_testbed::{enter_netns, privileged_test_allowed, Process, TempDir, Testbed};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const VIP: &str = "192.0.2.10";
const INSTANCES: [&str; 3] = ["10.1.0.11", "10.1.0.12", "10.1.0.13"];
const BACKENDS: [&str; 4] = ["10.2.0.11", "10.2.0.12", "10.2.0.13", "10.2.0.14"];
const LONG_LIVED: usize = 48;
const NEW_EVERY: Duration = Duration::from_millis(10);
const STEP: Duration = Duration::from_secs(3);
const PATIENCE: Duration = Duration::from_secs(20);
/// Asserted bound on the router's convergence after a SIGKILL: the announcer polls every
/// 200 ms; what is measured is printed (up to 2.6 s was seen with the machine's load average
/// above 20, and once more than 5 s). Generous for a loaded 2-core machine.
const CONVERGENCE_LIMIT: Duration = Duration::from_secs(10);
/// Asserted bound on the router's detection of a silent host: BGP's hold time (3 s, the
/// shortest allowed, in both BIRD configurations) with margin for a loaded machine.
const HOST_LOSS_LIMIT: Duration = Duration::from_secs(10);
/// nftables commands that make an instance's host silent on its link.
const SILENT: &str = "add table ip silent; \
add chain ip silent in { type filter hook input priority 0; policy accept; }; \
add chain ip silent out { type filter hook output priority 0; policy accept; }; \
add rule ip silent in iifname \"eth0\" drop; add rule ip silent out oifname \"eth0\" drop";
/// A new connection whose SYN left just before the route changed may still have gone to the
/// old next hop; its refusal is seen this long after the change at most (an RST back over
/// two veth hops, and the client thread scheduled again on a loaded machine).
const IN_FLIGHT: Duration = Duration::from_secs(1);

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/scale-out")
        .join(name)
}

fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Next hops of the router's route to the virtual address (0: none).
fn nexthops(router: &str) -> usize {
    let out = netsched_testbed::run("ip", &["-n", router, "route", "show", &format!("{VIP}/32")])
        .unwrap_or_default();
    match out.matches("nexthop via").count() {
        0 if out.contains(" via ") => 1,
        n => n,
    }
}

/// Wait until the router's route has `n` next hops; the instant it did.
fn wait_nexthops(router: &str, n: usize, limit: Duration) -> Option<Instant> {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if nexthops(router) == n {
            return Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

struct Rig {
    client: String,
    router: String,
    servers: String,
    instances: Vec<String>,
}

/// Namespaces, links, addresses and routes; the router's ECMP hash and connection pinning.
fn topology(tb: &mut Testbed) -> Rig {
    let client = tb.add_ns("cli").unwrap();
    let router = tb.add_ns("rtr").unwrap();
    let servers = tb.add_ns("srv").unwrap();
    let (c, r) = (tb.ifname("c"), tb.ifname("rc"));
    tb.veth((&client, &c, "10.0.0.2/24"), (&router, &r, "10.0.0.1/24"))
        .unwrap();
    tb.exec(
        &client,
        "ip",
        &["route", "add", "default", "via", "10.0.0.1"],
    )
    .unwrap();
    let (s, r) = (tb.ifname("s"), tb.ifname("rs"));
    tb.veth((&servers, &s, "10.2.0.11/24"), (&router, &r, "10.2.0.1/24"))
        .unwrap();
    for b in &BACKENDS[1..] {
        tb.exec(
            &servers,
            "ip",
            &["addr", "add", &format!("{b}/24"), "dev", &s],
        )
        .unwrap();
    }
    tb.exec(
        &servers,
        "ip",
        &["route", "add", "default", "via", "10.2.0.1"],
    )
    .unwrap();
    tb.exec(&router, "ip", &["link", "add", "br0", "type", "bridge"])
        .unwrap();
    tb.exec(&router, "ip", &["addr", "add", "10.1.0.1/24", "dev", "br0"])
        .unwrap();
    tb.exec(&router, "ip", &["link", "set", "br0", "up"])
        .unwrap();
    for kv in [
        "net.ipv4.ip_forward=1",
        "net.ipv4.fib_multipath_hash_policy=1",
        "net.ipv4.conf.all.rp_filter=0",
        "net.ipv4.conf.default.rp_filter=0",
    ] {
        tb.sysctl(&router, kv).unwrap();
    }
    let mut instances = Vec::new();
    for (k, addr) in INSTANCES.iter().enumerate() {
        let ns = tb.add_ns(&format!("lb{}", k + 1)).unwrap();
        let r = tb.ifname(&format!("r{}", k + 1));
        tb.veth((&ns, "eth0", &format!("{addr}/24")), (&router, &r, ""))
            .unwrap();
        tb.exec(&router, "ip", &["link", "set", &r, "master", "br0"])
            .unwrap();
        tb.exec(
            &ns,
            "ip",
            &["addr", "add", &format!("{VIP}/32"), "dev", "lo"],
        )
        .unwrap();
        tb.exec(&ns, "ip", &["route", "add", "default", "via", "10.1.0.1"])
            .unwrap();
        let mark = addr.rsplit('.').next().unwrap();
        tb.exec(
            &router,
            "ip",
            &["rule", "add", "fwmark", mark, "table", mark],
        )
        .unwrap();
        tb.exec(
            &router,
            "ip",
            &[
                "route",
                "add",
                &format!("{VIP}/32"),
                "via",
                addr,
                "table",
                mark,
            ],
        )
        .unwrap();
        instances.push(ns);
    }
    let pin = example("router-pin.nft");
    tb.exec(&router, "nft", &["-f", pin.to_str().unwrap()])
        .unwrap();
    Rig {
        client,
        router,
        servers,
        instances,
    }
}

/// BIRD in `ns` with `conf` (an example file) and its log in `dir`; its control socket.
fn start_bird(tb: &mut Testbed, ns: &str, conf: &str, dir: &Path, name: &str) -> PathBuf {
    let text = std::fs::read_to_string(example(conf)).unwrap();
    let path = dir.join(format!("{name}.conf"));
    let log = dir.join(format!("{name}.log"));
    std::fs::write(&path, format!("log \"{}\" all;\n{text}", log.display())).unwrap();
    let sock = dir.join(format!("{name}.ctl"));
    let err = std::fs::File::create(dir.join(format!("{name}.stderr"))).unwrap();
    tb.spawn_with(
        ns,
        "bird",
        &[
            "-f",
            "-c",
            path.to_str().unwrap(),
            "-s",
            sock.to_str().unwrap(),
            "-P",
            dir.join(format!("{name}.pid")).to_str().unwrap(),
        ],
        name,
        Stdio::null(),
        Stdio::from(err),
    )
    .unwrap();
    sock
}

fn start_nginx(tb: &mut Testbed, ns: &str, dir: &Path) {
    for (i, addr) in BACKENDS.iter().enumerate() {
        let d = dir.join(format!("nginx{i}"));
        std::fs::create_dir_all(d.join("tmp")).unwrap();
        let conf = d.join("nginx.conf");
        std::fs::write(
            &conf,
            format!(
                "master_process off;\ndaemon off;\nworker_processes 1;\nuser root root;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
events {{ worker_connections 1024; }}\nhttp {{\n access_log off;\n keepalive_requests 1000000;\n keepalive_timeout 300s;\n\
 client_body_temp_path {d}/tmp/body;\n proxy_temp_path {d}/tmp/proxy;\n fastcgi_temp_path {d}/tmp/fastcgi;\n\
 uwsgi_temp_path {d}/tmp/uwsgi;\n scgi_temp_path {d}/tmp/scgi;\n\
 server {{ listen {addr}:80; location / {{ return 200 \"$server_addr $remote_addr\"; }} }}\n}}\n",
                d = d.display()
            ),
        )
        .unwrap();
        tb.spawn(
            ns,
            "nginx",
            &["-c", conf.to_str().unwrap(), "-e", "stderr"],
            "nginx",
        )
        .unwrap();
    }
}

/// The same configuration on every instance but for the control socket's path.
fn balance_config(sock: &Path) -> String {
    let mut s = format!(
        "mode = \"l4\"\nlisten = [\"{VIP}:80\"]\nalgorithm = {{ kind = \"mh\", use_port = true, fallback = true }}\n\
control_socket = \"{}\"\nthreads = 1\n[timeouts]\nclient = \"60s\"\nserver = \"60s\"\n\
[health]\nkind = \"tcp\"\ninterval = \"500ms\"\n",
        sock.display()
    );
    for (i, b) in BACKENDS.iter().enumerate() {
        s += &format!("[[server]]\nname = \"s{i}\"\naddr = \"{b}:80\"\n");
    }
    s
}

struct Instance {
    balance: Option<Process>,
    ctl: PathBuf,
    log: PathBuf,
    announcer: u32,
}

fn start_instance(tb: &mut Testbed, ns: &str, dir: &Path, k: usize) -> Instance {
    let bird = start_bird(tb, ns, "bird-instance.conf", dir, &format!("bird-lb{k}"));
    let ctl = dir.join(format!("lb{k}.sock"));
    let cfg = dir.join(format!("lb{k}.toml"));
    std::fs::write(&cfg, balance_config(&ctl)).unwrap();
    let log = dir.join(format!("lb{k}.log"));
    let balance = Process::start_in(
        ns,
        &[
            env!("CARGO_BIN_EXE_netsched-balanced"),
            "--config",
            cfg.to_str().unwrap(),
        ],
        "balance",
        Stdio::null(),
        Stdio::from(std::fs::File::create(&log).unwrap()),
    )
    .unwrap();
    let ctl_cmd = format!(
        "{} ctl --control-socket {}",
        env!("CARGO_BIN_EXE_netsched-balanced"),
        ctl.display()
    );
    let birdc = format!("birdc -s {}", bird.display());
    let err = std::fs::File::create(dir.join(format!("announce-lb{k}.log"))).unwrap();
    let script = example("netsched-announce");
    let announcer = tb
        .spawn_with(
            ns,
            "sh",
            &[
                script.to_str().unwrap(),
                "--ctl",
                &ctl_cmd,
                "--birdc",
                &birdc,
            ],
            "announce",
            Stdio::null(),
            Stdio::from(err),
        )
        .unwrap();
    Instance {
        balance: Some(balance),
        ctl,
        log,
        announcer,
    }
}

/// One request on `conn`; the body ("backend instance").
fn request(conn: &mut BufReader<TcpStream>, close: bool) -> Result<String, String> {
    let extra = if close { "Connection: close\r\n" } else { "" };
    conn.get_mut()
        .write_all(format!("GET / HTTP/1.1\r\nHost: x\r\n{extra}\r\n").as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let mut len = None;
    let mut first = true;
    loop {
        let mut line = String::new();
        match conn.read_line(&mut line) {
            Ok(0) => return Err("closed".into()),
            Err(e) => return Err(format!("read: {e}")),
            Ok(_) => {}
        }
        if first && !line.starts_with("HTTP/1.1 200") {
            return Err(format!("status line {line:?}"));
        }
        first = false;
        if line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse::<usize>().ok();
        }
    }
    let mut body = vec![0; len.ok_or("no content-length")?];
    conn.read_exact(&mut body)
        .map_err(|e| format!("body: {e}"))?;
    Ok(String::from_utf8_lossy(&body).into_owned())
}

fn connect() -> Result<BufReader<TcpStream>, String> {
    let addr: SocketAddr = format!("{VIP}:80").parse().unwrap();
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    Ok(BufReader::new(s))
}

fn instance_of(body: &str) -> String {
    body.split_whitespace().nth(1).unwrap_or("?").to_string()
}

/// What one long-lived connection saw.
#[derive(Debug, Default)]
struct Held {
    instance: String,
    answered: u64,
    /// When (after the start) and how it ended before the clients stopped.
    ended: Option<(Duration, String)>,
    /// An answer through another instance than the first (a connection cannot move: this
    /// would be a new connection under the same socket, never expected).
    moved: bool,
}

fn hold(ns: String, t0: Instant, stop: Arc<AtomicBool>, up: Arc<std::sync::Barrier>) -> Held {
    enter_netns(&ns).expect("setns");
    let mut h = Held::default();
    let mut conn = match connect().and_then(|mut c| request(&mut c, false).map(|b| (c, b))) {
        Ok((c, b)) => {
            h.instance = instance_of(&b);
            h.answered = 1;
            c
        }
        Err(e) => {
            h.ended = Some((t0.elapsed(), e));
            up.wait();
            return h;
        }
    };
    up.wait();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
        match request(&mut conn, false) {
            Ok(b) => {
                h.answered += 1;
                h.moved |= instance_of(&b) != h.instance;
            }
            Err(e) => {
                h.ended = Some((t0.elapsed(), e));
                break;
            }
        }
    }
    h
}

/// New connections, one request each, every `NEW_EVERY`: (when its outcome was known, after
/// t0; instance or error). The end, not the start: a connection in flight through an
/// instance at its SIGKILL fails at the kill.
fn opener(
    ns: String,
    t0: Instant,
    stop: Arc<AtomicBool>,
) -> JoinHandle<Vec<(Duration, Result<String, String>)>> {
    std::thread::spawn(move || {
        enter_netns(&ns).expect("setns");
        let mut out = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let start = t0.elapsed();
            let r = connect()
                .and_then(|mut c| request(&mut c, true).map(|b| instance_of(&b)))
                .map_err(|e| format!("{e} (started at {:.0} ms)", ms(start)));
            out.push((t0.elapsed(), r));
            std::thread::sleep(NEW_EVERY);
        }
        out
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Every log file of the run, for a failure's message.
fn logs(dir: &Path) -> String {
    let mut s = String::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "log" || x == "stderr") {
            s += &format!(
                "--- {}\n{}\n",
                p.display(),
                std::fs::read_to_string(&p).unwrap_or_default()
            );
        }
    }
    s
}

/// BIRD, nginx and nft are installed; without them the test skips (or fails under CI=true).
fn tools_present(test: &str) -> bool {
    for cmd in ["bird", "birdc", "nginx", "nft"] {
        if !have(cmd) {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("{test}: `{cmd}` is missing, and CI=true requires this test to run");
            }
            eprintln!(
                "SKIP {test}: `{cmd}` is missing (apt-get install bird2 nginx-light nftables)"
            );
            return false;
        }
    }
    true
}

/// What the steps measured; times are after the clients started.
struct Outcome {
    t_kill: Duration,
    /// When the router's route had lost lb1.
    conv1: Option<Duration>,
    t_soft: Duration,
    /// When the router's route had lost lb2.
    conv2: Option<Duration>,
    /// When lb2's announcer had withdrawn and waited for the router.
    t_withdrawn: Duration,
    soft_stop: Result<String, String>,
    held: Vec<Held>,
    new_conns: Vec<(Duration, Result<String, String>)>,
    b2_exited: bool,
    b2_log: String,
    /// From lb3's host falling silent to the router's route gone.
    host_lost: Option<Duration>,
}

impl Outcome {
    /// Long-lived connections through instance `i`.
    fn on(&self, i: usize) -> usize {
        self.held
            .iter()
            .filter(|h| h.instance == INSTANCES[i])
            .count()
    }

    /// Long-lived connections through instance `i` that ended before the clients stopped.
    fn lost(&self, i: usize) -> usize {
        self.held
            .iter()
            .filter(|h| h.instance == INSTANCES[i] && h.ended.is_some())
            .count()
    }

    fn failed(&self) -> Vec<&(Duration, Result<String, String>)> {
        self.new_conns.iter().filter(|(_, r)| r.is_err()).collect()
    }

    fn new_in(&self, a: Duration, b: Duration) -> usize {
        self.new_conns
            .iter()
            .filter(|(t, _)| *t >= a && *t < b)
            .count()
    }

    fn failed_in(&self, a: Duration, b: Duration) -> usize {
        self.failed()
            .iter()
            .filter(|(t, _)| *t >= a && *t < b)
            .count()
    }
}

/// The clients, and the steps under them: SIGKILL of lb1, soft stop of lb2; after the
/// clients, lb3's host silent.
fn steps(tb: &mut Testbed, rig: &Rig, inst: &mut [Instance]) -> Outcome {
    let t0 = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let up = Arc::new(std::sync::Barrier::new(LONG_LIVED + 1));
    let holders: Vec<JoinHandle<Held>> = (0..LONG_LIVED)
        .map(|_| {
            let (ns, stop, up) = (rig.client.clone(), stop.clone(), up.clone());
            std::thread::spawn(move || hold(ns, t0, stop, up))
        })
        .collect();
    up.wait();
    let opened = opener(rig.client.clone(), t0, stop.clone());
    std::thread::sleep(STEP);

    // Step 1: SIGKILL instance 1.
    let killed = inst[0].balance.as_ref().unwrap().id();
    let t_kill = t0.elapsed();
    // SAFETY: kill(2) on a pid we started and have not reaped.
    assert_eq!(unsafe { libc::kill(killed as i32, libc::SIGKILL) }, 0);
    let conv1 = wait_nexthops(&rig.router, 2, CONVERGENCE_LIMIT).map(|t| t - t0);
    inst[0].balance.take(); // reaps it
    std::thread::sleep(STEP);

    // Step 2: soft stop of instance 2: withdraw (the announcer's stop waits --settle), then
    // ctl soft-stop.
    let t_soft = t0.elapsed();
    let router = rig.router.clone();
    let withdrawal = std::thread::spawn(move || wait_nexthops(&router, 1, PATIENCE));
    tb.stop(inst[1].announcer, Duration::from_secs(15)).unwrap();
    let t_withdrawn = t0.elapsed();
    let conv2 = withdrawal.join().unwrap().map(|t| t - t0);
    let soft_stop = netsched_testbed::run(
        env!("CARGO_BIN_EXE_netsched-balanced"),
        &[
            "ctl",
            "--control-socket",
            inst[1].ctl.to_str().unwrap(),
            "soft-stop",
        ],
    )
    .map_err(|e| e.to_string());
    std::thread::sleep(STEP);
    stop.store(true, Ordering::Relaxed);
    let held: Vec<Held> = holders.into_iter().map(|h| h.join().unwrap()).collect();
    let new_conns = opened.join().unwrap();
    // The soft-stopped instance exits once its connections (the clients', now closed) end.
    let end = Instant::now() + Duration::from_secs(10);
    let b2 = inst[1].balance.as_mut().unwrap();
    while b2.running() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    let b2_exited = !b2.running();
    let b2_log = std::fs::read_to_string(&inst[1].log).unwrap_or_default();

    // Step 3 (the clients have stopped): lb3's host falls silent — every packet on its link
    // dropped, BIRD and the balancer still running — so only BGP's hold time (3 s) tells the
    // router.
    let t_silent = Instant::now();
    tb.exec(&rig.instances[2], "nft", &[SILENT]).unwrap();
    let host_lost = wait_nexthops(&rig.router, 0, HOST_LOSS_LIMIT).map(|t| t - t_silent);
    Outcome {
        t_kill,
        conv1,
        t_soft,
        conv2,
        t_withdrawn,
        soft_stop,
        held,
        new_conns,
        b2_exited,
        b2_log,
        host_lost,
    }
}

/// The figures of each step, printed.
fn report(o: &Outcome) {
    let (t_kill, t_soft) = (o.t_kill, o.t_soft);
    println!(
        "long-lived connections per instance: {}, {}, {}",
        o.on(0),
        o.on(1),
        o.on(2)
    );
    println!(
        "step 0 (steady): new connections {} failed {}",
        o.new_in(Duration::ZERO, t_kill),
        o.failed_in(Duration::ZERO, t_kill)
    );
    println!(
        "step 1 (SIGKILL lb1 at {:.0} ms): router converged after {:.0} ms; long-lived lost: lb1 {}/{}, lb2 {}/{}, lb3 {}/{}; new connections {} failed {} (last failure {:.0} ms after the kill)",
        ms(t_kill),
        o.conv1.map_or(f64::NAN, |c| ms(c - t_kill)),
        o.lost(0),
        o.on(0),
        o.lost(1),
        o.on(1),
        o.lost(2),
        o.on(2),
        o.new_in(t_kill, t_soft),
        o.failed_in(t_kill, t_soft),
        o.failed()
            .iter()
            .filter(|(t, _)| *t >= t_kill && *t < t_soft)
            .map(|(t, _)| ms(*t - t_kill))
            .fold(0.0, f64::max),
    );
    println!(
        "step 2 (soft stop lb2 at {:.0} ms: router converged after {:.0} ms, announcer done at {:.0} ms, ctl soft-stop: {:?}): long-lived lost: lb2 {}/{}, lb3 {}/{}; new connections {} failed {}; lb2 exited: {}; {}",
        ms(t_soft),
        o.conv2.map_or(f64::NAN, |c| ms(c - t_soft)),
        ms(o.t_withdrawn),
        o.soft_stop.as_deref().map(str::trim),
        o.lost(1),
        o.on(1),
        o.lost(2),
        o.on(2),
        o.new_in(t_soft, Duration::MAX),
        o.failed_in(t_soft, Duration::MAX),
        o.b2_exited,
        o.b2_log.lines().find(|l| l.contains("stopped in")).unwrap_or("(no stop line)")
    );
    println!(
        "step 3 (lb3's host silent): router's route gone after {:.0} ms (BGP hold time 3 s)",
        o.host_lost.map_or(f64::NAN, ms)
    );
    for (name, a, b) in [
        ("steady", Duration::ZERO, t_kill),
        ("after the kill", t_kill, t_soft),
        ("after the soft stop", t_soft, Duration::MAX),
    ] {
        let on = |i: &str| {
            o.new_conns
                .iter()
                .filter(|(t, r)| *t >= a && *t < b && r.as_deref() == Ok(i))
                .count()
        };
        println!(
            "new connections answered {name}: lb1 {}, lb2 {}, lb3 {}",
            on(INSTANCES[0]),
            on(INSTANCES[1]),
            on(INSTANCES[2])
        );
    }
    for f in o.failed().iter().take(20) {
        println!("  new connection at {:.0} ms: {:?}", ms(f.0), f.1);
    }
}

/// The invariants; `diag` gives every log for a failure's message.
fn check(o: &Outcome, diag: impl Fn() -> String) {
    let (held, failed, t_kill) = (&o.held, o.failed(), o.t_kill);
    let conv1 = o.conv1.unwrap_or_else(|| {
        panic!(
            "the router kept the killed instance's next hop for {CONVERGENCE_LIMIT:?}: {}",
            diag()
        )
    });
    assert!(held.iter().all(|h| h.answered > 0 && !h.moved), "{held:?}");
    assert!(
        o.on(0) > 0 && o.on(1) > 0 && o.on(2) > 0,
        "ECMP left an instance without connections: {held:?}"
    );
    for h in held.iter().filter(|h| h.instance == INSTANCES[0]) {
        let (at, _) = h
            .ended
            .as_ref()
            .expect("a connection of the killed instance lived on");
        assert!(*at >= t_kill, "{h:?} ended before the kill");
    }
    assert_eq!(
        (o.lost(1), o.lost(2)),
        (0, 0),
        "connections of surviving instances lost: {held:?}"
    );
    assert_eq!(
        o.failed_in(Duration::ZERO, t_kill),
        0,
        "failures before the kill: {failed:?}"
    );
    assert!(
        failed
            .iter()
            .all(|(t, _)| *t >= t_kill && *t < conv1 + IN_FLIGHT),
        "new connections failed outside the convergence window ({:.0}..{:.0} ms): {failed:?}\n{}",
        ms(t_kill),
        ms(conv1 + IN_FLIGHT),
        diag()
    );
    assert!(o.soft_stop.is_ok(), "ctl soft-stop: {:?}", o.soft_stop);
    assert!(
        o.conv2.is_some_and(|c| c <= o.t_withdrawn),
        "lb2's route still announced after its announcer stopped ({:?})",
        o.conv2
    );
    assert!(
        o.b2_exited,
        "lb2 did not exit after its connections ended: {}",
        o.b2_log
    );
    assert!(
        o.b2_log.contains(" 0 cut"),
        "lb2's soft stop cut connections: {}\n{}",
        o.b2_log,
        diag()
    );
    assert!(
        o.host_lost.is_some(),
        "the router kept a silent host's route for {HOST_LOSS_LIMIT:?}: {}",
        diag()
    );
}

#[test]
fn three_instances_behind_ecmp_lose_one_without_touching_the_others() {
    let test = "three_instances_behind_ecmp_lose_one_without_touching_the_others";
    if !privileged_test_allowed(test) || !tools_present(test) {
        return;
    }
    let mut tb = Testbed::new("scale").unwrap();
    let dir = TempDir::new("scale-out").unwrap();
    let rig = topology(&mut tb);
    start_nginx(&mut tb, &rig.servers, dir.path());
    let router = rig.router.clone();
    start_bird(
        &mut tb,
        &router,
        "bird-router.conf",
        dir.path(),
        "bird-router",
    );
    let mut inst: Vec<Instance> = (0..3)
        .map(|k| start_instance(&mut tb, &rig.instances[k], dir.path(), k + 1))
        .collect();
    let started = Instant::now();
    assert!(
        wait_nexthops(&rig.router, 3, PATIENCE).is_some(),
        "the router never had three next hops: {}",
        logs(dir.path())
    );
    println!(
        "announced by all three {:.0} ms after the start",
        ms(started.elapsed())
    );
    let outcome = steps(&mut tb, &rig, &mut inst);
    report(&outcome);
    check(&outcome, || logs(dir.path()));
    drop(inst);
}

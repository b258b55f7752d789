//! The bad-input suite: every command-line and file surface of `netsched`, fed malformed, huge,
//! empty, binary and overflowing input. Each case must end with a clear one-line error and a
//! nonzero exit — never a panic (exit 101), an abort (out of memory under the address-space
//! limit below) or a hang — in bounded time and memory.
//!
//! Bounds every case runs under: 60 s of wall time and a 4 GiB address space (`RLIMIT_AS`), so
//! an unbounded allocation shows up as an abort here instead of swapping a CI machine.
//!
//! Cases that need a network namespace (the nfq daemon) run inside a scratch namespace of their
//! own and are skipped, with a printed reason, without root.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(60);
const ADDRESS_SPACE: u64 = 4 << 30;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_netsched")
}

/// A scratch folder for one case's files (removed on drop).
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Self {
        let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let p = base.join(format!("bad-input-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }
    fn file(&self, name: &str, contents: &[u8]) -> String {
        let p = self.0.join(name);
        std::fs::File::create(&p)
            .unwrap()
            .write_all(contents)
            .unwrap();
        p.to_str().unwrap().to_string()
    }
    fn path(&self, name: &str) -> String {
        self.0.join(name).to_str().unwrap().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Outcome {
    code: Option<i32>,
    stderr: String,
    elapsed: Duration,
}

/// Run `netsched ARGS` (inside namespace `ns` if given) under the time and memory bounds.
fn run_in(ns: Option<&str>, args: &[&str]) -> Outcome {
    let mut cmd = match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, bin()]);
            c
        }
        None => Command::new(bin()),
    };
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    netsched_sys::process::limit_child(
        &mut cmd,
        netsched_sys::process::ChildLimit::AddressSpace,
        ADDRESS_SPACE,
    );
    let start = Instant::now();
    let mut child = cmd.spawn().expect("start netsched");
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stderr, &mut s);
        s
    });
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if start.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let elapsed = start.elapsed();
    let stderr = String::from_utf8_lossy(&reader.join().unwrap()).into_owned();
    match status {
        None => panic!(
            "netsched {}: still running after {:?} (a hang is not an error message)\n{stderr}",
            args.join(" "),
            TIMEOUT
        ),
        Some(st) => Outcome {
            code: st.code(),
            stderr,
            elapsed,
        },
    }
}

/// The case must fail cleanly: exit 1 or 2 (clap's usage error), a message naming one of
/// `mentions` (case-insensitive), no panic text, no backtrace.
fn assert_clean_error(args: &[&str], out: &Outcome, mentions: &[&str]) {
    let line = format!("netsched {}", args.join(" "));
    assert!(
        matches!(out.code, Some(1) | Some(2)),
        "{line}: expected a clean error exit (1 or 2), got {:?} after {:?}\n{}",
        out.code,
        out.elapsed,
        out.stderr
    );
    assert!(
        !out.stderr.contains("panicked") && !out.stderr.contains("RUST_BACKTRACE"),
        "{line}: panicked\n{}",
        out.stderr
    );
    let low = out.stderr.to_lowercase();
    assert!(
        mentions.iter().any(|m| low.contains(&m.to_lowercase())),
        "{line}: the error should name one of {mentions:?}\n{}",
        out.stderr
    );
    assert!(
        out.stderr.len() < 8192,
        "{line}: an error is a message, not {} bytes",
        out.stderr.len()
    );
}

fn bad(args: &[&str], mentions: &[&str]) {
    let out = run_in(None, args);
    assert_clean_error(args, &out, mentions);
}

fn binary_junk() -> Vec<u8> {
    // Deterministic bytes covering every value, NULs and invalid UTF-8 included.
    (0..4096u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect()
}

// ---------------------------------------------------------------- lab

#[test]
fn lab_rejects_unknown_names_keys_and_values() {
    let s = Scratch::new("lab");
    let out = s.path("out");
    bad(
        &["lab", "run", "no-such-experiment", "--out", &out],
        &["no-such-experiment"],
    );
    bad(
        &[
            "lab",
            "run",
            "adsl-ack",
            "--set",
            "no.such.key=1",
            "--out",
            &out,
        ],
        &["no.such.key"],
    );
    bad(
        &[
            "lab",
            "run",
            "adsl-ack",
            "--set",
            "tcp.max_window_segments=abc",
            "--out",
            &out,
        ],
        &["max_window_segments"],
    );
    bad(
        &[
            "lab",
            "run",
            "adsl-ack",
            "--set",
            "tcp.max_window_segments=-5",
            "--out",
            &out,
        ],
        &["max_window_segments"],
    );
    bad(
        &[
            "lab",
            "run",
            "adsl-ack",
            "--set",
            "tcp.max_window_segments=1e300",
            "--out",
            &out,
        ],
        &["max_window_segments"],
    );
    bad(
        &["lab", "run", "adsl-ack", "--seed=-1", "--out", &out],
        &["seed"],
    );
    // A failed validation leaves no output folder behind.
    assert!(
        !Path::new(&out).exists(),
        "a run that failed validation created {out}"
    );
}

#[test]
fn lab_bounds_counts_that_would_exhaust_memory() {
    let s = Scratch::new("labcount");
    let out = s.path("out");
    bad(
        &[
            "lab",
            "run",
            "np-dispatch",
            "--set",
            "processor.threads_per_engine=100000000",
            "--out",
            &out,
        ],
        &["threads_per_engine"],
    );
    bad(
        &[
            "lab",
            "sweep",
            "np-dispatch",
            "--grid",
            "processor.threads_per_engine=4",
            "--seeds",
            "100000000",
            "--out",
            &out,
        ],
        &["seeds"],
    );
}

#[test]
fn lab_scenario_files_are_bounded_and_checked() {
    let s = Scratch::new("labscen");
    let out = s.path("out");
    let empty = s.file("empty.toml", b"");
    let junk = s.file("junk.toml", &binary_junk());
    let not_toml = s.file("bad.toml", b"[tcp\nmax_window_segments = = 3\n");
    for name in [
        "adsl-ack",
        "percentile-web",
        "np-dispatch",
        "vm-delay",
        "lvs-cluster",
    ] {
        bad(
            &["lab", "run", name, "--scenario", "/dev/zero", "--out", &out],
            &["/dev/zero"],
        );
        bad(
            &["lab", "run", name, "--scenario", &empty, "--out", &out],
            &["empty.toml"],
        );
        bad(
            &["lab", "run", name, "--scenario", &junk, "--out", &out],
            &["junk.toml"],
        );
        bad(
            &["lab", "run", name, "--scenario", &not_toml, "--out", &out],
            &["bad.toml"],
        );
    }
    bad(
        &[
            "lab",
            "run",
            "adsl-ack",
            "--scenario",
            &s.path("missing.toml"),
            "--out",
            &out,
        ],
        &["missing.toml"],
    );
}

// ---------------------------------------------------------------- replay

#[test]
fn replay_rejects_malformed_configs_and_traces() {
    let s = Scratch::new("replay");
    let good_cfg = s.file(
        "fifo.toml",
        b"[qdisc]\nkind = \"fifo\"\nqueue_limit = 10\n\n[service]\nrate = \"800kbit\"\n",
    );
    let good_trace = s.file("t.csv", b"time,class,size,id\n0,0,1500,1\n");
    let junk = s.file("junk.bin", &binary_junk());
    let empty = s.file("empty.toml", b"");
    bad(
        &["replay", "qdisc", "--config", &junk, "--trace", &good_trace],
        &["junk.bin"],
    );
    bad(
        &[
            "replay",
            "qdisc",
            "--config",
            &empty,
            "--trace",
            &good_trace,
        ],
        &["empty.toml", "qdisc"],
    );
    bad(
        &["replay", "qdisc", "--config", &good_cfg, "--trace", &junk],
        &["junk.bin"],
    );
    bad(
        &[
            "replay",
            "qdisc",
            "--config",
            "/dev/zero",
            "--trace",
            &good_trace,
        ],
        &["/dev/zero"],
    );
    let unknown_kind = s.file(
        "k.toml",
        b"[qdisc]\nkind = \"warp-drive\"\n[service]\nrate = \"1mbit\"\n",
    );
    bad(
        &[
            "replay",
            "qdisc",
            "--config",
            &unknown_kind,
            "--trace",
            &good_trace,
        ],
        &["warp-drive"],
    );
    let huge_item = s.file(
        "h.toml",
        b"[qdisc]\nkind = \"fifo\"\nqueue_limit = 10\n[service]\nper_item = \"99999999999999s\"\n",
    );
    bad(
        &[
            "replay",
            "qdisc",
            "--config",
            &huge_item,
            "--trace",
            &good_trace,
        ],
        &["99999999999999s"],
    );
    let bad_rate = s.file(
        "r.toml",
        b"[qdisc]\nkind = \"fifo\"\nqueue_limit = 10\n[service]\nrate = \"1e300bit\"\n",
    );
    bad(
        &[
            "replay",
            "qdisc",
            "--config",
            &bad_rate,
            "--trace",
            &good_trace,
        ],
        &["1e300bit"],
    );
    let max_time = s.file(
        "max.csv",
        format!("time,class,size,id\n{},0,1500,1\n", u64::MAX).as_bytes(),
    );
    bad(
        &[
            "replay", "qdisc", "--config", &good_cfg, "--trace", &max_time,
        ],
        &["max.csv"],
    );
    let fields = s.file("f.csv", b"time,class,size,id\n0,0\n");
    bad(
        &["replay", "qdisc", "--config", &good_cfg, "--trace", &fields],
        &["f.csv:2"],
    );
    let negative = s.file("n.csv", b"time,class,size,id\n0,0,-1,1\n");
    bad(
        &[
            "replay", "qdisc", "--config", &good_cfg, "--trace", &negative,
        ],
        &["n.csv:2"],
    );
}

// ---------------------------------------------------------------- shape, link

#[test]
fn shape_and_link_reject_bad_rates_and_durations() {
    for up in ["abc", "0bit", "1e300bit", "5furlongs", "-1mbit", ""] {
        bad(
            &[
                "shape",
                "apply",
                "--dev",
                "lo",
                &format!("--up={up}"),
                "--dry-run",
            ],
            &["rate", up],
        );
    }
    bad(
        &[
            "shape",
            "apply",
            "--dev",
            "lo",
            "--up",
            "1mbit",
            "--headroom",
            "99",
            "--dry-run",
        ],
        &["headroom"],
    );
    bad(
        &["link", "--dev-a", "lo", "--dev-b", "lo", "--stats", "0s"],
        &["stats"],
    );
    bad(
        &[
            "link", "--dev-a", "lo", "--dev-b", "lo", "--delay", "1e300s",
        ],
        &["1e300s", "delay"],
    );
    bad(
        &[
            "link",
            "--dev-a",
            "lo",
            "--dev-b",
            "lo",
            "--ab-qdisc",
            "{\"kind\":",
        ],
        &["qdisc"],
    );
}

// ---------------------------------------------------------------- nfq, ctl

/// A scratch namespace for the nfq cases (the daemon touches iptables before it serves).
struct Netns(String);

impl Netns {
    fn new(tag: &str) -> Option<Self> {
        if !netsched_sys::process::is_root() {
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("{tag}: needs root, and CI=true requires privileged tests to run");
            }
            eprintln!("SKIP {tag}: needs root (a scratch network namespace)");
            return None;
        }
        let name = format!("nsbad{}-{tag}", std::process::id());
        let ok = Command::new("ip")
            .args(["netns", "add", &name])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "ip netns add {name} failed");
        Some(Netns(name))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

#[test]
fn nfq_rejects_bad_flags_before_touching_the_system() {
    let Some(ns) = Netns::new("nfq") else { return };
    let s = Scratch::new("nfq");
    let sock = s.path("ctl.sock");
    let run = |args: &[&str], mentions: &[&str]| {
        let out = run_in(Some(&ns.0), args);
        assert_clean_error(args, &out, mentions);
    };
    run(
        &[
            "nfq",
            "--port",
            "8080",
            "--class",
            "a=90",
            "--cpu",
            "100000",
            "--control-socket",
            &sock,
        ],
        &["cpu"],
    );
    run(
        &[
            "nfq",
            "--port",
            "8080",
            "--class",
            "a=90",
            "--deadline",
            "1e300s",
            "--control-socket",
            &sock,
        ],
        &["1e300s", "deadline"],
    );
    run(
        &[
            "nfq",
            "--port",
            "8080",
            "--class",
            "a=900",
            "--control-socket",
            &sock,
        ],
        &["900", "percentile"],
    );
    let junk = s.file("junk.toml", &binary_junk());
    run(
        &["nfq", "--config", &junk, "--control-socket", &sock],
        &["junk.toml"],
    );
    run(
        &["nfq", "--config", "/dev/zero", "--control-socket", &sock],
        &["/dev/zero"],
    );
}

#[test]
fn nfq_cleanup_never_deletes_a_file_that_is_not_a_socket() {
    let Some(ns) = Netns::new("clean") else {
        return;
    };
    let s = Scratch::new("clean");
    let f = s.file("precious", b"data\n");
    let args = [
        "nfq",
        "cleanup",
        "--control-socket",
        f.as_str(),
        "--nfqueue",
        "4321",
    ];
    let out = run_in(Some(&ns.0), &args);
    assert_ne!(out.code, Some(101), "panicked: {}", out.stderr);
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    assert_eq!(
        std::fs::read(&f).ok().as_deref(),
        Some(&b"data\n"[..]),
        "nfq cleanup removed or changed a regular file at the socket path"
    );
}

#[test]
fn ctl_reports_a_missing_or_silent_daemon_clearly() {
    let s = Scratch::new("ctl");
    let missing = s.path("none.sock");
    bad(
        &["nfq", "ctl", "--control-socket", &missing, "show"],
        &["none.sock"],
    );
    // A listener that accepts nothing and never answers: a timeout, not EAGAIN.
    let silent = s.path("silent.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&silent).unwrap();
    let out = run_in(None, &["nfq", "ctl", "--control-socket", &silent, "show"]);
    assert_clean_error(
        &["nfq", "ctl", "--control-socket", &silent, "show"],
        &out,
        &["timed out", "timeout", "no answer"],
    );
    bad(
        &[
            "nfq",
            "ctl",
            "--control-socket",
            &missing,
            "set-deadline",
            "1e300s",
        ],
        &["1e300s", "deadline"],
    );
}

// ------------------------------------------------- balance, vswitch, --metrics and --control

#[test]
fn daemon_flags_configs_and_ctl_clients_fail_clearly() {
    let s = Scratch::new("daemons");
    // --metrics: every daemon parses the address the same way, before touching the system.
    for addr in ["notanaddr", "1.2.3.4:99999", "[::1", ""] {
        bad(
            &[
                "link",
                "--dev-a",
                "nsbadx0",
                "--dev-b",
                "nsbadx1",
                &format!("--metrics={addr}"),
            ],
            &["--metrics", "metrics"],
        );
    }
    // balance: its configuration goes through the one bounded reader.
    let junk = s.file("junk.toml", &binary_junk());
    bad(&["balance", "--config", &junk], &["junk.toml"]);
    bad(&["balance", "--config", "/dev/zero"], &["/dev/zero"]);
    let big = s.file("big.toml", &vec![b'#'; 2 << 20]);
    bad(&["balance", "--config", &big], &["big.toml", "limit"]);
    let wrong = s.file("wrong.toml", b"mode = \"l9\"\n");
    bad(&["balance", "--config", &wrong], &["l9"]);
    // vswitch: the same for its host file.
    bad(&["vswitch", "--config", "/dev/zero"], &["/dev/zero"]);
    bad(&["vswitch", "--config", &junk], &["junk.toml"]);
    let tier0 = s.file(
        "host.toml",
        b"uplink = \"up0\"\ndiscipline = \"strict_priority\"\npacket_rate = 5000\n\
          [[port]]\ndev = \"vg0\"\ntier = 0\n",
    );
    bad(&["vswitch", "--config", &tier0], &["tier", "0"]);
    bad(
        &["vswitch", "--config", &tier0, "--metrics", "notanaddr"],
        &["metrics", "tier"],
    );
    // The ctl clients: no daemon, and a daemon that never answers (bounded wait, not a hang).
    let missing = s.path("none.sock");
    bad(
        &["balance", "ctl", "--control-socket", &missing, "show"],
        &["none.sock"],
    );
    bad(
        &["vswitch", "ctl", "--control-socket", &missing, "show"],
        &["none.sock"],
    );
    let silent = s.path("silent.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&silent).unwrap();
    for args in [
        [
            "balance",
            "ctl",
            "--control-socket",
            silent.as_str(),
            "show",
        ],
        [
            "vswitch",
            "ctl",
            "--control-socket",
            silent.as_str(),
            "show",
        ],
    ] {
        let out = run_in(None, &args);
        assert_clean_error(&args, &out, &["timed out"]);
    }
    bad(&["vswitch", "ctl", "set-weight", "p1", "abc"], &["abc"]);
    // balance load: the URL, the rate, the connections and the durations are checked before
    // any connection is made (127.0.0.1:9 is the discard port; nothing there is needed).
    let url = "http://127.0.0.1:9/";
    bad(
        &["balance", "load", "https://x/", "--rate", "10"],
        &["https://x/", "http://"],
    );
    bad(&["balance", "load", url, "--rate", "0"], &["--rate", "0"]);
    bad(&["balance", "load", url, "--rate", "1e9"], &["--rate"]);
    bad(
        &["balance", "load", url, "--rate", "10", "--connections", "0"],
        &["--connections", "0"],
    );
    bad(
        &["balance", "load", url, "--rate", "10", "--duration", "5"],
        &["--duration", "5"],
    );
    bad(
        &["balance", "load", url, "--rate", "10", "--duration", "99h"],
        &["--duration", "99h"],
    );
}

// ---------------------------------------------------------------- filter

#[test]
fn filter_rejects_bad_flags_rule_files_and_signature_files() {
    let s = Scratch::new("filter");
    let good = s.file(
        "rules.toml",
        b"[[rule]]\naction = \"drop\"\ndport = \"9\"\n",
    );
    let run = |extra: &[&str], mentions: &[&str]| {
        let mut args = vec![
            "filter",
            "--input",
            "lo",
            "--output",
            "none",
            "--no-control",
        ];
        args.extend_from_slice(extra);
        bad(&args, mentions);
    };
    run(&["--rules", &good, "--dispatch", "lottery"], &["lottery"]);
    run(&["--rules", &good, "--workers", "0"], &["--workers"]);
    run(&["--rules", &good, "--workers", "100000"], &["--workers"]);
    run(&["--rules", &good, "--block-size", "0"], &["--block-size"]);
    run(
        &["--rules", &good, "--reorder-window", "99999999"],
        &["--reorder-window"],
    );
    run(
        &["--rules", &good, "--reorder-timeout", "forever"],
        &["--reorder-timeout"],
    );
    run(&["--rules", &good, "--pool", "1"], &["--pool"]);
    run(&["--rules", &s.path("missing.toml")], &["missing.toml"]);
    let r = s.file(
        "r1.toml",
        b"[[rule]]\naction = \"drop\"\nsrc = \"10.0.0.0/99\"\n",
    );
    run(&["--rules", &r], &["r1.toml:3", "src"]);
    let r = s.file("r2.toml", b"[[rule]]\naction = \"reject\"\n");
    run(&["--rules", &r], &["r2.toml:2", "action"]);
    let r = s.file("r3.toml", &binary_junk());
    run(&["--rules", &r], &["r3.toml"]);
    let huge = "[[rule]]\naction = \"drop\"\n".repeat(100_001);
    let r = s.file("r4.toml", huge.as_bytes());
    run(&["--rules", &r], &["r4.toml", "rules"]);
    let sig = s.file("s1.txt", b"fine\nbad\\q\n");
    run(&["--rules", &good, "--signatures", &sig], &["s1.txt:2"]);
    let sig = s.file("s2.txt", "a".repeat(300).as_bytes());
    run(
        &["--rules", &good, "--signatures", &sig],
        &["s2.txt:1", "longer"],
    );
    let sig = s.file("s3.txt", &binary_junk());
    run(&["--rules", &good, "--signatures", &sig], &["s3.txt"]);
    run(
        &["--rules", &good, "--metrics", "8.8.8.8:9"],
        &["--metrics"],
    );
    bad(
        &[
            "filter",
            "--input",
            "no-such-if0",
            "--output",
            "none",
            "--no-control",
            "--rules",
            &good,
        ],
        &["no-such-if0"],
    );
    bad(
        &[
            "filter",
            "ctl",
            "--control-socket",
            &s.path("none.sock"),
            "show",
        ],
        &["none.sock"],
    );
}

/// Rule sets past a classifier's bounds are refused with the bound named: `filter` with tuple
/// space search over more tuples than its limit (4096), `classify bench` with TupleMerge
/// under `--max-memory`.
#[test]
fn rule_sets_past_the_classifier_bounds_are_refused_naming_the_bound() {
    let s = Scratch::new("bounds");
    let mut toml = String::new();
    for src in 1..=32 {
        for dst in 1..=32 {
            for dport in ["80", "0-1", "0-3", "0-7", "0-15"] {
                toml.push_str(&format!(
                    "[[rule]]\naction = \"drop\"\nsrc = \"0.0.0.0/{src}\"\ndst = \"0.0.0.0/{dst}\"\ndport = \"{dport}\"\n"
                ));
            }
        }
    }
    let rules = s.file("tuples.toml", toml.as_bytes());
    let args = [
        "filter",
        "--input",
        "lo",
        "--output",
        "none",
        "--no-control",
        "--classifier",
        "tuple_space",
        "--rules",
        rules.as_str(),
    ];
    let out = run_in(None, &args);
    assert_clean_error(&args, &out, &["tuples.toml"]);
    assert!(
        out.stderr.contains("more than 4096 tuples"),
        "{}",
        out.stderr
    );

    let (cb, trace) = (s.path("acl.rules"), s.path("acl.trace"));
    let gen = Command::new(bin())
        .args(["classify", "gen", "--profile", "acl", "--rules", "3000"])
        .args([
            "--out",
            cb.as_str(),
            "--trace",
            trace.as_str(),
            "--packets",
            "100",
        ])
        .output()
        .unwrap();
    assert!(gen.status.success(), "{gen:?}");
    let args = [
        "classify",
        "bench",
        "--rules",
        cb.as_str(),
        "--trace",
        trace.as_str(),
        "--classifier",
        "tuple_merge",
        "--max-memory",
        "64k",
    ];
    let out = run_in(None, &args);
    assert_clean_error(&args, &out, &["tuple_merge"]);
    assert!(
        out.stderr.contains("more than the limit of 65536"),
        "{}",
        out.stderr
    );
}

/// Malformed lines of every rule and trace format (ClassBench's fields up to its TCP flags
/// field, our TOML) name the file, the line, the field and the value; malformed signature
/// files and the flags that say what a signature or a fault does are refused the same way.
#[test]
fn malformed_rule_lines_and_signature_flags_name_file_line_field_and_value() {
    let s = Scratch::new("lines");
    let ok = "@10.0.0.0/8\t0.0.0.0/0\t0 : 65535\t80 : 80\t0x06/0xFF\n";
    let trace = s.file("t.trace", b"167772161 1 2 80 6\n");
    for (name, line, field, value) in [
        (
            "cb1.rules",
            "@10.0.0.0/33\t0.0.0.0/0\t0 : 65535\t80 : 80\t0x06/0xFF",
            "src",
            "10.0.0.0/33",
        ),
        (
            "cb2.rules",
            "@10.0.0.0/8\t0.0.0.0/0\t0 : 65535\t90 : 80\t0x06/0xFF",
            "dst_port",
            "90 : 80",
        ),
        (
            "cb3.rules",
            "@10.0.0.0/8\t0.0.0.0/0\t0 : 65535\t80 : 80\t0x6/0xZZ",
            "proto",
            "0x6/0xZZ",
        ),
        (
            "cb4.rules",
            "@10.0.0.0/8\t0.0.0.0/0\t0 : 65535",
            "dst_port",
            "''",
        ),
        (
            "cb5.rules",
            "@10.0.0.0/8\t0.0.0.0/0\t0 : 65535\t80 : 80\t0x06/0xFF\t0x0000/0xZZZZ",
            "flags",
            "0x0000/0xZZZZ",
        ),
    ] {
        let f = s.file(name, format!("{ok}{line}\n").as_bytes());
        let args = [
            "classify",
            "bench",
            "--rules",
            f.as_str(),
            "--trace",
            trace.as_str(),
        ];
        let out = run_in(None, &args);
        assert_clean_error(&args, &out, &[&format!("{name}:2")]);
        for part in [field, value] {
            assert!(out.stderr.contains(part), "{name}: {part}\n{}", out.stderr);
        }
    }
    let rules = s.file("ok.rules", ok.as_bytes());
    let t = s.file("bad.trace", b"167772161 1 2 80 6\n1 2 3 70000 6\n");
    bad(
        &["classify", "bench", "--rules", &rules, "--trace", &t],
        &["bad.trace:2"],
    );

    let filter = |extra: &[&str], mentions: &[&str]| {
        let mut args = vec![
            "filter",
            "--input",
            "lo",
            "--output",
            "none",
            "--no-control",
        ];
        args.extend_from_slice(extra);
        let out = run_in(None, &args);
        assert_clean_error(&args, &out, &mentions[..1]);
        for m in mentions {
            assert!(out.stderr.contains(m), "{m}\n{}", out.stderr);
        }
    };
    for (name, body, line, field, value) in [
        ("f1.toml", "dport = \"80-70\"", ":3:", "dport", "80-70"),
        ("f2.toml", "proto = \"tcpx\"", ":3:", "proto", "tcpx"),
        ("f3.toml", "sport = 70000", ":3:", "sport", "70000"),
        (
            "f4.toml",
            "dst = \"10.0.0.1/8\"",
            ":3:",
            "dst",
            "10.0.0.1/8",
        ),
        ("f5.toml", "dprot = \"80\"", ":3", "dprot", "dprot"),
    ] {
        let f = s.file(
            name,
            format!("[[rule]]\naction = \"drop\"\n{body}\n").as_bytes(),
        );
        filter(&["--rules", &f], &[&format!("{name}{line}"), field, value]);
    }
    let good = s.file("good.toml", b"[[rule]]\naction = \"drop\"\ndport = \"9\"\n");
    let sig = s.file("x.sig", b"fine\nab\\x+1\n");
    filter(
        &["--rules", &good, "--signatures", &sig],
        &["x.sig:2", "\\x+1"],
    );
    let sig = s.file("y.sig", b"fine\n\\xg0\n");
    filter(
        &["--rules", &good, "--signatures", &sig],
        &["y.sig:2", "\\xg0"],
    );
    filter(
        &["--rules", &good, "--signatures", &s.path("")],
        &["signature"],
    );
    for (flag, value) in [
        ("--on-signature", "marc"),
        ("--on-panic", "maybe"),
        ("--non-ip", "reject"),
        ("--fragments", "reassemble"),
    ] {
        filter(&["--rules", &good, flag, value], &[flag, value]);
    }
}

/// A rule that repeats an earlier rule's fields never decides a packet: the filter says so,
/// naming both lines, when it loads the file (and then goes on: such files are legal).
#[test]
fn duplicated_rules_are_reported_with_both_lines() {
    let s = Scratch::new("dups");
    let rules = s.file(
        "dup.toml",
        b"[[rule]]\naction = \"drop\"\ndport = \"80\"\n[[rule]]\naction = \"accept\"\ndport = 80\n[[rule]]\naction = \"accept\"\ndport = \"81\"\n",
    );
    let args = [
        "filter",
        "--input",
        "no-such-if0",
        "--output",
        "none",
        "--no-control",
        "--rules",
        rules.as_str(),
    ];
    let out = run_in(None, &args);
    assert_clean_error(&args, &out, &["no-such-if0"]);
    assert!(
        out.stderr
            .contains("dup.toml: line 5: rule 2 has the fields of rule 1 (line 2)"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("rule 3 has"), "{}", out.stderr);
}

/// `netsched filter` reads a ClassBench filter set (here one `classify gen` writes) directly:
/// it knows the format by its `@` lines, gives every rule `--classbench-action` (drop unless
/// told) and the rest the other action, and says what it loaded before it opens the
/// interfaces. `--classbench-action` with a TOML file is refused, naming the file; the control
/// client's hint names the socket by its flag, `--control-socket`.
#[test]
fn filter_reads_classbench_sets_and_says_what_it_loaded() {
    let s = Scratch::new("classbench");
    let cb = s.path("acl.rules");
    let gen = Command::new(bin())
        .args(["classify", "gen", "--profile", "acl", "--rules", "300"])
        .args(["--out", cb.as_str()])
        .output()
        .unwrap();
    assert!(gen.status.success(), "{gen:?}");
    let filter = |extra: &[&str]| {
        let mut args = vec![
            "filter",
            "--input",
            "no-such-if0",
            "--output",
            "none",
            "--no-control",
        ];
        args.extend_from_slice(extra);
        let out = run_in(None, &args);
        assert_clean_error(&args, &out, &["no-such-if0"]);
        out.stderr
    };
    let said = filter(&["--rules", &cb]);
    assert!(
        said.contains(&format!(
            "rules: 300 loaded from {cb} (classbench), default accept, tuple_merge, "
        )),
        "{said}"
    );
    let said = filter(&[
        "--rules",
        &cb,
        "--classbench-action",
        "accept",
        "--classifier",
        "linear",
    ]);
    assert!(
        said.contains(&format!(
            "rules: 300 loaded from {cb} (classbench), default drop, linear, "
        )),
        "{said}"
    );
    let toml = s.file("r.toml", b"[[rule]]\naction = \"drop\"\ndport = 9\n");
    let said = filter(&["--rules", &toml]);
    assert!(
        said.contains(&format!(
            "rules: 1 loaded from {toml} (toml), default accept"
        )),
        "{said}"
    );
    let args = [
        "filter",
        "--input",
        "lo",
        "--output",
        "none",
        "--no-control",
        "--rules",
        toml.as_str(),
        "--classbench-action",
        "drop",
    ];
    let out = run_in(None, &args);
    assert_clean_error(&args, &out, &["r.toml"]);
    assert!(out.stderr.contains("--classbench-action"), "{}", out.stderr);
    // The documented spellings of other forms, refused with this form's.
    let old = s.file(
        "old.toml",
        b"[[rule]]\naction = \"drop\"\ndst_port = \"80\"\n",
    );
    let args = [
        "filter",
        "--input",
        "lo",
        "--output",
        "none",
        "--no-control",
        "--rules",
        &old,
    ];
    let out = run_in(None, &args);
    assert_clean_error(&args, &out, &["old.toml:3"]);
    assert!(
        out.stderr
            .contains("rule[0].dst_port '80': unknown field; this form spells it dport"),
        "{}",
        out.stderr
    );
    let sock = s.path("none.sock");
    let args = ["filter", "ctl", "--control-socket", &sock, "show"];
    let out = run_in(None, &args);
    assert_clean_error(&args, &out, &["none.sock"]);
    assert!(
        out.stderr
            .contains(&format!("netsched filter --control-socket {sock}")),
        "{}",
        out.stderr
    );
}

/// `filter --help` teaches the ClassBench form with an example, its two flags and the
/// default action.
#[test]
fn filter_help_teaches_classbench_rule_sets() {
    let out = Command::new(bin())
        .args(["filter", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let help = String::from_utf8_lossy(&out.stdout);
    for part in [
        "--rules-format",
        "--classbench-action",
        "@10.1.0.0/16",
        "--rules acl10k.rules --classbench-action drop",
        "drop, the default",
        "rules: 10000 loaded from acl10k.rules (classbench)",
    ] {
        assert!(help.contains(part), "{part}:\n{help}");
    }
}

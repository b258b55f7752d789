//! The NFQUEUE daemon (`netsched nfq`, a separate process so it can be SIGKILLed) in the
//! percentile-web rig on real Linux (root; nginx-light): SIGKILLed mid-run it fails open, its
//! rules are replaced by the next start and removed by SIGTERM and by `cleanup`; every
//! control verb (`netsched ctl`) works on the live daemon. Budget: ~10 s.
//! It lives in the `netsched` package because the rig and the load generator are the lab's
//! (`netsched_lab::real::percentile_web`) and the daemon is the `netsched` binary's `nfq`.
//! (The experiment itself — FIFO, Percentile, strict — is tested in the lab:
//! `crates/lab/tests/percentile_web_real.rs`.)

use netsched_lab::real::percentile_web::client::{run_load, LoadSpec};
use netsched_lab::real::percentile_web::rig::{client_cidr, WebBed};
use netsched_testbed::{namespaces_with, privileged_test_allowed, processes_with};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

#[test]
fn percentile_web_real_sigkill_fails_open_and_cleanup_removes_rules() {
    if !privileged_test_allowed("percentile_web_real_sigkill_fails_open_and_cleanup_removes_rules")
    {
        return;
    }
    let bin = env!("CARGO_BIN_EXE_netsched");
    let mut bed = WebBed::new(5, 8, 0, 2).expect("testbed");
    let tag = bed.tb.tag().to_string();
    // The rig's folder is private and new (mkdtemp: 0700, named after the tag), and nginx runs
    // unprivileged, as `nobody`.
    {
        use std::os::unix::fs::PermissionsExt;
        let md = std::fs::symlink_metadata(&bed.dir).unwrap();
        assert!(md.is_dir() && md.permissions().mode() & 0o777 == 0o700);
        let name = bed.dir.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with(&format!("netsched-{tag}-")), "{name}");
        let (uid, _) = netsched_testbed::nobody().unwrap();
        let status = std::fs::read_to_string(format!("/proc/{}/status", bed.nginx_pid)).unwrap();
        let euid = status
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(2))
            .unwrap();
        assert_eq!(euid, uid.to_string(), "nginx's effective uid");
    }
    let bed_dir = bed.dir.clone();
    let sock = bed.dir.join("ctl.sock");
    let sock_s = sock.display().to_string();
    let mut args = vec![
        "nfq",
        "--port",
        "80",
        "--budget",
        "4",
        "--control-socket",
        &sock_s,
    ];
    let classes: Vec<String> = (0..5).map(|k| format!("C{k}={}", 90 - 10 * k)).collect();
    let maps: Vec<String> = (0..5).map(|k| format!("{}=C{k}", client_cidr(k))).collect();
    for c in &classes {
        args.extend(["--class", c]);
    }
    for m in &maps {
        args.extend(["--map", m]);
    }
    let server_ns = bed.server_ns.clone();
    let pid = bed
        .tb
        .spawn(&server_ns, bin, &args, "netsched-nfqd")
        .expect("daemon starts");
    let until = Instant::now() + Duration::from_secs(10);
    while bed.leftover_rules("iptables").unwrap_or(0) < 2 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        bed.leftover_rules("iptables").unwrap(),
        2,
        "daemon installed its rules"
    );

    // Load for 8 s; the daemon is SIGKILLed after 3 s.
    let spec = LoadSpec {
        clients: bed.clients(),
        port: bed.port,
        path: "/index.html".into(),
        threads_per_client: 2,
        duration: Duration::from_secs(8),
        max_requests_per_thread: 1_000_000,
        cpu: None,
        read_timeout: Duration::from_secs(5),
        stop_when_a_class_finishes: false,
    };
    let stop = AtomicBool::new(false);
    let load = std::thread::scope(|s| {
        let h = s.spawn(|| run_load(&spec, &stop));
        std::thread::sleep(Duration::from_secs(3));
        // pid is our child (started by the testbed, not yet reaped).
        netsched_sys::process::signal_pid(pid, libc::SIGKILL);
        h.join().unwrap()
    })
    .expect("load ran");
    let after_kill = load
        .samples
        .iter()
        .filter(|s| s.done_ns > 4_000_000_000)
        .count();
    assert!(
        after_kill > 50,
        "fail-open: only {after_kill} answers after the kill"
    );
    assert_eq!(load.sent, load.received, "errors: {:?}", load.errors);
    assert!(load.errors.is_empty(), "{:?}", load.errors);

    // The rules survive a SIGKILL...
    assert_eq!(bed.leftover_rules("iptables").unwrap(), 2);
    // ...and the next start replaces them (exactly one set) and removes them on SIGTERM.
    let pid2 = bed
        .tb
        .spawn(&server_ns, bin, &args, "netsched-nfqd-2")
        .expect("second daemon starts");
    // Ready when its control thread answers: the daemon starts that thread only after its
    // rules are in (daemon.rs start-up order). The killed daemon's socket file is still
    // there, so the file's existence says nothing; on a loaded machine the new daemon may
    // be between removing the stale set and installing its own for a while.
    let until = Instant::now() + Duration::from_secs(20);
    let status = || {
        bed.tb.exec(
            &server_ns,
            bin,
            &["nfq", "ctl", "--control-socket", &sock_s, "show", "--json"],
        )
    };
    let st = loop {
        match status() {
            Ok(st) => break st,
            Err(e) if Instant::now() >= until => panic!("the second daemon never answered: {e:#}"),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    assert!(st.contains("\"running\": true"), "{st}");
    assert_eq!(
        bed.leftover_rules("iptables").unwrap(),
        2,
        "one set, not two"
    );
    // Every verb against the live daemon, taking effect without a restart.
    let ctl = |argv: &[&str]| -> Result<String, String> {
        let mut full = vec!["nfq", "ctl", "--control-socket", &sock_s];
        full.extend_from_slice(argv);
        bed.tb
            .exec(&server_ns, bin, &full)
            .map_err(|e| format!("{e:#}"))
    };
    let json = |text: &str| -> serde_json::Value { serde_json::from_str(text).unwrap() };
    ctl(&["set-percentile", "C1", "75"]).unwrap();
    ctl(&["set-deadline", "7ms"]).unwrap();
    ctl(&["set-budget", "6"]).unwrap();
    ctl(&["add-ip", "10.99.0.0/16", "C2"]).unwrap();
    let st = json(&ctl(&["show", "--json"]).unwrap());
    assert_eq!(st["classes"][1]["percentile"], 75);
    assert_eq!(st["deadline_ns"], 7_000_000);
    assert_eq!(st["budget"], 6);
    assert_eq!(st["table"].as_array().unwrap().len(), 6);
    ctl(&["del-ip", "10.99.0.0/16"]).unwrap();
    ctl(&["stop"]).unwrap();
    assert_eq!(json(&ctl(&["show", "--json"]).unwrap())["running"], false);
    ctl(&["start"]).unwrap();
    ctl(&["reset"]).unwrap();
    let st = json(&ctl(&["show", "--json"]).unwrap());
    assert_eq!(st["running"], true);
    assert!(st["table"].as_array().unwrap().is_empty());
    let table = ctl(&["show"]).unwrap();
    assert!(
        table.contains("attainment") && table.contains("C4"),
        "{table}"
    );
    for (argv, needle) in [
        (&["set-percentile", "C9", "50"][..], "C9"),
        (&["set-budget", "0"][..], "budget 0"),
        (&["add-ip", "10.0.0.1/8", "C0"][..], "10.0.0.0/8"),
        (&["del-ip", "192.0.2.0/24"][..], "not in the address table"),
    ] {
        let e = ctl(argv).unwrap_err();
        assert!(e.contains(needle), "{argv:?}: {e}");
    }
    bed.tb.stop(pid2, Duration::from_secs(5)).unwrap();
    assert_eq!(
        bed.leftover_rules("iptables").unwrap(),
        0,
        "rules removed on SIGTERM"
    );

    // After another SIGKILL, `cleanup` removes the leftovers.
    let pid3 = bed
        .tb
        .spawn(&server_ns, bin, &args, "netsched-nfqd-3")
        .unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while bed.leftover_rules("iptables").unwrap_or(0) < 2 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    // Our child.
    netsched_sys::process::signal_pid(pid3, libc::SIGKILL);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(bed.leftover_rules("iptables").unwrap(), 2);
    let out = bed
        .tb
        .exec(
            &server_ns,
            bin,
            &["nfq", "cleanup", "--control-socket", &sock_s],
        )
        .unwrap();
    assert!(out.contains("removed"), "{out}");
    assert_eq!(bed.leftover_rules("iptables").unwrap(), 0);
    drop(bed);
    assert!(namespaces_with(&tag).is_empty(), "namespaces removed");
    assert!(processes_with(&tag).is_empty(), "nginx and daemons stopped");
    assert!(!bed_dir.exists(), "private folder removed");
}

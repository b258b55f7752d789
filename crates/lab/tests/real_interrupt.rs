//! Interrupted real runs clean up (root). Each test starts a real run in a child process (this
//! test binary again, running one `child_*` function), waits until the run is under way, sends
//! SIGTERM or SIGINT, and asserts, within a bounded time, that the run stopped with an
//! "interrupted" error and left nothing with its tag: no namespace (so no veth, qdisc or
//! iptables rule inside one), no process it started (nginx, iperf3, ping — nor anything they
//! forked), no temporary folder. Covered: percentile-web (with the nfq daemon, and at the
//! balancer's queue: netsched balance and nginx backends), adsl-ack, vm-delay (the switch
//! thread and the guests' pings), nfq's bench.
//!
//! Budget: ≈ 10–25 s per test (set-up, a few seconds of running, clean-up).

use netsched_testbed::{children_of, namespaces_with, netns_of_tree, privileged_test_allowed};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Set in the child's environment: which run it performs.
const CHILD: &str = "NETSCHED_INTERRUPT_CHILD";
/// How long a run may take to stop and clean up after the signal.
const STOP_WITHIN: Duration = Duration::from_secs(30);

/// The child's side: run until interrupted; exit 0 only if the run returned the
/// "interrupted" error (a run that finished, or failed otherwise, fails the child).
fn child_expects_interruption(which: &str, run: impl FnOnce() -> anyhow::Result<()>) {
    if std::env::var(CHILD).as_deref() != Ok(which) {
        return; // an ordinary test run: nothing to do
    }
    let e = run().expect_err("the run must be interrupted, not finish");
    let text = format!("{e:#}");
    assert!(text.contains("interrupted"), "{text}");
    eprintln!("child: {text}");
}

#[test]
fn child_percentile_web() {
    child_expects_interruption("percentile-web", || {
        let out = std::env::temp_dir().join(format!("netsched-int-out-{}", std::process::id()));
        let params = serde_json::json!({ "quick_duration_s": 120, "modes": ["percentile"] });
        let r = netsched_lab::real::percentile_web::run_real(&params, 1, &out, true);
        let _ = std::fs::remove_dir_all(&out);
        r.map(|_| ())
    });
}

#[test]
fn child_balance_classes() {
    child_expects_interruption("balance-classes", || {
        let out = std::env::temp_dir().join(format!("netsched-int-out-{}", std::process::id()));
        let params = serde_json::json!({ "real": { "engine": "balance", "balance": {
            "quick_duration_s": 120,
            "engines": ["netsched-percentile", "haproxy-class"],
            "deadline": "50ms"
        } } });
        let r = netsched_lab::real::balance_classes::run_real(&params, 1, &out, true);
        let _ = std::fs::remove_dir_all(&out);
        r.map(|_| ())
    });
}

#[test]
fn child_adsl_ack() {
    child_expects_interruption("adsl-ack", || {
        let out = std::env::temp_dir().join(format!("netsched-int-out-{}", std::process::id()));
        let params = serde_json::json!({
            "real_variants": ["default/none/88"], "real_duration_s": 15, "real_strong": false
        });
        let r = netsched_lab::real::adsl_ack::run_real(&params, 1, &out, true);
        let _ = std::fs::remove_dir_all(&out);
        r.map(|_| ())
    });
}

#[test]
fn child_vm_delay() {
    child_expects_interruption("vm-delay", || {
        let out = std::env::temp_dir().join(format!("netsched-int-out-{}", std::process::id()));
        let text = include_str!("../../../scenarios/vm-delay.toml");
        let params = serde_json::to_value(toml::from_str::<toml::Value>(text)?)?;
        let opts = netsched_lab::real::vm_delay::RealOptions {
            duration: 60 * netsched_core::SEC,
            schedulers: vec!["strict_priority".into()],
            skip: vec![],
            ping_preload: netsched_lab::real::vm_delay::PING_PRELOAD,
        };
        let r = netsched_lab::real::vm_delay::run_real_with(&params, 1, &out, &opts);
        let _ = std::fs::remove_dir_all(&out);
        r.map(|_| ())
    });
}

#[test]
fn child_nfq_bench() {
    child_expects_interruption("nfq-bench", || {
        let args = netsched_nfq::bench::BenchArgs {
            duration: "60s".into(),
            seconds: None,
            flows: 100,
            samples: 200_000,
            cpu: 1,
            load_cpu: 0,
            json: true,
        };
        netsched_nfq::bench::measure(&args).map(|_| ())
    });
}

/// The testbed tag in a namespace name `ns<tag>-<name>`.
fn tag_of(ns: &str) -> Option<String> {
    let rest = ns.strip_prefix("ns")?;
    Some(rest.split_once('-')?.0.to_string())
}

/// Start the child run, signal it once it is under way, and check that nothing is left.
fn interrupt(which: &str, child_test: &str, signal: &str) {
    interrupt_after(which, child_test, signal, None);
}

/// [`interrupt`]; with `under_way`, the child's stderr must also show that line, printed once
/// the measurement started (so the signal did not land in the set-up).
fn interrupt_after(which: &str, child_test: &str, signal: &str, under_way: Option<&str>) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", child_test, "--nocapture", "--test-threads=1"])
        .env(CHILD, which)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("child starts");
    let pid = child.id();
    // Under way: it has entered its namespaces (threads or started processes inside them).
    // Then a few seconds more, so the signal lands in the middle of the measurement.
    let until = Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    while Instant::now() < until && seen.len() < 2 {
        seen = netns_of_tree(pid);
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        !seen.is_empty(),
        "{which}: the run never entered a namespace"
    );
    std::thread::sleep(Duration::from_secs(3));
    for ns in netns_of_tree(pid) {
        if !seen.contains(&ns) {
            seen.push(ns);
        }
    }
    let tags: Vec<String> = seen.iter().filter_map(|n| tag_of(n)).collect();
    assert!(
        !tags.is_empty(),
        "{which}: namespaces {seen:?} carry no testbed tag"
    );
    let started = children_of(pid);
    let t0 = Instant::now();
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exited = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if t0.elapsed() > STOP_WITHIN {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stopped_in = t0.elapsed();
    let mut err = String::new();
    if exited.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    let tail: String = err.lines().rev().take(15).collect::<Vec<_>>().join("\n");
    let st = exited
        .unwrap_or_else(|| panic!("{which}: still running {STOP_WITHIN:?} after {signal}\n{tail}"));
    assert!(st.success(), "{which} after {signal}: {st}\n{tail}");
    if let Some(line) = under_way {
        assert!(
            err.contains(line),
            "{which}: the signal landed before the measurement ({line:?} not printed)\n{tail}"
        );
    }
    eprintln!("{which}: {signal} → stopped and cleaned up in {stopped_in:.1?}");
    for tag in &tags {
        assert!(
            namespaces_with(tag).is_empty(),
            "{which}: namespaces of {tag} left: {:?}",
            namespaces_with(tag)
        );
        assert!(
            netsched_testbed::processes_with(tag).is_empty(),
            "{which}: processes of {tag} left"
        );
        let tmp_left: Vec<_> = std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(&format!("netsched-{tag}")))
            .collect();
        assert!(
            tmp_left.is_empty(),
            "{which}: temp folders left: {tmp_left:?}"
        );
    }
    let alive: Vec<u32> = started
        .into_iter()
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .map(|s| !s.contains(") Z "))
                .unwrap_or(false)
        })
        .collect();
    assert!(
        alive.is_empty(),
        "{which}: processes it started still alive: {alive:?}"
    );
}

/// Privileged tests share the machine's CPUs with the experiments' tests: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn percentile_web_real_stops_and_cleans_up_on_sigterm() {
    if std::env::var(CHILD).is_ok()
        || !privileged_test_allowed("percentile_web_real_stops_and_cleans_up_on_sigterm")
    {
        return;
    }
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    interrupt("percentile-web", "child_percentile_web", "-TERM");
}

#[test]
fn percentile_web_real_stops_and_cleans_up_on_sigint() {
    if std::env::var(CHILD).is_ok()
        || !privileged_test_allowed("percentile_web_real_stops_and_cleans_up_on_sigint")
    {
        return;
    }
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    interrupt("percentile-web", "child_percentile_web", "-INT");
}

#[test]
fn balance_classes_real_stops_and_cleans_up_on_sigint() {
    if std::env::var(CHILD).is_ok()
        || !privileged_test_allowed("balance_classes_real_stops_and_cleans_up_on_sigint")
    {
        return;
    }
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Under way: the balancer, two nginx and the load threads are in the testbed's namespaces.
    interrupt("balance-classes", "child_balance_classes", "-INT");
}

#[test]
fn adsl_ack_real_stops_and_cleans_up_on_sigterm() {
    if std::env::var(CHILD).is_ok()
        || !privileged_test_allowed("adsl_ack_real_stops_and_cleans_up_on_sigterm")
    {
        return;
    }
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    interrupt("adsl-ack", "child_adsl_ack", "-TERM");
}

#[test]
fn vm_delay_real_stops_and_cleans_up_on_sigterm() {
    if std::env::var(CHILD).is_ok()
        || !privileged_test_allowed("vm_delay_real_stops_and_cleans_up_on_sigterm")
    {
        return;
    }
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Under way: the switch thread and the 9 guests' pings are in the testbed's namespaces.
    interrupt_after(
        "vm-delay",
        "child_vm_delay",
        "-TERM",
        Some("vm-delay --real: strict_priority with 9 guests"),
    );
}

#[test]
fn nfq_bench_stops_and_cleans_up_on_sigterm() {
    if std::env::var(CHILD).is_ok()
        || !privileged_test_allowed("nfq_bench_stops_and_cleans_up_on_sigterm")
    {
        return;
    }
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    interrupt("nfq-bench", "child_nfq_bench", "-TERM");
}

//! SIGHUP to the daemon as a process (`netsched-nfqd nfq --config FILE`), under a UDP probe's
//! traffic between two namespaces (root; skipped with a reason otherwise): a changed, valid
//! file puts its percentiles, budget and table in force (`ctl show`,
//! `netsched_nfq_reloads_total{result="ok"}`); a file that changes the queue number, or has a
//! bad value, is refused whole and logged naming the file and key, the configuration in force
//! stays; the daemon answers throughout, and SIGTERM then ends it with its iptables rules
//! removed. Without the SIGHUP handler the first signal ends the process, leaving its rules,
//! and every step after it fails.

mod common;

use common::{echo_server, pair, probe, PORT};
use netsched_nfq::control::{request, status};
use netsched_testbed::privileged_test_allowed;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const NET: u8 = 31;
const METRICS: &str = "127.0.0.1:9101";

/// `nets`: the `sources` of gold and of rest (TOML arrays).
fn config(sock: &Path, queue: u16, gold: i64, budget: usize, nets: (&str, &str)) -> String {
    let (gold_nets, rest_nets) = nets;
    format!(
        "nfqueue = {queue}\nbudget = {budget}\ndeadline = \"auto\"\ncontrol_socket = \"{}\"\n\
         [service]\nprotocol = \"udp\"\nports = [{PORT}]\n\
         [[class]]\nname = \"gold\"\npercentile = {gold}\nsources = {gold_nets}\n\
         [[class]]\nname = \"rest\"\npercentile = 50\nsources = {rest_nets}\n",
        sock.display()
    )
}

/// (gold's percentile, budget, table entries) from `ctl show`.
fn shown(sock: &Path) -> (u32, Option<usize>, Vec<(String, String)>) {
    let st = status(sock).expect("a status");
    (st.classes[0].percentile, st.budget, st.table)
}

/// `netsched_nfq_reloads_total{result=...}`, scraped inside namespace `ns`.
fn reloads(ns: &str, result: &str) -> u64 {
    let ns = ns.to_string();
    let text = std::thread::spawn(move || {
        netsched_testbed::enter_netns(&ns).unwrap();
        netsched_metrics::scrape(METRICS.parse().unwrap(), Duration::from_secs(2))
            .unwrap()
            .1
    })
    .join()
    .unwrap();
    let series = format!("netsched_nfq_reloads_total{{result=\"{result}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .map_or(0, |n| n.trim().parse().unwrap())
}

fn hup(child: &mut Child, log: &Path) {
    assert!(netsched_sys::process::signal_pid(child.id(), libc::SIGHUP));
    // Give a handler-less process the time to die, so the check below sees it.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "SIGHUP ended the daemon:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

/// Wait (≤ 5 s) until `log` has `n` lines with `what`; the last.
fn logged(log: &Path, what: &str, n: usize) -> String {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().filter(|l| l.contains(what)).collect();
        if lines.len() >= n {
            return lines[n - 1].to_string();
        }
        assert!(Instant::now() < until, "no {what:?} in the log:\n{text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// NFQUEUE rules in namespace `ns`.
fn nfqueue_rules(ns: &str) -> usize {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "iptables-save"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("NFQUEUE"))
        .count()
}

/// Kills and reaps the daemon (by its own handle) when the test fails midway.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[test]
fn sighup_applies_percentiles_budget_and_table_refuses_a_bad_file_and_never_ends_the_daemon() {
    if !privileged_test_allowed(
        "sighup_applies_percentiles_budget_and_table_refuses_a_bad_file_and_never_ends_the_daemon",
    ) {
        return;
    }
    let p = pair("nfqhup", NET);
    let dir = netsched_testbed::TempDir::new("nfq-hup").unwrap();
    let sock = dir.path().join("ctl.sock");
    let log = dir.path().join("stderr");
    let gold_sources = format!("[\"10.78.{NET}.0/24\"]");
    let gold_net = (gold_sources.as_str(), "[]");
    let file = dir
        .create_file("nfq.toml", config(&sock, 7, 90, 4, gold_net).as_bytes())
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let echo = {
        let (ns, stop) = (p.ns[1].clone(), stop.clone());
        std::thread::spawn(move || echo_server(ns, NET, stop))
    };
    let mut d = Guard(
        Command::new("ip")
            .args(["netns", "exec", &p.ns[1]])
            .arg(env!("CARGO_BIN_EXE_netsched-nfqd"))
            .args(["nfq", "--metrics", METRICS, "--config"])
            .arg(&file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    // Ready once its rules are in (the control socket answers only then).
    let until = Instant::now() + Duration::from_secs(20);
    while nfqueue_rules(&p.ns[1]) == 0 || status(&sock).is_err() {
        assert!(Instant::now() < until, "the daemon did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let probing = {
        let (ns, stop) = (p.ns[0].clone(), stop.clone());
        std::thread::spawn(move || probe(ns, NET, stop))
    };
    let gold = (format!("10.78.{NET}.0/24"), "gold".to_string());
    assert_eq!(shown(&sock), (90, Some(4), vec![gold.clone()]));

    // (a) A changed, valid file: percentile, budget and table in force, counted ok.
    let rest_net = ("[]", "[\"10.99.0.0/16\"]");
    std::fs::write(&file, config(&sock, 7, 95, 8, rest_net)).unwrap();
    hup(&mut d.0, &log);
    logged(&log, "reloaded", 1);
    let rest = ("10.99.0.0/16".to_string(), "rest".to_string());
    assert_eq!(shown(&sock), (95, Some(8), vec![rest.clone()]));
    assert_eq!(reloads(&p.ns[1], "ok"), 1);

    // (b) The queue number changed (with a percentile): refused whole, naming the key.
    std::fs::write(&file, config(&sock, 8, 60, 8, rest_net)).unwrap();
    hup(&mut d.0, &log);
    let line = logged(&log, "reload failed", 1);
    assert!(
        line.contains("nfq.toml") && line.contains("queue") && line.contains("restart"),
        "{line}"
    );
    // A bad value: refused, naming the file, key and value; `ctl reload` says the same.
    std::fs::write(&file, config(&sock, 7, 300, 8, rest_net)).unwrap();
    hup(&mut d.0, &log);
    let line = logged(&log, "reload failed", 2);
    assert!(line.contains("nfq.toml") && line.contains("300"), "{line}");
    let e = request(&sock, "reload").unwrap_err().to_string();
    assert!(
        e.starts_with("reload failed, keeping the old configuration"),
        "{e}"
    );
    assert_eq!(shown(&sock), (95, Some(8), vec![rest]), "the old one stays");
    assert_eq!(reloads(&p.ns[1], "failed"), 3);

    // (c) Still running and answering; SIGTERM ends it with its rules removed.
    stop.store(true, Ordering::Relaxed);
    let (answers, _) = probing.join().unwrap().unwrap();
    assert!(answers > 0, "the probe got no answer through the daemon");
    echo.join().unwrap().unwrap();
    assert!(netsched_sys::process::signal_pid(d.0.id(), libc::SIGTERM));
    let until = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = d.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < until, "no exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    let err = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{status:?}\n{err}");
    assert_eq!(nfqueue_rules(&p.ns[1]), 0, "rules left behind");
}

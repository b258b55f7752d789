//! SIGHUP to the switch as a process, under traffic (root; skipped with a reason otherwise):
//! a changed, valid file puts its tiers in force (`ctl show`, `reloads_total{result="ok"}`),
//! and `ctl reload` puts them back after a `set-tier`;
//! a file that changes a restart-only key, or does not parse, is refused whole and logged
//! naming the file and key, the tiers in force stay; the switch runs on through all of it and
//! SIGTERM then ends it as usual. Without the SIGHUP handler the first signal ends the process
//! and every step after it fails.

mod common;

use common::{assert_gone, build, flooder, Net};
use netsched_testbed::privileged_test_allowed;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const METRICS: &str = "127.0.0.1:9102";

fn config(net: &Net, tiers: [u32; 2], extra: &str) -> String {
    let mut t = format!(
        "uplink = \"{}\"\ndiscipline = \"strict_priority\"\n{extra}\n",
        net.uplink
    );
    for (i, (_, port, _)) in net.guests.iter().enumerate() {
        t += &format!("[[port]]\ndev = \"{port}\"\ntier = {}\n", tiers[i]);
    }
    t
}

fn tiers(sock: &Path) -> Vec<u64> {
    let text = netsched_vswitch::control::request(sock, "show --json").unwrap();
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    v["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["tier"].as_u64().unwrap())
        .collect()
}

/// `netsched_vswitch_reloads_total{result=...}` scraped inside the switch's namespace.
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
    let series = format!("netsched_vswitch_reloads_total{{result=\"{result}\"}} ");
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
        "SIGHUP ended the switch:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

/// Wait (≤ 5 s) until `log` has a line with `what`; that line.
fn logged(log: &Path, what: &str) -> String {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(l) = text.lines().rfind(|l| l.contains(what)) {
            return l.to_string();
        }
        assert!(Instant::now() < until, "no {what:?} in the log:\n{text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn sighup_applies_new_tiers_refuses_a_bad_file_and_never_ends_the_switch() {
    if !privileged_test_allowed(
        "sighup_applies_new_tiers_refuses_a_bad_file_and_never_ends_the_switch",
    ) {
        return;
    }
    let tag;
    {
        let net = build("vshup", 2).unwrap();
        tag = net.tb.tag().to_string();
        let dir = netsched_testbed::TempDir::new("vswitch-hup").unwrap();
        let file = dir
            .create_file("switch.toml", config(&net, [1, 2], "").as_bytes())
            .unwrap();
        let sock = dir.path().join("vs.sock");
        let log = dir.path().join("stderr");
        let mut child = Command::new(env!("CARGO_BIN_EXE_netsched-vswitchd"))
            .arg("vswitch")
            .arg("--config")
            .arg(&file)
            .args(["--netns", &net.sw, "--metrics", METRICS])
            .arg("--control-socket")
            .arg(&sock)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let child_guard = scopeguard(&mut child);
        let until = Instant::now() + Duration::from_secs(20);
        while !sock.exists() {
            assert!(Instant::now() < until, "no control socket");
            std::thread::sleep(Duration::from_millis(20));
        }
        let guest = net.tb.ifname("e0");
        let (stop, flood) = flooder(&net.guests[0].0, &guest, [0xff; 6], 200, 2000);
        assert_eq!(tiers(&sock), [1, 2]);

        // (a) A changed, valid file: the new tiers in force, counted ok.
        std::fs::write(&file, config(&net, [2, 1], "")).unwrap();
        hup(child_guard.0, &log);
        let until = Instant::now() + Duration::from_secs(5);
        while tiers(&sock) != [2, 1] {
            assert!(Instant::now() < until, "tiers not applied");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(reloads(&net.sw, "ok"), 1);
        // `ctl reload` means the same: the file's tiers again after a `set-tier`.
        let port0 = &net.guests[0].1;
        netsched_vswitch::control::request(&sock, &format!("set-tier {port0} 3")).unwrap();
        let answer = netsched_vswitch::control::request(&sock, "reload").unwrap();
        assert!(answer.starts_with("reloaded "), "{answer}");
        let until = Instant::now() + Duration::from_secs(5);
        while tiers(&sock) != [2, 1] {
            assert!(Instant::now() < until, "the file's tiers not back");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(reloads(&net.sw, "ok"), 2);

        // (b) A restart-only key changed (with tiers): refused whole, naming the key.
        std::fs::write(&file, config(&net, [3, 3], "batch = 7")).unwrap();
        hup(child_guard.0, &log);
        let line = logged(&log, "reload failed");
        assert!(
            line.contains("switch.toml") && line.contains("batch") && line.contains("restart"),
            "{line}"
        );
        // A file that does not parse: refused, naming the key and value.
        std::fs::write(
            &file,
            config(&net, [1, 1], "").replace("tier = 1", "tier = \"x\""),
        )
        .unwrap();
        hup(child_guard.0, &log);
        let until = Instant::now() + Duration::from_secs(5);
        while reloads(&net.sw, "failed") < 2 {
            assert!(Instant::now() < until, "the bad file was not counted");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(tiers(&sock), [2, 1], "the tiers in force stay");
        // `ctl reload` means the same, with the same refusal.
        let e = netsched_vswitch::control::request(&sock, "reload").unwrap_err();
        assert!(
            e.to_string()
                .contains("reload failed, keeping the old configuration"),
            "{e}"
        );

        // (c) Still running; SIGTERM ends it as before.
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(flood.join().unwrap() > 0);
        assert!(netsched_sys::process::signal_pid(
            child_guard.0.id(),
            libc::SIGTERM
        ));
        let until = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(s) = child_guard.0.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < until, "no exit after SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        };
        let err = std::fs::read_to_string(&log).unwrap();
        assert!(status.success(), "{status:?}\n{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    assert_gone(&tag);
}

/// Kills and reaps the child (by its own handle) when the test fails midway.
struct Guard<'a>(&'a mut Child);

fn scopeguard(c: &mut Child) -> Guard<'_> {
    Guard(c)
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

//! SIGHUP to the filter as a process, under traffic (root; skipped with a reason otherwise):
//! a changed, valid rule file is swapped in (`rule_swaps` counts it), a bad one is refused with
//! its file and line logged and the rules in force kept, and the filter runs on through both;
//! SIGTERM then ends it as usual. Without the SIGHUP handler the first signal ends the process
//! and every step after it fails.

mod common;

use common::{assert_gone, build, flood, FilterProcess};
use netsched_testbed::privileged_test_allowed;
use std::time::{Duration, Instant};

/// `show --json` of the running filter.
fn show(f: &FilterProcess) -> serde_json::Value {
    let text = netsched_filter::control::request(&f.sock, "show --json").unwrap();
    serde_json::from_str(text.trim()).unwrap()
}

fn hup(f: &mut FilterProcess) {
    let pid = f.child.id();
    assert!(netsched_sys::process::signal_pid(pid, libc::SIGHUP));
    // Give a handler-less process the time to die, so the check below sees it.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        f.child.try_wait().unwrap().is_none(),
        "SIGHUP ended the filter:\n{}",
        f.stderr()
    );
}

#[test]
fn sighup_reloads_the_rules_refuses_a_bad_file_and_never_ends_the_filter() {
    if !privileged_test_allowed(
        "sighup_reloads_the_rules_refuses_a_bad_file_and_never_ends_the_filter",
    ) {
        return;
    }
    let tag;
    {
        let net = build("flhup").unwrap();
        tag = net.tb.tag().to_string();
        let mut f = FilterProcess::start(
            &net,
            "filter-hup",
            b"[[rule]]\naction = \"drop\"\nproto = \"udp\"\ndport = \"9\"\n",
            &["--dispatch", "fcfs"],
        )
        .unwrap();
        let (stop, sender) = flood(&net.snd, &net.s0, 50);
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(show(&f)["rule_swaps"], 0);

        // (a) A changed, valid file: swapped in, the filter still running.
        std::fs::write(
            f.rules_file(),
            "[[rule]]\naction = \"drop\"\nproto = \"udp\"\ndport = \"10\"\n",
        )
        .unwrap();
        hup(&mut f);
        let until = Instant::now() + Duration::from_secs(10);
        while show(&f)["rule_swaps"] != 1 {
            assert!(
                Instant::now() < until,
                "the new rules were not swapped in:\n{}",
                f.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }

        // (b) A bad file: refused, logged naming the file, the rules in force kept.
        std::fs::write(f.rules_file(), "[[rule]]\naction = \"explode\"\n").unwrap();
        hup(&mut f);
        let until = Instant::now() + Duration::from_secs(10);
        while !f
            .stderr()
            .contains("reload failed, keeping the old configuration")
        {
            assert!(Instant::now() < until, "no refusal logged:\n{}", f.stderr());
            std::thread::sleep(Duration::from_millis(50));
        }
        let err = f.stderr();
        let refusal = err
            .lines()
            .find(|l| l.contains("reload failed"))
            .unwrap_or_default();
        assert!(
            refusal.contains("rules.toml") && refusal.contains("explode"),
            "{refusal}"
        );
        let s = show(&f);
        assert_eq!(s["rule_swaps"], 1, "{s}");
        assert!(s["received"].as_u64().unwrap() > 0, "{s}");

        // (c) Still running, and SIGTERM ends it as before.
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        sender.join().unwrap().unwrap();
        let (status, _) = f.terminate(Duration::from_secs(15));
        let status = status.expect("the filter did not stop after SIGTERM");
        assert!(status.success(), "{status:?}\n{}", f.stderr());
        assert!(!f.stderr().contains("panicked"), "{}", f.stderr());
    }
    assert_gone(&tag);
}

/// Waits (≤ 10 s) until the filter's stderr has a line holding `what`; that line.
fn logged(f: &FilterProcess, what: &str) -> String {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(l) = f.stderr().lines().find(|l| l.contains(what)) {
            return l.to_string();
        }
        assert!(
            Instant::now() < until,
            "no {what:?} logged:\n{}",
            f.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// With `--config`, SIGHUP reads the configuration file again: a file naming another rule
/// file swaps those rules in; a file that changes a key only a restart applies (`workers`) is
/// refused whole, naming the file and the key, and the rules in force stay. `--check` on the
/// file beside the running filter passes (what ExecReload runs before its SIGHUP).
#[test]
fn sighup_with_a_config_file_applies_rule_keys_and_refuses_the_rest() {
    let name = "sighup_with_a_config_file_applies_rule_keys_and_refuses_the_rest";
    if !privileged_test_allowed(name) {
        return;
    }
    let tag;
    {
        let net = build("flcfg").unwrap();
        tag = net.tb.tag().to_string();
        let drop9 = b"[[rule]]\naction = \"drop\"\nproto = \"udp\"\ndport = \"9\"\n";
        let mut f =
            FilterProcess::start_with_config(&net, "filter-cfg", drop9, "workers = 2").unwrap();
        let (stop, sender) = flood(&net.snd, &net.s0, 50);
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(show(&f)["rule_swaps"], 0);
        let config = f.dir().join("config.toml");
        let check = std::process::Command::new("ip")
            .args(["netns", "exec", &net.flt])
            .arg(env!("CARGO_BIN_EXE_netsched-filterd"))
            .args(["filter", "--check", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        assert!(
            check.status.success(),
            "--check beside the running filter: {check:?}"
        );

        // (a) Another rule file named by the configuration: swapped in.
        std::fs::write(
            f.dir().join("rules2.toml"),
            "[[rule]]\naction = \"drop\"\nproto = \"udp\"\ndport = \"10\"\n",
        )
        .unwrap();
        let text = FilterProcess::config_text(&net, &f.sock, "workers = 2")
            .replace("rules.toml", "rules2.toml");
        std::fs::write(&config, text).unwrap();
        hup(&mut f);
        logged(&f, "reloaded");
        assert_eq!(show(&f)["rule_swaps"], 1);

        // (b) A changed worker count: refused whole, naming file and key; rules kept.
        let text = FilterProcess::config_text(&net, &f.sock, "workers = 3");
        std::fs::write(&config, text).unwrap();
        hup(&mut f);
        let refusal = logged(&f, "reload failed");
        assert!(
            refusal.contains("config.toml") && refusal.contains("workers = 3: running with 2"),
            "{refusal}"
        );
        let s = show(&f);
        assert_eq!(s["rule_swaps"], 1, "{s}");

        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        sender.join().unwrap().unwrap();
        let (status, _) = f.terminate(Duration::from_secs(15));
        let status = status.expect("the filter did not stop after SIGTERM");
        assert!(status.success(), "{status:?}\n{}", f.stderr());
    }
    assert_gone(&tag);
}

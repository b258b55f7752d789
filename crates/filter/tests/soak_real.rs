//! Every dispatch policy under unpaced load (root; skipped with a reason otherwise): the
//! filter as a process, 4 workers, a sender writing as fast as its port takes frames. Each
//! second `ctl show` must be answered and the filter must make progress; then SIGTERM, with
//! the sender still writing, must end the process within 1 s, exit 0, identity holding, the
//! control socket removed. Before the reorder window's fix the default policy froze in 2 of 6
//! such runs (packet thread spinning, `show` answered `busy`, SIGTERM ignored).
//!
//! Seconds per policy: 10, or `NETSCHED_FILTER_SOAK_SECS` (1..=600) for a longer soak.

mod common;

use common::{assert_gone, build, flood, FilterProcess};
use netsched_filter::pipeline::DispatchMode;
use netsched_testbed::privileged_test_allowed;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

fn seconds() -> u64 {
    std::env::var("NETSCHED_FILTER_SOAK_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|s| (1..=600).contains(s))
        .unwrap_or(10)
}

/// `received` of a `show --json` answer.
fn received(answer: &str) -> Option<u64> {
    serde_json::from_str::<serde_json::Value>(answer.trim())
        .ok()?
        .get("received")?
        .as_u64()
}

#[test]
fn every_policy_keeps_answering_and_stops_within_1s_of_sigterm_under_unpaced_load() {
    let test = "every_policy_keeps_answering_and_stops_within_1s_of_sigterm_under_unpaced_load";
    if !privileged_test_allowed(test) {
        return;
    }
    let secs = seconds();
    let tag;
    {
        let net = build("flsoak").unwrap();
        tag = net.tb.tag().to_string();
        for mode in DispatchMode::NAMES {
            let mut f = FilterProcess::start(
                &net,
                "filter-soak",
                b"[[rule]]\naction = \"drop\"\nproto = \"udp\"\ndport = \"9\"\n",
                &["--dispatch", mode, "--workers", "4"],
            )
            .unwrap();
            let (stop, sender) = flood(&net.snd, &net.s0, 50);
            let start = Instant::now();
            let (mut last, mut moved_at, mut answers) = (0u64, Instant::now(), 0u32);
            while start.elapsed() < Duration::from_secs(secs) {
                std::thread::sleep(Duration::from_secs(1));
                let answer = netsched_filter::control::request(&f.sock, "show --json")
                    .unwrap_or_else(|e| panic!("{mode}: `show` not answered: {e}"));
                answers += 1;
                let now = received(&answer).unwrap_or_else(|| panic!("{mode}: {answer}"));
                if now > last {
                    (last, moved_at) = (now, Instant::now());
                }
                assert!(
                    moved_at.elapsed() < Duration::from_secs(5),
                    "{mode}: no frame received for 5 s (stuck at {last})\n{}",
                    f.stderr()
                );
            }
            let (status, took) = f.terminate(Duration::from_secs(5));
            stop.store(true, Ordering::Relaxed);
            let sent = sender.join().unwrap().unwrap();
            let (out, err) = (f.stdout(), f.stderr());
            let status = status.unwrap_or_else(|| panic!("{mode}: SIGTERM ignored for 5 s\n{err}"));
            eprintln!("{mode}: {sent} frames offered, {last} received by the last `show`, {answers} answers, stopped {took:?} after SIGTERM");
            assert!(status.success(), "{mode}: {status:?}\n{err}");
            assert!(
                took < Duration::from_secs(1),
                "{mode}: SIGTERM answered after {took:?}\n{err}"
            );
            assert!(!f.sock.exists(), "{mode}: the control socket is removed");
            let last_line = out.lines().last().unwrap_or_default();
            let v: serde_json::Value = serde_json::from_str(last_line)
                .unwrap_or_else(|e| panic!("{mode}: final line {last_line:?}: {e}\n{err}"));
            assert_eq!(v["final"]["identity_holds"], true, "{mode}: {last_line}");
            assert!(!err.contains("panicked"), "{mode}: {err}");
        }
    }
    assert_gone(&tag);
}

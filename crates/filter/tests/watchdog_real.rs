//! The filter's watchdog as a process (root; skipped with a reason otherwise): with the packet
//! thread stalled for good (the hidden test hook `--fault-stall-after`), the watchdog counts
//! the stall, `ctl show` is still answered (from the last published counters, with the
//! stall counted), and SIGTERM ends the process within 1 s, non-zero, with the control socket
//! removed and the reason logged.

mod common;

use common::{assert_gone, build, FilterProcess};
use netsched_testbed::privileged_test_allowed;
use std::time::{Duration, Instant};

/// Poll `check` every 20 ms until it holds or `within` has passed; whether it held.
fn wait_for(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + within;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_stalled_packet_thread_is_counted_shown_and_sigterm_still_ends_the_process_within_1s() {
    if !privileged_test_allowed(
        "a_stalled_packet_thread_is_counted_shown_and_sigterm_still_ends_the_process_within_1s",
    ) {
        return;
    }
    let tag;
    {
        let net = build("flwd").unwrap();
        tag = net.tb.tag().to_string();
        let mut f = FilterProcess::start(
            &net,
            "filter-wd",
            b"[[rule]]\naction = \"drop\"\ndport = \"9\"\n",
            &[
                "--dispatch",
                "modified_fcfs",
                "--workers",
                "4",
                "--fault-stall-after",
                "300ms",
            ],
        )
        .unwrap();
        let sock = f.sock.clone();
        // The watchdog sees the stall; `show` is answered without the packet thread.
        let mut last = String::new();
        let shown = wait_for(
            Duration::from_secs(10),
            || match netsched_filter::control::request(&sock, "show --json") {
                Ok(a) => {
                    last = a;
                    serde_json::from_str::<serde_json::Value>(last.trim())
                        .ok()
                        .and_then(|v| v["packet_thread_stalls"].as_u64())
                        .is_some_and(|n| n >= 1)
                }
                Err(e) => {
                    last = e.to_string();
                    false
                }
            },
        );
        assert!(
            shown,
            "`show` never reported the stall; last answer: {last}"
        );
        let v: serde_json::Value = serde_json::from_str(last.trim()).unwrap();
        let bad = netsched_util::json_units::violations(&v);
        assert!(bad.is_empty(), "numbers without their unit: {bad:?}");
        let text = netsched_filter::control::request(&sock, "show").unwrap();
        assert!(text.contains("packet thread stalled"), "{text}");
        let e = netsched_filter::control::request(&sock, "set-dispatch fcfs").unwrap_err();
        assert!(e.to_string().contains("stalled"), "{e}");
        // SIGTERM: out within 1 s, non-zero, socket removed.
        let (status, took) = f.terminate(Duration::from_secs(5));
        let err = f.stderr();
        let status = status.expect("the filter did not stop within 5 s of SIGTERM");
        assert!(
            took < Duration::from_secs(1),
            "SIGTERM answered after {took:?}\n{err}"
        );
        assert!(!status.success(), "a stalled stop is an error exit\n{err}");
        assert!(!sock.exists(), "the control socket is removed\n{err}");
        assert!(err.contains("no progress for"), "{err}");
        assert!(err.contains("stopping without the packet thread"), "{err}");
    }
    assert_gone(&tag);
}

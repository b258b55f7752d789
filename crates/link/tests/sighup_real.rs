//! SIGHUP to the link engine as a process (`netsched-linkd link`, flags only), under ping
//! traffic across it (root; skipped with a reason otherwise): the link reads no file, so SIGHUP
//! changes nothing; it is logged as "nothing to reload", the link keeps running and forwarding
//! with its 20 ms delay, and SIGTERM then ends it as usual. Without the SIGHUP handler the
//! signal ends the process and every step after it fails.

mod common;

use netsched_testbed::{namespaces_with, privileged_test_allowed, Testbed};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Round-trip times of `count` pings from `ns` to `dst`, ms.
fn rtt_ms(tb: &Testbed, ns: &str, dst: &str, count: u32) -> Vec<f64> {
    let out = tb
        .exec(
            ns,
            "ping",
            &["-n", "-c", &count.to_string(), "-i", "0.05", "-W", "2", dst],
        )
        .unwrap_or_default();
    out.lines()
        .filter_map(|l| l.split("time=").nth(1))
        .filter_map(|t| t.split_whitespace().next()?.parse().ok())
        .collect()
}

/// Kills and reaps the link (by its own handle) when the test fails midway.
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
fn sighup_is_logged_as_nothing_to_reload_and_never_ends_the_link() {
    if !privileged_test_allowed("sighup_is_logged_as_nothing_to_reload_and_never_ends_the_link") {
        return;
    }
    let tag;
    {
        let line = common::line("lkhup", 91);
        tag = line.tb.tag().to_string();
        let dir = netsched_testbed::TempDir::new("link-hup").unwrap();
        let log = dir.path().join("stderr");
        let mut d = Guard(
            Command::new("ip")
                .args(["netns", "exec", &line.m])
                .arg(env!("CARGO_BIN_EXE_netsched-linkd"))
                .args(["link", "--dev-a", &line.ma, "--dev-b", &line.mb])
                .args(["--delay", "10ms", "--port", "packet"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .unwrap(),
        );
        let before = rtt_ms(&line.tb, &line.a, "10.91.0.2", 10);
        assert!(
            before.len() >= 8,
            "pings lost before SIGHUP: {before:?}\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );

        assert!(netsched_sys::process::signal_pid(d.0.id(), libc::SIGHUP));
        std::thread::sleep(Duration::from_millis(300));
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            d.0.try_wait().unwrap().is_none(),
            "SIGHUP ended the link:\n{text}"
        );
        assert!(text.contains("nothing to reload"), "{text}");

        // Still forwarding, with the same 20 ms round trip.
        let after = rtt_ms(&line.tb, &line.a, "10.91.0.2", 10);
        assert!(after.len() >= 8, "pings lost after SIGHUP: {after:?}");
        assert!(after.iter().all(|&r| r >= 19.0), "{after:?}");

        assert!(netsched_sys::process::signal_pid(d.0.id(), libc::SIGTERM));
        let until = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(s) = d.0.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < until, "no exit after SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        };
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(status.success(), "{status:?}\n{text}");
    }
    assert!(namespaces_with(&tag).is_empty());
}

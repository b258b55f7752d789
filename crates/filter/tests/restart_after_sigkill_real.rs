//! The filter SIGKILLed, then started again with the same settings (root; skipped with a
//! reason otherwise): nothing the killed process left blocks or misleads the new one. Its
//! XDP program goes with its file descriptors (no `xdp` left on the interface); its control
//! socket file, left behind, is found stale and replaced; the new filter answers `show` and
//! filters, and SIGTERM ends it with status 0 and the socket file removed.

mod common;

use common::{assert_gone, build, flood};
use netsched_testbed::privileged_test_allowed;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills and reaps the filter (by its own handle) when the test fails midway.
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
fn a_filter_killed_and_started_again_finds_nothing_in_its_way() {
    if !privileged_test_allowed("a_filter_killed_and_started_again_finds_nothing_in_its_way") {
        return;
    }
    let tag;
    {
        let net = build("flkill").unwrap();
        tag = net.tb.tag().to_string();
        let dir = netsched_testbed::TempDir::new("filter-kill").unwrap();
        let rules = dir
            .create_file(
                "rules.toml",
                b"[[rule]]\naction = \"drop\"\nproto = \"udp\"\ndport = \"9\"\n",
            )
            .unwrap();
        let sock = dir.path().join("f.sock");
        let start = |n: u32| {
            let err = std::fs::File::create(dir.path().join(format!("stderr-{n}"))).unwrap();
            let child = Command::new("ip")
                .args(["netns", "exec", &net.flt])
                .arg(env!("CARGO_BIN_EXE_netsched-filterd"))
                .args(["filter", "--input", &net.fin, "--output", &net.fout])
                .arg("--rules")
                .arg(&rules)
                .arg("--control-socket")
                .arg(&sock)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(err)
                .spawn()
                .unwrap();
            Guard(child)
        };
        let log = |n: u32| {
            std::fs::read_to_string(dir.path().join(format!("stderr-{n}"))).unwrap_or_default()
        };
        // Answering `show`: the filter is up (the socket file alone says nothing after a kill).
        let answers = || netsched_filter::control::request(&sock, "show --json").is_ok();
        let wait_up = |g: &mut Guard, n: u32| {
            let until = Instant::now() + Duration::from_secs(20);
            while !answers() {
                let ended = g.0.try_wait().unwrap();
                assert!(
                    ended.is_none() && Instant::now() < until,
                    "filter {n} did not come up ({ended:?}):\n{}",
                    log(n)
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        };
        let xdp_on = |dev: &str| {
            net.tb
                .exec(&net.flt, "ip", &["link", "show", dev])
                .unwrap()
                .contains("xdp")
        };

        let mut first = start(1);
        wait_up(&mut first, 1);
        // The `auto` backend takes XDP where the kernel has it (this test's machine does);
        // elsewhere the check after the kill has nothing to find.
        let had_xdp = xdp_on(&net.fin);
        eprintln!("XDP program attached while running: {had_xdp}");
        let (stop, sender) = flood(&net.snd, &net.s0, 50);
        std::thread::sleep(Duration::from_millis(300));
        first.0.kill().unwrap(); // SIGKILL, by its own handle
        first.0.wait().unwrap();
        assert!(
            sock.exists(),
            "the killed filter's socket file is left behind"
        );
        assert!(!answers(), "nobody answers on it");
        // The XDP program goes with the killed process's file descriptors.
        let until = Instant::now() + Duration::from_secs(5);
        while xdp_on(&net.fin) || xdp_on(&net.fout) {
            assert!(Instant::now() < until, "an XDP program was left attached");
            std::thread::sleep(Duration::from_millis(50));
        }

        let mut second = start(2);
        wait_up(&mut second, 2);
        let show = netsched_filter::control::request(&sock, "show --json").unwrap();
        let v: serde_json::Value = serde_json::from_str(show.trim()).unwrap();
        let until = Instant::now() + Duration::from_secs(10);
        while netsched_filter::control::request(&sock, "show --json")
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(t.trim()).ok())
            .and_then(|v| v["received"].as_u64())
            .unwrap_or(0)
            == 0
        {
            assert!(
                Instant::now() < until,
                "the second filter receives nothing: {v}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        sender.join().unwrap().unwrap();
        assert!(netsched_sys::process::signal_pid(
            second.0.id(),
            libc::SIGTERM
        ));
        let until = Instant::now() + Duration::from_secs(15);
        let status = loop {
            if let Some(s) = second.0.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < until, "no exit after SIGTERM:\n{}", log(2));
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "{status:?}\n{}", log(2));
        assert!(!sock.exists(), "the socket file is removed at the stop");
    }
    assert_gone(&tag);
}

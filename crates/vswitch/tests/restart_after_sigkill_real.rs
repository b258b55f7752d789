//! The switch SIGKILLed, then started again with the same settings (root; skipped with a reason
//! otherwise): nothing the killed process left blocks or misleads the one started after it.
//! What it attached to the interfaces goes with its file descriptors (no `xdp` left on the
//! uplink or a port when the `auto` backend took XDP); its metrics listener goes with it; its
//! control socket file, left behind, is found stale and replaced; the restarted switch binds
//! the same metrics address, answers `show`, forwards a guest's frames again, and SIGTERM ends
//! it with status 0 and the socket file removed.

mod common;

use common::{assert_gone, build, flooder};
use netsched_testbed::privileged_test_allowed;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const METRICS: &str = "127.0.0.1:9102";

/// Kills and reaps the switch (by its own handle) when the test fails midway.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Stops the flooder (its flag set) when the test ends, also midway.
struct StopOnDrop(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A scrape of `/metrics` inside namespace `ns`: its status, or what went wrong.
fn scrape(ns: &str) -> std::io::Result<u16> {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        netsched_testbed::enter_netns(&ns).unwrap();
        netsched_metrics::scrape(METRICS.parse().unwrap(), Duration::from_secs(2)).map(|r| r.0)
    })
    .join()
    .unwrap()
}

#[test]
fn a_switch_killed_and_started_again_finds_nothing_in_its_way() {
    if !privileged_test_allowed("a_switch_killed_and_started_again_finds_nothing_in_its_way") {
        return;
    }
    let tag;
    {
        let net = build("vskill", 1).unwrap();
        tag = net.tb.tag().to_string();
        let dir = netsched_testbed::TempDir::new("vswitch-kill").unwrap();
        let (guest_ns, port, _) = net.guests[0].clone();
        let file = dir
            .create_file(
                "switch.toml",
                format!(
                    "uplink = \"{}\"\ndiscipline = \"strict_priority\"\n\
                     [[port]]\ndev = \"{port}\"\ntier = 1\n",
                    net.uplink
                )
                .as_bytes(),
            )
            .unwrap();
        let sock = dir.path().join("vs.sock");
        let start = |n: u32| {
            let err = std::fs::File::create(dir.path().join(format!("stderr-{n}"))).unwrap();
            let child = Command::new(env!("CARGO_BIN_EXE_netsched-vswitchd"))
                .arg("vswitch")
                .arg("--config")
                .arg(&file)
                .args(["--netns", &net.sw, "--metrics", METRICS])
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
        // Answering `show`: the switch is up (the socket file alone says nothing after a kill).
        let show = || {
            netsched_vswitch::control::request(&sock, "show --json")
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(t.trim()).ok())
        };
        let wait_up = |g: &mut Guard, n: u32| {
            let until = Instant::now() + Duration::from_secs(20);
            while show().is_none() {
                let ended = g.0.try_wait().unwrap();
                assert!(
                    ended.is_none() && Instant::now() < until,
                    "switch {n} did not come up ({ended:?}):\n{}",
                    log(n)
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        };
        // Frames of the guest's port forwarded so far, by the switch answering.
        let forwarded = || {
            show()
                .and_then(|v| v["ports"][0]["forwarded"].as_u64())
                .unwrap_or(0)
        };
        let xdp_on = |dev: &str| {
            net.tb
                .exec(&net.sw, "ip", &["link", "show", dev])
                .unwrap()
                .contains("xdp")
        };
        let guest = net.tb.ifname("e0");
        // Broadcast frames from the guest: the switch forwards them to the uplink.
        let (stop, flood) = flooder(&guest_ns, &guest, [0xff; 6], 200, 2000);
        let stop = StopOnDrop(stop);

        let mut first = start(1);
        wait_up(&mut first, 1);
        // The `auto` backend takes XDP where the build and the kernel have it; elsewhere the
        // check after the kill has nothing to find.
        let had_xdp = xdp_on(&net.uplink) || xdp_on(&port);
        eprintln!("XDP program attached while running: {had_xdp}");
        let until = Instant::now() + Duration::from_secs(10);
        while forwarded() == 0 {
            assert!(
                Instant::now() < until,
                "the first switch forwards nothing:\n{}",
                log(1)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        first.0.kill().unwrap(); // SIGKILL, by its own handle
        first.0.wait().unwrap();
        assert!(
            sock.exists(),
            "the killed switch's socket file is left behind"
        );
        assert!(show().is_none(), "nobody answers on it");
        assert!(
            scrape(&net.sw).is_err(),
            "nobody answers on its metrics address"
        );
        // What it attached goes with the killed process's file descriptors.
        let until = Instant::now() + Duration::from_secs(5);
        while xdp_on(&net.uplink) || xdp_on(&port) {
            assert!(Instant::now() < until, "an XDP program was left attached");
            std::thread::sleep(Duration::from_millis(50));
        }

        let mut second = start(2);
        wait_up(&mut second, 2);
        // Its counters start at zero: frames counted are its own.
        let until = Instant::now() + Duration::from_secs(10);
        while forwarded() == 0 {
            assert!(
                Instant::now() < until,
                "the second switch forwards nothing: {:?}\n{}",
                show(),
                log(2)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let until = Instant::now() + Duration::from_secs(10);
        while !scrape(&net.sw).is_ok_and(|s| s == 200) {
            assert!(
                Instant::now() < until,
                "the second switch serves no metrics at {METRICS}:\n{}",
                log(2)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(stop);
        assert!(flood.join().unwrap() > 0);
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

//! The link SIGKILLed, then started again with the same settings (root; skipped with a reason
//! otherwise): nothing the killed process left blocks or misleads the one started after it. Its
//! XDP programs go with its file descriptors (no `xdp` left on either port when the `auto`
//! backend took XDP), and with them all forwarding (a ping across fails); its metrics listener
//! goes with it. The restarted link binds the same metrics address, answers there and forwards
//! pings both ways again (its own counters move), and SIGTERM ends it with status 0. The link
//! has no control socket: `/metrics` and forwarding itself say it is up.

mod common;

use netsched_testbed::{namespaces_with, privileged_test_allowed};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const METRICS: &str = "127.0.0.1:9103";

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

/// `/metrics` scraped inside namespace `ns`: the text of a 200 answer, or `None`.
fn scrape(ns: &str) -> Option<String> {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        netsched_testbed::enter_netns(&ns).unwrap();
        netsched_metrics::scrape(METRICS.parse().unwrap(), Duration::from_secs(2))
            .ok()
            .filter(|(status, _)| *status == 200)
            .map(|(_, text)| text)
    })
    .join()
    .unwrap()
}

/// `netsched_link_tx_frames_total` of direction `dir` (`ab` or `ba`) in a scrape's text.
fn tx_frames(text: &str, dir: &str) -> u64 {
    let series = format!("netsched_link_tx_frames_total{{dir=\"{dir}\"");
    text.lines()
        .filter(|l| l.starts_with(&series))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// One ping from `ns` to `dst`, waiting up to `wait` seconds: answered or not.
fn ping_once(ns: &str, dst: &str, wait: u32) -> bool {
    Command::new("ip")
        .args(["netns", "exec", ns, "ping", "-n", "-q", "-c", "1", "-W"])
        .arg(wait.to_string())
        .arg(dst)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn a_link_killed_and_started_again_finds_nothing_in_its_way() {
    if !privileged_test_allowed("a_link_killed_and_started_again_finds_nothing_in_its_way") {
        return;
    }
    let tag;
    {
        let line = common::line("lkkill", 93);
        tag = line.tb.tag().to_string();
        let dir = netsched_testbed::TempDir::new("link-kill").unwrap();
        let start = |n: u32| {
            let err = std::fs::File::create(dir.path().join(format!("stderr-{n}"))).unwrap();
            // `ip netns exec` execs in place: the child's pid is the link's.
            let child = Command::new("ip")
                .args(["netns", "exec", &line.m])
                .arg(env!("CARGO_BIN_EXE_netsched-linkd"))
                .args(["link", "--dev-a", &line.ma, "--dev-b", &line.mb])
                .args(["--delay", "5ms", "--metrics", METRICS])
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
        // Up: answering `/metrics`, and a ping across it answered (both directions forwarded).
        let wait_up = |g: &mut Guard, n: u32| {
            let until = Instant::now() + Duration::from_secs(20);
            loop {
                let ended = g.0.try_wait().unwrap();
                assert!(
                    ended.is_none() && Instant::now() < until,
                    "link {n} did not come up ({ended:?}):\n{}",
                    log(n)
                );
                if scrape(&line.m).is_some() && ping_once(&line.a, "10.93.0.2", 1) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        };
        let xdp_on = |dev: &str| {
            line.tb
                .exec(&line.m, "ip", &["link", "show", dev])
                .unwrap()
                .contains("xdp")
        };

        let mut first = start(1);
        wait_up(&mut first, 1);
        // The `auto` backend takes XDP where the build and the kernel have it; elsewhere the
        // check after the kill has nothing to find.
        let had_xdp = xdp_on(&line.ma) || xdp_on(&line.mb);
        eprintln!("XDP program attached while running: {had_xdp}");
        first.0.kill().unwrap(); // SIGKILL, by its own handle
        first.0.wait().unwrap();
        assert!(
            scrape(&line.m).is_none(),
            "nobody answers on its metrics address"
        );
        // Its XDP programs go with the killed process's file descriptors.
        let until = Instant::now() + Duration::from_secs(5);
        while xdp_on(&line.ma) || xdp_on(&line.mb) {
            assert!(Instant::now() < until, "an XDP program was left attached");
            std::thread::sleep(Duration::from_millis(50));
        }
        // Nothing forwards between the two ports any more.
        assert!(
            !ping_once(&line.a, "10.93.0.2", 1),
            "a ping crossed with no link running"
        );

        let mut second = start(2);
        wait_up(&mut second, 2);
        // Its own counters show the ping (the copy `/metrics` serves is ≤ 100 ms old).
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let text = scrape(&line.m).unwrap_or_default();
            if tx_frames(&text, "ab") > 0 && tx_frames(&text, "ba") > 0 {
                break;
            }
            assert!(
                Instant::now() < until,
                "the second link's counters do not show the ping:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        for i in 0..5 {
            assert!(
                ping_once(&line.a, "10.93.0.2", 5),
                "ping {i} across the second link not answered:\n{}",
                log(2)
            );
        }

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
        assert!(scrape(&line.m).is_none(), "the metrics listener is closed");
    }
    let left = namespaces_with(&tag);
    assert!(left.is_empty(), "namespaces left behind: {left:?}");
}

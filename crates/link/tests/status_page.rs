//! Root test of the link engine's live status page in Debian's headless Chromium: the engine
//! between two namespaces (a→b shaped to 20 Mbit/s with 2 ms and ACK separation, b→a unshaped)
//! with its `--metrics` listener (`metrics::serve`, as `netsched link` starts it); ~40 Mbit/s
//! of UDP goes a→b for half a second (frames queue and drop) and stops. Once what the page
//! shows stands still for a second, the page is loaded from inside the engine's namespace and,
//! once it has refreshed, every figure it shows must equal what `/metrics` says right after
//! (the uptime, CPU and wake-ups move on their own: they must lie between the scrapes before
//! and after). Had the engine moved while the browser ran, the comparison is made again, at
//! most 3 times (IPv6 is off in the namespaces, so nothing but the test sends). Skips with a
//! reason without root or without chromium (fails instead under CI=true); the testbed deletes
//! the namespaces and the engine thread is stopped, also on failure; the browser's profile is
//! removed.
//! With `NETSCHED_STATUS_SCREENSHOT=path.png` the page is saved there.

mod common;

use netsched_metrics::{scrape_samples, Sample};
use netsched_testbed::chromium;
use netsched_testbed::status_page::{in_netns, screenshot_asked, Shown, StatusPage};
use netsched_testbed::{enter_netns, namespaces_with, privileged_test_allowed};
use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const NET: u8 = 83;
/// Families that move while the engine idles.
const MOVING: [&str; 8] = [
    // The process's own CPU time and memory move with every scrape, as does the listener's
    // count of requests.
    "process_",
    "netsched_metrics_listener_",
    "netsched_link_uptime_seconds",
    "netsched_link_cpu_seconds_total",
    "netsched_link_wakeups_total",
    // On the xdp backend every wake-up's poll finds the idle TX ring empty.
    "netsched_link_xdp_ring_empty_total",
    "netsched_link_snapshot",
    "netsched_link_snapshots",
];

/// Sets a stop flag when dropped, so a failing test still ends its threads.
struct StopOnDrop(Arc<AtomicBool>);
impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn samples_in(ns: &str, addr: SocketAddr) -> Vec<Sample> {
    in_netns(Some(ns), move || {
        scrape_samples(addr, Duration::from_secs(10))
    })
    .unwrap()
}

/// The series that stand still when no frame moves, by name and labels.
fn still(samples: &[Sample]) -> HashMap<String, f64> {
    samples
        .iter()
        .filter(|s| !MOVING.iter().any(|m| s.name.starts_with(m)))
        .map(|s| {
            let labels: Vec<String> = s.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            (format!("{}{{{}}}", s.name, labels.join(",")), s.value)
        })
        .collect()
}

fn fam(m: &[Sample], name: &str, dir: Option<&str>) -> f64 {
    let hits: Vec<f64> = m
        .iter()
        .filter(|s| s.name == name && (dir.is_none() || s.label("dir") == dir))
        .map(|s| s.value)
        .collect();
    assert!(!hits.is_empty(), "{name} {dir:?} not in /metrics");
    hits.iter().sum()
}

/// Every figure the page shows against the scrapes `before` and `after` it was loaded.
fn check(page: &Shown, before: &[Sample], after: &[Sample], devs: [(&str, &str); 2]) {
    let dom = &page.dom;
    assert_eq!(page.rows(), ["ab", "ba"], "{dom}");
    for (dir, (from, to)) in ["ab", "ba"].into_iter().zip(devs) {
        assert_eq!(
            (page.cell(dir, "from"), page.cell(dir, "to")),
            (from.into(), to.into())
        );
        let d = Some(dir);
        for (col, name) in [
            ("rx_frames", "netsched_link_rx_frames_total"),
            ("tx_frames", "netsched_link_tx_frames_total"),
            ("kernel_drops", "netsched_link_kernel_socket_drops_total"),
            ("queued", "netsched_link_queued_frames"),
            ("in_flight", "netsched_link_in_flight_frames"),
            ("max_line", "netsched_link_max_delay_line_frames"),
        ] {
            assert_eq!(page.number(dir, col), fam(after, name, d), "{dir}/{col}");
        }
        let drops = after
            .iter()
            .filter(|s| s.name == "netsched_link_drops_total" && s.label("dir") == d)
            .map(|s| s.value)
            .sum::<f64>();
        assert_eq!(page.number(dir, "drops"), drops, "{dir}/drops");
        // Bytes are shown with an SI prefix and 2 decimals.
        let qb = fam(after, "netsched_link_queued_bytes", d);
        assert!((page.number(dir, "queued_bytes") - qb).abs() <= 0.005 * qb.max(1.0));
        let delay = fam(after, "netsched_link_delay_seconds", d);
        assert!(
            (page.number(dir, "delay") - delay).abs() <= 0.5e-6,
            "{dir}/delay"
        );
        let limit = fam(after, "netsched_link_rate_limit_bits_per_second", d);
        if limit == 0.0 {
            assert_eq!(page.cell(dir, "rate_limit"), "unshaped");
        } else {
            assert!((page.number(dir, "rate_limit") - limit).abs() <= 0.005 * limit);
        }
        assert_eq!(page.number(dir, "rx_rate"), 0.0, "{dir}: nothing moved");
        assert_eq!(page.number(dir, "tx_rate"), 0.0, "{dir}: nothing moved");
    }
    let acks = fam(after, "netsched_link_acks_classified_total", Some("ab"));
    assert_eq!(page.number("ab", "acks"), acks);
    assert_eq!(page.cell("ba", "acks"), "–", "b→a separates no ACKs");
    // What the traffic made: a→b forwarded and dropped frames, on the page.
    assert!(
        page.number("ab", "tx_frames") > 0.0 && page.number("ab", "drops") > 0.0,
        "{dom}"
    );
    let backend = after
        .iter()
        .find(|s| s.name == "netsched_link_port_backend" && s.value == 1.0)
        .and_then(|s| s.label("backend"))
        .unwrap();
    assert_eq!(page.figure("backend"), backend);
    let ring = fam(after, "netsched_link_ring_bytes", None);
    let shown_ring = page.figure_number("ring");
    assert!((shown_ring - ring).abs() <= 0.005 * ring.max(1.0), "ring");
    for (id, name) in [
        ("uptime", "netsched_link_uptime_seconds"),
        ("cpu", "netsched_link_cpu_seconds_total"),
        ("wakeups", "netsched_link_wakeups_total"),
    ] {
        let v = page.figure_number(id);
        let (lo, hi) = (fam(before, name, None), fam(after, name, None));
        assert!(
            lo - 0.0005 <= v && v <= hi + 0.0005,
            "{id}: {lo} <= {v} <= {hi}"
        );
    }
}

/// ~40 Mbit/s of 1000-byte UDP datagrams from `a` to `b` until `stop` (or 10 s).
fn send(a: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<anyhow::Result<u64>> {
    std::thread::spawn(move || {
        enter_netns(&a)?;
        let s = UdpSocket::bind(format!("10.{NET}.0.1:0"))?;
        let buf = [7u8; 1000];
        let mut sent = 0u64;
        let t0 = Instant::now();
        while !stop.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(10) {
            for _ in 0..50 {
                if s.send_to(&buf, format!("10.{NET}.0.2:9")).is_ok() {
                    sent += 1;
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(sent)
    })
}

#[test]
fn link_status_page_shows_what_metrics_says_for_both_directions() {
    let test = "link_status_page_shows_what_metrics_says_for_both_directions";
    if !privileged_test_allowed(test) {
        return;
    }
    if !chromium::test_allowed(test) {
        return;
    }
    let tag;
    {
        let line = common::line("lnkst", NET);
        tag = line.tb.tag().to_string();
        let (a, m) = (line.a.clone(), line.m.clone());
        // No IPv6 chatter (router solicitations seconds apart) to move the counters.
        for ns in line.tb.namespaces() {
            line.tb
                .sysctl(ns, "net.ipv6.conf.all.disable_ipv6=1")
                .unwrap();
        }
        let cfg = common::engine_config(
            &line,
            common::dir(Some(20_000_000), 2, "ack_sep:50"),
            common::dir(None, 2, "fifo:100"),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let _guard = StopOnDrop(Arc::clone(&stop));
        let (engine, addr) = common::engine_with_metrics(&m, cfg, Arc::clone(&stop));
        let traffic = Arc::new(AtomicBool::new(false));
        let sender = send(a.clone(), Arc::clone(&traffic));
        std::thread::sleep(Duration::from_millis(500));
        traffic.store(true, Ordering::Relaxed);
        assert!(sender.join().unwrap().unwrap() > 0);
        let page = StatusPage::new(Some(&m), &format!("http://{addr}/"));
        page.wait_until_still("the engine", || still(&samples_in(&m, addr)));
        let devs = [
            (line.ma.as_str(), line.mb.as_str()),
            (line.mb.as_str(), line.ma.as_str()),
        ];
        page.compare(
            "the engine",
            || samples_in(&m, addr),
            |s| still(s),
            |shown, before, after| check(shown, before, after, devs),
        );
        if let Some(png) = screenshot_asked() {
            // With traffic, so the rates show.
            let traffic = Arc::new(AtomicBool::new(false));
            let sender = send(a.clone(), Arc::clone(&traffic));
            std::thread::sleep(Duration::from_secs(1));
            let shot = page.screenshot(&png);
            traffic.store(true, Ordering::Relaxed);
            sender.join().unwrap().unwrap();
            shot.unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        engine.join().unwrap().unwrap();
    }
    let left = namespaces_with(&tag);
    assert!(left.is_empty(), "namespaces left behind: {left:?}");
}

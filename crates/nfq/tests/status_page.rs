//! Root test of the NFQUEUE daemon's live status page in Debian's headless Chromium: the daemon
//! (`run_daemon`, real NFQUEUE) between two namespaces with a UDP echo service, a probe sends
//! requests of class gold for a while and stops; once the daemon is quiescent (the figures the
//! page shows stay the same for a second), the page is loaded from `--metrics`'s listener
//! inside the daemon's namespace, and once it has refreshed every figure it shows must equal
//! what `/metrics` says right after (within the page's rounding: ms with 3 decimals, % with 2).
//! Had the daemon moved while the browser ran (the scrapes before and after differ), the
//! comparison is made again, at most 3 times. Skips with a reason without root or without
//! chromium (fails instead under CI=true); the testbed deletes the namespaces and the daemon
//! and echo threads are stopped, also on failure (guards); the browser's profile is removed.
//! With `NETSCHED_STATUS_SCREENSHOT=path.png` the page is saved there.

mod common;

use netsched_metrics::{scrape_samples, Sample};
use netsched_testbed::chromium::{self, shown_number};
use netsched_testbed::privileged_test_allowed;
use netsched_testbed::status_page::{in_netns, screenshot_asked, Shown, StatusPage};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const NET: u8 = 5;
/// The daemon's namespace is ours alone, so a fixed port cannot collide.
const METRICS: &str = "127.0.0.1:9109";

/// Sets a stop flag when dropped, so a failing test still ends its threads.
struct StopOnDrop(Arc<AtomicBool>);
impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn scrape_in(ns: &str, addr: SocketAddr) -> Vec<Sample> {
    in_netns(Some(ns), move || {
        scrape_samples(addr, Duration::from_secs(10))
    })
    .unwrap()
}

/// The families the page shows, by (name, class): what must stand still to compare.
fn shown_families(samples: &[Sample]) -> HashMap<(String, String), f64> {
    samples
        .iter()
        .filter(|s| {
            s.name.starts_with("netsched_nfq_class_")
                || [
                    "netsched_nfq_running",
                    "netsched_nfq_deadline_seconds",
                    "netsched_nfq_in_server",
                    "netsched_nfq_budget",
                    "netsched_nfq_held_packets",
                    "netsched_nfq_flows",
                    "netsched_nfq_requests_total",
                    "netsched_nfq_kernel_queue_dropped_total",
                ]
                .contains(&s.name.as_str())
        })
        .map(|s| {
            let class = s.label("class").unwrap_or("").to_string();
            ((s.name.clone(), class), s.value)
        })
        .collect()
}

/// `shown` is `exact` within half a step of the page's rounding.
fn close(what: &str, shown: &str, exact: f64, half_step: f64) {
    let v = shown_number(shown).unwrap_or_else(|| panic!("{what} shows {shown:?}"));
    assert!(
        (v - exact).abs() <= half_step + exact.abs() * 1e-12,
        "{what}: page {shown:?}, /metrics {exact}"
    );
}

/// Every figure the page shows against the families `m` scraped right after it was loaded.
fn check(page: &Shown, m: &HashMap<(String, String), f64>) {
    let dom = &page.dom;
    let cell = |row: &str, col: &str| page.cell(row, col);
    let fam = |name: &str, class: &str| {
        *m.get(&(name.to_string(), class.to_string()))
            .unwrap_or_else(|| panic!("{name}{{class={class}}} not in /metrics"))
    };
    assert_eq!(page.rows(), ["gold", "rest"], "{dom}");
    for c in ["gold", "rest"] {
        for (col, name) in [
            ("target", "netsched_nfq_class_percentile_target"),
            ("n", "netsched_nfq_class_requests_total"),
            ("s", "netsched_nfq_class_within_deadline_total"),
            ("failed", "netsched_nfq_class_failed_total"),
            ("timeouts", "netsched_nfq_class_timeouts_total"),
            ("queue", "netsched_nfq_class_queue_length"),
            ("held", "netsched_nfq_class_held_packets"),
        ] {
            close(&format!("{c}/{col}"), &cell(c, col), fam(name, c), 0.0);
        }
        let attainment = fam("netsched_nfq_class_attainment", c);
        close(
            &format!("{c}/attainment"),
            &cell(c, "attainment"),
            attainment,
            0.5e-4,
        );
        let n = fam("netsched_nfq_class_requests_total", c);
        let s = fam("netsched_nfq_class_within_deadline_total", c);
        if n > 0.0 {
            close(
                &format!("{c}/s_over_n"),
                &cell(c, "s_over_n"),
                s / n,
                0.5e-4,
            );
        } else {
            assert_eq!(cell(c, "s_over_n"), "–", "{c}");
        }
        let mean = fam("netsched_nfq_class_mean_response_seconds", c);
        close(&format!("{c}/response"), &cell(c, "response"), mean, 0.5e-6);
        match m.get(&("netsched_nfq_class_priority".to_string(), c.to_string())) {
            Some(p) => close(&format!("{c}/priority"), &cell(c, "priority"), *p, 0.5e-3),
            None => assert_eq!(cell(c, "priority"), "–", "{c}"),
        }
    }
    let fig = |id: &str| page.figure(id);
    assert_eq!(
        fig("running"),
        if fam("netsched_nfq_running", "") == 1.0 {
            "running"
        } else {
            "stopped"
        }
    );
    close(
        "deadline",
        &fig("deadline"),
        fam("netsched_nfq_deadline_seconds", ""),
        0.5e-6,
    );
    for (id, name) in [
        ("in_server", "netsched_nfq_in_server"),
        ("budget", "netsched_nfq_budget"),
        ("held", "netsched_nfq_held_packets"),
        ("flows", "netsched_nfq_flows"),
        ("kernel_dropped", "netsched_nfq_kernel_queue_dropped_total"),
    ] {
        close(id, &fig(id), fam(name, ""), 0.0);
    }
    close("rate", &fig("rate"), 0.0, 0.0);
    // What the traffic made: gold judged requests, shown.
    let gold_n = shown_number(&cell("gold", "n")).unwrap();
    assert!(gold_n > 0.0, "no gold requests on the page:\n{dom}");
}

#[test]
fn nfq_status_page_shows_what_metrics_says_for_every_class() {
    let test = "nfq_status_page_shows_what_metrics_says_for_every_class";
    if !privileged_test_allowed(test) {
        return;
    }
    if !chromium::test_allowed(test) {
        return;
    }
    let common::Pair {
        tb: _tb,
        ns: [na, nb],
        ..
    } = common::pair("nfqst", NET);
    let dir = netsched_testbed::TempDir::new("nfqst").unwrap();
    let addr: SocketAddr = METRICS.parse().unwrap();

    let stop_echo = Arc::new(AtomicBool::new(false));
    let _echo_guard = StopOnDrop(Arc::clone(&stop_echo));
    let echo = {
        let (ns, stop) = (nb.clone(), Arc::clone(&stop_echo));
        std::thread::spawn(move || common::echo_server(ns, NET, stop))
    };
    let mut cfg = common::daemon_config(dir.path().join("ctl.sock"), NET, 1);
    cfg.metrics = Some(addr);
    let daemon = common::Daemon::start(&nb, cfg).unwrap_or_else(|e| panic!("{e}"));
    let _daemon_guard = StopOnDrop(Arc::clone(&daemon.stop_flag));
    let stop_probe = Arc::new(AtomicBool::new(false));
    let probe = {
        let (ns, stop) = (na.clone(), Arc::clone(&stop_probe));
        std::thread::spawn(move || common::probe(ns, NET, stop))
    };
    std::thread::sleep(Duration::from_millis(500));
    stop_probe.store(true, Ordering::Relaxed);
    let (answers, _) = probe.join().unwrap().unwrap();
    assert!(answers > 0, "no probe answered");
    // Quiescent: what the page shows stands still for a second.
    let page = StatusPage::new(Some(&nb), &format!("http://{METRICS}/"));
    page.wait_until_still("the daemon", || shown_families(&scrape_in(&nb, addr)));
    page.compare(
        "the daemon",
        || shown_families(&scrape_in(&nb, addr)),
        |m| m.clone(),
        |shown, _, m| check(shown, m),
    );
    if let Some(png) = screenshot_asked() {
        page.screenshot(&png).unwrap();
    }
    daemon.stop().unwrap();
    stop_echo.store(true, Ordering::Relaxed);
    echo.join().unwrap().unwrap();
}

//! `netsched nfq --metrics`: the daemon between two namespaces with a UDP echo service; a
//! probe crosses it every 2 ms while 50 scrapers hammer `/metrics` and a few half-open clients
//! hold connections. Root; ~5 s.
//!
//! Asserted (margins as in control_isolation.rs: a loaded 2-core machine delays a thread by
//! tens of ms in bad moments; the bound is ten times that):
//! - the families are there and move with traffic (per class N, S; packets; decisions);
//! - every answered scrape is consistent, exactly, because each copy is taken between two
//!   batches of the packet loop: packets = the five per-packet decisions
//!   (passed_at_once + held + other + passed_over_limit + passed_stopped), and
//!   held = released + held now;
//! - traffic never stops for 500 ms or more while the scrapers run, and the packet loop keeps
//!   publishing;
//! - the `--metrics` flag and `run_daemon` serve on the address given, in the daemon's netns.

mod common;

use netsched_metrics::{hammer, scrape_samples, HammerOutcome, Sample};
use netsched_nfq::config::Config;
use netsched_testbed::{in_netns, netns_entry, privileged_test_allowed};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const NET: u8 = 3;
/// The daemon's namespace is ours alone, so a fixed port cannot collide.
const METRICS: &str = "127.0.0.1:9109";
const SCRAPERS: usize = 50;
const HALF_OPEN: usize = 4;
const GAP_BOUND: Duration = Duration::from_millis(500);

fn daemon_config(socket: PathBuf) -> Config {
    let mut c = common::daemon_config(socket, NET, 1);
    c.metrics = Some(METRICS.parse().unwrap());
    c
}

fn value(samples: &[Sample], name: &str, label: Option<(&str, &str)>) -> Option<f64> {
    samples
        .iter()
        .find(|s| s.name == name && label.is_none_or(|(k, v)| s.label(k) == Some(v)))
        .map(|s| s.value)
}

/// The two identities every copy keeps (see the header).
fn check_identity(samples: &[Sample]) -> Result<(), String> {
    let d = |k: &str| {
        value(
            samples,
            "netsched_nfq_decisions_total",
            Some(("decision", k)),
        )
        .ok_or(format!("no decision {k}"))
    };
    let packets = value(samples, "netsched_nfq_packets_total", None).ok_or("no packets")?;
    let (at_once, held, other, over, stopped, released) = (
        d("passed_at_once")?,
        d("held")?,
        d("other")?,
        d("passed_over_limit")?,
        d("passed_stopped")?,
        d("released")?,
    );
    if packets != at_once + held + other + over + stopped {
        return Err(format!(
            "packets {packets} != at once {at_once} + held {held} + other {other} + over limit \
             {over} + stopped {stopped}"
        ));
    }
    let held_now = value(samples, "netsched_nfq_held_packets", None).ok_or("no held_packets")?;
    if held != released + held_now {
        return Err(format!(
            "held {held} != released {released} + held now {held_now}"
        ));
    }
    Ok(())
}

fn scrape_in(ns: &str, addr: SocketAddr) -> Vec<Sample> {
    in_netns(Some(ns), move || {
        scrape_samples(addr, Duration::from_secs(10))
    })
    .unwrap()
}

#[test]
fn nfq_metrics_stay_consistent_and_traffic_flows_while_scrapers_hammer() {
    if !privileged_test_allowed(
        "nfq_metrics_stay_consistent_and_traffic_flows_while_scrapers_hammer",
    ) {
        return;
    }
    let common::Pair {
        tb: _tb,
        ns: [na, nb],
        ..
    } = common::pair("nfqmet", NET);
    let dir = netsched_testbed::TempDir::new("nfqmet").unwrap();
    let addr: SocketAddr = METRICS.parse().unwrap();

    let stop_echo = Arc::new(AtomicBool::new(false));
    let echo = {
        let (ns, stop) = (nb.clone(), Arc::clone(&stop_echo));
        std::thread::spawn(move || common::echo_server(ns, NET, stop))
    };
    let daemon = common::Daemon::start(&nb, daemon_config(dir.path().join("ctl.sock")))
        .unwrap_or_else(|e| {
            stop_echo.store(true, Ordering::Relaxed);
            panic!("{e}")
        });

    // Before traffic: the families are there, consistent, and at zero.
    let before = scrape_in(&nb, addr);
    for fam in [
        "netsched_nfq_class_requests_total",
        "netsched_nfq_class_within_deadline_total",
        "netsched_nfq_class_failed_total",
        "netsched_nfq_class_attainment",
        "netsched_nfq_class_queue_length",
        "netsched_nfq_deadline_seconds",
        "netsched_nfq_decisions_total",
        "netsched_nfq_events_total",
        "netsched_nfq_kernel_queue_dropped_total",
        "netsched_nfq_netlink_received_total",
        "netsched_nfq_uptime_seconds",
        "netsched_nfq_snapshots_published_total",
    ] {
        assert!(
            before.iter().any(|s| s.name == fam),
            "{fam} missing: {before:?}"
        );
    }
    check_identity(&before).unwrap();
    let gold_n = |s: &[Sample]| {
        value(
            s,
            "netsched_nfq_class_requests_total",
            Some(("class", "gold")),
        )
        .unwrap()
    };
    let n0 = gold_n(&before);

    let stop_probe = Arc::new(AtomicBool::new(false));
    let probe_h = {
        let (ns, stop) = (na.clone(), Arc::clone(&stop_probe));
        std::thread::spawn(move || common::probe(ns, NET, stop))
    };
    std::thread::sleep(Duration::from_millis(300));
    let start = scrape_in(&nb, addr);

    // The hammer: half-open clients holding slots, and 50 scrapers in a loop for 2 s, from
    // inside the daemon's namespace.
    let HammerOutcome {
        answered: ok,
        refused,
        inconsistent: bad,
    } = hammer(
        addr,
        netns_entry(&nb),
        SCRAPERS,
        HALF_OPEN,
        Duration::from_secs(2),
        check_identity,
    )
    .unwrap();
    let end = scrape_in(&nb, addr);
    stop_probe.store(true, Ordering::Relaxed);
    let probe_r = probe_h.join().unwrap();
    let summary = daemon.stop();
    stop_echo.store(true, Ordering::Relaxed);
    let _ = echo.join();

    let (answers, gap) = probe_r.expect("probe ran");
    let summary = summary.expect("daemon ran and shut down cleanly");
    eprintln!(
        "scrapes: {ok} answered, {refused} refused; probe: {answers} answers, largest gap \
         {gap:?}; daemon saw {} packets",
        summary.counters.packets
    );
    assert!(bad.is_empty(), "inconsistent scrapes: {bad:?}");
    assert!(ok >= 5, "only {ok} scrapes answered ({refused} refused)");
    assert!(answers > 100, "only {answers} probe answers");
    assert!(
        gap < GAP_BOUND,
        "traffic stalled for {gap:?} (bound {GAP_BOUND:?}) while scrapers hammered /metrics"
    );
    let published =
        |s: &[Sample]| value(s, "netsched_nfq_snapshots_published_total", None).unwrap();
    assert!(
        published(&end) - published(&start) >= 5.0,
        "the packet loop stopped publishing: {} → {}",
        published(&start),
        published(&end)
    );
    // Values moved with traffic: the probe's requests are gold (10.78.3.0/24).
    assert!(gold_n(&end) > n0 + 50.0, "gold N {n0} → {}", gold_n(&end));
    let packets = |s: &[Sample]| value(s, "netsched_nfq_packets_total", None).unwrap();
    assert!(packets(&end) > packets(&start));
    // The daemon's own final count is never behind the last scrape.
    assert!(summary.counters.packets as f64 >= packets(&end));
}

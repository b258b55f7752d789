//! `netsched link --metrics`: the engine between two namespaces, UDP through a shaped
//! direction (so frames queue and drop), while 50 scrapers hammer `/metrics` and a few
//! half-open clients hold connections. Root; ~6 s.
//!
//! Asserted (with margins that hold on a loaded 2-core machine):
//! - the families are there and move with traffic;
//! - every answered scrape is consistent: per direction `rx = tx + drops + queued + in flight`,
//!   exactly (each copy is taken at one instant of the packet loop);
//! - frames keep flowing and copies keep being published while the scrapers run;
//! - the namespaces are gone afterwards.

mod common;

use netsched_metrics::{hammer, scrape_samples, HammerOutcome, Sample};
use netsched_testbed::{
    enter_netns, in_netns, namespaces_with, netns_entry, privileged_test_allowed,
};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SCRAPERS: usize = 50;
const HALF_OPEN: usize = 4;

fn sum(samples: &[Sample], name: &str, dir: &str) -> Option<f64> {
    let v: Vec<f64> = samples
        .iter()
        .filter(|s| s.name == name && s.label("dir") == Some(dir))
        .map(|s| s.value)
        .collect();
    (!v.is_empty()).then(|| v.iter().sum())
}

fn one(samples: &[Sample], name: &str) -> Option<f64> {
    samples.iter().find(|s| s.name == name).map(|s| s.value)
}

/// Per direction: rx = tx + drops + queued + in flight (None if a family is missing).
fn check_identity(samples: &[Sample]) -> Result<(), String> {
    for dir in ["ab", "ba"] {
        let get = |n: &str| sum(samples, &format!("netsched_link_{n}"), dir);
        let rx = get("rx_frames_total").ok_or("no rx_frames_total")?;
        let tx = get("tx_frames_total").ok_or("no tx_frames_total")?;
        let drops = get("drops_total").unwrap_or(0.0);
        let queued = get("queued_frames").ok_or("no queued_frames")?;
        let flight = get("in_flight_frames").ok_or("no in_flight_frames")?;
        if rx != tx + drops + queued + flight {
            return Err(format!(
                "{dir}: rx {rx} != tx {tx} + drops {drops} + queued {queued} + in flight {flight}"
            ));
        }
    }
    Ok(())
}

/// Scrape from inside namespace `ns` (the listener is on that namespace's loopback).
fn parsed(ns: &str, addr: SocketAddr) -> Vec<Sample> {
    in_netns(Some(ns), move || {
        scrape_samples(addr, Duration::from_secs(10))
    })
    .unwrap()
}

#[test]
fn link_metrics_stay_consistent_and_frames_flow_while_scrapers_hammer() {
    if !privileged_test_allowed(
        "link_metrics_stay_consistent_and_frames_flow_while_scrapers_hammer",
    ) {
        return;
    }
    let tag;
    {
        let line = common::line("lnkmet", 79);
        tag = line.tb.tag().to_string();
        let (a, m) = (line.a.clone(), line.m.clone());
        let cfg = common::engine_config(
            &line,
            common::dir(Some(20_000_000), 2, "ack_sep:50"),
            common::dir(None, 2, "fifo:100"),
        );

        // The engine and its metrics listener on their own thread in namespace m.
        let stop = Arc::new(AtomicBool::new(false));
        let (engine, addr) = common::engine_with_metrics(&m, cfg, Arc::clone(&stop));

        // Before traffic: every family is exported and consistent.
        let before = parsed(&m, addr);
        for fam in [
            "netsched_link_rx_frames_total",
            "netsched_link_tx_frames_total",
            "netsched_link_rx_bytes_total",
            "netsched_link_tx_bytes_total",
            "netsched_link_queued_frames",
            "netsched_link_queued_bytes",
            "netsched_link_in_flight_frames",
            "netsched_link_kernel_socket_drops_total",
            "netsched_link_uptime_seconds",
            "netsched_link_snapshot_age_seconds",
            "netsched_link_snapshots_published_total",
        ] {
            assert!(
                before.iter().any(|s| s.name == fam),
                "{fam} missing: {before:?}"
            );
        }
        // ACK separation is on a→b only.
        assert!(sum(&before, "netsched_link_acks_classified_total", "ab").is_some());
        assert!(sum(&before, "netsched_link_acks_classified_total", "ba").is_none());
        check_identity(&before).unwrap();
        let rx0 = sum(&before, "netsched_link_rx_frames_total", "ab").unwrap();

        // Traffic: ~40 Mbit/s of UDP into the 20 Mbit/s direction for 3 s (frames queue and
        // drop), from a thread in namespace a.
        let traffic_stop = Arc::new(AtomicBool::new(false));
        let sender = {
            let (a, stop) = (a.clone(), Arc::clone(&traffic_stop));
            std::thread::spawn(move || -> anyhow::Result<u64> {
                enter_netns(&a)?;
                let s = UdpSocket::bind("10.79.0.1:0")?;
                let buf = [7u8; 1000];
                let mut sent = 0u64;
                let t0 = Instant::now();
                while !stop.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(3) {
                    for _ in 0..50 {
                        if s.send_to(&buf, "10.79.0.2:9").is_ok() {
                            sent += 1;
                        }
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                Ok(sent)
            })
        };
        std::thread::sleep(Duration::from_millis(300));
        let start = parsed(&m, addr);

        // The hammer: half-open clients holding slots, and 50 scrapers in a loop for 2 s, from
        // inside the daemon's namespace.
        let HammerOutcome {
            answered: ok,
            refused,
            inconsistent: bad,
        } = hammer(
            addr,
            netns_entry(&m),
            SCRAPERS,
            HALF_OPEN,
            Duration::from_secs(2),
            check_identity,
        )
        .unwrap();
        let end = parsed(&m, addr);
        traffic_stop.store(true, Ordering::Relaxed);
        let sent = sender.join().unwrap().unwrap();

        // Drained: nothing queued or in flight, so rx = tx + drops.
        std::thread::sleep(Duration::from_millis(300));
        let drained = parsed(&m, addr);
        stop.store(true, Ordering::Relaxed);
        let fin = engine.join().unwrap().unwrap();

        eprintln!(
            "scrapes: {ok} answered, {refused} refused; sent {sent} datagrams; final ab {:?}",
            fin.ab
        );
        assert!(bad.is_empty(), "inconsistent scrapes: {bad:?}");
        assert!(ok >= 5, "only {ok} scrapes answered ({refused} refused)");
        // Frames kept flowing during the hammer (20 Mbit/s of 1000 B frames is ~2400/s;
        // 2 s of it is ~4800: ask for a tenth).
        let fwd = |s: &[Sample]| sum(s, "netsched_link_tx_frames_total", "ab").unwrap();
        assert!(
            fwd(&end) - fwd(&start) >= 480.0,
            "forwarded a→b during the hammer: {} → {}",
            fwd(&start),
            fwd(&end)
        );
        // The packet thread kept publishing (every 100 ms: ~20 in 2 s; ask for 5).
        let published = |s: &[Sample]| one(s, "netsched_link_snapshots_published_total").unwrap();
        assert!(
            published(&end) - published(&start) >= 5.0,
            "{} → {}",
            published(&start),
            published(&end)
        );
        // Values moved with traffic, the shaped direction dropped, and it all adds up.
        assert!(sum(&end, "netsched_link_rx_frames_total", "ab").unwrap() > rx0 + 1000.0);
        assert!(sum(&drained, "netsched_link_drops_total", "ab").unwrap_or(0.0) > 0.0);
        check_identity(&drained).unwrap();
        assert_eq!(
            sum(&drained, "netsched_link_queued_frames", "ab"),
            Some(0.0)
        );
        assert_eq!(
            sum(&drained, "netsched_link_in_flight_frames", "ab"),
            Some(0.0)
        );
        // The final counters are never behind the last scrape.
        assert!(
            fin.ab.rx_frames as f64
                >= sum(&drained, "netsched_link_rx_frames_total", "ab").unwrap()
        );
        fin.ab.check_accounting().unwrap();
    }
    assert!(namespaces_with(&tag).is_empty(), "namespaces leaked");
}

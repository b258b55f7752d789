//! `netsched nfq --metrics ADDR`: what `netsched ctl status` shows, as Prometheus families
//! (`netsched_nfq_*`), served by `netsched_metrics` on its own thread.
//!
//! The packet loop never shares a lock with a scrape: every [`PUBLISH_INTERVAL`] (checked each
//! loop turn, and the loop turns at least every 10 ms) it copies the engine's numbers
//! ([`Snapshot`], O(classes), the same copy `ctl status` gets) into a [`Latest`] slot with
//! `try_lock`, which never waits; a publication that meets a scrape is skipped and counted. The
//! scrape formats the latest copy and reads the kernel's queue counters from /proc itself (in
//! the daemon's network namespace: the listener thread was started there). So a scrape delays
//! no verdict, and what it shows is at most ~110 ms old (`netsched_nfq_snapshot_age_seconds`).
//! The iptables rule counters of `ctl status` are left out: reading them starts `iptables`.

use crate::config::Config;
use crate::engine::{Counters, Snapshot};
use crate::Nanos;
use netsched_metrics::prometheus_client::registry::Registry;
use netsched_metrics::{Latest, MetricsError, MetricsServer, Writer};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// How often the packet loop publishes its numbers for scrapes.
pub const PUBLISH_INTERVAL: Nanos = 100 * crate::MS;

/// Per-packet decisions (every verdict is ACCEPT, now or after holding), by `ctl status`'s
/// `counters` key.
fn decisions(c: &Counters) -> [(&'static str, u64); 6] {
    [
        ("passed_at_once", c.passed_at_once),
        ("held", c.held),
        ("released", c.released),
        ("other", c.other),
        ("passed_over_limit", c.passed_over_limit),
        ("passed_stopped", c.passed_stopped),
    ]
}

/// The other engine counters, by `ctl status`'s `counters` key.
fn events(c: &Counters) -> [(&'static str, u64); 8] {
    [
        ("discipline_drops_passed", c.discipline_drops_passed),
        ("untracked_flows", c.untracked_flows),
        ("aborted", c.aborted),
        ("expired_flows", c.expired_flows),
        ("early_misses", c.early_misses),
        ("retransmissions", c.retransmissions),
        ("max_hold_releases", c.max_hold_releases),
        ("stale_skipped", c.stale_skipped),
    ]
}

/// Bind `addr` and serve the families of `latest` on a new thread (in the calling thread's
/// network namespace). The error names the address; the caller names the flag.
pub fn serve(
    addr: std::net::SocketAddr,
    cfg: &Config,
    latest: Arc<Latest<Snapshot>>,
    reloads: &netsched_metrics::Reloads,
) -> Result<MetricsServer, MetricsError> {
    let mut registry = Registry::default();
    netsched_metrics::register_daemon(&mut registry, "nfq", netsched_util::logging::dropped_lines);
    netsched_metrics::register_control_audit(
        &mut registry,
        netsched_control::audit::refused_requests,
        netsched_control::audit::suppressed_warnings,
    );
    register(&mut registry, cfg, latest);
    reloads.register(&mut registry, "netsched_nfq");
    let page = Some(crate::status::PAGE);
    netsched_metrics::serve_with_page(addr, Arc::new(Mutex::new(registry)), page)
}

/// Register the `netsched_nfq_*` families on `registry`, written from `latest`.
pub fn register(registry: &mut Registry, cfg: &Config, latest: Arc<Latest<Snapshot>>) {
    let names: Vec<String> = cfg.classes.iter().map(|c| c.name.clone()).collect();
    let queue = cfg.queue;
    let started = Instant::now();
    netsched_metrics::register_snapshot(registry, "netsched_nfq", latest, move |snap, w| {
        write(&names, snap, w)?;
        w.gauge(
            "uptime_seconds",
            "Seconds since the daemon started",
            started.elapsed().as_secs_f64(),
        )?;
        if let Some((total, dropped, user)) = crate::netlink::kernel_queue_counters(queue) {
            w.gauge(
                "kernel_queue_length",
                "Packets waiting in the kernel's queue now (/proc/net/netfilter/nfnetlink_queue)",
                total as f64,
            )?;
            w.counter(
                "kernel_queue_dropped",
                "Packets the kernel could not queue (queue full; let through by fail-open)",
                dropped,
            )?;
            w.counter(
                "kernel_user_dropped",
                "Packets the kernel could not send to the daemon (socket buffer full)",
                user,
            )?;
        }
        Ok(())
    });
}

fn write(names: &[String], snap: &Snapshot, w: &mut Writer<'_>) -> fmt::Result {
    let st = snap.to_status(names);
    let class = |f: fn(&crate::engine::ClassRow) -> u64| {
        st.classes
            .iter()
            .map(move |c| ([("class", c.name.as_str())], f(c)))
    };
    let class_g = |f: fn(&crate::engine::ClassRow) -> f64| {
        st.classes
            .iter()
            .map(move |c| ([("class", c.name.as_str())], f(c)))
    };
    w.counters(
        "class_requests",
        "Requests judged (N): completed by a response, or failed",
        class(|c| c.n),
    )?;
    w.counters(
        "class_within_deadline",
        "Requests answered within the deadline (S)",
        class(|c| c.s),
    )?;
    w.counters(
        "class_failed",
        "Requests that missed the deadline or failed",
        class(|c| c.fail),
    )?;
    w.gauges(
        "class_attainment",
        "S / (N * P): 1 = exactly at the class's percentile target",
        class_g(|c| c.attainment),
    )?;
    w.gauges(
        "class_percentile_target",
        "The class's percentile target P (percent)",
        class_g(|c| c.percentile as f64),
    )?;
    w.gauges(
        "class_queue_length",
        "Requests of the class held in the discipline now",
        class_g(|c| c.queue_len as f64),
    )?;
    w.gauges(
        "class_held_packets",
        "Packets of the class held now",
        class_g(|c| c.held_packets as f64),
    )?;
    w.counters(
        "class_completed",
        "Requests of the class completed (responded, aborted or timed out)",
        class(|c| c.completed),
    )?;
    w.counters(
        "class_timeouts",
        "Requests of the class that timed out",
        class(|c| c.timeouts),
    )?;
    w.gauges(
        "class_mean_response_seconds",
        "Mean response time of the class's responded requests",
        class_g(|c| c.mean_response_ns as f64 / 1e9),
    )?;
    w.gauges(
        "class_priority",
        "The thesis's priority N*P/S*10 (percentile discipline only; higher is served first)",
        st.classes
            .iter()
            .filter_map(|c| Some(([("class", c.name.as_str())], c.priority?))),
    )?;
    w.gauge(
        "deadline_seconds",
        "The deadline requests are judged against now (fixed, or the running estimate)",
        st.deadline_ns as f64 / 1e9,
    )?;
    if let Some(q) = st.deadline_quantile {
        w.gauge(
            "deadline_quantile",
            "auto_quantile: the quantile of response times the deadline tracks now",
            q,
        )?;
    }
    w.gauge(
        "running",
        "1 when scheduling, 0 when stopped",
        st.running as u8 as f64,
    )?;
    w.gauge(
        "in_server",
        "Requests released into the server and not yet answered",
        st.in_server as f64,
    )?;
    if let Some(b) = st.budget {
        w.gauge(
            "budget",
            "Requests allowed inside the server at once",
            b as f64,
        )?;
    }
    w.gauge("held_packets", "Packets held now", st.held_packets as f64)?;
    w.gauge("flows", "Flows tracked now", st.flows as f64)?;
    w.gauge(
        "mean_server_seconds",
        "Mean time a request spent inside the server (release to first response byte)",
        st.mean_server_ns as f64 / 1e9,
    )?;
    w.counter("packets", "Packets the engine decided", st.counters.packets)?;
    w.counter(
        "requests",
        "Requests seen (all classes)",
        st.counters.requests,
    )?;
    w.counters(
        "decisions",
        "Per-packet decisions by kind (every verdict is ACCEPT; held packets are accepted later)",
        decisions(&st.counters).map(|(k, v)| ([("decision", k)], v)),
    )?;
    w.counters(
        "events",
        "Other engine counters (passed refusals, untracked flows, aborts, ...)",
        events(&st.counters).map(|(k, v)| ([("event", k)], v)),
    )?;
    w.counter(
        "netlink_received",
        "Packets read from the netlink queue socket",
        snap.socket.received,
    )?;
    w.counter(
        "netlink_enobufs",
        "ENOBUFS on the netlink socket (the kernel could not deliver)",
        snap.socket.enobufs,
    )?;
    w.gauge(
        "netlink_rcvbuf_bytes",
        "Receive buffer of the netlink socket",
        snap.socket.rcvbuf_bytes as f64,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ClassSpec;

    #[test]
    fn families_come_from_the_published_snapshot() {
        let cfg = Config {
            classes: vec![
                ClassSpec {
                    name: "gold".into(),
                    percentile: 90,
                },
                ClassSpec {
                    name: "bronze".into(),
                    percentile: 50,
                },
            ],
            ..Config::default()
        };
        let mut engine = crate::engine::Engine::new(cfg.clone()).unwrap();
        let latest = Arc::new(Latest::new());
        let mut reg = Registry::default();
        register(&mut reg, &cfg, Arc::clone(&latest));
        let shared = Arc::new(Mutex::new(reg));
        let mut accept = Vec::new();
        // A packet that is not ours: counted as `other`.
        engine.on_packet(1, 0, &[0u8; 20], 0, &mut accept);
        latest.publish(engine.snapshot_without_table());
        let text = netsched_metrics::render(&shared);
        let samples = netsched_metrics::parse_exposition(&text).unwrap();
        let get = |name: &str, key: &str, v: &str| {
            samples
                .iter()
                .find(|s| s.name == name && s.label(key) == Some(v))
                .map(|s| s.value)
        };
        assert_eq!(
            get("netsched_nfq_class_percentile_target", "class", "gold"),
            Some(90.0)
        );
        assert_eq!(
            get("netsched_nfq_class_requests_total", "class", "bronze"),
            Some(0.0)
        );
        assert_eq!(
            get("netsched_nfq_decisions_total", "decision", "other"),
            Some(1.0)
        );
        assert!(text.contains("netsched_nfq_packets_total 1"), "{text}");
        assert!(
            text.contains("netsched_nfq_deadline_seconds 0.01"),
            "{text}"
        );
        assert!(text.contains("netsched_nfq_uptime_seconds"), "{text}");
    }
}

//! The switch's Prometheus families (`--metrics ADDR`), served by the one `/metrics` listener
//! of every daemon (`netsched_metrics`), all prefixed `netsched_vswitch_`.
//!
//! **The packet path never waits for a scrape.** Every series is created once, at
//! registration, and the packet thread keeps its own clones of them (each an `Arc` of one
//! atomic): publishing is a handful of relaxed atomic stores, no lock. The scrape takes only
//! the registry's and the families' locks, which the packet thread never touches. The packet
//! thread publishes its counters every [`PUBLISH_EVERY`] (and at the end of the run), so a
//! scrape sees values at most that old plus one loop turn. The scrape reads the series one
//! by one, so one that falls on a publication may mix two consecutive publications; the exact
//! `received = forwarded + dropped + queued` is `show-ports --json` (one instant), and holds
//! in a scrape after the run ended (the last publication is final).

use crate::stats::{SwitchStats, UplinkStats};
use netsched_core::{Nanos, MS};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::{AtomicU64, Ordering};

/// How often the packet thread publishes its counters.
pub const PUBLISH_EVERY: Nanos = 100 * MS;

/// The drop reasons of a guest port, in the order of [`PortSeries::dropped`].
pub const PORT_DROP_REASONS: [&str; 7] = [
    "queue_full",
    "malformed",
    "oversize",
    "send_error",
    "removed",
    "shutdown",
    "discipline",
];
/// The drop reasons of the uplink (return path).
pub const UPLINK_DROP_REASONS: [&str; 3] = ["malformed", "oversize", "no_port"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PortLabel {
    port: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PortReasonLabel {
    port: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendLabel {
    backend: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

/// The series of one guest port (clones of the registered ones).
struct PortSeries {
    received: Counter,
    forwarded: Counter,
    forwarded_bytes: Counter,
    dropped: [Counter; PORT_DROP_REASONS.len()],
    kernel_drops: Counter,
    delivered: Counter,
    queued: Gauge,
    tier: Gauge,
    weight: Gauge,
    max_rounds_passed: Gauge,
    bound_rounds: Gauge,
    removed: Gauge,
}

/// Every series the switch exports; the packet thread owns it and calls [`Self::publish`].
pub struct SwitchMetrics {
    ports: Vec<PortSeries>,
    rounds: Counter,
    port_backend: Family<BackendLabel, Gauge>,
    ring_bytes: Gauge,
    wakeups: Counter,
    budget_lost: Counter<f64, AtomicU64>,
    mac_learned: Gauge,
    mac_table_full: Counter,
    up_received: Counter,
    up_unicast: Counter,
    up_flooded: Counter,
    up_dropped: [Counter; UPLINK_DROP_REASONS.len()],
    /// `XDP_STATISTICS` over all ports: the four loss counters, then the two "found empty".
    xdp_drops: [Counter; 4],
    xdp_empty: [Counter; 2],
    published: Counter,
}

fn set_counter(c: &Counter, v: u64) {
    c.inner().store(v, Ordering::Relaxed);
}

fn gauge(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The switch's budget, as published: packets/s, bits/s (0 = not that kind), busy share.
#[derive(Debug, Clone, Copy, Default)]
pub struct Budget {
    pub packet_rate: Option<u64>,
    pub bit_rate: Option<u64>,
    pub busy: f64,
}

/// A counter named `name` in `r`; the returned clone shares its value.
fn register_counter(r: &mut Registry, name: &str, help: &str) -> Counter {
    let c = Counter::default();
    r.register(name, help, c.clone());
    c
}

/// A gauge named `name` in `r`; the returned clone shares its value.
fn register_gauge(r: &mut Registry, name: &str, help: &str) -> Gauge {
    let g: Gauge = Gauge::default();
    r.register(name, help, g.clone());
    g
}

/// Register the per-port families in `r` and create one series of each per port of `ports`.
fn register_ports(r: &mut Registry, ports: &[String]) -> Vec<PortSeries> {
    let port_counter = |r: &mut Registry, name: &str, help: &str| {
        let f: Family<PortLabel, Counter> = Family::default();
        r.register(name, help, f.clone());
        f
    };
    let port_gauge = |r: &mut Registry, name: &str, help: &str| {
        let f: Family<PortLabel, Gauge> = Family::default();
        r.register(name, help, f.clone());
        f
    };
    let received = port_counter(r, "port_received", "Frames read from the guest port");
    let forwarded = port_counter(r, "port_forwarded", "Frames of the port sent on the uplink");
    let forwarded_bytes = port_counter(
        r,
        "port_forwarded_bytes",
        "Bytes of the port sent on the uplink",
    );
    let dropped: Family<PortReasonLabel, Counter> = Family::default();
    r.register(
        "port_dropped",
        "Frames of the port dropped, by reason (queue_full, malformed, oversize, send_error, \
         removed, shutdown, discipline)",
        dropped.clone(),
    );
    let kernel_drops = port_counter(
        r,
        "port_kernel_drops",
        "Frames the kernel dropped before the switch read them (outside the identity)",
    );
    let delivered = port_counter(
        r,
        "port_delivered",
        "Frames delivered to the guest from the uplink",
    );
    let queued = port_gauge(
        r,
        "port_queued",
        "Frames of the port in its vif queue or the uplink's send batch",
    );
    let tier = port_gauge(r, "port_tier", "The port's tier (1 = most important)");
    let weight = port_gauge(r, "port_weight", "The port's weight (DRR, WF2Q+)");
    let max_passed = port_gauge(
        r,
        "port_max_rounds_passed",
        "Longest run of round starts that passed over the backlogged port (delay_constrained)",
    );
    let bound = port_gauge(
        r,
        "port_bound_rounds",
        "The proven bound on that run, bitmap_len + n - 2 (0: not delay_constrained)",
    );
    let removed = port_gauge(r, "port_removed", "1 when the port's interface disappeared");
    let mut series = Vec::with_capacity(ports.len());
    for p in ports {
        let l = PortLabel { port: p.clone() };
        let reason = |why: &str| {
            dropped
                .get_or_create(&PortReasonLabel {
                    port: p.clone(),
                    reason: why.to_string(),
                })
                .clone()
        };
        series.push(PortSeries {
            received: received.get_or_create(&l).clone(),
            forwarded: forwarded.get_or_create(&l).clone(),
            forwarded_bytes: forwarded_bytes.get_or_create(&l).clone(),
            dropped: PORT_DROP_REASONS.map(reason),
            kernel_drops: kernel_drops.get_or_create(&l).clone(),
            delivered: delivered.get_or_create(&l).clone(),
            queued: queued.get_or_create(&l).clone(),
            tier: tier.get_or_create(&l).clone(),
            weight: weight.get_or_create(&l).clone(),
            max_rounds_passed: max_passed.get_or_create(&l).clone(),
            bound_rounds: bound.get_or_create(&l).clone(),
            removed: removed.get_or_create(&l).clone(),
        });
    }
    series
}

/// Serve `registry` (with the families of [`SwitchMetrics::register`]) and the switch's status
/// page on `addr`: the daemon's `--metrics` listener.
pub fn serve(
    addr: std::net::SocketAddr,
    registry: Registry,
) -> Result<netsched_metrics::MetricsServer, netsched_metrics::MetricsError> {
    let shared = std::sync::Arc::new(std::sync::Mutex::new(registry));
    netsched_metrics::serve_with_page(addr, shared, Some(crate::status::PAGE))
}

impl SwitchMetrics {
    /// Register every family in `registry` with one series per port of `ports` (device
    /// names, in configuration order).
    pub fn register(registry: &mut Registry, ports: &[String], budget: Budget) -> Self {
        let r = registry.sub_registry_with_prefix("netsched_vswitch");
        let series = register_ports(r, ports);
        let rounds = register_counter(
            r,
            "rounds",
            "Round starts (delay_constrained); frames taken from the discipline otherwise",
        );
        let budget_pps = register_gauge(
            r,
            "budget_packets_per_second",
            "Forwarding budget in packets/s (0: not a packet budget)",
        );
        let budget_bps = register_gauge(
            r,
            "budget_bits_per_second",
            "Forwarding budget in bits/s on the uplink (0: not a bit-rate budget)",
        );
        let budget_busy_permille = register_gauge(
            r,
            "budget_busy_permille",
            "Share of time the budget is off (budget_busy), in thousandths",
        );
        let budget_lost: Counter<f64, AtomicU64> = Counter::default();
        r.register_with_unit(
            "budget_lost",
            "Budget on-time lost while frames waited for it (the packet thread woke more than \
             the budget's 1 ms of credit late)",
            Unit::Seconds,
            budget_lost.clone(),
        );
        let mac_learned = register_gauge(r, "mac_learned", "Addresses in the MAC learning table");
        let mac_table_full = register_counter(
            r,
            "mac_table_full",
            "New source addresses not learned because the table was full",
        );
        let up_received = register_counter(r, "uplink_received", "Frames read from the uplink");
        let up_unicast = register_counter(
            r,
            "uplink_delivered_unicast",
            "Uplink frames delivered to the one port that learned the destination",
        );
        let up_flooded = register_counter(
            r,
            "uplink_flooded",
            "Uplink frames sent to every guest port (broadcast, multicast, unknown unicast)",
        );
        let up_dropped_f: Family<ReasonLabel, Counter> = Family::default();
        r.register(
            "uplink_dropped",
            "Uplink frames dropped, by reason (malformed, oversize, no_port)",
            up_dropped_f.clone(),
        );
        let up_dropped = UPLINK_DROP_REASONS.map(|why| {
            up_dropped_f
                .get_or_create(&ReasonLabel {
                    reason: why.to_string(),
                })
                .clone()
        });
        let xdp_drops_f: Family<ReasonLabel, Counter> = Family::default();
        r.register(
            "xdp_drops",
            "Frames and descriptors the ports' AF_XDP sockets lost, by reason (XDP_STATISTICS summed over ports; 0 unless the xdp backend runs)",
            xdp_drops_f.clone(),
        );
        let xdp_drops = netsched_sys::XdpStats::default().drops().map(|(why, _)| {
            xdp_drops_f
                .get_or_create(&ReasonLabel {
                    reason: why.to_string(),
                })
                .clone()
        });
        let xdp_empty_f: Family<ReasonLabel, Counter> = Family::default();
        r.register(
            "xdp_ring_empty",
            "Times the kernel found the ports' AF_XDP fill or TX ring empty (reason = the ring; events, not losses)",
            xdp_empty_f.clone(),
        );
        let xdp_empty = netsched_sys::XdpStats::default().empty().map(|(ring, _)| {
            xdp_empty_f
                .get_or_create(&ReasonLabel {
                    reason: ring.to_string(),
                })
                .clone()
        });
        let published = register_counter(
            r,
            "publications",
            "Times the packet thread published these counters",
        );
        let port_backend: Family<BackendLabel, Gauge> = Family::default();
        r.register(
            "port_backend",
            "The port backend in use (1 for the one running: xdp, tpacket, tpacket_v3 or packet)",
            port_backend.clone(),
        );
        let ring_bytes = register_gauge(
            r,
            "ring_bytes",
            "Bytes of ring memory the open ports mapped (0 for the packet backend)",
        );
        let wakeups = register_counter(
            r,
            "wakeups",
            "Times the packet thread woke from a blocking wait",
        );
        budget_pps.set(gauge(budget.packet_rate.unwrap_or(0)));
        budget_bps.set(gauge(budget.bit_rate.unwrap_or(0)));
        budget_busy_permille.set((budget.busy * 1000.0).round() as i64);
        Self {
            ports: series,
            rounds,
            port_backend,
            ring_bytes,
            wakeups,
            budget_lost,
            mac_learned,
            mac_table_full,
            up_received,
            up_unicast,
            up_flooded,
            up_dropped,
            xdp_drops,
            xdp_empty,
            published,
        }
    }

    /// Store a snapshot (atomics only; called by the packet thread).
    pub fn publish(&self, s: &SwitchStats) {
        self.port_backend
            .get_or_create(&BackendLabel {
                backend: s.port_backend.name().to_string(),
            })
            .set(1);
        self.ring_bytes.set(gauge(s.ring_bytes));
        set_counter(&self.wakeups, s.wakeups);
        for (c, (_, v)) in self.xdp_drops.iter().zip(s.xdp_drops.drops()) {
            set_counter(c, v);
        }
        for (c, (_, v)) in self.xdp_empty.iter().zip(s.xdp_drops.empty()) {
            set_counter(c, v);
        }
        for (m, p) in self.ports.iter().zip(&s.ports) {
            set_counter(&m.received, p.received);
            set_counter(&m.forwarded, p.forwarded);
            set_counter(&m.forwarded_bytes, p.forwarded_bytes);
            let drops = [
                p.dropped_queue_full,
                p.dropped_malformed,
                p.dropped_oversize,
                p.dropped_send_error,
                p.dropped_removed,
                p.dropped_shutdown,
                p.dropped_discipline,
            ];
            for (c, v) in m.dropped.iter().zip(drops) {
                set_counter(c, v);
            }
            set_counter(&m.kernel_drops, p.kernel_drops);
            set_counter(&m.delivered, p.delivered);
            m.queued.set(gauge(p.queued));
            m.tier.set(p.tier as i64);
            m.weight.set(p.weight as i64);
            m.max_rounds_passed.set(gauge(p.max_rounds_passed));
            m.bound_rounds.set(gauge(p.bound_rounds));
            m.removed.set(p.removed as i64);
        }
        set_counter(&self.rounds, s.rounds);
        // A float counter keeps its value's bits (prometheus-client's f64 atomic).
        self.budget_lost
            .inner()
            .store((s.budget_lost_ns as f64 / 1e9).to_bits(), Ordering::Relaxed);
        self.mac_learned.set(gauge(s.mac_learned));
        set_counter(&self.mac_table_full, s.mac_table_full);
        let UplinkStats {
            received,
            delivered_unicast,
            flooded,
            dropped_malformed,
            dropped_oversize,
            dropped_no_port,
            ..
        } = s.uplink;
        set_counter(&self.up_received, received);
        set_counter(&self.up_unicast, delivered_unicast);
        set_counter(&self.up_flooded, flooded);
        for (c, v) in
            self.up_dropped
                .iter()
                .zip([dropped_malformed, dropped_oversize, dropped_no_port])
        {
            set_counter(c, v);
        }
        self.published.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::PortStats;

    #[test]
    fn published_counters_appear_in_the_exposition_with_every_drop_reason() {
        let mut reg = Registry::default();
        let m = SwitchMetrics::register(
            &mut reg,
            &["vg0".into(), "vg1".into()],
            Budget {
                packet_rate: Some(5000),
                bit_rate: None,
                busy: 0.5,
            },
        );
        let mut s = SwitchStats {
            rounds: 9,
            budget_lost_ns: 250_000_000,
            ..SwitchStats::default()
        };
        s.ports = vec![
            PortStats {
                dev: "vg0".into(),
                tier: 2,
                weight: 3,
                received: 10,
                forwarded: 6,
                dropped_queue_full: 3,
                queued: 1,
                ..PortStats::default()
            },
            PortStats {
                dev: "vg1".into(),
                tier: 1,
                weight: 1,
                ..PortStats::default()
            },
        ];
        m.publish(&s);
        let shared = std::sync::Arc::new(std::sync::Mutex::new(reg));
        let text = netsched_metrics::render(&shared);
        for want in [
            "netsched_vswitch_port_received_total{port=\"vg0\"} 10",
            "netsched_vswitch_port_forwarded_total{port=\"vg0\"} 6",
            "netsched_vswitch_port_dropped_total{port=\"vg0\",reason=\"queue_full\"} 3",
            "netsched_vswitch_port_dropped_total{port=\"vg1\",reason=\"discipline\"} 0",
            "netsched_vswitch_port_queued{port=\"vg0\"} 1",
            "netsched_vswitch_port_tier{port=\"vg0\"} 2",
            "netsched_vswitch_port_weight{port=\"vg0\"} 3",
            "netsched_vswitch_rounds_total 9",
            "netsched_vswitch_budget_lost_seconds_total 0.25",
            "netsched_vswitch_budget_packets_per_second 5000",
            "netsched_vswitch_budget_busy_permille 500",
            "netsched_vswitch_uplink_dropped_total{reason=\"no_port\"} 0",
            "netsched_vswitch_port_backend{backend=\"auto\"} 1",
            "netsched_vswitch_ring_bytes 0",
            "netsched_vswitch_wakeups_total 0",
            "netsched_vswitch_xdp_drops_total{reason=\"rx_ring_full\"} 0",
            "netsched_vswitch_xdp_ring_empty_total{reason=\"tx\"} 0",
        ] {
            assert!(text.contains(want), "missing {want:?} in:\n{text}");
        }
        s.ports[0].received = 11;
        m.publish(&s);
        let text = netsched_metrics::render(&shared);
        assert!(text.contains("netsched_vswitch_port_received_total{port=\"vg0\"} 11"));
    }
}

//! `netsched link --metrics ADDR`: the engine's counters as Prometheus families
//! (`netsched_link_*`), served by `netsched_metrics` on its own thread.
//!
//! The packet thread never shares a lock with a scrape: every [`PUBLISH_INTERVAL`] it copies
//! its counters ([`EngineStats`], the same numbers `--stats` prints) into a
//! [`Latest`] slot with `try_lock` (never waits; a publication that meets a scrape is skipped
//! and counted), and the scrape writes the families from the latest copy. So a scrape delays
//! no packet decision; the values it shows are at most one interval (plus one loop turn,
//! ≤ 100 ms) old, and `netsched_link_snapshot_age_seconds` says how old. Each copy is taken at
//! one instant of the loop, so within one scrape `rx = tx + drops + queued + in flight` holds
//! exactly per direction.

use crate::emulation::DirStats;
use crate::engine::{Engine, EngineConfig, EngineStats};
use crate::engine_error::EngineError;
use crate::qdisc_spec::ClassMode;
use netsched_core::Nanos;
use netsched_metrics::prometheus_client::registry::Registry;
use netsched_metrics::{Latest, MetricsServer, PortCounters, Writer};
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// How often the packet thread publishes its counters for scrapes.
pub const PUBLISH_INTERVAL: Nanos = crate::engine::METRICS_INTERVAL;

/// What the scrape needs besides the counters: which interface each direction reads and
/// writes, and whether it separates pure ACKs.
#[derive(Debug, Clone)]
struct Shape {
    dev_a: String,
    dev_b: String,
    ack_ab: bool,
    ack_ba: bool,
    /// Each direction's configured rate (bits/s, 0 = unshaped) and one-way delay (ns).
    rate: [u64; 2],
    delay: [Nanos; 2],
}

/// Register the `netsched_link_*` families on `registry`, written from `latest`.
pub fn register(registry: &mut Registry, cfg: &EngineConfig, latest: Arc<Latest<EngineStats>>) {
    let shape = Shape {
        dev_a: cfg.dev_a.clone(),
        dev_b: cfg.dev_b.clone(),
        ack_ab: matches!(cfg.ab.qdisc.classify, ClassMode::PureAck),
        ack_ba: matches!(cfg.ba.qdisc.classify, ClassMode::PureAck),
        rate: [cfg.ab.rate_bps.unwrap_or(0), cfg.ba.rate_bps.unwrap_or(0)],
        delay: [cfg.ab.delay, cfg.ba.delay],
    };
    netsched_metrics::register_snapshot(registry, "netsched_link", latest, move |s, w| {
        write(&shape, s, w)
    });
}

/// Bind `addr`, make `engine` publish to it, and serve `/metrics` on a new thread (in the
/// calling thread's network namespace). Errors name the flag and the address.
pub fn serve(
    addr: SocketAddr,
    cfg: &EngineConfig,
    engine: &mut Engine,
) -> Result<MetricsServer, EngineError> {
    let latest = Arc::new(Latest::new());
    let mut registry = Registry::default();
    netsched_metrics::register_daemon(&mut registry, "link", netsched_util::logging::dropped_lines);
    register(&mut registry, cfg, Arc::clone(&latest));
    let page = Some(crate::status::PAGE);
    let server = netsched_metrics::serve_with_page(addr, Arc::new(Mutex::new(registry)), page)
        .map_err(|source| EngineError::Metrics { addr, source })?;
    engine.publish_metrics_to(latest);
    Ok(server)
}

fn write(shape: &Shape, s: &EngineStats, w: &mut Writer<'_>) -> fmt::Result {
    let dirs: [(&str, &str, &str, &DirStats, bool); 2] = [
        ("ab", &shape.dev_a, &shape.dev_b, &s.ab, shape.ack_ab),
        ("ba", &shape.dev_b, &shape.dev_a, &s.ba, shape.ack_ba),
    ];
    let per_dir = |f: fn(&DirStats) -> u64| {
        dirs.iter()
            .map(move |(d, from, to, st, _)| ([("dir", *d), ("from", *from), ("to", *to)], f(st)))
    };
    let gauge_dir = |f: fn(&DirStats) -> u64| per_dir(f).map(|(l, v)| (l, v as f64));
    let config_dir = |v: [f64; 2]| {
        dirs.iter()
            .zip(v)
            .map(|((d, from, to, _, _), v)| ([("dir", *d), ("from", *from), ("to", *to)], v))
    };
    w.gauges(
        "rate_limit_bits_per_second",
        "The direction's configured rate (0: unshaped)",
        config_dir(shape.rate.map(|r| r as f64)),
    )?;
    w.gauges(
        "delay_seconds",
        "The direction's configured one-way delay",
        config_dir(shape.delay.map(|d| d as f64 / 1e9)),
    )?;
    w.counters(
        "rx_frames",
        "Frames received on the direction's input port",
        per_dir(|d| d.rx_frames),
    )?;
    w.counters(
        "rx_bytes",
        "Bytes received on the direction's input port",
        per_dir(|d| d.rx_bytes),
    )?;
    w.counters(
        "tx_frames",
        "Frames forwarded (sent on the output port)",
        per_dir(|d| d.tx_frames),
    )?;
    w.counters(
        "tx_bytes",
        "Bytes forwarded (sent on the output port)",
        per_dir(|d| d.tx_bytes),
    )?;
    w.counters(
        "drops",
        "Frames received and then dropped, by reason (the discipline's and the engine's own)",
        dirs.iter().flat_map(|(d, _, _, st, _)| {
            st.drops
                .iter()
                .map(move |(r, n)| ([("dir", *d), ("reason", r.as_str())], *n))
        }),
    )?;
    w.counters(
        "kernel_socket_drops",
        "Frames the kernel dropped before the engine read them (socket queue full, PACKET_STATISTICS)",
        per_dir(|d| d.kernel_socket_drops),
    )?;
    w.gauges(
        "queued_frames",
        "Frames waiting in the direction's discipline",
        gauge_dir(|d| d.queued_frames),
    )?;
    w.gauges(
        "queued_bytes",
        "Bytes waiting in the direction's discipline",
        gauge_dir(|d| d.queued_bytes),
    )?;
    w.gauges(
        "in_flight_frames",
        "Frames on the direction's delay line (sent by the discipline, not yet due)",
        gauge_dir(|d| d.in_flight_frames),
    )?;
    w.gauges(
        "max_delay_line_frames",
        "Most frames seen on the delay line at once",
        gauge_dir(|d| d.max_delay_line),
    )?;
    w.counters(
        "acks_classified",
        "Pure TCP ACKs put in the ACK class (only directions with ACK separation)",
        dirs.iter()
            .filter(|(_, _, _, _, ack)| *ack)
            .map(|(d, _, _, st, _)| ([("dir", *d)], st.acks_classified)),
    )?;
    let ports = [
        (&shape.dev_a, &s.xdp_drops[0]),
        (&shape.dev_b, &s.xdp_drops[1]),
    ]
    .map(|(dev, x)| PortCounters {
        dev,
        drops: x.drops(),
        empty: x.empty(),
    });
    w.port_families(
        "The port backend in use (1 for the one running)",
        s.port.name(),
        s.ring_bytes,
        &ports,
    )?;
    w.counter(
        "wakeups",
        "Times the packet thread woke from ppoll",
        s.wakeups,
    )?;
    w.gauge(
        "uptime_seconds",
        "Seconds since the engine started forwarding",
        s.elapsed_ns as f64 / 1e9,
    )?;
    w.counter_f64(
        "cpu_seconds",
        "CPU seconds the packet thread used",
        s.cpu_ns as f64 / 1e9,
    )
}

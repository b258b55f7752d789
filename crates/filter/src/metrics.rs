//! `netsched filter --metrics ADDR`: the stats line as Prometheus families
//! (`netsched_filter_*`), served by `netsched_metrics` on its own thread.
//!
//! The packet thread publishes a copy of its counters every ~100 ms into a
//! `netsched_metrics::Latest` slot (`try_lock`, never waits); a scrape formats the latest copy.
//! So a scrape delays no packet, and what it shows is at most ~100 ms old.

use crate::stats::FilterStats;
use netsched_metrics::prometheus_client::registry::Registry;
use netsched_metrics::{Latest, MetricsServer, PortCounters, Writer};
use std::fmt;
use std::sync::{Arc, Mutex};

/// Bind `addr` and serve the families of `latest` (in the calling thread's namespace); `devs`
/// are the input and output interfaces (`""`: none), the label of the per-port families.
pub fn serve(
    addr: std::net::SocketAddr,
    latest: Arc<Latest<FilterStats>>,
    devs: [String; 2],
) -> anyhow::Result<MetricsServer> {
    serve_with_reloads(addr, latest, devs, &netsched_metrics::Reloads::new())
}

/// [`serve`], with `netsched_filter_reloads_total` counted by `reloads` (SIGHUP and
/// `ctl reload`).
pub fn serve_with_reloads(
    addr: std::net::SocketAddr,
    latest: Arc<Latest<FilterStats>>,
    devs: [String; 2],
    reloads: &netsched_metrics::Reloads,
) -> anyhow::Result<MetricsServer> {
    let registry = registry(latest, devs);
    reloads.register(
        &mut registry.lock().unwrap_or_else(|p| p.into_inner()),
        "netsched_filter",
    );
    netsched_metrics::serve_with_page(addr, registry, Some(crate::status::PAGE))
        .map_err(|e| anyhow::anyhow!("--metrics {addr}: {e}"))
}

/// The registry with the `netsched_filter_*` families written from `latest`.
pub fn registry(latest: Arc<Latest<FilterStats>>, devs: [String; 2]) -> netsched_metrics::Shared {
    let mut registry = Registry::default();
    netsched_metrics::register_daemon(
        &mut registry,
        "filter",
        netsched_util::logging::dropped_lines,
    );
    netsched_metrics::register_control_audit(
        &mut registry,
        netsched_control::audit::refused_requests,
        netsched_control::audit::suppressed_warnings,
    );
    // Read at scrape time, not from the packet thread's snapshot: it counts while that thread
    // is stalled.
    netsched_metrics::register_read_counter(
        &mut registry,
        "netsched_filter_packet_thread_stalls",
        "Times the watchdog found the packet thread without progress (docs/filter.md, Watchdog)",
        crate::watchdog::stalls_total,
    );
    netsched_metrics::register_snapshot(&mut registry, "netsched_filter", latest, move |s, w| {
        write(s, w)?;
        write_ports(s, &devs, w)
    });
    Arc::new(Mutex::new(registry))
}

/// The port backend, its ring memory and each port's AF_XDP counters (`XDP_STATISTICS`).
fn write_ports(s: &FilterStats, devs: &[String; 2], w: &mut Writer<'_>) -> fmt::Result {
    let ports: Vec<PortCounters<'_>> = devs
        .iter()
        .zip(&s.xdp_drops)
        .filter(|(dev, _)| !dev.is_empty())
        .map(|(dev, x)| PortCounters {
            dev,
            drops: x.drops(),
            empty: x.empty(),
        })
        .collect();
    w.port_families(
        "The port backend of the input interface (1 for the one running)",
        s.port.name(),
        s.ring_bytes,
        &ports,
    )
}

fn write(s: &FilterStats, w: &mut Writer<'_>) -> fmt::Result {
    w.counter(
        "received",
        "Frames taken from the input interface",
        s.received,
    )?;
    w.counter(
        "forwarded",
        "Frames sent on the output interface",
        s.forwarded,
    )?;
    w.gauge("queued", "Frames inside the filter now", s.queued as f64)?;
    w.counters(
        "dropped",
        "Frames not forwarded, by reason",
        crate::verdict::DropReason::ALL
            .iter()
            .map(|r| ([("reason", r.name())], s.drops.get(r).copied().unwrap_or(0))),
    )?;
    w.counter(
        "identity_failures",
        "Stats lines on which received != forwarded + dropped + queued",
        s.identity_failures,
    )?;
    w.counter(
        "kernel_drops",
        "Frames the kernel dropped before the filter",
        s.kernel_drops,
    )?;
    w.counter(
        "signature_marked",
        "Forwarded frames a signature matched",
        s.signature_marked,
    )?;
    w.counter("rule_swaps", "Rule-set swaps", s.rule_swaps)?;
    w.counter("rule_edits", "Single-rule edits", s.rule_edits)?;
    let p = &s.pipeline;
    let ids: Vec<String> = (0..p.workers.len()).map(|i| i.to_string()).collect();
    let per_worker = |f: fn(&crate::worker::WorkerStats) -> u64| {
        p.workers
            .iter()
            .zip(&ids)
            .map(move |(x, id)| ([("worker", id.as_str())], f(x)))
    };
    w.counters(
        "worker_busy_ns",
        "Nanoseconds a worker ran tasks",
        per_worker(|x| x.busy_ns),
    )?;
    w.counters(
        "worker_idle_ns",
        "Nanoseconds a worker waited for a task",
        per_worker(|x| x.idle_ns),
    )?;
    w.counters(
        "worker_blocks",
        "Blocks a worker processed",
        per_worker(|x| x.blocks),
    )?;
    w.counters(
        "worker_cpu_ns",
        "CPU time of a worker thread when it last went idle, ns",
        per_worker(|x| x.cpu_ns),
    )?;
    w.counters(
        "worker_sops",
        "Header blocks (SOP) a worker processed",
        per_worker(|x| x.sops),
    )?;
    w.counters(
        "worker_handoff_waits",
        "Blocks that waited for their predecessor's hand-off",
        per_worker(|x| x.handoff_waits),
    )?;
    w.counters(
        "worker_panics",
        "Blocks whose work panicked",
        per_worker(|x| x.panics),
    )?;
    w.counters(
        "worker_edit_failures",
        "Rule edits a worker's copy refused (the copies differ: reload)",
        per_worker(|x| x.edit_failures),
    )?;
    let stalls = |f: fn(&crate::pipeline::Stalls) -> u64| {
        p.stalls.iter().map(move |(k, v)| ([("policy", *k)], f(v)))
    };
    w.counters(
        "stall_assigned_busy",
        "Blocks a policy gave to a busy worker",
        stalls(|v| v.assigned_busy),
    )?;
    w.counters(
        "stall_no_idle_worker",
        "Tasks that waited for an idle worker",
        stalls(|v| v.no_idle_worker),
    )?;
    w.counters(
        "stall_queue_full",
        "Tasks that waited for room in a worker's queue",
        stalls(|v| v.queue_full),
    )?;
    let o = &p.order;
    w.counter(
        "order_violations_before",
        "Completions out of flow order",
        o.violations_before,
    )?;
    w.counter(
        "order_violations_after",
        "Transmissions out of flow order",
        o.violations_after,
    )?;
    w.counter("order_held", "Packets held by the reorder window", o.held)?;
    w.counter(
        "order_timeouts",
        "Held packets released by the timeout",
        o.released_by_timeout,
    )?;
    w.counter(
        "order_overflows",
        "Held packets released because the window was full",
        o.released_by_overflow,
    )?;
    w.counter(
        "bucket_steals",
        "Flow buckets moved to an idle worker",
        p.bucket_steals,
    )?;
    w.gauge(
        "rules_generation",
        "The rule set in use (1 at start, +1 per swap)",
        p.rules_generation as f64,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classifier::build_classifier;
    use crate::packet::udp4_frame;
    use crate::pipeline::{DispatchMode, Pipeline, PipelineConfig};
    use crate::rules::RuleSet;
    use crate::signatures::Signatures;
    use crate::stats::Totals;
    use crate::verdict::{DropReason, Fragments, OnPanic, OnSignature};
    use crate::work::{Tables, WorkPolicy};
    use std::time::Duration;

    #[test]
    fn a_scrape_shows_the_latest_counters_with_reasons_workers_and_policies() {
        let tables = Arc::new(Tables {
            classifier: build_classifier(
                RuleSet::from_toml_str("default = \"drop\"", "t").unwrap(),
                netsched_core::classify::acl::ClassifierKind::TupleMerge,
                &Default::default(),
            )
            .unwrap(),
            signatures: Signatures::empty(),
            generation: 1,
        });
        let cfg = PipelineConfig {
            workers: 2,
            block_size: 64,
            worker_queue: 4,
            reorder_window: 16,
            reorder_timeout_ns: 1_000_000_000,
            max_flows: 64,
            mode: DispatchMode::parse("fcfs").unwrap(),
            work: WorkPolicy {
                on_signature: OnSignature::Drop,
                on_panic: OnPanic::Drop,
                accept_non_ip: true,
                fragments: Fragments::Drop,
                fault_panic_on: None,
            },
            pin: false,
        };
        let mut pool = netsched_sys::FramePool::new(4);
        let mut p = Pipeline::start(cfg, tables, &pool).unwrap();
        let len = pool.fill(
            0,
            &udp4_frame([10, 0, 0, 1], [10, 0, 0, 2], 1, 2, &[0; 200]),
        );
        p.submit(&mut pool, 0, len);
        let mut out = Vec::new();
        while out.is_empty() {
            p.wait(Duration::from_millis(5), &mut pool, &mut out);
        }
        let mut totals = Totals {
            received: 1,
            ..Totals::default()
        };
        totals.drop(DropReason::Rule, 1);
        totals.port = netsched_sys::PortBackend::Xdp;
        totals.xdp_drops[0].rx_ring_full = 3;
        let latest = Arc::new(Latest::new());
        latest.publish(totals.line(5, 0, p.stats()));
        let devs = ["fin0".to_string(), String::new()];
        let text = netsched_metrics::render(&registry(latest, devs));
        for want in [
            "netsched_filter_received_total 1",
            "netsched_filter_dropped_total{reason=\"rule\"} 1",
            "netsched_filter_dropped_total{reason=\"worker_panic\"} 0",
            "netsched_filter_identity_failures_total 0",
            "netsched_filter_worker_blocks_total{worker=\"1\"}",
            "netsched_filter_stall_no_idle_worker_total{policy=\"fcfs\"}",
            "netsched_filter_rules_generation 1",
            "netsched_filter_port_backend{backend=\"xdp\"} 1",
            "netsched_filter_xdp_drops_total{dev=\"fin0\",reason=\"rx_ring_full\"} 3",
            "netsched_filter_xdp_ring_empty_total{dev=\"fin0\",ring=\"tx\"} 0",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
        // No output: no series labelled with an empty interface name.
        assert!(!text.contains("dev=\"\""), "{text}");
        let blocks: u64 = p.stats().workers.iter().map(|w| w.blocks).sum();
        assert_eq!(blocks, 4, "a 242-byte frame is four 64-byte blocks");
        p.stop(&mut pool);
    }

    /// Two fragments of one datagram and an unfragmented DF packet through a running pipeline,
    /// counted as the engine counts verdicts: under `drop` both fragments land under
    /// `fragment` in the stats line (also `show --json`) and the scrape; under `pass` none do.
    #[test]
    fn fragments_are_counted_under_their_own_reason_in_the_line_and_the_scrape() {
        use crate::packet::{ipv4_later_fragment, with_ipv4_fragment};
        use crate::verdict::Verdict;
        let (a, b) = ([10, 0, 0, 1], [10, 0, 0, 2]);
        let frames = [
            with_ipv4_fragment(&udp4_frame(a, b, 1, 6000, b"xxxxEVIL"), 0x2000),
            ipv4_later_fragment(a, b, 2, false, b"SIGxxxxx"),
            with_ipv4_fragment(&udp4_frame(a, b, 1, 6000, b"EVILSIG"), 0x4000),
        ];
        for (fragments, dropped) in [(Fragments::Drop, 2u64), (Fragments::Pass, 0)] {
            let tables = Arc::new(Tables {
                classifier: build_classifier(
                    RuleSet::from_toml_str("", "t").unwrap(),
                    netsched_core::classify::acl::ClassifierKind::TupleMerge,
                    &Default::default(),
                )
                .unwrap(),
                signatures: Signatures::parse("EVILSIG\n", "s").unwrap(),
                generation: 1,
            });
            let cfg = PipelineConfig {
                workers: 2,
                block_size: 64,
                worker_queue: 4,
                reorder_window: 16,
                reorder_timeout_ns: 1_000_000_000,
                max_flows: 64,
                mode: DispatchMode::parse("fcfs").unwrap(),
                work: WorkPolicy {
                    on_signature: OnSignature::Drop,
                    on_panic: OnPanic::Drop,
                    accept_non_ip: true,
                    fragments,
                    fault_panic_on: None,
                },
                pin: false,
            };
            let mut pool = netsched_sys::FramePool::new(frames.len());
            let mut p = Pipeline::start(cfg, tables, &pool).unwrap();
            for (slot, f) in frames.iter().enumerate() {
                let len = pool.fill(slot as u32, f);
                p.submit(&mut pool, slot as u32, len);
            }
            let mut out = Vec::new();
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while out.len() < frames.len() && std::time::Instant::now() < deadline {
                p.wait(Duration::from_millis(5), &mut pool, &mut out);
            }
            assert_eq!(out.len(), frames.len(), "{fragments:?}");
            let mut totals = Totals {
                received: frames.len() as u64,
                ..Totals::default()
            };
            for r in &out {
                match r.verdict {
                    Verdict::Forward { .. } => totals.forwarded += 1,
                    Verdict::Drop(reason) => totals.drop(reason, 1),
                }
            }
            // The DF packet is whole: its signature is seen under either setting.
            assert_eq!(totals.drops.get(&DropReason::Signature), Some(&1));
            let line = totals.line(5, 0, p.stats());
            assert!(line.identity_holds);
            let json = serde_json::to_value(&line).unwrap();
            let bad = netsched_util::json_units::violations(&json);
            assert!(bad.is_empty(), "{bad:?}\n{json}");
            assert_eq!(
                json["drops"]["fragment"].as_u64().unwrap_or(0),
                dropped,
                "{fragments:?}: {json}"
            );
            assert_eq!(line.forwarded, 2 - dropped, "{fragments:?}");
            let latest = Arc::new(Latest::new());
            latest.publish(line);
            let text = netsched_metrics::render(&registry(latest, Default::default()));
            let want = format!("netsched_filter_dropped_total{{reason=\"fragment\"}} {dropped}");
            assert!(text.contains(&want), "missing {want:?} in\n{text}");
            p.stop(&mut pool);
        }
    }
}

//! One configuration of `vm-delay --real` (a scheduler at a domain count): the switch started
//! traced on the scenario's budget, the probes and the application traffic driven, and what
//! they measured gathered per tier in the simulator's shape ([`RealRun`]).

use super::rig::{switch_config, Bed, EXT_IP};
use super::trace::{tier_arrivals, trace_capacity, trace_findings, write_trace, TraceFindings};
use super::traffic::{
    bulk_schedule, bulk_traffic, parse_ping, start_pings, traffic_start, Pings, PING_GRACE_S,
};
use crate::experiments::vm_delay::{TierResult, VmConfig};
use anyhow::{bail, Result};
use netsched_core::{Nanos, MS, SEC};
use netsched_vswitch::{spawn_in_netns_traced, SwitchStats};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// One real run, per tier, in the simulator's shape (so the two are summarised alike).
pub struct RealRun {
    pub scheduler: String,
    pub domains: usize,
    pub tiers: Vec<TierResult>,
    pub stats: SwitchStats,
    /// Share of the traffic time (%) a thread of this process that asks to wake every
    /// millisecond spent late beyond that millisecond: how late the host ran this process's
    /// threads, whether or not frames waited (the switch's own count is `budget_lost_pct`).
    pub host_late_pct: f64,
    /// The longest of those late wake-ups, ms (a stall that long fills a vif queue of a port
    /// that sends faster than queue / stall).
    pub host_max_late_ms: f64,
    /// Share of the budget's on-time over the traffic time (%) the switch itself lost while
    /// frames waited for it (its `budget_lost_ns`): by this share, the load the discipline
    /// saw exceeded the one offered.
    pub budget_lost_pct: f64,
    /// The tag of the testbed it ran in (its namespaces' names contain it).
    pub testbed: String,
    /// What the switch's trace says about this run ([`TraceFindings`]).
    pub trace: TraceFindings,
}

/// Lateness the switch's budget absorbs (its credit after a late wake-up): the share of time
/// beyond it is the share of its budget a busy host takes while the switch is backlogged.
const LATE_SLACK: Nanos = MS;

/// Runs `cfg` on `bed` for `dur` at `pps` packets/s while on, with the application traffic of
/// `seed` and `ping -l preload`.
pub(super) fn run_one(
    bed: &mut Bed,
    cfg: &VmConfig,
    pps: u64,
    dur: Nanos,
    seed: u64,
    preload: u32,
) -> Result<RealRun> {
    if !(1..=3).contains(&preload) {
        bail!("ping preload {preload}: must be 1..=3");
    }
    let preload = preload.to_string();
    // The simulator's application traffic for this seed (computed before anything starts).
    let schedule = bulk_schedule(cfg, seed)?;
    // One clock origin for the switch's budget periods, its trace and the traffic, as in the
    // simulator: the traffic starts at an on period's start (below), and the replay of the
    // trace runs on the same phase.
    let origin = netsched_sys::now_ns();
    let mut swcfg = switch_config(bed, cfg, pps)?;
    swcfg.budget_origin = Some(origin);
    let sw = spawn_in_netns_traced(&bed.sw, swcfg, trace_capacity(dur))?;
    // Warm up ARP (every guest learns the external host, the switch learns every guest).
    for (ns, _, _) in &bed.guests {
        let _ = bed
            .tb
            .exec(ns, "ping", &["-n", "-q", "-c", "1", "-W", "1", EXT_IP]);
    }
    let pings = start_pings(bed, cfg, dur, &preload)?;
    let started = std::time::Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let watch = crate::real::watch_lateness(Arc::clone(&stop), LATE_SLACK);
    let start = traffic_start(origin, cfg.budget_cycle(), netsched_sys::now_ns() + MS);
    let sent = bulk_traffic(bed, schedule, dur, start);
    stop.store(true, Ordering::Relaxed);
    let (host_late_pct, host_max_late_ms) = watch.join().unwrap_or((f64::NAN, f64::NAN));
    let sent_log = sent?;
    let sent = &sent_log.frames;
    // Let the pings reach their deadline and print their summaries.
    let deadline = std::time::Duration::from_secs(dur / SEC + PING_GRACE_S)
        + std::time::Duration::from_millis(300);
    netsched_testbed::sleep_unless_interrupted(deadline.saturating_sub(started.elapsed()))?;
    for (pid, _) in &pings.procs {
        let _ = bed.tb.stop(*pid, std::time::Duration::from_millis(500));
    }
    let (stats, trace) = sw.stop()?;
    let mut findings = trace_findings(&trace, cfg, dur)?;
    findings.arrivals = tier_arrivals(&trace, cfg, seed, &sent_log)?;
    if let Some(dir) = std::env::var_os("NETSCHED_VM_DELAY_TRACE_DIR") {
        write_trace(Path::new(&dir), cfg, &trace)?;
    }
    let tiers = tier_results(cfg, &pings, &stats, sent);
    let budget_lost_pct = 100.0 * (stats.budget_lost_ns as f64 / 1e9)
        / (dur as f64 / SEC as f64 * (1.0 - cfg.cpu_busy)).max(f64::MIN_POSITIVE);
    Ok(RealRun {
        scheduler: cfg.scheduler.clone(),
        domains: cfg.domains,
        tiers,
        stats,
        host_late_pct,
        host_max_late_ms,
        budget_lost_pct,
        testbed: bed.tb.tag().to_string(),
        trace: findings,
    })
}

/// Per tier, what the pings measured (RTTs, probes sent and lost) and the frames sent and lost
/// besides them (the switch's drops on a port beyond its lost probes), with the bitmap's
/// longest pass-over.
fn tier_results(
    cfg: &VmConfig,
    pings: &Pings,
    stats: &SwitchStats,
    sent: &[u64],
) -> Vec<TierResult> {
    let per_tier = cfg.domains / cfg.tiers.len();
    let counts = &pings.counts;
    let mut tiers = vec![TierResult::default(); cfg.tiers.len()];
    for (i, (_, path)) in pings.procs.iter().enumerate() {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let (rtts, tx, rx) = parse_ping(&text, counts[i]);
        let t = &mut tiers[i / per_tier];
        t.probe.sent += tx;
        t.probe.delivered += rx;
        t.probe.lost += tx.saturating_sub(rx);
        t.latencies_ms.extend(rtts);
        let p = &stats.ports[i];
        // The switch does not tell probes from bulk frames: its drops beyond the lost probes
        // are bulk losses.
        let bulk_lost = (p.dropped() - p.dropped_shutdown).saturating_sub(tx.saturating_sub(rx));
        t.data.sent += sent[i];
        t.data.lost += bulk_lost.min(sent[i]);
        t.data.delivered += sent[i] - bulk_lost.min(sent[i]);
        t.max_rounds_passed = t.max_rounds_passed.max(p.max_rounds_passed);
        t.bound_rounds = t.bound_rounds.max(p.bound_rounds);
    }
    tiers
}

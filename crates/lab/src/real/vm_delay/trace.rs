//! What the switch's trace says about a `vm-delay --real` run: per tier the frames read and
//! dropped at a full vif queue, the drops the model makes fed the same arrivals
//! ([`replay`]), how clumped the arrivals were, and the arrival process three ways (the
//! simulator's, the traffic generator's, the switch's reads); and the raw trace as CSV.

use super::traffic::Sent;
use crate::experiments::vm_delay::arrivals::{
    arrival_stats, clumps, lateness, ArrivalStats, Lateness, SentBurst,
};
use crate::experiments::vm_delay::{generated_arrivals_with_kind, replay, Kind, VmConfig};
use anyhow::{Context, Result};
use netsched_core::{Nanos, MS, SEC};
use netsched_vswitch::{Trace, TraceKind};
use std::ops::Range;
use std::path::Path;

/// Per tier, from the switch's trace of this run: the vif-queue drops the switch made, the
/// drops the model makes with the same arrivals ([`replay`]), and how clumped the arrivals
/// were (frames of one port read in one loop turn).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct TraceFindings {
    /// Events the bounded trace could not hold (0: the figures below cover the whole run).
    pub overflow: u64,
    /// Per tier: frames read, and dropped at a full vif queue, by the switch.
    pub read: Vec<u64>,
    pub switch_dropped: Vec<u64>,
    /// Per tier: dropped by the model fed the same arrivals (same discipline, queue, budget).
    pub replay_dropped: Vec<u64>,
    /// Per tier: the largest number of one port's frames read in one loop turn.
    pub max_clump: Vec<u64>,
    /// Per tier: frames that arrived in clumps larger than the largest application burst
    /// the traffic sends (2·mean − 1), i.e. bursts merged by a late sender or a late switch.
    pub merged: Vec<u64>,
    /// Per tier: the arrival process three ways ([`TierArrivals`]).
    pub arrivals: Vec<TierArrivals>,
}

/// One tier's arrival process three ways, for the same configuration and seed: what the
/// simulator generates, what the real run's traffic generator sent, what the switch read
/// (docs/vm-delay-real.md, "The simulator's traffic").
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct TierArrivals {
    /// The simulator's arrivals (every packet: probes, data, streams) ...
    pub sim: ArrivalStats,
    /// ... and its application data alone (what `sent` holds).
    pub sim_data: ArrivalStats,
    /// The generator's application bursts, on the switch's clock (no probes, no streams).
    pub sent: ArrivalStats,
    /// How late those bursts left against their schedule.
    pub sent_lateness: Lateness,
    /// What the switch read (every frame), from its trace.
    pub read: ArrivalStats,
    /// From a burst's send to the switch's first read of its port at or after it (less
    /// 0.1 ms: a loop turn's time is taken before it reads), ms: median, p99, largest.
    pub read_delay_ms: [f64; 3],
    /// Bursts the generator's bounded log could not hold (0: `sent` covers the whole run).
    pub sent_overflow: u64,
}

impl TraceFindings {
    /// The frames of tiers `tiers` (together) the model dropped with the same arrivals, % of
    /// the frames read.
    pub fn replay_loss_pct(&self, tiers: Range<usize>) -> f64 {
        pct(&self.replay_dropped, &self.read, tiers)
    }

    /// The frames of tiers `tiers` (together) the switch dropped at a full vif queue, % of the
    /// frames read.
    pub fn switch_loss_pct(&self, tiers: Range<usize>) -> f64 {
        pct(&self.switch_dropped, &self.read, tiers)
    }
}

/// `part` over `whole` summed over `tiers`, %; 0 when nothing was read.
fn pct(part: &[u64], whole: &[u64], tiers: Range<usize>) -> f64 {
    let sum = |v: &[u64]| v.get(tiers.clone()).map_or(0, |v| v.iter().sum::<u64>());
    match sum(whole) {
        0 => 0.0,
        w => 100.0 * sum(part) as f64 / w as f64,
    }
}

/// Per tier, the arrivals three ways ([`TierArrivals`]) of a run of `cfg` with `seed`.
pub(super) fn tier_arrivals(
    trace: &Trace,
    cfg: &VmConfig,
    seed: u64,
    sent: &Sent,
) -> Result<Vec<TierArrivals>> {
    let per_tier = cfg.domains / cfg.tiers.len().max(1);
    let largest_burst = (2.0 * cfg.data_burst - 1.0).round().max(1.0) as u64;
    // The switch's budget cycle, counted from the trace's origin (its budget origin).
    let cycle = cfg.budget_cycle();
    let generated = generated_arrivals_with_kind(cfg, seed)?;
    let sim_all: Vec<(Nanos, usize)> = generated.iter().map(|&(t, v, _)| (t, v)).collect();
    let sim_data: Vec<(Nanos, usize)> = generated
        .iter()
        .filter(|a| a.2 == Kind::Data)
        .map(|&(t, v, _)| (t, v))
        .collect();
    let read = trace.arrivals();
    // The generator's bursts on the switch's clock (sent before the switch started: none).
    let origin = trace.origin();
    let bursts: Vec<SentBurst> = sent
        .bursts
        .iter()
        .map(|b| SentBurst {
            scheduled: b.scheduled.saturating_sub(origin),
            sent: b.sent.saturating_sub(origin),
            ..*b
        })
        .collect();
    let sent_clumps: Vec<_> = bursts
        .iter()
        .map(|b| crate::experiments::vm_delay::arrivals::Clump {
            t: b.sent,
            port: b.port,
            frames: b.frames,
        })
        .collect();
    // Per port, the times the switch read a frame (in order).
    let mut read_at: Vec<Vec<Nanos>> = vec![Vec::new(); cfg.domains];
    for &(t, p) in &read {
        if let Some(v) = read_at.get_mut(p) {
            v.push(t);
        }
    }
    let mut out = Vec::new();
    for t in 0..cfg.tiers.len() {
        let ports = t * per_tier..(t + 1) * per_tier;
        let stats = |a: &[(Nanos, usize)]| {
            arrival_stats(
                &clumps(a, ports.clone()),
                ports.clone(),
                largest_burst,
                cycle,
            )
        };
        let mut delays: Vec<f64> = bursts
            .iter()
            .filter(|b| ports.contains(&b.port))
            .filter_map(|b| {
                let r = &read_at[b.port];
                let from = b.sent.saturating_sub(100_000);
                let i = r.partition_point(|&x| x < from);
                r.get(i).map(|&x| x.saturating_sub(from) as f64 / MS as f64)
            })
            .collect();
        netsched_report::stats::sort(&mut delays);
        let q = |q: f64| netsched_report::stats::percentile(&delays, q).unwrap_or(f64::NAN);
        out.push(TierArrivals {
            sim: stats(&sim_all),
            sim_data: stats(&sim_data),
            sent: arrival_stats(&sent_clumps, ports.clone(), largest_burst, cycle),
            sent_lateness: lateness(&bursts, ports.clone()),
            read: stats(&read),
            read_delay_ms: [q(0.5), q(0.99), delays.last().copied().unwrap_or(f64::NAN)],
            sent_overflow: sent.overflow,
        });
    }
    Ok(out)
}

/// One line per tier of [`TierArrivals`] for the run's stderr.
pub(super) fn arrivals_lines(f: &TraceFindings, names: &[String]) -> String {
    let one = |a: &ArrivalStats| {
        let w: Vec<String> = a.window_max.iter().map(|w| format!("{}", w.max)).collect();
        let aw: Vec<String> = a
            .all_ports_window_max
            .iter()
            .map(|w| w.to_string())
            .collect();
        format!(
            "{} frames/{} clumps (mean {:.1}, p99 {:.0}, max {}, merged {}), gap p5 {:.1} ms, \
             <10 ms {:.1}%, window max 10/50/100/200 ms {} (tier {}), off-phase {:.1}%",
            a.frames,
            a.clumps,
            a.clump_mean,
            a.clump_p99,
            a.clump_max,
            a.merged_frames,
            a.gap_p5_ms,
            a.gaps_under_10ms_pct,
            w.join("/"),
            aw.join("/"),
            a.off_phase_pct
        )
    };
    let mut s = String::new();
    for (a, name) in f.arrivals.iter().zip(names) {
        let l = &a.sent_lateness;
        s += &format!(
            "  {name} sim (all): {}\n  {name} sim (data): {}\n  {name} sent (data): {}\n    \
             late p50 {:.2} / p99 {:.2} / max {:.1} ms, > 1 ms {:.2}%, caught up {} of {}; \
             read delay p50 {:.2} / p99 {:.2} / max {:.1} ms\n  {name} read (all): {}\n",
            one(&a.sim),
            one(&a.sim_data),
            one(&a.sent),
            l.p50_ms,
            l.p99_ms,
            l.max_ms,
            l.late_1ms_pct,
            l.caught_up,
            l.bursts,
            a.read_delay_ms[0],
            a.read_delay_ms[1],
            a.read_delay_ms[2],
            one(&a.read),
        );
    }
    s
}

/// The findings of `trace` for a run of `cfg` (ports in tier order, `per_tier` per tier).
pub(super) fn trace_findings(trace: &Trace, cfg: &VmConfig, dur: Nanos) -> Result<TraceFindings> {
    let per_tier = cfg.domains / cfg.tiers.len().max(1);
    let nt = cfg.tiers.len();
    let mut f = TraceFindings {
        overflow: trace.overflow(),
        read: vec![0; nt],
        switch_dropped: vec![0; nt],
        replay_dropped: vec![0; nt],
        max_clump: vec![0; nt],
        merged: vec![0; nt],
        arrivals: Vec::new(),
    };
    let arrivals = trace.arrivals();
    let last = arrivals.last().map_or(0, |a| a.0);
    // The switch's budget: on/off periods that alternate at their means.
    let rcfg = VmConfig {
        duration: last.max(dur) + SEC,
        slice_spread: 0.0,
        ..cfg.clone()
    };
    let rep = replay(&rcfg, &arrivals)?;
    for (port, (read, dropped, _)) in trace.per_port(cfg.domains).into_iter().enumerate() {
        let t = port / per_tier;
        f.read[t] += read;
        f.switch_dropped[t] += dropped;
        f.replay_dropped[t] += rep[port].dropped;
    }
    // Clumps: consecutive arrivals of one port at one time (one recvmmsg of one turn).
    let largest_burst = (2.0 * cfg.data_burst - 1.0).round().max(1.0) as u64;
    let mut run: Vec<(Nanos, u64)> = vec![(u64::MAX, 0); cfg.domains];
    let close = |f: &mut TraceFindings, port: usize, n: u64| {
        let t = port / per_tier;
        f.max_clump[t] = f.max_clump[t].max(n);
        if n > largest_burst {
            f.merged[t] += n;
        }
    };
    for &(t, port) in &arrivals {
        if run[port].0 == t {
            run[port].1 += 1;
        } else {
            let n = run[port].1;
            close(&mut f, port, n);
            run[port] = (t, 1);
        }
    }
    for (port, &(_, n)) in run.iter().enumerate() {
        close(&mut f, port, n);
    }
    Ok(f)
}

/// Trace entries to hold for a run of `dur`: every frame read and sent at up to 20 000 frames/s
/// (the scenario's 18 guests offer about 2 300/s; a flooding run is cut off, and says so).
pub(super) fn trace_capacity(dur: Nanos) -> usize {
    ((dur / SEC + 5) * 20_000) as usize
}

/// The raw trace as CSV (`t_ns,port,kind`), for a closer look (`NETSCHED_VM_DELAY_TRACE_DIR`).
pub(super) fn write_trace(dir: &Path, cfg: &VmConfig, trace: &Trace) -> Result<()> {
    use std::io::Write;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("trace-{}-{}.csv", cfg.scheduler, cfg.domains));
    let mut w = std::io::BufWriter::new(
        std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?,
    );
    writeln!(w, "t_ns,port,kind")?;
    for e in trace.events() {
        let k = match e.kind {
            TraceKind::Queued => "q",
            TraceKind::Dropped => "d",
            TraceKind::Sent => "s",
        };
        writeln!(w, "{},{},{k}", e.t, e.port)?;
    }
    w.flush()?;
    Ok(())
}

//! The report of `vm-delay --real`: paper | sim | real per scheduler, guests and tier (P2 prints
//! plots only, so its column gives its words), the runs' figures as results and `real.csv`,
//! the checks ([`super::checks`]), the charts and the method's note.

use super::checks::{checks, Runs};
use super::run::RealRun;
use super::traffic::BULK_FRAME;
use crate::experiments::vm_delay::{latency_cdf_chart, paper_says, Setup, TierResult};
use anyhow::{Context, Result};
use netsched_core::{Nanos, SEC};
use netsched_report::{csv, svg, Comparison, ExperimentOutput, Figure, Results, Run};
use serde_json::{json, Value};
use std::path::Path;

/// Writes the real run's files into `out` and returns its report.
#[allow(clippy::too_many_arguments)]
pub(super) fn output(
    setup: &Setup,
    params: &Value,
    seed: u64,
    out: &Path,
    dur: Nanos,
    pps: u64,
    runs: &[RealRun],
    sims: &[Vec<TierResult>],
) -> Result<ExperimentOutput> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let thr = setup.base.threshold_ms;
    let names: Vec<&str> = setup.base.tiers.iter().map(|t| t.name.as_str()).collect();
    let mut results = Results::new("vm-delay", "real", seed, params.clone());
    let (rows, comparisons, table) = paper_sim_real(setup, runs, sims);
    for r in runs {
        results.runs.push(run_record(r, &names, thr, dur, pps));
    }
    write_real_csv(out, &rows)?;
    let checks = checks(&Runs {
        setup,
        runs,
        sims,
        dur,
    })?;
    let figures = charts(runs, &names, thr, out)?;
    Ok(ExperimentOutput {
        results,
        comparisons,
        checks,
        figures,
        notes: vec![method_note(dur, pps), table],
    })
}

/// Per scheduler, guests and tier: the CSV row, the comparison, and the markdown table's line
/// (paper | sim | real).
fn paper_sim_real(
    setup: &Setup,
    runs: &[RealRun],
    sims: &[Vec<TierResult>],
) -> (Vec<Vec<String>>, Vec<Comparison>, String) {
    let thr = setup.base.threshold_ms;
    let names: Vec<&str> = setup.base.tiers.iter().map(|t| t.name.as_str()).collect();
    let mut rows = Vec::new();
    let mut comparisons = Vec::new();
    let nmax_all = setup.counts.iter().copied().max().unwrap_or(0);
    let mut table = format!(
        "**Paper | sim | real** (probe p99 ms / share above {thr} ms % / loss of all packets %; \
         P2 prints plots only, so its column gives its words):\n\n\
         | scheduler | guests | tier | paper (P2) | sim | real |\n|---|---|---|---|---|---|\n"
    );
    for (r, sim) in runs.iter().zip(sims) {
        for (ti, (t, s)) in r.tiers.iter().zip(sim).enumerate() {
            rows.push(vec![
                r.scheduler.clone(),
                r.domains.to_string(),
                names[ti].to_string(),
                format!("{:.2}", t.quantile_ms(0.5)),
                format!("{:.2}", t.quantile_ms(0.95)),
                format!("{:.2}", t.quantile_ms(0.99)),
                format!("{:.2}", t.share_above_pct(thr)),
                format!("{:.2}", t.probe.loss_pct()),
                format!("{:.2}", t.loss_pct()),
                format!("{:.2}", s.quantile_ms(0.99)),
                format!("{:.2}", s.share_above_pct(thr)),
                format!("{:.2}", s.loss_pct()),
                t.max_rounds_passed.to_string(),
                t.bound_rounds.to_string(),
            ]);
            comparisons.push(Comparison {
                quantity: format!(
                    "{} {} guests, {} tier: probe p99 ms / share > {thr} ms % / loss %",
                    r.scheduler, r.domains, names[ti]
                ),
                paper: paper_says(&r.scheduler, r.domains, nmax_all, ti, names.len()),
                ours: format!(
                    "sim {:.1} / {:.1} / {:.2}; real {:.1} / {:.1} / {:.2}",
                    s.quantile_ms(0.99),
                    s.share_above_pct(thr),
                    s.loss_pct(),
                    t.quantile_ms(0.99),
                    t.share_above_pct(thr),
                    t.loss_pct()
                ),
            });
            table += &format!(
                "| {} | {} | {} | {} | {:.1} / {:.2} / {:.2} | {:.1} / {:.2} / {:.2} |\n",
                r.scheduler,
                r.domains,
                names[ti],
                paper_says(&r.scheduler, r.domains, nmax_all, ti, names.len()),
                s.quantile_ms(0.99),
                s.share_above_pct(thr),
                s.loss_pct(),
                t.quantile_ms(0.99),
                t.share_above_pct(thr),
                t.loss_pct()
            );
        }
    }
    (rows, comparisons, table)
}

/// One run's configuration and per-tier figures, as a run of the results.
fn run_record(r: &RealRun, names: &[&str], thr: f64, dur: Nanos, pps: u64) -> Run {
    Run {
        config: json!({ "scheduler": r.scheduler, "domains": r.domains,
                            "duration_s": dur / SEC, "packet_rate": pps,
                            "testbed": r.testbed }),
        metrics: json!({
            "tiers": r.tiers.iter().enumerate().map(|(i, t)| json!({
                "tier": names[i],
                "probe_p50_ms": t.quantile_ms(0.5), "probe_p95_ms": t.quantile_ms(0.95),
                "probe_p99_ms": t.quantile_ms(0.99), "above_threshold_pct": t.share_above_pct(thr),
                "probe_sent": t.probe.sent, "probe_lost": t.probe.lost,
                "bulk_sent": t.data.sent, "bulk_lost": t.data.lost,
                "loss_pct": t.loss_pct(), "max_rounds_passed": t.max_rounds_passed,
                "bound_rounds": t.bound_rounds,
            })).collect::<Vec<_>>(),
            "host_late_pct": r.host_late_pct, "host_max_late_ms": r.host_max_late_ms,
            "budget_lost_pct": r.budget_lost_pct,
            "trace": r.trace,
            "switch": r.stats,
        }),
    }
}

/// The rows of [`paper_sim_real`] as `real.csv`.
fn write_real_csv(out: &Path, rows: &[Vec<String>]) -> Result<()> {
    csv::write_table(
        &out.join("real.csv"),
        &[
            "scheduler",
            "domains",
            "tier",
            "real_p50_ms",
            "real_p95_ms",
            "real_p99_ms",
            "real_above_pct",
            "real_probe_loss_pct",
            "real_loss_pct",
            "sim_p99_ms",
            "sim_above_pct",
            "sim_loss_pct",
            "max_rounds_passed",
            "bound_rounds",
        ],
        rows,
    )
}

/// The charts: probe p99 per tier per run, and per run the probe RTT CDF of every tier.
fn charts(runs: &[RealRun], names: &[&str], thr: f64, out: &Path) -> Result<Vec<Figure>> {
    // Chart: probe p99 per tier, real, per (scheduler, guests).
    let series: Vec<(String, Vec<f64>)> = runs
        .iter()
        .map(|r| {
            (
                format!("{} {}", r.scheduler, r.domains),
                r.tiers.iter().map(|t| t.quantile_ms(0.99)).collect(),
            )
        })
        .collect();
    svg::bar_chart(
        "vm-delay --real: probe RTT p99 per tier",
        "ms",
        names,
        &series,
        &out.join("real_p99.svg"),
    )?;
    let mut figures = vec![netsched_report::Figure {
        title: "Probe RTT p99 per tier (real)".into(),
        file: "real_p99.svg".into(),
    }];
    for r in runs {
        let samples: Vec<(String, &[f64])> = names
            .iter()
            .zip(&r.tiers)
            .map(|(n, t)| (n.to_string(), t.latencies_ms.as_slice()))
            .collect();
        let file = format!("real-cdf-{}-{}.svg", r.scheduler, r.domains);
        latency_cdf_chart(
            &format!(
                "Probe RTT per tier (real) — {}, {} guests",
                r.scheduler, r.domains
            ),
            &samples,
            thr,
            &out.join(&file),
        )?;
        figures.push(netsched_report::Figure {
            title: format!(
                "Probe RTT CDF per tier (real), {}, {} guests (P2 Fig. 7/8; log latency axis)",
                r.scheduler, r.domains
            ),
            file,
        });
    }
    Ok(figures)
}

/// How the real run was made, and what its figures mean.
fn method_note(dur: Nanos, pps: u64) -> String {
    format!(
        "Real run through `netsched vswitch`: {} s per configuration, forwarding budget \
             {pps} packets/s = 1 / per_packet while on, off a `cpu_busy` share of the time in \
             periods around `slice` (strictly alternating at their means). \
             Probes are real ICMP echoes (`ping`), RTT = switch wait + return path; bulk frames \
             ({BULK_FRAME} B) carry the data bursts and High streams. Bulk loss = the switch's \
             drops on the port minus the lost probes. The sim column runs the same scenario \
             for the same duration with the same seed and the switch's budget shape (on/off \
             periods at their means; the simulated lab draws them at random, ±50%), and the \
             traffic starts at an on period's start of the switch's budget, as at the \
             simulator's time 0. `budget_lost_pct`: the share of the on-time the switch lost \
             to late wake-ups while frames waited (the load the discipline saw was higher by \
             that share); `host_late_pct`: the share of the traffic time a 1 ms sleeper in \
             this process woke more than 1 ms late. The machine is shared (2 cores), so \
             figures vary between runs.",
        dur / SEC
    )
}

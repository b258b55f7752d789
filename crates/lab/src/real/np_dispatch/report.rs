//! The report of `np-dispatch --real`: per claim paper | sim | real (P1 prints plots, so its
//! column gives its words), per run the model at this host's shape beside the measurement,
//! `real.csv`, the chart of static RR's work share, and how the run was made.

use super::calibrate::BlockCosts;
use super::checks::{checks, Ordering};
use super::decide::{imbalance, sop_workers, top_share, Decided};
use super::params::RealParams;
use super::run::RealRun;
use crate::experiments::np_dispatch::model::Params;
use anyhow::Result;
use netsched_report::{csv, svg, Comparison, ExperimentOutput, Figure, Results, Run};
use serde_json::{json, Value};
use std::path::Path;

/// Writes the files into `out` and returns the report.
#[allow(clippy::too_many_arguments)]
pub(super) fn output(
    _p: &Params,
    params: &Value,
    rp: &RealParams,
    seed: u64,
    out: &Path,
    cores: usize,
    costs: &BlockCosts,
    decided: &Decided,
    runs: &[RealRun],
) -> Result<ExperimentOutput> {
    let mut results = Results::new("np-dispatch", "real", seed, params.clone());
    for r in runs {
        results.runs.push(Run {
            config: json!({ "policy": r.policy, "packet_bytes": r.size, "workers": r.workers,
                             "rules": rp.rules, "classifier": rp.classifier,
                             "block_rate": rp.block_rate }),
            metrics: json!({
                "idle_pct": r.idle_pct(), "rate_mbps": r.rate_mbps(),
                "sop_workers": r.sop_workers(),
                "sop_share": top_share(&r.work_ns(), &r.sops(), sop_workers(r.workers, r.size)),
                "work_imbalance": imbalance(&r.work_ns()),
                "sent": r.sent, "refused": r.refused, "arrived": r.arrived,
                "out_of_order_at_receiver": r.out_of_order_at_receiver,
                "receiver_kernel_drops": r.receiver_kernel_drops, "span_s": r.span_s,
                "host_late_pct": r.host_late_pct, "host_max_late_ms": r.host_max_late_ms,
                "filter": r.filter,
            }),
        });
    }
    write_csv(out, runs, decided)?;
    let (checks, orderings) = checks(runs, decided);
    let figures = chart(out, rp, runs)?;
    let comparisons = orderings
        .iter()
        .map(|o| Comparison {
            quantity: o.name.to_string(),
            paper: "P1 §III (plots; its words)".into(),
            ours: format!(
                "sim {}; real {}",
                o.sim.as_ref().map_or("—".into(), verdict),
                verdict(&o.check)
            ),
        })
        .collect();
    Ok(ExperimentOutput {
        results,
        comparisons,
        checks,
        figures,
        notes: vec![
            method_note(rp, cores, costs, decided),
            claims_table(decided, &orderings, runs),
            runs_table(decided, runs),
        ],
    })
}

fn verdict(c: &netsched_report::Check) -> String {
    format!(
        "{} ({})",
        if c.passed { "holds" } else { "fails" },
        c.detail
    )
}

/// P1's claims: paper | sim (this host's shape) | real | decided here or why not.
fn claims_table(d: &Decided, orderings: &[Ordering], runs: &[RealRun]) -> String {
    let mut t = String::from(
        "**Paper | sim | real, per claim** (sim: the model at this host's shape with block costs \
         measured here; real: `netsched filter`):\n\n| claim | paper (P1) | sim | real | decided here |\n|---|---|---|---|---|\n",
    );
    for s in &d.share {
        t += &format!(
            "| static RR's SOP workers carry more than their share at {} B | SOPs cluster, idle time rises at 256/512 B (§III) | {:.2} (fair {:.2}) | {} | {} |\n",
            s.size,
            s.sim_share,
            s.fair,
            runs.iter()
                .find(|r| r.policy == "static_rr" && r.size == s.size)
                .map_or("—".to_string(), |r| format!(
                    "{:.2}",
                    top_share(&r.work_ns(), &r.sops(), s.sop_workers)
                )),
            s.not_decided.as_deref().map_or("yes (checks)".to_string(), |w| format!("no: {w}"))
        );
    }
    for o in orderings {
        t += &format!(
            "| {} | {} | {} | {} | {} |\n",
            o.name,
            o.check.claim.replace('|', "/"),
            o.sim
                .as_ref()
                .map_or("—".into(), |c| if c.passed { "holds" } else { "fails" }
                    .to_string()),
            verdict(&o.check).replace('|', "/"),
            d.orderings_not_decided
                .as_deref()
                .map_or("yes".to_string(), |w| format!(
                    "needs more cores: {w}. Decide it {}",
                    d.bigger_machine
                ))
        );
    }
    t
}

/// Per run: the model at this host's shape | the measurement.
fn runs_table(d: &Decided, runs: &[RealRun]) -> String {
    let mut t = String::from(
        "**Per run** (sim: idle % / Mbit/s / SOP threads of the model at this host's shape; real: idle % / Mbit/s at the paced input / SOP workers / SOP workers' work share / worker imbalance, the busiest worker's work over the mean / order violations before the window):\n\n| policy | size | sim | real |\n|---|---|---|---|\n",
    );
    for r in runs {
        let sim = d
            .sim
            .get(&(r.policy.clone(), r.size as usize))
            .map_or("—".to_string(), |s| {
                format!("{:.1} / {:.0} / {}", s.idle_pct, s.rate_mbps, s.sop_threads)
            });
        t += &format!(
            "| {} | {} | {sim} | {:.1} / {:.0} / {} / {:.2} / {:.2} / {} |\n",
            r.policy,
            r.size,
            r.idle_pct(),
            r.rate_mbps(),
            r.sop_workers(),
            top_share(&r.work_ns(), &r.sops(), sop_workers(r.workers, r.size)),
            imbalance(&r.work_ns()),
            r.filter.pipeline.order.violations_before
        );
    }
    t
}

fn write_csv(out: &Path, runs: &[RealRun], d: &Decided) -> Result<()> {
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            let sim = d.sim.get(&(r.policy.clone(), r.size as usize));
            let f = &r.filter;
            vec![
                r.policy.clone(),
                r.size.to_string(),
                r.workers.to_string(),
                r.sent.to_string(),
                r.arrived.to_string(),
                f.forwarded.to_string(),
                f.dropped.to_string(),
                (f.kernel_drops + r.receiver_kernel_drops).to_string(),
                f.pipeline.order.violations_before.to_string(),
                f.pipeline.order.violations_after.to_string(),
                r.out_of_order_at_receiver.to_string(),
                format!("{:.2}", r.idle_pct()),
                format!("{:.1}", r.rate_mbps()),
                r.sop_workers().to_string(),
                format!(
                    "{:.3}",
                    top_share(&r.work_ns(), &r.sops(), sop_workers(r.workers, r.size))
                ),
                format!("{:.3}", imbalance(&r.work_ns())),
                sim.map_or(String::new(), |s| format!("{:.2}", s.idle_pct)),
                sim.map_or(String::new(), |s| format!("{:.1}", s.rate_mbps)),
                sim.map_or(String::new(), |s| s.sop_threads.to_string()),
                format!("{:.2}", r.host_late_pct),
            ]
        })
        .collect();
    csv::write_table(
        &out.join("real.csv"),
        &[
            "policy",
            "packet_bytes",
            "workers",
            "sent",
            "arrived",
            "forwarded",
            "dropped",
            "kernel_drops",
            "order_before_window",
            "order_after_window",
            "out_of_order_at_receiver",
            "real_idle_pct",
            "real_rate_mbps",
            "real_sop_workers",
            "real_sop_work_share",
            "real_work_imbalance",
            "sim_idle_pct",
            "sim_rate_mbps",
            "sim_sop_threads",
            "host_late_pct",
        ],
        &rows,
    )
}

/// The SOP workers' share of the work per size, per policy.
fn chart(out: &Path, rp: &RealParams, runs: &[RealRun]) -> Result<Vec<Figure>> {
    let cats: Vec<String> = rp.sizes.iter().map(|s| format!("{s} B")).collect();
    let series: Vec<(String, Vec<f64>)> = rp
        .policies
        .iter()
        .map(|p| {
            let v = rp
                .sizes
                .iter()
                .map(|&s| {
                    runs.iter()
                        .find(|r| &r.policy == p && r.size == s)
                        .map_or(f64::NAN, |r| {
                            let k = sop_workers(r.workers, r.size);
                            top_share(&r.work_ns(), &r.sops(), k)
                        })
                })
                .collect();
            (p.clone(), v)
        })
        .collect();
    svg::bar_chart(
        "np-dispatch --real: work share of the N/gcd(N, b) workers with the most SOPs",
        "share of the work",
        &cats,
        &series,
        &out.join("real_sop_share.svg"),
    )?;
    Ok(vec![Figure {
        title: "Share of the work on the workers with the most SOPs, per size and policy (real)"
            .into(),
        file: "real_sop_share.svg".into(),
    }])
}

fn method_note(rp: &RealParams, cores: usize, c: &BlockCosts, d: &Decided) -> String {
    format!(
        "Real run through `netsched filter` (snd → flt → rcv, veth, AF_PACKET on both sides): \
         {} workers on {cores} usable cores, 64 B blocks, {} rules ({} classifier; none matches \
         the test flows, so every rule is tried at each SOP), {} flows, {} blocks offered per run \
         at {} blocks/s (0 = unpaced), a fresh filter per run. Block costs measured on this host \
         before the run (a one-worker pipeline, per task as a worker sees it): SOP {:.0} ns, payload \
         block {:.0} ns, one hand-off between threads {:.0} ns. The sim column is the \
         model of the simulated experiment at this host's shape ({} engines × {} threads) with \
         those block costs and the scenario's hand-off costs. Work of a worker = its busy time \
         minus its waits for a predecessor's hand-off (its thread's CPU time, `cpu_ns`, is \
         dominated by the wake-ups of the hand-offs, microseconds per block, so it does not show \
         where the blocks' work went); idle % = 1 − Σ work / (workers × first-to-\
         last arrival). The machine is shared (2 cores, other people's jobs), so absolute figures \
         vary between runs; the checks assert only what this host decides, with margins fixed \
         from the model before the run.",
        rp.workers,
        rp.rules,
        rp.classifier,
        rp.flows,
        rp.blocks,
        rp.block_rate,
        c.sop_ns,
        c.other_ns,
        c.handoff_ns,
        d.engines,
        d.threads_per_engine
    )
}

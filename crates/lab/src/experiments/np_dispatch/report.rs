//! np-dispatch's report: checks, tables, charts and notes from the measured runs.

use super::model::{Costs, NpResult, Params};
use super::{Runs, SensRow};
use netsched_report::sensitivity::SensitivityTable;
use netsched_report::{svg, Check, Cmp, Comparison, ExperimentOutput, Figure, Results, Run};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;

pub fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// P1's orderings (§III) as measured checks, each with a short name for the sensitivity table.
/// The same function decides the main run and every variant. Claims whose policy or size is
/// not in the run are left out.
pub fn claims(
    m: &BTreeMap<(String, usize), NpResult>,
    sizes: &[usize],
    compare: &[String],
    engines: usize,
    tpe: usize,
    block_bytes: u32,
) -> Vec<(&'static str, Check)> {
    let get = |p: &str, s: usize| m.get(&(p.to_string(), s));
    let has = |p: &str| compare.iter().any(|x| x == p);
    let mut checks = Vec::new();
    if !(has("static_rr") && has("modified_fcfs") && sizes.contains(&64)) {
        return checks;
    }
    let at64: Vec<(String, f64)> = compare
        .iter()
        .filter_map(|p| get(p, 64).map(|r| (p.clone(), r.idle_pct)))
        .collect();
    let rr64 = get("static_rr", 64).map(|r| r.idle_pct).unwrap_or(f64::NAN);
    let min_other = at64
        .iter()
        .filter(|(p, _)| p != "static_rr")
        .map(|(_, x)| *x)
        .fold(f64::INFINITY, f64::min);
    checks.push(("RR least idle at 64 B", Check::measured(
        "Static RR has the least idle time at 64 B (no decision overhead; P1 §III): the next policy's idle time minus RR's, in points, is > 0",
        min_other - rr64, Cmp::Gt, 0.0,
        at64.iter().map(|(p, x)| format!("{p} {x:.1}%")).collect::<Vec<_>>().join(", "),
    )));
    for (s, name) in [
        (256usize, "RR idle rises at 256 B"),
        (512, "RR idle rises at 512 B"),
    ] {
        if let Some(r) = get("static_rr", s) {
            checks.push((name, Check::measured(
                format!("Static RR's idle time rises at {s} B vs 64 B by > 10 points (SOPs cluster on {} of {} threads; P1 §III)", (engines * tpe) / gcd(engines * tpe, (s as u32).div_ceil(block_bytes) as usize), engines * tpe),
                r.idle_pct - rr64, Cmp::Gt, 10.0,
                format!("static_rr idle {rr64:.1}% at 64 B → {:.1}% at {s} B", r.idle_pct),
            )));
        }
    }
    let mut margin = f64::INFINITY;
    let mut detail = Vec::new();
    for &s in sizes {
        let mf = get("modified_fcfs", s)
            .map(|r| r.idle_pct)
            .unwrap_or(f64::NAN);
        let others = compare
            .iter()
            .filter(|p| *p != "modified_fcfs")
            .filter_map(|p| get(p, s).map(|r| r.idle_pct))
            .fold(f64::NEG_INFINITY, f64::max);
        margin = margin.min(mf - others);
        detail.push(format!("{s} B: mfcfs {mf:.1}% vs max other {others:.1}%"));
    }
    checks.push(("MFCFS most idle", Check::measured(
        "Modified FCFS has the most idle time at every size (decision + late hand-off; P1 §III): its smallest lead over the next policy, in points, is > 0",
        margin, Cmp::Gt, 0.0, detail.join("; "),
    )));
    if sizes.contains(&1500) {
        let rates: Vec<(String, f64)> = compare
            .iter()
            .filter_map(|p| get(p, 1500).map(|r| (p.clone(), r.rate_mbps)))
            .collect();
        let rr = get("static_rr", 1500)
            .map(|r| r.rate_mbps)
            .unwrap_or(f64::NAN);
        let best_other = rates
            .iter()
            .filter(|(p, _)| p != "static_rr")
            .map(|(_, x)| *x)
            .fold(f64::NEG_INFINITY, f64::max);
        checks.push(("RR best rate at 1500 B", Check::measured(
            "Static RR has the best transfer rate at 1500 B (P1 §III): its rate over the best other policy's is ≥ 1",
            rr / best_other, Cmp::Ge, 1.0,
            rates.iter().map(|(p, x)| format!("{p} {x:.0} Mbit/s")).collect::<Vec<_>>().join(", "),
        )));
    }
    // The modelling hint: SOPs on N / gcd(N, b) threads under static RR.
    let n = engines * tpe;
    let mut wrong = 0;
    let mut detail = Vec::new();
    for &s in sizes {
        let b = (s as u32).div_ceil(block_bytes).max(1) as usize;
        let expect = n / gcd(n, b);
        let got = get("static_rr", s).map(|r| r.sop_threads).unwrap_or(0);
        wrong += usize::from(got != expect);
        detail.push(format!("{s} B (b={b}): {got} (expected {expect})"));
    }
    checks.push((
        "SOP threads N/gcd",
        Check::measured(
            "Static RR puts SOPs on exactly N/gcd(N, b) threads: sizes where it does not ≤ 0",
            wrong as f64,
            Cmp::Le,
            0.0,
            detail.join("; "),
        ),
    ));
    checks
}

/// Where the run still disagrees with P1's reading of its own plots, with this run's idle
/// times at the largest size — also under P1's definition (a processor is idle when none of
/// its threads runs, so deciding counts as busy).
fn disagreement_note(
    m: &BTreeMap<(String, usize), NpResult>,
    sizes: &[usize],
    engines: usize,
) -> String {
    let Some(&big) = sizes.iter().max() else {
        return String::new();
    };
    let idle: Vec<String> = ["static_rr", "fcfs", "modified_rr"]
        .iter()
        .filter_map(|p| {
            m.get(&(p.to_string(), big)).map(|r| {
                let busy_deciding =
                    100.0 * r.decision_us / (engines as f64 * r.elapsed_us.max(1e-9));
                format!(
                    "{p} {:.1}% ({:.1}% with deciding counted busy)",
                    r.idle_pct,
                    r.idle_pct - busy_deciding
                )
            })
        })
        .collect();
    format!(
        "**Where the model still disagrees.** (1) P1 reads its 1500 B result as RR having \"also much idle time\" because in FCFS and modified RR \"the processor is used a lot to decide the successor\" — i.e. there the dynamic policies idle less than RR. Here they idle more at {big} B: {}. A thread waiting on a read is swapped out and with every hand-off waiting the engines run dry, and the decision's ALU share is too small to matter under either idle definition; so the read latency explains P1's rate ordering but not its idle-time reading. (2) Static RR's pace per block is set by its SOP threads, which the chain visits once per N hand-offs, and here comes out about the same at 512 and 1500 B (break-even latencies in the note above): a read latency that makes it win at 1500 B also makes it the fastest at 512 B, while P1's text implies its idle time — and so its rate — suffers at 256 and 512 B. No check asserts that implication.",
        idle.join(", ")
    )
}

/// The note that explains the largest size's rate ordering with this run's numbers: static
/// RR's measured pace per block against each dynamic policy's hand-off chain (mail + decision
/// ALU + shared-state reads), the read latency at which they break even, and modified RR
/// re-simulated without the read.
#[allow(clippy::too_many_arguments)]
fn rr_vs_dynamic_note(
    m: &BTreeMap<(String, usize), NpResult>,
    sizes: &[usize],
    c: &Costs,
    counterfactual: Option<&NpResult>,
) -> anyhow::Result<String> {
    let Some(&big) = sizes.iter().max() else {
        return Ok(String::new());
    };
    let pace = |s: usize| {
        m.get(&("static_rr".to_string(), s))
            .map(|r| r.elapsed_us * 1e3 / r.blocks as f64)
    };
    let mrr_chain = c.signal_ns + c.decision_skip_per_thread_ns;
    let fcfs_chain = c.signal_ns + c.decision_scan_idle_ns;
    let breakeven: Vec<String> = sizes
        .iter()
        .filter_map(|&s| {
            pace(s).map(|p| {
                format!(
                    "{s} B: {:.0} ns/block → {:.0} ns",
                    p,
                    (p - mrr_chain) / c.reads_skip_busy.max(1e-9)
                )
            })
        })
        .collect();
    let rr_rate = m
        .get(&("static_rr".to_string(), big))
        .map(|r| r.rate_mbps)
        .unwrap_or(f64::NAN);
    Ok(format!(
        "**Static RR against the dynamic chain.** Each SOP thread of the static chain is visited once per N hand-offs and must finish its SOP (plus its engine mates' blocks) in between; measured static-RR pace per block and the read latency at which modified RR's chain (mail {:.0} + decision {:.0} + reads × latency) would match it: {}. A dynamic policy pays its chain on every hand-off (here modified RR {:.0} ns, FCFS {:.0} ns per block), so when the read latency exceeds the break-even of a size, static RR out-runs it there, which is P1's conclusion (decision overhead large relative to per-block work → static RR). Modified RR at {big} B without the read (`cost.mem_read_cycles=0`, the earlier model): {:.0} Mbit/s vs static RR's {:.0} Mbit/s in this run.",
        c.signal_ns,
        c.decision_skip_per_thread_ns,
        breakeven.join("; "),
        mrr_chain + c.reads_skip_busy * c.mem_read_ns,
        fcfs_chain + c.reads_scan_idle * c.mem_read_ns,
        counterfactual.map_or(f64::NAN, |r| r.rate_mbps),
        rr_rate,
    ))
}

fn sensitivity_note(p: &Params, rows: &[SensRow], out: &Path) -> anyhow::Result<String> {
    let names: Vec<&str> = rows
        .first()
        .map(|r| r.claims.iter().map(|(n, _)| *n).collect())
        .unwrap_or_default();
    let mut columns = vec!["variant", "regime"];
    columns.extend(names.iter().copied());
    columns.push("P1 claims that fail");
    let mut t = SensitivityTable::new(
        &format!(
            "**Sensitivity** (P1's four policies, {} packets per size, same seed; each cell is the claim's measured value, ✓ where it holds). P1 prints no cycle counts, so every cost is a modelling choice; the variants move each one; \"outside\" rows leave P1's hardware:",
            rows.first().map_or(0, |r| r.packets),
        ),
        &columns,
        "✓",
    );
    let mut csv_rows = Vec::new();
    for r in rows {
        let mut cells = vec![r
            .regime
            .as_ref()
            .map_or("P1".to_string(), |w| format!("**outside** ({w})"))];
        cells.extend(names.iter().map(|n| {
            r.claims
                .iter()
                .find(|(m, _)| m == n)
                .and_then(|(_, c)| {
                    c.evidence
                        .map(|e| format!("{:.2}{}", e.value, if c.passed { " ✓" } else { " ✗" }))
                })
                .unwrap_or_else(|| "—".into())
        }));
        t.row(
            &r.label,
            r.regime.is_none(),
            &cells,
            r.claims.iter().map(|(n, c)| (*n, c.passed)),
        );
        let mut row = vec![
            r.label.clone(),
            r.regime.is_none().to_string(),
            r.regime.clone().unwrap_or_default(),
        ];
        row.extend(
            r.claims
                .iter()
                .map(|(_, c)| c.evidence.map_or(String::new(), |e| format!("{}", e.value))),
        );
        csv_rows.push(row);
    }
    let robust: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| t.rows(true).all(|r| r.holds(n)))
        .collect();
    let fragile: Vec<String> = names
        .iter()
        .filter(|n| !robust.contains(n))
        .map(|n| {
            let fails: Vec<&str> = t
                .rows(true)
                .filter(|r| r.fails(n))
                .map(|r| r.label.as_str())
                .collect();
            format!("{n} (fails at: {})", fails.join(", "))
        })
        .collect();
    let reading = format!(
        "Reading: inside P1's regime ({} of {} variants), robust in every one: {}; holding only near the defaults: {}. Outside it: {}. Units: idle-time margins in percentage points, the 1500 B claim as a rate ratio, the SOP claim as a count of sizes that disagree; {} engines × {} threads unless the variant says otherwise.\n",
        t.rows(true).count(),
        rows.len(),
        if robust.is_empty() { "none".to_string() } else { robust.join(", ") },
        if fragile.is_empty() { "none".to_string() } else { fragile.join("; ") },
        t.rows(false)
            .map(|r| {
                let failed = r.failed();
                format!("{} — {}", r.label, if failed.is_empty() { "all hold".to_string() } else { format!("fails: {}", failed.join(", ")) })
            })
            .collect::<Vec<_>>()
            .join("; "),
        p.processor.engines,
        p.processor.threads_per_engine,
    );
    let t = t.finish(&reading);
    let mut header = vec!["variant", "in_paper_regime", "regime"];
    header.extend(names.iter().copied());
    netsched_report::csv::write_table(&out.join("sensitivity.csv"), &header, &csv_rows)?;
    Ok(t)
}

pub fn write(
    p: &Params,
    params: &serde_json::Value,
    seed: u64,
    runs: &Runs,
    out: &Path,
) -> anyhow::Result<ExperimentOutput> {
    let (engines, tpe, block_bytes) = (
        p.processor.engines,
        p.processor.threads_per_engine,
        p.processor.block_bytes,
    );
    let sizes: Vec<usize> = p.traffic.packet_sizes.iter().map(|s| *s as usize).collect();
    let sizes = &sizes;
    let compare = &p.policies.compare;
    let policies: Vec<String> = compare
        .iter()
        .chain(p.policies.extras.iter())
        .cloned()
        .collect();
    let costs = p.costs();
    let m = &runs.m;
    let counterfactual = runs.counterfactual.as_ref();
    let mut results = Results::new("np-dispatch", "sim", seed, params.clone());
    for ((pol, size), r) in m {
        results.runs.push(Run {
            config: json!({"policy": pol, "packet_bytes": size}),
            metrics: json!({
                "idle_pct": r.idle_pct,
                "rate_mbps": r.rate_mbps,
                "stall_us": r.stall_us,
                "decision_us": r.decision_us,
                "read_wait_us": r.read_wait_us,
                "sop_threads": r.sop_threads,
                "blocks": r.blocks,
                "elapsed_us": r.elapsed_us,
            }),
        });
    }
    let get = |p: &str, s: usize| m.get(&(p.to_string(), s));
    let cats: Vec<String> = sizes.iter().map(|s| format!("{s} B")).collect();
    let series = |f: &dyn Fn(&NpResult) -> f64| -> Vec<(String, Vec<f64>)> {
        policies
            .iter()
            .map(|p| {
                (
                    p.clone(),
                    sizes
                        .iter()
                        .map(|&s| get(p, s).map(f).unwrap_or(f64::NAN))
                        .collect(),
                )
            })
            .collect()
    };
    svg::bar_chart(
        "Engine idle time by policy and packet size",
        "idle time (%)",
        &cats,
        &series(&|r| r.idle_pct),
        &out.join("idle.svg"),
    )?;
    svg::bar_chart(
        "Transfer rate by policy and packet size",
        "rate (Mbit/s)",
        &cats,
        &series(&|r| r.rate_mbps),
        &out.join("rate.svg"),
    )?;
    let rows: Vec<Vec<String>> = m
        .iter()
        .map(|((p, s), r)| {
            vec![
                p.clone(),
                s.to_string(),
                format!("{}", r.idle_pct),
                format!("{}", r.rate_mbps),
                format!("{}", r.stall_us),
                r.sop_threads.to_string(),
            ]
        })
        .collect();
    netsched_report::csv::write_table(
        &out.join("dispatch.csv"),
        &[
            "policy",
            "packet_bytes",
            "idle_pct",
            "rate_mbps",
            "stall_us",
            "sop_threads",
        ],
        &rows,
    )?;
    let figures = vec![
        Figure {
            title: "Engine idle time (P1's idle-time plot)".into(),
            file: "idle.svg".into(),
        },
        Figure {
            title: "Transfer rate (P1's transfer-rate plot)".into(),
            file: "rate.svg".into(),
        },
    ];

    // Paper | this run: P1 gives orderings, not numbers (its plots are missing from the text).
    let mut comparisons = Vec::new();
    for &s in sizes {
        for p in compare {
            if let Some(r) = get(p, s) {
                comparisons.push(Comparison {
                    quantity: format!("{p}, {s} B: idle time / rate"),
                    paper: "— (plot only)".into(),
                    ours: format!("{:.1} % / {:.0} Mbit/s", r.idle_pct, r.rate_mbps),
                });
            }
        }
    }
    let checks: Vec<Check> = claims(m, sizes, compare, engines, tpe, block_bytes)
        .into_iter()
        .map(|(_, c)| c)
        .collect();
    let n = engines * tpe;
    let mut notes = vec![
        format!("**Model.** {engines} engines × {tpe} threads, {block_bytes}-byte blocks; each engine's ALU is shared by its threads (FIFO), so SOPs that cluster on threads of the same engines make those engines the bottleneck while the others idle. Costs (ALU ns): SOP {:.0} (= base + rules × per-rule), middle {:.0}, EOP {:.0}, ± {:.0}% jitter; hand-off mail {:.0} ns; decision: static {:.0}, skip {:.0}/thread, scan idle {:.0}, scan idle + SOP counters {:.0}; modified FCFS mails {:.0} ns late. These are modelling choices (P1 prints no cycle counts); the orderings, not the absolute numbers, are what P1 reports.", costs.sop_ns, costs.middle_ns, costs.eop_ns, costs.jitter * 100.0, costs.signal_ns, costs.decision_static_ns, costs.decision_skip_per_thread_ns, costs.decision_scan_idle_ns, costs.decision_scan_counters_ns, costs.late_signal_ns),
        format!("**Shared-state reads.** A dynamic decision reads shared state (idle-thread status, the successor's busy bit, per-engine SOP counters) that {engines} engines share, so it sits in scratchpad or SRAM, not in registers. Read latency {:.0} ns here (scenario: `cost.mem_read_cycles` / `cost.clock`; IXP1200 unloaded latency: scratchpad 12–14, SRAM 16–20, SDRAM 33–40 cycles at 166/200/232 MHz — sources in the scenario file), × dependent reads per decision: static {:.0}, skip-busy {:.0}, scan idle {:.0}, scan idle + counters {:.0}. The deciding thread swaps out while it waits, so the read costs no ALU time, but the successor is signalled only when it returns: every hand-off of a dynamic policy takes mail + decision + read, static RR's only the mail.", costs.mem_read_ns, costs.reads_static, costs.reads_skip_busy, costs.reads_scan_idle, costs.reads_scan_counters),
        format!("**Why static RR suffers at 256 and 512 B.** The core's static chain alternates engines (thread 0 of engines 0..{}, then thread 1, …). With b blocks per packet the SOPs fall on every b-th position of the {n}-long chain: N/gcd(N, b) threads ({}), so they sit on a subset of the engines. Every chain cycle then waits for the engines that carry the SOPs.",
            engines - 1,
            sizes.iter().map(|&s| {
                let b = (s as u32).div_ceil(block_bytes).max(1) as usize;
                format!("{} at {s} B", n / gcd(n, b))
            }).collect::<Vec<_>>().join(", ")),
        rr_vs_dynamic_note(m, sizes, &costs, counterfactual)?,
        disagreement_note(m, sizes, engines),
        "**Idle time** is 1 − (ALU time spent on blocks)/(engines × elapsed): time spent deciding counts as idle because it forwards nothing. `shared_queue` (every idle thread locks the buffer head, no hand-off chain) and `work_stealing` (core) are baselines P1 did not measure.".into(),
    ];
    if !runs.sens.is_empty() {
        notes.push(sensitivity_note(p, &runs.sens, out)?);
    }
    Ok(ExperimentOutput {
        results,
        comparisons,
        checks,
        figures,
        notes,
    })
}

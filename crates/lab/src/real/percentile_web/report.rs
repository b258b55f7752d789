//! The percentile-web real run's report: per mode the per-second series (CSV and SVG, thesis
//! Figs. 16–19), the results table, the comparisons with P0 §4 and Table 14, the checks and
//! the notes.
//!
//! Source: P0 §4 (the thesis's figures and Table 14, constants in [`super`]).
//! Cost: one pass over each mode's samples per series; memory of one series per class and
//! second of the run.

use super::checks::{checks, per_second_sums};
use super::run::ModeRun;
use super::*;
use anyhow::Result;
use netsched_report::{Comparison, ExperimentOutput, Figure, Results, Run};
use serde_json::{json, Value};
use std::path::Path;

/// Per-second series of one mode: (mean response ms, responses/s) per class.
type SecondSeries = Vec<(String, Vec<(f64, f64)>)>;
fn per_second(run: &ModeRun) -> (SecondSeries, SecondSeries) {
    let (sum, cnt) = per_second_sums(run);
    let (classes, secs) = (cnt.len(), cnt.first().map_or(0, Vec::len));
    let mut resp = Vec::new();
    let mut thr = Vec::new();
    for k in 0..classes {
        let name = format!("C{k}");
        resp.push((
            name.clone(),
            (0..secs)
                .filter(|&b| cnt[k][b] > 0)
                .map(|b| ((b + 1) as f64, sum[k][b] / cnt[k][b] as f64))
                .collect(),
        ));
        thr.push((
            name,
            (0..secs)
                .map(|b| ((b + 1) as f64, cnt[k][b] as f64))
                .collect(),
        ));
    }
    (resp, thr)
}

/// Write every mode's series and figures into `out` and build the experiment's output from
/// the runs (`unsteady`: the Percentile runs repeated on an unsteady server, for the notes).
pub fn output(
    params: &Value,
    seed: u64,
    out: &Path,
    p: &RealParams,
    runs: &[ModeRun],
    unsteady: &[String],
) -> Result<ExperimentOutput> {
    let mut results = Results::new("percentile-web", "real", seed, params.clone());
    let mut figures = Vec::new();
    for r in runs {
        figures.extend(write_mode_files(out, r)?);
        results.runs.push(mode_run(r, p));
    }
    Ok(ExperimentOutput {
        results,
        comparisons: comparisons(runs, p.percentiles.len()),
        checks: checks(runs, p),
        figures,
        notes: notes(runs, p, unsteady),
    })
}

/// One mode's per-second series (CSV and SVG) and final daemon status into `out`; returns
/// its figures.
fn write_mode_files(out: &Path, r: &ModeRun) -> Result<Vec<Figure>> {
    let m = r.mode.as_str();
    let mut figures = Vec::new();
    let (resp, thr) = per_second(r);
    netsched_report::csv::write_series(
        &out.join(format!("real-{m}-response.csv")),
        "second",
        "mean_response_ms",
        &resp,
    )?;
    netsched_report::csv::write_series(
        &out.join(format!("real-{m}-throughput.csv")),
        "second",
        "responses",
        &thr,
    )?;
    let f1 = format!("real-{m}-response.svg");
    netsched_report::svg::line_chart(
        &format!("{m}: mean response time per class per second (cf. P0 Figs. 16–19)"),
        "time (s)",
        "response time (ms)",
        &resp,
        &out.join(&f1),
    )?;
    let f2 = format!("real-{m}-throughput.svg");
    netsched_report::svg::line_chart(
        &format!("{m}: responses per class per second"),
        "time (s)",
        "responses / s",
        &thr,
        &out.join(&f2),
    )?;
    figures.push(Figure {
        title: format!("{m}: response time per class"),
        file: f1,
    });
    figures.push(Figure {
        title: format!("{m}: throughput per class"),
        file: f2,
    });
    std::fs::write(
        out.join(format!("real-{m}-status.txt")),
        netsched_nfq::ctl_client::format_status(&r.status),
    )?;
    Ok(figures)
}

/// One mode's run in `results.json`: its configuration and what it measured.
fn mode_run(r: &ModeRun, p: &RealParams) -> Run {
    let m = r.mode.as_str();
    let n = p.percentiles.len();
    Run {
        config: json!({
            "discipline": m,
            "budget": p.budget,
            "deadline": if r.status.deadline_auto {
                r.status.deadline_mode.clone()
            } else {
                netsched_nfq::config::fmt_duration(r.status.deadline_ns)
            },
            "connections": n * p.threads_per_client,
            "duration_s": p.duration.as_secs_f64(),
            "page_kb": p.page_kb,
            "max_hold_factor": p.max_hold_factor,
            "max_hold_ms": p.max_hold.as_secs_f64() * 1e3,
        }),
        metrics: json!({
            "mean_response_ms": r.mean_ms,
            "p99_response_ms": r.p99_ms,
            "responses": r.completed,
            "sent": r.load.sent,
            "received": r.load.received,
            "errors": r.load.errors.len(),
            "first_errors": r.load.errors.iter().take(5).collect::<Vec<_>>(),
            "throughput_per_s": r.completed.iter().map(|c| *c as f64 / r.load.elapsed.as_secs_f64()).collect::<Vec<_>>(),
            "daemon_status": r.status,
            "mean_server_ms": r.status.mean_server_ns as f64 / 1e6,
            "max_hold_mean_ms": run_max_hold(r, p).as_secs_f64() * 1e3,
            "max_hold_releases": r.status.counters.max_hold_releases,
            "released_at_exit": r.released_at_exit,
        }),
    }
}

/// Every mode's per-class numbers next to the thesis's (P0 Table 14 and its means).
fn comparisons(runs: &[ModeRun], n: usize) -> Vec<Comparison> {
    let mut comparisons = Vec::new();
    let thesis_att: Vec<f64> = (0..5)
        .map(|k| THESIS_S[k] as f64 / (THESIS_N[k] as f64 * THESIS_P[k] as f64 / 100.0))
        .collect();
    for r in runs {
        for k in 0..n.min(5) {
            match r.mode {
                DisciplineKind::Fifo => comparisons.push(Comparison {
                    quantity: format!("FIFO: mean response C{k} (ms)"),
                    paper: format!("{:.2}", THESIS_FIFO_MEAN_S[k] * 1e3),
                    ours: format!("{:.2}", r.mean_ms[k]),
                }),
                DisciplineKind::Percentile => {
                    comparisons.push(Comparison {
                        quantity: format!("Percentile: mean response C{k} (ms)"),
                        paper: format!("{:.2}", THESIS_PCT_MEAN_S[k] * 1e3),
                        ours: format!("{:.2}", r.mean_ms[k]),
                    });
                    let c = &r.status.classes[k];
                    comparisons.push(Comparison {
                        quantity: format!("Percentile: C{k} N / S / S/(N·P)"),
                        paper: format!("{} / {} / {:.3}", THESIS_N[k], THESIS_S[k], thesis_att[k]),
                        ours: format!("{} / {} / {:.3}", c.n, c.s, c.attainment),
                    });
                    comparisons.push(Comparison {
                        quantity: format!("Percentile: C{k} priority (Table 14)"),
                        paper: ["1324", "1314", "1314", "1314", "1315"][k].into(),
                        ours: c.priority.map(|p| format!("{p:.0}")).unwrap_or("—".into()),
                    });
                }
                DisciplineKind::Strict => comparisons.push(Comparison {
                    quantity: format!("strict priority: mean response C{k} (ms)"),
                    paper: "—".into(),
                    ours: format!("{:.2}", r.mean_ms[k]),
                }),
            }
        }
    }
    comparisons
}

/// The notes: server steadiness, the testbed, the daemon's settings, and every mode's final
/// daemon status.
fn notes(runs: &[ModeRun], p: &RealParams, unsteady: &[String]) -> Vec<String> {
    let n = p.percentiles.len();
    let mut notes = vec![
        format!(
            "Server steadiness (slowest 5 s window of total throughput / the fastest): {}.{}",
            runs.iter()
                .map(|r| format!("{} {:.2}", r.mode.as_str(), steadiness(r)))
                .collect::<Vec<_>>()
                .join(", "),
            if unsteady.is_empty() {
                String::new()
            } else {
                format!(" Repeated: {}.", unsteady.join("; "))
            }
        ),
        format!(
            "Testbed: nginx (Debian nginx-light) as one process pinned to CPU {} in a server namespace; {} client namespaces (10.77.k.2 → class k), each with {} persistent HTTP/1.1 connections in a closed loop ({} in total) for {:.0} s per mode. The server is the bottleneck by construction: every request gzip-compresses a {} KiB page at level 9 on the server's single core; clients and the daemon run on CPU {}.",
            p.server_cpu, n, p.threads_per_client, n * p.threads_per_client, p.duration.as_secs_f64(), p.page_kb, p.client_cpu
        ),
        format!(
            "All three modes run through the same NFQUEUE daemon with release budget {} (requests inside nginx at once), deadline {} and max_hold {}; only the discipline differs. \"FIFO\" is therefore the thesis's unscheduled baseline in arrival order, not the kernel without the daemon. Response time is measured by the clients, send → full response; N, S and attainment come from the daemon (arrival at the daemon → first response packet).",
            p.budget,
            p.deadline,
            match p.max_hold_factor {
                Some(k) => format!(
                    "= {k} × the daemon's recent mean server time, clamped to [20 ms, {}] (mean server time / average bound per mode: {})",
                    netsched_core::units::format_duration(p.max_hold.as_nanos() as u64),
                    runs.iter()
                        .map(|r| format!(
                            "{} {:.1} / {:.0} ms",
                            r.mode.as_str(),
                            r.status.mean_server_ns as f64 / 1e6,
                            run_max_hold(r, p).as_secs_f64() * 1e3
                        ))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None => netsched_core::units::format_duration(p.max_hold.as_nanos() as u64),
            }
        ),
        "The thesis's FIFO means differ by class only because its clients burst differently; ours are symmetric by design, so FIFO should give equal means. Absolute times differ from the 2006 testbed (700 MHz server, 100 Mbit/s switch); compare orderings and ratios.".into(),
    ];
    for r in runs {
        notes.push(format!(
            "Final daemon status, {}:\n\n```\n{}```",
            r.mode.as_str(),
            netsched_nfq::ctl_client::format_status(&r.status)
        ));
    }
    notes
}

//! balance-classes' report: P0 Table 14's columns per engine (N, S, S/N, S/(N·P), mean and
//! P-th percentile response time per class) beside the thesis's, a CSV of the same, the
//! checks and the notes.
//!
//! Source: P0 Table 14 (constants in `real::percentile_web`).

use super::checks::checks;
use super::run::EngineRun;
use super::{ClassesRun, Params};
use crate::real::percentile_web::{THESIS_N, THESIS_P, THESIS_PCT_MEAN_S, THESIS_S};
use anyhow::{Context, Result};
use netsched_report::{Comparison, ExperimentOutput, Results, Run};
use serde_json::{json, Value};
use std::fmt::Write;
use std::path::Path;

/// One engine's Table 14 as a markdown table.
fn engine_table(r: &EngineRun, p: &Params, deadline_ms: f64) -> String {
    let mut s = format!(
        "**{}** (deadline {deadline_ms:.2} ms; N = requests sent, S = answered within the \
         deadline, client-measured{})\n\n\
         | class | P | N | answered | S | S/N | S/(N·P) | mean ms | P-th pct ms |{}\n\
         |---|---|---|---|---|---|---|---|---|{}\n",
        r.engine.name(),
        if r.balancer.is_some() {
            "; balancer: its own N and S/(N·P)"
        } else {
            ""
        },
        if r.balancer.is_some() {
            " balancer N | balancer S/(N·P) | by max_hold |"
        } else {
            ""
        },
        if r.balancer.is_some() {
            "---|---|---|"
        } else {
            ""
        },
    );
    for (k, &pc) in p.percentiles.iter().enumerate() {
        let n = r.load.sent[k];
        let att = r.attainment(k, deadline_ms);
        let sk = (att * n as f64).round() as u64;
        let _ = write!(
            s,
            "| C{k} | {pc} | {n} | {} | {sk} | {att:.3} | {:.3} | {:.2} | {:.2} |",
            r.completed(k),
            att * 100.0 / pc as f64,
            r.mean_ms(k),
            r.pth_ms(k, pc)
        );
        if let Some(rows) = &r.balancer {
            if let Some(c) = rows.get(k) {
                let _ = write!(
                    s,
                    " {} | {:.3} | {} |",
                    c.n, c.attainment, c.served_by_max_hold
                );
            }
        }
        s.push('\n');
    }
    s
}

fn thesis_table() -> String {
    let mut s = String::from(
        "**P0 Table 14** (percentile scheduler in the kernel, 2006)\n\n\
         | class | P | N | S | S/N | S/(N·P) | mean ms |\n|---|---|---|---|---|---|---|\n",
    );
    for k in 0..5 {
        let att = THESIS_S[k] as f64 / THESIS_N[k] as f64;
        let _ = writeln!(
            s,
            "| C{k} | {} | {} | {} | {att:.3} | {:.3} | {:.2} |",
            THESIS_P[k],
            THESIS_N[k],
            THESIS_S[k],
            att * 100.0 / THESIS_P[k] as f64,
            THESIS_PCT_MEAN_S[k] * 1000.0
        );
    }
    s
}

/// P0 Table 14's columns for the percentile scheduler, paper | sim | real, class by class:
/// share of the answers, S/N, S/(N·P) and mean response time.
fn paper_sim_real(run: &ClassesRun, p: &Params) -> String {
    let mut s = format!(
        "**Percentile, paper | sim | real** (sim: the simulated twin at this shape, deadline \
         {:.2} ms, max_hold {}; real: deadline {:.2} ms, max_hold {})\n\n\
         | class | P | share of answers | S/N | S/(N·P) | mean ms |\n|---|---|---|---|---|---|\n",
        run.sim.deadline_ms, run.sim.max_hold, run.deadline_ms, p.max_hold
    );
    let sim = run.sim.run(super::Engine::NetschedPercentile);
    let real = run
        .runs
        .iter()
        .find(|r| r.engine == super::Engine::NetschedPercentile);
    let total_real: u64 = real.map_or(0, |r| {
        (0..p.percentiles.len()).map(|k| r.completed(k)).sum()
    });
    let paper_total: u64 = THESIS_N.iter().sum();
    let cell = |x: Option<f64>, prec: usize| x.map_or("—".to_string(), |v| format!("{v:.prec$}"));
    for (k, &pc) in p.percentiles.iter().enumerate() {
        let paper = (k < 5 && pc == THESIS_P[k]).then_some(k);
        let sim_c = sim.and_then(|r| r.classes.get(k));
        let real_att = real.map(|r| r.attainment(k, run.deadline_ms));
        let _ = writeln!(
            s,
            "| C{k} | {pc} | {} \\| {} \\| {} | {} \\| {} \\| {} | {} \\| {} \\| {} | {} \\| {} \\| {} |",
            cell(paper.map(|k| THESIS_N[k] as f64 / paper_total as f64), 3),
            cell(sim.map(|r| r.share(k)), 3),
            cell(real.map(|r| r.completed(k) as f64 / total_real.max(1) as f64), 3),
            cell(paper.map(|k| THESIS_S[k] as f64 / THESIS_N[k] as f64), 3),
            cell(sim_c.map(|c| c.s / c.n.max(1.0)), 3),
            cell(real_att, 3),
            cell(paper.map(|k| THESIS_S[k] as f64 * 100.0 / (THESIS_N[k] as f64 * THESIS_P[k] as f64)), 3),
            cell(sim_c.map(|c| c.attainment), 3),
            cell(real_att.map(|a| a * 100.0 / pc as f64), 3),
            cell(paper.map(|k| THESIS_PCT_MEAN_S[k] * 1000.0), 2),
            cell(sim_c.map(|c| c.mean_s * 1000.0), 2),
            cell(real.map(|r| r.mean_ms(k)), 2),
        );
    }
    s
}

/// The simulated twin's engines: answers and mean response time per class.
fn sim_table(run: &ClassesRun) -> String {
    let mut s = format!(
        "**Simulated twin** (percentile-web's simulator at this shape; deadline {:.2} ms = its \
         FIFO run's mean response time)\n\n| engine | answers per class | S/(N·P) per class | \
         mean ms per class |\n|---|---|---|---|\n",
        run.sim.deadline_ms
    );
    let join = |v: Vec<String>| v.join(" / ");
    for r in &run.sim.runs {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} |",
            r.engine.name(),
            join(r.classes.iter().map(|c| c.completed.to_string()).collect()),
            join(
                r.classes
                    .iter()
                    .map(|c| format!("{:.3}", c.attainment))
                    .collect()
            ),
            join(
                r.classes
                    .iter()
                    .map(|c| format!("{:.1}", c.mean_s * 1e3))
                    .collect()
            ),
        );
    }
    s
}

fn write_csv(out: &Path, run: &ClassesRun, p: &Params) -> Result<()> {
    let mut s = String::from(
        "engine,class,percentile,n,answered,s,attainment,attainment_over_p,mean_ms,pth_ms,\
         balancer_n,balancer_s,balancer_attainment_over_p,errors\n",
    );
    for r in &run.runs {
        for (k, &pc) in p.percentiles.iter().enumerate() {
            let att = r.attainment(k, run.deadline_ms);
            let n = r.load.sent[k];
            let b = r.balancer.as_ref().and_then(|rows| rows.get(k));
            let errors = r
                .load
                .errors
                .iter()
                .filter(|e| e.starts_with(&format!("client {k} ")))
                .count();
            let _ = writeln!(
                s,
                "{},C{k},{pc},{n},{},{},{att:.4},{:.4},{:.3},{:.3},{},{},{},{errors}",
                r.engine.name(),
                r.completed(k),
                (att * n as f64).round() as u64,
                att * 100.0 / pc as f64,
                r.mean_ms(k),
                r.pth_ms(k, pc),
                b.map_or(String::new(), |c| c.n.to_string()),
                b.map_or(String::new(), |c| c.s.to_string()),
                b.map_or(String::new(), |c| format!("{:.4}", c.attainment)),
            );
        }
    }
    let path = out.join("balance-classes.csv");
    std::fs::write(&path, s).with_context(|| format!("writing {}", path.display()))
}

fn engine_run(r: &EngineRun, p: &Params, deadline_ms: f64) -> Run {
    let n = p.percentiles.len();
    Run {
        config: json!({ "engine": r.engine.name() }),
        metrics: json!({
            "sent": r.load.sent,
            "answered": (0..n).map(|k| r.completed(k)).collect::<Vec<_>>(),
            "attainment": (0..n).map(|k| r.attainment(k, deadline_ms)).collect::<Vec<_>>(),
            "mean_ms": (0..n).map(|k| r.mean_ms(k)).collect::<Vec<_>>(),
            "pth_ms": (0..n).map(|k| r.pth_ms(k, p.percentiles[k])).collect::<Vec<_>>(),
            "balancer_attainment_over_p": r.balancer.as_ref().map(|rows| {
                rows.iter().map(|c| c.attainment).collect::<Vec<_>>()
            }),
            "errors": r.load.errors.len(),
            "elapsed_s": r.load.elapsed.as_secs_f64(),
        }),
    }
}

/// Write the CSV and build the experiment's output.
pub fn output(
    params: &Value,
    seed: u64,
    out: &Path,
    p: &Params,
    run: &ClassesRun,
) -> Result<ExperimentOutput> {
    write_csv(out, run, p)?;
    let mut results = Results::new("percentile-web", "real", seed, params.clone());
    let mut notes = vec![format!(
        "Engines on one testbed, one after another, {} s each: {} client namespaces × {} \
         closed-loop connections through one balancer to {} nginx backends with maxconn {} \
         each ({} slots for {} connections). Deadline = the netsched FIFO run's mean response \
         time, {:.2} ms; HAProxy set-priority-offset: class k's offset = k × {} ms.",
        p.duration.as_secs_f64(),
        p.percentiles.len(),
        p.threads_per_client,
        p.backends,
        p.maxconn,
        p.backends as u32 * p.maxconn,
        p.percentiles.len() * p.threads_per_client,
        run.deadline_ms,
        run.offset_step_ms
    )];
    notes.push(thesis_table());
    notes.push(sim_table(run));
    let mut comparisons = Vec::new();
    for r in &run.runs {
        results.runs.push(engine_run(r, p, run.deadline_ms));
        notes.push(engine_table(r, p, run.deadline_ms));
        if !r.load.errors.is_empty() {
            let first: Vec<&str> = r.load.errors.iter().take(3).map(String::as_str).collect();
            notes.push(format!(
                "{}: {} requests not answered with a 200 (e.g. {})",
                r.engine.name(),
                r.load.errors.len(),
                first.join("; ")
            ));
        }
        if r.engine == super::Engine::NetschedPercentile {
            for k in 0..p.percentiles.len().min(5) {
                let att = r.attainment(k, run.deadline_ms);
                comparisons.push(Comparison {
                    quantity: format!("C{k} S/(N·P), percentile"),
                    paper: format!(
                        "{:.3}",
                        THESIS_S[k] as f64 * 100.0 / (THESIS_N[k] as f64 * THESIS_P[k] as f64)
                    ),
                    ours: format!(
                        "{:.3} (sim {})",
                        att * 100.0 / p.percentiles[k] as f64,
                        run.sim
                            .run(super::Engine::NetschedPercentile)
                            .and_then(|r| r.classes.get(k))
                            .map_or("—".to_string(), |c| format!("{:.3}", c.attainment))
                    ),
                });
            }
        }
    }
    notes.push(paper_sim_real(run, p));
    Ok(ExperimentOutput {
        results,
        comparisons,
        checks: checks(run, p),
        figures: Vec::new(),
        notes,
    })
}

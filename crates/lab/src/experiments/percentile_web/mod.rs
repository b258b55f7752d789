//! The `percentile-web` experiment — P0 (Hansung Univ. 2006, P0 in `docs/papers.md`):
//! a web server with a Percentile scheduler between network and server, five client classes
//! with targets P = 90, 80, 70, 60, 50 (P0 ch. 4).
//!
//! Model (`netsched_sim`, message level): five client hosts, one per class, each with
//! `threads` closed-loop threads on a persistent connection sending requests back to back
//! (P0: 4 threads × 15000 requests; scaled by `requests_per_thread`), 100 Mbit/s links to a
//! switch and on to the server. The server has one worker (a single CPU) with an exponential
//! service time; requests wait in the scheduler and are released only when the worker is free
//! (`listen_limit = 0`) — the backlog the thesis creates with `perSetQlen` (P0 §3.2.5). The
//! scheduler is FIFO (the baseline kernel), Percentile (P0 §2.3.1: lowest S/(N·P) first,
//! success = answered within the deadline, fed back at response output like `per_fail_check`)
//! or strict priority (class 0 first). A run lasts until the first class has sent all its
//! requests (Table 14 was read "after 60000 packets of one class"), so every class is under
//! load for the whole measured period.
//!
//! Outputs: `per_second.csv` (run, class, second, completed, mean response), `classes.csv`,
//! `sensitivity.csv`, `response_<run>.svg`, `mean_response.svg`, `throughput.svg`.
//!
//! Layout: [`model`] is what is simulated (the typed scenario and one run of one scheduler),
//! `report` turns runs into checks, tables, charts and notes; this file runs them.

pub mod model;
mod report;

pub use model::Params;
use model::{simulate, RunResult};
use netsched_core::qdisc::percentile::{PercentileDeadline, PercentileMemory};
use netsched_report::ExperimentOutput;
use netsched_sim::app::Dist;
use std::path::Path;

/// One row of the sensitivity table: FIFO and Percentile at one variant of the scenario.
pub struct SensRow {
    pub label: String,
    /// `None` inside P0's regime; else why the variant is outside it.
    pub regime: Option<String>,
    pub fifo: RunResult,
    pub pct: RunResult,
}

fn scaled(d: &Dist, k: f64) -> Dist {
    match *d {
        Dist::Fixed { ms } => Dist::Fixed { ms: ms * k },
        Dist::Exponential { mean_ms } => Dist::Exponential {
            mean_ms: mean_ms * k,
        },
        Dist::Uniform { min_ms, max_ms } => Dist::Uniform {
            min_ms: min_ms * k,
            max_ms: max_ms * k,
        },
    }
}

/// FIFO and Percentile at variants of what P0 does not fix: a client think time, how many
/// requests wait past the scheduler, the server's service time (hence load), threads per
/// class, the success deadline and how long the counters remember. Same seed for every row.
fn sensitivity(p: &Params, seed: u64) -> anyhow::Result<Vec<SensRow>> {
    let with = |label: &str, f: &dyn Fn(&mut Params)| {
        let mut q = p.clone();
        f(&mut q);
        (label.to_string(), q)
    };
    // P0 §3.2.2 defines success against the running mean processing time and keeps cumulative
    // counters: another deadline or a forgetting memory is not P0's scheduler.
    let outside = |q: &Params| -> Option<String> {
        let mut why = Vec::new();
        if q.percentile.deadline != PercentileDeadline::Auto {
            why.push("deadline not P0's running mean");
        }
        if q.percentile.memory != PercentileMemory::Forever {
            why.push("counters not P0's cumulative ones");
        }
        (!why.is_empty()).then(|| why.join(", "))
    };
    // A quarter of what one class sends in a run, so the window forgets.
    let window = (p.clients.requests_per_thread * u64::from(p.clients.threads) / 4).max(1);
    let variants = vec![
        with("as configured", &|_| {}),
        with("think time 3 ms (exponential)", &|q| {
            q.clients.think = Dist::Exponential { mean_ms: 3.0 }
        }),
        with("listen queue −2 (more held in the scheduler)", &|q| {
            q.server.listen_limit = p.server.listen_limit.saturating_sub(2)
        }),
        with("listen queue +1 (less held in the scheduler)", &|q| {
            q.server.listen_limit = p.server.listen_limit + 1
        }),
        with("service time ×0.75", &|q| {
            q.server.service = scaled(&p.server.service, 0.75)
        }),
        with("service time ×1.25", &|q| {
            q.server.service = scaled(&p.server.service, 1.25)
        }),
        with("2 threads per class", &|q| q.clients.threads = 2),
        with("8 threads per class", &|q| q.clients.threads = 8),
        with("deadline: running q-quantile", &|q| {
            q.percentile.deadline = PercentileDeadline::AutoQuantile
        }),
        with("deadline: fixed 4 ms", &|q| {
            q.percentile.deadline = PercentileDeadline::Ms(4.0)
        }),
        with(&format!("memory: last {window} requests"), &|q| {
            q.percentile.memory = PercentileMemory::Window(window)
        }),
        with("memory: half-life 2 s", &|q| {
            q.percentile.memory = PercentileMemory::HalfLifeMs(2000.0)
        }),
    ];
    let mut rows = Vec::new();
    for (label, q) in variants {
        q.validate()
            .map_err(|e| anyhow::anyhow!("sensitivity variant {label:?}: {e}"))?;
        rows.push(SensRow {
            regime: outside(&q),
            fifo: simulate(&q, "fifo", seed)?,
            pct: simulate(&q, "percentile", seed)?,
            label,
        });
    }
    Ok(rows)
}

/// The scenario typed and checked, nothing run (`Experiment::check`).
pub fn check(params: &serde_json::Value) -> anyhow::Result<()> {
    crate::scenario::typed::<Params>(params, "percentile-web")?.validate()
}

pub fn run(params: &serde_json::Value, seed: u64, out: &Path) -> anyhow::Result<ExperimentOutput> {
    let p: Params = crate::scenario::typed(params, "percentile-web")?;
    p.validate()?;
    std::fs::create_dir_all(out)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", out.display()))?;
    // The first five runs in this order (report.rs reads them by position); the
    // `_all_held` pair holds every waiting request in the scheduler, where strict priority's
    // starvation shows (P0 §2.2.2).
    let mut names = vec![
        "fifo",
        "percentile",
        "strict_priority",
        "percentile_all_held",
        "strict_priority_all_held",
    ];
    if p.percentile.extra_fixed_deadline_ms.is_some() {
        names.push("percentile_fixed_deadline");
    }
    let mut runs = Vec::new();
    for &name in &names {
        runs.push(simulate(&p, name, seed)?);
    }
    let sens = if p.sensitivity {
        sensitivity(&p, seed)?
    } else {
        Vec::new()
    };
    report::write(&p, params, seed, &names, &runs, &sens, out)
}

//! The simulated twin of balance-classes (the sim column of paper | sim | real): percentile-web's
//! simulator (`experiments::percentile_web::model`, the core's disciplines in a simulated
//! network) at the real run's shape — the same classes, closed-loop connections per class and
//! server slots (a simulated server with `backends × maxconn` workers that takes a request
//! only when a worker is free, as the balancer hands a request to a backend only when a slot
//! frees), the same deadline rule (the FIFO run's mean response time, then fixed for every
//! discipline) and the same bound on waiting (`max_hold`) — so the claims' margins can be
//! read from it before any real run (docs/balance-classes.md, "Margins from the simulator").
//!
//! What it does not model: the real backends share one CPU (processor sharing among the
//! requests in service); with exponential service times, `slots` parallel workers of mean
//! `SERVICE_MS` give the same time in service per request as one CPU shared by `slots`
//! requests of mean `SERVICE_MS / slots` (memoryless), so the queue sees the same departures.
//!
//! Cost: four simulated runs of `REQUESTS_PER_THREAD` requests per connection (≈ 1 s each).

use super::{Engine, Params};
use crate::experiments::percentile_web::model::{self, ClassResult};
use netsched_core::qdisc::percentile::{MaxHold, PercentileDeadline};
use netsched_sim::app::Dist;

/// Mean time a request holds a slot: the measured netsched FIFO run's (docs/balance-classes.md:
/// 4 slots × 30 s / 9,935 answers ≈ 12 ms). Only ratios matter to the claims: the deadline
/// and the bound are both set from the simulated FIFO run.
pub const SERVICE_MS: f64 = 12.0;
/// The clients' turnaround between an answer and the next request (loopback veth, ≪ service).
pub const THINK_MS: f64 = 0.2;
/// Requests per connection: the run ends when one class's connections have sent theirs.
pub const REQUESTS_PER_THREAD: u64 = 2000;

/// One simulated engine: per class N, S against the deadline, mean response time, answers.
#[derive(Debug, Clone)]
pub struct SimRun {
    pub engine: Engine,
    pub classes: Vec<ClassResult>,
}

impl SimRun {
    /// The class's share of the answers.
    pub fn share(&self, k: usize) -> f64 {
        let total: u64 = self.classes.iter().map(|c| c.completed).sum();
        self.classes[k].completed as f64 / total.max(1) as f64
    }
}

/// The twin's result: the deadline (the simulated FIFO run's mean response time) and the runs
/// of netsched's three queues (HAProxy's strict classes are netsched's priority queue here).
#[derive(Debug, Clone)]
pub struct SimColumn {
    pub deadline_ms: f64,
    pub max_hold: MaxHold,
    pub runs: Vec<SimRun>,
}

impl SimColumn {
    pub fn run(&self, e: Engine) -> Option<&SimRun> {
        self.runs.iter().find(|r| r.engine == e)
    }
}

/// The simulator's scenario at `p`'s shape.
fn scenario(p: &Params, max_hold: MaxHold) -> model::Params {
    let mut s = model::Params {
        max_duration_s: 600.0,
        sensitivity: false,
        ..Default::default()
    };
    s.network.link_mbps = 10_000.0;
    s.network.link_delay_ms = 0.01;
    s.server.workers = p.backends * p.maxconn as usize;
    s.server.listen_limit = 0;
    s.server.service = Dist::Exponential {
        mean_ms: SERVICE_MS,
    };
    s.clients.percentiles = p.percentiles.clone();
    s.clients.threads = p.threads_per_client as u32;
    s.clients.requests_per_thread = REQUESTS_PER_THREAD;
    s.clients.think = Dist::Exponential { mean_ms: THINK_MS };
    s.percentile.max_hold = max_hold;
    s.percentile.extra_fixed_deadline_ms = None;
    s
}

/// Run the twin: FIFO first (its mean response time is the deadline), then FIFO, priority and
/// percentile judged against it (percentile's own deadline and `max_hold` as the real run's).
pub fn simulate(p: &Params, max_hold: MaxHold, seed: u64) -> anyhow::Result<SimColumn> {
    let mut s = scenario(p, max_hold);
    s.validate()?;
    let first = model::simulate(&s, "fifo", seed)?;
    let (sum, n) = first.classes.iter().fold((0.0, 0u64), |(a, n), c| {
        (a + c.mean_s * c.completed as f64, n + c.completed)
    });
    if n == 0 {
        anyhow::bail!("the simulated FIFO run answered nothing");
    }
    let deadline_ms = sum / n as f64 * 1e3;
    s.percentile.deadline = PercentileDeadline::Ms(deadline_ms);
    let mut runs = Vec::new();
    for (e, name) in [
        (Engine::NetschedFifo, "fifo"),
        (Engine::NetschedPriority, "strict_priority"),
        (Engine::NetschedPercentile, "percentile"),
    ] {
        if p.engines.contains(&e) || e == Engine::NetschedFifo {
            let r = model::simulate(&s, name, seed)?;
            runs.push(SimRun {
                engine: e,
                classes: r.classes,
            });
        }
    }
    Ok(SimColumn {
        deadline_ms,
        max_hold,
        runs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The margins of the real run's claims, read from the twin over ten seeds at the default
    /// shape (docs/balance-classes.md, "Margins from the simulator"): with `max_hold =
    /// "deadline"` every claim holds in every seed, with the smallest margin printed; with
    /// the bound off the last class starves (the real run's failure, reproduced).
    #[test]
    fn the_twin_holds_the_claims_with_the_bound_and_starves_without_it() {
        let p = Params::from_json(&serde_json::json!({}), false).unwrap();
        let (mut share, mut spread, mut gap, mut starve) = (f64::MAX, 0.0f64, f64::MAX, 0.0f64);
        for seed in 1..=10 {
            let c = simulate(&p, MaxHold::Deadline, seed).unwrap();
            let pct = c.run(Engine::NetschedPercentile).unwrap();
            let fifo = c.run(Engine::NetschedFifo).unwrap();
            let prio = c.run(Engine::NetschedPriority).unwrap();
            let n = pct.classes.len();
            share = share.min(pct.share(n - 1));
            let att: Vec<f64> = pct.classes.iter().map(|x| x.attainment).collect();
            let (lo, hi) = att
                .iter()
                .fold((f64::MAX, 0.0f64), |(l, h), &a| (l.min(a), h.max(a)));
            spread = spread.max(hi / lo);
            for w in pct.classes.windows(2) {
                gap = gap.min((w[1].mean_s - w[0].mean_s) / w[0].mean_s);
            }
            starve = starve
                .max(prio.classes[n - 1].completed as f64 / fifo.classes[n - 1].completed as f64);
            let off = simulate(&p, MaxHold::Off, seed).unwrap();
            let last = off.run(Engine::NetschedPercentile).unwrap().share(n - 1);
            assert!(
                last < 0.05,
                "seed {seed}: without the bound the last class got {last}"
            );
        }
        println!(
            "twin over 10 seeds: last class's share ≥ {share:.3} (claim ≥ 0.100); S/(N·P) \
             max/min ≤ {spread:.4} (claim ≤ 1.05); means rise by ≥ {:.1}% per class; strict \
             priority's last class ≤ {starve:.4} of its FIFO answers (claim < 0.10)",
            gap * 100.0
        );
        assert!(share >= 0.15, "last class's share {share}");
        assert!(spread <= 1.02, "S/(N·P) spread {spread}");
        assert!(gap > 0.02, "means ordered, the smallest rise {gap}");
        assert!(starve < 0.05, "strict priority's last class {starve}");
    }
}

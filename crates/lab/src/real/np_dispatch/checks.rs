//! The claims of `np-dispatch --real`: those [`super::decide`] settled as decidable on this
//! host become checks; P1's orderings are decided by the simulated experiment's own code
//! ([`claims`]) on the real runs, and asserted only where this host can decide them.

use super::decide::{sop_workers, top_share, Decided, P1_POLICIES};
use super::run::RealRun;
use crate::experiments::np_dispatch::model::NpResult;
use crate::experiments::np_dispatch::report::claims;
use netsched_report::{Check, Cmp};
use std::collections::BTreeMap;

/// One of P1's orderings on the real runs: the check, and why it is not asserted (if so).
pub struct Ordering {
    pub name: &'static str,
    pub check: Check,
    pub sim: Option<Check>,
}

/// The real runs of P1's four policies as the simulated experiment's results.
pub fn as_np_results(runs: &[RealRun]) -> BTreeMap<(String, usize), NpResult> {
    runs.iter()
        .filter(|r| P1_POLICIES.contains(&r.policy.as_str()))
        .map(|r| {
            let work = r.work_ns();
            (
                (r.policy.clone(), r.size as usize),
                NpResult {
                    idle_pct: r.idle_pct(),
                    rate_mbps: r.rate_mbps(),
                    elapsed_us: r.span_s * 1e6,
                    stall_us: 0.0,
                    decision_us: 0.0,
                    read_wait_us: 0.0,
                    sop_threads: r.sop_workers(),
                    blocks: r
                        .filter
                        .pipeline
                        .workers
                        .iter()
                        .map(|w| w.blocks as usize)
                        .sum(),
                    thread_work_us: work.iter().map(|w| w / 1e3).collect(),
                    thread_sops: r.sops(),
                },
            )
        })
        .collect()
}

/// SOPs under static RR on exactly N / gcd(N, b) workers, at every size run.
fn sop_placement(runs: &[RealRun]) -> Option<Check> {
    let rr: Vec<&RealRun> = runs.iter().filter(|r| r.policy == "static_rr").collect();
    if rr.is_empty() {
        return None;
    }
    let mut wrong = 0;
    let mut detail = Vec::new();
    for r in &rr {
        let want = sop_workers(r.workers, r.size);
        wrong += usize::from(r.sop_workers() != want);
        detail.push(format!(
            "{} B: SOPs per worker {:?} → {} workers (expected {want}); {} frames not of the test",
            r.size,
            r.sops(),
            r.sop_workers(),
            r.strays()
        ));
    }
    Some(Check::measured(
        "Static RR puts the header blocks (SOPs) on exactly N/gcd(N, b) workers (P1 §III; the model's hint): sizes where it does not ≤ 0",
        wrong as f64,
        Cmp::Le,
        0.0,
        detail.join("; "),
    ))
}

/// Where SOPs cluster, the SOP workers carry more than their share of the work.
fn work_share(runs: &[RealRun], decided: &Decided) -> Vec<Check> {
    let mut out = Vec::new();
    for s in decided.share.iter().filter(|s| s.not_decided.is_none()) {
        let Some(r) = runs
            .iter()
            .find(|r| r.policy == "static_rr" && r.size == s.size)
        else {
            continue;
        };
        let real = top_share(&r.work_ns(), &r.sops(), s.sop_workers);
        out.push(Check::measured(
            format!(
                "Per-worker idle time under static RR at {} B: the {} SOP workers carry ≥ {:.2} of the work (fair share {:.2}, model {:.2}; threshold = fair + half the model's excess, fixed before the run)",
                s.size, s.sop_workers, s.threshold(), s.fair, s.sim_share
            ),
            real,
            Cmp::Ge,
            s.threshold(),
            format!(
                "work per worker (ms) {:?}, SOPs per worker {:?}",
                r.work_ns().iter().map(|w| (w / 1e5).round() / 10.0).collect::<Vec<_>>(),
                r.sops()
            ),
        ));
    }
    out
}

/// Every policy and size: the identity exact, nothing inside at the end, no order violation
/// after the window, and every flow in order at the receiver.
fn order_and_accounting(runs: &[RealRun]) -> Check {
    let mut bad = 0u64;
    let mut detail = Vec::new();
    for r in runs {
        let f = &r.filter;
        let n = f.identity_failures
            + u64::from(!f.identity_holds)
            + f.queued
            + f.pipeline.order.violations_after
            + r.out_of_order_at_receiver;
        if n > 0 {
            detail.push(format!(
                "{} {} B: identity failures {}, queued {}, after window {}, at receiver {}",
                r.policy,
                r.size,
                f.identity_failures,
                f.queued,
                f.pipeline.order.violations_after,
                r.out_of_order_at_receiver
            ));
        }
        bad += n;
    }
    if detail.is_empty() {
        detail.push(format!("{} runs, none", runs.len()));
    }
    Check::measured(
        "Every policy and size: accounting identity exact with nothing left inside, flows in order after the window and at the receiver: faults ≤ 0",
        bad as f64,
        Cmp::Le,
        0.0,
        detail.join("; "),
    )
}

/// The checks asserted on this host, and P1's orderings on the real runs (with the model's
/// verdict at this host's shape beside them).
pub fn checks(runs: &[RealRun], decided: &Decided) -> (Vec<Check>, Vec<Ordering>) {
    let mut out: Vec<Check> = sop_placement(runs).into_iter().collect();
    out.extend(work_share(runs, decided));
    out.push(order_and_accounting(runs));
    let mut sizes: Vec<usize> = runs.iter().map(|r| r.size as usize).collect();
    sizes.dedup();
    let compare: Vec<String> = P1_POLICIES
        .iter()
        .filter(|p| runs.iter().any(|r| r.policy == **p))
        .map(|p| p.to_string())
        .collect();
    let n = runs.first().map_or(1, |r| r.workers);
    let real = claims(&as_np_results(runs), &sizes, &compare, 1, n, 64);
    let sim = claims(&decided.sim, &sizes, &compare, 1, n, 64);
    let mut orderings = Vec::new();
    for (name, check) in real {
        if name == "SOP threads N/gcd" {
            continue;
        }
        let sim = sim.iter().find(|(s, _)| *s == name).map(|(_, c)| c.clone());
        if decided.orderings_not_decided.is_none() {
            out.push(check.clone());
        }
        orderings.push(Ordering { name, check, sim });
    }
    (out, orderings)
}

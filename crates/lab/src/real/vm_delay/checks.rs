//! The checks of `vm-delay --real`: P2's claims on the real runs (strict priority's Low tier
//! degrades with more guests; delay-constrained lowers the tail and the loss of the tiers P2
//! measured), the loss claims again on the model fed each run's recorded arrivals, and the
//! run's preconditions (the host kept up; every port's accounting holds; the bitmap's bound).

use super::run::RealRun;
use crate::experiments::vm_delay::{
    measured_tiers, summary, Setup, TierResult, VmConfig, MARGIN_SEEDS,
};
use anyhow::Result;
use netsched_core::{Nanos, SEC};
use netsched_report::{Check, Cmp};
use std::ops::Range;

/// The runs the checks decide on: per (scheduler, domain count) the real run and its sim
/// column, in the same order.
pub(super) struct Runs<'a> {
    pub setup: &'a Setup,
    pub runs: &'a [RealRun],
    pub sims: &'a [Vec<TierResult>],
    /// Traffic time per run.
    pub dur: Nanos,
}

/// What the checks read of the scenario: tier names, the threshold, the lowest tier, the
/// smallest and largest domain counts.
struct Scope<'a> {
    names: Vec<&'a str>,
    thr: f64,
    low: usize,
    nmin: usize,
    nmax: usize,
}

impl<'a> Runs<'a> {
    fn scope(&self) -> Scope<'a> {
        let setup = self.setup;
        let names: Vec<&str> = setup.base.tiers.iter().map(|t| t.name.as_str()).collect();
        Scope {
            low: names.len() - 1,
            names,
            thr: setup.base.threshold_ms,
            nmin: *setup.counts.iter().min().unwrap_or(&0),
            nmax: *setup.counts.iter().max().unwrap_or(&0),
        }
    }

    /// The run of scheduler `sch` with `n` guests.
    fn find(&self, sch: &str, n: usize) -> Option<&'a RealRun> {
        self.runs
            .iter()
            .find(|r| r.scheduler == sch && r.domains == n)
    }
}

/// Every check, in the report's order.
pub(super) fn checks(r: &Runs) -> Result<Vec<Check>> {
    let mut checks = Vec::new();
    strict_priority_growth(r, &mut checks);
    delay_constrained_gains(r, &mut checks);
    replayed_loss(r, &mut checks);
    host_kept_up(r, &mut checks)?;
    switch_accounting(r, &mut checks);
    Ok(checks)
}

/// Strict priority: the lowest tier's probe p99 and loss grow from the smallest to the largest
/// domain count.
fn strict_priority_growth(r: &Runs, checks: &mut Vec<Check>) {
    let Scope {
        names,
        low,
        nmin,
        nmax,
        ..
    } = r.scope();
    let find = |sch: &str, n: usize| r.find(sch, n);
    if let (Some(a), Some(b)) = (find("strict_priority", nmin), find("strict_priority", nmax)) {
        let (pa, pb) = (
            a.tiers[low].quantile_ms(0.99),
            b.tiers[low].quantile_ms(0.99),
        );
        checks.push(Check::measured(
            format!("strict priority: the {} tier's probe p99 grows from {nmin} to {nmax} guests (ms added)", names[low]),
            pb - pa,
            Cmp::Gt,
            0.0,
            format!("{pa:.2} ms → {pb:.2} ms"),
        ));
        let (la, lb) = (a.tiers[low].loss_pct(), b.tiers[low].loss_pct());
        checks.push(Check::measured(
            format!("strict priority: the {} tier's loss grows from {nmin} to {nmax} guests (points added)", names[low]),
            lb - la,
            Cmp::Gt,
            0.0,
            format!("{la:.2}% → {lb:.2}%"),
        ));
    }
}

/// At the largest domain count, delay-constrained against strict priority: the share above
/// the threshold and the loss of the tiers P2 measured (together and per tier), and the loss
/// over all tiers (P2 §4.1.3, Fig. 9; abstract, §5).
fn delay_constrained_gains(r: &Runs, checks: &mut Vec<Check>) {
    let Scope {
        names, thr, nmax, ..
    } = r.scope();
    let find = |sch: &str, n: usize| r.find(sch, n);
    if let (Some(sp), Some(dc)) = (
        find("strict_priority", nmax),
        find("delay_constrained", nmax),
    ) {
        // P2 Fig. 9 in its own words: the share above 60 ms of the domains it measured (VMs
        // 4-9: every tier but High, §4.1.3), all of them together.
        let measured = measured_tiers(names.len());
        let (s, d) = (
            summary(&sp.tiers, measured.clone(), thr).above_pct,
            summary(&dc.tiers, measured.clone(), thr).above_pct,
        );
        let mnames = names[measured.clone()].join("+");
        checks.push(Check::measured(
            format!("{nmax} guests: delay-constrained lowers the share above {thr} ms of the tiers P2 measured ({mnames} together; P2 §4.1.3, Fig. 9; points lower)"),
            s - d,
            Cmp::Gt,
            0.0,
            format!("strict {s:.2}% vs delay-constrained {d:.2}%"),
        ));
        // The same per tier, for the tail of each (not P2's wording: it does not split them).
        for (ti, name) in names.iter().enumerate().skip(1) {
            let (s, d) = (
                sp.tiers[ti].share_above_pct(thr),
                dc.tiers[ti].share_above_pct(thr),
            );
            checks.push(Check::measured(
                format!("{nmax} guests: delay-constrained lowers the {name} tier's share above {thr} ms (points lower)"),
                s - d,
                Cmp::Gt,
                0.0,
                format!("strict {s:.2}% vs delay-constrained {d:.2}%"),
            ));
        }
        // Issue #13's reading of the loss claim: per tier, Mid and Low.
        for (ti, name) in names.iter().enumerate().skip(1) {
            let (s, d) = (sp.tiers[ti].loss_pct(), dc.tiers[ti].loss_pct());
            checks.push(Check::measured(
                format!(
                    "{nmax} guests: delay-constrained lowers the {name} tier's loss (points lower)"
                ),
                s - d,
                Cmp::Gt,
                0.0,
                format!("strict {s:.3}% vs delay-constrained {d:.3}%"),
            ));
        }
        // The same for the tiers P2 measured together (Mid+Low, as Fig. 9 groups VMs 4-9): the
        // Low tier's gain is not paid for by the Mid tier.
        let (s, d) = (
            summary(&sp.tiers, measured.clone(), thr).loss_pct,
            summary(&dc.tiers, measured.clone(), thr).loss_pct,
        );
        checks.push(Check::measured(
            format!("{nmax} guests: delay-constrained lowers the loss of the tiers P2 measured ({mnames} together; points lower)"),
            s - d,
            Cmp::Gt,
            0.0,
            format!("strict {s:.3}% vs delay-constrained {d:.3}%"),
        ));
        // P2's loss claim in its own words (abstract, §5): "the amount of lost packets"
        // decreased — over all domains; as in the simulated report, both the loss of all
        // packets and of probes must drop (the smaller reduction is the value).
        let all = 0..names.len();
        let (s, d) = (
            summary(&sp.tiers, all.clone(), thr),
            summary(&dc.tiers, all, thr),
        );
        checks.push(Check::measured(
            format!("{nmax} guests: delay-constrained loses fewer packets over all tiers, of all packets and of probes (P2 abstract, §5; smaller reduction, points)"),
            (s.loss_pct - d.loss_pct).min(s.probe_loss_pct - d.probe_loss_pct),
            Cmp::Gt,
            0.0,
            format!(
                "all packets strict {:.3}% vs delay-constrained {:.3}%; probes {:.3}% vs {:.3}%",
                s.loss_pct, d.loss_pct, s.probe_loss_pct, d.probe_loss_pct
            ),
        ));
    }
}

// The loss claims again on the model fed each run's own recorded arrivals
// (`trace.replay_dropped`, per frame read): a host that stalls the switch takes budget,
// and under strict priority that budget comes out of the Low tier, which inflates the
// switch's own figures; the replay serves the same arrivals with the full budget.
// `replay(claim, a, b, tiers)`: the claim holds when the replay's loss of `tiers` is
// higher in `a` than in `b` (the value: a − b, points).
fn replayed_loss(r: &Runs, checks: &mut Vec<Check>) {
    let Scope {
        names,
        low,
        nmin,
        nmax,
        ..
    } = r.scope();
    let find = |sch: &str, n: usize| r.find(sch, n);
    let replay = |claim: String, a: &RealRun, b: &RealRun, tiers: Range<usize>| {
        let (x, y) = (
            a.trace.replay_loss_pct(tiers.clone()),
            b.trace.replay_loss_pct(tiers.clone()),
        );
        Check::measured(
            format!("replay of the recorded arrivals: {claim}"),
            x - y,
            Cmp::Gt,
            0.0,
            format!(
                "model {} {}: {x:.3}% vs {} {}: {y:.3}% (switch's vif-queue drops {:.3}% vs \
                 {:.3}%; trace overflow {} / {})",
                a.scheduler,
                a.domains,
                b.scheduler,
                b.domains,
                a.trace.switch_loss_pct(tiers.clone()),
                b.trace.switch_loss_pct(tiers),
                a.trace.overflow,
                b.trace.overflow
            ),
        )
    };
    let low_only = low..low + 1;
    if let (Some(a), Some(b)) = (find("strict_priority", nmin), find("strict_priority", nmax)) {
        checks.push(replay(
            format!(
                "strict priority's {} tier loss grows from {nmin} to {nmax} guests (points added)",
                names[low]
            ),
            b,
            a,
            low_only.clone(),
        ));
    }
    if let (Some(sp), Some(dc)) = (
        find("strict_priority", nmax),
        find("delay_constrained", nmax),
    ) {
        checks.push(replay(
            format!(
                "{nmax} guests, delay-constrained lowers the {} tier's loss (points lower)",
                names[low]
            ),
            sp,
            dc,
            low_only,
        ));
        let measured = measured_tiers(names.len());
        checks.push(replay(
            format!(
                "{nmax} guests, delay-constrained lowers the loss of the tiers P2 measured ({} \
                 together; points lower)",
                names[measured.clone()].join("+")
            ),
            sp,
            dc,
            measured,
        ));
    }
}

/// Whether the host kept up: no loss at the smallest domain count, and at the largest no more
/// budget lost to late wake-ups than the load's spread over the simulator's seeds.
fn host_kept_up(r: &Runs, checks: &mut Vec<Check>) -> Result<()> {
    let Scope { nmin, nmax, .. } = r.scope();
    let find = |sch: &str, n: usize| r.find(sch, n);
    let (setup, runs, sims, dur) = (r.setup, r.runs, r.sims, r.dur);
    // Whether the host kept up. (1) At the smallest domain count the budget is about half used
    // (offered load 0.47 with the defaults) and the simulator loses nothing, so loss there
    // means the switch or the traffic threads did not get the CPU.
    if let Some(a) = find("strict_priority", nmin) {
        let worst = a.tiers.iter().map(|t| t.loss_pct()).fold(0.0, f64::max);
        checks.push(Check::measured(
            format!(
                "the host kept up: loss of every tier at {nmin} guests with strict priority (%)"
            ),
            worst,
            Cmp::Le,
            1.0,
            format!(
                "worst tier {worst:.2}% (the simulator: {:.2}%); above 1% the machine was too \
                 loaded for the tail figures to describe the discipline",
                sims[runs.iter().position(|r| std::ptr::eq(r, a)).unwrap_or(0)]
                    .iter()
                    .map(|t| t.loss_pct())
                    .fold(0.0, f64::max)
            ),
        ));
    }
    // (2) At the largest count the backend is nearly saturated, and every millisecond of
    // budget a busy host takes from the switch while frames wait (a wake-up later than its
    // 1 ms of credit; the switch counts it, `budget_lost_ns`) raises the load the discipline
    // sees, which inflates strict priority's Low-tier loss and tail. The claims' margins were
    // checked in the simulator over `MARGIN_SEEDS`, whose traffic realises loads that differ
    // by seed; a run counts as one more such seed only while the host's take stays within
    // that spread: lost share ≤ (highest seed load − mean) / highest.
    let base = VmConfig {
        scheduler: "strict_priority".into(),
        domains: nmax,
        duration: dur,
        ..setup.base.clone()
    };
    let loads: Vec<f64> = MARGIN_SEEDS
        .map(|s| base.realized_load(s))
        .collect::<Result<_>>()?;
    let mean = loads.iter().sum::<f64>() / loads.len().max(1) as f64;
    let highest = loads.iter().copied().fold(0.0, f64::max);
    let spread = 100.0 * (highest - mean) / highest.max(f64::MIN_POSITIVE);
    let lost = runs
        .iter()
        .filter(|r| r.domains == nmax)
        .map(|r| r.budget_lost_pct)
        .fold(0.0, f64::max);
    checks.push(Check::measured(
        format!("the host kept up: budget the switch lost to late wake-ups at {nmax} guests, worst run (% of the on-time, ≤ the load's spread over the simulator's seeds {}..={}: (highest − mean) / highest)", MARGIN_SEEDS.start(), MARGIN_SEEDS.end()),
        lost,
        Cmp::Le,
        spread,
        format!(
            "per run {}; {} s runs at {nmax} guests realise loads {mean:.4} (mean) up to {highest:.4}",
            runs.iter()
                .map(|r| format!(
                    "{} {}: lost {:.2}% (1 ms sleeper late {:.2}%, longest {:.0} ms)",
                    r.scheduler, r.domains, r.budget_lost_pct, r.host_late_pct, r.host_max_late_ms
                ))
                .collect::<Vec<_>>()
                .join(", "),
            dur / SEC
        ),
    ));
    Ok(())
}

/// Every port's accounting identity at the end of every run, and the bitmap's bound on real
/// traffic (delay-constrained runs).
fn switch_accounting(r: &Runs, checks: &mut Vec<Check>) {
    let runs = r.runs;
    let broken: Vec<String> = runs
        .iter()
        .flat_map(|r| {
            r.stats
                .ports
                .iter()
                .filter(|p| !p.identity_holds())
                .map(|p| p.dev.clone())
        })
        .collect();
    checks.push(Check::measured(
        "every port's accounting identity holds at the end of every run (ports broken)",
        broken.len() as f64,
        Cmp::Le,
        0.0,
        format!("broken: {broken:?}"),
    ));
    for r in runs.iter().filter(|r| r.scheduler == "delay_constrained") {
        let worst = r
            .stats
            .ports
            .iter()
            .map(|p| p.max_rounds_passed as f64 - p.bound_rounds as f64)
            .fold(f64::NEG_INFINITY, f64::max);
        let maxp = r
            .stats
            .ports
            .iter()
            .map(|p| p.max_rounds_passed)
            .max()
            .unwrap_or(0);
        checks.push(Check::measured(
            format!("bitmap bound on real traffic, {} guests: longest pass-over minus its bound (rounds)", r.domains),
            worst,
            Cmp::Le,
            0.0,
            format!("longest pass-over seen {maxp} round starts; bounds {}..{}",
                r.stats.ports.iter().map(|p| p.bound_rounds).min().unwrap_or(0),
                r.stats.ports.iter().map(|p| p.bound_rounds).max().unwrap_or(0)),
        ));
    }
}

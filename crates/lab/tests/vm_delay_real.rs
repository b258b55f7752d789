//! `lab run vm-delay --real --quick` as a test (root; skipped with a reason otherwise): P2's
//! experiment through `netsched vswitch` with 9 and 18 guest namespaces.
//!
//! Asserted (with margins seen to hold on the loaded, shared 2-core machine and in the
//! simulator over seeds 1..=10 at 8 s; see docs/vswitch.md): strict priority's Low-tier probe
//! p99 grows from 9 to 18 guests; at 18 guests delay-constrained lowers the Low tier's share
//! above 60 ms and that of the tiers P2 measured (Mid+Low together, P2 Fig. 9); every port's
//! accounting identity holds; no port is passed over longer than the bitmap bound; no
//! namespace is left. The tail claims are asserted only when both of the run's own "host kept
//! up" checks passed (no loss at 9 guests; at 18 guests the switch lost less budget to late
//! wake-ups than the offered load varies over the simulator's margin seeds); otherwise the
//! test says why it skipped them.
//! The loss claims do NOT hold with a margin in 8 s runs — not even in the simulator, where
//! strict priority's Low-tier loss at 18 guests ranges 0.00..2.46% over seeds 1..=10 — so
//! they have their own test with 20 s runs (`vm_delay_real_strict_low_loss_grows`):
//! strict priority's Low-tier loss grows from 9 to 18 guests, and delay-constrained lowers
//! the Low tier's loss at 18 guests, and that of the tiers P2 measured (Mid+Low together),
//! on the switch and on the replay of the run's recorded arrivals. The Mid tier alone is
//! reported, not asserted: strict priority loses no Mid packets in most runs of this
//! scenario, so there is nothing to lower, and its share above 60 ms has no margin in the
//! simulator.

#[path = "common_lab.rs"]
mod common_lab;
use common_lab::assert_json_units;
use netsched_lab::experiments::vm_delay::Setup;
use netsched_lab::real::vm_delay::{RealOptions, PING_PRELOAD};
use netsched_report::ExperimentOutput;
use netsched_testbed::privileged_test_allowed;

fn scenario() -> serde_json::Value {
    let text = include_str!("../../../scenarios/vm-delay.toml");
    let v: toml::Value = toml::from_str(text).unwrap();
    serde_json::to_value(v).unwrap()
}

fn run() -> ExperimentOutput {
    let p = scenario();
    Setup::from_params(&p).expect("the scenario is valid");
    let dir = netsched_testbed::TempDir::new("vmdlyt").unwrap();
    let out = netsched_lab::real::vm_delay::run_real(&p, 1, dir.path(), true).unwrap();
    assert!(dir.path().join("real.csv").exists());
    no_namespace_left(&out, 2);
    assert_json_units(&out);
    out
}

fn run_with(opts: &RealOptions) -> ExperimentOutput {
    let p = scenario();
    let dir = netsched_testbed::TempDir::new("vmdlyt").unwrap();
    let out = netsched_lab::real::vm_delay::run_real_with(&p, 1, dir.path(), opts).unwrap();
    let testbeds = Setup::from_params(&p).unwrap().counts.len();
    no_namespace_left(&out, testbeds);
    assert_json_units(&out);
    out
}

fn no_namespace_left(out: &ExperimentOutput, testbeds: usize) {
    // This run's namespaces are gone (by its testbeds' tags: other engineers' runs of the
    // same test may hold namespaces of their own meanwhile).
    let tags: std::collections::BTreeSet<&str> = out
        .results
        .runs
        .iter()
        .filter_map(|r| r.config["testbed"].as_str())
        .collect();
    assert_eq!(
        tags.len(),
        testbeds,
        "one testbed per guest count: {tags:?}"
    );
    for tag in tags {
        let left = netsched_testbed::namespaces_with(tag);
        assert!(left.is_empty(), "namespaces left: {left:?}");
    }
}

/// The evidence value of the check whose claim starts with `prefix`.
fn value(out: &ExperimentOutput, prefix: &str) -> f64 {
    let c = out
        .checks
        .iter()
        .find(|c| c.claim.starts_with(prefix))
        .unwrap_or_else(|| panic!("no check {prefix:?}"));
    eprintln!("{} = {:?} ({})", c.claim, c.evidence, c.detail);
    c.evidence.unwrap().value
}

#[test]
fn vm_delay_real_tail_latency_identity_and_bitmap_bound() {
    if !privileged_test_allowed("vm_delay_real_tail_latency_identity_and_bitmap_bound") {
        return;
    }
    let out = run();
    // Structural claims hold whatever the machine's load.
    assert_eq!(value(&out, "every port's accounting identity holds"), 0.0);
    let bound: Vec<_> = out
        .checks
        .iter()
        .filter(|c| c.claim.starts_with("bitmap bound"))
        .collect();
    assert_eq!(bound.len(), 2);
    for c in bound {
        assert!(c.passed, "{} — {}", c.claim, c.detail);
    }
    // The tail claims describe the discipline only when the host kept up (measured, and
    // reported as checks of the run): with other work taking the 2 cores, the switch misses
    // its budget and the traffic threads their turns, and the figures describe the machine.
    if !host_kept_up(&out, "the tail-latency claims") {
        return;
    }
    // Seen in passing-gate runs: +150, +215, +785 ms.
    let grow = value(&out, "strict priority: the Low tier's probe p99 grows");
    assert!(
        grow > 20.0,
        "Low p99 grew only {grow:.1} ms from 9 to 18 guests"
    );
    // Seen: 5.4, 9.0, 30.8 points.
    let low = value(
        &out,
        "18 guests: delay-constrained lowers the Low tier's share",
    );
    assert!(
        low > 2.0,
        "delay-constrained lowered Low's share above 60 ms by {low:.2} points"
    );
    // P2 Fig. 9's own wording: Mid and Low together. The simulator at 8 s, seeds 1..=10:
    // strict 5.24..9.20% vs delay-constrained 0.49..1.53%.
    let measured = value(
        &out,
        "18 guests: delay-constrained lowers the share above 60 ms of the tiers P2 measured",
    );
    assert!(
        measured > 1.0,
        "delay-constrained lowered the Mid+Low share above 60 ms by {measured:.2} points"
    );
    // Reported, not asserted: the Mid tier's share alone. The simulator gives it no margin
    // (strict − delay-constrained at 18 domains, seeds 1..=10: −0.11..1.67 points at 8 s,
    // 0.04..1.17 at 20 s); it is asserted inside P2's grouping, Mid+Low, above.
    value(
        &out,
        "18 guests: delay-constrained lowers the Mid tier's share",
    );
}

/// Whether the run's own "host kept up" checks passed; prints them, and when not, that the
/// test skips `what` and why.
fn host_kept_up(out: &ExperimentOutput, what: &str) -> bool {
    let kept_up: Vec<_> = out
        .checks
        .iter()
        .filter(|c| c.claim.starts_with("the host kept up"))
        .collect();
    assert_eq!(kept_up.len(), 2);
    for c in &kept_up {
        eprintln!("{} = {:?} ({})", c.claim, c.evidence, c.detail);
    }
    if let Some(c) = kept_up.iter().find(|c| !c.passed) {
        eprintln!(
            "SKIP {what}: {} = {:?} ({}); machine too loaded",
            c.claim, c.evidence, c.detail
        );
        return false;
    }
    true
}

/// P2's loss claims on real traffic, 20 s per configuration: strict priority at 9 and 18
/// guests, delay-constrained at 18. The run length and the margin were decided from the
/// simulator with the switch's budget shape over seeds 1..=10 before any real run
/// (`cargo run --release -p netsched-lab --example vm_delay_loss_claims 20`): strict
/// priority's Low-tier loss grows by 0.44..2.03 points from 9 to 18 guests (asserted > 0.1),
/// on the switch's drops and on the model replaying the run's own recorded arrivals, which a
/// stalled host cannot inflate; and at 18 guests delay-constrained lowers the Low tier's loss
/// (simulator 0.37..1.77 points; asserted > 0.1, on both figures too).
#[test]
fn vm_delay_real_strict_low_loss_grows() {
    if !privileged_test_allowed("vm_delay_real_strict_low_loss_grows") {
        return;
    }
    let out = run_with(&RealOptions {
        duration: 20 * netsched_core::SEC,
        schedulers: vec!["strict_priority".into(), "delay_constrained".into()],
        skip: vec![(9, "delay_constrained".into())],
        ping_preload: PING_PRELOAD,
    });
    assert_eq!(value(&out, "every port's accounting identity holds"), 0.0);
    for c in out
        .checks
        .iter()
        .filter(|c| c.claim.starts_with("bitmap bound"))
    {
        assert!(c.passed, "{} — {}", c.claim, c.detail);
    }
    // Reported, not asserted (docs/vswitch.md): strict priority loses no Mid packets in most
    // runs of this scenario (simulator, 20 s, seeds 1..=10: 0.00..0.22%), so there is
    // nothing for delay-constrained to lower. The Mid tier's loss is asserted inside P2's
    // own grouping, Mid+Low together (below).
    value(
        &out,
        "18 guests: delay-constrained lowers the Mid tier's loss",
    );
    if !host_kept_up(&out, "the loss claims") {
        return;
    }
    let grow = value(&out, "strict priority: the Low tier's loss grows");
    assert!(
        grow > 0.1,
        "strict priority's Low-tier loss grew only {grow:.3} points from 9 to 18 guests"
    );
    // Claim (b), delay-constrained lowers the Low tier's loss at 18 guests; the simulator gave
    // it 0.37..1.77 points over seeds 1..=10 (margin 0.1). The real run sends the simulator's
    // own traffic for the seed: a generator drawing its own bursts replayed, for the test's
    // seed, one rare Low cluster in nearly every run (docs/vm-delay-real.md, "The simulator's
    // traffic"). The margin and the seed are the simulator's.
    let low = value(
        &out,
        "18 guests: delay-constrained lowers the Low tier's loss",
    );
    assert!(
        low > 0.1,
        "delay-constrained lowered the Low tier's loss by only {low:.3} points at 18 guests"
    );
    // The same claim, same margin, on the model fed each run's own recorded arrivals
    // (docs/vm-delay-real.md, "Why on the replay too"). A host that stalls the switch takes
    // budget, and under strict priority it comes out of the Low tier: that inflates the
    // claim on the switch's figures (one run: 686 Low frames dropped by the switch, 64 by
    // the model with the same arrivals). The replay serves the same arrivals with the full
    // budget, so a pass needs the claim on the real switch and without the host's losses.
    // The margins are the simulator's (the replay is its backend), not re-picked.
    let grow = value(
        &out,
        "replay of the recorded arrivals: strict priority's Low tier loss grows",
    );
    assert!(
        grow > 0.1,
        "on the replay of the recorded arrivals, strict priority's Low-tier loss grew only \
         {grow:.3} points from 9 to 18 guests"
    );
    let low = value(
        &out,
        "replay of the recorded arrivals: 18 guests, delay-constrained lowers the Low tier's loss",
    );
    assert!(
        low > 0.1,
        "on the replay of the recorded arrivals, delay-constrained lowered the Low tier's loss \
         by only {low:.3} points at 18 guests"
    );
    // Issue #13's "lowers the Mid and Low tiers' loss", in P2's grouping (Fig. 9: VMs 4-9,
    // Mid and Low together), on the switch and on the replay: delay-constrained does not pay
    // for the Low tier's gain with the Mid tier's loss. The margin is the Low claim's 0.1
    // spread over the two tiers' frames (Mid and Low offer the same data; Mid loses almost
    // nothing either way), fixed before any real run. The simulator, 20 s, seeds 1..=10
    // (`--example vm_delay_loss_claims 20`): 0.51 (0.17..0.84) points.
    for (claim, what) in [
        (
            "18 guests: delay-constrained lowers the loss of the tiers P2 measured",
            "on the switch",
        ),
        (
            "replay of the recorded arrivals: 18 guests, delay-constrained lowers the loss of the tiers P2 measured",
            "on the replay of the recorded arrivals",
        ),
    ] {
        let both = value(&out, claim);
        assert!(
            both > 0.05,
            "{what}, delay-constrained lowered the Mid+Low loss by only {both:.3} points at 18 guests"
        );
    }
}

/// The two diagnosis runs below: strict priority at 9 guests and delay-constrained at 18,
/// 20 s, ping with `preload`.
fn diagnosis_options(preload: u32) -> RealOptions {
    RealOptions {
        duration: 20 * netsched_core::SEC,
        schedulers: vec!["strict_priority".into(), "delay_constrained".into()],
        skip: vec![
            (9, "delay_constrained".into()),
            (18, "strict_priority".into()),
        ],
        ping_preload: preload,
    }
}

/// Diagnosis, not a claim (docs/vm-delay-real.md, "Ping with preload"):
/// delay-constrained at 18 guests, 20 s, with iputils' default ping (no preload) and then
/// with `-l 3`; prints the trace findings (the switch's vif-queue drops against the model's
/// with the same arrivals, clumps) and the probes each tier's pings sent.
#[test]
#[ignore = "a measurement for the docs (about 60 s), not a claim"]
fn vm_delay_real_ping_preload_diagnosis() {
    if !privileged_test_allowed("vm_delay_real_ping_preload_diagnosis") {
        return;
    }
    for preload in [1, PING_PRELOAD] {
        eprintln!("--- ping preload {preload}");
        let out = run_with(&diagnosis_options(preload));
        assert_eq!(value(&out, "every port's accounting identity holds"), 0.0);
    }
}

/// Diagnosis, not a claim (docs/vm-delay-real.md, "The simulator's traffic"): strict
/// priority at 9 guests and delay-constrained at 18, 20 s, the run's arrival statistics per
/// tier printed (what the simulator generates for the same seed, what the traffic generator
/// sent, what the switch read) next to the switch's and the replay's drops.
#[test]
#[ignore = "a measurement for the docs (about 50 s), not a claim"]
fn vm_delay_real_arrivals_diagnosis() {
    if !privileged_test_allowed("vm_delay_real_arrivals_diagnosis") {
        return;
    }
    let out = run_with(&diagnosis_options(PING_PRELOAD));
    assert_eq!(value(&out, "every port's accounting identity holds"), 0.0);
}

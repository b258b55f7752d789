//! `lab run vm-delay --real --quick` as a test (root; skipped with a reason otherwise): P2's
//! experiment through `netsched vswitch` with 9 and 18 guest namespaces.
//!
//! Asserted (with margins seen to hold on the loaded, shared 2-core machine and in the
//! simulator over seeds 1..=10 at 8 s; see docs/vswitch.md): strict priority's Low-tier probe
//! p99 grows from 9 to 18 guests; at 18 guests delay-constrained lowers the Low tier's share
//! above 60 ms and that of the tiers P2 measured (Mid+Low together, P2 Fig. 9); every port's
//! accounting identity holds; no port is passed over longer than the bitmap bound; no
//! namespace is left. The tail claims are asserted only when both of the run's own "host kept
//! up" checks passed (no loss at 9 guests; late wake-ups took less budget than the scenario's
//! headroom at 18 guests); otherwise the test says why it skipped them.
//! The loss claims do NOT hold with a margin in 8 s runs — not even in the simulator, where
//! strict priority's Low-tier loss at 18 guests ranges 0.00..2.46% over seeds 1..=10: they
//! are the ignored test below, so they stay visible.

use netsched_lab::experiments::vm_delay::Setup;
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
    // This run's namespaces are gone (by its testbeds' tags: other engineers' runs of the
    // same test may hold namespaces of their own meanwhile).
    let tags: std::collections::BTreeSet<&str> = out
        .results
        .runs
        .iter()
        .filter_map(|r| r.config["testbed"].as_str())
        .collect();
    assert_eq!(tags.len(), 2, "one testbed per guest count: {tags:?}");
    for tag in tags {
        let left = netsched_testbed::namespaces_with(tag);
        assert!(left.is_empty(), "namespaces left: {left:?}");
    }
    out
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
fn p2_on_real_traffic_tail_latency_identity_and_bitmap_bound() {
    if !privileged_test_allowed("p2_on_real_traffic_tail_latency_identity_and_bitmap_bound") {
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
    for c in out
        .checks
        .iter()
        .filter(|c| c.claim.starts_with("the host kept up"))
    {
        eprintln!("{} = {:?} ({})", c.claim, c.evidence, c.detail);
    }
    let kept_up: Vec<_> = out
        .checks
        .iter()
        .filter(|c| c.claim.starts_with("the host kept up"))
        .collect();
    assert_eq!(kept_up.len(), 2);
    if let Some(c) = kept_up.iter().find(|c| !c.passed) {
        eprintln!(
            "SKIP the tail-latency claims: {} = {:?} ({}); machine too loaded",
            c.claim, c.evidence, c.detail
        );
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
}

#[test]
#[ignore = "does not hold with a margin in 8 s runs, not even in the simulator (docs/vswitch.md)"]
fn p2_on_real_traffic_loss_claims() {
    if !privileged_test_allowed("p2_on_real_traffic_loss_claims") {
        return;
    }
    let out = run();
    for prefix in [
        "strict priority: the Low tier's loss grows",
        "18 guests: delay-constrained loses fewer packets over all tiers",
        "18 guests: delay-constrained lowers the Mid tier's share",
    ] {
        assert!(value(&out, prefix) > 0.0, "{prefix}");
    }
}

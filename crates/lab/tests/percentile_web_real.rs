//! The percentile-web experiment on real Linux (root; nginx-light): FIFO, Percentile and
//! strict priority through the NFQUEUE daemon. Budget: ~80–160 s for the three modes.

#[path = "common_lab.rs"]
mod common_lab;
use common_lab::{assert_json_units, print_checks};
use netsched_lab::real::percentile_web::{
    checks, run_experiment, steadiness, RealParams, CLAIM_MEANS_ORDERED, CLAIM_NO_PAIR_REVERSED,
    CLAIM_TABLE14, DEFAULT_MAX_HOLD_FACTOR, MIN_STEADINESS,
};
use netsched_nfq::config::DisciplineKind;
use netsched_testbed::{namespaces_with, privileged_test_allowed, processes_with};
use std::time::Duration;

/// The privileged tests pin nginx and the load to the same CPUs: run them one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The three modes with every claim one run can decide (docs/testing.md says why each holds
/// with a margin on a loaded 2-core machine). The ordering of *adjacent* classes' means is
/// printed, not asserted: the P0 rule does not enforce it and can freeze a class for seconds
/// (`percentile_web::checks`); C0 faster than C4 is asserted.
#[test]
fn percentile_web_real_fifo_percentile_strict() {
    if !privileged_test_allowed("percentile_web_real_fifo_percentile_strict") {
        return;
    }
    let _serial = serial();
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("nfq-pweb-test-{}", std::process::id()));
    let params = serde_json::json!({ "quick_duration_s": 25 });
    let (output, runs) = run_experiment(&params, 1, &out, true).expect("experiment runs");
    // The measured figures, in the test log (CI) whatever the outcome.
    print_checks(&output);
    assert_json_units(&output);
    assert_eq!(runs.len(), 3);
    for r in &runs {
        let sent: u64 = r.load.sent.iter().sum();
        // A sanity floor only: a busy shared machine may run the server 5× slower.
        assert!(sent > 200, "{}: only {sent} requests", r.mode.as_str());
        assert_eq!(r.load.sent, r.load.received, "{}", r.mode.as_str());
        assert!(
            r.load.errors.is_empty(),
            "{}: {:?}",
            r.mode.as_str(),
            r.load.errors
        );
    }
    let pct = runs
        .iter()
        .find(|r| r.mode == DisciplineKind::Percentile)
        .unwrap();
    // The experiment's default deadline is auto_quantile (docs/percentile-web-real.md, "Which deadline").
    assert_eq!(pct.status.deadline_mode, "auto_quantile");
    // ... and a max_hold that follows the server: k × its recent server time, clamped.
    assert_eq!(pct.status.max_hold_factor, Some(DEFAULT_MAX_HOLD_FACTOR));
    assert!(
        (20_000_000..=1_000_000_000).contains(&pct.status.max_hold_ns),
        "max_hold {} ns",
        pct.status.max_hold_ns
    );
    // The daemon's own counts agree with the clients' (N per class = requests sent).
    for (k, c) in pct.status.classes.iter().enumerate() {
        assert_eq!(c.n, pct.load.sent[k], "class {k}: daemon N vs client count");
    }
    // Every check the experiment reports passes, except the two about the ordering of
    // *adjacent* classes' means, which one run cannot decide (`checks` says why; they are
    // printed above and decided over repeated runs), and Table 14's shape, which includes
    // that ordering and is decided over repeats (docs/testing.md). C0 faster than C4 is
    // asserted.
    let p = RealParams::from_json(&params, true).unwrap();
    let cs = checks(&runs, &p);
    assert_eq!(cs.len(), output.checks.len());
    assert_eq!(cs.len(), 14, "{cs:#?}");
    assert_eq!(
        cs.iter()
            .filter(|c| c.claim.starts_with(CLAIM_TABLE14))
            .count(),
        4
    );
    // The Percentile claims are about where the rule converges on one server. When the
    // shared machine changed the server's speed by more than 2× in every attempt (steadiness
    // below MIN_STEADINESS after `attempts` runs; the criterion is the server's throughput,
    // never a claim's outcome), the run measured the machine: those claims are printed, not
    // asserted, and the reason is printed. The FIFO, strict-priority and accounting claims
    // are asserted always. (At load average 12–27, 3 of 13 runs: docs/testing.md.)
    let steady = steadiness(pct) >= MIN_STEADINESS;
    let always = |claim: &str| {
        claim.starts_with("every request sent")
            || claim.starts_with("FIFO favours")
            || claim.starts_with("strict priority serves")
    };
    if !steady {
        eprintln!(
            "INCONCLUSIVE (not asserted): the server was unsteady in all {} Percentile runs \
             (last: slowest 5 s window {:.0}% of the fastest, needs {:.0}%); the Percentile \
             claims are printed above, the FIFO, strict and accounting claims are asserted",
            pct.attempt,
            100.0 * steadiness(pct),
            100.0 * MIN_STEADINESS
        );
    }
    let failed: Vec<_> = output
        .checks
        .iter()
        .filter(|c| {
            !c.passed
                && (steady || always(&c.claim))
                && !c.claim.starts_with(CLAIM_MEANS_ORDERED)
                && !c.claim.starts_with(CLAIM_NO_PAIR_REVERSED)
                && !c.claim.starts_with(CLAIM_TABLE14)
        })
        .collect();
    assert!(failed.is_empty(), "{failed:#?}");
    for f in &output.figures {
        assert!(out.join(&f.file).exists(), "{} missing", f.file);
    }
    assert!(out.join("real-percentile-response.csv").exists());
    assert!(
        namespaces_with(&pct.testbed_tag).is_empty(),
        "testbed namespaces removed"
    );
    assert!(processes_with(&pct.testbed_tag).is_empty(), "nginx stopped");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn percentile_web_real_params_errors_are_clear() {
    let e = RealParams::from_json(&serde_json::json!({"budget": 0}), true)
        .unwrap_err()
        .to_string();
    assert!(e.contains("budget"), "{e}");
    let e = RealParams::from_json(&serde_json::json!({"percentiles": [90, 0]}), true)
        .unwrap_err()
        .to_string();
    assert!(e.contains("percentile"), "{e}");
    let e = format!(
        "{:#}",
        RealParams::from_json(&serde_json::json!({"modes": ["lifo"]}), true).unwrap_err()
    );
    assert!(e.contains("lifo"), "{e}");
    let e = format!(
        "{:#}",
        RealParams::from_json(&serde_json::json!({"max_hold_factor": 500}), true).unwrap_err()
    );
    assert!(e.contains("max_hold_factor") && e.contains("500"), "{e}");
    let p = RealParams::from_json(&serde_json::json!({"max_hold_factor": 0}), true).unwrap();
    assert_eq!(p.max_hold_factor, None, "0 = the fixed max_hold_ms");
    let p = RealParams::from_json(&serde_json::json!({}), true).unwrap();
    assert_eq!(p.max_hold_factor, Some(DEFAULT_MAX_HOLD_FACTOR));
}

#[test]
fn percentile_web_real_params_follow_the_scenario_file() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scenarios/percentile-web.toml"
    ));
    let Ok(text) = text else {
        return; // the lab's scenario file is not in this checkout
    };
    let table = netsched_lab::scenario::parse(&text, "percentile-web.toml").unwrap();
    let params = netsched_lab::scenario::to_json_for("percentile-web", &table).unwrap();
    let p = RealParams::from_json(&params, true).unwrap();
    let want: Vec<u32> = params["clients"]["percentiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(p.percentiles, want);
    assert_eq!(
        p.threads_per_client as u64,
        params["clients"]["threads"].as_u64().unwrap()
    );
    assert!(p.duration <= Duration::from_secs(30), "quick stays short");
    // The real run's own table overrides the simulation's deadline (docs/percentile-web-real.md, "Which deadline").
    if let Some(d) = params.pointer("/real/deadline").and_then(|v| v.as_str()) {
        assert_eq!(p.deadline, d);
    }
}

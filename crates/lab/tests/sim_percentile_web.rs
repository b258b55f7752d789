//! percentile-web in the simulator: the thesis's claims, asserted on the measured numbers.

use netsched_lab::experiments::percentile_web;
use std::path::{Path, PathBuf};

fn scenario() -> serde_json::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/percentile-web.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    // As the runner reads it: unit-grammar keys become the numbers the experiment reads.
    let table = netsched_lab::scenario::parse(&text, "percentile-web.toml").unwrap();
    netsched_lab::scenario::to_json_for("percentile-web", &table).unwrap()
}

fn tempdir(name: &str) -> PathBuf {
    let d = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("netsched-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn classes(out: &netsched_report::ExperimentOutput, run: &str) -> Vec<serde_json::Value> {
    out.results
        .runs
        .iter()
        .find(|r| r.config["run"] == run)
        .unwrap_or_else(|| panic!("run {run}"))
        .metrics["classes"]
        .as_array()
        .unwrap()
        .clone()
}

fn col(cs: &[serde_json::Value], key: &str) -> Vec<f64> {
    cs.iter()
        .map(|c| c[key].as_f64().unwrap_or(f64::NAN))
        .collect()
}

fn spread(v: &[f64]) -> f64 {
    let max = v.iter().cloned().fold(f64::MIN, f64::max);
    let min = v.iter().cloned().fold(f64::MAX, f64::min);
    (max - min) / max
}

#[test]
fn percentile_web_orders_classes_and_equalises_attainment() {
    let dir = tempdir("pweb");
    let out = percentile_web::run(&scenario(), 1, &dir).unwrap();
    for c in &out.comparisons {
        eprintln!("{} | paper {} | ours {}", c.quantity, c.paper, c.ours);
    }
    for c in &out.checks {
        eprintln!("[{}] {} — {}", c.passed, c.claim, c.detail);
    }
    for n in &out.notes {
        eprintln!("NOTE {n}");
    }

    let fifo = classes(&out, "fifo");
    let fifo_mean = col(&fifo, "mean_response_s");
    assert!(spread(&fifo_mean) <= 0.10, "FIFO means {fifo_mean:?}");

    let pct = classes(&out, "percentile");
    let mean = col(&pct, "mean_response_s");
    assert!(
        mean.windows(2).all(|w| w[0] < w[1]),
        "Percentile means not ordered: {mean:?}"
    );
    let att = col(&pct, "attainment");
    assert!(spread(&att) <= 0.05, "attainment {att:?}");
    assert!(att.iter().all(|a| *a > 0.0));
    // No starvation: every class keeps at least the starvation line of its FIFO throughput
    // (the same line strict priority falls below), no silent second.
    let tp = col(&pct, "throughput_per_s");
    let fifo_tp = col(&fifo, "throughput_per_s");
    for c in 0..5 {
        assert!(
            tp[c] >= 0.1 * fifo_tp[c],
            "class {c}: {} vs {}",
            tp[c],
            fifo_tp[c]
        );
    }
    assert!(col(&pct, "longest_gap_s").iter().all(|g| *g == 0.0));

    // Strict priority starves C4 where the scheduler holds every waiting request.
    let prio = classes(&out, "strict_priority_all_held");
    let ptp = col(&prio, "throughput_per_s");
    assert!(
        ptp[4] < 0.1 * fifo_tp[4],
        "strict priority C4 {} vs FIFO {}",
        ptp[4],
        fifo_tp[4]
    );
    assert!(ptp[0] > fifo_tp[0], "strict priority favours C0");

    for c in &out.checks {
        assert!(c.passed, "{}: {}", c.claim, c.detail);
        // Every numeric claim carries its evidence, so multi-seed runs decide it on an interval.
        assert!(c.evidence.is_some(), "{}", c.claim);
    }
    assert_eq!(out.checks.len(), 8);
    for f in [
        "per_second.csv",
        "mean_response.svg",
        "throughput.svg",
        "sensitivity.csv",
    ] {
        assert!(dir.join(f).exists(), "{f}");
    }
    // The sensitivity table is in the report, with the configured row and variants.
    let table = out
        .notes
        .iter()
        .find(|n| n.contains("**Sensitivity**"))
        .expect("sensitivity table");
    assert!(table.contains("| as configured |") && table.contains("think time 3 ms"));
    // The mean-response chart is on a log axis with the thesis's figures as marks.
    let svg = std::fs::read_to_string(dir.join("mean_response.svg")).unwrap();
    assert!(svg.contains("log scale") && svg.matches("class=\"mark\"").count() == 10);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn percentile_web_same_seed_same_results() {
    let mut params = scenario();
    params["clients"]["requests_per_thread"] = 300.into();
    params["sensitivity"] = false.into();
    let a = percentile_web::run(&params, 3, &tempdir("pweb-a")).unwrap();
    let b = percentile_web::run(&params, 3, &tempdir("pweb-b")).unwrap();
    assert_eq!(
        serde_json::to_string(&a.results.runs).unwrap(),
        serde_json::to_string(&b.results.runs).unwrap()
    );
}

#[test]
fn percentile_web_rejects_bad_input_by_name() {
    let mut params = scenario();
    params["server"]["wokers"] = 2.into();
    let err = percentile_web::run(&params, 1, &tempdir("pweb-typo"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("wokers"), "{err}");
    let mut params = scenario();
    params["clients"]["percentiles"] = serde_json::json!([90, 0, 70]);
    let err = percentile_web::run(&params, 1, &tempdir("pweb-p"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("percentiles"), "{err}");
    // Counts are bounded: a huge thread count is a named error, not an allocation.
    let mut params = scenario();
    params["clients"]["threads"] = 100_000_000.into();
    let err = percentile_web::run(&params, 1, &tempdir("pweb-big"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("clients.threads = 100000000"), "{err}");
    // The open-loop variant's load is a positive number.
    let mut params = scenario();
    params["clients"]["open_load"] = (-1.0).into();
    let err = percentile_web::run(&params, 1, &tempdir("pweb-open"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("clients.open_load = -1"), "{err}");
    // A wrong type names the key and the value.
    let mut params = scenario();
    params["clients"]["threads"] = "many".into();
    let err = percentile_web::run(&params, 1, &tempdir("pweb-type"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("clients.threads:") && err.contains("\"many\""),
        "{err}"
    );
}

/// The Table 14 check's verdict on one seed, with its detail.
fn table14_verdict(params: &serde_json::Value, seed: u64) -> (bool, String) {
    let out = percentile_web::run(params, seed, &tempdir(&format!("pweb-t14-{seed}"))).unwrap();
    let c = out
        .checks
        .iter()
        .find(|c| c.claim.starts_with("Table 14's shape"))
        .expect("Table 14 check");
    (c.passed, c.detail.clone())
}

/// Table 14's shape holds on seeds the margin was not set on (calibration: 101–110), each seed
/// on its own; and the check fails where the scheduler holds every waiting request (the
/// lowest class then sends about a quarter of an equal share), so it can tell them apart.
#[test]
fn percentile_web_table14_shape_on_unseen_seeds() {
    let mut params = scenario();
    params["sensitivity"] = false.into();
    for seed in 1..=10 {
        let (passed, detail) = table14_verdict(&params, seed);
        assert!(passed, "seed {seed}: {detail}");
    }
    params["server"]["listen_limit"] = 0.into();
    let (passed, detail) = table14_verdict(&params, 1);
    assert!(!passed, "every wait in the scheduler: {detail}");
}

/// Calibration sweep (not a check): `cargo test --release -p netsched-lab --test
/// sim_percentile_web -- --ignored --nocapture`.
#[test]
#[ignore]
fn percentile_web_calibration_sweep() {
    for think in [0.0, 3.0, 6.0, 10.0] {
        for deadline in [serde_json::json!({"ms": 4.0}), serde_json::json!("auto")] {
            let mut params = scenario();
            params["sensitivity"] = false.into();
            params["clients"]["think"] =
                serde_json::json!({"dist": "exponential", "mean_ms": think});
            params["percentile"]["deadline"] = deadline.clone();
            let out = percentile_web::run(&params, 1, &tempdir("pweb-sweep")).unwrap();
            let pct = classes(&out, "percentile");
            eprintln!(
                "think {think} deadline {deadline}: checks {:?} means {:?} tp {:?} att {:?}",
                out.checks.iter().map(|c| c.passed).collect::<Vec<_>>(),
                col(&pct, "mean_response_s")
                    .iter()
                    .map(|m| (m * 1e4).round() / 10.0)
                    .collect::<Vec<_>>(),
                col(&pct, "throughput_per_s")
                    .iter()
                    .map(|m| m.round())
                    .collect::<Vec<_>>(),
                col(&pct, "attainment")
                    .iter()
                    .map(|m| (m * 1e3).round() / 1e3)
                    .collect::<Vec<_>>(),
            );
        }
    }
}

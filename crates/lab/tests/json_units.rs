//! The lab's JSON outputs follow the JSON unit rule (docs/cli.md, "JSON outputs"): the
//! checker `netsched_util::json_units::violations` runs on the `results.json` that
//! `netsched lab run` writes for every experiment, on the aggregate of several seeds, and on
//! every run of a sweep; a sweep's chart shows the written unit in a readable multiple, and an
//! old metric name given to `--metric` still selects the metric.

#[path = "common_lab.rs"]
mod common_lab;
use common_lab::*;
use netsched_lab::cli;
use netsched_util::json_units::violations;
use serde_json::Value;
use std::path::Path;

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// Every run's metrics of a written `results.json` (a run's or an aggregate's): the
/// violations, with the run's config, and the metric names seen.
fn check_results(p: &Path) -> (Vec<String>, Vec<String>) {
    let doc = read_json(p);
    let runs = doc["runs"].as_array().expect("runs");
    assert!(!runs.is_empty(), "{}: no runs", p.display());
    let mut bad = Vec::new();
    let mut names = Vec::new();
    for run in runs {
        for v in violations(&run["metrics"]) {
            bad.push(format!("{} {}: {v}", p.display(), run["config"]));
        }
        names.extend(run["metrics"].as_object().unwrap().keys().cloned());
    }
    (bad, names)
}

#[test]
fn every_experiment_s_results_name_every_number_with_its_unit() {
    // The scenarios' own sizes: every metric each experiment writes, in its real shape.
    let mut bad = Vec::new();
    let mut names = Vec::new();
    for e in [
        "percentile-web",
        "np-dispatch",
        "vm-delay",
        "adsl-ack",
        "lvs-cluster",
    ] {
        let dir = temp_dir(&format!("units-{e}"));
        cli::main_with(&["run", e, "--out", dir.to_str().unwrap()]).unwrap();
        let (b, n) = check_results(&dir.join("results.json"));
        bad.extend(b);
        names.extend(n);
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    // The renames took place (the checker would pass an empty document too).
    for n in [
        "idle_percent",
        "rate_bits_per_s",
        "elapsed_ns",
        "p99_ns",
        "upload_bits_per_s",
        "mean_response_ns",
        "req_per_s",
    ] {
        assert!(names.iter().any(|x| x == n), "{n} not written: {names:?}");
    }
    for old in [
        "idle_pct",
        "rate_mbps",
        "p99_ms",
        "upload_kbps",
        "duration_s",
    ] {
        assert!(!names.iter().any(|x| x == old), "{old} still written");
    }
}

#[test]
fn an_aggregate_over_seeds_names_every_statistic_with_its_unit() {
    let dir = temp_dir("units-aggregate");
    cli::main_with(&[
        "run",
        "vm-delay",
        "--seeds",
        "2",
        "--out",
        dir.to_str().unwrap(),
    ])
    .unwrap();
    let (bad, names) = check_results(&dir.join("results.json"));
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert!(names.iter().any(|n| n == "p99_ns"), "{names:?}");
    let doc = read_json(&dir.join("results.json"));
    assert_eq!(doc["kind"], "aggregate");
    let p99 = &doc["runs"][0]["metrics"]["p99_ns"];
    assert!(p99["mean"].is_i64() || p99["mean"].is_u64(), "{p99}");
    assert_eq!(p99["n"], 2, "{p99}");
    for s in ["seed-1", "seed-2"] {
        let (bad, _) = check_results(&dir.join(s).join("results.json"));
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }
}

#[test]
fn a_sweep_s_runs_follow_the_rule_and_its_chart_shows_a_readable_unit() {
    let dir = temp_dir("units-sweep");
    cli::main_with(&[
        "sweep",
        "vm-delay",
        "--grid",
        "load.cpu_busy=0.3,0.5",
        "--seeds",
        "2",
        "--metric",
        "High | p99_ms",
        "--out",
        dir.to_str().unwrap(),
    ])
    .unwrap();
    let mut runs = 0;
    for e in std::fs::read_dir(dir.join("runs")).unwrap() {
        let (bad, _) = check_results(&e.unwrap().path().join("results.json"));
        assert!(bad.is_empty(), "{}", bad.join("\n"));
        runs += 1;
    }
    assert_eq!(runs, 4, "2 grid points × 2 seeds");
    // The old name in --metric selected the written one.
    let csv = std::fs::read_to_string(dir.join("sweep.csv")).unwrap();
    assert!(csv.contains("High | p99_ns,2,"), "{csv}");
    assert!(!csv.contains("p99_ms"), "{csv}");
    // The p99 of a game server's tier is milliseconds, not millions of nanoseconds.
    let svg = std::fs::read_to_string(dir.join("sweep.svg")).unwrap();
    assert!(svg.contains(">p99 (ms)</text>"), "{svg}");
}

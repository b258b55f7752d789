//! Shared functions for the lab's integration tests (included with `#[path]`; each test file
//! uses a different subset).
#![allow(dead_code)]

use netsched_lab::{experiments, runner};
use netsched_report::ExperimentOutput;
use std::path::PathBuf;

/// A fresh temporary folder for one test.
pub fn temp_dir(tag: &str) -> PathBuf {
    let d = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("netsched-lab-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Run experiment `name` with its embedded scenario, `sets` overrides and `seed`.
pub fn run(name: &str, sets: &[&str], seed: u64, tag: &str) -> ExperimentOutput {
    let exp = experiments::find(name).unwrap();
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let params = runner::scenario_params(name, None, &sets).unwrap();
    let out = temp_dir(tag);
    let req = runner::RunRequest {
        exp,
        params,
        seed,
        out: out.clone(),
        real: false,
        quick: false,
    };
    let o = runner::execute(&req).unwrap();
    runner::write_outputs(&req, &o).unwrap();
    o
}

/// Print every check with its verdict (shown when a test fails, or with `--nocapture`).
pub fn print_checks(o: &ExperimentOutput) {
    for c in &o.checks {
        let mark = if c.passed { "✓" } else { "✗" };
        eprintln!("{mark} {} — {}", c.claim, c.detail);
    }
}

/// Assert the check whose claim contains `needle` passed; print all checks otherwise.
pub fn assert_check(o: &ExperimentOutput, needle: &str) {
    let c = o
        .checks
        .iter()
        .find(|c| c.claim.contains(needle))
        .unwrap_or_else(|| panic!("no check containing {needle:?}: {:#?}", o.checks));
    assert!(c.passed, "check failed: {} — {}", c.claim, c.detail);
}

/// results.json of a run folder without the command line (the one field allowed to differ).
pub fn results_without_command_line(dir: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("results.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v.as_object_mut().unwrap().remove("command_line");
    v
}

/// Every run's metrics, as `results.json` writes them, follow the JSON unit rule
/// (docs/cli.md, "JSON outputs"): the checker finds nothing.
pub fn assert_json_units(o: &ExperimentOutput) {
    let written = o.results.to_rule();
    let bad: Vec<String> = written
        .runs
        .iter()
        .flat_map(|r| {
            netsched_util::json_units::violations(&r.metrics)
                .into_iter()
                .map(move |v| format!("{}: {v}", r.config))
        })
        .collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

//! adsl-ack in the simulator: the paper's claims, asserted on the measured numbers.

use netsched_lab::experiments::adsl_ack;
use std::path::{Path, PathBuf};

fn scenario() -> serde_json::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/adsl-ack.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    // As the runner reads it: unit-grammar keys become the numbers the experiment reads.
    let table = netsched_lab::scenario::parse(&text, "adsl-ack.toml").unwrap();
    netsched_lab::scenario::to_json_for("adsl-ack", &table).unwrap()
}

fn tempdir(name: &str) -> PathBuf {
    let d = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("netsched-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn run_metric(out: &netsched_report::ExperimentOutput, run: &str, key: &str) -> f64 {
    out.results
        .runs
        .iter()
        .find(|r| r.config["run"] == run)
        .unwrap_or_else(|| panic!("run {run}"))
        .metrics[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{run}.{key}"))
}

#[test]
fn adsl_ack_reproduces_the_collapse_and_the_fix() {
    let dir = tempdir("adsl");
    let out = adsl_ack::run(&scenario(), 1, &dir).unwrap();
    for c in &out.comparisons {
        eprintln!("{} | paper {} | ours {}", c.quantity, c.paper, c.ours);
    }
    for c in &out.checks {
        eprintln!("[{}] {} — {}", c.passed, c.claim, c.detail);
    }
    for n in &out.notes {
        eprintln!("NOTE {n}");
    }
    let up_alone = run_metric(&out, "upload alone", "upload_kbps");
    let down_alone = run_metric(&out, "download alone", "download_kbps");
    // Alone, each direction fills its link (800 / 2100 kbit/s minus nothing: no ATM overhead).
    assert!(
        up_alone > 700.0 && up_alone <= 805.0,
        "upload alone {up_alone}"
    );
    assert!(
        down_alone > 1900.0 && down_alone <= 2110.0,
        "download alone {down_alone}"
    );

    let fu = run_metric(&out, "both, FIFO 100", "upload_kbps");
    let fd = run_metric(&out, "both, FIFO 100", "download_kbps");
    assert!(
        fu < 0.8 * up_alone || fd < 0.8 * down_alone,
        "FIFO collapse: up {fu} down {fd}"
    );
    assert!(run_metric(&out, "both, FIFO 100", "uplink_drops_data") > 0.0);

    let su = run_metric(&out, "both, ACK separation", "upload_kbps");
    let sd = run_metric(&out, "both, ACK separation", "download_kbps");
    assert!(
        su >= 0.8 * up_alone,
        "ACK separation upload {su} vs {up_alone}"
    );
    assert!(
        sd >= 0.9 * down_alone,
        "ACK separation download {sd} vs {down_alone}"
    );

    let du = run_metric(&out, "both, input queues + DRR", "upload_kbps");
    let dd = run_metric(&out, "both, input queues + DRR", "download_kbps");
    assert!(
        du < 0.8 * up_alone || dd < 0.8 * down_alone,
        "input-queue DRR does not help: up {du} down {dd}"
    );

    assert!(out.checks.len() >= 5);
    for c in &out.checks {
        assert!(c.passed, "{}: {}", c.claim, c.detail);
        assert!(c.evidence.is_some(), "{} has no evidence", c.claim);
    }
    // The sensitivity table leaves P3's regime on purpose and says so; inside the regime the
    // P3 claims hold, outside the upload claim fails (the arithmetic says it must).
    let table = out
        .notes
        .iter()
        .find(|n| n.contains("**Sensitivity**"))
        .expect("sensitivity table");
    let rows: Vec<&str> = table
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| variant"))
        .collect();
    assert!(rows.len() >= 8, "{table}");
    assert!(rows.iter().any(|r| r.contains("**outside**")), "{table}");
    for r in &rows {
        if r.contains("**outside**") {
            assert!(
                r.contains("ACK-sep upload"),
                "outside the regime the upload claim fails: {r}"
            );
        }
    }
    assert!(dir.join("sensitivity.csv").exists());
    let rates = std::fs::read_to_string(dir.join("rates.svg")).unwrap();
    assert_eq!(
        rates.matches("class=\"mark\"").count(),
        6,
        "P3's six figures as marks"
    );
    // The matrix found settings under which the other direction collapses.
    let collapsed: Vec<String> = out
        .results
        .runs
        .iter()
        .filter(|r| r.config["run"] == "matrix: both, FIFO 100")
        .map(|r| r.metrics["collapsed"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(collapsed.len(), 16);
    assert!(collapsed.iter().any(|c| c == "upload"));
    assert!(collapsed.iter().any(|c| c == "download"));
    for f in [
        "throughput.csv",
        "matrix.csv",
        "runs.csv",
        "throughput_fifo.svg",
        "rates.svg",
    ] {
        assert!(dir.join(f).exists(), "{f}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn adsl_ack_same_seed_same_results() {
    let mut params = scenario();
    params["matrix"]["enabled"] = false.into();
    params["sensitivity"] = false.into();
    params["duration_s"] = 20.0.into();
    params["seeds"] = 2.into();
    let a = adsl_ack::run(&params, 7, &tempdir("adsl-a")).unwrap();
    let b = adsl_ack::run(&params, 7, &tempdir("adsl-b")).unwrap();
    assert_eq!(
        serde_json::to_string(&a.results.runs).unwrap(),
        serde_json::to_string(&b.results.runs).unwrap()
    );
}

#[test]
fn adsl_ack_rejects_a_typo_by_name() {
    let mut params = scenario();
    params["tcp"]["sackk"] = true.into();
    let err = adsl_ack::run(&params, 1, &tempdir("adsl-typo"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("sackk"), "{err}");
    let mut params = scenario();
    params["topology"]["up_kbps"] = (-5.0).into();
    let err = adsl_ack::run(&params, 1, &tempdir("adsl-neg"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("up_kbps"), "{err}");
    // Sizes are bounded with a named error.
    let mut params = scenario();
    params["topology"]["uplink_fifo_packets"] = 100_000_000.into();
    let err = adsl_ack::run(&params, 1, &tempdir("adsl-big"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("topology.uplink_fifo_packets = 100000000"),
        "{err}"
    );
    let mut params = scenario();
    params["seeds"] = "five".into();
    let err = adsl_ack::run(&params, 1, &tempdir("adsl-type"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("seeds:") && err.contains("\"five\""), "{err}");
}

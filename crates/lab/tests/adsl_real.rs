//! The P3 experiment on real Linux, as CI runs it (root): ACK separation by `netsched shape`
//! (tc) and by `netsched link` (core AckSeparation) restores both directions where a FIFO
//! does not; strict ACK priority starves the upload at strong asymmetry, the ACK filter + cap
//! does not; nothing is left behind, also when a run fails.
//!
//! Budget: 10 runs of 12 s plus set-up ≈ 2.5 minutes.

use netsched_lab::real::adsl_ack::{run_one, run_real, Access, RunSpec, Separation, Variant};
use netsched_testbed::{namespaces_with, privileged_test_allowed};

/// The tests check that nothing of theirs is left, so they must not overlap.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Processes whose parent is this test process (iperf3, ping are started directly by us).
fn our_children() -> Vec<String> {
    let me = std::process::id().to_string();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        // pid (comm) state ppid ...
        if let Some(rest) = stat.rsplit_once(") ").map(|(_, r)| r) {
            let f: Vec<&str> = rest.split_whitespace().collect();
            if f.get(1) == Some(&me.as_str()) {
                out.push(stat.chars().take(60).collect());
            }
        }
    }
    out
}

/// `netsched shape` state files (one per installed tree).
fn shape_state_files() -> std::collections::BTreeSet<String> {
    std::fs::read_dir("/run/netsched/shape")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn adsl_ack_real_fifo_vs_ack_separation_and_strong_asymmetry() {
    if !privileged_test_allowed("adsl_ack_real_fifo_vs_ack_separation_and_strong_asymmetry") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let state_before = shape_state_files();
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("netsched-adsl-real-{}", std::process::id()));
    let params = serde_json::json!({
        "real_variants": ["default/none/88"],
        "real_duration_s": 12,
        "real_strong": true,
    });
    let r = run_real(&params, 7, &out, true).expect("adsl-ack --real runs");
    for c in &r.checks {
        eprintln!(
            "[{}] {} — {}",
            if c.passed { "PASS" } else { "FAIL" },
            c.claim,
            c.detail
        );
    }
    assert_eq!(r.results.mode, "real");
    assert_eq!(r.results.runs.len(), 10);
    assert!(out.join("throughput.csv").exists());
    // The link engine accounted for every frame in every run (rx = tx + drops + held).
    for run in &r.results.runs {
        assert_eq!(run.metrics["link_accounting"], "balanced", "{}", run.config);
    }
    // FIFO: a direction collapses; ACK separation (tc and link): both directions recover;
    // strong asymmetry: strict priority (core, in the link engine) starves the upload, filter
    // + cap does not. The tc variant of strict priority at strong asymmetry is reported but
    // not asserted: its outcome depends on where the download's own rate settles (19–41 % of
    // the upload's alone rate measured; see docs/shape-and-link.md).
    let failed: Vec<_> = r
        .checks
        .iter()
        .filter(|c| !c.passed)
        .filter(|c| !(c.claim.starts_with("[strong] strict") && c.claim.contains("(tc)")))
        .collect();
    assert!(failed.is_empty(), "failed checks: {failed:#?}");
    assert_eq!(r.checks.len(), 6);
    assert!(
        namespaces_with("adslr").is_empty(),
        "namespaces left behind"
    );
    assert!(
        our_children().is_empty(),
        "processes left: {:?}",
        our_children()
    );
    assert_eq!(
        shape_state_files(),
        state_before,
        "shape state files left behind"
    );
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn a_failing_run_leaves_nothing_behind() {
    if !privileged_test_allowed("a_failing_run_leaves_nothing_behind") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let spec = RunSpec {
        set: "adsl".into(),
        upload: true,
        download: true,
        sep: Separation::Shape,
        // Fails after the namespaces and veths exist: no such congestion control.
        variant: Variant {
            cc: "nosuchcc".into(),
            window_packets: None,
            down_window_packets: None,
        },
        secs: 5,
        access: Access {
            up_bps: 800_000,
            down_bps: 2_100_000,
            lan_bps: 10_000_000,
            up_queue: 100,
            down_queue: 300,
            delay: 10_000_000,
        },
        ack_share_max: 0.5,
    };
    let e = format!("{:#}", run_one(&spec).unwrap_err());
    assert!(e.contains("nosuchcc"), "{e}");
    assert!(
        namespaces_with("adslr").is_empty(),
        "namespaces left behind"
    );
    assert!(
        our_children().is_empty(),
        "processes left: {:?}",
        our_children()
    );
}

//! The P3 experiment on real Linux, as CI runs it (root): ACK separation by `netsched shape`
//! (tc) and by `netsched link` (core AckSeparation) restores both directions where a FIFO
//! does not; strict ACK priority starves the upload at strong asymmetry, the ACK filter + cap
//! does not; nothing is left behind, also when a run fails.
//!
//! Budget: 10 runs of 12 s plus set-up ≈ 2.5 minutes.

#[path = "common_lab.rs"]
mod common_lab;
use common_lab::{assert_json_units, print_checks};
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

/// `netsched shape` state files (one per installed tree, named after its namespace) of the
/// testbed tagged `tag`. Other runs on the machine (other worktrees' tests) have other tags.
fn shape_state_files(tag: &str) -> Vec<String> {
    std::fs::read_dir("/run/netsched/shape")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(tag))
                .collect()
        })
        .unwrap_or_default()
}

/// Nothing of the testbed tagged `tag` is left: namespaces, shape state files.
fn assert_nothing_left(tag: &str) {
    assert!(
        namespaces_with(tag).is_empty(),
        "namespaces of {tag} left behind"
    );
    assert!(
        shape_state_files(tag).is_empty(),
        "shape state files of {tag} left behind"
    );
}

/// The test's margin under each rate claim (10 points): a run that lost more of its time to
/// a busy machine cannot decide a rate claim.
const LATE_MARGIN_PCT: f64 = 10.0;

#[test]
fn adsl_ack_real_fifo_vs_ack_separation_and_strong_asymmetry() {
    if !privileged_test_allowed("adsl_ack_real_fifo_vs_ack_separation_and_strong_asymmetry") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("netsched-adsl-real-{}", std::process::id()));
    let params = serde_json::json!({
        "real_variants": ["default/none/88"],
        "real_duration_s": 12,
        "real_strong": true,
    });
    let r = run_real(&params, 7, &out, true).expect("adsl-ack --real runs");
    print_checks(&r);
    assert_json_units(&r);
    assert_eq!(r.results.mode, "real");
    assert_eq!(r.results.runs.len(), 10);
    assert!(out.join("throughput.csv").exists());
    // The link engine accounted for every frame in every run (rx = tx + drops + held).
    for run in &r.results.runs {
        assert_eq!(run.metrics["link_accounting"], "balanced", "{}", run.config);
    }
    // What one 12 s run on a shared 2-core machine decides (docs/testing.md, "adsl_real"):
    // - ACK separation (tc and link) keeps both directions near their rates alone: asserted
    //   with a 10-point margin under each claim (upload ≥ 70%, download ≥ 80%), because the
    //   "alone" baseline and the shares move by 10–20 points between runs on a loaded machine;
    // - strong asymmetry: strict priority in the link engine starves the upload (asserted
    //   < 30% against the claim's 20%; measured 11–13%), filter + cap does not (the claim's
    //   own ≥ 30% / ≥ 50%; measured 65–82% / 255–329%);
    // - FIFO's collapse of one direction (< 80%) and tc strict priority at strong asymmetry
    //   are reported, not asserted: single runs measured 29–58% but also 84% and 93% for
    //   FIFO, so one run cannot decide it — `lab run adsl-ack --real --repeat N` does, on
    //   the interval of the same value.
    // Every check's report line still carries the paper's own threshold.
    let margin = |c: &netsched_report::Check| -> Option<(f64, netsched_report::Cmp, f64)> {
        let e = c.evidence?;
        if c.claim.contains("FIFO")
            || (c.claim.starts_with("[strong] strict") && c.claim.contains("(tc)"))
        {
            return None;
        }
        let t = match e.op {
            netsched_report::Cmp::Ge | netsched_report::Cmp::Gt
                if !c.claim.starts_with("[strong]") =>
            {
                e.threshold - 0.10
            }
            netsched_report::Cmp::Lt | netsched_report::Cmp::Le => e.threshold + 0.10,
            _ => e.threshold,
        };
        Some((e.value, e.op, t))
    };
    // A measured precondition (docs/testing.md, "adsl_real"): the rate claims are decided
    // only if the run got the machine. If a 1 ms sleeper of this process lost more than 10%
    // of the traffic time to late wake-ups beyond what the link engine catches up — more than
    // the test's 10-point margin — no rate ratio of the run can be decided; the accounting
    // and leak checks below still are.
    let late = r
        .results
        .runs
        .iter()
        .filter_map(|run| run.metrics["host_late_pct"].as_f64())
        .fold(0.0f64, f64::max);
    eprintln!("host lateness: worst run lost {late:.1}% of its time to late wake-ups");
    let mut asserted = 0;
    let mut failed = Vec::new();
    for c in &r.checks {
        if let Some((v, op, t)) = margin(c) {
            asserted += 1;
            if !op.holds(v, t) {
                failed.push(format!("{}: {v:.3} not {} {t:.2}", c.claim, op.symbol()));
            }
        }
    }
    assert_eq!(
        asserted, 7,
        "ACK separation (tc, link) × 2 + strong (link strict, filter+cap × 2)"
    );
    if late > LATE_MARGIN_PCT {
        eprintln!(
            "INCONCLUSIVE rate claims: the machine took {late:.1}% of the run's time (> \
             {LATE_MARGIN_PCT}%, the test's margin); not decided: {failed:#?}"
        );
    } else {
        assert!(
            failed.is_empty(),
            "failed with the test's margin (host lateness {late:.1}%): {failed:#?}"
        );
    }
    assert_eq!(r.checks.len(), 9);
    // Leak checks by each run's own tag: other worktrees may run these tests at the same time.
    for run in &r.results.runs {
        let tag = run.config["testbed"]
            .as_str()
            .expect("each run names its testbed");
        assert_nothing_left(tag);
    }
    assert!(
        our_children().is_empty(),
        "processes left: {:?}",
        our_children()
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
    // The failing command names its namespace, `ns<tag>-local`.
    let ns = e
        .split_whitespace()
        .find(|w| w.starts_with("nsadslr"))
        .unwrap_or_else(|| panic!("no namespace named in {e}"));
    let tag = ns.trim_start_matches("ns").split('-').next().unwrap();
    assert_nothing_left(tag);
    assert!(
        our_children().is_empty(),
        "processes left: {:?}",
        our_children()
    );
}

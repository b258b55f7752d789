//! np-dispatch (P1): the paper's orderings hold on measured idle times, with a fixed seed.

#[path = "common_lab.rs"]
mod common_lab;
use common_lab::*;

#[test]
fn np_dispatch_reproduces_the_papers_orderings() {
    let o = run("np-dispatch", &[], 1, "np");
    print_checks(&o);
    assert_check(&o, "least idle time at 64 B");
    assert_check(&o, "rises at 256 B");
    assert_check(&o, "rises at 512 B");
    assert_check(&o, "Modified FCFS has the most idle time");
    assert_check(&o, "best transfer rate at 1500 B");
    assert_check(&o, "N/gcd(N, b)");
    for c in &o.checks {
        assert!(c.evidence.is_some(), "{} has no evidence", c.claim);
    }
    // The sensitivity table: one row per variant, each claim decided again.
    let table = o
        .notes
        .iter()
        .find(|n| n.contains("**Sensitivity**"))
        .expect("sensitivity table");
    assert!(table.contains("| as configured |") && table.contains("no shared-state read"));
}

#[test]
fn np_dispatch_scenario_is_typed_and_bounded() {
    let exp = netsched_lab::experiments::find("np-dispatch").unwrap();
    let attempt = |edit: &dyn Fn(&mut serde_json::Value)| -> String {
        let mut params = netsched_lab::runner::scenario_params("np-dispatch", None, &[]).unwrap();
        edit(&mut params);
        let req = netsched_lab::runner::RunRequest {
            exp,
            params,
            seed: 1,
            out: temp_dir("np-typed"),
            real: false,
            quick: false,
        };
        format!("{:#}", netsched_lab::runner::execute(&req).unwrap_err())
    };
    // The 11 GB case: a thread count far beyond any network processor is refused up front.
    let e = attempt(&|p| p["processor"]["threads_per_engine"] = 100_000_000.into());
    assert!(
        e.contains("processor.threads_per_engine = 100000000"),
        "{e}"
    );
    let e = attempt(&|p| p["traffic"]["packets"] = 100_000_000.into());
    assert!(e.contains("traffic.packets"), "{e}");
    let e = attempt(&|p| p["cost"]["per_rule"] = 30.into());
    assert!(e.contains("per_rule"), "{e}");
    let e = attempt(&|p| p["traffic"]["packet_sizes"] = serde_json::json!([64, "big"]));
    assert!(e.contains("\"big\""), "{e}");
}

fn check<'a>(o: &'a netsched_report::ExperimentOutput, needle: &str) -> &'a netsched_report::Check {
    o.checks
        .iter()
        .find(|c| c.claim.contains(needle))
        .unwrap_or_else(|| panic!("no check containing {needle:?}"))
}

fn rate(o: &netsched_report::ExperimentOutput, policy: &str, size: u64) -> f64 {
    o.results
        .runs
        .iter()
        .find(|r| r.config["policy"] == policy && r.config["packet_bytes"] == size)
        .and_then(|r| r.metrics["rate_mbps"].as_f64())
        .unwrap_or_else(|| panic!("no run {policy} {size}"))
}

#[test]
fn np_dispatch_rr_wins_at_1500_only_through_the_shared_state_read() {
    // Without the read on the hand-off's critical path (the earlier ALU-only model), modified
    // RR skips the one thread that gets every SOP and out-runs static RR: the 1500 B claim
    // must fail, so the check can fail and the read is what decides it.
    let o = run(
        "np-dispatch",
        &[
            "traffic.packet_sizes=[64,1500]",
            "traffic.packets=2000",
            "cost.mem_read_cycles=0",
            "sensitivity=false",
        ],
        3,
        "np-noread",
    );
    assert!(!check(&o, "best transfer rate at 1500 B").passed);
    assert!(rate(&o, "modified_rr", 1500) > 1.5 * rate(&o, "static_rr", 1500));
}

#[test]
fn np_dispatch_checks_hold_over_the_sourced_latency_range() {
    // IXP1200 unloaded read latency: scratchpad 12-14, SRAM 16-20, SDRAM 33-40 cycles, at
    // 166-232 MHz (sources in scenarios/np-dispatch.toml): the fastest and slowest corners of
    // scratchpad/SRAM, and SDRAM at the slowest clock.
    for (cycles, mhz) in [(12, 232), (20, 166), (40, 166)] {
        let sets = [
            format!("cost.mem_read_cycles={cycles}"),
            format!("cost.clock={mhz}MHz"),
            "traffic.packets=2000".to_string(),
            "sensitivity=false".to_string(),
        ];
        let sets: Vec<&str> = sets.iter().map(|s| s.as_str()).collect();
        let o = run("np-dispatch", &sets, 4, &format!("np-lat{cycles}-{mhz}"));
        for c in &o.checks {
            assert!(
                c.passed,
                "{cycles} cycles @ {mhz} MHz: {} — {}",
                c.claim, c.detail
            );
        }
    }
}

#[test]
fn np_dispatch_zero_clock_is_a_named_error() {
    let exp = netsched_lab::experiments::find("np-dispatch").unwrap();
    let params = netsched_lab::runner::scenario_params(
        "np-dispatch",
        None,
        &["cost.clock=0MHz".to_string()],
    )
    .unwrap();
    let req = netsched_lab::runner::RunRequest {
        exp,
        params,
        seed: 1,
        out: temp_dir("np-clock0"),
        real: false,
        quick: false,
    };
    let e = netsched_lab::runner::execute(&req).unwrap_err();
    assert!(format!("{e:#}").contains("cost.clock = 0MHz"), "{e:#}");
}

#[test]
fn np_dispatch_without_clustering_rr_does_not_stall() {
    // With one thread per engine and 6 threads, b = 4 blocks gives SOPs on 3 threads; with
    // b = 1 (64 B) on all of them: the idle-time rise needs the clustering the model claims.
    let o = run(
        "np-dispatch",
        &[
            "traffic.packet_sizes=[64]",
            "traffic.packets=2000",
            "sensitivity=false",
        ],
        2,
        "np64",
    );
    assert_check(&o, "least idle time at 64 B");
    assert_eq!(
        o.results.runs.len(),
        6,
        "4 policies + 2 baselines at one size"
    );
}

//! np-dispatch (P1): the paper's orderings hold on measured idle times, with a fixed seed.

#[path = "common_lab.rs"]
mod common_lab;
use common_lab::*;

#[test]
fn np_dispatch_reproduces_p1_orderings() {
    let o = run("np-dispatch", &[], 1, "np");
    for c in &o.checks {
        eprintln!(
            "{} {} — {}",
            if c.passed { "✓" } else { "✗" },
            c.claim,
            c.detail
        );
    }
    assert_check(&o, "least idle time at 64 B");
    assert_check(&o, "rises at 256 B");
    assert_check(&o, "rises at 512 B");
    assert_check(&o, "Modified FCFS has the most idle time");
    assert_check(&o, "N/gcd(N, b)");
}

#[test]
fn np_dispatch_without_clustering_rr_does_not_stall() {
    // With one thread per engine and 6 threads, b = 4 blocks gives SOPs on 3 threads; with
    // b = 1 (64 B) on all of them: the idle-time rise needs the clustering the model claims.
    let o = run(
        "np-dispatch",
        &["traffic.packet_sizes=[64]", "traffic.packets=2000"],
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

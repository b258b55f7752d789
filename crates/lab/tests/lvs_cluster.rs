//! lvs-cluster (P4): balancer orderings on measured request rates, fixed seed.

#[path = "common_lab.rs"]
mod common_lab;
use common_lab::*;

#[test]
fn lvs_cluster_reproduces_p4_claims() {
    let o = run(
        "lvs-cluster",
        &["cluster.hosts=[1,15]", "cluster.extra_algorithms=[]"],
        1,
        "lvs",
    );
    for c in &o.checks {
        eprintln!(
            "{} {} — {}",
            if c.passed { "✓" } else { "✗" },
            c.claim,
            c.detail
        );
    }
    assert_check(&o, "LC far ahead");
    assert_check(&o, "DH scales with hosts");
}

#[test]
fn dh_behind_one_address_does_not_scale() {
    // Every request names the same destination: IPVS dh sends all of them to one host.
    let o = run(
        "lvs-cluster",
        &[
            "client.origins=1",
            "client.requests=3000",
            "client.max_time_s=60.0",
            "service.sizes=[\"300B\"]",
            "service.rate_1host=[318.0]",
            "cluster.extra_algorithms=[]",
        ],
        1,
        "lvs1",
    );
    let c = o
        .checks
        .iter()
        .find(|c| c.claim.contains("DH scales"))
        .unwrap();
    assert!(!c.passed, "dh scaled behind one address: {}", c.detail);
}

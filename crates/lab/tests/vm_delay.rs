//! vm-delay (P2): strict priority vs delay-constrained scheduling, fixed seed.

#[path = "common_lab.rs"]
mod common_lab;
use common_lab::*;

#[test]
fn vm_delay_reproduces_p2_claims() {
    let o = run("vm-delay", &["run.duration_s=30.0"], 1, "vm");
    for c in &o.checks {
        eprintln!(
            "{} {} — {}",
            if c.passed { "✓" } else { "✗" },
            c.claim,
            c.detail
        );
    }
    assert_check(&o, "low tier's p99 latency and loss grow");
    assert_check(&o, "smaller share of packets above");
    assert_check(&o, "latency gap between tiers shrinks");
    assert_check(&o, "no vif is passed over");
}

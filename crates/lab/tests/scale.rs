//! One run at scale (issue #29): a 1,000-host lvs-cluster, a 999-guest vm-delay and a
//! 10,000-rule np-dispatch are accepted and give valid results; sizes past the bounds are
//! refused with an error naming the key. Short runs: how time and memory grow is measured by
//! `scripts/bench-lab-scale`, never here.

#[path = "common_lab.rs"]
mod common_lab;
use common_lab::*;
use netsched_lab::experiments::{lvs_cluster, vm_delay};

#[test]
fn a_thousand_host_cluster_runs_and_every_host_serves() {
    let requests = 20_000u64;
    let o = run(
        "lvs-cluster",
        &[
            "cluster.hosts=[1000]",
            "cluster.algorithms=[\"rr\", \"lc\"]",
            "cluster.extra_algorithms=[\"sh\"]",
            "service.sizes=[\"1K\"]",
            "service.rate_1host=[231.0]",
            "client.concurrency=2000",
            &format!("client.requests={requests}"),
            "sensitivity.enabled=false",
        ],
        1,
        "scale-lvs",
    );
    let rr = o
        .results
        .runs
        .iter()
        .find(|r| r.config["algorithm"] == "rr" && r.config["case"] == "same")
        .expect("an rr run");
    let per_host: Vec<u64> = rr.metrics["per_host_requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(per_host.len(), 1000);
    assert_eq!(per_host.iter().sum::<u64>(), requests);
    // Round robin over 1,000 hosts reaches every one of them (a connection whose client port
    // is still in TIME_WAIT goes to its old host, so the counts are near 20, not exactly 20).
    assert!(per_host.iter().all(|&n| n > 0), "{per_host:?}");
    for r in &o.results.runs {
        assert_eq!(
            r.metrics["completed"].as_u64(),
            Some(requests),
            "{}",
            r.config
        );
        assert!(r.metrics["req_per_s"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn a_thousand_guest_vm_delay_run_accounts_for_every_packet() {
    let o = run(
        "vm-delay",
        &[
            "domains.counts=[999]",
            "run.duration=2s",
            "run.schedulers=[\"delay_constrained\"]",
            "run.sensitivity=false",
        ],
        1,
        "scale-vm",
    );
    let mut sent = 0;
    for r in &o.results.runs {
        assert_eq!(r.config["domains"], 999);
        for k in ["probe", "data", "stream"] {
            let m = |x: &str| r.metrics[format!("{k}_{x}")].as_u64().unwrap();
            assert_eq!(m("sent"), m("delivered") + m("lost") + m("held"), "{k}");
            sent += m("sent");
        }
    }
    // 333 guests per tier each send probes (every 10-100 ms) and data (43 pkt/s) for 2 s.
    assert!(sent > 999 * 43, "{sent}");
}

#[test]
fn ten_thousand_rules_slow_the_sop_blocks_as_the_model_says() {
    let rate = |rules: u32| {
        let o = run(
            "np-dispatch",
            &[
                &format!("cost.rules={rules}"),
                "traffic.packets=300",
                "traffic.packet_sizes=[64]",
                "sensitivity=false",
            ],
            1,
            &format!("scale-np-{rules}"),
        );
        let r = o
            .results
            .runs
            .iter()
            .find(|r| r.config["policy"] == "static_rr")
            .expect("a static_rr run");
        r.metrics["rate_mbps"].as_f64().unwrap()
    };
    let (small, large) = (rate(100), rate(10_000));
    // SOP = 300 ns + rules × 30 ns: 3.3 µs at 100 rules, 300 µs at 10,000; 64-byte packets
    // are all SOP, so the rate falls by about that ratio (≈ 91×; at least 50×).
    assert!(small > 50.0 * large, "{small} vs {large}");
}

#[test]
fn sizes_past_the_bounds_are_refused_naming_the_key() {
    let setup = |name: &str, set: String| {
        netsched_lab::runner::scenario_params(name, None, &[set]).unwrap()
    };
    let over = lvs_cluster::bounds::MAX_HOSTS + 1;
    let p = setup("lvs-cluster", format!("cluster.hosts=[{over}]"));
    let e = lvs_cluster::Setup::from_params(&p).unwrap_err().to_string();
    assert!(
        e.contains("cluster.hosts") && e.contains(&over.to_string()),
        "{e}"
    );
    let p = setup("lvs-cluster", "cluster.hosts=[1000]".into());
    assert!(lvs_cluster::Setup::from_params(&p).is_ok());
    // One more guest than the core's schedulers have classes, in whole tiers of 3.
    let over = vm_delay::bounds::MAX_DOMAINS.div_ceil(3) * 3 + 3;
    let dir = temp_dir("scale-refused");
    let e = netsched_lab::cli::main_with(&[
        "run",
        "vm-delay",
        "--set",
        &format!("domains.counts=[{over}]"),
        "--out",
        dir.join("vm").to_str().unwrap(),
    ])
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("domains.counts") && e.contains(&over.to_string()),
        "{e}"
    );
    assert!(!dir.join("vm").exists(), "a refused run leaves no folder");
}

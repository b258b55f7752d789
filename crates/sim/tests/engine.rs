//! Engine-level scenarios: timing of a hop, probes, servers and clients, determinism.

use netsched_core::qdisc::QdiscConfig;
use netsched_core::{MS, SEC};
use netsched_sim::app::{ClientConfig, ClientMode, Dist, ServerConfig};
use netsched_sim::net::{LinkClassRule, Sim};
use netsched_sim::tcp::TcpConfig;
use netsched_sim::topo::{adsl_gateway, AdslParams};

fn fifo(n: usize) -> QdiscConfig {
    QdiscConfig::Fifo {
        queue_limit: n,
        size_limit: u64::MAX,
    }
}

/// A 1000-byte echo over a 8 Mbit/s, 5 ms link each way: RTT = 2 × (1 ms + 5 ms).
#[test]
fn ping_rtt_is_serialisation_plus_propagation() {
    let mut sim = Sim::new(1, SEC);
    let a = sim.add_node("a");
    let b = sim.add_node("b");
    sim.add_link(a, b, 8_000_000, 5 * MS, &fifo(10), LinkClassRule::Single(0))
        .unwrap();
    sim.add_link(b, a, 8_000_000, 5 * MS, &fifo(10), LinkClassRule::Single(0))
        .unwrap();
    let p = sim.add_pinger(a, b, 1000, 100 * MS, 5, 0);
    sim.run_until(SEC);
    let rtts = &sim.pingers[p as usize].rtts;
    assert_eq!(rtts.len(), 5);
    assert!(rtts.iter().all(|(_, r)| *r == 12 * MS), "{rtts:?}");
}

/// UDP below the link rate loses nothing; above it, the queue overflows and drops are counted.
#[test]
fn udp_loss_only_above_capacity() {
    for (rate, lossless) in [(900_000, true), (1_500_000, false)] {
        let mut sim = Sim::new(1, SEC);
        let a = sim.add_node("a");
        let b = sim.add_node("b");
        let l = sim
            .add_link(a, b, 1_000_000, MS, &fifo(20), LinkClassRule::Single(0))
            .unwrap();
        let f = sim.add_udp_cbr(a, b, rate, 1000, 0, 5 * SEC);
        sim.run_until(10 * SEC);
        let u = &sim.udp[f as usize];
        let drops = sim.links[l as usize].stats.drops_other;
        assert_eq!(u.sent, u.received + drops, "nothing lost silently");
        assert_eq!(drops == 0, lossless, "rate {rate}: {drops} drops");
    }
}

/// Closed loop, one worker, fixed 1 ms service, 4 threads, no think time: the server is
/// always busy, so throughput = 1000/s and response time ≈ 4 ms (Little's law).
#[test]
fn closed_loop_server_obeys_littles_law() {
    let mut sim = Sim::new(1, SEC);
    let c = sim.add_node("client");
    let s = sim.add_node("server");
    sim.add_link(c, s, 1_000_000_000, 0, &fifo(100), LinkClassRule::Single(0))
        .unwrap();
    sim.add_link(s, c, 1_000_000_000, 0, &fifo(100), LinkClassRule::Single(0))
        .unwrap();
    let srv = sim
        .add_server(
            s,
            ServerConfig {
                workers: 1,
                listen_limit: 0,
                service: Dist::Fixed { ms: 1.0 },
                response_bytes: 100,
                sched: fifo(100),
            },
        )
        .unwrap();
    sim.add_clients(ClientConfig {
        node: c,
        server: s,
        class: 0,
        threads: 4,
        mode: ClientMode::Closed {
            think: Dist::Fixed { ms: 0.0 },
        },
        request_bytes: 100,
        requests: 500,
        start: 0,
    })
    .unwrap();
    sim.run_until(10 * SEC);
    let st = &sim.client_stats[0];
    assert_eq!(st.completed, 2000);
    let mean_ms = st.mean() / MS as f64;
    assert!((mean_ms - 4.0).abs() < 0.05, "mean response {mean_ms} ms");
    assert!(sim.server_busy_ns(srv) >= 2000 * MS);
}

/// Same seed, same everything; another seed changes the random parts.
#[test]
fn same_seed_same_run() {
    let run = |seed| {
        let mut sim = Sim::new(seed, SEC);
        let t = adsl_gateway(&mut sim, &AdslParams::default()).unwrap();
        let cfg = TcpConfig::default();
        sim.add_tcp(t.local, t.remote, cfg.clone(), 0, None)
            .unwrap();
        sim.add_tcp(t.remote, t.local, cfg, 3 * MS, None).unwrap();
        sim.run_until(20 * SEC);
        (
            sim.events(),
            sim.conn_bins.clone(),
            sim.conns
                .iter()
                .map(|c| c.stats.retransmits)
                .collect::<Vec<_>>(),
        )
    };
    assert_eq!(run(5), run(5));
}

/// The gateway input stage forwards everything it receives (DRR over two input queues).
#[test]
fn input_stage_forwards_and_counts() {
    let q: QdiscConfig = serde_json::from_str(
        r#"{"kind":"drr","classes":[{"quantum":1514,"queue_limit":50},{"quantum":1514,"queue_limit":50}]}"#,
    )
    .unwrap();
    let mut sim = Sim::new(1, SEC);
    let p = AdslParams {
        gateway_input: Some((q, 50_000)),
        ..AdslParams::default()
    };
    let t = adsl_gateway(&mut sim, &p).unwrap();
    let f = sim.add_udp_cbr(t.local, t.remote, 500_000, 1000, 0, 2 * SEC);
    sim.run_until(5 * SEC);
    let (drops, st) = sim.input_stage_stats(t.gateway).unwrap();
    assert_eq!(drops, 0);
    assert_eq!(st.received, sim.udp[f as usize].sent);
    assert_eq!(sim.udp[f as usize].received, sim.udp[f as usize].sent);
}

/// Open loop: Poisson arrivals at 500/s, fixed 1 ms service, one worker = M/D/1 at ρ = 0.5.
/// Pollaczek–Khinchine: mean wait = ρ·S / (2(1−ρ)) = 0.5 ms, so mean response ≈ 1.5 ms
/// (plus 2 × 0 ms of network here).
#[test]
fn open_loop_server_matches_md1() {
    let mut sim = Sim::new(11, SEC);
    let c = sim.add_node("client");
    let s = sim.add_node("server");
    sim.add_link(
        c,
        s,
        100_000_000_000,
        0,
        &fifo(1000),
        LinkClassRule::Single(0),
    )
    .unwrap();
    sim.add_link(
        s,
        c,
        100_000_000_000,
        0,
        &fifo(1000),
        LinkClassRule::Single(0),
    )
    .unwrap();
    sim.add_server(
        s,
        ServerConfig {
            workers: 1,
            listen_limit: 0,
            service: Dist::Fixed { ms: 1.0 },
            response_bytes: 100,
            sched: fifo(1000),
        },
    )
    .unwrap();
    sim.add_clients(ClientConfig {
        node: c,
        server: s,
        class: 0,
        threads: 1,
        mode: ClientMode::Open { rate_per_s: 500.0 },
        request_bytes: 100,
        requests: 40_000,
        start: 0,
    })
    .unwrap();
    sim.run_until(200 * SEC);
    let st = &sim.client_stats[0];
    assert_eq!(st.completed, 40_000);
    let mean_ms = st.mean() / MS as f64;
    assert!(
        (mean_ms - 1.5).abs() < 0.05,
        "M/D/1 mean response {mean_ms} ms, expected 1.5"
    );
}

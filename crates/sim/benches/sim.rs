//! Simulator speed: events per second and the wall time of P3's "both directions" run
//! (70 simulated seconds, ADSL gateway, uplink FIFO 100, TCP as in `scenarios/adsl-ack.toml`).
//!
//! `CARGO_TARGET_DIR=/work/target-sim cargo bench -p netsched-sim --bench sim`
//! Figures: `docs/bench-sim.md`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use netsched_core::SEC;
use netsched_sim::net::Sim;
use netsched_sim::tcp::TcpConfig;
use netsched_sim::topo::{adsl_gateway, AdslParams};
use std::hint::black_box;

/// The adsl-ack "both directions, FIFO 100" run; returns the events processed.
fn adsl_both(seed: u64) -> u64 {
    let tcp = TcpConfig {
        sack: false,
        delayed_ack: false,
        min_rto_ms: 1000.0,
        max_window_segments: 88,
        ..TcpConfig::default()
    };
    let mut sim = Sim::new(seed, SEC);
    let t = adsl_gateway(&mut sim, &AdslParams::default()).expect("topology");
    sim.add_tcp(t.local, t.remote, tcp.clone(), 0, None)
        .expect("upload");
    sim.add_tcp(t.remote, t.local, tcp, 0, None)
        .expect("download");
    sim.run_until(70 * SEC);
    sim.events()
}

fn bench(c: &mut Criterion) {
    let events = adsl_both(1);
    let start = std::time::Instant::now();
    let reps = 20;
    for i in 0..reps {
        black_box(adsl_both(i));
    }
    let wall = start.elapsed().as_secs_f64() / reps as f64;
    eprintln!(
        "adsl both directions, 70 s simulated: {events} events, {:.2} ms wall, {:.2} M events/s",
        wall * 1e3,
        events as f64 / wall / 1e6
    );
    let mut g = c.benchmark_group("sim");
    g.throughput(Throughput::Elements(events));
    g.bench_function("adsl_both_fifo_70s", |b| b.iter(|| black_box(adsl_both(1))));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

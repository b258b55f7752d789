//! What one control command costs the packet loop (docs/nfq.md, "Control plane and the
//! packet path"): the daemon applies at most one command between two packet batches, so a
//! packet decision waits at most the cost of one [`Engine::apply`]. This is a measurement,
//! not a timed test: run it with
//! `cargo test --release -p netsched-nfq --test control_cost -- --ignored --nocapture`
//! (docs/bench-nfq.md). The assertions only check that each command did its work.

use netsched_nfq::config::{parse_cidr, ClassSpec, Config, Deadline, DisciplineKind};
use netsched_nfq::engine::{Applied, Command, Engine};
use netsched_nfq::netlink::NF_INET_LOCAL_IN;
use netsched_nfq::packet::build_ipv4_tcp;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

/// The largest engine the default bounds allow: 64 classes, a full address table (4096),
/// 20 000 held requests.
fn big_engine() -> Engine {
    let mut c = Config {
        discipline: DisciplineKind::Percentile,
        budget: Some(1),
        deadline: Deadline::AutoQuantile {
            initial: netsched_nfq::MS,
        },
        ..Config::default()
    };
    for i in 0..64 {
        c.classes.push(ClassSpec {
            name: format!("class{i}"),
            percentile: 50 + (i % 50) as u32,
        });
    }
    c.default_class = 63;
    for i in 0..c.limits.max_table_entries - 1 {
        let cidr = parse_cidr(&format!("10.{}.{}.0/24", i / 256, i % 256)).unwrap();
        c.table.push((cidr, i % 64));
    }
    let mut e = Engine::new(c).unwrap();
    let mut acc = Vec::new();
    let srv = Ipv4Addr::new(10, 250, 0, 1);
    for k in 0..20_000u32 {
        let client = Ipv4Addr::new(10, (k / 256 % 16) as u8, (k % 256) as u8, 7);
        let port = 1024 + (k % 60_000) as u16;
        let pkt = build_ipv4_tcp(client, srv, port, 80, 0x18, 100);
        e.on_packet(k, NF_INET_LOCAL_IN, &pkt, k as u64, &mut acc);
    }
    assert!(e.held_packets() > 19_000, "{} held", e.held_packets());
    e
}

fn time(label: &str, runs: usize, mut f: impl FnMut() -> Duration) {
    let mut v: Vec<Duration> = (0..runs).map(|_| f()).collect();
    v.sort();
    println!(
        "{label:<58} median {:>9.1} us   max {:>9.1} us   ({runs} runs)",
        v[runs / 2].as_secs_f64() * 1e6,
        v[runs - 1].as_secs_f64() * 1e6
    );
}

#[test]
#[ignore = "measurement; run with --ignored --nocapture"]
fn control_command_cost_in_the_packet_loop() {
    let mut e = big_engine();
    let mut acc = Vec::new();
    time(
        "status snapshot (64 classes; the table is mirrored)",
        200,
        || {
            let t = Instant::now();
            let a = e.apply(Command::Snapshot, 0, &mut acc).unwrap();
            let d = t.elapsed();
            assert!(matches!(a, Applied::Snapshot(s) if s.judged.len() == 64));
            d
        },
    );
    let cidr = parse_cidr("192.168.0.0/16").unwrap();
    time("add-ip + del-ip (table at 4095 of 4096)", 200, || {
        let t = Instant::now();
        e.apply(Command::AddIp { cidr, class: 0 }, 0, &mut acc)
            .unwrap();
        e.apply(Command::DelIp(cidr), 0, &mut acc).unwrap();
        t.elapsed()
    });
    time("set-percentile", 200, || {
        let t = Instant::now();
        e.apply(Command::SetPercentile { class: 3, p: 77 }, 0, &mut acc)
            .unwrap();
        t.elapsed()
    });
    time(
        "set-deadline auto_quantile <-> 4ms (17.5 KiB histogram)",
        200,
        || {
            let t = Instant::now();
            e.apply(
                Command::SetDeadline(Deadline::Fixed(4 * netsched_nfq::MS)),
                0,
                &mut acc,
            )
            .unwrap();
            e.apply(
                Command::SetDeadline(Deadline::AutoQuantile {
                    initial: netsched_nfq::MS,
                }),
                0,
                &mut acc,
            )
            .unwrap();
            t.elapsed()
        },
    );
    time("reset (counters + 4095 table entries)", 20, || {
        let mut e = big_engine();
        let t = Instant::now();
        e.apply(Command::Reset, 0, &mut acc).unwrap();
        t.elapsed()
    });
    time(
        "stop: release 20 000 held packets in arrival order",
        10,
        || {
            let mut e = big_engine();
            acc.clear();
            let t = Instant::now();
            e.apply(Command::Stop, 0, &mut acc).unwrap();
            let d = t.elapsed();
            assert!(acc.len() >= 19_000);
            d
        },
    );
    time(
        "set-budget 1 -> 100 000 (releases every held request)",
        10,
        || {
            let mut e = big_engine();
            acc.clear();
            let t = Instant::now();
            e.apply(Command::SetBudget(Some(100_000)), 0, &mut acc)
                .unwrap();
            let d = t.elapsed();
            assert!(acc.len() >= 19_000);
            d
        },
    );
}

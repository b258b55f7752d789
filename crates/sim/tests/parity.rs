//! Parity: a packet trace through a discipline inside the simulator (a link with that qdisc)
//! and through `netsched_core` directly (enqueue/dequeue called at the same instants by a
//! hand-written serialiser) gives the same dequeue order, the same dequeue times and the same
//! drops.

use netsched_core::qdisc::{Qdisc, QdiscConfig, Verdict};
use netsched_core::rng::SplitMix64;
use netsched_core::Nanos;
use netsched_sim::net::{LinkClassRule, LinkLogEvent, Sim};
use netsched_sim::packet::{Kind, SimPacket};

const RATE: u64 = 10_000_000;

fn trace(seed: u64, n: usize, classes: u8) -> Vec<(Nanos, SimPacket)> {
    let mut rng = SplitMix64::new(seed);
    let mut t = 0;
    (0..n)
        .map(|i| {
            // Bursty: mostly back to back (forms a queue), sometimes a pause.
            t += if rng.below(10) == 0 {
                rng.below(5_000_000)
            } else {
                rng.below(300_000)
            } + 1;
            let mut p = SimPacket::new(Kind::Trace, 0, 1, 64 + rng.below(1437) as u32);
            p.seq = i as u32;
            p.class = rng.below(classes as u64) as u8;
            (t, p)
        })
        .collect()
}

/// Half pure ACKs of 4 flows with growing cumulative ACKs (class 0), half data (class 1).
fn ack_trace(seed: u64, n: usize) -> Vec<(Nanos, SimPacket)> {
    let mut tr = trace(seed, n, 2);
    let mut acks = [0u32; 4];
    for (_, p) in &mut tr {
        if p.class == 0 {
            let f = (p.seq % 4) as usize;
            acks[f] += 1 + (p.seq % 3);
            p.kind = Kind::TcpAck;
            p.len = 66;
            p.flow = f as u32;
            p.ack = acks[f];
        }
    }
    tr
}

fn tx_time(len: u32) -> Nanos {
    (len as u64 * 8 * 1_000_000_000).div_ceil(RATE)
}

type Log = Vec<(Nanos, u32, LinkLogEvent)>;

fn through_sim(cfg: &QdiscConfig, tr: &[(Nanos, SimPacket)]) -> Log {
    let mut sim = Sim::new(1, 1_000_000_000);
    let a = sim.add_node("a");
    let b = sim.add_node("b");
    let link = sim
        .add_link(a, b, RATE, 0, cfg, LinkClassRule::PacketClass)
        .unwrap();
    sim.enable_link_log(link);
    for &(t, p) in tr {
        sim.inject(t, link, p);
    }
    sim.run_until(u64::MAX);
    sim.links[link as usize].log.clone().unwrap()
}

fn through_core(cfg: &QdiscConfig, tr: &[(Nanos, SimPacket)]) -> Log {
    let mut q = cfg.build::<SimPacket>().unwrap();
    let mut log = Vec::new();
    let mut free_at: Option<Nanos> = None; // Some(t): serialiser busy until t
    let serve =
        |q: &mut netsched_core::qdisc::AnyQdisc<SimPacket>, now: Nanos, log: &mut Log| match q
            .dequeue(now)
        {
            Some(p) => {
                log.push((now, p.seq, LinkLogEvent::TxStart));
                Some(now + tx_time(p.len))
            }
            None => None,
        };
    for &(t, p) in tr {
        // Transmissions that end strictly before this arrival start the next packet (an
        // arrival at the same instant as an end of transmission is handled first, as the
        // simulator schedules injections before the transmissions they cause).
        while let Some(f) = free_at {
            if f >= t {
                break;
            }
            free_at = serve(&mut q, f, &mut log);
        }
        match q.enqueue(p.class as usize, p, t) {
            Verdict::Queued => {}
            Verdict::Dropped { item, reason } => {
                log.push((t, item.seq, LinkLogEvent::Dropped(reason)))
            }
            Verdict::QueuedEvicting { evicted, reason } => {
                log.push((t, evicted.seq, LinkLogEvent::Dropped(reason)))
            }
        }
        if free_at.is_none() {
            free_at = serve(&mut q, t, &mut log);
        }
    }
    while let Some(f) = free_at {
        free_at = serve(&mut q, f, &mut log);
    }
    log
}

fn check(cfg: QdiscConfig, classes: u8) {
    check_with(cfg, |seed| trace(seed, 3000, classes));
}

fn check_with(cfg: QdiscConfig, make: impl Fn(u64) -> Vec<(Nanos, SimPacket)>) {
    for seed in 1..=5 {
        let tr = make(seed);
        let a = through_sim(&cfg, &tr);
        let b = through_core(&cfg, &tr);
        let drops = a
            .iter()
            .filter(|e| matches!(e.2, LinkLogEvent::Dropped(_)))
            .count();
        assert!(
            drops > 0,
            "{cfg:?}: the trace must overflow the queue to test drops"
        );
        assert_eq!(a.len(), tr.len(), "every packet sent or dropped");
        assert_eq!(a, b, "{cfg:?} seed {seed}");
    }
}

#[test]
fn parity_fifo() {
    check(
        QdiscConfig::Fifo {
            queue_limit: 20,
            size_limit: u64::MAX,
        },
        1,
    );
}

#[test]
fn parity_strict_priority_and_drr() {
    let prio: QdiscConfig = serde_json::from_str(
        r#"{"kind":"strict_priority","bands":[{"queue_limit":10},{"queue_limit":10},{"queue_limit":10}]}"#,
    )
    .unwrap();
    check(prio, 3);
    let drr: QdiscConfig = serde_json::from_str(
        r#"{"kind":"drr","classes":[{"quantum":1500,"queue_limit":8},{"quantum":3000,"queue_limit":8}]}"#,
    )
    .unwrap();
    check(drr, 2);
}

/// P3's ACK separation with the ACK filter on: evictions of superseded ACKs match too.
#[test]
fn parity_ack_separation_with_filter() {
    let cfg: QdiscConfig = serde_json::from_str(
        r#"{"kind":"ack_separation","ack":{"queue_limit":6},"other":{"queue_limit":10},"ack_filter":true}"#,
    )
    .unwrap();
    check_with(cfg.clone(), |seed| ack_trace(seed, 3000));
    let log = through_sim(&cfg, &ack_trace(1, 3000));
    let filtered = log
        .iter()
        .filter(|e| e.2 == LinkLogEvent::Dropped(netsched_core::qdisc::DropReason::AckFiltered))
        .count();
    assert!(filtered > 0, "the trace exercises the ACK filter");
}

//! Property tests for the P0 Percentile and P2 delay-constrained disciplines: the proven wait
//! bound of `qdisc/delay.rs` under random arrivals, the Percentile selection rule, and the
//! stats identities for both.

mod common;

use netsched_core::dispatch::DispatchConfig;
use netsched_core::qdisc::delay::{DelayConstrained, DelayInterfaceConfig};
use netsched_core::qdisc::fifo::TestItem;
use netsched_core::qdisc::percentile::{PercentileDeadline, PercentileMemory, PercentileQueue};
use netsched_core::qdisc::{Feedback, Qdisc, QdiscConfig};
use proptest::prelude::*;

/// An operation of a random run: offer `count` packets to `iface`, or serve `count` packets.
#[derive(Debug, Clone)]
enum Op {
    Arrive { iface: usize, count: u64 },
    Serve { count: u64 },
}

fn op(n: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..n, 1..6u64).prop_map(|(iface, count)| Op::Arrive { iface, count }),
        (1..8u64).prop_map(|count| Op::Serve { count }),
    ]
}

fn delay_case() -> impl Strategy<Value = (Vec<(u32, u32)>, usize, Vec<Op>)> {
    (2..=5usize).prop_flat_map(|n| {
        (
            prop::collection::vec((0..4u32, 2..=8u32), n),
            1..=4usize,
            prop::collection::vec(op(n), 1..300),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// P2 bound (delay.rs header): while interface i is backlogged, at most
    /// `bitmap_len_i + n − 2` consecutive round starts choose another interface.
    #[test]
    fn delay_wait_in_rounds_is_bounded((ifaces, batch, ops) in delay_case()) {
        let cfg: Vec<DelayInterfaceConfig> = ifaces
            .iter()
            .map(|&(priority, bitmap_len)| DelayInterfaceConfig {
                priority,
                bitmap_len,
                bound_ns: None,
                queue_limit: 64,
            })
            .collect();
        let n = cfg.len();
        let mut q = DelayConstrained::<TestItem>::new(&cfg, batch, false).unwrap();
        let mut passed = vec![0u64; n];
        let mut worst = vec![0u64; n];
        let mut id = 0u64;
        let serve = |q: &mut DelayConstrained<TestItem>, passed: &mut Vec<u64>, worst: &mut Vec<u64>| -> bool {
            let deciding = !q.round_open();
            let backlog: Vec<bool> = (0..n).map(|i| q.iface_len(i) > 0).collect();
            let Some(item) = q.dequeue(0) else { return false };
            let chosen = (item.id >> 32) as usize;
            if deciding {
                for i in 0..n {
                    if !backlog[i] || i == chosen {
                        passed[i] = 0;
                    } else {
                        passed[i] += 1;
                        worst[i] = worst[i].max(passed[i]);
                    }
                }
            }
            true
        };
        for o in &ops {
            match *o {
                Op::Arrive { iface, count } => {
                    for _ in 0..count {
                        id += 1;
                        let _ = q.enqueue(iface, TestItem { id: ((iface as u64) << 32) | id, len: 100 }, 0);
                    }
                }
                Op::Serve { count } => {
                    for _ in 0..count {
                        serve(&mut q, &mut passed, &mut worst);
                    }
                }
            }
            for (i, &w) in worst.iter().enumerate() {
                prop_assert!(
                    w <= q.wait_bound_rounds(i),
                    "iface {i} passed over {} rounds, bound {}", w, q.wait_bound_rounds(i)
                );
            }
        }
        while serve(&mut q, &mut passed, &mut worst) {}
        for (i, &w) in worst.iter().enumerate() {
            prop_assert!(w <= q.wait_bound_rounds(i));
        }
        prop_assert!(q.is_empty());
        prop_assert_eq!(q.stats().check_identities(), Ok(()));
    }

    /// The wall-clock variant keeps the identities and hands every packet back.
    #[test]
    fn delay_wall_clock_accounts_everything((ifaces, batch, ops) in delay_case()) {
        let cfg: Vec<DelayInterfaceConfig> = ifaces
            .iter()
            .map(|&(priority, bitmap_len)| DelayInterfaceConfig {
                priority,
                bitmap_len,
                bound_ns: Some(bitmap_len as u64 * 10),
                queue_limit: 16,
            })
            .collect();
        let mut q = DelayConstrained::<TestItem>::new(&cfg, batch, true).unwrap();
        let (mut now, mut offered, mut out) = (0u64, 0u64, 0u64);
        for o in &ops {
            now += 7;
            match *o {
                Op::Arrive { iface, count } => {
                    for k in 0..count {
                        offered += 1;
                        if !q.enqueue(iface, TestItem { id: k, len: 100 }, now).is_queued() {
                            out += 1;
                        }
                    }
                }
                Op::Serve { count } => {
                    for _ in 0..count {
                        out += q.dequeue(now).is_some() as u64;
                    }
                }
            }
            prop_assert_eq!(q.stats().check_identities(), Ok(()));
        }
        out += q.reset().len() as u64;
        prop_assert_eq!(offered, out);
        prop_assert_eq!(q.stats().check_identities(), Ok(()));
    }

    /// P0: every dequeue serves a non-empty class of lowest attainment S/(N·P) (ties to the
    /// lower index), FIFO inside the class; identities hold with any memory, target changes
/// and counter resets (in debug builds `dequeue` also checks its selection cache against a
/// full scan).
    #[test]
    fn percentile_serves_lowest_attainment(
        ps in prop::collection::vec(1..=100u32, 1..6),
        memory in prop_oneof![
            Just(PercentileMemory::Forever),
            (1..50u64).prop_map(PercentileMemory::Window),
            (1.0..100.0f64).prop_map(PercentileMemory::HalfLifeMs),
        ],
        ops in prop::collection::vec((0..6usize, 0..5u8, 0..20u64), 1..300),
    ) {
        let n = ps.len();
        let mut q = PercentileQueue::<TestItem>::new(&ps, 8, PercentileDeadline::Ns(10), memory).unwrap();
        let mut now = 0u64;
        let mut next_id = vec![0u64; n];
        let mut next_out = vec![0u64; n];
        for &(class, kind, latency) in &ops {
            now += 1_000_000;
            let class = class % n;
            match kind {
                0 => {
                    let id = ((class as u64) << 32) | next_id[class];
                    if q.enqueue(class, TestItem { id, len: 10 }, now).is_queued() {
                        next_id[class] += 1;
                    }
                }
                1 => {
                    let st = q.class_status();
                    // Integer keys (status values are counters / 2^16 at most: exact).
                    let key = |c: usize| {
                        let get = |k: &str| st[c].extra.iter().find(|e| e.0 == k).unwrap().1;
                        let n = (get("n") * 65536.0).round() as u128;
                        let s = (get("s") * 65536.0).round() as u128;
                        let np = n * get("p") as u128;
                        if np == 0 { (0, 1) } else { (s, np) }
                    };
                    if let Some(item) = q.dequeue(now) {
                        let c = (item.id >> 32) as usize;
                        prop_assert_eq!(item.id & 0xffff_ffff, next_out[c], "FIFO inside class {}", c);
                        next_out[c] += 1;
                        let (s, np) = key(c);
                        for (o, status) in st.iter().enumerate() {
                            if o == c || status.queued_packets == 0 {
                                continue;
                            }
                            let (so, npo) = key(o);
                            // attainment(c) = s/np vs attainment(o) = so/npo
                            let (lhs, rhs) = (s * npo, so * np);
                            if o < c {
                                prop_assert!(lhs < rhs, "class {} served before class {}: {} vs {}", c, o, lhs, rhs);
                            } else {
                                prop_assert!(lhs <= rhs, "class {} served, class {} lower: {} vs {}", c, o, lhs, rhs);
                            }
                        }
                        q.feedback(Feedback::Completed { class: c, latency }, now);
                    }
                }
                3 => q.set_percentile(class, 1 + (latency as u32 * 7) % 100).unwrap(),
                4 if latency == 0 => q.reset_counters(),
                _ => q.feedback(Feedback::Completed { class, latency }, now),
            }
            prop_assert_eq!(q.stats().check_identities(), Ok(()));
        }
    }
}

/// Every TOML snippet of `docs/percentile-delay-dispatch.md` parses and builds.
#[test]
fn docs_toml_snippets_build() {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct QdiscScenario {
        qdisc: QdiscConfig,
    }
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct DispatchScenario {
        dispatch: DispatchConfig,
    }
    let blocks = common::doc_toml_blocks("percentile-delay-dispatch.md");
    assert_eq!(blocks.len(), 6, "toml blocks in the doc");
    for b in &blocks {
        let outcome = if b.contains("[qdisc]") {
            toml::from_str::<QdiscScenario>(b)
                .map_err(|e| e.to_string())
                .and_then(|s| {
                    s.qdisc
                        .build::<TestItem>()
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                })
        } else {
            toml::from_str::<DispatchScenario>(b)
                .map_err(|e| e.to_string())
                .and_then(|s| s.dispatch.build().map(|_| ()).map_err(|e| e.to_string()))
        };
        assert!(outcome.is_ok(), "{outcome:?} in snippet:\n{b}");
    }
}

//! Property tests over every discipline built from [`all_configs`]: random sequences of
//! enqueue (random class, size, ACK facts), dequeue, peek and time advance. After every step:
//! - `stats().check_identities()` holds;
//! - the model (ids queued, bytes queued) matches `len()` / `stats().queued_bytes` and the
//!   per-class status sums;
//! - every id is dequeued exactly once or handed back (dropped at arrival, evicted in a
//!   `Verdict`, collected with `take_evicted`, or returned by the final `reset`);
//! - per-class packet and byte limits are never exceeded;
//! - `peek(now)` shows what `dequeue(now)` then returns;
//! - work-conserving disciplines never return `None` from `dequeue` while `len() > 0`.
//!
//! Every discipline is covered by construction: `configs_for`, `class_limits` and
//! `work_conserving` are exhaustive `match`es over [`QdiscKind`], so a new kind fails to
//! compile here until it has configs (JSON, the same form as scenario files), its per-class
//! limits, and says whether `dequeue` may hold items back.

mod common;

use netsched_core::qdisc::{
    AnyQdisc, DropReason, Packet, Qdisc, QdiscConfig, QdiscConfigError, QdiscKind, QdiscStats,
    Verdict,
};
use netsched_core::rng::SplitMix64;
use netsched_core::wire::AckInfo;
use netsched_core::{Nanos, MS};
use proptest::prelude::*;
use std::collections::BTreeMap;

/// The configurations of `kind` under test, with small limits so drops and evictions happen.
fn configs_for(kind: QdiscKind) -> Vec<QdiscConfig> {
    let jsons: &[&str] = match kind {
        QdiscKind::Fifo => &[r#"{"kind": "fifo", "queue_limit": 8, "size_limit": 6000}"#],
        QdiscKind::StrictPriority => &[r#"{"kind": "strict_priority", "bands": [
            {"queue_limit": 4}, {"queue_limit": 6, "size_limit": 5000}, {"queue_limit": 3}]}"#],
        QdiscKind::Drr => &[r#"{"kind": "drr", "classes": [
            {"quantum": 300, "queue_limit": 5}, {"quantum": 1500, "queue_limit": 8, "size_limit": 4000},
            {"quantum": 700, "queue_limit": 4}]}"#],
        QdiscKind::Wf2qPlus => &[r#"{"kind": "wf2q_plus", "classes": [
            {"weight": 1, "queue_limit": 5}, {"weight": 3, "queue_limit": 6, "size_limit": 5000},
            {"weight": 5, "queue_limit": 4}]}"#],
        QdiscKind::Edf => &[
            r#"{"kind": "edf", "drop_expired": false, "classes": [
            {"deadline": "1ms", "queue_limit": 5}, {"deadline": "5ms", "queue_limit": 6},
            {"deadline": "20ms", "queue_limit": 4, "size_limit": 3000}]}"#,
            r#"{"kind": "edf", "drop_expired": true, "classes": [
            {"deadline": "500us", "queue_limit": 5}, {"deadline": "3ms", "queue_limit": 6},
            {"deadline_us": 8000, "queue_limit": 4}]}"#,
        ],
        QdiscKind::AckSeparation => &[
            r#"{"kind": "ack_separation"}"#,
            r#"{"kind": "ack_separation", "ack": {"queue_limit": 6, "size_limit": 2000},
            "other": {"queue_limit": 5}, "ack_filter": true, "ack_share_max": 0.3}"#,
        ],
        QdiscKind::Percentile => &[
            r#"{"kind": "percentile", "percentiles": [90, 70, 50], "queue_limit": 5}"#,
            r#"{"kind": "percentile", "percentiles": [90, 50], "queue_limit": 4,
            "deadline": {"ms": 2.0}, "memory": {"half_life_ms": 5.0}}"#,
            r#"{"kind": "percentile", "percentiles": [80, 60, 40], "queue_limit": 6,
            "memory": {"window": 7}}"#,
        ],
        QdiscKind::DelayConstrained => &[
            r#"{"kind": "delay_constrained", "batch": 2, "interfaces": [
            {"priority": 1, "bitmap_len": 2, "queue_limit": 5},
            {"priority": 2, "bitmap_len": 3, "queue_limit": 4},
            {"priority": 3, "bitmap_len": 5, "queue_limit": 6}]}"#,
            r#"{"kind": "delay_constrained", "batch": 3, "wall_clock": true, "interfaces": [
            {"priority": 1, "bitmap_len": 2, "bound": "1ms", "queue_limit": 5},
            {"priority": 2, "bitmap_len": 6, "bound": "4ms", "queue_limit": 4}]}"#,
        ],
    };
    jsons
        .iter()
        .map(|json| serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}")))
        .collect()
}

/// Every discipline under test: the configs of every kind.
fn all_configs() -> Vec<QdiscConfig> {
    QdiscKind::ALL
        .iter()
        .flat_map(|&k| configs_for(k))
        .collect()
}

/// Whether `dequeue` always releases an item while one is queued (else the discipline
/// waits for `next_timer`).
fn work_conserving(kind: QdiscKind) -> bool {
    match kind {
        QdiscKind::Fifo
        | QdiscKind::StrictPriority
        | QdiscKind::Drr
        | QdiscKind::Wf2qPlus
        | QdiscKind::Edf
        | QdiscKind::AckSeparation
        | QdiscKind::Percentile
        | QdiscKind::DelayConstrained => true,
    }
}

fn kind_of(cfg: &QdiscConfig) -> QdiscKind {
    cfg.kind()
}

/// Per-class (packets, bytes) limits, in class order.
fn class_limits(cfg: &QdiscConfig) -> Option<Vec<(u64, u64)>> {
    let v = serde_json::to_value(cfg).unwrap();
    let lim = |c: &serde_json::Value| {
        (
            c["queue_limit"].as_u64().unwrap(),
            c["size_limit"].as_u64().unwrap_or(u64::MAX),
        )
    };
    match cfg.kind() {
        QdiscKind::Fifo => Some(vec![lim(&v)]),
        QdiscKind::StrictPriority => Some(v["bands"].as_array()?.iter().map(lim).collect()),
        QdiscKind::Drr | QdiscKind::Wf2qPlus | QdiscKind::Edf => {
            Some(v["classes"].as_array()?.iter().map(lim).collect())
        }
        QdiscKind::AckSeparation => Some(vec![lim(&v["ack"]), lim(&v["other"])]),
        QdiscKind::Percentile => Some(vec![
            (v["queue_limit"].as_u64()?, u64::MAX);
            v["percentiles"].as_array()?.len()
        ]),
        QdiscKind::DelayConstrained => Some(v["interfaces"].as_array()?.iter().map(lim).collect()),
    }
}

#[derive(Debug, Clone)]
struct Item {
    id: u64,
    len: u32,
    ack: Option<AckInfo>,
}

impl Packet for Item {
    fn len(&self) -> u32 {
        self.len
    }
    fn ack_info(&self) -> Option<AckInfo> {
        self.ack
    }
}

#[derive(Debug, Clone)]
enum Op {
    Enqueue {
        class: usize,
        len: u32,
        ack: Option<AckInfo>,
    },
    Dequeue,
    Peek,
    Advance(Nanos),
}

fn ack_strategy() -> impl Strategy<Value = Option<AckInfo>> {
    prop::option::of(
        (
            0u64..3,
            0u32..6,
            0u32..2,
            prop::bool::weighted(0.8),
            prop::bool::weighted(0.2),
        )
            .prop_map(|(flow, ack, window, pure, opts)| AckInfo {
                flow,
                ack: ack * 1000,
                pure,
                has_sack_or_other_options: opts,
                window,
            }),
    )
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0usize..4, 1u32..1600, ack_strategy())
            .prop_map(|(class, len, ack)| Op::Enqueue { class, len, ack }),
        3 => Just(Op::Dequeue),
        1 => Just(Op::Peek),
        1 => (0u64..4 * MS).prop_map(Op::Advance),
    ]
}

/// What the test believes is queued: id → bytes.
struct Model {
    queued: BTreeMap<u64, u32>,
    handed_back: u64,
}

impl Model {
    fn take(&mut self, id: u64, how: &str) -> Result<(), TestCaseError> {
        prop_assert!(
            self.queued.remove(&id).is_some(),
            "{how}: id {id} is not queued (lost, duplicated or invented)"
        );
        Ok(())
    }
}

fn check_state(
    cfg: &QdiscConfig,
    q: &AnyQdisc<Item>,
    model: &Model,
    limits: &Option<Vec<(u64, u64)>>,
) -> Result<(), TestCaseError> {
    let s = q.stats();
    if let Err(e) = s.check_identities() {
        return Err(TestCaseError::fail(format!("{}: {e}", kind_of(cfg))));
    }
    prop_assert_eq!(q.len(), model.queued.len());
    prop_assert_eq!(
        s.queued_bytes,
        model.queued.values().map(|&b| b as u64).sum::<u64>()
    );
    let classes = q.class_status();
    prop_assert_eq!(
        classes.iter().map(|c| c.queued_packets).sum::<u64>(),
        s.queued_packets
    );
    prop_assert_eq!(
        classes.iter().map(|c| c.queued_bytes).sum::<u64>(),
        s.queued_bytes
    );
    if let Some(limits) = limits {
        prop_assert_eq!(classes.len(), limits.len());
        for (c, &(packets, bytes)) in classes.iter().zip(limits) {
            prop_assert!(
                c.queued_packets <= packets,
                "class {} over packet limit",
                c.class
            );
            prop_assert!(c.queued_bytes <= bytes, "class {} over byte limit", c.class);
        }
    }
    Ok(())
}

/// Run `ops`; returns the stats as they were before the final `reset`.
fn run(cfg: &QdiscConfig, ops: &[Op]) -> Result<QdiscStats, TestCaseError> {
    let mut q: AnyQdisc<Item> = cfg
        .build()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let limits = class_limits(cfg);
    let work_conserving = work_conserving(kind_of(cfg));
    let mut model = Model {
        queued: BTreeMap::new(),
        handed_back: 0,
    };
    let mut now: Nanos = 0;
    let mut next_id = 0u64;
    for op in ops {
        match op {
            Op::Enqueue { class, len, ack } => {
                let id = next_id;
                next_id += 1;
                let item = Item {
                    id,
                    len: *len,
                    ack: *ack,
                };
                match q.enqueue(*class, item, now) {
                    Verdict::Queued => {
                        model.queued.insert(id, *len);
                    }
                    Verdict::Dropped { item, .. } => {
                        prop_assert_eq!(item.id, id, "dropped item is not the offered one");
                        model.handed_back += 1;
                    }
                    Verdict::QueuedEvicting { evicted, .. } => {
                        model.queued.insert(id, *len);
                        prop_assert_ne!(evicted.id, id);
                        model.take(evicted.id, "evicted")?;
                        model.handed_back += 1;
                    }
                }
            }
            Op::Dequeue => {
                let peeked = q.peek(now).map(|i| i.id);
                for (item, _) in q.take_evicted() {
                    model.take(item.id, "take_evicted after peek")?;
                    model.handed_back += 1;
                }
                let got = q.dequeue(now);
                prop_assert_eq!(
                    got.as_ref().map(|i| i.id),
                    peeked,
                    "peek disagrees with dequeue"
                );
                if let Some(item) = got {
                    model.take(item.id, "dequeued")?;
                }
                for (item, _) in q.take_evicted() {
                    model.take(item.id, "take_evicted")?;
                    model.handed_back += 1;
                }
                if work_conserving && peeked.is_none() {
                    prop_assert_eq!(
                        q.len(),
                        0,
                        "work-conserving dequeue returned None with items queued"
                    );
                }
            }
            Op::Peek => {
                let _ = q.peek(now).map(|i| i.id);
                for (item, _) in q.take_evicted() {
                    model.take(item.id, "take_evicted after peek")?;
                    model.handed_back += 1;
                }
            }
            Op::Advance(dt) => now += dt,
        }
        check_state(cfg, &q, &model, &limits)?;
    }
    let before_reset = q.stats().clone();
    for item in q.reset() {
        model.take(item.id, "reset")?;
    }
    for (item, _) in q.take_evicted() {
        model.take(item.id, "take_evicted after reset")?;
    }
    prop_assert!(
        model.queued.is_empty(),
        "never handed back: {:?}",
        model.queued.keys()
    );
    prop_assert_eq!(q.len(), 0);
    let s = q.stats();
    prop_assert!(s.check_identities().is_ok());
    prop_assert_eq!(s.received, next_id);
    prop_assert_eq!(
        s.dropped(),
        model.handed_back + s.drops_for(DropReason::Reset)
    );
    Ok(before_reset)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_discipline_keeps_its_invariants(ops in prop::collection::vec(op_strategy(), 1..300)) {
        for cfg in all_configs() {
            run(&cfg, &ops)?;
        }
    }
}

/// The config list itself: every entry builds and has the kind it is listed under.
#[test]
fn all_configs_build_and_cover_every_kind() {
    for &kind in QdiscKind::ALL {
        let cfgs = configs_for(kind);
        assert!(!cfgs.is_empty(), "{kind}: no config");
        for cfg in cfgs {
            assert_eq!(cfg.kind(), kind);
            assert!(cfg.build::<Item>().is_ok(), "{cfg:?}");
        }
    }
    assert_eq!(QdiscKind::ALL.len(), 8);
}

/// Bad configs fail with the field named, never a panic.
#[test]
fn bad_configs_name_the_field() {
    let too_small = |field: &str| QdiscConfigError::TooSmall {
        field: field.into(),
        min: 1,
    };
    let out_of_range = |field: &str, value: &str, accepted: String| QdiscConfigError::OutOfRange {
        field: field.into(),
        value: value.into(),
        accepted,
    };
    for (json, want) in [
        (
            r#"{"kind": "drr", "classes": []}"#,
            QdiscConfigError::NoClasses {
                field: "classes".into(),
            },
        ),
        (
            r#"{"kind": "drr", "classes": [{"quantum": 0}]}"#,
            too_small("classes[0].quantum"),
        ),
        (
            r#"{"kind": "wf2q_plus", "classes": [{"weight": 0}]}"#,
            too_small("classes[0].weight"),
        ),
        (
            r#"{"kind": "strict_priority", "bands": [{"queue_limit": 0}]}"#,
            too_small("bands[0].queue_limit"),
        ),
        (
            r#"{"kind": "ack_separation", "ack_share_max": 2.0}"#,
            out_of_range("ack_share_max", "2", "(0, 1]".into()),
        ),
        (
            r#"{"kind": "edf", "classes": [{"deadline_us": 18446744073709551615}]}"#,
            out_of_range(
                "classes[0].deadline",
                "18446744073709551615",
                format!("0..={}", u64::MAX / 1000),
            ),
        ),
        (
            r#"{"kind": "fifo", "queue_limit": 0}"#,
            too_small("queue_limit"),
        ),
    ] {
        let cfg: QdiscConfig = serde_json::from_str(json).unwrap();
        assert_eq!(cfg.build::<Item>().unwrap_err(), want, "{json}");
    }
    for json in [
        r#"{"kind": "drr", "classes": [{"quantum": 10, "weight": 1}]}"#,
        r#"{"kind": "edf", "classes": [{"deadline_ms": 5}]}"#,
        r#"{"kind": "ack_separation", "filter": true}"#,
    ] {
        let e = serde_json::from_str::<QdiscConfig>(json)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown field") || e.contains("missing field"),
            "{json}: {e}"
        );
    }
}

/// The properties above are only as good as the paths they reach: on a long seeded run every
/// discipline must refuse items (full, unknown class), the ACK filter must evict and EDF with
/// `drop_expired` must expire items — all through the same checked `run`.
#[test]
fn seeded_long_run_reaches_every_drop_path() {
    let mut rng = SplitMix64::new(0x5eed);
    let ops: Vec<Op> = (0..5000)
        .map(|_| match rng.below(9) {
            0..=3 => Op::Enqueue {
                class: rng.below(4) as usize,
                len: 1 + rng.below(1599) as u32,
                ack: (rng.below(3) > 0).then(|| AckInfo {
                    flow: rng.below(3),
                    ack: rng.below(6) as u32 * 1000,
                    pure: rng.below(5) > 0,
                    has_sack_or_other_options: rng.below(5) == 0,
                    window: rng.below(2) as u32,
                }),
            },
            4..=6 => Op::Dequeue,
            7 => Op::Peek,
            _ => Op::Advance(rng.below(4 * MS)),
        })
        .collect();
    for cfg in all_configs() {
        let kind = kind_of(&cfg);
        let s = run(&cfg, &ops).unwrap_or_else(|e| panic!("{kind}: {e}"));
        // Configs with small limits must fill up (the default 100-packet ACK queues do not).
        if class_limits(&cfg).is_some_and(|l| l.iter().all(|&(p, _)| p < 50)) {
            assert!(
                s.drops_for(DropReason::QueueFullPackets) > 0,
                "{kind}: {s:?}"
            );
        }
        assert!(s.dequeued > 1000, "{kind}: {s:?}");
        if kind != QdiscKind::Fifo {
            assert!(s.drops_for(DropReason::UnknownClass) > 0, "{kind}: {s:?}");
        }
    }
    let json = |cfg: &QdiscConfig| serde_json::to_value(cfg).unwrap();
    let filtered = all_configs()
        .into_iter()
        .find(|c| json(c)["ack_filter"] == true)
        .unwrap();
    assert!(
        run(&filtered, &ops)
            .unwrap()
            .drops_for(DropReason::AckFiltered)
            > 0
    );
    let expiring = all_configs()
        .into_iter()
        .find(|c| json(c)["drop_expired"] == true)
        .unwrap();
    assert!(
        run(&expiring, &ops)
            .unwrap()
            .drops_for(DropReason::DeadlineExpired)
            > 0
    );
}

/// Every TOML snippet in `docs/qdiscs.md` parses and builds, so the page cannot drift from
/// the code.
#[test]
fn docs_toml_snippets_build() {
    use netsched_core::classify::{CidrTableConfig, RuleClassifierConfig};
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Scenario {
        qdisc: QdiscConfig,
    }
    let blocks = common::doc_toml_blocks("qdiscs.md");
    assert!(blocks.len() >= 7, "found {} toml blocks", blocks.len());
    for b in &blocks {
        let outcome = if b.contains("[qdisc]") {
            toml::from_str::<Scenario>(b)
                .map_err(|e| e.to_string())
                .and_then(|s| {
                    s.qdisc
                        .build::<Item>()
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                })
        } else if b.contains("entries") {
            toml::from_str::<CidrTableConfig>(b)
                .map_err(|e| e.to_string())
                .and_then(|c| c.build().map(|_| ()).map_err(|e| e.to_string()))
        } else {
            toml::from_str::<RuleClassifierConfig>(b)
                .map_err(|e| e.to_string())
                .and_then(|c| c.build().map(|_| ()).map_err(|e| e.to_string()))
        };
        assert!(outcome.is_ok(), "{outcome:?} in snippet:\n{b}");
    }
}

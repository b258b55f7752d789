//! Property tests over every balancer kind: random sequences of table changes (add, remove,
//! weight, overload flag, open, inactive, close) and picks. After every pick:
//! - a returned server is in the table and has weight > 0 (weight 0 drains);
//! - it is not flagged overloaded — except for lblc, whose cache hit ignores the flag as in
//!   ip_vs_lblc.c;
//! - ovf returns a server with active < weight;
//! - the non-hashing kinds return `None` only when no server is available (ovf: none with
//!   room; hash kinds may map a key to an unavailable server and return `None`).

use super::test_util::*;
use super::*;
use crate::rng::SplitMix64;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Add(u32, u32),
    Remove(u32),
    Weight(u32, u32),
    Overload(u32, bool),
    Open(u32),
    Inactive(u32),
    Close(u32),
    Pick(u32, u32, u64),
}

fn op() -> impl Strategy<Value = Op> {
    let id = 0u32..12;
    prop_oneof![
        (id.clone(), 0u32..6).prop_map(|(i, w)| Op::Add(i, w)),
        id.clone().prop_map(Op::Remove),
        (id.clone(), 0u32..6).prop_map(|(i, w)| Op::Weight(i, w)),
        (id.clone(), any::<bool>()).prop_map(|(i, b)| Op::Overload(i, b)),
        id.clone().prop_map(Op::Open),
        id.clone().prop_map(Op::Inactive),
        id.prop_map(Op::Close),
        (0u32..64, 0u32..64, 0u64..1_000).prop_map(|(s, d, t)| Op::Pick(s, d, t)),
        (0u32..64, 0u32..64, 0u64..1_000).prop_map(|(s, d, t)| Op::Pick(s, d, t)),
    ]
}

fn is_hash(kind: &str) -> bool {
    matches!(kind, "dh" | "sh" | "mh")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn every_balancer_respects_drain_overload_and_availability(
        ops in proptest::collection::vec(op(), 1..120)
    ) {
        let mut rng = SplitMix64::new(17);
        for cfg in BalancerConfig::all_defaults() {
            let kind = cfg.name();
            let mut b = cfg.build(&mut rng).unwrap();
            let mut t = ServerTable::new();
            let mut now = 0u64;
            for op in &ops {
                match *op {
                    // table errors (unknown id, no connection to close) are expected here
                    Op::Add(i, w) => { let _ = t.add_server(i, v4(10, 1, 0, i as u8), 80, w); }
                    Op::Remove(i) => { let _ = t.remove(ServerId(i)); }
                    Op::Weight(i, w) => { let _ = t.set_weight(ServerId(i), w); }
                    Op::Overload(i, o) => { let _ = t.set_overloaded(ServerId(i), o); }
                    Op::Open(i) => { let _ = t.on_open(ServerId(i)); }
                    Op::Inactive(i) => { let _ = t.on_inactive(ServerId(i)); }
                    Op::Close(i) => { let _ = t.on_close(ServerId(i)); }
                    Op::Pick(s, d, dt) => {
                        now += dt * crate::MS;
                        let key = key_from(0x0B00_0000 + s, 0xC000_0000 + d);
                        let got = b.pick(&t, &key, now);
                        match got {
                            Some(id) => {
                                let s = t.get(id);
                                prop_assert!(s.is_some(), "{kind}: picked unknown {id:?}");
                                let s = s.unwrap();
                                prop_assert!(s.weight > 0, "{kind}: picked weight-0 {id:?}");
                                prop_assert!(!s.overloaded || kind == "lblc",
                                    "{kind}: picked overloaded {id:?}");
                                if kind == "ovf" {
                                    prop_assert!(s.active < s.weight, "ovf: no room on {id:?}");
                                }
                                t.on_open(id).unwrap();
                            }
                            None if !is_hash(kind) => {
                                let any = t.servers().iter().any(|s| {
                                    s.is_available() && (kind != "ovf" || s.active < s.weight)
                                });
                                prop_assert!(!any, "{kind}: None with a server available");
                            }
                            None => {}
                        }
                    }
                }
            }
        }
    }
}

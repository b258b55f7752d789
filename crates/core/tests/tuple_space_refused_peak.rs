//! A tuple space build refused for `max_bytes` never held more than `max_bytes` on the heap
//! on the way to the refusal, and an accepted build holds what `memory_bytes` says.
//!
//! The global allocator of this test binary (`common/counting_alloc.rs`) counts the bytes live
//! on the building thread and their peak.

use netsched_core::classify::acl::{
    AclRule, Action, ClassifierBuildError, ClassifierLimits, Ipv4Prefix, PacketClassifier,
    ProtoMatch, RuleSet, TupleSpaceClassifier,
};
use netsched_core::classify::PortRange;
use netsched_core::rng::SplitMix64;

#[path = "common/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::{live, peak, reset};

/// Rules over many tuples: every (source, destination) prefix-length pair, a few rules each,
/// some with port ranges that expand into several prefixes.
fn many_tuples() -> RuleSet {
    let mut rng = SplitMix64::new(5);
    let mut rules = Vec::new();
    for k in 0..4u32 {
        for s in 0..=32u8 {
            for d in (0..=32u8).step_by(2) {
                rules.push(AclRule {
                    src: Ipv4Prefix::truncating(rng.next_u64() as u32, s),
                    dst: Ipv4Prefix::truncating(rng.next_u64() as u32, d),
                    dst_port: PortRange {
                        low: 1000 * k as u16,
                        high: 1000 * k as u16 + 7,
                    },
                    proto: ProtoMatch::exact(6),
                    ..AclRule::any(Action::Drop)
                });
            }
        }
    }
    RuleSet::new(rules)
}

/// Rules on distinct /32 sources with wide port ranges: few tuples, tables that grow large.
fn big_tables() -> RuleSet {
    let mut rng = SplitMix64::new(6);
    let wide = PortRange {
        low: 1,
        high: 65534,
    };
    RuleSet::new(
        (0..400)
            .map(|_| AclRule {
                src: Ipv4Prefix::new(rng.next_u64() as u32, 32).unwrap(),
                src_port: wide,
                dst_port: PortRange {
                    low: 1024,
                    high: 65535,
                },
                ..AclRule::any(Action::Drop)
            })
            .collect(),
    )
}

#[test]
fn a_refused_build_never_holds_more_than_max_bytes() {
    for (name, set) in [("many tuples", many_tuples()), ("big tables", big_tables())] {
        let mut refused = 0;
        let mut max_bytes = 1 << 10;
        while max_bytes <= 8 << 20 {
            let lim = ClassifierLimits {
                max_bytes,
                max_tuples: 1 << 20,
                ..ClassifierLimits::default()
            };
            reset();
            let built = TupleSpaceClassifier::build(&set, &lim);
            let (held, most) = (live(), peak());
            match &built {
                Err(ClassifierBuildError::TooManyBytes { max, .. }) => {
                    assert_eq!(*max, max_bytes);
                    refused += 1;
                }
                Err(e) => panic!("{name}: {e}"),
                Ok(c) => {
                    assert!(c.memory_bytes() <= max_bytes, "{name}");
                    assert_eq!(held, c.memory_bytes(), "{name}: bytes held, as counted");
                }
            }
            assert!(
                most <= max_bytes,
                "{name}: max_bytes {max_bytes}, peak {most} ({:+} bytes), {}",
                most as isize - max_bytes as isize,
                if built.is_ok() { "built" } else { "refused" }
            );
            drop(built);
            max_bytes = max_bytes * 5 / 4;
        }
        assert!(refused >= 10, "{name}: only {refused} limits refused");
    }
}

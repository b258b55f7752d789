//! TupleMerge never holds more than `max_bytes` on the heap, even on the way to a refusal,
//! and holds what `memory_bytes` says — pieces of split rules included: rules pushed one at a
//! time until one is refused, which leaves the classifier (and the bytes it holds) as it was.
//!
//! The global allocator of this test binary (`common/counting_alloc.rs`) counts the bytes live
//! on the pushing thread and their peak.

use netsched_core::classify::acl::{
    AclRule, Action, ClassifierBuildError, ClassifierLimits, Ipv4Prefix, PacketClassifier,
    ProtoMatch, RuleSet, TupleMergeClassifier,
};
use netsched_core::classify::PortRange;
use netsched_core::rng::SplitMix64;

#[path = "common/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::{live, peak, reset};

/// Nested ranges on both ports of one address pair: most rules are split into pieces, over
/// many tables.
fn nested_pair() -> RuleSet {
    RuleSet::new(
        (1..=1500u16)
            .map(|i| AclRule {
                src: Ipv4Prefix::new(0x0A00_0001, 32).unwrap(),
                dst: Ipv4Prefix::new(0xC0A8_0001, 32).unwrap(),
                src_port: PortRange {
                    low: 1000,
                    high: 1000 + i,
                },
                dst_port: PortRange {
                    low: 5000,
                    high: 5000 + i,
                },
                proto: ProtoMatch::exact(17),
                action: Action::Drop,
            })
            .collect(),
    )
}

/// Rules over many address-length pairs: many tables, buckets filled whole.
fn many_tuples() -> RuleSet {
    let mut rng = SplitMix64::new(5);
    let mut rules = Vec::new();
    for k in 0..6u16 {
        for s in 0..=32u8 {
            for d in (0..=32u8).step_by(4) {
                rules.push(AclRule {
                    src: Ipv4Prefix::truncating(rng.next_u64() as u32, s),
                    dst: Ipv4Prefix::truncating(rng.next_u64() as u32, d),
                    dst_port: PortRange {
                        low: 1000 * k,
                        high: 1000 * k + 7,
                    },
                    proto: ProtoMatch::exact(6),
                    ..AclRule::any(Action::Drop)
                });
            }
        }
    }
    RuleSet::new(rules)
}

#[test]
fn pushes_never_hold_more_than_max_bytes() {
    for (name, set) in [
        ("nested pair", nested_pair()),
        ("many tuples", many_tuples()),
    ] {
        let mut refused = 0;
        let mut max_bytes = 1 << 10;
        while max_bytes <= 8 << 20 {
            let lim = ClassifierLimits {
                max_bytes,
                max_tuples: 1 << 20,
                ..ClassifierLimits::default()
            };
            reset();
            let mut c = TupleMergeClassifier::new(2, &lim);
            for (i, r) in set.rules.iter().enumerate() {
                let (held, len, entries) = (live(), c.len(), c.entries());
                match c.push(r) {
                    Ok(_) => {}
                    Err(ClassifierBuildError::TooManyBytes { rule, max, .. }) => {
                        assert_eq!((rule, max), (i, max_bytes), "{name}");
                        assert_eq!((live(), c.len(), c.entries()), (held, len, entries));
                        refused += 1;
                        break;
                    }
                    Err(e) => panic!("{name}: {e}"),
                }
            }
            assert!(c.split_rules() > 0 || name != "nested pair" || c.len() < 100);
            assert_eq!(live(), c.memory_bytes(), "{name}: bytes held, as counted");
            assert!(c.memory_bytes() <= max_bytes, "{name}");
            assert!(
                peak() <= max_bytes,
                "{name}: max_bytes {max_bytes}, peak {} ({:+} bytes), {} rules of {}",
                peak(),
                peak() as isize - max_bytes as isize,
                c.len(),
                set.len()
            );
            drop(c);
            max_bytes = max_bytes * 5 / 4;
        }
        assert!(refused >= 10, "{name}: only {refused} limits refused");
    }
}

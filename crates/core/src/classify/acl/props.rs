//! Property tests: tuple space search and TupleMerge (at collision limits 1-12) give the
//! linear scan's first match for every packet, over random rule sets made to overlap (a few
//! base addresses and ports), with duplicated rules, wildcards, full and arbitrary port
//! ranges, protocol masks; packets are drawn inside random rules and at random. A second
//! family crowds rules onto one address pair with nested and overlapping port ranges (so
//! TupleMerge fills buckets, splits rules into port-prefix pieces and leaves out contained
//! rules and pieces); its packets sit at and beside the ranges' ends. A third family
//! inserts rules at random ranks into TupleMerge and removes random ones, checking every
//! answer against the linear scan of the rules held at that moment.

use super::*;
use proptest::prelude::*;

const ADDRS: [u32; 5] = [
    0x0A00_0000,
    0x0A01_0000,
    0x0A01_0203,
    0xC0A8_0101,
    0xFFFF_FFFF,
];
const PORTS: [u16; 6] = [0, 1, 80, 1023, 1024, 65535];

fn prefix() -> impl Strategy<Value = Ipv4Prefix> {
    (
        prop_oneof![prop::sample::select(&ADDRS[..]), any::<u32>()],
        prop_oneof![prop::sample::select(vec![0u8, 8, 16, 24, 32]), 0u8..=32],
    )
        .prop_map(|(a, l)| Ipv4Prefix::truncating(a, l))
}

fn port_range() -> impl Strategy<Value = PortRange> {
    let p = || prop_oneof![prop::sample::select(&PORTS[..]), any::<u16>()];
    prop_oneof![
        Just(ANY_PORT),
        Just(PortRange {
            low: 1024,
            high: 65535
        }),
        Just(PortRange { low: 0, high: 1023 }),
        p().prop_map(|x| PortRange { low: x, high: x }),
        (p(), p()).prop_map(|(a, b)| PortRange {
            low: a.min(b),
            high: a.max(b)
        }),
    ]
}

fn proto() -> impl Strategy<Value = ProtoMatch> {
    prop_oneof![
        Just(ProtoMatch::ANY),
        Just(ProtoMatch::exact(6)),
        Just(ProtoMatch::exact(17)),
        any::<(u8, u8)>().prop_map(|(v, m)| ProtoMatch {
            value: v & m,
            mask: m
        }),
    ]
}

fn rule() -> impl Strategy<Value = AclRule> {
    (prefix(), prefix(), port_range(), port_range(), proto()).prop_map(|(s, d, sp, dp, p)| {
        AclRule {
            src: s,
            dst: d,
            src_port: sp,
            dst_port: dp,
            proto: p,
            action: Action::Drop,
        }
    })
}

/// Rules, some repeated later in the list (duplicates never match first).
fn rule_set() -> impl Strategy<Value = RuleSet> {
    (
        prop::collection::vec(rule(), 0..60),
        prop::collection::vec(any::<prop::sample::Index>(), 0..10),
    )
        .prop_map(|(mut rules, dups)| {
            if !rules.is_empty() {
                for d in dups {
                    let r = rules[d.index(rules.len())];
                    rules.push(r);
                }
            }
            RuleSet::new(rules)
        })
}

/// A packet: inside the chosen rule (random bits under its prefixes, ports in its ranges),
/// or made of the same base values, or fully random.
fn packet(set: &RuleSet, pick: prop::sample::Index, bits: [u64; 3], mode: u8) -> FiveTuple {
    let raw = FiveTuple {
        src: bits[0] as u32,
        dst: (bits[0] >> 32) as u32,
        src_port: bits[1] as u16,
        dst_port: (bits[1] >> 16) as u16,
        proto: (bits[1] >> 32) as u8,
    };
    match (mode % 3, set.is_empty()) {
        (0, false) => {
            let r = set.rules[pick.index(set.len())];
            let inside = |p: PortRange, x: u64| {
                (p.low as u64 + x % (p.high as u64 - p.low as u64 + 1)) as u16
            };
            FiveTuple {
                src: r.src.addr() | (raw.src & !r.src.mask()),
                dst: r.dst.addr() | (raw.dst & !r.dst.mask()),
                src_port: inside(r.src_port, bits[2]),
                dst_port: inside(r.dst_port, bits[2] >> 20),
                proto: r.proto.value | (raw.proto & !r.proto.mask),
            }
        }
        (1, _) => FiveTuple {
            src: ADDRS[bits[2] as usize % 5] | (raw.src & 0xFF),
            dst: ADDRS[(bits[2] >> 8) as usize % 5],
            src_port: PORTS[(bits[2] >> 16) as usize % 6],
            dst_port: PORTS[(bits[2] >> 24) as usize % 6],
            proto: [6, 17, 1][(bits[2] >> 32) as usize % 3],
        },
        _ => raw,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn all_structures_agree_with_linear(
        set in rule_set(),
        probes in prop::collection::vec(
            (any::<prop::sample::Index>(), any::<[u64; 3]>(), any::<u8>()), 1..80),
        collision_limit in 1usize..12,
    ) {
        let lim = ClassifierLimits::default();
        let lin = LinearClassifier::build(&set, &lim).unwrap();
        let tss = TupleSpaceClassifier::build(&set, &lim).unwrap();
        let tm = TupleMergeClassifier::build_with_limit(&set, &lim, collision_limit).unwrap();
        let boxed: Vec<_> = ClassifierKind::ALL
            .into_iter()
            .map(|k| build_classifier(k, &set, &lim).unwrap())
            .collect();
        for (pick, bits, mode) in probes {
            let k = packet(&set, pick, bits, mode);
            let want = set.rules.iter().position(|r| r.matches(&k)).map(|i| i as u32);
            prop_assert_eq!(lin.first_match(&k), want, "linear {:?}", k);
            prop_assert_eq!(tss.first_match(&k), want, "tuple space {:?}", k);
            prop_assert_eq!(tm.first_match(&k), want, "tuple merge c={} {:?}", collision_limit, k);
            for b in &boxed {
                prop_assert_eq!(b.first_match(&k), want);
            }
        }
    }

    /// Any text given as a ClassBench or TOML rule file parses or gives an error naming the
    /// source; never a panic.
    #[test]
    fn rule_text_parses_or_errs(text in "[@0-9./: x#\\n\\t]{0,120}", toml_text in "[a-z_=\"\\[\\]0-9./ \\n-]{0,120}") {
        if let Err(e) = RuleSet::parse_classbench(&text, "cb") {
            prop_assert_eq!(e.source, "cb");
        }
        if let Err(e) = RuleSet::from_toml_str(&toml_text, "t") {
            prop_assert_eq!(e.source, "t");
        }
        if let Err(e) = parse_trace(&text, "tr", 100) {
            prop_assert_eq!(e.source, "tr");
        }
    }
}

const PAIR: (u32, u32) = (0x0A01_0203, 0xC0A8_0101);
/// Port values the crowded ranges gather around.
const BASES: [u16; 3] = [0, 5000, 65535];

/// A range at a base: nested with the others of the same base (sharing its low or its high
/// end), overlapping them (around it), full, or one port.
fn crowded_range() -> impl Strategy<Value = PortRange> {
    let base = || prop::sample::select(&BASES[..]);
    prop_oneof![
        3 => (base(), 0u16..2000).prop_map(|(b, h)| PortRange {
            low: b,
            high: b.saturating_add(h),
        }),
        2 => (base(), 0u16..2000).prop_map(|(b, l)| PortRange {
            low: b.saturating_sub(l),
            high: b,
        }),
        2 => (base(), 0u16..700, 0u16..700).prop_map(|(b, l, h)| PortRange {
            low: b.saturating_sub(l),
            high: b.saturating_add(h),
        }),
        1 => Just(ANY_PORT),
        1 => base().prop_map(|b| PortRange { low: b, high: b }),
    ]
}

/// A rule on the pair (mostly /32 to /32, else a /24 or any address on one side), often
/// with one port any, with a protocol of a few kinds: mostly UDP, else TCP, any, or a mask
/// under which TCP and UDP differ.
fn crowded_rule() -> impl Strategy<Value = AclRule> {
    let side = |a: u32| {
        prop_oneof![
            8 => Just(Ipv4Prefix::truncating(a, 32)),
            1 => Just(Ipv4Prefix::truncating(a, 24)),
            1 => Just(Ipv4Prefix::ANY),
        ]
    };
    let proto = prop_oneof![
        4 => Just(ProtoMatch::exact(17)),
        1 => Just(ProtoMatch::exact(6)),
        1 => Just(ProtoMatch::ANY),
        1 => Just(ProtoMatch {
            value: 0x10,
            mask: 0xF0
        }),
    ];
    let ports = prop_oneof![
        2 => (crowded_range(), crowded_range()),
        2 => crowded_range().prop_map(|p| (ANY_PORT, p)),
        1 => crowded_range().prop_map(|p| (p, ANY_PORT)),
    ];
    (side(PAIR.0), side(PAIR.1), ports, proto).prop_map(|(src, dst, (sp, dp), proto)| AclRule {
        src,
        dst,
        src_port: sp,
        dst_port: dp,
        proto,
        action: Action::Drop,
    })
}

/// Crowded rules, then some of them again (identical), and some again under another
/// protocol (the same pieces for another protocol).
fn crowded_set() -> impl Strategy<Value = RuleSet> {
    (
        prop::collection::vec(crowded_rule(), 1..250),
        prop::collection::vec((any::<prop::sample::Index>(), 0u8..3), 0..40),
    )
        .prop_map(|(mut rules, again)| {
            for (i, how) in again {
                let mut r = rules[i.index(rules.len())];
                r.proto = match how {
                    0 => r.proto,
                    1 => ProtoMatch::ANY,
                    _ => ProtoMatch::exact(if r.proto.value == 6 { 17 } else { 6 }),
                };
                rules.push(r);
            }
            RuleSet::new(rules)
        })
}

/// A header on the pair (or beside it) with ports at or beside a rule's ends.
fn crowded_packet(set: &RuleSet, pick: prop::sample::Index, bits: u64) -> FiveTuple {
    let r = set.rules[pick.index(set.len())];
    let near = |p: PortRange, b: u64| match b % 5 {
        0 => p.low.wrapping_sub(1),
        1 => p.low,
        2 => p.high,
        3 => p.high.wrapping_add(1),
        _ => p
            .low
            .wrapping_add((b >> 3) as u16 % (p.high - p.low).wrapping_add(1).max(1)),
    };
    FiveTuple {
        src: if bits & 0x100 == 0 {
            PAIR.0
        } else {
            PAIR.0 ^ 0x80
        },
        dst: if bits & 0x200 == 0 {
            PAIR.1
        } else {
            PAIR.1 ^ 0x1_0000
        },
        src_port: near(r.src_port, bits >> 10),
        dst_port: near(r.dst_port, bits >> 30),
        proto: [17, 6, 1, 0x13][(bits >> 50) as usize % 4],
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// Rules crowded on one pair: every structure agrees with linear; TupleMerge's buckets
    /// stay within 4c + 1 and it counts every rule it was given.
    #[test]
    fn crowded_pair_agrees_with_linear(
        set in crowded_set(),
        probes in prop::collection::vec((any::<prop::sample::Index>(), any::<u64>()), 1..120),
        collision_limit in 1usize..4,
    ) {
        let lim = ClassifierLimits::default();
        let tss = TupleSpaceClassifier::build(&set, &lim).unwrap();
        let tm = TupleMergeClassifier::build_with_limit(&set, &lim, collision_limit).unwrap();
        prop_assert_eq!(tm.len(), set.len());
        prop_assert!(tm.longest_bucket() <= 4 * collision_limit + 1, "{}", tm.longest_bucket());
        for (pick, bits) in probes {
            let k = crowded_packet(&set, pick, bits);
            let want = set.rules.iter().position(|r| r.matches(&k)).map(|i| i as u32);
            prop_assert_eq!(tss.first_match(&k), want, "tuple space {:?}", k);
            prop_assert_eq!(tm.first_match(&k), want, "tuple merge c={} {:?}", collision_limit, k);
        }
    }
}

/// The generated sets at 2000 rules: all three structures agree with linear on their traces.
#[test]
fn generated_sets_agree_with_linear() {
    let lim = ClassifierLimits::default();
    for p in generate::Profile::ALL {
        let set = generate::generate_rules(p, 2000, 11);
        let trace = generate::generate_trace(&set, 3000, 90, 12);
        let lin = LinearClassifier::build(&set, &lim).unwrap();
        let tss = TupleSpaceClassifier::build(&set, &lim).unwrap();
        let tm = TupleMergeClassifier::build(&set, &lim).unwrap();
        let mut matched = 0;
        for k in &trace {
            let want = lin.first_match(k);
            matched += want.is_some() as usize;
            assert_eq!(tss.first_match(k), want, "{p} tss {k:?}");
            assert_eq!(tm.first_match(k), want, "{p} tm {k:?}");
        }
        assert!(matched >= 2700, "{p}: {matched}");
    }
}

/// One edit: insert a rule before the rule at a position (or at the end), or remove one.
#[derive(Debug, Clone)]
enum Edit {
    Insert(prop::sample::Index, AclRule),
    Remove(prop::sample::Index),
}

fn edit(rule: impl Strategy<Value = AclRule>) -> impl Strategy<Value = Edit> {
    prop_oneof![
        3 => (any::<prop::sample::Index>(), rule).prop_map(|(i, r)| Edit::Insert(i, r)),
        2 => any::<prop::sample::Index>().prop_map(Edit::Remove),
    ]
}

/// Rules held as (rank, id, rule) in rank order: what TupleMerge must answer.
struct Model {
    held: Vec<(u32, u32, AclRule)>,
    next_id: u32,
}

impl Model {
    /// The first rules, ranks 1024 apart so inserts find room between them.
    fn new(tm: &mut TupleMergeClassifier, rules: &[AclRule]) -> Model {
        let mut m = Model {
            held: Vec::new(),
            next_id: 0,
        };
        for (i, r) in rules.iter().enumerate() {
            let rank = (i as u32 + 1) * 1024;
            tm.insert(rank, m.next_id, r).unwrap();
            m.held.push((rank, m.next_id, *r));
            m.next_id += 1;
        }
        m
    }

    fn apply(&mut self, tm: &mut TupleMergeClassifier, e: &Edit) {
        match e {
            Edit::Insert(at, r) => {
                let i = at.index(self.held.len() + 1);
                let low = if i == 0 { 0 } else { self.held[i - 1].0 + 1 };
                let high = self.held.get(i).map_or(u32::MAX - 1, |h| h.0);
                if high <= low {
                    return; // no rank left between the neighbours
                }
                let rank = low + (high - low) / 2;
                tm.insert(rank, self.next_id, r).unwrap();
                self.held.insert(i, (rank, self.next_id, *r));
                self.next_id += 1;
            }
            Edit::Remove(at) if !self.held.is_empty() => {
                let (rank, _, r) = self.held.remove(at.index(self.held.len()));
                assert!(tm.remove(rank, &r).unwrap(), "rank {rank} not held");
            }
            Edit::Remove(_) => {}
        }
    }

    fn first_match(&self, k: &FiveTuple) -> Option<u32> {
        self.held.iter().find(|h| h.2.matches(k)).map(|h| h.1)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Crowded rules (splits, pieces and rules left out) inserted at random ranks and removed
    /// at random: after every edit TupleMerge answers as the linear scan of the rules held,
    /// counts them, and a rank removed is no longer held.
    #[test]
    fn edits_agree_with_linear(
        first in prop::collection::vec(crowded_rule(), 0..120),
        edits in prop::collection::vec(edit(crowded_rule()), 1..120),
        probes in prop::collection::vec((any::<prop::sample::Index>(), any::<u64>()), 1..24),
        collision_limit in 1usize..4,
    ) {
        let lim = ClassifierLimits::default();
        let mut tm = TupleMergeClassifier::new(collision_limit, &lim);
        let mut model = Model::new(&mut tm, &first);
        let mut seen: Vec<AclRule> = first.clone();
        for e in &edits {
            model.apply(&mut tm, e);
            if let Edit::Insert(_, r) = e {
                seen.push(*r);
            }
            prop_assert_eq!(tm.len(), model.held.len());
            if seen.is_empty() {
                continue;
            }
            let near = RuleSet::new(seen.clone());
            for &(pick, bits) in &probes {
                let k = crowded_packet(&near, pick, bits);
                prop_assert_eq!(tm.first_match(&k), model.first_match(&k), "{:?} after {:?}", k, e);
            }
        }
        for (rank, _, r) in std::mem::take(&mut model.held) {
            prop_assert!(tm.remove(rank, &r).unwrap());
        }
        prop_assert_eq!((tm.len(), tm.entries(), tm.tuples()), (0, 0, 0));
    }

    /// The same on the spread-out rules of the first family.
    #[test]
    fn edits_of_spread_rules_agree_with_linear(
        first in prop::collection::vec(rule(), 0..60),
        edits in prop::collection::vec(edit(rule()), 1..80),
        probes in prop::collection::vec(
            (any::<prop::sample::Index>(), any::<[u64; 3]>(), any::<u8>()), 1..24),
        collision_limit in 1usize..12,
    ) {
        let lim = ClassifierLimits::default();
        let mut tm = TupleMergeClassifier::new(collision_limit, &lim);
        let mut model = Model::new(&mut tm, &first);
        let mut seen: Vec<AclRule> = first.clone();
        for e in &edits {
            model.apply(&mut tm, e);
            if let Edit::Insert(_, r) = e {
                seen.push(*r);
            }
            let near = RuleSet::new(seen.clone());
            for &(pick, bits, mode) in &probes {
                let k = packet(&near, pick, bits, mode);
                prop_assert_eq!(tm.first_match(&k), model.first_match(&k), "{:?} after {:?}", k, e);
            }
        }
    }
}

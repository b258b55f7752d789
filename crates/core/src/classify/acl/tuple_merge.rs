//! TupleMerge (Daly, Torng, "TupleMerge: Building Online Packet Classifiers by Omitting
//! Bits", ICCCN 2017, §III–§IV): tuple space search where a rule may live in a table whose
//! tuple is *less* specific than its own — the table hashes only the bits its tuple keeps,
//! and a bucket holds every rule whose kept bits agree, each checked in full on lookup. Fewer
//! tables than tuple space search, and no port-range expansion: a range is hashed by the
//! prefix its two ends share (`1000-1999` → the 5 leading bits they agree on), and checked
//! exactly in the bucket.
//!
//! Insertion is online (the paper's point: a rule is added without rebuilding), one rule at a
//! time at the lowest priority ([`TupleMergeClassifier::push`]); `build` pushes the rules in
//! order. The paper's collision limit `c` bounds a bucket: a rule goes to the most specific
//! table that covers its tuple *and* whose bucket for it holds fewer than `c` rules; if none
//! has room, a table is made for the rule's tuple relaxed (address lengths rounded down to a
//! multiple of 8, port lengths to 0 unless the port is exact) — or, if that table exists and
//! its bucket is full, for the rule's exact tuple. The paper splits a full bucket's rules into
//! a new table instead; placing the new rule elsewhere (never moving rules) and the relaxation
//! steps are our simplification, keeping each insert O(tables). A bucket passes `c` only when
//! rules agree on every bit of their own tuple (equal prefixes, ports sharing the same
//! prefix).
//!
//! Lookup: tables are probed in the order of their best (lowest-index) rule, as in
//! [`super::TupleSpaceClassifier`], and a bucket is scanned in rule order until a rule
//! matches or cannot beat the match already found.
//!
//! Cost: a lookup is at most T probes plus the bucket scans (≤ c rules each, except the
//! equal-tuple case). Insert O(T). Memory: 32 bytes per rule in buckets, plus 48-96 bytes per
//! distinct key in the hash tables.

use super::table::KeyTable;
use super::{
    rule_key, AclRule, ClassifierBuildError, ClassifierLimits, FiveTuple, PackedRule,
    PacketClassifier, ProtoMatch, RuleSet, Tuple,
};
use crate::classify::PortRange;

/// The collision limit `c` when none is given. The paper studies several values; 8 keeps
/// bucket scans short on the ClassBench-like sets of `docs/classify.md` (our choice).
pub const DEFAULT_COLLISION_LIMIT: usize = 8;

#[derive(Debug, Clone, Copy)]
struct Entry {
    rule: u32,
    proto: ProtoMatch,
    fields: PackedRule,
}

#[derive(Debug, Clone)]
struct TmTable {
    tuple: Tuple,
    mask: u128,
    best: u32,
    /// Masked key → index in `buckets`.
    keys: KeyTable,
    buckets: Vec<Vec<Entry>>,
}

impl TmTable {
    fn bucket_len(&self, key: u128) -> usize {
        self.keys
            .get(key)
            .map_or(0, |b| self.buckets[b as usize].len())
    }
}

#[derive(Debug, Clone)]
pub struct TupleMergeClassifier {
    /// In the order of `best`: a pushed rule has the highest index so far, so a new table
    /// goes last and the order holds without sorting.
    tables: Vec<TmTable>,
    rules: usize,
    collision_limit: usize,
    limits: ClassifierLimits,
    bytes: usize,
}

/// The length of the prefix that `r.low` and `r.high` share: every port of the range has
/// these bits.
fn shared_prefix(r: PortRange) -> u8 {
    ((r.low ^ r.high).leading_zeros() as u8).min(16)
}

/// The rule's own tuple: the most specific one whose table can hold it.
fn natural(r: &AclRule) -> Tuple {
    Tuple {
        src: r.src.prefix_len(),
        dst: r.dst.prefix_len(),
        sp: shared_prefix(r.src_port),
        dp: shared_prefix(r.dst_port),
        proto_mask: r.proto.mask,
    }
}

fn relax(t: Tuple) -> Tuple {
    let port = |l: u8| if l == 16 { 16 } else { 0 };
    Tuple {
        src: t.src / 8 * 8,
        dst: t.dst / 8 * 8,
        sp: port(t.sp),
        dp: port(t.dp),
        proto_mask: t.proto_mask,
    }
}

impl TupleMergeClassifier {
    /// An empty classifier with collision limit `c` (at least 1).
    pub fn new(collision_limit: usize, limits: &ClassifierLimits) -> TupleMergeClassifier {
        TupleMergeClassifier {
            tables: Vec::new(),
            rules: 0,
            collision_limit: collision_limit.max(1),
            limits: *limits,
            bytes: 0,
        }
    }

    /// All rules of `rules`, pushed in order, with [`DEFAULT_COLLISION_LIMIT`].
    pub fn build(
        rules: &RuleSet,
        limits: &ClassifierLimits,
    ) -> Result<TupleMergeClassifier, ClassifierBuildError> {
        Self::build_with_limit(rules, limits, DEFAULT_COLLISION_LIMIT)
    }

    pub fn build_with_limit(
        rules: &RuleSet,
        limits: &ClassifierLimits,
        collision_limit: usize,
    ) -> Result<TupleMergeClassifier, ClassifierBuildError> {
        limits.check_rules(rules.len())?;
        let mut c = Self::new(collision_limit, limits);
        for r in &rules.rules {
            c.push(r)?;
        }
        Ok(c)
    }

    /// Add `rule` after every rule already held (lowest priority); returns its index. On an
    /// error the classifier is unchanged.
    pub fn push(&mut self, rule: &AclRule) -> Result<u32, ClassifierBuildError> {
        let index = self.rules;
        if index >= self.limits.max_rules {
            return Err(ClassifierBuildError::TooManyRules {
                rules: index + 1,
                max: self.limits.max_rules,
            });
        }
        let nat = natural(rule);
        let t = match self.roomy_table(rule, &nat) {
            Some(t) => t,
            None => {
                let relaxed = relax(nat);
                let want = if self.find(&relaxed).is_some() {
                    nat
                } else {
                    relaxed
                };
                match self.find(&want) {
                    Some(t) => t,
                    None => self.add_table(want, index)?,
                }
            }
        };
        let table = &mut self.tables[t];
        let key = rule_key(rule, table.mask);
        let new_key = table.keys.get(key).is_none();
        let grow = if new_key {
            table.keys.memory_after_insert() - table.keys.memory_bytes()
                + std::mem::size_of::<Vec<Entry>>()
        } else {
            0
        };
        let after = self.bytes + grow + std::mem::size_of::<Entry>();
        if after > self.limits.max_bytes {
            return Err(ClassifierBuildError::TooManyBytes {
                rule: index,
                bytes: after,
                max: self.limits.max_bytes,
            });
        }
        let next = table.buckets.len() as u32;
        let b = table.keys.get_or_insert(key, || next) as usize;
        if b == table.buckets.len() {
            table.buckets.push(Vec::new());
        }
        let (fields, proto) = PackedRule::new(rule);
        table.buckets[b].push(Entry {
            rule: index as u32,
            proto,
            fields,
        });
        self.bytes = after;
        self.rules += 1;
        Ok(index as u32)
    }

    /// The most specific table covering `nat` whose bucket for `rule` has room.
    fn roomy_table(&self, rule: &AclRule, nat: &Tuple) -> Option<usize> {
        let mut choice: Option<(usize, u32)> = None;
        for (i, t) in self.tables.iter().enumerate() {
            let spec = t.tuple.specificity();
            if !t.tuple.covers(nat) || choice.is_some_and(|(_, s)| s >= spec) {
                continue;
            }
            if t.bucket_len(rule_key(rule, t.mask)) < self.collision_limit {
                choice = Some((i, spec));
            }
        }
        choice.map(|(i, _)| i)
    }

    fn find(&self, tuple: &Tuple) -> Option<usize> {
        self.tables.iter().position(|t| t.tuple == *tuple)
    }

    fn add_table(&mut self, tuple: Tuple, index: usize) -> Result<usize, ClassifierBuildError> {
        if self.tables.len() >= self.limits.max_tuples {
            return Err(ClassifierBuildError::TooManyTuples {
                rule: index,
                max: self.limits.max_tuples,
            });
        }
        let keys = KeyTable::new();
        self.bytes += keys.memory_bytes() + std::mem::size_of::<TmTable>();
        self.tables.push(TmTable {
            tuple,
            mask: tuple.mask(),
            best: index as u32,
            keys,
            buckets: Vec::new(),
        });
        Ok(self.tables.len() - 1)
    }

    /// Rules held.
    pub fn len(&self) -> usize {
        self.rules
    }
    pub fn is_empty(&self) -> bool {
        self.rules == 0
    }
    /// The longest bucket (rules checked in full by one table probe in the worst case).
    pub fn longest_bucket(&self) -> usize {
        self.tables
            .iter()
            .flat_map(|t| t.buckets.iter().map(Vec::len))
            .max()
            .unwrap_or(0)
    }
}

impl PacketClassifier for TupleMergeClassifier {
    fn first_match(&self, key: &FiveTuple) -> Option<u32> {
        let k = super::pack_key(key);
        let mut best = u32::MAX;
        for t in &self.tables {
            if t.best >= best {
                break;
            }
            let Some(b) = t.keys.get(k & t.mask) else {
                continue;
            };
            for e in &t.buckets[b as usize] {
                if e.rule >= best {
                    break;
                }
                if e.proto.matches(key.proto) && e.fields.matches_fields(key) {
                    best = e.rule;
                    break;
                }
            }
        }
        (best != u32::MAX).then_some(best)
    }
    fn memory_bytes(&self) -> usize {
        self.tables.capacity() * std::mem::size_of::<TmTable>()
            + self
                .tables
                .iter()
                .map(|t| {
                    t.keys.memory_bytes()
                        + t.buckets.capacity() * std::mem::size_of::<Vec<Entry>>()
                        + t.buckets
                            .iter()
                            .map(|b| b.capacity() * std::mem::size_of::<Entry>())
                            .sum::<usize>()
                })
                .sum::<usize>()
    }
    fn tuples(&self) -> usize {
        self.tables.len()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Action, Ipv4Prefix, LinearClassifier, ANY_PORT};
    use super::*;

    #[test]
    fn shared_prefix_of_ranges() {
        let r = |low, high| PortRange { low, high };
        assert_eq!(shared_prefix(r(80, 80)), 16);
        assert_eq!(shared_prefix(ANY_PORT), 0);
        assert_eq!(shared_prefix(r(1024, 65535)), 0);
        assert_eq!(shared_prefix(r(0, 1023)), 6);
        // 1000 = 0b0000_0011_1110_1000, 1999 = 0b0000_0111_1100_1111: 5 bits shared.
        assert_eq!(shared_prefix(r(1000, 1999)), 5);
    }

    /// Rules equal on their whole tuple overflow one bucket past the limit (nothing can
    /// separate them); the answers stay those of the linear scan.
    #[test]
    fn collision_limit_spreads_rules_and_equal_tuples_share_a_bucket() {
        let net = Ipv4Prefix::new(0x0A00_0000, 8).unwrap();
        let mut rules = Vec::new();
        // 20 rules on distinct /32s inside 10/8: the first table (10/8's relaxed tuple) takes
        // 4; the rest go to a more specific table.
        rules.push(AclRule {
            src: net,
            ..AclRule::any(Action::Drop)
        });
        for i in 0..20u32 {
            rules.push(AclRule {
                src: Ipv4Prefix::new(0x0A00_0000 + i, 32).unwrap(),
                ..AclRule::any(Action::Accept)
            });
        }
        // 10 rules equal but for their destination port ranges 0-260, 0-280, ..., 0-440,
        // whose ends all share the same 7 leading bits: one key in every table that can hold
        // them. The relaxed all-wildcard table takes 4, the exact-tuple table the other 6.
        for i in 0..10u16 {
            rules.push(AclRule {
                dst_port: PortRange {
                    low: 0,
                    high: 260 + i * 20,
                },
                ..AclRule::any(Action::Accept)
            });
        }
        let set = RuleSet::new(rules);
        let c =
            TupleMergeClassifier::build_with_limit(&set, &ClassifierLimits::default(), 4).unwrap();
        assert!(c.tuples() >= 2, "{}", c.tuples());
        assert_eq!(c.longest_bucket(), 6);
        let lin = LinearClassifier::build(&set, &ClassifierLimits::default()).unwrap();
        for src in [0x0A00_0000u32, 0x0A00_0005, 0x0A00_0013, 0x0B00_0000] {
            for dp in [0u16, 256, 261, 280, 281, 440, 441, 1000] {
                let k = FiveTuple {
                    src,
                    dst: 1,
                    src_port: 1,
                    dst_port: dp,
                    proto: 17,
                };
                assert_eq!(c.first_match(&k), lin.first_match(&k), "{k:?}");
            }
        }
    }

    #[test]
    fn push_past_limits_is_refused_and_leaves_the_classifier_unchanged() {
        let lim = ClassifierLimits {
            max_rules: 2,
            max_tuples: 1,
            ..ClassifierLimits::default()
        };
        let mut c = TupleMergeClassifier::new(4, &lim);
        assert_eq!(c.push(&AclRule::any(Action::Accept)), Ok(0));
        let specific = AclRule {
            src: Ipv4Prefix::new(0x0A00_0000, 8).unwrap(),
            ..AclRule::any(Action::Drop)
        };
        // The /0 table covers it and has room: no new tuple.
        assert_eq!(c.push(&specific), Ok(1));
        assert_eq!(
            c.push(&specific),
            Err(ClassifierBuildError::TooManyRules { rules: 3, max: 2 })
        );
        let lim = ClassifierLimits {
            max_tuples: 1,
            ..ClassifierLimits::default()
        };
        let mut c = TupleMergeClassifier::new(1, &lim);
        c.push(&AclRule::any(Action::Accept)).unwrap();
        // The bucket is full (c = 1): a second table would be needed.
        assert_eq!(
            c.push(&specific),
            Err(ClassifierBuildError::TooManyTuples { rule: 1, max: 1 })
        );
        assert_eq!(c.len(), 1);
        let k = FiveTuple {
            src: 0x0A00_0001,
            ..FiveTuple::default()
        };
        assert_eq!(c.first_match(&k), Some(0));
    }
}

//! Priority-sorted tuple space search (Srinivasan, Suri, Varghese, "Packet Classification
//! using Tuple Space Search", SIGCOMM 1999, §3; the priority sort and early stop are those of
//! Open vSwitch's classifier, Pfaff et al., "The Design and Implementation of Open vSwitch",
//! NSDI 2015, §5.3 "Staged lookup" and "Priority sorting").
//!
//! A tuple is the list of prefix lengths of the five fields. Every rule lives in the hash
//! table of its tuple under its masked field values, so a lookup probes each table once with
//! the packet's fields masked by the table's tuple. Port ranges are not prefixes: a range is
//! split into its minimal set of prefixes (at most 2·16 − 2 = 30, Srinivasan et al. §2), and a
//! rule takes one entry per (source prefix, destination prefix) pair — the expansion that
//! TupleMerge avoids. Entries with equal keys keep the earliest rule. Tables are probed in the
//! order of the best (lowest-index) rule they hold; the search stops at the first table whose
//! best rule cannot beat the match already found.
//!
//! Cost: a lookup is at most T hash probes (T = distinct tuples). Many tuples make every
//! packet slow; a rule set built to create them is the "tuple space explosion" denial of
//! service (Csikor et al., CoNEXT 2019; CVE-2019-25076), so [`super::ClassifierLimits`] bounds
//! T, the entries and the bytes. Build O(entries). Memory: 48-96 bytes per entry.

use super::table::KeyTable;
use super::{
    rule_key, AclRule, ClassifierBuildError, ClassifierLimits, FiveTuple, PacketClassifier,
    RuleSet, Tuple,
};
use crate::classify::PortRange;
use std::collections::HashMap;

#[derive(Debug, Clone)]
struct TssTable {
    mask: u128,
    /// The lowest rule index in the table.
    best: u32,
    table: KeyTable,
}

#[derive(Debug, Clone)]
pub struct TupleSpaceClassifier {
    tables: Vec<TssTable>,
    entries: usize,
}

/// The minimal list of prefixes `(value, length)` of a 16-bit field whose union is
/// `[low, high]`: the largest aligned block that starts at `low` and fits, repeatedly.
pub(crate) fn range_to_prefixes(r: PortRange) -> Vec<(u16, u8)> {
    let mut out = Vec::new();
    let (mut lo, hi) = (r.low as u32, r.high as u32);
    while lo <= hi {
        // The block size is limited by lo's alignment and by what is left of the range.
        let mut size = if lo == 0 {
            1u32 << 16
        } else {
            1u32 << lo.trailing_zeros()
        };
        while size > hi - lo + 1 {
            size >>= 1;
        }
        out.push((lo as u16, 16 - size.trailing_zeros() as u8));
        lo += size;
    }
    out
}

impl TupleSpaceClassifier {
    pub fn build(
        rules: &RuleSet,
        limits: &ClassifierLimits,
    ) -> Result<TupleSpaceClassifier, ClassifierBuildError> {
        limits.check_rules(rules.len())?;
        let mut index: HashMap<Tuple, usize> = HashMap::new();
        let mut tables: Vec<TssTable> = Vec::new();
        let mut entries = 0usize;
        let mut bytes = 0usize;
        for (i, r) in rules.rules.iter().enumerate() {
            let sps = range_to_prefixes(r.src_port);
            let dps = range_to_prefixes(r.dst_port);
            if entries + sps.len() * dps.len() > limits.max_entries {
                return Err(ClassifierBuildError::TooManyEntries {
                    rule: i,
                    max: limits.max_entries,
                });
            }
            for &(sp, spl) in &sps {
                for &(dp, dpl) in &dps {
                    let tuple = Tuple {
                        src: r.src.prefix_len(),
                        dst: r.dst.prefix_len(),
                        sp: spl,
                        dp: dpl,
                        proto_mask: r.proto.mask,
                    };
                    let t = Self::table_for(&mut index, &mut tables, tuple, i, &mut bytes, limits)?;
                    let mut one = *r;
                    one.src_port = PortRange { low: sp, high: sp };
                    one.dst_port = PortRange { low: dp, high: dp };
                    Self::insert(&mut tables[t], &one, i, &mut bytes, limits)?;
                    entries += 1;
                }
            }
        }
        tables.sort_by_key(|t| t.best);
        Ok(TupleSpaceClassifier { tables, entries })
    }

    fn table_for(
        index: &mut HashMap<Tuple, usize>,
        tables: &mut Vec<TssTable>,
        tuple: Tuple,
        rule: usize,
        bytes: &mut usize,
        limits: &ClassifierLimits,
    ) -> Result<usize, ClassifierBuildError> {
        if let Some(&t) = index.get(&tuple) {
            return Ok(t);
        }
        if tables.len() >= limits.max_tuples {
            return Err(ClassifierBuildError::TooManyTuples {
                rule,
                max: limits.max_tuples,
            });
        }
        let table = KeyTable::new();
        *bytes += table.memory_bytes() + std::mem::size_of::<TssTable>();
        tables.push(TssTable {
            mask: tuple.mask(),
            best: rule as u32,
            table,
        });
        index.insert(tuple, tables.len() - 1);
        Ok(tables.len() - 1)
    }

    fn insert(
        t: &mut TssTable,
        one: &AclRule,
        rule: usize,
        bytes: &mut usize,
        limits: &ClassifierLimits,
    ) -> Result<(), ClassifierBuildError> {
        let after = *bytes - t.table.memory_bytes() + t.table.memory_after_insert();
        if after > limits.max_bytes {
            return Err(ClassifierBuildError::TooManyBytes {
                rule,
                bytes: after,
                max: limits.max_bytes,
            });
        }
        *bytes -= t.table.memory_bytes();
        t.table.get_or_insert(rule_key(one, t.mask), || rule as u32);
        *bytes += t.table.memory_bytes();
        Ok(())
    }

    /// Table entries over all tuples (after port-range expansion).
    pub fn entries(&self) -> usize {
        self.entries
    }
}

impl PacketClassifier for TupleSpaceClassifier {
    fn first_match(&self, key: &FiveTuple) -> Option<u32> {
        let k = super::pack_key(key);
        let mut best = u32::MAX;
        for t in &self.tables {
            if t.best >= best {
                break;
            }
            if let Some(v) = t.table.get(k & t.mask) {
                best = best.min(v);
            }
        }
        (best != u32::MAX).then_some(best)
    }
    fn memory_bytes(&self) -> usize {
        self.tables.capacity() * std::mem::size_of::<TssTable>()
            + self
                .tables
                .iter()
                .map(|t| t.table.memory_bytes())
                .sum::<usize>()
    }
    fn tuples(&self) -> usize {
        self.tables.len()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Action, Ipv4Prefix, ProtoMatch, ANY_PORT};
    use super::*;

    /// Oracle: the prefixes cover exactly [low, high], do not overlap, and there are no more
    /// than 30 of them; checked on every range with low, high in a dense sample.
    #[test]
    fn range_prefixes_cover_the_range_exactly() {
        let points: Vec<u16> = (0..40)
            .chain([1023, 1024, 1025, 32767, 32768, 65534, 65535])
            .chain((0..64).map(|i| i * 1021))
            .collect();
        for &low in &points {
            for &high in &points {
                if low > high {
                    continue;
                }
                let ps = range_to_prefixes(PortRange { low, high });
                assert!(ps.len() <= 30, "{low}-{high}: {}", ps.len());
                let mut covered = 0u64;
                let mut next = low as u32;
                for &(v, len) in &ps {
                    let size = 1u32 << (16 - len);
                    assert_eq!(v as u32 % size, 0, "unaligned {v}/{len}");
                    assert_eq!(v as u32, next, "gap or overlap in {low}-{high}");
                    next += size;
                    covered += size as u64;
                }
                assert_eq!(covered, (high - low) as u64 + 1);
            }
        }
        assert_eq!(range_to_prefixes(ANY_PORT), vec![(0, 0)]);
        assert_eq!(
            range_to_prefixes(PortRange {
                low: 1024,
                high: 65535
            })
            .len(),
            6
        );
        assert_eq!(
            range_to_prefixes(PortRange {
                low: 1,
                high: 65534
            })
            .len(),
            30
        );
    }

    /// The worst-case range takes 30 × 30 entries; a limit below that is refused, naming the
    /// rule; so is a tuple count past the limit.
    #[test]
    fn limits_refuse_expansion_and_tuple_explosion() {
        let wide = PortRange {
            low: 1,
            high: 65534,
        };
        let r = AclRule {
            src_port: wide,
            dst_port: wide,
            ..AclRule::any(Action::Drop)
        };
        let set = RuleSet::new(vec![AclRule::any(Action::Accept), r]);
        let lim = ClassifierLimits {
            max_entries: 900,
            ..ClassifierLimits::default()
        };
        assert_eq!(
            TupleSpaceClassifier::build(&set, &lim).unwrap_err(),
            ClassifierBuildError::TooManyEntries { rule: 1, max: 900 }
        );
        let c = TupleSpaceClassifier::build(&set, &ClassifierLimits::default()).unwrap();
        assert_eq!(c.entries(), 901);
        // 33 × 33 source/destination length pairs: 1089 tuples.
        let mut rules = Vec::new();
        for s in 0..=32u8 {
            for d in 0..=32u8 {
                rules.push(AclRule {
                    src: Ipv4Prefix::truncating(u32::MAX, s),
                    dst: Ipv4Prefix::truncating(u32::MAX, d),
                    proto: ProtoMatch::exact(6),
                    ..AclRule::any(Action::Drop)
                });
            }
        }
        let set = RuleSet::new(rules);
        let lim = ClassifierLimits {
            max_tuples: 1000,
            ..ClassifierLimits::default()
        };
        assert_eq!(
            TupleSpaceClassifier::build(&set, &lim).unwrap_err(),
            ClassifierBuildError::TooManyTuples {
                rule: 1000,
                max: 1000
            }
        );
        let lim = ClassifierLimits {
            max_bytes: 10_000,
            ..ClassifierLimits::default()
        };
        assert!(matches!(
            TupleSpaceClassifier::build(&set, &lim).unwrap_err(),
            ClassifierBuildError::TooManyBytes { max: 10_000, .. }
        ));
    }
}

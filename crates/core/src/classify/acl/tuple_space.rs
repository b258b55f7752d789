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
//!
//! The byte limit holds for the build's peak, not only for its result: every allocation of
//! the build — a table's slots (old and new arrays while it rehashes), the list of tables
//! (old and new while it moves), the tuple index used while building — is counted before it
//! is made, and the build is refused with `TooManyBytes` if the count would pass `max_bytes`.
//! Nothing else is allocated (a range's prefixes are held inline), so a refused build never
//! held more than `max_bytes` on the heap.

use super::table::KeyTable;
use super::{
    rule_key, AclRule, ClassifierBuildError, ClassifierLimits, FiveTuple, PacketClassifier,
    RuleSet, Tuple,
};
use crate::classify::PortRange;

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

/// The most prefixes a range of a 16-bit field splits into: 2w − 2 (Srinivasan et al. §2).
pub(crate) const MAX_PORT_PREFIXES: usize = 30;

/// The prefixes of one port range, in ascending order, held inline (expanding a rule
/// allocates nothing); a slice of `(value, length)`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PortPrefixes {
    items: [(u16, u8); MAX_PORT_PREFIXES],
    len: usize,
}

impl std::ops::Deref for PortPrefixes {
    type Target = [(u16, u8)];
    fn deref(&self) -> &[(u16, u8)] {
        &self.items[..self.len]
    }
}

/// The minimal list of prefixes `(value, length)` of a 16-bit field whose union is
/// `[low, high]`: the largest aligned block that starts at `low` and fits, repeatedly.
pub(crate) fn range_to_prefixes(r: PortRange) -> PortPrefixes {
    let mut out = PortPrefixes {
        items: [(0, 0); MAX_PORT_PREFIXES],
        len: 0,
    };
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
        out.items[out.len] = (lo as u16, 16 - size.trailing_zeros() as u8);
        out.len += 1;
        lo += size;
    }
    out
}

/// A build under way: the tables, the index from a tuple's mask to its table, and the bytes
/// all of it holds (capacities).
struct Build<'a> {
    tables: Vec<TssTable>,
    index: KeyTable,
    bytes: usize,
    limits: &'a ClassifierLimits,
}

impl Build<'_> {
    /// Refuse rule `rule` if the heap would hold `peak` bytes.
    fn check(&self, rule: usize, peak: usize) -> Result<(), ClassifierBuildError> {
        if peak > self.limits.max_bytes {
            return Err(ClassifierBuildError::TooManyBytes {
                rule,
                bytes: peak,
                max: self.limits.max_bytes,
            });
        }
        Ok(())
    }

    /// The table of `tuple`, made (empty, no slots yet) if it is new. Rules come in index
    /// order, so a table made later has a higher best rule and the list stays in order.
    fn table_for(&mut self, tuple: Tuple, rule: usize) -> Result<usize, ClassifierBuildError> {
        let mask = tuple.mask();
        if let Some(t) = self.index.get(mask) {
            return Ok(t as usize);
        }
        if self.tables.len() >= self.limits.max_tuples {
            return Err(ClassifierBuildError::TooManyTuples {
                rule,
                max: self.limits.max_tuples,
            });
        }
        let (after, peak) = self.index.insert_bytes(mask);
        let held = self.index.memory_bytes();
        self.check(rule, self.bytes - held + peak)?;
        let t = self.tables.len();
        self.index.get_or_insert(mask, || t as u32);
        self.bytes = self.bytes - held + after;
        if t == self.tables.capacity() {
            // Doubling, made explicit so the count knows the capacity: the old and the new
            // array are both held while the tables move.
            let size = std::mem::size_of::<TssTable>();
            let cap = (2 * t).max(4);
            self.check(rule, self.bytes + cap * size)?;
            self.tables.reserve_exact(cap - t);
            self.bytes += (self.tables.capacity() - t) * size;
        }
        self.tables.push(TssTable {
            mask,
            best: rule as u32,
            table: KeyTable::new(),
        });
        Ok(t)
    }

    fn insert(&mut self, t: usize, one: &AclRule, rule: usize) -> Result<(), ClassifierBuildError> {
        let table = &self.tables[t];
        let key = rule_key(one, table.mask);
        let (after, peak) = table.table.insert_bytes(key);
        let held = table.table.memory_bytes();
        self.check(rule, self.bytes - held + peak)?;
        self.tables[t].table.get_or_insert(key, || rule as u32);
        self.bytes = self.bytes - held + after;
        Ok(())
    }
}

impl TupleSpaceClassifier {
    pub fn build(
        rules: &RuleSet,
        limits: &ClassifierLimits,
    ) -> Result<TupleSpaceClassifier, ClassifierBuildError> {
        limits.check_rules(rules.len())?;
        let mut b = Build {
            tables: Vec::new(),
            index: KeyTable::new(),
            bytes: 0,
            limits,
        };
        let mut entries = 0usize;
        for (i, r) in rules.rules.iter().enumerate() {
            let sps = range_to_prefixes(r.src_port);
            let dps = range_to_prefixes(r.dst_port);
            if entries + sps.len() * dps.len() > limits.max_entries {
                return Err(ClassifierBuildError::TooManyEntries {
                    rule: i,
                    max: limits.max_entries,
                });
            }
            for &(sp, spl) in sps.iter() {
                for &(dp, dpl) in dps.iter() {
                    let tuple = Tuple {
                        src: r.src.prefix_len(),
                        dst: r.dst.prefix_len(),
                        sp: spl,
                        dp: dpl,
                        proto_mask: r.proto.mask,
                    };
                    let t = b.table_for(tuple, i)?;
                    let mut one = *r;
                    one.src_port = PortRange { low: sp, high: sp };
                    one.dst_port = PortRange { low: dp, high: dp };
                    b.insert(t, &one, i)?;
                    entries += 1;
                }
            }
        }
        debug_assert!(b.tables.windows(2).all(|w| w[0].best <= w[1].best));
        let c = TupleSpaceClassifier {
            tables: b.tables,
            entries,
        };
        debug_assert_eq!(c.memory_bytes(), b.bytes - b.index.memory_bytes());
        Ok(c)
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
                for &(v, len) in ps.iter() {
                    let size = 1u32 << (16 - len);
                    assert_eq!(v as u32 % size, 0, "unaligned {v}/{len}");
                    assert_eq!(v as u32, next, "gap or overlap in {low}-{high}");
                    next += size;
                    covered += size as u64;
                }
                assert_eq!(covered, (high - low) as u64 + 1);
            }
        }
        assert_eq!(*range_to_prefixes(ANY_PORT), [(0, 0)]);
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

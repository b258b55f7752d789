//! Rules inserted at any rank and removed while the classifier is in use, without a rebuild
//! (TupleMerge's point, Daly and Torng, ICCCN 2017, §I: an online classifier updates one rule
//! at a time).
//!
//! A rank orders rules (lower matches first) and an id is what a lookup answers; a classifier
//! built in order has rank = id = index. The caller keeps ranks unique and leaves gaps between
//! them where it wants to insert later.
//!
//! Insert: the rule is placed as [`TupleMergeClassifier::push`] places one, with two
//! differences. A bucket keeps rank order, so the rule is linked in at its rank, not at the
//! end; and a table whose best rank drops moves forward in the list, so lookups still meet
//! tables in the order of their best rule. What decides that a rule or a piece is left out
//! (contained by an entry) considers only entries of a lower rank. Cost O(T × (4c + 1)) for a
//! rule placed whole, plus O(T) to keep the tables' order; a split rule as in `push`.
//!
//! Remove: the rule's entries (one, or its pieces) are unlinked from their buckets and their
//! slots go on the table's free list for later inserts; a bucket left empty loses its key
//! (Knuth's deletion for linear probing, no tombstones), and a table left empty is dropped.
//! A rule removed may have contained rules or pieces left out when they were placed: every
//! rule of a higher rank with a part left out whose headers overlap the removed rule's is
//! taken out and placed again, so nothing it shadowed is lost. Cost O(T × (4c + 1)) for a
//! rule placed whole, O(900 × T) for a split one, plus one insert per such rule placed again.
//! Memory freed by a removal is kept for later inserts (capacity is what `max_bytes`
//! counts), so a classifier whose rules churn does not grow past its largest size.

use super::{natural, range_to_prefixes, Entry, LeftOut, TupleMergeClassifier};
use crate::classify::acl::{AclRule, ClassifierBuildError, Ipv4Prefix, Tuple};
use crate::classify::PortRange;

impl TupleMergeClassifier {
    /// Add `rule` at rank `rank` (below `u32::MAX`; no rule held may have it), answering
    /// `id` when it is a packet's first match. On an error the classifier is unchanged.
    pub fn insert(
        &mut self,
        rank: u32,
        id: u32,
        rule: &AclRule,
    ) -> Result<(), ClassifierBuildError> {
        self.place(rank, id, rule)?;
        self.settle_tables();
        Ok(())
    }

    /// Take out the rule of rank `rank`, which is `rule`; `Ok(false)` when no rule of that
    /// rank and shape is held. Rules it may have shadowed are placed again; if one of those no
    /// longer fits the limits, the error is returned and the classifier must be built anew
    /// (its answers are no longer those of its rules).
    pub fn remove(&mut self, rank: u32, rule: &AclRule) -> Result<bool, ClassifierBuildError> {
        if !self.detach(rank, rule) {
            return Ok(false);
        }
        self.rules -= 1;
        let from = self.left_out.partition_point(|x| x.rank <= rank);
        let again: Vec<LeftOut> = self.left_out[from..]
            .iter()
            .filter(|x| overlaps(rule, &x.rule))
            .copied()
            .collect();
        for x in again {
            self.detach(x.rank, &x.rule);
            self.rules -= 1;
            self.place(x.rank, x.id, &x.rule)?;
        }
        self.drop_empty_tables();
        self.settle_tables();
        Ok(true)
    }

    /// Unlink every entry of rank `rank` (`rule` placed whole or as pieces) and forget that
    /// it had parts left out; `false` when nothing of it is held.
    fn detach(&mut self, rank: u32, rule: &AclRule) -> bool {
        let left_out = match self.left_out.binary_search_by_key(&rank, |x| x.rank) {
            Ok(at) => self.left_out.remove(at).rank == rank,
            Err(_) => false,
        };
        let pieced = match self.pieced.binary_search(&rank) {
            Ok(at) => self.pieced.remove(at) == rank,
            Err(_) => false,
        };
        let unlinked = if pieced {
            self.unlink_pieces(rank, rule)
        } else {
            self.unlink_whole(rank, rule)
        };
        self.entries -= unlinked;
        left_out || unlinked > 0
    }

    /// Unlink the entry of a rule placed whole: it is in the bucket of its own key in a
    /// table covering its tuple.
    fn unlink_whole(&mut self, rank: u32, rule: &AclRule) -> usize {
        let nat = natural(rule);
        let e = Entry::of(rank, rule);
        for t in self.tables.iter_mut().filter(|t| t.tuple.covers(&nat)) {
            if t.unlink(t.masks.key_of(&e), rank) {
                return 1;
            }
        }
        0
    }

    /// Unlink the pieces of a split rule, each in the table of its own tuple.
    fn unlink_pieces(&mut self, rank: u32, rule: &AclRule) -> usize {
        let mut unlinked = 0;
        let dps = range_to_prefixes(rule.dst_port);
        for &sp in range_to_prefixes(rule.src_port).iter() {
            for &dp in dps.iter() {
                let piece = AclRule {
                    src_port: super::block(sp),
                    dst_port: super::block(dp),
                    ..*rule
                };
                let tuple = Tuple {
                    src: rule.src.prefix_len(),
                    dst: rule.dst.prefix_len(),
                    sp: sp.1,
                    dp: dp.1,
                    proto_mask: rule.proto.mask,
                };
                let e = Entry::of(rank, &piece);
                if let Some(t) = self.tables.iter_mut().find(|t| t.tuple == tuple) {
                    unlinked += usize::from(t.unlink(t.masks.key_of(&e), rank));
                }
            }
        }
        unlinked
    }

    /// Drop the tables a removal left without a key (their bytes are given back).
    fn drop_empty_tables(&mut self) {
        let mut freed = 0;
        self.tables.retain(|t| {
            if t.keys == 0 {
                freed += t.heap_bytes();
            }
            t.keys > 0
        });
        self.bytes -= freed;
    }

    /// Restore the order of the tables by best rank (an insertion sort: one table moved by
    /// an edit costs O(T), and nothing is allocated).
    fn settle_tables(&mut self) {
        for i in 1..self.tables.len() {
            let mut j = i;
            while j > 0 && self.tables[j - 1].best > self.tables[j].best {
                self.tables.swap(j - 1, j);
                j -= 1;
            }
        }
    }
}

/// Some header matches both `a` and `b`.
fn overlaps(a: &AclRule, b: &AclRule) -> bool {
    let prefixes = |x: &Ipv4Prefix, y: &Ipv4Prefix| {
        let len = x.prefix_len().min(y.prefix_len());
        Ipv4Prefix::truncating(x.addr(), len) == Ipv4Prefix::truncating(y.addr(), len)
    };
    let ports = |x: &PortRange, y: &PortRange| x.low <= y.high && y.low <= x.high;
    prefixes(&a.src, &b.src)
        && prefixes(&a.dst, &b.dst)
        && ports(&a.src_port, &b.src_port)
        && ports(&a.dst_port, &b.dst_port)
        && (a.proto.value ^ b.proto.value) & a.proto.mask & b.proto.mask == 0
}

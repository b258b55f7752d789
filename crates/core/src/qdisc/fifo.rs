//! FIFO with tail drop — Linux `pfifo` / `bfifo` (`net/sched/sch_fifo.c`).
//!
//! Design: one ring buffer (`VecDeque`), a packet limit and an optional byte limit; a new item
//! that would exceed either is refused (tail drop) and handed back. This is the baseline every
//! other discipline is measured against (`benches/core.rs`).
//!
//! Cost: O(1) enqueue and dequeue, no allocation once the ring has grown to the limit.
//! Memory: `queue_limit` slots of `T` at most.

use super::{ClassId, DropReason, Packet, Qdisc, QdiscStats, Verdict};
use crate::time::Instant;
use std::collections::VecDeque;

#[derive(Debug, Clone)]
pub struct Fifo<T> {
    queue: VecDeque<T>,
    queue_limit: usize,
    size_limit: u64,
    stats: QdiscStats,
}

impl<T: Packet> Fifo<T> {
    /// A FIFO holding at most `queue_limit` items and `size_limit` bytes
    /// (`u64::MAX` for no byte limit).
    pub fn new(queue_limit: usize, size_limit: u64) -> Self {
        Self {
            queue: VecDeque::with_capacity(queue_limit.min(4096)),
            queue_limit,
            size_limit,
            stats: QdiscStats::default(),
        }
    }

    /// Why `item` cannot be queued now, if it cannot.
    pub fn fifo_would_drop(&self, item: &T) -> Option<DropReason> {
        if self.queue.len() >= self.queue_limit {
            Some(DropReason::QueueFullPackets)
        } else if self.stats.queued_bytes + item.len() as u64 > self.size_limit {
            Some(DropReason::QueueFullBytes)
        } else {
            None
        }
    }

    /// Iterate queued items from head to tail (used by the ACK filter and status output).
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.queue.iter()
    }

    /// Remove the item at `index` (0 = head), counting it as evicted for `reason`.
    pub fn fifo_evict(&mut self, index: usize, reason: DropReason) -> Option<T> {
        let item = self.queue.remove(index)?;
        self.stats.on_evict(item.len(), reason);
        Some(item)
    }

    pub fn queue_limit(&self) -> usize {
        self.queue_limit
    }

    /// Take back every queued item `keep` rejects (order of the rest unchanged), counting
    /// each as evicted for [`DropReason::Withdrawn`]; O(queued).
    pub fn withdraw(&mut self, mut keep: impl FnMut(&T) -> bool) -> Vec<T> {
        let mut out = Vec::new();
        let mut kept = VecDeque::with_capacity(self.queue.len());
        for item in self.queue.drain(..) {
            if keep(&item) {
                kept.push_back(item);
            } else {
                out.push(item);
            }
        }
        self.queue = kept;
        for item in &out {
            self.stats.on_evict(item.len(), DropReason::Withdrawn);
        }
        out
    }
}

impl<T: Packet> Qdisc<T> for Fifo<T> {
    fn enqueue(&mut self, _class: ClassId, item: T, _now: Instant) -> Verdict<T> {
        if let Some(reason) = self.fifo_would_drop(&item) {
            self.stats.on_arrival_drop(reason);
            return Verdict::Dropped { item, reason };
        }
        self.stats.on_enqueue(item.len());
        self.queue.push_back(item);
        Verdict::Queued
    }

    fn dequeue(&mut self, _now: Instant) -> Option<T> {
        let item = self.queue.pop_front()?;
        self.stats.on_dequeue(item.len());
        Some(item)
    }

    fn peek(&mut self, _now: Instant) -> Option<&T> {
        self.queue.front()
    }

    fn reset(&mut self) -> Vec<T> {
        let items: Vec<T> = self.queue.drain(..).collect();
        for item in &items {
            self.stats.on_evict(item.len(), DropReason::Reset);
        }
        items
    }

    fn stats(&self) -> &QdiscStats {
        &self.stats
    }
}

/// A plain sized item for tests, benches and the replay command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TestItem {
    pub id: u64,
    pub len: u32,
}

impl Packet for TestItem {
    fn len(&self) -> u32 {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: u64, len: u32) -> TestItem {
        TestItem { id, len }
    }

    #[test]
    fn fifo_order_and_packet_limit() {
        let mut q = Fifo::new(2, u64::MAX);
        assert!(q.enqueue(0, item(1, 100), 0).is_queued());
        assert!(q.enqueue(0, item(2, 100), 0).is_queued());
        match q.enqueue(0, item(3, 100), 0) {
            Verdict::Dropped { item, reason } => {
                assert_eq!(item.id, 3);
                assert_eq!(reason, DropReason::QueueFullPackets);
            }
            v => panic!("expected tail drop, got {v:?}"),
        }
        assert_eq!(q.dequeue(0).unwrap().id, 1);
        assert_eq!(q.dequeue(0).unwrap().id, 2);
        assert!(q.dequeue(0).is_none());
        q.stats().check_identities().unwrap();
        assert_eq!(q.stats().drops_for(DropReason::QueueFullPackets), 1);
    }

    /// `bfifo` semantics: the byte limit counts queued bytes plus the new item.
    #[test]
    fn fifo_byte_limit() {
        let mut q = Fifo::new(100, 1500);
        assert!(q.enqueue(0, item(1, 1000), 0).is_queued());
        assert!(!q.enqueue(0, item(2, 600), 0).is_queued());
        assert!(q.enqueue(0, item(3, 500), 0).is_queued());
        assert_eq!(q.stats().drops_for(DropReason::QueueFullBytes), 1);
        let held = q.reset();
        assert_eq!(held.len(), 2);
        q.stats().check_identities().unwrap();
    }

    /// `withdraw` takes back exactly the rejected items, keeps the others in order, and
    /// counts them as `Withdrawn` (identities hold); nothing rejected: nothing changes.
    #[test]
    fn withdraw_takes_back_rejected_items_in_place() {
        let mut q = Fifo::new(10, u64::MAX);
        for id in 1..=6 {
            assert!(q.enqueue(0, item(id, 10), 0).is_queued());
        }
        let back: Vec<u64> = q.withdraw(|i| i.id % 3 != 0).iter().map(|i| i.id).collect();
        assert_eq!(back, vec![3, 6]);
        assert!(q.withdraw(|_| true).is_empty());
        let order: Vec<u64> = std::iter::from_fn(|| q.dequeue(0)).map(|i| i.id).collect();
        assert_eq!(order, vec![1, 2, 4, 5]);
        q.stats().check_identities().unwrap();
        assert_eq!(q.stats().drops_for(DropReason::Withdrawn), 2);
        assert_eq!(q.stats().queued_bytes, 0);
    }
}

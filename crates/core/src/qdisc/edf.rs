//! Earliest deadline first — Liu & Layland, JACM 20(1), 1973 (the deadline-driven
//! scheduling algorithm), applied to a queue: each class has a relative deadline; an item's
//! absolute deadline is its enqueue time plus its class's deadline, and the queued item with
//! the earliest absolute deadline leaves first (FIFO among equal deadlines: a sequence number
//! breaks ties).
//!
//! Optional `drop_expired`: at `dequeue`/`peek`, items whose deadline has already passed
//! (`deadline < now`) are evicted with [`DropReason::DeadlineExpired`] instead of being sent
//! late — useful when a late answer is worthless (P2's delay-constrained traffic). Evicted
//! items are kept until the engine collects them with [`Edf::take_expired`] (or
//! `AnyQdisc::take_evicted`), so none is lost; the engine should collect after each dequeue.
//!
//! Cost: O(log n) enqueue and dequeue (binary heap); each expired item is evicted once,
//! O(log n). Memory: the per-class limits, plus expired items not yet collected.

use super::prio::{check_class_count, BandConfig};
use super::{
    ClassId, ClassStatus, DropReason, Packet, Qdisc, QdiscConfigError, QdiscStats, Verdict,
};
use crate::time::{Duration, Instant};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// One EDF class: relative deadline in microseconds and its queue limits. In configuration
/// files the deadline is a duration in the units grammar, `deadline = "15ms"` (whole
/// microseconds); the older `deadline_us = 15000` is still read.
#[derive(Debug, Clone, PartialEq)]
pub struct EdfClassConfig {
    pub deadline_us: u64,
    pub queue_limit: usize,
    pub size_limit: u64,
}

/// The file form of [`EdfClassConfig`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EdfClassFile {
    deadline: Option<String>,
    deadline_us: Option<u64>,
    #[serde(
        default = "super::limits::default_queue_limit",
        alias = "limit_packets"
    )]
    queue_limit: usize,
    #[serde(
        default = "super::limits::no_size_limit",
        alias = "limit_bytes",
        deserialize_with = "crate::units::serde_size_or_bytes"
    )]
    size_limit: u64,
}

impl<'de> Deserialize<'de> for EdfClassConfig {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let f = EdfClassFile::deserialize(d)?;
        let deadline_us = match (f.deadline, f.deadline_us) {
            (Some(text), None) => {
                let ns = crate::units::parse_duration(&text)
                    .map_err(|e| D::Error::custom(format!("deadline: {e}")))?;
                if ns % 1_000 != 0 {
                    return Err(D::Error::custom(format!(
                        "deadline {text:?}: whole microseconds"
                    )));
                }
                ns / 1_000
            }
            (None, Some(us)) => us,
            (Some(_), Some(_)) => {
                return Err(D::Error::custom(
                    "deadline and deadline_us (its old spelling) both given",
                ))
            }
            (None, None) => return Err(D::Error::missing_field("deadline")),
        };
        Ok(EdfClassConfig {
            deadline_us,
            queue_limit: f.queue_limit,
            size_limit: f.size_limit,
        })
    }
}

impl Serialize for EdfClassConfig {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("EdfClassConfig", 3)?;
        let deadline = match self.deadline_us.checked_mul(1_000) {
            Some(ns) => crate::units::format_duration(ns),
            None => format!("{}us", self.deadline_us),
        };
        st.serialize_field("deadline", &deadline)?;
        st.serialize_field("queue_limit", &self.queue_limit)?;
        st.serialize_field("size_limit", &self.size_limit)?;
        st.end()
    }
}

impl EdfClassConfig {
    pub fn new(deadline_us: u64, queue_limit: usize, size_limit: u64) -> Self {
        Self {
            deadline_us,
            queue_limit,
            size_limit,
        }
    }
}

/// A queued item with its absolute deadline; ordered so the heap's max is the earliest
/// deadline, then the earliest arrival.
#[derive(Debug, Clone)]
struct EdfEntry<T> {
    deadline: Instant,
    seq: u64,
    class: ClassId,
    item: T,
}

impl<T> PartialEq for EdfEntry<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.deadline, self.seq) == (other.deadline, other.seq)
    }
}
impl<T> Eq for EdfEntry<T> {}
impl<T> PartialOrd for EdfEntry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for EdfEntry<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap.
        (other.deadline, other.seq).cmp(&(self.deadline, self.seq))
    }
}

#[derive(Debug, Clone)]
struct EdfClass {
    deadline: Duration,
    queue_limit: usize,
    size_limit: u64,
    stats: QdiscStats,
}

/// Earliest-deadline-first queue with per-class relative deadlines.
#[derive(Debug, Clone)]
pub struct Edf<T> {
    heap: BinaryHeap<EdfEntry<T>>,
    classes: Vec<EdfClass>,
    drop_expired: bool,
    /// Evicted late items waiting for [`Edf::take_expired`].
    expired: Vec<T>,
    next_seq: u64,
    stats: QdiscStats,
}

impl<T: Packet> Edf<T> {
    pub fn new(classes: &[EdfClassConfig], drop_expired: bool) -> Result<Self, QdiscConfigError> {
        check_class_count("classes", classes.len())?;
        let mut built = Vec::with_capacity(classes.len());
        for (i, c) in classes.iter().enumerate() {
            let deadline = c.deadline_us.checked_mul(1_000).ok_or_else(|| {
                QdiscConfigError::out_of_range(
                    format!("classes[{i}].deadline"),
                    c.deadline_us,
                    format!("0..={}", u64::MAX / 1_000),
                )
            })?;
            BandConfig::with_limits(c.queue_limit, c.size_limit).check(&format!("classes[{i}]"))?;
            built.push(EdfClass {
                deadline,
                queue_limit: c.queue_limit,
                size_limit: c.size_limit,
                stats: QdiscStats::default(),
            });
        }
        Ok(Self {
            heap: BinaryHeap::new(),
            classes: built,
            drop_expired,
            expired: Vec::new(),
            next_seq: 0,
            stats: QdiscStats::default(),
        })
    }

    /// Hand back the items evicted because their deadline passed (oldest deadline first).
    pub fn take_expired(&mut self) -> Vec<T> {
        std::mem::take(&mut self.expired)
    }

    /// Evicted items not yet collected.
    pub fn expired_pending(&self) -> usize {
        self.expired.len()
    }

    /// Absolute deadline of the head item, if any.
    pub fn earliest_deadline(&self) -> Option<Instant> {
        self.heap.peek().map(|e| e.deadline)
    }

    /// Evict head items already past their deadline (only with `drop_expired`).
    fn edf_evict_expired(&mut self, now: Instant) {
        if !self.drop_expired {
            return;
        }
        while self.heap.peek().is_some_and(|e| e.deadline < now) {
            let e = self.heap.pop().expect("peeked");
            let len = e.item.len();
            self.stats.on_evict(len, DropReason::DeadlineExpired);
            self.classes[e.class]
                .stats
                .on_evict(len, DropReason::DeadlineExpired);
            self.expired.push(e.item);
        }
    }

    pub fn class_status(&self) -> Vec<ClassStatus> {
        self.classes
            .iter()
            .enumerate()
            .map(|(i, c)| ClassStatus {
                class: i,
                queued_packets: c.stats.queued_packets,
                queued_bytes: c.stats.queued_bytes,
                dequeued: c.stats.dequeued,
                dropped: c.stats.dropped(),
                extra: vec![
                    ("deadline_ms".into(), c.deadline as f64 / 1e6),
                    (
                        "deadline_expired".into(),
                        c.stats.drops_for(DropReason::DeadlineExpired) as f64,
                    ),
                ],
            })
            .collect()
    }
}

impl<T: Packet> Qdisc<T> for Edf<T> {
    fn enqueue(&mut self, class: ClassId, item: T, now: Instant) -> Verdict<T> {
        let Some(c) = self.classes.get_mut(class) else {
            self.stats.on_arrival_drop(DropReason::UnknownClass);
            return Verdict::Dropped {
                item,
                reason: DropReason::UnknownClass,
            };
        };
        let len = item.len();
        let refuse = if c.stats.queued_packets as usize >= c.queue_limit {
            Some(DropReason::QueueFullPackets)
        } else if c.stats.queued_bytes + len as u64 > c.size_limit {
            Some(DropReason::QueueFullBytes)
        } else {
            None
        };
        if let Some(reason) = refuse {
            c.stats.on_arrival_drop(reason);
            self.stats.on_arrival_drop(reason);
            return Verdict::Dropped { item, reason };
        }
        c.stats.on_enqueue(len);
        self.stats.on_enqueue(len);
        let deadline = now.saturating_add(c.deadline);
        self.heap.push(EdfEntry {
            deadline,
            seq: self.next_seq,
            class,
            item,
        });
        self.next_seq += 1;
        Verdict::Queued
    }

    fn dequeue(&mut self, now: Instant) -> Option<T> {
        self.edf_evict_expired(now);
        let e = self.heap.pop()?;
        let len = e.item.len();
        self.stats.on_dequeue(len);
        self.classes[e.class].stats.on_dequeue(len);
        Some(e.item)
    }

    fn peek(&mut self, now: Instant) -> Option<&T> {
        self.edf_evict_expired(now);
        self.heap.peek().map(|e| &e.item)
    }

    fn reset(&mut self) -> Vec<T> {
        let entries = std::mem::take(&mut self.heap).into_sorted_vec();
        // into_sorted_vec is ascending by Ord, i.e. latest deadline first: reverse it.
        let mut out = Vec::with_capacity(entries.len());
        for e in entries.into_iter().rev() {
            let len = e.item.len();
            self.stats.on_evict(len, DropReason::Reset);
            self.classes[e.class].stats.on_evict(len, DropReason::Reset);
            out.push(e.item);
        }
        out
    }

    fn stats(&self) -> &QdiscStats {
        &self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::super::fifo::TestItem;
    use super::*;
    use crate::MS;

    fn item(id: u64, len: u32) -> TestItem {
        TestItem { id, len }
    }

    /// Class 0: 10 ms, class 1: 50 ms.
    fn two_classes(drop_expired: bool) -> Edf<TestItem> {
        Edf::new(
            &[
                EdfClassConfig::new(10_000, 100, u64::MAX),
                EdfClassConfig::new(50_000, 3, u64::MAX),
            ],
            drop_expired,
        )
        .unwrap()
    }

    /// Worked example: a (class 1, t=0, deadline 50 ms), b (class 0, t=20 ms, deadline
    /// 30 ms), c (class 0, t=45 ms, deadline 55 ms), d (class 1, t=0, deadline 50 ms).
    /// EDF order: b (30), a (50), d (50, after a: FIFO among equals), c (55).
    #[test]
    fn edf_orders_by_absolute_deadline_fifo_on_ties() {
        let mut q = two_classes(false);
        assert!(q.enqueue(1, item(1, 100), 0).is_queued());
        assert!(q.enqueue(1, item(4, 100), 0).is_queued());
        assert!(q.enqueue(0, item(2, 100), 20 * MS).is_queued());
        assert!(q.enqueue(0, item(3, 100), 45 * MS).is_queued());
        assert_eq!(q.earliest_deadline(), Some(30 * MS));
        let order: Vec<u64> = std::iter::from_fn(|| q.dequeue(100 * MS))
            .map(|i| i.id)
            .collect();
        // Without drop_expired late items are still sent, in deadline order.
        assert_eq!(order, vec![2, 1, 4, 3]);
        q.stats().check_identities().unwrap();
    }

    #[test]
    fn edf_drop_expired_hands_late_items_back() {
        let mut q = two_classes(true);
        assert!(q.enqueue(0, item(1, 100), 0).is_queued()); // deadline 10 ms
        assert!(q.enqueue(1, item(2, 100), 0).is_queued()); // deadline 50 ms
        assert!(q.enqueue(0, item(3, 100), 5 * MS).is_queued()); // deadline 15 ms
                                                                 // At exactly the deadline the item is still on time.
        assert_eq!(q.peek(10 * MS).unwrap().id, 1);
        // At 16 ms items 1 and 3 are late.
        assert_eq!(q.dequeue(16 * MS).unwrap().id, 2);
        let late: Vec<u64> = q.take_expired().into_iter().map(|i| i.id).collect();
        assert_eq!(late, vec![1, 3]);
        assert_eq!(q.stats().drops_for(DropReason::DeadlineExpired), 2);
        assert_eq!(q.class_status()[0].dropped, 2);
        assert!(q.take_expired().is_empty());
        q.stats().check_identities().unwrap();
    }

    #[test]
    fn edf_per_class_limits_and_errors() {
        let mut q = two_classes(false);
        for id in 0..3 {
            assert!(q.enqueue(1, item(id, 10), 0).is_queued());
        }
        assert!(matches!(
            q.enqueue(1, item(9, 10), 0),
            Verdict::Dropped {
                reason: DropReason::QueueFullPackets,
                ..
            }
        ));
        assert!(q.enqueue(0, item(10, 10), 0).is_queued());
        assert!(!q.enqueue(2, item(11, 10), 0).is_queued());
        let rest: Vec<u64> = q.reset().into_iter().map(|i| i.id).collect();
        assert_eq!(rest, vec![10, 0, 1, 2]);
        q.stats().check_identities().unwrap();
        let e = Edf::<TestItem>::new(&[EdfClassConfig::new(u64::MAX, 1, 1)], false).unwrap_err();
        assert!(
            matches!(&e, QdiscConfigError::OutOfRange { field, .. } if field == "classes[0].deadline"),
            "{e:?}"
        );
    }
}

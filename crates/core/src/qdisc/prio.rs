//! Strict priority: N bands, band 0 always served first — Linux `sch_prio.c` (`prio_dequeue`
//! scans bands from 0 and returns the first packet found); each band is a tail-drop
//! [`Fifo`] with its own packet and byte limits.
//!
//! When to use: a small class must never wait behind a bulk class (P3's ACK class, control
//! traffic). Lower bands can starve while higher ones are backlogged — that is the contract.
//!
//! This file also holds the band functions that the other multi-class disciplines reuse (a class =
//! a `Fifo` child + the parent's aggregate [`QdiscStats`]), and [`BandConfig`].
//!
//! Cost: enqueue O(1); dequeue and peek O(bands) (a scan from band 0, as `prio_dequeue`).
//! Memory: the sum of the band limits.

use super::fifo::Fifo;
use super::{
    ClassId, ClassStatus, DropReason, Packet, Qdisc, QdiscConfigError, QdiscStats, Verdict,
};
use crate::time::Instant;
use serde::{Deserialize, Serialize};

/// Limits of one band/class queue (`queue_limit` default 1000, `size_limit` default none).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BandConfig {
    #[serde(
        default = "super::limits::default_queue_limit",
        alias = "limit_packets"
    )]
    pub queue_limit: usize,
    #[serde(
        default = "super::limits::no_size_limit",
        alias = "limit_bytes",
        deserialize_with = "crate::units::serde_size_or_bytes"
    )]
    pub size_limit: u64,
}

impl Default for BandConfig {
    fn default() -> Self {
        Self {
            queue_limit: super::limits::DEFAULT_QUEUE_LIMIT,
            size_limit: super::limits::NO_SIZE_LIMIT,
        }
    }
}

impl BandConfig {
    pub fn with_limits(queue_limit: usize, size_limit: u64) -> Self {
        Self {
            queue_limit,
            size_limit,
        }
    }
    /// `path` names the band in errors, e.g. `bands[2]`.
    pub fn check(&self, path: &str) -> Result<(), QdiscConfigError> {
        if self.queue_limit == 0 {
            return Err(QdiscConfigError::too_small(
                format!("{path}.queue_limit"),
                1,
            ));
        }
        if self.size_limit == 0 {
            return Err(QdiscConfigError::too_small(format!("{path}.size_limit"), 1));
        }
        Ok(())
    }
    pub(super) fn fifo<T: Packet>(&self) -> Fifo<T> {
        Fifo::new(self.queue_limit, self.size_limit)
    }
}

/// Check a class list: not empty, at most `MAX_CLASSES`.
pub(super) fn check_class_count(field: &str, n: usize) -> Result<(), QdiscConfigError> {
    if n == 0 {
        return Err(QdiscConfigError::NoClasses {
            field: field.into(),
        });
    }
    if n > MAX_CLASSES {
        return Err(QdiscConfigError::TooManyClasses {
            field: field.into(),
            count: n,
            max: MAX_CLASSES,
        });
    }
    Ok(())
}

/// Upper bound on classes per discipline (status tables and O(classes) scans stay small).
pub const MAX_CLASSES: usize = 1024;

/// Refuse an item whose class does not exist.
pub(super) fn drop_unknown_class<T>(total: &mut QdiscStats, item: T) -> Verdict<T> {
    total.on_arrival_drop(DropReason::UnknownClass);
    Verdict::Dropped {
        item,
        reason: DropReason::UnknownClass,
    }
}

/// Enqueue into a band, mirroring the outcome in the parent's stats.
pub(super) fn band_enqueue<T: Packet>(
    band: &mut Fifo<T>,
    total: &mut QdiscStats,
    item: T,
    now: Instant,
) -> Verdict<T> {
    let len = item.len();
    let verdict = band.enqueue(0, item, now);
    match &verdict {
        Verdict::Queued => total.on_enqueue(len),
        Verdict::Dropped { reason, .. } => total.on_arrival_drop(*reason),
        Verdict::QueuedEvicting { evicted, reason } => {
            total.on_enqueue(len);
            total.on_evict(evicted.len(), *reason);
        }
    }
    verdict
}

/// Dequeue the head of a band, mirroring it in the parent's stats.
pub(super) fn band_dequeue<T: Packet>(
    band: &mut Fifo<T>,
    total: &mut QdiscStats,
    now: Instant,
) -> Option<T> {
    let item = band.dequeue(now)?;
    total.on_dequeue(item.len());
    Some(item)
}

/// Empty every band (class order, head first), counting each item as `Reset`.
pub(super) fn bands_reset<'a, T: Packet + 'a>(
    bands: impl Iterator<Item = &'a mut Fifo<T>>,
    total: &mut QdiscStats,
) -> Vec<T> {
    let mut out = Vec::new();
    for band in bands {
        for item in band.reset() {
            total.on_evict(item.len(), DropReason::Reset);
            out.push(item);
        }
    }
    out
}

/// Status of one band from its own counters.
pub(super) fn band_status<T: Packet>(class: ClassId, band: &Fifo<T>) -> ClassStatus {
    let s = band.stats();
    ClassStatus {
        class,
        queued_packets: s.queued_packets,
        queued_bytes: s.queued_bytes,
        dequeued: s.dequeued,
        dropped: s.dropped(),
        extra: Vec::new(),
    }
}

/// Strict priority over `Fifo` bands; band 0 is the most important.
#[derive(Debug, Clone)]
pub struct StrictPriority<T> {
    bands: Vec<Fifo<T>>,
    stats: QdiscStats,
}

impl<T: Packet> StrictPriority<T> {
    /// One band per entry of `bands`, in priority order (index 0 first).
    pub fn new(bands: &[BandConfig]) -> Result<Self, QdiscConfigError> {
        check_class_count("bands", bands.len())?;
        for (i, b) in bands.iter().enumerate() {
            b.check(&format!("bands[{i}]"))?;
        }
        Ok(Self {
            bands: bands.iter().map(BandConfig::fifo).collect(),
            stats: QdiscStats::default(),
        })
    }

    /// The first non-empty band (the one `prio_dequeue` would serve).
    fn prio_first_backlogged(&self) -> Option<ClassId> {
        self.bands.iter().position(|b| !b.is_empty())
    }

    pub fn class_status(&self) -> Vec<ClassStatus> {
        self.bands
            .iter()
            .enumerate()
            .map(|(i, b)| band_status(i, b))
            .collect()
    }

    pub fn band_count(&self) -> usize {
        self.bands.len()
    }

    /// Take back every queued item `keep` rejects, band by band (see [`Fifo::withdraw`]),
    /// counted as [`DropReason::Withdrawn`] in the band and the total.
    pub fn withdraw(&mut self, mut keep: impl FnMut(&T) -> bool) -> Vec<T> {
        let mut out = Vec::new();
        for band in &mut self.bands {
            for item in band.withdraw(&mut keep) {
                self.stats.on_evict(item.len(), DropReason::Withdrawn);
                out.push(item);
            }
        }
        out
    }
}

impl<T: Packet> Qdisc<T> for StrictPriority<T> {
    fn enqueue(&mut self, class: ClassId, item: T, now: Instant) -> Verdict<T> {
        match self.bands.get_mut(class) {
            Some(band) => band_enqueue(band, &mut self.stats, item, now),
            None => drop_unknown_class(&mut self.stats, item),
        }
    }

    fn dequeue(&mut self, now: Instant) -> Option<T> {
        let band = self.prio_first_backlogged()?;
        band_dequeue(&mut self.bands[band], &mut self.stats, now)
    }

    fn peek(&mut self, now: Instant) -> Option<&T> {
        let band = self.prio_first_backlogged()?;
        self.bands[band].peek(now)
    }

    fn reset(&mut self) -> Vec<T> {
        bands_reset(self.bands.iter_mut(), &mut self.stats)
    }

    fn stats(&self) -> &QdiscStats {
        &self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::super::fifo::TestItem;
    use super::*;

    fn item(id: u64, len: u32) -> TestItem {
        TestItem { id, len }
    }

    fn three_bands() -> StrictPriority<TestItem> {
        StrictPriority::new(&[
            BandConfig::with_limits(2, u64::MAX),
            BandConfig::with_limits(10, 3000),
            BandConfig::default(),
        ])
        .unwrap()
    }

    /// `prio_dequeue` (net/sched/sch_prio.c): band 0 drains before band 1 is looked at.
    #[test]
    fn prio_serves_band_zero_first_fifo_within_band() {
        let mut q = three_bands();
        for (id, class) in [(1, 2), (2, 1), (3, 0), (4, 1), (5, 0)] {
            assert!(q.enqueue(class, item(id, 100), 0).is_queued());
        }
        assert_eq!(q.peek(0).unwrap().id, 3);
        let order: Vec<u64> = std::iter::from_fn(|| q.dequeue(0)).map(|i| i.id).collect();
        assert_eq!(order, vec![3, 5, 2, 4, 1]);
        q.stats().check_identities().unwrap();
    }

    #[test]
    fn prio_per_band_limits_and_unknown_class() {
        let mut q = three_bands();
        assert!(q.enqueue(0, item(1, 100), 0).is_queued());
        assert!(q.enqueue(0, item(2, 100), 0).is_queued());
        assert!(matches!(
            q.enqueue(0, item(3, 100), 0),
            Verdict::Dropped {
                reason: DropReason::QueueFullPackets,
                ..
            }
        ));
        // Band 1: 3000 bytes.
        assert!(q.enqueue(1, item(4, 2000), 0).is_queued());
        assert!(matches!(
            q.enqueue(1, item(5, 1001), 0),
            Verdict::Dropped {
                reason: DropReason::QueueFullBytes,
                ..
            }
        ));
        match q.enqueue(7, item(6, 1), 0) {
            Verdict::Dropped { item, reason } => {
                assert_eq!((item.id, reason), (6, DropReason::UnknownClass))
            }
            v => panic!("expected unknown class drop, got {v:?}"),
        }
        let st = q.class_status();
        assert_eq!(st[0].queued_packets, 2);
        assert_eq!(st[0].dropped, 1);
        assert_eq!(st[1].queued_bytes, 2000);
        assert_eq!(q.stats().dropped_on_arrival(), 3);
        assert_eq!(q.reset().len(), 3);
        q.stats().check_identities().unwrap();
        assert_eq!(q.stats().drops_for(DropReason::Reset), 3);
    }

    #[test]
    fn prio_config_errors_name_the_field() {
        let e = StrictPriority::<TestItem>::new(&[]).unwrap_err();
        assert_eq!(
            e,
            QdiscConfigError::NoClasses {
                field: "bands".into()
            }
        );
        let e = StrictPriority::<TestItem>::new(&[
            BandConfig::default(),
            BandConfig::with_limits(0, 1),
        ])
        .unwrap_err();
        assert_eq!(e, QdiscConfigError::too_small("bands[1].queue_limit", 1));
    }

    /// Withdrawn items leave their band wherever they are, the rest keep their order, and
    /// band and total both count them as `Withdrawn` (identities hold).
    #[test]
    fn prio_withdraw_takes_items_back_from_any_band() {
        let mut q = three_bands();
        for (id, class) in [(1, 2), (2, 1), (3, 0), (4, 1), (5, 0)] {
            assert!(q.enqueue(class, item(id, 100), 0).is_queued());
        }
        let back: Vec<u64> = q.withdraw(|i| i.id % 2 == 0).iter().map(|i| i.id).collect();
        assert_eq!(back, vec![3, 5, 1], "band order, head first");
        let order: Vec<u64> = std::iter::from_fn(|| q.dequeue(0)).map(|i| i.id).collect();
        assert_eq!(order, vec![2, 4]);
        q.stats().check_identities().unwrap();
        assert_eq!(q.stats().drops_for(DropReason::Withdrawn), 3);
        assert_eq!(q.class_status()[0].dropped, 2);
    }
}

//! ACK separation — paper 003 (P3, SNU 2005), §3.4 (cause) and §4.1 (fix): on an asymmetric
//! link (ADSL 800 kbit/s up, 2.1 Mbit/s down) the uplink FIFO holds both the upload's data
//! and the download's ACKs; up to 88 data + 88 ACKs compete for 100 slots and the upload
//! collapses to ≈ 250 kbit/s. The fix: pure TCP ACKs go to their own FIFO (class 0) served
//! with strict priority; everything else is class 1. The class comes from a classifier
//! (`classify::PureAckClassifier`).
//!
//! Beyond the paper, two options:
//! - **ACK filter** (RFC 3449 §5.2.1 "ACK filtering"): when a pure ACK is queued, the newest
//!   queued ACK of the same flow is evicted ([`DropReason::AckFiltered`], handed back in
//!   [`Verdict::QueuedEvicting`]) if the new one supersedes it: both pure and without SACK or
//!   other options (timestamps/NOP are fine), same advertised window (else it is a window
//!   update), and a strictly newer cumulative ack in serial-number arithmetic (RFC 1982 §3.2,
//!   TCP's `SEQ_GT`). Duplicate ACKs (same ack number, they signal loss to the sender, RFC
//!   5681 §3.2) are never filtered, nor is a queued ACK that has a duplicate queued with it.
//! - **ACK share cap** (`ack_share_max`): while both classes are backlogged, ACK bytes sent
//!   stay ≤ share × all bytes sent (+ one ACK), so heavy asymmetry cannot starve the data
//!   class. O(1): a byte credit, +share per data byte sent, −(1−share) per ACK byte sent (in
//!   millionths); an ACK is served while the credit is ≥ 0. The credit resets whenever
//!   either class is empty, so idle time earns nothing.
//!
//! Cost: O(1) enqueue/dequeue; with the filter on, a pure-ACK enqueue scans the ACK queue
//! (O(ACK queue length), at most its limit). Memory: the two queue limits.

use super::fifo::Fifo;
use super::prio::{
    band_dequeue, band_enqueue, band_status, bands_reset, drop_unknown_class, BandConfig,
};
use super::{
    ClassId, ClassStatus, DropReason, Packet, Qdisc, QdiscConfigError, QdiscStats, Verdict,
};
use crate::time::Instant;

/// Class of pure TCP ACKs.
pub const ACK_CLASS: ClassId = 0;
/// Class of everything else.
pub const OTHER_CLASS: ClassId = 1;

const PPM: i64 = 1_000_000;

/// P3 §4.2: two FIFO children of 100 packets each.
pub fn default_separation_band() -> BandConfig {
    BandConfig::with_limits(100, u64::MAX)
}

/// Two-class ACK-prioritising queue (P3) with optional ACK filter and ACK share cap.
#[derive(Debug, Clone)]
pub struct AckSeparation<T> {
    /// `[ACK_CLASS, OTHER_CLASS]` (boxed: keeps `AnyQdisc` variants similar in size).
    queues: Box<[Fifo<T>; 2]>,
    ack_filter: bool,
    /// Byte limit of the ACK queue (to check an ACK fits once its predecessor is filtered).
    ack_size_limit: u64,
    /// ACK share cap in millionths (None: strict priority).
    ack_share_ppm: Option<i64>,
    /// Byte credit of the ACK class, in byte·millionths (see header).
    ack_credit: i64,
    stats: QdiscStats,
}

impl<T: Packet> AckSeparation<T> {
    pub fn new(
        ack: &BandConfig,
        other: &BandConfig,
        ack_filter: bool,
        ack_share_max: Option<f64>,
    ) -> Result<Self, QdiscConfigError> {
        ack.check("ack")?;
        other.check("other")?;
        let ack_share_ppm = match ack_share_max {
            None => None,
            Some(s) if s.is_finite() && s > 0.0 && s <= 1.0 => {
                let ppm = (s * PPM as f64).round() as i64;
                if ppm == 0 {
                    return Err(QdiscConfigError::out_of_range(
                        "ack_share_max",
                        s,
                        "[1e-6, 1] (resolution 1e-6)",
                    ));
                }
                Some(ppm)
            }
            Some(s) => return Err(QdiscConfigError::out_of_range("ack_share_max", s, "(0, 1]")),
        };
        Ok(Self {
            queues: Box::new([ack.fifo(), other.fifo()]),
            ack_filter,
            ack_size_limit: ack.size_limit,
            ack_share_ppm,
            ack_credit: 0,
            stats: QdiscStats::default(),
        })
    }

    /// P3 as published: two 100-packet FIFOs, ACKs strictly first, no filter, no cap.
    pub fn p3() -> Self {
        Self::new(
            &default_separation_band(),
            &default_separation_band(),
            false,
            None,
        )
        .expect("valid constants")
    }

    /// Index in the ACK queue of a queued ACK that `item` supersedes, if any.
    fn ack_filter_victim(&self, item: &T) -> Option<usize> {
        let new = item.ack_info()?;
        if !new.pure || new.has_sack_or_other_options {
            return None;
        }
        // The newest queued ACK of this flow.
        let (index, old) = self.queues[ACK_CLASS]
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.ack_info().map(|a| (i, a)))
            .filter(|(_, a)| a.flow == new.flow)
            .last()?;
        let supersedes = old.pure
            && !old.has_sack_or_other_options
            && old.window == new.window
            && (new.ack.wrapping_sub(old.ack) as i32) > 0;
        if !supersedes {
            return None;
        }
        // Part of a duplicate-ACK series still in the queue: keep it (it signals loss).
        let twins = self.queues[ACK_CLASS]
            .iter()
            .filter_map(|p| p.ack_info())
            .filter(|a| a.flow == new.flow && a.ack == old.ack)
            .count();
        (twins == 1).then_some(index)
    }

    /// Which class `dequeue` serves now.
    fn ack_select(&self) -> Option<ClassId> {
        let acks = !self.queues[ACK_CLASS].is_empty();
        let others = !self.queues[OTHER_CLASS].is_empty();
        match (acks, others) {
            (false, false) => None,
            (true, false) => Some(ACK_CLASS),
            (false, true) => Some(OTHER_CLASS),
            (true, true) => match self.ack_share_ppm {
                Some(_) if self.ack_credit < 0 => Some(OTHER_CLASS),
                _ => Some(ACK_CLASS),
            },
        }
    }

    pub fn class_status(&self) -> Vec<ClassStatus> {
        let mut out: Vec<ClassStatus> = self
            .queues
            .iter()
            .enumerate()
            .map(|(i, q)| band_status(i, q))
            .collect();
        out[ACK_CLASS].extra = vec![(
            "ack_filtered".into(),
            self.queues[ACK_CLASS]
                .stats()
                .drops_for(DropReason::AckFiltered) as f64,
        )];
        out
    }
}

impl<T: Packet> Qdisc<T> for AckSeparation<T> {
    fn enqueue(&mut self, class: ClassId, item: T, now: Instant) -> Verdict<T> {
        if class > OTHER_CLASS {
            return drop_unknown_class(&mut self.stats, item);
        }
        if class == ACK_CLASS && self.ack_filter {
            if let Some(victim) = self.ack_filter_victim(&item) {
                let q = &self.queues[ACK_CLASS];
                let old_len = q.iter().nth(victim).map_or(0, |p| p.len()) as u64;
                // Evict only if the new ACK then fits (the packet count cannot grow: one out,
                // one in); otherwise the new ACK is refused as usual and nothing is filtered.
                if q.stats().queued_bytes - old_len + item.len() as u64 <= self.ack_size_limit {
                    let q = &mut self.queues[ACK_CLASS];
                    if let Some(evicted) = q.fifo_evict(victim, DropReason::AckFiltered) {
                        self.stats.on_evict(evicted.len(), DropReason::AckFiltered);
                        match band_enqueue(q, &mut self.stats, item, now) {
                            Verdict::Queued => {
                                return Verdict::QueuedEvicting {
                                    evicted,
                                    reason: DropReason::AckFiltered,
                                }
                            }
                            _ => unreachable!("room for the new ACK was checked before evicting"),
                        }
                    }
                }
            }
        }
        band_enqueue(&mut self.queues[class], &mut self.stats, item, now)
    }

    fn dequeue(&mut self, now: Instant) -> Option<T> {
        let class = self.ack_select()?;
        let both_backlogged = self.queues.iter().all(|q| !q.is_empty());
        let item = band_dequeue(&mut self.queues[class], &mut self.stats, now)?;
        match self.ack_share_ppm {
            Some(share) if both_backlogged => {
                let bytes = item.len() as i64;
                if class == ACK_CLASS {
                    self.ack_credit -= bytes * (PPM - share);
                } else {
                    self.ack_credit += bytes * share;
                }
            }
            _ => self.ack_credit = 0,
        }
        Some(item)
    }

    fn peek(&mut self, now: Instant) -> Option<&T> {
        let class = self.ack_select()?;
        self.queues[class].peek(now)
    }

    fn reset(&mut self) -> Vec<T> {
        self.ack_credit = 0;
        bands_reset(self.queues.iter_mut(), &mut self.stats)
    }

    fn stats(&self) -> &QdiscStats {
        &self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::super::fifo::Fifo;
    use super::*;
    use crate::wire::AckInfo;
    use crate::SEC;

    /// A segment with optional ACK facts.
    #[derive(Debug, Clone, PartialEq)]
    struct Seg {
        id: u64,
        len: u32,
        ack: Option<AckInfo>,
    }
    impl Packet for Seg {
        fn len(&self) -> u32 {
            self.len
        }
        fn ack_info(&self) -> Option<AckInfo> {
            self.ack
        }
    }

    /// P3: a pure ACK on the wire is 66 bytes (the paper's figure, Ethernet + IP + TCP + ts).
    const ACK_BYTES: u32 = 66;

    fn pure_ack(id: u64, flow: u64, ack: u32, window: u32) -> Seg {
        Seg {
            id,
            len: ACK_BYTES,
            ack: Some(AckInfo {
                flow,
                ack,
                pure: true,
                has_sack_or_other_options: false,
                window,
            }),
        }
    }

    fn data(id: u64) -> Seg {
        Seg {
            id,
            len: 1500,
            ack: None,
        }
    }

    /// Serialisation time of `bytes` at `bits_per_sec`, in ns.
    fn tx_ns(bytes: u32, bits_per_sec: u64) -> u64 {
        bytes as u64 * 8 * SEC / bits_per_sec
    }

    /// P3 §4.1 worst case: 88 ACKs (a full 88-packet download window) queued when an upload data
    /// packet arrives; strict priority sends them all first, so the data waits
    /// 88 × 66 B / 800 kbit/s = 58.08 ms (the paper's "58 ms").
    #[test]
    fn ack_separation_worst_case_data_waits_58ms_behind_88_acks() {
        let mut q: AckSeparation<Seg> = AckSeparation::p3();
        assert!(q.enqueue(OTHER_CLASS, data(0), 0).is_queued());
        for i in 1..=88 {
            assert!(q.enqueue(ACK_CLASS, pure_ack(i, i, 1, 100), 0).is_queued());
        }
        let mut now = 0;
        let mut data_start = None;
        while let Some(seg) = q.dequeue(now) {
            if seg.id == 0 {
                data_start = Some(now);
            }
            now += tx_ns(seg.len, 800_000);
        }
        assert_eq!(data_start, Some(58_080_000));
        q.stats().check_identities().unwrap();
    }

    /// With the ACK filter, the same 88 ACKs of one download flow (cumulative, increasing)
    /// collapse to the newest one: the data packet waits one ACK, 66 B at 800 kbit/s =
    /// 0.66 ms instead of 58.08 ms, and 87 ACKs are handed back as `ack_filtered`.
    #[test]
    fn ack_filter_cuts_the_adsl_worst_case_to_one_ack() {
        let mut q: AckSeparation<Seg> = AckSeparation::new(
            &default_separation_band(),
            &default_separation_band(),
            true,
            None,
        )
        .unwrap();
        assert!(q.enqueue(OTHER_CLASS, data(0), 0).is_queued());
        let mut handed_back = 0;
        for i in 1..=88u64 {
            // One 1448-byte segment acknowledged per ACK.
            let ack = pure_ack(i, 42, 1448 * i as u32, 100);
            if let Verdict::QueuedEvicting { evicted, .. } = q.enqueue(ACK_CLASS, ack, 0) {
                assert_eq!(evicted.id, i - 1);
                handed_back += 1;
            }
        }
        assert_eq!(handed_back, 87);
        let mut now = 0;
        let mut data_start = None;
        while let Some(seg) = q.dequeue(now) {
            if seg.id == 0 {
                data_start = Some(now);
            }
            now += tx_ns(seg.len, 800_000);
        }
        assert_eq!(data_start, Some(660_000));
        q.stats().check_identities().unwrap();
    }

    /// P3 §3.4: with one 100-packet FIFO, 88 data + 88 ACKs arriving together lose 76
    /// packets (half of them upload data, which collapses the upload's window); with the two
    /// 100-packet FIFOs of the fix nothing is lost.
    #[test]
    fn ack_separation_loses_nothing_where_fifo100_drops_data() {
        let mut fifo: Fifo<Seg> = Fifo::new(100, u64::MAX);
        let mut sep: AckSeparation<Seg> = AckSeparation::p3();
        let (mut fifo_data_drops, mut sep_drops) = (0, 0);
        for i in 0..88u64 {
            if !fifo.enqueue(0, data(2 * i), 0).is_queued() {
                fifo_data_drops += 1;
            }
            let _ = fifo.enqueue(0, pure_ack(2 * i + 1, i, 1, 100), 0);
            for (class, seg) in [
                (OTHER_CLASS, data(2 * i)),
                (ACK_CLASS, pure_ack(2 * i + 1, i, 1, 100)),
            ] {
                if !sep.enqueue(class, seg, 0).is_queued() {
                    sep_drops += 1;
                }
            }
        }
        assert_eq!(fifo.stats().dropped(), 76);
        assert_eq!(fifo_data_drops, 38);
        assert_eq!(sep_drops, 0);
        assert_eq!(sep.len(), 176);
    }

    /// RFC 3449 §5.2.1: a newer cumulative ACK of the same flow makes the queued one redundant.
    #[test]
    fn ack_filter_keeps_only_the_newest_cumulative_ack() {
        let mut q: AckSeparation<Seg> = AckSeparation::new(
            &default_separation_band(),
            &default_separation_band(),
            true,
            None,
        )
        .unwrap();
        assert_eq!(
            q.enqueue(ACK_CLASS, pure_ack(0, 7, 1000, 50), 0),
            Verdict::Queued
        );
        for i in 1..10u64 {
            match q.enqueue(ACK_CLASS, pure_ack(i, 7, 1000 + 100 * i as u32, 50), 0) {
                Verdict::QueuedEvicting { evicted, reason } => {
                    assert_eq!((evicted.id, reason), (i - 1, DropReason::AckFiltered));
                }
                v => panic!("ack {i}: expected eviction, got {v:?}"),
            }
        }
        // Another flow is untouched.
        assert_eq!(
            q.enqueue(ACK_CLASS, pure_ack(20, 8, 5000, 50), 0),
            Verdict::Queued
        );
        assert_eq!(q.len(), 2);
        assert_eq!(q.stats().drops_for(DropReason::AckFiltered), 9);
        assert_eq!(q.class_status()[ACK_CLASS].extra[0].1, 9.0);
        assert_eq!(q.dequeue(0).unwrap().id, 9);
        q.stats().check_identities().unwrap();
    }

    #[test]
    fn ack_filter_spares_dup_acks_sack_window_updates_and_older_acks() {
        let mut q: AckSeparation<Seg> = AckSeparation::new(
            &default_separation_band(),
            &default_separation_band(),
            true,
            None,
        )
        .unwrap();
        // Three duplicate ACKs (fast-retransmit signal, RFC 5681 §3.2), then a newer ACK.
        for id in 0..3 {
            assert_eq!(
                q.enqueue(ACK_CLASS, pure_ack(id, 1, 500, 50), 0),
                Verdict::Queued
            );
        }
        assert_eq!(
            q.enqueue(ACK_CLASS, pure_ack(3, 1, 600, 50), 0),
            Verdict::Queued
        );
        // Window update: same flow, newer ack but different window.
        assert_eq!(
            q.enqueue(ACK_CLASS, pure_ack(4, 1, 700, 80), 0),
            Verdict::Queued
        );
        // SACK-carrying ACK neither filters nor is filtered.
        let mut sack = pure_ack(5, 1, 800, 80);
        sack.ack.as_mut().unwrap().has_sack_or_other_options = true;
        assert_eq!(q.enqueue(ACK_CLASS, sack, 0), Verdict::Queued);
        assert_eq!(
            q.enqueue(ACK_CLASS, pure_ack(6, 1, 900, 80), 0),
            Verdict::Queued
        );
        // An older (reordered) ACK does not evict a newer one.
        assert_eq!(
            q.enqueue(ACK_CLASS, pure_ack(7, 1, 850, 80), 0),
            Verdict::Queued
        );
        assert_eq!(q.stats().drops_for(DropReason::AckFiltered), 0);
        assert_eq!(q.len(), 8);
    }

    /// Serial-number arithmetic (RFC 1982): 0x10 is newer than 0xFFFF_FF00 across the wrap.
    #[test]
    fn ack_filter_handles_sequence_wraparound() {
        let mut q: AckSeparation<Seg> = AckSeparation::new(
            &default_separation_band(),
            &default_separation_band(),
            true,
            None,
        )
        .unwrap();
        assert_eq!(
            q.enqueue(ACK_CLASS, pure_ack(0, 1, 0xFFFF_FF00, 9), 0),
            Verdict::Queued
        );
        assert!(matches!(
            q.enqueue(ACK_CLASS, pure_ack(1, 1, 0x10, 9), 0),
            Verdict::QueuedEvicting { .. }
        ));
        assert_eq!(
            q.enqueue(ACK_CLASS, pure_ack(2, 1, 0xFFFF_FF80, 9), 0),
            Verdict::Queued
        );
    }

    /// A filter eviction makes room: a full ACK queue still accepts a superseding ACK.
    #[test]
    fn ack_filter_works_on_a_full_queue() {
        let band = BandConfig::with_limits(2, u64::MAX);
        let mut q: AckSeparation<Seg> = AckSeparation::new(&band, &band, true, None).unwrap();
        assert!(q.enqueue(ACK_CLASS, pure_ack(0, 1, 10, 9), 0).is_queued());
        assert!(q.enqueue(ACK_CLASS, pure_ack(1, 2, 10, 9), 0).is_queued());
        assert!(matches!(
            q.enqueue(ACK_CLASS, pure_ack(2, 2, 20, 9), 0),
            Verdict::QueuedEvicting { .. }
        ));
        assert!(matches!(
            q.enqueue(ACK_CLASS, pure_ack(3, 3, 20, 9), 0),
            Verdict::Dropped {
                reason: DropReason::QueueFullPackets,
                ..
            }
        ));
        q.stats().check_identities().unwrap();
    }

    /// The cap: with `ack_share_max = 0.5` and both classes backlogged, ACK bytes stay within
    /// half of the bytes sent (plus one ACK); without it ACKs take everything first.
    #[test]
    fn ack_share_cap_is_enforced_while_both_backlogged() {
        let fill = |q: &mut AckSeparation<Seg>| {
            for i in 0..2000u64 {
                assert!(q.enqueue(ACK_CLASS, pure_ack(i, i, 1, 1), 0).is_queued());
            }
            for i in 0..100u64 {
                assert!(q.enqueue(OTHER_CLASS, data(10_000 + i), 0).is_queued());
            }
        };
        let big = BandConfig::with_limits(5000, u64::MAX);
        for share in [0.5, 0.2] {
            let mut q = AckSeparation::new(&big, &big, false, Some(share)).unwrap();
            fill(&mut q);
            let (mut ack_bytes, mut all_bytes) = (0u64, 0u64);
            while q.class_status().iter().all(|c| c.queued_packets > 0) {
                let seg = q.dequeue(0).unwrap();
                all_bytes += seg.len as u64;
                if seg.id < 10_000 {
                    ack_bytes += seg.len as u64;
                }
                assert!(
                    ack_bytes as f64 <= share * all_bytes as f64 + ACK_BYTES as f64,
                    "share {share}: {ack_bytes} of {all_bytes}"
                );
            }
            let got = ack_bytes as f64 / all_bytes as f64;
            assert!(
                got > share - 0.02,
                "share {share}: cap should be used, got {got}"
            );
            q.stats().check_identities().unwrap();
        }
        let mut strict = AckSeparation::new(&big, &big, false, None).unwrap();
        fill(&mut strict);
        for _ in 0..2000 {
            assert!(strict.dequeue(0).unwrap().id < 10_000);
        }
    }

    #[test]
    fn ack_config_errors_name_the_field() {
        for bad in [0.0, 1.5, f64::NAN, -0.1] {
            let e = AckSeparation::<Seg>::new(
                &default_separation_band(),
                &default_separation_band(),
                false,
                Some(bad),
            )
            .unwrap_err();
            assert_eq!(e.field(), Some("ack_share_max"), "{e}");
            assert!(matches!(e, QdiscConfigError::OutOfRange { .. }), "{e:?}");
        }
        let e = AckSeparation::<Seg>::new(
            &default_separation_band(),
            &BandConfig::with_limits(0, 1),
            false,
            None,
        )
        .unwrap_err();
        assert_eq!(e, QdiscConfigError::too_small("other.queue_limit", 1));
        let mut q: AckSeparation<Seg> = AckSeparation::p3();
        assert!(matches!(
            q.enqueue(2, data(1), 0),
            Verdict::Dropped {
                reason: DropReason::UnknownClass,
                ..
            }
        ));
    }
}

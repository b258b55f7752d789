//! WF2Q+ — Bennett & Zhang, "Hierarchical packet fair queueing algorithms", IEEE/ACM ToN
//! 5(5), 1997 (the WF2Q+ system virtual time), building on WF2Q (Bennett & Zhang,
//! INFOCOM 1996: serve only *eligible* packets, those whose virtual start ≤ V).
//!
//! Every class i has a weight wᵢ and a guaranteed rate rᵢ = wᵢ / Σw of the link. For the head
//! packet of class i we keep a virtual start Sᵢ and finish Fᵢ = Sᵢ + L/rᵢ:
//! - on arrival to an empty class: Sᵢ = max(V, Fᵢ);
//! - after class i sends and stays backlogged: Sᵢ = Fᵢ (its next packet starts where the
//!   previous finished), then Fᵢ = Sᵢ + L'/rᵢ;
//! - system virtual time V(t+τ) = max(V(t) + τ, min over backlogged Sᵢ), where τ
//!   is measured in bytes served (the link is the unit of rate);
//! - selection: among classes with Sᵢ ≤ V, the smallest Fᵢ (ties: lowest class index).
//!
//! Compared with DRR it bounds how far ahead of its fluid share any class gets (one packet,
//! the WF2Q "worst-case fair" property), so a heavy class cannot burst ahead of light ones.
//!
//! Virtual times are fixed point (u128, 2⁻²⁰ byte units) so runs are exact and deterministic.
//! Cost: O(1) enqueue; O(classes) dequeue/peek (a scan for the eligible minimum — classes are
//! few here; a heap pair as in QFQ would make it O(log n)). Memory: sum of class limits.

use super::fifo::Fifo;
use super::prio::{
    band_dequeue, band_enqueue, band_status, bands_reset, check_class_count, drop_unknown_class,
    BandConfig,
};
use super::{ClassId, ClassStatus, Packet, Qdisc, QdiscStats, Verdict};
use crate::Nanos;
use serde::{Deserialize, Serialize};

/// Fixed-point scale of virtual time: 2^20 units per byte.
const VT_SCALE: u128 = 1 << 20;

fn default_weight() -> u32 {
    1
}
fn default_limit_packets() -> usize {
    1000
}
fn no_byte_limit() -> u64 {
    u64::MAX
}

/// One WF2Q+ class: an integer weight ≥ 1 and its queue limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Wf2qClassConfig {
    #[serde(default = "default_weight")]
    pub weight: u32,
    #[serde(default = "default_limit_packets")]
    pub limit_packets: usize,
    #[serde(default = "no_byte_limit")]
    pub limit_bytes: u64,
}

impl Wf2qClassConfig {
    pub fn new(weight: u32, limit_packets: usize, limit_bytes: u64) -> Self {
        Self {
            weight,
            limit_packets,
            limit_bytes,
        }
    }
}

#[derive(Debug, Clone)]
struct Wf2qClass<T> {
    queue: Fifo<T>,
    weight: u32,
    /// Virtual start and finish of the head packet (of the last packet when idle).
    start: u128,
    finish: u128,
}

/// WF2Q+ over FIFO classes.
#[derive(Debug, Clone)]
pub struct Wf2qPlus<T> {
    classes: Vec<Wf2qClass<T>>,
    total_weight: u128,
    /// System virtual time V.
    vtime: u128,
    stats: QdiscStats,
}

impl<T: Packet> Wf2qPlus<T> {
    pub fn new(classes: &[Wf2qClassConfig]) -> Result<Self, String> {
        check_class_count("classes", classes.len())?;
        let mut built = Vec::with_capacity(classes.len());
        for (i, c) in classes.iter().enumerate() {
            if c.weight == 0 {
                return Err(format!("classes[{i}].weight: must be at least 1"));
            }
            BandConfig::with_limits(c.limit_packets, c.limit_bytes)
                .check(&format!("classes[{i}]"))?;
            built.push(Wf2qClass {
                queue: Fifo::new(c.limit_packets, c.limit_bytes),
                weight: c.weight,
                start: 0,
                finish: 0,
            });
        }
        Ok(Self {
            total_weight: classes.iter().map(|c| c.weight as u128).sum(),
            classes: built,
            vtime: 0,
            stats: QdiscStats::default(),
        })
    }

    /// L / rᵢ in virtual-time units: L · Σw / wᵢ.
    fn wf2q_service_time(&self, class: ClassId, len: u32) -> u128 {
        len as u128 * VT_SCALE * self.total_weight / self.classes[class].weight as u128
    }

    /// Raise V to the smallest backlogged start (the WF2Q+ V update) and pick the eligible class with the
    /// smallest finish. Idempotent, so `peek` can call it.
    fn wf2q_select(&mut self) -> Option<ClassId> {
        let min_start = self
            .classes
            .iter()
            .filter(|c| !c.queue.is_empty())
            .map(|c| c.start)
            .min()?;
        self.vtime = self.vtime.max(min_start);
        let vtime = self.vtime;
        self.classes
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.queue.is_empty() && c.start <= vtime)
            .min_by_key(|(i, c)| (c.finish, *i))
            .map(|(i, _)| i)
    }

    pub fn class_status(&self) -> Vec<ClassStatus> {
        self.classes
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mut s = band_status(i, &c.queue);
                s.extra = vec![
                    ("weight".into(), c.weight as f64),
                    (
                        "virtual_start_bytes".into(),
                        (c.start as f64) / VT_SCALE as f64,
                    ),
                    (
                        "virtual_finish_bytes".into(),
                        (c.finish as f64) / VT_SCALE as f64,
                    ),
                ];
                s
            })
            .collect()
    }
}

impl<T: Packet> Qdisc<T> for Wf2qPlus<T> {
    fn enqueue(&mut self, class: ClassId, item: T, now: Nanos) -> Verdict<T> {
        if class >= self.classes.len() {
            return drop_unknown_class(&mut self.stats, item);
        }
        let len = item.len();
        let was_idle = self.classes[class].queue.is_empty();
        let service = self.wf2q_service_time(class, len);
        let vtime = self.vtime;
        let c = &mut self.classes[class];
        let verdict = band_enqueue(&mut c.queue, &mut self.stats, item, now);
        if was_idle && verdict.is_queued() {
            c.start = vtime.max(c.finish);
            c.finish = c.start + service;
        }
        verdict
    }

    fn dequeue(&mut self, now: Nanos) -> Option<T> {
        let class = self.wf2q_select()?;
        let item = band_dequeue(&mut self.classes[class].queue, &mut self.stats, now)?;
        self.vtime += item.len() as u128 * VT_SCALE;
        let next_len = self.classes[class].queue.iter().next().map(|p| p.len());
        if let Some(next_len) = next_len {
            let service = self.wf2q_service_time(class, next_len);
            let c = &mut self.classes[class];
            c.start = c.finish;
            c.finish = c.start + service;
        }
        Some(item)
    }

    fn peek(&mut self, now: Nanos) -> Option<&T> {
        let class = self.wf2q_select()?;
        self.classes[class].queue.peek(now)
    }

    fn reset(&mut self) -> Vec<T> {
        let out = bands_reset(
            self.classes.iter_mut().map(|c| &mut c.queue),
            &mut self.stats,
        );
        for c in &mut self.classes {
            c.start = 0;
            c.finish = 0;
        }
        self.vtime = 0;
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

    fn item(id: u64, len: u32) -> TestItem {
        TestItem { id, len }
    }

    fn build(weights: &[u32]) -> Wf2qPlus<TestItem> {
        let cfg: Vec<_> = weights
            .iter()
            .map(|&w| Wf2qClassConfig::new(w, 100_000, u64::MAX))
            .collect();
        Wf2qPlus::new(&cfg).unwrap()
    }

    /// Weights 1:2:4, all backlogged, mixed sizes: bytes served track the weights.
    #[test]
    fn wf2q_bytes_follow_weights() {
        let mut q = build(&[1, 2, 4]);
        let sizes = [1500u32, 64, 700];
        // Enough of each class to stay backlogged for the whole measurement.
        for i in 0..20_000u64 {
            for (class, &size) in sizes.iter().enumerate() {
                assert!(q
                    .enqueue(class, item(i * 3 + class as u64, size), 0)
                    .is_queued());
            }
        }
        let mut bytes = [0u64; 3];
        let mut served = 0u64;
        while served < 2_000_000 {
            let it = q.dequeue(0).unwrap();
            assert!(q.class_status().iter().all(|c| c.queued_packets > 0));
            bytes[(it.id % 3) as usize] += it.len as u64;
            served += it.len as u64;
        }
        let total: u64 = bytes.iter().sum();
        for (class, w) in [1.0, 2.0, 4.0].iter().enumerate() {
            let share = bytes[class] as f64 / total as f64;
            let want = w / 7.0;
            // Worst-case fairness: within one max packet of the fluid share.
            assert!(
                (share - want).abs() * (total as f64) < 1500.0 * 2.0,
                "class {class} share {share} want {want} bytes {bytes:?}"
            );
        }
        q.stats().check_identities().unwrap();
    }

    /// The introductory example of the WF2Q paper (Bennett & Zhang, INFOCOM'96): session 1 has rate 0.5,
    /// sessions 2..11 have 0.05 each, all packets the same size, all arrive at time 0.
    /// WFQ would send session 1's ten packets back to back; WF2Q(+) interleaves them with
    /// the others because a session-1 packet is not eligible before its virtual start.
    #[test]
    fn wf2q_interleaves_heavy_session_like_bennett_zhang_example() {
        let mut weights = vec![10u32];
        weights.extend(std::iter::repeat_n(1, 10));
        let mut q = build(&weights);
        for k in 0..11u64 {
            assert!(q.enqueue(0, item(k, 1000), 0).is_queued());
        }
        for s in 1..=10usize {
            assert!(q.enqueue(s, item(100 + s as u64, 1000), 0).is_queued());
        }
        let order: Vec<bool> = (0..20).map(|_| q.dequeue(0).unwrap().id < 100).collect();
        // Session 1 (ids < 100) on every even slot, a small session on every odd slot.
        for (slot, heavy) in order.iter().enumerate() {
            assert_eq!(*heavy, slot % 2 == 0, "slot {slot}: {order:?}");
        }
        q.stats().check_identities().unwrap();
    }

    /// A class that was idle does not get to catch up: its start is max(V, F).
    #[test]
    fn wf2q_idle_class_gets_no_back_credit() {
        let mut q = build(&[1, 1]);
        for i in 0..100 {
            assert!(q.enqueue(0, item(i, 1000), 0).is_queued());
        }
        for _ in 0..50 {
            assert_eq!(q.dequeue(0).unwrap().id / 1000, 0);
        }
        for i in 0..100 {
            assert!(q.enqueue(1, item(1000 + i, 1000), 0).is_queued());
        }
        // From now on the two alternate: class 1 does not get 50 packets in a row.
        let ids: Vec<u64> = (0..10).map(|_| q.dequeue(0).unwrap().id / 1000).collect();
        let ones = ids.iter().filter(|&&c| c == 1).count();
        assert!((4..=6).contains(&ones), "{ids:?}");
    }

    #[test]
    fn wf2q_config_errors_and_unknown_class() {
        let e = Wf2qPlus::<TestItem>::new(&[
            Wf2qClassConfig::new(1, 1, 1),
            Wf2qClassConfig::new(0, 1, 1),
        ])
        .unwrap_err();
        assert_eq!(e, "classes[1].weight: must be at least 1");
        let mut q = build(&[1]);
        assert!(!q.enqueue(1, item(1, 1), 0).is_queued());
        assert!(q.enqueue(0, item(2, 1), 0).is_queued());
        assert_eq!(q.reset().len(), 1);
        q.stats().check_identities().unwrap();
    }
}

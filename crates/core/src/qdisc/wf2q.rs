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
//! Selection. With more than `SCAN_MAX_CLASSES` (8) classes, two binary min-heaps over class
//! indices — the eligible/ineligible split QFQ also keeps (Checconi, Rizzo, Valente, "QFQ:
//! Efficient packet scheduling with tight guarantees", IEEE/ACM ToN 21(3), 2013; bucketed
//! bitmaps there, plain heaps here): backlogged classes with S > V wait in `ineligible` keyed
//! by (S, class); once V reaches their S they move to `eligible`, keyed by (F, class), whose
//! top is the class to serve. V only grows (reset empties everything), so a class never moves
//! back while its head packet is unchanged. The V update needs min S over *all* backlogged
//! classes only when `eligible` is empty: an eligible class has S ≤ V, so otherwise
//! max(V, min S) = V. Each backlogged class sits in exactly one heap and the served class is
//! always the top of `eligible`, so no arbitrary deletion (and no lazy tombstones) is needed.
//! With 1–8 classes a plain scan over the classes is faster and is used instead.
//!
//! Cost: enqueue O(1) (O(log classes) when an idle class becomes backlogged); dequeue and peek
//! O(log classes) amortised above 8 classes (each class moves ineligible → eligible at most
//! once per head packet), O(classes) with 1–8 classes. The heaps are preallocated to the class
//! count, so the packet path does not allocate. Memory: sum of class limits plus 2 × 32 bytes
//! per class. The original scan-only implementation is kept as the test-only reference
//! `tests::Wf2qScan`; the differential test `wf2q_heaps_match_linear_scan` checks both
//! selection paths against it.

use super::fifo::Fifo;
use super::prio::{
    band_dequeue, band_enqueue, band_status, bands_reset, check_class_count, drop_unknown_class,
    BandConfig,
};
use super::{ClassId, ClassStatus, Packet, Qdisc, QdiscConfigError, QdiscStats, Verdict};
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Fixed-point scale of virtual time: 2^20 units per byte.
const VT_SCALE: u128 = 1 << 20;

/// Up to this many classes selection scans the classes instead of using the heaps. Measured
/// crossover (Nov 22, one enqueue + dequeue of 1000 B on `Wf2qPlus` directly, weights 1–4,
/// all classes backlogged, median of 9 × 2M, two runs each): scan 55–56 / 52–53 / 61–63 /
/// 70–71 / 76–79 / 194–212 ns against heaps 65–66 / 60–62 / 62–65 / 65–67 / 68–70 / 84 ns at
/// 2 / 4 / 8 / 12 / 16 / 64 classes, so the heaps win from about 12 classes on
/// (docs/bench-core.md). Both paths give identical results (differential test).
const SCAN_MAX_CLASSES: usize = 8;

fn default_weight() -> u32 {
    1
}

/// One WF2Q+ class: an integer weight ≥ 1 and its queue limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Wf2qClassConfig {
    #[serde(default = "default_weight")]
    pub weight: u32,
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

impl Wf2qClassConfig {
    pub fn new(weight: u32, queue_limit: usize, size_limit: u64) -> Self {
        Self {
            weight,
            queue_limit,
            size_limit,
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
    /// Backlogged classes whose head had S > V when filed: min-heap on (S, class).
    ineligible: BinaryHeap<Reverse<(u128, ClassId)>>,
    /// Backlogged classes with S ≤ V: min-heap on (F, class); its top is served next.
    eligible: BinaryHeap<Reverse<(u128, ClassId)>>,
    /// More than `SCAN_MAX_CLASSES` classes: select with the heaps (else they stay empty).
    use_heaps: bool,
    stats: QdiscStats,
}

impl<T: Packet> Wf2qPlus<T> {
    pub fn new(classes: &[Wf2qClassConfig]) -> Result<Self, QdiscConfigError> {
        check_class_count("classes", classes.len())?;
        let mut built = Vec::with_capacity(classes.len());
        for (i, c) in classes.iter().enumerate() {
            if c.weight == 0 {
                return Err(QdiscConfigError::too_small(
                    format!("classes[{i}].weight"),
                    1,
                ));
            }
            BandConfig::with_limits(c.queue_limit, c.size_limit).check(&format!("classes[{i}]"))?;
            built.push(Wf2qClass {
                queue: Fifo::new(c.queue_limit, c.size_limit),
                weight: c.weight,
                start: 0,
                finish: 0,
            });
        }
        Ok(Self {
            total_weight: classes.iter().map(|c| c.weight as u128).sum(),
            ineligible: BinaryHeap::with_capacity(classes.len()),
            eligible: BinaryHeap::with_capacity(classes.len()),
            use_heaps: classes.len() > SCAN_MAX_CLASSES,
            classes: built,
            vtime: 0,
            stats: QdiscStats::default(),
        })
    }

    /// L / rᵢ in virtual-time units: L · Σw / wᵢ.
    fn wf2q_service_time(&self, class: ClassId, len: u32) -> u128 {
        len as u128 * VT_SCALE * self.total_weight / self.classes[class].weight as u128
    }

    /// File backlogged `class` (head start/finish already set) in the heap its start selects.
    fn wf2q_file(&mut self, class: ClassId) {
        if !self.use_heaps {
            return;
        }
        let c = &self.classes[class];
        if c.start <= self.vtime {
            self.eligible.push(Reverse((c.finish, class)));
        } else {
            self.ineligible.push(Reverse((c.start, class)));
        }
    }

    /// Raise V to the smallest backlogged start (the WF2Q+ V update), move the classes that
    /// became eligible, and pick the eligible class with the smallest finish (ties: lowest
    /// class). Idempotent, so `peek` can call it.
    fn wf2q_select(&mut self) -> Option<ClassId> {
        if self.use_heaps {
            self.wf2q_select_heaps()
        } else {
            self.wf2q_select_scan()
        }
    }

    /// `wf2q_select` with the heaps (more than `SCAN_MAX_CLASSES` classes). Kept out of line,
    /// like `wf2q_refile_served`: with the heap code inlined into `dequeue`, the scan path
    /// measured ≈ 75 ns instead of ≈ 62 ns per enqueue+dequeue at 2 classes (benches/core.rs).
    #[inline(never)]
    fn wf2q_select_heaps(&mut self) -> Option<ClassId> {
        if self.eligible.is_empty() {
            // Every backlogged class is ineligible, so min S over backlogged = the top's S.
            let &Reverse((min_start, _)) = self.ineligible.peek()?;
            self.vtime = self.vtime.max(min_start);
        }
        while let Some(&Reverse((start, class))) = self.ineligible.peek() {
            if start > self.vtime {
                break;
            }
            self.ineligible.pop();
            self.eligible
                .push(Reverse((self.classes[class].finish, class)));
        }
        self.eligible.peek().map(|&Reverse((_, class))| class)
    }

    /// Move the class just served (the top of `eligible`) to where its new head belongs.
    #[inline(never)]
    fn wf2q_refile_served(&mut self, class: ClassId, backlogged: bool) {
        let (start, finish) = (self.classes[class].start, self.classes[class].finish);
        if !backlogged {
            self.eligible.pop();
        } else if start <= self.vtime {
            // Still eligible: re-key the top in place (one sift-down).
            if let Some(mut top) = self.eligible.peek_mut() {
                *top = Reverse((finish, class));
            }
        } else {
            self.eligible.pop();
            self.ineligible.push(Reverse((start, class)));
        }
    }

    /// The same selection by a scan over all classes, O(classes), for few classes.
    fn wf2q_select_scan(&mut self) -> Option<ClassId> {
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
    fn enqueue(&mut self, class: ClassId, item: T, now: Instant) -> Verdict<T> {
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
            self.wf2q_file(class);
        }
        verdict
    }

    fn dequeue(&mut self, now: Instant) -> Option<T> {
        let class = self.wf2q_select()?;
        let item = band_dequeue(&mut self.classes[class].queue, &mut self.stats, now)?;
        self.vtime += item.len() as u128 * VT_SCALE;
        let next_len = self.classes[class].queue.iter().next().map(|p| p.len());
        let backlogged = next_len.is_some();
        if let Some(next_len) = next_len {
            let service = self.wf2q_service_time(class, next_len);
            let c = &mut self.classes[class];
            c.start = c.finish;
            c.finish = c.start + service;
        }
        if self.use_heaps {
            self.wf2q_refile_served(class, backlogged);
        }
        Some(item)
    }

    fn peek(&mut self, now: Instant) -> Option<&T> {
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
        self.eligible.clear();
        self.ineligible.clear();
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

    /// The introductory example of the WF2Q paper (Bennett & Zhang, INFOCOM'96, whose flows are
    /// called sessions): the first flow has rate 0.5, ten more have 0.05 each, all packets the
    /// same size, all arrive at time 0. WFQ would send the first flow's ten packets back to
    /// back; WF2Q(+) interleaves them with the others because a packet of the first flow is
    /// not eligible before its virtual start.
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
        // The heavy flow (ids < 100) on every even slot, a light flow on every odd slot.
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

    /// The former O(classes) implementation, kept verbatim as the reference for the heaps:
    /// V = max(V, min S over backlogged), then the eligible (S ≤ V) class with the smallest F,
    /// ties to the lowest index, found by scanning every class.
    struct Wf2qScan<T> {
        classes: Vec<Wf2qClass<T>>,
        total_weight: u128,
        vtime: u128,
        stats: QdiscStats,
    }

    impl<T: Packet> Wf2qScan<T> {
        fn new(classes: &[Wf2qClassConfig]) -> Result<Self, QdiscConfigError> {
            let q = Wf2qPlus::<T>::new(classes)?;
            Ok(Self {
                classes: q.classes,
                total_weight: q.total_weight,
                vtime: 0,
                stats: QdiscStats::default(),
            })
        }

        fn wf2q_service_time(&self, class: ClassId, len: u32) -> u128 {
            len as u128 * VT_SCALE * self.total_weight / self.classes[class].weight as u128
        }

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

        fn start_finish(&self) -> Vec<(u128, u128)> {
            self.classes.iter().map(|c| (c.start, c.finish)).collect()
        }

        fn queued(&self) -> Vec<(usize, QdiscStats)> {
            self.classes
                .iter()
                .enumerate()
                .map(|(i, c)| (i, c.queue.stats().clone()))
                .collect()
        }
    }

    impl<T: Packet> Qdisc<T> for Wf2qScan<T> {
        fn enqueue(&mut self, class: ClassId, item: T, now: Instant) -> Verdict<T> {
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

        fn dequeue(&mut self, now: Instant) -> Option<T> {
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

        fn peek(&mut self, now: Instant) -> Option<&T> {
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

    /// Differential test: random traces (1..=64 classes, random weights, limits, lengths, and
    /// interleaved enqueue / dequeue / peek / reset, plus unknown classes) give the heap
    /// implementation and the linear-scan reference the same verdicts, dequeue and peek
    /// sequences, reset contents, virtual times and counters after every operation.
    #[test]
    fn wf2q_heaps_match_linear_scan() {
        use crate::rng::SplitMix64;
        let mut rng = SplitMix64::new(0x5eed_f00d_2026_1122);
        let (mut dequeued, mut drops, mut resets, mut moved) = (0u64, 0u64, 0u64, 0u64);
        let mut heap_traces = 0u64;
        for trace in 0..400 {
            let n = 1 + rng.below(64) as usize;
            let max_weight = [1u64, 4, 100, 1 << 20][rng.below(4) as usize];
            let cfg: Vec<_> = (0..n)
                .map(|_| {
                    let size_limit = if rng.below(3) == 0 {
                        1 + rng.below(20_000)
                    } else {
                        u64::MAX
                    };
                    Wf2qClassConfig::new(
                        1 + rng.below(max_weight) as u32,
                        1 + rng.below(30) as usize,
                        size_limit,
                    )
                })
                .collect();
            let mut heap = Wf2qPlus::<TestItem>::new(&cfg).unwrap();
            assert_eq!(heap.use_heaps, n > SCAN_MAX_CLASSES);
            // Odd traces force the heaps also for few classes, so both paths meet the scan
            // reference at every class count.
            heap.use_heaps |= trace % 2 == 1;
            heap_traces += u64::from(heap.use_heaps);
            let mut scan = Wf2qScan::<TestItem>::new(&cfg).unwrap();
            // Preallocated to the class count; must never grow (no allocation per packet).
            let caps = (heap.eligible.capacity(), heap.ineligible.capacity());
            // Per trace: how often it enqueues (draining vs filling phases) and how many
            // classes it uses (a few hot classes or all of them).
            let enq_per_mille = 200 + rng.below(700);
            let hot = 1 + rng.below(n as u64) as usize;
            for op in 0..3000u64 {
                let now = op * 1000;
                let r = rng.below(1000);
                if r < enq_per_mille {
                    // One in 50 goes to an unknown class.
                    let class = if rng.below(50) == 0 {
                        n + rng.below(3) as usize
                    } else {
                        rng.below(hot as u64) as usize
                    };
                    let len = match rng.below(20) {
                        0 => 0,
                        1 => 9000,
                        _ => 1 + rng.below(1500) as u32,
                    };
                    let it = item(trace * 1_000_000 + op, len);
                    let (a, b) = (heap.enqueue(class, it, now), scan.enqueue(class, it, now));
                    drops += u64::from(!a.is_queued());
                    assert_eq!(a, b, "trace {trace} op {op}: enqueue class {class}");
                } else if r < 985 {
                    let a = heap.dequeue(now);
                    assert_eq!(a, scan.dequeue(now), "trace {trace} op {op}: dequeue");
                    dequeued += u64::from(a.is_some());
                } else if r < 998 {
                    let a = heap.peek(now).copied();
                    assert_eq!(a, scan.peek(now).copied(), "trace {trace} op {op}: peek");
                } else {
                    assert_eq!(heap.reset(), scan.reset(), "trace {trace} op {op}: reset");
                    resets += 1;
                }
                moved += heap.ineligible.len() as u64;
                assert_eq!(heap.vtime, scan.vtime, "trace {trace} op {op}: V");
                assert_eq!(heap.stats(), scan.stats(), "trace {trace} op {op}: stats");
                let sf: Vec<_> = heap.classes.iter().map(|c| (c.start, c.finish)).collect();
                assert_eq!(sf, scan.start_finish(), "trace {trace} op {op}: S/F");
                let qs: Vec<_> = heap
                    .classes
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (i, c.queue.stats().clone()))
                    .collect();
                assert_eq!(qs, scan.queued(), "trace {trace} op {op}: class counters");
                // Every backlogged class is in exactly one heap, idle ones in none.
                let backlogged = heap.classes.iter().filter(|c| !c.queue.is_empty()).count();
                let backlogged = if heap.use_heaps { backlogged } else { 0 };
                assert_eq!(
                    heap.eligible.len() + heap.ineligible.len(),
                    backlogged,
                    "trace {trace} op {op}: heap membership"
                );
                assert_eq!(
                    (heap.eligible.capacity(), heap.ineligible.capacity()),
                    caps,
                    "trace {trace} op {op}: heap grew"
                );
            }
            heap.stats().check_identities().unwrap();
        }
        // The traces exercised every path: service, tail drops, resets, ineligible classes.
        assert!(dequeued > 100_000, "dequeued {dequeued}");
        assert!(drops > 1_000, "drops {drops}");
        assert!(resets > 100, "resets {resets}");
        assert!(moved > 10_000, "ineligible class-ops {moved}");
        assert!(
            (200..400).contains(&heap_traces),
            "heap traces {heap_traces}"
        );
    }

    #[test]
    fn wf2q_config_errors_and_unknown_class() {
        let e = Wf2qPlus::<TestItem>::new(&[
            Wf2qClassConfig::new(1, 1, 1),
            Wf2qClassConfig::new(0, 1, 1),
        ])
        .unwrap_err();
        assert_eq!(e, QdiscConfigError::too_small("classes[1].weight", 1));
        let mut q = build(&[1]);
        assert!(!q.enqueue(1, item(1, 1), 0).is_queued());
        assert!(q.enqueue(0, item(2, 1), 0).is_queued());
        assert_eq!(q.reset().len(), 1);
        q.stats().check_identities().unwrap();
    }
}

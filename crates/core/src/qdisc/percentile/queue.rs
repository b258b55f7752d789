//! The Percentile discipline (P0 §2.3.1, §3.2.3 `percentile_sched`): one FIFO per client
//! class, the non-empty class with the lowest attainment `S / (N·P)` served next, ties to the
//! lower index; the counters remember forever, a window of outcomes, or decay with a
//! half-life (see the module header of [`super`]).
//!
//! Cost: enqueue and feedback O(1); dequeue scans the non-empty classes (a `u64` bitmask,
//! ≤ 64 classes) by cross-multiplication in `u128`, cached between events. Memory: the queued
//! items, one byte per window slot with `window`.

use super::{
    auto_quantile_q, thesis_priority, MaxHold, PercentileDeadline, PercentileJudge,
    PercentileMemory,
};
use crate::qdisc::{
    ClassId, ClassStatus, DropReason, Feedback, Packet, PercentileConfigError, Qdisc, QdiscStats,
    Verdict,
};
use crate::time::{Duration, Instant};
use std::collections::VecDeque;

/// Most classes a Percentile queue takes (one bit each in the non-empty mask).
pub const PERCENTILE_MAX_CLASSES: usize = 64;
/// Counters are halved together when `N` reaches this (keeps the u128 products small).
const COUNTER_CAP: u64 = 1 << 40;
/// Fixed-point scale of the decayed counters (1 request = 2^16 units).
const DECAY_SCALE: u64 = 1 << 16;

/// Outcome slots of the `window` memory. Entries `[..pending_front]` are resolved, the rest
/// wait for their completion.
#[derive(Debug, Clone, Default)]
struct OutcomeWindow {
    slots: VecDeque<u8>,
    pending_front: usize,
    /// Completions still to come for requests already pushed out of the window.
    skip_feedback: u64,
}

const SLOT_PENDING: u8 = 0;
const SLOT_SUCCESS: u8 = 1;
const SLOT_FAIL: u8 = 2;

#[derive(Debug, Clone)]
struct PercentileClass<T> {
    queue: VecDeque<T>,
    /// When each queued item was enqueued, in the queue's order.
    since: VecDeque<Instant>,
    max_hold: MaxHold,
    /// Items that left by the bound on waiting, not by P0's rule.
    max_hold_releases: u64,
    queued_bytes: u64,
    p: u32,
    /// Counters used for the decision (in `DECAY_SCALE` units with `half_life_ms`).
    n: u64,
    s: u64,
    fail: u64,
    /// `n · p`, kept so that a comparison costs two multiplications.
    np: u64,
    last_event: Instant,
    window: Option<OutcomeWindow>,
    dequeued: u64,
    dropped: u64,
}

impl<T> PercentileClass<T> {
    fn refresh_np(&mut self) {
        self.np = self.n * self.p as u64;
    }
}

/// The Percentile discipline (P0). See the module header.
#[derive(Debug, Clone)]
pub struct PercentileQueue<T> {
    classes: Vec<PercentileClass<T>>,
    /// Bit `i` set iff class `i` has queued items.
    nonempty: u64,
    /// Cached result of the selection scan (`None`: unknown, rescan).
    best: Option<usize>,
    queue_limit: usize,
    /// Some class has a bound on waiting (else the overdue scan is skipped).
    any_max_hold: bool,
    /// Cumulative N, S, fail and the deadline in every mode (status and the success test).
    judge: PercentileJudge,
    memory: PercentileMemory,
    half_life_ns: f64,
    feedback_unknown_class: u64,
    stats: QdiscStats,
}

impl<T: Packet> PercentileQueue<T> {
    /// One class per entry of `percentiles` (percent, 1..=100; index 0 = highest class),
    /// each queue holding at most `queue_limit`. `Err` names the wrong field.
    pub fn new(
        percentiles: &[u32],
        queue_limit: usize,
        deadline: PercentileDeadline,
        memory: PercentileMemory,
    ) -> Result<Self, PercentileConfigError> {
        if percentiles.is_empty() {
            return Err(PercentileConfigError::NoClasses);
        }
        if percentiles.len() > PERCENTILE_MAX_CLASSES {
            return Err(PercentileConfigError::TooManyClasses {
                count: percentiles.len(),
                max: PERCENTILE_MAX_CLASSES,
            });
        }
        for (i, &p) in percentiles.iter().enumerate() {
            if !(1..=100).contains(&p) {
                return Err(PercentileConfigError::PercentileOutOfRange {
                    index: Some(i),
                    percent: p,
                });
            }
        }
        if queue_limit == 0 {
            return Err(PercentileConfigError::LimitPacketsZero);
        }
        deadline.validate()?;
        memory.validate()?;
        let half_life_ns = match memory {
            PercentileMemory::HalfLifeMs(ms) => ms * 1e6,
            _ => 0.0,
        };
        let classes = percentiles
            .iter()
            .map(|&p| PercentileClass {
                queue: VecDeque::new(),
                since: VecDeque::new(),
                max_hold: MaxHold::Off,
                max_hold_releases: 0,
                queued_bytes: 0,
                p,
                n: 0,
                s: 0,
                fail: 0,
                np: 0,
                last_event: 0,
                window: matches!(memory, PercentileMemory::Window(_)).then(OutcomeWindow::default),
                dequeued: 0,
                dropped: 0,
            })
            .collect();
        Ok(Self {
            classes,
            nonempty: 0,
            best: None,
            queue_limit,
            any_max_hold: false,
            judge: PercentileJudge::new(percentiles, deadline)?,
            memory,
            half_life_ns,
            feedback_unknown_class: 0,
            stats: QdiscStats::default(),
        })
    }

    pub fn class_count(&self) -> usize {
        self.classes.len()
    }

    /// `perSetPvalue(class, P)`: change a class's target (percent, 1..=100).
    pub fn set_percentile(&mut self, class: ClassId, p: u32) -> Result<(), PercentileConfigError> {
        if !(1..=100).contains(&p) {
            return Err(PercentileConfigError::PercentileOutOfRange {
                index: None,
                percent: p,
            });
        }
        let c = self
            .classes
            .get_mut(class)
            .ok_or(PercentileConfigError::UnknownClass { class })?;
        c.p = p;
        c.refresh_np();
        self.judge.set_percentile(class, p);
        self.percentile_note_change(class, true);
        Ok(())
    }

    /// `perSetNvalue(deadline)`: change the success criterion. Switching to `AutoQuantile`
    /// starts its histogram empty (the next completion is judged against itself).
    pub fn set_deadline(
        &mut self,
        deadline: PercentileDeadline,
    ) -> Result<(), PercentileConfigError> {
        self.judge.set_mode(deadline)
    }

    /// `perReset`: clear N, S, fail (also the cumulative ones) and the auto-deadline mean.
    /// Queued items stay queued.
    pub fn reset_counters(&mut self) {
        for c in &mut self.classes {
            c.n = 0;
            c.s = 0;
            c.fail = 0;
            c.np = 0;
            if let Some(w) = &mut c.window {
                *w = OutcomeWindow::default();
            }
        }
        self.judge.reset();
        self.best = None;
    }

    /// The deadline a completion is judged against now (`None`: auto with no sample yet).
    /// `AutoQuantile`: the one the last completion was judged against.
    pub fn current_deadline(&self) -> Option<Duration> {
        self.judge.deadline()
    }

    /// The judge: cumulative N, S, fail per class and the deadline.
    pub fn judge(&self) -> &PercentileJudge {
        &self.judge
    }

    /// `AutoQuantile`'s `q` as a fraction: the request-weighted mean target
    /// `Σ N_i·P_i / (100·Σ N_i)` over the decision counters (the plain mean of the targets
    /// while no class has counted a request). `None` in the other modes.
    pub fn deadline_quantile(&self) -> Option<f64> {
        (self.judge.mode() == PercentileDeadline::AutoQuantile).then(|| {
            let (num, den) = self.quantile_weights();
            num as f64 / den as f64
        })
    }

    /// `AutoQuantile`'s `q` as a fraction `(num, den)`, see [`auto_quantile_q`].
    fn quantile_weights(&self) -> (u128, u128) {
        auto_quantile_q(self.classes.iter().map(|c| (c.n, c.np, c.p)))
    }

    /// Beyond the thesis: a fixed deadline for one class (`None`: the shared one again);
    /// see [`PercentileJudge::set_class_deadline`]. `Err` for an unknown class or 0 ns.
    pub fn set_class_deadline(
        &mut self,
        class: ClassId,
        deadline: Option<Duration>,
    ) -> Result<(), PercentileConfigError> {
        if class >= self.classes.len() {
            return Err(PercentileConfigError::UnknownClass { class });
        }
        if deadline == Some(0) {
            return Err(PercentileConfigError::DeadlineNsZero);
        }
        self.judge.set_class_deadline(class, deadline);
        Ok(())
    }

    /// Beyond the thesis: the class's bound on waiting ([`MaxHold`], see `max_hold.rs`).
    /// `Err` for an unknown class or a zero bound.
    pub fn set_max_hold(
        &mut self,
        class: ClassId,
        bound: MaxHold,
    ) -> Result<(), PercentileConfigError> {
        if bound == MaxHold::Fixed(0) {
            return Err(PercentileConfigError::MaxHoldZero);
        }
        let c = self
            .classes
            .get_mut(class)
            .ok_or(PercentileConfigError::UnknownClass { class })?;
        c.max_hold = bound;
        self.any_max_hold = self.classes.iter().any(|c| c.max_hold != MaxHold::Off);
        Ok(())
    }

    /// The class's bound on waiting (`Off` for an unknown class).
    pub fn max_hold(&self, class: ClassId) -> MaxHold {
        self.classes.get(class).map_or(MaxHold::Off, |c| c.max_hold)
    }

    /// Items of the class that left by the bound on waiting (0 for an unknown class).
    pub fn max_hold_releases(&self, class: ClassId) -> u64 {
        self.classes.get(class).map_or(0, |c| c.max_hold_releases)
    }

    /// The class whose head leaves by the bound on waiting at `now`: among the non-empty
    /// classes whose oldest item has waited at least its bound, the one enqueued first (ties
    /// to the lower index). O(non-empty classes) when some class has a bound.
    #[inline]
    fn overdue_class(&self, now: Instant) -> Option<usize> {
        if !self.any_max_hold {
            return None;
        }
        let mut mask = self.nonempty;
        let mut best: Option<(Instant, usize)> = None;
        while mask != 0 {
            let i = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            let c = &self.classes[i];
            let Some(bound) = c.max_hold.bound(self.judge.class_deadline(i)) else {
                continue;
            };
            let Some(&since) = c.since.front() else {
                continue;
            };
            if now.saturating_sub(since) >= bound && best.is_none_or(|(b, _)| since < b) {
                best = Some((since, i));
            }
        }
        best.map(|(_, i)| i)
    }

    /// The class `dequeue(now)` serves, and whether the bound on waiting chose it.
    #[inline]
    fn choose_at(&mut self, now: Instant) -> Option<(usize, bool)> {
        match self.overdue_class(now) {
            Some(i) => Some((i, true)),
            None => self.percentile_choose().map(|i| (i, false)),
        }
    }

    /// A request of `class` that an engine served at once, without queueing it (a server
    /// had a free slot): counted like an enqueued one (N += 1, `per_input_skb`), so the
    /// attainment covers every request of the class, queued or not; its completion comes
    /// through [`Qdisc::feedback`] as usual. `Err` for an unknown class.
    pub fn arrive_unqueued(
        &mut self,
        class: ClassId,
        now: Instant,
    ) -> Result<(), PercentileConfigError> {
        if class >= self.classes.len() {
            return Err(PercentileConfigError::UnknownClass { class });
        }
        self.percentile_count_arrival(class, now);
        Ok(())
    }

    /// A request of `class` that failed whatever the deadline (timed out waiting, its
    /// client left, its server failed): a failure for the decision and the judge, and `age`
    /// goes into the running auto-deadline figures ([`PercentileJudge::complete_as_miss`]).
    pub fn report_miss(&mut self, class: ClassId, age: Duration, now: Instant) {
        if class >= self.classes.len() {
            self.feedback_unknown_class += 1;
            return;
        }
        self.judge.complete_as_miss(class, age);
        self.percentile_count_outcome(class, false, now);
    }

    /// Set a class's counters (a daemon carrying them over a reconfiguration that rebuilt
    /// its classes): the judge's cumulative ones, and the decision counters too with
    /// `forever` and `half_life_ms` memory (a `window` keeps its own outcomes). `Err` for an
    /// unknown class.
    pub fn restore_counts(
        &mut self,
        class: ClassId,
        counts: super::JudgeCounts,
        now: Instant,
    ) -> Result<(), PercentileConfigError> {
        if class >= self.classes.len() {
            return Err(PercentileConfigError::UnknownClass { class });
        }
        self.judge.restore_counts(class, counts);
        let unit = self.percentile_unit();
        let c = &mut self.classes[class];
        if c.window.is_none() {
            c.n = counts.n.saturating_mul(unit);
            c.s = counts.s.saturating_mul(unit);
            c.fail = counts.fail.saturating_mul(unit);
            c.last_event = now;
            Self::percentile_cap(c);
        }
        self.best = None;
        Ok(())
    }

    /// Take back every queued item `keep` rejects, wherever it is in its class's FIFO (the
    /// rest keep their order), counted as evicted for [`DropReason::Withdrawn`]; returned
    /// with their class. The requests they stand for were counted in N on arrival: the
    /// engine reports each one's outcome ([`report_miss`](Self::report_miss)), which also
    /// resolves its slot in a `window` memory. O(queued).
    pub fn withdraw(&mut self, mut keep: impl FnMut(&T) -> bool) -> Vec<(ClassId, T)> {
        let mut out = Vec::new();
        for (i, c) in self.classes.iter_mut().enumerate() {
            if c.queue.is_empty() {
                continue;
            }
            let mut kept = VecDeque::with_capacity(c.queue.len());
            let mut kept_since = VecDeque::with_capacity(c.queue.len());
            for (item, since) in c.queue.drain(..).zip(c.since.drain(..)) {
                if keep(&item) {
                    kept.push_back(item);
                    kept_since.push_back(since);
                } else {
                    c.queued_bytes -= item.len() as u64;
                    c.dropped += 1;
                    self.stats.on_evict(item.len(), DropReason::Withdrawn);
                    out.push((i, item));
                }
            }
            c.queue = kept;
            c.since = kept_since;
            if c.queue.is_empty() {
                self.nonempty &= !(1 << i);
            }
        }
        if !out.is_empty() {
            self.best = None;
        }
        out
    }

    /// Completions reported for a class this queue does not have.
    pub fn feedback_unknown_class(&self) -> u64 {
        self.feedback_unknown_class
    }

    /// The class `dequeue` serves next: lowest attainment among non-empty classes, ties to
    /// the lower index. Attainments compared as `S_i·N_jP_j < S_j·N_iP_i`; a class with
    /// `N = 0` (counters reset while items wait) counts as attainment 0.
    #[inline]
    pub fn percentile_select(&self) -> Option<ClassId> {
        let mut mask = self.nonempty;
        if mask == 0 {
            return None;
        }
        let mut best = mask.trailing_zeros() as usize;
        mask &= mask - 1;
        let (mut best_s, mut best_np) = self.percentile_key(best);
        while mask != 0 {
            let i = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            let (s, np) = self.percentile_key(i);
            if (s as u128) * (best_np as u128) < (best_s as u128) * (np as u128) {
                best = i;
                best_s = s;
                best_np = np;
            }
        }
        Some(best)
    }

    /// Class `a` goes before class `b` (lower attainment, or equal and lower index).
    #[inline]
    fn percentile_before(&self, a: usize, b: usize) -> bool {
        let (sa, npa) = self.percentile_key(a);
        let (sb, npb) = self.percentile_key(b);
        let (lhs, rhs) = (sa as u128 * npb as u128, sb as u128 * npa as u128);
        lhs < rhs || (lhs == rhs && a < b)
    }

    /// The selection, from the cache when it is valid (see `percentile_note_change`).
    #[inline]
    fn percentile_choose(&mut self) -> Option<usize> {
        if self.best.is_none() {
            self.best = self.percentile_select();
        }
        debug_assert_eq!(self.best, self.percentile_select(), "stale selection cache");
        self.best
    }

    /// Class `c`'s key changed or it became non-empty. If `c` is the cached choice and its
    /// attainment may have risen, the cache is dropped; otherwise only `c` can have overtaken
    /// the cached choice (every other class is as it was), so one comparison keeps it valid.
    #[inline]
    fn percentile_note_change(&mut self, c: usize, may_have_risen: bool) {
        match self.best {
            Some(b) if b == c && may_have_risen => self.best = None,
            Some(b) if b != c && self.nonempty & (1 << c) != 0 && self.percentile_before(c, b) => {
                self.best = Some(c)
            }
            _ => {}
        }
    }

    #[inline]
    fn percentile_key(&self, i: usize) -> (u64, u64) {
        let c = &self.classes[i];
        if c.np == 0 {
            (0, 1)
        } else {
            (c.s, c.np)
        }
    }

    fn percentile_unit(&self) -> u64 {
        match self.memory {
            PercentileMemory::HalfLifeMs(_) => DECAY_SCALE,
            _ => 1,
        }
    }

    /// Apply the pending decay of class `i` up to `now` (half-life memory only).
    fn percentile_decay(&mut self, i: usize, now: Instant) {
        if self.half_life_ns <= 0.0 {
            return;
        }
        let c = &mut self.classes[i];
        if now > c.last_event {
            let factor = (-((now - c.last_event) as f64) / self.half_life_ns).exp2();
            c.n = (c.n as f64 * factor).round() as u64;
            c.s = (c.s as f64 * factor).round() as u64;
            c.fail = (c.fail as f64 * factor).round() as u64;
            c.refresh_np();
        }
        c.last_event = c.last_event.max(now);
    }

    /// Halve a class's counters at `COUNTER_CAP`; true if it did (the ratio may move).
    fn percentile_cap(c: &mut PercentileClass<T>) -> bool {
        let capped = c.n >= COUNTER_CAP;
        if capped {
            c.n /= 2;
            c.s /= 2;
            c.fail /= 2;
        }
        c.refresh_np();
        capped
    }

    /// Count an enqueued request of class `i` (N += 1, `per_input_skb`).
    fn percentile_count_arrival(&mut self, i: usize, now: Instant) {
        self.percentile_decay(i, now);
        let unit = self.percentile_unit();
        let limit = match self.memory {
            PercentileMemory::Window(n) => n as usize,
            _ => 0,
        };
        let decayed = self.half_life_ns > 0.0;
        self.judge.arrival(i);
        let c = &mut self.classes[i];
        // An arrival only lowers an attainment (N grows; a window drops its oldest slot),
        // except from N = 0 (key "attainment 0"), by decay rounding, or by the cap.
        let was_zero = c.np == 0;
        if let Some(w) = &mut c.window {
            if w.slots.len() == limit {
                match w.slots.pop_front() {
                    Some(SLOT_SUCCESS) => c.s -= 1,
                    Some(SLOT_FAIL) => c.fail -= 1,
                    _ => {}
                }
                if w.pending_front > 0 {
                    w.pending_front -= 1;
                } else {
                    // The oldest pending request left the window; its completion must not
                    // resolve a newer slot.
                    w.skip_feedback += 1;
                }
                c.n -= 1;
            }
            w.slots.push_back(SLOT_PENDING);
        }
        c.n += unit;
        let capped = Self::percentile_cap(c);
        self.percentile_note_change(i, was_zero || decayed || capped);
    }

    /// Count a completion of class `i` (`per_fail_check`).
    fn percentile_count_outcome(&mut self, i: usize, success: bool, now: Instant) {
        self.percentile_decay(i, now);
        let unit = self.percentile_unit();
        let decayed = self.half_life_ns > 0.0;
        let c = &mut self.classes[i];
        if let Some(w) = &mut c.window {
            if w.skip_feedback > 0 {
                w.skip_feedback -= 1;
                return;
            }
            if w.pending_front >= w.slots.len() {
                return; // a completion with no pending request in the window
            }
            w.slots[w.pending_front] = if success { SLOT_SUCCESS } else { SLOT_FAIL };
            w.pending_front += 1;
        }
        if success {
            c.s += unit;
        } else {
            c.fail += unit;
        }
        let capped = Self::percentile_cap(c);
        self.percentile_note_change(i, success || decayed || capped);
    }

    /// Class `i`'s thesis priority (from the decision counters; `None` when undefined) and
    /// queue length, without the allocations of [`class_status`](Self::class_status).
    pub fn class_brief(&self, i: ClassId) -> Option<(Option<u64>, usize)> {
        self.classes
            .get(i)
            .map(|c| (thesis_priority(c.n, c.s, c.p), c.queue.len()))
    }

    /// Per-class snapshot: queue figures plus n, s, fail (as used for the decision, in
    /// requests), n_total, s_total, fail_total, p, priority (the thesis's integer, absent when
    /// undefined), attainment (`S/(N·P/100)`, 1.0 = target met) and queue_len.
    pub fn class_status(&self) -> Vec<ClassStatus> {
        let unit = self.percentile_unit() as f64;
        let totals = self.judge.counts();
        self.classes
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let t = totals[i];
                let mut extra = vec![
                    ("n".to_string(), c.n as f64 / unit),
                    ("s".to_string(), c.s as f64 / unit),
                    ("fail".to_string(), c.fail as f64 / unit),
                    ("n_total".to_string(), t.n as f64),
                    ("s_total".to_string(), t.s as f64),
                    ("fail_total".to_string(), t.fail as f64),
                    ("p".to_string(), c.p as f64),
                ];
                if let Some(pr) = thesis_priority(c.n, c.s, c.p) {
                    extra.push(("priority".to_string(), pr as f64));
                }
                let attainment = if c.np == 0 {
                    0.0
                } else {
                    c.s as f64 * 100.0 / c.np as f64
                };
                extra.push(("attainment".to_string(), attainment));
                extra.push(("queue_len".to_string(), c.queue.len() as f64));
                extra.push(("max_hold_releases".to_string(), c.max_hold_releases as f64));
                ClassStatus {
                    class: i,
                    queued_packets: c.queue.len() as u64,
                    queued_bytes: c.queued_bytes,
                    dequeued: c.dequeued,
                    dropped: c.dropped,
                    extra,
                }
            })
            .collect()
    }
}

impl<T: Packet> Qdisc<T> for PercentileQueue<T> {
    fn enqueue(&mut self, class: ClassId, item: T, now: Instant) -> Verdict<T> {
        let Some(c) = self.classes.get_mut(class) else {
            self.stats.on_arrival_drop(DropReason::UnknownClass);
            return Verdict::Dropped {
                item,
                reason: DropReason::UnknownClass,
            };
        };
        if c.queue.len() >= self.queue_limit {
            c.dropped += 1;
            self.stats.on_arrival_drop(DropReason::QueueFullPackets);
            return Verdict::Dropped {
                item,
                reason: DropReason::QueueFullPackets,
            };
        }
        c.queued_bytes += item.len() as u64;
        self.stats.on_enqueue(item.len());
        c.queue.push_back(item);
        c.since.push_back(now);
        self.nonempty |= 1 << class;
        // Counting may move the class's key; it also covers "became non-empty".
        self.percentile_count_arrival(class, now);
        Verdict::Queued
    }

    #[inline]
    fn dequeue(&mut self, now: Instant) -> Option<T> {
        let (i, by_bound) = self.choose_at(now)?;
        let c = &mut self.classes[i];
        let item = c.queue.pop_front()?;
        c.since.pop_front();
        if by_bound {
            c.max_hold_releases += 1;
        }
        if c.queue.is_empty() {
            self.nonempty &= !(1 << i);
            self.best = None;
        }
        c.queued_bytes -= item.len() as u64;
        c.dequeued += 1;
        self.stats.on_dequeue(item.len());
        Some(item)
    }

    fn peek(&mut self, now: Instant) -> Option<&T> {
        let (i, _) = self.choose_at(now)?;
        self.classes[i].queue.front()
    }

    fn reset(&mut self) -> Vec<T> {
        let mut items = Vec::with_capacity(self.len());
        for c in &mut self.classes {
            if let Some(w) = &mut c.window {
                // Queued requests never ran and will never complete: forget their slots (the
                // newest pending ones); requests in service keep theirs.
                let never_ran = c.queue.len().min(w.slots.len() - w.pending_front);
                w.slots.truncate(w.slots.len() - never_ran);
                c.n = w.slots.len() as u64;
                c.refresh_np();
            }
            c.since.clear();
            for item in c.queue.drain(..) {
                self.stats.on_evict(item.len(), DropReason::Reset);
                c.dropped += 1;
                items.push(item);
            }
            c.queued_bytes = 0;
        }
        self.nonempty = 0;
        self.best = None;
        items
    }

    fn stats(&self) -> &QdiscStats {
        &self.stats
    }

    fn feedback(&mut self, fb: Feedback, now: Instant) {
        let Feedback::Completed { class, latency } = fb;
        if class >= self.classes.len() {
            self.feedback_unknown_class += 1;
            return;
        }
        let classes = &self.classes;
        let success = self.judge.complete_with_q(class, latency, || {
            Some(auto_quantile_q(classes.iter().map(|c| (c.n, c.np, c.p))))
        });
        self.percentile_count_outcome(class, success, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qdisc::fifo::TestItem;
    use crate::MS;

    fn item(id: u64) -> TestItem {
        TestItem { id, len: 100 }
    }

    fn queue(ps: &[u32], deadline: PercentileDeadline) -> PercentileQueue<TestItem> {
        PercentileQueue::new(ps, 1000, deadline, PercentileMemory::Forever).unwrap()
    }

    fn extra(st: &ClassStatus, key: &str) -> Option<f64> {
        st.extra.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    /// P0 Table 14: N, S and P of the five classes at the end of the run, and the printed
    /// priorities 1324 1314 1314 1314 1315.
    #[test]
    fn table14_priorities_reproduced() {
        let n = [60000u64, 60000, 57551, 57350, 48139];
        let s = [40756u64, 36512, 30658, 26172, 18304];
        let p = [90u32, 80, 70, 60, 50];
        let printed = [1324u64, 1314, 1314, 1314, 1315];
        let ours: Vec<u64> = (0..5)
            .map(|i| thesis_priority(n[i], s[i], p[i]).unwrap())
            .collect();
        assert_eq!(ours, printed);
        // The brief's plain reading, N·P/S×10 truncated, misses Class4 (1314, not 1315):
        let naive: Vec<u64> = (0..5).map(|i| n[i] * p[i] as u64 * 10 / s[i]).collect();
        assert_eq!(naive, [1324, 1314, 1314, 1314, 1314]);

        // The same numbers through the queue's counters and status.
        let mut q = queue(&p, PercentileDeadline::Ns(10));
        for c in 0..5 {
            for k in 0..n[c] {
                assert!(q.enqueue(c, item(k), 0).is_queued());
                q.dequeue(0).unwrap();
                let latency = if k < s[c] { 5 } else { 50 };
                q.feedback(Feedback::Completed { class: c, latency }, 0);
            }
        }
        let st = q.class_status();
        for c in 0..5 {
            assert_eq!(extra(&st[c], "n"), Some(n[c] as f64));
            assert_eq!(extra(&st[c], "s"), Some(s[c] as f64));
            assert_eq!(extra(&st[c], "fail"), Some((n[c] - s[c]) as f64));
            assert_eq!(extra(&st[c], "priority"), Some(printed[c] as f64));
        }
        // "all classes sit at the same S/(N·P) ≈ 0.755–0.761" (brief on Table 14).
        for (c, status) in st.iter().enumerate() {
            let a = extra(status, "attainment").unwrap();
            assert!((0.754..0.762).contains(&a), "class {c} attainment {a}");
        }
        q.stats().check_identities().unwrap();
    }

    /// The class furthest below its target goes first; FIFO inside a class.
    #[test]
    fn lowest_attainment_served_first_fifo_inside() {
        let mut q = queue(&[90, 50], PercentileDeadline::Ns(10));
        // class 0: 10 requests, 9 successes: attainment 0.9/0.9 = 1.0
        // class 1: 10 requests, 4 successes: attainment 0.4/0.5 = 0.8 → served first
        for c in 0..2 {
            for k in 0..10u64 {
                let _ = q.enqueue(c, item(k), 0);
                q.dequeue(0).unwrap();
                let ok = if c == 0 { k < 9 } else { k < 4 };
                let latency = if ok { 1 } else { 100 };
                q.feedback(Feedback::Completed { class: c, latency }, 0);
            }
        }
        let _ = q.enqueue(0, item(100), 0);
        let _ = q.enqueue(1, item(200), 0);
        let _ = q.enqueue(1, item(201), 0);
        assert_eq!(q.percentile_select(), Some(1));
        assert_eq!(q.peek(0).unwrap().id, 200);
        assert_eq!(q.dequeue(0).unwrap().id, 200);
        assert_eq!(q.dequeue(0).unwrap().id, 201);
        assert_eq!(q.dequeue(0).unwrap().id, 100);
        assert!(q.dequeue(0).is_none());
        q.stats().check_identities().unwrap();
    }

    /// Equal attainments: the higher class (lower index) wins; a class that never succeeded
    /// (S = 0, N > 0) beats every class that has.
    #[test]
    fn ties_to_higher_class_and_never_succeeded_first() {
        let mut q = queue(&[90, 80, 70], PercentileDeadline::Ns(10));
        for c in 0..3 {
            let _ = q.enqueue(c, item(c as u64), 0);
        }
        // All three at S = 0: tie → class 0.
        assert_eq!(q.percentile_select(), Some(0));
        q.dequeue(0).unwrap();
        q.feedback(
            Feedback::Completed {
                class: 0,
                latency: 1,
            },
            0,
        );
        // Class 0 now has S = 1; classes 1 and 2 still S = 0 → class 1.
        let _ = q.enqueue(0, item(10), 0);
        assert_eq!(q.dequeue(0).unwrap().id, 1);
        q.feedback(
            Feedback::Completed {
                class: 1,
                latency: 1,
            },
            0,
        );
        assert_eq!(q.dequeue(0).unwrap().id, 2);
        // Exact tie by cross-multiplication: class 0 (N=2,S=1,P=90) has 1/180;
        // give class 2 (P=70) the same with N=18·..: use P-equal classes instead.
        let mut t = queue(&[50, 50], PercentileDeadline::Ns(10));
        for c in 0..2 {
            let _ = t.enqueue(c, item(c as u64), 0);
            t.dequeue(0).unwrap();
            t.feedback(
                Feedback::Completed {
                    class: c,
                    latency: 1,
                },
                0,
            );
        }
        let _ = t.enqueue(1, item(11), 0);
        let _ = t.enqueue(0, item(10), 0);
        assert_eq!(t.dequeue(0).unwrap().id, 10);
    }

    /// `auto` deadline: success iff latency ≤ mean response time so far (P0 §3.2.2).
    #[test]
    fn auto_deadline_is_running_mean() {
        let mut q = queue(&[90], PercentileDeadline::Auto);
        assert_eq!(q.current_deadline(), None);
        for (k, latency) in [4 * MS, 2 * MS, 9 * MS, MS].into_iter().enumerate() {
            let _ = q.enqueue(0, item(k as u64), 0);
            q.dequeue(0).unwrap();
            q.feedback(Feedback::Completed { class: 0, latency }, 0);
        }
        // means: 4 (4≤4 ok), 3 (2 ok), 5 (9 fail), 4 (1 ok)
        let st = q.class_status();
        assert_eq!(extra(&st[0], "s"), Some(3.0));
        assert_eq!(extra(&st[0], "fail"), Some(1.0));
        assert_eq!(q.current_deadline(), Some(4 * MS));
    }

    /// `AutoQuantile`'s q is the request-weighted mean target Σ N_i·P_i / Σ N_i: with P0
    /// Table 14's N and P it is 0.7093 (the thesis's classes, at their final counts).
    #[test]
    fn auto_quantile_q_is_the_request_weighted_target() {
        let n = [60000u64, 60000, 57551, 57350, 48139];
        let p = [90u32, 80, 70, 60, 50];
        let mut q = queue(&p, PercentileDeadline::AutoQuantile);
        assert_eq!(
            q.deadline_quantile(),
            Some(0.7),
            "no N yet: plain mean of the targets"
        );
        assert_eq!(q.current_deadline(), None);
        for (c, &nc) in n.iter().enumerate() {
            for k in 0..nc {
                let _ = q.enqueue(c, item(k), 0);
                q.dequeue(0).unwrap();
            }
        }
        let want = (0..5).map(|c| n[c] as f64 * p[c] as f64).sum::<f64>()
            / (100.0 * n.iter().sum::<u64>() as f64);
        assert!((q.deadline_quantile().unwrap() - want).abs() < 1e-12);
        assert!((want - 0.7093).abs() < 5e-4, "{want}");
        // Latencies 1..=100 ns, one per completion: the deadline is their ⌈q·total⌉-th value.
        for l in 1..=100u64 {
            q.feedback(
                Feedback::Completed {
                    class: 0,
                    latency: l,
                },
                0,
            );
        }
        assert_eq!(q.current_deadline(), Some(71));
        // Each completion is judged against the quantile including itself: the l-th (the
        // largest so far) succeeds iff l ≤ ⌈0.7093·l⌉, i.e. only l = 1, 2, 3.
        assert_eq!(extra(&q.class_status()[0], "s"), Some(3.0));
        assert_eq!(
            queue(&p, PercentileDeadline::Auto).deadline_quantile(),
            None
        );
        // perSetNvalue into and out of the mode; perReset clears the histogram.
        let mut r = queue(&[90, 50], PercentileDeadline::Ms(4.0));
        r.set_deadline(PercentileDeadline::AutoQuantile).unwrap();
        r.feedback(
            Feedback::Completed {
                class: 1,
                latency: 9,
            },
            0,
        );
        assert_eq!(r.current_deadline(), Some(9));
        r.reset_counters();
        assert_eq!(r.current_deadline(), None);
        r.set_deadline(PercentileDeadline::Ns(5)).unwrap();
        assert_eq!(r.current_deadline(), Some(5));
    }

    /// Closed loop: 5 classes (P0's targets 90..50) × `conns` connections, every request
    /// queued in the discipline, one server, service 1 ms or, one time in `slow_one_in`,
    /// `slow_ms`. Returns (attainment per class, mean latency per class in ms, completions per
    /// class, share of all completions within the final deadline).
    fn closed_loop_model(
        deadline: PercentileDeadline,
        conns: usize,
        slow_one_in: u64,
        slow_ms: u64,
    ) -> ([f64; 5], [f64; 5], [u64; 5], f64) {
        let ps = [90u32, 80, 70, 60, 50];
        let mut q = queue(&ps, deadline);
        let mut rng = crate::rng::SplitMix64::new(11);
        let mut now: Instant = 0;
        for c in 0..5 {
            for _ in 0..conns {
                let _ = q.enqueue(
                    c,
                    TestItem {
                        id: 0,
                        len: c as u32,
                    },
                    0,
                );
            }
        }
        let (mut sum, mut done) = ([0f64; 5], [0u64; 5]);
        let mut lats = Vec::new();
        for _ in 0..40_000 {
            let it = q.dequeue(now).unwrap();
            now += if rng.below(slow_one_in) == 0 {
                slow_ms * MS
            } else {
                MS
            };
            let (c, latency) = (it.len as usize, now - it.id);
            q.feedback(Feedback::Completed { class: c, latency }, now);
            sum[c] += latency as f64 / 1e6;
            done[c] += 1;
            lats.push(latency);
            let _ = q.enqueue(
                c,
                TestItem {
                    id: now,
                    len: c as u32,
                },
                now,
            );
        }
        let st = q.class_status();
        let d = q.current_deadline().unwrap();
        let within = lats.iter().filter(|&&l| l <= d).count() as f64 / lats.len() as f64;
        (
            std::array::from_fn(|c| extra(&st[c], "attainment").unwrap()),
            std::array::from_fn(|c| sum[c] / done[c] as f64),
            done,
            within,
        )
    }

    /// Why `AutoQuantile` (beyond the thesis). P0 §2.3.1 equalises `S/(N·P)`; §3.2.2 takes
    /// the mean processing time as the deadline, and the *level* the classes meet at then
    /// depends on the shape of the response-time distribution: in Table 14 every class sits
    /// at ≈ 0.76, below its target. Under the running mean the level here is 0.896 with a
    /// mildly skewed service time (1 ms, 15 ms one time in 10) and 1.067 with a heavy tail
    /// (500 ms one time in 100) — and above 1 the top class is the first to hit its ceiling
    /// `1/P` (on the real testbed, where class 0 rarely waits, it does:
    /// docs/percentile-web-real.md). With the
    /// deadline at the running quantile `q = Σ N·P / Σ N` the server as a whole succeeds as
    /// often as the targets ask, and the level is ≈ 1 whatever the shape (measured 1.013 and
    /// 1.018–1.020), with the means still ordered C0 < … < C4.
    #[test]
    fn auto_quantile_puts_every_class_at_its_target_whatever_the_distribution() {
        let spread = |a: &[f64; 5]| {
            a.iter().cloned().fold(0.0, f64::max) / a.iter().cloned().fold(f64::MAX, f64::min) - 1.0
        };
        for (slow_one_in, slow_ms, auto_level) in [(10, 15, 0.896), (100, 500, 1.067)] {
            let (att, ..) = closed_loop_model(PercentileDeadline::Auto, 4, slow_one_in, slow_ms);
            assert!(spread(&att) < 0.01, "{att:?}");
            assert!((att[2] - auto_level).abs() < 0.005, "auto {att:?}");
            let (att, mean, done, within) =
                closed_loop_model(PercentileDeadline::AutoQuantile, 4, slow_one_in, slow_ms);
            assert!(spread(&att) < 0.01, "{att:?}");
            assert!(att.iter().all(|a| (a - 1.0).abs() < 0.025), "{att:?}");
            assert!(mean.windows(2).all(|w| w[0] < w[1]), "{mean:?}");
            // S / completions ≈ q: the attainment level times the weighted target.
            let n: u64 = done.iter().sum();
            let q = (0..5)
                .map(|c| done[c] as f64 * (90 - 10 * c) as f64)
                .sum::<f64>()
                / (100.0 * n as f64);
            assert!(
                (within / q - att[2]).abs() < 0.03,
                "F {within} q {q} {att:?}"
            );
        }
    }

    /// The control API (perSetPvalue, perSetNvalue, perReset) and bad input.
    #[test]
    fn control_api_setters_and_errors() {
        let mut q = queue(&[90, 50], PercentileDeadline::Ms(4.0));
        assert_eq!(q.current_deadline(), Some(4 * MS));
        q.set_deadline(PercentileDeadline::Ns(7)).unwrap();
        assert_eq!(q.current_deadline(), Some(7));
        assert_eq!(
            q.set_deadline(PercentileDeadline::Ms(-1.0)).unwrap_err(),
            PercentileConfigError::DeadlineMs { ms: -1.0 }
        );
        assert_eq!(
            q.set_percentile(5, 50).unwrap_err(),
            PercentileConfigError::UnknownClass { class: 5 }
        );
        assert_eq!(
            q.set_percentile(0, 0).unwrap_err(),
            PercentileConfigError::PercentileOutOfRange {
                index: None,
                percent: 0
            }
        );
        // Both classes at 1 of 2 succeeded; with P 90 vs 50 class 0 is further behind.
        for c in 0..2 {
            for latency in [1, 100] {
                let _ = q.enqueue(c, item(0), 0);
                q.dequeue(0).unwrap();
                q.feedback(Feedback::Completed { class: c, latency }, 0);
            }
        }
        let _ = q.enqueue(0, item(0), 0);
        let _ = q.enqueue(1, item(1), 0);
        assert_eq!(q.percentile_select(), Some(0));
        q.set_percentile(0, 10).unwrap();
        assert_eq!(q.percentile_select(), Some(1));
        q.reset_counters();
        let st = q.class_status();
        assert_eq!(extra(&st[0], "n"), Some(0.0));
        assert_eq!(extra(&st[1], "s_total"), Some(0.0));
        assert_eq!(q.len(), 2, "perReset keeps the queued requests");
        assert_eq!(
            q.percentile_select(),
            Some(0),
            "all at N = 0: tie to class 0"
        );
        let refused = |p: &[u32], limit, deadline, memory| {
            PercentileQueue::<TestItem>::new(p, limit, deadline, memory).unwrap_err()
        };
        let (auto, forever) = (PercentileDeadline::Auto, PercentileMemory::Forever);
        assert_eq!(
            refused(&[], 10, auto, forever),
            PercentileConfigError::NoClasses
        );
        assert_eq!(
            refused(&[90; PERCENTILE_MAX_CLASSES + 1], 10, auto, forever),
            PercentileConfigError::TooManyClasses {
                count: PERCENTILE_MAX_CLASSES + 1,
                max: PERCENTILE_MAX_CLASSES
            }
        );
        assert_eq!(
            refused(&[90, 101], 10, auto, forever),
            PercentileConfigError::PercentileOutOfRange {
                index: Some(1),
                percent: 101
            }
        );
        assert_eq!(
            refused(&[90], 0, auto, forever),
            PercentileConfigError::LimitPacketsZero
        );
        assert_eq!(
            refused(&[90], 10, PercentileDeadline::Ns(0), forever),
            PercentileConfigError::DeadlineNsZero
        );
        assert_eq!(
            refused(&[90], 10, auto, PercentileMemory::Window(0)),
            PercentileConfigError::MemoryWindowZero
        );
        assert_eq!(
            refused(&[90], 10, auto, PercentileMemory::Window(1 << 40)),
            PercentileConfigError::MemoryWindowTooLarge {
                window: 1 << 40,
                max: u32::MAX as u64
            }
        );
        assert_eq!(
            refused(&[90], 10, auto, PercentileMemory::HalfLifeMs(f64::NAN)).field(),
            "memory.half_life_ms"
        );
    }

    /// Per-class bound, unknown class, reset: every item handed back and counted.
    #[test]
    fn bounded_and_accounted() {
        let mut q = PercentileQueue::new(
            &[90, 50],
            2,
            PercentileDeadline::Auto,
            PercentileMemory::Forever,
        )
        .unwrap();
        assert!(q.enqueue(0, item(1), 0).is_queued());
        assert!(q.enqueue(0, item(2), 0).is_queued());
        match q.enqueue(0, item(3), 0) {
            Verdict::Dropped { item, reason } => {
                assert_eq!(item.id, 3);
                assert_eq!(reason, DropReason::QueueFullPackets);
            }
            v => panic!("expected drop, got {v:?}"),
        }
        match q.enqueue(7, item(4), 0) {
            Verdict::Dropped { reason, .. } => assert_eq!(reason, DropReason::UnknownClass),
            v => panic!("expected drop, got {v:?}"),
        }
        assert!(q.enqueue(1, item(5), 0).is_queued());
        q.dequeue(0).unwrap();
        let held = q.reset();
        assert_eq!(held.len(), 2);
        q.stats().check_identities().unwrap();
        assert_eq!(q.stats().drops_for(DropReason::Reset), 2);
        q.feedback(
            Feedback::Completed {
                class: 9,
                latency: 1,
            },
            0,
        );
        assert_eq!(q.feedback_unknown_class(), 1);
        let st = q.class_status();
        assert_eq!(st[0].dropped, 1 + 1);
    }

    /// Window memory: only the last `n` requests count.
    #[test]
    fn window_memory_forgets_old_outcomes() {
        let mut q = PercentileQueue::new(
            &[90],
            100,
            PercentileDeadline::Ns(10),
            PercentileMemory::Window(4),
        )
        .unwrap();
        for k in 0..10u64 {
            let _ = q.enqueue(0, item(k), 0);
            q.dequeue(0).unwrap();
            let latency = if k < 6 { 100 } else { 1 };
            q.feedback(Feedback::Completed { class: 0, latency }, 0);
        }
        let st = q.class_status();
        assert_eq!(extra(&st[0], "n"), Some(4.0));
        assert_eq!(extra(&st[0], "s"), Some(4.0));
        assert_eq!(extra(&st[0], "fail"), Some(0.0));
        assert_eq!(extra(&st[0], "fail_total"), Some(6.0));
        // A request pushed out of the window while pending: its completion is skipped, the
        // next completion resolves the right slot.
        for k in 0..5u64 {
            let _ = q.enqueue(0, item(k), 0);
        }
        for _ in 0..5 {
            q.dequeue(0).unwrap();
            q.feedback(
                Feedback::Completed {
                    class: 0,
                    latency: 100,
                },
                0,
            );
        }
        let st = q.class_status();
        assert_eq!(extra(&st[0], "n"), Some(4.0));
        assert_eq!(extra(&st[0], "fail"), Some(4.0));
    }

    /// Decayed counters: half of the weight is gone after one half-life.
    #[test]
    fn half_life_memory_decays() {
        let mut q = PercentileQueue::new(
            &[90],
            100,
            PercentileDeadline::Ns(10),
            PercentileMemory::HalfLifeMs(100.0),
        )
        .unwrap();
        for k in 0..8u64 {
            let _ = q.enqueue(0, item(k), 0);
            q.dequeue(0).unwrap();
            q.feedback(
                Feedback::Completed {
                    class: 0,
                    latency: 1,
                },
                0,
            );
        }
        let _ = q.enqueue(0, item(9), 100 * MS);
        let st = q.class_status();
        assert_eq!(extra(&st[0], "n"), Some(5.0)); // 8/2 + 1
        assert_eq!(extra(&st[0], "s"), Some(4.0));
    }

    /// Run the two-phase scenario: phase 1 (10 s), class 1 suffered (90% of its requests
    /// missed the deadline) while class 0 always succeeded; phase 2 (8 s), each class offers
    /// 0.6 requests per ms to a server that completes 1 per ms (20% overload), deadline 5 ms.
    /// Returns (class-0 completions within the deadline, class-0 completions) during phase 2's
    /// seconds 3..8.
    fn load_change_scenario(memory: PercentileMemory, per_10ms: u64) -> [(u64, u64); 2] {
        let mut q =
            PercentileQueue::new(&[90, 50], 50, PercentileDeadline::Ms(5.0), memory).unwrap();
        let mut now: Instant = 0;
        for k in 0..10_000u64 {
            now += MS;
            for c in 0..2 {
                let _ = q.enqueue(c, TestItem { id: now, len: 100 }, now);
                q.dequeue(now).unwrap();
                let miss = c == 1 && k % 10 != 0;
                let latency = if miss { 50 * MS } else { MS };
                q.feedback(Feedback::Completed { class: c, latency }, now);
            }
        }
        let phase2 = now;
        let mut out = [(0u64, 0u64); 2];
        for k in 0..8_000u64 {
            now += MS;
            // 3 arrivals per 5 ms for each class; the item's id is its arrival time and its
            // length carries its class.
            if (k * per_10ms) % 10 + per_10ms >= 10 {
                let _ = q.enqueue(0, TestItem { id: now, len: 100 }, now);
            }
            if ((k + 5) * per_10ms) % 10 + per_10ms >= 10 {
                let _ = q.enqueue(1, TestItem { id: now, len: 101 }, now);
            }
            if let Some(it) = q.dequeue(now) {
                let class = (it.len - 100) as usize;
                let latency = now + MS - it.id;
                q.feedback(Feedback::Completed { class, latency }, now + MS);
                if now >= phase2 + 3000 * MS {
                    out[class].1 += 1;
                    out[class].0 += (latency <= 5 * MS) as u64;
                }
            }
        }
        q.stats().check_identities().unwrap();
        out
    }

    /// Beyond the thesis: after a load change the scheduler's objective — equal attainment
    /// `success_rate / P` across classes — is reached again within a few half-lives (or
    /// windows) with forgetting counters; with the thesis's cumulative counters class 1's old
    /// deficit dominates and class 0 meets its deadline 0 times in seconds 3..8 after the
    /// change while class 1 meets all of its. Measured (class-0 ok/done, class-1 ok/done):
    /// forever 0/2000, 3001/3001; half-life 500 ms 40/2527, 21/2474; window 1000 1755/2619,
    /// 702/2382. Note the half-life version equalises at a low level under this 20% overload:
    /// both queues stay long because the decision flips between the classes.
    #[test]
    fn decayed_memory_adapts_after_load_change() {
        let gap = |r: [(u64, u64); 2]| {
            let a0 = r[0].0 as f64 / r[0].1 as f64 / 0.9;
            let a1 = r[1].0 as f64 / r[1].1 as f64 / 0.5;
            (a0 - a1).abs()
        };
        let forever = load_change_scenario(PercentileMemory::Forever, 6);
        let decayed = load_change_scenario(PercentileMemory::HalfLifeMs(500.0), 6);
        let window = load_change_scenario(PercentileMemory::Window(1000), 6);
        assert_eq!(
            forever[0].0, 0,
            "forever: class 0 still starved of successes {forever:?}"
        );
        assert!(
            gap(forever) > 1.5,
            "forever gap {} {forever:?}",
            gap(forever)
        );
        assert!(
            gap(decayed) < 0.1,
            "half-life gap {} {decayed:?}",
            gap(decayed)
        );
        assert!(gap(window) < 0.25, "window gap {} {window:?}", gap(window));
        // Both forgetting versions give class 0 more than the 0.4/ms left over by class 1.
        assert!(decayed[0].1 > 2400 && window[0].1 > 2400);
        // Without the load change (load 1.0) every version meets every deadline.
        for m in [
            PercentileMemory::Forever,
            PercentileMemory::HalfLifeMs(500.0),
        ] {
            let r = load_change_scenario(m, 5);
            assert_eq!((r[0].0, r[1].0), (r[0].1, r[1].1), "{m:?} {r:?}");
        }
    }

    /// What an engine with its own slots needs beyond the thesis's queue: requests served at
    /// once count in N (`arrive_unqueued`), a request that gave up is a failure whatever the
    /// deadline (`report_miss`), queued items can be taken back from the middle of a class
    /// (`withdraw`, selection still right afterwards), and a class can have its own deadline.
    #[test]
    fn unqueued_arrivals_misses_withdraw_and_class_deadlines() {
        let mut q = queue(&[90, 50], PercentileDeadline::Ns(10 * MS));
        q.arrive_unqueued(0, 0).unwrap();
        q.arrive_unqueued(1, 0).unwrap();
        assert!(q.arrive_unqueued(2, 0).is_err());
        assert!(q.is_empty(), "nothing was queued");
        q.feedback(
            Feedback::Completed {
                class: 0,
                latency: MS,
            },
            0,
        );
        q.report_miss(1, MS, 0);
        let st = q.class_status();
        assert_eq!(extra(&st[0], "n"), Some(1.0));
        assert_eq!(extra(&st[0], "s"), Some(1.0));
        assert_eq!(
            extra(&st[1], "fail"),
            Some(1.0),
            "a miss even at 1 ms < 10 ms"
        );
        // Class 1 (attainment 0) is chosen first; withdrawing its items leaves class 0.
        for id in 0..4 {
            assert!(q.enqueue((id % 2) as usize, item(id), 0).is_queued());
        }
        assert_eq!(q.peek(0).unwrap().id, 1);
        let back: Vec<(ClassId, u64)> = q
            .withdraw(|i| i.id % 2 == 0)
            .into_iter()
            .map(|(c, i)| (c, i.id))
            .collect();
        assert_eq!(back, vec![(1, 1), (1, 3)]);
        assert_eq!(q.dequeue(0).unwrap().id, 0, "class 1 is empty now");
        assert_eq!(q.dequeue(0).unwrap().id, 2);
        assert!(q.dequeue(0).is_none());
        q.stats().check_identities().unwrap();
        assert_eq!(q.stats().drops_for(DropReason::Withdrawn), 2);
        assert_eq!(q.class_status()[1].dropped, 2);
        // Per-class deadline: class 1 judged against 20 ms, class 0 against the shared 10 ms.
        q.set_class_deadline(1, Some(20 * MS)).unwrap();
        assert!(q.set_class_deadline(1, Some(0)).is_err());
        assert!(q.set_class_deadline(7, Some(MS)).is_err());
        q.feedback(
            Feedback::Completed {
                class: 1,
                latency: 15 * MS,
            },
            0,
        );
        q.feedback(
            Feedback::Completed {
                class: 0,
                latency: 15 * MS,
            },
            0,
        );
        let st = q.class_status();
        assert_eq!(extra(&st[1], "s_total"), Some(1.0));
        assert_eq!(extra(&st[0], "fail_total"), Some(1.0));
        assert_eq!(q.judge().class_deadline(1), Some(20 * MS));
        // Restored counters decide: class 0 far below its target goes first.
        let c = |n, s| crate::qdisc::percentile::JudgeCounts { n, s, fail: n - s };
        q.restore_counts(0, c(100, 10), 0).unwrap();
        q.restore_counts(1, c(100, 100), 0).unwrap();
        assert!(q.restore_counts(2, c(1, 1), 0).is_err());
        assert!(q.enqueue(1, item(10), 0).is_queued());
        assert!(q.enqueue(0, item(11), 0).is_queued());
        assert_eq!(q.dequeue(0).unwrap().id, 11);
        assert_eq!(extra(&q.class_status()[0], "n_total"), Some(101.0));
    }
}

//! P0's per-class judging (P0 §3.2.3 `per_input_skb`, `per_fail_check`; §3.2.2 the mean
//! response time as the success criterion), in one place for every engine: the Percentile
//! discipline judges its feedback with it, the NFQUEUE daemon judges every request with it
//! whatever its discipline. See the module header of [`super`] for the deadline modes.
//!
//! Cost: O(1) per event, plus in `AutoQuantile` the quantile cursor's move and one pass over
//! the classes for `q`. Memory: three counters per class, and the 17.5 KiB histogram of
//! [`LatencyQuantile`] only in `AutoQuantile`.

use super::{LatencyQuantile, PercentileDeadline};
use crate::qdisc::{ClassId, PercentileConfigError};
use crate::time::Duration;
use serde::{Deserialize, Serialize};

/// The quantile `AutoQuantile` judges against, as `(num, den)`: the request-weighted mean
/// target `Σ N_i·P_i / (100·Σ N_i)` over `(N_i, N_i·P_i, P_i in percent)`, or the plain mean
/// of the targets while every `N` is 0. It runs on every completion, so the common case is
/// one pass of additions. Shared with engines that keep their own counters (the NFQUEUE
/// daemon judges S for every discipline).
pub fn auto_quantile_q(classes: impl Iterator<Item = (u64, u64, u32)> + Clone) -> (u128, u128) {
    let (np, n) = classes
        .clone()
        .fold((0u128, 0u128), |(a, b), (ni, npi, _)| {
            (a + npi as u128, b + ni as u128)
        });
    if n > 0 {
        return (np, 100 * n);
    }
    // Only before the first arrival (or right after a reset): a second pass is fine.
    let (ps, k) = classes.fold((0u128, 0u128), |(a, b), (_, _, pi)| (a + pi as u128, b + 1));
    (ps, 100 * k.max(1))
}

/// A class as [`PercentileJudge`] counts it, since start or the last reset: requests (`N`),
/// answered within the deadline (`S`), failures (late, aborted, timed out).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JudgeCounts {
    pub n: u64,
    pub s: u64,
    pub fail: u64,
}

/// P0's per-class judging, in one place for every engine: the cumulative `N`, `S`, `fail` of
/// each class (`per_input_skb`, `per_fail_check`, P0 §3.2.3) and the deadline a completion
/// is judged against, in every [`PercentileDeadline`] mode — fixed; `Auto`, the running mean
/// of every response time since start/reset (this completion included); `AutoQuantile`, the
/// running `q`-quantile of them in a [`LatencyQuantile`] (allocated only in that mode), `q`
/// from [`auto_quantile_q`]. The Percentile discipline judges its feedback with it (and keeps
/// its own memory-weighted decision counters beside it); the NFQUEUE daemon judges every
/// request with it whatever its discipline. No clock; O(1) per event plus the quantile
/// cursor's move and, in `AutoQuantile`, one pass over the classes for `q`.
#[derive(Debug, Clone)]
pub struct PercentileJudge {
    mode: PercentileDeadline,
    percentiles: Vec<u32>,
    counts: Vec<JudgeCounts>,
    latency_sum: u128,
    latency_count: u64,
    quantile: Option<Box<LatencyQuantile>>,
    /// The deadline the last completion was judged against (`AutoQuantile`).
    last_deadline: Option<Duration>,
    /// Beyond the thesis: a fixed deadline of one class, judged instead of the shared one
    /// (`None`: the class follows `mode`).
    class_fixed: Vec<Option<Duration>>,
}

impl PercentileJudge {
    /// One class per entry of `percentiles` (percent). `Err` names a wrong deadline.
    pub fn new(
        percentiles: &[u32],
        mode: PercentileDeadline,
    ) -> Result<Self, PercentileConfigError> {
        mode.validate()?;
        Ok(PercentileJudge {
            mode,
            percentiles: percentiles.to_vec(),
            counts: vec![JudgeCounts::default(); percentiles.len()],
            latency_sum: 0,
            latency_count: 0,
            quantile: (mode == PercentileDeadline::AutoQuantile)
                .then(|| Box::new(LatencyQuantile::new())),
            last_deadline: None,
            class_fixed: vec![None; percentiles.len()],
        })
    }

    /// Beyond the thesis (which has one deadline for all, `perSetNvalue`): judge `class`
    /// against its own fixed deadline, or against the shared one again (`None`). Its
    /// response times still feed the running figures of the auto modes. Unknown classes and
    /// a zero deadline are ignored by the judge; [`super::PercentileQueue`] refuses them.
    pub fn set_class_deadline(&mut self, class: ClassId, deadline: Option<Duration>) {
        if let Some(d) = self.class_fixed.get_mut(class) {
            *d = deadline.filter(|&ns| ns > 0);
        }
    }

    /// The deadline `class` is judged against now: its own, or the shared one.
    pub fn class_deadline(&self, class: ClassId) -> Option<Duration> {
        self.class_fixed
            .get(class)
            .copied()
            .flatten()
            .or_else(|| self.deadline())
    }

    pub fn mode(&self) -> PercentileDeadline {
        self.mode
    }

    /// Counters of every class.
    pub fn counts(&self) -> &[JudgeCounts] {
        &self.counts
    }

    /// A request of `class` arrived (N += 1). Unknown classes are ignored.
    pub fn arrival(&mut self, class: ClassId) {
        if let Some(c) = self.counts.get_mut(class) {
            c.n += 1;
        }
    }

    /// `q` of `AutoQuantile` over this judge's own counters.
    pub fn quantile_weights(&self) -> (u128, u128) {
        auto_quantile_q(
            self.counts
                .iter()
                .zip(&self.percentiles)
                .map(|(c, &p)| (c.n, c.n.saturating_mul(p as u64), p)),
        )
    }

    /// The deadline now: fixed; `Auto`: the running mean (`None` before the first
    /// completion); `AutoQuantile`: the one the last completion was judged against.
    pub fn deadline(&self) -> Option<Duration> {
        match self.mode {
            PercentileDeadline::AutoQuantile => self.last_deadline,
            PercentileDeadline::Auto => (self.latency_count > 0)
                .then(|| (self.latency_sum / self.latency_count as u128) as Duration),
            d => d.fixed_ns(),
        }
    }

    /// Record a response time into the running figures; the deadline it is judged against.
    /// `q` is asked for only in `AutoQuantile` (it costs a pass over the classes).
    fn record(&mut self, latency: Duration, q: impl FnOnce(&Self) -> (u128, u128)) -> Duration {
        self.latency_sum += latency as u128;
        self.latency_count += 1;
        match self.mode {
            PercentileDeadline::Auto => (self.latency_sum / self.latency_count as u128) as Duration,
            PercentileDeadline::AutoQuantile => {
                let (num, den) = q(self);
                let h = self
                    .quantile
                    .get_or_insert_with(|| Box::new(LatencyQuantile::new()));
                h.record(latency);
                let d = h.quantile(num, den).unwrap_or(latency);
                self.last_deadline = Some(d);
                d
            }
            d => d.fixed_ns().unwrap_or(Duration::MAX),
        }
    }

    /// A completion of `class` after `latency`: judged (`true` = within the deadline) and
    /// counted; `q` of `AutoQuantile` from this judge's counters.
    pub fn complete(&mut self, class: ClassId, latency: Duration) -> bool {
        self.complete_with_q(class, latency, || None)
    }

    /// As [`complete`](Self::complete), with `AutoQuantile`'s `q` from the caller when `q`
    /// returns one (the discipline's memory-weighted decision counters); called only in that
    /// mode.
    pub fn complete_with_q(
        &mut self,
        class: ClassId,
        latency: Duration,
        q: impl FnOnce() -> Option<(u128, u128)>,
    ) -> bool {
        let shared = self.record(latency, |j| q().unwrap_or_else(|| j.quantile_weights()));
        let at = self
            .class_fixed
            .get(class)
            .copied()
            .flatten()
            .unwrap_or(shared);
        let success = latency <= at;
        if let Some(c) = self.counts.get_mut(class) {
            if success {
                c.s += 1;
            } else {
                c.fail += 1;
            }
        }
        success
    }

    /// A request of `class` that failed whatever the deadline (aborted, timed out): `age`
    /// goes into the running figures, the class counts a failure.
    pub fn complete_as_miss(&mut self, class: ClassId, age: Duration) {
        self.record(age, Self::quantile_weights);
        if let Some(c) = self.counts.get_mut(class) {
            c.fail += 1;
        }
    }

    /// Set a class's counters (a daemon carrying them over a reconfiguration that rebuilt
    /// its classes). Unknown classes are ignored.
    pub fn restore_counts(&mut self, class: ClassId, counts: JudgeCounts) {
        if let Some(c) = self.counts.get_mut(class) {
            *c = counts;
        }
    }

    pub fn set_percentile(&mut self, class: ClassId, p: u32) {
        if let Some(x) = self.percentiles.get_mut(class) {
            *x = p;
        }
    }

    /// Change the mode. Switching to `AutoQuantile` starts its histogram empty (the next
    /// completion is judged against itself); `Auto` keeps the mean of everything so far.
    pub fn set_mode(&mut self, mode: PercentileDeadline) -> Result<(), PercentileConfigError> {
        mode.validate()?;
        if mode == PercentileDeadline::AutoQuantile {
            if self.mode != PercentileDeadline::AutoQuantile || self.quantile.is_none() {
                self.quantile = Some(Box::new(LatencyQuantile::new()));
                self.last_deadline = None;
            }
        } else {
            self.quantile = None;
            self.last_deadline = None;
        }
        self.mode = mode;
        Ok(())
    }

    /// `perReset`: counters, running mean and histogram cleared.
    pub fn reset(&mut self) {
        self.counts
            .iter_mut()
            .for_each(|c| *c = JudgeCounts::default());
        self.latency_sum = 0;
        self.latency_count = 0;
        if let Some(h) = &mut self.quantile {
            h.clear();
        }
        self.last_deadline = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MS;

    /// The judge alone, in each mode: N / S / fail counted per class; `auto` judges against
    /// the mean with the completion included; a forced miss counts as a failure whatever the
    /// deadline and still moves the running figures; `reset` and `set_mode` as documented.
    #[test]
    fn judge_counts_and_deadlines_in_every_mode() {
        let mut j = PercentileJudge::new(&[90, 50], PercentileDeadline::Ns(4 * MS)).unwrap();
        j.arrival(0);
        j.arrival(1);
        j.arrival(7); // unknown class: ignored
        assert!(j.complete(0, 4 * MS));
        assert!(!j.complete(1, 4 * MS + 1));
        assert_eq!(
            j.counts(),
            &[
                JudgeCounts {
                    n: 1,
                    s: 1,
                    fail: 0
                },
                JudgeCounts {
                    n: 1,
                    s: 0,
                    fail: 1
                }
            ]
        );
        assert_eq!(j.deadline(), Some(4 * MS));
        // Auto keeps the mean of everything so far: (4 + 4.000001) / 2 ms.
        j.set_mode(PercentileDeadline::Auto).unwrap();
        assert_eq!(j.deadline(), Some(4 * MS));
        // 6 ms with itself included: mean (4+4+6)/3 = 4.67 ms -> late.
        assert!(!j.complete(0, 6 * MS));
        // 2 ms: mean 4 ms -> on time.
        assert!(j.complete(0, 2 * MS));
        j.complete_as_miss(1, MS);
        assert_eq!(
            j.counts()[1].fail,
            2,
            "a forced miss even below the deadline"
        );
        // AutoQuantile starts empty: the first completion is judged against itself.
        j.set_mode(PercentileDeadline::AutoQuantile).unwrap();
        assert_eq!(j.deadline(), None);
        assert!(j.complete(0, 9 * MS));
        let d = j.deadline().unwrap() as f64;
        assert!((d / (9 * MS) as f64 - 1.0).abs() <= 1.0 / 64.0, "{d}");
        assert!(j.set_mode(PercentileDeadline::Ns(0)).is_err());
        j.reset();
        assert_eq!(j.counts(), &[JudgeCounts::default(); 2]);
        assert_eq!(j.deadline(), None);
    }

    /// A class with its own fixed deadline is judged against it while the others follow the
    /// shared auto deadline, whose running mean still takes every class's response times.
    #[test]
    fn per_class_fixed_deadline_overrides_the_shared_one() {
        let mut j = PercentileJudge::new(&[90, 50], PercentileDeadline::Auto).unwrap();
        j.set_class_deadline(1, Some(10 * MS));
        j.set_class_deadline(5, Some(MS)); // unknown class: ignored
        assert_eq!(j.class_deadline(1), Some(10 * MS));
        assert_eq!(j.class_deadline(0), None, "auto before any completion");
        // Class 1 at 8 ms: within its 10 ms although above the running mean afterwards.
        assert!(j.complete(0, 2 * MS));
        assert!(j.complete(1, 8 * MS));
        assert_eq!(j.deadline(), Some(5 * MS), "the mean took both classes");
        // Class 0 at 6 ms: above the mean (2+8+6)/3 = 5.33 ms -> late.
        assert!(!j.complete(0, 6 * MS));
        // Class 1 at 11 ms: late against its own 10 ms.
        assert!(!j.complete(1, 11 * MS));
        j.set_class_deadline(1, None);
        assert_eq!(j.class_deadline(1), j.deadline());
        assert_eq!(
            j.counts()[0],
            JudgeCounts {
                n: 0,
                s: 1,
                fail: 1
            }
        );
        assert_eq!(
            j.counts()[1],
            JudgeCounts {
                n: 0,
                s: 1,
                fail: 1
            }
        );
    }
}

//! Running quantile of response times in bounded memory, for deadlines that follow the
//! observed response times (`PercentileDeadline::AutoQuantile` in the Percentile discipline
//! and the NFQUEUE daemon's judge, both through `percentile::PercentileJudge`).
//!
//! Layout: log-linear buckets (a fixed number of linear sub-buckets per power of two, the
//! scheme HdrHistogram popularised), which bounds the relative error whatever the magnitude.
//!
//! Cost: `record` O(1); `quantile` moves a cursor from the last answer (O(1) amortised while
//! the asked quantile drifts slowly); 17.5 KiB whatever the number of samples. No clock.

use crate::time::Duration;

/// Sub-buckets per power of two in [`LatencyQuantile`] (2^6 = 64: bucket width ≤ 1/64 of
/// its lower edge, i.e. ≤ 1.6% relative resolution).
const LQ_SUB_BITS: u32 = 6;
const LQ_SUB: u64 = 1 << LQ_SUB_BITS;
/// Latencies are clamped to 2^40 ns (≈ 18 min) — far beyond any response time that matters.
const LQ_MAX_EXP: u32 = 40;
/// Counts are halved together when the total reaches this.
const LQ_TOTAL_CAP: u64 = 1 << 40;
/// Values below `LQ_SUB` ns have one bucket each; then 64 buckets per power of two.
const LQ_BUCKETS: usize = ((LQ_MAX_EXP - LQ_SUB_BITS + 1) as usize) * LQ_SUB as usize;

/// Running quantile of response times in bounded memory: a log-bucket histogram (exact below
/// 64 ns, then 64 buckets per power of two: ≤ 1.6% relative error, 2240 `u64` buckets =
/// 17.5 KiB whatever the number of samples) with a cursor at the last quantile's bucket.
/// `record` is O(1); `quantile` moves the cursor from where it was, so while the asked
/// quantile drifts slowly (the usual case: one sample at a time) it costs O(1) amortised.
/// Inside a bucket the value is interpolated linearly by rank. Counts are cumulative (like
/// the thesis's counters) and all halved together when the total reaches 2^40. No clock.
#[derive(Debug, Clone)]
pub struct LatencyQuantile {
    counts: Vec<u64>,
    total: u64,
    /// Cursor: bucket of the last quantile and the number of samples in buckets below it.
    idx: usize,
    below: u64,
}

impl Default for LatencyQuantile {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyQuantile {
    pub fn new() -> Self {
        LatencyQuantile {
            counts: vec![0; LQ_BUCKETS],
            total: 0,
            idx: 0,
            below: 0,
        }
    }

    fn bucket(v: Duration) -> usize {
        let v = v.min((1u64 << LQ_MAX_EXP) - 1);
        if v < LQ_SUB {
            return v as usize;
        }
        let e = 63 - v.leading_zeros();
        let m = (v >> (e - LQ_SUB_BITS)) & (LQ_SUB - 1);
        ((e - LQ_SUB_BITS + 1) as u64 * LQ_SUB + m) as usize
    }

    /// Lowest value of bucket `i` and its width.
    fn bounds(i: usize) -> (Duration, Duration) {
        let i = i as u64;
        if i < LQ_SUB {
            return (i, 1);
        }
        let e = (i / LQ_SUB) as u32 + LQ_SUB_BITS - 1;
        let m = i % LQ_SUB;
        ((LQ_SUB + m) << (e - LQ_SUB_BITS), 1 << (e - LQ_SUB_BITS))
    }

    /// Samples recorded (after halvings).
    pub fn len(&self) -> u64 {
        self.total
    }

    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    pub fn clear(&mut self) {
        self.counts.iter_mut().for_each(|c| *c = 0);
        self.total = 0;
        self.idx = 0;
        self.below = 0;
    }

    pub fn record(&mut self, latency: Duration) {
        let i = Self::bucket(latency);
        self.counts[i] += 1;
        self.total += 1;
        if i < self.idx {
            self.below += 1;
        }
        if self.total >= LQ_TOTAL_CAP {
            self.counts.iter_mut().for_each(|c| *c /= 2);
            self.total = self.counts.iter().sum();
            self.idx = 0;
            self.below = 0;
        }
    }

    /// The `num/den`-quantile (0 < num/den ≤ 1): the smallest recorded value such that at
    /// least `⌈total·num/den⌉` samples are at or below it, interpolated inside its bucket.
    /// `None` without samples.
    pub fn quantile(&mut self, num: u128, den: u128) -> Option<Duration> {
        if self.total == 0 || den == 0 {
            return None;
        }
        let total = self.total as u128;
        let rank = (total * num).div_ceil(den).clamp(1, total) as u64;
        loop {
            let here = self.counts[self.idx];
            if self.below + here < rank {
                self.below += here;
                self.idx += 1;
            } else if self.below >= rank {
                self.idx -= 1;
                self.below -= self.counts[self.idx];
            } else {
                break;
            }
        }
        let (lo, width) = Self::bounds(self.idx);
        let (k, c) = (rank - self.below, self.counts[self.idx]);
        Some(lo + ((width - 1) as u128 * k as u128 / c as u128) as Duration)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The histogram's quantile against the exact order statistic: exact below 64 ns, within
    /// its 1/64 bucket resolution above; the cursor gives the same answer whichever way the
    /// asked quantile moves; halving at the cap keeps the shape.
    #[test]
    fn latency_quantile_is_exact_small_and_within_resolution_large() {
        let mut h = LatencyQuantile::new();
        assert_eq!(h.quantile(1, 2), None);
        for v in 1..=50u64 {
            h.record(v);
        }
        assert_eq!(h.quantile(1, 2), Some(25));
        assert_eq!(h.quantile(9, 10), Some(45));
        assert_eq!(h.quantile(1, 1), Some(50));
        assert_eq!(h.quantile(1, 1000), Some(1));
        let mut rng = crate::rng::SplitMix64::new(7);
        let mut h = LatencyQuantile::new();
        let mut all = Vec::new();
        for _ in 0..20_000 {
            // log-uniform over 10 µs .. 10 s, the range of response times that matter
            let v = (1e4 * 1e6f64.powf(rng.unit())) as Duration;
            h.record(v);
            all.push(v);
        }
        all.sort_unstable();
        for (num, den) in [
            (1u128, 2u128),
            (7, 10),
            (703, 1000),
            (9, 10),
            (99, 100),
            (1, 10),
        ] {
            let exact = all[((all.len() as u128 * num).div_ceil(den) - 1) as usize] as f64;
            // forwards and backwards from wherever the cursor is
            for _ in 0..2 {
                let got = h.quantile(num, den).unwrap() as f64;
                assert!(
                    (got / exact - 1.0).abs() <= 1.0 / 64.0,
                    "q {num}/{den}: {got} vs {exact}"
                );
            }
        }
        // Clamped far above any response time; halving at the cap keeps the median's bucket.
        h.record(u64::MAX);
        assert!(h.quantile(1, 1).unwrap() < 1 << LQ_MAX_EXP);
        let median = h.quantile(1, 2).unwrap();
        h.total = LQ_TOTAL_CAP - 1;
        h.record(1);
        assert!(h.len() < 20_002);
        let after = h.quantile(1, 2).unwrap() as f64;
        assert!(
            (after / median as f64 - 1.0).abs() <= 1.0 / 32.0,
            "{after} vs {median}"
        );
        h.clear();
        assert!(h.is_empty());
    }
}

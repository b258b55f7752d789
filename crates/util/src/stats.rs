//! The one place for sample statistics: percentiles, means, spreads and 95% confidence
//! intervals. Every crate uses these instead of its own helper, so "p99" and "± x" mean the
//! same thing in every report.
//!
//! **Percentile definition (nearest rank).** `percentile(sorted, q)` is the ⌈q·n⌉-th smallest
//! of the n samples (the first one for q = 0): the inverse of the empirical distribution
//! function, definition 1 of Hyndman & Fan, "Sample Quantiles in Statistical Packages"
//! (The American Statistician 50(4), 1996, §2). It is always one of the samples, and at least a
//! fraction q of the samples are ≤ it — the sense of "the q-th percentile response time" in the
//! papers' attainment figures. No interpolation.
//!
//! **Interval across runs.** `mean_ci95` is the sample mean ± t(0.975, n−1)·s/√n, with s the
//! sample standard deviation (n−1 in the denominator) and t the Student t quantile, computed
//! exactly for every integer degree of freedom from the closed-form distribution function of
//! Abramowitz & Stegun, *Handbook of Mathematical Functions*, §26.7.3–26.7.4 (a finite series in
//! θ = arctan(t/√ν)), inverted by bisection. With one run there is no interval
//! (`half_width: None`).

use serde::{Deserialize, Serialize};

/// Sort a sample in place for [`percentile`] (total order; NaN sorts last).
pub fn sort(xs: &mut [f64]) {
    xs.sort_by(|a, b| a.total_cmp(b));
}

/// A sorted copy of `xs`.
pub fn sorted(xs: &[f64]) -> Vec<f64> {
    let mut v = xs.to_vec();
    sort(&mut v);
    v
}

/// The nearest-rank q-quantile (`q` in 0..=1, e.g. 0.99 for p99) of an ascending sample: the
/// ⌈q·n⌉-th smallest (see the module header). `None` for an empty sample or a `q` outside
/// 0..=1 (or NaN). The caller sorts (see [`sort`]); an unsorted slice gives a wrong answer, not
/// a panic.
pub fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() || !(0.0..=1.0).contains(&q) {
        return None;
    }
    let n = sorted.len();
    let rank = (q * n as f64).ceil() as usize; // 1-based; 0 only for q = 0
    Some(sorted[rank.clamp(1, n) - 1])
}

/// [`percentile`] of an unsorted sample (a sorted copy is made: O(n log n), n floats).
pub fn percentile_of(xs: &[f64], q: f64) -> Option<f64> {
    percentile(&sorted(xs), q)
}

/// Arithmetic mean; `None` for an empty sample.
pub fn mean(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() {
        None
    } else {
        Some(xs.iter().sum::<f64>() / xs.len() as f64)
    }
}

/// Count, mean, sample standard deviation, min and max of a sample.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    pub n: usize,
    pub mean: f64,
    /// Sample standard deviation (n − 1 in the denominator); 0 for one sample.
    pub sd: f64,
    pub min: f64,
    pub max: f64,
}

/// The [`Spread`] of a sample; `None` when it is empty.
pub fn spread(xs: &[f64]) -> Option<Spread> {
    let m = mean(xs)?;
    let n = xs.len();
    let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if min == max {
        // Identical values: exactly that value and no spread (the summed mean could be off
        // in the last bit).
        return Some(Spread {
            n,
            mean: min,
            sd: 0.0,
            min,
            max,
        });
    }
    let var = if n > 1 {
        xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1) as f64
    } else {
        0.0
    };
    Some(Spread {
        n,
        mean: m,
        sd: var.sqrt(),
        min,
        max,
    })
}

/// A mean with its 95% Student t interval across runs, and the runs' range.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub n: usize,
    pub mean: f64,
    /// t(0.975, n−1)·s/√n; `None` with a single run (no interval can be given).
    pub half_width: Option<f64>,
    pub sd: f64,
    pub min: f64,
    pub max: f64,
}

impl Interval {
    /// Lower end of the 95% interval (the mean when there is no interval).
    pub fn lo(&self) -> f64 {
        self.mean - self.half_width.unwrap_or(0.0)
    }
    /// Upper end of the 95% interval (the mean when there is no interval).
    pub fn hi(&self) -> f64 {
        self.mean + self.half_width.unwrap_or(0.0)
    }
}

/// Mean and 95% interval of a sample of per-run values (see the module header); `None` when
/// the sample is empty or holds a non-finite value.
pub fn mean_ci95(xs: &[f64]) -> Option<Interval> {
    if xs.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let s = spread(xs)?;
    let half_width =
        (s.n > 1).then(|| student_t_975((s.n - 1) as u64) * s.sd / (s.n as f64).sqrt());
    Some(Interval {
        n: s.n,
        mean: s.mean,
        half_width,
        sd: s.sd,
        min: s.min,
        max: s.max,
    })
}

/// P(|T| < t) for Student's t with `df` ≥ 1 degrees of freedom (A&S 26.7.3 odd ν, 26.7.4 even
/// ν; a series of ⌈ν/2⌉ terms).
pub fn student_t_two_sided(t: f64, df: u64) -> f64 {
    let nu = df.max(1) as f64;
    let theta = (t.abs() / nu.sqrt()).atan();
    let (s, c2) = (theta.sin(), theta.cos().powi(2));
    if df % 2 == 1 {
        // (2/π)[θ + sinθ cosθ (1 + 2/3 cos²θ + 2·4/(3·5) cos⁴θ + … up to cos^(ν−3)θ)]
        let mut sum = 0.0;
        if df > 1 {
            let mut term = 1.0;
            sum = 1.0;
            let mut k = 1u64;
            while 2 * k < df - 1 {
                term *= (2 * k) as f64 / (2 * k + 1) as f64 * c2;
                sum += term;
                k += 1;
            }
            sum *= s * theta.cos();
        }
        2.0 / std::f64::consts::PI * (theta + sum)
    } else {
        // sinθ (1 + 1/2 cos²θ + 1·3/(2·4) cos⁴θ + … up to cos^(ν−2)θ)
        let mut term = 1.0;
        let mut sum = 1.0;
        let mut k = 1u64;
        while 2 * k < df {
            term *= (2 * k - 1) as f64 / (2 * k) as f64 * c2;
            sum += term;
            k += 1;
        }
        s * sum
    }
}

/// The 0.975 quantile of Student's t with `df` ≥ 1 degrees of freedom (the factor of a
/// two-sided 95% interval): 12.706 for 1, 2.776 for 4, → 1.960 as `df` grows.
pub fn student_t_975(df: u64) -> f64 {
    let (mut lo, mut hi) = (0.0f64, 20.0f64); // t(0.975, 1) = 12.706 is the largest
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if student_t_two_sided(mid, df) < 0.95 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentile() {
        let v = sorted(&[5.0, 1.0, 4.0, 2.0, 3.0]);
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&v, 0.2), Some(1.0)); // ⌈0.2·5⌉ = 1st
        assert_eq!(percentile(&v, 0.21), Some(2.0));
        assert_eq!(percentile(&v, 0.5), Some(3.0));
        assert_eq!(percentile(&v, 0.99), Some(5.0));
        assert_eq!(percentile(&v, 1.0), Some(5.0));
        assert_eq!(percentile(&[], 0.5), None);
        assert_eq!(percentile(&v, 1.5), None);
        assert_eq!(percentile(&v, f64::NAN), None);
        // 100 samples 1..=100: p99 is the 99th.
        let h: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&h, 0.99), Some(99.0));
        assert_eq!(percentile(&h, 0.995), Some(100.0));
        // Unsorted input: the same answer from a sorted copy.
        assert_eq!(percentile_of(&[5.0, 1.0, 4.0, 2.0, 3.0], 0.21), Some(2.0));
        assert_eq!(percentile_of(&[], 0.5), None);
    }

    #[test]
    fn spread_and_mean() {
        let s = spread(&[1.0, 2.0, 3.0]).unwrap();
        assert_eq!((s.n, s.mean, s.sd, s.min, s.max), (3, 2.0, 1.0, 1.0, 3.0));
        assert_eq!(spread(&[4.0]).unwrap().sd, 0.0);
        let same = spread(&[0.8, 0.8, 0.8]).unwrap();
        assert_eq!((same.mean, same.sd), (0.8, 0.0));
        assert!(spread(&[]).is_none() && mean(&[]).is_none());
    }

    #[test]
    fn t_quantiles_match_closed_forms_and_tables() {
        // ν = 1 (Cauchy): tan(0.475π); ν = 2: sqrt(2/(4p(1−p)) − 2) with p = 0.975.
        let t1 = (0.475 * std::f64::consts::PI).tan();
        assert!((student_t_975(1) - t1).abs() < 1e-9, "{}", student_t_975(1));
        let t2 = (2.0 / (4.0 * 0.975 * 0.025) - 2.0f64).sqrt();
        assert!((student_t_975(2) - t2).abs() < 1e-9);
        // Printed critical values (4 decimals) for a two-sided 95% level.
        for (df, t) in [
            (3, 3.1824),
            (4, 2.7764),
            (5, 2.5706),
            (9, 2.2622),
            (10, 2.2281),
            (29, 2.0452),
            (30, 2.0423),
            (60, 2.0003),
            (120, 1.9799),
        ] {
            assert!(
                (student_t_975(df) - t).abs() < 6e-5,
                "df {df}: {} vs {t}",
                student_t_975(df)
            );
        }
        assert!((student_t_975(100_000) - 1.95996).abs() < 1e-4);
    }

    #[test]
    fn interval_of_three_runs() {
        // mean 2, sd 1, n 3: half-width = 4.3027 / √3.
        let i = mean_ci95(&[1.0, 2.0, 3.0]).unwrap();
        assert_eq!(i.mean, 2.0);
        let hw = i.half_width.unwrap();
        assert!((hw - 4.302_652_7 / 3f64.sqrt()).abs() < 1e-6, "{hw}");
        assert!((i.lo() - (2.0 - hw)).abs() < 1e-12 && (i.hi() - (2.0 + hw)).abs() < 1e-12);
        let one = mean_ci95(&[7.0]).unwrap();
        assert_eq!((one.half_width, one.lo(), one.hi()), (None, 7.0, 7.0));
        assert!(mean_ci95(&[1.0, f64::NAN]).is_none());
        assert!(mean_ci95(&[]).is_none());
        // Identical runs: zero width.
        assert_eq!(mean_ci95(&[3.0; 4]).unwrap().half_width, Some(0.0));
    }
}

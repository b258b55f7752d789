//! The percentile-web real run's checks: P0's claims measured on the modes' runs (FIFO
//! spread, equal attainment, the `max_hold` floor, the longest gap, class ordering with
//! per-second paired t statistics, P0 Table 14's shape) and the server's steadiness that
//! decides whether a Percentile run is repeated.
//!
//! Source: P0 §4 and Table 14 (the claims); the paired t statistic of per-second differences
//! (Student, "The probable error of a mean", Biometrika 6(1), 1908).
//! Cost: one pass over each mode's samples per statistic; memory of one value per class and
//! second of the run.

use super::format::fmt_list;
use super::run::ModeRun;
use super::*;
use netsched_report::{Check, Cmp};

/// max/min − 1 of positive values: how far apart the largest and the smallest are, relative
/// to the smallest (0 when all are equal; infinite when one is 0). Not `stats::spread` (an
/// interval of a mean).
pub fn relative_range(v: &[f64]) -> f64 {
    let max = v.iter().cloned().fold(f64::MIN, f64::max);
    let min = v.iter().cloned().fold(f64::MAX, f64::min);
    if min > 0.0 {
        max / min - 1.0
    } else {
        f64::INFINITY
    }
}

/// Per class: the longest time (s) without a response — from the start to the first, between
/// two, and from the last to the end of the load. A starved class shows a gap as long as the run.
pub fn longest_gap_s(run: &ModeRun) -> Vec<f64> {
    let n = run.completed.len();
    let mut last = vec![0u64; n];
    let mut gap = vec![0u64; n];
    for s in &run.load.samples {
        gap[s.class] = gap[s.class].max(s.done_ns.saturating_sub(last[s.class]));
        last[s.class] = s.done_ns;
    }
    let end = run.load.elapsed.as_nanos() as u64;
    (0..n)
        .map(|k| gap[k].max(end.saturating_sub(last[k])) as f64 / 1e9)
        .collect()
}

/// Per class, per second of the load (at least one): the summed response time (ms) and the
/// number of the responses completed in that second.
pub fn per_second_sums(run: &ModeRun) -> (Vec<Vec<f64>>, Vec<Vec<u64>>) {
    let n = run.completed.len();
    let secs = (run.load.elapsed.as_secs_f64().ceil() as usize).clamp(1, 100_000);
    let mut sum = vec![vec![0f64; secs]; n];
    let mut cnt = vec![vec![0u64; secs]; n];
    for s in &run.load.samples {
        let b = ((s.done_ns / 1_000_000_000) as usize).min(secs - 1);
        sum[s.class][b] += s.latency_ns as f64 / 1e6;
        cnt[s.class][b] += 1;
    }
    (sum, cnt)
}

/// Per class, per second of the load: the mean response time (ms) of the responses completed
/// in that second, `None` for a second without one.
pub fn per_second_means(run: &ModeRun) -> Vec<Vec<Option<f64>>> {
    let (sum, cnt) = per_second_sums(run);
    let (n, secs) = (cnt.len(), cnt.first().map_or(0, Vec::len));
    (0..n)
        .map(|k| {
            (0..secs)
                .map(|b| (cnt[k][b] > 0).then(|| sum[k][b] / cnt[k][b] as f64))
                .collect()
        })
        .collect()
}

/// Is class `b` slower than class `a` beyond noise? The paired t statistic of the per-second
/// differences `mean_b − mean_a` over the seconds in which both answered (pairing by second
/// removes what the machine's changing load does to both). Positive: `b` slower. `None` with
/// fewer than 5 such seconds.
pub fn paired_t(per_second: &[Vec<Option<f64>>], a: usize, b: usize) -> Option<f64> {
    let d: Vec<f64> = per_second[a]
        .iter()
        .zip(&per_second[b])
        .filter_map(|(x, y)| Some((*y)? - (*x)?))
        .collect();
    if d.len() < 5 {
        return None;
    }
    let s = netsched_report::stats::spread(&d)?;
    let (n, mean, var) = (d.len() as f64, s.mean, s.sd * s.sd);
    if var <= 0.0 {
        return Some(if mean > 0.0 {
            f64::INFINITY
        } else if mean < 0.0 {
            f64::NEG_INFINITY
        } else {
            0.0
        });
    }
    Some(mean / (var / n).sqrt())
}

/// Claim of the check that no adjacent pair of classes is reversed beyond noise.
pub const CLAIM_NO_PAIR_REVERSED: &str =
    "Percentile: no class is slower than the class below it beyond noise";

/// |t| beyond which a per-second paired difference counts as decided (≈ 0.3% two-sided for
/// independent seconds; seconds of one run are not quite independent, hence 3 rather than 2).
pub const DECIDED_T: f64 = 3.0;

/// Claim of the per-run mean ordering check (a single run decides it only when the classes'
/// means are far apart; see [`checks`]).
pub const CLAIM_MEANS_ORDERED: &str =
    "Percentile orders mean response time by class: C0 < C1 < C2 < C3 < C4 (P0 Table 14)";

/// The floor `max_hold` puts under every class (responses), and its parts: each of the
/// class's `threads` connections has one request at a time, held at most `max_hold` (+ one
/// 10 ms tick of the daemon), then served (the run's mean time inside the server), so in
/// `elapsed` it completes at least `elapsed / (max_hold + tick + server time)` on average.
pub fn max_hold_floor(run: &ModeRun, threads: usize, max_hold: Duration) -> f64 {
    let cycle_s =
        max_hold.as_secs_f64() + 0.010 + (run.status.mean_server_ns as f64 / 1e6).max(0.0) / 1e3;
    threads as f64 * run.load.elapsed.as_secs_f64() / cycle_s
}

/// The `max_hold` a mode ran with on average: fixed, or `max_hold_factor` × the run's mean
/// server time clamped as the daemon clamps it (the daemon follows a recent mean; over the
/// run its bound averages to about this).
pub fn run_max_hold(run: &ModeRun, p: &RealParams) -> Duration {
    match p.max_hold_factor {
        None => p.max_hold,
        Some(k) => {
            let ceiling = p.max_hold.as_secs_f64();
            let floor = (netsched_nfq::config::MAX_HOLD_AUTO_MIN as f64 / 1e9).min(ceiling);
            let s =
                (k * (run.status.mean_server_ns as f64 / 1e6).max(0.0) / 1e3).clamp(floor, ceiling);
            Duration::from_secs_f64(s)
        }
    }
}

/// Start of the claims of P0 Table 14's shape (near-equal N, ordered means, equal attainment),
/// reported per run and decided over `--real --repeat N` (not asserted by the one-run CI test).
pub const CLAIM_TABLE14: &str = "P0 Table 14's shape";

/// Why this engine's report holds the lowest class to half an equal share, not to Table 14's
/// 0.85 as the simulation and `--engine balance` are (docs/papers.md, P0, "The real engines").
pub const TABLE14_NOT_HELD: &str = "not held to Table 14's 0.85 on this engine: 0.66-0.70 of an \
     equal share measured in three full runs, 0.73-0.75 with budget 16, where attainment is no \
     longer equal (docs/papers.md, P0)";

/// P0 Table 14: the fewest N of a class over an equal share of all N (48139 / 56608).
pub fn thesis_fewest_over_equal() -> f64 {
    let min = THESIS_N.iter().copied().min().unwrap_or(0) as f64;
    min / (THESIS_N.iter().sum::<u64>() as f64 / THESIS_N.len() as f64)
}

/// P0 Table 14: spread of the attainments S/(N·P), max/min − 1 (0.8%).
pub fn thesis_attainment_spread() -> f64 {
    let att: Vec<f64> = (0..5)
        .map(|k| THESIS_S[k] as f64 / (THESIS_N[k] as f64 * THESIS_P[k] as f64 / 100.0))
        .collect();
    relative_range(&att)
}

/// The server's steadiness during a mode: the total responses of the slowest 5 s window
/// divided by the fastest's (whole windows only; 1 for a run shorter than two windows). A
/// server whose speed the shared machine changed by 2× shows < 0.5.
pub fn steadiness(run: &ModeRun) -> f64 {
    const W: u64 = 5_000_000_000;
    let whole = (run.load.elapsed.as_nanos() as u64 / W) as usize;
    if whole < 2 {
        return 1.0;
    }
    let mut count = vec![0u64; whole];
    for s in &run.load.samples {
        if let Some(c) = count.get_mut((s.done_ns / W) as usize) {
            *c += 1;
        }
    }
    let max = count.iter().copied().max().unwrap_or(0);
    let min = count.iter().copied().min().unwrap_or(0);
    if max == 0 {
        0.0
    } else {
        min as f64 / max as f64
    }
}

/// Below this [`steadiness`] a Percentile run is repeated (up to `attempts`).
pub const MIN_STEADINESS: f64 = 0.5;

/// Every mode's checks (P0's claims, measured). Each numeric claim is a `value op threshold`
/// ([`Check::measured`]) so repeated runs decide it on the interval of `value`.
///
/// What one run can decide, and what it cannot: the FIFO spread, the attainment spread, the
/// `max_hold` floor, the longest gap and "C0 faster than C4" hold with a wide
/// margin on a loaded 2-core machine (docs/testing.md). Whether two *adjacent* classes' means
/// are ordered is not something the P0 rule enforces — it equalises attainment, which orders
/// each class's share of answers within the deadline (`S/N = a·P`), not its mean — and one
/// run cannot decide it: adjacent means have come within 3%, and the rule can freeze a class
/// whose attainment is ahead for 10+ s (only `max_hold` answers it, at ≈ 440 ms each), which
/// reverses that class's mean against the next one's beyond any noise (measured: C1 75.9 ms
/// vs C2 44.3 ms, t = −5.2, attainments still within 2.2%). So the ordering is reported per
/// run — the per-run claim [`CLAIM_MEANS_ORDERED`] and [`CLAIM_NO_PAIR_REVERSED`] with
/// per-second paired t statistics ([`paired_t`]) — and decided over repeated runs.
pub fn checks(runs: &[ModeRun], p: &RealParams) -> Vec<Check> {
    let mut out = vec![answered_check(runs)];
    if let Some(f) = runs.iter().find(|r| r.mode == DisciplineKind::Fifo) {
        out.push(fifo_check(f));
    }
    if let Some(pr) = runs.iter().find(|r| r.mode == DisciplineKind::Percentile) {
        out.extend(percentile_checks(pr, p));
    }
    if let Some(s) = runs.iter().find(|r| r.mode == DisciplineKind::Strict) {
        out.push(strict_check(s));
    }
    out
}

/// Every request sent got its full response, in every mode.
fn answered_check(runs: &[ModeRun]) -> Check {
    let all_answered = runs
        .iter()
        .all(|r| r.load.sent == r.load.received && r.load.errors.is_empty());
    Check::new(
        "every request sent got its full response, in every mode",
        all_answered && !runs.is_empty(),
        runs.iter()
            .map(|r| {
                format!(
                    "{}: sent {} received {} errors {}",
                    r.mode.as_str(),
                    r.load.sent.iter().sum::<u64>(),
                    r.load.received.iter().sum::<u64>(),
                    r.load.errors.len()
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
    )
}

/// FIFO favours no class: its class means within 15% of each other.
fn fifo_check(f: &ModeRun) -> Check {
    let s = relative_range(&f.mean_ms);
    Check::measured(
        "FIFO favours no class: mean response times within 15% of each other (max/min − 1)",
        s,
        Cmp::Le,
        0.15,
        format!(
            "means (ms) {}; max/min − 1 = {:.1}%",
            fmt_list(&f.mean_ms, 2),
            s * 100.0
        ),
    )
}

/// The Percentile run's checks: the server's steadiness, the class ordering, equal
/// attainment, no starvation, and P0 Table 14's shape.
fn percentile_checks(pr: &ModeRun, p: &RealParams) -> Vec<Check> {
    let mut out = Vec::new();
    out.push(Check::measured(
        "the server kept its speed during the Percentile run, so the run measures the rule rather than the shared machine (slowest 5 s window / fastest)",
        steadiness(pr),
        Cmp::Ge,
        MIN_STEADINESS,
        format!(
            "slowest 5 s window / fastest = {:.2} in run {} of at most {} (a run below {MIN_STEADINESS} is repeated)",
            steadiness(pr),
            pr.attempt,
            p.attempts
        ),
    ));
    let min_ratio = ordering_checks(pr, &mut out);
    let att: Vec<f64> = pr.status.classes.iter().map(|c| c.attainment).collect();
    let s = relative_range(&att);
    out.push(Check::measured(
        "Percentile leaves no class behind the others: final attainments S/(N·P) within 10% of each other, max/min − 1 (P0 Table 14: 0.755–0.761)",
        s,
        Cmp::Le,
        0.10,
        format!(
            "S/(N·P) {}; max/min − 1 = {:.1}%; deadline {}{}",
            fmt_list(&att, 3),
            s * 100.0,
            pr.status.deadline_mode,
            pr.status
                .deadline_quantile
                .map(|q| format!(" (q = {q:.3})"))
                .unwrap_or_default()
        ),
    ));
    out.extend(starvation_checks(pr, p));
    out.extend(table14_checks(pr, min_ratio, s));
    out
}

/// The class ordering of the Percentile run: adjacent means ordered, no adjacent pair
/// reversed beyond the per-second paired t, the top class faster than the lowest. Returns
/// the smallest ratio of adjacent means (Table 14's ordering check uses it too).
fn ordering_checks(pr: &ModeRun, out: &mut Vec<Check>) -> f64 {
    let n = pr.mean_ms.len();
    let ratios: Vec<f64> = pr.mean_ms.windows(2).map(|w| w[1] / w[0]).collect();
    let min_ratio = ratios.iter().cloned().fold(f64::INFINITY, f64::min);
    out.push(Check::measured(
        CLAIM_MEANS_ORDERED.to_string() + " — smallest ratio of adjacent means",
        min_ratio,
        Cmp::Gt,
        1.0,
        format!(
            "means (ms) {}; adjacent ratios {}",
            fmt_list(&pr.mean_ms, 3),
            fmt_list(&ratios, 3)
        ),
    ));
    let per_sec = per_second_means(pr);
    let ts: Vec<f64> = (0..n.saturating_sub(1))
        .map(|k| paired_t(&per_sec, k, k + 1).unwrap_or(f64::NAN))
        .collect();
    let min_t = ts.iter().cloned().fold(f64::INFINITY, f64::min);
    out.push(Check::measured(
        format!(
            "{CLAIM_NO_PAIR_REVERSED} (smallest per-second paired t of adjacent classes > −{DECIDED_T})"
        ),
        if ts.iter().any(|t| t.is_nan()) { f64::NAN } else { min_t },
        Cmp::Gt,
        -DECIDED_T,
        format!("t (C(k+1) − Ck) {}", fmt_list(&ts, 1)),
    ));
    if n >= 2 {
        // With attainments equal at level a, a fraction 0.9·a of C0's answers and only
        // 0.5·a of C4's fall within the deadline: C4's median sits near C0's 90th
        // percentile, so its mean is well above C0's (measured 1.9–5.4×). A per-second t
        // is no good here: C4's per-second means swing with a few max_hold releases
        // (t = 2.1 at a 3.7× ratio was measured).
        out.push(Check::measured(
            format!(
                "Percentile serves the top class faster than the lowest: mean C{} / mean C0",
                n - 1
            ),
            pr.mean_ms[n - 1] / pr.mean_ms[0],
            Cmp::Gt,
            1.0,
            format!(
                "means C0 {:.3} ms, C{} {:.3} ms; t {:.1}",
                pr.mean_ms[0],
                n - 1,
                pr.mean_ms[n - 1],
                paired_t(&per_sec, 0, n - 1).unwrap_or(f64::NAN)
            ),
        ));
    }
    min_ratio
}

/// Percentile starves no class: the `max_hold` floor on every class's responses and the
/// longest gap without a response.
fn starvation_checks(pr: &ModeRun, p: &RealParams) -> Vec<Check> {
    let n = pr.mean_ms.len();
    let mut out = Vec::new();
    let max_hold = run_max_hold(pr, p);
    let floor = max_hold_floor(pr, p.threads_per_client, max_hold);
    let total: u64 = pr.completed.iter().sum();
    let fair = total as f64 / n.max(1) as f64;
    let min = pr.completed.iter().copied().min().unwrap_or(0);
    out.push(Check::measured(
        format!(
            "Percentile starves no class: max_hold ({}) bounds every wait, so every class completes at least half of {} connections × run time / (max_hold + 10 ms tick + mean server time) — fewest responses / that floor",
            match p.max_hold_factor {
                Some(k) => format!(
                    "{k} × the server time ≈ {:.0} ms",
                    max_hold.as_secs_f64() * 1e3
                ),
                None => netsched_core::units::format_duration(max_hold.as_nanos() as u64),
            },
            p.threads_per_client
        ),
        min as f64 / floor.max(1e-9),
        Cmp::Ge,
        0.5,
        format!(
            "responses per class {} (fewest = {:.0}% of an equal share); floor {:.0} (mean server time {:.1} ms, {:.1} s); requests released by max_hold {}",
            pr.completed.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(" / "),
            100.0 * min as f64 / fair.max(1e-9),
            floor,
            pr.status.mean_server_ns as f64 / 1e6,
            pr.load.elapsed.as_secs_f64(),
            pr.status.counters.max_hold_releases
        ),
    ));
    let gaps = longest_gap_s(pr);
    let max_gap = gaps.iter().cloned().fold(0.0, f64::max);
    out.push(Check::measured(
        "Percentile starves no class: no class goes 3 s without a response (longest gap, s)",
        max_gap,
        Cmp::Le,
        3.0,
        format!("longest gap per class (s) {}", fmt_list(&gaps, 2)),
    ));
    out
}

/// Strict priority serves C0 fastest and C4 slowest (the starvation P0 avoids).
fn strict_check(s: &ModeRun) -> Check {
    let (first, last) = (
        s.mean_ms.first().copied().unwrap_or(f64::NAN),
        s.mean_ms.last().copied().unwrap_or(f64::NAN),
    );
    Check::measured(
    "strict priority serves C0 fastest and C4 slowest (the starvation P0 avoids): mean C4 / mean C0",
    last / first,
    Cmp::Gt,
    1.0,
    format!(
        "means (ms) {}; responses {}",
        fmt_list(&s.mean_ms, 3),
        s.completed
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(" / ")
    ),
)
}

/// P0 Table 14's shape as checks: near-equal N (every class ≥ 50% of an equal share; Table 14
/// 0.85), means ordered (the smallest adjacent ratio, `min_ratio`, > 1 — the same value as
/// [`CLAIM_MEANS_ORDERED`]) and equal attainment (spread `att_spread` ≤ 5%; Table 14 0.8%),
/// and whether all three held at once in this run. One run decides none of them with a margin
/// (a frozen class reverses a pair; the equal share moves with the server's speed): they are
/// reported per run and decided over `--real --repeat N`.
pub fn table14_checks(pr: &ModeRun, min_ratio: f64, att_spread: f64) -> Vec<Check> {
    let ns: Vec<u64> = pr.status.classes.iter().map(|c| c.n).collect();
    let equal = ns.iter().sum::<u64>() as f64 / ns.len().max(1) as f64;
    let fewest = ns.iter().copied().min().unwrap_or(0) as f64 / equal.max(1e-9);
    let n_list = ns
        .iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(" / ");
    let near_equal = Check::measured(
        format!(
            "{CLAIM_TABLE14}, 1 of 3: every class gets at least half an equal share of requests — fewest N / (Σ N / classes) (Table 14: {:.2})",
            thesis_fewest_over_equal()
        ),
        fewest,
        Cmp::Ge,
        0.5,
        format!(
            "N per class {n_list}; fewest / equal share = {fewest:.2}; {TABLE14_NOT_HELD}"
        ),
    );
    let ordered = Check::measured(
        format!(
            "{CLAIM_TABLE14}, 2 of 3: mean response times ordered C0 < … < C{} — smallest ratio of adjacent means",
            pr.mean_ms.len().saturating_sub(1)
        ),
        min_ratio,
        Cmp::Gt,
        1.0,
        format!("means (ms) {}", fmt_list(&pr.mean_ms, 2)),
    );
    let equal_att = Check::measured(
        format!(
            "{CLAIM_TABLE14}, 3 of 3: attainments S/(N·P) within 5% of each other, max/min − 1 (Table 14: {:.1}%)",
            100.0 * thesis_attainment_spread()
        ),
        att_spread,
        Cmp::Le,
        0.05,
        format!("max/min − 1 = {:.2}%", 100.0 * att_spread),
    );
    let all = near_equal.passed && ordered.passed && equal_att.passed;
    let both = Check::new(
        format!("{CLAIM_TABLE14}: all three at once in this run"),
        all,
        format!(
            "fewest / equal share {fewest:.2} (≥ 0.5): {}; smallest adjacent mean ratio {min_ratio:.3} (> 1): {}; attainment spread {:.2}% (≤ 5%): {}",
            near_equal.passed,
            ordered.passed,
            100.0 * att_spread,
            equal_att.passed
        ),
    );
    vec![near_equal, ordered, equal_att, both]
}

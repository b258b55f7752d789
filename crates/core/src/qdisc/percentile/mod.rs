//! Percentile scheduler — one FIFO per client class, the class furthest below its percentile
//! target is served next.
//!
//! Source: P0, "Percentile network scheduler for differentiated service", Hansung Univ.
//! master's thesis, 2006 (P0 in `docs/papers.md`), §2.3.1 (the formula), §3.2.3
//! (`struct PercentileClass`, `percentile_sched`, `per_fail_check`), §3.2.5 (control API),
//! Table 14 (final counters and priorities).
//!
//! ## What it does
//! Class `i` keeps `N_i` (requests enqueued, `per_input_skb`), `S_i` (requests answered within
//! the deadline, `per_fail_check`), `fail_i` and a target `P_i` in percent. Its attainment is
//! `Pr(i) = S_i / (N_i · P_i)` (P0 §2.3.1); the non-empty class with the **lowest** attainment
//! is served next, FIFO inside a class. Ties go to the higher class (lower index; class 0 is
//! the most valuable, e.g. P = 90 in the thesis). A class that has never succeeded (`S = 0`)
//! has attainment 0 and is therefore served first. Success is reported back by the engine
//! with [`Feedback::Completed`]: success iff `latency <= deadline`. The deadline is fixed, or
//! `auto` = the running mean response time over all completions (the thesis uses "the mean
//! processing time" as the success criterion, P0 §3.2.2 and §4: ≈ 0.004 s).
//! `auto_quantile` (beyond the thesis) = the running quantile of all response times at the
//! request-weighted mean target; see below.
//!
//! ## Beyond the thesis: `auto_quantile` deadline
//! The rule equalises attainments, but the *level* they meet at is set by the deadline: if
//! more than `q = Σ N_i·P_i / Σ N_i` of all responses can be on time, every class can
//! over-achieve, and the class served first is the first to reach its ceiling `1/P` — a
//! work-conserving rule then lets the others overshoot it (measured on the real testbed with
//! the running mean: class 0 capped at 1.11, the others ≈ 1.2; docs/percentile-web-real.md,
//! "Which deadline"). With a skewed response-time distribution the running mean is such a
//! deadline (≈ 80% of responses under it there). `AutoQuantile` takes instead the running `q`-quantile of all
//! response times, `q` recomputed at each completion from the decision counters: the
//! deadline at which the server as a whole exactly meets the combined goal, so the rule can
//! bring every class to attainment ≈ 1 at once. The response times go into a
//! [`LatencyQuantile`] (log buckets, ≤ 1.6% resolution, 17.5 KiB, allocated only in this
//! mode): O(1) per completion plus the cursor's move, no clock.
//!
//! ## Integer priority of the thesis
//! The thesis inverts `Pr` into an integer "priority" where higher is served first (P0 §3.2.3,
//! `percentile_sched`), but prints no code. The brief reads Table 14's row as `N·P/S × 10`;
//! truncating that gives 1314 for Class4, not the printed 1315, and rounding gives 1325 for
//! Class0, not 1324. The arithmetic that reproduces all five printed values (1324 1314 1314
//! 1314 1315) computes `Pr` itself first, as the thesis describes, in fixed point — per mille
//! of the target, rounded — and then inverts it:
//! `pr = round(S · 100_000 / (N · P))`, `priority = 1_000_000 / pr` (integer division); see
//! [`thesis_priority`] and the test `table14_priorities_reproduced`. We report this number in
//! the status; the scheduling decision itself compares exact attainments (no rounding).
//!
//! ## Beyond the thesis: memory
//! The thesis's counters never forget, so after a load change the history dominates for a
//! long time (test `decayed_memory_adapts_after_load_change`). `memory` selects:
//! - `forever` — the thesis;
//! - `{ window = n }` — the last `n` enqueued requests of the class (a ring of outcomes;
//!   completions resolve the oldest pending entry, which is exact while a class completes in
//!   FIFO order);
//! - `{ half_life_ms = x }` — `N`, `S` and `fail` decay by `2^(-Δt/half_life)`, applied lazily
//!   at each event of the class. Decay multiplies `N` and `S` by the same factor, so pending
//!   decay never changes an attainment and selection needs no clock arithmetic.
//!
//! ## Beyond the thesis: engines that own the slots
//! The thesis queues every request. An engine that serves a request at once when a slot is
//! free (the load balancer's maxconn queue) still counts it in N with
//! [`PercentileQueue::arrive_unqueued`], so a class's attainment covers all its requests.
//! A request that gives up while queued (timed out, client gone) is taken back with
//! [`PercentileQueue::withdraw`] and counted a failure with
//! [`PercentileQueue::report_miss`]. A class may be judged against its own fixed deadline
//! ([`PercentileQueue::set_class_deadline`]); the others keep the shared one.
//!
//! ## Beyond the thesis: a bound on waiting
//! [`PercentileQueue::set_max_hold`] gives a class a [`MaxHold`]: once a class's oldest
//! request has waited that long, the overdue head that arrived first leaves before P0's rule
//! is asked (see `max_hold.rs`). Off by default: the thesis's rule alone.
//!
//! ## Control API (daemons call these at run time; P0 Table 9)
//! `perSetPvalue` → [`PercentileQueue::set_percentile`], `perSetNvalue` →
//! [`PercentileQueue::set_deadline`], `perReset` → [`PercentileQueue::reset_counters`]
//! (counters and the auto-deadline mean; the IP table lives in the classifier),
//! `perGetStatus` → [`PercentileQueue::class_status`].
//!
//! ## Cost and memory
//! Enqueue and feedback O(1). Dequeue scans the non-empty classes (a `u64` bitmask, ≤ 64
//! classes) comparing attainments by cross-multiplication `S_i·(N_j·P_j) < S_j·(N_i·P_i)` in
//! `u128` — two multiplications per class, no division. The result is cached: an event on
//! class `c` only needs one comparison of `c` against the cached choice, unless `c` *is* the
//! cached choice and its attainment may have risen (a success, a target change) or it ran
//! empty — then the next dequeue rescans. Debug builds check the cache against a full scan on
//! every dequeue. Counters are kept below 2^40 (all of
//! a class's counters are halved together when `N` reaches it, which keeps ratios), so the
//! products fit easily. Memory: the queued items, plus one byte per window slot with
//! `window`, plus the 17.5 KiB histogram with `auto_quantile` (feedback then costs one
//! bucket increment and the quantile cursor's move — typically zero or one bucket — and two
//! sums over the classes for `q`).
//!
//! ## Files
//! - `judge.rs`: [`PercentileJudge`], the per-class `N`, `S`, `fail` and the deadline a
//!   completion is judged against, shared by every engine;
//! - `max_hold.rs`: [`MaxHold`], the bound on waiting;
//! - `queue.rs`: [`PercentileQueue`], the discipline (per-class FIFOs, the selection and its
//!   cache, the memories);
//! - this file: the configuration (deadline, memory) and the thesis's integer priority.

mod judge;
mod max_hold;
mod queue;

pub use super::latency_quantile::LatencyQuantile;
pub use judge::{auto_quantile_q, JudgeCounts, PercentileJudge};
pub use max_hold::MaxHold;
pub use queue::{PercentileQueue, PERCENTILE_MAX_CLASSES};

use super::PercentileConfigError;
use crate::time::Duration;
use serde::{Deserialize, Serialize};

/// How long the counters remember (serde: `"forever"`, `{ window = n }`,
/// `{ half_life_ms = x }`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum PercentileMemory {
    /// Cumulative counters, as in the thesis.
    #[default]
    Forever,
    /// The last `n` enqueued requests of each class.
    Window(u64),
    /// Exponentially decayed counters with this half-life in milliseconds.
    HalfLifeMs(f64),
}

/// The success criterion (serde: `"auto"`, `"auto_quantile"`, or a duration in the units
/// grammar, `"4ms"`; the older forms `{ ms = 4.0 }` and `{ ns = 4000000 }` are still read).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Default)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum PercentileDeadline {
    /// The running mean response time of all completions so far (P0 §3.2.2).
    #[default]
    Auto,
    /// Beyond the thesis: the running `q`-quantile of all response times so far, with `q` the
    /// request-weighted mean target `Σ N_i·P_i / Σ N_i` — the deadline at which the server as
    /// a whole exactly meets the combined goal (see the module header, [`LatencyQuantile`]).
    AutoQuantile,
    /// A fixed deadline in milliseconds.
    Ms(f64),
    /// A fixed deadline in nanoseconds.
    Ns(u64),
}

impl<'de> Deserialize<'de> for PercentileDeadline {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(DeadlineVisitor)
    }
}

struct DeadlineVisitor;

impl<'de> serde::de::Visitor<'de> for DeadlineVisitor {
    type Value = PercentileDeadline;

    fn expecting(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
        f.write_str("\"auto\", \"auto_quantile\" or a duration such as \"4ms\"")
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Self::Value, E> {
        match s.trim() {
            "auto" => Ok(PercentileDeadline::Auto),
            "auto_quantile" => Ok(PercentileDeadline::AutoQuantile),
            t => crate::units::parse_duration(t)
                .map(PercentileDeadline::Ns)
                .map_err(|e| {
                    E::custom(format!(
                        "deadline {s:?}: {e}; or \"auto\", \"auto_quantile\""
                    ))
                }),
        }
    }

    /// The older `{ ms = 4.0 }` / `{ ns = 4000000 }` forms.
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
        use serde::de::Error;
        let key: String = m
            .next_key()?
            .ok_or_else(|| A::Error::custom("deadline: empty table"))?;
        let v = match key.as_str() {
            "ms" => PercentileDeadline::Ms(m.next_value()?),
            "ns" => PercentileDeadline::Ns(m.next_value()?),
            other => {
                return Err(A::Error::unknown_variant(
                    other,
                    &["auto", "auto_quantile", "ms", "ns"],
                ))
            }
        };
        if m.next_key::<String>()?.is_some() {
            return Err(A::Error::custom("deadline: one key (ms or ns)"));
        }
        Ok(v)
    }
}

impl PercentileDeadline {
    /// Check the value; `Err` names the field.
    pub fn validate(&self) -> Result<(), PercentileConfigError> {
        match *self {
            PercentileDeadline::Ms(ms) if !(ms.is_finite() && ms > 0.0) => {
                Err(PercentileConfigError::DeadlineMs { ms })
            }
            PercentileDeadline::Ns(0) => Err(PercentileConfigError::DeadlineNsZero),
            _ => Ok(()),
        }
    }
    fn fixed_ns(&self) -> Option<Duration> {
        match *self {
            PercentileDeadline::Auto | PercentileDeadline::AutoQuantile => None,
            PercentileDeadline::Ms(ms) => Some((ms * 1e6).round() as Duration),
            PercentileDeadline::Ns(ns) => Some(ns),
        }
    }
}

impl PercentileMemory {
    /// Check the value; `Err` names the field.
    pub fn validate(&self) -> Result<(), PercentileConfigError> {
        match *self {
            PercentileMemory::Window(0) => Err(PercentileConfigError::MemoryWindowZero),
            PercentileMemory::Window(n) if n > u32::MAX as u64 => {
                Err(PercentileConfigError::MemoryWindowTooLarge {
                    window: n,
                    max: u32::MAX as u64,
                })
            }
            PercentileMemory::HalfLifeMs(h) if !(h.is_finite() && h > 0.0) => {
                Err(PercentileConfigError::MemoryHalfLife { half_life_ms: h })
            }
            _ => Ok(()),
        }
    }
}

/// The thesis's integer priority (higher = served first), reconstructed so that it
/// reproduces P0 Table 14: `pr = round(S·100000/(N·P))` (attainment in per mille of the
/// target), `priority = 1_000_000 / pr`. `None` when it is undefined (`N = 0`, or `pr`
/// rounds to 0, i.e. the class has (almost) never succeeded — it is served first anyway).
pub fn thesis_priority(n: u64, s: u64, p: u32) -> Option<u64> {
    let np = n as u128 * p as u128;
    if np == 0 {
        return None;
    }
    let pr = (s as u128 * 100_000 + np / 2) / np;
    if pr == 0 {
        return None;
    }
    Some((1_000_000 / pr) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qdisc::fifo::TestItem;

    /// The serde form used in scenario files, and errors that name the field.
    #[test]
    fn config_round_trip_and_errors() {
        use crate::qdisc::QdiscConfig;
        let cfg: QdiscConfig = serde_json::from_str(
            r#"{"kind":"percentile","percentiles":[90,80,70,60,50],"deadline":{"ms":4.0},
                "memory":{"half_life_ms":2000.0}}"#,
        )
        .unwrap();
        let q = cfg.build::<TestItem>().unwrap();
        assert_eq!(q.class_status().len(), 5);
        let cfg: QdiscConfig = serde_json::from_str(
            r#"{"kind":"percentile","percentiles":[90],"memory":"forever","deadline":"auto"}"#,
        )
        .unwrap();
        assert!(cfg.build::<TestItem>().is_ok());
        // The units grammar, and the older table form, give the same deadline.
        let d: PercentileDeadline = serde_json::from_str(r#""4ms""#).unwrap();
        assert_eq!(d.fixed_ns(), Some(4_000_000));
        let d: PercentileDeadline = serde_json::from_str(r#"{"ms":4.0}"#).unwrap();
        assert_eq!(d.fixed_ns(), Some(4_000_000));
        let e = serde_json::from_str::<PercentileDeadline>(r#""4""#).unwrap_err();
        assert!(e.to_string().contains("\"4\""), "{e}");
        let e = serde_json::from_str::<PercentileDeadline>(r#"{"s":4}"#).unwrap_err();
        assert!(e.to_string().contains("`s`"), "{e}");
        let cfg: QdiscConfig = serde_json::from_str(
            r#"{"kind":"percentile","percentiles":[90],"memory":{"window":5}}"#,
        )
        .unwrap();
        assert!(cfg.build::<TestItem>().is_ok());
        let cfg: QdiscConfig = serde_json::from_str(
            r#"{"kind":"percentile","percentiles":[90,50],"deadline":"auto_quantile"}"#,
        )
        .unwrap();
        assert_eq!(
            cfg.build::<TestItem>().unwrap().class_status().len(),
            2,
            "auto_quantile parses"
        );
        let bad: Result<QdiscConfig, _> = serde_json::from_str(
            r#"{"kind":"percentile","percentiles":[90],"deadline":"auto_quantil"}"#,
        );
        assert!(bad.unwrap_err().to_string().contains("auto_quantil"));
        let bad: Result<QdiscConfig, _> =
            serde_json::from_str(r#"{"kind":"percentile","percentiles":[90],"percentile":[1]}"#);
        assert!(bad.unwrap_err().to_string().contains("percentile"));
        let cfg: QdiscConfig =
            serde_json::from_str(r#"{"kind":"percentile","percentiles":[90, 0]}"#).unwrap();
        assert!(cfg
            .build::<TestItem>()
            .unwrap_err()
            .to_string()
            .contains("percentiles[1]"));
        let cfg: QdiscConfig = serde_json::from_str(
            r#"{"kind":"percentile","percentiles":[90],"memory":{"half_life_ms":-1}}"#,
        )
        .unwrap();
        assert!(cfg
            .build::<TestItem>()
            .unwrap_err()
            .to_string()
            .contains("memory.half_life_ms"));
    }

    /// The typed errors print the messages users saw when they were text: field, rule, value.
    #[test]
    fn config_error_messages_name_field_rule_and_value() {
        use PercentileConfigError as E;
        let cases: [(E, &str); 11] = [
            (
                E::DeadlineMs { ms: -1.0 },
                "deadline.ms: must be a positive number, got -1",
            ),
            (E::DeadlineNsZero, "deadline.ns: must be at least 1"),
            (E::MemoryWindowZero, "memory.window: must be at least 1"),
            (
                E::MemoryWindowTooLarge {
                    window: 5_000_000_000,
                    max: u32::MAX as u64,
                },
                "memory.window: at most 4294967295, got 5000000000",
            ),
            (
                E::MemoryHalfLife { half_life_ms: 0.0 },
                "memory.half_life_ms: must be a positive number, got 0",
            ),
            (E::NoClasses, "percentiles: at least one class is needed"),
            (
                E::TooManyClasses { count: 65, max: 64 },
                "percentiles: at most 64 classes, got 65",
            ),
            (
                E::PercentileOutOfRange {
                    index: Some(2),
                    percent: 0,
                },
                "percentiles[2]: must be in 1..=100, got 0",
            ),
            (
                E::PercentileOutOfRange {
                    index: None,
                    percent: 170,
                },
                "percentile: must be in 1..=100, got 170",
            ),
            (E::LimitPacketsZero, "queue_limit: must be at least 1"),
            (E::UnknownClass { class: 9 }, "class: 9 is not configured"),
        ];
        for (e, text) in cases {
            assert_eq!(e.to_string(), text);
            assert_eq!(crate::qdisc::QdiscConfigError::from(e).to_string(), text);
        }
    }
}

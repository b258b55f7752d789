//! The lab's metrics under the JSON outputs' unit rule (docs/cli.md, "JSON outputs";
//! `netsched_util::json_units`). An experiment computes in the unit its paper uses and names
//! each metric with it as a suffix (`p99_ms`, `idle_pct`, `up_kbps`): its checks, comparisons
//! and `report.md` read those numbers. What the lab writes as JSON (`results.json` of a run
//! and of an aggregate) is renamed and converted here, on the way out, by the suffix:
//!
//! | working suffix | written as |
//! |---|---|
//! | `_ms`, `_us`, `_s` (a float) | `_ns`, whole nanoseconds |
//! | `_kbps`, `_kbit` (kbit/s), `_mbps` (Mbit/s) | `_bits_per_s`, whole bits per second |
//! | `_pct` | `_percent` (the same number) |
//! | `X_kbps_per_seed` | `X_per_seed_bits_per_s` |
//! | `ms` (vm-delay's trace windows) | `window_ns` |
//!
//! A name that already follows the rule (`req_per_s`, `cpu_ns`, `sent_bytes`) is left alone,
//! so converting twice changes nothing. [`rule_name`] gives the written name of a working
//! name (a sweep's `--metric p99_ms` still finds `p99_ns`, with a warning).

use netsched_util::json_units::unit_of;
use serde_json::{Map, Value};

/// The conversions: (working suffix, written suffix, factor to the written unit, whether the
/// written value is an integer); longer suffixes first where one ends another
/// (`_kbps_per_seed` before `_s`).
#[rustfmt::skip]
const CONVS: &[(&str, &str, f64, bool)] = &[
    ("_kbps_per_seed", "_per_seed_bits_per_s", 1e3, true),
    ("_kbps", "_bits_per_s", 1e3, true),
    ("_kbit", "_bits_per_s", 1e3, true),
    ("_mbps", "_bits_per_s", 1e6, true),
    ("_pct", "_percent", 1.0, false),
    ("_ms", "_ns", 1e6, true),
    ("_us", "_ns", 1e3, true),
    ("_s", "_ns", 1e9, true),
];

/// Whole working names with their written name (no suffix to convert by).
const WHOLE: &[(&str, &str, f64)] = &[("ms", "window_ns", 1e6)];

/// How a working name is written: the new name, the factor and whether it is an integer;
/// `None` when the name is written as it is.
fn conversion(name: &str) -> Option<(String, f64, bool)> {
    if let Some((_, to, f)) = WHOLE.iter().find(|(from, _, _)| *from == name) {
        return Some((to.to_string(), *f, true));
    }
    if unit_of(name).is_some() {
        return None;
    }
    CONVS.iter().find_map(|(from, to, factor, integer)| {
        let stem = name.strip_suffix(from).filter(|s| !s.is_empty())?;
        Some((format!("{stem}{to}"), *factor, *integer))
    })
}

/// The name a working metric name is written under (the last part of a dotted path is
/// converted: `upload_tcp.rtt_ms` → `upload_tcp.rtt_ns`); `None` if it is written as it is.
pub fn rule_name(name: &str) -> Option<String> {
    let (head, leaf) = match name.rsplit_once('.') {
        Some((h, l)) => (Some(h), l),
        None => (None, name),
    };
    let (new, _, _) = conversion(leaf)?;
    Some(match head {
        Some(h) => format!("{h}.{new}"),
        None => new,
    })
}

/// One number in the written unit: scaled, whole where the unit is; a non-finite result
/// (none reaches JSON, which has no NaN) is `null`.
fn scale(x: &Value, factor: f64, integer: bool) -> Value {
    match x {
        Value::Number(n) => {
            let Some(v) = n.as_f64().map(|v| v * factor) else {
                return x.clone();
            };
            if !v.is_finite() {
                Value::Null
            } else if integer {
                Value::from(v.round() as i64)
            } else if factor == 1.0 {
                x.clone()
            } else {
                Value::from(v)
            }
        }
        Value::Array(xs) => Value::Array(xs.iter().map(|x| scale(x, factor, integer)).collect()),
        other => other.clone(),
    }
}

/// A run's `metrics` (any depth) with every working name renamed and its numbers converted.
pub fn to_rule(metrics: &Value) -> Value {
    match metrics {
        Value::Object(m) => {
            let mut out = Map::with_capacity(m.len());
            for (k, v) in m {
                match (conversion(k), v) {
                    (Some((new, f, int)), Value::Number(_) | Value::Array(_) | Value::Null)
                        if numeric(v) =>
                    {
                        out.insert(new, scale(v, f, int));
                    }
                    _ => {
                        out.insert(k.clone(), to_rule(v));
                    }
                }
            }
            Value::Object(out)
        }
        Value::Array(xs) => Value::Array(xs.iter().map(to_rule).collect()),
        other => other.clone(),
    }
}

/// A number, `null`, or an array of only those (a series of one metric).
fn numeric(v: &Value) -> bool {
    match v {
        Value::Number(_) | Value::Null => true,
        Value::Array(xs) => xs
            .iter()
            .all(|x| matches!(x, Value::Number(_) | Value::Null)),
        _ => false,
    }
}

/// An aggregate's metrics (dotted path → mean, half-width, sd, min, max over the runs) with
/// each path's last part renamed and every statistic but `n` converted.
pub fn intervals_to_rule(metrics: &Value) -> Value {
    let Value::Object(m) = metrics else {
        return metrics.clone();
    };
    let mut out = Map::with_capacity(m.len());
    for (k, v) in m {
        let leaf = k.rsplit('.').next().unwrap_or(k);
        match (conversion(leaf), v) {
            (Some((_, f, int)), Value::Object(stats)) => {
                let stats = stats
                    .iter()
                    .map(|(s, x)| {
                        let x = if s == "n" {
                            x.clone()
                        } else {
                            scale(x, f, int)
                        };
                        (s.clone(), x)
                    })
                    .collect();
                out.insert(
                    rule_name(k).unwrap_or_else(|| k.clone()),
                    Value::Object(stats),
                );
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use netsched_util::json_units::violations;
    use serde_json::json;

    #[test]
    fn working_units_become_the_rule_s() {
        let m = json!({
            "p99_ms": 12.3456789, "elapsed_us": 1051.8175, "duration_s": 1.5,
            "idle_pct": 3.25, "rate_mbps": 2920.66, "upload_kbps": 750.4, "download_kbit": 1.5,
            "upload_kbps_per_seed": [700.0, 800.5], "mean_ms": [1.0, null],
            "req_per_s": 12.5, "cpu_ns": 7, "sent": 3, "collapsed": "none",
            "classes": [{"mean_response_s": 0.25, "p": 90}],
            "trace": {"window_max": [{"max": 3, "mean": 2.5, "ms": 10}]},
        });
        let r = to_rule(&m);
        assert_eq!(
            r,
            json!({
                "p99_ns": 12_345_679, "elapsed_ns": 1_051_818, "duration_ns": 1_500_000_000_i64,
                "idle_percent": 3.25, "rate_bits_per_s": 2_920_660_000_i64,
                "upload_bits_per_s": 750_400, "download_bits_per_s": 1500,
                "upload_per_seed_bits_per_s": [700_000, 800_500], "mean_ns": [1_000_000, null],
                "req_per_s": 12.5, "cpu_ns": 7, "sent": 3, "collapsed": "none",
                "classes": [{"mean_response_ns": 250_000_000, "p": 90}],
                "trace": {"window_max": [{"max": 3, "mean": 2.5, "window_ns": 10_000_000}]},
            })
        );
        assert_eq!(violations(&r), vec![]);
        assert_eq!(to_rule(&r), r, "converting twice changes nothing");
    }

    #[test]
    fn rule_names_of_working_names() {
        assert_eq!(rule_name("p99_ms").as_deref(), Some("p99_ns"));
        assert_eq!(
            rule_name("a.b.idle_pct").as_deref(),
            Some("a.b.idle_percent")
        );
        assert_eq!(rule_name("req_per_s"), None);
        assert_eq!(rule_name("idle"), None);
        assert_eq!(rule_name("_ms"), None);
    }

    #[test]
    fn an_aggregate_s_statistics_are_converted_but_its_count() {
        let a = json!({
            "lat.p99_ms": {"n": 2, "mean": 1.5, "half_width": 0.25, "sd": 0.1, "min": 1.0, "max": 2.0},
            "idle_pct": {"n": 2, "mean": 3.5, "half_width": null, "sd": 0.0, "min": 3.5, "max": 3.5},
            "blocks": {"n": 2, "mean": 6000.0, "half_width": 0.0, "sd": 0.0, "min": 6000.0, "max": 6000.0},
        });
        let r = intervals_to_rule(&a);
        assert_eq!(
            r["lat.p99_ns"],
            json!({"n": 2, "mean": 1_500_000, "half_width": 250_000, "sd": 100_000,
                   "min": 1_000_000, "max": 2_000_000})
        );
        assert_eq!(r["idle_percent"], a["idle_pct"]);
        assert_eq!(r["blocks"], a["blocks"]);
        assert_eq!(violations(&r), vec![]);
    }
}

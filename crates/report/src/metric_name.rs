//! Axis labels from metric names. The experiments name their metrics with the unit as a
//! suffix (`p99_ms`, `idle_pct`, `rate_mbps`, `req_per_s`); a chart's axis shows the metric's
//! leaf name and that unit, e.g. `p99_ms` → "p99 (ms)". A name without a known suffix is shown
//! as it is, with no unit guessed.

/// Unit suffixes and how an axis writes them; longer suffixes first.
const SUFFIXES: [(&str, &str); 14] = [
    ("_req_per_s", "requests/s"),
    ("_per_s", "per second"),
    ("_pct", "%"),
    ("_percent", "%"),
    ("_mbps", "Mbit/s"),
    ("_kbps", "kbit/s"),
    ("_bps", "bit/s"),
    ("_pps", "packets/s"),
    ("_bytes", "bytes"),
    ("_ms", "ms"),
    ("_us", "µs"),
    ("_ns", "ns"),
    ("_s", "s"),
    ("_mib", "MiB"),
];

/// The leaf of a flattened metric name: after the last ` | ` (the run's configuration) and
/// the last `.` (the path inside the metrics object).
pub fn leaf(name: &str) -> &str {
    let tail = name.rsplit(" | ").next().unwrap_or(name);
    tail.rsplit('.').next().unwrap_or(tail)
}

/// The quantity and the unit of a metric name: `"p99_ms"` → `("p99", Some("ms"))`,
/// `"req_per_s"` → `("requests", Some("per second"))`... A name without a known unit suffix:
/// `(name, None)`.
pub fn split_unit(name: &str) -> (String, Option<&'static str>) {
    let leaf = leaf(name);
    if leaf == "req_per_s" {
        return ("rate".into(), Some("requests/s"));
    }
    for (suffix, unit) in SUFFIXES {
        if let Some(q) = leaf.strip_suffix(suffix).filter(|q| !q.is_empty()) {
            return (q.replace('_', " "), Some(unit));
        }
    }
    (leaf.replace('_', " "), None)
}

/// An axis label: "p99 (ms)", or the bare quantity when the unit is not known.
pub fn axis_label(name: &str) -> String {
    match split_unit(name) {
        (q, Some(u)) => format!("{q} ({u})"),
        (q, None) => q,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_come_from_the_leaf_suffix() {
        assert_eq!(
            axis_label("domains=30 scheduler=strict tier=High | p99_ms"),
            "p99 (ms)"
        );
        assert_eq!(
            axis_label("packet_bytes=64 policy=fcfs | idle_pct"),
            "idle (%)"
        );
        assert_eq!(axis_label("a | lat.mean_us"), "mean (µs)");
        assert_eq!(axis_label("x | rate_mbps"), "rate (Mbit/s)");
        assert_eq!(axis_label("algorithm=rr | req_per_s"), "rate (requests/s)");
        assert_eq!(axis_label("elapsed_s"), "elapsed (s)");
        // No known suffix: the name, no unit made up.
        assert_eq!(axis_label("c | sop_threads"), "sop threads");
        assert_eq!(split_unit("blocks"), ("blocks".to_string(), None));
    }
}

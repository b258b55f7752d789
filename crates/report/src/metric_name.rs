//! Axis labels from metric names. A metric's name ends with its unit: in `results.json` by the
//! JSON unit rule (`p99_ns`, `idle_percent`, `rate_bits_per_s`, `req_per_s`; docs/cli.md), in
//! an experiment's working names by its paper's unit (`p99_ms`, `idle_pct`). A chart's axis
//! shows the metric's leaf name and that unit, e.g. `p99_ms` → "p99 (ms)"; [`scaled`] picks a
//! readable multiple for the rule's base units (`p99_ns` of about 12,000,000 → "p99 (ms)",
//! values divided by 10⁶). A name without a known suffix is shown as it is, with no unit
//! guessed.

/// Unit suffixes and how an axis writes them; longer suffixes first.
const SUFFIXES: [(&str, &str); 17] = [
    ("_req_per_s", "requests/s"),
    ("_bits_per_s", "bit/s"),
    ("_per_cpu_s", "per CPU second"),
    ("_per_s", "per second"),
    ("_pct", "%"),
    ("_percent", "%"),
    ("_kbit", "kbit/s"),
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

/// Multiples of the rule's base units an axis may show instead: (base unit, [(factor,
/// unit)]) largest first.
const MULTIPLES: [(&str, [(f64, &str); 3]); 2] = [
    ("ns", [(1e9, "s"), (1e6, "ms"), (1e3, "µs")]),
    ("bit/s", [(1e9, "Gbit/s"), (1e6, "Mbit/s"), (1e3, "kbit/s")]),
];

/// An axis for values of metric `name` up to `max_abs` in magnitude: the quantity, its unit
/// and the factor to divide the values by — the largest multiple of a base unit (ns, bit/s)
/// that `max_abs` reaches, so an axis reads "p99 (ms)" with 12.3 rather than "p99 (ns)" with
/// 12,300,000.
pub fn scaled(name: &str, max_abs: f64) -> (String, Option<&'static str>, f64) {
    let (q, unit) = split_unit(name);
    let pick = MULTIPLES
        .iter()
        .find(|(base, _)| Some(*base) == unit)
        .and_then(|(_, ms)| {
            ms.iter()
                .find(|(f, _)| max_abs.is_finite() && max_abs >= *f)
        });
    match pick {
        Some((f, u)) => (q, Some(u), *f),
        None => (q, unit, 1.0),
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
        assert_eq!(axis_label("x | rate_bits_per_s"), "rate (bit/s)");
        assert_eq!(axis_label("x | idle_percent"), "idle (%)");
        assert_eq!(axis_label("x | p99_ns"), "p99 (ns)");
        // No known suffix: the name, no unit made up.
        assert_eq!(axis_label("c | sop_threads"), "sop threads");
        assert_eq!(split_unit("blocks"), ("blocks".to_string(), None));
    }

    #[test]
    fn base_units_scale_to_a_readable_multiple() {
        assert_eq!(
            scaled("c | p99_ns", 12.3e6),
            ("p99".into(), Some("ms"), 1e6)
        );
        assert_eq!(scaled("p99_ns", 999.0), ("p99".into(), Some("ns"), 1.0));
        assert_eq!(scaled("p99_ns", 2.5e9), ("p99".into(), Some("s"), 1e9));
        assert_eq!(
            scaled("rate_bits_per_s", 2.9e9),
            ("rate".into(), Some("Gbit/s"), 1e9)
        );
        assert_eq!(scaled("up_bits_per_s", 7.5e5).1, Some("kbit/s"));
        assert_eq!(scaled("idle_percent", 1e9), ("idle".into(), Some("%"), 1.0));
        assert_eq!(scaled("blocks", 1e9), ("blocks".into(), None, 1.0));
        assert_eq!(scaled("p99_ns", f64::NAN).2, 1.0);
    }
}

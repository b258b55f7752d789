//! How adsl-ack's measured numbers read in its checks and its report: rates in kbit/s, shares
//! as percentages, ratios of two measurements; a value that was not measured reads "—".

/// `a / b`, when both are known and `b` is positive.
pub(super) fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// A rate in kbit/s, or a dash.
pub(super) fn fmt_k(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.0}")).unwrap_or_else(|| "—".into())
}

/// A share as a percentage, or a dash.
pub(super) fn fmt_pct(v: Option<f64>) -> String {
    v.map(|x| format!("{:.0}%", x * 100.0))
        .unwrap_or_else(|| "—".into())
}

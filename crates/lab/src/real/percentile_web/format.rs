//! How percentile-web's measured numbers read in its checks and its report.

/// Values joined by " / ", each with `prec` decimals; one that could not be measured (NaN or
/// infinite, e.g. a paired t over too few seconds) reads "—", never "NaN".
pub(super) fn fmt_list(v: &[f64], prec: usize) -> String {
    v.iter()
        .map(|x| {
            if x.is_finite() {
                format!("{x:.prec$}")
            } else {
                "—".to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" / ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_shows_an_unmeasured_value_as_a_dash() {
        assert_eq!(
            fmt_list(&[1.234, f64::NAN, f64::INFINITY], 1),
            "1.2 / — / —"
        );
    }
}

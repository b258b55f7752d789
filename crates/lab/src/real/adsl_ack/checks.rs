//! The checks of `adsl-ack --real`. The ADSL set, per variant: with FIFO and both directions
//! busy, one direction falls below 80 % of its rate alone (P3's problem); with ACK separation
//! (by tc, by the link engine) the upload keeps ≥ 80 % and the download ≥ 90 %. The strong
//! asymmetry (beyond the paper, RFC 3449): strict ACK priority starves the upload; the ACK
//! filter with an ACK-share cap keeps both directions going.

use super::format::{fmt_k, fmt_pct, ratio};
use super::{find, Measured, RealParams, Separation, Variant};
use netsched_report::{Check, Cmp};

/// Every check: the ADSL set's per variant, then the strong asymmetry's.
pub(super) fn checks(rp: &RealParams, variants: &[Variant], measured: &[Measured]) -> Vec<Check> {
    let mut checks = Vec::new();
    for v in variants {
        adsl_checks(measured, v, &mut checks);
    }
    if let Some(sv) = strong_variant(measured) {
        strong_checks(rp, measured, &sv, &mut checks);
    }
    checks
}

/// The variant of the strong-asymmetry set, when it ran.
pub(super) fn strong_variant(measured: &[Measured]) -> Option<Variant> {
    measured
        .iter()
        .find(|m| m.spec.set == "strong")
        .map(|m| m.spec.variant.clone())
}

/// The ADSL set's claims for variant `v`: each "both" run's goodput against each direction's
/// alone.
fn adsl_checks(measured: &[Measured], v: &Variant, checks: &mut Vec<Check>) {
    let up_alone = find(measured, "adsl", v, true, false, Separation::Fifo).and_then(|o| o.up_kbit);
    let down_alone =
        find(measured, "adsl", v, false, true, Separation::Fifo).and_then(|o| o.down_kbit);
    let vn = v.name();
    for sep in [Separation::Fifo, Separation::Shape, Separation::Link] {
        let o = find(measured, "adsl", v, true, true, sep);
        let (u, d) = (o.and_then(|o| o.up_kbit), o.and_then(|o| o.down_kbit));
        let (ru, rd) = (ratio(u, up_alone), ratio(d, down_alone));
        let detail = format!(
            "upload {} of alone, download {} of alone",
            fmt_pct(ru),
            fmt_pct(rd)
        );
        let nan = f64::NAN;
        match sep {
                Separation::Fifo => checks.push(Check::measured(
                    format!(
                        "[{vn}] FIFO, both directions busy: at least one direction < 80% of its rate alone (the smaller share)"
                    ),
                    ru.unwrap_or(nan).min(rd.unwrap_or(nan)),
                    Cmp::Lt,
                    0.8,
                    detail,
                )),
                _ => {
                    checks.push(Check::measured(
                        format!(
                            "[{vn}] {}: upload ≥ 80% of its rate alone",
                            sep.label()
                        ),
                        ru.unwrap_or(nan),
                        Cmp::Ge,
                        0.8,
                        detail.clone(),
                    ));
                    checks.push(Check::measured(
                        format!(
                            "[{vn}] {}: download ≥ 90% of its rate alone",
                            sep.label()
                        ),
                        rd.unwrap_or(nan),
                        Cmp::Ge,
                        0.9,
                        detail,
                    ));
                }
            }
    }
}

/// The strong asymmetry's claims for its variant `sv`.
fn strong_checks(rp: &RealParams, measured: &[Measured], sv: &Variant, checks: &mut Vec<Check>) {
    let up_alone =
        find(measured, "strong", sv, true, false, Separation::Fifo).and_then(|o| o.up_kbit);
    let down_alone =
        find(measured, "strong", sv, false, true, Separation::Fifo).and_then(|o| o.down_kbit);
    for sep in [
        Separation::Shape,
        Separation::Link,
        Separation::LinkFiltered,
    ] {
        let o = find(measured, "strong", sv, true, true, sep);
        let (u, d) = (o.and_then(|o| o.up_kbit), o.and_then(|o| o.down_kbit));
        let ru = ratio(u, up_alone);
        let rd = ratio(d, down_alone);
        let detail = format!(
            "upload {} kbit/s = {} of alone; download {} kbit/s = {} of alone",
            fmt_k(u),
            fmt_pct(ru),
            fmt_k(d),
            fmt_pct(rd)
        );
        let nan = f64::NAN;
        match sep {
                Separation::LinkFiltered => {
                    checks.push(Check::measured(
                        format!(
                            "[strong] ACK filter + ACK share ≤ {} (link): upload keeps ≥ 30% of its rate alone",
                            rp.ack_share_max
                        ),
                        ru.unwrap_or(nan),
                        Cmp::Ge,
                        0.3,
                        detail.clone(),
                    ));
                    checks.push(Check::measured(
                        format!(
                            "[strong] ACK filter + ACK share ≤ {} (link): download keeps ≥ 50% of its rate alone",
                            rp.ack_share_max
                        ),
                        rd.unwrap_or(nan),
                        Cmp::Ge,
                        0.5,
                        detail,
                    ));
                }
                _ => checks.push(Check::measured(
                    format!(
                        "[strong] strict ACK priority ({}): the download's ACKs starve the upload (< 20% of its rate alone)",
                        sep.label()
                    ),
                    ru.unwrap_or(nan),
                    Cmp::Lt,
                    0.2,
                    detail,
                )),
            }
    }
}

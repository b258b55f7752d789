//! The report of `adsl-ack --real`: per run its configuration and figures (results), every
//! second's goodput (`throughput.csv`), paper | colleague | ours per variant and for the strong
//! asymmetry, the checks ([`super::checks`]), the throughput charts and the method's notes.

use super::checks::{checks, strong_variant};
use super::format::fmt_k;
use super::rig::link_qdisc_up;
use super::{find, Measured, RealParams, Separation, Variant};
use anyhow::Result;
use netsched_report::stats;
use netsched_report::{Comparison, ExperimentOutput, Figure, Results, Run};
use serde_json::json;
use std::path::Path;

/// Writes the runs' files into `out` and returns the report.
pub(super) fn assemble(
    rp: &RealParams,
    seed: u64,
    out: &Path,
    variants: &[Variant],
    measured: Vec<Measured>,
) -> Result<ExperimentOutput> {
    let mut results = Results::new("adsl-ack", "real", seed, serde_json::to_value(rp)?);
    results.runs = measured.iter().map(run_record).collect();
    write_throughput_csv(out, &measured)?;
    let mut comparisons = Vec::new();
    let mut figures = Vec::new();
    for v in variants {
        comparisons.extend(adsl_comparisons(&measured, v));
        figures.extend(adsl_chart(&measured, v, out)?);
    }
    if let Some(sv) = strong_variant(&measured) {
        comparisons.extend(strong_comparisons(&measured, &sv));
        figures.extend(strong_chart(rp, &measured, &sv, out)?);
    }
    Ok(ExperimentOutput {
        results,
        comparisons,
        checks: checks(rp, variants, &measured),
        figures,
        notes: notes(rp),
    })
}

/// One run's configuration and figures.
fn run_record(m: &Measured) -> Run {
    let o = &m.out;
    let link = o.link.as_ref();
    Run {
        config: json!({
            "set": m.spec.set,
            "variant": m.spec.variant.name(),
            "cc": m.spec.variant.cc,
            "cc_in_force": o.cc_in_force,
            "window_packets": m.spec.variant.window_packets,
            "download_window_packets": m.spec.variant.down_window_packets,
            "upload": m.spec.upload,
            "download": m.spec.download,
            "separation": m.spec.sep,
            "uplink_qdisc": link_qdisc_up(&m.spec),
            "access": m.spec.access,
            "duration_s": m.spec.secs,
            "testbed": o.testbed_tag,
        }),
        metrics: json!({
            "upload_kbit": o.up_kbit,
            "download_kbit": o.down_kbit,
            "ping_p50_ms": stats::percentile_of(&o.ping_ms, 0.50),
            "ping_p90_ms": stats::percentile_of(&o.ping_ms, 0.90),
            "ping_received": o.ping_ms.len(),
            "ping_sent": o.ping_sent,
            "link_accounting": link.map(|l| {
                match (l.ab.check_accounting(), l.ba.check_accounting()) {
                    (Ok(()), Ok(())) => "balanced".to_string(),
                    (a, b) => format!(
                        "{:?} {:?}",
                        a.err().map(|e| e.to_string()),
                        b.err().map(|e| e.to_string())
                    ),
                }
            }),
            "link_up": link.map(|l| &l.ab),
            "link_down": link.map(|l| &l.ba),
            "shape": o.shape,
            "host_late_pct": o.host_late_pct,
            "host_max_late_ms": o.host_max_late_ms,
        }),
    }
}

/// Every second's goodput of every run, per direction, as `throughput.csv`.
fn write_throughput_csv(out: &Path, measured: &[Measured]) -> Result<()> {
    let mut rows: Vec<Vec<String>> = Vec::new();
    for m in measured {
        let o = &m.out;
        for (dir, series) in [("upload", &o.up_series), ("download", &o.down_series)] {
            for (t, r) in series {
                rows.push(vec![
                    m.spec.set.clone(),
                    m.spec.variant.name(),
                    if m.spec.upload && m.spec.download {
                        m.spec.sep.label().to_string()
                    } else {
                        "alone".into()
                    },
                    dir.to_string(),
                    format!("{t:.1}"),
                    format!("{r:.1}"),
                ]);
            }
        }
    }
    netsched_report::csv::write_table(
        &out.join("throughput.csv"),
        &["set", "variant", "config", "direction", "t_s", "kbit_s"],
        &rows,
    )?;
    Ok(())
}

/// The ADSL set for variant `v`: paper | colleague | ours, each direction alone and both
/// busy per separation, with the ping RTT.
fn adsl_comparisons(measured: &[Measured], v: &Variant) -> Vec<Comparison> {
    let mut comparisons = Vec::new();
    let up_alone = find(measured, "adsl", v, true, false, Separation::Fifo).and_then(|o| o.up_kbit);
    let down_alone =
        find(measured, "adsl", v, false, true, Separation::Fifo).and_then(|o| o.down_kbit);
    let vn = v.name();
    let row = |q: &str, paper: &str, ours: Option<f64>| Comparison {
        quantity: format!("[{vn}] {q} (kbit/s)"),
        paper: paper.to_string(),
        ours: fmt_k(ours),
    };
    comparisons.push(row("upload alone", "≈750 (colleague: 765)", up_alone));
    comparisons.push(row("download alone", "≈1900 (colleague: 2009)", down_alone));
    for (sep, pu, pd) in [
        (
            Separation::Fifo,
            "≈250–300 (colleague: 641)",
            "≈1900 (colleague: 1479)",
        ),
        (
            Separation::Shape,
            "≈750 (colleague HTB+u32: 678)",
            "≈2000 (colleague: 1907)",
        ),
        (Separation::Link, "≈750", "≈2000"),
    ] {
        let o = find(measured, "adsl", v, true, true, sep);
        let (u, d) = (o.and_then(|o| o.up_kbit), o.and_then(|o| o.down_kbit));
        comparisons.push(row(&format!("both, {}: upload", sep.label()), pu, u));
        comparisons.push(row(&format!("both, {}: download", sep.label()), pd, d));
        let p50 = o.and_then(|o| stats::percentile_of(&o.ping_ms, 0.50));
        comparisons.push(Comparison {
            quantity: format!("[{vn}] both, {}: ping RTT p50 (ms)", sep.label()),
            paper: "—".into(),
            ours: fmt_k(p50),
        });
    }
    comparisons
}

/// Throughput over time of the ADSL set's "both" runs of variant `v`.
fn adsl_chart(measured: &[Measured], v: &Variant, out: &Path) -> Result<Option<Figure>> {
    let vn = v.name();
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for sep in [Separation::Fifo, Separation::Shape, Separation::Link] {
        if let Some(o) = find(measured, "adsl", v, true, true, sep) {
            series.push((format!("{} up", sep.label()), o.up_series.clone()));
            series.push((format!("{} down", sep.label()), o.down_series.clone()));
        }
    }
    if !series.is_empty() {
        let file = format!("throughput-adsl-{vn}.svg");
        netsched_report::svg::line_chart(
            &format!("adsl-ack real, {vn}: both directions busy"),
            "time (s)",
            "goodput (kbit/s)",
            &series,
            &out.join(&file),
        )?;
        return Ok(Some(Figure {
            title: format!("Throughput over time, both directions ({vn})"),
            file,
        }));
    }
    Ok(None)
}

/// The strong asymmetry: each direction alone and both busy per separation.
fn strong_comparisons(measured: &[Measured], sv: &Variant) -> Vec<Comparison> {
    let mut comparisons = Vec::new();
    let up_alone =
        find(measured, "strong", sv, true, false, Separation::Fifo).and_then(|o| o.up_kbit);
    let down_alone =
        find(measured, "strong", sv, false, true, Separation::Fifo).and_then(|o| o.down_kbit);
    comparisons.push(Comparison {
        quantity: "[strong] upload / download alone (kbit/s)".into(),
        paper: "— (beyond the paper; RFC 3449 §5)".into(),
        ours: format!("{} / {}", fmt_k(up_alone), fmt_k(down_alone)),
    });
    for sep in [
        Separation::Shape,
        Separation::Link,
        Separation::LinkFiltered,
    ] {
        let o = find(measured, "strong", sv, true, true, sep);
        let (u, d) = (o.and_then(|o| o.up_kbit), o.and_then(|o| o.down_kbit));
        comparisons.push(Comparison {
            quantity: format!("[strong] both, {}: upload / download (kbit/s)", sep.label()),
            paper: "—".into(),
            ours: format!("{} / {}", fmt_k(u), fmt_k(d)),
        });
    }
    comparisons
}

/// The strong asymmetry's upload goodput over time per separation.
fn strong_chart(
    rp: &RealParams,
    measured: &[Measured],
    sv: &Variant,
    out: &Path,
) -> Result<Option<Figure>> {
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for sep in [
        Separation::Shape,
        Separation::Link,
        Separation::LinkFiltered,
    ] {
        if let Some(o) = find(measured, "strong", sv, true, true, sep) {
            series.push((format!("{} up", sep.label()), o.up_series.clone()));
        }
    }
    if !series.is_empty() {
        let file = "throughput-strong-upload.svg".to_string();
        netsched_report::svg::line_chart(
            &format!(
                "Strong asymmetry ({:.0} kbit/s up, {:.0} kbit/s down): upload goodput",
                rp.strong_up_kbit, rp.strong_down_kbit
            ),
            "time (s)",
            "upload goodput (kbit/s)",
            &series,
            &out.join(&file),
        )?;
        return Ok(Some(Figure {
            title: "Strong asymmetry: upload under strict ACK priority vs ACK filter + cap".into(),
            file,
        }));
    }
    Ok(None)
}

/// How the runs were made, and what decides which direction collapses.
fn notes(rp: &RealParams) -> Vec<String> {
    let mut notes = Vec::new();
    notes.push(format!(
        "Real Linux: namespaces local — gateway — modem — remote; the access link ({:.0} kbit/s up \
         with a {}-packet FIFO, {:.0} kbit/s down with {} packets, {} ms propagation delay each \
         way) is `netsched link` (AF_PACKET) in the modem namespace, the LAN is tbf at {:.0} kbit/s, \
         offloads off. Goodput is iperf3's receiver-side rate per second, averaged after a warm-up; \
         `throughput.csv` has every second. Ping runs local → remote every 200 ms during each run.",
        rp.up_kbit, rp.up_queue, rp.down_kbit, rp.down_queue, rp.delay_ms, rp.lan_kbit
    ));
    notes.push(
        "Which direction collapses depends on the TCP settings. The paper's TCP (2005, window \
         ≤ 88 packets both ways) could not fill the 100-packet uplink FIFO alone; data and the \
         download's ACKs shared the slots (88 + 88 > 100) and the upload lost data. An upload \
         without a window limit fills the whole FIFO — a loss-based one (Reno/CUBIC) by \
         design: 100 × 1514 B at 800 kbit/s ≈ 1.5 s of queue. The download's ACKs wait behind \
         it and the download is limited to window / RTT: with an 88-packet window \
         88 × 1448 B / 1.5 s ≈ 680 kbit/s. So the deciding settings are the upload's window \
         (and congestion control) against the uplink queue, and the download's window against \
         the ACK delay that queue adds. BBR keeps the queue shorter (ping ≈ 150 ms instead of \
         1.5 s) but its probing still overflows the FIFO and delays and drops the ACKs. With no \
         window limit on either side both FIFOs fill and the upload suffers most, as in the \
         paper. Ping (ICMP) is not an ACK: with ACK separation it still waits behind the \
         upload's data."
            .into(),
    );
    notes.push(
        "netsched shape shapes the gateway 5 % below the uplink rate so the queue is the \
         gateway's HTB, not the modem's FIFO; the ACK class has strict priority (HTB prio 0, \
         99 % of the rate as its own). netsched link runs the core AckSeparation as the modem's \
         uplink discipline (class from the core pure-ACK test)."
            .into(),
    );
    notes.push(format!(
        "Strong asymmetry (beyond the paper, RFC 3449 §3 and §5): {:.0} kbit/s up, {:.0} kbit/s \
         down. With delayed ACKs the download sends one ≈66-byte ACK per two 1514-byte frames; \
         ACKs alone congest the uplink when the normalised ratio k = (down/up) ÷ (1514/66) \
         exceeds 2 — here k ≈ {:.1}. Strict ACK priority then gives the uplink to ACKs and \
         starves the upload. The ACK filter alone does not prevent this (the ACK queue is never \
         empty); the ACK-share cap ({}) bounds the ACKs' share while data is waiting, and the \
         filter keeps the fewer ACKs cumulative, so the download keeps (or gains) its rate.",
        rp.strong_up_kbit,
        rp.strong_down_kbit,
        (rp.strong_down_kbit / rp.strong_up_kbit) / (1514.0 / 66.0),
        rp.ack_share_max
    ));
    notes
}

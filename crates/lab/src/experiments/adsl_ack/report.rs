//! adsl-ack's report: results.json runs, checks, the paper-vs-model table, CSV files, charts,
//! notes and the sensitivity table — all from the measured runs.

use super::model::Setup;
use super::model::{Measured, Params};
use super::{ack_load_share, Outcome, SensRow, ACK_CAP, CONFIGS, UPLOAD_SHARE};
use netsched_report::sensitivity::SensitivityTable;
use netsched_report::svg::{ChartOptions, Mark};
use netsched_report::{csv, svg, Check, Cmp, Comparison, ExperimentOutput, Figure, Results, Run};
use serde_json::json;
use std::path::Path;

/// Which direction fell below [`UPLOAD_SHARE`] of its rate alone.
fn collapsed(m: &Measured, up_alone: f64, down_alone: f64) -> &'static str {
    match (
        m.upload_kbps / up_alone < UPLOAD_SHARE,
        m.download_kbps / down_alone < UPLOAD_SHARE,
    ) {
        (true, true) => "both",
        (true, false) => "upload",
        (false, true) => "download",
        (false, false) => "neither",
    }
}

/// The claims P3 §3–§4 make about FIFO and ACK separation, each with a short name for the
/// sensitivity table; the same function decides the main run and every variant.
pub fn claims(
    fifo: &Measured,
    sep: &Measured,
    up_alone: f64,
    down_alone: f64,
) -> Vec<(&'static str, Check)> {
    let share = |v: f64, alone: f64| v / alone;
    let (fu, fd) = (
        share(fifo.upload_kbps, up_alone),
        share(fifo.download_kbps, down_alone),
    );
    let (su, sd) = (
        share(sep.upload_kbps, up_alone),
        share(sep.download_kbps, down_alone),
    );
    vec![
        ("FIFO collapses", Check::measured(
            format!("FIFO 100, both directions: at least one direction falls below {:.0}% of its rate alone (P3 §3)", 100.0 * UPLOAD_SHARE),
            fu.min(fd), Cmp::Lt, UPLOAD_SHARE,
            format!("upload {:.0}% ({:.0} kbit/s), download {:.0}% ({:.0} kbit/s)", 100.0 * fu, fifo.upload_kbps, 100.0 * fd, fifo.download_kbps),
        )),
        ("ACK-sep upload", Check::measured(
            format!("ACK separation restores the upload to ≥ {:.0}% of its rate alone (P3 §4: ≈750 kbit/s)", 100.0 * UPLOAD_SHARE),
            su, Cmp::Ge, UPLOAD_SHARE,
            format!("upload {:.0}% ({:.0} of {:.0} kbit/s)", 100.0 * su, sep.upload_kbps, up_alone),
        )),
        ("ACK-sep download", Check::measured(
            "ACK separation keeps the download at ≥ 90% of its rate alone (P3 §4: ≈2000 kbit/s)",
            sd, Cmp::Ge, 0.9,
            format!("download {:.0}% ({:.0} of {:.0} kbit/s)", 100.0 * sd, sep.download_kbps, down_alone),
        )),
    ]
}

fn sensitivity_note(p: &Params, rows: &[SensRow], out: &Path) -> anyhow::Result<String> {
    let mut t = SensitivityTable::new(
        &format!(
            "**Sensitivity** (same seed, {} sub-seeds per cell; shares of each direction's rate alone, upload / download). The ACK load is what the download's ACKs need, at the downlink's rate, as a share of the uplink; beyond {:.0}% strict ACK priority cannot leave the upload {:.0}% (outside P3's regime). \"+ filter\" adds the ACK filter, \"+ cap\" also caps ACKs at {:.0}% of the uplink bytes while data wait (both beyond P3):",
            p.sensitivity_seeds, 100.0 * ACK_CAP, 100.0 * UPLOAD_SHARE, 100.0 * ACK_CAP,
        ),
        &["variant", "up / down kbit/s", "ACK load", "regime", "FIFO", "ACK separation", "+ filter", "+ filter + cap", "P3 claims that fail"],
        "✓",
    );
    let mut rows_csv = Vec::new();
    let pair = |m: &Measured, r: &SensRow| {
        format!(
            "{:.0}% / {:.0}%",
            100.0 * m.upload_kbps / r.up_alone,
            100.0 * m.download_kbps / r.down_alone
        )
    };
    for r in rows {
        let load = ack_load_share(&r.p);
        let inside = load <= ACK_CAP;
        let decided: Vec<(&str, bool)> = claims(&r.fifo, &r.sep, r.up_alone, r.down_alone)
            .into_iter()
            .map(|(n, c)| (n, c.passed))
            .collect();
        let failed: Vec<&str> = decided
            .iter()
            .filter(|(_, h)| !h)
            .map(|(n, _)| *n)
            .collect();
        t.row(
            &r.label,
            inside,
            &[
                format!(
                    "{:.0} / {:.0}",
                    r.p.topology.up_kbps, r.p.topology.down_kbps
                ),
                format!("{:.0}%", 100.0 * load),
                if inside { "P3" } else { "**outside**" }.to_string(),
                pair(&r.fifo, r),
                pair(&r.sep, r),
                pair(&r.filter, r),
                pair(&r.filter_cap, r),
            ],
            decided.iter().copied(),
        );
        let sh = |m: &Measured| {
            [
                csv::num(m.upload_kbps / r.up_alone),
                csv::num(m.download_kbps / r.down_alone),
            ]
        };
        let mut row = vec![
            r.label.clone(),
            csv::num(r.p.topology.up_kbps),
            csv::num(r.p.topology.down_kbps),
            csv::num(load),
            inside.to_string(),
        ];
        for m in [&r.fifo, &r.sep, &r.filter, &r.filter_cap] {
            row.extend(sh(m));
        }
        row.push(failed.join("; "));
        rows_csv.push(row);
    }
    let all_hold = t.rows(true).filter(|r| r.failed().is_empty()).count();
    let n_inside = t.rows(true).count();
    let outside: Vec<&SensRow> = rows
        .iter()
        .filter(|r| ack_load_share(&r.p) > ACK_CAP)
        .collect();
    let cap_up = outside
        .iter()
        .filter(|r| r.filter_cap.upload_kbps / r.up_alone >= UPLOAD_SHARE)
        .count();
    let filter_up = outside
        .iter()
        .filter(|r| r.filter.upload_kbps / r.up_alone >= UPLOAD_SHARE)
        .count();
    let sep_down = outside
        .iter()
        .filter(|r| r.sep.download_kbps / r.down_alone >= 0.9)
        .count();
    let t = t.finish(&format!(
        "Reading: inside P3's regime all three claims hold in {} of {} variants; outside it ({} variants) ACK separation still keeps the download at ≥ 90% in {} and the upload claim fails as the arithmetic says it must, but the upload gets back to ≥ {:.0}% with the ACK filter in {} and with filter + cap in {}: while one {}-byte data packet is on the slow uplink, many ACKs arrive, and the filter sends only the newest. Where the ACKs need more than the whole uplink, the download alone is itself ACK-bound, so it can exceed 100% of that rate once the filter thins its ACKs.\n",
        all_hold, n_inside, outside.len(), sep_down, 100.0 * UPLOAD_SHARE, filter_up, cap_up, p.tcp.segment_bytes,
    ));
    csv::write_table(
        &out.join("sensitivity.csv"),
        &[
            "variant",
            "up_kbps",
            "down_kbps",
            "ack_load_share",
            "in_paper_regime",
            "fifo_up_share",
            "fifo_down_share",
            "acksep_up_share",
            "acksep_down_share",
            "filter_up_share",
            "filter_down_share",
            "filter_cap_up_share",
            "filter_cap_down_share",
            "failed_claims",
        ],
        &rows_csv,
    )?;
    Ok(t)
}

/// One setting of the TCP matrix: window, SACK, minimum RTO (ms), delayed ACK, upload and
/// download kbit/s, and the direction that collapsed.
type MatrixLine = (u32, bool, f64, bool, f64, f64, &'static str);

/// The report of `o`: results, CSV files and charts in `out`, checks, the paper-vs-model
/// table and notes.
pub fn write(
    p: &Params,
    params: &serde_json::Value,
    seed: u64,
    o: &Outcome,
    out: &Path,
) -> anyhow::Result<ExperimentOutput> {
    let measured = &o.measured;
    let (results, matrix_rows) = results(p, params, seed, o);
    write_throughput(p, measured, out)?;
    write_rates_chart(measured, out)?;
    write_tables(measured, &matrix_rows, out)?;
    let mut notes = notes(p, measured);
    if !matrix_rows.is_empty() {
        notes.push(matrix_note(p, &measured[2], &matrix_rows));
    }
    if !o.sens.is_empty() {
        notes.push(sensitivity_note(p, &o.sens, out)?);
    }
    Ok(ExperimentOutput {
        results,
        comparisons: comparisons(p, measured),
        checks: checks(p, o),
        figures: figures(),
        notes,
    })
}

/// Every run of `o` (the main runs, UDP, the TCP matrix) as results, and the matrix's rows.
fn results(
    p: &Params,
    params: &serde_json::Value,
    seed: u64,
    o: &Outcome,
) -> (Results, Vec<MatrixLine>) {
    let mut results = Results::new("adsl-ack", "sim", seed, params.clone());
    let measured = &o.measured;
    for ((name, setup, up, down), m) in CONFIGS.iter().zip(measured) {
        results.runs.push(Run {
            config: json!({"run": name, "upload": up, "download": down,
                           "uplink": match setup { Setup::Fifo | Setup::InputDrr => "fifo", Setup::AckSep => "ack_separation", Setup::AckSepFilter { .. } => "ack_separation+filter" },
                           "gateway_input_queues": *setup == Setup::InputDrr}),
            metrics: m.metrics.clone(),
        });
    }
    let (up_alone, down_alone) = (measured[0].upload_kbps, measured[1].download_kbps);
    if let Some((us, ur, ds, dr)) = o.udp {
        results.runs.push(Run {
            config: json!({"run": "udp both directions", "load": p.udp.load}),
            metrics: json!({"upload_sent": us, "upload_received": ur,
                            "download_sent": ds, "download_received": dr}),
        });
    }
    let mut matrix_rows = Vec::new();
    for row in &o.matrix {
        let (t, m) = (&row.tcp, &row.m);
        let c = collapsed(m, up_alone, down_alone);
        results.runs.push(Run {
            config: json!({"run": "matrix: both, FIFO 100", "max_window_segments": t.max_window_segments,
                           "sack": t.sack, "min_rto_ms": t.min_rto_ms, "delayed_ack": t.delayed_ack}),
            metrics: json!({"upload_kbps": m.upload_kbps, "download_kbps": m.download_kbps,
                            "collapsed": c,
                            "upload_timeouts": m.metrics["upload_tcp"]["timeouts"],
                            "download_timeouts": m.metrics["download_tcp"]["timeouts"]}),
        });
        matrix_rows.push((
            t.max_window_segments,
            t.sack,
            t.min_rto_ms,
            t.delayed_ack,
            m.upload_kbps,
            m.download_kbps,
            c,
        ));
    }
    (results, matrix_rows)
}

/// Throughput over time of every run (`throughput.csv`), and the charts of the "both" runs
/// with FIFO and with ACK separation against P3's averages.
fn write_throughput(p: &Params, measured: &[Measured], out: &Path) -> anyhow::Result<()> {
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for ((name, _, up, down), m) in CONFIGS.iter().zip(measured) {
        let pts = |s: &[f64]| {
            s.iter()
                .enumerate()
                .map(|(i, v)| (i as f64 + 1.0, *v))
                .collect::<Vec<_>>()
        };
        if *up {
            series.push((format!("{name}: upload"), pts(&m.upload_series)));
        }
        if *down {
            series.push((format!("{name}: download"), pts(&m.download_series)));
        }
    }
    csv::write_series(&out.join("throughput.csv"), "time_s", "kbit_per_s", &series)?;
    let pick = |prefix: &str| -> Vec<(String, Vec<(f64, f64)>)> {
        series
            .iter()
            .filter(|(n, _)| n.starts_with(prefix))
            .cloned()
            .collect()
    };
    // P3's averages for the same runs as dashed lines (§3 FIFO, §4 ACK separation).
    let paper_lines = |up: f64, down: f64, sec: &str| ChartOptions {
        log_y: false,
        marks: vec![
            Mark::line(format!("P3 {sec} upload ≈{up} kbit/s"), up),
            Mark::line(format!("P3 {sec} download ≈{down} kbit/s"), down),
        ],
        marks_legend: Some(format!("P3 {sec} averages")),
        ..Default::default()
    };
    svg::line_chart_with(
        &format!(
            "Both directions, uplink FIFO {}",
            p.topology.uplink_fifo_packets
        ),
        "time (s)",
        "throughput (kbit/s)",
        &pick("both, FIFO"),
        &paper_lines(250.0, 1900.0, "§3"),
        &out.join("throughput_fifo.svg"),
    )?;
    svg::line_chart_with(
        "Both directions, ACK separation (with and without the ACK filter)",
        "time (s)",
        "throughput (kbit/s)",
        &pick("both, ACK"),
        &paper_lines(750.0, 2000.0, "§4"),
        &out.join("throughput_acksep.svg"),
    )?;
    Ok(())
}

/// Average throughput per run against P3's figures (`rates.svg`).
fn write_rates_chart(measured: &[Measured], out: &Path) -> anyhow::Result<()> {
    let (up_alone, down_alone) = (measured[0].upload_kbps, measured[1].download_kbps);
    let (fifo, acksep, drr, filter) = (&measured[2], &measured[3], &measured[4], &measured[5]);
    let cats = [
        "alone",
        "both FIFO",
        "both ACK-sep",
        "both input DRR",
        "both ACK-sep + filter",
    ];
    // P3's own figures (the comparison table) as dashed marks over the bars: upload is
    // series 0, download series 1.
    let paper = |label: &str, v: f64, cat: usize, series: usize| {
        Mark::bar(format!("P3 {label}: ≈{v} kbit/s"), v, cat, series)
    };
    let marks = vec![
        paper("§3 upload alone", 750.0, 0, 0),
        paper("§3 download alone", 1900.0, 0, 1),
        paper("§3 both, FIFO: upload", 250.0, 1, 0),
        paper("§3 both, FIFO: download", 1900.0, 1, 1),
        paper("§4 ACK separation: upload", 750.0, 2, 0),
        paper("§4 ACK separation: download", 2000.0, 2, 1),
    ];
    svg::bar_chart_with(
        "Average throughput (kbit/s)",
        "kbit/s",
        &cats,
        &[
            (
                "upload".to_string(),
                vec![
                    up_alone,
                    fifo.upload_kbps,
                    acksep.upload_kbps,
                    drr.upload_kbps,
                    filter.upload_kbps,
                ],
            ),
            (
                "download".to_string(),
                vec![
                    down_alone,
                    fifo.download_kbps,
                    acksep.download_kbps,
                    drr.download_kbps,
                    filter.download_kbps,
                ],
            ),
        ],
        &ChartOptions {
            log_y: false,
            marks,
            marks_legend: Some("P3 (§3, §4)".into()),
            ..Default::default()
        },
        &out.join("rates.svg"),
    )?;
    Ok(())
}

/// The main runs' averages (`runs.csv`) and the TCP matrix (`matrix.csv`).
fn write_tables(
    measured: &[Measured],
    matrix_rows: &[MatrixLine],
    out: &Path,
) -> anyhow::Result<()> {
    let run_rows: Vec<Vec<String>> = CONFIGS
        .iter()
        .zip(measured)
        .map(|((n, _, _, _), m)| {
            vec![
                n.to_string(),
                csv::num(m.upload_kbps),
                csv::num(m.download_kbps),
            ]
        })
        .collect();
    csv::write_table(
        &out.join("runs.csv"),
        &["run", "upload_kbps", "download_kbps"],
        &run_rows,
    )?;
    let mrows: Vec<Vec<String>> = matrix_rows
        .iter()
        .map(|(w, s, r, d, u, dn, c)| {
            vec![
                w.to_string(),
                s.to_string(),
                csv::num(*r),
                d.to_string(),
                csv::num(*u),
                csv::num(*dn),
                c.to_string(),
            ]
        })
        .collect();
    csv::write_table(
        &out.join("matrix.csv"),
        &[
            "max_window_segments",
            "sack",
            "min_rto_ms",
            "delayed_ack",
            "upload_kbps",
            "download_kbps",
            "collapsed",
        ],
        &mrows,
    )?;
    Ok(())
}

/// P3's claims (§3, §4), the input queues' (§3.3) and the UDP run's (§3.1).
fn checks(p: &Params, o: &Outcome) -> Vec<Check> {
    let measured = &o.measured;
    let (up_alone, down_alone) = (measured[0].upload_kbps, measured[1].download_kbps);
    let (fifo, acksep, drr) = (&measured[2], &measured[3], &measured[4]);
    let mut checks: Vec<Check> = claims(fifo, acksep, up_alone, down_alone)
        .into_iter()
        .map(|(_, c)| c)
        .collect();
    let (du, dd) = (drr.upload_kbps / up_alone, drr.download_kbps / down_alone);
    checks.push(Check::measured(
        format!("Per-interface input queues under DRR do not help: a direction still falls below {:.0}% of its rate alone (P3 §3.3)", 100.0 * UPLOAD_SHARE),
        du.min(dd), Cmp::Lt, UPLOAD_SHARE,
        format!("input DRR: upload {:.0}%, download {:.0}% (FIFO: {:.0}%, {:.0}%)", 100.0 * du, 100.0 * dd, 100.0 * fifo.upload_kbps / up_alone, 100.0 * fifo.download_kbps / down_alone),
    ));
    if let Some((us, ur, ds, dr)) = o.udp {
        checks.push(Check::measured(
            format!("UDP at {:.0}% of both link rates loses nothing: the links are not the limit (P3 §3.1) — packets lost ≤ 0", p.udp.load * 100.0),
            (us - ur + ds - dr) as f64, Cmp::Le, 0.0,
            format!("upload {ur}/{us} received, download {dr}/{ds} received"),
        ));
    }
    checks
}

/// Paper | model for the main runs and the ACK load.
fn comparisons(p: &Params, measured: &[Measured]) -> Vec<Comparison> {
    let (up_alone, down_alone) = (measured[0].upload_kbps, measured[1].download_kbps);
    let (fifo, acksep, drr) = (&measured[2], &measured[3], &measured[4]);
    let f0 = |v: f64| format!("{v:.0}");
    vec![
        Comparison {
            quantity: "upload alone (kbit/s)".into(),
            paper: "≈750".into(),
            ours: f0(up_alone),
        },
        Comparison {
            quantity: "download alone (kbit/s)".into(),
            paper: "≈1900".into(),
            ours: f0(down_alone),
        },
        Comparison {
            quantity: "both, FIFO 100: upload (kbit/s)".into(),
            paper: "≈250 (§3), ≈300 (§4 run)".into(),
            ours: f0(fifo.upload_kbps),
        },
        Comparison {
            quantity: "both, FIFO 100: download (kbit/s)".into(),
            paper: "≈1900".into(),
            ours: f0(fifo.download_kbps),
        },
        Comparison {
            quantity: "both, ACK separation: upload (kbit/s)".into(),
            paper: "≈750".into(),
            ours: f0(acksep.upload_kbps),
        },
        Comparison {
            quantity: "both, ACK separation: download (kbit/s)".into(),
            paper: "≈2000".into(),
            ours: f0(acksep.download_kbps),
        },
        Comparison {
            quantity: "both, input queues + DRR: upload (kbit/s)".into(),
            paper: "no improvement (§3.3)".into(),
            ours: f0(drr.upload_kbps),
        },
        Comparison {
            quantity: "ACK load on the uplink with ACK separation (kbit/s)".into(),
            paper: "≈92 (179.2 ACK/s × 66 B)".into(),
            ours: f0(
                acksep.metrics["uplink_tx_acks"].as_u64().unwrap_or(0) as f64
                    * p.tcp.ack_bytes as f64
                    * 8.0
                    / p.duration_s
                    / 1000.0,
            ),
        },
    ]
}

/// How the checks are decided, the model, the mechanism and the input-queue run.
fn notes(p: &Params, measured: &[Measured]) -> Vec<String> {
    let (up_alone, down_alone) = (measured[0].upload_kbps, measured[1].download_kbps);
    let (fifo, acksep) = (&measured[2], &measured[3]);
    vec![
        format!("**How the checks are decided.** Each claim is a measured share of a direction's rate alone against P3's figure as a threshold (FIFO: a direction below {:.0}%; ACK separation: upload ≥ {:.0}%, download ≥ 90%), every figure the mean over {} sub-seeds drawn from the seed. Strict ACK priority can leave the upload at most the uplink minus the download's ACKs, so the upload claim needs the ACK load to stay under {:.0}% of the uplink: that is the edge of P3's regime (here {:.0}%), and the sensitivity table marks the variants beyond it.", 100.0 * UPLOAD_SHARE, 100.0 * UPLOAD_SHARE, p.seeds, 100.0 * ACK_CAP, 100.0 * ack_load_share(p)),
        format!(
            "Model: segment-level TCP in `netsched-sim` (NewReno, optional SACK, RFC 6298 RTO, delayed ACKs), {} B data packets, {} B ACKs, window {} segments, {} s runs, throughput averaged from {} s (goodput at the receiver); every figure is the mean over {} seeds (flow start times drawn from the seed), per-seed values are in results.json. TCP settings of the main runs: SACK {}, delayed ACK {}, minimum RTO {} ms. Links carry no ATM/PPPoE overhead, so our rates alone sit at the line rate ({:.0} / {:.0} kbit/s of {:.0} / {:.0}) where the paper's modem gives ≈750 / ≈1900.",
            p.tcp.segment_bytes, p.tcp.ack_bytes, p.tcp.max_window_segments, p.duration_s, p.measure_from_s, p.seeds, p.tcp.sack, p.tcp.delayed_ack, p.tcp.min_rto_ms,
            up_alone, down_alone, p.topology.up_kbps, p.topology.down_kbps
        ),
        format!(
            "Mechanism (FIFO, both, first seed): uplink drops {} data packets and {} ACKs; upload timeouts {}, download timeouts {}. With ACK separation: {} data and {} ACK drops.",
            fifo.metrics["uplink_drops_data"], fifo.metrics["uplink_drops_ack"],
            fifo.metrics["upload_tcp"]["timeouts"], fifo.metrics["download_tcp"]["timeouts"],
            acksep.metrics["uplink_drops_data"], acksep.metrics["uplink_drops_ack"]
        ),
        format!(
            "Input-queue run: the gateway forwards through two input queues (LAN side, ADSL side) under the configured DRR, {} µs of CPU per packet, into the same uplink FIFO. The output FIFO is where data and ACKs compete, so the input scheduler cannot change the outcome.",
            p.input_queues.per_packet_us
        ),
    ]
}

/// The TCP matrix as a table, and how to read it (`fifo`: the main FIFO run).
fn matrix_note(p: &Params, fifo: &Measured, matrix_rows: &[MatrixLine]) -> String {
    let (w, q) = (p.tcp.max_window_segments, p.topology.uplink_fifo_packets);
    let (up, down) = (p.topology.up_kbps, p.topology.down_kbps);
    // A full uplink FIFO of data packets, drained at the uplink rate.
    let full_s = q as f64 * f64::from(p.tcp.segment_bytes) * 8.0 / (up * 1000.0);
    let windows = p
        .matrix
        .max_window_segments
        .iter()
        .map(|w| w.to_string())
        .collect::<Vec<_>>()
        .join(" or ");
    let mut t = format!("Which TCP settings decide which direction collapses (both directions, FIFO {q}; a direction has collapsed below {:.0}% of its rate alone):\n\n| window | SACK | min RTO (ms) | delayed ACK | upload kbit/s | download kbit/s | collapsed |\n|---|---|---|---|---|---|---|\n", 100.0 * UPLOAD_SHARE);
    for (w, s, r, d, u, dn, c) in matrix_rows {
        t.push_str(&format!(
            "| {w} | {s} | {r} | {d} | {u:.0} | {dn:.0} | {c} |\n"
        ));
    }
    let n_up = matrix_rows
        .iter()
        .filter(|r| r.6 == "upload" || r.6 == "both")
        .count();
    let n_down = matrix_rows
        .iter()
        .filter(|r| r.6 == "download" || r.6 == "both")
        .count();
    t.push_str(&format!(
            "\nReading: the upload collapses (the paper's outcome) in {n_up} of {} settings, the download in {n_down}. \
             In the model the upload collapses when it loses tens of segments in one window (its {w} segments and the download's ACKs overflow the {q} slots) and, without SACK, \
             NewReno repairs one hole per round trip while the round trip is ≈{full_s:.1} s behind the full FIFO, so the upload spends most \
             of the run in recovery (first seed of the main run: {} fast recoveries, {} retransmissions, {} timeouts); a small minimum \
             RTO or delayed ACKs (fewer ACKs competing for the {q} slots) break this. The paper explains the collapse by timeouts \
             (cwnd back to 1); in our runs the slow repair does the same damage. Otherwise the upload keeps the FIFO full of data and \
             it is the download that collapses: its ACKs wait behind up to {q} data packets (≈{full_s:.1} s at {up:.0} kbit/s), which caps \
             its window of {windows} segments at a fraction of {down:.0} kbit/s. ACK separation removes both failure modes.\n",
            matrix_rows.len(),
            fifo.metrics["upload_tcp"]["fast_recoveries"],
            fifo.metrics["upload_tcp"]["retransmits"],
            fifo.metrics["upload_tcp"]["timeouts"],
        ));
    t
}

/// The charts (written by [`write_throughput`] and [`write_rates_chart`]).
fn figures() -> Vec<Figure> {
    vec![
        Figure {
            title: "Throughput over time, both directions, FIFO (dashes: P3 §3's averages)".into(),
            file: "throughput_fifo.svg".into(),
        },
        Figure {
            title: "Throughput over time, both directions, ACK separation with and without the ACK filter (dashes: P3 §4's averages)".into(),
            file: "throughput_acksep.svg".into(),
        },
        Figure {
            title: "Average throughput per run (dashes: P3's figures)".into(),
            file: "rates.svg".into(),
        },
    ]
}

//! The `adsl-ack` experiment — P3 (SNU 2005, P3 in `docs/papers.md`): a bulk upload
//! and a bulk download through a home gateway on an asymmetric ADSL link.
//!
//! Topology (`netsched_sim::topo::adsl_gateway`): local host — 10 Mbit/s LAN — gateway —
//! 800 kbit/s up / 2.1 Mbit/s down — remote host; the uplink egress is a FIFO of 100 packets,
//! every other queue is large (1000). TCP: 1500-byte packets, window 88 segments (P3 §3.2).
//!
//! Runs (70 s each, P3 §3): upload alone, download alone, both with the FIFO, both with ACK
//! separation (P3 §4: ACK FIFO of 100 served strictly first, bulk FIFO of 100), both with
//! per-interface input queues at the gateway under DRR feeding the same output FIFO (P3 §3.3:
//! "the input-queue fix does not help"), UDP at 90% of both link rates (P3 §3.1: no loss), and
//! a matrix of TCP settings (window, SACK, minimum RTO, delayed ACK) for the FIFO run, to show
//! which settings decide which direction collapses.
//!
//! Beyond P3: the same runs with the ACK filter (and the ACK share cap) on the ACK queue, and
//! a sensitivity table over what P3 does not fix (link rates and their asymmetry, queue size,
//! delay, window, delayed ACKs) that says where a variant leaves the paper's regime.
//!
//! Outputs: `throughput.csv` (per run, direction and second, kbit/s), `runs.csv`,
//! `matrix.csv`, `sensitivity.csv`, `throughput_fifo.svg`, `throughput_acksep.svg`,
//! `rates.svg`.
//!
//! Layout: [`model`] is what is simulated, `report` the checks, tables, charts and notes.

pub mod model;
mod report;

use model::{run_avg, run_udp, Measured, Setup};
pub use model::{simulate, Params};
use netsched_report::ExperimentOutput;
use netsched_sim::tcp::TcpConfig;
use std::path::Path;

/// The upload's share of its rate alone that P3 §4 reports with ACK separation (≈750 of
/// ≈750 kbit/s), as the check states it: ≥ 80%. Strict ACK priority can leave the upload at
/// most the uplink minus the download's ACKs, so the claim is out of reach once the ACKs need
/// more than 1 − this share of the uplink: the edge of the paper's regime.
pub const UPLOAD_SHARE: f64 = 0.8;
/// The ACK share cap of the "filter + cap" runs: the largest ACK share that still leaves the
/// upload its [`UPLOAD_SHARE`].
pub const ACK_CAP: f64 = 1.0 - UPLOAD_SHARE;

/// The main configurations: (name, setup, upload, download).
pub const CONFIGS: [(&str, Setup, bool, bool); 6] = [
    ("upload alone", Setup::Fifo, true, false),
    ("download alone", Setup::Fifo, false, true),
    ("both, FIFO 100", Setup::Fifo, true, true),
    ("both, ACK separation", Setup::AckSep, true, true),
    ("both, input queues + DRR", Setup::InputDrr, true, true),
    (
        "both, ACK separation + filter",
        Setup::AckSepFilter { cap: None },
        true,
        true,
    ),
];

/// One cell of the TCP-settings matrix (both directions, FIFO 100).
pub struct MatrixRow {
    pub tcp: TcpConfig,
    pub m: Measured,
}

/// One variant of the sensitivity table.
pub struct SensRow {
    pub label: String,
    pub p: Params,
    pub up_alone: f64,
    pub down_alone: f64,
    pub fifo: Measured,
    pub sep: Measured,
    pub filter: Measured,
    pub filter_cap: Measured,
}

/// Everything the report is made from.
pub struct Outcome {
    pub measured: Vec<Measured>,
    pub udp: Option<(u64, u64, u64, u64)>,
    pub matrix: Vec<MatrixRow>,
    pub sens: Vec<SensRow>,
}

/// The ACK load a download at the downlink's rate puts on the uplink, as a share of the
/// uplink: one ACK of `ack_bytes` per segment (per `ack_every` segments with delayed ACKs).
pub fn ack_load_share(p: &Params) -> f64 {
    let per_segment = if p.tcp.delayed_ack {
        1.0 / f64::from(p.tcp.ack_every.max(1))
    } else {
        1.0
    };
    p.topology.down_kbps * f64::from(p.tcp.ack_bytes) / f64::from(p.tcp.segment_bytes) * per_segment
        / p.topology.up_kbps
}

/// The variants: rates and asymmetry (some beyond P3's regime on purpose), queue, delay,
/// window, delayed ACKs. Same seed for every row.
fn sensitivity(p: &Params, seed: u64) -> anyhow::Result<Vec<SensRow>> {
    let with = |label: String, f: &dyn Fn(&mut Params)| {
        let mut q = p.clone();
        q.seeds = p.sensitivity_seeds;
        f(&mut q);
        (label, q)
    };
    let t = &p.topology;
    let variants = vec![
        with("as configured".into(), &|_| {}),
        with(format!("uplink {:.0} kbit/s", t.up_kbps / 2.0), &|q| {
            q.topology.up_kbps = t.up_kbps / 2.0
        }),
        with(format!("uplink {:.0} kbit/s", t.up_kbps / 4.0), &|q| {
            q.topology.up_kbps = t.up_kbps / 4.0
        }),
        with(format!("downlink {:.0} kbit/s", t.down_kbps * 2.0), &|q| {
            q.topology.down_kbps = t.down_kbps * 2.0
        }),
        with(format!("downlink {:.0} kbit/s", t.down_kbps * 4.0), &|q| {
            q.topology.down_kbps = t.down_kbps * 4.0
        }),
        with(
            format!("{:.0} / {:.0} kbit/s", t.up_kbps / 4.0, t.down_kbps * 4.0),
            &|q| {
                q.topology.up_kbps = t.up_kbps / 4.0;
                q.topology.down_kbps = t.down_kbps * 4.0;
            },
        ),
        with(format!("uplink FIFO {}", t.uplink_fifo_packets / 3), &|q| {
            q.topology.uplink_fifo_packets = (t.uplink_fifo_packets / 3).max(1)
        }),
        with(format!("uplink FIFO {}", t.uplink_fifo_packets * 3), &|q| {
            q.topology.uplink_fifo_packets = t.uplink_fifo_packets * 3
        }),
        with(format!("WAN delay {} ms", t.wan_delay_ms * 4.0), &|q| {
            q.topology.wan_delay_ms = t.wan_delay_ms * 4.0
        }),
        with(format!("window {}", p.tcp.max_window_segments / 2), &|q| {
            q.tcp.max_window_segments = (p.tcp.max_window_segments / 2).max(1)
        }),
        with("delayed ACKs".into(), &|q| q.tcp.delayed_ack = true),
    ];
    let mut rows = Vec::new();
    for (label, q) in variants {
        q.validate()
            .map_err(|e| anyhow::anyhow!("sensitivity variant {label:?}: {e}"))?;
        let run = |setup, up, down| run_avg(&q, &q.tcp, setup, up, down, seed);
        let up_alone = run(Setup::Fifo, true, false)?.upload_kbps;
        let down_alone = run(Setup::Fifo, false, true)?.download_kbps;
        rows.push(SensRow {
            label,
            up_alone,
            down_alone,
            fifo: run(Setup::Fifo, true, true)?,
            sep: run(Setup::AckSep, true, true)?,
            filter: run(Setup::AckSepFilter { cap: None }, true, true)?,
            filter_cap: run(Setup::AckSepFilter { cap: Some(ACK_CAP) }, true, true)?,
            p: q,
        });
    }
    Ok(rows)
}

/// The scenario typed and checked, nothing run (`Experiment::check`).
pub fn check(params: &serde_json::Value) -> anyhow::Result<()> {
    crate::scenario::typed::<Params>(params, "adsl-ack")?.validate()
}

pub fn run(params: &serde_json::Value, seed: u64, out: &Path) -> anyhow::Result<ExperimentOutput> {
    let p: Params = crate::scenario::typed(params, "adsl-ack")?;
    p.validate()?;
    std::fs::create_dir_all(out)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", out.display()))?;
    let mut measured = Vec::new();
    for (i, (_, setup, up, down)) in CONFIGS.iter().enumerate() {
        measured.push(run_avg(
            &p,
            &p.tcp,
            *setup,
            *up,
            *down,
            seed.wrapping_add(1000 * i as u64),
        )?);
    }
    let udp = if p.udp.enabled {
        Some(run_udp(&p, seed)?)
    } else {
        None
    };
    let mut matrix = Vec::new();
    if p.matrix.enabled {
        for &w in &p.matrix.max_window_segments {
            for &sack in &p.matrix.sack {
                for &min_rto_ms in &p.matrix.min_rto_ms {
                    for &delayed_ack in &p.matrix.delayed_ack {
                        let tcp = TcpConfig {
                            max_window_segments: w,
                            sack,
                            min_rto_ms,
                            delayed_ack,
                            ..p.tcp.clone()
                        };
                        tcp.validate()
                            .map_err(|e| anyhow::anyhow!("adsl-ack: matrix: {e}"))?;
                        let m = run_avg(&p, &tcp, Setup::Fifo, true, true, seed)?;
                        matrix.push(MatrixRow { tcp, m });
                    }
                }
            }
        }
    }
    let sens = if p.sensitivity {
        sensitivity(&p, seed)?
    } else {
        Vec::new()
    };
    report::write(
        &p,
        params,
        seed,
        &Outcome {
            measured,
            udp,
            matrix,
            sens,
        },
        out,
    )
}

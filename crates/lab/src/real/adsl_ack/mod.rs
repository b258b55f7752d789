//! The adsl-ack experiment (P3) on real Linux: namespaces local — gateway — modem — remote.
//!
//! ```text
//!  local ──LAN 10 Mbit/s── gateway ──veth── [modem: netsched link] ──veth── remote
//!  10.203.1.1           .1.254 | .2.254        up 800 kbit/s, FIFO 100        10.203.2.1
//!                                            down 2.1 Mbit/s, FIFO 300
//!                                            + propagation delay each way
//! ```
//!
//! The access link (P3: ADSL 800 kbit/s up, 2.1 Mbit/s down, uplink FIFO of 100 packets) is
//! emulated by `netsched link` in the `modem` namespace (there is no netem on this kernel): a
//! rate, a propagation delay (default 10 ms each way) and a core discipline per direction. The
//! LAN is shaped to 10 Mbit/s with `tbf`. TCP runs between the end hosts (iperf3 in `local`
//! and `remote`), never on a shaping hop. Offloads are off on every veth.
//!
//! Runs per variant (congestion control × window clamp): upload alone, download alone, both
//! with FIFO, both with ACK separation by `netsched shape` on the gateway (HTB + u32, shaped
//! 5 % below the uplink so the queue is the gateway's), both with ACK separation by
//! `netsched link` (the core `AckSeparation` as the modem's uplink discipline). The "strong
//! asymmetry" set (1 Mbit/s up, 50 Mbit/s down) adds: strict ACK priority by tc, strict by the
//! link engine, and the link engine with the RFC 3449 ACK filter and an ACK-share cap.
//!
//! Every run builds its own [`Testbed`]; processes (iperf3, ping) are stopped by id with
//! their process group and the engine thread is stopped when the run ends, also on error,
//! panic or Ctrl-C/SIGTERM (a [`SignalGuard`] for the whole experiment: the current run
//! stops within ≈ 50 ms, everything it created is removed, and the experiment returns an
//! error).
//!
//! - `params.rs`: the experiment's parameters and TCP variants;
//! - `rig.rs`: the namespaces, the modem (`netsched link`) and the gateway's shaping;
//! - `traffic.rs`: iperf3 and ping, started and their output parsed;
//! - `run.rs`: one configuration end to end;
//! - `checks.rs`: the paper's claims (and the strong asymmetry's) decided on the runs;
//! - `report.rs`: per-run results, `throughput.csv`, paper | ours, charts, notes.

mod checks;
mod format;
mod params;
mod report;
mod rig;
mod run;
mod traffic;

pub use params::{parse_variant, RealParams};
pub use run::run_one;

use anyhow::{Context, Result};
use netsched_core::{Nanos, MS};
use netsched_link::engine::EngineStats;
use netsched_link::shape;
use netsched_report::ExperimentOutput;
use netsched_testbed::{check_interrupted, SignalGuard};
use serde::Serialize;
use serde_json::Value;
use std::path::Path;

/// The access network of one run set.
#[derive(Debug, Clone, Serialize)]
pub struct Access {
    pub up_bps: u64,
    pub down_bps: u64,
    pub lan_bps: u64,
    pub up_queue: usize,
    pub down_queue: usize,
    /// One-way propagation delay of the access link.
    pub delay: Nanos,
}

/// Who separates ACKs from data on the uplink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Separation {
    /// Plain FIFO in the modem (the paper's problem).
    Fifo,
    /// `netsched shape` on the gateway: HTB + u32, strict ACK priority.
    Shape,
    /// `netsched link`: core AckSeparation, strict priority (the paper's discipline).
    Link,
    /// `netsched link`: AckSeparation with the ACK filter and an ACK-share cap.
    LinkFiltered,
}

impl Separation {
    fn label(self) -> &'static str {
        match self {
            Separation::Fifo => "FIFO",
            Separation::Shape => "ACK sep. (tc)",
            Separation::Link => "ACK sep. (link)",
            Separation::LinkFiltered => "ACK filter+cap (link)",
        }
    }
}

/// TCP settings of a variant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Variant {
    /// Congestion control: "reno", "cubic", ... or "default" (the machine's).
    pub cc: String,
    /// Window clamp of the upload in packets (iperf3 `-w`, socket buffers of
    /// `packets × MSS`), or none.
    pub window_packets: Option<u32>,
    /// Window clamp of the download (the same as the upload's unless given separately).
    pub down_window_packets: Option<u32>,
}

impl Variant {
    pub fn name(&self) -> String {
        let w = |x: Option<u32>| x.map(|w| w.to_string()).unwrap_or_else(|| "none".into());
        if self.window_packets == self.down_window_packets {
            match self.window_packets {
                Some(n) => format!("{}-w{n}", self.cc),
                None => self.cc.clone(),
            }
        } else {
            format!(
                "{}-up{}-down{}",
                self.cc,
                w(self.window_packets),
                w(self.down_window_packets)
            )
        }
    }
}

/// One measured run.
#[derive(Debug, Clone, Serialize)]
pub struct RunSpec {
    pub set: String,
    pub upload: bool,
    pub download: bool,
    pub sep: Separation,
    pub variant: Variant,
    pub secs: u32,
    pub access: Access,
    /// Share cap for `LinkFiltered`.
    pub ack_share_max: f64,
}

impl RunSpec {
    pub fn name(&self) -> String {
        let what = match (self.upload, self.download) {
            (true, false) => "upload alone".to_string(),
            (false, true) => "download alone".to_string(),
            _ => format!("both, {}", self.sep.label()),
        };
        format!("{} / {} / {}", self.set, self.variant.name(), what)
    }
}

/// What one run measured.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunOutcome {
    /// Mean goodput after the warm-up, kbit/s (receiver side).
    pub up_kbit: Option<f64>,
    pub down_kbit: Option<f64>,
    /// (time s, kbit/s) per second, receiver side.
    pub up_series: Vec<(f64, f64)>,
    pub down_series: Vec<(f64, f64)>,
    /// Ping RTTs local → remote during the run, ms.
    pub ping_ms: Vec<f64>,
    pub ping_sent: u32,
    pub link: Option<EngineStats>,
    pub shape: Option<shape::ShapeState>,
    /// Congestion control actually in force in the sender namespaces.
    pub cc_in_force: String,
    /// The unique tag of the run's testbed (in every namespace name it created).
    pub testbed_tag: String,
    /// Share of the traffic time (%) a 1 ms sleeper of this process woke later than the link
    /// engine catches up ([`netsched_link::emulation::CATCH_UP`]), and its longest late
    /// wake-up (ms): how much of the machine the run got ([`super::watch_lateness`]).
    pub host_late_pct: f64,
    pub host_max_late_ms: f64,
}

/// `netsched lab run adsl-ack --real`.
pub fn run_real(params: &Value, seed: u64, out: &Path, quick: bool) -> Result<ExperimentOutput> {
    let rp = RealParams::from_json(params, quick)?;
    let variants: Vec<Variant> = rp
        .variants
        .iter()
        .map(|s| parse_variant(s))
        .collect::<Result<_>>()?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let specs = run_specs(&rp, &variants)?;
    let _signals = SignalGuard::install()?;
    let mut measured = Vec::new();
    for spec in specs {
        check_interrupted()?;
        eprintln!("adsl-ack --real: {} ({} s)", spec.name(), spec.secs);
        let o = run::run_one(&spec).with_context(|| spec.name())?;
        eprintln!(
            "  upload {} kbit/s, download {} kbit/s, ping p50 {} ms",
            format::fmt_k(o.up_kbit),
            format::fmt_k(o.down_kbit),
            format::fmt_k(netsched_report::stats::percentile_of(&o.ping_ms, 0.50))
        );
        measured.push(Measured { spec, out: o });
    }
    report::assemble(&rp, seed, out, &variants, measured)
}

/// The runs of `rp`: per variant the ADSL set (each direction alone; both with FIFO, with ACK
/// separation by `netsched shape` and by `netsched link`), then the strong-asymmetry set.
fn run_specs(rp: &RealParams, variants: &[Variant]) -> Result<Vec<RunSpec>> {
    let adsl = Access {
        up_bps: (rp.up_kbit * 1e3) as u64,
        down_bps: (rp.down_kbit * 1e3) as u64,
        lan_bps: (rp.lan_kbit * 1e3) as u64,
        up_queue: rp.up_queue,
        down_queue: rp.down_queue,
        delay: (rp.delay_ms * MS as f64) as Nanos,
    };
    let mut specs = Vec::new();
    for v in variants {
        for (upload, download, sep) in [
            (true, false, Separation::Fifo),
            (false, true, Separation::Fifo),
            (true, true, Separation::Fifo),
            (true, true, Separation::Shape),
            (true, true, Separation::Link),
        ] {
            specs.push(RunSpec {
                set: "adsl".into(),
                upload,
                download,
                sep,
                variant: v.clone(),
                secs: rp.duration_s,
                access: adsl.clone(),
                ack_share_max: rp.ack_share_max,
            });
        }
    }
    if rp.strong {
        let strong = Access {
            up_bps: (rp.strong_up_kbit * 1e3) as u64,
            down_bps: (rp.strong_down_kbit * 1e3) as u64,
            // The LAN must not be the download's bottleneck here.
            lan_bps: ((rp.strong_down_kbit * 2e3) as u64).max(adsl.lan_bps),
            ..adsl.clone()
        };
        let v = parse_variant(&rp.strong_variant)?;
        for (upload, download, sep) in [
            (true, false, Separation::Fifo),
            (false, true, Separation::Fifo),
            (true, true, Separation::Shape),
            (true, true, Separation::Link),
            (true, true, Separation::LinkFiltered),
        ] {
            specs.push(RunSpec {
                set: "strong".into(),
                upload,
                download,
                sep,
                variant: v.clone(),
                secs: rp.duration_s,
                access: strong.clone(),
                ack_share_max: rp.ack_share_max,
            });
        }
    }
    Ok(specs)
}

/// One run and what it measured.
struct Measured {
    spec: RunSpec,
    out: RunOutcome,
}

/// The outcome of the run of set `set`, variant `v`, directions `up`/`down` and (both busy)
/// separation `sep`.
fn find<'a>(
    m: &'a [Measured],
    set: &str,
    v: &Variant,
    up: bool,
    down: bool,
    sep: Separation,
) -> Option<&'a RunOutcome> {
    m.iter()
        .find(|x| {
            x.spec.set == set
                && &x.spec.variant == v
                && x.spec.upload == up
                && x.spec.download == down
                && (x.spec.sep == sep || !(up && down))
        })
        .map(|x| &x.out)
}

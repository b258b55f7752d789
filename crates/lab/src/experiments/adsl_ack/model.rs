//! adsl-ack's model: the typed scenario with its bounds, and one simulated configuration
//! (topology, uplink discipline, flows) run over the scenario's sub-seeds.

use netsched_core::qdisc::{Qdisc, QdiscConfig};
use netsched_core::rng::SplitMix64;
use netsched_core::{Nanos, MS, SEC};
use netsched_sim::net::{LinkClassRule, Sim};
use netsched_sim::tcp::TcpConfig;
use netsched_sim::topo::{adsl_gateway, Adsl, AdslParams};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Bounds on the scenario (far above P3's setup: one 70 s run, 800 kbit/s / 2.1 Mbit/s,
/// FIFO of 100), so a typo cannot make a run take hours or exhaust memory. Simulated work
/// grows with rate × duration × sub-seeds, memory with the queue sizes.
pub const MAX_DURATION_S: f64 = 600.0;
pub const MAX_RATE_KBPS: f64 = 1_000_000.0;
pub const MAX_SEEDS: u64 = 100;
pub const MAX_QUEUE_PACKETS: usize = 100_000;
/// Entries per list of the TCP-settings matrix (the matrix runs the product of the lists).
pub const MAX_MATRIX_VALUES: usize = 8;

/// The scenario file (`scenarios/adsl-ack.toml`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Params {
    pub duration_s: f64,
    /// Throughput is averaged from this time on (slow start excluded).
    pub measure_from_s: f64,
    /// Flows start at a random time in `[0, start_jitter_ms)` drawn from the seed.
    pub start_jitter_ms: f64,
    /// Each configuration runs with this many sub-seeds drawn from the seed; figures are means.
    /// The outcome of a FIFO run is sensitive to the exact timing of the first losses.
    pub seeds: u64,
    pub topology: Topology,
    pub tcp: TcpConfig,
    /// The ACK-separation discipline of the uplink (class 0 = pure ACKs, 1 = the rest).
    pub ack_separation: QdiscConfig,
    pub input_queues: InputQueues,
    pub udp: Udp,
    pub matrix: Matrix,
    /// The sensitivity table: the main configurations at variants of what P3 does not fix.
    pub sensitivity: bool,
    /// Sub-seeds per cell of the sensitivity table (fewer than `seeds` keeps the run short).
    pub sensitivity_seeds: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Topology {
    pub lan_kbps: f64,
    pub lan_delay_ms: f64,
    pub up_kbps: f64,
    pub down_kbps: f64,
    pub wan_delay_ms: f64,
    /// The uplink FIFO (P3 §3.2: 100 packets).
    pub uplink_fifo_packets: usize,
    /// Every other queue ("large").
    pub large_queue_packets: usize,
}

/// Gateway input processing for the P3 §3.3 run.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InputQueues {
    /// CPU time to forward one packet (a 40 MHz ARM, P3 §3.1).
    pub per_packet_us: f64,
    /// DRR over the two input queues: class 0 = from the LAN, class 1 = from the ADSL side.
    pub qdisc: QdiscConfig,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Udp {
    pub enabled: bool,
    /// Rate of each direction as a share of its link rate.
    pub load: f64,
    pub packet_bytes: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Matrix {
    pub enabled: bool,
    pub max_window_segments: Vec<u32>,
    pub sack: Vec<bool>,
    pub min_rto_ms: Vec<f64>,
    pub delayed_ack: Vec<bool>,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            duration_s: 70.0,
            measure_from_s: 5.0,
            start_jitter_ms: 200.0,
            seeds: 5,
            topology: Topology::default(),
            tcp: paper_tcp(),
            ack_separation: QdiscConfig::AckSeparation {
                ack: netsched_core::qdisc::prio::BandConfig::with_limits(100, u64::MAX),
                other: netsched_core::qdisc::prio::BandConfig::with_limits(100, u64::MAX),
                ack_filter: false,
                ack_share_max: None,
            },
            input_queues: InputQueues::default(),
            udp: Udp::default(),
            matrix: Matrix::default(),
            sensitivity: true,
            sensitivity_seeds: 3,
        }
    }
}

/// The TCP settings under which the model reproduces P3's collapse (see the matrix).
fn paper_tcp() -> TcpConfig {
    TcpConfig {
        sack: false,
        delayed_ack: false,
        min_rto_ms: 1000.0,
        max_window_segments: 88,
        ..TcpConfig::default()
    }
}

impl Default for Topology {
    fn default() -> Self {
        Self {
            lan_kbps: 10_000.0,
            lan_delay_ms: 0.1,
            up_kbps: 800.0,
            down_kbps: 2100.0,
            wan_delay_ms: 10.0,
            uplink_fifo_packets: 100,
            large_queue_packets: 1000,
        }
    }
}

impl Default for InputQueues {
    fn default() -> Self {
        Self {
            per_packet_us: 100.0,
            qdisc: serde_json::from_value(json!({
                "kind": "drr",
                "classes": [{"quantum": 1514, "queue_limit": 100},
                            {"quantum": 1514, "queue_limit": 100}]
            }))
            .expect("valid default"),
        }
    }
}

impl Default for Udp {
    fn default() -> Self {
        Self {
            enabled: true,
            load: 0.9,
            packet_bytes: 1500,
        }
    }
}

impl Default for Matrix {
    fn default() -> Self {
        Self {
            enabled: true,
            max_window_segments: vec![88, 44],
            sack: vec![false, true],
            min_rto_ms: vec![1000.0, 200.0],
            delayed_ack: vec![false, true],
        }
    }
}

impl Params {
    pub fn validate(&self) -> anyhow::Result<()> {
        let pos = |name: &str, v: f64| -> anyhow::Result<()> {
            if !(v.is_finite() && v > 0.0) {
                anyhow::bail!("adsl-ack: {name} = {v}: must be a positive number");
            }
            Ok(())
        };
        pos("duration_s", self.duration_s)?;
        pos("topology.lan_kbps", self.topology.lan_kbps)?;
        pos("topology.up_kbps", self.topology.up_kbps)?;
        pos("topology.down_kbps", self.topology.down_kbps)?;
        if !(self.measure_from_s >= 0.0 && self.measure_from_s < self.duration_s) {
            anyhow::bail!(
                "adsl-ack: measure_from_s = {}: must be in [0, duration_s = {})",
                self.measure_from_s,
                self.duration_s
            );
        }
        for (name, v) in [
            ("topology.lan_delay_ms", self.topology.lan_delay_ms),
            ("topology.wan_delay_ms", self.topology.wan_delay_ms),
            ("start_jitter_ms", self.start_jitter_ms),
            (
                "input_queues.per_packet_us",
                self.input_queues.per_packet_us,
            ),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                anyhow::bail!("adsl-ack: {name} = {v}: must be ≥ 0");
            }
        }
        if self.seeds == 0 || self.seeds > MAX_SEEDS {
            anyhow::bail!(
                "adsl-ack: seeds = {}: must be in 1..={MAX_SEEDS}",
                self.seeds
            );
        }
        if self.sensitivity_seeds == 0 || self.sensitivity_seeds > MAX_SEEDS {
            anyhow::bail!(
                "adsl-ack: sensitivity_seeds = {}: must be in 1..={MAX_SEEDS}",
                self.sensitivity_seeds
            );
        }
        if self.duration_s > MAX_DURATION_S {
            anyhow::bail!(
                "adsl-ack: duration_s = {}: at most {MAX_DURATION_S} s",
                self.duration_s
            );
        }
        for (name, v) in [
            ("topology.lan_kbps", self.topology.lan_kbps),
            ("topology.up_kbps", self.topology.up_kbps),
            ("topology.down_kbps", self.topology.down_kbps),
        ] {
            if v > MAX_RATE_KBPS {
                anyhow::bail!("adsl-ack: {name} = {v}: at most {MAX_RATE_KBPS} kbit/s");
            }
        }
        for (name, v) in [
            (
                "topology.uplink_fifo_packets",
                self.topology.uplink_fifo_packets,
            ),
            (
                "topology.large_queue_packets",
                self.topology.large_queue_packets,
            ),
        ] {
            if v == 0 || v > MAX_QUEUE_PACKETS {
                anyhow::bail!("adsl-ack: {name} = {v}: must be in 1..={MAX_QUEUE_PACKETS}");
            }
        }
        if self.udp.packet_bytes < 28 || self.udp.packet_bytes > 65_535 {
            anyhow::bail!(
                "adsl-ack: udp.packet_bytes = {}: must be in 28..=65535",
                self.udp.packet_bytes
            );
        }
        for (name, n) in [
            (
                "matrix.max_window_segments",
                self.matrix.max_window_segments.len(),
            ),
            ("matrix.sack", self.matrix.sack.len()),
            ("matrix.min_rto_ms", self.matrix.min_rto_ms.len()),
            ("matrix.delayed_ack", self.matrix.delayed_ack.len()),
        ] {
            if n > MAX_MATRIX_VALUES {
                anyhow::bail!("adsl-ack: {name} has {n} values: at most {MAX_MATRIX_VALUES}");
            }
        }
        if !matches!(self.ack_separation, QdiscConfig::AckSeparation { .. }) {
            anyhow::bail!("adsl-ack: ack_separation.kind must be \"ack_separation\"");
        }
        if !(self.udp.load > 0.0 && self.udp.load <= 2.0) {
            anyhow::bail!("adsl-ack: udp.load = {}: must be in (0, 2]", self.udp.load);
        }
        self.tcp
            .validate()
            .map_err(|e| anyhow::anyhow!("adsl-ack: tcp.{e}"))?;
        Ok(())
    }
}

/// Which configuration a run uses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Setup {
    Fifo,
    AckSep,
    /// ACK separation with the ACK filter on (RFC 3449 §5.2.1; beyond P3) and, if given, the
    /// ACK share cap (`ack_share_max`: ACK bytes ≤ cap × bytes sent while both classes wait).
    AckSepFilter {
        cap: Option<f64>,
    },
    InputDrr,
}

#[derive(Debug, Clone)]
pub struct Measured {
    pub upload_kbps: f64,
    pub download_kbps: f64,
    /// Per second, kbit/s.
    pub upload_series: Vec<f64>,
    pub download_series: Vec<f64>,
    pub metrics: serde_json::Value,
    pub events: u64,
}

pub fn kbps(bits_per_s: f64) -> u64 {
    (bits_per_s * 1000.0).round() as u64
}

/// Build and run one configuration. Public so the bench can time the same run.
pub fn simulate(
    p: &Params,
    tcp: &TcpConfig,
    setup_name: &str,
    upload: bool,
    download: bool,
    seed: u64,
) -> anyhow::Result<(f64, f64, u64)> {
    let setup = match setup_name {
        "fifo" => Setup::Fifo,
        "ack_separation" => Setup::AckSep,
        "ack_separation_filter" => Setup::AckSepFilter { cap: None },
        "input_drr" => Setup::InputDrr,
        other => anyhow::bail!("unknown setup {other}"),
    };
    let m = run_one(p, tcp, setup, upload, download, seed)?;
    Ok((m.upload_kbps, m.download_kbps, m.events))
}

fn build(p: &Params, setup: Setup, seed: u64) -> anyhow::Result<(Sim, Adsl, SplitMix64)> {
    let t = &p.topology;
    let fifo = |n: usize| QdiscConfig::Fifo {
        queue_limit: n,
        size_limit: u64::MAX,
    };
    let mut ap = AdslParams {
        lan_bps: kbps(t.lan_kbps),
        lan_delay: (t.lan_delay_ms * MS as f64) as Nanos,
        up_bps: kbps(t.up_kbps),
        down_bps: kbps(t.down_kbps),
        wan_delay: (t.wan_delay_ms * MS as f64) as Nanos,
        uplink_qdisc: fifo(t.uplink_fifo_packets),
        uplink_classifier: LinkClassRule::Single(0),
        other_qdisc: fifo(t.large_queue_packets),
        gateway_input: None,
    };
    match setup {
        Setup::Fifo => {}
        Setup::AckSep => {
            ap.uplink_qdisc = p.ack_separation.clone();
            ap.uplink_classifier = LinkClassRule::TcpAck { ack: 0, other: 1 };
        }
        Setup::AckSepFilter { cap } => {
            let mut q = p.ack_separation.clone();
            if let QdiscConfig::AckSeparation {
                ack_filter,
                ack_share_max,
                ..
            } = &mut q
            {
                *ack_filter = true;
                *ack_share_max = cap.or(*ack_share_max);
            }
            ap.uplink_qdisc = q;
            ap.uplink_classifier = LinkClassRule::TcpAck { ack: 0, other: 1 };
        }
        Setup::InputDrr => {
            let per_packet = (p.input_queues.per_packet_us * 1000.0) as Nanos;
            ap.gateway_input = Some((p.input_queues.qdisc.clone(), per_packet));
        }
    }
    let mut sim = Sim::new(seed, SEC);
    let topo = adsl_gateway(&mut sim, &ap).map_err(|e| anyhow::anyhow!("adsl-ack: {e}"))?;
    Ok((sim, topo, SplitMix64::new(seed ^ 0x5EED_AD51)))
}

fn run_one(
    p: &Params,
    tcp: &TcpConfig,
    setup: Setup,
    upload: bool,
    download: bool,
    seed: u64,
) -> anyhow::Result<Measured> {
    let (mut sim, t, mut rng) = build(p, setup, seed)?;
    let jitter = (p.start_jitter_ms * MS as f64) as u64;
    let mut start = || if jitter == 0 { 0 } else { rng.below(jitter) };
    let err = |e: netsched_sim::error::SimConfigError| anyhow::anyhow!("adsl-ack: {e}");
    let up = if upload {
        Some(
            sim.add_tcp(t.local, t.remote, tcp.clone(), start(), None)
                .map_err(err)?,
        )
    } else {
        None
    };
    let down = if download {
        Some(
            sim.add_tcp(t.remote, t.local, tcp.clone(), start(), None)
                .map_err(err)?,
        )
    } else {
        None
    };
    let end = (p.duration_s * SEC as f64) as Nanos;
    sim.run_until(end);
    let seconds = p.duration_s.ceil() as usize;
    let from = p.measure_from_s.floor() as usize;
    let seg_bits = tcp.segment_bytes as f64 * 8.0;
    let series = |c: Option<u32>| -> Vec<f64> {
        match c {
            None => vec![0.0; seconds],
            Some(c) => {
                let bins = &sim.conn_bins[c as usize];
                (0..seconds)
                    .map(|i| bins.get(i).copied().unwrap_or(0) as f64 * seg_bits / 1000.0)
                    .collect()
            }
        }
    };
    let us = series(up);
    let ds = series(down);
    let avg = |s: &[f64]| s[from..].iter().sum::<f64>() / (seconds - from) as f64;
    let upl = &sim.links[t.uplink as usize];
    let conn_stats = |c: Option<u32>| {
        c.map(|c| serde_json::to_value(&sim.conns[c as usize].stats).expect("serialisable"))
    };
    let mut metrics = json!({
        "upload_kbps": avg(&us),
        "download_kbps": avg(&ds),
        "uplink_drops_data": upl.stats.drops_data,
        "uplink_drops_ack": upl.stats.drops_ack,
        "uplink_tx_acks": upl.stats.tx_acks,
        "uplink_max_queue": upl.stats.max_queue,
        "uplink_utilisation": upl.stats.busy_ns as f64 / end as f64,
        "upload_tcp": conn_stats(up),
        "download_tcp": conn_stats(down),
        "uplink_qdisc_drops": upl.qdisc.stats().dropped(),
    });
    if let Some((drops, st)) = sim.input_stage_stats(t.gateway) {
        metrics["gateway_input_drops"] = json!(drops);
        metrics["gateway_input_received"] = json!(st.received);
    }
    Ok(Measured {
        upload_kbps: avg(&us),
        download_kbps: avg(&ds),
        upload_series: us,
        download_series: ds,
        metrics,
        events: sim.events(),
    })
}

/// Run a configuration with `p.seeds` seeds; throughputs are means, the series is the first
/// seed's, `metrics` holds the first seed's details plus the per-seed throughputs.
pub fn run_avg(
    p: &Params,
    tcp: &TcpConfig,
    setup: Setup,
    upload: bool,
    download: bool,
    seed: u64,
) -> anyhow::Result<Measured> {
    let mut first: Option<Measured> = None;
    let (mut ups, mut downs) = (Vec::new(), Vec::new());
    let mut events = 0;
    // Sub-seeds drawn from the seed, so runs with different seeds share no sub-seed.
    let mut seeds = SplitMix64::new(seed);
    for _ in 0..p.seeds {
        let m = run_one(p, tcp, setup, upload, download, seeds.next_u64())?;
        ups.push(m.upload_kbps);
        downs.push(m.download_kbps);
        events += m.events;
        if first.is_none() {
            first = Some(m);
        }
    }
    let mut m = first.expect("at least one seed");
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    m.upload_kbps = mean(&ups);
    m.download_kbps = mean(&downs);
    m.events = events;
    m.metrics["upload_kbps"] = json!(m.upload_kbps);
    m.metrics["download_kbps"] = json!(m.download_kbps);
    m.metrics["upload_kbps_per_seed"] = json!(ups);
    m.metrics["download_kbps_per_seed"] = json!(downs);
    m.metrics["seeds"] = json!(p.seeds);
    Ok(m)
}

/// UDP at `load` × link rate in both directions: (upload loss, download loss).
pub fn run_udp(p: &Params, seed: u64) -> anyhow::Result<(u64, u64, u64, u64)> {
    let (mut sim, t, _) = build(p, Setup::Fifo, seed)?;
    let end = (p.duration_s * SEC as f64) as Nanos;
    let up_rate = (kbps(p.topology.up_kbps) as f64 * p.udp.load) as u64;
    let down_rate = (kbps(p.topology.down_kbps) as f64 * p.udp.load) as u64;
    let u = sim.add_udp_cbr(t.local, t.remote, up_rate, p.udp.packet_bytes, 0, end - SEC);
    let d = sim.add_udp_cbr(
        t.remote,
        t.local,
        down_rate,
        p.udp.packet_bytes,
        0,
        end - SEC,
    );
    sim.run_until(end);
    let (fu, fd) = (&sim.udp[u as usize], &sim.udp[d as usize]);
    Ok((fu.sent, fu.received, fd.sent, fd.received))
}

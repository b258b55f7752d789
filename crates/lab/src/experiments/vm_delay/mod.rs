//! The `vm-delay` experiment (P2 in `docs/papers.md`): dom0's netback serves the
//! guests' virtual interfaces with strict priority (the prior work) or P2's delay-constrained
//! bitmaps, both through the core's `AnyQdisc`.
//!
//! - `mod.rs` (here): the typed scenario ([`Params`], with bounds), and [`run`]: every
//!   (scheduler, domain count), then the sensitivity variants;
//! - `model.rs`: what is simulated ([`simulate`] one configuration);
//! - `report.rs`: comparisons, checks, charts, CSV, the sensitivity table and the notes —
//!   every number in the prose comes from the runs.

pub mod arrivals;
mod model;
mod report;

pub use model::{
    generated_arrivals, generated_arrivals_with_kind, replay, simulate, summary, Counts, Kind,
    Summary, Tier, TierResult, VifReplay, VmConfig,
};
pub(crate) use report::{latency_cdf_chart, paper_says};

use anyhow::{anyhow, bail};
use netsched_core::rng::SplitMix64;
use netsched_core::units;
use netsched_core::{Nanos, MS, SEC};
use netsched_report::ExperimentOutput;
use serde::Deserialize;
use serde_json::Value;
use std::path::Path;

/// The seeds over which the simulator checked the margins the real-run tests assert with
/// (`cargo run --release -p netsched-lab --example vm_delay_loss_claims`; docs/vswitch.md).
pub const MARGIN_SEEDS: std::ops::RangeInclusive<u64> = 1..=10;

/// Bounds of the scenario: every count and size has one. A run stores one latency per
/// delivered probe, so the packets a run offers are bounded too.
pub mod bounds {
    /// Domains (guests) of one run: the strict-priority and delay-constrained schedulers
    /// keep one class per guest interface, at most `netsched_core::qdisc::prio::MAX_CLASSES`
    /// (1024). Measured cost (docs/bench-lab-scale.md: the default scenario with
    /// `domains.counts=[N]`, 3 schedulers × 60 s, no sensitivity table): about 3.3 ms of CPU
    /// and 2 KiB of memory per guest, linear from 12 to 999 guests (999: 3.3 s of CPU, 11 MiB
    /// peak RSS).
    pub const MAX_DOMAINS: usize = netsched_core::qdisc::prio::MAX_CLASSES;
    /// Entries of `domains.counts`, `run.schedulers`; tiers.
    pub const MAX_LIST: usize = 8;
    /// `backend.batch`.
    pub const MAX_BATCH: usize = 1024;
    /// `backend.vif_queue_packets`.
    pub const MAX_VIF_QUEUE: usize = 4096;
    /// Delay bitmap length (a u64 bitmap with the active bit).
    pub const MAX_BITMAP: u32 = 62;
    /// Packets/s of one domain's data or stream.
    pub const MAX_PPS: f64 = 100_000.0;
    /// Mean data burst, packets.
    pub const MAX_BURST: f64 = 10_000.0;
    /// Packets one simulated configuration may offer (domains × rate × duration).
    pub const MAX_PACKETS: f64 = 50_000_000.0;
}

/// `[domains]` of `scenarios/vm-delay.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DomainParams {
    pub counts: Vec<usize>,
}

/// `[tiers]`: one entry per tier in every list.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierParams {
    pub names: Vec<String>,
    pub priority: Vec<u32>,
    /// Durations (`"10ms"`).
    pub period: Vec<String>,
    /// Durations.
    pub bound: Vec<String>,
    pub bitmap_len: Vec<u32>,
    pub jitter: f64,
    pub stream_pps: Vec<f64>,
}

/// `[traffic]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrafficParams {
    pub data_pps: f64,
    pub data_burst_packets: f64,
}

/// `[backend]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendParams {
    pub batch: usize,
    /// Duration (`"200us"`).
    pub per_packet: String,
    pub vif_queue_packets: usize,
}

/// `[load]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadParams {
    pub cpu_busy: f64,
    /// Duration.
    pub slice: String,
}

/// `[run]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunParams {
    /// Duration (`"60s"`).
    pub duration: String,
    /// Duration (`"60ms"`).
    pub threshold: String,
    pub schedulers: Vec<String>,
    pub sensitivity: bool,
}

/// The whole scenario, typed.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    pub domains: DomainParams,
    pub tiers: TierParams,
    pub traffic: TrafficParams,
    pub backend: BackendParams,
    pub load: LoadParams,
    pub run: RunParams,
}

fn ms(key: &str, text: &str, min: Nanos, max: Nanos) -> anyhow::Result<f64> {
    let ns = units::parse_duration_in(text, min, max).map_err(|e| anyhow!("{key}: {e}"))?;
    Ok(ns as f64 / MS as f64)
}

fn check_list(key: &str, len: usize, max: usize) -> anyhow::Result<()> {
    if len == 0 || len > max {
        bail!("{key}: {len} entries; must be 1..={max}");
    }
    Ok(())
}

fn check_range(key: &str, v: f64, lo: f64, hi: f64) -> anyhow::Result<()> {
    if !(v >= lo && v <= hi) {
        bail!("{key} = {v} is outside {lo}..={hi}");
    }
    Ok(())
}

/// The validated scenario.
#[derive(Debug, Clone)]
pub struct Setup {
    pub counts: Vec<usize>,
    pub schedulers: Vec<String>,
    pub sensitivity: bool,
    /// Everything but scheduler and domain count.
    pub base: VmConfig,
}

impl Setup {
    /// The scenario `params` (JSON of the TOML), typed and checked against [`bounds`].
    pub fn from_params(params: &Value) -> anyhow::Result<Setup> {
        let p: Params = crate::scenario::typed(params, "vm-delay")?;
        Self::from_typed(&p)
    }

    fn from_typed(p: &Params) -> anyhow::Result<Setup> {
        use bounds::*;
        let t = &p.tiers;
        let n = t.names.len();
        check_list("tiers.names", n, MAX_LIST)?;
        for (k, len) in [
            ("priority", t.priority.len()),
            ("period", t.period.len()),
            ("bound", t.bound.len()),
            ("bitmap_len", t.bitmap_len.len()),
            ("stream_pps", t.stream_pps.len()),
        ] {
            if len != n {
                bail!("tiers.{k} has {len} entries but tiers.names has {n}");
            }
        }
        let mut tiers = Vec::new();
        for i in 0..n {
            let name = &t.names[i];
            if !(1..=MAX_BITMAP).contains(&t.bitmap_len[i]) {
                bail!(
                    "tiers.bitmap_len = {} (tier {name}) is outside 1..={MAX_BITMAP}",
                    t.bitmap_len[i]
                );
            }
            check_range(
                &format!("tiers.stream_pps (tier {name})"),
                t.stream_pps[i],
                0.0,
                MAX_PPS,
            )?;
            tiers.push(Tier {
                name: name.clone(),
                priority: t.priority[i],
                period_ms: ms(
                    &format!("tiers.period (tier {name})"),
                    &t.period[i],
                    MS,
                    10 * SEC,
                )?,
                bound_ms: ms(
                    &format!("tiers.bound (tier {name})"),
                    &t.bound[i],
                    MS,
                    100 * SEC,
                )?,
                bitmap_len: t.bitmap_len[i],
                stream_pps: t.stream_pps[i],
            });
        }
        check_range("tiers.jitter", t.jitter, 0.0, 0.99)?;
        check_list("domains.counts", p.domains.counts.len(), MAX_LIST)?;
        for &d in &p.domains.counts {
            if d == 0 || d > MAX_DOMAINS || d % n != 0 {
                bail!(
                    "domains.counts: {d} is outside 1..={MAX_DOMAINS} or cannot be split into {n} equal tiers"
                );
            }
        }
        check_list("run.schedulers", p.run.schedulers.len(), MAX_LIST)?;
        check_range("traffic.data_pps", p.traffic.data_pps, 0.0, MAX_PPS)?;
        check_range(
            "traffic.data_burst_packets",
            p.traffic.data_burst_packets,
            1.0,
            MAX_BURST,
        )?;
        if !(1..=MAX_BATCH).contains(&p.backend.batch) {
            bail!(
                "backend.batch = {} is outside 1..={MAX_BATCH}",
                p.backend.batch
            );
        }
        if !(1..=MAX_VIF_QUEUE).contains(&p.backend.vif_queue_packets) {
            bail!(
                "backend.vif_queue_packets = {} is outside 1..={MAX_VIF_QUEUE}",
                p.backend.vif_queue_packets
            );
        }
        if !(0.0..1.0).contains(&p.load.cpu_busy) {
            bail!("load.cpu_busy = {} is outside 0..1", p.load.cpu_busy);
        }
        let base = VmConfig {
            scheduler: String::new(),
            domains: 0,
            tiers,
            jitter: t.jitter,
            data_pps: p.traffic.data_pps,
            data_burst: p.traffic.data_burst_packets,
            batch: p.backend.batch,
            per_packet_ms: ms("backend.per_packet", &p.backend.per_packet, 1_000, SEC)?,
            vif_queue: p.backend.vif_queue_packets,
            cpu_busy: p.load.cpu_busy,
            slice_ms: ms("load.slice", &p.load.slice, 1_000, 10 * SEC)?,
            slice_spread: 0.5,
            duration: units::parse_duration_in(&p.run.duration, MS, 3600 * SEC)
                .map_err(|e| anyhow!("run.duration: {e}"))?,
            threshold_ms: ms("run.threshold", &p.run.threshold, 1_000, 100 * SEC)?,
        };
        let max_domains = p.domains.counts.iter().copied().max().unwrap_or(0);
        let packets = VmConfig {
            domains: max_domains,
            ..base.clone()
        }
        .offered_pps()
            * base.duration as f64
            / SEC as f64;
        if packets > MAX_PACKETS {
            bail!(
                "run.duration = {}: {max_domains} domains would offer {packets:.0} packets, more than {MAX_PACKETS:.0}; shorten the run",
                p.run.duration
            );
        }
        Ok(Setup {
            counts: p.domains.counts.clone(),
            schedulers: p.run.schedulers.clone(),
            sensitivity: p.run.sensitivity,
            base,
        })
    }
}

/// One (scheduler, domain count) run: its result per tier.
pub struct RunResult {
    pub scheduler: String,
    pub domains: usize,
    pub cfg: VmConfig,
    pub tiers: Vec<TierResult>,
}

/// The runs, and the seed of each domain count.
type Measured = (Vec<RunResult>, Vec<(usize, u64)>);

/// Every scheduler at every domain count; the same arrivals and CPU slices for every
/// scheduler at one domain count. Returns the runs and the seed of each domain count.
fn measure(s: &Setup, seed: u64) -> anyhow::Result<Measured> {
    let mut out = Vec::new();
    let mut seeds = SplitMix64::new(seed);
    let mut seed_of = Vec::new();
    for &n in &s.counts {
        let run_seed = seeds.next_u64();
        seed_of.push((n, run_seed));
        for sch in &s.schedulers {
            let cfg = VmConfig {
                scheduler: sch.clone(),
                domains: n,
                ..s.base.clone()
            };
            let tiers = simulate(&cfg, run_seed)?;
            out.push(RunResult {
                scheduler: sch.clone(),
                domains: n,
                cfg,
                tiers,
            });
        }
    }
    Ok((out, seed_of))
}

/// `cfg` with the per-packet cost scaled so that its offered load is `load`.
fn at_load(cfg: &VmConfig, load: f64) -> VmConfig {
    let mut c = cfg.clone();
    c.per_packet_ms *= load / cfg.offered_load();
    c
}

/// One row of the sensitivity table: strict priority and delay-constrained at one variant,
/// each summarised over the measured tiers (`.0`) and over all tiers (`.1`).
pub struct SensRow {
    pub label: String,
    /// Why the variant is outside P2's regime, if it is.
    pub regime: Option<String>,
    pub load: f64,
    pub sp: (Summary, Summary),
    pub dc: (Summary, Summary),
}

/// Strict priority vs delay-constrained at `base` (its domain count) and at variants of the
/// traffic parameters P2 does not give, each at the same offered load except the load rows.
fn sensitivity(
    base: &VmConfig,
    seed: u64,
    measured: std::ops::Range<usize>,
) -> anyhow::Result<Vec<SensRow>> {
    let load = base.offered_load();
    let scaled_stream = |k: f64| {
        let mut c = base.clone();
        for t in &mut c.tiers {
            t.stream_pps *= k;
        }
        at_load(&c, load)
    };
    let data = |pps: f64, burst: f64| {
        let mut c = base.clone();
        c.data_pps = pps;
        c.data_burst = burst;
        at_load(&c, load)
    };
    let queue = |q: usize| VmConfig {
        vif_queue: q,
        ..base.clone()
    };
    let overload = Some("outside P2's regime: load ≥ 1, the backend cannot keep up".to_string());
    let variants: Vec<(String, Option<String>, VmConfig)> = vec![
        ("as configured".into(), None, base.clone()),
        ("stream ×0.5".into(), None, scaled_stream(0.5)),
        ("stream ×2".into(), None, scaled_stream(2.0)),
        ("no stream".into(), None, scaled_stream(0.0)),
        (
            "data ×0.5".into(),
            None,
            data(base.data_pps * 0.5, base.data_burst),
        ),
        (
            "data ×2".into(),
            None,
            data(base.data_pps * 2.0, base.data_burst),
        ),
        (
            format!("bursts of {}", base.data_burst / 2.0),
            None,
            data(base.data_pps, base.data_burst / 2.0),
        ),
        (
            format!("bursts of {}", base.data_burst * 2.0),
            None,
            data(base.data_pps, base.data_burst * 2.0),
        ),
        (
            format!("vif queue {}", base.vif_queue / 2),
            None,
            queue(base.vif_queue / 2),
        ),
        (
            format!("vif queue {}", base.vif_queue * 2),
            None,
            queue(base.vif_queue * 2),
        ),
        ("load 0.85".into(), None, at_load(base, 0.85)),
        ("load 1.0".into(), overload.clone(), at_load(base, 1.0)),
        ("load 1.1".into(), overload, at_load(base, 1.1)),
    ];
    let all = 0..base.tiers.len();
    let mut rows = Vec::new();
    for (label, regime, c) in variants {
        let one = |sch: &str| -> anyhow::Result<(Summary, Summary)> {
            let r = simulate(
                &VmConfig {
                    scheduler: sch.into(),
                    ..c.clone()
                },
                seed,
            )?;
            Ok((
                summary(&r, measured.clone(), c.threshold_ms),
                summary(&r, all.clone(), c.threshold_ms),
            ))
        };
        let sp = one("strict_priority")?;
        let dc = one("delay_constrained")?;
        rows.push(SensRow {
            label,
            regime,
            load: c.offered_load(),
            sp,
            dc,
        });
    }
    Ok(rows)
}

/// The tiers P2 measured: "while continuously generating traffic from the real-time domains
/// (VMs 1-3), the latency occurring in VMs 4-9 was measured" (§4.1.3) — every tier but the
/// first (High).
pub fn measured_tiers(ntiers: usize) -> std::ops::Range<usize> {
    1.min(ntiers.saturating_sub(1))..ntiers
}

/// Run the experiment.
/// The scenario typed and checked, nothing run (`Experiment::check`).
pub fn check(params: &Value) -> anyhow::Result<()> {
    Setup::from_params(params).map(|_| ())
}

pub fn run(params: &Value, seed: u64, out: &Path) -> anyhow::Result<ExperimentOutput> {
    let s = Setup::from_params(params)?;
    let (runs, seed_of) = measure(&s, seed)?;
    let sens = match (s.sensitivity, seed_of.iter().max_by_key(|(n, _)| *n)) {
        (true, Some(&(n, run_seed))) => {
            let cfg = VmConfig {
                domains: n,
                ..s.base.clone()
            };
            Some((
                n,
                sensitivity(&cfg, run_seed, measured_tiers(cfg.tiers.len()))?,
            ))
        }
        _ => None,
    };
    report::build(&s, &runs, sens.as_ref(), seed, params, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario() -> Value {
        let text = crate::scenario::embedded("vm-delay").unwrap();
        let table = crate::scenario::parse(text, "vm-delay.toml").unwrap();
        crate::scenario::to_json(&table).unwrap()
    }

    #[test]
    fn the_embedded_scenario_is_valid() {
        let s = Setup::from_params(&scenario()).unwrap();
        assert_eq!(s.counts, vec![9, 18]);
        assert_eq!(s.base.tiers[0].period_ms, 10.0);
        assert_eq!(s.base.duration, 60 * SEC);
    }

    #[test]
    fn unknown_keys_and_bad_values_name_the_key() {
        let mut p = scenario();
        p["backend"]["bacth"] = 3.into();
        let e = Setup::from_params(&p).unwrap_err().to_string();
        assert!(e.contains("vm-delay") && e.contains("bacth"), "{e}");
        let mut p = scenario();
        p["run"]["duration"] = "60".into();
        let e = Setup::from_params(&p).unwrap_err().to_string();
        assert!(e.contains("run.duration") && e.contains("60"), "{e}");
        let mut p = scenario();
        p["domains"]["counts"] = serde_json::json!([10]);
        let e = Setup::from_params(&p).unwrap_err().to_string();
        assert!(e.contains("domains.counts") && e.contains("10"), "{e}");
    }

    #[test]
    fn counts_and_sizes_have_bounds() {
        for (section, key, v) in [
            ("domains", "counts", serde_json::json!([3000])),
            ("backend", "batch", serde_json::json!(100_000_000u64)),
            (
                "backend",
                "vif_queue_packets",
                serde_json::json!(100_000_000u64),
            ),
            ("traffic", "data_pps", serde_json::json!(1e9)),
            ("run", "duration", serde_json::json!("100h")),
        ] {
            let mut p = scenario();
            p[section][key] = v;
            let e = Setup::from_params(&p).unwrap_err().to_string();
            assert!(e.contains(key), "{key}: {e}");
        }
        // Long but within the duration bound: refused by the packet bound.
        let mut p = scenario();
        p["run"]["duration"] = "1h".into();
        p["domains"]["counts"] = serde_json::json!([300]);
        let e = Setup::from_params(&p).unwrap_err().to_string();
        assert!(e.contains("packets"), "{e}");
    }
}

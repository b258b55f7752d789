//! `netsched lab run vm-delay --real` (root): P2's experiment through `netsched vswitch` with
//! real guests. Per domain count (9, 18) a testbed: a switch namespace, an external host on
//! the uplink, and one namespace per guest on a veth into the switch. For strict priority and
//! delay-constrained (and the wall-clock variant when not `--quick`):
//! - **probes**: real ICMP echo (`ping` from iputils) from every guest to the external host
//!   every 10/50/100 ms by tier (the scenario's `tiers.period`);
//! - **application data**: bursts of raw frames at exponential intervals, the scenario's
//!   `traffic.data_pps` and `data_burst_packets`, the same in every tier;
//! - **streams**: one frame every 1/`stream_pps` from the High guests;
//! - data and streams are the simulator's own for the run's seed (the sim column's), each
//!   sent at its scheduled time (`bulk_schedule`, `bulk_traffic`);
//! - **budget**: the scenario's backend: `1 / per_packet` packets/s while dom0 has the CPU,
//!   alternating on/off periods with the scenario's `cpu_busy` and `slice` (the switch's
//!   `budget_busy`/`budget_slice`: the periods alternate at their means; the sim column is
//!   simulated with the same shape, `slice_spread` 0). One clock origin for the budget's
//!   periods, the switch's trace and the traffic (`budget_origin`; the traffic starts at an
//!   on period's start, as the simulator's time 0), so the real run, its sim column and the
//!   replay of its trace see the same traffic against the same budget phase.
//!
//! Measured per tier: probe RTT p50/p95/p99, share above the threshold, probe loss (ping),
//! loss of all packets (the switch's per-port drops), the switch's per-port identity, for
//! the bitmap the longest run of round starts a backlogged port was passed over, and the
//! budget a busy host took from the switch (the switch's own count while frames waited, and
//! how late a 1 ms sleeper of this process woke). The
//! same scenario runs in the simulator for the sim column; P2's own words are the paper column.
//!
//! - `rig.rs`: the namespaces (switch, external host, guests) and the switch's configuration;
//! - `traffic.rs`: the probes (`ping`) and the application traffic, and parsing ping's output;
//! - `trace.rs`: what the switch's trace says (drops, replay, clumps, arrivals three ways);
//! - `run.rs`: one configuration's run, measured per tier;
//! - `checks.rs`: P2's claims and the host's preconditions, decided on the runs;
//! - `report.rs`: paper | sim | real, CSV, charts, notes.

mod checks;
mod report;
mod rig;
mod run;
mod trace;
mod traffic;

pub use run::RealRun;
pub use trace::{TierArrivals, TraceFindings};

use crate::experiments::vm_delay::{simulate, Setup, TierResult, VmConfig};
use anyhow::{bail, Result};
use netsched_core::rng::SplitMix64;
use netsched_core::{Nanos, MS, SEC};
use netsched_report::ExperimentOutput;
use serde_json::Value;
use std::path::Path;

/// Which part of the real run to do.
#[derive(Debug, Clone)]
pub struct RealOptions {
    /// Traffic time per configuration.
    pub duration: Nanos,
    /// Schedulers to run (of the scenario's; in the scenario's order); empty = all.
    pub schedulers: Vec<String>,
    /// Per domain count, the schedulers to skip there (e.g. delay-constrained at 9 guests when
    /// only the 18-guest comparison is wanted).
    pub skip: Vec<(usize, String)>,
    /// `ping -l`: probes ping may send to catch up after waking late (iputils' default is 1;
    /// the run uses [`PING_PRELOAD`]; 1 is kept for measuring what it changed).
    pub ping_preload: u32,
}

/// `ping -l 3`: the most iputils lets anyone but root preload, and enough to catch up 20 ms
/// of lateness at the High tier's 10 ms period.
pub const PING_PRELOAD: u32 = 3;

/// The real run (see the module header). `quick`: 8 s per configuration, strict priority and
/// delay-constrained only.
pub fn run_real(params: &Value, seed: u64, out: &Path, quick: bool) -> Result<ExperimentOutput> {
    let setup = Setup::from_params(params)?;
    let opts = RealOptions {
        duration: if quick {
            8 * SEC
        } else {
            setup.base.duration.min(30 * SEC)
        },
        schedulers: if quick {
            vec!["strict_priority".into(), "delay_constrained".into()]
        } else {
            vec![]
        },
        skip: vec![],
        ping_preload: PING_PRELOAD,
    };
    run_real_with(params, seed, out, &opts)
}

/// The real run with `opts` (the tests run parts of it for longer than `--quick`).
pub fn run_real_with(
    params: &Value,
    seed: u64,
    out: &Path,
    opts: &RealOptions,
) -> Result<ExperimentOutput> {
    if !netsched_testbed::is_root() {
        bail!(
            "vm-delay --real needs root (namespaces, raw sockets); run the simulated lab instead"
        );
    }
    let _signals = netsched_testbed::SignalGuard::install()?;
    let setup = Setup::from_params(params)?;
    let dur = opts.duration;
    if !(SEC..=600 * SEC).contains(&dur) {
        bail!(
            "vm-delay --real: traffic time {} s per configuration: must be 1..=600 s",
            dur / SEC
        );
    }
    // Packets/s while the backend has the CPU; off periods come from `budget_busy`.
    let pps = (1000.0 / setup.base.per_packet_ms).round() as u64;
    let schedulers: Vec<String> = setup
        .schedulers
        .iter()
        .filter(|s| opts.schedulers.is_empty() || opts.schedulers.contains(s))
        .cloned()
        .collect();
    if schedulers.is_empty() {
        bail!(
            "vm-delay --real: none of the schedulers {:?} is in the scenario ({:?})",
            opts.schedulers,
            setup.schedulers
        );
    }
    let mut runs = Vec::new();
    let mut sims = Vec::new();
    let mut rng = SplitMix64::new(seed);
    for &n in &setup.counts {
        let mut bed = rig::build(n)?;
        let run_seed = rng.next_u64();
        for sch in schedulers
            .iter()
            .filter(|s| !opts.skip.iter().any(|(k, x)| *k == n && x == *s))
        {
            netsched_testbed::check_interrupted()?;
            let cfg = VmConfig {
                scheduler: sch.clone(),
                domains: n,
                duration: dur,
                ..setup.base.clone()
            };
            eprintln!("vm-delay --real: {sch} with {n} guests, {}s", dur / SEC);
            let real = run::run_one(&mut bed, &cfg, pps, dur, run_seed, opts.ping_preload)?;
            log_run(&cfg, &real);
            let sim = sim_column(&cfg, &real, dur, run_seed)?;
            runs.push(real);
            sims.push(sim);
        }
        let tag = bed.tb.tag().to_string();
        drop(bed);
        let left = netsched_testbed::namespaces_with(&tag);
        if !left.is_empty() {
            bail!("namespaces left after the {n}-guest runs: {left:?}");
        }
    }
    report::output(&setup, params, seed, out, dur, pps, &runs, &sims)
}

/// What the switch's trace says about `real`, on stderr.
fn log_run(cfg: &VmConfig, real: &RealRun) {
    let (sch, n) = (&cfg.scheduler, cfg.domains);
    let t = &real.trace;
    eprintln!(
        "vm-delay --real: {sch} {n}: per tier read {:?}, vif-queue drops: switch {:?}, \
                 model with the same arrivals {:?}; largest clump {:?}, frames in merged \
                 clumps {:?}; late wake-ups {:.2}% \
                 (longest {:.0} ms), budget the switch lost {:.2}%; probes sent {:?}; trace \
                 overflow {}",
        t.read,
        t.switch_dropped,
        t.replay_dropped,
        t.max_clump,
        t.merged,
        real.host_late_pct,
        real.host_max_late_ms,
        real.budget_lost_pct,
        real.tiers.iter().map(|x| x.probe.sent).collect::<Vec<_>>(),
        t.overflow
    );
    let names: Vec<String> = cfg.tiers.iter().map(|t| t.name.clone()).collect();
    eprint!(
        "vm-delay --real: {sch} {n}: arrivals (sim: the model, same seed; sent: the \
                 generator's bursts; read: the switch's trace):\n{}",
        trace::arrivals_lines(t, &names)
    );
}

/// The sim column of `real`, a run of `cfg` for `dur`: the same scenario simulated with the
/// run's seed `run_seed` (the same application traffic).
fn sim_column(
    cfg: &VmConfig,
    real: &RealRun,
    dur: Nanos,
    run_seed: u64,
) -> Result<Vec<TierResult>> {
    let (sch, n) = (&cfg.scheduler, cfg.domains);
    // The sim column models the switch's backend: on/off periods that alternate at
    // their means (`slice_spread` 0), as `budget_busy`/`budget_slice` do; and the
    // probes ping really sent (a ping on a busy host falls behind its interval: the
    // High pings sent 461-580 of their 600/s in one run, which lowers the load).
    let mut sim_cfg = VmConfig {
        slice_spread: 0.0,
        ..cfg.clone()
    };
    let per_tier = (n / cfg.tiers.len().max(1)) as f64;
    for (t, rt) in sim_cfg.tiers.iter_mut().zip(&real.tiers) {
        if rt.probe.sent > 0 {
            let ms = dur as f64 / MS as f64;
            t.period_ms = t.period_ms.max(ms * per_tier / rt.probe.sent as f64);
        }
    }
    let sim = simulate(&sim_cfg, run_seed)?;
    eprintln!(
        "vm-delay --real: {sch} {n}: sim column (same seed, same application traffic) \
                 loss per tier {:?} %",
        sim.iter()
            .map(|t| (t.loss_pct() * 1000.0).round() / 1000.0)
            .collect::<Vec<_>>()
    );
    Ok(sim)
}

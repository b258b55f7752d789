//! The percentile-web experiment on real Linux (P0 §4): nginx in a server namespace, five
//! client namespaces (one per class, P = 90, 80, 70, 60, 50), a closed-loop HTTP/1.1 load,
//! and three runs — FIFO, the Percentile daemon, strict priority — each through the same
//! NFQUEUE daemon with the same release budget, so only the order differs.
//!
//! Parameters (JSON object; keys of a `real` table if present, else top level, else the
//! scenario's shared `clients.percentiles`, `clients.threads`, `clients.requests_per_thread`,
//! `percentile.deadline`; all optional):
//! `percentiles` [90,80,70,60,50], `threads_per_client` 4 (5 × 4 = 20 connections, as the
//! thesis's 5 clients × 4 threads), `budget` 10 (10 requests wait at a time; docs/percentile-web-real.md),
//! `deadline` "auto_quantile" (the running q-quantile of response times, q = Σ N·P / Σ N:
//! the deadline at which the server as a whole meets the combined goal; or "auto": the
//! thesis's running mean; or "fifo_server_mean": the FIFO run's mean time inside nginx, then
//! fixed; or a duration — see docs/percentile-web-real.md), `page_kb` 24,
//! `duration_s` 60 (quick: `quick_duration_s` 20), `max_requests_per_thread` 15000 (the
//! thesis's m), `server_cpu` 0, `client_cpu` 1, `modes` ["fifo","percentile","strict_priority"],
//! `max_hold_factor` 3 (the daemon's `max_hold` = 3 × its recent mean server time; 0 = a fixed
//! `max_hold_ms`), `max_hold_ms` 1000 (the ceiling of that bound, or the fixed bound).
//!
//! Inside (the shape of `real/lvs_cluster/`): [`rig`] the namespaces and nginx, [`client`]
//! the thesis's closed-loop load generator, [`run`] one mode (daemon + load), [`checks`] P0's
//! claims measured, [`report`] the files and the output. The rig and the load live here, not
//! in `netsched-nfq`: they are the experiment, and nothing below the lab knows about
//! experiments (the daemon's own SIGKILL / control test drives them from the `netsched`
//! package's tests).
//!
//! Output files: `real-<mode>-response.csv|svg` (mean response time per class per second,
//! thesis Figs. 16–19), `real-<mode>-throughput.csv|svg` (responses per class per second),
//! `real-<mode>-status.txt` (the daemon's final status, Table 14's layout).

pub mod checks;
pub mod client;
mod format;
pub mod report;
pub mod rig;
pub mod run;
pub mod star;

pub use checks::*;
pub use run::{daemon_config, run_mode, ModeRun};

use anyhow::{anyhow, bail, Context, Result};
use netsched_nfq::config::DisciplineKind;
use netsched_report::ExperimentOutput;
use rig::WebBed;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// P0 §4, baseline (FIFO kernel) mean response time per class, seconds.
pub const THESIS_FIFO_MEAN_S: [f64; 5] = [0.02395, 0.01004, 0.01819, 0.02596, 0.01270];
/// P0 Table 14: mean response time per class with the Percentile scheduler, seconds.
pub const THESIS_PCT_MEAN_S: [f64; 5] = [0.011851, 0.012481, 0.013106, 0.013465, 0.015447];
/// P0 Table 14: N and S per class.
pub const THESIS_N: [u64; 5] = [60000, 60000, 57551, 57350, 48139];
pub const THESIS_S: [u64; 5] = [40756, 36512, 30658, 26172, 18304];
pub const THESIS_P: [u32; 5] = [90, 80, 70, 60, 50];

/// Settings of a real run.
#[derive(Debug, Clone)]
pub struct RealParams {
    pub percentiles: Vec<u32>,
    pub threads_per_client: usize,
    pub budget: usize,
    pub deadline: String,
    pub page_kb: usize,
    pub duration: Duration,
    pub max_requests_per_thread: u64,
    pub server_cpu: usize,
    pub client_cpu: usize,
    pub modes: Vec<DisciplineKind>,
    pub early_miss: bool,
    /// The daemon's `max_hold` for this experiment: the floor that keeps the lowest class
    /// answered while higher classes are ahead of it (beyond the thesis; docs/percentile-web-real.md). With
    /// `max_hold_factor` it is the ceiling of the bound.
    pub max_hold: Duration,
    /// `max_hold` = this many recent server times (the daemon's `[limits] max_hold_factor`),
    /// clamped to [20 ms, `max_hold`]; `None` = the fixed `max_hold`. Default 3: P0 §4's
    /// responses took 12–15 ms for ≈ 4 ms of processing, i.e. no request waited more than a
    /// few service times (docs/percentile-web-real.md, "What differs from the thesis").
    pub max_hold_factor: Option<f64>,
    /// Runs of the Percentile mode at most, until one ran on a steady server (see
    /// [`steadiness`]; default 3).
    pub attempts: usize,
}

impl RealParams {
    pub fn from_json(params: &Value, quick: bool) -> Result<Self> {
        // Keys of `[real]`; else the scenario's shared keys (`[clients] percentiles`,
        // `threads`, `requests_per_thread`, `[percentile] deadline`); else the defaults.
        let real = params.get("real").unwrap_or(params);
        let shared = |k: &str| -> Option<&Value> {
            match k {
                "percentiles" => params.pointer("/clients/percentiles"),
                "threads_per_client" => params.pointer("/clients/threads"),
                "max_requests_per_thread" => params.pointer("/clients/requests_per_thread"),
                "deadline" => params.pointer("/percentile/deadline"),
                _ => None,
            }
        };
        let get = |k: &str| real.get(k).or_else(|| shared(k));
        let num = |k: &str, d: f64| -> Result<f64> {
            match get(k) {
                None => Ok(d),
                Some(v) => v
                    .as_f64()
                    .ok_or_else(|| anyhow!("params.{k}: expected a number, got {v}")),
            }
        };
        let percentiles = match get("percentiles") {
            None => THESIS_P.to_vec(),
            Some(v) => v
                .as_array()
                .ok_or_else(|| anyhow!("params.percentiles: expected an array"))?
                .iter()
                .map(|x| {
                    x.as_i64()
                        .ok_or_else(|| anyhow!("params.percentiles: {x} is not an integer"))
                        .and_then(|p| {
                            netsched_nfq::config::validate_percentile(p)
                                .map_err(anyhow::Error::from)
                        })
                })
                .collect::<Result<Vec<_>>>()?,
        };
        if percentiles.is_empty() || percentiles.len() > 50 {
            bail!("params.percentiles: 1 to 50 classes");
        }
        let modes = match get("modes") {
            None => vec![
                DisciplineKind::Fifo,
                DisciplineKind::Percentile,
                DisciplineKind::Strict,
            ],
            Some(v) => v
                .as_array()
                .ok_or_else(|| anyhow!("params.modes: expected an array"))?
                .iter()
                .map(|m| DisciplineKind::parse(m.as_str().unwrap_or("?")))
                .collect::<Result<Vec<_>, _>>()
                .context("params.modes")?,
        };
        let dur = if quick {
            num("quick_duration_s", 20.0)?
        } else {
            num("duration_s", 60.0)?
        };
        if !(dur > 0.0 && dur <= 3600.0) {
            bail!("params.duration_s: must be in (0, 3600], got {dur}");
        }
        let budget = num("budget", 10.0)? as usize;
        if budget == 0 {
            bail!("params.budget: must be at least 1");
        }
        let threads = num("threads_per_client", 4.0)? as usize;
        if threads == 0 || threads > 64 {
            bail!("params.threads_per_client: 1..=64");
        }
        let deadline = match get("deadline") {
            None => "auto_quantile".to_string(),
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => format!("{n}ms"),
            Some(v) => bail!(
                "params.deadline: expected \"auto_quantile\", \"auto\", \"fifo_server_mean\" \
                 or a duration, got {v}"
            ),
        };
        if deadline != "fifo_server_mean" {
            netsched_nfq::config::parse_deadline(&deadline).context("params.deadline")?;
        }
        Ok(RealParams {
            percentiles,
            threads_per_client: threads,
            budget,
            deadline,
            page_kb: num("page_kb", 24.0)?.max(1.0) as usize,
            duration: Duration::from_secs_f64(dur),
            max_requests_per_thread: num("max_requests_per_thread", 15000.0)? as u64,
            server_cpu: num("server_cpu", 0.0)? as usize,
            client_cpu: num("client_cpu", 1.0)? as usize,
            modes,
            max_hold_factor: {
                let k = num("max_hold_factor", DEFAULT_MAX_HOLD_FACTOR)?;
                if k == 0.0 {
                    None
                } else {
                    Some(
                        netsched_nfq::config::validate_max_hold_factor(k)
                            .map_err(|e| anyhow!("params.{e} (or 0 for a fixed max_hold_ms)"))?,
                    )
                }
            },
            max_hold: {
                let ms = num("max_hold_ms", 1000.0)?;
                if !(ms > 0.0 && ms <= 60_000.0) {
                    bail!("params.max_hold_ms: must be in (0, 60000], got {ms}");
                }
                Duration::from_secs_f64(ms / 1000.0)
            },
            attempts: {
                let a = num("attempts", 3.0)?;
                if !(1.0..=10.0).contains(&a) {
                    bail!("params.attempts: 1..=10, got {a}");
                }
                a as usize
            },
            early_miss: match get("early_miss") {
                None => false,
                Some(v) => v
                    .as_bool()
                    .ok_or_else(|| anyhow!("params.early_miss: expected true or false"))?,
            },
        })
    }
}

/// The experiment's default `max_hold_factor` (chosen before the 10-run series from P0 §4's
/// regime and the quick runs recorded in docs/percentile-web-real.md, not tuned on the series).
pub const DEFAULT_MAX_HOLD_FACTOR: f64 = 3.0;

/// Build the testbed, run every mode, write the files, return the output and the raw runs.
pub fn run_experiment(
    params: &Value,
    seed: u64,
    out: &Path,
    quick: bool,
) -> Result<(ExperimentOutput, Vec<ModeRun>)> {
    let p = RealParams::from_json(params, quick)?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    // Ctrl-C / SIGTERM: the current mode stops within about one response time, the daemon
    // removes its rules and releases what it holds, the bed is dropped (nginx and its process
    // group, namespaces, private folder) and the run returns an error.
    let _signals = netsched_testbed::SignalGuard::install()?;
    let bed = WebBed::new(p.percentiles.len(), p.page_kb, p.server_cpu, seed)?;
    let mut runs = Vec::new();
    let mut p = p;
    let asked = p.deadline.clone();
    let mut modes = p.modes.clone();
    if asked == "fifo_server_mean" {
        // FIFO first: its mean response time becomes the fixed deadline of the other runs.
        modes.sort_by_key(|m| *m != DisciplineKind::Fifo);
    }
    let mut unsteady = Vec::new();
    for mode in modes {
        netsched_testbed::check_interrupted()?;
        let mut run =
            run_mode(&bed, &p, mode).with_context(|| format!("mode {}", mode.as_str()))?;
        // The Percentile claims are about where the rule converges on one server; a run in
        // which the shared machine changed the server's speed by more than 2× measured the
        // machine instead. Such a run is repeated (the criterion is the server's throughput,
        // never the claims' outcome), up to `attempts` runs in all.
        let mut attempt = 1;
        while mode == DisciplineKind::Percentile
            && steadiness(&run) < MIN_STEADINESS
            && attempt < p.attempts
        {
            unsteady.push(format!(
                "{} attempt {attempt}: slowest 5 s window {:.0}% of the fastest — repeated",
                mode.as_str(),
                100.0 * steadiness(&run)
            ));
            attempt += 1;
            run = run_mode(&bed, &p, mode).with_context(|| format!("mode {}", mode.as_str()))?;
            run.attempt = attempt;
        }
        if asked == "fifo_server_mean" && mode == DisciplineKind::Fifo {
            // P0 §4: the deadline is the mean *processing* time, a constant set before the
            // scheduled run (≈ 0.004 s there, while responses took 12–15 ms): here the mean
            // time a request spent inside nginx in the FIFO run (release → response). A
            // running mean of whole response times instead moves with the scheduler's own
            // decisions (the lowest class's long waits relax it for everyone) and lets every
            // class over-achieve, where a work-conserving rule cannot equalise.
            let ms = run.status.mean_server_ns as f64 / 1e6;
            p.deadline = format!("{}ns", ((ms * 1e6) as u64).max(1));
        }
        runs.push(run);
    }
    let p = p;
    drop(bed);
    let output = report::output(params, seed, out, &p, &runs, &unsteady)?;
    Ok((output, runs))
}

/// Run the real experiment with the scenario's parameters (JSON object, keys as in
/// `scenarios/percentile-web.toml`), write CSV / SVG files into `out` (the lab runner writes results.json and report.md), and
/// return the results.
pub fn run_real(
    params: &serde_json::Value,
    seed: u64,
    out: &Path,
    quick: bool,
) -> anyhow::Result<netsched_report::ExperimentOutput> {
    run_experiment(params, seed, out, quick).map(|(o, _)| o)
}

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
//! `deadline` "auto-quantile" (the running q-quantile of response times, q = Σ N·P / Σ N:
//! the deadline at which the server as a whole meets the combined goal; or "auto": the
//! thesis's running mean; or "fifo_server_mean": the FIFO run's mean time inside nginx, then
//! fixed; or a duration — see docs/percentile-web-real.md), `page_kb` 24,
//! `duration_s` 60 (quick: `quick_duration_s` 20), `max_requests_per_thread` 15000 (the
//! thesis's m), `server_cpu` 0, `client_cpu` 1, `modes` ["fifo","percentile","strict"],
//! `max_hold_factor` 3 (the daemon's `max_hold` = 3 × its recent mean server time; 0 = a fixed
//! `max_hold_ms`), `max_hold_ms` 1000 (the ceiling of that bound, or the fixed bound).
//!
//! Output files: `real-<mode>-response.csv|svg` (mean response time per class per second,
//! thesis Figs. 16–19), `real-<mode>-throughput.csv|svg` (responses per class per second),
//! `real-<mode>-status.txt` (the daemon's final status, Table 14's layout).

use anyhow::{anyhow, bail, Context, Result};
use netsched_nfq::config::{ClassSpec, Config, DisciplineKind};
use netsched_nfq::engine::Status;
use netsched_nfq::loadgen::{run_load, LoadResult, LoadSpec};
use netsched_nfq::web::{client_cidr, WebBed};
use netsched_report::{Check, Cmp, Comparison, ExperimentOutput, Figure, Results, Run};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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
                        .and_then(netsched_nfq::config::validate_percentile)
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
                .collect::<Result<Vec<_>>>()
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
            None => "auto-quantile".to_string(),
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => format!("{n}ms"),
            Some(v) => bail!(
                "params.deadline: expected \"auto-quantile\", \"auto\", \"fifo_server_mean\" \
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

/// What one mode measured.
#[derive(Debug, Clone)]
pub struct ModeRun {
    pub mode: DisciplineKind,
    pub load: LoadResult,
    /// The daemon's status just before it stopped.
    pub status: Status,
    pub mean_ms: Vec<f64>,
    pub p99_ms: Vec<f64>,
    pub completed: Vec<u64>,
    pub released_at_exit: usize,
    /// The unique tag of the testbed the mode ran on (in every namespace name it created).
    pub testbed_tag: String,
    /// Which run of this mode this is (1 unless earlier ones ran on an unsteady server).
    pub attempt: usize,
}

/// The daemon's configuration for one mode.
pub fn daemon_config(p: &RealParams, mode: DisciplineKind, socket: &Path) -> Result<Config> {
    let deadline = if p.deadline == "fifo_server_mean" {
        "auto"
    } else {
        p.deadline.as_str()
    };
    let mut c = Config {
        discipline: mode,
        budget: Some(p.budget),
        deadline: netsched_nfq::config::parse_deadline(deadline)?,
        control_socket: socket.to_path_buf(),
        early_miss: p.early_miss,
        ..Config::default()
    };
    c.limits.max_hold = p.max_hold.as_nanos() as u64;
    c.limits.max_hold_factor = p.max_hold_factor;
    for (k, &pc) in p.percentiles.iter().enumerate() {
        c.classes.push(ClassSpec {
            name: format!("C{k}"),
            percentile: pc,
        });
        c.table
            .push((netsched_nfq::config::parse_cidr(&client_cidr(k))?, k));
    }
    c.default_class = p.percentiles.len() - 1;
    c.validate()?;
    Ok(c)
}

/// Run one mode on an existing testbed: daemon (in a thread inside the server namespace),
/// the load, the final status.
pub fn run_mode(bed: &WebBed, p: &RealParams, mode: DisciplineKind) -> Result<ModeRun> {
    let socket = bed.dir.join(format!("ctl-{}.sock", mode.as_str()));
    let cfg = daemon_config(p, mode, &socket)?;
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let server_ns = bed.server_ns.clone();
    let cpu = p.client_cpu;
    let stop2 = Arc::clone(&stop);
    let daemon = std::thread::spawn(move || -> Result<netsched_nfq::daemon::Summary> {
        netsched_testbed::enter_netns(&server_ns)?;
        let _ = netsched_testbed::pin_to_cpu(cpu);
        netsched_nfq::daemon::run_daemon(cfg, &stop2, |_| {
            let _ = ready_tx.send(());
        })
    });
    if ready_rx.recv_timeout(Duration::from_secs(10)).is_err() {
        stop.store(true, Ordering::Relaxed);
        return match daemon.join() {
            Ok(Err(e)) => Err(e.context("the daemon did not start")),
            _ => Err(anyhow!("the daemon did not start within 10 s")),
        };
    }
    let spec = LoadSpec {
        clients: bed.clients(),
        port: bed.port,
        path: "/index.html".into(),
        threads_per_client: p.threads_per_client,
        duration: p.duration,
        max_requests_per_thread: p.max_requests_per_thread,
        cpu: Some(p.client_cpu),
        read_timeout: Duration::from_secs(10),
        // P0 Table 14 is taken "after 60000 packets of one class" (4 threads × m = 15000).
        stop_when_a_class_finishes: true,
    };
    let no_stop = AtomicBool::new(false);
    // Ends early on SIGINT/SIGTERM (the run's SignalGuard); checked below once the daemon
    // has stopped and released what it held.
    let load = run_load(&spec, &no_stop);
    let status = netsched_nfq::control::request(&socket, &netsched_nfq::control::Request::Status)
        .ok()
        .and_then(|r| r.status.map(|s| *s));
    stop.store(true, Ordering::Relaxed);
    let summary = daemon
        .join()
        .map_err(|_| anyhow!("the daemon thread panicked"))??;
    netsched_testbed::check_interrupted()?;
    let load = load?;
    let status = status.unwrap_or(summary.status.clone());
    let n = p.percentiles.len();
    let mut per: Vec<Vec<f64>> = vec![Vec::new(); n];
    for s in &load.samples {
        per[s.class].push(s.latency_ns as f64 / 1e6);
    }
    for v in &mut per {
        netsched_report::stats::sort(v);
    }
    Ok(ModeRun {
        mode,
        mean_ms: per
            .iter()
            .map(|v| v.iter().sum::<f64>() / v.len().max(1) as f64)
            .collect(),
        p99_ms: per
            .iter()
            .map(|v| netsched_report::stats::percentile(v, 0.99).unwrap_or(f64::NAN))
            .collect(),
        completed: per.iter().map(|v| v.len() as u64).collect(),
        load,
        status,
        released_at_exit: summary.released_at_exit,
        testbed_tag: bed.tb.tag().to_string(),
        attempt: 1,
    })
}

/// Per-second series of one mode: (mean response ms, responses/s) per class.
type SecondSeries = Vec<(String, Vec<(f64, f64)>)>;
fn per_second(run: &ModeRun, classes: usize) -> (SecondSeries, SecondSeries) {
    let secs = (run.load.elapsed.as_secs_f64().ceil() as usize).max(1);
    let mut sum = vec![vec![0f64; secs]; classes];
    let mut cnt = vec![vec![0u64; secs]; classes];
    for s in &run.load.samples {
        let b = ((s.done_ns / 1_000_000_000) as usize).min(secs - 1);
        sum[s.class][b] += s.latency_ns as f64 / 1e6;
        cnt[s.class][b] += 1;
    }
    let mut resp = Vec::new();
    let mut thr = Vec::new();
    for k in 0..classes {
        let name = format!("C{k}");
        resp.push((
            name.clone(),
            (0..secs)
                .filter(|&b| cnt[k][b] > 0)
                .map(|b| ((b + 1) as f64, sum[k][b] / cnt[k][b] as f64))
                .collect(),
        ));
        thr.push((
            name,
            (0..secs)
                .map(|b| ((b + 1) as f64, cnt[k][b] as f64))
                .collect(),
        ));
    }
    (resp, thr)
}

fn spread(v: &[f64]) -> f64 {
    let max = v.iter().cloned().fold(f64::MIN, f64::max);
    let min = v.iter().cloned().fold(f64::MAX, f64::min);
    if min > 0.0 {
        max / min - 1.0
    } else {
        f64::INFINITY
    }
}

fn fmt_list(v: &[f64], prec: usize) -> String {
    v.iter()
        .map(|x| format!("{x:.prec$}"))
        .collect::<Vec<_>>()
        .join(" / ")
}

/// Per class: the longest time (s) without a response — from the start to the first, between
/// two, and from the last to the end of the load. A starved class shows a gap as long as the run.
pub fn longest_gap_s(run: &ModeRun) -> Vec<f64> {
    let n = run.completed.len();
    let mut last = vec![0u64; n];
    let mut gap = vec![0u64; n];
    for s in &run.load.samples {
        gap[s.class] = gap[s.class].max(s.done_ns.saturating_sub(last[s.class]));
        last[s.class] = s.done_ns;
    }
    let end = run.load.elapsed.as_nanos() as u64;
    (0..n)
        .map(|k| gap[k].max(end.saturating_sub(last[k])) as f64 / 1e9)
        .collect()
}

/// Per class, per second of the load: the mean response time (ms) of the responses completed
/// in that second, `None` for a second without one.
pub fn per_second_means(run: &ModeRun) -> Vec<Vec<Option<f64>>> {
    let n = run.completed.len();
    let secs = (run.load.elapsed.as_secs_f64().ceil() as usize).clamp(1, 100_000);
    let mut sum = vec![vec![0f64; secs]; n];
    let mut cnt = vec![vec![0u64; secs]; n];
    for s in &run.load.samples {
        let b = ((s.done_ns / 1_000_000_000) as usize).min(secs - 1);
        sum[s.class][b] += s.latency_ns as f64 / 1e6;
        cnt[s.class][b] += 1;
    }
    (0..n)
        .map(|k| {
            (0..secs)
                .map(|b| (cnt[k][b] > 0).then(|| sum[k][b] / cnt[k][b] as f64))
                .collect()
        })
        .collect()
}

/// Is class `b` slower than class `a` beyond noise? The paired t statistic of the per-second
/// differences `mean_b − mean_a` over the seconds in which both answered (pairing by second
/// removes what the machine's changing load does to both). Positive: `b` slower. `None` with
/// fewer than 5 such seconds.
pub fn paired_t(per_second: &[Vec<Option<f64>>], a: usize, b: usize) -> Option<f64> {
    let d: Vec<f64> = per_second[a]
        .iter()
        .zip(&per_second[b])
        .filter_map(|(x, y)| Some((*y)? - (*x)?))
        .collect();
    if d.len() < 5 {
        return None;
    }
    let n = d.len() as f64;
    let mean = d.iter().sum::<f64>() / n;
    let var = d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    if var <= 0.0 {
        return Some(if mean > 0.0 {
            f64::INFINITY
        } else if mean < 0.0 {
            f64::NEG_INFINITY
        } else {
            0.0
        });
    }
    Some(mean / (var / n).sqrt())
}

/// Claim of the check that no adjacent pair of classes is reversed beyond noise.
pub const CLAIM_NO_PAIR_REVERSED: &str =
    "Percentile: no class is slower than the class below it beyond noise";

/// |t| beyond which a per-second paired difference counts as decided (≈ 0.3% two-sided for
/// independent seconds; seconds of one run are not quite independent, hence 3 rather than 2).
pub const DECIDED_T: f64 = 3.0;

/// Claim of the per-run mean ordering check (a single run decides it only when the classes'
/// means are far apart; see [`checks`]).
pub const CLAIM_MEANS_ORDERED: &str =
    "Percentile orders mean response time by class: C0 < C1 < C2 < C3 < C4 (P0 Table 14)";

/// The floor `max_hold` puts under every class (responses), and its parts: each of the
/// class's `threads` connections has one request at a time, held at most `max_hold` (+ one
/// 10 ms tick of the daemon), then served (the run's mean time inside the server), so in
/// `elapsed` it completes at least `elapsed / (max_hold + tick + server time)` on average.
pub fn max_hold_floor(run: &ModeRun, threads: usize, max_hold: Duration) -> f64 {
    let cycle_s = max_hold.as_secs_f64() + 0.010 + run.status.mean_server_ms.max(0.0) / 1e3;
    threads as f64 * run.load.elapsed.as_secs_f64() / cycle_s
}

/// The `max_hold` a mode ran with on average: fixed, or `max_hold_factor` × the run's mean
/// server time clamped as the daemon clamps it (the daemon follows a recent mean; over the
/// run its bound averages to about this).
pub fn run_max_hold(run: &ModeRun, p: &RealParams) -> Duration {
    match p.max_hold_factor {
        None => p.max_hold,
        Some(k) => {
            let ceiling = p.max_hold.as_secs_f64();
            let floor = (netsched_nfq::config::MAX_HOLD_AUTO_MIN as f64 / 1e9).min(ceiling);
            let s = (k * run.status.mean_server_ms.max(0.0) / 1e3).clamp(floor, ceiling);
            Duration::from_secs_f64(s)
        }
    }
}

/// Start of the claims of P0 Table 14's shape (near-equal N, ordered means, equal attainment),
/// reported per run and decided over `--real --repeat N` (not asserted by the one-run CI test).
pub const CLAIM_TABLE14: &str = "P0 Table 14's shape";

/// P0 Table 14: the fewest N of a class over an equal share of all N (48139 / 56608).
pub fn thesis_fewest_over_equal() -> f64 {
    let min = THESIS_N.iter().copied().min().unwrap_or(0) as f64;
    min / (THESIS_N.iter().sum::<u64>() as f64 / THESIS_N.len() as f64)
}

/// P0 Table 14: spread of the attainments S/(N·P), max/min − 1 (0.8%).
pub fn thesis_attainment_spread() -> f64 {
    let att: Vec<f64> = (0..5)
        .map(|k| THESIS_S[k] as f64 / (THESIS_N[k] as f64 * THESIS_P[k] as f64 / 100.0))
        .collect();
    spread(&att)
}

/// The server's steadiness during a mode: the total responses of the slowest 5 s window
/// divided by the fastest's (whole windows only; 1 for a run shorter than two windows). A
/// server whose speed the shared machine changed by 2× shows < 0.5.
pub fn steadiness(run: &ModeRun) -> f64 {
    const W: u64 = 5_000_000_000;
    let whole = (run.load.elapsed.as_nanos() as u64 / W) as usize;
    if whole < 2 {
        return 1.0;
    }
    let mut count = vec![0u64; whole];
    for s in &run.load.samples {
        if let Some(c) = count.get_mut((s.done_ns / W) as usize) {
            *c += 1;
        }
    }
    let max = count.iter().copied().max().unwrap_or(0);
    let min = count.iter().copied().min().unwrap_or(0);
    if max == 0 {
        0.0
    } else {
        min as f64 / max as f64
    }
}

/// Below this [`steadiness`] a Percentile run is repeated (up to `attempts`).
pub const MIN_STEADINESS: f64 = 0.5;

/// Every mode's checks (P0's claims, measured). Each numeric claim is a `value op threshold`
/// ([`Check::measured`]) so repeated runs decide it on the interval of `value`.
///
/// What one run can decide, and what it cannot: the FIFO spread, the attainment spread, the
/// `max_hold` floor, the longest gap and "C0 faster than C4" hold with a wide
/// margin on a loaded 2-core machine (docs/testing.md). Whether two *adjacent* classes' means
/// are ordered is not something the P0 rule enforces — it equalises attainment, which orders
/// each class's share of answers within the deadline (`S/N = a·P`), not its mean — and one
/// run cannot decide it: adjacent means have come within 3%, and the rule can freeze a class
/// whose attainment is ahead for 10+ s (only `max_hold` answers it, at ≈ 440 ms each), which
/// reverses that class's mean against the next one's beyond any noise (measured: C1 75.9 ms
/// vs C2 44.3 ms, t = −5.2, attainments still within 2.2%). So the ordering is reported per
/// run — the per-run claim [`CLAIM_MEANS_ORDERED`] and [`CLAIM_NO_PAIR_REVERSED`] with
/// per-second paired t statistics ([`paired_t`]) — and decided over repeated runs.
pub fn checks(runs: &[ModeRun], p: &RealParams) -> Vec<Check> {
    let mut out = Vec::new();
    let all_answered = runs
        .iter()
        .all(|r| r.load.sent == r.load.received && r.load.errors.is_empty());
    out.push(Check::new(
        "every request sent got its full response, in every mode",
        all_answered && !runs.is_empty(),
        runs.iter()
            .map(|r| {
                format!(
                    "{}: sent {} received {} errors {}",
                    r.mode.as_str(),
                    r.load.sent.iter().sum::<u64>(),
                    r.load.received.iter().sum::<u64>(),
                    r.load.errors.len()
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
    ));
    if let Some(f) = runs.iter().find(|r| r.mode == DisciplineKind::Fifo) {
        let s = spread(&f.mean_ms);
        out.push(Check::measured(
            "FIFO favours no class: mean response times within 15% of each other (max/min − 1)",
            s,
            Cmp::Le,
            0.15,
            format!(
                "means (ms) {}; max/min − 1 = {:.1}%",
                fmt_list(&f.mean_ms, 2),
                s * 100.0
            ),
        ));
    }
    if let Some(pr) = runs.iter().find(|r| r.mode == DisciplineKind::Percentile) {
        let n = pr.mean_ms.len();
        out.push(Check::measured(
            "the server kept its speed during the Percentile run, so the run measures the rule rather than the shared machine (slowest 5 s window / fastest)",
            steadiness(pr),
            Cmp::Ge,
            MIN_STEADINESS,
            format!(
                "slowest 5 s window / fastest = {:.2} in run {} of at most {} (a run below {MIN_STEADINESS} is repeated)",
                steadiness(pr),
                pr.attempt,
                p.attempts
            ),
        ));
        let ratios: Vec<f64> = pr.mean_ms.windows(2).map(|w| w[1] / w[0]).collect();
        let min_ratio = ratios.iter().cloned().fold(f64::INFINITY, f64::min);
        out.push(Check::measured(
            CLAIM_MEANS_ORDERED.to_string() + " — smallest ratio of adjacent means",
            min_ratio,
            Cmp::Gt,
            1.0,
            format!(
                "means (ms) {}; adjacent ratios {}",
                fmt_list(&pr.mean_ms, 3),
                fmt_list(&ratios, 3)
            ),
        ));
        let per_sec = per_second_means(pr);
        let ts: Vec<f64> = (0..n.saturating_sub(1))
            .map(|k| paired_t(&per_sec, k, k + 1).unwrap_or(f64::NAN))
            .collect();
        let min_t = ts.iter().cloned().fold(f64::INFINITY, f64::min);
        out.push(Check::measured(
            format!(
                "{CLAIM_NO_PAIR_REVERSED} (smallest per-second paired t of adjacent classes > −{DECIDED_T})"
            ),
            if ts.iter().any(|t| t.is_nan()) { f64::NAN } else { min_t },
            Cmp::Gt,
            -DECIDED_T,
            format!("t (C(k+1) − Ck) {}", fmt_list(&ts, 1)),
        ));
        if n >= 2 {
            // With attainments equal at level a, a fraction 0.9·a of C0's answers and only
            // 0.5·a of C4's fall within the deadline: C4's median sits near C0's 90th
            // percentile, so its mean is well above C0's (measured 1.9–5.4×). A per-second t
            // is no good here: C4's per-second means swing with a few max_hold releases
            // (t = 2.1 at a 3.7× ratio was measured).
            out.push(Check::measured(
                format!(
                    "Percentile serves the top class faster than the lowest: mean C{} / mean C0",
                    n - 1
                ),
                pr.mean_ms[n - 1] / pr.mean_ms[0],
                Cmp::Gt,
                1.0,
                format!(
                    "means C0 {:.3} ms, C{} {:.3} ms; t {:.1}",
                    pr.mean_ms[0],
                    n - 1,
                    pr.mean_ms[n - 1],
                    paired_t(&per_sec, 0, n - 1).unwrap_or(f64::NAN)
                ),
            ));
        }
        let att: Vec<f64> = pr.status.classes.iter().map(|c| c.attainment).collect();
        let s = spread(&att);
        out.push(Check::measured(
            "Percentile leaves no class behind the others: final attainments S/(N·P) within 10% of each other, max/min − 1 (P0 Table 14: 0.755–0.761)",
            s,
            Cmp::Le,
            0.10,
            format!(
                "S/(N·P) {}; max/min − 1 = {:.1}%; deadline {}{}",
                fmt_list(&att, 3),
                s * 100.0,
                pr.status.deadline_mode,
                pr.status
                    .deadline_quantile
                    .map(|q| format!(" (q = {q:.3})"))
                    .unwrap_or_default()
            ),
        ));
        let max_hold = run_max_hold(pr, p);
        let floor = max_hold_floor(pr, p.threads_per_client, max_hold);
        let total: u64 = pr.completed.iter().sum();
        let fair = total as f64 / n.max(1) as f64;
        let min = pr.completed.iter().copied().min().unwrap_or(0);
        out.push(Check::measured(
            format!(
                "Percentile starves no class: max_hold ({}) bounds every wait, so every class completes at least half of {} connections × run time / (max_hold + 10 ms tick + mean server time) — fewest responses / that floor",
                match p.max_hold_factor {
                    Some(k) => format!(
                        "{k} × the server time ≈ {:.0} ms",
                        max_hold.as_secs_f64() * 1e3
                    ),
                    None => netsched_core::units::format_duration(max_hold.as_nanos() as u64),
                },
                p.threads_per_client
            ),
            min as f64 / floor.max(1e-9),
            Cmp::Ge,
            0.5,
            format!(
                "responses per class {} (fewest = {:.0}% of an equal share); floor {:.0} (mean server time {:.1} ms, {:.1} s); requests released by max_hold {}",
                pr.completed.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(" / "),
                100.0 * min as f64 / fair.max(1e-9),
                floor,
                pr.status.mean_server_ms,
                pr.load.elapsed.as_secs_f64(),
                pr.status.counters.max_hold_releases
            ),
        ));
        let gaps = longest_gap_s(pr);
        let max_gap = gaps.iter().cloned().fold(0.0, f64::max);
        out.push(Check::measured(
            "Percentile starves no class: no class goes 3 s without a response (longest gap, s)",
            max_gap,
            Cmp::Le,
            3.0,
            format!("longest gap per class (s) {}", fmt_list(&gaps, 2)),
        ));
        out.extend(table14_checks(pr, min_ratio, s));
    }
    if let Some(s) = runs.iter().find(|r| r.mode == DisciplineKind::Strict) {
        let (first, last) = (
            s.mean_ms.first().copied().unwrap_or(f64::NAN),
            s.mean_ms.last().copied().unwrap_or(f64::NAN),
        );
        out.push(Check::measured(
            "strict priority serves C0 fastest and C4 slowest (the starvation P0 avoids): mean C4 / mean C0",
            last / first,
            Cmp::Gt,
            1.0,
            format!(
                "means (ms) {}; responses {}",
                fmt_list(&s.mean_ms, 3),
                s.completed
                    .iter()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join(" / ")
            ),
        ));
    }
    out
}

/// P0 Table 14's shape as checks: near-equal N (every class ≥ 50% of an equal share; Table 14
/// 0.85), means ordered (the smallest adjacent ratio, `min_ratio`, > 1 — the same value as
/// [`CLAIM_MEANS_ORDERED`]) and equal attainment (spread `att_spread` ≤ 5%; Table 14 0.8%),
/// and whether all three held at once in this run. One run decides none of them with a margin
/// (a frozen class reverses a pair; the equal share moves with the server's speed): they are
/// reported per run and decided over `--real --repeat N`.
pub fn table14_checks(pr: &ModeRun, min_ratio: f64, att_spread: f64) -> Vec<Check> {
    let ns: Vec<u64> = pr.status.classes.iter().map(|c| c.n).collect();
    let equal = ns.iter().sum::<u64>() as f64 / ns.len().max(1) as f64;
    let fewest = ns.iter().copied().min().unwrap_or(0) as f64 / equal.max(1e-9);
    let n_list = ns
        .iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(" / ");
    let near_equal = Check::measured(
        format!(
            "{CLAIM_TABLE14}, 1 of 3: every class gets at least half an equal share of requests — fewest N / (Σ N / classes) (Table 14: {:.2})",
            thesis_fewest_over_equal()
        ),
        fewest,
        Cmp::Ge,
        0.5,
        format!("N per class {n_list}; fewest / equal share = {fewest:.2}"),
    );
    let ordered = Check::measured(
        format!(
            "{CLAIM_TABLE14}, 2 of 3: mean response times ordered C0 < … < C{} — smallest ratio of adjacent means",
            pr.mean_ms.len().saturating_sub(1)
        ),
        min_ratio,
        Cmp::Gt,
        1.0,
        format!("means (ms) {}", fmt_list(&pr.mean_ms, 2)),
    );
    let equal_att = Check::measured(
        format!(
            "{CLAIM_TABLE14}, 3 of 3: attainments S/(N·P) within 5% of each other, max/min − 1 (Table 14: {:.1}%)",
            100.0 * thesis_attainment_spread()
        ),
        att_spread,
        Cmp::Le,
        0.05,
        format!("max/min − 1 = {:.2}%", 100.0 * att_spread),
    );
    let all = near_equal.passed && ordered.passed && equal_att.passed;
    let both = Check::new(
        format!("{CLAIM_TABLE14}: all three at once in this run"),
        all,
        format!(
            "fewest / equal share {fewest:.2} (≥ 0.5): {}; smallest adjacent mean ratio {min_ratio:.3} (> 1): {}; attainment spread {:.2}% (≤ 5%): {}",
            near_equal.passed,
            ordered.passed,
            100.0 * att_spread,
            equal_att.passed
        ),
    );
    vec![near_equal, ordered, equal_att, both]
}

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
            let ms = run.status.mean_server_ms;
            p.deadline = format!("{}ns", ((ms * 1e6) as u64).max(1));
        }
        runs.push(run);
    }
    let p = p;
    drop(bed);
    let n = p.percentiles.len();
    let mut results = Results::new("percentile-web", "real", seed, params.clone());
    let mut figures = Vec::new();
    for r in &runs {
        let m = r.mode.as_str();
        let (resp, thr) = per_second(r, n);
        netsched_report::csv::write_series(
            &out.join(format!("real-{m}-response.csv")),
            "second",
            "mean_response_ms",
            &resp,
        )?;
        netsched_report::csv::write_series(
            &out.join(format!("real-{m}-throughput.csv")),
            "second",
            "responses",
            &thr,
        )?;
        let f1 = format!("real-{m}-response.svg");
        netsched_report::svg::line_chart(
            &format!("{m}: mean response time per class per second (cf. P0 Figs. 16–19)"),
            "time (s)",
            "response time (ms)",
            &resp,
            &out.join(&f1),
        )?;
        let f2 = format!("real-{m}-throughput.svg");
        netsched_report::svg::line_chart(
            &format!("{m}: responses per class per second"),
            "time (s)",
            "responses / s",
            &thr,
            &out.join(&f2),
        )?;
        figures.push(Figure {
            title: format!("{m}: response time per class"),
            file: f1,
        });
        figures.push(Figure {
            title: format!("{m}: throughput per class"),
            file: f2,
        });
        std::fs::write(
            out.join(format!("real-{m}-status.txt")),
            netsched_nfq::ctl_client::format_status(&r.status),
        )?;
        results.runs.push(Run {
            config: json!({
                "discipline": m,
                "budget": p.budget,
                "deadline": if r.status.deadline_auto {
                    r.status.deadline_mode.clone()
                } else {
                    netsched_nfq::config::fmt_duration(r.status.deadline_ns)
                },
                "connections": n * p.threads_per_client,
                "duration_s": p.duration.as_secs_f64(),
                "page_kb": p.page_kb,
                "max_hold_factor": p.max_hold_factor,
                "max_hold_ms": p.max_hold.as_secs_f64() * 1e3,
            }),
            metrics: json!({
                "mean_response_ms": r.mean_ms,
                "p99_response_ms": r.p99_ms,
                "responses": r.completed,
                "sent": r.load.sent,
                "received": r.load.received,
                "errors": r.load.errors.len(),
                "first_errors": r.load.errors.iter().take(5).collect::<Vec<_>>(),
                "throughput_per_s": r.completed.iter().map(|c| *c as f64 / r.load.elapsed.as_secs_f64()).collect::<Vec<_>>(),
                "daemon_status": r.status,
                "mean_server_ms": r.status.mean_server_ms,
                "max_hold_mean_ms": run_max_hold(r, &p).as_secs_f64() * 1e3,
                "max_hold_releases": r.status.counters.max_hold_releases,
                "released_at_exit": r.released_at_exit,
            }),
        });
    }
    let mut comparisons = Vec::new();
    let thesis_att: Vec<f64> = (0..5)
        .map(|k| THESIS_S[k] as f64 / (THESIS_N[k] as f64 * THESIS_P[k] as f64 / 100.0))
        .collect();
    for r in &runs {
        for k in 0..n.min(5) {
            match r.mode {
                DisciplineKind::Fifo => comparisons.push(Comparison {
                    quantity: format!("FIFO: mean response C{k} (ms)"),
                    paper: format!("{:.2}", THESIS_FIFO_MEAN_S[k] * 1e3),
                    ours: format!("{:.2}", r.mean_ms[k]),
                }),
                DisciplineKind::Percentile => {
                    comparisons.push(Comparison {
                        quantity: format!("Percentile: mean response C{k} (ms)"),
                        paper: format!("{:.2}", THESIS_PCT_MEAN_S[k] * 1e3),
                        ours: format!("{:.2}", r.mean_ms[k]),
                    });
                    let c = &r.status.classes[k];
                    comparisons.push(Comparison {
                        quantity: format!("Percentile: C{k} N / S / S/(N·P)"),
                        paper: format!("{} / {} / {:.3}", THESIS_N[k], THESIS_S[k], thesis_att[k]),
                        ours: format!("{} / {} / {:.3}", c.n, c.s, c.attainment),
                    });
                    comparisons.push(Comparison {
                        quantity: format!("Percentile: C{k} priority (Table 14)"),
                        paper: ["1324", "1314", "1314", "1314", "1315"][k].into(),
                        ours: c.priority.map(|p| format!("{p:.0}")).unwrap_or("—".into()),
                    });
                }
                DisciplineKind::Strict => comparisons.push(Comparison {
                    quantity: format!("strict priority: mean response C{k} (ms)"),
                    paper: "—".into(),
                    ours: format!("{:.2}", r.mean_ms[k]),
                }),
            }
        }
    }
    let checks = checks(&runs, &p);
    let mut notes = vec![
        format!(
            "Server steadiness (slowest 5 s window of total throughput / the fastest): {}.{}",
            runs.iter()
                .map(|r| format!("{} {:.2}", r.mode.as_str(), steadiness(r)))
                .collect::<Vec<_>>()
                .join(", "),
            if unsteady.is_empty() {
                String::new()
            } else {
                format!(" Repeated: {}.", unsteady.join("; "))
            }
        ),
        format!(
            "Testbed: nginx (Debian nginx-light) as one process pinned to CPU {} in a server namespace; {} client namespaces (10.77.k.2 → class k), each with {} persistent HTTP/1.1 connections in a closed loop ({} in total) for {:.0} s per mode. The server is the bottleneck by construction: every request gzip-compresses a {} KiB page at level 9 on the server's single core; clients and the daemon run on CPU {}.",
            p.server_cpu, n, p.threads_per_client, n * p.threads_per_client, p.duration.as_secs_f64(), p.page_kb, p.client_cpu
        ),
        format!(
            "All three modes run through the same NFQUEUE daemon with release budget {} (requests inside nginx at once), deadline {} and max_hold {}; only the discipline differs. \"FIFO\" is therefore the thesis's unscheduled baseline in arrival order, not the kernel without the daemon. Response time is measured by the clients, send → full response; N, S and attainment come from the daemon (arrival at the daemon → first response packet).",
            p.budget,
            p.deadline,
            match p.max_hold_factor {
                Some(k) => format!(
                    "= {k} × the daemon's recent mean server time, clamped to [20 ms, {}] (mean server time / average bound per mode: {})",
                    netsched_core::units::format_duration(p.max_hold.as_nanos() as u64),
                    runs.iter()
                        .map(|r| format!(
                            "{} {:.1} / {:.0} ms",
                            r.mode.as_str(),
                            r.status.mean_server_ms,
                            run_max_hold(r, &p).as_secs_f64() * 1e3
                        ))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None => netsched_core::units::format_duration(p.max_hold.as_nanos() as u64),
            }
        ),
        "The thesis's FIFO means differ by class only because its clients burst differently; ours are symmetric by design, so FIFO should give equal means. Absolute times differ from the 2006 testbed (700 MHz server, 100 Mbit/s switch); compare orderings and ratios.".into(),
    ];
    for r in &runs {
        notes.push(format!(
            "Final daemon status, {}:\n\n```\n{}```",
            r.mode.as_str(),
            netsched_nfq::ctl_client::format_status(&r.status)
        ));
    }
    Ok((
        ExperimentOutput {
            results,
            comparisons,
            checks,
            figures,
            notes,
        },
        runs,
    ))
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

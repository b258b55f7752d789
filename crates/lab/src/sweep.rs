//! `netsched lab sweep`: one experiment over a parameter grid × seeds.
//!
//! Every (grid point, seed) is a run in `<out>/runs/<hash>/` where the hash (FNV-1a 64) covers
//! the experiment, the scenario parameters after overrides, and the seed; a run whose
//! `results.json` already exists there is skipped (its numbers are re-read), so an interrupted
//! or extended sweep only runs what is missing. A run is written under a temporary name in
//! `runs/` and renamed when complete, so a killed run leaves nothing half-written. Runs go in
//! parallel on all cores, or to Slurm as one job array ([`crate::slurm`]); both expand the grid
//! with [`plan`] (kept as `runs.json`) and tabulate with [`tabulate`].
//!
//! Output: `sweep.csv` and `sweep.md` (for each grid point and scalar metric: n, mean, sample
//! standard deviation, min, max over seeds) and `sweep.svg`, `sweep-2.svg`... (one chart per
//! metric across the grid, with the 95% interval over the seeds as error bars).

use crate::experiments;
use crate::limits;
use crate::outdir::OutDir;
use crate::progress::{self, Progress};
use crate::runner::{self, RunRequest};
use crate::scenario;
use crate::series_error::{RunFailure, SeriesError};
use netsched_report::aggregate::metric_leaves;
use netsched_report::{csv, metric_name, stats, svg, Results};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// What to sweep (the command line's `lab sweep` options, without the argument parser).
#[derive(Debug, Clone)]
pub struct SweepSpec {
    /// Experiment name.
    pub name: String,
    /// Axes, each `key=v1,v2,...`.
    pub grid: Vec<String>,
    /// Overrides applied to every grid point, each `key=value`.
    pub set: Vec<String>,
    /// Seeds per grid point.
    pub seeds: u64,
    /// First seed.
    pub seed: u64,
    /// Output folder (default `results/sweep-NAME/`).
    pub out: Option<PathBuf>,
    /// Scenario file instead of the embedded one.
    pub scenario: Option<PathBuf>,
    /// Keep only metrics whose name contains one of these.
    pub metric: Vec<String>,
    /// Parallel runs (default: all cores).
    pub jobs: Option<usize>,
    /// Real runs instead of simulated ones (Slurm sweeps only).
    pub real: bool,
}

/// FNV-1a 64-bit of `bytes` (stable across builds and platforms, unlike `DefaultHasher`).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Parse `key=v1,v2,...` (values may be TOML arrays: commas inside `[...]` do not split).
pub fn parse_axis(spec: &str) -> Result<(String, Vec<String>), SeriesError> {
    let (key, vals) = spec.split_once('=').ok_or_else(|| SeriesError::Axis {
        spec: spec.to_string(),
        why: "expected key=v1,v2,...",
    })?;
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut cur = String::new();
    for c in vals.chars() {
        match c {
            '[' | '{' => depth += 1,
            ']' | '}' => depth -= 1,
            _ => {}
        }
        if c == ',' && depth == 0 {
            out.push(std::mem::take(&mut cur).trim().to_string());
        } else {
            cur.push(c);
        }
    }
    out.push(cur.trim().to_string());
    if key.trim().is_empty() || out.iter().any(|v| v.is_empty()) {
        return Err(SeriesError::Axis {
            spec: spec.to_string(),
            why: "empty key or value",
        });
    }
    Ok((key.trim().to_string(), out))
}

/// Scalar metrics of a results document, flattened to names: `<config> | <metric path>`.
pub fn scalar_metrics(results: &Results) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for run in &results.runs {
        let label = match &run.config {
            Value::Object(m) => m
                .iter()
                .map(|(k, v)| match v {
                    Value::String(s) => format!("{k}={s}"),
                    other => format!("{k}={other}"),
                })
                .collect::<Vec<_>>()
                .join(" "),
            Value::Null => String::new(),
            other => other.to_string(),
        };
        for (path, x) in metric_leaves(&run.metrics) {
            let name = if label.is_empty() {
                path
            } else {
                format!("{label} | {path}")
            };
            out.insert(name, x);
        }
    }
    out
}

fn fmt(x: f64) -> String {
    if !x.is_finite() {
        "—".into()
    } else if x.abs() >= 100.0 || x == x.trunc() {
        format!("{x:.1}")
    } else {
        format!("{x:.4}")
    }
}

/// The grid's size checked against the bounds in [`limits`] before anything is built:
/// returns the number of grid points.
pub fn check_size(axes: &[(String, Vec<String>)], seeds: u64) -> Result<u64, SeriesError> {
    if axes.len() > limits::MAX_GRID_AXES {
        return Err(SeriesError::TooManyAxes {
            count: axes.len(),
            max: limits::MAX_GRID_AXES,
        });
    }
    let mut points: u64 = 1;
    for (key, vals) in axes {
        if vals.len() > limits::MAX_AXIS_VALUES {
            return Err(SeriesError::TooManyValues {
                key: key.clone(),
                count: vals.len(),
                max: limits::MAX_AXIS_VALUES,
            });
        }
        points = points.saturating_mul(vals.len() as u64);
    }
    let runs = points.saturating_mul(seeds);
    if runs > limits::MAX_SWEEP_RUNS {
        return Err(SeriesError::TooManyRuns {
            points,
            seeds,
            runs,
            max: limits::MAX_SWEEP_RUNS,
        });
    }
    Ok(points)
}

/// A sweep expanded into its runs: what `runs.json` holds, and all that a Slurm task or the
/// merge step needs (the scenario is already applied, so neither re-reads a scenario file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Experiment name.
    pub experiment: String,
    /// The `--grid` axes, in order.
    pub axes: Vec<(String, Vec<String>)>,
    /// Grid points: the product of the axes, first axis slowest.
    pub points: Vec<Vec<(String, String)>>,
    /// Seeds per grid point.
    pub seeds: u64,
    /// First seed.
    pub seed: u64,
    /// Metric name filters (`--metric`).
    pub metric: Vec<String>,
    /// Real runs (`--real`) instead of simulated ones.
    #[serde(default)]
    pub real: bool,
    /// Every run, grid point by grid point, seed by seed; a run's index here is its Slurm
    /// array index.
    pub runs: Vec<PlannedRun>,
}

/// One run of a [`Plan`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedRun {
    /// Folder name under `runs/`: FNV-1a 64 of experiment, parameters and seed, in hex.
    pub hash: String,
    /// Index into [`Plan::points`].
    pub point: usize,
    pub seed: u64,
    /// Scenario parameters after `--set` and the grid point's values.
    pub params: Value,
}

/// Name of the run list in a sweep's output folder.
pub const PLAN_FILE: &str = "runs.json";
/// Name of the list of runs that failed in the last tabulation (read by `--status`).
pub const FAILURES_FILE: &str = "failures.json";
/// Bound on reading `runs.json` (10 000 runs with their parameters).
pub const MAX_PLAN_BYTES: u64 = 256 << 20;

impl Plan {
    /// The folder of run `i` under `out`.
    pub fn run_dir(&self, out: &Path, i: usize) -> PathBuf {
        out.join("runs").join(&self.runs[i].hash)
    }

    /// `k=v k=v` of run `i`'s grid point.
    pub fn label(&self, i: usize) -> String {
        point_label(&self.points[self.runs[i].point])
    }

    /// Read `<out>/runs.json`.
    pub fn read(out: &Path) -> Result<Plan, SeriesError> {
        let path = out.join(PLAN_FILE);
        let text = netsched_report::read::read_text(&path, MAX_PLAN_BYTES, "sweep run list")
            .map_err(|e| SeriesError::NotASweep {
                out: out.to_path_buf(),
                why: format!("{e:#}"),
            })?;
        serde_json::from_str(&text).map_err(|source| SeriesError::Parse { path, source })
    }

    /// Write `<out>/runs.json` (to a temporary name in the same folder, then renamed).
    pub fn write(&self, out: &Path) -> Result<(), SeriesError> {
        let text = serde_json::to_string_pretty(self)?;
        write_atomic(&out.join(PLAN_FILE), text.as_bytes())
    }
}

/// Write `path` whole or not at all: to `.<name>.tmp-<pid>` beside it, then renamed.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), SeriesError> {
    let name = path
        .file_name()
        .ok_or_else(|| SeriesError::NotAFilePath(path.to_path_buf()))?
        .to_string_lossy();
    let tmp = path.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(|source| {
        let _ = std::fs::remove_file(&tmp);
        SeriesError::Write {
            path: tmp.clone(),
            source,
        }
    })?;
    std::fs::rename(&tmp, path).map_err(|source| {
        let _ = std::fs::remove_file(&tmp);
        SeriesError::Rename {
            from: tmp.clone(),
            to: path.to_path_buf(),
            source,
        }
    })
}

/// Expand a sweep into its runs (the one expansion, used by local and Slurm sweeps alike):
/// checks every bound and applies every grid value before anything is written. Returns the
/// plan and the output folder.
pub fn plan(a: &SweepSpec) -> Result<(Plan, PathBuf), SeriesError> {
    let exp = experiments::find(&a.name)?;
    limits::seed_range(a.seed, a.seeds)?;
    if let Some(j) = a.jobs {
        limits::check_count("--jobs", j as u64, limits::MAX_JOBS as u64)?;
    }
    if a.real && exp.run_real.is_none() {
        return Err(SeriesError::NoRealMode {
            experiment: exp.name.to_string(),
        });
    }
    let axes: Vec<(String, Vec<String>)> = a
        .grid
        .iter()
        .map(|g| parse_axis(g))
        .collect::<Result<_, _>>()?;
    check_size(&axes, a.seeds)?;
    let mut base = scenario::load(exp.name, a.scenario.as_deref())?;
    for s in &a.set {
        scenario::apply_set(&mut base, s)?;
    }
    // Grid points: the product of the axes, first axis slowest.
    let mut points: Vec<Vec<(String, String)>> = vec![Vec::new()];
    for (key, vals) in &axes {
        points = points
            .into_iter()
            .flat_map(|p| {
                vals.iter().map(move |v| {
                    let mut q = p.clone();
                    q.push((key.clone(), v.clone()));
                    q
                })
            })
            .collect();
    }
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("results").join(format!("sweep-{}", exp.name)));
    let mut runs = Vec::new();
    for (pi, point) in points.iter().enumerate() {
        let mut table = base.clone();
        for (k, v) in point {
            scenario::apply_set(&mut table, &format!("{k}={v}"))?;
        }
        let params = scenario::to_json_for(exp.name, &table)?;
        (exp.check)(&params).map_err(|source| SeriesError::Point {
            label: point_label(point),
            source,
        })?;
        for s in 0..a.seeds {
            let seed = a.seed + s;
            let mut key = format!("{}\n{}\n{seed}", exp.name, serde_json::to_string(&params)?);
            // Simulated runs keep the hash they always had; real runs get their own folders.
            if a.real {
                key.push_str("\nreal");
            }
            runs.push(PlannedRun {
                hash: format!("{:016x}", fnv1a64(key.as_bytes())),
                point: pi,
                seed,
                params: params.clone(),
            });
        }
    }
    let plan = Plan {
        experiment: exp.name.to_string(),
        axes,
        points,
        seeds: a.seeds,
        seed: a.seed,
        metric: a.metric.iter().map(|m| metric_filter(m)).collect(),
        real: a.real,
        runs,
    };
    Ok((plan, out))
}

/// `k=v k=v`: a grid point's values, as reports name it.
fn point_label(point: &[(String, String)]) -> String {
    point
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A `--metric` filter in the names `results.json` uses: a working name (`p99_ms`,
/// `idle_pct`) is the rule's name (`p99_ns`, `idle_percent`; docs/cli.md, "JSON outputs")
/// for one release, with a warning naming it.
pub fn metric_filter(m: &str) -> String {
    match netsched_report::lab_units::rule_name(m) {
        Some(new) => {
            eprintln!(
                "netsched: warning: --metric {m}: results.json names it {new} (JSON unit \
                 rule); the old name works for one release"
            );
            new
        }
        None => m.to_string(),
    }
}

/// Refuse to put `plan` into a folder that holds a sweep of another experiment.
pub fn check_same_experiment(plan: &Plan, out: &Path) -> Result<(), SeriesError> {
    if !out.join(PLAN_FILE).exists() {
        return Ok(());
    }
    let old = Plan::read(out)?;
    if old.experiment != plan.experiment {
        return Err(SeriesError::OtherExperiment {
            out: out.to_path_buf(),
            found: old.experiment,
            wanted: plan.experiment.clone(),
            plan_file: PLAN_FILE,
        });
    }
    Ok(())
}

fn read_results(p: &Path) -> Result<Results, SeriesError> {
    let text = netsched_report::read::read_text(p, limits::MAX_RESULTS_BYTES, "sweep run results")?;
    serde_json::from_str::<Results>(&text).map_err(|source| SeriesError::Parse {
        path: p.to_path_buf(),
        source,
    })
}

/// The finished results of run `i`, if its folder holds a readable `results.json`.
pub fn done(plan: &Plan, out: &Path, i: usize) -> Option<Results> {
    read_results(&plan.run_dir(out, i).join("results.json")).ok()
}

/// Run `i` of `plan` unless it is done, and return its results as read back from disk (so a
/// resumed sweep, a Slurm task and a local sweep tabulate the same bytes). The run is written
/// into `runs/.<hash>.tmp-<pid>/` and renamed to `runs/<hash>/` when complete: a run killed
/// part-way leaves no `runs/<hash>/` behind.
pub fn run_one(plan: &Plan, out: &Path, i: usize) -> Result<Results, SeriesError> {
    let run = plan.runs.get(i).ok_or(SeriesError::RunIndex {
        index: i,
        runs: plan.runs.len(),
    })?;
    let dir = plan.run_dir(out, i);
    let results = dir.join("results.json");
    if let Ok(r) = read_results(&results) {
        progress::line(&format!("[lab] skip {} (exists)", dir.display()));
        return Ok(r);
    }
    let exp = experiments::find(&plan.experiment)?;
    static TMP: AtomicU64 = AtomicU64::new(0);
    let tmp = out.join("runs").join(format!(
        ".{}.tmp-{}-{}",
        run.hash,
        std::process::id(),
        TMP.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&tmp);
    let req = RunRequest {
        exp,
        params: run.params.clone(),
        seed: run.seed,
        out: tmp.clone(),
        real: plan.real,
        quick: false,
    };
    let t = Instant::now();
    let written = runner::execute(&req).and_then(|o| runner::write_outputs(&req, &o));
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e.into());
    }
    if std::fs::rename(&tmp, &dir).is_err() {
        // An earlier folder without results (from an older version, or by hand) is replaced;
        // one with results (another task finished the same run first) is kept.
        if read_results(&results).is_err() {
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::rename(&tmp, &dir).map_err(|source| {
                let _ = std::fs::remove_dir_all(&tmp);
                SeriesError::Rename {
                    from: tmp.clone(),
                    to: dir.clone(),
                    source,
                }
            })?;
        } else {
            let _ = std::fs::remove_dir_all(&tmp);
        }
    }
    remove_leftovers(out, &run.hash);
    progress::line(&format!(
        "[lab] {} seed {}: {:.1} s",
        plan.label(i),
        run.seed,
        t.elapsed().as_secs_f64()
    ));
    read_results(&results)
}

/// Remove the temporary folders of `hash` left by earlier attempts that were killed part-way
/// (called once `runs/<hash>/` is complete).
fn remove_leftovers(out: &Path, hash: &str) {
    let prefix = format!(".{hash}.tmp-");
    if let Ok(rd) = std::fs::read_dir(out.join("runs")) {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

/// A run that failed, as listed in `sweep.md` and `failures.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    /// Index in the plan.
    pub index: usize,
    pub hash: String,
    pub seed: u64,
    /// What went wrong (for Slurm sweeps: the task's state and log file).
    pub reason: String,
}

/// Write `sweep.csv`, `sweep.md`, `sweep.svg` and `failures.json` from each run's outcome
/// (the same code for local sweeps and the Slurm merge step). `outcomes[i]` is run `i`'s
/// results or why it has none.
pub fn tabulate(
    plan: &Plan,
    out: &Path,
    outcomes: Vec<Result<Results, RunFailure>>,
) -> Result<Vec<Failure>, SeriesError> {
    let (per_point, failures) = metrics_per_point(plan, outcomes);
    let mut md = write_table(plan, &per_point, out)?;
    let charts = write_plot(plan, &per_point, out)?;
    let _ = writeln!(
        md,
        "\n## Charts\n\nThe first {} metric(s) by name (use `--metric` to choose); error bars: the 95% interval of the mean over the seeds.\n",
        charts.len()
    );
    for (metric, file) in &charts {
        let _ = writeln!(
            md,
            "![{}]({file})\n",
            netsched_report::markdown::cell(metric)
        );
    }
    if !failures.is_empty() {
        let _ = writeln!(md, "\n## Runs that failed\n");
        for f in &failures {
            let line = format!(
                "run {} ({}, seed {}): {}",
                f.index,
                out.join("runs").join(&f.hash).display(),
                f.seed,
                f.reason
            );
            let _ = writeln!(md, "- {}", netsched_report::markdown::cell(&line));
        }
    }
    write_atomic(
        &out.join(FAILURES_FILE),
        serde_json::to_string_pretty(&failures)?.as_bytes(),
    )?;
    // The report last, whole or not at all: a folder with `sweep.md` is a finished sweep.
    write_atomic(&out.join("sweep.md"), md.as_bytes())?;
    Ok(failures)
}

/// Per grid point, each metric's values over the seeds (only the metrics `--metric` asks
/// for), and the runs that have no results.
pub type PerPoint = Vec<BTreeMap<String, Vec<f64>>>;

/// [`PerPoint`] of `outcomes`, and the failed runs.
fn metrics_per_point(
    plan: &Plan,
    outcomes: Vec<Result<Results, RunFailure>>,
) -> (PerPoint, Vec<Failure>) {
    let mut failures = Vec::new();
    let points = &plan.points;
    // per point: metric → values over seeds
    let mut per_point: Vec<BTreeMap<String, Vec<f64>>> = vec![BTreeMap::new(); points.len()];
    for (i, (run, o)) in plan.runs.iter().zip(outcomes).enumerate() {
        match o {
            Ok(r) => {
                for (name, x) in scalar_metrics(&r) {
                    if plan.metric.is_empty()
                        || plan.metric.iter().any(|m| name.contains(m.as_str()))
                    {
                        per_point[run.point].entry(name).or_default().push(x);
                    }
                }
            }
            Err(reason) => failures.push(Failure {
                index: i,
                hash: run.hash.clone(),
                seed: run.seed,
                reason: reason.to_string(),
            }),
        }
    }
    (per_point, failures)
}

/// `sweep.csv` (per point and metric: n, mean, sd, min, max) and the same table as the start
/// of `sweep.md` (returned, to be continued).
fn write_table(plan: &Plan, per_point: &PerPoint, out: &Path) -> Result<String, SeriesError> {
    let axes = &plan.axes;
    let points = &plan.points;
    let keys: Vec<&str> = axes.iter().map(|(k, _)| k.as_str()).collect();
    let mut header: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    header.extend(["metric", "n", "mean", "std", "min", "max"].map(String::from));
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Sweep of {} — {} grid point(s) × {} seed(s)\n\nMean and sample standard deviation over seeds {}..{}; raw runs in `runs/`.\n",
        plan.experiment,
        points.len(),
        plan.seeds,
        plan.seed,
        plan.seed + plan.seeds - 1
    );
    let _ = writeln!(md, "| {} |", header.join(" | "));
    let _ = writeln!(md, "|{}", "---|".repeat(header.len()));
    for (pi, point) in points.iter().enumerate() {
        for (metric, xs) in &per_point[pi] {
            let st = stats::spread(xs);
            let (n, mean, sd, min, max) = st
                .map(|x| (x.n, x.mean, x.sd, x.min, x.max))
                .unwrap_or((0, f64::NAN, f64::NAN, f64::NAN, f64::NAN));
            let mut row: Vec<String> = point.iter().map(|(_, v)| v.clone()).collect();
            row.push(metric.clone());
            row.push(n.to_string());
            row.extend([mean, sd, min, max].map(csv::num));
            rows.push(row);
            let mut cells: Vec<String> = point.iter().map(|(_, v)| v.clone()).collect();
            cells.push(netsched_report::markdown::cell(metric));
            cells.push(n.to_string());
            cells.extend([mean, sd, min, max].map(fmt));
            let _ = writeln!(md, "| {} |", cells.join(" | "));
        }
    }
    csv::write_table(&out.join("sweep.csv"), &header, &rows)?;
    Ok(md)
}

/// The charts of a sweep: one per metric, for the first (up to) [`MAX_PLOTS`] metrics by name;
/// the first is `sweep.svg`, the others `sweep-2.svg`, `sweep-3.svg`... Each shows the mean
/// over the seeds at every grid point (a line over a single numeric axis, bars otherwise), the
/// y axis named after the metric and its unit, and — with two seeds or more — the 95% Student
/// t interval of the mean as error bars. Returns (metric, file) for each chart.
fn write_plot(
    plan: &Plan,
    per_point: &PerPoint,
    out: &Path,
) -> anyhow::Result<Vec<(String, String)>> {
    let metric_names: Vec<String> = per_point
        .iter()
        .flat_map(|m| m.keys().cloned())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .take(MAX_PLOTS)
        .collect();
    let mut files = Vec::new();
    for (k, m) in metric_names.iter().enumerate() {
        let file = if k == 0 {
            "sweep.svg".to_string()
        } else {
            format!("sweep-{}.svg", k + 1)
        };
        std::fs::write(out.join(&file), plot_metric(plan, per_point, m))
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", out.join(&file).display()))?;
        files.push((m.clone(), file));
    }
    Ok(files)
}

/// Charts a sweep draws at most (the metrics past these are in the tables only).
pub const MAX_PLOTS: usize = 8;

/// The SVG text of one metric's chart across the grid (see [`write_plot`]).
pub fn plot_metric(plan: &Plan, per_point: &PerPoint, metric: &str) -> String {
    let axes = &plan.axes;
    let intervals: Vec<Option<stats::Interval>> = (0..plan.points.len())
        .map(|pi| {
            per_point[pi]
                .get(metric)
                .and_then(|xs| stats::mean_ci95(xs))
        })
        .collect();
    // The axis in a readable multiple of the metric's unit (`p99_ns` in ms).
    let max_abs = intervals
        .iter()
        .flatten()
        .map(|i| i.mean.abs().max(i.hi().abs()))
        .fold(0.0, f64::max);
    let (what, unit, factor) = metric_name::scaled(metric, max_abs);
    let mean = |pi: usize| intervals[pi].map(|i| i.mean / factor).unwrap_or(f64::NAN);
    let ends: Vec<(f64, f64)> = intervals
        .iter()
        .map(|i| svg::interval_ends(i.as_ref()))
        .map(|(lo, hi)| (lo / factor, hi / factor))
        .collect();
    let with_interval = plan.seeds > 1;
    let opts = svg::ChartOptions {
        intervals: if with_interval {
            vec![ends]
        } else {
            Vec::new()
        },
        intervals_legend: Some(svg::interval_legend_text(plan.seeds as usize, "seed")),
        ..Default::default()
    };
    let y_label = match unit {
        Some(u) => format!("{what} ({u})"),
        None => what.clone(),
    };
    let title = format!(
        "{}: {what}{} — mean over {} seed(s)",
        plan.experiment,
        unit.map(|u| format!(" ({u})")).unwrap_or_default(),
        plan.seeds
    );
    let numeric_axis: Option<Vec<f64>> = if axes.len() == 1 {
        axes[0].1.iter().map(|v| v.parse::<f64>().ok()).collect()
    } else {
        None
    };
    if let Some(xs) = numeric_axis {
        let pts: Vec<(f64, f64)> = xs
            .iter()
            .enumerate()
            .map(|(pi, x)| (*x, mean(pi)))
            .collect();
        svg::line_chart_svg_with(&title, &axes[0].0, &y_label, &[(metric, pts)], &opts)
    } else {
        let cats: Vec<String> = plan
            .points
            .iter()
            .map(|p| {
                p.iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        let vals: Vec<f64> = (0..plan.points.len()).map(mean).collect();
        svg::bar_chart_svg_with(&title, &y_label, &cats, &[(metric, vals)], &opts)
    }
}

/// The error of a sweep with failed runs (none: `Ok`).
pub fn failures_error(out: &Path, failures: &[Failure]) -> Result<(), SeriesError> {
    if failures.is_empty() {
        return Ok(());
    }
    Err(SeriesError::SweepRunsFailed {
        count: failures.len(),
        table: out.join("sweep.md"),
        lines: failures
            .iter()
            .map(|f| {
                format!(
                    "run {} ({}, seed {}): {}",
                    f.index,
                    out.join("runs").join(&f.hash).display(),
                    f.seed,
                    f.reason
                )
            })
            .collect(),
    })
}

/// Run a sweep on this machine.
pub fn run(a: SweepSpec) -> Result<(), SeriesError> {
    let (plan, out) = plan(&a)?;
    if plan.real {
        return Err(SeriesError::RealNeedsSlurm);
    }
    check_same_experiment(&plan, &out)?;
    // Every grid point was checked above: the sweep is valid. Create the folders now (the
    // shared `runs/` before the parallel runs), removed again if this sweep created them and
    // no run finished.
    let dir = OutDir::create(&out)?;
    std::fs::create_dir_all(out.join("runs")).map_err(|source| SeriesError::Create {
        path: out.join("runs"),
        source,
    })?;
    plan.write(&out)?;
    // An earlier report of this folder would stand for runs it did not count; it is written
    // again when this sweep's tables are.
    let _ = std::fs::remove_file(out.join("sweep.md"));
    let started = Instant::now();
    let total = plan.runs.len();
    let threads = a.jobs.unwrap_or_else(runner::cores);
    eprintln!(
        "[lab] sweep {}: {} grid point(s) × {} seed(s) = {total} run(s) on {threads} thread(s) → {}",
        plan.experiment,
        plan.points.len(),
        plan.seeds,
        out.display()
    );
    let indices: Vec<usize> = (0..total).collect();
    let progress = Progress::new(total as u64);
    let outcomes = runner::parallel_map(&indices, threads, |&i| {
        let o = run_one(&plan, &out, i).map_err(|e| RunFailure::Error(e.to_string()));
        progress.inc();
        o
    });
    progress.finish();
    // A finished run is kept whatever happens next: the same command again reuses it.
    if outcomes.iter().any(|o| o.is_ok()) {
        dir.keep();
    }
    let failures = tabulate(&plan, &out, outcomes).map_err(|e| {
        SeriesError::Lab(anyhow::anyhow!(
            "{e}; the finished runs are kept in {}: the same command again tabulates them \
             without running them again",
            out.join("runs").display()
        ))
    })?;
    eprintln!(
        "[lab] sweep {}: {total} run(s) in {:.1} s, {} failed → {}",
        plan.experiment,
        started.elapsed().as_secs_f64(),
        failures.len(),
        out.join("sweep.md").display()
    );
    println!("{}", out.join("sweep.md").display());
    failures_error(&out, &failures)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_parsing_respects_arrays() {
        let (k, v) = parse_axis("load.hosts=[1,5],[10,15]").unwrap();
        assert_eq!(k, "load.hosts");
        assert_eq!(v, vec!["[1,5]", "[10,15]"]);
        assert!(parse_axis("nokey").is_err());
        assert!(parse_axis("a=1,,2").is_err());
    }

    #[test]
    fn fnv_of_nothing_is_the_offset_basis() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
    }

    #[test]
    fn grid_size_is_bounded_before_anything_is_built() {
        let axis = |n: usize| ("k".to_string(), (0..n).map(|i| i.to_string()).collect());
        assert_eq!(check_size(&[axis(3), axis(4)], 5).unwrap(), 12);
        let e = check_size(&[axis(3)], 100_000_000).unwrap_err().to_string();
        assert!(e.contains("300000000 runs") && e.contains("10000"), "{e}");
        let e = check_size(&[axis(1001)], 1).unwrap_err().to_string();
        assert!(e.contains("--grid k: 1001 values"), "{e}");
        let e = check_size(&vec![axis(1); 9], 1).unwrap_err().to_string();
        assert!(e.contains("9 --grid axes"), "{e}");
        // Products that overflow u64 are refused, not wrapped.
        assert!(check_size(&vec![axis(1000); 8], 1).is_err());
    }

    #[test]
    fn metrics_flatten_with_config_label() {
        let mut r = Results::new("x", "sim", 1, Value::Null);
        r.runs.push(netsched_report::Run {
            config: serde_json::json!({"policy": "rr", "size": 64}),
            metrics: serde_json::json!({"idle": 0.5, "lat": {"p99": 3}, "cdf": [1, 2]}),
        });
        let m = scalar_metrics(&r);
        assert_eq!(m.get("policy=rr size=64 | idle"), Some(&0.5));
        assert_eq!(m.get("policy=rr size=64 | lat.p99"), Some(&3.0));
        assert_eq!(m.len(), 2);
    }
}

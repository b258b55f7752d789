//! `netsched lab sweep`: one experiment over a parameter grid × seeds.
//!
//! Every (grid point, seed) is a run in `<out>/runs/<hash>/` where the hash (FNV-1a 64) covers
//! the experiment, the scenario parameters after overrides, and the seed; a run whose
//! `results.json` already exists there is skipped (its numbers are re-read), so an interrupted
//! or extended sweep only runs what is missing. Runs go in parallel on all cores.
//!
//! Output: `sweep.csv` and `sweep.md` (for each grid point and scalar metric: n, mean, sample
//! standard deviation, min, max over seeds) and `sweep.svg` (the metrics across the grid).

use crate::experiments;
use crate::limits;
use crate::outdir::OutDir;
use crate::runner::{self, RunRequest};
use crate::scenario;
use anyhow::{anyhow, bail};
use netsched_report::aggregate::metric_leaves;
use netsched_report::{csv, stats, svg, Results};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
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
pub fn parse_axis(spec: &str) -> anyhow::Result<(String, Vec<String>)> {
    let (key, vals) = spec
        .split_once('=')
        .ok_or_else(|| anyhow!("--grid {spec:?}: expected key=v1,v2,..."))?;
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
        bail!("--grid {spec:?}: empty key or value");
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

struct Job {
    point: usize,
    seed: u64,
    params: Value,
    dir: PathBuf,
}

fn fmt(x: f64) -> String {
    if x.is_nan() {
        "—".into()
    } else if x.abs() >= 100.0 || x == x.trunc() {
        format!("{x:.1}")
    } else {
        format!("{x:.4}")
    }
}

/// The grid's size checked against the bounds in [`limits`] before anything is built:
/// returns the number of grid points.
pub fn check_size(axes: &[(String, Vec<String>)], seeds: u64) -> anyhow::Result<u64> {
    if axes.len() > limits::MAX_GRID_AXES {
        bail!(
            "{} --grid axes: more than the limit of {}",
            axes.len(),
            limits::MAX_GRID_AXES
        );
    }
    let mut points: u64 = 1;
    for (key, vals) in axes {
        if vals.len() > limits::MAX_AXIS_VALUES {
            bail!(
                "--grid {key}: {} values, more than the limit of {}",
                vals.len(),
                limits::MAX_AXIS_VALUES
            );
        }
        points = points.saturating_mul(vals.len() as u64);
    }
    let runs = points.saturating_mul(seeds);
    if runs > limits::MAX_SWEEP_RUNS {
        bail!(
            "sweep of {points} grid point(s) × {seeds} seed(s) = {runs} runs: more than the limit of {} runs",
            limits::MAX_SWEEP_RUNS
        );
    }
    Ok(points)
}

/// Run a sweep.
pub fn run(a: SweepSpec) -> anyhow::Result<()> {
    let exp = experiments::find(&a.name)?;
    limits::seed_range(a.seed, a.seeds)?;
    if let Some(j) = a.jobs {
        limits::check_count("--jobs", j as u64, limits::MAX_JOBS as u64)?;
    }
    let axes: Vec<(String, Vec<String>)> = a
        .grid
        .iter()
        .map(|g| parse_axis(g))
        .collect::<anyhow::Result<_>>()?;
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
    let mut jobs = Vec::new();
    for (pi, point) in points.iter().enumerate() {
        let mut table = base.clone();
        for (k, v) in point {
            scenario::apply_set(&mut table, &format!("{k}={v}"))?;
        }
        let params = scenario::to_json(&table)?;
        for s in 0..a.seeds {
            let seed = a.seed + s;
            let key = format!("{}\n{}\n{seed}", exp.name, serde_json::to_string(&params)?);
            let dir = out
                .join("runs")
                .join(format!("{:016x}", fnv1a64(key.as_bytes())));
            jobs.push(Job {
                point: pi,
                seed,
                params: params.clone(),
                dir,
            });
        }
    }
    // Every grid value was applied above: the sweep is valid. Create the folders now (the
    // shared `runs/` before the parallel runs), removed again if this sweep created them and
    // fails before writing its tables.
    let dir = OutDir::create(&out)?;
    std::fs::create_dir_all(out.join("runs"))
        .map_err(|e| anyhow!("cannot create {}: {e}", out.join("runs").display()))?;
    let started = Instant::now();
    let total = jobs.len();
    eprintln!(
        "[lab] sweep {}: {} grid point(s) × {} seed(s) = {total} run(s) on {} thread(s) → {}",
        exp.name,
        points.len(),
        a.seeds,
        a.jobs.unwrap_or_else(runner::cores),
        out.display()
    );
    let outcomes = runner::parallel_map(&jobs, a.jobs.unwrap_or_else(runner::cores), |job| {
        let existing = job.dir.join("results.json");
        let read = |p: &std::path::Path| {
            netsched_report::read::read_text(p, limits::MAX_RESULTS_BYTES, "sweep run results")
        };
        if let Ok(text) = read(&existing) {
            if let Ok(r) = serde_json::from_str::<Results>(&text) {
                eprintln!("[lab] skip {} (exists)", job.dir.display());
                return Ok(r);
            }
        }
        let req = RunRequest {
            exp,
            params: job.params.clone(),
            seed: job.seed,
            out: job.dir.clone(),
            real: false,
            quick: false,
        };
        let t = Instant::now();
        let o = runner::execute(&req)?;
        runner::write_outputs(&req, &o)?;
        let label: Vec<String> = points[job.point]
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        eprintln!(
            "[lab] {} seed {}: {:.1} s (total {:.1} s)",
            label.join(" "),
            job.seed,
            t.elapsed().as_secs_f64(),
            started.elapsed().as_secs_f64()
        );
        // Tabulate what is on disk (not the in-memory numbers), so a resumed sweep — which
        // re-reads results.json — gives byte-identical tables.
        let text = read(&existing)?;
        let _ = o;
        serde_json::from_str::<Results>(&text)
            .map_err(|e| anyhow!("cannot parse {}: {e}", existing.display()))
    });
    let mut errors = Vec::new();
    // per point: metric → values over seeds
    let mut per_point: Vec<BTreeMap<String, Vec<f64>>> = vec![BTreeMap::new(); points.len()];
    for (job, o) in jobs.iter().zip(outcomes) {
        match o {
            Ok(r) => {
                for (name, x) in scalar_metrics(&r) {
                    if a.metric.is_empty() || a.metric.iter().any(|m| name.contains(m.as_str())) {
                        per_point[job.point].entry(name).or_default().push(x);
                    }
                }
            }
            Err(e) => errors.push(format!("{} seed {}: {e:#}", job.dir.display(), job.seed)),
        }
    }
    let keys: Vec<&str> = axes.iter().map(|(k, _)| k.as_str()).collect();
    let mut header: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    header.extend(["metric", "n", "mean", "std", "min", "max"].map(String::from));
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Sweep of {} — {} grid point(s) × {} seed(s)\n\nMean and sample standard deviation over seeds {}..{}; raw runs in `runs/`.\n",
        exp.name,
        points.len(),
        a.seeds,
        a.seed,
        a.seed + a.seeds - 1
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
    // Plot: the first (up to) 8 metrics across the grid points.
    let metric_names: Vec<String> = per_point
        .iter()
        .flat_map(|m| m.keys().cloned())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .take(8)
        .collect();
    let mean_of = |pi: usize, m: &str| {
        per_point[pi]
            .get(m)
            .and_then(|xs| stats::mean(xs))
            .unwrap_or(f64::NAN)
    };
    let numeric_axis: Option<Vec<f64>> = if axes.len() == 1 {
        axes[0].1.iter().map(|v| v.parse::<f64>().ok()).collect()
    } else {
        None
    };
    let title = format!("{}: sweep (mean over {} seed(s))", exp.name, a.seeds);
    if let Some(xs) = numeric_axis {
        let series: Vec<(String, Vec<(f64, f64)>)> = metric_names
            .iter()
            .map(|m| {
                (
                    m.clone(),
                    xs.iter()
                        .enumerate()
                        .map(|(pi, x)| (*x, mean_of(pi, m)))
                        .collect(),
                )
            })
            .collect();
        svg::line_chart(
            &title,
            &axes[0].0,
            "metric",
            &series,
            &out.join("sweep.svg"),
        )?;
    } else {
        let cats: Vec<String> = points
            .iter()
            .map(|p| {
                p.iter()
                    .map(|(_, v)| v.as_str())
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .collect();
        let series: Vec<(String, Vec<f64>)> = metric_names
            .iter()
            .map(|m| {
                (
                    m.clone(),
                    (0..points.len()).map(|pi| mean_of(pi, m)).collect(),
                )
            })
            .collect();
        svg::bar_chart(&title, "metric", &cats, &series, &out.join("sweep.svg"))?;
    }
    let _ = writeln!(
        md,
        "\n![sweep](sweep.svg)\n\n(The plot shows the first {} metric(s) by name; use `--metric` to choose.)",
        metric_names.len()
    );
    if !errors.is_empty() {
        let _ = writeln!(md, "\n## Runs that failed\n");
        for e in &errors {
            let _ = writeln!(md, "- {}", netsched_report::markdown::cell(e));
        }
    }
    std::fs::write(out.join("sweep.md"), md)
        .map_err(|e| anyhow!("cannot write {}: {e}", out.join("sweep.md").display()))?;
    dir.keep();
    eprintln!(
        "[lab] sweep {}: {total} run(s) in {:.1} s, {} failed → {}",
        exp.name,
        started.elapsed().as_secs_f64(),
        errors.len(),
        out.join("sweep.md").display()
    );
    println!("{}", out.join("sweep.md").display());
    if !errors.is_empty() {
        bail!(
            "{} sweep run(s) failed:\n  {}",
            errors.len(),
            errors.join("\n  ")
        );
    }
    Ok(())
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

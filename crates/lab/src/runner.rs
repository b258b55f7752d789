//! Running experiments: scenario → params → `experiments::<name>::run` → `results.json` +
//! `report.md`, one at a time or several in parallel (std threads over a shared work queue).

use crate::experiments::Experiment;
use crate::outdir::OutDir;
use crate::progress::{self, Progress};
use crate::scenario;
use netsched_report::markdown::{self, IndexEntry};
use netsched_report::{Check, ExperimentOutput};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

/// The scenario of `name` (embedded, or `file`) with `--set` overrides applied, as JSON.
pub fn scenario_params(
    name: &str,
    file: Option<&Path>,
    sets: &[String],
) -> anyhow::Result<serde_json::Value> {
    let mut table = scenario::load(name, file)?;
    for s in sets {
        scenario::apply_set(&mut table, s)?;
    }
    scenario::to_json_for(name, &table)
}

/// One run to perform.
pub struct RunRequest {
    pub exp: &'static Experiment,
    pub params: serde_json::Value,
    pub seed: u64,
    pub out: PathBuf,
    pub real: bool,
    pub quick: bool,
}

/// Call the experiment, catching a panic as an error (a bug must not take down a sweep).
/// The output folder is created for the run; if the run fails and this call created it, it is
/// removed again (an existing folder is left as it was).
pub fn execute(req: &RunRequest) -> anyhow::Result<ExperimentOutput> {
    let dir = OutDir::create(&req.out)?;
    let output = call(req)?;
    dir.keep();
    Ok(output)
}

fn call(req: &RunRequest) -> anyhow::Result<ExperimentOutput> {
    let exp = req.exp;
    let call = || -> anyhow::Result<ExperimentOutput> {
        if req.real {
            match exp.run_real {
                Some(f) => f(&req.params, req.seed, &req.out, req.quick),
                None => anyhow::bail!("no real mode for {}", exp.name),
            }
        } else {
            (exp.run)(&req.params, req.seed, &req.out)
        }
    };
    let mut output = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)) {
        Ok(r) => r?,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            anyhow::bail!("{} panicked: {msg}", exp.name);
        }
    };
    // The runner, not the experiment, is the authority on what was run.
    let r = &mut output.results;
    r.experiment = exp.name.to_string();
    r.mode = if req.real { "real" } else { "sim" }.to_string();
    r.seed = req.seed;
    r.params = req.params.clone();
    Ok(output)
}

/// Write `results.json` and `report.md` for a finished run.
pub fn write_outputs(req: &RunRequest, output: &ExperimentOutput) -> anyhow::Result<()> {
    output.results.write(&req.out)?;
    let md = markdown::render(output, req.exp.title, req.exp.paper);
    let path = req.out.join("report.md");
    std::fs::write(&path, md).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))
}

fn summary(checks: &[Check]) -> String {
    // No check ran (all filtered out): nothing was shown, so no ✓.
    if checks.is_empty() {
        return "checks 0/0 — none ran".to_string();
    }
    let passed = checks.iter().filter(|c| c.passed).count();
    let mark = if passed == checks.len() { "✓" } else { "✗" };
    format!("checks {passed}/{} {mark}", checks.len())
}

/// Run, write, and print progress lines to stderr (above the progress bar, if one is drawn).
pub fn run_and_write(req: &RunRequest) -> anyhow::Result<ExperimentOutput> {
    let t = Instant::now();
    let mode = if req.real { "real" } else { "sim" };
    progress::line(&format!(
        "[lab] {} ({mode}, seed {}): running…",
        req.exp.name, req.seed
    ));
    let output = execute(req).map_err(|e| {
        progress::line(&format!(
            "[lab] {}: FAILED after {:.1} s: {e:#}",
            req.exp.name,
            t.elapsed().as_secs_f64()
        ));
        e
    })?;
    write_outputs(req, &output)?;
    progress::line(&format!(
        "[lab] {}: done in {:.1} s, {} → {}",
        req.exp.name,
        t.elapsed().as_secs_f64(),
        summary(&output.checks),
        req.out.display()
    ));
    for c in output.checks.iter().filter(|c| !c.passed) {
        progress::line(&format!("[lab]   ✗ {} — {}", c.claim, c.detail));
    }
    Ok(output)
}

/// Run `jobs` on `threads` worker threads pulling from a shared queue; results in job order.
pub fn parallel_map<J: Sync, R: Send>(
    jobs: &[J],
    threads: usize,
    f: impl Fn(&J) -> R + Sync,
) -> Vec<R> {
    let next = Mutex::new(0usize);
    let results: Mutex<Vec<Option<R>>> = Mutex::new((0..jobs.len()).map(|_| None).collect());
    let threads = threads.clamp(1, jobs.len().max(1));
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = {
                    let mut n = next.lock().unwrap_or_else(|p| p.into_inner());
                    let i = *n;
                    *n += 1;
                    i
                };
                if i >= jobs.len() {
                    break;
                }
                let r = f(&jobs[i]);
                results.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(r);
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .into_iter()
        .map(|r| r.expect("every job ran"))
        .collect()
}

/// Cores to use.
pub fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Run every experiment with its default scenario into `out/<name>/`, in parallel, and write
/// the combined `out/report.md`.
pub fn run_all(
    exps: &[&'static Experiment],
    seed: u64,
    out: &Path,
) -> anyhow::Result<Vec<IndexEntry>> {
    let dir = OutDir::create(out)?;
    let progress = Progress::new(exps.len() as u64);
    let entries = parallel_map(exps, cores(), |exp| {
        let t = Instant::now();
        let outcome = scenario_params(exp.name, None, &[])
            .and_then(|params| {
                run_and_write(&RunRequest {
                    exp,
                    params,
                    seed,
                    out: out.join(exp.name),
                    real: false,
                    quick: false,
                })
            })
            .map(|o| o.checks)
            .map_err(|e| format!("{e:#}"));
        let entry = IndexEntry {
            name: exp.name.to_string(),
            paper: exp.paper.to_string(),
            folder: exp.name.to_string(),
            outcome,
            seconds: t.elapsed().as_secs_f64(),
        };
        progress.inc();
        entry
    });
    progress.finish();
    // Finished experiments are kept whatever happens next (the module header of outdir.rs).
    let dir = if entries.iter().any(|e| e.outcome.is_ok()) {
        dir.keep();
        None
    } else {
        Some(dir)
    };
    let md = markdown::render_index(
        "netsched lab — the papers' experiments in simulation",
        &entries,
    );
    let path = out.join("report.md");
    std::fs::write(&path, md)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    if let Some(d) = dir {
        d.keep();
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_map_keeps_job_order() {
        let jobs: Vec<u64> = (0..50).collect();
        let out = parallel_map(&jobs, 4, |x| x * x);
        assert_eq!(out, jobs.iter().map(|x| x * x).collect::<Vec<_>>());
        assert!(parallel_map(&Vec::<u8>::new(), 3, |x| *x).is_empty());
    }

    #[test]
    fn a_run_without_checks_is_not_shown_as_passing() {
        let none = summary(&[]);
        assert!(!none.contains('✓') && none.contains("none ran"), "{none}");
        assert_eq!(summary(&[Check::new("a", true, "")]), "checks 1/1 ✓");
        assert_eq!(
            summary(&[Check::new("a", true, ""), Check::new("b", false, "")]),
            "checks 1/2 ✗"
        );
    }
}

//! Several runs of one experiment and their aggregate: `lab run NAME --seeds K` (simulated runs
//! with seeds S..S+K−1, in parallel on the cores), `lab run NAME --real --repeat N` (the same
//! real run N times, one after another: real runs share the machine), and `lab --seeds K` (all
//! five experiments × K seeds in one work queue).
//!
//! Layout: every run's full output in its own folder (`seed-S/` or `repeat-I/`), and at the top
//! the aggregate `results.json` ([`netsched_report::aggregate::Aggregate`]) and `report.md`: every
//! metric as mean ± 95% interval, the "paper | this run" table as mean ± half-width, every
//! check decided over the runs (rule: [`netsched_report::aggregate`]), and every chart drawn
//! again at the top as the mean over the runs with 95% error bars
//! ([`netsched_report::chart_mean`]).
//!
//! A run that fails is listed in the aggregate (its folder removed if it created it) and the
//! command ends with an error after writing the aggregate of the others; if none completed,
//! nothing is written and a top folder this command created is removed. Ctrl-C / SIGTERM stop
//! the series between runs: runs not yet started are listed as interrupted, the aggregate of the
//! finished ones is written, and the command ends with an error (the real experiments remove
//! their namespaces, rules and processes themselves).

use crate::experiments::Experiment;
use crate::outdir::OutDir;
use crate::progress::Progress;
use crate::runner::{self, RunRequest};
use crate::series_error::{RunFailure, SeriesError};
use netsched_report::aggregate::{self, Aggregate, Failure, Member, Over};
use netsched_report::chart_mean;
use netsched_report::markdown::{self, IndexEntry};
use netsched_report::ExperimentOutput;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// One series of runs of one experiment.
pub struct Plan {
    pub exp: &'static Experiment,
    pub params: serde_json::Value,
    pub over: Over,
    /// The seed of each run (for repeats: the same seed N times).
    pub seeds: Vec<u64>,
    pub out: PathBuf,
    pub real: bool,
    pub quick: bool,
}

/// One run of a series.
struct MemberJob {
    /// Index of the series in the work queue (for `lab --seeds K`: the experiment).
    series: usize,
    label: String,
    folder: String,
    req: RunRequest,
}

fn member_jobs(plan: &Plan, series: usize) -> Vec<MemberJob> {
    plan.seeds
        .iter()
        .enumerate()
        .map(|(i, &seed)| {
            let (label, folder) = match plan.over {
                Over::Seeds => (format!("seed {seed}"), format!("seed-{seed}")),
                Over::Repeats => (format!("repeat {}", i + 1), format!("repeat-{}", i + 1)),
            };
            MemberJob {
                series,
                label,
                req: RunRequest {
                    exp: plan.exp,
                    params: plan.params.clone(),
                    seed,
                    out: plan.out.join(&folder),
                    real: plan.real,
                    quick: plan.quick,
                },
                folder,
            }
        })
        .collect()
}

/// A finished job: its output or error, and how long it took (s).
type Outcome = (Result<ExperimentOutput, RunFailure>, f64);

/// Run the jobs on `threads` threads; a job not started when SIGINT/SIGTERM arrived is not run.
/// Progress (runs done, time left) goes to stderr ([`crate::progress`]).
fn run_jobs(jobs: &[MemberJob], threads: usize) -> Vec<Outcome> {
    let progress = Progress::new(jobs.len() as u64);
    let outcomes = runner::parallel_map(jobs, threads, |job| {
        if netsched_testbed::interrupted() {
            progress.inc();
            return (Err(RunFailure::Interrupted), 0.0);
        }
        let t = Instant::now();
        let o = runner::run_and_write(&job.req).map_err(|e| RunFailure::of(&e));
        progress.inc();
        (o, t.elapsed().as_secs_f64())
    });
    progress.finish();
    outcomes
}

/// Aggregate a finished series into `dir` (`results.json` + `report.md`).
fn finish(
    exp: &Experiment,
    over: Over,
    dir: &Path,
    jobs: &[&MemberJob],
    outcomes: Vec<Result<ExperimentOutput, RunFailure>>,
) -> Result<Aggregate, SeriesError> {
    let mut members = Vec::new();
    let mut failed = Vec::new();
    for (job, o) in jobs.iter().zip(outcomes) {
        match o {
            Ok(output) => members.push(Member {
                label: job.label.clone(),
                folder: job.folder.clone(),
                output,
            }),
            Err(error) => failed.push(Failure {
                label: job.label.clone(),
                folder: job.folder.clone(),
                error: error.to_string(),
            }),
        }
    }
    let mut agg = aggregate::aggregate(over, &members, failed);
    chart_mean::draw_into(&mut agg, dir, &members)?;
    agg.write(dir)?;
    let md = markdown::render_aggregate(&agg, exp.title, exp.paper);
    let path = dir.join("report.md");
    std::fs::write(&path, md).map_err(|source| SeriesError::Write {
        path: path.clone(),
        source,
    })?;
    Ok(agg)
}

/// Error naming the runs of `agg` that did not complete, if any.
pub fn failures_error(agg: &Aggregate, dir: &Path) -> Result<(), SeriesError> {
    if agg.failed.is_empty() {
        return Ok(());
    }
    Err(SeriesError::SomeFailed {
        experiment: agg.experiment.clone(),
        failed: agg.failed.len(),
        total: agg.failed.len() + agg.members.len(),
        noun: agg.over.noun(),
        report: dir.join("report.md"),
        lines: agg
            .failed
            .iter()
            .map(|f| format!("{}: {}", f.label, f.error))
            .collect(),
    })
}

/// Run a series (seeds in parallel on all cores, real runs one at a time) and write the
/// aggregate. Errors: every run failed (nothing written), or some did (aggregate written).
pub fn run(plan: &Plan) -> Result<Aggregate, SeriesError> {
    let _signals = netsched_testbed::SignalGuard::install()?;
    let t = Instant::now();
    let dir = OutDir::create(&plan.out)?;
    let jobs = member_jobs(plan, 0);
    let threads = if plan.real { 1 } else { runner::cores() };
    eprintln!(
        "[lab] {}: {} {}(s) on {} thread(s) → {}",
        plan.exp.name,
        jobs.len(),
        plan.over.noun(),
        threads.min(jobs.len()),
        plan.out.display()
    );
    let outcomes: Vec<_> = run_jobs(&jobs, threads).into_iter().map(|o| o.0).collect();
    if outcomes.iter().all(|o| o.is_err()) {
        let errors: Vec<String> = jobs
            .iter()
            .zip(&outcomes)
            .filter_map(|(j, o)| o.as_ref().err().map(|e| format!("{}: {e}", j.label)))
            .collect();
        return Err(SeriesError::NoneCompleted {
            experiment: plan.exp.name.to_string(),
            noun: plan.over.noun(),
            lines: errors,
        });
    }
    // Finished runs are kept whatever happens next (the module header of outdir.rs).
    dir.keep();
    let refs: Vec<&MemberJob> = jobs.iter().collect();
    let agg = finish(plan.exp, plan.over, &plan.out, &refs, outcomes)?;
    let passed = agg.checks.iter().filter(|c| c.passed).count();
    eprintln!(
        "[lab] {}: {} {}(s) in {:.1} s, aggregate checks {passed}/{} → {}",
        plan.exp.name,
        agg.members.len(),
        plan.over.noun(),
        t.elapsed().as_secs_f64(),
        agg.checks.len(),
        plan.out.join("report.md").display()
    );
    Ok(agg)
}

/// `lab --seeds K`: every experiment with its default scenario × every seed in one work queue on
/// all cores; `out/<name>/` holds each experiment's aggregate and `out/report.md` the index.
pub fn run_all(
    exps: &[&'static Experiment],
    seeds: &[u64],
    out: &Path,
) -> Result<Vec<IndexEntry>, SeriesError> {
    let _signals = netsched_testbed::SignalGuard::install()?;
    let top = OutDir::create(out)?;
    let t = Instant::now();
    // Per experiment: its parameters (or why it cannot run) and its folder.
    let mut plans: Vec<Result<Plan, RunFailure>> = Vec::new();
    for exp in exps {
        plans.push(
            runner::scenario_params(exp.name, None, &[])
                .map(|params| Plan {
                    exp,
                    params,
                    over: Over::Seeds,
                    seeds: seeds.to_vec(),
                    out: out.join(exp.name),
                    real: false,
                    quick: false,
                })
                .map_err(|e| RunFailure::of(&e)),
        );
    }
    // The experiment folders exist before the runs start (parallel runs must not race to
    // create a shared parent).
    let mut dirs: Vec<Option<OutDir>> = Vec::new();
    for p in &plans {
        dirs.push(match p {
            Ok(p) => Some(OutDir::create(&p.out)?),
            Err(_) => None,
        });
    }
    let jobs: Vec<MemberJob> = plans
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.as_ref().ok().map(|p| member_jobs(p, i)))
        .flatten()
        .collect();
    let mut outcomes: Vec<Option<Outcome>> = run_jobs(&jobs, runner::cores())
        .into_iter()
        .map(Some)
        .collect();
    let mut entries = Vec::new();
    // Whether some experiment finished a run: then `out` is kept whatever happens next.
    let mut kept_any = false;
    for (i, (plan, dir)) in plans.iter().zip(dirs).enumerate() {
        let exp = exps[i];
        // Run time of the experiment: the sum over its seeds (they overlapped with others').
        let mut seconds = 0.0;
        let outcome = match plan {
            Err(e) => Err(e.to_string()),
            Ok(plan) => {
                let idx: Vec<usize> = (0..jobs.len()).filter(|&j| jobs[j].series == i).collect();
                let mine: Vec<Result<ExperimentOutput, RunFailure>> = idx
                    .iter()
                    .map(|&j| {
                        let (o, s) = outcomes[j].take().expect("each outcome taken once");
                        seconds += s;
                        o
                    })
                    .collect();
                let refs: Vec<&MemberJob> = idx.iter().map(|&j| &jobs[j]).collect();
                if mine.iter().all(|o| o.is_err()) {
                    Err(mine
                        .into_iter()
                        .filter_map(|o| o.err())
                        .next()
                        .map(|e| e.to_string())
                        .unwrap_or_default())
                } else {
                    if let Some(d) = dir {
                        d.keep();
                    }
                    kept_any = true;
                    match finish(exp, Over::Seeds, &plan.out, &refs, mine) {
                        Err(e) => Err(e.to_string()),
                        Ok(agg) => match failures_error(&agg, &plan.out) {
                            Ok(()) => Ok(agg.as_checks()),
                            Err(e) => Err(e.to_string()),
                        },
                    }
                }
            }
        };
        entries.push(IndexEntry {
            name: exp.name.to_string(),
            paper: exp.paper.to_string(),
            folder: exp.name.to_string(),
            outcome,
            seconds,
        });
    }
    let md = markdown::render_index(
        &format!(
            "netsched lab — the papers' experiments in simulation, {} seeds ({}..{}); checks decided over the seeds",
            seeds.len(),
            seeds.first().copied().unwrap_or(0),
            seeds.last().copied().unwrap_or(0)
        ),
        &entries,
    );
    let top = if kept_any {
        top.keep();
        None
    } else {
        Some(top)
    };
    let path = out.join("report.md");
    std::fs::write(&path, md).map_err(|source| SeriesError::Write {
        path: path.clone(),
        source,
    })?;
    if let Some(top) = top {
        top.keep();
    }
    eprintln!(
        "[lab] {} experiment(s) × {} seed(s) in {:.1} s → {}",
        exps.len(),
        seeds.len(),
        t.elapsed().as_secs_f64(),
        path.display()
    );
    Ok(entries)
}

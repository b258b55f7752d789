//! What a sweep or a series of runs can get wrong, typed: a bad `--grid`, a bound exceeded, a
//! file that cannot be read, parsed or written (naming it), runs that failed (naming each and
//! why), and the errors of the lab modules they call (experiment lookup, scenarios, the
//! runner, which report through `anyhow` with their own context).
//!
//! [`RunFailure`] is why one run has no results; its text is what `failures.json`, `sweep.md`,
//! the aggregate and the index record.
//!
//! Cost: built only when something fails.

use std::fmt;
use std::path::PathBuf;

/// Why one run of a sweep or series has no results.
#[derive(Debug, Clone, PartialEq)]
pub enum RunFailure {
    /// The run ended with an error (its text, with the whole chain of causes).
    Error(String),
    /// Not started: SIGINT/SIGTERM came first.
    Interrupted,
    /// A Slurm task without results: its state, array job and log.
    Slurm {
        state: String,
        array_job: String,
        log: PathBuf,
    },
    /// A Slurm sweep's run that was never submitted.
    NeverSubmitted,
}

impl RunFailure {
    /// The run's error with its chain of causes.
    pub fn of(e: &anyhow::Error) -> RunFailure {
        RunFailure::Error(format!("{e:#}"))
    }
}

impl fmt::Display for RunFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunFailure::Error(text) => f.write_str(text),
            RunFailure::Interrupted => {
                f.write_str("interrupted (SIGINT/SIGTERM) before it started")
            }
            RunFailure::Slurm {
                state,
                array_job,
                log,
            } => write!(
                f,
                "no results; Slurm state {state} (array job {array_job}), log {}",
                log.display()
            ),
            RunFailure::NeverSubmitted => f.write_str("no results; never submitted"),
        }
    }
}

impl std::error::Error for RunFailure {}

/// Why a sweep or a series stopped.
#[derive(Debug)]
pub enum SeriesError {
    /// A `--grid` value that is not `key=v1,v2,...`, or has an empty key or value.
    Axis { spec: String, why: &'static str },
    /// More `--grid` axes than the bound.
    TooManyAxes { count: usize, max: usize },
    /// An axis with more values than the bound.
    TooManyValues {
        key: String,
        count: usize,
        max: usize,
    },
    /// Grid points × seeds above the bound.
    TooManyRuns {
        points: u64,
        seeds: u64,
        runs: u64,
        max: u64,
    },
    /// A grid point whose parameters the experiment refuses (checked before anything runs).
    Point {
        label: String,
        source: anyhow::Error,
    },
    /// `--real` asked of an experiment that runs in the simulator only.
    NoRealMode { experiment: String },
    /// A local sweep asked for real runs.
    RealNeedsSlurm,
    /// The output folder holds a sweep of another experiment.
    OtherExperiment {
        out: PathBuf,
        found: String,
        wanted: String,
        /// The run list that names the other experiment.
        plan_file: &'static str,
    },
    /// The output folder has no readable run list.
    NotASweep { out: PathBuf, why: String },
    /// A JSON file that does not parse.
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    /// A document that could not be encoded.
    Encode(serde_json::Error),
    /// A path without a file name.
    NotAFilePath(PathBuf),
    /// A file that could not be written.
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A folder that could not be created.
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A temporary name that could not be renamed to the final one.
    Rename {
        from: PathBuf,
        to: PathBuf,
        source: std::io::Error,
    },
    /// A run index past the plan.
    RunIndex { index: usize, runs: usize },
    /// Some runs of a sweep failed (the tables of the others are written): how many, where
    /// the table is, and one line per failed run.
    SweepRunsFailed {
        count: usize,
        table: PathBuf,
        lines: Vec<String>,
    },
    /// No run of a series completed: one `label: why` line per run.
    NoneCompleted {
        experiment: String,
        noun: &'static str,
        lines: Vec<String>,
    },
    /// Some runs of a series failed (the aggregate of the others is written).
    SomeFailed {
        experiment: String,
        failed: usize,
        total: usize,
        noun: &'static str,
        report: PathBuf,
        lines: Vec<String>,
    },
    /// An error of a lab module the sweep or series called (its own context included).
    Lab(anyhow::Error),
}

impl fmt::Display for SeriesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use SeriesError::*;
        match self {
            Axis { spec, why } => write!(f, "--grid {spec:?}: {why}"),
            TooManyAxes { count, max } => {
                write!(f, "{count} --grid axes: more than the limit of {max}")
            }
            TooManyValues { key, count, max } => write!(
                f,
                "--grid {key}: {count} values, more than the limit of {max}"
            ),
            TooManyRuns {
                points,
                seeds,
                runs,
                max,
            } => write!(
                f,
                "sweep of {points} grid point(s) × {seeds} seed(s) = {runs} runs: more than the limit of {max} runs"
            ),
            Point { label, source } => write!(
                f,
                "grid point {label}: {source:#} (nothing was run)"
            ),
            NoRealMode { experiment } => write!(
                f,
                "no real mode for {experiment}: it runs in the simulator only"
            ),
            RealNeedsSlurm => f.write_str(
                "--real sweeps run on Slurm (--on slurm), one real run per node at a time; a local sweep runs simulated runs",
            ),
            OtherExperiment {
                out,
                found,
                wanted,
                plan_file,
            } => write!(
                f,
                "output folder {} holds a sweep of {found} (its {}), not {wanted}: choose another --out",
                out.display(),
                plan_file
            ),
            NotASweep { out, why } => {
                write!(f, "{} is not a sweep's output folder: {why}", out.display())
            }
            Parse { path, source } => write!(f, "cannot parse {}: {source}", path.display()),
            Encode(e) => write!(f, "cannot encode JSON: {e}"),
            NotAFilePath(p) => write!(f, "{}: not a file path", p.display()),
            Write { path, source } => write!(f, "cannot write {}: {source}", path.display()),
            Create { path, source } => write!(f, "cannot create {}: {source}", path.display()),
            Rename { from, to, source } => write!(
                f,
                "cannot rename {} to {}: {source}",
                from.display(),
                to.display()
            ),
            RunIndex { index, runs } => {
                write!(f, "run index {index}: the sweep has {runs} run(s)")
            }
            SweepRunsFailed {
                count,
                table,
                lines,
            } => write!(
                f,
                "{count} sweep run(s) failed (see {}):\n  {}",
                table.display(),
                lines.join("\n  ")
            ),
            NoneCompleted {
                experiment,
                noun,
                lines,
            } => write!(
                f,
                "{experiment}: no {noun} completed:\n  {}",
                lines.join("\n  ")
            ),
            SomeFailed {
                experiment,
                failed,
                total,
                noun,
                report,
                lines,
            } => write!(
                f,
                "{experiment}: {failed} of {total} {noun}(s) did not run (the aggregate of the others is in {}):\n  {}",
                report.display(),
                lines.join("\n  ")
            ),
            Lab(e) => write!(f, "{e:#}"),
        }
    }
}

impl std::error::Error for SeriesError {}

impl From<anyhow::Error> for SeriesError {
    fn from(e: anyhow::Error) -> Self {
        SeriesError::Lab(e)
    }
}

impl From<serde_json::Error> for SeriesError {
    fn from(e: serde_json::Error) -> Self {
        SeriesError::Encode(e)
    }
}

//! The `netsched lab` command line.
//!
//! - `netsched lab` — run all five experiments (two at a time on a 2-core machine) and write
//!   `<out>/report.md` linking each experiment's folder with every check ✓/✗;
//! - `netsched lab list` — name, paper, one line;
//! - `netsched lab run NAME [--set key=value]... [--seed N] [--out DIR] [--real] [--quick]`;
//! - `netsched lab run NAME --seeds K` — K seeds (N..N+K−1) in parallel, each in `seed-S/`, and
//!   their aggregate at the top (`netsched lab --seeds K` does this for all five);
//! - `netsched lab run NAME --real --repeat N` — the real run N times, one after another;
//! - `netsched lab run NAME --real --engine E` — which data plane a real run drives, for an
//!   experiment that has several (percentile-web: `nfq` or `balance`; = `--set real.engine=E`);
//! - `netsched lab run lvs-cluster [--real] --directors N` — N directors behind the router's
//!   ECMP instead of one (= `--set cluster.directors=N`; simulated and real);
//! - `netsched lab sweep NAME --grid key=v1,v2 [--grid ...] [--seeds N] [--out DIR]`, on this
//!   machine or `--on slurm` (one job array and a merge job; see [`crate::slurm`]);
//! - `netsched lab sweep --status OUT` — a sweep's done/running/failed/pending counts.
//!
//! Failed checks are reported (✗ in the report and on stderr) and the exit status stays 0
//! unless `--strict`; an experiment that cannot run at all is an error. Counts are bounded
//! ([`crate::limits`]).

use crate::experiments::{self, Experiment};
use crate::limits;
use crate::repeat::{self, Plan};
use crate::runner::{self, RunRequest};
use crate::slurm::{self, SlurmOpts};
use crate::sweep::{self, SweepSpec};
use clap::{Args, Parser, Subcommand};
use netsched_report::aggregate::Over;
use std::path::PathBuf;

/// Arguments of `netsched lab`.
#[derive(Debug, Args)]
pub struct LabArgs {
    #[command(subcommand)]
    pub cmd: Option<LabCmd>,
    /// Output folder when running all experiments (default `results/`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Seed for every experiment (the first seed with --seeds).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Run every experiment with K seeds (seed..seed+K−1) and decide checks over them.
    #[arg(long, default_value_t = 1, value_name = "K")]
    pub seeds: u64,
    /// Make any failed check an error (non-zero exit).
    #[arg(long)]
    pub strict: bool,
}

#[derive(Debug, Subcommand)]
pub enum LabCmd {
    /// List the experiments: name, paper, what it shows.
    List,
    /// Run one experiment.
    Run(RunArgs),
    /// Run one experiment over a parameter grid × seeds, in parallel or on Slurm, and tabulate
    /// the metrics.
    Sweep(SweepArgs),
    /// Run one run of a sweep (a Slurm array task): `sweep-task OUT INDEX`.
    #[command(hide = true)]
    SweepTask {
        /// The sweep's output folder (holding runs.json).
        out: PathBuf,
        /// Run index in runs.json.
        index: usize,
    },
    /// Tabulate a sweep from its runs (the Slurm merge job): `sweep-merge OUT`.
    #[command(hide = true)]
    SweepMerge {
        /// The sweep's output folder (holding runs.json).
        out: PathBuf,
    },
}

/// Where a sweep's runs go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum On {
    /// This machine's cores.
    Local,
    /// A Slurm cluster: one job array, then a merge job.
    Slurm,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Experiment name (see `netsched lab list`).
    pub name: String,
    /// Override a scenario parameter: `--set key.sub=value` (value parsed as TOML).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Seed of the run's random generators (the first seed with --seeds).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Run K seeds (seed..seed+K−1) in parallel; each in `seed-S/`, the aggregate at the top.
    #[arg(long, default_value_t = 1, value_name = "K")]
    pub seeds: u64,
    /// With --real: run the real experiment N times, one after another; each in `repeat-I/`,
    /// the aggregate (with the spread) at the top.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub repeat: u64,
    /// Output folder (default `results/NAME/`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Load the scenario from this TOML file instead of the embedded `scenarios/NAME.toml`.
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    /// Run on real Linux (namespaces, tc, NFQUEUE) instead of the simulator, where supported.
    #[arg(long)]
    pub real: bool,
    /// Shorter real runs (for smoke tests).
    #[arg(long)]
    pub quick: bool,
    /// With --real: the data plane the real run drives, for an experiment that has several
    /// (percentile-web: `nfq`, the default, the NFQUEUE daemon; `balance`, netsched balance
    /// against HAProxy). The same as `--set real.engine=E`.
    #[arg(long, value_name = "E", requires = "real")]
    pub engine: Option<String>,
    /// Directors behind the router's ECMP, 1..=8, for an experiment whose cluster can have
    /// several (lvs-cluster; simulated and real). The same as `--set cluster.directors=N`.
    #[arg(long, value_name = "N")]
    pub directors: Option<usize>,
    /// Make any failed check an error (non-zero exit).
    #[arg(long)]
    pub strict: bool,
}

/// `--directors N` as the `--set` it stands for; `Err` when the experiment has one director
/// only, when N is outside 1..=8, or when a `--set` of the same key says otherwise.
pub fn directors_set(exp: &Experiment, n: usize, sets: &[String]) -> anyhow::Result<String> {
    let Some(key) = exp.directors_key else {
        let with: Vec<&str> = experiments::ALL
            .iter()
            .filter(|e| e.directors_key.is_some())
            .map(|e| e.name)
            .collect();
        anyhow::bail!(
            "--directors {n}: {} has no directors to multiply (it exists for {})",
            exp.name,
            with.join(", ")
        );
    };
    let max = experiments::lvs_cluster::MAX_DIRECTORS;
    if n == 0 || n > max {
        anyhow::bail!("--directors {n} is outside 1..={max}");
    }
    let set = format!("{key}={n}");
    let prefix = format!("{key}=");
    if let Some(other) = sets.iter().find(|s| {
        s.strip_prefix(&prefix)
            .is_some_and(|v| v.trim() != n.to_string())
    }) {
        anyhow::bail!("--directors {n} and --set {other}: choose one");
    }
    Ok(set)
}

/// `--engine E` as the `--set` it stands for; `Err` names the engines the experiment has, or
/// a `--set real.engine` that says otherwise.
pub fn engine_set(exp: &Experiment, engine: &str, sets: &[String]) -> anyhow::Result<String> {
    if !exp.real_engines.contains(&engine) {
        if exp.real_engines.is_empty() {
            anyhow::bail!(
                "--engine {engine}: {}'s real run has one data plane (engines exist for {})",
                exp.name,
                experiments::ALL
                    .iter()
                    .filter(|e| !e.real_engines.is_empty())
                    .map(|e| e.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        anyhow::bail!(
            "--engine {engine}: {} has the engines {}",
            exp.name,
            exp.real_engines.join(", ")
        );
    }
    let set = format!("real.engine={engine}");
    if let Some(other) = sets.iter().find(|s| {
        s.strip_prefix("real.engine=")
            .is_some_and(|v| v.trim().trim_matches('"') != engine)
    }) {
        anyhow::bail!("--engine {engine} and --set {other}: choose one");
    }
    Ok(set)
}

/// `lab sweep`. With `--on slurm` the output folder must be on a filesystem every node sees at
/// the same path (NFS, Lustre, ...): a folder on tmpfs or ramfs is refused.
#[derive(Debug, Args)]
pub struct SweepArgs {
    /// Experiment name.
    #[arg(required_unless_present = "status")]
    pub name: Option<String>,
    /// A grid axis: `--grid key=v1,v2,...` (repeat for more axes; the grid is their product).
    #[arg(
        long = "grid",
        value_name = "KEY=V1,V2,...",
        required_unless_present = "status"
    )]
    pub grid: Vec<String>,
    /// Fixed overrides applied to every grid point.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Seeds per grid point (seed, seed+1, ...).
    #[arg(long, default_value_t = 3)]
    pub seeds: u64,
    /// First seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output folder (default `results/sweep-NAME/`). With `--on slurm`: on a filesystem every
    /// node sees at the same path (a folder on tmpfs or ramfs is refused).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Scenario file instead of the embedded one.
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    /// Keep only metrics whose name contains one of these substrings (repeatable).
    #[arg(long = "metric")]
    pub metric: Vec<String>,
    /// Parallel runs (default: all cores; local sweeps).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Where the runs go: this machine, or a Slurm job array (runs already done are not
    /// resubmitted; the same command completes a partly failed sweep).
    #[arg(long, value_enum, default_value_t = On::Local)]
    pub on: On,
    /// Slurm partition (`--on slurm`).
    #[arg(long)]
    pub partition: Option<String>,
    /// Slurm time limit per run, in Slurm's syntax (`--on slurm`), e.g. `10:00`.
    #[arg(long)]
    pub time: Option<String>,
    /// At most N array tasks at once (`--on slurm`).
    #[arg(long, value_name = "N")]
    pub max_parallel: Option<u64>,
    /// A further `sbatch` argument for both jobs, e.g. `--sbatch-arg=--account=x` (repeatable).
    #[arg(long = "sbatch-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub sbatch_arg: Vec<String>,
    /// Real runs (`--on slurm` only, as root): each task gets its node to itself
    /// (`--exclusive`).
    #[arg(long)]
    pub real: bool,
    /// Print the progress of the sweep in OUT (done, running, failed, pending) and exit; for a
    /// Slurm sweep, with each failed task's state and log file.
    #[arg(long, value_name = "OUT", conflicts_with_all = ["name", "grid"])]
    pub status: Option<PathBuf>,
}

/// Entry point of `netsched lab`.
pub fn run(args: LabArgs) -> anyhow::Result<()> {
    match args.cmd {
        None => run_all(args.out, args.seed, args.seeds, args.strict),
        Some(LabCmd::List) => {
            print!("{}", list_text());
            Ok(())
        }
        Some(LabCmd::Run(a)) => run_single(a),
        Some(LabCmd::Sweep(a)) => run_sweep(a),
        Some(LabCmd::SweepTask { out, index }) => slurm::task(&out, index),
        Some(LabCmd::SweepMerge { out }) => slurm::merge(&out),
    }
}

fn run_sweep(a: SweepArgs) -> anyhow::Result<()> {
    if let Some(out) = &a.status {
        return slurm::print_status(out);
    }
    let opts = SlurmOpts {
        partition: a.partition.clone(),
        time: a.time.clone(),
        max_parallel: a.max_parallel,
        sbatch_args: a.sbatch_arg.clone(),
    };
    let on = a.on;
    let spec = SweepSpec::from(a);
    match on {
        On::Slurm => slurm::submit(&spec, &opts),
        On::Local => {
            if opts.partition.is_some()
                || opts.time.is_some()
                || opts.max_parallel.is_some()
                || !opts.sbatch_args.is_empty()
            {
                anyhow::bail!(
                    "--partition, --time, --max-parallel and --sbatch-arg are Slurm options: add --on slurm"
                );
            }
            Ok(sweep::run(spec)?)
        }
    }
}

impl From<SweepArgs> for SweepSpec {
    fn from(a: SweepArgs) -> Self {
        SweepSpec {
            name: a.name.unwrap_or_default(),
            grid: a.grid,
            set: a.set,
            seeds: a.seeds,
            seed: a.seed,
            out: a.out,
            scenario: a.scenario,
            metric: a.metric,
            jobs: a.jobs,
            real: a.real,
        }
    }
}

/// Parse and run `netsched lab ARGS...` (for tests and embedding): `args` excludes "lab".
pub fn main_with(args: &[&str]) -> anyhow::Result<()> {
    #[derive(Parser)]
    #[command(name = "netsched-lab")]
    struct Wrapper {
        #[command(flatten)]
        lab: LabArgs,
    }
    let w = Wrapper::try_parse_from(std::iter::once("lab").chain(args.iter().copied()))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    run(w.lab)
}

/// The `lab list` table.
pub fn list_text() -> String {
    let mut s = String::new();
    for e in experiments::ALL {
        let real = if e.run_real.is_some() {
            " [--real]"
        } else {
            ""
        };
        s.push_str(&format!(
            "{:<15} {}{}\n{:<15} {}\n",
            e.name, e.paper, real, "", e.summary
        ));
    }
    s
}

fn run_single(a: RunArgs) -> anyhow::Result<()> {
    let exp = experiments::find(&a.name)?;
    if a.real && exp.run_real.is_none() {
        anyhow::bail!(
            "no real mode for {}: it runs in the simulator only (real mode exists for {})",
            exp.name,
            real_names().join(", ")
        );
    }
    let mut a = a;
    if let Some(e) = &a.engine {
        let set = engine_set(exp, e, &a.set)?;
        a.set.push(set);
    }
    if let Some(n) = a.directors {
        let set = directors_set(exp, n, &a.set)?;
        a.set.push(set);
    }
    let seeds = limits::seed_range(a.seed, a.seeds)?;
    limits::check_count("--repeat", a.repeat, limits::MAX_REPEATS)?;
    if a.repeat > 1 && !a.real {
        anyhow::bail!(
            "--repeat {} repeats a real run (--real); a simulated run gives the same numbers every time — use --seeds K for a spread",
            a.repeat
        );
    }
    if a.repeat > 1 && a.seeds > 1 {
        anyhow::bail!(
            "--repeat {} with --seeds {}: choose one (repeats of one seed, or one run per seed)",
            a.repeat,
            a.seeds
        );
    }
    let params = runner::scenario_params(exp.name, a.scenario.as_deref(), &a.set)?;
    let out = a
        .out
        .unwrap_or_else(|| PathBuf::from("results").join(exp.name));
    if a.seeds > 1 || a.repeat > 1 {
        let (over, seeds) = if a.repeat > 1 {
            (Over::Repeats, vec![a.seed; a.repeat as usize])
        } else {
            (Over::Seeds, seeds)
        };
        let plan = Plan {
            exp,
            params,
            over,
            seeds,
            out: out.clone(),
            real: a.real,
            quick: a.quick,
        };
        let agg = repeat::run(&plan)?;
        println!("{}", out.join("report.md").display());
        repeat::failures_error(&agg, &out)?;
        let failed: Vec<_> = agg.checks.iter().filter(|c| !c.passed).collect();
        if a.strict && !failed.is_empty() {
            anyhow::bail!(
                "{}: {} check(s) failed over the {}s (--strict): {}",
                exp.name,
                failed.len(),
                over.noun(),
                failed
                    .iter()
                    .map(|c| c.claim.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            );
        }
        return Ok(());
    }
    let req = RunRequest {
        exp,
        params,
        seed: a.seed,
        out: out.clone(),
        real: a.real,
        quick: a.quick,
    };
    let output = runner::run_and_write(&req)?;
    let failed: Vec<_> = output.checks.iter().filter(|c| !c.passed).collect();
    println!("{}", out.join("report.md").display());
    if a.strict && !failed.is_empty() {
        anyhow::bail!(
            "{}: {} check(s) failed (--strict): {}",
            exp.name,
            failed.len(),
            failed
                .iter()
                .map(|c| c.claim.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    Ok(())
}

fn real_names() -> Vec<&'static str> {
    experiments::ALL
        .iter()
        .filter(|e| e.run_real.is_some())
        .map(|e| e.name)
        .collect()
}

fn run_all(out: Option<PathBuf>, seed: u64, seeds: u64, strict: bool) -> anyhow::Result<()> {
    let seed_list = limits::seed_range(seed, seeds)?;
    let out = out.unwrap_or_else(|| PathBuf::from("results"));
    let started = std::time::Instant::now();
    let exps: Vec<&'static Experiment> = experiments::ALL.iter().collect();
    let entries = if seeds > 1 {
        repeat::run_all(&exps, &seed_list, &out)?
    } else {
        runner::run_all(&exps, seed, &out)?
    };
    let failed_checks: usize = entries
        .iter()
        .filter_map(|e| e.outcome.as_ref().ok())
        .map(|c| c.iter().filter(|c| !c.passed).count())
        .sum();
    let errors: Vec<String> = entries
        .iter()
        .filter_map(|e| e.outcome.as_ref().err().map(|m| format!("{}: {m}", e.name)))
        .collect();
    eprintln!(
        "[lab] all done in {:.1} s: {} failed check(s), {} experiment error(s) → {}",
        started.elapsed().as_secs_f64(),
        failed_checks,
        errors.len(),
        out.join("report.md").display()
    );
    println!("{}", out.join("report.md").display());
    if !errors.is_empty() {
        anyhow::bail!(
            "{} experiment(s) did not run:\n  {}",
            errors.len(),
            errors.join("\n  ")
        );
    }
    if strict && failed_checks > 0 {
        anyhow::bail!("{failed_checks} check(s) failed (--strict); see the report");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn directors_flag_is_the_set_it_stands_for_and_refuses_what_does_not_exist() {
        let lvs = super::experiments::find("lvs-cluster").unwrap();
        assert_eq!(
            super::directors_set(lvs, 2, &[]).unwrap(),
            "cluster.directors=2"
        );
        for n in [0, 9] {
            let e = super::directors_set(lvs, n, &[]).unwrap_err().to_string();
            assert!(
                e.contains(&format!("--directors {n}")) && e.contains("1..=8"),
                "{e}"
            );
        }
        let other = ["cluster.directors=3".to_string()];
        let e = super::directors_set(lvs, 2, &other)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--set cluster.directors=3"), "{e}");
        let ack = super::experiments::find("adsl-ack").unwrap();
        let e = super::directors_set(ack, 2, &[]).unwrap_err().to_string();
        assert!(e.contains("adsl-ack") && e.contains("lvs-cluster"), "{e}");
    }

    #[test]
    fn engine_flag_is_the_set_it_stands_for_and_refuses_what_does_not_exist() {
        let pw = super::experiments::find("percentile-web").unwrap();
        let set = super::engine_set(pw, "balance", &[]).unwrap();
        assert_eq!(set, "real.engine=balance");
        let same = ["real.engine=\"balance\"".to_string()];
        assert!(super::engine_set(pw, "balance", &same).is_ok());
        let e = super::engine_set(pw, "xdp", &[]).unwrap_err().to_string();
        assert!(
            e.contains("--engine xdp") && e.contains("nfq, balance"),
            "{e}"
        );
        let other = ["real.engine=nfq".to_string()];
        let e = super::engine_set(pw, "balance", &other)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--set real.engine=nfq"), "{e}");
        let ack = super::experiments::find("adsl-ack").unwrap();
        let e = super::engine_set(ack, "balance", &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("one data plane") && e.contains("percentile-web"),
            "{e}"
        );
    }
}

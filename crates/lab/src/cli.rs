//! The `netsched lab` command line.
//!
//! - `netsched lab` — run all five experiments (two at a time on a 2-core machine) and write
//!   `<out>/report.md` linking each experiment's folder with every check ✓/✗;
//! - `netsched lab list` — name, paper, one line;
//! - `netsched lab run NAME [--set key=value]... [--seed N] [--out DIR] [--real] [--quick]`;
//! - `netsched lab sweep NAME --grid key=v1,v2 [--grid ...] [--seeds N] [--out DIR]`.
//!
//! Failed checks are reported (✗ in the report and on stderr) and the exit status stays 0
//! unless `--strict`; an experiment that cannot run at all is an error.

use crate::experiments::{self, Experiment};
use crate::runner::{self, RunRequest};
use crate::sweep;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// Arguments of `netsched lab`.
#[derive(Debug, Args)]
pub struct LabArgs {
    #[command(subcommand)]
    pub cmd: Option<LabCmd>,
    /// Output folder when running all experiments (default `results/`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Seed for every experiment.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
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
    /// Run one experiment over a parameter grid × seeds, in parallel, and tabulate the metrics.
    Sweep(SweepArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Experiment name (see `netsched lab list`).
    pub name: String,
    /// Override a scenario parameter: `--set key.sub=value` (value parsed as TOML).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Seed of the run's random generators.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
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
    /// Make any failed check an error (non-zero exit).
    #[arg(long)]
    pub strict: bool,
}

#[derive(Debug, Args)]
pub struct SweepArgs {
    /// Experiment name.
    pub name: String,
    /// A grid axis: `--grid key=v1,v2,...` (repeat for more axes; the grid is their product).
    #[arg(long = "grid", value_name = "KEY=V1,V2,...", required = true)]
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
    /// Output folder (default `results/sweep-NAME/`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Scenario file instead of the embedded one.
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    /// Keep only metrics whose name contains one of these substrings (repeatable).
    #[arg(long = "metric")]
    pub metric: Vec<String>,
    /// Parallel runs (default: all cores).
    #[arg(long)]
    pub jobs: Option<usize>,
}

/// Entry point of `netsched lab`.
pub fn run(args: LabArgs) -> anyhow::Result<()> {
    match args.cmd {
        None => run_all(args.out, args.seed, args.strict),
        Some(LabCmd::List) => {
            print!("{}", list_text());
            Ok(())
        }
        Some(LabCmd::Run(a)) => run_single(a),
        Some(LabCmd::Sweep(a)) => sweep::run(a),
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
    let params = runner::scenario_params(exp.name, a.scenario.as_deref(), &a.set)?;
    let out = a
        .out
        .unwrap_or_else(|| PathBuf::from("results").join(exp.name));
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

fn run_all(out: Option<PathBuf>, seed: u64, strict: bool) -> anyhow::Result<()> {
    let out = out.unwrap_or_else(|| PathBuf::from("results"));
    let started = std::time::Instant::now();
    let exps: Vec<&'static Experiment> = experiments::ALL.iter().collect();
    let entries = runner::run_all(&exps, seed, &out)?;
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

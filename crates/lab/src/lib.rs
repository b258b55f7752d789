//! # netsched-lab — `netsched lab`: the papers' experiments, simulated and real
//!
//! | module | what lives there |
//! |---|---|
//! | [`cli`] | the `netsched lab` command line (all, list, run, sweep) and its argument types |
//! | [`runner`] | scenario → experiment → `results.json` + `report.md`; the parallel work queue |
//! | [`repeat`] | one experiment over several seeds or real repeats, and their aggregate |
//! | [`sweep`] | grid × seeds sweeps with skip-if-done and mean/spread tables |
//! | [`series_error`] | what a sweep or series can get wrong, and why one run has no results, typed |
//! | [`slurm`] | sweeps submitted to Slurm as one job array, their merge and status |
//! | [`scenario`] | embedded `scenarios/*.toml`, bounded `--scenario` files, `--set` overrides, typed access |
//! | [`params`] | parameter lookups by dotted key with errors naming the key |
//! | [`progress`] | runs done / total and time left on stderr: a bar on a terminal, plain lines otherwise |
//! | [`limits`] | every bound on counts and input sizes |
//! | [`outdir`] | output folders removed again when the run that created them fails |
//! | [`experiments`] | the five experiments and their registry |
//! | [`real`] | the experiments on real Linux (`--real`): namespaces, data planes, checks |
//!
//! Dependencies between the modules go one way: `cli` → `repeat`, `sweep` → `runner` →
//! `scenario`, `outdir`, `limits` (no module imports `cli`).

#![forbid(unsafe_code)]

pub mod cli;
pub mod experiments;
pub mod limits;
pub mod outdir;
pub mod params;
pub mod progress;
pub mod real;
pub mod repeat;
pub mod runner;
pub mod scenario;
pub mod scenario_units;
pub mod series_error;
pub mod slurm;
pub mod sweep;

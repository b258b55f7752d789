//! # netsched-lab — `netsched lab`: the papers' experiments, simulated and real
//!
//! | module | what lives there |
//! |---|---|
//! | [`cli`] | the `netsched lab` command line (all, list, run, sweep) |
//! | [`runner`] | scenario → experiment → `results.json` + `report.md`; the parallel work queue |
//! | [`sweep`] | grid × seeds sweeps with skip-if-done and mean/spread tables |
//! | [`scenario`] | embedded `scenarios/*.toml`, `--set key=value` overrides |
//! | [`params`] | typed parameter access with errors naming the key |
//! | [`experiments`] | the five experiments and their registry |
//! | [`real`] | experiments on real Linux namespaces (lvs-cluster) |

pub mod cli;
pub mod experiments;
pub mod params;
pub mod real;
pub mod runner;
pub mod scenario;
pub mod sweep;

//! The experiments. Each module exposes
//! `pub fn run(params: &serde_json::Value, seed: u64, out: &Path) -> anyhow::Result<ExperimentOutput>`
//! where `params` is the scenario file (`scenarios/NAME.toml`) with `--set` overrides applied,
//! converted to JSON. The function writes its CSV/SVG files into `out`; the runner writes
//! `results.json` and `report.md`.
pub mod adsl_ack;
pub mod lvs_cluster;
pub mod np_dispatch;
pub mod percentile_web;
pub mod vm_delay;

//! The experiments. Each module exposes
//! `pub fn run(params: &serde_json::Value, seed: u64, out: &Path) -> anyhow::Result<ExperimentOutput>`
//! where `params` is the scenario file (`scenarios/NAME.toml`) with `--set` overrides applied,
//! converted to JSON. The function writes its CSV/SVG files into `out`; the runner writes
//! `results.json` and `report.md`.

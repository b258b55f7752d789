//! The adsl-ack experiment on real Linux (namespaces local — gateway — remote).

use std::path::Path;

/// Run the real experiment with the scenario's parameters (JSON object, keys as in
/// `scenarios/adsl-ack.toml`), write CSV / SVG files into `out` (the lab runner writes results.json and report.md), and
/// return the results.
pub fn run_real(
    _params: &serde_json::Value,
    _seed: u64,
    _out: &Path,
    _quick: bool,
) -> anyhow::Result<netsched_report::ExperimentOutput> {
    anyhow::bail!("adsl-ack --real: not built yet")
}

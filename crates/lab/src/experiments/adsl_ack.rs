//! The `adsl-ack` experiment (not built yet).

use netsched_report::ExperimentOutput;
use std::path::Path;

pub fn run(
    _params: &serde_json::Value,
    _seed: u64,
    _out: &Path,
) -> anyhow::Result<ExperimentOutput> {
    anyhow::bail!("adsl-ack: not built yet")
}

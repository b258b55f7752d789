//! The `netsched lab` command line.

use clap::Args;

/// Arguments of `netsched lab`.
#[derive(Debug, Args)]
pub struct LabArgs {}

pub fn run(_args: LabArgs) -> anyhow::Result<()> {
    anyhow::bail!("netsched lab: not built yet")
}

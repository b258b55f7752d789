//! `netsched replay`: feed a trace through one algorithm.

#[derive(Debug, clap::Args)]
pub struct ReplayArgs {}

pub fn run(_args: ReplayArgs) -> anyhow::Result<()> {
    anyhow::bail!("netsched replay: not built yet")
}

//! `netsched nfq bench`.
use anyhow::Result;

#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {}

pub fn run(_a: BenchArgs) -> Result<()> {
    anyhow::bail!("not yet")
}

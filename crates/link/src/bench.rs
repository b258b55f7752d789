//! `netsched link bench`: forwarding speed of the engine against the kernel.

/// Arguments of `netsched link bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {}

pub fn run(_a: BenchArgs) -> anyhow::Result<()> {
    anyhow::bail!("netsched link bench: not built yet")
}

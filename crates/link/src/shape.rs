//! `netsched shape`: install ACK separation on a gateway with `tc`.

/// Arguments of `netsched shape`.
#[derive(Debug, clap::Args)]
pub struct ShapeArgs {}

pub fn run(_args: ShapeArgs) -> anyhow::Result<()> {
    anyhow::bail!("netsched shape: not built yet")
}

//! `netsched link`: a userspace link engine.

/// Arguments of `netsched link`.
#[derive(Debug, clap::Args)]
pub struct LinkArgs {}

pub fn run(_args: LinkArgs) -> anyhow::Result<()> {
    anyhow::bail!("netsched link: not built yet")
}

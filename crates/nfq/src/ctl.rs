//! `netsched ctl`: control the running daemon.

/// Arguments of `netsched ctl`.
#[derive(Debug, clap::Args)]
pub struct CtlArgs {}

pub fn run(_args: CtlArgs) -> anyhow::Result<()> {
    anyhow::bail!("netsched ctl: not built yet")
}

//! `netsched nfq`: the percentile scheduling daemon.

/// Arguments of `netsched nfq`.
#[derive(Debug, clap::Args)]
pub struct NfqArgs {}

pub fn run(_args: NfqArgs) -> anyhow::Result<()> {
    anyhow::bail!("netsched nfq: not built yet")
}

//! `netsched-nfqd`: the daemon and its control client without the rest of the `netsched`
//! tool (same code as `netsched nfq` / `netsched ctl`). The integration tests start it as a
//! separate process so they can SIGKILL it.

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "netsched-nfqd", version)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run the percentile scheduling daemon (= `netsched nfq`).
    Nfq(Box<netsched_nfq::cli::NfqArgs>),
    /// Control a running daemon (= `netsched ctl`).
    Ctl(netsched_nfq::ctl_client::CtlArgs),
}

fn main() {
    let r = match Cli::parse().cmd {
        Cmd::Nfq(a) => netsched_nfq::cli::run(*a),
        Cmd::Ctl(a) => netsched_nfq::ctl_client::run(a),
    };
    if let Err(e) = r {
        eprintln!("netsched: error: {e:#}");
        std::process::exit(1);
    }
}

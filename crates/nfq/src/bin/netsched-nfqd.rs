//! `netsched-nfqd`: the daemon and its control client without the rest of the `netsched`
//! tool (same code as `netsched nfq` / `netsched ctl`). The integration tests start it as a
//! separate process so they can SIGKILL it.

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "netsched-nfqd", version)]
struct Cli {
    /// Log lines as `text` or `json` (as `netsched --log-format`).
    #[arg(long, global = true, default_value = "text", value_name = "text|json")]
    log_format: netsched_util::logging::LogFormat,
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
    let cli = Cli::parse();
    netsched_util::logging::run_main(cli.log_format, "netsched-nfqd", "netsched", || {
        match cli.cmd {
            Cmd::Nfq(a) => netsched_nfq::cli::run(*a),
            Cmd::Ctl(a) => netsched_nfq::ctl_client::run(a),
        }
    })
}

//! `netsched-linkd link ...`: `netsched link` alone in a small binary, so that the crate's
//! tests can start it as a process and signal it (SIGHUP, SIGTERM) without the full
//! `netsched` binary, which another package builds.

use clap::Parser;

#[derive(Parser)]
#[command(name = "netsched-linkd")]
struct Cli {
    /// Log lines as `text` or `json` (as `netsched --log-format`).
    #[arg(long, global = true, default_value = "text", value_name = "text|json")]
    log_format: netsched_util::logging::LogFormat,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Subcommand)]
enum Cmd {
    /// The same as `netsched link`.
    Link(netsched_link::cli::LinkArgs),
}

fn main() {
    let cli = Cli::parse();
    let Cmd::Link(args) = cli.cmd;
    netsched_util::logging::run_main(cli.log_format, "netsched-linkd", "netsched-linkd", || {
        netsched_link::cli::run_link(args)
    })
}

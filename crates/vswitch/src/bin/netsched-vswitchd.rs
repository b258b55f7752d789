//! `netsched-vswitchd vswitch ...`: `netsched vswitch` alone in a small binary, so that the crate's
//! tests can start it as a process and signal it (SIGHUP, SIGTERM) without the full
//! `netsched` binary, which another package builds.

use clap::Parser;

#[derive(Parser)]
#[command(name = "netsched-vswitchd")]
struct Cli {
    /// Log lines as `text` or `json` (as `netsched --log-format`).
    #[arg(long, global = true, default_value = "text", value_name = "text|json")]
    log_format: netsched_util::logging::LogFormat,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Subcommand)]
enum Cmd {
    /// The same as `netsched vswitch`.
    Vswitch(netsched_vswitch::cli::VswitchArgs),
}

fn main() {
    let cli = Cli::parse();
    let Cmd::Vswitch(args) = cli.cmd;
    netsched_util::logging::run_main(
        cli.log_format,
        "netsched-vswitchd",
        "netsched-vswitchd",
        || netsched_vswitch::cli::run_vswitch(args),
    )
}

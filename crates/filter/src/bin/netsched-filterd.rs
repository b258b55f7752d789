//! `netsched-filterd filter ...`: `netsched filter` alone in a small binary, so that the
//! filter's tests can start it as a process and signal it (the full `netsched` binary is built
//! by another package).

use clap::Parser;

#[derive(Parser)]
#[command(name = "netsched-filterd")]
struct Cli {
    /// Log lines as `text` or `json` (as `netsched --log-format`).
    #[arg(long, global = true, default_value = "text", value_name = "text|json")]
    log_format: netsched_util::logging::LogFormat,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Subcommand)]
enum Cmd {
    /// The same as `netsched filter`.
    Filter(netsched_filter::cli::FilterArgs),
}

fn main() {
    let cli = Cli::parse();
    let Cmd::Filter(args) = cli.cmd;
    netsched_util::logging::run_main(
        cli.log_format,
        "netsched-filterd",
        "netsched-filterd",
        || netsched_filter::cli::run_filter(args),
    )
}

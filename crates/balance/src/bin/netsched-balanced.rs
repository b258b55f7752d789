//! The balancer alone (same arguments as `netsched balance`), so tests can run it as its own
//! process: measure its memory, send it signals.

use clap::Parser;

#[derive(Parser)]
#[command(name = "netsched-balanced")]
struct Cli {
    /// Log lines as `text` or `json` (as `netsched --log-format`).
    #[arg(long, default_value = "text", value_name = "text|json")]
    log_format: netsched_util::logging::LogFormat,
    #[command(flatten)]
    args: netsched_balance::BalanceArgs,
}

fn main() {
    let cli = Cli::parse();
    netsched_util::logging::run_main(
        cli.log_format,
        "netsched-balanced",
        "netsched balance",
        || netsched_balance::run(cli.args),
    )
}

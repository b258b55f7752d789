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
    let log = match netsched_util::logging::init(cli.log_format, "netsched-balanced") {
        Ok(g) => g,
        Err(e) => {
            eprintln!("netsched balance: error: {e}");
            std::process::exit(2);
        }
    };
    let result = netsched_balance::run(cli.args);
    drop(log);
    if let Err(e) = result {
        eprintln!("netsched balance: error: {e:#}");
        std::process::exit(1);
    }
}

//! The balancer alone (same arguments as `netsched balance`), so tests can run it as its own
//! process: measure its memory, send it signals.

use clap::Parser;

#[derive(Parser)]
#[command(name = "netsched-balanced")]
struct Cli {
    #[command(flatten)]
    args: netsched_balance::BalanceArgs,
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = netsched_balance::run(cli.args) {
        eprintln!("netsched balance: error: {e:#}");
        std::process::exit(1);
    }
}

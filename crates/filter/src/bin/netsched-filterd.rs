//! `netsched-filterd filter ...`: `netsched filter` alone in a small binary, so that the
//! filter's tests can start it as a process and signal it (the full `netsched` binary is built
//! by another package).

use clap::Parser;

#[derive(Parser)]
#[command(name = "netsched-filterd")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Subcommand)]
enum Cmd {
    /// The same as `netsched filter`.
    Filter(netsched_filter::cli::FilterArgs),
}

fn main() {
    let Cmd::Filter(args) = Cli::parse().cmd;
    if let Err(e) = netsched_filter::cli::run_filter(args) {
        eprintln!("netsched-filterd: error: {e:#}");
        std::process::exit(1);
    }
}

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
    let log = match netsched_util::logging::init(cli.log_format, "netsched-filterd") {
        Ok(g) => g,
        Err(e) => {
            eprintln!("netsched-filterd: error: {e}");
            std::process::exit(2);
        }
    };
    let Cmd::Filter(args) = cli.cmd;
    let result = netsched_filter::cli::run_filter(args);
    drop(log);
    if let Err(e) = result {
        eprintln!("netsched-filterd: error: {e:#}");
        std::process::exit(1);
    }
}

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
    let log = match netsched_util::logging::init(cli.log_format, "netsched-vswitchd") {
        Ok(g) => g,
        Err(e) => {
            eprintln!("netsched-vswitchd: error: {e}");
            std::process::exit(2);
        }
    };
    let Cmd::Vswitch(args) = cli.cmd;
    let result = netsched_vswitch::cli::run_vswitch(args);
    drop(log);
    if let Err(e) = result {
        eprintln!("netsched-vswitchd: error: {e:#}");
        std::process::exit(1);
    }
}

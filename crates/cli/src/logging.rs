//! The `--log-format` flag every subcommand accepts and the subscriber it installs
//! (netsched_util::logging does the work; the daemons' own binaries call the same function).

use netsched_util::logging::{LogFormat, LogGuard};

/// Install the process's log subscriber, or exit with the reason (a bad `NETSCHED_LOG`).
pub fn install(format: LogFormat) -> LogGuard {
    match netsched_util::logging::init(format, "netsched") {
        Ok(g) => g,
        Err(e) => {
            eprintln!("netsched: error: {e}");
            std::process::exit(2);
        }
    }
}

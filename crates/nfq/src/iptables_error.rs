//! What can go wrong running iptables(8) for the daemon's NFQUEUE rules, typed: the tool that
//! could not start, the command that failed (with its stderr) and the leftover rule whose
//! removal failed.
//!
//! Cost: built only when a rule cannot be installed or removed.

use std::fmt;

/// Why an iptables command failed.
#[derive(Debug)]
pub enum IptablesError {
    /// The tool could not be started.
    Spawn { bin: String, source: std::io::Error },
    /// The command ran and failed: its arguments and its stderr.
    Failed {
        bin: String,
        args: String,
        stderr: String,
    },
    /// A rule left behind by an earlier run (its `-S` line) could not be removed.
    Leftover {
        line: String,
        source: Box<IptablesError>,
    },
}

impl fmt::Display for IptablesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IptablesError::Spawn { bin, source } => {
                write!(f, "cannot run `{bin}` (is iptables installed?): {source}")
            }
            IptablesError::Failed { bin, args, stderr } => {
                write!(f, "`{bin} {args}` failed: {stderr}")
            }
            IptablesError::Leftover { line, source } => {
                write!(f, "removing leftover rule `{line}`: {source}")
            }
        }
    }
}

// No `source()`: every text already holds its inner error's, and a chain printed with `{:#}`
// would repeat it.
impl std::error::Error for IptablesError {}

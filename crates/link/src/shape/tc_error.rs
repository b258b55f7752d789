//! What can go wrong running `tc` and `ip` for `netsched shape`, typed: the program that could
//! not start, the command that failed (with its stderr), output too large or not JSON, the
//! `tc -batch` line that failed, and the namespace whose identity could not be read.
//!
//! Cost: built only when a command fails.

use std::fmt;

/// Why a `tc`/`ip` command (or reading the target's namespace) failed.
#[derive(Debug)]
pub enum TcError {
    /// The program could not be started.
    Spawn {
        prog: String,
        source: std::io::Error,
    },
    /// Talking to the running program failed; `doing` is e.g. "writing to `tc`".
    Io {
        doing: String,
        source: std::io::Error,
    },
    /// The command printed more than the bound (`command` is the program and its arguments).
    TooMuchOutput { command: String, max: u64 },
    /// The command ran and failed; its text is the program's stderr, as tc/ip print it.
    Failed { command: String, stderr: String },
    /// `command` failed (the inner error says how).
    Command {
        command: String,
        source: Box<TcError>,
    },
    /// The command's output is not the JSON it should print.
    Json {
        command: String,
        source: serde_json::Error,
    },
    /// One line of a `tc -batch` failed: the line and tc's reason.
    BatchLine { line: String, reason: String },
    /// `tc -batch` failed without naming a line.
    Batch(Box<TcError>),
    /// The network namespace's identity could not be read (`what`: the call or the file).
    NetnsId {
        what: &'static str,
        source: std::io::Error,
    },
    /// The namespace could not be entered, or the thread that reads its identity failed (the
    /// testbed's text).
    Netns(String),
}

impl fmt::Display for TcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use TcError::*;
        match self {
            Spawn { prog, source } => {
                write!(
                    f,
                    "cannot start `{prog}` (is iproute2 installed?): {source}"
                )
            }
            Io { doing, source } => write!(f, "{doing}: {source}"),
            TooMuchOutput { command, max } => {
                write!(f, "`{command}` printed more than {max} bytes")
            }
            Failed { stderr, .. } => write!(f, "{stderr}"),
            Command { command, source } => write!(f, "`{command}`: {source}"),
            Json { command, source } => {
                write!(f, "cannot parse the JSON of `{command}`: {source}")
            }
            BatchLine { line, reason } => write!(f, "`tc {line}` failed: {reason}"),
            Batch(e) => write!(f, "`tc -batch` failed: {e}"),
            NetnsId { what, source } => write!(f, "{what}: {source}"),
            Netns(why) => write!(f, "{why}"),
        }
    }
}

// No `source()`: every text already holds its inner error's, and a chain printed with `{:#}`
// would repeat it.
impl std::error::Error for TcError {}

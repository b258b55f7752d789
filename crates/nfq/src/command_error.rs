//! Why a control command did not reach the packet loop or was not applied there, typed: the
//! command channel full, the daemon shutting down, the packet loop silent past the wait, or
//! the engine's refusal (its reason names the class, value or address). The texts are the
//! `"error"` of the control protocol's answers.
//!
//! Cost: built only when a command fails, on the control threads (a refusal's text is made
//! in the packet loop, once per refused command).

use std::fmt;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandError {
    /// `waiting` commands already wait for the packet loop.
    Busy { waiting: usize },
    /// The packet loop's end of the channel is gone.
    ShuttingDown,
    /// The packet loop did not apply the command `within` (it may still).
    NotApplied { within: Duration },
    /// The engine refused the command; `reason` names what is wrong.
    Refused { reason: String },
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CommandError::Busy { waiting } => {
                write!(
                    f,
                    "busy: {waiting} commands already wait for the packet loop"
                )
            }
            CommandError::ShuttingDown => f.write_str("the daemon is shutting down"),
            CommandError::NotApplied { within } => write!(
                f,
                "the packet loop did not apply the command within {} ms",
                within.as_millis()
            ),
            CommandError::Refused { reason } => f.write_str(reason),
        }
    }
}

impl std::error::Error for CommandError {}

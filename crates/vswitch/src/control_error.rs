//! What can go wrong with a control request to the switch, typed: a request line that does
//! not parse ([`RequestError`], naming the word that is wrong), and a request the switch did
//! not carry out ([`ControlError`]: the command queue full, the switch gone or silent, or its
//! own refusal). The texts are the control protocol's `error: …` lines.
//!
//! Cost: built only on the control threads, never on the packet thread.

use std::fmt;
use std::time::Duration;

/// A request line that does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestError {
    /// Nothing but spaces.
    Empty,
    /// The first word is no command.
    UnknownCommand { word: String },
    /// `show` with an option other than `--json`.
    UnknownOption { command: String, option: String },
    /// An argument is missing (`what`: "PORT (…)", "TIER", "W").
    Missing { command: String, what: &'static str },
    /// An argument is not a whole number.
    NotANumber {
        command: String,
        port: String,
        what: &'static str,
        value: String,
    },
    /// A word after the last argument.
    Unexpected { command: String, word: String },
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::Empty => f.write_str("empty request (try show, set-tier, set-weight)"),
            RequestError::UnknownCommand { word } => write!(
                f,
                "unknown command {word:?} (show [--json], set-tier PORT TIER, set-weight PORT W, reload)"
            ),
            RequestError::UnknownOption { command, option } => {
                write!(f, "{command}: unknown option {option:?} (only --json)")
            }
            RequestError::Missing { command, what } => write!(f, "{command}: missing {what}"),
            RequestError::NotANumber {
                command,
                port,
                what,
                value,
            } => write!(
                f,
                "{command} {port}: {what} {value:?} is not a whole number"
            ),
            RequestError::Unexpected { command, word } => {
                write!(f, "{command}: unexpected {word:?}")
            }
        }
    }
}

impl std::error::Error for RequestError {}

/// A request the switch did not carry out.
#[derive(Debug)]
pub enum ControlError {
    /// The line does not parse.
    Request(RequestError),
    /// `waiting` commands already wait for the packet thread.
    Busy { waiting: usize },
    /// The switch has stopped (its end of the channel is gone).
    Stopped,
    /// The switch did not answer `within` (the command may still apply).
    NoAnswer { within: Duration },
    /// The switch refused the command, with its reason.
    Refused(String),
    /// The snapshot could not be written as JSON.
    Encode(serde_json::Error),
    /// `reload` refused the file (the text names file, key and value); the old
    /// configuration stays.
    Reload(String),
    /// `reload` on a switch started without a configuration file to read again.
    NoReload,
}

impl fmt::Display for ControlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ControlError::Request(e) => e.fmt(f),
            ControlError::Busy { waiting } => write!(
                f,
                "busy: {waiting} commands already wait for the switch; try again"
            ),
            ControlError::Stopped => f.write_str("the switch has stopped"),
            ControlError::NoAnswer { within } => write!(
                f,
                "the switch did not answer within {within:?} (the command may still apply at \
                 the next round start)"
            ),
            ControlError::Refused(why) => f.write_str(why),
            ControlError::Encode(e) => write!(f, "writing the snapshot as JSON: {e}"),
            ControlError::Reload(e) => {
                write!(f, "reload failed, keeping the old configuration: {e}")
            }
            ControlError::NoReload => f.write_str("this switch has no reload"),
        }
    }
}

impl std::error::Error for ControlError {}

impl From<RequestError> for ControlError {
    fn from(e: RequestError) -> Self {
        ControlError::Request(e)
    }
}

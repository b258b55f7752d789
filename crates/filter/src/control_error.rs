//! What the filter's control path can get wrong, typed: an unknown dispatch name, a request
//! line that does not parse (naming the word), rule or signature files that do not load on
//! `reload` (naming file, line and field), and a packet thread that is busy, stopped or slow.
//! The texts are the control protocol's `error: …` lines.
//!
//! Cost: built only when a request is refused.

pub use crate::pipeline::UnknownDispatch;
use crate::rules::RulesError;
use crate::signatures::SignatureError;
use netsched_core::classify::acl::ClassifierBuildError;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// A request line that does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestError {
    Empty,
    /// A word after a complete command.
    Unexpected {
        command: String,
        word: String,
    },
    /// An option `show` does not know.
    ShowOption(String),
    /// `set-dispatch` without its MODE.
    MissingMode,
    Dispatch(UnknownDispatch),
    UnknownCommand(String),
    /// `rule` without a known verb, a handle that is not a number, or a rule the rule file's
    /// parser refuses (its message names the key and the value).
    Rule(String),
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::Empty => {
                f.write_str("empty request (try show, reload, set-dispatch MODE)")
            }
            RequestError::Unexpected { command, word } => {
                write!(f, "{command}: unexpected {word:?}")
            }
            RequestError::ShowOption(o) => write!(f, "show: unknown option {o:?} (only --json)"),
            RequestError::MissingMode => write!(
                f,
                "set-dispatch: missing MODE ({})",
                crate::pipeline::DispatchMode::NAMES.join(", ")
            ),
            RequestError::Dispatch(e) => write!(f, "set-dispatch: {e}"),
            RequestError::UnknownCommand(w) => write!(
                f,
                "unknown command {w:?} (show [--json], show rules [FROM [COUNT]], reload, \
                 set-dispatch MODE, rule add|insert|delete)"
            ),
            RequestError::Rule(m) => write!(f, "rule: {m}"),
        }
    }
}

impl std::error::Error for RequestError {}

/// Rule or signature files that could not be made into tables.
#[derive(Debug)]
pub enum TablesError {
    /// The rule file (names file, line, field, value).
    Rules(RulesError),
    /// The rules are too many for the chosen classifier structure.
    Classifier {
        rules: PathBuf,
        source: ClassifierBuildError,
    },
    /// The signature file.
    Signatures(SignatureError),
    /// The configuration file read again (`config.rs`): unreadable, invalid, or changing a
    /// key only a restart applies.
    Config(String),
}

impl fmt::Display for TablesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TablesError::Rules(e) => e.fmt(f),
            TablesError::Classifier { rules, source } => write!(f, "{}: {source}", rules.display()),
            TablesError::Signatures(e) => e.fmt(f),
            TablesError::Config(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for TablesError {}

/// Why a command got no answer from the packet thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandError {
    /// The bounded command queue is full.
    Busy { queue: usize },
    /// The packet thread has stopped.
    Stopped,
    /// No answer before the deadline (the command may still apply).
    NoAnswer { within: Duration },
    /// The watchdog finds the packet thread without progress: it takes no command.
    Stalled,
    /// A reload built after a later one was swapped in: discarded.
    Superseded { requested: u64, in_force: u64 },
    /// A reload still building when its answer was due: handed over when built.
    StillBuilding { generation: u64, after: Duration },
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CommandError::Busy { queue } => write!(
                f,
                "busy: {queue} commands already wait for the filter; try again"
            ),
            CommandError::Stopped => f.write_str("the filter has stopped"),
            CommandError::NoAnswer { within } => write!(
                f,
                "the filter did not answer within {within:?} (the command may still apply)"
            ),
            CommandError::Stalled => f.write_str(
                "the packet thread is stalled (no progress); `show` answers its last counters",
            ),
            CommandError::Superseded {
                requested,
                in_force,
            } => write!(
                f,
                "reload as generation {requested} superseded by generation {in_force}: \
                 discarded, generation {in_force} stays in force"
            ),
            CommandError::StillBuilding { generation, after } => write!(
                f,
                "reload as generation {generation} still building after {after:?}: it is \
                 swapped in when built unless a later generation is in force by then \
                 (`show` gives the rules generation in force)"
            ),
        }
    }
}

impl std::error::Error for CommandError {}

/// Why a control request failed: its `error: …` line.
#[derive(Debug)]
pub enum ControlError {
    Request(RequestError),
    Tables(TablesError),
    Command(CommandError),
    /// The answer could not be encoded as JSON.
    Encode(serde_json::Error),
    /// A rule edit refused; the rules are as they were.
    Edit(crate::rule_edit::EditError),
}

impl fmt::Display for ControlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ControlError::Request(e) => e.fmt(f),
            // Only a reload builds tables: its refusal in the words of every daemon's reload.
            ControlError::Tables(e) => {
                write!(f, "reload failed, keeping the old configuration: {e}")
            }
            ControlError::Command(e) => e.fmt(f),
            ControlError::Encode(e) => e.fmt(f),
            ControlError::Edit(e) => write!(f, "rule not changed: {e}"),
        }
    }
}

impl std::error::Error for ControlError {}

impl From<RequestError> for ControlError {
    fn from(e: RequestError) -> Self {
        ControlError::Request(e)
    }
}
impl From<TablesError> for ControlError {
    fn from(e: TablesError) -> Self {
        ControlError::Tables(e)
    }
}
impl From<CommandError> for ControlError {
    fn from(e: CommandError) -> Self {
        ControlError::Command(e)
    }
}

//! What can be wrong with a discipline spec of `netsched link --ab-qdisc/--ba-qdisc`, typed:
//! the spec as a whole ([`QdiscSpecError`], naming the spec's text), the `ack_sep` shorthand
//! ([`AckSepError`]) and a packet count in it ([`PacketCountError`]). Each text names the value
//! and the rule, as the spec's parser ([`crate::qdisc_spec`]) always said.
//!
//! Cost: built only when a spec is refused.

use netsched_core::qdisc::QdiscConfigError;
use std::fmt;

/// A packet count of a shorthand (`fifo:N`, `ack_sep:N`) that is not `1..=max`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PacketCountError {
    /// A number outside `1..=max`.
    OutOfRange { text: String, max: usize },
    /// Not a number.
    NotANumber(String),
}

impl fmt::Display for PacketCountError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PacketCountError::OutOfRange { text, max } => {
                write!(f, "`{text}` packets: must be between 1 and {max}")
            }
            PacketCountError::NotANumber(text) => write!(f, "`{text}` is not a packet count"),
        }
    }
}

impl std::error::Error for PacketCountError {}

/// Why the part after `ack_sep` of `ack_sep[:N][+filter][+cap=S]` is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AckSepError {
    /// The queue length N.
    Count(PacketCountError),
    /// Something other than `:N` right after `ack_sep` (the text after `ack_sep`).
    Syntax(String),
    /// `cap=S` whose S is no number.
    Cap(String),
    /// An option other than `filter` and `cap=S`.
    UnknownOption(String),
}

impl fmt::Display for AckSepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AckSepError::Count(e) => write!(f, "ack_sep: {e}"),
            AckSepError::Syntax(rest) => {
                write!(f, "ack_sep{rest}: expected ack_sep[:N][+filter][+cap=S]")
            }
            AckSepError::Cap(s) => write!(f, "ack_sep: cap `{s}` is not a number"),
            AckSepError::UnknownOption(p) => {
                write!(f, "ack_sep: unknown option `{p}` (filter, cap=S)")
            }
        }
    }
}

impl std::error::Error for AckSepError {}

/// A discipline spec that cannot be used; every variant but [`QdiscSpecError::TooLong`] names
/// the spec (trimmed).
#[derive(Debug)]
pub enum QdiscSpecError {
    /// Longer than the bound.
    TooLong { len: usize, max: usize },
    /// `{...}` that is no `QdiscConfig` (serde's text: what and where).
    Json {
        spec: String,
        source: serde_json::Error,
    },
    /// The `ack_sep` shorthand.
    AckSep { spec: String, source: AckSepError },
    /// The count of `fifo:N`.
    Count {
        spec: String,
        source: PacketCountError,
    },
    /// A name that is none of `fifo`, `ack_sep`.
    Unknown { spec: String, name: String },
    /// The discipline refuses its configuration (the core's check).
    Build {
        spec: String,
        source: QdiscConfigError,
    },
}

impl fmt::Display for QdiscSpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use QdiscSpecError::*;
        match self {
            TooLong { len, max } => write!(f, "qdisc spec of {len} bytes: at most {max}"),
            Json { spec, source } => {
                write!(f, "qdisc `{spec}`: not a valid QdiscConfig: {source}")
            }
            AckSep { spec, source } => write!(f, "qdisc `{spec}`: {source}"),
            Count { spec, source } => write!(f, "qdisc `{spec}`: {source}"),
            Unknown { spec, name } => write!(
                f,
                "qdisc `{spec}`: unknown discipline `{name}` (fifo[:N], \
                 ack_sep[:N][+filter][+cap=S], or JSON)"
            ),
            Build { spec, source } => write!(f, "qdisc `{spec}`: {source}"),
        }
    }
}

// No `source()`: every text already holds its inner error's, and a chain printed with `{:#}`
// would repeat it.
impl std::error::Error for QdiscSpecError {}

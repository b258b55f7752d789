//! What can be wrong with the NFQUEUE daemon's configuration (file, flags, control requests),
//! typed. Every text names the field (with the file, the `[[class]]` and its `sources` entry where
//! there is one) and the value.
//!
//! Cost: built only when a value is refused.

use netsched_core::classify::CidrError;
use netsched_core::units::UnitError;
use std::fmt;

/// Why a configuration value, file or whole configuration is refused.
#[derive(Debug)]
pub enum ConfigError {
    /// `discipline` other than percentile, fifo or strict.
    UnknownDiscipline(String),
    /// `max_hold_factor` outside `min..=max` server times.
    MaxHoldFactor { value: f64, min: f64, max: f64 },
    /// A duration or size refused by the units grammar or outside its field's range.
    Unit(UnitError),
    /// A `deadline` that is neither a duration nor one of the automatic modes.
    Deadline(String),
    /// An address prefix the classifier refuses.
    Cidr(CidrError),
    /// A class index beyond the `count` classes.
    ClassIndex { index: usize, count: usize },
    /// A class name none of the classes has (`known`: their names).
    ClassName { name: String, known: Vec<String> },
    /// A TOML value that is neither a class name nor an index (its TOML text).
    ClassValue(String),
    /// `protocol` other than tcp or udp.
    Protocol(String),
    /// A percentile target outside 1..=100.
    Percentile(i64),
    /// The file is not a regular file, is too large, or is not UTF-8 (the reader's text,
    /// naming the file).
    Unreadable(String),
    /// TOML syntax or a key serde refused (toml's text: line, column, key).
    Toml(toml::de::Error),
    /// `budget = 0` (in the file, `--budget` or `set-budget`).
    ZeroBudget,
    /// A budget other than a number or `"off"`.
    BadBudget(String),
    /// `[service] address` is no IP address.
    Address(String),
    /// No `[[class]]` and no `--class`.
    NoClasses,
    /// More classes than 64.
    TooManyClasses(usize),
    /// Two classes with one name.
    ClassTwice(String),
    /// `default_class` beyond the `count` classes.
    DefaultClass { index: usize, count: usize },
    /// `[service] ports` empty.
    NoPorts,
    /// `[service] ports` holds 0.
    PortZero,
    /// More address-table entries (every class's `sources`) than `max_table_entries`.
    TableTooLong { entries: usize, max: usize },
    /// `ports[index]` repeats an earlier port.
    PortTwice { index: usize, port: u16 },
    /// A network in the sources of class `first` and again in those of `again` (the same
    /// class when it is listed twice in one).
    NetworkTwice {
        first: String,
        again: String,
        cidr: String,
    },
    /// A `[limits]` count of 0.
    LimitZero,
    /// A `[limits]` timeout of 0.
    TimeoutZero,
    /// An error in `what` (a field, a section, an entry, the file): `what: inner`.
    In {
        what: String,
        source: Box<ConfigError>,
    },
}

impl ConfigError {
    /// This error inside `what` (`what: self`).
    pub fn within(self, what: impl Into<String>) -> Self {
        ConfigError::In {
            what: what.into(),
            source: Box::new(self),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ConfigError::*;
        match self {
            UnknownDiscipline(s) => write!(
                f,
                "discipline: unknown value {s:?} (expected percentile, fifo or strict)"
            ),
            MaxHoldFactor { value, min, max } => write!(
                f,
                "max_hold_factor = {value}: must be a number of server times in {min}..={max}"
            ),
            Unit(e) => write!(f, "{e}"),
            Deadline(s) => write!(
                f,
                "deadline {s:?}: expected a duration (\"4ms\"), \"auto\" (running mean response \
                 time) or \"auto_quantile\" (running quantile at the weighted mean target)"
            ),
            Cidr(e) => write!(f, "{e}"),
            ClassIndex { index, count } => write!(
                f,
                "class {index}: no such class (there are {count} classes, 0..{})",
                count.saturating_sub(1)
            ),
            ClassName { name, known } => write!(
                f,
                "class {name:?}: no such class (known: {})",
                known.join(", ")
            ),
            ClassValue(v) => write!(f, "class: expected a class name or index, got {v}"),
            Protocol(s) => write!(f, "protocol: unknown value {s:?} (expected tcp or udp)"),
            Percentile(p) => write!(f, "percentile {p}: must be an integer in 1..=100"),
            Unreadable(text) => f.write_str(text),
            Toml(e) => write!(f, "{e}"),
            ZeroBudget => write!(f, "budget = 0: must be at least 1 (\"off\" for no budget)"),
            BadBudget(w) => write!(f, "budget = {w:?}: a number ≥ 1 or \"off\""),
            Address(a) => write!(f, "[service] address {a:?}: not an IPv4 or IPv6 address"),
            NoClasses => write!(
                f,
                "no classes: give [[class]] entries in the config file or --class NAME=P"
            ),
            TooManyClasses(n) => write!(f, "{n} classes: at most 64"),
            ClassTwice(name) => write!(f, "class {name:?} is defined twice"),
            DefaultClass { index, count } => write!(
                f,
                "default_class {index}: no such class (0..{})",
                count.saturating_sub(1)
            ),
            NoPorts => write!(f, "[service] ports: give at least one port"),
            PortZero => write!(f, "[service] ports: 0 is not a port"),
            PortTwice { index, port } => {
                write!(f, "[service] ports[{index}] = {port}: listed twice")
            }
            NetworkTwice { first, again, cidr } => write!(
                f,
                "sources: {cidr} in class {first:?} and again in class {again:?} (one class \
                 per network)"
            ),
            TableTooLong { entries, max } => write!(
                f,
                "sources: {entries} networks exceed max_table_entries = {max}"
            ),
            LimitZero => write!(
                f,
                "[limits]: held_limit, max_flows and queue_limit must be at least 1"
            ),
            TimeoutZero => write!(f, "[limits]: timeouts must be greater than zero"),
            In { what, source } => write!(f, "{what}: {source}"),
        }
    }
}

// No `source()`: every text already holds its inner error's, and a chain printed with `{:#}`
// would repeat it.
impl std::error::Error for ConfigError {}

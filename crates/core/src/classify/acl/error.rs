//! Typed errors of the ACL classifiers: [`RuleFileError`] (a rule or trace file that does not
//! parse: names the source, line, field and value) and [`ClassifierBuildError`] (a rule set
//! past a [`super::ClassifierLimits`] bound).

use std::fmt;

/// Why one field of a rule or trace file is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleFileErrorKind {
    /// The text is larger than [`super::MAX_FILE_BYTES`].
    FileTooLarge { bytes: usize, max: usize },
    /// More rules (or trace lines) than allowed.
    TooManyLines { max: usize },
    /// A line longer than [`super::MAX_LINE_BYTES`].
    LineTooLong { bytes: usize, max: usize },
    /// A field the format requires is absent.
    Missing,
    /// An address/length that is not `a.b.c.d/0..32`.
    BadPrefix,
    /// A prefix with bits set past its length (TOML only; the network is given).
    HostBitsSet { network: String },
    /// Not a port `0..=65535` or a range `low-high` / `low : high` with `low <= high`.
    BadPortRange,
    /// Not a protocol name (`tcp`, `udp`, `icmp`, `any`), a number 0-255 or `value/mask`.
    BadProtocol,
    /// A ClassBench protocol field that is not `value/mask` in hex (the format has no names or
    /// decimal numbers).
    BadClassBenchProtocol,
    /// Not `accept`, `drop` or `class:N`.
    BadAction,
    /// Not a decimal number in range.
    BadNumber,
    /// A field or token that the format does not have.
    Unexpected,
    /// The TOML itself does not parse (the message is the TOML parser's).
    Toml { message: String },
}

/// A rule or trace file error: `<source>:<line>: <field> '<value>': <why>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleFileError {
    /// File name or other label given by the caller.
    pub source: String,
    /// 1-based line; 0 when the error is about the whole file.
    pub line: usize,
    /// The field, e.g. `src`, `dst_port`, `rule[3].action`.
    pub field: String,
    /// The text as written (cut to 80 characters).
    pub value: String,
    pub kind: RuleFileErrorKind,
}

impl RuleFileError {
    pub(crate) fn new(
        source: &str,
        line: usize,
        field: impl Into<String>,
        value: &str,
        kind: RuleFileErrorKind,
    ) -> RuleFileError {
        let value: String = value.chars().take(80).collect();
        RuleFileError {
            source: source.to_string(),
            line,
            field: field.into(),
            value,
            kind,
        }
    }
}

impl fmt::Display for RuleFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use RuleFileErrorKind::*;
        write!(
            f,
            "{}:{}: {} '{}': ",
            self.source, self.line, self.field, self.value
        )?;
        match &self.kind {
            FileTooLarge { bytes, max } => {
                write!(
                    f,
                    "the file has {bytes} bytes, more than the limit of {max}"
                )
            }
            TooManyLines { max } => write!(f, "more than {max} entries"),
            LineTooLong { bytes, max } => {
                write!(
                    f,
                    "the line has {bytes} bytes, more than the limit of {max}"
                )
            }
            Missing => f.write_str("missing"),
            BadPrefix => f.write_str("not an IPv4 prefix a.b.c.d/len with len 0-32"),
            HostBitsSet { network } => {
                write!(
                    f,
                    "bits set past the prefix length (the network is {network})"
                )
            }
            BadPortRange => f.write_str(
                "not a port 0-65535 or a range low-high (or 'low : high') with low <= high",
            ),
            BadProtocol => f.write_str(
                "not tcp, udp, icmp, any, a protocol number 0-255 or value/mask (0x06/0xFF)",
            ),
            BadClassBenchProtocol => f.write_str(
                "not a ClassBench protocol: value/mask in hex, 0x06/0xFF for TCP, 0x00/0x00 for any",
            ),
            BadAction => f.write_str("not accept, drop or class:N"),
            BadNumber => f.write_str("not a decimal number in range"),
            Unexpected => f.write_str("not part of the format"),
            Toml { message } => write!(f, "{message}"),
        }
    }
}

impl std::error::Error for RuleFileError {}

/// A rule set a classifier refuses to build: a [`super::ClassifierLimits`] bound would be
/// passed. `rule` is the index of the rule that crossed it, when one did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClassifierBuildError {
    TooManyRules {
        rules: usize,
        max: usize,
    },
    TooManyTuples {
        rule: usize,
        max: usize,
    },
    TooManyEntries {
        rule: usize,
        max: usize,
    },
    TooManyBytes {
        rule: usize,
        bytes: usize,
        max: usize,
    },
}

impl fmt::Display for ClassifierBuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClassifierBuildError::TooManyRules { rules, max } => {
                write!(f, "{rules} rules, more than the limit of {max}")
            }
            ClassifierBuildError::TooManyTuples { rule, max } => write!(
                f,
                "rule {rule} would make more than {max} tuples (hash tables, each probed per \
                 packet); raise max_tuples or use the tuple_merge classifier"
            ),
            ClassifierBuildError::TooManyEntries { rule, max } => write!(
                f,
                "rule {rule} would make more than {max} table entries (port ranges expand into \
                 prefixes); raise max_entries or use the tuple_merge classifier"
            ),
            ClassifierBuildError::TooManyBytes { rule, bytes, max } => write!(
                f,
                "rule {rule} would grow the structure to {bytes} bytes, more than the limit of \
                 {max}"
            ),
        }
    }
}

impl std::error::Error for ClassifierBuildError {}

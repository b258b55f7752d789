//! Typed errors of the ACL classifiers: [`RuleFileError`] (a rule or trace file that does not
//! parse: names the source, line, field and value) and [`ClassifierBuildError`] (a rule set
//! past a [`super::ClassifierLimits`] bound).

use std::fmt;

/// Why one field of a rule or trace file is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleFileErrorKind {
    /// The text is larger than the reader's limit.
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
    /// Not a protocol name (`tcp`, `udp`, `icmp`, `icmpv6`, `any`), a number 0-255 or
    /// `value/mask`.
    BadProtocol,
    /// A ClassBench protocol field that is not `value/mask` in hex (the format has no names or
    /// decimal numbers).
    BadClassBenchProtocol,
    /// Not `accept`, `drop` or `class`.
    BadAction,
    /// Not a decimal number in range.
    BadNumber,
    /// A field or token that the format does not have.
    Unexpected,
    /// The TOML itself does not parse (the message is the TOML parser's).
    Toml { message: String },
    /// More rules than the reader holds.
    TooManyRules { rules: usize, max: usize },
    /// A key the TOML form does not have, in a rule or at the top level; `spelled` is how
    /// the form spells what it probably means (`src_port` → `sport`).
    UnknownField {
        spelled: Option<&'static str>,
        in_rule: bool,
    },
    /// `action = "class:N"`: the form writes `action = "class"` and `class = N`.
    ClassInAction { class: String },
    /// A CIDR that does not parse (why, without the text).
    BadCidr { why: String },
    /// An IPv6 prefix given to a reader whose structures hold IPv4 rules only.
    Ipv6NotHeld,
    /// A rule whose source and destination are of different families: it never matches.
    /// `src` is the source prefix.
    MixedFamilies { src: String },
    /// A class outside `0..max`.
    BadClass { max: usize },
    /// `action = "class"` without `class = N`.
    MissingClass,
    /// `class = N` on a rule whose action is not `class`.
    ClassWithoutClassAction,
    /// A `default` that is not `accept` or `drop`.
    BadDefault,
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
    /// The text as written, cut to [`SHOWN_VALUE`] bytes (at a character boundary).
    pub value: String,
    /// The length of the whole value in bytes (more than `value.len()` when it was cut).
    pub value_bytes: usize,
    pub kind: RuleFileErrorKind,
}

/// The longest value an error keeps whole, in bytes; a longer one is cut and its length
/// given: an error goes into one log line or a control socket's answer, and a field may be
/// megabytes long.
pub const SHOWN_VALUE: usize = 80;

/// The longest reason shown, in bytes (a parser's message may quote the value too).
const SHOWN_WHY: usize = 2 * SHOWN_VALUE;

/// `text` up to `max` bytes, cut at a character boundary.
fn clip(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `text` with control characters escaped, so that an error stays one line.
fn one_line(f: &mut fmt::Formatter<'_>, text: &str) -> fmt::Result {
    for c in text.chars() {
        if c.is_control() {
            write!(f, "{}", c.escape_default())?;
        } else {
            write!(f, "{c}")?;
        }
    }
    Ok(())
}

impl RuleFileError {
    /// An error about `field` = `value` at `line` (0: the whole file) of `source`.
    pub fn new(
        source: &str,
        line: usize,
        field: impl Into<String>,
        value: &str,
        kind: RuleFileErrorKind,
    ) -> RuleFileError {
        RuleFileError {
            source: source.to_string(),
            line,
            field: field.into(),
            value: clip(value, SHOWN_VALUE).to_string(),
            value_bytes: value.len(),
            kind,
        }
    }

    /// The reason alone, without source, line, field and value.
    pub fn why(&self) -> String {
        Why(&self.kind).to_string()
    }
}

/// The reason of a [`RuleFileErrorKind`], as the error shows it.
struct Why<'a>(&'a RuleFileErrorKind);

impl fmt::Display for RuleFileError {
    /// `<source>:<line>: <field> '<value>': <why>`, or `<source>: <why>` for the whole file
    /// (line 0). A value cut to [`SHOWN_VALUE`] bytes ends in `…` and gives its length.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: ", self.source)?;
        } else {
            write!(f, "{}:{}: {} '", self.source, self.line, self.field)?;
            one_line(f, &self.value)?;
            if self.value_bytes > self.value.len() {
                write!(f, "…' ({} bytes): ", self.value_bytes)?;
            } else {
                f.write_str("': ")?;
            }
        }
        let why = self.why();
        let cut = clip(&why, SHOWN_WHY);
        one_line(f, cut)?;
        if cut.len() < why.len() {
            f.write_str("…")?;
        }
        Ok(())
    }
}

impl fmt::Display for Why<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use RuleFileErrorKind::*;
        match self.0 {
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
                "not tcp, udp, icmp, icmpv6, any, a protocol number 0-255 or value/mask in hex \
                 (0x06/0xFF)",
            ),
            BadClassBenchProtocol => f.write_str(
                "not a ClassBench protocol: value/mask in hex, 0x06/0xFF for TCP, 0x00/0x00 for any",
            ),
            BadAction => f.write_str("not accept, drop or class"),
            BadNumber => f.write_str("not a decimal number in range"),
            Unexpected => f.write_str("not part of the format"),
            Toml { message } => write!(f, "{message}"),
            TooManyRules { rules, max } => {
                write!(f, "{rules} rules, more than the limit of {max}")
            }
            UnknownField {
                spelled: Some(s), ..
            } => write!(f, "unknown field; this form spells it {s}"),
            UnknownField {
                spelled: None,
                in_rule: true,
            } => f.write_str(
                "unknown field; a rule of this form has src, dst, sport, dport, proto, action \
                 and class",
            ),
            UnknownField {
                spelled: None,
                in_rule: false,
            } => f.write_str("unknown field; this form has default and [[rule]] tables"),
            ClassInAction { class } => write!(
                f,
                "this form spells it action = \"class\" and class = {class}, two fields"
            ),
            BadCidr { why } => f.write_str(why),
            Ipv6NotHeld => f.write_str(
                "an IPv6 prefix: the ACL structures (netsched classify) hold IPv4 rules only; \
                 netsched filter reads IPv6 rules",
            ),
            MixedFamilies { src } => write!(
                f,
                "one family per rule: the source {src} is {}, so this rule could never match",
                if src.contains(':') { "IPv6" } else { "IPv4" }
            ),
            BadClass { max } => write!(f, "a class is 0..{max}"),
            MissingClass => f.write_str("action \"class\" needs `class = N`"),
            ClassWithoutClassAction => f.write_str("only action \"class\" takes a class"),
            BadDefault => f.write_str("expected \"accept\" or \"drop\""),
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

//! The ordered rule set (first match wins), read from a rule file; packets are classified
//! against it through `crate::classifier`.
//!
//! A rule file is either the TOML rule file (docs/rules.md; parsed by
//! `netsched_core::classify::acl::RuleFile::parse_toml`, the one parser `netsched classify`
//! uses too) or a ClassBench filter set (`@src dst sport dport proto` lines, whose rules all
//! take the action `--classbench-action` gives, and the default the other one). This file
//! keeps what is the filter's own: its bounds, the choice of format ([`RulesFormat`]), the
//! report of duplicated rules. First match decides, as an iptables chain
//! (iptables(8), "TARGETS").
//!
//! Bounds: [`MAX_RULES_BYTES`] of file, [`MAX_RULES`] rules, class below [`MAX_CLASS`]. Every
//! error names the file, the line, the field and the value.
//!

use netsched_core::classify::acl::{
    self, FileRule, ProtoMatch, RuleFile, RuleFileError, RuleFileLimits,
};
use netsched_core::classify::{Cidr, PortRange};
use std::fmt;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::packet::FiveTuple;

/// Largest rule file, bytes.
pub const MAX_RULES_BYTES: usize = 16 << 20;
/// Most rules in one set.
pub const MAX_RULES: usize = 100_000;
/// Classes are below this.
pub const MAX_CLASS: u32 = acl::MAX_CLASS as u32;

/// What the filter reads from a rule file.
const LIMITS: RuleFileLimits = RuleFileLimits {
    max_bytes: MAX_RULES_BYTES,
    max_rules: MAX_RULES,
    ipv6: true,
};

/// What a matching rule (or the default) decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Accept,
    Drop,
    /// Accept and count under this class.
    Class(u32),
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Accept => f.write_str("accept"),
            Action::Drop => f.write_str("drop"),
            Action::Class(c) => write!(f, "class {c}"),
        }
    }
}

impl From<acl::Action> for Action {
    fn from(a: acl::Action) -> Self {
        match a {
            acl::Action::Accept => Action::Accept,
            acl::Action::Drop => Action::Drop,
            // The parser keeps classes below MAX_CLASS (65536), so they fit.
            acl::Action::Class(c) => Action::Class(c.min(MAX_CLASS as usize - 1) as u32),
        }
    }
}

/// One rule: every given field must match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclRule {
    /// `value/mask` ([`ProtoMatch::ANY`] when the rule names no protocol).
    pub proto: ProtoMatch,
    pub src: Option<Cidr>,
    pub dst: Option<Cidr>,
    pub sport: Option<PortRange>,
    pub dport: Option<PortRange>,
    pub action: Action,
}

impl AclRule {
    pub fn matches(&self, t: &FiveTuple) -> bool {
        self.proto.matches(t.proto)
            && self.src.is_none_or(|c| c.contains(t.src))
            && self.dst.is_none_or(|c| c.contains(t.dst))
            && self.sport.is_none_or(|r| r.contains(t.sport))
            && self.dport.is_none_or(|r| r.contains(t.dport))
    }
}

impl From<&FileRule> for AclRule {
    fn from(r: &FileRule) -> Self {
        AclRule {
            proto: r.proto,
            src: r.src,
            dst: r.dst,
            sport: r.sport,
            dport: r.dport,
            action: r.action.into(),
        }
    }
}

/// The two forms a rule file may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RulesFormat {
    /// The TOML rule file (docs/rules.md).
    Toml,
    /// A ClassBench filter set: one `@src dst sport dport proto` line per rule.
    ClassBench,
}

impl RulesFormat {
    /// The format of `text`: ClassBench when its first line that is neither blank nor a `#`
    /// comment starts with `@` (every ClassBench rule line does; no TOML line can), TOML
    /// otherwise. Reads up to that line.
    pub fn detect(text: &str) -> RulesFormat {
        let first = text
            .lines()
            .map(str::trim_start)
            .find(|l| !l.is_empty() && !l.starts_with('#'));
        match first {
            Some(l) if l.starts_with('@') => RulesFormat::ClassBench,
            _ => RulesFormat::Toml,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            RulesFormat::Toml => "toml",
            RulesFormat::ClassBench => "classbench",
        }
    }
}

impl fmt::Display for RulesFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a rule file is read: `--rules-format` and `--classbench-action`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RulesOptions {
    /// The format, or `None`: detected from the text ([`RulesFormat::detect`]).
    pub format: Option<RulesFormat>,
    /// A ClassBench file's action for every rule (`Accept` or `Drop`; the default action is
    /// the other), or `None`: [`DEFAULT_CLASSBENCH_ACTION`]. Given for a TOML file, it is
    /// refused: a TOML file's actions are its own.
    pub classbench_action: Option<Action>,
}

/// Every ClassBench rule drops unless `--classbench-action` says otherwise (the rules are a
/// blocklist and the default accepts).
pub const DEFAULT_CLASSBENCH_ACTION: Action = Action::Drop;

/// An ordered rule set and its default action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleSet {
    pub rules: Vec<AclRule>,
    pub default: Action,
    /// The line of each rule's `action` in its file (of a ClassBench file: the rule's line).
    pub lines: Vec<usize>,
    /// The file the rules came from (or the name the caller gave the text).
    pub source: String,
    pub format: RulesFormat,
    /// Time spent reading and parsing the file.
    pub read_time: Duration,
}

/// A rule whose fields equal an earlier rule's: the earlier one matches every packet it
/// would, so it never decides one (first match wins). Allowed, as iptables allows it, but
/// reported: it is usually a mistake, and with another action a misleading one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Duplicate {
    /// 0-based index of the later rule, and its line.
    pub rule: usize,
    pub line: usize,
    /// 0-based index of the earlier rule with the same fields, and its line.
    pub same_as: usize,
    pub same_as_line: usize,
}

/// Why a rule file was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RulesError {
    /// The file could not be read (missing, not text, larger than [`MAX_RULES_BYTES`]).
    Read { file: String, error: String },
    /// The text is not a rule file of its format (names the file, line, field and value).
    File(RuleFileError),
    /// `--classbench-action` given for a TOML file.
    ActionForToml { file: String },
}

impl fmt::Display for RulesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RulesError::Read { error, .. } => f.write_str(error),
            RulesError::File(e) => e.fmt(f),
            RulesError::ActionForToml { file } => write!(
                f,
                "{file}: a TOML rule file, whose rules and default carry their own actions: \
                 --classbench-action applies to ClassBench files (lines starting with @)"
            ),
        }
    }
}

impl std::error::Error for RulesError {}

impl From<RuleFileError> for RulesError {
    fn from(e: RuleFileError) -> Self {
        RulesError::File(e)
    }
}

impl fmt::Display for Duplicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {}: rule {} has the fields of rule {} (line {}), which matches first: it never \
             decides a packet",
            self.line,
            self.rule + 1,
            self.same_as + 1,
            self.same_as_line
        )
    }
}

impl RuleSet {
    /// Read and parse a rule file (bounded in size) in the format `options` give or detect.
    pub fn load(path: &Path, options: &RulesOptions) -> Result<RuleSet, RulesError> {
        let start = Instant::now();
        let file = path.display().to_string();
        // Bounded while it is read (a file that grows is caught), and never a FIFO.
        let text = netsched_util::read::read_text(path, MAX_RULES_BYTES as u64, "rule file")
            .map_err(|e| RulesError::Read {
                file: file.clone(),
                error: e.to_string(),
            })?;
        let mut set = Self::parse(&text, &file, options)?;
        set.read_time = start.elapsed();
        Ok(set)
    }

    /// Parse rule-file text of the TOML form; `source` names it in errors.
    pub fn from_toml_str(text: &str, source: &str) -> Result<RuleSet, RulesError> {
        let options = RulesOptions {
            format: Some(RulesFormat::Toml),
            classbench_action: None,
        };
        Self::parse(text, source, &options)
    }

    /// Parse rule-file text in the format `options` give or detect; `source` names it in
    /// errors.
    pub fn parse(text: &str, source: &str, options: &RulesOptions) -> Result<RuleSet, RulesError> {
        let start = Instant::now();
        let format = options.format.unwrap_or_else(|| RulesFormat::detect(text));
        let file = match format {
            RulesFormat::Toml => {
                if options.classbench_action.is_some() {
                    return Err(RulesError::ActionForToml {
                        file: source.into(),
                    });
                }
                RuleFile::parse_toml(text, source, &LIMITS)?
            }
            RulesFormat::ClassBench => {
                let (action, default) = match options
                    .classbench_action
                    .unwrap_or(DEFAULT_CLASSBENCH_ACTION)
                {
                    Action::Accept => (acl::Action::Accept, acl::Action::Drop),
                    _ => (acl::Action::Drop, acl::Action::Accept),
                };
                RuleFile::from_classbench(text, source, &LIMITS, action, default)?
            }
        };
        Ok(RuleSet {
            rules: file.rules.iter().map(AclRule::from).collect(),
            default: file.default.into(),
            lines: file.rules.iter().map(|r| r.line).collect(),
            source: source.into(),
            format,
            read_time: start.elapsed(),
        })
    }

    /// Every rule whose match fields (protocol, prefixes, ports) equal an earlier rule's, in
    /// file order. O(rules) with a hash set. A rule covered by an earlier, wider rule is not
    /// reported (finding those is a pairwise check).
    pub fn duplicates(&self) -> Vec<Duplicate> {
        let mut first = std::collections::HashMap::with_capacity(self.rules.len());
        let line = |i: usize| self.lines.get(i).copied().unwrap_or(0);
        let mut out = Vec::new();
        for (i, r) in self.rules.iter().enumerate() {
            let key = (r.proto, r.src, r.dst, r.sport, r.dport);
            if let Some(&j) = first.get(&key) {
                out.push(Duplicate {
                    rule: i,
                    line: line(i),
                    same_as: j,
                    same_as_line: line(j),
                });
            } else {
                first.insert(key, i);
            }
        }
        out
    }

    /// The first matching rule's index and action (the default's when none matches: `None`).
    pub fn first_match(&self, t: &FiveTuple) -> (Option<usize>, Action) {
        match self.rules.iter().position(|r| r.matches(t)) {
            Some(i) => (Some(i), self.rules[i].action),
            None => (None, self.default),
        }
    }
}

impl fmt::Display for AclRule {
    /// The rule as `rule insert` takes it: `action=drop proto=udp dst=10.0.0.0/8 dport=53`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.action {
            Action::Class(c) => write!(f, "action=class class={c}")?,
            a => write!(f, "action={a}")?,
        }
        let p = self.proto;
        match (p.value, p.mask) {
            (_, 0) => {}
            (6, 0xFF) => f.write_str(" proto=tcp")?,
            (17, 0xFF) => f.write_str(" proto=udp")?,
            (v, 0xFF) => write!(f, " proto={v}")?,
            (v, m) => write!(f, " proto=0x{v:02X}/0x{m:02X}")?,
        }
        for (k, c) in [("src", self.src), ("dst", self.dst)] {
            if let Some(c) = c {
                write!(f, " {k}={c}")?;
            }
        }
        for (k, r) in [("sport", self.sport), ("dport", self.dport)] {
            match r {
                Some(r) if r.low == r.high => write!(f, " {k}={}", r.low)?,
                Some(r) => write!(f, " {k}={}-{}", r.low, r.high)?,
                None => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classifier::build_classifier;
    use netsched_core::classify::acl::{ClassifierKind, ClassifierLimits};
    use std::net::IpAddr;

    fn tuple(src: &str, dst: &str, proto: u8, sport: u16, dport: u16) -> FiveTuple {
        FiveTuple {
            src: src.parse::<IpAddr>().unwrap(),
            dst: dst.parse::<IpAddr>().unwrap(),
            proto,
            sport,
            dport,
        }
    }

    /// A rule whose source and destination are of different families could never match: it
    /// is refused, naming the line, the field and both addresses' families.
    #[test]
    fn a_rule_mixing_address_families_is_refused() {
        let text = "[[rule]]\naction = \"drop\"\nsrc = \"10.0.0.0/8\"\ndst = \"2001:db8::/32\"\n";
        let e = RuleSet::from_toml_str(text, "m.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("m.toml:4: rule[0].dst '2001:db8::/32'"),
            "{e}"
        );
        assert!(e.contains("source 10.0.0.0/8 is IPv4"), "{e}");
        let same = "[[rule]]\naction = \"drop\"\nsrc = \"2001:db8::/32\"\ndst = \"::/0\"\n";
        assert!(RuleSet::from_toml_str(same, "m.toml").is_ok());
    }

    /// A field value megabytes long is cut in the message, which says how long it was.
    #[test]
    fn a_huge_field_value_is_cut_in_the_error() {
        let value = "x".repeat(1 << 20);
        let text = format!("[[rule]]\naction = \"drop\"\ndst = \"{value}\"\n");
        let e = RuleSet::from_toml_str(&text, "h.toml")
            .unwrap_err()
            .to_string();
        assert!(e.len() < 400, "{} bytes", e.len());
        assert!(e.contains(&format!("({} bytes)", value.len())), "{e}");
        assert!(e.starts_with("h.toml:3: rule[0].dst 'xxxx"), "{e}");
    }

    /// Loading grows linearly with the rule count: ten times the rules cost far less than a
    /// hundred times the time, which a rescan of the text per rule (quadratic) costs. A ratio
    /// within one run, so a slow machine slows both sides.
    #[test]
    fn loading_grows_linearly_with_the_rule_count() {
        let text = |n: usize| {
            let mut t = String::with_capacity(n * 64);
            for i in 0..n {
                t.push_str(&format!(
                    "[[rule]]\naction = \"drop\"\ndst = \"10.{}.{}.0/24\"\ndport = {}\n",
                    (i >> 8) & 255,
                    i & 255,
                    1 + i % 60000
                ));
            }
            t
        };
        let time = |t: &str| {
            let start = std::time::Instant::now();
            let set = RuleSet::from_toml_str(t, "r.toml").unwrap();
            (start.elapsed(), set.rules.len())
        };
        let (small, large) = (text(5_000), text(50_000));
        // The fastest of three runs of each, so one descheduled run does not decide.
        let best = |t: &str| (0..3).map(|_| time(t)).min().unwrap();
        let ((ts, ns), (tl, nl)) = (best(&small), best(&large));
        assert_eq!((ns, nl), (5_000, 50_000));
        let ratio = tl.as_secs_f64() / ts.as_secs_f64();
        eprintln!("5k rules {ts:?}, 50k rules {tl:?}: {ratio:.1}x");
        assert!(ratio < 30.0, "10x the rules took {ratio:.1}x the time");
    }

    /// Rules with an earlier rule's fields (whatever their action) are reported with both
    /// lines; overlapping but different rules are not; the answers are unchanged.
    #[test]
    fn duplicated_rules_are_reported_with_their_lines() {
        let text = r#"
[[rule]]
action = "drop"
dst = "10.0.0.0/8"
dport = "80"
[[rule]]
action = "accept"
dst = "10.0.0.0/8"
[[rule]]
action = "accept"
dport = 80
dst = "10.0.0.0/8"
[[rule]]
action = "drop"
dst = "10.0.0.0/16"
[[rule]]
action = "class"
class = 1
dst = "10.0.0.0/8"
"#;
        let set = RuleSet::from_toml_str(text, "d.toml").unwrap();
        let d = set.duplicates();
        assert_eq!(
            d,
            vec![
                Duplicate {
                    rule: 2,
                    line: 10,
                    same_as: 0,
                    same_as_line: 3
                },
                Duplicate {
                    rule: 4,
                    line: 17,
                    same_as: 1,
                    same_as_line: 7
                }
            ]
        );
        let msg = d[0].to_string();
        assert!(
            msg.contains("line 10: rule 3") && msg.contains("rule 1 (line 3)"),
            "{msg}"
        );
        let t = tuple("10.0.0.1", "10.0.0.2", 6, 1, 80);
        assert_eq!(set.first_match(&t), (Some(0), Action::Drop));
    }

    #[test]
    fn first_match_wins_and_the_default_decides_the_rest() {
        let set = RuleSet::from_toml_str(
            r#"
default = "drop"
[[rule]]
action = "drop"
proto = "udp"
dport = "5000-5999"
[[rule]]
action = "class"
class = 3
src = "10.1.0.0/16"
[[rule]]
action = "accept"
proto = 17
"#,
            "t.toml",
        )
        .unwrap();
        let c = build_classifier(
            set,
            netsched_core::classify::acl::ClassifierKind::TupleMerge,
            &Default::default(),
        )
        .unwrap();
        assert_eq!(c.rules(), 3);
        assert_eq!(
            c.classify(&tuple("10.1.2.3", "10.2.0.1", 17, 1, 5001)),
            Action::Drop
        );
        assert_eq!(
            c.classify(&tuple("10.1.2.3", "10.2.0.1", 17, 1, 53)),
            Action::Class(3)
        );
        assert_eq!(
            c.classify(&tuple("10.3.2.3", "10.2.0.1", 17, 1, 53)),
            Action::Accept
        );
        assert_eq!(
            c.classify(&tuple("10.3.2.3", "10.2.0.1", 6, 1, 53)),
            Action::Drop
        );
        assert_eq!(
            c.classify(&tuple("fd00::1", "fd00::2", 6, 1, 53)),
            Action::Drop
        );
    }

    #[test]
    fn errors_name_file_line_field_and_value() {
        let cases: &[(&str, &str)] = &[
            (
                "[[rule]]\naction = \"reject\"\n",
                "r.toml:2: rule[0].action 'reject'",
            ),
            (
                "[[rule]]\naction = \"drop\"\nsrc = \"10.0.0.0/40\"\n",
                "r.toml:3: rule[0].src '10.0.0.0/40'",
            ),
            (
                "[[rule]]\naction = \"drop\"\ndport = \"9-1\"\n",
                "r.toml:3: rule[0].dport '9-1'",
            ),
            (
                "[[rule]]\naction = \"drop\"\nproto = \"sctp-ish\"\n",
                "r.toml:3: rule[0].proto 'sctp-ish'",
            ),
            (
                "[[rule]]\naction = \"class\"\nclass = 70000\n",
                "r.toml:3: rule[0].class '70000'",
            ),
            ("default = \"maybe\"\n", "r.toml:1: default 'maybe'"),
            (
                "[[rule]]\naction = \"drop\"\ncolour = 1\n",
                "r.toml:3: rule[0].colour '1': unknown field",
            ),
            ("[[rule]\n", "r.toml:1:"),
        ];
        for (text, want) in cases {
            let e = RuleSet::from_toml_str(text, "r.toml")
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn too_many_rules_are_refused() {
        let text = "[[rule]]\naction = \"drop\"\n".repeat(MAX_RULES + 1);
        let e = RuleSet::from_toml_str(&text, "big.toml")
            .unwrap_err()
            .to_string();
        assert_eq!(e, "big.toml: 100001 rules, more than the limit of 100000");
    }

    /// The spellings of `netsched classify`'s former form are refused by the filter too, each
    /// with this form's spelling.
    #[test]
    fn other_spellings_are_refused_with_the_forms_spelling() {
        for (body, want) in [
            (
                "src_port = \"1024-65535\"",
                "rule[0].src_port '1024-65535': unknown field; this form spells it sport",
            ),
            (
                "dst_port = \"80\"",
                "rule[0].dst_port '80': unknown field; this form spells it dport",
            ),
            (
                "action = \"class:3\"",
                "rule[0].action 'class:3': this form spells it action = \"class\" and class = 3",
            ),
        ] {
            let text = if body.starts_with("action") {
                format!("[[rule]]\n{body}\n")
            } else {
                format!("[[rule]]\naction = \"drop\"\n{body}\n")
            };
            let e = RuleSet::from_toml_str(&text, "old.toml")
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("old.toml:") && e.contains(want),
                "{body}: {e}"
            );
        }
    }

    /// The ```toml blocks of the form's reference, docs/rules.md, read from the file at test
    /// time: the filter reads every one (IPv4 and IPv6 rules), so the doc and the parser
    /// cannot drift apart.
    #[test]
    fn the_documented_form_is_read_by_the_filter() {
        let doc = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/rules.md");
        let text = std::fs::read_to_string(doc).unwrap();
        let blocks = netsched_util::markdown::fenced_blocks(&text, "toml");
        assert!(blocks.len() >= 2, "{doc}: {} toml blocks", blocks.len());
        for (i, b) in blocks.iter().enumerate() {
            let set = RuleSet::from_toml_str(b, &format!("docs/rules.md block {i}"))
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(!set.rules.is_empty(), "block {i}");
        }
        let example = RuleSet::from_toml_str(&blocks[0], "example").unwrap();
        let t = tuple("10.1.2.3", "192.0.2.9", 6, 40000, 443);
        assert_ne!(example.first_match(&t).0, None, "{example:?}");
    }

    /// A ClassBench filter set, found by its first `@` line: every rule takes the one action
    /// (drop unless told), the default the other; a TOML file refuses the ClassBench action.
    #[test]
    fn classbench_files_are_read_with_the_given_action() {
        let cb = "# two rules\n\n@10.0.0.0/8\t192.0.2.0/24\t0 : 65535\t80 : 80\t0x06/0xFF\t0x0000/0x0000\n\
                  @0.0.0.0/0 0.0.0.0/0 0 : 65535 53 : 53 0x11/0xFF\n";
        assert_eq!(RulesFormat::detect(cb), RulesFormat::ClassBench);
        assert_eq!(RulesFormat::detect("# x\n[[rule]]\n"), RulesFormat::Toml);
        assert_eq!(RulesFormat::detect(""), RulesFormat::Toml);
        let set = RuleSet::parse(cb, "acl.rules", &RulesOptions::default()).unwrap();
        assert_eq!(
            (set.format, set.rules.len(), set.default, &set.lines[..]),
            (RulesFormat::ClassBench, 2, Action::Accept, &[3, 4][..])
        );
        let c = build_classifier(set, ClassifierKind::TupleMerge, &Default::default()).unwrap();
        let web = tuple("10.9.9.9", "192.0.2.1", 6, 5000, 80);
        assert_eq!(c.classify(&web), Action::Drop);
        assert_eq!(
            c.classify(&tuple("10.9.9.9", "192.0.2.1", 17, 5000, 80)),
            Action::Accept
        );
        assert_eq!(
            c.classify(&tuple("1.2.3.4", "5.6.7.8", 17, 1, 53)),
            Action::Drop
        );
        // IPv4 rules: an IPv6 packet meets none of them.
        assert_eq!(
            c.classify(&tuple("fd00::1", "fd00::2", 17, 1, 53)),
            Action::Accept
        );
        let allow = RulesOptions {
            format: None,
            classbench_action: Some(Action::Accept),
        };
        let set = RuleSet::parse(cb, "acl.rules", &allow).unwrap();
        assert_eq!(
            (set.rules[0].action, set.default),
            (Action::Accept, Action::Drop)
        );
        let e = RuleSet::parse("[[rule]]\naction = \"drop\"\n", "r.toml", &allow)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("r.toml: a TOML rule file") && e.contains("--classbench-action"),
            "{e}"
        );
        let e = RuleSet::parse(
            "@10.0.0.0/8 0.0.0.0/0 0 : 65535 90 : 80 0x06/0xFF\n",
            "bad.rules",
            &RulesOptions::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("bad.rules:1: dst_port '90 : 80'"), "{e}");
    }

    /// What a load says: the rule count, the file and its format, the default, the structure
    /// and the time.
    #[test]
    fn the_summary_names_count_file_format_default_and_structure() {
        let set = RuleSet::parse(
            "@10.0.0.0/8 0.0.0.0/0 0 : 65535 80 : 80 0x06/0xFF\n",
            "acl1.rules",
            &RulesOptions::default(),
        )
        .unwrap();
        let c = build_classifier(set, ClassifierKind::TupleMerge, &Default::default()).unwrap();
        let s = c.summary();
        assert!(
            s.starts_with(
                "rules: 1 loaded from acl1.rules (classbench), default accept, tuple_merge, "
            ),
            "{s}"
        );
        assert!(s.ends_with(" s"), "{s}");
        let set = RuleSet::from_toml_str("default = \"drop\"\n", "r.toml").unwrap();
        let c = build_classifier(set, ClassifierKind::Linear, &Default::default()).unwrap();
        assert!(
            c.summary()
                .starts_with("rules: 0 loaded from r.toml (toml), default drop, linear, "),
            "{}",
            c.summary()
        );
    }

    /// A protocol `value/mask` (ClassBench's form) matches by the mask in every structure.
    #[test]
    fn protocol_masks_match_by_the_mask() {
        let set = RuleSet::from_toml_str(
            "[[rule]]\naction = \"drop\"\nproto = \"0x06/0xFE\"\n",
            "m.toml",
        )
        .unwrap();
        for kind in ClassifierKind::ALL {
            let c = build_classifier(set.clone(), kind, &Default::default()).unwrap();
            for (proto, want) in [(6, Action::Drop), (7, Action::Drop), (17, Action::Accept)] {
                assert_eq!(
                    c.classify(&tuple("10.0.0.1", "10.0.0.2", proto, 1, 2)),
                    want,
                    "{kind} {proto}"
                );
                assert_eq!(
                    set.first_match(&tuple("fd00::1", "fd00::2", proto, 1, 2)).1,
                    want
                );
            }
        }
    }

    /// Every structure gives the answer of the rules scanned in order (the oracle), for IPv4
    /// and IPv6 packets, over rule sets that mix both families (one family per rule), ranges,
    /// protocols and overlaps.
    #[test]
    fn every_classifier_kind_gives_the_first_match_of_the_scan() {
        let set = RuleSet::from_toml_str(
            r#"
default = "accept"
[[rule]]
action = "drop"
src = "2001:db8::/32"
[[rule]]
action = "class"
class = 1
src = "10.1.0.0/16"
dport = "80-89"
proto = "tcp"
[[rule]]
action = "drop"
dst = "10.2.3.0/24"
[[rule]]
action = "class"
class = 2
sport = "1000-1999"
proto = "udp"
[[rule]]
action = "class"
class = 3
src = "10.1.2.0/24"
[[rule]]
action = "drop"
proto = "icmp"
"#,
            "mixed.toml",
        )
        .unwrap();
        let addrs = [
            "10.1.2.3",
            "10.1.9.9",
            "10.2.3.4",
            "10.9.0.1",
            "192.0.2.1",
            "2001:db8::1",
            "2001:db8:1::5",
            "2001:db9::1",
        ];
        let ports = [0u16, 80, 85, 90, 1000, 1500, 2000];
        let mut checked = 0;
        for kind in ClassifierKind::ALL {
            let c = build_classifier(set.clone(), kind, &ClassifierLimits::default()).unwrap();
            for src in addrs {
                for dst in addrs {
                    for proto in [1u8, 6, 17, 58] {
                        for &sport in &ports {
                            for &dport in &ports {
                                let t = tuple(src, dst, proto, sport, dport);
                                assert_eq!(c.classify(&t), set.first_match(&t).1, "{kind}: {t:?}");
                                checked += 1;
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(checked, 3 * 8 * 8 * 4 * 7 * 7);
    }
}

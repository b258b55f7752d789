//! The ordered rule set (first match wins) and the one seam through which packets are
//! classified: [`build_classifier`].
//!
//! File format (TOML): `default = "accept" | "drop"` and one `[[rule]]` per rule, in order,
//! with `action = "accept" | "drop" | "class"` (`class = N` with `class`), and any of `proto`
//! (`tcp`, `udp`, `icmp`, `icmpv6` or a number), `src`/`dst` (CIDR, IPv4 or IPv6),
//! `sport`/`dport` (`"80"` or `"1024-65535"`). A missing field matches anything. As an
//! iptables chain (iptables(8), "TARGETS": the first rule that matches decides).
//!
//! Bounds: [`MAX_RULES_BYTES`] of file, [`MAX_RULES`] rules, class below [`MAX_CLASS`]. Every
//! error names the file, the line, the field and the value.
//!
//! [`PacketClassifier`] is the seam and [`build_classifier`] the one place a structure is
//! chosen: [`AclClassifier`] puts IPv4 packets through core's ACL structures (TupleMerge by
//! default; `--classifier linear | tuple_space | tuple_merge`) and IPv6 packets through the
//! linear scan of [`RuleSet::first_match`] (O(rules) per packet).

use netsched_core::classify::acl::{self, ClassifierBuildError, ClassifierKind, ClassifierLimits};
use netsched_core::classify::{Cidr, PortRange};
use serde::Deserialize;
use std::fmt;
use std::net::IpAddr;
use std::path::Path;
use toml::Spanned;

use crate::packet::FiveTuple;

/// Largest rule file, bytes.
pub const MAX_RULES_BYTES: usize = 16 << 20;
/// Most rules in one set.
pub const MAX_RULES: usize = 100_000;
/// Classes are below this.
pub const MAX_CLASS: u32 = 1 << 16;

/// What a matching rule (or the default) decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Accept,
    Drop,
    /// Accept and count under this class.
    Class(u32),
}

/// One rule: every given field must match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclRule {
    pub proto: Option<u8>,
    pub src: Option<Cidr>,
    pub dst: Option<Cidr>,
    pub sport: Option<PortRange>,
    pub dport: Option<PortRange>,
    pub action: Action,
}

impl AclRule {
    pub fn matches(&self, t: &FiveTuple) -> bool {
        self.proto.is_none_or(|p| p == t.proto)
            && self.src.is_none_or(|c| c.contains(t.src))
            && self.dst.is_none_or(|c| c.contains(t.dst))
            && self.sport.is_none_or(|r| r.contains(t.sport))
            && self.dport.is_none_or(|r| r.contains(t.dport))
    }
}

/// An ordered rule set and its default action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleSet {
    pub rules: Vec<AclRule>,
    pub default: Action,
    /// The line of each rule's `action` in its file (0 when the set was not read from text).
    pub lines: Vec<usize>,
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
    Read {
        file: String,
        error: String,
    },
    TooLarge {
        file: String,
        bytes: u64,
    },
    Syntax {
        file: String,
        line: usize,
        error: String,
    },
    TooMany {
        file: String,
        rules: usize,
    },
    Field {
        file: String,
        line: usize,
        field: &'static str,
        value: String,
        why: String,
    },
}

/// The longest field value an error shows whole (bytes); a longer one is cut, with its length.
pub const SHOWN_VALUE: usize = 80;

/// `text` up to `max` bytes, cut at a character boundary.
fn clip(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

impl fmt::Display for RulesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RulesError::Read { error, .. } => f.write_str(error),
            RulesError::TooLarge { file, bytes } => write!(
                f,
                "{file}: {bytes} bytes, more than the {MAX_RULES_BYTES} a rule file may have"
            ),
            RulesError::Syntax { file, line, error } => write!(f, "{file}:{line}: {error}"),
            RulesError::TooMany { file, rules } => {
                write!(f, "{file}: {rules} rules, more than {MAX_RULES}")
            }
            RulesError::Field {
                file,
                line,
                field,
                value,
                why,
            } => {
                // A value is shown in full up to SHOWN_VALUE bytes: an error goes to a
                // client's socket and into one log line, and a field may be megabytes long.
                // The reason may quote the value too (a parser's message): it is cut alike.
                let why = clip(why, SHOWN_VALUE * 2);
                if value.len() <= SHOWN_VALUE {
                    write!(f, "{file}:{line}: field `{field}` = {value:?}: {why}")
                } else {
                    let (head, bytes) = (clip(value, SHOWN_VALUE), value.len());
                    write!(
                        f,
                        "{file}:{line}: field `{field}` = {head:?}… ({bytes} bytes): {why}"
                    )
                }
            }
        }
    }
}

impl std::error::Error for RulesError {}

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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    default: Option<Spanned<String>>,
    #[serde(default)]
    rule: Vec<RawRule>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    action: Spanned<String>,
    class: Option<Spanned<i64>>,
    proto: Option<Spanned<toml::Value>>,
    src: Option<Spanned<String>>,
    dst: Option<Spanned<String>>,
    sport: Option<Spanned<toml::Value>>,
    dport: Option<Spanned<toml::Value>>,
}

/// Line numbers of byte offsets in one text: the newlines' offsets found once (O(bytes)),
/// then a binary search per lookup (O(log lines)), so naming the line of every rule costs
/// O(bytes + rules × log lines), not a rescan of the text per rule.
struct Lines(Vec<usize>);

impl Lines {
    fn new(text: &str) -> Self {
        Lines(newline_offsets(text))
    }

    /// The 1-based line holding byte `offset`.
    fn of(&self, offset: usize) -> usize {
        self.0.partition_point(|&nl| nl < offset) + 1
    }
}

fn newline_offsets(text: &str) -> Vec<usize> {
    text.bytes()
        .enumerate()
        .filter_map(|(i, b)| (b == b'\n').then_some(i))
        .collect()
}

impl RuleSet {
    /// Read and parse a rule file (bounded in size).
    pub fn load(path: &Path) -> Result<RuleSet, RulesError> {
        let file = path.display().to_string();
        // Bounded while it is read (a file that grows is caught), and never a FIFO.
        let text = netsched_util::read::read_text(path, MAX_RULES_BYTES as u64, "rule file")
            .map_err(|e| RulesError::Read {
                file: file.clone(),
                error: e.to_string(),
            })?;
        Self::from_toml_str(&text, &file)
    }

    /// Parse rule-file text; `source` names it in errors.
    pub fn from_toml_str(text: &str, source: &str) -> Result<RuleSet, RulesError> {
        if text.len() > MAX_RULES_BYTES {
            return Err(RulesError::TooLarge {
                file: source.into(),
                bytes: text.len() as u64,
            });
        }
        let lines_of = Lines::new(text);
        let raw: RawFile = toml::from_str(text).map_err(|e| RulesError::Syntax {
            file: source.into(),
            line: e.span().map_or(0, |s| lines_of.of(s.start)),
            error: e.message().to_string(),
        })?;
        if raw.rule.len() > MAX_RULES {
            return Err(RulesError::TooMany {
                file: source.into(),
                rules: raw.rule.len(),
            });
        }
        let field_err =
            |span: std::ops::Range<usize>, field, value: String, why: String| RulesError::Field {
                file: source.into(),
                line: lines_of.of(span.start),
                field,
                value,
                why,
            };
        let default = match &raw.default {
            None => Action::Accept,
            Some(d) => match d.get_ref().as_str() {
                "accept" => Action::Accept,
                "drop" => Action::Drop,
                v => {
                    return Err(field_err(
                        d.span(),
                        "default",
                        v.into(),
                        "expected \"accept\" or \"drop\"".into(),
                    ))
                }
            },
        };
        let mut rules = Vec::with_capacity(raw.rule.len());
        let mut lines = Vec::with_capacity(raw.rule.len());
        for r in &raw.rule {
            rules.push(rule(r, &field_err)?);
            lines.push(lines_of.of(r.action.span().start));
        }
        Ok(RuleSet {
            rules,
            default,
            lines,
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

type FieldErr<'a> = dyn Fn(std::ops::Range<usize>, &'static str, String, String) -> RulesError + 'a;

fn rule(r: &RawRule, err: &FieldErr) -> Result<AclRule, RulesError> {
    let action = match (r.action.get_ref().as_str(), &r.class) {
        ("accept", None) => Action::Accept,
        ("drop", None) => Action::Drop,
        ("class", Some(c)) if (0..MAX_CLASS as i64).contains(c.get_ref()) => {
            Action::Class(*c.get_ref() as u32)
        }
        ("class", Some(c)) => {
            return Err(err(
                c.span(),
                "class",
                c.get_ref().to_string(),
                format!("a class is 0..{MAX_CLASS}"),
            ))
        }
        ("class", None) => {
            return Err(err(
                r.action.span(),
                "class",
                String::new(),
                "action \"class\" needs `class = N`".into(),
            ))
        }
        ("accept" | "drop", Some(c)) => {
            return Err(err(
                c.span(),
                "class",
                c.get_ref().to_string(),
                "only action \"class\" takes a class".into(),
            ))
        }
        (v, _) => {
            return Err(err(
                r.action.span(),
                "action",
                v.into(),
                "expected \"accept\", \"drop\" or \"class\"".into(),
            ))
        }
    };
    let cidr = |f: &Option<Spanned<String>>, name| -> Result<Option<Cidr>, RulesError> {
        f.as_ref()
            .map(|s| {
                s.get_ref()
                    .parse::<Cidr>()
                    .map_err(|e| err(s.span(), name, s.get_ref().clone(), e.to_string()))
            })
            .transpose()
    };
    let ports = |f: &Option<Spanned<toml::Value>>, name| -> Result<Option<PortRange>, RulesError> {
        f.as_ref()
            .map(|s| {
                let text = match s.get_ref() {
                    toml::Value::String(t) => t.clone(),
                    toml::Value::Integer(i) => i.to_string(),
                    v => v.to_string(),
                };
                PortRange::parse(&text).map_err(|e| err(s.span(), name, text, e.to_string()))
            })
            .transpose()
    };
    let proto = r
        .proto
        .as_ref()
        .map(|s| {
            let v = s.get_ref();
            match v {
                toml::Value::String(t) => match t.as_str() {
                    "tcp" => Some(6),
                    "udp" => Some(17),
                    "icmp" => Some(1),
                    "icmpv6" => Some(58),
                    _ => None,
                },
                toml::Value::Integer(i) => u8::try_from(*i).ok(),
                _ => None,
            }
            .ok_or_else(|| {
                err(
                    s.span(),
                    "proto",
                    v.to_string(),
                    "expected tcp, udp, icmp, icmpv6 or 0..=255".into(),
                )
            })
        })
        .transpose()?;
    let (src, dst) = (cidr(&r.src, "src")?, cidr(&r.dst, "dst")?);
    if let (Some(s), Some(d), Some(dspan)) = (src, dst, r.dst.as_ref()) {
        if s.network().is_ipv4() != d.network().is_ipv4() {
            return Err(err(
                dspan.span(),
                "dst",
                dspan.get_ref().clone(),
                format!(
                    "one family per rule: the source {} is {}, so this rule could never match",
                    r.src.as_ref().map_or("", |x| x.get_ref().as_str()),
                    if s.network().is_ipv4() {
                        "IPv4"
                    } else {
                        "IPv6"
                    }
                ),
            ));
        }
    }
    Ok(AclRule {
        proto,
        src,
        dst,
        sport: ports(&r.sport, "sport")?,
        dport: ports(&r.dport, "dport")?,
        action,
    })
}

/// First-match classification of a 5-tuple: what the filter's SOP work calls.
pub trait PacketClassifier: Send + Sync + fmt::Debug {
    /// The action for `t` (a rule's, or the default).
    fn classify(&self, t: &FiveTuple) -> Action;
    /// Rules held.
    fn rules(&self) -> usize;
}

/// IPv4 packets through one of core's ACL structures (`netsched_core::classify::acl`: a
/// linear scan, tuple space search or TupleMerge, all with the same first-match answers),
/// IPv6 packets through the linear scan of [`RuleSet`].
///
/// Core's structures hold IPv4 5-tuples only (as ClassBench's filters do), so the rules whose
/// prefixes are IPv4 or absent are copied into them, and [`Self::index`] maps a core rule back
/// to its place in the file; a rule with an IPv6 prefix never matches an IPv4 packet and is
/// left out. Memory: core's structure (bounded by [`ClassifierLimits`]) plus 4 bytes per rule.
pub struct AclClassifier {
    set: RuleSet,
    v4: Box<dyn acl::PacketClassifier>,
    /// Core rule index → rule index in `set`.
    index: Vec<u32>,
    kind: ClassifierKind,
}

impl fmt::Debug for AclClassifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AclClassifier")
            .field("kind", &self.kind)
            .field("rules", &self.set.rules.len())
            .field("ipv4_rules", &self.index.len())
            .finish()
    }
}

impl AclClassifier {
    /// The structure the IPv4 rules were built into.
    pub fn kind(&self) -> ClassifierKind {
        self.kind
    }
}

impl PacketClassifier for AclClassifier {
    fn classify(&self, t: &FiveTuple) -> Action {
        let (IpAddr::V4(src), IpAddr::V4(dst)) = (t.src, t.dst) else {
            return self.set.first_match(t).1;
        };
        let key = acl::FiveTuple {
            src: u32::from(src),
            dst: u32::from(dst),
            src_port: t.sport,
            dst_port: t.dport,
            proto: t.proto,
        };
        match self.v4.first_match(&key) {
            Some(i) => self.set.rules[self.index[i as usize] as usize].action,
            None => self.set.default,
        }
    }
    fn rules(&self) -> usize {
        self.set.rules.len()
    }
}

/// `Some(prefix)` for an IPv4 or absent prefix, `None` for an IPv6 one.
fn v4_prefix(c: &Option<Cidr>) -> Option<acl::Ipv4Prefix> {
    match c {
        None => Some(acl::Ipv4Prefix::ANY),
        Some(c) => match c.network() {
            IpAddr::V4(a) => acl::Ipv4Prefix::new(u32::from(a), c.prefix_len()),
            IpAddr::V6(_) => None,
        },
    }
}

/// The classifier the filter uses for `set` (`--classifier`) — the one place a structure is
/// chosen. Refused when the structure would exceed `limits` (tuple space explosion).
pub fn build_classifier(
    set: RuleSet,
    kind: ClassifierKind,
    limits: &ClassifierLimits,
) -> Result<Box<dyn PacketClassifier>, ClassifierBuildError> {
    let mut v4_rules = Vec::with_capacity(set.rules.len());
    let mut index = Vec::with_capacity(set.rules.len());
    for (i, r) in set.rules.iter().enumerate() {
        let (Some(src), Some(dst)) = (v4_prefix(&r.src), v4_prefix(&r.dst)) else {
            continue;
        };
        v4_rules.push(acl::AclRule {
            src,
            dst,
            src_port: r.sport.unwrap_or(acl::ANY_PORT),
            dst_port: r.dport.unwrap_or(acl::ANY_PORT),
            proto: r.proto.map_or(acl::ProtoMatch::ANY, acl::ProtoMatch::exact),
            action: acl::Action::Accept,
        });
        index.push(i as u32);
    }
    let v4 = acl::build_classifier(kind, &acl::RuleSet::new(v4_rules), limits)?;
    Ok(Box::new(AclClassifier {
        set,
        v4,
        index,
        kind,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
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
            e.starts_with("m.toml:4: field `dst` = \"2001:db8::/32\""),
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
        assert!(e.starts_with("h.toml:3: field `dst` = \"xxxx"), "{e}");
    }

    /// The line index agrees with counting newlines from the start, at every byte offset
    /// (a newline belongs to the line it ends) and past the end.
    #[test]
    fn line_numbers_match_a_count_of_newlines() {
        let text = "a\n\nbc\nd\n\n";
        let lines = Lines::new(text);
        for offset in 0..=text.len() + 2 {
            let counted = text[..offset.min(text.len())].matches('\n').count() + 1;
            assert_eq!(lines.of(offset), counted, "offset {offset}");
        }
        assert_eq!(Lines::new("").of(0), 1);
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
                "r.toml:2: field `action` = \"reject\"",
            ),
            (
                "[[rule]]\naction = \"drop\"\nsrc = \"10.0.0.0/40\"\n",
                "r.toml:3: field `src` = \"10.0.0.0/40\"",
            ),
            (
                "[[rule]]\naction = \"drop\"\ndport = \"9-1\"\n",
                "r.toml:3: field `dport` = \"9-1\"",
            ),
            (
                "[[rule]]\naction = \"drop\"\nproto = \"sctp-ish\"\n",
                "r.toml:3: field `proto`",
            ),
            (
                "[[rule]]\naction = \"class\"\nclass = 70000\n",
                "r.toml:3: field `class` = \"70000\"",
            ),
            (
                "default = \"maybe\"\n",
                "r.toml:1: field `default` = \"maybe\"",
            ),
            (
                "[[rule]]\naction = \"drop\"\ncolour = 1\n",
                "r.toml:3: unknown field `colour`",
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
        let e = RuleSet::from_toml_str(&text, "big.toml").unwrap_err();
        assert!(matches!(e, RulesError::TooMany { .. }), "{e}");
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

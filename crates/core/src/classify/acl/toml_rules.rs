//! The TOML rule file, the one form `netsched filter` and `netsched classify` both read
//! (docs/rules.md is its reference, with an example both read): an optional
//! `default = "accept" | "drop"` and an array of `[[rule]]` tables in priority order (the
//! first rule that matches wins), each with `action = "accept" | "drop" | "class"` (and
//! `class = N`) and any of `src`, `dst` (IPv4 or IPv6 prefixes), `sport`, `dport` (a port or
//! `low-high`) and `proto` (a name, 0-255 or ClassBench's `value/mask`); an absent field
//! matches anything.
//!
//! The field names are nftables' and iptables'; the spellings of other forms (`src_port`,
//! `dst_port`, `protocol`, `action = "class:N"`) are refused with an error that says how this
//! form spells them, and so is every other unknown key (a typo must not widen a rule). A
//! prefix with bits set past its length (`10.0.0.1/8`) is refused with the network it
//! probably meant; a rule with an IPv4 source and an IPv6 destination (or the reverse) could
//! never match and is refused.
//!
//! [`RuleFile::parse_toml`] is the one parser; [`RuleSet::from_toml_str`] reads the same form
//! into the IPv4 structures of this module and refuses IPv6 prefixes, which they cannot hold.
//! Errors name the source, the line, the field (`rule[3].dport`) and the value. Bounded by the
//! caller's [`RuleFileLimits`]. Cost: O(bytes + rules × log lines): the line of every rule and
//! error comes from one index of the text's newlines ([`Lines`]), never a rescan.

use super::error::{RuleFileError, RuleFileErrorKind as K};
use super::{
    AclRule, Action, Ipv4Prefix, ProtoMatch, RuleSet, ANY_PORT, MAX_FILE_BYTES, MAX_RULES,
};
use crate::classify::{Cidr, CidrError, PortRange};
use crate::wire::{PROTO_ICMP, PROTO_ICMPV6, PROTO_TCP, PROTO_UDP};
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use std::fmt;
use std::net::IpAddr;
use toml::{Spanned, Value};

/// Classes are below this (`class = 0` .. `class = 65535`).
pub const MAX_CLASS: usize = 1 << 16;

/// What a reader of the form takes: its size bounds, and whether its structures hold IPv6
/// prefixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuleFileLimits {
    /// Largest text, bytes.
    pub max_bytes: usize,
    /// Most rules.
    pub max_rules: usize,
    /// IPv6 prefixes are accepted (otherwise refused with [`K::Ipv6NotHeld`]).
    pub ipv6: bool,
}

impl RuleFileLimits {
    /// The IPv4 structures of this module (`netsched classify`): ClassBench-sized sets,
    /// IPv4 prefixes only.
    pub const IPV4_STRUCTURES: RuleFileLimits = RuleFileLimits {
        max_bytes: MAX_FILE_BYTES,
        max_rules: MAX_RULES,
        ipv6: false,
    };
}

/// One rule as the file gives it; `None` (and [`ProtoMatch::ANY`]) match anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileRule {
    pub src: Option<Cidr>,
    pub dst: Option<Cidr>,
    pub sport: Option<PortRange>,
    pub dport: Option<PortRange>,
    pub proto: ProtoMatch,
    pub action: Action,
    /// The line of the rule's `action` (of a ClassBench file: the rule's line).
    pub line: usize,
}

impl FileRule {
    /// The rule for the IPv4 structures, or `None` when a prefix is IPv6 (such a rule never
    /// matches an IPv4 packet).
    pub fn to_ipv4(&self) -> Option<AclRule> {
        let v4 = |c: &Option<Cidr>| match c {
            None => Some(Ipv4Prefix::ANY),
            Some(c) => match c.network() {
                IpAddr::V4(a) => Ipv4Prefix::new(u32::from(a), c.prefix_len()),
                IpAddr::V6(_) => None,
            },
        };
        Some(AclRule {
            src: v4(&self.src)?,
            dst: v4(&self.dst)?,
            src_port: self.sport.unwrap_or(ANY_PORT),
            dst_port: self.dport.unwrap_or(ANY_PORT),
            proto: self.proto,
            action: self.action,
        })
    }
}

/// A rule file: its rules in priority order and the action of a packet none matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleFile {
    /// `accept` or `drop` (`accept` when the file does not say).
    pub default: Action,
    pub rules: Vec<FileRule>,
}

/// Line numbers of byte offsets in one text: the newlines' offsets found once (O(bytes)),
/// then a binary search per lookup (O(log lines)), so naming the line of every rule costs
/// O(bytes + rules × log lines), not a rescan of the text per rule.
pub(crate) struct Lines(Vec<usize>);

impl Lines {
    pub(crate) fn new(text: &str) -> Self {
        Lines(
            text.bytes()
                .enumerate()
                .filter_map(|(i, b)| (b == b'\n').then_some(i))
                .collect(),
        )
    }

    /// The 1-based line holding byte `offset`.
    pub(crate) fn of(&self, offset: usize) -> usize {
        self.0.partition_point(|&nl| nl < offset) + 1
    }
}

/// A TOML table's entries in file order, each key and value with its span. Read as entries
/// rather than into a struct so that an unknown key is reported with its rule, its line and
/// how this form spells it, not as the TOML parser's list of expected keys.
struct Entries(Vec<(Spanned<String>, Spanned<Value>)>);

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entry;
        impl<'de> Visitor<'de> for Entry {
            type Value = Entries;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a table")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries, A::Error> {
                let mut out = Vec::new();
                while let Some(key) = map.next_key::<Spanned<String>>()? {
                    out.push((key, map.next_value::<Spanned<Value>>()?));
                }
                Ok(Entries(out))
            }
        }
        d.deserialize_map(Entry)
    }
}

/// The file's top level: `rule` read as tables of entries, every other key as a value.
struct Top {
    rules: Vec<Spanned<Entries>>,
    others: Vec<(Spanned<String>, Spanned<Value>)>,
}

impl<'de> Deserialize<'de> for Top {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct TopVisitor;
        impl<'de> Visitor<'de> for TopVisitor {
            type Value = Top;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a rule file: default and [[rule]] tables")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Top, A::Error> {
                let mut top = Top {
                    rules: Vec::new(),
                    others: Vec::new(),
                };
                while let Some(key) = map.next_key::<Spanned<String>>()? {
                    if key.get_ref() == "rule" {
                        top.rules = map.next_value()?;
                    } else {
                        top.others.push((key, map.next_value()?));
                    }
                }
                Ok(top)
            }
        }
        d.deserialize_map(TopVisitor)
    }
}

/// Keys of other rule forms, and how this form spells them.
const RULE_SPELLINGS: &[(&str, &str)] = &[
    ("src_port", "sport"),
    ("dst_port", "dport"),
    ("source_port", "sport"),
    ("destination_port", "dport"),
    ("protocol", "proto"),
    ("source", "src"),
    ("destination", "dst"),
    ("saddr", "src"),
    ("daddr", "dst"),
];
const TOP_SPELLINGS: &[(&str, &str)] = &[
    ("rules", "rule ([[rule]] tables)"),
    ("policy", "default"),
    ("default_action", "default"),
];

fn unknown(key: &str, spellings: &[(&str, &'static str)], in_rule: bool) -> K {
    K::UnknownField {
        spelled: spellings
            .iter()
            .find(|(other, _)| other.eq_ignore_ascii_case(key))
            .map(|(_, ours)| *ours),
        in_rule,
    }
}

/// A value as the error shows it: a string's text, anything else as TOML writes it.
fn shown(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `"any"` (any case, spaces around allowed).
fn is_any(t: &str) -> bool {
    t.trim().eq_ignore_ascii_case("any")
}

fn cidr(v: &Value, ipv6: bool) -> Result<Option<Cidr>, K> {
    let Value::String(t) = v else {
        return Err(K::BadCidr {
            why: "not a prefix: write it as a string, e.g. \"10.0.0.0/8\"".into(),
        });
    };
    if is_any(t) {
        return Ok(None);
    }
    let c: Cidr = t.parse().map_err(|e| match e {
        CidrError::HostBitsSet {
            network,
            prefix_len,
            ..
        } => K::HostBitsSet {
            network: format!("{network}/{prefix_len}"),
        },
        CidrError::NotAnAddress { .. } => K::BadCidr {
            why: "not an IPv4 or IPv6 address, prefix (addr/len) or \"any\"".into(),
        },
        CidrError::BadPrefixLength { max, .. } => K::BadCidr {
            why: format!("the prefix length is not a number 0-{max}"),
        },
        CidrError::PrefixTooLong {
            prefix_len, max, ..
        } => K::BadCidr {
            why: format!("prefix length {prefix_len} is longer than {max}"),
        },
    })?;
    if !ipv6 && c.network().is_ipv6() {
        return Err(K::Ipv6NotHeld);
    }
    Ok(Some(c))
}

fn ports(v: &Value) -> Result<Option<PortRange>, K> {
    match v {
        Value::Integer(p) => u16::try_from(*p)
            .map(|p| Some(PortRange { low: p, high: p }))
            .map_err(|_| K::BadPortRange),
        Value::String(t) if is_any(t) => Ok(None),
        Value::String(t) => PortRange::parse(t).map(Some).map_err(|_| K::BadPortRange),
        _ => Err(K::BadPortRange),
    }
}

fn proto(v: &Value) -> Result<ProtoMatch, K> {
    let t = match v {
        Value::Integer(p) => {
            return u8::try_from(*p)
                .map(ProtoMatch::exact)
                .map_err(|_| K::BadProtocol)
        }
        Value::String(t) => t.trim().to_ascii_lowercase(),
        _ => return Err(K::BadProtocol),
    };
    let hex = |s: &str| {
        s.trim()
            .strip_prefix("0x")
            .and_then(|h| u8::from_str_radix(h, 16).ok())
    };
    Ok(match t.as_str() {
        "any" => ProtoMatch::ANY,
        "tcp" => ProtoMatch::exact(PROTO_TCP),
        "udp" => ProtoMatch::exact(PROTO_UDP),
        "icmp" => ProtoMatch::exact(PROTO_ICMP),
        "icmpv6" => ProtoMatch::exact(PROTO_ICMPV6),
        other => match other.split_once('/') {
            Some((v, m)) => {
                let (v, m) = (hex(v).ok_or(K::BadProtocol)?, hex(m).ok_or(K::BadProtocol)?);
                ProtoMatch {
                    value: v & m,
                    mask: m,
                }
            }
            None => ProtoMatch::exact(other.parse().map_err(|_| K::BadProtocol)?),
        },
    })
}

/// `accept` or `drop`: the actions a `default` may take.
fn accept_or_drop(t: &str) -> Option<Action> {
    match t.trim().to_ascii_lowercase().as_str() {
        "accept" => Some(Action::Accept),
        "drop" => Some(Action::Drop),
        _ => None,
    }
}

/// Builds errors for one text: names its source and finds lines in the index.
struct Errors<'a> {
    source: &'a str,
    lines: Lines,
}

impl Errors<'_> {
    fn at(&self, offset: usize, field: impl Into<String>, value: &str, kind: K) -> RuleFileError {
        RuleFileError::new(self.source, self.lines.of(offset), field, value, kind)
    }
    fn value(&self, field: impl Into<String>, v: &Spanned<Value>, kind: K) -> RuleFileError {
        self.at(v.span().start, field, &shown(v.get_ref()), kind)
    }
}

fn rule(
    i: usize,
    table: &Spanned<Entries>,
    limits: &RuleFileLimits,
    err: &Errors,
) -> Result<FileRule, RuleFileError> {
    let field = |name: &str| format!("rule[{i}].{name}");
    let mut r = FileRule {
        src: None,
        dst: None,
        sport: None,
        dport: None,
        proto: ProtoMatch::ANY,
        action: Action::Accept,
        line: 0,
    };
    let (mut action, mut class, mut dst) = (None, None, None);
    for (key, v) in &table.get_ref().0 {
        let name = key.get_ref().as_str();
        let value = v.get_ref();
        let parsed = match name {
            "src" => cidr(value, limits.ipv6).map(|c| r.src = c),
            "dst" => cidr(value, limits.ipv6).map(|c| {
                r.dst = c;
                dst = Some(v);
            }),
            "sport" => ports(value).map(|p| r.sport = p),
            "dport" => ports(value).map(|p| r.dport = p),
            "proto" => proto(value).map(|p| r.proto = p),
            "action" => {
                action = Some(v);
                Ok(())
            }
            "class" => {
                class = Some(v);
                Ok(())
            }
            other => {
                let kind = unknown(other, RULE_SPELLINGS, true);
                return Err(err.at(key.span().start, field(other), &shown(value), kind));
            }
        };
        parsed.map_err(|kind| err.value(field(name), v, kind))?;
    }
    let Some(action) = action else {
        return Err(err.at(table.span().start, field("action"), "", K::Missing));
    };
    r.line = err.lines.of(action.span().start);
    let text = match action.get_ref() {
        Value::String(t) => t.trim().to_ascii_lowercase(),
        _ => String::new(),
    };
    r.action = match (text.as_str(), class) {
        ("class", Some(c)) => match c.get_ref() {
            Value::Integer(n) if (0..MAX_CLASS as i64).contains(n) => Action::Class(*n as usize),
            _ => return Err(err.value(field("class"), c, K::BadClass { max: MAX_CLASS })),
        },
        ("class", None) => return Err(err.value(field("action"), action, K::MissingClass)),
        ("accept" | "drop", Some(c)) => {
            return Err(err.value(field("class"), c, K::ClassWithoutClassAction))
        }
        ("accept", None) => Action::Accept,
        ("drop", None) => Action::Drop,
        (t, _) => {
            let kind = match t.strip_prefix("class:") {
                Some(n) => K::ClassInAction {
                    class: n.trim().to_string(),
                },
                None => K::BadAction,
            };
            return Err(err.value(field("action"), action, kind));
        }
    };
    if let (Some(s), Some(d), Some(dv)) = (r.src, r.dst, dst) {
        if s.network().is_ipv4() != d.network().is_ipv4() {
            let kind = K::MixedFamilies { src: s.to_string() };
            return Err(err.value(field("dst"), dv, kind));
        }
    }
    Ok(r)
}

impl RuleFile {
    /// Parse the TOML form; `source` names the text in errors
    /// (`acl.toml:12: rule[3].dport '90-80': not a port ...`).
    pub fn parse_toml(
        text: &str,
        source: &str,
        limits: &RuleFileLimits,
    ) -> Result<RuleFile, RuleFileError> {
        if text.len() > limits.max_bytes {
            return Err(RuleFileError::new(
                source,
                0,
                "file",
                "",
                K::FileTooLarge {
                    bytes: text.len(),
                    max: limits.max_bytes,
                },
            ));
        }
        let err = Errors {
            source,
            lines: Lines::new(text),
        };
        let top: Top = toml::from_str(text).map_err(|e| {
            let line = e.span().map_or(0, |s| err.lines.of(s.start));
            let kind = K::Toml {
                message: e.message().trim().to_string(),
            };
            // A line-less TOML error (rare) still names the file.
            RuleFileError::new(source, line.max(1), "toml", "", kind)
        })?;
        let mut default = Action::Accept;
        for (key, v) in &top.others {
            match key.get_ref().as_str() {
                "default" => {
                    default = match v.get_ref() {
                        Value::String(t) => accept_or_drop(t),
                        _ => None,
                    }
                    .ok_or_else(|| err.value("default", v, K::BadDefault))?
                }
                other => {
                    let kind = unknown(other, TOP_SPELLINGS, false);
                    return Err(err.at(key.span().start, other, &shown(v.get_ref()), kind));
                }
            }
        }
        if top.rules.len() > limits.max_rules {
            return Err(RuleFileError::new(
                source,
                0,
                "rule",
                "",
                K::TooManyRules {
                    rules: top.rules.len(),
                    max: limits.max_rules,
                },
            ));
        }
        let rules = top
            .rules
            .iter()
            .enumerate()
            .map(|(i, t)| rule(i, t, limits, &err))
            .collect::<Result<_, _>>()?;
        Ok(RuleFile { default, rules })
    }
}

impl RuleSet {
    /// Parse the TOML form (docs/rules.md) into the IPv4 structures' rules, within
    /// [`RuleFileLimits::IPV4_STRUCTURES`]: an IPv6 prefix is refused, naming its rule; the
    /// file's `default` does not enter a [`RuleSet`] (its caller decides what no match means).
    pub fn from_toml_str(text: &str, source: &str) -> Result<RuleSet, RuleFileError> {
        let file = RuleFile::parse_toml(text, source, &RuleFileLimits::IPV4_STRUCTURES)?;
        // Every prefix is IPv4 (IPv6 ones were refused above), so no rule is left out.
        Ok(RuleSet::new(
            file.rules.iter().filter_map(FileRule::to_ipv4).collect(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILTER: RuleFileLimits = RuleFileLimits {
        max_bytes: 1 << 20,
        max_rules: 100,
        ipv6: true,
    };

    #[test]
    fn parses_fields_and_defaults() {
        let set = RuleSet::from_toml_str(
            r#"
default = "drop"

[[rule]]
src = "10.0.0.0/8"
dport = "80"
proto = "tcp"
action = "drop"

[[rule]]
dst = "192.0.2.7"
sport = "1024-65535"
proto = "0x11/0xFF"
action = "class"
class = 3

[[rule]]
action = "accept"
dport = 53
proto = 17
"#,
            "acl.toml",
        )
        .unwrap();
        assert_eq!(set.len(), 3);
        let r = set.rules[0];
        assert_eq!(r.src, Ipv4Prefix::new(0x0A00_0000, 8).unwrap());
        assert_eq!(r.dst, Ipv4Prefix::ANY);
        assert_eq!(r.dst_port, PortRange { low: 80, high: 80 });
        assert_eq!(r.src_port, ANY_PORT);
        assert_eq!((r.proto, r.action), (ProtoMatch::exact(6), Action::Drop));
        let r = set.rules[1];
        assert_eq!(r.dst, Ipv4Prefix::new(0xC000_0207, 32).unwrap());
        assert_eq!(
            (r.proto, r.action),
            (ProtoMatch::exact(17), Action::Class(3))
        );
        let r = set.rules[2];
        assert_eq!((r.proto, r.dst_port.low), (ProtoMatch::exact(17), 53));
    }

    /// The same text read with IPv6 allowed keeps the default, every rule's line and the
    /// prefixes of both families; "any" is the absent field.
    #[test]
    fn the_form_holds_ipv6_prefixes_defaults_and_lines() {
        let text = "default = \"drop\"\n[[rule]]\nsrc = \"2001:db8::/32\"\ndst = \"any\"\n\
                    action = \"accept\"\n[[rule]]\naction = \"drop\"\nsport = \"any\"\n";
        let f = RuleFile::parse_toml(text, "r.toml", &FILTER).unwrap();
        assert_eq!(f.default, Action::Drop);
        assert_eq!(f.rules.len(), 2);
        assert_eq!(f.rules[0].src, Some("2001:db8::/32".parse().unwrap()));
        assert_eq!((f.rules[0].dst, f.rules[0].line), (None, 5));
        assert_eq!((f.rules[1].sport, f.rules[1].line), (None, 7));
        assert_eq!(f.rules[0].to_ipv4(), None);
        assert_eq!(f.rules[1].to_ipv4(), Some(AclRule::any(Action::Drop)));
        let e = RuleSet::from_toml_str(text, "r.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("r.toml:3: rule[0].src '2001:db8::/32': an IPv6 prefix"),
            "{e}"
        );
    }

    /// Every spelling of the other rule forms is refused, naming the rule, the field and how
    /// this form spells it.
    #[test]
    fn other_spellings_are_refused_with_this_forms_spelling() {
        let e = |body: &str| {
            RuleFile::parse_toml(&format!("[[rule]]\n{body}\n"), "old.toml", &FILTER)
                .unwrap_err()
                .to_string()
        };
        for (body, want) in [
            (
                "action = \"drop\"\nsrc_port = \"1024-65535\"",
                "old.toml:3: rule[0].src_port '1024-65535': unknown field; this form spells it sport",
            ),
            (
                "action = \"drop\"\ndst_port = \"80\"",
                "old.toml:3: rule[0].dst_port '80': unknown field; this form spells it dport",
            ),
            (
                "action = \"drop\"\nprotocol = \"tcp\"",
                "old.toml:3: rule[0].protocol 'tcp': unknown field; this form spells it proto",
            ),
            (
                "action = \"class:3\"",
                "old.toml:2: rule[0].action 'class:3': this form spells it action = \"class\" \
                 and class = 3",
            ),
            (
                "action = \"drop\"\ncolour = 1",
                "old.toml:3: rule[0].colour '1': unknown field; a rule of this form has src, dst",
            ),
        ] {
            let got = e(body);
            assert!(got.starts_with(want), "{body:?}:\n{got}");
        }
        let top = RuleFile::parse_toml("[[rules]]\naction = \"drop\"\n", "t.toml", &FILTER)
            .unwrap_err()
            .to_string();
        assert!(
            top.starts_with("t.toml:1: rules '") && top.contains("this form spells it rule"),
            "{top}"
        );
    }

    #[test]
    fn errors_name_line_field_and_value() {
        let e = |t: &str| {
            RuleFile::parse_toml(t, "acl.toml", &FILTER)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            e("[[rule]]\naction = \"drop\"\n\n[[rule]]\ndport = \"90-80\"\naction = \"drop\"\n"),
            "acl.toml:5: rule[1].dport '90-80': not a port 0-65535 or a range low-high (or \
             'low : high') with low <= high"
        );
        assert_eq!(
            e("[[rule]]\nsrc = \"10.0.0.1/8\"\naction = \"drop\"\n"),
            "acl.toml:2: rule[0].src '10.0.0.1/8': bits set past the prefix length (the \
             network is 10.0.0.0/8)"
        );
        for (text, want) in [
            (
                "[[rule]]\nproto = \"sctpx\"\naction = \"drop\"",
                "acl.toml:2: rule[0].proto 'sctpx'",
            ),
            (
                "[[rule]]\nproto = 256\naction = \"drop\"",
                "acl.toml:2: rule[0].proto '256'",
            ),
            (
                "[[rule]]\naction = \"reject\"",
                "acl.toml:2: rule[0].action 'reject'",
            ),
            (
                "[[rule]]\naction = \"drop\"\nsport = 70000",
                "acl.toml:3: rule[0].sport '70000'",
            ),
            (
                "[[rule]]\naction = \"class\"\nclass = 70000\n",
                "acl.toml:3: rule[0].class '70000': a class is 0..65536",
            ),
            (
                "[[rule]]\naction = \"class\"\n",
                "acl.toml:2: rule[0].action 'class': action \"class\" needs `class = N`",
            ),
            (
                "[[rule]]\naction = \"drop\"\nclass = 1\n",
                "acl.toml:3: rule[0].class '1': only action \"class\" takes a class",
            ),
            (
                "default = \"maybe\"\n",
                "acl.toml:1: default 'maybe': expected",
            ),
            (
                "[[rule]]\nsrc = \"any\"\n",
                "acl.toml:1: rule[0].action '': missing",
            ),
            ("[[rule]\n", "acl.toml:1: toml '': "),
            (
                "[[rule]]\naction = \"drop\"\nsrc = \"10.0.0.0/8\"\ndst = \"2001:db8::/32\"\n",
                "acl.toml:4: rule[0].dst '2001:db8::/32': one family per rule: the source \
                 10.0.0.0/8 is IPv4",
            ),
        ] {
            let got = e(text);
            assert!(got.starts_with(want), "{text:?}:\n{got}");
        }
    }

    /// A field value megabytes long is cut in the message, which says how long it was.
    #[test]
    fn a_huge_field_value_is_cut_in_the_error() {
        let value = "x".repeat(1 << 20);
        let text = format!("[[rule]]\naction = \"drop\"\ndst = \"{value}\"\n");
        let e = RuleFile::parse_toml(
            &text,
            "h.toml",
            &RuleFileLimits {
                max_bytes: 2 << 20,
                ..FILTER
            },
        )
        .unwrap_err()
        .to_string();
        assert!(e.len() < 400, "{} bytes", e.len());
        assert!(e.contains(&format!("…' ({} bytes)", value.len())), "{e}");
        assert!(e.starts_with("h.toml:3: rule[0].dst 'xxxx"), "{e}");
    }

    #[test]
    fn bounds_are_the_callers() {
        let two = "[[rule]]\naction = \"drop\"\n".repeat(2);
        let one = RuleFileLimits {
            max_rules: 1,
            ..FILTER
        };
        let e = RuleFile::parse_toml(&two, "b.toml", &one).unwrap_err();
        assert_eq!(e.to_string(), "b.toml: 2 rules, more than the limit of 1");
        let tiny = RuleFileLimits {
            max_bytes: 10,
            ..FILTER
        };
        let e = RuleFile::parse_toml(&two, "b.toml", &tiny).unwrap_err();
        assert!(matches!(e.kind, K::FileTooLarge { max: 10, .. }), "{e}");
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
}

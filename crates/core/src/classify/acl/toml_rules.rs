//! Our TOML form of an ACL: an array of `[[rule]]` tables in priority order (the first rule
//! that matches wins). Every field but `action` is optional and defaults to "any":
//!
//! ```toml
//! [[rule]]
//! src = "10.0.0.0/8"        # IPv4 prefix or bare address (/32); "any"
//! dst = "192.0.2.0/24"
//! src_port = "1024-65535"   # a port, a range low-high, or "any"
//! dst_port = "80"
//! proto = "tcp"             # tcp, udp, icmp, any, a number 0-255, or value/mask 0x06/0xFF
//! action = "drop"           # accept, drop, or class:N (a queue discipline's class N)
//! ```
//!
//! Unknown keys are refused (a typo must not widen a rule). A prefix with bits set past its
//! length (`10.0.0.1/8`) is refused with the network it probably meant. Errors name the
//! source, the line, the field (`rule[3].dst_port`) and the value. Bounded by
//! [`MAX_FILE_BYTES`] and [`MAX_RULES`]. Cost: O(bytes).

use super::error::{RuleFileError, RuleFileErrorKind as K};
use super::{
    AclRule, Action, Ipv4Prefix, ProtoMatch, RuleSet, ANY_PORT, MAX_FILE_BYTES, MAX_RULES,
};
use crate::classify::PortRange;
use crate::wire::{PROTO_ICMP, PROTO_TCP, PROTO_UDP};
use serde::Deserialize;
use std::net::Ipv4Addr;
use toml::Spanned;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    #[serde(default)]
    rule: Vec<RuleText>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleText {
    src: Option<Spanned<String>>,
    dst: Option<Spanned<String>>,
    src_port: Option<Spanned<String>>,
    dst_port: Option<Spanned<String>>,
    proto: Option<Spanned<String>>,
    action: Spanned<String>,
}

fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

fn prefix(t: &str) -> Result<Ipv4Prefix, K> {
    let t = t.trim();
    if t.eq_ignore_ascii_case("any") {
        return Ok(Ipv4Prefix::ANY);
    }
    let (a, l) = t.split_once('/').unwrap_or((t, "32"));
    let addr: Ipv4Addr = a.trim().parse().map_err(|_| K::BadPrefix)?;
    let len: u8 = l
        .trim()
        .parse()
        .ok()
        .filter(|l| *l <= 32)
        .ok_or(K::BadPrefix)?;
    let p = Ipv4Prefix::truncating(u32::from(addr), len);
    if p.addr() != u32::from(addr) {
        return Err(K::HostBitsSet {
            network: p.to_string(),
        });
    }
    Ok(p)
}

fn port_range(t: &str) -> Result<PortRange, K> {
    if t.trim().eq_ignore_ascii_case("any") {
        return Ok(ANY_PORT);
    }
    PortRange::parse(t).map_err(|_| K::BadPortRange)
}

fn proto(t: &str) -> Result<ProtoMatch, K> {
    let t = t.trim().to_ascii_lowercase();
    let hex = |s: &str| {
        s.strip_prefix("0x")
            .and_then(|h| u8::from_str_radix(h, 16).ok())
    };
    Ok(match t.as_str() {
        "any" => ProtoMatch::ANY,
        "tcp" => ProtoMatch::exact(PROTO_TCP),
        "udp" => ProtoMatch::exact(PROTO_UDP),
        "icmp" => ProtoMatch::exact(PROTO_ICMP),
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

fn action(t: &str) -> Result<Action, K> {
    let t = t.trim().to_ascii_lowercase();
    match t.as_str() {
        "accept" => Ok(Action::Accept),
        "drop" => Ok(Action::Drop),
        other => other
            .strip_prefix("class:")
            .and_then(|n| n.trim().parse().ok())
            .map(Action::Class)
            .ok_or(K::BadAction),
    }
}

impl RuleSet {
    /// Parse our TOML form (module docs of `toml_rules`, and `docs/classify.md`); `source`
    /// names the text in errors (`acl.toml:12: rule[3].dst_port '90-80': not a port ...`).
    pub fn from_toml_str(text: &str, source: &str) -> Result<RuleSet, RuleFileError> {
        if text.len() > MAX_FILE_BYTES {
            return Err(RuleFileError::new(
                source,
                0,
                "file",
                "",
                K::FileTooLarge {
                    bytes: text.len(),
                    max: MAX_FILE_BYTES,
                },
            ));
        }
        let file: RuleFile = toml::from_str(text).map_err(|e| {
            let line = e.span().map_or(0, |s| line_of(text, s.start));
            RuleFileError::new(
                source,
                line,
                "toml",
                "",
                K::Toml {
                    message: e.message().to_string(),
                },
            )
        })?;
        if file.rule.len() > MAX_RULES {
            return Err(RuleFileError::new(
                source,
                0,
                "rule",
                "",
                K::TooManyLines { max: MAX_RULES },
            ));
        }
        let mut rules = Vec::with_capacity(file.rule.len());
        for (i, r) in file.rule.iter().enumerate() {
            let field = |name: &str, s: &Spanned<String>, kind| {
                RuleFileError::new(
                    source,
                    line_of(text, s.span().start),
                    format!("rule[{i}].{name}"),
                    s.get_ref(),
                    kind,
                )
            };
            fn get<T>(
                v: &Option<Spanned<String>>,
                default: T,
                parse: fn(&str) -> Result<T, K>,
            ) -> Result<T, (&Spanned<String>, K)> {
                match v {
                    None => Ok(default),
                    Some(s) => parse(s.get_ref()).map_err(|k| (s, k)),
                }
            }
            let rule = (|| {
                Ok(AclRule {
                    src: get(&r.src, Ipv4Prefix::ANY, prefix).map_err(|(s, k)| ("src", s, k))?,
                    dst: get(&r.dst, Ipv4Prefix::ANY, prefix).map_err(|(s, k)| ("dst", s, k))?,
                    src_port: get(&r.src_port, ANY_PORT, port_range)
                        .map_err(|(s, k)| ("src_port", s, k))?,
                    dst_port: get(&r.dst_port, ANY_PORT, port_range)
                        .map_err(|(s, k)| ("dst_port", s, k))?,
                    proto: get(&r.proto, ProtoMatch::ANY, proto)
                        .map_err(|(s, k)| ("proto", s, k))?,
                    action: action(r.action.get_ref()).map_err(|k| ("action", &r.action, k))?,
                })
            })()
            .map_err(|(name, s, kind)| field(name, s, kind))?;
            rules.push(rule);
        }
        Ok(RuleSet { rules })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_fields_and_defaults() {
        let set = RuleSet::from_toml_str(
            r#"
[[rule]]
src = "10.0.0.0/8"
dst_port = "80"
proto = "tcp"
action = "drop"

[[rule]]
dst = "192.0.2.7"
src_port = "1024-65535"
proto = "0x11/0xFF"
action = "class:3"

[[rule]]
action = "accept"
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
        assert_eq!(set.rules[2], AclRule::any(Action::Accept));
    }

    #[test]
    fn errors_name_line_field_and_value() {
        let e = |t: &str| {
            RuleSet::from_toml_str(t, "acl.toml")
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            e("[[rule]]\naction = \"drop\"\n\n[[rule]]\ndst_port = \"90-80\"\naction = \"drop\"\n"),
            "acl.toml:5: rule[1].dst_port '90-80': not a port 0-65535 or a range low-high (or \
             'low : high') with low <= high"
        );
        assert_eq!(
            e("[[rule]]\nsrc = \"10.0.0.1/8\"\naction = \"drop\"\n"),
            "acl.toml:2: rule[0].src '10.0.0.1/8': bits set past the prefix length (the \
             network is 10.0.0.0/8)"
        );
        assert!(e("[[rule]]\nproto = \"sctpx\"\naction = \"drop\"")
            .starts_with("acl.toml:2: rule[0].proto 'sctpx'"));
        assert!(
            e("[[rule]]\naction = \"reject\"").starts_with("acl.toml:2: rule[0].action 'reject'")
        );
        let unknown = e("[[rule]]\nport = \"80\"\naction = \"drop\"\n");
        assert!(unknown.starts_with("acl.toml:2: toml"), "{unknown}");
        assert!(unknown.contains("unknown field `port`"), "{unknown}");
        let missing = e("[[rule]]\nsrc = \"any\"\n");
        assert!(missing.contains("missing field `action`"), "{missing}");
    }
}

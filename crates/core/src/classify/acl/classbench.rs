//! ClassBench text formats (Taylor, Turner, "ClassBench: A Packet Classification Benchmark",
//! INFOCOM 2005, §IV and the tools' README): the filter format, one rule per line, highest
//! priority first,
//!
//! ```text
//! @192.168.0.0/16  10.1.0.0/24  0 : 65535  80 : 80  0x06/0xFF  0x0000/0x0000
//! ```
//!
//! (source prefix with a leading `@`, destination prefix, source port range `low : high`,
//! destination port range, protocol `value/mask` in hex, and optional TCP flags `value/mask`
//! that newer files carry and we ignore), and the header trace format: one packet per line,
//! decimal `src dst src_port dst_port proto` (addresses as 32-bit integers), any further
//! columns ignored.
//!
//! Bits past a prefix's length are cleared (as the ClassBench tools do). Blank lines and lines
//! starting with `#` are skipped. ClassBench rules carry no action: [`RuleSet::parse_classbench`]
//! gives every rule [`Action::Accept`], [`RuleFile::from_classbench`] the caller's action (the
//! TOML form gives one per rule). Sizes are bounded: [`MAX_FILE_BYTES`], [`MAX_LINE_BYTES`],
//! [`MAX_RULES`] (or the caller's [`RuleFileLimits`], and the caller's packet count for
//! traces). Cost: O(bytes).

use super::error::{RuleFileError, RuleFileErrorKind as K};
use super::toml_rules::{FileRule, RuleFile, RuleFileLimits};
use super::{
    AclRule, Action, FiveTuple, Ipv4Prefix, ProtoMatch, RuleSet, MAX_FILE_BYTES, MAX_LINE_BYTES,
    MAX_RULES,
};
use crate::classify::{Cidr, PortRange};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};

/// The lines worth parsing: (1-based number, text), bounded in size (`max_bytes`) and count.
fn lines<'a>(
    text: &'a str,
    source: &'a str,
    max_bytes: usize,
) -> Result<impl Iterator<Item = (usize, &'a str)> + 'a, RuleFileError> {
    if text.len() > max_bytes {
        return Err(RuleFileError::new(
            source,
            0,
            "file",
            "",
            K::FileTooLarge {
                bytes: text.len(),
                max: max_bytes,
            },
        ));
    }
    Ok(text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#')))
}

fn check_line(
    source: &str,
    n: usize,
    line: &str,
    count: usize,
    max: usize,
) -> Result<(), RuleFileError> {
    if line.len() > MAX_LINE_BYTES {
        let head: String = line.chars().take(40).collect();
        return Err(RuleFileError::new(
            source,
            n,
            "line",
            &head,
            K::LineTooLong {
                bytes: line.len(),
                max: MAX_LINE_BYTES,
            },
        ));
    }
    if count >= max {
        return Err(RuleFileError::new(
            source,
            n,
            "line",
            "",
            K::TooManyLines { max },
        ));
    }
    Ok(())
}

fn parse_prefix(text: &str) -> Option<Ipv4Prefix> {
    let (a, l) = text.split_once('/')?;
    let addr: Ipv4Addr = a.parse().ok()?;
    let len: u8 = l.parse().ok().filter(|l| *l <= 32)?;
    Some(Ipv4Prefix::truncating(u32::from(addr), len))
}

fn parse_hex_u8(t: &str) -> Option<u8> {
    let h = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X"))?;
    u8::from_str_radix(h, 16).ok()
}

fn parse_hex_pair(text: &str, max: u32) -> Option<(u32, u32)> {
    let (v, m) = text.split_once('/')?;
    let hex = |t: &str| {
        let h = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X"))?;
        u32::from_str_radix(h, 16).ok().filter(|x| *x <= max)
    };
    Some((hex(v)?, hex(m)?))
}

fn parse_rule_line(source: &str, n: usize, line: &str) -> Result<AclRule, RuleFileError> {
    let err = |field: &str, value: &str, kind| RuleFileError::new(source, n, field, value, kind);
    let body = line.strip_prefix('@').unwrap_or(line);
    let spaced = body.replace(':', " : ");
    let mut tok = spaced.split_whitespace();
    let mut next = |field: &str| tok.next().ok_or_else(|| err(field, "", K::Missing));
    let src_t = next("src")?;
    let src = parse_prefix(src_t).ok_or_else(|| err("src", src_t, K::BadPrefix))?;
    let dst_t = next("dst")?;
    let dst = parse_prefix(dst_t).ok_or_else(|| err("dst", dst_t, K::BadPrefix))?;
    let mut range = |field: &str| -> Result<PortRange, RuleFileError> {
        let lo = next(field)?;
        let colon = next(field)?;
        let hi = next(field)?;
        let text = format!("{lo} {colon} {hi}");
        match (lo.parse::<u16>(), colon, hi.parse::<u16>()) {
            (Ok(low), ":", Ok(high)) if low <= high => Ok(PortRange { low, high }),
            _ => Err(err(field, &text, K::BadPortRange)),
        }
    };
    let src_port = range("src_port")?;
    let dst_port = range("dst_port")?;
    let proto_t = next("proto")?;
    let proto = proto_t
        .split_once('/')
        .and_then(|(v, m)| Some((parse_hex_u8(v)?, parse_hex_u8(m)?)))
        .map(|(v, m)| ProtoMatch {
            value: v & m,
            mask: m,
        })
        .ok_or_else(|| err("proto", proto_t, K::BadClassBenchProtocol))?;
    if let Ok(flags) = next("flags") {
        if parse_hex_pair(flags, 0xffff).is_none() {
            return Err(err("flags", flags, K::Unexpected));
        }
    }
    if let Ok(extra) = next("end of line") {
        return Err(err("end of line", extra, K::Unexpected));
    }
    Ok(AclRule {
        src,
        dst,
        src_port,
        dst_port,
        proto,
        action: Action::Accept,
    })
}

/// The rules of a ClassBench filter file with their lines, within `max_bytes` and `max_rules`.
fn classbench_rules(
    text: &str,
    source: &str,
    max_bytes: usize,
    max_rules: usize,
) -> Result<Vec<(usize, AclRule)>, RuleFileError> {
    let mut rules = Vec::new();
    for (n, line) in lines(text, source, max_bytes)? {
        check_line(source, n, line, rules.len(), max_rules)?;
        rules.push((n, parse_rule_line(source, n, line)?));
    }
    Ok(rules)
}

/// An IPv4 prefix as a [`Cidr`] (its bits past the length are clear, so this cannot fail).
fn v4_cidr(p: Ipv4Prefix) -> Option<Cidr> {
    Cidr::new(IpAddr::V4(Ipv4Addr::from(p.addr())), p.prefix_len()).ok()
}

impl RuleSet {
    /// Parse a ClassBench filter file; `source` names it in errors
    /// (`acl1:17: dst_port '90 : 80': not a port ...`).
    pub fn parse_classbench(text: &str, source: &str) -> Result<RuleSet, RuleFileError> {
        let rules = classbench_rules(text, source, MAX_FILE_BYTES, MAX_RULES)?;
        Ok(RuleSet {
            rules: rules.into_iter().map(|(_, r)| r).collect(),
        })
    }

    /// The rules in ClassBench filter format (actions are not part of it), one per line, so
    /// that `parse_classbench` reads back the same rules with [`Action::Accept`].
    pub fn to_classbench(&self) -> String {
        let mut out = String::with_capacity(self.rules.len() * 80);
        for r in &self.rules {
            let _ = writeln!(
                out,
                "@{}\t{}\t{} : {}\t{} : {}\t0x{:02X}/0x{:02X}\t0x0000/0x0000",
                r.src,
                r.dst,
                r.src_port.low,
                r.src_port.high,
                r.dst_port.low,
                r.dst_port.high,
                r.proto.value,
                r.proto.mask
            );
        }
        out
    }
}

impl RuleFile {
    /// A ClassBench filter file as a rule file: every rule gets `action`, a packet none
    /// matches gets `default`, and each rule keeps its line. The rules are IPv4 (the format's
    /// addresses are), so an IPv6 packet meets none of them. Within `limits` (bytes, rules).
    pub fn from_classbench(
        text: &str,
        source: &str,
        limits: &RuleFileLimits,
        action: Action,
        default: Action,
    ) -> Result<RuleFile, RuleFileError> {
        let parsed = classbench_rules(text, source, limits.max_bytes, limits.max_rules)?;
        let mut rules = Vec::with_capacity(parsed.len());
        for (line, r) in parsed {
            let prefix = |p: Ipv4Prefix, field: &str| {
                v4_cidr(p).ok_or_else(|| {
                    RuleFileError::new(source, line, field, &p.to_string(), K::BadPrefix)
                })
            };
            rules.push(FileRule {
                src: Some(prefix(r.src, "src")?),
                dst: Some(prefix(r.dst, "dst")?),
                sport: Some(r.src_port),
                dport: Some(r.dst_port),
                proto: r.proto,
                action,
                line,
            });
        }
        Ok(RuleFile { default, rules })
    }
}

/// Parse a ClassBench header trace (at most `max_packets` lines).
pub fn parse_trace(
    text: &str,
    source: &str,
    max_packets: usize,
) -> Result<Vec<FiveTuple>, RuleFileError> {
    const FIELDS: [(&str, u64); 5] = [
        ("src", u32::MAX as u64),
        ("dst", u32::MAX as u64),
        ("src_port", u16::MAX as u64),
        ("dst_port", u16::MAX as u64),
        ("proto", u8::MAX as u64),
    ];
    let mut out = Vec::new();
    for (n, line) in lines(text, source, MAX_FILE_BYTES)? {
        check_line(source, n, line, out.len(), max_packets)?;
        let mut tok = line.split_whitespace();
        let mut v = [0u64; 5];
        for (slot, (field, max)) in v.iter_mut().zip(FIELDS) {
            let t = tok
                .next()
                .ok_or_else(|| RuleFileError::new(source, n, field, "", K::Missing))?;
            *slot = t
                .parse::<u64>()
                .ok()
                .filter(|x| *x <= max)
                .ok_or_else(|| RuleFileError::new(source, n, field, t, K::BadNumber))?;
        }
        out.push(FiveTuple {
            src: v[0] as u32,
            dst: v[1] as u32,
            src_port: v[2] as u16,
            dst_port: v[3] as u16,
            proto: v[4] as u8,
        });
    }
    Ok(out)
}

/// Packets in the ClassBench trace format, one per line.
pub fn format_trace(packets: &[FiveTuple]) -> String {
    let mut out = String::with_capacity(packets.len() * 40);
    for k in packets {
        let _ = writeln!(
            out,
            "{}\t{}\t{}\t{}\t{}",
            k.src, k.dst, k.src_port, k.dst_port, k.proto
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
# two rules
@192.168.0.0/16\t10.1.0.0/24\t0 : 65535\t80 : 80\t0x06/0xFF\t0x0000/0x0000
@0.0.0.0/0 10.1.2.3/32 1024:65535 0 : 1023 0x00/0x00

";

    #[test]
    fn parses_sample_and_round_trips() {
        let set = RuleSet::parse_classbench(SAMPLE, "sample").unwrap();
        assert_eq!(set.len(), 2);
        let r = set.rules[0];
        assert_eq!(r.src, Ipv4Prefix::new(0xC0A8_0000, 16).unwrap());
        assert_eq!(r.dst, Ipv4Prefix::new(0x0A01_0000, 24).unwrap());
        assert_eq!(r.dst_port, PortRange { low: 80, high: 80 });
        assert_eq!(r.proto, ProtoMatch::exact(6));
        let r = set.rules[1];
        assert_eq!(
            r.src_port,
            PortRange {
                low: 1024,
                high: 65535
            }
        );
        assert_eq!(r.proto, ProtoMatch::ANY);
        let again = RuleSet::parse_classbench(&set.to_classbench(), "again").unwrap();
        assert_eq!(again, set);
        // As a rule file: the caller's action and default, each rule's line, IPv4 prefixes.
        let limits = RuleFileLimits {
            max_bytes: 1 << 20,
            max_rules: 2,
            ipv6: true,
        };
        let f = RuleFile::from_classbench(SAMPLE, "sample", &limits, Action::Drop, Action::Accept)
            .unwrap();
        assert_eq!((f.default, f.rules.len()), (Action::Accept, 2));
        assert_eq!((f.rules[0].line, f.rules[1].line), (2, 3));
        assert_eq!(f.rules[0].src, Some("192.168.0.0/16".parse().unwrap()));
        let back: Vec<AclRule> = f.rules.iter().filter_map(FileRule::to_ipv4).collect();
        let want: Vec<AclRule> = set
            .rules
            .iter()
            .map(|r| AclRule {
                action: Action::Drop,
                ..*r
            })
            .collect();
        assert_eq!(back, want);
        let one = RuleFileLimits {
            max_rules: 1,
            ..limits
        };
        let e = RuleFile::from_classbench(SAMPLE, "sample", &one, Action::Drop, Action::Accept)
            .unwrap_err();
        assert_eq!((e.line, &e.kind), (3, &K::TooManyLines { max: 1 }));
        // Bits past the length are cleared.
        let set =
            RuleSet::parse_classbench("@10.1.2.3/8 0.0.0.0/0 0 : 0 0 : 0 0x11/0xFF", "x").unwrap();
        assert_eq!(set.rules[0].src.addr(), 0x0A00_0000);
    }

    #[test]
    fn errors_name_source_line_field_and_value() {
        let e = |text: &str| {
            RuleFileError::to_string(&RuleSet::parse_classbench(text, "f.txt").unwrap_err())
        };
        let ok = "@1.0.0.0/8 2.0.0.0/8 0 : 65535 80 : 80 0x06/0xFF\n";
        assert_eq!(
            e(&format!(
                "{ok}@1.0.0.0/8 2.0.0.0/8 0 : 65535 90 : 80 0x06/0xFF"
            )),
            "f.txt:2: dst_port '90 : 80': not a port 0-65535 or a range low-high (or \
             'low : high') with low <= high"
        );
        assert!(e("@1.0.0.0/33 2.0.0.0/8").starts_with("f.txt:1: src '1.0.0.0/33': not an IPv4"));
        assert!(e("@1.0.0.0/8 2.0.0.300/8").starts_with("f.txt:1: dst '2.0.0.300/8'"));
        assert!(e("@1.0.0.0/8 2.0.0.0/8 0 : 65535").starts_with("f.txt:1: dst_port '': missing"));
        assert!(e("@1.0.0.0/8 2.0.0.0/8 0 : 65535 0 : 1 tcp").starts_with("f.txt:1: proto 'tcp'"));
        // The format's protocol is value/mask in hex; the message says so, not "0-255".
        assert_eq!(
            e("@1.0.0.0/8 2.0.0.0/8 0 : 65535 0 : 1 6"),
            "f.txt:1: proto '6': not a ClassBench protocol: value/mask in hex, 0x06/0xFF for \
             TCP, 0x00/0x00 for any"
        );
        assert!(
            e("@1.0.0.0/8 2.0.0.0/8 0 : 65535 0 : 1 0x06/0xFF 0x0/0x0 x")
                .starts_with("f.txt:1: end of line 'x'")
        );
        let long = format!("@{}", "1".repeat(MAX_LINE_BYTES + 1));
        assert!(
            e(&long).contains("more than the limit of 1024"),
            "{}",
            e(&long)
        );
    }

    #[test]
    fn trace_round_trips_and_is_bounded() {
        let ks = vec![
            FiveTuple {
                src: u32::MAX,
                dst: 7,
                src_port: 1,
                dst_port: 65535,
                proto: 6,
            };
            3
        ];
        let text = format_trace(&ks);
        assert_eq!(parse_trace(&text, "t", 3).unwrap(), ks);
        let e = parse_trace(&text, "t", 2).unwrap_err();
        assert_eq!((e.line, &e.kind), (3, &K::TooManyLines { max: 2 }));
        let e = parse_trace("1 2 3 70000 6 0", "t", 9).unwrap_err();
        assert_eq!(
            e.to_string(),
            "t:1: dst_port '70000': not a decimal number in range"
        );
        // Extra columns (ClassBench's rule number) are ignored.
        assert_eq!(parse_trace("1 2 3 4 5 99", "t", 9).unwrap()[0].proto, 5);
    }
}

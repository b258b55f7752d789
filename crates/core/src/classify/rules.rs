//! Header-field classifiers over raw IP packets: [`PureAckClassifier`] (P3: TCP pure ACK →
//! class 0, anything else → class 1, the `u32` filter of the paper's HTB setup) and
//! [`RuleClassifier`] — an ordered list of rules on protocol, source/destination prefix,
//! source/destination port range and "is a pure ACK"; the first rule that matches gives the
//! class, otherwise the default class (the semantics of a `tc filter` list by priority or
//! an iptables chain).
//!
//! Cost: PureAck O(header bytes); rules O(rules × header bytes) — the packet is parsed once,
//! then each rule is a few comparisons.

use super::cidr::Cidr;
use super::{ClassId, Classifier, ClassifierConfigError, PortRangeError};
use crate::qdisc::ack::{ACK_CLASS, OTHER_CLASS};
use crate::wire::{ack_info, parse_ip, ports, PROTO_ICMP, PROTO_ICMPV6, PROTO_TCP, PROTO_UDP};
use serde::{Deserialize, Serialize};
use std::net::IpAddr;

/// P3's classifier: pure TCP ACK (ACK set, no payload, no SYN/FIN/RST, not a fragment) →
/// [`ACK_CLASS`], everything else (including what does not parse) → [`OTHER_CLASS`].
#[derive(Debug, Clone, Copy, Default)]
pub struct PureAckClassifier;

impl Classifier<[u8]> for PureAckClassifier {
    fn classify(&self, ip_packet: &[u8]) -> ClassId {
        if crate::wire::is_tcp_pure_ack(ip_packet) {
            ACK_CLASS
        } else {
            OTHER_CLASS
        }
    }
}

/// An inclusive port range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortRange {
    pub low: u16,
    pub high: u16,
}

impl PortRange {
    /// `"80"` or `"1024-65535"`.
    pub fn parse(text: &str) -> Result<Self, PortRangeError> {
        let bad = || PortRangeError {
            text: text.to_string(),
        };
        let t = text.trim();
        let (lo, hi) = match t.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (t, t),
        };
        let low: u16 = lo.parse().map_err(|_| bad())?;
        let high: u16 = hi.parse().map_err(|_| bad())?;
        if low > high {
            return Err(bad());
        }
        Ok(Self { low, high })
    }
    pub fn contains(&self, port: u16) -> bool {
        (self.low..=self.high).contains(&port)
    }
}

/// One rule; `None` fields match anything. Port conditions match only TCP/UDP packets that
/// carry ports (first fragments).
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub protocol: Option<u8>,
    pub src: Option<Cidr>,
    pub dst: Option<Cidr>,
    pub src_ports: Option<PortRange>,
    pub dst_ports: Option<PortRange>,
    pub tcp_pure_ack: Option<bool>,
    pub class: ClassId,
}

/// Ordered rules, first match wins, else `default_class`.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleClassifier {
    pub rules: Vec<Rule>,
    pub default_class: ClassId,
}

/// Facts of a packet the rules look at, extracted once.
struct Facts {
    protocol: u8,
    src: IpAddr,
    dst: IpAddr,
    ports: Option<(u16, u16)>,
    pure_ack: bool,
}

impl Rule {
    fn matches(&self, f: &Facts) -> bool {
        let port_ok = |want: Option<PortRange>, pick: fn((u16, u16)) -> u16| match want {
            None => true,
            Some(r) => f.ports.is_some_and(|p| r.contains(pick(p))),
        };
        self.protocol.is_none_or(|p| p == f.protocol)
            && self.src.is_none_or(|c| c.contains(f.src))
            && self.dst.is_none_or(|c| c.contains(f.dst))
            && port_ok(self.src_ports, |p| p.0)
            && port_ok(self.dst_ports, |p| p.1)
            && self.tcp_pure_ack.is_none_or(|want| want == f.pure_ack)
    }
}

impl RuleClassifier {
    /// Index of the first rule matching `ip_packet`, if any (None also for unparseable input).
    pub fn matching_rule(&self, ip_packet: &[u8]) -> Option<usize> {
        let ip = parse_ip(ip_packet).ok()?;
        let facts = Facts {
            protocol: ip.protocol,
            src: ip.src,
            dst: ip.dst,
            ports: ports(ip_packet),
            pure_ack: ack_info(ip_packet).is_some_and(|a| a.pure),
        };
        self.rules.iter().position(|r| r.matches(&facts))
    }
}

impl Classifier<[u8]> for RuleClassifier {
    fn classify(&self, ip_packet: &[u8]) -> ClassId {
        self.matching_rule(ip_packet)
            .map_or(self.default_class, |i| self.rules[i].class)
    }
}

/// Serde form of a [`Rule`]: every condition optional, as text.
/// ```toml
/// [[rules]]
/// protocol = "tcp"          # tcp, udp, icmp, icmpv6 or a number 0-255
/// dst = "10.0.0.0/8"        # CIDR or bare address
/// dst_port = "80"           # port or range "1024-65535"
/// class = 0
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    #[serde(default)]
    pub protocol: Option<String>,
    #[serde(default)]
    pub src: Option<String>,
    #[serde(default)]
    pub dst: Option<String>,
    #[serde(default)]
    pub src_port: Option<String>,
    #[serde(default)]
    pub dst_port: Option<String>,
    #[serde(default)]
    pub tcp_pure_ack: Option<bool>,
    pub class: ClassId,
}

/// Serde form of a [`RuleClassifier`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleClassifierConfig {
    pub default_class: ClassId,
    #[serde(default)]
    pub rules: Vec<RuleConfig>,
}

/// A protocol name or number; `None` if it is neither.
fn parse_protocol(text: &str) -> Option<u8> {
    match text.trim().to_ascii_lowercase().as_str() {
        "tcp" => Some(PROTO_TCP),
        "udp" => Some(PROTO_UDP),
        "icmp" => Some(PROTO_ICMP),
        "icmpv6" => Some(PROTO_ICMPV6),
        other => other.parse::<u8>().ok(),
    }
}

impl RuleClassifierConfig {
    /// Build; `Err` names the rule and field, e.g. `rules[1].dst_port: '90-80' is not ...`.
    pub fn build(&self) -> Result<RuleClassifier, ClassifierConfigError> {
        type Built<T> = Result<Option<T>, ClassifierConfigError>;
        let mut rules = Vec::with_capacity(self.rules.len());
        for (i, r) in self.rules.iter().enumerate() {
            let field = |name: &str| format!("rules[{i}].{name}");
            let cidr = |name: &str, t: &Option<String>| -> Built<Cidr> {
                t.as_deref()
                    .map(|s| {
                        s.parse::<Cidr>()
                            .map_err(|error| ClassifierConfigError::Cidr {
                                field: field(name),
                                error,
                            })
                    })
                    .transpose()
            };
            let range = |name: &str, t: &Option<String>| -> Built<PortRange> {
                t.as_deref()
                    .map(|s| {
                        PortRange::parse(s).map_err(|error| ClassifierConfigError::PortRange {
                            field: field(name),
                            error,
                        })
                    })
                    .transpose()
            };
            rules.push(Rule {
                protocol: r
                    .protocol
                    .as_deref()
                    .map(|p| {
                        parse_protocol(p).ok_or_else(|| ClassifierConfigError::Protocol {
                            field: field("protocol"),
                            text: p.to_string(),
                        })
                    })
                    .transpose()?,
                src: cidr("src", &r.src)?,
                dst: cidr("dst", &r.dst)?,
                src_ports: range("src_port", &r.src_port)?,
                dst_ports: range("dst_port", &r.dst_port)?,
                tcp_pure_ack: r.tcp_pure_ack,
                class: r.class,
            });
        }
        Ok(RuleClassifier {
            rules,
            default_class: self.default_class,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qdisc::ack::AckSeparation;
    use crate::qdisc::{DropReason, Packet, Qdisc, Verdict};
    use crate::wire::test_packets::{ipv4, tcp_segment};
    use crate::wire::AckInfo;

    const ACK: u8 = 0x10;

    fn pure_ack(ack: u32) -> Vec<u8> {
        ipv4(
            [10, 0, 0, 2],
            [10, 0, 0, 1],
            6,
            &tcp_segment(ACK, ack, 500, &[], 0),
        )
    }
    fn data_segment() -> Vec<u8> {
        ipv4(
            [10, 0, 0, 1],
            [10, 0, 0, 2],
            6,
            &tcp_segment(ACK | 0x08, 1, 500, &[], 1448),
        )
    }

    #[test]
    fn pure_ack_classifier_splits_acks_from_data() {
        assert_eq!(
            PureAckClassifier.classify(pure_ack(5).as_slice()),
            ACK_CLASS
        );
        assert_eq!(
            PureAckClassifier.classify(data_segment().as_slice()),
            OTHER_CLASS
        );
        let udp = ipv4([1, 1, 1, 1], [2, 2, 2, 2], 17, &[0, 53, 0, 53, 0, 8, 0, 0]);
        assert_eq!(PureAckClassifier.classify(udp.as_slice()), OTHER_CLASS);
        assert_eq!(PureAckClassifier.classify(&[][..]), OTHER_CLASS);
    }

    /// A raw packet as an engine would hold it: the ACK filter reads the wire bytes.
    #[derive(Debug, PartialEq)]
    struct Raw(Vec<u8>);
    impl Packet for Raw {
        fn len(&self) -> u32 {
            self.0.len() as u32
        }
        fn ack_info(&self) -> Option<AckInfo> {
            crate::wire::ack_info(&self.0)
        }
    }

    /// End to end: classifier + ACK separation with the filter, on real header bytes.
    #[test]
    fn pure_ack_classifier_feeds_ack_separation_filter() {
        let band = crate::qdisc::prio::BandConfig::with_limits(100, u64::MAX);
        let mut q = AckSeparation::new(&band, &band, true, None).unwrap();
        let mut evicted = 0;
        for pkt in [
            data_segment(),
            pure_ack(1000),
            pure_ack(2000),
            data_segment(),
            pure_ack(3000),
        ] {
            let class = PureAckClassifier.classify(pkt.as_slice());
            match q.enqueue(class, Raw(pkt), 0) {
                Verdict::Queued => {}
                Verdict::QueuedEvicting { reason, .. } => {
                    assert_eq!(reason, DropReason::AckFiltered);
                    evicted += 1;
                }
                v => panic!("unexpected {v:?}"),
            }
        }
        assert_eq!(evicted, 2);
        let first = q.dequeue(0).unwrap();
        assert_eq!(crate::wire::ack_info(&first.0).unwrap().ack, 3000);
        assert_eq!(q.len(), 2);
        q.stats().check_identities().unwrap();
    }

    #[test]
    fn rule_classifier_first_match_wins() {
        let cfg: RuleClassifierConfig = serde_json::from_str(
            r#"{
                "default_class": 9,
                "rules": [
                    {"protocol": "tcp", "tcp_pure_ack": true, "class": 0},
                    {"protocol": "udp", "dst_port": "53", "class": 1},
                    {"src": "10.0.0.0/24", "dst_port": "1000-2000", "class": 2},
                    {"src": "10.0.0.0/8", "class": 3}
                ]
            }"#,
        )
        .unwrap();
        let rc = cfg.build().unwrap();
        assert_eq!(rc.classify(pure_ack(1).as_slice()), 0);
        let dns = ipv4(
            [192, 0, 2, 1],
            [192, 0, 2, 2],
            17,
            &[0x30, 0x39, 0, 53, 0, 8, 0, 0],
        );
        assert_eq!(rc.classify(dns.as_slice()), 1);
        // TCP data from 10.0.0.1 to port 80: rule 2's port range misses, rule 3 matches.
        assert_eq!(rc.classify(data_segment().as_slice()), 3);
        let mut to_1500 = tcp_segment(ACK | 0x08, 1, 500, &[], 10);
        to_1500[2..4].copy_from_slice(&1500u16.to_be_bytes());
        let p = ipv4([10, 0, 0, 1], [10, 0, 0, 2], 6, &to_1500);
        assert_eq!(rc.classify(p.as_slice()), 2);
        assert_eq!(rc.matching_rule(p.as_slice()), Some(2));
        // ICMP has no ports: port rules never match it.
        let icmp = ipv4([10, 0, 0, 1], [10, 0, 0, 2], 1, &[8, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(rc.classify(icmp.as_slice()), 3);
        let other = ipv4([172, 16, 0, 1], [10, 0, 0, 2], 1, &[8, 0, 0, 0]);
        assert_eq!(rc.classify(other.as_slice()), 9);
        assert_eq!(rc.classify(&[1u8, 2, 3][..]), 9);
    }

    #[test]
    fn rule_config_errors_name_rule_and_field() {
        let build = |json: &str| {
            serde_json::from_str::<RuleClassifierConfig>(json)
                .unwrap()
                .build()
                .unwrap_err()
        };
        assert_eq!(
            build(r#"{"default_class":0,"rules":[{"class":1},{"dst_port":"90-80","class":1}]}"#),
            ClassifierConfigError::PortRange {
                field: "rules[1].dst_port".into(),
                error: PortRangeError {
                    text: "90-80".into()
                }
            }
        );
        let e = build(r#"{"default_class":0,"rules":[{"src":"10.0.0.1/8","class":1}]}"#);
        assert!(
            matches!(&e, ClassifierConfigError::Cidr { field, error: crate::classify::CidrError::HostBitsSet { prefix_len: 8, .. } } if field == "rules[0].src"),
            "{e:?}"
        );
        assert_eq!(
            build(r#"{"default_class":0,"rules":[{"protocol":"sctpx","class":1}]}"#),
            ClassifierConfigError::Protocol {
                field: "rules[0].protocol".into(),
                text: "sctpx".into()
            }
        );
        let serde_err = |json: &str| {
            serde_json::from_str::<RuleClassifierConfig>(json)
                .unwrap_err()
                .to_string()
        };
        assert!(
            serde_err(r#"{"default_class":0,"rules":[{"port":"80","class":1}]}"#)
                .contains("unknown field `port`")
        );
        assert!(
            serde_err(r#"{"default_class":0,"rules":[{"dst":"10.0.0.0/8"}]}"#)
                .contains("missing field `class`")
        );
    }
}

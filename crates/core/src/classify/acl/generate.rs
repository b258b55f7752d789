//! Synthetic ACLs and packet traces following the method of ClassBench (Taylor, Turner,
//! "ClassBench: A Packet Classification Benchmark", INFOCOM 2005, §III–§IV; IEEE/ACM ToN 15(3)
//! 2007): a rule is drawn field by field from a profile of distributions —
//! - the protocol (TCP, UDP, ICMP or any);
//! - a port-range class per port field, the paper's five: WC (wildcard `0:65535`), HI
//!   (`1024:65535`), LO (`0:1023`), AR (an arbitrary range) and EM (an exact port), drawn
//!   only for TCP and UDP (other protocols get wildcards); as in the paper's seeds, AR
//!   ranges come from a short list (drawn per rule set) and EM ports mostly from well-known
//!   services, so the same ranges recur;
//! - a prefix-length *pair* (source and destination lengths drawn jointly, the paper's
//!   prefix-pair distribution), moved a few bits at times;
//! - addresses under a small skewed pool of base networks, so prefixes nest and share their
//!   leading bits (the paper models this with address trees and their branching statistics).
//!
//! The profiles `acl`, `fw` and `ipc` are named after the paper's seed types (access control
//! lists, firewalls, IP chains). Their numbers are our own choices, shaped after the seeds'
//! character the paper describes (ACLs: mostly exact destination ports and specific
//! destinations; firewalls: many wildcard addresses; IP chains: a mix, many specific pairs);
//! they are not copied from ClassBench's seed files, and the generator is not ClassBench's
//! code (its "scope" and "smoothing" knobs are not modelled).
//!
//! The trace (ClassBench's trace generator, §V of the paper, without its Pareto locality):
//! `hit_percent` of the headers are drawn inside a rule chosen uniformly (random bits under
//! its prefixes, ports in its ranges, TCP or UDP for a wildcard protocol), the rest are
//! random. A header drawn from rule i matches rule i or an earlier one.
//!
//! Deterministic: the same profile, size and seed give the same rules on every platform
//! ([`crate::rng::SplitMix64`]). Cost: O(rules) and O(packets).

use super::{AclRule, Action, FiveTuple, Ipv4Prefix, ProtoMatch, RuleSet, ANY_PORT};
use crate::classify::PortRange;
use crate::rng::SplitMix64;
use crate::wire::{PROTO_ICMP, PROTO_TCP, PROTO_UDP};
use std::fmt;
use std::str::FromStr;

/// The most rules or packets one call generates.
pub const MAX_GENERATED: usize = 10_000_000;

/// Which kind of rule set to imitate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Profile {
    Acl,
    Fw,
    Ipc,
}

impl Profile {
    pub const ALL: [Profile; 3] = [Profile::Acl, Profile::Fw, Profile::Ipc];
    pub fn name(self) -> &'static str {
        match self {
            Profile::Acl => "acl",
            Profile::Fw => "fw",
            Profile::Ipc => "ipc",
        }
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Not `acl`, `fw` or `ipc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownProfile(pub String);

impl fmt::Display for UnknownProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown profile '{}' (expected acl, fw or ipc)", self.0)
    }
}

impl std::error::Error for UnknownProfile {}

impl FromStr for Profile {
    type Err = UnknownProfile;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Profile::ALL
            .into_iter()
            .find(|p| p.name() == s.trim().to_ascii_lowercase())
            .ok_or_else(|| UnknownProfile(s.to_string()))
    }
}

/// Port-range classes, in the order of the weights below.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PortClass {
    Wc,
    Hi,
    Lo,
    Ar,
    Em,
}

const PORT_CLASSES: [PortClass; 5] = [
    PortClass::Wc,
    PortClass::Hi,
    PortClass::Lo,
    PortClass::Ar,
    PortClass::Em,
];

/// A profile's distributions (weights need not sum to anything in particular).
struct Params {
    /// (protocol, weight); `None` = any protocol.
    protos: &'static [(Option<u8>, u32)],
    /// Weights of WC, HI, LO, AR, EM for source and destination ports.
    src_ports: [u32; 5],
    dst_ports: [u32; 5],
    /// (source length, destination length, weight).
    len_pairs: &'static [(u8, u8, u32)],
    /// Percent of non-zero lengths moved by −3..=+3 bits.
    jitter_percent: u64,
    /// Base networks per address field.
    bases: usize,
    /// Distinct arbitrary (AR) port ranges the rules draw from.
    ranges: usize,
}

const ACL: Params = Params {
    protos: &[
        (Some(PROTO_TCP), 70),
        (Some(PROTO_UDP), 20),
        (None, 7),
        (Some(PROTO_ICMP), 3),
    ],
    src_ports: [92, 3, 0, 2, 3],
    dst_ports: [20, 8, 2, 15, 55],
    len_pairs: &[
        (0, 32, 10),
        (32, 32, 15),
        (24, 32, 15),
        (16, 32, 10),
        (32, 24, 10),
        (24, 24, 10),
        (16, 24, 5),
        (8, 32, 5),
        (0, 24, 8),
        (32, 0, 4),
        (28, 32, 4),
        (30, 32, 4),
    ],
    jitter_percent: 6,
    bases: 48,
    ranges: 12,
};

const FW: Params = Params {
    protos: &[
        (Some(PROTO_TCP), 55),
        (Some(PROTO_UDP), 20),
        (None, 20),
        (Some(PROTO_ICMP), 5),
    ],
    src_ports: [80, 10, 2, 3, 5],
    dst_ports: [35, 10, 3, 12, 40],
    len_pairs: &[
        (0, 0, 5),
        (0, 32, 20),
        (32, 0, 15),
        (24, 0, 10),
        (0, 24, 10),
        (16, 32, 10),
        (32, 32, 10),
        (8, 0, 5),
        (0, 16, 5),
        (24, 32, 10),
    ],
    jitter_percent: 5,
    bases: 24,
    ranges: 16,
};

const IPC: Params = Params {
    protos: &[
        (Some(PROTO_TCP), 45),
        (Some(PROTO_UDP), 30),
        (None, 15),
        (Some(PROTO_ICMP), 10),
    ],
    src_ports: [60, 8, 4, 10, 18],
    dst_ports: [35, 8, 4, 15, 38],
    len_pairs: &[
        (32, 32, 20),
        (0, 0, 3),
        (16, 16, 8),
        (24, 24, 10),
        (32, 24, 10),
        (24, 32, 10),
        (0, 32, 8),
        (32, 0, 8),
        (8, 8, 5),
        (16, 32, 8),
        (28, 28, 5),
        (20, 20, 5),
    ],
    jitter_percent: 10,
    bases: 96,
    ranges: 24,
};

/// Well-known service ports, most used first, for EM ports.
const COMMON_PORTS: [u16; 16] = [
    80, 443, 53, 25, 22, 21, 23, 110, 123, 161, 389, 1433, 3306, 8080, 5060, 1521,
];

fn weighted<T: Copy>(rng: &mut SplitMix64, items: &[(T, u32)]) -> T {
    let total: u64 = items.iter().map(|(_, w)| *w as u64).sum();
    let mut x = rng.below(total.max(1));
    for (item, w) in items {
        if x < *w as u64 {
            return *item;
        }
        x -= *w as u64;
    }
    items[items.len() - 1].0
}

fn port_range(rng: &mut SplitMix64, weights: [u32; 5], ranges: &[PortRange]) -> PortRange {
    let items: Vec<(PortClass, u32)> = PORT_CLASSES.into_iter().zip(weights).collect();
    match weighted(rng, &items) {
        PortClass::Wc => ANY_PORT,
        PortClass::Hi => PortRange {
            low: 1024,
            high: 65535,
        },
        PortClass::Lo => PortRange { low: 0, high: 1023 },
        PortClass::Ar => ranges[(rng.unit().powi(2) * ranges.len() as f64) as usize],
        PortClass::Em => {
            let p = if rng.below(10) < 7 {
                // Skewed toward the first entries.
                let u = rng.unit();
                COMMON_PORTS[(u * u * COMMON_PORTS.len() as f64) as usize]
            } else {
                rng.below(65536) as u16
            };
            PortRange { low: p, high: p }
        }
    }
}

/// An arbitrary range: widths spread over orders of magnitude, 2^(0..16) ports.
fn arbitrary_range(rng: &mut SplitMix64) -> PortRange {
    let width = 1u32 << rng.below(16);
    let low = rng.below(65536 - width as u64) as u32;
    let high = (low + width + rng.below(width as u64) as u32).min(65535);
    PortRange {
        low: low as u16,
        high: high as u16,
    }
}

/// An address under one of the bases (chosen with a skew toward the first), keeping the
/// base's top 8-24 bits.
fn address(rng: &mut SplitMix64, bases: &[u32]) -> u32 {
    let u = rng.unit();
    let base = bases[(u * u * bases.len() as f64) as usize];
    let keep = 8 + rng.below(17) as u32;
    let low_mask = u32::MAX >> keep;
    (base & !low_mask) | (rng.next_u64() as u32 & low_mask)
}

fn jitter(rng: &mut SplitMix64, len: u8, percent: u64) -> u8 {
    if len == 0 || rng.below(100) >= percent {
        return len;
    }
    (len as i32 + rng.below(7) as i32 - 3).clamp(1, 32) as u8
}

/// `rules` rules of `profile` from `seed` (capped at [`MAX_GENERATED`]), every action
/// [`Action::Accept`] (ClassBench's format has none).
pub fn generate_rules(profile: Profile, rules: usize, seed: u64) -> RuleSet {
    let p = match profile {
        Profile::Acl => &ACL,
        Profile::Fw => &FW,
        Profile::Ipc => &IPC,
    };
    let mut rng = SplitMix64::new(seed ^ 0xC1A5_5B3C_0000_0000 ^ profile as u64);
    let src_bases: Vec<u32> = (0..p.bases).map(|_| rng.next_u64() as u32).collect();
    let dst_bases: Vec<u32> = (0..p.bases).map(|_| rng.next_u64() as u32).collect();
    let ranges: Vec<PortRange> = (0..p.ranges).map(|_| arbitrary_range(&mut rng)).collect();
    let lens: Vec<((u8, u8), u32)> = p.len_pairs.iter().map(|&(s, d, w)| ((s, d), w)).collect();
    let out = (0..rules.min(MAX_GENERATED))
        .map(|_| {
            let proto = weighted(&mut rng, p.protos);
            let ported = matches!(proto, Some(PROTO_TCP) | Some(PROTO_UDP));
            let (src_port, dst_port) = if ported {
                (
                    port_range(&mut rng, p.src_ports, &ranges),
                    port_range(&mut rng, p.dst_ports, &ranges),
                )
            } else {
                (ANY_PORT, ANY_PORT)
            };
            let (sl, dl) = weighted(&mut rng, &lens);
            let sl = jitter(&mut rng, sl, p.jitter_percent);
            let dl = jitter(&mut rng, dl, p.jitter_percent);
            AclRule {
                src: Ipv4Prefix::truncating(address(&mut rng, &src_bases), sl),
                dst: Ipv4Prefix::truncating(address(&mut rng, &dst_bases), dl),
                src_port,
                dst_port,
                proto: proto.map_or(ProtoMatch::ANY, ProtoMatch::exact),
                action: Action::Accept,
            }
        })
        .collect();
    RuleSet { rules: out }
}

fn in_range(rng: &mut SplitMix64, r: PortRange) -> u16 {
    (r.low as u64 + rng.below(r.high as u64 - r.low as u64 + 1)) as u16
}

/// A header inside `r`.
fn header_in(rng: &mut SplitMix64, r: &AclRule) -> FiveTuple {
    let under =
        |rng: &mut SplitMix64, p: Ipv4Prefix| p.addr() | (rng.next_u64() as u32 & !p.mask());
    let proto = if r.proto.mask == 0 {
        if rng.below(5) < 4 {
            PROTO_TCP
        } else {
            PROTO_UDP
        }
    } else {
        r.proto.value | (rng.next_u64() as u8 & !r.proto.mask)
    };
    FiveTuple {
        src: under(rng, r.src),
        dst: under(rng, r.dst),
        src_port: in_range(rng, r.src_port),
        dst_port: in_range(rng, r.dst_port),
        proto,
    }
}

fn random_header(rng: &mut SplitMix64) -> FiveTuple {
    let proto = [PROTO_TCP, PROTO_UDP, PROTO_ICMP][rng.below(3) as usize];
    let ported = proto != PROTO_ICMP;
    FiveTuple {
        src: rng.next_u64() as u32,
        dst: rng.next_u64() as u32,
        src_port: if ported { rng.below(65536) as u16 } else { 0 },
        dst_port: if ported { rng.below(65536) as u16 } else { 0 },
        proto,
    }
}

/// `packets` headers (capped at [`MAX_GENERATED`]): `hit_percent` (0-100) drawn inside a
/// uniformly chosen rule of `rules`, the rest random.
pub fn generate_trace(
    rules: &RuleSet,
    packets: usize,
    hit_percent: u32,
    seed: u64,
) -> Vec<FiveTuple> {
    let mut rng = SplitMix64::new(seed ^ 0x7EAC_E000_0000_0000);
    (0..packets.min(MAX_GENERATED))
        .map(|_| {
            if !rules.is_empty() && rng.below(100) < hit_percent.min(100) as u64 {
                let r = &rules.rules[rng.below(rules.len() as u64) as usize];
                header_in(&mut rng, r)
            } else {
                random_header(&mut rng)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_rules_other_seed_other_rules() {
        for p in Profile::ALL {
            let a = generate_rules(p, 500, 1);
            assert_eq!(a, generate_rules(p, 500, 1));
            assert_ne!(a, generate_rules(p, 500, 2));
            assert_eq!(a.len(), 500);
        }
        assert_eq!("FW".parse::<Profile>(), Ok(Profile::Fw));
        assert!("acl1".parse::<Profile>().is_err());
    }

    /// The profiles differ the way they are meant to: wildcard addresses are commonest in
    /// fw, exact destination ports commonest in acl; every port class appears.
    #[test]
    fn profiles_have_their_character() {
        let count = |p: Profile, f: &dyn Fn(&AclRule) -> bool| {
            generate_rules(p, 5000, 7)
                .rules
                .iter()
                .filter(|r| f(r))
                .count()
        };
        let wild = |r: &AclRule| r.src.is_any() || r.dst.is_any();
        assert!(count(Profile::Fw, &wild) > 2 * count(Profile::Acl, &wild));
        let em = |r: &AclRule| r.dst_port.low == r.dst_port.high;
        assert!(count(Profile::Acl, &em) > count(Profile::Fw, &em));
        for class in [
            |r: &AclRule| r.dst_port == ANY_PORT,
            |r: &AclRule| {
                r.dst_port
                    == PortRange {
                        low: 1024,
                        high: 65535,
                    }
            },
            |r: &AclRule| r.dst_port == PortRange { low: 0, high: 1023 },
            |r: &AclRule| r.dst_port.low < r.dst_port.high && r.dst_port != ANY_PORT,
        ] {
            assert!(count(Profile::Ipc, &class) > 0);
        }
    }

    /// A header drawn from rule i matches rule i (checked directly, no classifier).
    #[test]
    fn trace_headers_hit_their_rule() {
        let set = generate_rules(Profile::Ipc, 300, 3);
        let mut rng = SplitMix64::new(9);
        for r in &set.rules {
            for _ in 0..20 {
                let k = header_in(&mut rng, r);
                assert!(r.matches(&k), "{r:?} {k:?}");
            }
        }
        let t = generate_trace(&set, 1000, 90, 4);
        assert_eq!(t, generate_trace(&set, 1000, 90, 4));
        let hits = t
            .iter()
            .filter(|k| set.rules.iter().any(|r| r.matches(k)))
            .count();
        assert!(hits >= 850, "{hits}");
    }
}

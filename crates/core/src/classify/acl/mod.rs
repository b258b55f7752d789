//! First-match packet classification on the IPv4 5-tuple (an ACL, as a firewall or P1's
//! filtering engine applies it): an ordered [`RuleSet`] of [`AclRule`]s, where the first rule
//! that matches a packet's [`FiveTuple`] decides its [`Action`].
//!
//! Three structures answer the same question, "which rule matches first?", behind
//! [`PacketClassifier`]:
//! - [`LinearClassifier`]: every rule in order — the reference, O(rules) per packet;
//! - [`TupleSpaceClassifier`]: priority-sorted tuple space search (Srinivasan, Suri, Varghese,
//!   "Packet Classification using Tuple Space Search", SIGCOMM 1999; as Open vSwitch's
//!   classifier sorts its subtables), one hash table per distinct prefix-length tuple, port
//!   ranges expanded to prefixes;
//! - [`TupleMergeClassifier`]: TupleMerge (Daly, Torng, "TupleMerge: Building Online Packet
//!   Classifiers by Omitting Bits", ICCCN 2017): rules share a table whose tuple is less
//!   specific than theirs, buckets are checked rule by rule, a collision limit bounds a
//!   bucket, and rules are inserted online.
//!
//! Rules come from ClassBench filter files ([`RuleSet::parse_classbench`], Taylor & Turner,
//! INFOCOM 2005) or from the TOML rule file ([`RuleSet::from_toml_str`]; [`RuleFile`] is that
//! form's one parser, which `netsched filter` reads too, IPv6 prefixes and `default`
//! included); [`generate`] writes ClassBench-like rule sets and packet traces of our own. Every size has a bound: rule files
//! ([`MAX_RULES`], [`MAX_LINE_BYTES`], [`MAX_FILE_BYTES`]) and structures
//! ([`ClassifierLimits`]: tuples, table entries, bytes) — tuple space search is open to a
//! denial of service by rule sets that create many tuples ("tuple space explosion",
//! CVE-2019-25076), so a rule set past the limits is refused with an error, not built.
//!
//! The reference for formats, limits, costs and measured speed is `docs/classify.md`.

mod classbench;
mod error;
pub mod generate;
mod linear;
mod table;
mod toml_rules;
mod tuple_merge;
mod tuple_space;

#[cfg(test)]
mod props;

pub use classbench::{format_trace, parse_trace};
pub use error::{ClassifierBuildError, RuleFileError, RuleFileErrorKind, SHOWN_VALUE};
pub use linear::LinearClassifier;
pub use toml_rules::{FileRule, RuleFile, RuleFileLimits, MAX_CLASS};
pub use tuple_merge::{TupleMergeClassifier, DEFAULT_COLLISION_LIMIT};
pub use tuple_space::TupleSpaceClassifier;

use super::{ClassId, PortRange};
use crate::wire::{parse_ip, PROTO_TCP, PROTO_UDP};
use std::fmt;
use std::str::FromStr;

/// The most rules a rule file may hold (ClassBench's largest published sets are 100k rules).
pub const MAX_RULES: usize = 1_000_000;
/// The longest line a rule or trace file may have, in bytes.
pub const MAX_LINE_BYTES: usize = 1024;
/// The largest rule file accepted, in bytes (1M ClassBench lines of ~80 bytes fit).
pub const MAX_FILE_BYTES: usize = 128 << 20;

/// The header fields an ACL looks at, IPv4 as in ClassBench: addresses and ports as host-order
/// integers (`10.0.0.1` = `0x0A00_0001`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FiveTuple {
    pub src: u32,
    pub dst: u32,
    pub src_port: u16,
    pub dst_port: u16,
    pub proto: u8,
}

impl FiveTuple {
    /// The 5-tuple of a raw IPv4 packet (starting at the IP header), or `None` when it has
    /// none: not IPv4, malformed or truncated, a non-first fragment (offset ≠ 0: its ports are
    /// in the first fragment only), or a TCP/UDP packet too short to hold both ports.
    /// Protocols other than TCP and UDP get ports 0 (a rule with a port range that holds 0 —
    /// e.g. a wildcard — matches them). A first fragment (offset 0, MF set) has its ports.
    pub fn from_ipv4(packet: &[u8]) -> Option<FiveTuple> {
        let ip = parse_ip(packet).ok()?;
        if ip.version != 4 || !ip.first_fragment {
            return None;
        }
        let (src, dst) = match (ip.src, ip.dst) {
            (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) => (u32::from(s), u32::from(d)),
            _ => return None,
        };
        let (src_port, dst_port) = if ip.protocol == PROTO_TCP || ip.protocol == PROTO_UDP {
            let t = ip.transport;
            if t.len() < 4 {
                return None;
            }
            (
                u16::from_be_bytes([t[0], t[1]]),
                u16::from_be_bytes([t[2], t[3]]),
            )
        } else {
            (0, 0)
        };
        Some(FiveTuple {
            src,
            dst,
            src_port,
            dst_port,
            proto: ip.protocol,
        })
    }
}

/// An IPv4 prefix: `addr` has no bits set past `len` (checked by [`Ipv4Prefix::new`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Ipv4Prefix {
    addr: u32,
    len: u8,
}

/// The mask of a `len`-bit prefix of a `width`-bit field.
pub(crate) fn prefix_mask(len: u8, width: u8) -> u64 {
    if len == 0 {
        0
    } else {
        ((1u64 << width) - 1) & !((1u64 << (width - len)) - 1)
    }
}

impl Ipv4Prefix {
    /// The any-address prefix `0.0.0.0/0`.
    pub const ANY: Ipv4Prefix = Ipv4Prefix { addr: 0, len: 0 };

    /// `None` if `len > 32` or `addr` has bits set past `len`.
    pub fn new(addr: u32, len: u8) -> Option<Ipv4Prefix> {
        (len <= 32 && addr & !Self::mask_of(len) == 0).then_some(Ipv4Prefix { addr, len })
    }
    /// The prefix of `addr` of length `len` (bits past `len` cleared); `len` is capped at 32.
    pub fn truncating(addr: u32, len: u8) -> Ipv4Prefix {
        let len = len.min(32);
        Ipv4Prefix {
            addr: addr & Self::mask_of(len),
            len,
        }
    }
    fn mask_of(len: u8) -> u32 {
        prefix_mask(len, 32) as u32
    }
    pub fn addr(&self) -> u32 {
        self.addr
    }
    pub fn prefix_len(&self) -> u8 {
        self.len
    }
    pub fn is_any(&self) -> bool {
        self.len == 0
    }
    pub fn mask(&self) -> u32 {
        Self::mask_of(self.len)
    }
    pub fn contains(&self, a: u32) -> bool {
        a & self.mask() == self.addr
    }
}

impl fmt::Display for Ipv4Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", std::net::Ipv4Addr::from(self.addr), self.len)
    }
}

/// The protocol condition: matches when `proto & mask == value` (ClassBench `0x06/0xFF` is TCP
/// only, `0x00/0x00` any protocol). `value` has no bits outside `mask`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ProtoMatch {
    pub value: u8,
    pub mask: u8,
}

impl ProtoMatch {
    pub const ANY: ProtoMatch = ProtoMatch { value: 0, mask: 0 };
    pub fn exact(proto: u8) -> ProtoMatch {
        ProtoMatch {
            value: proto,
            mask: 0xff,
        }
    }
    pub fn matches(&self, proto: u8) -> bool {
        proto & self.mask == self.value
    }
}

/// What a matching rule decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    Accept,
    Drop,
    /// Hand the packet to a queue discipline's class.
    Class(ClassId),
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Accept => f.write_str("accept"),
            Action::Drop => f.write_str("drop"),
            Action::Class(c) => write!(f, "class:{c}"),
        }
    }
}

/// One ACL rule: every field must match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AclRule {
    pub src: Ipv4Prefix,
    pub dst: Ipv4Prefix,
    pub src_port: PortRange,
    pub dst_port: PortRange,
    pub proto: ProtoMatch,
    pub action: Action,
}

/// The full port range `0-65535` (ClassBench's WC class).
pub const ANY_PORT: PortRange = PortRange {
    low: 0,
    high: u16::MAX,
};

impl AclRule {
    /// A rule matching every packet.
    pub fn any(action: Action) -> AclRule {
        AclRule {
            src: Ipv4Prefix::ANY,
            dst: Ipv4Prefix::ANY,
            src_port: ANY_PORT,
            dst_port: ANY_PORT,
            proto: ProtoMatch::ANY,
            action,
        }
    }
    pub fn matches(&self, k: &FiveTuple) -> bool {
        self.src.contains(k.src)
            && self.dst.contains(k.dst)
            && self.src_port.contains(k.src_port)
            && self.dst_port.contains(k.dst_port)
            && self.proto.matches(k.proto)
    }
}

/// An ordered rule list: rule 0 has the highest priority.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleSet {
    pub rules: Vec<AclRule>,
}

impl RuleSet {
    pub fn new(rules: Vec<AclRule>) -> RuleSet {
        RuleSet { rules }
    }
    pub fn len(&self) -> usize {
        self.rules.len()
    }
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
    /// The action of rule `index` (as returned by [`PacketClassifier::first_match`]).
    pub fn action(&self, index: u32) -> Option<Action> {
        self.rules.get(index as usize).map(|r| r.action)
    }
}

/// Finds the first (highest-priority) rule matching a 5-tuple. Implementations are immutable
/// once built, so one can be shared by every worker thread.
pub trait PacketClassifier: Send + Sync {
    /// Index in the [`RuleSet`] of the first rule matching `key`, if any.
    fn first_match(&self, key: &FiveTuple) -> Option<u32>;
    /// Bytes of memory the structure holds (capacities, not just lengths).
    fn memory_bytes(&self) -> usize;
    /// Hash tables (tuples) probed in the worst case; 0 for the linear scan.
    fn tuples(&self) -> usize;
}

/// Bounds on what a classifier may build. A rule set past one is refused with
/// [`ClassifierBuildError`] naming the bound, so a hostile or mistaken rule set cannot exhaust
/// memory or make each lookup probe thousands of tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassifierLimits {
    pub max_rules: usize,
    /// Distinct tuples (hash tables), each probed by a lookup in the worst case.
    pub max_tuples: usize,
    /// Hash table entries over all tables (tuple space search expands port ranges into
    /// prefixes: one rule may take up to 30 × 30 entries).
    pub max_entries: usize,
    /// Bytes of the structure (as [`PacketClassifier::memory_bytes`] counts them).
    pub max_bytes: usize,
}

impl Default for ClassifierLimits {
    /// 1M rules, 4096 tuples, 16M entries, 1 GiB.
    fn default() -> Self {
        ClassifierLimits {
            max_rules: MAX_RULES,
            max_tuples: 4096,
            max_entries: 16 << 20,
            max_bytes: 1 << 30,
        }
    }
}

impl ClassifierLimits {
    pub(crate) fn check_rules(&self, rules: usize) -> Result<(), ClassifierBuildError> {
        if rules > self.max_rules {
            return Err(ClassifierBuildError::TooManyRules {
                rules,
                max: self.max_rules,
            });
        }
        Ok(())
    }
}

/// Which structure to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClassifierKind {
    Linear,
    TupleSpace,
    TupleMerge,
}

impl ClassifierKind {
    pub const ALL: [ClassifierKind; 3] = [
        ClassifierKind::Linear,
        ClassifierKind::TupleSpace,
        ClassifierKind::TupleMerge,
    ];
    pub fn name(self) -> &'static str {
        match self {
            ClassifierKind::Linear => "linear",
            ClassifierKind::TupleSpace => "tuple_space",
            ClassifierKind::TupleMerge => "tuple_merge",
        }
    }
}

impl fmt::Display for ClassifierKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Not `linear`, `tuple_space` or `tuple_merge`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownClassifierKind(pub String);

impl fmt::Display for UnknownClassifierKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown classifier '{}' (expected linear, tuple_space or tuple_merge)",
            self.0
        )
    }
}

impl std::error::Error for UnknownClassifierKind {}

impl FromStr for ClassifierKind {
    type Err = UnknownClassifierKind;
    /// `linear`, `tuple_space` or `tuple_merge` (`-` accepted for `_`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().to_ascii_lowercase().replace('-', "_");
        ClassifierKind::ALL
            .into_iter()
            .find(|k| k.name() == t)
            .ok_or_else(|| UnknownClassifierKind(s.to_string()))
    }
}

/// Build the structure `kind` for `rules` within `limits`.
pub fn build_classifier(
    kind: ClassifierKind,
    rules: &RuleSet,
    limits: &ClassifierLimits,
) -> Result<Box<dyn PacketClassifier>, ClassifierBuildError> {
    Ok(match kind {
        ClassifierKind::Linear => Box::new(LinearClassifier::build(rules, limits)?),
        ClassifierKind::TupleSpace => Box::new(TupleSpaceClassifier::build(rules, limits)?),
        ClassifierKind::TupleMerge => Box::new(TupleMergeClassifier::build(rules, limits)?),
    })
}

/// A rule reduced to what matching needs, 24 bytes, as the structures store it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PackedRule {
    src: u32,
    src_mask: u32,
    dst: u32,
    dst_mask: u32,
    sp_lo: u16,
    sp_hi: u16,
    dp_lo: u16,
    dp_hi: u16,
}

impl PackedRule {
    pub(crate) fn new(r: &AclRule) -> (PackedRule, ProtoMatch) {
        (
            PackedRule {
                src: r.src.addr(),
                src_mask: r.src.mask(),
                dst: r.dst.addr(),
                dst_mask: r.dst.mask(),
                sp_lo: r.src_port.low,
                sp_hi: r.src_port.high,
                dp_lo: r.dst_port.low,
                dp_hi: r.dst_port.high,
            },
            r.proto,
        )
    }
    /// Address and port fields; the protocol is checked by the caller (it is part of the
    /// hash key in the tuple structures).
    #[inline]
    pub(crate) fn matches_fields(&self, k: &FiveTuple) -> bool {
        (k.src & self.src_mask == self.src)
            & (k.dst & self.dst_mask == self.dst)
            & (k.src_port >= self.sp_lo)
            & (k.src_port <= self.sp_hi)
            & (k.dst_port >= self.dp_lo)
            & (k.dst_port <= self.dp_hi)
    }
}

/// The 5-tuple packed in 104 bits of a `u128` (src, dst, src port, dst port, proto from the
/// top), so a tuple's mask applies with one AND.
#[inline]
pub(crate) fn pack_key(k: &FiveTuple) -> u128 {
    ((k.src as u128) << 96)
        | ((k.dst as u128) << 64)
        | ((k.src_port as u128) << 48)
        | ((k.dst_port as u128) << 32)
        | ((k.proto as u128) << 24)
}

/// Field lengths of a tuple: address prefix lengths (0-32), port prefix lengths (0-16) and the
/// protocol mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Tuple {
    pub src: u8,
    pub dst: u8,
    pub sp: u8,
    pub dp: u8,
    pub proto_mask: u8,
}

impl Tuple {
    pub(crate) fn mask(&self) -> u128 {
        ((prefix_mask(self.src, 32) as u128) << 96)
            | ((prefix_mask(self.dst, 32) as u128) << 64)
            | ((prefix_mask(self.sp, 16) as u128) << 48)
            | ((prefix_mask(self.dp, 16) as u128) << 32)
            | ((self.proto_mask as u128) << 24)
    }
    /// True if every field of `self` is at most as specific as `other`'s.
    pub(crate) fn covers(&self, other: &Tuple) -> bool {
        self.src <= other.src
            && self.dst <= other.dst
            && self.sp <= other.sp
            && self.dp <= other.dp
            && self.proto_mask & other.proto_mask == self.proto_mask
    }
    pub(crate) fn specificity(&self) -> u32 {
        self.src as u32
            + self.dst as u32
            + self.sp as u32
            + self.dp as u32
            + self.proto_mask.count_ones()
    }
}

/// The key of a rule in a table of tuple `mask`: the rule's low corner, masked.
pub(crate) fn rule_key(r: &AclRule, mask: u128) -> u128 {
    pack_key(&FiveTuple {
        src: r.src.addr(),
        dst: r.dst.addr(),
        src_port: r.src_port.low,
        dst_port: r.dst_port.low,
        proto: r.proto.value,
    }) & mask
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::test_packets::{ipv4, tcp_segment};

    #[test]
    fn five_tuple_of_tcp_udp_icmp_and_fragments() {
        let mut seg = tcp_segment(0x10, 1, 500, &[], 0);
        seg[0..2].copy_from_slice(&40000u16.to_be_bytes());
        seg[2..4].copy_from_slice(&443u16.to_be_bytes());
        let p = ipv4([10, 0, 0, 1], [192, 168, 1, 2], 6, &seg);
        assert_eq!(
            FiveTuple::from_ipv4(&p),
            Some(FiveTuple {
                src: 0x0A00_0001,
                dst: 0xC0A8_0102,
                src_port: 40000,
                dst_port: 443,
                proto: 6
            })
        );
        let icmp = ipv4([1, 2, 3, 4], [5, 6, 7, 8], 1, &[8, 0, 0, 0, 0, 0, 0, 0]);
        let k = FiveTuple::from_ipv4(&icmp).unwrap();
        assert_eq!((k.src_port, k.dst_port, k.proto), (0, 0, 1));
        // UDP with fewer than 4 bytes of header: no ports, no tuple.
        assert_eq!(
            FiveTuple::from_ipv4(&ipv4([1, 2, 3, 4], [5, 6, 7, 8], 17, &[0, 53])),
            None
        );
        // A fragment with offset 8 (after the first): none; a first fragment (MF): ports.
        let mut frag = p.clone();
        frag[6] = 0x00;
        frag[7] = 0x01;
        assert_eq!(FiveTuple::from_ipv4(&frag), None);
        let mut first = p.clone();
        first[6] = 0x20;
        assert_eq!(FiveTuple::from_ipv4(&first).unwrap().dst_port, 443);
        assert_eq!(FiveTuple::from_ipv4(&[0x60; 60]), None);
        assert_eq!(FiveTuple::from_ipv4(&[]), None);
    }

    #[test]
    fn kind_names_round_trip() {
        for k in ClassifierKind::ALL {
            assert_eq!(k.to_string().parse::<ClassifierKind>(), Ok(k));
        }
        assert_eq!(
            "tuple-merge".parse::<ClassifierKind>(),
            Ok(ClassifierKind::TupleMerge)
        );
        let e = "tss".parse::<ClassifierKind>().unwrap_err();
        assert!(e.to_string().contains("'tss'"), "{e}");
    }

    #[test]
    fn prefix_masks_and_tuple_cover() {
        assert_eq!(prefix_mask(0, 32), 0);
        assert_eq!(prefix_mask(8, 32), 0xFF00_0000);
        assert_eq!(prefix_mask(16, 16), 0xFFFF);
        assert_eq!(Ipv4Prefix::new(0x0A01_0000, 8), None);
        assert_eq!(Ipv4Prefix::truncating(0x0A01_0000, 8).addr(), 0x0A00_0000);
        let t = |s, d| Tuple {
            src: s,
            dst: d,
            sp: 0,
            dp: 16,
            proto_mask: 0xff,
        };
        assert!(t(8, 0).covers(&t(16, 0)));
        assert!(!t(16, 0).covers(&t(8, 0)));
        let k = FiveTuple {
            src: 0x0A01_0203,
            dst: 0xC0A8_0001,
            src_port: 1234,
            dst_port: 80,
            proto: 6,
        };
        let m = t(8, 0).mask();
        assert_eq!(
            pack_key(&k) & m,
            (0x0Au128 << 120) | (80u128 << 32) | (6 << 24)
        );
    }
}

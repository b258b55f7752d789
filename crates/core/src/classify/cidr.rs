//! CIDR prefixes (RFC 4632 §3.1 notation; IPv6 RFC 4291 §2.3) and a longest-prefix-match
//! table mapping address ranges to classes — P0's IP table (paper 000: `220.x → A`,
//! `192.x → B`, `210.x → C`, anything else → the default, lowest class D).
//!
//! Design: one `HashMap<network, class>` per prefix length in use, per family; a lookup tries
//! the lengths in use from longest to shortest, so the cost is O(distinct prefix lengths)
//! hash probes (at most 33 for IPv4, 129 for IPv6), and add/remove are O(1) + O(lengths).
//! IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`) are looked up as IPv4.
//!
//! Text form: `"10.1.0.0/16"`, `"2001:db8::/32"`, or a bare address (a /32 or /128). A prefix
//! with host bits set beyond its length (`"10.1.0.1/16"`) is refused with a message giving
//! the network it probably meant — silently normalising would hide a typo in a config file.

use super::{CidrError, ClassId, Classifier, ClassifierConfigError};
use crate::wire::parse_ip;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// A network prefix: address with all host bits zero, and its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cidr {
    network: IpAddr,
    prefix_len: u8,
}

fn mask_v4(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - len as u32)
    }
}

fn mask_v6(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - len as u32)
    }
}

impl Cidr {
    /// `Err` if `prefix_len` is too long for the family or host bits are set.
    pub fn new(addr: IpAddr, prefix_len: u8) -> Result<Self, CidrError> {
        let (max, network) = match addr {
            IpAddr::V4(a) => (
                32,
                IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask_v4(prefix_len.min(32)))),
            ),
            IpAddr::V6(a) => (
                128,
                IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask_v6(prefix_len.min(128)))),
            ),
        };
        if prefix_len > max {
            return Err(CidrError::PrefixTooLong {
                text: format!("{addr}/{prefix_len}"),
                prefix_len,
                max,
            });
        }
        if network != addr {
            return Err(CidrError::HostBitsSet {
                text: format!("{addr}/{prefix_len}"),
                network,
                prefix_len,
            });
        }
        Ok(Self {
            network: addr,
            prefix_len,
        })
    }
    pub fn network(&self) -> IpAddr {
        self.network
    }
    pub fn prefix_len(&self) -> u8 {
        self.prefix_len
    }
    pub fn contains(&self, addr: IpAddr) -> bool {
        match (self.network, addr.to_canonical()) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                u32::from(a) & mask_v4(self.prefix_len) == u32::from(n)
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                u128::from(a) & mask_v6(self.prefix_len) == u128::from(n)
            }
            _ => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = CidrError;
    /// Errors read `bad CIDR '<text>': <why>`.
    fn from_str(text: &str) -> Result<Self, CidrError> {
        let t = text.trim();
        let (addr_text, len_text) = match t.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (t, None),
        };
        let addr: IpAddr = addr_text.parse().map_err(|_| CidrError::NotAnAddress {
            text: text.to_string(),
            addr: addr_text.to_string(),
        })?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix_len = match len_text {
            None => max,
            Some(l) => l.parse::<u8>().map_err(|_| CidrError::BadPrefixLength {
                text: text.to_string(),
                len: l.to_string(),
                max,
            })?,
        };
        // Errors of `new` name the text as written, not as re-formatted.
        Cidr::new(addr, prefix_len).map_err(|e| match e {
            CidrError::PrefixTooLong {
                prefix_len, max, ..
            } => CidrError::PrefixTooLong {
                text: text.to_string(),
                prefix_len,
                max,
            },
            CidrError::HostBitsSet {
                network,
                prefix_len,
                ..
            } => CidrError::HostBitsSet {
                text: text.to_string(),
                network,
                prefix_len,
            },
            other => other,
        })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix_len)
    }
}

/// Which address of a raw packet a [`CidrTable`] looks at.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AddressField {
    /// The sender (P0 classifies requests by client address).
    #[default]
    Source,
    Destination,
}

/// Hasher for network keys: the keys are operator-configured prefixes (lookups never insert),
/// so a fast deterministic mix (the SplitMix64 finaliser, Steele et al., OOPSLA 2014) is
/// enough and avoids SipHash's cost on every packet.
#[derive(Default)]
struct NetworkHasher(u64);

impl Hasher for NetworkHasher {
    fn finish(&self) -> u64 {
        let mut z = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.0 ^= v as u64;
    }
    fn write_u128(&mut self, v: u128) {
        self.0 ^= (v as u64)
            ^ ((v >> 64) as u64)
                .rotate_left(29)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type NetworkMap<K> = HashMap<K, ClassId, BuildHasherDefault<NetworkHasher>>;

/// Longest-prefix-match table from address ranges to classes, with a default class.
#[derive(Debug, Clone)]
pub struct CidrTable {
    /// Index = prefix length.
    v4: Vec<NetworkMap<u32>>,
    v6: Vec<NetworkMap<u128>>,
    /// Prefix lengths with at least one entry, longest first.
    v4_lens: Vec<u8>,
    v6_lens: Vec<u8>,
    default_class: ClassId,
    match_on: AddressField,
}

impl CidrTable {
    /// An empty table: every address maps to `default_class`.
    pub fn new(default_class: ClassId) -> Self {
        Self {
            v4: vec![NetworkMap::default(); 33],
            v6: vec![NetworkMap::default(); 129],
            v4_lens: Vec::new(),
            v6_lens: Vec::new(),
            default_class,
            match_on: AddressField::Source,
        }
    }

    pub fn with_match_on(mut self, field: AddressField) -> Self {
        self.match_on = field;
        self
    }

    pub fn default_class(&self) -> ClassId {
        self.default_class
    }

    pub fn set_default_class(&mut self, class: ClassId) {
        self.default_class = class;
    }

    fn refresh_lens(&mut self) {
        self.v4_lens = (0..=32u8)
            .rev()
            .filter(|&l| !self.v4[l as usize].is_empty())
            .collect();
        self.v6_lens = (0..=128u8)
            .rev()
            .filter(|&l| !self.v6[l as usize].is_empty())
            .collect();
    }

    /// Map `cidr` to `class`; returns the class it had before, if any.
    pub fn add(&mut self, cidr: Cidr, class: ClassId) -> Option<ClassId> {
        let l = cidr.prefix_len as usize;
        let old = match cidr.network {
            IpAddr::V4(a) => self.v4[l].insert(u32::from(a), class),
            IpAddr::V6(a) => self.v6[l].insert(u128::from(a), class),
        };
        self.refresh_lens();
        old
    }

    /// Parse `text` (see [`Cidr`]) and add it.
    pub fn add_str(&mut self, text: &str, class: ClassId) -> Result<Option<ClassId>, CidrError> {
        Ok(self.add(text.parse()?, class))
    }

    /// Remove exactly `cidr`; returns its class if it was present.
    pub fn remove(&mut self, cidr: &Cidr) -> Option<ClassId> {
        let l = cidr.prefix_len as usize;
        let old = match cidr.network {
            IpAddr::V4(a) => self.v4[l].remove(&u32::from(a)),
            IpAddr::V6(a) => self.v6[l].remove(&u128::from(a)),
        };
        self.refresh_lens();
        old
    }

    pub fn clear(&mut self) {
        self.v4.iter_mut().for_each(NetworkMap::clear);
        self.v6.iter_mut().for_each(NetworkMap::clear);
        self.refresh_lens();
    }

    pub fn len(&self) -> usize {
        self.v4.iter().map(HashMap::len).sum::<usize>()
            + self.v6.iter().map(HashMap::len).sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The longest prefix containing `addr` and its class.
    pub fn lookup_match(&self, addr: IpAddr) -> Option<(Cidr, ClassId)> {
        match addr.to_canonical() {
            IpAddr::V4(a) => {
                let a = u32::from(a);
                self.v4_lens.iter().find_map(|&l| {
                    let net = a & mask_v4(l);
                    self.v4[l as usize].get(&net).map(|&c| {
                        let network = IpAddr::V4(Ipv4Addr::from(net));
                        (
                            Cidr {
                                network,
                                prefix_len: l,
                            },
                            c,
                        )
                    })
                })
            }
            IpAddr::V6(a) => {
                let a = u128::from(a);
                self.v6_lens.iter().find_map(|&l| {
                    let net = a & mask_v6(l);
                    self.v6[l as usize].get(&net).map(|&c| {
                        let network = IpAddr::V6(Ipv6Addr::from(net));
                        (
                            Cidr {
                                network,
                                prefix_len: l,
                            },
                            c,
                        )
                    })
                })
            }
        }
    }

    /// The class of `addr`: its longest matching prefix's, else the default class.
    pub fn lookup(&self, addr: IpAddr) -> ClassId {
        self.lookup_match(addr)
            .map_or(self.default_class, |(_, c)| c)
    }

    /// Every entry in a deterministic order: IPv4 before IPv6, then by network address, then
    /// by prefix length (so a network's more specific prefixes follow it).
    pub fn entries(&self) -> Vec<(Cidr, ClassId)> {
        let mut out: Vec<(Cidr, ClassId)> = Vec::with_capacity(self.len());
        for (l, m) in self.v4.iter().enumerate() {
            for (&net, &c) in m {
                let network = IpAddr::V4(Ipv4Addr::from(net));
                out.push((
                    Cidr {
                        network,
                        prefix_len: l as u8,
                    },
                    c,
                ));
            }
        }
        for (l, m) in self.v6.iter().enumerate() {
            for (&net, &c) in m {
                let network = IpAddr::V6(Ipv6Addr::from(net));
                out.push((
                    Cidr {
                        network,
                        prefix_len: l as u8,
                    },
                    c,
                ));
            }
        }
        out.sort();
        out
    }
}

impl Classifier<IpAddr> for CidrTable {
    fn classify(&self, addr: &IpAddr) -> ClassId {
        self.lookup(*addr)
    }
}

/// A raw IP packet, classified by its source (or destination) address; a packet that does
/// not parse gets the default class.
impl Classifier<[u8]> for CidrTable {
    fn classify(&self, ip_packet: &[u8]) -> ClassId {
        match parse_ip(ip_packet) {
            Ok(ip) => self.lookup(match self.match_on {
                AddressField::Source => ip.src,
                AddressField::Destination => ip.dst,
            }),
            Err(_) => self.default_class,
        }
    }
}

/// One `[[entries]]` line of a [`CidrTableConfig`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CidrEntryConfig {
    pub cidr: String,
    pub class: ClassId,
}

/// Serde form of a [`CidrTable`]:
/// ```toml
/// default_class = 3
/// match_on = "source"
/// entries = [ { cidr = "220.0.0.0/8", class = 0 }, { cidr = "2001:db8::/32", class = 1 } ]
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CidrTableConfig {
    pub default_class: ClassId,
    #[serde(default)]
    pub match_on: AddressField,
    #[serde(default)]
    pub entries: Vec<CidrEntryConfig>,
}

impl CidrTableConfig {
    /// Build the table; `Err` names the entry and field (`entries[2].cidr: bad CIDR ...`).
    pub fn build(&self) -> Result<CidrTable, ClassifierConfigError> {
        let mut t = CidrTable::new(self.default_class).with_match_on(self.match_on);
        for (i, e) in self.entries.iter().enumerate() {
            let field = || format!("entries[{i}].cidr");
            let cidr: Cidr = e
                .cidr
                .parse()
                .map_err(|error| ClassifierConfigError::Cidr {
                    field: field(),
                    error,
                })?;
            if t.add(cidr, e.class).is_some() {
                return Err(ClassifierConfigError::DuplicateCidr {
                    field: field(),
                    cidr,
                });
            }
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::test_packets::ipv4;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn cidr_parses_prefixes_and_bare_addresses() {
        let c: Cidr = "10.1.0.0/16".parse().unwrap();
        assert_eq!((c.network(), c.prefix_len()), (ip("10.1.0.0"), 16));
        assert_eq!(
            "2001:db8::/32".parse::<Cidr>().unwrap().to_string(),
            "2001:db8::/32"
        );
        assert_eq!("192.0.2.7".parse::<Cidr>().unwrap().prefix_len(), 32);
        assert_eq!("::1".parse::<Cidr>().unwrap().prefix_len(), 128);
        assert_eq!("0.0.0.0/0".parse::<Cidr>().unwrap().prefix_len(), 0);
        assert!(c.contains(ip("10.1.255.3")));
        assert!(!c.contains(ip("10.2.0.0")));
        assert!(!c.contains(ip("2001:db8::1")));
    }

    #[test]
    fn cidr_errors_name_the_bad_text() {
        let e = |s: &str| s.parse::<Cidr>().unwrap_err();
        let text = |s: &str| s.to_string();
        assert_eq!(
            e("10.1.0.1/16"),
            CidrError::HostBitsSet {
                text: text("10.1.0.1/16"),
                network: ip("10.1.0.0"),
                prefix_len: 16
            }
        );
        assert_eq!(
            e("10.0.0.0/33"),
            CidrError::PrefixTooLong {
                text: text("10.0.0.0/33"),
                prefix_len: 33,
                max: 32
            }
        );
        assert_eq!(
            e("10.0.0/8"),
            CidrError::NotAnAddress {
                text: text("10.0.0/8"),
                addr: text("10.0.0")
            }
        );
        assert_eq!(
            e("10.0.0.0/x"),
            CidrError::BadPrefixLength {
                text: text("10.0.0.0/x"),
                len: text("x"),
                max: 32
            }
        );
        assert!(matches!(
            e("2001:db8::1/32"),
            CidrError::HostBitsSet { network, prefix_len: 32, .. } if network == ip("2001:db8::")
        ));
        assert!(matches!(e(""), CidrError::NotAnAddress { text, .. } if text.is_empty()));
        // The message names the text as written and what was probably meant.
        assert_eq!(
            e("10.1.0.1/16").to_string(),
            "bad CIDR '10.1.0.1/16': host bits set beyond /16 (the network is 10.1.0.0/16)"
        );
    }

    /// P0's IP table (paper 000, "Mechanism"): 220.x → A, 192.x → B, 210.x → C, else D.
    #[test]
    fn cidr_table_percentile_ip_table() {
        let mut t = CidrTable::new(3);
        t.add_str("220.0.0.0/8", 0).unwrap();
        t.add_str("192.0.0.0/8", 1).unwrap();
        t.add_str("210.0.0.0/8", 2).unwrap();
        assert_eq!(t.lookup(ip("220.1.2.3")), 0);
        assert_eq!(t.lookup(ip("192.168.0.9")), 1);
        assert_eq!(t.lookup(ip("210.9.9.9")), 2);
        assert_eq!(t.lookup(ip("8.8.8.8")), 3);
        assert_eq!(t.lookup(ip("2001:db8::1")), 3);
    }

    #[test]
    fn cidr_table_longest_prefix_wins_and_changes_at_run_time() {
        let mut t = CidrTable::new(9);
        t.add_str("10.0.0.0/8", 2).unwrap();
        t.add_str("10.1.0.0/16", 1).unwrap();
        t.add_str("10.1.2.0/24", 0).unwrap();
        t.add_str("2001:db8::/32", 5).unwrap();
        t.add_str("2001:db8:1::/48", 6).unwrap();
        assert_eq!(t.lookup(ip("10.1.2.3")), 0);
        assert_eq!(t.lookup(ip("10.1.3.3")), 1);
        assert_eq!(t.lookup(ip("10.200.0.1")), 2);
        assert_eq!(t.lookup(ip("11.0.0.1")), 9);
        assert_eq!(t.lookup(ip("2001:db8:1::7")), 6);
        assert_eq!(t.lookup(ip("2001:db8:2::7")), 5);
        // IPv4-mapped IPv6 is looked up as IPv4.
        assert_eq!(t.lookup(ip("::ffff:10.1.2.3")), 0);
        let (m, c) = t.lookup_match(ip("10.1.3.3")).unwrap();
        assert_eq!((m.to_string(), c), ("10.1.0.0/16".to_string(), 1));
        assert_eq!(t.remove(&"10.1.0.0/16".parse().unwrap()), Some(1));
        assert_eq!(t.lookup(ip("10.1.3.3")), 2);
        assert_eq!(t.add_str("10.0.0.0/8", 4).unwrap(), Some(2));
        assert_eq!(t.lookup(ip("10.1.3.3")), 4);
        t.add_str("0.0.0.0/0", 7).unwrap();
        assert_eq!(t.lookup(ip("11.0.0.1")), 7);
        assert_eq!(t.len(), 5);
        t.clear();
        assert_eq!(t.lookup(ip("10.1.2.3")), 9);
    }

    #[test]
    fn cidr_table_entries_are_sorted() {
        let mut t = CidrTable::new(0);
        for (c, k) in [
            ("2001:db8::/32", 1),
            ("10.1.0.0/16", 2),
            ("10.0.0.0/8", 3),
            ("9.0.0.0/8", 4),
        ] {
            t.add_str(c, k).unwrap();
        }
        let got: Vec<String> = t
            .entries()
            .iter()
            .map(|(c, k)| format!("{c}={k}"))
            .collect();
        assert_eq!(
            got,
            vec![
                "9.0.0.0/8=4",
                "10.0.0.0/8=3",
                "10.1.0.0/16=2",
                "2001:db8::/32=1"
            ]
        );
    }

    #[test]
    fn cidr_table_classifies_raw_packets_and_config_errors() {
        let cfg: CidrTableConfig = serde_json::from_str(
            r#"{"default_class": 3, "entries": [{"cidr": "10.0.0.0/8", "class": 0}]}"#,
        )
        .unwrap();
        let t = cfg.build().unwrap();
        let p = ipv4([10, 0, 0, 1], [192, 0, 2, 1], 17, &[0, 1, 0, 2, 0, 8, 0, 0]);
        assert_eq!(t.classify(p.as_slice()), 0);
        let by_dst = cfg
            .build()
            .unwrap()
            .with_match_on(AddressField::Destination);
        assert_eq!(by_dst.classify(p.as_slice()), 3);
        assert_eq!(t.classify(&[0xffu8, 1, 2][..]), 3);
        let bad = CidrTableConfig {
            default_class: 0,
            match_on: AddressField::Source,
            entries: vec![
                CidrEntryConfig {
                    cidr: "10.0.0.0/8".into(),
                    class: 0,
                },
                CidrEntryConfig {
                    cidr: "10.0.0.0/8".into(),
                    class: 1,
                },
            ],
        };
        assert_eq!(
            bad.build().unwrap_err(),
            ClassifierConfigError::DuplicateCidr {
                field: "entries[1].cidr".into(),
                cidr: "10.0.0.0/8".parse().unwrap()
            }
        );
        let e = serde_json::from_str::<CidrTableConfig>(r#"{"default_class": 0, "entry": []}"#)
            .unwrap_err();
        assert!(e.to_string().contains("unknown field `entry`"), "{e}");
    }
}

//! The frame facts the filter works on, read by the core's one header parser
//! ([`netsched_core::wire::parse_frame`]): the 5-tuple the rules match, the bytes the
//! signatures scan, and whether the packet is a fragment.
//!
//! The parse (Ethernet II with up to [`MAX_VLAN_TAGS`] VLAN tags of TPID 0x8100, 0x88a8 or
//! 0x9100; IPv4 with options, total length and fragment flags; IPv6 with at most
//! [`MAX_EXT_HEADERS`] extension headers walked, AH among them; TCP data offset, UDP ports)
//! and its tests live in `crates/core/src/wire/frame.rs`. Here the result is put in the
//! filter's terms: a frame with more than [`MAX_VLAN_TAGS`] tags is [`Parsed::Malformed`]
//! with field [`TOO_DEEP`], never non-IP (what it carries is unread); a later fragment has
//! ports 0 and `later_fragment` set; anything that does not fit its own length fields is
//! [`Parsed::Malformed`] with the field that failed. Never panics.
//!
//! Cost: O(header bytes). Memory: none.

use netsched_core::wire::{self, Frame, WireError};
use std::net::{IpAddr, Ipv6Addr};

pub use netsched_core::wire::frames::{
    ipv4_later_fragment, ipv6_fragment_frame, udp4_frame, with_ipv4_fragment,
};
pub use netsched_core::wire::{MAX_EXT_HEADERS, MAX_VLAN_TAGS, TOO_DEEP};

/// The fields an ACL rule matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FiveTuple {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub proto: u8,
    pub sport: u16,
    pub dport: u16,
}

impl FiveTuple {
    /// A flow hash (FNV-1a over the tuple, then MurmurHash3's 64-bit finaliser `fmix64`,
    /// Appleby 2011): the same flow always hashes the same. FNV-1a alone is not enough: its
    /// low bits depend only on the low bits of the input bytes, so flows whose ports differ in
    /// step (sport 1000+i, dport 2000+i) fell into one bucket modulo a small worker count; the
    /// finaliser makes every output bit depend on every input bit.
    pub fn flow_hash(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |bytes: &[u8]| {
            for &b in bytes {
                h ^= b as u64;
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        };
        match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                eat(&s.octets());
                eat(&d.octets());
            }
            (s, d) => {
                eat(&v6(s).octets());
                eat(&v6(d).octets());
            }
        }
        eat(&[self.proto]);
        eat(&self.sport.to_be_bytes());
        eat(&self.dport.to_be_bytes());
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

fn v6(a: IpAddr) -> Ipv6Addr {
    match a {
        IpAddr::V4(v) => v.to_ipv6_mapped(),
        IpAddr::V6(v) => v,
    }
}

/// What a frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// An IP packet: its tuple, where its payload (after the TCP/UDP header) starts and ends
    /// in the frame, whether it is a fragment (first or later), and whether it is a fragment
    /// after the first (no ports).
    Ip {
        tuple: FiveTuple,
        payload: (usize, usize),
        fragment: bool,
        later_fragment: bool,
    },
    /// Not IPv4/IPv6 (ARP, LLDP, …): the EtherType.
    NotIp { ethertype: u16 },
    /// Truncated or inconsistent, or a VLAN stack deeper than [`MAX_VLAN_TAGS`] (field
    /// [`TOO_DEEP`]): the field that failed.
    Malformed { field: &'static str },
}

/// Parse `frame` (the core's [`wire::parse_frame`], in the filter's terms).
#[inline]
pub fn parse(frame: &[u8]) -> Parsed {
    match wire::parse_frame(frame) {
        Frame::Ip(ip) => Parsed::Ip {
            tuple: FiveTuple {
                src: ip.src,
                dst: ip.dst,
                proto: ip.protocol,
                sport: ip.src_port,
                dport: ip.dst_port,
            },
            payload: (ip.payload_offset, ip.end),
            fragment: ip.fragment,
            later_fragment: ip.later_fragment,
        },
        Frame::NotIp { ethertype } => Parsed::NotIp { ethertype },
        Frame::Malformed(e) => Parsed::Malformed {
            field: malformed_field(e),
        },
    }
}

/// The field a [`Parsed::Malformed`] names: [`TOO_DEEP`] for a VLAN stack deeper than read,
/// else the header or field the parser names.
fn malformed_field(e: WireError) -> &'static str {
    match e {
        WireError::TooDeep { .. } => TOO_DEEP,
        e => e.what(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netsched_core::wire::frames::vlan_tagged;
    use netsched_core::wire::{TPID_8021AD, TPID_8021Q};

    #[test]
    fn flows_with_ports_in_step_spread_over_a_few_workers() {
        // sport 1000+i, dport 2000+i: FNV-1a's low bits alone put all of these on one worker.
        for workers in [2u64, 3, 4] {
            let mut used = std::collections::BTreeSet::new();
            for i in 0..8u16 {
                let f = udp4_frame([10, 99, 0, 1], [10, 99, 0, 2], 1000 + i, 2000 + i, b"x");
                let Parsed::Ip { tuple, .. } = parse(&f) else {
                    panic!("not IP");
                };
                used.insert(tuple.flow_hash() % 128 % workers);
            }
            assert!(used.len() >= 2, "{workers} workers: 8 flows on {used:?}");
        }
    }

    /// The core's answer in the filter's terms: tuple and payload bounds, non-IP with its
    /// EtherType, a too-deep VLAN stack as `TOO_DEEP`, other failures by field. (The parse
    /// itself is tested in `crates/core/src/wire/frame.rs`.)
    #[test]
    fn the_core_parse_is_put_in_the_filters_terms() {
        let f = udp4_frame([10, 0, 0, 1], [10, 0, 0, 2], 1234, 53, b"hello");
        let qinq = vlan_tagged(&f, &[TPID_8021AD, TPID_8021Q]);
        let Parsed::Ip {
            tuple,
            payload,
            fragment,
            later_fragment,
        } = parse(&qinq)
        else {
            panic!("{:?}", parse(&qinq));
        };
        assert_eq!(
            tuple,
            FiveTuple {
                src: "10.0.0.1".parse().unwrap(),
                dst: "10.0.0.2".parse().unwrap(),
                proto: 17,
                sport: 1234,
                dport: 53,
            }
        );
        assert_eq!(&qinq[payload.0..payload.1], b"hello");
        assert!(!fragment && !later_fragment);
        let later = ipv4_later_fragment([10, 0, 0, 1], [10, 0, 0, 2], 2, false, b"SIG");
        assert!(matches!(
            parse(&later),
            Parsed::Ip {
                fragment: true,
                later_fragment: true,
                tuple: FiveTuple {
                    sport: 0,
                    dport: 0,
                    ..
                },
                ..
            }
        ));
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(parse(&arp), Parsed::NotIp { ethertype: 0x0806 });
        let deep = vlan_tagged(&f, &[TPID_8021Q; MAX_VLAN_TAGS + 1]);
        assert_eq!(parse(&deep), Parsed::Malformed { field: TOO_DEEP });
        let mut bad = f.clone();
        bad[14] = 0x44; // IHL 4 words < 20 bytes
        assert_eq!(parse(&bad), Parsed::Malformed { field: "ipv4 ihl" });
        assert_eq!(
            parse(&f[..20]),
            Parsed::Malformed {
                field: "ipv4 header"
            }
        );
    }
}

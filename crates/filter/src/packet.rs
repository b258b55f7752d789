//! Header parsing of one Ethernet frame into the 5-tuple the rules match and the offset where
//! the payload the signatures scan begins.
//!
//! Ethernet II with at most [`MAX_VLAN_TAGS`] VLAN tags (TPID 0x8100, 0x88a8 or 0x9100; a
//! deeper stack is [`Parsed::Malformed`] with field [`TOO_DEEP`], never non-IP: what it
//! carries is unread), then IPv4 (RFC 791: IHL 5..15 with
//! options, total length bounds the packet, fragments by offset/MF) or IPv6 (RFC 8200: the
//! extension headers hop-by-hop, routing, destination options and fragment are walked, at most
//! [`MAX_EXT_HEADERS`]; AH/ESP/unknown next headers end the walk with that protocol), then TCP
//! (data offset) or UDP ports. A fragment is an IPv4 packet with MF set or a fragment offset
//! other than 0 (DF alone is not), or an IPv6 packet with a Fragment header anywhere in the
//! walked chain; every one is flagged `fragment`. A non-first fragment has no L4 header: ports
//! are 0 and `later_fragment` says so. Anything that does not fit its own length fields is [`Parsed::Malformed`] with the
//! field that failed. Never panics: every read is bounds-checked.
//!
//! Cost: O(header bytes). Memory: none.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// VLAN tags read at most (more: [`TOO_DEEP`]).
pub const MAX_VLAN_TAGS: usize = 3;

/// The [`Parsed::Malformed`] field of a frame with more than [`MAX_VLAN_TAGS`] tags.
pub const TOO_DEEP: &str = "vlan tag stack deeper than read";

/// IPv6 extension headers walked at most (more: malformed).
pub const MAX_EXT_HEADERS: usize = 8;

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
    /// An IP packet: its tuple, where its payload starts and ends in the frame, whether it
    /// is a fragment (first or later), and whether it is a fragment after the first (no
    /// ports).
    Ip {
        tuple: FiveTuple,
        payload: (usize, usize),
        fragment: bool,
        later_fragment: bool,
    },
    /// Not IPv4/IPv6 (ARP, LLDP, …): the EtherType.
    NotIp { ethertype: u16 },
    /// Truncated or inconsistent: the field that failed.
    Malformed { field: &'static str },
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// Parse `frame`.
pub fn parse(frame: &[u8]) -> Parsed {
    let Some(mut ethertype) = be16(frame, 12) else {
        return Parsed::Malformed {
            field: "ethernet header",
        };
    };
    let is_tag = |t: u16| matches!(t, 0x8100 | 0x88a8 | 0x9100);
    let mut at = 14;
    for _ in 0..MAX_VLAN_TAGS {
        if !is_tag(ethertype) {
            break;
        }
        let Some(t) = be16(frame, at + 2) else {
            return Parsed::Malformed { field: "vlan tag" };
        };
        ethertype = t;
        at += 4;
    }
    if is_tag(ethertype) {
        return Parsed::Malformed { field: TOO_DEEP };
    }
    match ethertype {
        0x0800 => ipv4(frame, at),
        0x86dd => ipv6(frame, at),
        other => Parsed::NotIp { ethertype: other },
    }
}

fn ipv4(frame: &[u8], at: usize) -> Parsed {
    let Some(h) = frame.get(at..at + 20) else {
        return Parsed::Malformed {
            field: "ipv4 header",
        };
    };
    if h[0] >> 4 != 4 {
        return Parsed::Malformed {
            field: "ipv4 version",
        };
    }
    let ihl = (h[0] & 0x0f) as usize * 4;
    let total = u16::from_be_bytes([h[2], h[3]]) as usize;
    if ihl < 20 || total < ihl || at + total > frame.len() {
        return Parsed::Malformed {
            field: "ipv4 length",
        };
    }
    let frag = u16::from_be_bytes([h[6], h[7]]);
    // Flags (3 bits: reserved, DF, MF) then the 13-bit offset in 8-byte units.
    let later_fragment = frag & 0x1fff != 0;
    let fragment = later_fragment || frag & 0x2000 != 0;
    let src = IpAddr::V4(Ipv4Addr::new(h[12], h[13], h[14], h[15]));
    let dst = IpAddr::V4(Ipv4Addr::new(h[16], h[17], h[18], h[19]));
    let frag = Frag {
        fragment,
        later: later_fragment,
    };
    l4(frame, h[9], src, dst, at + ihl, at + total, frag)
}

fn ipv6(frame: &[u8], at: usize) -> Parsed {
    let Some(h) = frame.get(at..at + 40) else {
        return Parsed::Malformed {
            field: "ipv6 header",
        };
    };
    if h[0] >> 4 != 6 {
        return Parsed::Malformed {
            field: "ipv6 version",
        };
    }
    let end = at + 40 + u16::from_be_bytes([h[4], h[5]]) as usize;
    if end > frame.len() {
        return Parsed::Malformed {
            field: "ipv6 payload length",
        };
    }
    let mut a = [0u8; 16];
    a.copy_from_slice(&h[8..24]);
    let src = IpAddr::V6(Ipv6Addr::from(a));
    a.copy_from_slice(&h[24..40]);
    let dst = IpAddr::V6(Ipv6Addr::from(a));
    let mut next = h[6];
    let mut off = at + 40;
    let mut frag = Frag::default();
    for _ in 0..=MAX_EXT_HEADERS {
        match next {
            0 | 43 | 60 => {
                let (Some(&nh), Some(&len)) = (frame.get(off), frame.get(off + 1)) else {
                    return Parsed::Malformed {
                        field: "ipv6 extension header",
                    };
                };
                next = nh;
                off += (len as usize + 1) * 8;
            }
            44 => {
                let (Some(&nh), Some(fo)) = (frame.get(off), be16(frame, off + 2)) else {
                    return Parsed::Malformed {
                        field: "ipv6 fragment header",
                    };
                };
                // Any Fragment header makes a fragment, an atomic one (offset 0, M clear)
                // included: RFC 8200 §4.5 has the receiver reassemble it too.
                frag.fragment = true;
                frag.later |= fo & 0xfff8 != 0;
                next = nh;
                off += 8;
            }
            proto => return l4(frame, proto, src, dst, off, end, frag),
        }
        if off > end {
            return Parsed::Malformed {
                field: "ipv6 extension header",
            };
        }
    }
    Parsed::Malformed {
        field: "ipv6 extension header count",
    }
}

/// Whether a packet is a fragment, and one after the first.
#[derive(Debug, Clone, Copy, Default)]
struct Frag {
    fragment: bool,
    later: bool,
}

fn l4(
    frame: &[u8],
    proto: u8,
    src: IpAddr,
    dst: IpAddr,
    start: usize,
    end: usize,
    frag: Frag,
) -> Parsed {
    let mut tuple = FiveTuple {
        src,
        dst,
        proto,
        sport: 0,
        dport: 0,
    };
    if frag.later {
        return Parsed::Ip {
            tuple,
            payload: (start, end),
            fragment: true,
            later_fragment: true,
        };
    }
    let header = match proto {
        6 => {
            let Some(&doff) = frame.get(start + 12).filter(|_| start + 20 <= end) else {
                return Parsed::Malformed {
                    field: "tcp header",
                };
            };
            let len = (doff >> 4) as usize * 4;
            if len < 20 || start + len > end {
                return Parsed::Malformed {
                    field: "tcp data offset",
                };
            }
            len
        }
        17 if start + 8 <= end => 8,
        17 => {
            return Parsed::Malformed {
                field: "udp header",
            }
        }
        _ => 0,
    };
    if header > 0 {
        tuple.sport = be16(frame, start).unwrap_or(0);
        tuple.dport = be16(frame, start + 2).unwrap_or(0);
    }
    Parsed::Ip {
        tuple,
        payload: (start + header, end),
        fragment: frag.fragment,
        later_fragment: frag.later,
    }
}

/// Frames for tests and benchmarks: Ethernet + IPv4 + UDP with `payload`.
pub fn udp4_frame(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 14];
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let total = (20 + 8 + payload.len()) as u16;
    let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    f.extend_from_slice(&ip);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&(8 + payload.len() as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    f
}

/// Frames for tests: `frame` (Ethernet + IPv4, no VLAN tags) with the IPv4 flags and
/// fragment offset field set to `field` (0x4000 DF, 0x2000 MF, the low 13 bits the offset in
/// 8-byte units).
pub fn with_ipv4_fragment(frame: &[u8], field: u16) -> Vec<u8> {
    let mut f = frame.to_vec();
    f[20..22].copy_from_slice(&field.to_be_bytes());
    f
}

/// Frames for tests: Ethernet + IPv4 (UDP) fragment after the first, `offset` in 8-byte units,
/// MF as `more`, carrying `data` with no L4 header.
pub fn ipv4_later_fragment(
    src: [u8; 4],
    dst: [u8; 4],
    offset: u16,
    more: bool,
    data: &[u8],
) -> Vec<u8> {
    let mut f = udp4_frame(src, dst, 0, 0, data);
    f.drain(34..42);
    f[16..18].copy_from_slice(&(20 + data.len() as u16).to_be_bytes());
    with_ipv4_fragment(&f, offset | if more { 0x2000 } else { 0 })
}

/// Frames for tests: Ethernet + IPv6 (fd00::… to fe00::…) whose first extension header is a
/// Fragment header (next header `proto`, `offset` in 8-byte units, M flag `more`), then `rest`:
/// the first fragment's L4 header and data, or a later fragment's data.
pub fn ipv6_fragment_frame(proto: u8, offset: u16, more: bool, rest: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 14];
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(8 + rest.len() as u16).to_be_bytes());
    f.extend_from_slice(&[44, 64]);
    f.extend_from_slice(&[0xfd; 16]);
    f.extend_from_slice(&[0xfe; 16]);
    f.extend_from_slice(&[proto, 0]);
    f.extend_from_slice(&((offset << 3) | more as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 1]);
    f.extend_from_slice(rest);
    f
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn udp_over_ipv4_gives_ports_and_payload() {
        let f = udp4_frame([10, 0, 0, 1], [10, 0, 0, 2], 1234, 53, b"hello");
        let Parsed::Ip { tuple, payload, .. } = parse(&f) else {
            panic!("{:?}", parse(&f));
        };
        assert_eq!((tuple.proto, tuple.sport, tuple.dport), (17, 1234, 53));
        assert_eq!(&f[payload.0..payload.1], b"hello");
    }

    #[test]
    fn ipv4_options_shift_the_l4_header() {
        let mut f = udp4_frame([10, 0, 0, 1], [10, 0, 0, 2], 7, 9, b"x");
        // IHL 6: insert a 4-byte option (NOPs) after the 20-byte header.
        f[14] = 0x46;
        let total = u16::from_be_bytes([f[16], f[17]]) + 4;
        f[16..18].copy_from_slice(&total.to_be_bytes());
        f.splice(34..34, [1u8, 1, 1, 0]);
        let Parsed::Ip { tuple, payload, .. } = parse(&f) else {
            panic!()
        };
        assert_eq!((tuple.sport, tuple.dport), (7, 9));
        assert_eq!(&f[payload.0..payload.1], b"x");
    }

    #[test]
    fn truncated_and_inconsistent_frames_name_the_field() {
        let f = udp4_frame([10, 0, 0, 1], [10, 0, 0, 2], 7, 9, b"abc");
        for cut in 0..f.len() {
            // Every prefix parses without panicking; short ones are malformed.
            let p = parse(&f[..cut]);
            if cut < 14 + 20 + 8 + 3 {
                assert!(matches!(p, Parsed::Malformed { .. }), "{cut}: {p:?}");
            }
        }
        let mut bad = f.clone();
        bad[14] = 0x44; // IHL 4 words < 20 bytes
        assert_eq!(
            parse(&bad),
            Parsed::Malformed {
                field: "ipv4 length"
            }
        );
    }

    #[test]
    fn later_fragments_have_no_ports_and_non_ip_is_named() {
        let mut f = udp4_frame([10, 0, 0, 1], [10, 0, 0, 2], 7, 9, b"abcdefgh");
        f[20..22].copy_from_slice(&0x0001u16.to_be_bytes()); // fragment offset 8
        let Parsed::Ip {
            tuple,
            later_fragment,
            ..
        } = parse(&f)
        else {
            panic!()
        };
        assert!(later_fragment);
        assert_eq!((tuple.sport, tuple.dport), (0, 0));
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(parse(&arp), Parsed::NotIp { ethertype: 0x0806 });
    }

    #[test]
    fn ipv6_extension_headers_are_walked_and_bounded() {
        let mut f = vec![0u8; 14];
        f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
        let mut ip = vec![0x60, 0, 0, 0, 0, 0, 0, 64];
        ip.extend_from_slice(&[0xfd; 16]);
        ip.extend_from_slice(&[0xfe; 16]);
        // hop-by-hop (8 bytes) → destination options (8 bytes) → UDP.
        let mut rest = vec![60, 0, 0, 0, 0, 0, 0, 0, 17, 0, 0, 0, 0, 0, 0, 0];
        rest.extend_from_slice(&[0, 80, 0, 81, 0, 9, 0, 0, b'z']);
        ip[6] = 0;
        ip[4..6].copy_from_slice(&(rest.len() as u16).to_be_bytes());
        f.extend_from_slice(&ip);
        f.extend_from_slice(&rest);
        let Parsed::Ip { tuple, payload, .. } = parse(&f) else {
            panic!("{:?}", parse(&f))
        };
        assert_eq!((tuple.proto, tuple.sport, tuple.dport), (17, 80, 81));
        assert_eq!(&f[payload.0..payload.1], b"z");
        // A chain of hop-by-hop headers longer than the bound is malformed.
        let mut long = f[..54].to_vec();
        let chain: Vec<u8> = (0..10).flat_map(|_| [0u8, 0, 0, 0, 0, 0, 0, 0]).collect();
        long[18..20].copy_from_slice(&(chain.len() as u16).to_be_bytes());
        long.extend_from_slice(&chain);
        assert!(matches!(parse(&long), Parsed::Malformed { .. }));
    }

    /// `f` with `tags` VLAN tags (TPIDs cycling 0x88a8, 0x8100, 0x9100) after the MACs.
    fn tagged(f: &[u8], tags: usize) -> Vec<u8> {
        let mut out = f[..12].to_vec();
        for i in 0..tags {
            let tpid: u16 = [0x88a8, 0x8100, 0x9100][i % 3];
            out.extend_from_slice(&tpid.to_be_bytes());
            out.extend_from_slice(&(100 + i as u16).to_be_bytes());
        }
        out.extend_from_slice(&f[12..]);
        out
    }

    #[test]
    fn vlan_stacks_up_to_the_bound_are_read_and_deeper_ones_are_too_deep() {
        let f = udp4_frame([10, 0, 0, 1], [10, 0, 0, 2], 7, 5000, b"x");
        for tags in 0..=MAX_VLAN_TAGS {
            let Parsed::Ip { tuple, .. } = parse(&tagged(&f, tags)) else {
                panic!("{tags} tags: {:?}", parse(&tagged(&f, tags)));
            };
            assert_eq!((tuple.proto, tuple.dport), (17, 5000), "{tags} tags");
        }
        for tags in [MAX_VLAN_TAGS + 1, MAX_VLAN_TAGS + 5] {
            assert_eq!(
                parse(&tagged(&f, tags)),
                Parsed::Malformed { field: TOO_DEEP },
                "{tags} tags"
            );
        }
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(parse(&tagged(&arp, 2)), Parsed::NotIp { ethertype: 0x0806 });
    }

    /// (fragment, later fragment, dport) of `f`.
    fn frag_of(f: &[u8]) -> (bool, bool, u16) {
        match parse(f) {
            Parsed::Ip {
                tuple,
                fragment,
                later_fragment,
                ..
            } => (fragment, later_fragment, tuple.dport),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn fragments_are_flagged_first_and_later_and_df_alone_is_not_one() {
        let f = udp4_frame([10, 0, 0, 1], [10, 0, 0, 2], 7, 5000, b"abcdefgh");
        assert_eq!(frag_of(&f), (false, false, 5000));
        assert_eq!(
            frag_of(&with_ipv4_fragment(&f, 0x4000)),
            (false, false, 5000)
        );
        // MF with offset 0: the first fragment, its ports read.
        assert_eq!(
            frag_of(&with_ipv4_fragment(&f, 0x2000)),
            (true, false, 5000)
        );
        assert_eq!(
            frag_of(&with_ipv4_fragment(&f, 0x6000)),
            (true, false, 5000)
        );
        let last = ipv4_later_fragment([10, 0, 0, 1], [10, 0, 0, 2], 2, false, b"SIG");
        assert_eq!(frag_of(&last), (true, true, 0));
        let middle = ipv4_later_fragment([10, 0, 0, 1], [10, 0, 0, 2], 2, true, b"SIG");
        assert_eq!(frag_of(&middle), (true, true, 0));
        // IPv6: a Fragment header makes a fragment, first (ports read), later or atomic.
        let udp = [0x1b, 0x58, 0x13, 0x88, 0, 16, 0, 0, b'x'];
        assert_eq!(
            frag_of(&ipv6_fragment_frame(17, 0, true, &udp)),
            (true, false, 5000)
        );
        assert_eq!(
            frag_of(&ipv6_fragment_frame(17, 0, false, &udp)),
            (true, false, 5000)
        );
        assert_eq!(
            frag_of(&ipv6_fragment_frame(17, 2, false, b"SIG")),
            (true, true, 0)
        );
    }
}

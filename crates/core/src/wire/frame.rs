//! Ethernet II frames (IPv4 RFC 894, IPv6 RFC 2464 §3) with a stack of VLAN tags (IEEE
//! 802.1Q-2018 §9.5–§9.6), read as far as a classifier needs: [`ethernet_payload`] (the IP packet)
//! and [`parse_frame`] (addresses, protocol, ports, fragment flags and the payload's bounds).
//!
//! The VLAN stack: a tag is a 2-byte TPID in the EtherType position and 2 bytes of TCI, then
//! the next EtherType. TPIDs read: 0x8100 (C-VLAN, 802.1Q), 0x88A8 (S-VLAN, 802.1ad provider
//! bridging, "QinQ") and 0x9100 (the pre-standard QinQ TPID some switches still send). At most
//! [`MAX_VLAN_TAGS`] tags are read; a deeper stack is [`WireError::TooDeep`] (what it carries
//! is unread, so it is neither IP nor a non-IP EtherType).

use super::ip::{ipv4_header, ipv6_header, IpPacket, ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use super::tcp::tcp_header_len;
use super::{be16, need, WireError, PROTO_TCP, PROTO_UDP};
use std::net::IpAddr;

/// TPID of an 802.1Q customer VLAN tag (C-TAG).
pub const TPID_8021Q: u16 = 0x8100;
/// TPID of an 802.1ad service VLAN tag (S-TAG, the outer tag of QinQ).
pub const TPID_8021AD: u16 = 0x88a8;
/// The pre-standard QinQ TPID (not IEEE-assigned; still sent by some switches).
pub const TPID_9100: u16 = 0x9100;

/// VLAN tags read at most (more: [`WireError::TooDeep`] with `what` [`TOO_DEEP`]). Three
/// covers QinQ (S-TAG + C-TAG) with one more tag to spare.
pub const MAX_VLAN_TAGS: usize = 3;

/// The `what` of the [`WireError::TooDeep`] of a frame with more than [`MAX_VLAN_TAGS`] tags.
pub const TOO_DEEP: &str = "vlan tag stack deeper than read";

#[inline]
fn is_tpid(ethertype: u16) -> bool {
    matches!(ethertype, TPID_8021Q | TPID_8021AD | TPID_9100)
}

/// The EtherType after the MAC addresses and up to [`MAX_VLAN_TAGS`] tags, and the offset
/// where what it names begins.
#[inline]
fn link_header(frame: &[u8]) -> Result<(u16, usize), WireError> {
    need("ethernet header", frame, 14)?;
    let mut ethertype = be16(frame, 12);
    let mut at = 14;
    for _ in 0..MAX_VLAN_TAGS {
        if !is_tpid(ethertype) {
            return Ok((ethertype, at));
        }
        need("vlan tag", frame, at + 4)?;
        ethertype = be16(frame, at + 2);
        at += 4;
    }
    if is_tpid(ethertype) {
        return Err(WireError::TooDeep {
            what: TOO_DEEP,
            limit: MAX_VLAN_TAGS,
        });
    }
    Ok((ethertype, at))
}

/// The IP packet inside an Ethernet II frame: skips the 14-byte header and up to
/// [`MAX_VLAN_TAGS`] VLAN tags, and checks the EtherType is IPv4 or IPv6 (else
/// [`WireError::Unsupported`] `ethertype`; a deeper stack is [`WireError::TooDeep`]). The
/// returned slice may carry Ethernet padding after the IP packet; [`super::parse_ip`] uses
/// the IP length fields.
pub fn ethernet_payload(frame: &[u8]) -> Result<&[u8], WireError> {
    let (ethertype, at) = link_header(frame)?;
    match ethertype {
        ETHERTYPE_IPV4 | ETHERTYPE_IPV6 => Ok(&frame[at..]),
        other => Err(WireError::Unsupported {
            what: "ethertype",
            value: other as u64,
        }),
    }
}

/// The IP packet of a frame, as [`parse_frame`] reads it. Offsets are from the frame's first
/// byte and always satisfy `ip_offset ≤ transport_offset ≤ payload_offset ≤ end ≤ frame.len()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpFrame {
    pub src: IpAddr,
    pub dst: IpAddr,
    /// Upper-layer protocol after any IPv6 extension headers (6 = TCP, 17 = UDP...).
    pub protocol: u8,
    /// TCP or UDP source port; 0 for other protocols and for a later fragment.
    pub src_port: u16,
    /// TCP or UDP destination port; 0 for other protocols and for a later fragment.
    pub dst_port: u16,
    /// Where the IP header starts (after the Ethernet header and the VLAN tags).
    pub ip_offset: usize,
    /// Where the upper-layer header starts (after IPv4 options or IPv6 extension headers).
    pub transport_offset: usize,
    /// Where the payload starts: after the TCP header (data offset) or the 8-byte UDP header;
    /// at `transport_offset` for other protocols and for a later fragment.
    pub payload_offset: usize,
    /// Where the IP packet ends by its own length field (Ethernet padding after it excluded).
    pub end: usize,
    /// IPv4 MF set or offset non-zero (DF alone is not a fragment); IPv6 any Fragment header
    /// in the walked chain, an atomic one (offset 0, M clear) included (RFC 8200 §4.5).
    pub fragment: bool,
    /// A fragment offset other than 0: no TCP/UDP header here, ports are 0.
    pub later_fragment: bool,
}

/// What an Ethernet frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// An IPv4 or IPv6 packet whose headers fit their own length fields.
    Ip(IpFrame),
    /// The EtherType after the VLAN stack is neither IPv4, IPv6 nor a VLAN TPID (ARP, LLDP...).
    NotIp { ethertype: u16 },
    /// Not read to the end: truncated or inconsistent (the error names the field), or a VLAN
    /// stack deeper than [`MAX_VLAN_TAGS`] ([`WireError::TooDeep`]).
    Malformed(WireError),
}

/// Parse an Ethernet II frame: the VLAN stack, the IPv4 header (IHL, options, total length,
/// fragment flags) or the IPv6 header and its extension headers (at most
/// [`super::MAX_EXT_HEADERS`]), and for a packet that is not a later fragment the TCP header
/// (data offset within the IP length) or UDP header (8 bytes within the IP length). The IP
/// version nibble must match the EtherType. Never panics.
#[inline]
pub fn parse_frame(frame: &[u8]) -> Frame {
    let (ethertype, at) = match link_header(frame) {
        Ok(x) => x,
        Err(e) => return Frame::Malformed(e),
    };
    let ip = &frame[at..];
    let header = match ethertype {
        ETHERTYPE_IPV4 => ipv4_header(ip),
        ETHERTYPE_IPV6 => ipv6_header(ip),
        other => return Frame::NotIp { ethertype: other },
    };
    match header.and_then(|p| ip_frame(p, at)) {
        Ok(f) => Frame::Ip(f),
        Err(e) => Frame::Malformed(e),
    }
}

/// The ports and payload bounds of the IP packet `p`, which starts at `at` in its frame.
#[inline]
fn ip_frame(p: IpPacket<'_>, at: usize) -> Result<IpFrame, WireError> {
    let seg = p.transport;
    let (src_port, dst_port, l4_len) = if !p.first_fragment {
        (0, 0, 0)
    } else {
        match p.protocol {
            PROTO_TCP => {
                let n = tcp_header_len(seg)?;
                (be16(seg, 0), be16(seg, 2), n)
            }
            PROTO_UDP => {
                need("udp header", seg, 8)?;
                (be16(seg, 0), be16(seg, 2), 8)
            }
            _ => (0, 0, 0),
        }
    };
    let transport_offset = at + p.header_len;
    Ok(IpFrame {
        src: p.src,
        dst: p.dst,
        protocol: p.protocol,
        src_port,
        dst_port,
        ip_offset: at,
        transport_offset,
        payload_offset: transport_offset + l4_len,
        end: transport_offset + seg.len(),
        fragment: p.is_fragment,
        later_fragment: !p.first_fragment,
    })
}

#[cfg(test)]
mod tests {
    use super::super::frames::{
        ipv4_later_fragment, ipv6_fragment_frame, tcp4_frame, udp4_frame, vlan_tagged,
        with_ipv4_fragment,
    };
    use super::super::{ack_info, is_tcp_pure_ack, parse_ip, ports, MAX_EXT_HEADERS, TCP_ACK};
    use super::*;
    use proptest::prelude::*;

    fn ip_of(f: &[u8]) -> IpFrame {
        match parse_frame(f) {
            Frame::Ip(ip) => ip,
            other => panic!("{other:?}"),
        }
    }

    fn malformed_field(f: &[u8]) -> &'static str {
        match parse_frame(f) {
            Frame::Malformed(e) => e.what(),
            other => panic!("{other:?}"),
        }
    }

    /// TPIDs cycling 0x88a8, 0x8100, 0x9100, `n` of them.
    fn stack(n: usize) -> Vec<u16> {
        (0..n)
            .map(|i| [TPID_8021AD, TPID_8021Q, TPID_9100][i % 3])
            .collect()
    }

    #[test]
    fn udp_over_ipv4_gives_ports_and_payload() {
        let f = udp4_frame([10, 0, 0, 1], [10, 0, 0, 2], 1234, 53, b"hello");
        let ip = ip_of(&f);
        assert_eq!((ip.protocol, ip.src_port, ip.dst_port), (17, 1234, 53));
        assert_eq!(&f[ip.payload_offset..ip.end], b"hello");
        assert_eq!((ip.ip_offset, ip.transport_offset), (14, 34));
    }

    #[test]
    fn ipv4_options_shift_the_l4_header() {
        let mut f = udp4_frame([10, 0, 0, 1], [10, 0, 0, 2], 7, 9, b"x");
        // IHL 6: insert a 4-byte option (NOPs) after the 20-byte header.
        f[14] = 0x46;
        let total = u16::from_be_bytes([f[16], f[17]]) + 4;
        f[16..18].copy_from_slice(&total.to_be_bytes());
        f.splice(34..34, [1u8, 1, 1, 0]);
        let ip = ip_of(&f);
        assert_eq!((ip.src_port, ip.dst_port), (7, 9));
        assert_eq!(&f[ip.payload_offset..ip.end], b"x");
    }

    #[test]
    fn truncated_and_inconsistent_frames_name_the_field() {
        let f = udp4_frame([10, 0, 0, 1], [10, 0, 0, 2], 7, 9, b"abc");
        for cut in 0..f.len() {
            // Every prefix parses without panicking; short ones are malformed.
            let p = parse_frame(&f[..cut]);
            if cut < 14 + 20 + 8 + 3 {
                assert!(matches!(p, Frame::Malformed(_)), "{cut}: {p:?}");
            }
        }
        assert_eq!(malformed_field(&f[..10]), "ethernet header");
        assert_eq!(malformed_field(&f[..30]), "ipv4 header");
        assert_eq!(malformed_field(&f[..40]), "ipv4 total length");
        let mut bad = f.clone();
        bad[14] = 0x44; // IHL 4 words < 20 bytes
        assert_eq!(malformed_field(&bad), "ipv4 ihl");
        let mut v6_in_v4 = f.clone();
        v6_in_v4[14] = 0x65;
        assert_eq!(malformed_field(&v6_in_v4), "ipv4 version");
        let mut short_udp = f.clone();
        short_udp[16..18].copy_from_slice(&26u16.to_be_bytes()); // 6 bytes of UDP
        assert_eq!(malformed_field(&short_udp), "udp header");
        let tcp = tcp4_frame([10, 0, 0, 1], [10, 0, 0, 2], 1, 2, TCP_ACK, 0, b"");
        let mut bad_doff = tcp.clone();
        bad_doff[46] = 4 << 4;
        assert_eq!(malformed_field(&bad_doff), "tcp data offset");
        let mut short_tcp = tcp.clone();
        short_tcp[16..18].copy_from_slice(&30u16.to_be_bytes()); // 10 bytes of TCP
        assert_eq!(malformed_field(&short_tcp), "tcp header");
    }

    #[test]
    fn later_fragments_have_no_ports_and_non_ip_is_named() {
        let mut f = udp4_frame([10, 0, 0, 1], [10, 0, 0, 2], 7, 9, b"abcdefgh");
        f[20..22].copy_from_slice(&0x0001u16.to_be_bytes()); // fragment offset 8
        let ip = ip_of(&f);
        assert!(ip.later_fragment);
        assert_eq!((ip.src_port, ip.dst_port), (0, 0));
        assert_eq!(ip.payload_offset, ip.transport_offset);
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(parse_frame(&arp), Frame::NotIp { ethertype: 0x0806 });
    }

    /// Ethernet + IPv6 (fd00::… to fe00::…) with first next header `first` and `rest` after
    /// the fixed header.
    fn ipv6_frame(first: u8, rest: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 14];
        f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
        let mut ip = vec![0x60, 0, 0, 0, 0, 0, first, 64];
        ip[4..6].copy_from_slice(&(rest.len() as u16).to_be_bytes());
        ip.extend_from_slice(&[0xfd; 16]);
        ip.extend_from_slice(&[0xfe; 16]);
        f.extend_from_slice(&ip);
        f.extend_from_slice(rest);
        f
    }

    #[test]
    fn ipv6_extension_headers_are_walked_and_bounded() {
        // hop-by-hop (8 bytes) → destination options (8 bytes) → UDP.
        let mut rest = vec![60, 0, 0, 0, 0, 0, 0, 0, 17, 0, 0, 0, 0, 0, 0, 0];
        rest.extend_from_slice(&[0, 80, 0, 81, 0, 9, 0, 0, b'z']);
        let f = ipv6_frame(0, &rest);
        let ip = ip_of(&f);
        assert_eq!((ip.protocol, ip.src_port, ip.dst_port), (17, 80, 81));
        assert_eq!(&f[ip.payload_offset..ip.end], b"z");
        assert_eq!(ip.transport_offset, 14 + 40 + 16);
        // A chain of hop-by-hop headers longer than the bound is malformed.
        let chain: Vec<u8> = (0..10).flat_map(|_| [0u8, 0, 0, 0, 0, 0, 0, 0]).collect();
        assert!(matches!(
            parse_frame(&ipv6_frame(0, &chain)),
            Frame::Malformed(_)
        ));
    }

    /// [`MAX_EXT_HEADERS`] destination-options headers are walked, one more is malformed.
    #[test]
    fn ipv6_extension_header_count_bound_is_exact() {
        let chain = |n: usize| {
            let mut r: Vec<u8> = (0..n).flat_map(|_| [60u8, 0, 0, 0, 0, 0, 0, 0]).collect();
            r[(n - 1) * 8] = 59; // the last one's next header: No Next Header
            ipv6_frame(60, &r)
        };
        let ip = ip_of(&chain(MAX_EXT_HEADERS));
        assert_eq!(ip.protocol, 59);
        assert_eq!(ip.transport_offset, ip.end);
        assert_eq!(
            malformed_field(&chain(MAX_EXT_HEADERS + 1)),
            "ipv6 extension header count"
        );
        assert!(parse_ip(&chain(MAX_EXT_HEADERS + 1)[14..]).is_err());
    }

    /// AH (RFC 4302 §2.2) is walked like the other extension headers: the rules and the ports
    /// are those of the protected TCP segment.
    #[test]
    fn ipv6_authentication_header_is_walked_to_the_ports() {
        let mut rest = vec![6u8, 4, 0, 0];
        rest.resize(24, 0); // (4 + 2) × 4 = 24 bytes of AH
        rest.extend_from_slice(&[
            0x9c,
            0x40,
            0,
            22,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            5 << 4,
            0x10,
            0,
            1,
        ]);
        rest.extend_from_slice(&[0, 0, 0, 0]);
        let f = ipv6_frame(51, &rest);
        let ip = ip_of(&f);
        assert_eq!((ip.protocol, ip.src_port, ip.dst_port), (6, 40000, 22));
        assert_eq!(ip.transport_offset, 14 + 40 + 24);
        assert!(is_tcp_pure_ack(ethernet_payload(&f).unwrap()));
    }

    #[test]
    fn vlan_stacks_up_to_the_bound_are_read_and_deeper_ones_are_too_deep() {
        let f = udp4_frame([10, 0, 0, 1], [10, 0, 0, 2], 7, 5000, b"x");
        for tags in 0..=MAX_VLAN_TAGS {
            let ip = ip_of(&vlan_tagged(&f, &stack(tags)));
            assert_eq!((ip.protocol, ip.dst_port), (17, 5000), "{tags} tags");
            assert_eq!(ip.ip_offset, 14 + 4 * tags);
        }
        for tags in [MAX_VLAN_TAGS + 1, MAX_VLAN_TAGS + 5] {
            assert_eq!(
                parse_frame(&vlan_tagged(&f, &stack(tags))),
                Frame::Malformed(WireError::TooDeep {
                    what: TOO_DEEP,
                    limit: MAX_VLAN_TAGS
                }),
                "{tags} tags"
            );
        }
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(
            parse_frame(&vlan_tagged(&arp, &stack(2))),
            Frame::NotIp { ethertype: 0x0806 }
        );
        // A tag cut short.
        assert_eq!(
            malformed_field(&vlan_tagged(&f, &stack(2))[..20]),
            "vlan tag"
        );
    }

    /// The link's path: `ethernet_payload` reads the same stack as `parse_frame`, so QinQ
    /// (802.1ad S-TAG + 802.1Q C-TAG), the legacy 0x9100 TPID and three tags reach the IP
    /// packet, and a pure ACK inside them is recognised.
    #[test]
    fn ethernet_payload_reads_qinq_8021ad_and_three_tags_and_refuses_deeper() {
        let ack = tcp4_frame([10, 0, 0, 1], [10, 0, 0, 2], 40000, 80, TCP_ACK, 77, b"");
        for tpids in [
            vec![TPID_8021AD],
            vec![TPID_8021AD, TPID_8021Q],
            vec![TPID_9100, TPID_8021Q],
            vec![TPID_8021Q, TPID_8021Q],
            stack(MAX_VLAN_TAGS),
        ] {
            let f = vlan_tagged(&ack, &tpids);
            let ip = ethernet_payload(&f).unwrap_or_else(|e| panic!("{tpids:x?}: {e}"));
            assert_eq!(ip.len(), f.len() - 14 - 4 * tpids.len(), "{tpids:x?}");
            assert!(is_tcp_pure_ack(ip), "{tpids:x?}");
            assert_eq!(ack_info(ip).map(|a| a.ack), Some(77), "{tpids:x?}");
        }
        let deep = vlan_tagged(&ack, &stack(MAX_VLAN_TAGS + 1));
        assert_eq!(
            ethernet_payload(&deep),
            Err(WireError::TooDeep {
                what: TOO_DEEP,
                limit: MAX_VLAN_TAGS
            })
        );
        assert_eq!(
            ethernet_payload(&deep).unwrap_err().to_string(),
            "vlan tag stack deeper than read: more than 3"
        );
        let cut = vlan_tagged(&ack, &[TPID_8021AD, TPID_8021Q]);
        assert!(matches!(
            ethernet_payload(&cut[..19]),
            Err(WireError::Truncated {
                what: "vlan tag",
                ..
            })
        ));
        let mut arp = vlan_tagged(&ack, &[TPID_8021AD, TPID_8021Q]);
        arp[20..22].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(
            ethernet_payload(&arp),
            Err(WireError::Unsupported {
                what: "ethertype",
                value: 0x0806
            })
        );
    }

    /// (fragment, later fragment, dport) of `f`.
    fn frag_of(f: &[u8]) -> (bool, bool, u16) {
        let ip = ip_of(f);
        (ip.fragment, ip.later_fragment, ip.dst_port)
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
        // The IP-level view agrees: an atomic fragment is a fragment, not a pure-ACK candidate.
        let atomic = ipv6_fragment_frame(17, 0, false, &udp);
        let ip = parse_ip(ethernet_payload(&atomic).unwrap()).unwrap();
        assert!(ip.is_fragment && ip.first_fragment);
    }

    /// `bytes` behind a prefix that reaches the deeper parsers: Ethernet, a VLAN stack of
    /// `tags` TPIDs, an IP EtherType and a version nibble and length fields that fit.
    fn plausible(mut bytes: Vec<u8>, tags: usize, v6: bool, proto: u8) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        for t in stack(tags) {
            f.extend_from_slice(&t.to_be_bytes());
            f.extend_from_slice(&[0, 1]);
        }
        let n = bytes.len();
        if v6 {
            f.extend_from_slice(&0x86ddu16.to_be_bytes());
            bytes[0] = 0x60;
            bytes[4..6].copy_from_slice(&((n - 40) as u16).to_be_bytes());
            bytes[6] = proto;
        } else {
            f.extend_from_slice(&0x0800u16.to_be_bytes());
            bytes[0] = 0x45;
            bytes[2..4].copy_from_slice(&(n as u16).to_be_bytes());
            bytes[9] = proto;
        }
        f.extend_from_slice(&bytes);
        f
    }

    /// What `parse_frame` says of `f` agrees with the IP-level helpers over
    /// `ethernet_payload`, and its offsets are in order within the frame.
    fn check_agreement(f: &[u8]) {
        match parse_frame(f) {
            Frame::Ip(ip) => {
                assert!(ip.ip_offset <= ip.transport_offset);
                assert!(ip.transport_offset <= ip.payload_offset);
                assert!(ip.payload_offset <= ip.end && ip.end <= f.len());
                let pkt = ethernet_payload(f).unwrap();
                let p = parse_ip(pkt).unwrap();
                assert_eq!((p.src, p.dst, p.protocol), (ip.src, ip.dst, ip.protocol));
                assert_eq!(p.is_fragment, ip.fragment);
                assert_eq!(p.first_fragment, !ip.later_fragment);
                assert_eq!(ip.ip_offset + p.header_len, ip.transport_offset);
                if matches!(ip.protocol, PROTO_TCP | PROTO_UDP) && !ip.later_fragment {
                    assert_eq!(ports(pkt), Some((ip.src_port, ip.dst_port)));
                }
            }
            Frame::NotIp { .. } => assert!(matches!(
                ethernet_payload(f),
                Err(WireError::Unsupported { .. })
            )),
            Frame::Malformed(WireError::TooDeep { .. }) => assert!(matches!(
                ethernet_payload(f),
                Err(WireError::TooDeep { .. })
            )),
            Frame::Malformed(_) => {}
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn frame_parse_never_panics_on_random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse_frame(&bytes);
            check_agreement(&bytes);
        }

        /// Random bytes behind a VLAN stack, an IP EtherType, a version nibble and lengths
        /// that fit, to reach the IPv6 walk and the L4 headers.
        #[test]
        fn frame_parse_never_panics_on_plausible_frames(
            bytes in proptest::collection::vec(any::<u8>(), 40..160),
            tags in 0..=MAX_VLAN_TAGS + 1,
            v6 in any::<bool>(),
            proto in prop_oneof![Just(6u8), Just(17u8), Just(0u8), Just(43u8), Just(44u8), Just(51u8), Just(60u8), Just(59u8)],
        ) {
            let f = plausible(bytes, tags, v6, proto);
            check_agreement(&f);
            for cut in [f.len() / 2, f.len().saturating_sub(1)] {
                check_agreement(&f[..cut]);
            }
        }
    }
}

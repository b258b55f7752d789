//! TCP header and options (RFC 9293 §3.1), UDP ports (RFC 768), and the pure-ACK facts the
//! ACK-separation discipline and its filter need (P3; RFC 3449 §5.2.1).

use super::ip::parse_ip;
use super::{be16, be32, need, AckInfo, WireError, PROTO_TCP, PROTO_UDP};
use std::net::IpAddr;

/// TCP flag bits (RFC 9293 §3.1).
pub const TCP_FIN: u8 = 0x01;
pub const TCP_SYN: u8 = 0x02;
pub const TCP_RST: u8 = 0x04;
pub const TCP_PSH: u8 = 0x08;
pub const TCP_ACK: u8 = 0x10;

/// What the options of a segment contain, as far as ACK filtering cares.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpOptionsSummary {
    /// A SACK block option (kind 5, RFC 2018 §3).
    pub sack: bool,
    /// A timestamps option (kind 8, RFC 7323 §3).
    pub timestamps: bool,
    /// Any option other than EOL, NOP, timestamps, SACK — or an option list that does not
    /// parse (treated as "other" so such a segment is never filtered).
    pub other: bool,
}

/// A parsed TCP header, borrowing the segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpHeader<'a> {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: u32,
    pub ack: u32,
    /// The low 8 flag bits (CWR ECE URG ACK PSH RST SYN FIN).
    pub flags: u8,
    /// The raw 16-bit window field (not scaled: the scale factor is only in the SYN).
    pub window: u16,
    /// Header length in bytes (data offset × 4).
    pub header_len: usize,
    pub options: &'a [u8],
    /// Payload bytes, from the IP length fields (never from link-layer padding).
    pub payload_len: usize,
}

impl TcpHeader<'_> {
    /// Walk the options (RFC 9293 §3.2): kind 0 ends the list, kind 1 is one byte, every other
    /// kind has a length byte ≥ 2.
    pub fn options_summary(&self) -> TcpOptionsSummary {
        let mut s = TcpOptionsSummary::default();
        let o = self.options;
        let mut i = 0;
        while i < o.len() {
            match o[i] {
                0 => break,
                1 => i += 1,
                kind => {
                    if i + 1 >= o.len()
                        || (o[i + 1] as usize) < 2
                        || i + o[i + 1] as usize > o.len()
                    {
                        s.other = true;
                        break;
                    }
                    match kind {
                        5 => s.sack = true,
                        8 if o[i + 1] == 10 => s.timestamps = true,
                        _ => s.other = true,
                    }
                    i += o[i + 1] as usize;
                }
            }
        }
        s
    }
}

/// The length of the TCP header at the start of `seg` (data offset × 4, RFC 9293 §3.1): at
/// least 20 bytes, and within `seg`.
#[inline]
pub(super) fn tcp_header_len(seg: &[u8]) -> Result<usize, WireError> {
    need("tcp header", seg, 20)?;
    let header_len = ((seg[12] >> 4) as usize) * 4;
    if header_len < 20 {
        return Err(WireError::Malformed {
            what: "tcp data offset",
            value: (header_len / 4) as u64,
        });
    }
    need("tcp data offset", seg, header_len)?;
    Ok(header_len)
}

/// Parse a TCP segment (`seg` = the IP payload, already cut to the IP length).
pub fn parse_tcp(seg: &[u8]) -> Result<TcpHeader<'_>, WireError> {
    let header_len = tcp_header_len(seg)?;
    Ok(TcpHeader {
        src_port: be16(seg, 0),
        dst_port: be16(seg, 2),
        seq: be32(seg, 4),
        ack: be32(seg, 8),
        flags: seg[13],
        window: be16(seg, 14),
        header_len,
        options: &seg[20..header_len],
        payload_len: seg.len() - header_len,
    })
}

/// Deterministic FNV-1a 64-bit hash (Fowler–Noll–Vo, offset basis and prime from the
/// reference description) of a flow's 4-tuple in one direction.
pub fn flow_hash(src: IpAddr, dst: IpAddr, src_port: u16, dst_port: u16) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= b as u64;
            h = h.wrapping_mul(PRIME);
        }
    };
    for addr in [src, dst] {
        match addr {
            IpAddr::V4(a) => {
                eat(&[4]);
                eat(&a.octets());
            }
            IpAddr::V6(a) => {
                eat(&[6]);
                eat(&a.octets());
            }
        }
    }
    eat(&src_port.to_be_bytes());
    eat(&dst_port.to_be_bytes());
    h
}

/// Source and destination ports of a TCP or UDP packet (first fragment only).
pub fn ports(ip_packet: &[u8]) -> Option<(u16, u16)> {
    let ip = parse_ip(ip_packet).ok()?;
    if !ip.first_fragment || !(ip.protocol == PROTO_TCP || ip.protocol == PROTO_UDP) {
        return None;
    }
    need("ports", ip.transport, 4).ok()?;
    Some((be16(ip.transport, 0), be16(ip.transport, 2)))
}

/// The ACK facts of a TCP segment in an IP packet; `None` for non-TCP, fragments (a fragment
/// cannot be classified as a pure ACK) and anything truncated or malformed.
pub fn ack_info(ip_packet: &[u8]) -> Option<AckInfo> {
    let ip = parse_ip(ip_packet).ok()?;
    if ip.protocol != PROTO_TCP || ip.is_fragment {
        return None;
    }
    let tcp = parse_tcp(ip.transport).ok()?;
    let opts = tcp.options_summary();
    // RFC 3449 §5.2.1: a pure ACK carries no data; SYN/FIN/RST change connection state.
    let pure = tcp.flags & TCP_ACK != 0
        && tcp.flags & (TCP_SYN | TCP_FIN | TCP_RST) == 0
        && tcp.payload_len == 0;
    Some(AckInfo {
        flow: flow_hash(ip.src, ip.dst, tcp.src_port, tcp.dst_port),
        ack: tcp.ack,
        pure,
        has_sack_or_other_options: opts.sack || opts.other,
        window: tcp.window as u32,
    })
}

/// ACK set, zero payload (by the IP length fields), none of SYN/FIN/RST — P3's ACK class.
pub fn is_tcp_pure_ack(ip_packet: &[u8]) -> bool {
    ack_info(ip_packet).is_some_and(|a| a.pure)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::{ethernet_payload, IpPacket};
    use super::*;
    use proptest::prelude::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    /// Build a TCP header with `options` (padded to 4 bytes) and `payload` bytes of data.
    pub(crate) fn tcp_segment(
        flags: u8,
        ack: u32,
        window: u16,
        options: &[u8],
        payload: usize,
    ) -> Vec<u8> {
        let mut opts = options.to_vec();
        while !opts.len().is_multiple_of(4) {
            opts.push(0);
        }
        let hl = 20 + opts.len();
        let mut s = vec![0u8; hl + payload];
        s[0..2].copy_from_slice(&40000u16.to_be_bytes());
        s[2..4].copy_from_slice(&80u16.to_be_bytes());
        s[4..8].copy_from_slice(&1000u32.to_be_bytes());
        s[8..12].copy_from_slice(&ack.to_be_bytes());
        s[12] = ((hl / 4) as u8) << 4;
        s[13] = flags;
        s[14..16].copy_from_slice(&window.to_be_bytes());
        s[20..hl].copy_from_slice(&opts);
        s
    }

    pub(crate) fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, transport: &[u8]) -> Vec<u8> {
        let mut p = vec![0u8; 20];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&((20 + transport.len()) as u16).to_be_bytes());
        p[8] = 64;
        p[9] = proto;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        p.extend_from_slice(transport);
        p
    }

    /// IPv6 with the given extension headers (each `(next_header_code, bytes)`).
    fn ipv6(ext: &[(u8, Vec<u8>)], proto: u8, transport: &[u8]) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[0] = 0x60;
        let mut body = Vec::new();
        let codes: Vec<u8> = ext.iter().map(|e| e.0).chain([proto]).collect();
        for (i, (_, bytes)) in ext.iter().enumerate() {
            let mut h = bytes.clone();
            h[0] = codes[i + 1];
            body.extend_from_slice(&h);
        }
        body.extend_from_slice(transport);
        p[4..6].copy_from_slice(&(body.len() as u16).to_be_bytes());
        p[6] = codes[0];
        p[7] = 64;
        p[8..24].copy_from_slice(&Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1).octets());
        p[24..40].copy_from_slice(&Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2).octets());
        p.extend_from_slice(&body);
        p
    }

    const TS: [u8; 12] = [1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2];

    #[test]
    fn ipv4_pure_ack_with_timestamps_is_pure_and_filterable() {
        let p = ipv4(
            [10, 0, 0, 1],
            [10, 0, 0, 2],
            6,
            &tcp_segment(TCP_ACK, 5000, 100, &TS, 0),
        );
        let a = ack_info(&p).unwrap();
        assert!(a.pure);
        assert!(!a.has_sack_or_other_options);
        assert_eq!((a.ack, a.window), (5000, 100));
        assert!(is_tcp_pure_ack(&p));
        assert_eq!(ports(&p), Some((40000, 80)));
    }

    #[test]
    fn data_syn_fin_rst_are_not_pure_acks() {
        for (flags, payload) in [
            (TCP_ACK | TCP_PSH, 10),
            (TCP_SYN | TCP_ACK, 0),
            (TCP_FIN | TCP_ACK, 0),
            (TCP_RST | TCP_ACK, 0),
            (0, 0),
        ] {
            let p = ipv4(
                [1, 1, 1, 1],
                [2, 2, 2, 2],
                6,
                &tcp_segment(flags, 1, 1, &[], payload),
            );
            assert!(!is_tcp_pure_ack(&p), "flags {flags:#x} payload {payload}");
        }
    }

    /// Ethernet pads a 54-byte ACK frame to 60 bytes: the payload length must come from the IP
    /// total length, so the padded ACK is still pure (the P3 classifier's classic pitfall).
    #[test]
    fn ethernet_padding_does_not_count_as_payload() {
        let ip = ipv4(
            [10, 0, 0, 1],
            [10, 0, 0, 2],
            6,
            &tcp_segment(TCP_ACK, 7, 9, &[], 0),
        );
        let mut frame = vec![0u8; 12];
        frame.extend_from_slice(&ETHERTYPE_IPV4_BYTES);
        frame.extend_from_slice(&ip);
        frame.resize(60, 0);
        let inner = ethernet_payload(&frame).unwrap();
        assert_eq!(inner.len(), 46);
        assert!(is_tcp_pure_ack(inner));
    }
    const ETHERTYPE_IPV4_BYTES: [u8; 2] = [0x08, 0x00];

    #[test]
    fn ethernet_vlan_tag_and_bad_ethertype() {
        let ip = ipv4(
            [10, 0, 0, 1],
            [10, 0, 0, 2],
            17,
            &[0, 53, 0, 53, 0, 8, 0, 0],
        );
        let mut frame = vec![0u8; 12];
        frame.extend_from_slice(&[0x81, 0x00, 0x00, 0x05, 0x08, 0x00]);
        frame.extend_from_slice(&ip);
        let inner = ethernet_payload(&frame).unwrap();
        assert_eq!(ports(inner), Some((53, 53)));
        let mut arp = vec![0u8; 12];
        arp.extend_from_slice(&[0x08, 0x06]);
        arp.resize(60, 0);
        assert_eq!(
            ethernet_payload(&arp),
            Err(WireError::Unsupported {
                what: "ethertype",
                value: 0x0806
            })
        );
    }

    #[test]
    fn sack_and_unknown_options_are_flagged() {
        let sack = [1, 1, 5, 10, 0, 0, 0, 1, 0, 0, 0, 2];
        let p = ipv4(
            [1, 1, 1, 1],
            [2, 2, 2, 2],
            6,
            &tcp_segment(TCP_ACK, 1, 1, &sack, 0),
        );
        assert!(ack_info(&p).unwrap().has_sack_or_other_options);
        let mss = [2, 4, 5, 0xb4];
        let p = ipv4(
            [1, 1, 1, 1],
            [2, 2, 2, 2],
            6,
            &tcp_segment(TCP_ACK, 1, 1, &mss, 0),
        );
        assert!(ack_info(&p).unwrap().has_sack_or_other_options);
        // A bad option length is "other" too: never filter what we cannot read.
        let bad = [8, 1, 0, 0];
        let p = ipv4(
            [1, 1, 1, 1],
            [2, 2, 2, 2],
            6,
            &tcp_segment(TCP_ACK, 1, 1, &bad, 0),
        );
        assert!(ack_info(&p).unwrap().has_sack_or_other_options);
    }

    #[test]
    fn ipv6_extension_headers_are_walked() {
        let hbh = vec![0u8; 8];
        let mut routing = vec![0u8; 24];
        routing[1] = 2; // (2 + 1) * 8 = 24 bytes
        let dest = vec![0u8; 8];
        let seg = tcp_segment(TCP_ACK, 99, 5, &[], 0);
        let p = ipv6(&[(0, hbh), (43, routing), (60, dest)], 6, &seg);
        let ip: IpPacket = parse_ip(&p).unwrap();
        assert_eq!(ip.header_len, 40 + 8 + 24 + 8);
        assert_eq!(ip.protocol, 6);
        assert!(is_tcp_pure_ack(&p));
        assert_eq!(ack_info(&p).unwrap().ack, 99);
    }

    /// AH (RFC 4302 §2.2): Payload Len counts 4-byte words minus 2, so 4 → (4 + 2) × 4 = 24.
    #[test]
    fn ipv6_authentication_header_is_walked() {
        let mut ah = vec![0u8; 24];
        ah[1] = 4;
        let seg = tcp_segment(TCP_ACK, 7, 5, &[], 0);
        let p = ipv6(&[(51, ah)], 6, &seg);
        assert_eq!(parse_ip(&p).unwrap().header_len, 40 + 24);
        assert!(is_tcp_pure_ack(&p));
    }

    /// IPv4 with 4 bytes of options (IHL 6): the TCP header starts at byte 24.
    #[test]
    fn ipv4_options_move_the_transport_header() {
        let seg = tcp_segment(TCP_ACK, 77, 5, &[], 0);
        let mut p = vec![0u8; 24];
        p[0] = 0x46;
        p[2..4].copy_from_slice(&((24 + seg.len()) as u16).to_be_bytes());
        p[9] = 6;
        p[20] = 1; // NOP option
        p.extend_from_slice(&seg);
        assert_eq!(parse_ip(&p).unwrap().header_len, 24);
        assert_eq!(ack_info(&p).unwrap().ack, 77);
    }

    #[test]
    fn ipv6_fragment_is_not_a_pure_ack() {
        let frag = vec![0u8, 0, 0, 1, 0, 0, 0, 7]; // offset 0, M = 1
        let seg = tcp_segment(TCP_ACK, 99, 5, &[], 0);
        let p = ipv6(&[(44, frag)], 6, &seg);
        assert!(parse_ip(&p).unwrap().is_fragment);
        assert!(!is_tcp_pure_ack(&p));
        assert!(ack_info(&p).is_none());
    }

    #[test]
    fn ipv4_fragment_is_not_a_pure_ack() {
        let mut p = ipv4(
            [1, 1, 1, 1],
            [2, 2, 2, 2],
            6,
            &tcp_segment(TCP_ACK, 1, 1, &[], 0),
        );
        p[6] = 0x20; // MF
        assert!(!is_tcp_pure_ack(&p));
    }

    #[test]
    fn truncated_and_malformed_inputs_are_errors() {
        let p = ipv4(
            [1, 1, 1, 1],
            [2, 2, 2, 2],
            6,
            &tcp_segment(TCP_ACK, 1, 1, &[], 0),
        );
        for cut in 0..p.len() {
            assert!(ack_info(&p[..cut]).is_none(), "cut at {cut}");
        }
        let mut bad_ihl = p.clone();
        bad_ihl[0] = 0x44;
        assert_eq!(
            parse_ip(&bad_ihl).unwrap_err().to_string(),
            "ipv4 ihl: malformed value 4"
        );
        let mut short_total = p.clone();
        short_total[2..4].copy_from_slice(&200u16.to_be_bytes());
        assert!(matches!(
            parse_ip(&short_total),
            Err(WireError::Truncated { need: 200, .. })
        ));
    }

    #[test]
    fn flow_hash_is_directional_and_deterministic() {
        let a = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        let b = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
        assert_eq!(flow_hash(a, b, 1, 2), flow_hash(a, b, 1, 2));
        assert_ne!(flow_hash(a, b, 1, 2), flow_hash(b, a, 2, 1));
        assert_ne!(flow_hash(a, b, 1, 2), flow_hash(a, b, 1, 3));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn wire_never_panics_on_random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = ethernet_payload(&bytes);
            let _ = parse_ip(&bytes);
            let _ = ack_info(&bytes);
            let _ = is_tcp_pure_ack(&bytes);
            let _ = ports(&bytes);
            if let Ok(seg) = parse_tcp(&bytes) { let _ = seg.options_summary(); }
        }

        /// Random bytes behind a valid version nibble and length, to reach the deeper parsers.
        #[test]
        fn wire_never_panics_on_plausible_headers(
            mut bytes in proptest::collection::vec(any::<u8>(), 40..160),
            v6 in any::<bool>(),
            proto in prop_oneof![Just(6u8), Just(17u8), Just(0u8), Just(43u8), Just(44u8), Just(51u8), Just(60u8)],
        ) {
            let n = bytes.len();
            if v6 {
                bytes[0] = 0x60;
                bytes[4..6].copy_from_slice(&((n - 40) as u16).to_be_bytes());
                bytes[6] = proto;
            } else {
                bytes[0] = 0x45;
                bytes[2..4].copy_from_slice(&(n as u16).to_be_bytes());
                bytes[9] = proto;
            }
            let _ = ack_info(&bytes);
            let _ = ports(&bytes);
        }
    }
}

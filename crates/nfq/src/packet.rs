//! The few header facts the daemon needs from a queued packet's first bytes.
//!
//! The queue copies only the first [`crate::netlink::COPY_RANGE`] bytes of a packet, so the
//! parser cannot require the whole packet to be present (the core's `wire::parse_ip` checks
//! the IP total length against the buffer, as a full-packet parser must). Lengths come from
//! the header fields instead: payload = IPv4 total length (RFC 791 §3.1) or IPv6 payload
//! length (RFC 8200 §3) minus the IP and TCP (RFC 9293 §3.1, data offset) / UDP (RFC 768)
//! headers. IPv6 extension headers are not walked: such packets are reported as "other" and
//! pass unscheduled. Every length is checked before a byte is read; never panics.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub const PROTO_TCP: u8 = 6;
pub const PROTO_UDP: u8 = 17;
pub const TCP_FIN: u8 = 0x01;
pub const TCP_SYN: u8 = 0x02;
pub const TCP_RST: u8 = 0x04;
pub const TCP_PSH: u8 = 0x08;

/// A connection's 5-tuple as seen from the server: (client address, client port, server
/// address, server port, protocol) — the same for the request and its response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FiveTuple {
    pub client: IpAddr,
    pub client_port: u16,
    pub server: IpAddr,
    pub server_port: u16,
    pub protocol: u8,
}

/// Transport facts of one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketInfo {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub protocol: u8,
    pub src_port: u16,
    pub dst_port: u16,
    /// TCP flags (0 for UDP).
    pub flags: u8,
    /// TCP sequence number (0 for UDP).
    pub seq: u32,
    /// Transport payload bytes (from the length fields, not from the copied bytes).
    pub payload_len: u32,
    /// Whole IP packet length.
    pub total_len: u32,
}

/// Parse IPv4/IPv6 + TCP/UDP from the first bytes of an IP packet. `None` for anything else
/// (other protocols, fragments after the first, IPv6 extension headers, truncated headers).
pub fn parse(head: &[u8]) -> Option<PacketInfo> {
    let version = head.first()? >> 4;
    let (src, dst, protocol, ip_hdr, total_len) = match version {
        4 => {
            if head.len() < 20 {
                return None;
            }
            let ihl = ((head[0] & 0x0f) as usize) * 4;
            let total = u16::from_be_bytes([head[2], head[3]]) as usize;
            let frag = u16::from_be_bytes([head[6], head[7]]);
            if ihl < 20 || total < ihl || frag & 0x1fff != 0 {
                return None; // bad header or a non-first fragment (no ports)
            }
            let s = Ipv4Addr::new(head[12], head[13], head[14], head[15]);
            let d = Ipv4Addr::new(head[16], head[17], head[18], head[19]);
            (IpAddr::V4(s), IpAddr::V4(d), head[9], ihl, total)
        }
        6 => {
            if head.len() < 40 {
                return None;
            }
            let plen = u16::from_be_bytes([head[4], head[5]]) as usize;
            let mut s = [0u8; 16];
            let mut d = [0u8; 16];
            s.copy_from_slice(&head[8..24]);
            d.copy_from_slice(&head[24..40]);
            (
                IpAddr::V6(Ipv6Addr::from(s)),
                IpAddr::V6(Ipv6Addr::from(d)),
                head[6],
                40,
                40 + plen,
            )
        }
        _ => return None,
    };
    let l4 = head.get(ip_hdr..)?;
    let l4_len = total_len.checked_sub(ip_hdr)?;
    match protocol {
        PROTO_TCP => {
            if l4.len() < 20 {
                return None;
            }
            let off = ((l4[12] >> 4) as usize) * 4;
            if off < 20 || l4_len < off {
                return None;
            }
            Some(PacketInfo {
                src,
                dst,
                protocol,
                src_port: u16::from_be_bytes([l4[0], l4[1]]),
                dst_port: u16::from_be_bytes([l4[2], l4[3]]),
                flags: l4[13],
                seq: u32::from_be_bytes([l4[4], l4[5], l4[6], l4[7]]),
                payload_len: (l4_len - off) as u32,
                total_len: total_len as u32,
            })
        }
        PROTO_UDP => {
            if l4.len() < 8 || l4_len < 8 {
                return None;
            }
            Some(PacketInfo {
                src,
                dst,
                protocol,
                src_port: u16::from_be_bytes([l4[0], l4[1]]),
                dst_port: u16::from_be_bytes([l4[2], l4[3]]),
                flags: 0,
                seq: 0,
                payload_len: (l4_len - 8) as u32,
                total_len: total_len as u32,
            })
        }
        _ => None,
    }
}

/// Build an IPv4 TCP packet header (for tests and the bench): 20-byte IP, 20-byte TCP.
pub fn build_ipv4_tcp(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sport: u16,
    dport: u16,
    flags: u8,
    payload_len: usize,
) -> Vec<u8> {
    let total = 40 + payload_len;
    let mut p = vec![0u8; 40];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[8] = 64;
    p[9] = PROTO_TCP;
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    p[20..22].copy_from_slice(&sport.to_be_bytes());
    p[22..24].copy_from_slice(&dport.to_be_bytes());
    p[32] = 5 << 4;
    p[33] = flags;
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packet_parses_truncated_ipv4_tcp_using_length_fields() {
        let p = build_ipv4_tcp(
            Ipv4Addr::new(10, 0, 0, 2),
            Ipv4Addr::new(10, 0, 0, 1),
            40000,
            80,
            TCP_PSH | 0x10,
            1000,
        );
        // Only the 40 header bytes are present, as with a short copy range.
        let i = parse(&p).unwrap();
        assert_eq!(i.payload_len, 1000);
        assert_eq!(i.dst_port, 80);
        assert_eq!(i.flags & TCP_PSH, TCP_PSH);
        assert_eq!(i.src, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)));
    }

    #[test]
    fn packet_pure_ack_has_no_payload_and_fragments_are_rejected() {
        let mut p = build_ipv4_tcp(
            Ipv4Addr::new(1, 1, 1, 1),
            Ipv4Addr::new(2, 2, 2, 2),
            1,
            2,
            0x10,
            0,
        );
        assert_eq!(parse(&p).unwrap().payload_len, 0);
        p[7] = 8; // fragment offset 8
        assert!(parse(&p).is_none());
    }

    #[test]
    fn packet_random_bytes_never_panic() {
        let mut rng = netsched_core::rng::SplitMix64::new(3);
        for _ in 0..5000 {
            let n = rng.below(80) as usize;
            let mut b: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
            if !b.is_empty() && rng.below(2) == 0 {
                b[0] = 0x45;
            }
            let _ = parse(&b);
        }
    }
}

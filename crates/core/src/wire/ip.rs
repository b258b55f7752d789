//! IPv4 (RFC 791 §3.1) and IPv6 (RFC 8200 §3, §4) headers: the one header walk behind
//! [`parse_ip`] (an IP packet) and [`super::parse_frame`] (an Ethernet frame).

use super::{be16, need, WireError};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// EtherType of IPv4 (RFC 894) and of IPv6 (RFC 2464 §3).
pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_IPV6: u16 = 0x86DD;

/// IPv6 extension headers walked at most; a longer chain is malformed
/// (`ipv6 extension header count`). RFC 8200 §4.1 has each extension header occur at most
/// once, Destination Options at most twice, so a chain that follows it holds at most 6 of the
/// headers walked here (hop-by-hop, destination options twice, routing, fragment, AH).
pub const MAX_EXT_HEADERS: usize = 8;

/// A parsed IPv4 or IPv6 header chain, borrowing the buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpPacket<'a> {
    /// 4 or 6.
    pub version: u8,
    pub src: IpAddr,
    pub dst: IpAddr,
    /// Upper-layer protocol after any IPv6 extension headers (6 = TCP, 17 = UDP...).
    pub protocol: u8,
    /// Bytes of IP header including IPv6 extension headers.
    pub header_len: usize,
    /// True if this is a fragment (IPv4 MF set or offset non-zero; IPv6 any Fragment header,
    /// an atomic one included).
    pub is_fragment: bool,
    /// True unless a fragment offset is non-zero: the packet carries the upper-layer header.
    pub first_fragment: bool,
    /// The upper-layer bytes, cut to the length the IP header announces (Ethernet padding
    /// after the packet is not included).
    pub transport: &'a [u8],
}

/// Parse an IPv4 or IPv6 packet starting at byte 0 of `buf`, by its version nibble. The
/// packet's own length field must fit in `buf`; bytes after it (link-layer padding) are ignored.
pub fn parse_ip(buf: &[u8]) -> Result<IpPacket<'_>, WireError> {
    need("ip version", buf, 1)?;
    match buf[0] >> 4 {
        4 => ipv4_header(buf),
        6 => ipv6_header(buf),
        v => Err(WireError::Unsupported {
            what: "ip version",
            value: v as u64,
        }),
    }
}

/// The IPv4 header at byte 0 of `buf` (RFC 791 §3.1): version 4, IHL of at least 5 words, a
/// total length that covers the header and fits in `buf`.
#[inline]
pub(super) fn ipv4_header(buf: &[u8]) -> Result<IpPacket<'_>, WireError> {
    need("ipv4 header", buf, 20)?;
    let h = &buf[..20];
    if h[0] >> 4 != 4 {
        return Err(WireError::Malformed {
            what: "ipv4 version",
            value: (h[0] >> 4) as u64,
        });
    }
    // IHL in 32-bit words, at least 5.
    let ihl = ((h[0] & 0x0f) as usize) * 4;
    if ihl < 20 {
        return Err(WireError::Malformed {
            what: "ipv4 ihl",
            value: (ihl / 4) as u64,
        });
    }
    let total = be16(h, 2) as usize;
    if total < ihl {
        return Err(WireError::Malformed {
            what: "ipv4 total length",
            value: total as u64,
        });
    }
    need("ipv4 total length", buf, total)?;
    // Flags (3 bits: reserved, DF, MF) then the 13-bit offset in 8-byte units; DF alone does
    // not make a fragment.
    let flags_frag = be16(h, 6);
    let later_fragment = flags_frag & 0x1fff != 0;
    Ok(IpPacket {
        version: 4,
        src: IpAddr::V4(Ipv4Addr::new(h[12], h[13], h[14], h[15])),
        dst: IpAddr::V4(Ipv4Addr::new(h[16], h[17], h[18], h[19])),
        protocol: h[9],
        header_len: ihl,
        is_fragment: later_fragment || flags_frag & 0x2000 != 0,
        first_fragment: !later_fragment,
        transport: &buf[ihl..total],
    })
}

/// The IPv6 header at byte 0 of `buf` (RFC 8200 §3) and its extension headers (§4), at most
/// [`MAX_EXT_HEADERS`] of them: hop-by-hop (0), routing (43) and destination options (60),
/// length in 8-byte units not counting the first 8 (§4.3, §4.4, §4.6); fragment (44), 8 bytes
/// (§4.5); AH (51), length in 4-byte units minus 2 (RFC 4302 §2.2). Every other next header
/// (ESP, No Next Header, TCP, UDP, ICMPv6, unknown) ends the walk as the upper-layer protocol.
/// Each extension header must fit inside the payload length. A payload length of 0 is an
/// empty payload (a jumbogram, RFC 2675, has a hop-by-hop header that then does not fit).
#[inline]
pub(super) fn ipv6_header(buf: &[u8]) -> Result<IpPacket<'_>, WireError> {
    need("ipv6 header", buf, 40)?;
    if buf[0] >> 4 != 6 {
        return Err(WireError::Malformed {
            what: "ipv6 version",
            value: (buf[0] >> 4) as u64,
        });
    }
    let end = 40 + be16(buf, 4) as usize;
    need("ipv6 payload length", buf, end)?;
    let pkt = &buf[..end];
    let mut src = [0u8; 16];
    let mut dst = [0u8; 16];
    src.copy_from_slice(&pkt[8..24]);
    dst.copy_from_slice(&pkt[24..40]);
    let mut next = pkt[6];
    let mut at = 40usize;
    let mut fragment = false;
    let mut later_fragment = false;
    let mut walked = 0usize;
    loop {
        let what = match next {
            0 | 43 | 60 => "ipv6 extension header",
            44 => "ipv6 fragment header",
            51 => "ipv6 authentication header",
            _ => break,
        };
        if walked == MAX_EXT_HEADERS {
            return Err(WireError::Malformed {
                what: "ipv6 extension header count",
                value: (walked + 1) as u64,
            });
        }
        walked += 1;
        need(what, pkt, at + 2)?;
        let len = match next {
            44 => {
                need(what, pkt, at + 8)?;
                // Offset in 8-byte units in the top 13 bits, M in the lowest. Any Fragment
                // header makes a fragment, an atomic one (offset 0, M clear) included: §4.5
                // has the receiver reassemble it too.
                let offset = be16(pkt, at + 2) >> 3;
                fragment = true;
                later_fragment |= offset != 0;
                8
            }
            51 => (pkt[at + 1] as usize + 2) * 4,
            _ => (pkt[at + 1] as usize + 1) * 8,
        };
        need(what, pkt, at + len)?;
        next = pkt[at];
        at += len;
    }
    Ok(IpPacket {
        version: 6,
        src: IpAddr::V6(Ipv6Addr::from(src)),
        dst: IpAddr::V6(Ipv6Addr::from(dst)),
        protocol: next,
        header_len: at,
        is_fragment: fragment,
        first_fragment: !later_fragment,
        transport: &pkt[at..],
    })
}

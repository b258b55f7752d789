//! IPv4 (RFC 791 §3.1) and IPv6 (RFC 8200 §3, §4) headers, and the Ethernet II / 802.1Q
//! framing around them.

use super::{be16, need, WireError};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_IPV6: u16 = 0x86DD;
/// IEEE 802.1Q customer VLAN tag (TPID).
const ETHERTYPE_VLAN: u16 = 0x8100;

/// The IP packet inside an Ethernet II frame: skips the 14-byte header and at most one
/// 802.1Q tag (4 bytes), and checks the ethertype is IPv4 or IPv6. The returned slice may
/// carry Ethernet padding after the IP packet; [`parse_ip`] uses the IP length fields.
pub fn ethernet_payload(frame: &[u8]) -> Result<&[u8], WireError> {
    need("ethernet header", frame, 14)?;
    let mut ethertype = be16(frame, 12);
    let mut start = 14;
    if ethertype == ETHERTYPE_VLAN {
        need("802.1Q tag", frame, 18)?;
        ethertype = be16(frame, 16);
        start = 18;
    }
    match ethertype {
        ETHERTYPE_IPV4 | ETHERTYPE_IPV6 => Ok(&frame[start..]),
        other => Err(WireError::Unsupported {
            what: "ethertype",
            value: other as u64,
        }),
    }
}

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
    /// True if this is a fragment (IPv4 MF set or offset non-zero; IPv6 fragment header).
    pub is_fragment: bool,
    /// True if this fragment carries the upper-layer header (offset 0).
    pub first_fragment: bool,
    /// The upper-layer bytes, cut to the length the IP header announces (Ethernet padding
    /// after the packet is not included).
    pub transport: &'a [u8],
}

/// Parse an IPv4 or IPv6 packet starting at byte 0 of `buf`. The packet's own length field
/// must fit in `buf`; bytes after it (link-layer padding) are ignored.
pub fn parse_ip(buf: &[u8]) -> Result<IpPacket<'_>, WireError> {
    need("ip version", buf, 1)?;
    match buf[0] >> 4 {
        4 => parse_ipv4(buf),
        6 => parse_ipv6(buf),
        v => Err(WireError::Unsupported {
            what: "ip version",
            value: v as u64,
        }),
    }
}

fn parse_ipv4(buf: &[u8]) -> Result<IpPacket<'_>, WireError> {
    need("ipv4 header", buf, 20)?;
    // RFC 791 §3.1: IHL in 32-bit words, at least 5.
    let ihl = ((buf[0] & 0x0f) as usize) * 4;
    if ihl < 20 {
        return Err(WireError::Malformed {
            what: "ipv4 ihl",
            value: (ihl / 4) as u64,
        });
    }
    let total = be16(buf, 2) as usize;
    if total < ihl {
        return Err(WireError::Malformed {
            what: "ipv4 total length",
            value: total as u64,
        });
    }
    need("ipv4 total length", buf, total)?;
    let flags_frag = be16(buf, 6);
    let more_fragments = flags_frag & 0x2000 != 0;
    let offset = flags_frag & 0x1fff;
    let src = Ipv4Addr::new(buf[12], buf[13], buf[14], buf[15]);
    let dst = Ipv4Addr::new(buf[16], buf[17], buf[18], buf[19]);
    Ok(IpPacket {
        version: 4,
        src: IpAddr::V4(src),
        dst: IpAddr::V4(dst),
        protocol: buf[9],
        header_len: ihl,
        is_fragment: more_fragments || offset != 0,
        first_fragment: offset == 0,
        transport: &buf[ihl..total],
    })
}

/// IPv6 extension headers walked over (RFC 8200 §4.1): hop-by-hop (0), routing (43),
/// fragment (44), destination options (60), and AH (51, RFC 4302 §2.2, length in 4-byte units).
fn parse_ipv6(buf: &[u8]) -> Result<IpPacket<'_>, WireError> {
    need("ipv6 header", buf, 40)?;
    let payload_len = be16(buf, 4) as usize;
    if payload_len == 0 {
        // Jumbogram (RFC 2675) or empty: not something a queue classifier needs.
        return Err(WireError::Unsupported {
            what: "ipv6 payload length",
            value: 0,
        });
    }
    let end = 40 + payload_len;
    need("ipv6 payload length", buf, end)?;
    let mut src = [0u8; 16];
    let mut dst = [0u8; 16];
    src.copy_from_slice(&buf[8..24]);
    dst.copy_from_slice(&buf[24..40]);
    let mut next = buf[6];
    let mut at = 40usize;
    let mut is_fragment = false;
    let mut first_fragment = true;
    // Bounded: each header consumes at least 8 bytes of a payload of at most 65535.
    loop {
        match next {
            0 | 43 | 60 => {
                need("ipv6 extension header", &buf[..end], at + 2)?;
                let len = (buf[at + 1] as usize + 1) * 8;
                need("ipv6 extension header", &buf[..end], at + len)?;
                next = buf[at];
                at += len;
            }
            44 => {
                need("ipv6 fragment header", &buf[..end], at + 8)?;
                let offset = be16(buf, at + 2) >> 3;
                let more = be16(buf, at + 2) & 1 != 0;
                is_fragment = is_fragment || more || offset != 0;
                first_fragment = first_fragment && offset == 0;
                next = buf[at];
                at += 8;
            }
            51 => {
                need("ipv6 authentication header", &buf[..end], at + 2)?;
                let len = (buf[at + 1] as usize + 2) * 4;
                need("ipv6 authentication header", &buf[..end], at + len)?;
                next = buf[at];
                at += len;
            }
            _ => break,
        }
    }
    Ok(IpPacket {
        version: 6,
        src: IpAddr::V6(Ipv6Addr::from(src)),
        dst: IpAddr::V6(Ipv6Addr::from(dst)),
        protocol: next,
        header_len: at,
        is_fragment,
        first_fragment,
        transport: &buf[at..end],
    })
}

//! Zero-copy views of the headers classifiers need (Ethernet with a VLAN stack, IPv4, IPv6
//! with extension headers, TCP with options, UDP ports): the workspace's one packet-header
//! parser. The link's ACK classifier reads frames through [`ethernet_payload`] and
//! [`ack_info`]; the filter's hot path reads them through [`parse_frame`]; both go through
//! the same VLAN stack walk ([`MAX_VLAN_TAGS`]) and the same IPv4/IPv6 header code
//! ([`MAX_EXT_HEADERS`]).
//!
//! Everything here reads a borrowed `&[u8]`, checks every length before touching a byte, and
//! returns [`WireError`] (or `None`/`false` in the convenience helpers) on truncated or
//! malformed input — it never panics (property tests `wire_never_panics_on_random_bytes` and
//! `frame_parse_never_panics_on_random_bytes`).
//!
//! Sources: Ethernet II framing of IPv4 RFC 894, of IPv6 RFC 2464 §3; VLAN tags IEEE
//! 802.1Q-2018 §9.5 (TPIDs: C-VLAN 0x8100, S-VLAN 0x88A8) and §9.6 (tag control information); IPv4 header RFC 791 §3.1; IPv6
//! header and extension headers RFC 8200 §3–§4, AH RFC 4302 §2; TCP header and options RFC 9293
//! §3.1, SACK RFC 2018, timestamps RFC 7323 §3; UDP header RFC 768; pure-ACK test and ACK
//! filtering RFC 3449 §5.2.1.
//!
//! Cost: O(header bytes) per packet, no allocation.

mod frame;
pub mod frames;
mod ip;
mod tcp;

/// Packet builders for tests elsewhere in the crate.
#[cfg(test)]
pub(crate) use tcp::tests as test_packets;

pub use frame::{
    ethernet_payload, parse_frame, Frame, IpFrame, MAX_VLAN_TAGS, TOO_DEEP, TPID_8021AD,
    TPID_8021Q, TPID_9100,
};
pub use ip::{parse_ip, IpPacket, ETHERTYPE_IPV4, ETHERTYPE_IPV6, MAX_EXT_HEADERS};
pub use tcp::{
    ack_info, flow_hash, is_tcp_pure_ack, parse_tcp, ports, TcpHeader, TcpOptionsSummary, TCP_ACK,
    TCP_FIN, TCP_PSH, TCP_RST, TCP_SYN,
};

use std::fmt;

/// IP protocol numbers used here (IANA "Assigned Internet Protocol Numbers").
pub const PROTO_TCP: u8 = 6;
pub const PROTO_UDP: u8 = 17;
pub const PROTO_ICMP: u8 = 1;
pub const PROTO_ICMPV6: u8 = 58;

/// TCP acknowledgement facts of a segment, as the ACK filter needs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AckInfo {
    /// Hash of (src addr, dst addr, src port, dst port) in this direction.
    pub flow: u64,
    /// Cumulative acknowledgement number.
    pub ack: u32,
    /// ACK flag set, no payload, no SYN/FIN/RST.
    pub pure: bool,
    /// Carries SACK blocks or any TCP option other than timestamps/NOP (never filtered).
    pub has_sack_or_other_options: bool,
    /// Advertised window (a window update must not be filtered as redundant).
    pub window: u32,
}

/// Why a buffer could not be parsed. Messages name the header and the offending value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// Fewer bytes than the header (or a length field) requires.
    Truncated {
        what: &'static str,
        need: usize,
        have: usize,
    },
    /// A field holds a value the format does not allow.
    Malformed { what: &'static str, value: u64 },
    /// Valid, but not something this module parses (other ethertype, IP version...).
    Unsupported { what: &'static str, value: u64 },
    /// More nested headers than are read (a VLAN stack deeper than [`MAX_VLAN_TAGS`]): what
    /// they carry is unread, so it is neither IP nor any other ethertype.
    TooDeep { what: &'static str, limit: usize },
}

impl WireError {
    /// The header or field that failed (the `what` of every variant).
    pub fn what(&self) -> &'static str {
        match *self {
            WireError::Truncated { what, .. }
            | WireError::Malformed { what, .. }
            | WireError::Unsupported { what, .. }
            | WireError::TooDeep { what, .. } => what,
        }
    }
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Truncated { what, need, have } => {
                write!(f, "{what}: truncated, need {need} bytes, have {have}")
            }
            WireError::Malformed { what, value } => write!(f, "{what}: malformed value {value}"),
            WireError::Unsupported { what, value } => {
                write!(f, "{what}: unsupported value {value}")
            }
            WireError::TooDeep { what, limit } => write!(f, "{what}: more than {limit}"),
        }
    }
}

impl std::error::Error for WireError {}

/// Read a big-endian u16 at `at`; the caller has checked the length.
#[inline]
fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline]
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// `Ok` when `b` holds at least `n` bytes, else [`WireError::Truncated`] naming `what`.
#[inline]
fn need(what: &'static str, b: &[u8], n: usize) -> Result<(), WireError> {
    if b.len() < n {
        Err(WireError::Truncated {
            what,
            need: n,
            have: b.len(),
        })
    } else {
        Ok(())
    }
}

//! Ethernet frames for tests and benchmarks (the filter's, the link's and this module's):
//! well-formed headers with the lengths filled in, checksums left 0. Never panics: a frame
//! too short for the field a builder sets is returned unchanged.

use super::{ETHERTYPE_IPV4, ETHERTYPE_IPV6, PROTO_TCP};

/// The 14-byte Ethernet II header of the test frames (02:00:00:00:00:01 to …:02).
fn ethernet(ethertype: u16) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

/// Ethernet + IPv4 (no options, TTL 64) + UDP with `payload`.
pub fn udp4_frame(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = ethernet(ETHERTYPE_IPV4);
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

/// Ethernet + IPv4 (no options, TTL 64) + TCP (20-byte header, sequence number 1000, window
/// 65535) with `flags`, acknowledgement number `ack` and `payload`, padded to the 60-byte
/// Ethernet minimum as a NIC pads it (the padding is not in the IP total length).
pub fn tcp4_frame(
    src: [u8; 4],
    dst: [u8; 4],
    sport: u16,
    dport: u16,
    flags: u8,
    ack: u32,
    payload: &[u8],
) -> Vec<u8> {
    let mut f = ethernet(ETHERTYPE_IPV4);
    let total = (20 + 20 + payload.len()) as u16;
    let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, PROTO_TCP, 0, 0];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    f.extend_from_slice(&ip);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&1000u32.to_be_bytes());
    f.extend_from_slice(&ack.to_be_bytes());
    f.extend_from_slice(&[5 << 4, flags, 0xff, 0xff, 0, 0, 0, 0]);
    f.extend_from_slice(payload);
    if f.len() < 60 {
        f.resize(60, 0);
    }
    f
}

/// `frame` (Ethernet + IPv4, no VLAN tags) with the IPv4 flags and fragment offset field set
/// to `field` (0x4000 DF, 0x2000 MF, the low 13 bits the offset in 8-byte units).
pub fn with_ipv4_fragment(frame: &[u8], field: u16) -> Vec<u8> {
    let mut f = frame.to_vec();
    if let Some(b) = f.get_mut(20..22) {
        b.copy_from_slice(&field.to_be_bytes());
    }
    f
}

/// Ethernet + IPv4 (UDP) fragment after the first, `offset` in 8-byte units, MF as `more`,
/// carrying `data` with no L4 header.
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

/// Ethernet + IPv6 (fd00::… to fe00::…) whose first extension header is a Fragment header
/// (next header `proto`, `offset` in 8-byte units, M flag `more`), then `rest`: the first
/// fragment's L4 header and data, or a later fragment's data.
pub fn ipv6_fragment_frame(proto: u8, offset: u16, more: bool, rest: &[u8]) -> Vec<u8> {
    let mut f = ethernet(ETHERTYPE_IPV6);
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

/// `frame` with one VLAN tag per TPID of `tpids`, outermost first, after the MAC addresses
/// (VLAN IDs 100, 101, …).
pub fn vlan_tagged(frame: &[u8], tpids: &[u16]) -> Vec<u8> {
    let macs = frame.len().min(12);
    let mut out = frame[..macs].to_vec();
    for (i, tpid) in tpids.iter().enumerate() {
        out.extend_from_slice(&tpid.to_be_bytes());
        out.extend_from_slice(&(100 + i as u16).to_be_bytes());
    }
    out.extend_from_slice(&frame[macs..]);
    out
}

//! The PROXY protocol header the balancer sends first on a backend connection of a server
//! with `send_proxy` (HAProxy's `send-proxy` / `send-proxy-v2`). The specification is
//! HAProxy's doc/proxy-protocol.txt, "The PROXY protocol, Versions 1 & 2" (2020/03/05).
//!
//! - Version 1 (§2.1): one US-ASCII line `PROXY TCP4|TCP6 <src> <dst> <sport> <dport>\r\n`,
//!   at most 107 bytes.
//! - Version 2 (§2.2): the 12-byte signature, version 2 with command PROXY (`0x21`), TCP over
//!   IPv4 (`0x11`, 12 address bytes) or IPv6 (`0x21`, 36), the address length, then source
//!   and destination addresses and ports in network byte order. No TLV is sent.
//!
//! The source is the client, the destination the address the client connected to. An IPv4
//! client on a dual-stack IPv6 listener is announced as the IPv4 connection it is.
//!
//! Health checks (§2.1, end; §2.2, command LOCAL): version 1 sends a valid line built from the
//! check connection's own addresses (getsockname/getpeername), since some receivers refuse
//! `UNKNOWN`; version 2 sends the LOCAL command with no address, which the receiver must
//! accept and read as "use the real connection endpoints".
//!
//! The spec forbids the header on connections that carry several clients' requests (§2,
//! "Such proxies MUST NOT implement this protocol on multiplexed connections"): in L7 a
//! backend connection of such a server carries one request and is closed (l7.rs).
//!
//! Cost: one small buffer and one write per backend connection of such a server.

use crate::config::SendProxy;
use std::net::{IpAddr, SocketAddr};

/// The version 2 signature (§2.2).
pub const V2_SIGNATURE: [u8; 12] = [
    0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A,
];

/// Both addresses in one family: IPv4 when both are (after un-mapping `::ffff:a.b.c.d`),
/// else both as IPv6.
fn same_family(src: SocketAddr, dst: SocketAddr) -> (SocketAddr, SocketAddr) {
    let (s, d) = (src.ip().to_canonical(), dst.ip().to_canonical());
    let v6 = |ip: IpAddr| match ip {
        IpAddr::V4(a) => IpAddr::V6(a.to_ipv6_mapped()),
        v6 => v6,
    };
    let (s, d) = if s.is_ipv4() && d.is_ipv4() {
        (s, d)
    } else {
        (v6(s), v6(d))
    };
    (
        SocketAddr::new(s, src.port()),
        SocketAddr::new(d, dst.port()),
    )
}

/// The header announcing a connection from `src` to `dst`.
pub fn header(version: SendProxy, src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    let (src, dst) = same_family(src, dst);
    match version {
        SendProxy::V1 => format!(
            "PROXY {} {} {} {} {}\r\n",
            if src.is_ipv4() { "TCP4" } else { "TCP6" },
            src.ip(),
            dst.ip(),
            src.port(),
            dst.port()
        )
        .into_bytes(),
        SendProxy::V2 => {
            let mut h = Vec::with_capacity(16 + 36);
            h.extend_from_slice(&V2_SIGNATURE);
            h.push(0x21); // version 2, command PROXY
            match (src.ip(), dst.ip()) {
                (IpAddr::V4(s), IpAddr::V4(d)) => {
                    h.push(0x11); // AF_INET, STREAM
                    h.extend_from_slice(&12u16.to_be_bytes());
                    h.extend_from_slice(&s.octets());
                    h.extend_from_slice(&d.octets());
                }
                (s, d) => {
                    let six = |ip: IpAddr| match ip {
                        IpAddr::V6(a) => a.octets(),
                        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
                    };
                    h.push(0x21); // AF_INET6, STREAM
                    h.extend_from_slice(&36u16.to_be_bytes());
                    h.extend_from_slice(&six(s));
                    h.extend_from_slice(&six(d));
                }
            }
            h.extend_from_slice(&src.port().to_be_bytes());
            h.extend_from_slice(&dst.port().to_be_bytes());
            h
        }
    }
}

/// The header of a health check: version 1 a line of the check connection itself (`local`
/// is its getsockname, `peer` its getpeername), version 2 the LOCAL command, no address.
pub fn check_header(version: SendProxy, local: SocketAddr, peer: SocketAddr) -> Vec<u8> {
    match version {
        SendProxy::V1 => header(SendProxy::V1, local, peer),
        SendProxy::V2 => {
            let mut h = Vec::with_capacity(16);
            h.extend_from_slice(&V2_SIGNATURE);
            h.push(0x20); // version 2, command LOCAL
            h.push(0x00); // AF_UNSPEC, UNSPEC
            h.extend_from_slice(&0u16.to_be_bytes());
            h
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn v1_ipv4_and_ipv6_lines() {
        assert_eq!(
            header(SendProxy::V1, a("192.168.0.1:56324"), a("192.168.0.11:443")),
            b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n"
        );
        assert_eq!(
            header(
                SendProxy::V1,
                a("[2001:db8::1]:1000"),
                a("[2001:db8::2]:80")
            ),
            b"PROXY TCP6 2001:db8::1 2001:db8::2 1000 80\r\n"
        );
        // The longest line fits the 107 bytes a receiver must take (§2.1).
        let f = "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535";
        assert!(header(SendProxy::V1, a(f), a(f)).len() <= 107);
    }

    #[test]
    fn an_ipv4_client_on_a_dual_stack_listener_is_announced_as_ipv4() {
        assert_eq!(
            header(
                SendProxy::V1,
                a("[::ffff:198.51.100.9]:4000"),
                a("[::ffff:10.0.0.1]:80")
            ),
            b"PROXY TCP4 198.51.100.9 10.0.0.1 4000 80\r\n"
        );
        // Mixed families (never on one socket) go out as IPv6.
        assert_eq!(
            header(SendProxy::V1, a("10.0.0.2:1"), a("[2001:db8::2]:2")),
            b"PROXY TCP6 ::ffff:10.0.0.2 2001:db8::2 1 2\r\n"
        );
    }

    #[test]
    fn v2_ipv4_block() {
        let h = header(SendProxy::V2, a("172.19.0.1:42578"), a("172.19.0.3:80"));
        let mut want = V2_SIGNATURE.to_vec();
        want.extend_from_slice(&[0x21, 0x11, 0x00, 0x0c]);
        want.extend_from_slice(&[172, 19, 0, 1, 172, 19, 0, 3]);
        want.extend_from_slice(&[0xa6, 0x52, 0x00, 0x50]);
        assert_eq!(h, want);
    }

    #[test]
    fn v2_ipv6_block() {
        let h = header(SendProxy::V2, a("[2001:db8::1]:258"), a("[::1]:80"));
        assert_eq!(h.len(), 16 + 36);
        assert_eq!(&h[12..16], &[0x21, 0x21, 0x00, 36]);
        assert_eq!(&h[16..18], &[0x20, 0x01]);
        assert_eq!(h[31], 1);
        assert_eq!(h[47], 1);
        assert_eq!(&h[48..52], &[0x01, 0x02, 0x00, 0x50]);
    }

    #[test]
    fn check_headers() {
        assert_eq!(
            check_header(SendProxy::V1, a("127.0.0.1:5000"), a("127.0.0.1:80")),
            b"PROXY TCP4 127.0.0.1 127.0.0.1 5000 80\r\n"
        );
        let h = check_header(SendProxy::V2, a("127.0.0.1:5000"), a("127.0.0.1:80"));
        assert_eq!(&h[..12], &V2_SIGNATURE);
        assert_eq!(&h[12..], &[0x20, 0x00, 0x00, 0x00]);
    }
}

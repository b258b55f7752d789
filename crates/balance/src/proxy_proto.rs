//! The PROXY protocol, both ways. The specification is HAProxy's doc/proxy-protocol.txt, "The
//! PROXY protocol, Versions 1 & 2" (2020/03/05).
//!
//! Sending: the header the balancer writes first on a backend connection of a server with
//! `send_proxy` (HAProxy's `send-proxy` / `send-proxy-v2`).
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
//! Receiving (`accept_proxy`, HAProxy's `accept-proxy` bind option restricted to listed
//! networks): a connection from a listed network must start with a header, either version
//! (§2: "the receiver MUST be configured to only receive the protocol described in this
//! specification"; §2 also: it "MUST not try to guess whether the protocol header is present
//! or not" — so a listed network always sends one and any other never has one read). [`parse`]
//! is a pure function over bytes; [`accept`] peeks, parses and then reads exactly the header's
//! bytes, so what follows (a TLS ClientHello, an HTTP request, L4 bytes) stays in the socket
//! untouched. Bounds: a version 1 line is at most [`V1_MAX`] bytes (§2.1), a version 2 block
//! at most 16 + [`V2_MAX_LEN`] (the addresses take at most 216 bytes, AF_UNIX; the rest is
//! TLVs, skipped), and the whole header must arrive within `timeouts.header`. Version 1
//! `UNKNOWN`, version 2 `LOCAL` and version 2 `PROXY` with `AF_UNSPEC` leave the connection's
//! own addresses in force (§2.1, §2.2); version 2 over UDP or AF_UNIX is refused.
//!
//! Cost: sending, one small buffer and one write per backend connection of such a server;
//! receiving, per accepted connection a look at the service's settings (in L4 one lock of the
//! service more than before; L7 takes them anyway) and, when `accept_proxy` is set, one match
//! per listed network; for a listed client, a peek and a read per piece of the header that
//! arrives and a transient buffer of [`MAX_HEADER`] bytes.

use crate::config::SendProxy;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// Longest version 1 line, CRLF included (§2.1).
pub const V1_MAX: usize = 107;
/// Largest version 2 length field taken (addresses and TLVs); a larger one is refused.
pub const V2_MAX_LEN: usize = 4096;
/// Largest header read from a client.
pub const MAX_HEADER: usize = 16 + V2_MAX_LEN;

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

/// What a received header says of its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Announced {
    /// The client (source) and the address it connected to (destination).
    Proxied { src: SocketAddr, dst: SocketAddr },
    /// Version 1 `UNKNOWN`, version 2 `LOCAL` or `AF_UNSPEC`: the connection's own addresses.
    Local,
}

/// A complete header: what it says and how many bytes it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    pub announced: Announced,
    pub len: usize,
}

/// Why bytes are not (yet) a PROXY protocol header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// A valid beginning that goes on past the end of the bytes: more are needed.
    Truncated,
    /// Neither `PROXY ` (version 1) nor the version 2 signature.
    Signature,
    /// No CRLF within the first [`V1_MAX`] bytes of a version 1 line.
    V1TooLong,
    /// A version 1 line off the grammar; names the part that is wrong.
    V1Syntax(&'static str),
    /// A version 2 block's version (high nibble of byte 13) other than 2.
    Version(u8),
    /// A version 2 command other than LOCAL (0) and PROXY (1).
    Command(u8),
    /// A version 2 PROXY block's family and transport byte other than `0x00` (AF_UNSPEC),
    /// `0x11` (TCP over IPv4) and `0x21` (TCP over IPv6).
    Family(u8),
    /// A version 2 length above [`V2_MAX_LEN`].
    Length(usize),
    /// A version 2 length too short for its family's addresses.
    ShortAddresses { family: u8, len: usize },
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ParseError::*;
        match self {
            Truncated => f.write_str("the header ends early"),
            Signature => f.write_str("no PROXY protocol signature (v1 or v2)"),
            V1TooLong => write!(f, "v1: no CRLF within {V1_MAX} bytes"),
            V1Syntax(part) => write!(f, "v1: bad {part}"),
            Version(v) => write!(f, "v2: version {v}, not 2"),
            Command(c) => write!(f, "v2: command {c}, neither LOCAL (0) nor PROXY (1)"),
            Family(b) => write!(
                f,
                "v2: family/transport 0x{b:02x}, not TCP over IPv4 or IPv6"
            ),
            Length(n) => write!(f, "v2: length {n}, at most {V2_MAX_LEN}"),
            ShortAddresses { family, len } => {
                write!(f, "v2: length {len} too short for family 0x{family:02x}")
            }
        }
    }
}

impl std::error::Error for ParseError {}

/// The header at the start of `b`, if complete (§2.1, §2.2); [`ParseError::Truncated`] when
/// `b` is a valid beginning of one. Looks at no byte after the header.
pub fn parse(b: &[u8]) -> Result<Received, ParseError> {
    let n = b.len().min(V2_SIGNATURE.len());
    if b[..n] == V2_SIGNATURE[..n] {
        return if n < V2_SIGNATURE.len() {
            Err(ParseError::Truncated)
        } else {
            parse_v2(b)
        };
    }
    let n = b.len().min(6);
    if b[..n] == b"PROXY "[..n] {
        return if n < 6 {
            Err(ParseError::Truncated)
        } else {
            parse_v1(b)
        };
    }
    Err(ParseError::Signature)
}

/// A version 1 line (`b` starts with `PROXY `).
fn parse_v1(b: &[u8]) -> Result<Received, ParseError> {
    let window = &b[..b.len().min(V1_MAX)];
    let Some(lf) = window.iter().position(|&c| c == b'\n') else {
        return Err(if b.len() >= V1_MAX {
            ParseError::V1TooLong
        } else {
            ParseError::Truncated
        });
    };
    if window[lf - 1] != b'\r' {
        return Err(ParseError::V1Syntax("line end (not CRLF)"));
    }
    let len = lf + 1;
    let text = std::str::from_utf8(&window[6..lf - 1])
        .map_err(|_| ParseError::V1Syntax("characters (not US-ASCII)"))?;
    // The receiver ignores whatever follows UNKNOWN before the CRLF (§2.1).
    if text == "UNKNOWN" || text.starts_with("UNKNOWN ") {
        return Ok(Received {
            announced: Announced::Local,
            len,
        });
    }
    let f: Vec<&str> = text.splitn(6, ' ').collect();
    let [proto, src, dst, sport, dport] = f[..] else {
        return Err(ParseError::V1Syntax(
            "field count (5 after PROXY, one space each)",
        ));
    };
    let ip = |t: &str| -> Result<IpAddr, ParseError> {
        match proto {
            "TCP4" => t.parse::<Ipv4Addr>().map(IpAddr::V4),
            "TCP6" => t.parse::<Ipv6Addr>().map(IpAddr::V6),
            _ => return Err(ParseError::V1Syntax("protocol (TCP4, TCP6 or UNKNOWN)")),
        }
        .map_err(|_| ParseError::V1Syntax("address"))
    };
    let src = SocketAddr::new(ip(src)?, v1_port(sport)?);
    let dst = SocketAddr::new(ip(dst)?, v1_port(dport)?);
    Ok(Received {
        announced: Announced::Proxied { src, dst },
        len,
    })
}

/// A version 1 port: decimal 0..=65535, no leading zero (§2.1).
fn v1_port(t: &str) -> Result<u16, ParseError> {
    let bad = ParseError::V1Syntax("port");
    if t.is_empty() || t.len() > 5 || !t.bytes().all(|c| c.is_ascii_digit()) {
        return Err(bad);
    }
    if t.len() > 1 && t.starts_with('0') {
        return Err(bad);
    }
    t.parse().map_err(|_| bad)
}

/// A version 2 block (`b` starts with the signature).
fn parse_v2(b: &[u8]) -> Result<Received, ParseError> {
    if b.len() < 16 {
        return Err(ParseError::Truncated);
    }
    let (version, command, family) = (b[12] >> 4, b[12] & 0x0f, b[13]);
    if version != 2 {
        return Err(ParseError::Version(version));
    }
    let len = u16::from_be_bytes([b[14], b[15]]) as usize;
    if len > V2_MAX_LEN {
        return Err(ParseError::Length(len));
    }
    let need = match (command, family) {
        (0, _) | (1, 0x00) => 0,
        (1, 0x11) => 12,
        (1, 0x21) => 36,
        (1, f) => return Err(ParseError::Family(f)),
        (c, _) => return Err(ParseError::Command(c)),
    };
    if len < need {
        return Err(ParseError::ShortAddresses { family, len });
    }
    if b.len() < 16 + len {
        return Err(ParseError::Truncated);
    }
    let a = &b[16..16 + len];
    let port = |i: usize| u16::from_be_bytes([a[i], a[i + 1]]);
    let announced = match need {
        12 => {
            let ip = |i: usize| IpAddr::V4(Ipv4Addr::new(a[i], a[i + 1], a[i + 2], a[i + 3]));
            Announced::Proxied {
                src: SocketAddr::new(ip(0), port(8)),
                dst: SocketAddr::new(ip(4), port(10)),
            }
        }
        36 => {
            let ip = |i: usize| {
                let mut o = [0u8; 16];
                o.copy_from_slice(&a[i..i + 16]);
                IpAddr::V6(Ipv6Addr::from(o))
            };
            Announced::Proxied {
                src: SocketAddr::new(ip(0), port(32)),
                dst: SocketAddr::new(ip(16), port(34)),
            }
        }
        _ => Announced::Local,
    };
    Ok(Received {
        announced,
        len: 16 + len,
    })
}

/// Why a connection from a listed network was closed before it was served.
#[derive(Debug)]
pub enum AcceptError {
    /// The bytes are no header.
    Header(ParseError),
    /// The client closed before the header was complete.
    Closed,
    /// The header did not arrive within `timeouts.header`.
    Timeout,
    /// The socket failed.
    Io(std::io::Error),
}

impl fmt::Display for AcceptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AcceptError::Header(e) => write!(f, "PROXY protocol header: {e}"),
            AcceptError::Closed => f.write_str("PROXY protocol header: closed before its end"),
            AcceptError::Timeout => f.write_str("PROXY protocol header: not in time"),
            AcceptError::Io(e) => write!(f, "PROXY protocol header: {e}"),
        }
    }
}

impl std::error::Error for AcceptError {}

/// Read the header at the start of `stream`, exactly its bytes: peek what has arrived, and
/// read either the whole header, or, while it is incomplete, all the bytes peeked (they are
/// all the header's), then wait for more.
pub async fn read_header(stream: &mut TcpStream) -> Result<Received, AcceptError> {
    let mut buf = vec![0u8; MAX_HEADER];
    let mut have = 0;
    loop {
        let n = stream
            .peek(&mut buf[have..])
            .await
            .map_err(AcceptError::Io)?;
        if n == 0 {
            return Err(AcceptError::Closed);
        }
        match parse(&buf[..have + n]) {
            Ok(r) => {
                // `r.len > have`: the bytes before `have` were a header's beginning.
                let end = r.len.max(have);
                stream
                    .read_exact(&mut buf[have..end])
                    .await
                    .map_err(AcceptError::Io)?;
                return Ok(r);
            }
            Err(ParseError::Truncated) => {
                stream
                    .read_exact(&mut buf[have..have + n])
                    .await
                    .map_err(AcceptError::Io)?;
                have += n;
            }
            Err(e) => return Err(AcceptError::Header(e)),
        }
    }
}

/// The client and destination addresses a connection from `peer` to `local` stands for: its
/// own, unless `peer` is in `listed`, whose connections must start with a header (read within
/// `limit`) whose addresses then replace them.
pub async fn accept(
    stream: &mut TcpStream,
    peer: SocketAddr,
    local: SocketAddr,
    listed: &crate::config::AcceptProxy,
    limit: Duration,
) -> Result<(SocketAddr, SocketAddr), AcceptError> {
    if !listed.contains(peer.ip()) {
        return Ok((peer, local));
    }
    match tokio::time::timeout(limit, read_header(stream)).await {
        Err(_) => Err(AcceptError::Timeout),
        Ok(Err(e)) => Err(e),
        Ok(Ok(r)) => Ok(match r.announced {
            Announced::Proxied { src, dst } => (src, dst),
            Announced::Local => (peer, local),
        }),
    }
}

/// [`accept`] with the `accept_proxy` and `timeouts.header` of `rt`, the service's settings;
/// a refused connection is counted `refused{reason="proxy_header"}` and `None` returned (the
/// caller closes it).
pub async fn accept_for(
    stream: &mut TcpStream,
    (peer, local): (SocketAddr, SocketAddr),
    svc: &crate::service::Service,
    rt: &crate::service::Runtime,
) -> Option<(SocketAddr, SocketAddr)> {
    let limit = Duration::from_nanos(rt.timeouts.header);
    match accept(stream, peer, local, &rt.accept_proxy, limit).await {
        Ok(ends) => Some(ends),
        Err(e) => {
            tracing::debug!(%peer, "connection refused: {e}");
            svc.metrics.refuse("proxy_header");
            None
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

    fn proxied(src: &str, dst: &str) -> Announced {
        Announced::Proxied {
            src: a(src),
            dst: a(dst),
        }
    }

    #[test]
    fn v1_lines_parse_and_stop_at_their_crlf() {
        let line = b"PROXY TCP4 203.0.113.9 10.0.0.1 56324 443\r\nGET / HTTP/1.1\r\n";
        let r = parse(line).unwrap();
        assert_eq!(r.announced, proxied("203.0.113.9:56324", "10.0.0.1:443"));
        assert_eq!(&line[r.len..], b"GET / HTTP/1.1\r\n");
        let r = parse(b"PROXY TCP6 2001:db8::1 ::1 1 65535\r\n").unwrap();
        assert_eq!(r.announced, proxied("[2001:db8::1]:1", "[::1]:65535"));
        for unknown in [
            &b"PROXY UNKNOWN\r\n"[..],
            b"PROXY UNKNOWN ffff::1 ffff::2 65535 65535\r\n",
        ] {
            let r = parse(unknown).unwrap();
            assert_eq!((r.announced, r.len), (Announced::Local, unknown.len()));
        }
    }

    #[test]
    fn v1_malformed_lines_are_named() {
        let syntax = |line: &[u8]| match parse(line) {
            Err(ParseError::V1Syntax(part)) => part,
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(line)),
        };
        assert!(syntax(b"PROXY TCP5 1.2.3.4 1.2.3.4 1 2\r\n").contains("protocol"));
        assert!(syntax(b"PROXY TCP4 1.2.3.4 1.2.3.4 1 2\n").contains("CRLF"));
        assert!(syntax(b"PROXY TCP4 ::1 1.2.3.4 1 2\r\n").contains("address"));
        assert!(syntax(b"PROXY TCP6 1.2.3.4 ::1 1 2\r\n").contains("address"));
        assert!(syntax(b"PROXY TCP4 01.2.3.4 1.2.3.4 1 2\r\n").contains("address"));
        assert!(syntax(b"PROXY TCP4 1.2.3.4 1.2.3.4 080 2\r\n").contains("port"));
        assert!(syntax(b"PROXY TCP4 1.2.3.4 1.2.3.4 65536 2\r\n").contains("port"));
        assert!(syntax(b"PROXY TCP4 1.2.3.4 1.2.3.4 +1 2\r\n").contains("port"));
        assert!(syntax(b"PROXY TCP4  1.2.3.4 1.2.3.4 1 2\r\n").contains("field"));
        assert!(syntax(b"PROXY TCP4 1.2.3.4 1.2.3.4 1 2 3\r\n").contains("field"));
        assert!(syntax(b"PROXY TCP4 1.2.3.4 1.2.3.4 1\r\n").contains("field"));
        assert!(syntax(b"PROXY UNKNOWNX\r\n").contains("field"));
        assert!(syntax(b"PROXY TCP4 1.2.3.4 \xff 1 2\r\n").contains("ASCII"));
        let long = [&b"PROXY UNKNOWN "[..], &[b'x'; 100]].concat();
        assert_eq!(parse(&long), Err(ParseError::V1TooLong));
        assert_eq!(parse(&long[..106]), Err(ParseError::Truncated));
        assert_eq!(parse(b"PROX"), Err(ParseError::Truncated));
        assert_eq!(parse(b""), Err(ParseError::Truncated));
        for other in [
            &b"GET / HTTP/1.1\r\n"[..],
            b"PROXY\r\n",
            b"\x16\x03\x01\x02\x00",
        ] {
            assert_eq!(parse(other), Err(ParseError::Signature), "{other:?}");
        }
    }

    /// A version 2 block: the signature, `vc`, `fam`, the length and `body`.
    fn v2(vc: u8, fam: u8, body: &[u8]) -> Vec<u8> {
        let mut h = V2_SIGNATURE.to_vec();
        h.extend_from_slice(&[vc, fam]);
        h.extend_from_slice(&(body.len() as u16).to_be_bytes());
        h.extend_from_slice(body);
        h
    }

    #[test]
    fn v2_blocks_parse_with_tlvs_skipped() {
        let mut body = vec![203, 0, 113, 9, 10, 0, 0, 1, 0x1f, 0x90, 0x01, 0xbb];
        // PP2_TYPE_AUTHORITY "a.b", PP2_TYPE_NOOP of 1 byte: skipped.
        body.extend_from_slice(&[0x02, 0x00, 0x03, b'a', b'.', b'b', 0x04, 0x00, 0x01, 0x00]);
        let mut h = v2(0x21, 0x11, &body);
        let len = h.len();
        h.extend_from_slice(b"\x16\x03\x01");
        let r = parse(&h).unwrap();
        assert_eq!(r.announced, proxied("203.0.113.9:8080", "10.0.0.1:443"));
        assert_eq!(r.len, len);
        // LOCAL, whatever its family; PROXY with AF_UNSPEC: the real endpoints.
        for (vc, fam, body) in [
            (0x20, 0x00, &[][..]),
            (0x20, 0x11, &[0; 12]),
            (0x21, 0x00, &[]),
        ] {
            let r = parse(&v2(vc, fam, body)).unwrap();
            assert_eq!((r.announced, r.len), (Announced::Local, 16 + body.len()));
        }
    }

    #[test]
    fn v2_malformed_blocks_are_named() {
        assert_eq!(
            parse(&v2(0x11, 0x11, &[0; 12])),
            Err(ParseError::Version(1))
        );
        assert_eq!(
            parse(&v2(0x22, 0x11, &[0; 12])),
            Err(ParseError::Command(2))
        );
        for fam in [0x12, 0x31, 0x41, 0x01] {
            assert_eq!(
                parse(&v2(0x21, fam, &[0; 216])),
                Err(ParseError::Family(fam))
            );
        }
        assert_eq!(
            parse(&v2(0x21, 0x11, &[0; 8])),
            Err(ParseError::ShortAddresses {
                family: 0x11,
                len: 8
            })
        );
        assert_eq!(
            parse(&v2(0x21, 0x21, &[0; 12])),
            Err(ParseError::ShortAddresses {
                family: 0x21,
                len: 12
            })
        );
        // Refused from the 16 fixed bytes, before the body arrives.
        let big = v2(0x21, 0x11, &vec![0; V2_MAX_LEN + 1]);
        assert_eq!(parse(&big[..16]), Err(ParseError::Length(V2_MAX_LEN + 1)));
        let max = v2(0x21, 0x11, &vec![0; V2_MAX_LEN]);
        assert_eq!(parse(&max).unwrap().len, MAX_HEADER);
        assert_eq!(parse(&max[..20]), Err(ParseError::Truncated));
        let mut bad_sig = v2(0x21, 0x11, &[0; 12]);
        bad_sig[11] = 0x0b;
        assert_eq!(parse(&bad_sig), Err(ParseError::Signature));
    }

    #[test]
    fn what_is_sent_parses_back() {
        let ends = (a("192.168.0.1:56324"), a("192.168.0.11:443"));
        for v in [SendProxy::V1, SendProxy::V2] {
            let h = header(v, ends.0, ends.1);
            let r = parse(&h).unwrap();
            assert_eq!(
                (r.announced, r.len),
                (proxied("192.168.0.1:56324", "192.168.0.11:443"), h.len())
            );
        }
        let h = check_header(SendProxy::V2, ends.0, ends.1);
        assert_eq!(parse(&h).unwrap().announced, Announced::Local);
    }

    fn any_addr() -> impl proptest::strategy::Strategy<Value = SocketAddr> {
        use proptest::prelude::*;
        prop_oneof![
            (any::<[u8; 4]>(), any::<u16>()).prop_map(|(ip, p)| SocketAddr::from((ip, p))),
            (any::<[u8; 16]>(), any::<u16>()).prop_map(|(ip, p)| SocketAddr::from((ip, p))),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 256, failure_persistence: None, ..Default::default()
        })]

        /// The writer's header parses back to its addresses (as sent: one family), whatever
        /// follows it; each of its proper beginnings is `Truncated`.
        #[test]
        fn the_writers_header_parses_back(
            src in any_addr(), dst in any_addr(), v2 in proptest::bool::ANY,
            tail in proptest::collection::vec(proptest::num::u8::ANY, 0..64),
        ) {
            let v = if v2 { SendProxy::V2 } else { SendProxy::V1 };
            let h = header(v, src, dst);
            let (s, d) = same_family(src, dst);
            let with_tail = [h.clone(), tail].concat();
            let r = parse(&with_tail).unwrap();
            proptest::prop_assert_eq!(r.len, h.len());
            proptest::prop_assert_eq!(r.announced, Announced::Proxied { src: s, dst: d });
            for cut in 0..h.len() {
                proptest::prop_assert_eq!(parse(&h[..cut]), Err(ParseError::Truncated));
            }
        }

        /// Any bytes: an answer, never a panic, and a length within the bounds.
        #[test]
        fn any_bytes_get_an_answer(
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
            prefix in 0usize..3,
        ) {
            let heads: [&[u8]; 3] = [b"", b"PROXY ", &V2_SIGNATURE];
            let b = [heads[prefix], &bytes].concat();
            if let Ok(r) = parse(&b) {
                proptest::prop_assert!(r.len <= b.len() && r.len <= MAX_HEADER);
            }
        }
    }

    /// The header read from a socket in pieces; the bytes after it stay for the next reader.
    #[tokio::test]
    async fn read_header_takes_exactly_the_header() {
        use tokio::io::AsyncWriteExt;
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (mut s, _) = l.accept().await.unwrap();
        let h = header(SendProxy::V2, a("[2001:db8::9]:4000"), a("[::1]:80"));
        c.write_all(&h[..5]).await.unwrap();
        let reader = tokio::spawn(async move {
            let r = read_header(&mut s).await.unwrap();
            let mut rest = [0u8; 4];
            s.read_exact(&mut rest).await.unwrap();
            (r, rest)
        });
        tokio::task::yield_now().await;
        c.write_all(&h[5..20]).await.unwrap();
        c.write_all(&[&h[20..], b"GET "].concat()).await.unwrap();
        let (r, rest) = reader.await.unwrap();
        assert_eq!(r.announced, proxied("[2001:db8::9]:4000", "[::1]:80"));
        assert_eq!(&rest, b"GET ");
        // Closed early, or not a header: an error, nothing more read.
        let mut c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (mut s, _) = l.accept().await.unwrap();
        c.write_all(b"PROXY TCP4 1.2").await.unwrap();
        drop(c);
        assert!(matches!(
            read_header(&mut s).await,
            Err(AcceptError::Closed)
        ));
        let mut c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (mut s, _) = l.accept().await.unwrap();
        c.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        let e = read_header(&mut s).await.unwrap_err();
        assert!(
            matches!(e, AcceptError::Header(ParseError::Signature)),
            "{e}"
        );
    }
}

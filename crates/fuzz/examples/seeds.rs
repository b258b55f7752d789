//! Writes the seeds of the targets whose inputs are made by the crates' own writers (frames
//! of `wire::frames`, PROXY headers of `proxy_proto::header`, nfnetlink datagrams, a rustls
//! ClientHello) into `corpus/<target>/`:
//! `cargo run -p netsched-fuzz --example seeds` (the text seeds are copied files).

use netsched_balance::config::SendProxy;
use netsched_balance::proxy_proto;
use netsched_core::wire::frames;
use std::path::Path;
use std::sync::Arc;

fn put(target: &str, name: &str, bytes: &[u8]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), bytes).unwrap();
}

/// An nfnetlink queue packet message (nlmsghdr, nfgenmsg, NFQA_PACKET_HDR, NFQA_PAYLOAD).
fn nfq_message(id: u32, packet: &[u8]) -> Vec<u8> {
    let mut attrs = Vec::new();
    let mut attr = |t: u16, d: &[u8]| {
        attrs.extend_from_slice(&((4 + d.len()) as u16).to_ne_bytes());
        attrs.extend_from_slice(&t.to_ne_bytes());
        attrs.extend_from_slice(d);
        while attrs.len() % 4 != 0 {
            attrs.push(0);
        }
    };
    let mut hdr = id.to_be_bytes().to_vec();
    hdr.extend_from_slice(&[0x08, 0x00, 1]);
    attr(1, &hdr);
    attr(10, packet);
    let len = 16 + 4 + attrs.len();
    let mut m = Vec::new();
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    // NFNL_SUBSYS_QUEUE << 8 | NFQNL_MSG_PACKET (0)
    m.extend_from_slice(&(3u16 << 8).to_ne_bytes());
    m.extend_from_slice(&0u16.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&[2, 0, 0, 0]);
    m.extend_from_slice(&attrs);
    m
}

// The balancer's own tests make their hellos with this provider too (tests/sni.rs).
#[allow(deprecated)]
fn client_hello(name: &str) -> Vec<u8> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cc = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
    let mut c = rustls::ClientConnection::new(Arc::new(cc), name).unwrap();
    let mut out = Vec::new();
    while c.wants_write() {
        c.write_tls(&mut out).unwrap();
    }
    out
}

fn main() {
    let udp = frames::udp4_frame([10, 0, 0, 1], [10, 0, 0, 2], 5000, 53, b"query");
    let tcp = frames::tcp4_frame(
        [192, 168, 1, 9],
        [10, 1, 2, 3],
        40000,
        80,
        0x18,
        1,
        b"GET / HTTP/1.1\r\n",
    );
    let ack = frames::tcp4_frame([192, 168, 1, 9], [10, 1, 2, 3], 40000, 80, 0x10, 77, b"");
    let vlan = frames::vlan_tagged(&udp, &[0x8100, 0x88a8]);
    let frag = frames::with_ipv4_fragment(&tcp, 0x2000);
    let v6frag =
        frames::ipv6_fragment_frame(17, 0, true, &[0x13, 0x88, 0, 53, 0, 12, 0, 0, 1, 2, 3, 4]);
    for target in ["filter_packet", "core_wire"] {
        put(target, "udp4", &udp);
        put(target, "tcp4", &tcp);
        put(target, "tcp4-ack", &ack);
        put(target, "udp4-vlan2", &vlan);
        put(target, "tcp4-first-fragment", &frag);
        put(target, "ipv6-fragment", &v6frag);
    }
    put("nfq_packet", "udp4", &udp[14..]);
    put("nfq_packet", "tcp4", &tcp[14..54 + 16]);
    put("nfq_packet", "tcp4-ack", &ack[14..54]);
    put("nfq_packet", "ipv6-fragment", &v6frag[14..]);
    let mut two = nfq_message(1, &tcp[14..54]);
    two.extend_from_slice(&nfq_message(2, &udp[14..]));
    put("nfq_netlink", "one-tcp", &nfq_message(7, &tcp[14..54]));
    put("nfq_netlink", "two", &two);
    let src = "192.0.2.10:51000".parse().unwrap();
    let dst = "198.51.100.1:443".parse().unwrap();
    let src6 = "[2001:db8::10]:51000".parse().unwrap();
    let dst6 = "[2001:db8::1]:443".parse().unwrap();
    put(
        "proxy_protocol",
        "v1-tcp4",
        &proxy_proto::header(SendProxy::V1, src, dst),
    );
    put(
        "proxy_protocol",
        "v1-tcp6",
        &proxy_proto::header(SendProxy::V1, src6, dst6),
    );
    put(
        "proxy_protocol",
        "v2-tcp4",
        &proxy_proto::header(SendProxy::V2, src, dst),
    );
    put(
        "proxy_protocol",
        "v2-tcp6",
        &proxy_proto::header(SendProxy::V2, src6, dst6),
    );
    put(
        "proxy_protocol",
        "v2-local",
        &proxy_proto::check_header(SendProxy::V2, src, dst),
    );
    put(
        "proxy_protocol",
        "v1-unknown",
        b"PROXY UNKNOWN\r\nGET / HTTP/1.1\r\n\r\n",
    );
    put(
        "tls_client_hello",
        "rustls-example.com",
        &client_hello("example.com"),
    );
    put(
        "tls_client_hello",
        "rustls-www.example.org",
        &client_hello("www.example.org"),
    );
}

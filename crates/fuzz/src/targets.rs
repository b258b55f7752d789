//! One function per fuzz target: the bytes go to the real parser; a broken invariant panics.
//!
//! Text parsers take the bytes only when they are UTF-8: every daemon reads its files and
//! control lines as UTF-8 first and refuses other bytes before any parser sees them
//! (`netsched_util::read::read_text`, the control server's line reader, whose own target
//! [`control_line`] takes any bytes).

use crate::reference;
use netsched_core::classify::acl::{
    self, AclRule, Action, ClassifierLimits, FiveTuple, Ipv4Prefix, LinearClassifier,
    PacketClassifier, ProtoMatch, TupleMergeClassifier, TupleSpaceClassifier,
};
use netsched_core::classify::PortRange;
use netsched_core::wire;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

// ---------------------------------------------------------------------------------------------
// The balancer: HTTP/1 request heads, response heads and bodies, PROXY protocol, ClientHello.

/// Fields by lower-case name, each name's values in order (what a header map keeps of a list).
type Fields = BTreeMap<String, Vec<Vec<u8>>>;

/// What the balancer's service was handed of the first request hyper read.
#[derive(Debug, Clone)]
struct SeenRequest {
    method: String,
    uri: hyper::Uri,
    http11: bool,
    fields: Fields,
}

/// Feed `data` to hyper's HTTP/1 server configured as the balancer configures it
/// (`netsched_balance::l7::h1_server`) on an in-memory connection closed after the bytes;
/// every request it reads goes through the balancer's checks (`l7::check_request`). Returns
/// the first request read, if any.
fn serve_h1(data: &[u8]) -> Option<SeenRequest> {
    use http_body_util::Empty;
    use hyper::body::Incoming;
    use hyper::{Request, Response};
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime");
    let seen: Arc<Mutex<Vec<SeenRequest>>> = Arc::default();
    let record = seen.clone();
    rt.block_on(async move {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
            let mut fields = Fields::new();
            for (name, value) in req.headers() {
                fields
                    .entry(name.as_str().to_string())
                    .or_default()
                    .push(value.as_bytes().to_vec());
            }
            record.lock().unwrap().push(SeenRequest {
                method: req.method().as_str().to_string(),
                uri: req.uri().clone(),
                http11: req.version() == hyper::Version::HTTP_11,
                fields,
            });
            let status = match netsched_balance::l7::check_request(&mut req) {
                Ok(_) => hyper::StatusCode::OK,
                Err((status, _)) => status,
            };
            async move {
                let mut r = Response::new(Empty::<bytes::Bytes>::new());
                *r.status_mut() = status;
                Ok::<_, std::convert::Infallible>(r)
            }
        });
        let builder = netsched_balance::l7::h1_server(std::time::Duration::from_secs(10));
        let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(server), service);
        let feed = async {
            let _ = client.write_all(data).await;
            let _ = client.shutdown().await;
            let mut sink = Vec::new();
            let _ = client.read_to_end(&mut sink).await;
        };
        let both = async { tokio::join!(conn, feed) };
        if tokio::time::timeout(std::time::Duration::from_secs(20), both)
            .await
            .is_err()
        {
            panic!("hyper's server did not finish a closed connection within 20 s");
        }
    });
    let first = seen.lock().unwrap().first().cloned();
    first
}

/// The balancer's HTTP/1 request reader: hyper's server as `l7.rs` configures it, then the
/// balancer's checks of target, Host and framing. Differential against `httparse`: when both
/// read a first request head, they agree on method, target (hyper's `Uri` is httparse's
/// target parsed), version and header fields. Intended differences: hyper may refuse a head
/// httparse reads (a target `http::Uri` refuses, an invalid Content-Length, a head over
/// `l7::MAX_HEAD_BYTES`), it drops a Content-Length sent beside Transfer-Encoding
/// (RFC 9112 §6.3 item 3), and it keeps repeated Content-Length fields of one value as one
/// (RFC 9110 §8.6). hyper must never read a request head httparse refuses.
pub fn http_request(data: &[u8]) {
    let seen = serve_h1(data);
    let mut headers = [httparse::EMPTY_HEADER; 100];
    let mut req = httparse::Request::new(&mut headers);
    let parsed = req.parse(data);
    let Some(seen) = seen else { return };
    let Ok(httparse::Status::Complete(_)) = parsed else {
        panic!("hyper read a request head httparse refuses ({parsed:?}): {seen:?}");
    };
    assert_eq!(req.method, Some(seen.method.as_str()), "method");
    let target = req.path.expect("a complete head has a target");
    let uri: hyper::Uri = target
        .parse()
        .unwrap_or_else(|e| panic!("hyper read the target {target:?}, which http refuses: {e}"));
    assert_eq!(uri, seen.uri, "target {target:?}");
    assert_eq!(req.version == Some(1), seen.http11, "version");
    let mut fields = Fields::new();
    for h in req.headers.iter() {
        fields
            .entry(h.name.to_ascii_lowercase())
            .or_default()
            .push(h.value.to_vec());
    }
    if fields.contains_key("transfer-encoding") {
        fields.remove("content-length");
    }
    // Content-Length fields of one value are kept as one (RFC 9110 §8.6 allows it).
    if let Some(values) = fields.get_mut("content-length") {
        if values.windows(2).all(|w| w[0] == w[1]) {
            values.truncate(1);
        }
    }
    assert_eq!(fields, seen.fields, "header fields");
}

/// Feed `bytes` to a `ResponseReader` at most `piece` bytes at a time: the events until the
/// first error, and the error.
fn read_responses(
    bytes: &[u8],
    piece: usize,
    head_request: bool,
) -> (Vec<String>, Option<netsched_util::http1::ReadError>) {
    use netsched_util::http1::{Event, ResponseReader, MAX_RESPONSE_HEAD};
    let mut r = ResponseReader::new(MAX_RESPONSE_HEAD);
    r.expect_head_response(head_request);
    let mut events = Vec::new();
    let mut at = 0;
    loop {
        loop {
            match r.advance() {
                Ok(Event::NeedMore) => break,
                Ok(Event::Done(s)) => events.push(format!("done {s:?} {}", r.body_bytes())),
                Ok(e) => events.push(format!("{e:?}")),
                Err(e) => return (events, Some(e)),
            }
        }
        if at == bytes.len() {
            break;
        }
        let room = match r.space() {
            Ok(room) => room,
            Err(e) => return (events, Some(e)),
        };
        let n = room.len().min(piece).min(bytes.len() - at);
        room[..n].copy_from_slice(&bytes[at..at + n]);
        r.filled(n);
        at += n;
    }
    match r.at_eof() {
        Ok(Some(s)) => events.push(format!("done {s:?} {}", r.body_bytes())),
        Ok(None) => {}
        Err(e) => return (events, Some(e)),
    }
    (events, None)
}

/// The balancer's HTTP/1 response reader: `h1::parse_head` (netsched_util's head parser, then
/// the header map passed on) and netsched_util's `ResponseReader` (heads and bodies, as the
/// load generators read them). The first byte's low bit says whether the request was HEAD;
/// the rest are the backend's bytes. Differential against `httparse`: a head `parse_head`
/// reads is one httparse reads to the same length with the same status, and every field
/// passed on is one of httparse's. The reader finds the same responses whether the bytes come
/// at once or one at a time.
pub fn http_response(data: &[u8]) {
    let Some((&first, bytes)) = data.split_first() else {
        return;
    };
    let head_request = first & 1 == 1;
    let mut headers = [httparse::EMPTY_HEADER; netsched_util::http1::MAX_RESPONSE_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let reference = resp.parse(bytes);
    match netsched_balance::h1::parse_head(bytes, head_request) {
        Ok(Some((used, head))) => {
            assert!(used <= bytes.len(), "used {used} of {} bytes", bytes.len());
            let Ok(httparse::Status::Complete(n)) = reference else {
                panic!("parse_head read a head httparse refuses: {reference:?}");
            };
            assert_eq!(n, used, "head length");
            let code = resp.code.expect("a complete head has a status");
            match head {
                None => assert!((100..200).contains(&code), "interim status {code}"),
                Some(h) => {
                    assert_eq!(h.parts.status.as_u16(), code, "status");
                    for (name, value) in &h.parts.headers {
                        assert!(
                            resp.headers
                                .iter()
                                .any(|f| f.name.eq_ignore_ascii_case(name.as_str())
                                    && f.value == value.as_bytes()),
                            "field {name}: {value:?} passed on, not in the head"
                        );
                    }
                }
            }
        }
        Ok(None) => {}
        Err(_) => {}
    }
    let whole = read_responses(bytes, usize::MAX, head_request);
    let byte_by_byte = read_responses(bytes, 1, head_request);
    assert_eq!(whole, byte_by_byte, "at once and a byte at a time");
    let cut = (first as usize * bytes.len()) / 256 + 1;
    let pieces = read_responses(bytes, cut, head_request);
    assert_eq!(whole, pieces, "at once and in pieces of {cut}");
}

/// The PROXY protocol v1/v2 header parser (`proxy_proto::parse`, what a listener with
/// `accept_proxy` reads first). A header it accepts: looks at no byte after it (the header
/// alone parses the same), every shorter prefix is `Truncated`, and the balancer's own writer
/// (`proxy_proto::header`, the same version) writes a header that parses to the same
/// addresses (IPv4-mapped IPv6 addresses written as IPv4, as the writer does).
pub fn proxy_protocol(data: &[u8]) {
    use netsched_balance::config::SendProxy;
    use netsched_balance::proxy_proto::{header, parse, Announced, ParseError};
    let Ok(got) = parse(data) else { return };
    assert!(got.len <= data.len());
    assert_eq!(parse(&data[..got.len]), Ok(got), "the header alone");
    for k in 0..got.len {
        assert_eq!(
            parse(&data[..k]),
            Err(ParseError::Truncated),
            "prefix of {k} bytes"
        );
    }
    if let Announced::Proxied { src, dst } = got.announced {
        let version = if data.starts_with(b"PROXY ") {
            SendProxy::V1
        } else {
            SendProxy::V2
        };
        let written = header(version, src, dst);
        let again = parse(&written).expect("the writer's header parses");
        assert_eq!(again.len, written.len());
        let canonical = |a: SocketAddr| (a.ip().to_canonical(), a.port());
        let Announced::Proxied { src: s2, dst: d2 } = again.announced else {
            panic!("the writer's header announces no addresses: {again:?}");
        };
        let same_family = src.ip().to_canonical().is_ipv4() == dst.ip().to_canonical().is_ipv4();
        if same_family {
            assert_eq!(canonical(s2), canonical(src), "source");
            assert_eq!(canonical(d2), canonical(dst), "destination");
        }
    }
}

/// The TLS ClientHello reader of the SNI router (`sni::parse`): never panics, and reads the
/// same whatever follows a hello it decided on.
pub fn tls_client_hello(data: &[u8]) {
    use netsched_balance::sni::{parse, HelloError};
    let got = parse(data);
    if !matches!(got, Err(HelloError::Truncated)) {
        let mut longer = data.to_vec();
        longer.extend_from_slice(&[0x16; 64]);
        assert_eq!(
            format!("{:?}", parse(&longer)),
            format!("{got:?}"),
            "bytes after the hello"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Configuration files: the functions each daemon's `--check` reads its file with.

/// `netsched balance --config FILE --check`: `balance::config::Config::parse`.
pub fn balance_config(data: &[u8]) {
    if let Some(t) = text(data) {
        let _ = netsched_balance::config::Config::parse(t);
    }
}

/// `netsched nfq --config FILE --check`: `nfq::config::Config::from_toml`.
pub fn nfq_config(data: &[u8]) {
    if let Some(t) = text(data) {
        let _ = netsched_nfq::config::Config::from_toml(t);
    }
}

/// `netsched vswitch --config FILE --check`: `vswitch::config::SwitchConfig::parse`.
pub fn vswitch_config(data: &[u8]) {
    if let Some(t) = text(data) {
        let _ = netsched_vswitch::config::SwitchConfig::parse(t, "fuzz.toml");
    }
}

/// The flags of `netsched link` as a unit's `LINK_ARGS` gives them
/// (packaging/etc/link/example.conf: the value of the `LINK_ARGS=` line, else the whole text,
/// split at white space), read by its clap arguments and checked by `RunArgs::config` (what
/// `--check` checks before the host); every line also goes to `qdisc_spec::parse_qdisc`
/// (the `--ab-qdisc` / `--ba-qdisc` grammar).
pub fn link_args(data: &[u8]) {
    use clap::Parser;
    #[derive(Debug, Parser)]
    struct Link {
        #[command(flatten)]
        run: netsched_link::cli::RunArgs,
    }
    let Some(t) = text(data) else { return };
    let args = t
        .lines()
        .find_map(|l| l.trim().strip_prefix("LINK_ARGS="))
        .map(|v| v.trim_matches('"'))
        .unwrap_or(t);
    let words = std::iter::once("netsched-link").chain(args.split_whitespace());
    if let Ok(link) = Link::try_parse_from(words) {
        let _ = link.run.config();
    }
    for line in t.lines() {
        let _ = netsched_link::qdisc_spec::parse_qdisc(line);
    }
}

/// `netsched filter --config FILE --check`: `filter::config::parse_file`. Round trip: the
/// options it reads, written as TOML, read back the same.
pub fn filter_config(data: &[u8]) {
    use netsched_filter::config::parse_file;
    let Some(t) = text(data) else { return };
    let path = std::path::Path::new("/etc/netsched/filter/fuzz.toml");
    let Ok(opts) = parse_file(t, path) else {
        return;
    };
    let written = toml::to_string(&opts).expect("the options write as TOML");
    let again = parse_file(&written, path)
        .unwrap_or_else(|e| panic!("the written options do not read back: {e}\n{written}"));
    assert_eq!(again, opts, "round trip through\n{written}");
}

/// `netsched lab ... --scenario FILE`: `lab::scenario::parse`, then for every experiment the
/// scenario's parameters (`scenario::to_json_for`) and the experiment's `check` (what
/// `lab sweep` applies before it runs).
pub fn lab_scenario(data: &[u8]) {
    let Some(t) = text(data) else { return };
    let Ok(table) = netsched_lab::scenario::parse(t, "fuzz.toml") else {
        return;
    };
    for exp in netsched_lab::experiments::ALL {
        if let Ok(params) = netsched_lab::scenario::to_json_for(exp.name, &table) {
            let _ = (exp.check)(&params);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The filter's rule and signature files.

/// The filter's rule files (`filter::rules::RuleSet::parse`, the format detected as at every
/// load: TOML or ClassBench), then its duplicate report, and the classifiers the filter
/// builds from them (`classifier::build_classifier`, each `ClassifierKind`): for tuples taken
/// from the rules' own fields, each gives the action of the rules scanned in order
/// (`RuleSet::first_match`).
pub fn filter_rules(data: &[u8]) {
    use netsched_filter::classifier::build_classifier;
    use netsched_filter::packet::FiveTuple as Tuple;
    use netsched_filter::rules::{RuleSet, RulesOptions};
    let Some(t) = text(data) else { return };
    let options = RulesOptions {
        format: None,
        classbench_action: None,
    };
    let Ok(set) = RuleSet::parse(t, "fuzz.rules", &options) else {
        return;
    };
    assert_eq!(set.rules.len(), set.lines.len(), "a line per rule");
    let _ = set.duplicates();
    let any = IpAddr::from([0u8; 4]);
    let mut tuples = Vec::new();
    for r in set.rules.iter().take(32) {
        let (src, dst) = (
            r.src.map_or(any, |c| c.network()),
            r.dst.map_or(any, |c| c.network()),
        );
        let dst = match (src, dst) {
            (IpAddr::V4(_), IpAddr::V6(_)) | (IpAddr::V6(_), IpAddr::V4(_)) if r.dst.is_none() => {
                src
            }
            _ => dst,
        };
        for (sport, dport) in [
            (r.sport.map_or(0, |p| p.low), r.dport.map_or(0, |p| p.high)),
            (r.sport.map_or(9, |p| p.high), r.dport.map_or(9, |p| p.low)),
        ] {
            tuples.push(Tuple {
                src,
                dst,
                proto: r.proto.value,
                sport,
                dport,
            });
        }
    }
    for kind in acl::ClassifierKind::ALL {
        let Ok(c) = build_classifier(set.clone(), kind, &ClassifierLimits::default()) else {
            continue;
        };
        for t in &tuples {
            assert_eq!(c.classify(t), set.first_match(t).1, "{kind:?}, {t:?}");
        }
    }
}

/// The ClassBench filter and trace formats (`acl::RuleSet::parse_classbench`,
/// `acl::parse_trace`). Round trips: the rules written back (`to_classbench`) and the trace
/// written back (`format_trace`) read the same.
pub fn classbench(data: &[u8]) {
    let Some(t) = text(data) else { return };
    if let Ok(set) = acl::RuleSet::parse_classbench(t, "fuzz") {
        let written = set.to_classbench();
        let again = acl::RuleSet::parse_classbench(&written, "written")
            .unwrap_or_else(|e| panic!("the written rules do not read back: {e}\n{written}"));
        let strip = |s: &acl::RuleSet| -> Vec<AclRule> {
            s.rules
                .iter()
                .map(|r| AclRule {
                    action: Action::Accept,
                    ..*r
                })
                .collect()
        };
        assert_eq!(strip(&again), strip(&set), "round trip through\n{written}");
    }
    if let Ok(trace) = acl::parse_trace(t, "fuzz", 10_000) {
        let written = acl::format_trace(&trace);
        let again = acl::parse_trace(&written, "written", 10_000)
            .unwrap_or_else(|e| panic!("the written trace does not read back: {e}\n{written}"));
        assert_eq!(again, trace, "round trip through\n{written}");
    }
}

/// The filter's signature files (`filter::signatures::Signatures::parse`). A set it compiles
/// finds a match in any bytes whether they come at once or in two pieces (the scan carries
/// its state across blocks), and a literal pattern line (no `\`) is found in itself.
pub fn signatures(data: &[u8]) {
    use netsched_filter::signatures::Signatures;
    let Some(t) = text(data) else { return };
    let Ok(s) = Signatures::parse(t, "fuzz.sig") else {
        return;
    };
    let payload = data;
    let whole = s.scan(s.start(), payload).matched;
    let cut = payload.len() / 2;
    let split = s.scan(s.scan(s.start(), &payload[..cut]), &payload[cut..]);
    assert_eq!(whole, split.matched, "at once and cut at {cut}");
    for line in t.lines().take(16) {
        if line.trim().is_empty() || line.starts_with('#') || line.contains('\\') {
            continue;
        }
        assert!(
            s.scan(s.start(), line.as_bytes()).matched.is_some(),
            "the pattern {line:?} is not found in itself"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Packets.

/// The filter's packet parser (`filter::packet::parse`, every frame a port receives). An IP
/// frame's payload lies inside the frame.
pub fn filter_packet(data: &[u8]) {
    use netsched_filter::packet::{parse, Parsed};
    if let Parsed::Ip {
        payload: (start, end),
        later_fragment,
        fragment,
        ..
    } = parse(data)
    {
        assert!(start <= end && end <= data.len(), "payload {start}..{end}");
        assert!(
            !later_fragment || fragment,
            "a later fragment is a fragment"
        );
    }
}

/// The core's wire parsers (`wire::parse_frame`, `parse_ip`, `parse_tcp`, `ports`,
/// `ack_info`, `is_tcp_pure_ack`, `FiveTuple::from_ipv4`): never panic, offsets in order
/// within the frame. Round trip: a UDP and a TCP frame made by `wire::frames` from the first
/// bytes (addresses, ports, the rest as payload) parse back to those fields.
pub fn core_wire(data: &[u8]) {
    if let wire::Frame::Ip(ip) = wire::parse_frame(data) {
        assert!(
            ip.ip_offset <= ip.transport_offset
                && ip.transport_offset <= ip.payload_offset
                && ip.payload_offset <= ip.end
                && ip.end <= data.len(),
            "offsets {ip:?}"
        );
    }
    let _ = wire::ethernet_payload(data);
    let _ = wire::parse_ip(data);
    let _ = wire::parse_tcp(data);
    let _ = wire::ports(data);
    let _ = wire::ack_info(data);
    let _ = wire::is_tcp_pure_ack(data);
    let _ = FiveTuple::from_ipv4(data);
    if data.len() < 13 {
        return;
    }
    let (src, dst) = (
        [data[0], data[1], data[2], data[3]],
        [data[4], data[5], data[6], data[7]],
    );
    let (sport, dport) = (
        u16::from_be_bytes([data[8], data[9]]),
        u16::from_be_bytes([data[10], data[11]]),
    );
    let payload = &data[13..data.len().min(13 + 1400)];
    let udp = wire::frames::udp4_frame(src, dst, sport, dport, payload);
    let tcp = wire::frames::tcp4_frame(src, dst, sport, dport, data[12], 7, payload);
    for (frame, proto) in [(udp, 17u8), (tcp, 6u8)] {
        let wire::Frame::Ip(ip) = wire::parse_frame(&frame) else {
            panic!("a frame of wire::frames does not parse: {frame:?}");
        };
        assert_eq!(ip.src, IpAddr::from(src));
        assert_eq!(ip.dst, IpAddr::from(dst));
        assert_eq!(
            (ip.src_port, ip.dst_port, ip.protocol),
            (sport, dport, proto)
        );
        assert_eq!(&frame[ip.payload_offset..ip.end], payload, "payload");
        let t = FiveTuple::from_ipv4(&frame[ip.ip_offset..]).expect("a 5-tuple");
        assert_eq!(
            (t.src, t.dst, t.src_port, t.dst_port, t.proto),
            (
                u32::from_be_bytes(src),
                u32::from_be_bytes(dst),
                sport,
                dport,
                proto
            )
        );
    }
}

/// nfq's packet parser (`nfq::packet::parse`, the head of every queued packet). Differential
/// against the core's `parse_ip` + `FiveTuple::from_ipv4`: when both read an IPv4 TCP/UDP
/// packet, they agree on addresses, ports and protocol.
pub fn nfq_packet(data: &[u8]) {
    let Some(p) = netsched_nfq::packet::parse(data) else {
        return;
    };
    if let Some(t) = FiveTuple::from_ipv4(data) {
        if let (IpAddr::V4(s), IpAddr::V4(d)) = (p.src, p.dst) {
            assert_eq!(
                (
                    u32::from(s),
                    u32::from(d),
                    p.src_port,
                    p.dst_port,
                    p.protocol
                ),
                (t.src, t.dst, t.src_port, t.dst_port, t.proto),
                "nfq and core disagree"
            );
        }
    }
}

/// The nfnetlink datagrams nfq reads from its queue socket (`nfq::netlink::parse_datagram`):
/// never panics; every packet's head comes from the datagram.
pub fn nfq_netlink(data: &[u8]) {
    let mut out = Vec::new();
    netsched_nfq::netlink::parse_datagram(data, &mut out);
    for p in &out {
        assert!(p.head.len() <= data.len());
    }
}

// ---------------------------------------------------------------------------------------------
// Control sockets.

/// The control server's request line (`control::server::read_line`, over a socket pair the
/// bytes are written to and then closed), then the line as each daemon parses it (filter,
/// vswitch, nfq). A line read is the bytes before the first newline (or all of them, at
/// end of input), as UTF-8.
pub fn control_line(data: &[u8]) {
    use netsched_control::{server::read_line, Limits, LineEnd};
    use std::io::Write;
    use std::os::unix::net::UnixStream;
    use std::time::{Duration, Instant};
    let data = &data[..data.len().min(8192)];
    let limits = Limits {
        max_connections: 1,
        max_line: 4096,
        request_within: Duration::from_secs(5),
        answer_within: Duration::from_secs(5),
    };
    for end in [LineEnd::Newline, LineEnd::NewlineOrEnd] {
        let (mut w, mut r) = UnixStream::pair().expect("a socket pair");
        w.write_all(data).expect("the bytes fit the socket buffer");
        w.shutdown(std::net::Shutdown::Write).expect("shutdown");
        let deadline = Instant::now() + Duration::from_secs(5);
        let Ok(line) = read_line(&mut r, &limits, end, deadline) else {
            continue;
        };
        let expected = match data.iter().position(|&b| b == b'\n') {
            Some(n) => &data[..n],
            None => data,
        };
        assert_eq!(line.as_bytes(), expected, "the line read ({end:?})");
        assert!(line.len() <= limits.max_line);
        let _ = netsched_filter::control::parse(&line);
        let _ = netsched_vswitch::control::parse(&line);
        let _ = netsched_nfq::control::parse_line(&line);
    }
}

// ---------------------------------------------------------------------------------------------
// Units.

/// The units grammar (`core::units::parse_duration`, `parse_rate`, `parse_size`,
/// `parse_frequency`). Differential against [`reference::units`], the grammar as the module
/// documents it: both accept or both refuse, with the same value. Round trip: a value written
/// by the module's `format_*` reads back within the writer's precision (3 decimals).
pub fn units(data: &[u8]) {
    use netsched_core::units::{
        format_duration, format_frequency, format_rate, format_size, parse_duration,
        parse_frequency, parse_rate, parse_size,
    };
    use reference::units::{parse as spec, Kind};
    let Some(t) = text(data) else { return };
    type Parse = fn(&str) -> Result<u64, netsched_core::units::UnitError>;
    type Format = fn(u64) -> String;
    let kinds: [(Kind, Parse, Format); 4] = [
        (Kind::Duration, parse_duration, format_duration),
        (Kind::Rate, parse_rate, format_rate),
        (Kind::Size, parse_size, format_size),
        (Kind::Frequency, parse_frequency, format_frequency),
    ];
    for (kind, parse, format) in kinds {
        let got = parse(t).ok();
        assert_eq!(
            got,
            spec(kind, t),
            "{kind:?} {t:?}: code, documented grammar"
        );
        if let Some(v) = got {
            let written = format(v);
            let back = parse(&written)
                .unwrap_or_else(|e| panic!("{kind:?} {v} written {written:?} reads as {e}"));
            let tolerance = v / 500 + 1;
            assert!(
                back.abs_diff(v) <= tolerance,
                "{kind:?} {v} written {written:?} reads back as {back}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Classification.

/// Rules and tuples decoded from bytes: the first byte is the collision limit, the second the
/// rule count (at most 48); each rule takes 15 bytes (source and destination address and
/// prefix length, two port ranges, protocol and mask), the rest are tuples of 13 bytes. Each
/// rule adds its own corner tuples, so that rules do match.
fn decode_rules(data: &[u8]) -> Option<(usize, Vec<AclRule>, Vec<FiveTuple>)> {
    let (&limit, rest) = data.split_first()?;
    let (&count, mut rest) = rest.split_first()?;
    let count = (count as usize % 49).min(rest.len() / 15);
    let mut rules = Vec::with_capacity(count);
    let mut tuples = Vec::new();
    let u32_at = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let range = |a: u8, b: u8| {
        // Coarse ranges (whole 256-port blocks, or one port) so that ranges overlap.
        let (lo, hi) = (u16::from(a.min(b)) << 8, u16::from(a.max(b)) << 8 | 0xff);
        if a & 1 == 1 {
            PortRange { low: lo, high: lo }
        } else {
            PortRange { low: lo, high: hi }
        }
    };
    for (i, r) in rest.chunks_exact(15).take(count).enumerate() {
        let src = Ipv4Prefix::truncating(u32_at(&r[0..4]), r[4] % 33);
        let dst = Ipv4Prefix::truncating(u32_at(&r[5..9]), r[9] % 33);
        let proto = if r[14] & 1 == 1 {
            ProtoMatch::ANY
        } else {
            ProtoMatch::exact(r[13])
        };
        let action = if i % 2 == 0 {
            Action::Accept
        } else {
            Action::Drop
        };
        let rule = AclRule {
            src,
            dst,
            src_port: range(r[10], r[11]),
            dst_port: range(r[12], r[12] ^ r[11]),
            proto,
            action,
        };
        tuples.push(FiveTuple {
            src: src.addr(),
            dst: dst.addr(),
            src_port: rule.src_port.low,
            dst_port: rule.dst_port.high,
            proto: r[13],
        });
        tuples.push(FiveTuple {
            src: src.addr() | !src.mask(),
            dst: dst.addr(),
            src_port: rule.src_port.high,
            dst_port: rule.dst_port.low,
            proto: r[13],
        });
        rules.push(rule);
    }
    rest = &rest[count * 15..];
    for t in rest.chunks_exact(13) {
        tuples.push(FiveTuple {
            src: u32_at(&t[0..4]),
            dst: u32_at(&t[4..8]),
            src_port: u16::from_be_bytes([t[8], t[9]]),
            dst_port: u16::from_be_bytes([t[10], t[11]]),
            proto: t[12],
        });
    }
    Some((limit as usize % 9 + 1, rules, tuples))
}

/// TupleMerge (`acl::TupleMergeClassifier`, collision limit from the bytes) and tuple space
/// search against the linear scan (`acl::LinearClassifier`) and against the rules scanned in
/// order (`AclRule::matches`): the same first match for every tuple.
pub fn tuple_merge(data: &[u8]) {
    let Some((collision_limit, rules, tuples)) = decode_rules(data) else {
        return;
    };
    let set = acl::RuleSet::new(rules);
    let limits = ClassifierLimits::default();
    let linear = LinearClassifier::build(&set, &limits).expect("the linear scan builds");
    let merge = TupleMergeClassifier::build_with_limit(&set, &limits, collision_limit)
        .expect("TupleMerge builds within the default limits");
    let space = TupleSpaceClassifier::build(&set, &limits)
        .expect("tuple space search builds within the default limits");
    for t in &tuples {
        let scan = set
            .rules
            .iter()
            .position(|r| r.matches(t))
            .map(|i| i as u32);
        assert_eq!(linear.first_match(t), scan, "linear, {t:?}");
        assert_eq!(merge.first_match(t), scan, "TupleMerge, {t:?}\n{set:?}");
        assert_eq!(space.first_match(t), scan, "tuple space, {t:?}\n{set:?}");
    }
    tuple_merge_edited(&set, collision_limit, &tuples);
}

/// The same rules inserted last first (each ahead of every rule held), then every second one
/// removed: the first match of the rules left, scanned in order, answered by id.
fn tuple_merge_edited(set: &acl::RuleSet, collision_limit: usize, tuples: &[acl::FiveTuple]) {
    let mut edited = TupleMergeClassifier::new(collision_limit, &ClassifierLimits::default());
    let rank = |i: usize| (i as u32 + 1) * 16;
    for (i, r) in set.rules.iter().enumerate().rev() {
        edited
            .insert(rank(i), i as u32, r)
            .expect("inserts fit the default limits");
    }
    for (i, r) in set.rules.iter().enumerate().filter(|(i, _)| i % 2 == 1) {
        assert!(
            edited.remove(rank(i), r).expect("removal fits"),
            "rule {i} held"
        );
    }
    for t in tuples {
        let scan = set
            .rules
            .iter()
            .enumerate()
            .find(|(i, r)| i % 2 == 0 && r.matches(t))
            .map(|(i, _)| i as u32);
        assert_eq!(
            edited.first_match(t),
            scan,
            "TupleMerge edited, {t:?}\n{set:?}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_target_reaches_the_differential() {
        let seen = serve_h1(b"GET /a?b HTTP/1.1\r\nHost: x\r\nX-A: 1\r\nX-A: 2\r\n\r\n")
            .expect("hyper reads the request");
        assert_eq!(seen.method, "GET");
        assert_eq!(seen.uri, "/a?b");
        assert_eq!(seen.fields["x-a"], [b"1".to_vec(), b"2".to_vec()]);
        http_request(b"GET /a?b HTTP/1.1\r\nHost: x\r\nX-A: 1\r\nX-A: 2\r\n\r\n");
    }

    #[test]
    fn the_seed_configurations_are_accepted() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
        let read = |p: &str| std::fs::read_to_string(dir.join(p)).unwrap();
        netsched_balance::config::Config::parse(&read("balance_config/example.toml")).unwrap();
        netsched_nfq::config::Config::from_toml(&read("nfq_config/example.toml")).unwrap();
        netsched_vswitch::config::SwitchConfig::parse(&read("vswitch_config/example.toml"), "x")
            .unwrap();
        let p = std::path::Path::new("/etc/f.toml");
        netsched_filter::config::parse_file(&read("filter_config/example.toml"), p).unwrap();
        netsched_lab::scenario::parse(&read("lab_scenario/adsl-ack.toml"), "x").unwrap();
    }

    #[test]
    fn the_units_reference_reads_the_documented_examples() {
        use reference::units::{parse, Kind};
        assert_eq!(parse(Kind::Duration, "4 ms"), Some(4_000_000));
        assert_eq!(parse(Kind::Duration, "250"), None);
        assert_eq!(parse(Kind::Duration, "0"), Some(0));
        assert_eq!(parse(Kind::Rate, "1000bps"), Some(8000));
        assert_eq!(parse(Kind::Rate, "2kibit"), Some(2048));
        assert_eq!(parse(Kind::Size, "64k"), Some(65536));
        assert_eq!(parse(Kind::Frequency, "1.2GHz"), Some(1_200_000_000));
        assert_eq!(parse(Kind::Frequency, "200"), None);
        assert_eq!(parse(Kind::Size, "-1"), None);
    }
}

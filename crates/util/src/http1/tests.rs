//! The reader's tests: RFC 9112 §6.3 item by item, persistence, interim and malformed heads,
//! streams of responses cut at every byte boundary, and a property test against an oracle
//! (the generator of the responses knows each one's status, persistence and body).

use super::*;
use proptest::prelude::*;

fn parse(text: &str, head_request: bool) -> Result<Parsed, HeadError> {
    let mut fields = [EMPTY_HEADER; MAX_RESPONSE_HEADERS];
    parse_response_head(text.as_bytes(), head_request, &mut fields)
}

fn final_head(text: &str) -> Head {
    match parse(text, false).unwrap() {
        Parsed::Final(h) => {
            assert_eq!(h.used, text.find("\r\n\r\n").unwrap() + 4);
            h
        }
        other => panic!("{other:?}"),
    }
}

fn framing(text: &str) -> (Framing, bool) {
    let h = final_head(text);
    (h.framing, h.keep_alive)
}

/// RFC 9112 §6.3, item by item.
#[test]
fn response_framing_follows_rfc_9112_section_6_3() {
    use Framing::*;
    // Item 1: HEAD, 204 and 304 have no body whatever their fields say.
    let ok5 = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
    let Parsed::Final(h) = parse(ok5, true).unwrap() else {
        panic!()
    };
    assert_eq!((h.framing, h.length_overridden), (Length(0), false));
    assert_eq!(
        framing("HTTP/1.1 204 No Content\r\n\r\n"),
        (Length(0), true)
    );
    assert_eq!(
        framing("HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n"),
        (Length(0), true)
    );
    // Item 4: chunked last → decoded; another last coding → until close.
    assert_eq!(
        framing("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n"),
        (Chunked, true)
    );
    assert_eq!(
        framing("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n").0,
        Close
    );
    // Item 3: Transfer-Encoding beats Content-Length; no reuse.
    let h =
        final_head("HTTP/1.1 200 OK\r\nContent-Length: 9\r\nTransfer-Encoding: chunked\r\n\r\n");
    assert_eq!(
        (h.framing, h.keep_alive, h.length_overridden),
        (Chunked, false, true)
    );
    // Item 5: a list of identical values is one length; differing or bad values fail.
    assert_eq!(framing(ok5), (Length(5), true));
    assert_eq!(
        framing("HTTP/1.1 200 OK\r\nContent-Length: 7, 7\r\nContent-Length: 7\r\n\r\n"),
        (Length(7), true)
    );
    for bad in ["7, 8", "-1", "0x10", "", "99999999999999999999", "1 2", "x"] {
        let t = format!("HTTP/1.1 200 OK\r\nContent-Length: {bad}\r\n\r\n");
        assert_eq!(parse(&t, false), Err(HeadError::BadLength), "{bad:?}");
    }
    // Item 8: no length → until close.
    assert_eq!(framing("HTTP/1.1 200 OK\r\n\r\n"), (Close, true));
}

#[test]
fn keep_alive_follows_the_version_and_connection_tokens() {
    let f = |t: &str| framing(t).1;
    assert!(f("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"));
    assert!(!f(
        "HTTP/1.1 200 OK\r\nConnection: foo, Close\r\nContent-Length: 0\r\n\r\n"
    ));
    assert!(!f("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n"));
    assert!(f(
        "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n"
    ));
    assert_eq!(
        connection_tokens(b" close ,x-a,, Keep-Alive"),
        ConnectionTokens {
            close: true,
            keep_alive: true,
            other: true
        }
    );
}

#[test]
fn interim_partial_malformed_and_upgrade_heads() {
    // 1xx other than 101 is interim: `used` covers it.
    let t = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n";
    assert_eq!(
        parse(t, false),
        Ok(Parsed::Interim {
            used: 25,
            status: 100
        })
    );
    assert_eq!(
        parse("HTTP/1.1 200 OK\r\nContent-Le", false),
        Ok(Parsed::Partial)
    );
    for bad in [
        "HTTP/1.1 2x0 OK\r\n\r\n",
        "HTTP/2.0 200 OK\r\n\r\n",
        "HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
        "HTTP/1.1 099 Low\r\n\r\n",
        "garbage\r\n\r\n",
    ] {
        assert_eq!(parse(bad, false), Err(HeadError::Malformed), "{bad:?}");
    }
    assert_eq!(
        parse(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n",
            false
        ),
        Err(HeadError::Upgrade)
    );
    let many: String = (0..=MAX_RESPONSE_HEADERS)
        .map(|i| format!("X-{i}: v\r\n"))
        .collect();
    let t = format!("HTTP/1.1 200 OK\r\n{many}\r\n");
    assert_eq!(parse(&t, false), Err(HeadError::Malformed));
    // A head that does not end within the bound is refused, complete or not.
    let long = format!(
        "HTTP/1.1 200 OK\r\nX: {}\r\n",
        "a".repeat(MAX_RESPONSE_HEAD)
    );
    assert_eq!(parse(&long, false), Err(HeadError::TooLarge));
    assert_eq!(
        parse(&format!("{long}\r\n"), false),
        Err(HeadError::TooLarge)
    );
}

/// Feed `bytes` to a reader in pieces of `piece` bytes; the responses it completes and the
/// body bytes of each.
fn read_in_pieces(bytes: &[u8], piece: usize) -> Result<Vec<(Summary, u64)>, ReadError> {
    let mut r = ResponseReader::new(MAX_RESPONSE_HEAD);
    let mut done = Vec::new();
    for c in bytes.chunks(piece) {
        r.push(c)?;
        loop {
            match r.advance()? {
                Event::Done(s) => done.push((s, r.body_bytes())),
                Event::NeedMore => break,
                Event::Interim(_) | Event::Head(_) => {}
            }
        }
    }
    if let Some(s) = r.at_eof()? {
        done.push((s, r.body_bytes()));
    }
    Ok(done)
}

#[test]
fn the_reader_finds_every_response_end_however_the_bytes_arrive() {
    let stream: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello\
HTTP/1.1 100 Continue\r\n\r\n\
HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\nX-T: 1\r\n\r\n\
HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n\
HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n\
HTTP/1.1 503 Busy\r\nConnection: close\r\nContent-Length: 2\r\n\r\nno\
HTTP/1.0 200 OK\r\n\r\nuntil the close";
    let s = |status, http11, framing, keep_alive| Summary {
        status,
        http11,
        framing,
        keep_alive,
    };
    let want = vec![
        (s(200, true, Framing::Length(5), true), 5),
        (s(200, true, Framing::Chunked, true), 19),
        (s(304, true, Framing::Length(0), true), 0),
        (s(200, false, Framing::Length(0), false), 0),
        (s(503, true, Framing::Length(2), false), 2),
        (s(200, false, Framing::Close, false), 15),
    ];
    for piece in 1..=stream.len() {
        assert_eq!(
            read_in_pieces(stream, piece).unwrap(),
            want,
            "pieces of {piece}"
        );
    }
}

#[test]
fn the_reader_refuses_broken_framing() {
    let cases: [(&[u8], ReadError); 4] = [
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
            ReadError::Head(HeadError::BadLength),
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            ReadError::Body(BodyError::BadChunk),
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n",
            ReadError::Body(BodyError::BadChunk),
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel",
            ReadError::Body(BodyError::Truncated),
        ),
    ];
    for (bytes, want) in cases {
        assert_eq!(
            read_in_pieces(bytes, 7),
            Err(want),
            "{:?}",
            String::from_utf8_lossy(bytes)
        );
    }
    // A head that never ends fills the bound and is refused, not grown.
    let mut endless = b"HTTP/1.1 200 OK\r\nX: ".to_vec();
    endless.resize(MAX_RESPONSE_HEAD + 10, b'a');
    assert_eq!(
        read_in_pieces(&endless, 4096),
        Err(ReadError::Head(HeadError::TooLarge))
    );
}

#[test]
fn read_from_reads_one_response_at_a_time_and_eof() {
    let bytes: &[u8] =
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 404 Nope\r\n\r\nbye";
    let mut src = bytes;
    let mut r = ResponseReader::new(0);
    let a = r.read_from(&mut src).unwrap();
    assert_eq!((a.status, a.keep_alive, r.body_bytes()), (200, true, 2));
    let b = r.read_from(&mut src).unwrap();
    assert_eq!(
        (b.status, b.framing, r.body_bytes()),
        (404, Framing::Close, 3)
    );
    assert!(matches!(r.read_from(&mut src), Err(ReadFailure::Closed)));
}

/// One generated response: its bytes and what a correct reader must report.
#[derive(Debug, Clone)]
struct Case {
    bytes: Vec<u8>,
    status: u16,
    keep_alive: bool,
    body: Vec<u8>,
    /// Close-delimited: it must be the last on its connection.
    to_close: bool,
}

/// How a generated response frames its body.
#[derive(Debug, Clone)]
enum Gen {
    Length,
    /// Chunk sizes (the rest of the body in a last chunk), extensions, a trailer.
    Chunked(Vec<usize>, bool, bool),
    Close,
}

fn case(status: u16, http11: bool, conn: u8, body: Vec<u8>, gen: Gen, interim: bool) -> Case {
    let mut h = Vec::new();
    if interim {
        h.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
    }
    let version = if http11 { "1.1" } else { "1.0" };
    h.extend_from_slice(format!("HTTP/{version} {status} X\r\nServer: t\r\n").as_bytes());
    let conn_field = ["", "Connection: close\r\n", "Connection: keep-alive\r\n"][conn as usize];
    h.extend_from_slice(conn_field.as_bytes());
    let no_body = status == 204 || status == 304;
    let body = if no_body { Vec::new() } else { body };
    let mut keep_alive = if http11 { conn != 1 } else { conn == 2 };
    let mut to_close = false;
    match &gen {
        _ if no_body => h.extend_from_slice(b"\r\n"),
        Gen::Length => {
            h.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
            h.extend_from_slice(&body);
        }
        Gen::Chunked(sizes, ext, trailer) => {
            h.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
            let mut rest = &body[..];
            for &s in sizes.iter().chain([usize::MAX].iter()) {
                let n = s.min(rest.len());
                if n == 0 {
                    continue;
                }
                let e = if *ext { ";a=b" } else { "" };
                h.extend_from_slice(format!("{n:x}{e}\r\n").as_bytes());
                h.extend_from_slice(&rest[..n]);
                h.extend_from_slice(b"\r\n");
                rest = &rest[n..];
            }
            h.extend_from_slice(b"0\r\n");
            if *trailer {
                h.extend_from_slice(b"X-Sum: 1\r\n");
            }
            h.extend_from_slice(b"\r\n");
        }
        Gen::Close => {
            h.extend_from_slice(b"\r\n");
            h.extend_from_slice(&body);
            keep_alive = false;
            to_close = true;
        }
    }
    Case {
        bytes: h,
        status,
        keep_alive,
        body,
        to_close,
    }
}

fn arb_case() -> impl Strategy<Value = Case> {
    let gen = prop_oneof![
        Just(Gen::Length),
        (
            proptest::collection::vec(1usize..40, 0..5),
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(|(s, e, t)| Gen::Chunked(s, e, t)),
        Just(Gen::Close),
    ];
    (
        prop_oneof![Just(200u16), Just(204), Just(304), Just(404), Just(503)],
        any::<bool>(),
        0u8..3,
        proptest::collection::vec(any::<u8>(), 0..80),
        gen,
        proptest::bool::weighted(0.2),
    )
        .prop_map(|(s, v, c, b, g, i)| case(s, v, c, b, g, i))
}

/// A connection's bytes through a [`ResponseReader`] as two pieces split at `cut`: each
/// response's status, persistence and body length.
fn read_split(bytes: &[u8], cut: usize) -> Vec<(u16, bool, u64)> {
    let mut r = ResponseReader::new(0);
    let mut out = Vec::new();
    for piece in [&bytes[..cut], &bytes[cut..]] {
        r.push(piece).unwrap();
        loop {
            match r.advance().unwrap() {
                Event::Done(s) => out.push((s.status, s.keep_alive, r.body_bytes())),
                Event::NeedMore => break,
                Event::Head(_) | Event::Interim(_) => {}
            }
        }
    }
    if let Some(s) = r.at_eof().unwrap() {
        out.push((s.status, s.keep_alive, r.body_bytes()));
    }
    out
}

/// The same bytes through [`parse_response_head`] and a [`BodyDecoder`] over a growing
/// buffer (the way the balancer forwards): each response's body as decoded.
fn decode_split(bytes: &[u8], cut: usize) -> Vec<Vec<u8>> {
    let mut buf: Vec<u8> = Vec::new();
    let mut out = Vec::new();
    let mut body = Vec::new();
    let mut decoder: Option<BodyDecoder> = None;
    for piece in [&bytes[..cut], &bytes[cut..]] {
        buf.extend_from_slice(piece);
        loop {
            let Some(d) = decoder.as_mut() else {
                let mut fields = [EMPTY_HEADER; MAX_RESPONSE_HEADERS];
                match parse_response_head(&buf, false, &mut fields).unwrap() {
                    Parsed::Partial => break,
                    Parsed::Interim { used, .. } => drop(buf.drain(..used)),
                    Parsed::Final(h) => {
                        buf.drain(..h.used);
                        decoder = Some(BodyDecoder::new(h.framing));
                    }
                }
                continue;
            };
            match d.step(&buf).unwrap() {
                Step::Data(n) => body.extend(buf.drain(..n)),
                Step::Skip(n) => drop(buf.drain(..n)),
                Step::End(n) => {
                    buf.drain(..n);
                    out.push(std::mem::take(&mut body));
                    decoder = None;
                }
                Step::NeedMore => break,
            }
        }
    }
    if let Some(mut d) = decoder {
        d.at_eof().unwrap();
        out.push(body);
    }
    out
}

proptest! {
    /// Responses one after another on a connection (a close-delimited one last), cut in two
    /// at every byte boundary: the reader and the decoder find what the generator made.
    #[test]
    fn split_reads_at_every_boundary_match_the_oracle(
        cases in proptest::collection::vec(arb_case(), 1..4)
    ) {
        let mut conn: Vec<Case> = Vec::new();
        for c in cases {
            let last = c.to_close;
            conn.push(c);
            if last {
                break;
            }
        }
        let bytes: Vec<u8> = conn.iter().flat_map(|c| c.bytes.clone()).collect();
        let want: Vec<(u16, bool, u64)> = conn
            .iter()
            .map(|c| (c.status, c.keep_alive, c.body.len() as u64))
            .collect();
        let bodies: Vec<Vec<u8>> = conn.iter().map(|c| c.body.clone()).collect();
        for cut in 0..=bytes.len() {
            prop_assert_eq!(&read_split(&bytes, cut), &want, "cut at {}", cut);
            prop_assert_eq!(&decode_split(&bytes, cut), &bodies, "cut at {}", cut);
        }
    }
}

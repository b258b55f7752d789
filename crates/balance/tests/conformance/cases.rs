//! The conformance corpus: raw bytes a client sends, what a scripted backend answers, and what
//! must hold. Read by `tests/conformance.rs` (docs/balance-conformance.md).
//!
//! A case:
//! - `clients`: the bytes of each client connection, opened one after the other (the next one
//!   40 ms after the previous one ended and the backend wrote all its replies' bytes), so that
//!   a later client can be sent over a backend connection the balancer pooled for an earlier
//!   one. `{pad20k}` stands for 20 480 × `a`.
//! - `replies`: what the backend does on the k-th complete request it reads (counted over all
//!   its connections); past the list it answers [`OK`] and keeps the connection.
//! - `expect`: per client, the outcomes allowed, separated by `|`:
//!   `200` (the first final response has this status; `4xx`/`5xx` for a class),
//!   `200:text` (and its body is `text`), `200,200` (exactly these final responses),
//!   `closed` (no response, the connection ended), `cut` (a response head and part of its
//!   body, then the connection ended), `unread` (the client never reads; nothing to match).
//!   A connection still open with an incomplete response at the client's deadline matches
//!   nothing.
//! - `seen`: how many complete requests the backend may receive (min, max).
//! - `hdr`: on the first complete request the backend receives: a field that must have this
//!   value (`Some`), or must be absent (`None`). `target`, `body`: its target and body.
//! - `backend_closed`: every backend connection must have been closed by the proxy within 5 s
//!   of the last client's end (the last client still connected).
//! - `reason`: why the differential check against HAProxy does not apply.
//!
//! Checked for every case besides: no request whose target holds `/smuggled` reaches the
//! backend; every request that does is cleanly framed (one framing header, one Content-Length
//! value, chunked last, CRLF line ends, no obs-fold, no bare CR, no control bytes, no
//! whitespace before a colon, one Host) and nothing follows it that is not a request; every
//! response the client gets is framed by one header and carries none of those either.

/// What the backend does on one request.
#[derive(Debug, Clone, Copy)]
pub enum Reply {
    /// Write these bytes and read the next request on the connection.
    Send(&'static str),
    /// Write these bytes, then close.
    SendClose(&'static str),
    /// Write these bytes, then hold the connection open and read nothing more into requests.
    SendStall(&'static str),
    /// Write the first bytes; after this many milliseconds the second; then read on.
    SendLater(&'static str, u64, &'static str),
    /// Write the head, then this filler over and over (up to 64 MiB) while the proxy takes it.
    Endless(&'static str, &'static str),
    /// Close without answering.
    Close,
}

#[derive(Debug, Clone, Copy)]
pub struct Case {
    pub name: &'static str,
    /// The rule the case is about (RFC section), or the misbehaviour it plays.
    pub about: &'static str,
    pub clients: &'static [&'static str],
    pub replies: &'static [Reply],
    pub expect: &'static [&'static str],
    pub seen: (usize, usize),
    pub hdr: &'static [(&'static str, Option<&'static str>)],
    pub target: Option<&'static str>,
    pub body: Option<&'static str>,
    pub backend_closed: bool,
    pub reason: Option<&'static str>,
}

pub const OK: &str = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
const SECOND: &str = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond";
/// A whole response the backend was not asked for.
const INJECTED: &str = "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\ninjected";

const C: Case = Case {
    name: "",
    about: "",
    clients: &[],
    replies: &[],
    expect: &["200"],
    seen: (1, 1),
    hdr: &[],
    target: None,
    body: None,
    backend_closed: false,
    reason: None,
};

/// A plain request that closes its client connection: the second client of the reuse cases.
const GET2: &str = "GET /2 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
const GET1: &str = "GET /1 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";

pub const CASES: &[Case] = &[
    // ---- baseline -------------------------------------------------------------------------
    Case {
        name: "get",
        about: "baseline",
        clients: &["GET /a HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"],
        target: Some("/a"),
        hdr: &[("host", Some("t")), ("connection", None)],
        ..C
    },
    Case {
        name: "post-cl",
        about: "9112 §6.2",
        clients: &["POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"],
        body: Some("hello"),
        ..C
    },
    Case {
        name: "post-chunked",
        about: "9112 §7.1",
        clients: &["POST /p HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n"],
        body: Some("hello"),
        ..C
    },
    // ---- RFC 9112 §6: framing ----------------------------------------------------------------
    Case {
        name: "te-and-cl",
        about: "9112 §6.1, §6.3 item 3: TE overrides CL, CL removed",
        clients: &["POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n"],
        expect: &["200|400"],
        seen: (0, 1),
        ..C
    },
    Case {
        name: "te-cl-smuggle-after",
        about: "9112 §6.1: TE+CL, the connection closes after the response",
        clients: &["POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n"],
        expect: &["200|400"],
        seen: (0, 1),
        ..C
    },
    Case {
        name: "cl-duplicate-same",
        about: "9110 §8.6: identical values may be one",
        clients: &["POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"],
        expect: &["200|400"],
        seen: (0, 1),
        ..C
    },
    Case {
        name: "cl-duplicate-conflict",
        about: "9112 §6.3 item 5: differing values → 400",
        clients: &["POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 6\r\nConnection: close\r\n\r\nhello!"],
        expect: &["400"],
        seen: (0, 0),
        ..C
    },
    Case {
        name: "cl-list-same",
        about: "9110 §8.6",
        clients: &["POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: 5, 5\r\nConnection: close\r\n\r\nhello"],
        expect: &["200|400"],
        seen: (0, 1),
        ..C
    },
    Case {
        name: "cl-list-differ",
        about: "9112 §6.3 item 5",
        clients: &["POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: 5, 6\r\nConnection: close\r\n\r\nhello!"],
        expect: &["400"],
        seen: (0, 0),
        ..C
    },
    Case {
        name: "cl-negative",
        about: "9110 §8.6: 1*DIGIT",
        clients: &["POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\nConnection: close\r\n\r\nhello"],
        expect: &["400"],
        seen: (0, 0),
        ..C
    },
    Case {
        name: "cl-plus-sign",
        about: "9110 §8.6: 1*DIGIT",
        clients: &["POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: +5\r\nConnection: close\r\n\r\nhello"],
        expect: &["400"],
        seen: (0, 0),
        ..C
    },
    Case {
        name: "cl-hex",
        about: "9110 §8.6: 1*DIGIT",
        clients: &["POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: 0x5\r\nConnection: close\r\n\r\nhello"],
        expect: &["400"],
        seen: (0, 0),
        ..C
    },
    Case {
        name: "cl-inner-space",
        about: "9110 §8.6: 1*DIGIT",
        clients: &["POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: 1 0\r\nConnection: close\r\n\r\nhellohello"],
        expect: &["400"],
        seen: (0, 0),
        ..C
    },
    Case {
        name: "cl-overflow",
        about: "9112 §6.3 item 5: invalid value",
        clients: &["POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999999999999999999\r\nConnection: close\r\n\r\nhello"],
        expect: &["400|413"],
        seen: (0, 0),
        ..C
    },
    Case {
        name: "cl-empty",
        about: "9110 §8.6: 1*DIGIT",
        clients: &["POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: \r\nConnection: close\r\n\r\nhello"],
        expect: &["400"],
        seen: (0, 0),
        ..C
    },
    Case {
        name: "te-chunked-not-last",
        about: "9112 §6.3 item 4: request with chunked not last → 400",
        clients: &["POST /p HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, gzip\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n"],
        expect: &["400|501"],
        seen: (0, 0),
        ..C
    },
    Case {
        name: "te-gzip-only",
        about: "9112 §6.3 item 4",
        clients: &["POST /p HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\nConnection: close\r\n\r\nhello"],
        expect: &["400|501"],
        seen: (0, 0),
        ..C
    },
    Case {
        name: "te-chunked-twice",
        about: "9112 §6.1: chunked at most once",
        clients: &["POST /p HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n"],
        expect: &["400|501"],
        seen: (0, 0),
        ..C
    },
    Case {
        name: "te-xchunked",
        about: "9112 §6.3 item 4: an unknown coding last",
        clients: &["POST /p HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: xchunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n"],
        expect: &["400|501"],
        seen: (0, 0),
        ..C
    },
    Case {
        name: "te-http10",
        about: "9112 §6.1: TE in HTTP/1.0 is faulty framing",
        clients: &["POST /p HTTP/1.0\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"],
        expect: &["400"],
        seen: (0, 0),
        ..C
    },
    Case {
        name: "te-mixed-case",
        about: "9112 §7: coding names are case-insensitive",
        clients: &["POST /p HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: ChUnKeD\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n"],
        body: Some("hello"),
        ..C
    },
    Case {
        name: "te-obs-fold",
        about: "9112 §5.2: obs-fold rejected or replaced",
        clients: &["POST /p HTTP/1.1\r\nHost: t\r\nTransfer-Encoding:\r\n chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n"],
        expect: &["200|400"],
        seen: (0, 1),
        ..C
    },
    // ---- RFC 9112 §7.1: chunked -------------------------------------------------------------
    Case {
        name: "chunk-extension",
        about: "9112 §7.1.1",
        clients: &["POST /p HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5;a=b;c=\"d\"\r\nhello\r\n0;z\r\n\r\n"],
        body: Some("hello"),
        ..C
    },
    Case {
        name: "chunk-trailer",
        about: "9112 §7.1.2",
        clients: &["POST /p HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\nX-Sum: 1\r\n\r\n"],
        body: Some("hello"),
        ..C
    },
    Case {
        name: "chunk-bad-size",
        about: "9112 §7.1: chunk-size = 1*HEXDIG",
        clients: &["POST /p HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"],
        expect: &["400|closed"],
        seen: (0, 0),
        ..C
    },
    Case {
        name: "chunk-size-overflow",
        about: "9112 §7.1: a size past any integer",
        clients: &["POST /p HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\nFFFFFFFFFFFFFFFFF5\r\nhello\r\n0\r\n\r\n"],
        expect: &["400|413|closed"],
        seen: (0, 0),
        ..C
    },
    Case {
        name: "chunk-negative",
        about: "9112 §7.1",
        clients: &["POST /p HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n-5\r\nhello\r\n0\r\n\r\n"],
        expect: &["400|closed"],
        seen: (0, 0),
        ..C
    },
    Case {
        name: "chunk-data-overrun",
        about: "9112 §7.1: CRLF after chunk-data",
        clients: &["POST /p HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhelloXX\r\n0\r\n\r\n"],
        expect: &["400|closed"],
        seen: (0, 0),
        ..C
    },
    Case {
        name: "chunk-bare-lf",
        about: "9112 §7.1: lines end in CRLF (lenient readers may take LF)",
        clients: &["POST /p HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\nhello\n0\n\n"],
        expect: &["200|400|closed"],
        seen: (0, 1),
        ..C
    },
    Case {
        name: "chunk-smuggle-zero-size-ext",
        about: "9112 §7.1: the last chunk ends the body; the rest is a new request",
        clients: &["POST /p HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n0;x=1\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n"],
        body: Some(""),
        ..C
    },
    // ---- RFC 9112 §9: persistence -------------------------------------------------------------
    Case {
        name: "pipelined-two",
        about: "9112 §9.3.2",
        clients: &["GET /a HTTP/1.1\r\nHost: t\r\n\r\nGET /b HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"],
        replies: &[Reply::Send(OK), Reply::Send(SECOND)],
        expect: &["200,200"],
        seen: (2, 2),
        ..C
    },
    Case {
        name: "close-then-more",
        about: "9112 §9.6: nothing after Connection: close is processed",
        clients: &["GET /a HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n"],
        ..C
    },
    Case {
        name: "http10-closes",
        about: "9112 §9.3: HTTP/1.0 without keep-alive closes",
        clients: &["GET /a HTTP/1.0\r\nHost: t\r\n\r\nGET /smuggled HTTP/1.0\r\nHost: t\r\n\r\n"],
        ..C
    },
    Case {
        name: "http10-keep-alive",
        about: "9112 §9.3",
        clients: &["GET /a HTTP/1.0\r\nHost: t\r\nConnection: keep-alive\r\n\r\nGET /b HTTP/1.0\r\nHost: t\r\n\r\n"],
        expect: &["200,200"],
        seen: (2, 2),
        ..C
    },
    // ---- heads ----------------------------------------------------------------------------
    Case {
        name: "obs-fold",
        about: "9112 §5.2: reject or replace with SP",
        clients: &["GET /a HTTP/1.1\r\nHost: t\r\nX-A: one\r\n two\r\nConnection: close\r\n\r\n"],
        expect: &["200|400"],
        seen: (0, 1),
        ..C
    },
    Case {
        name: "bare-cr-in-value",
        about: "9112 §2.2: bare CR rejected or replaced",
        clients: &["GET /a HTTP/1.1\r\nHost: t\r\nX-A: one\rtwo\r\nConnection: close\r\n\r\n"],
        expect: &["200|400"],
        seen: (0, 1),
        ..C
    },
    Case {
        name: "bare-lf-line-ends",
        about: "9112 §2.2: a recipient may take LF",
        clients: &["GET /a HTTP/1.1\nHost: t\nConnection: close\n\n"],
        expect: &["200|400"],
        seen: (0, 1),
        ..C
    },
    Case {
        name: "bare-lf-cl-smuggle",
        about: "9112 §2.2: a lone LF inside a CRLF head",
        clients: &["POST /p HTTP/1.1\r\nHost: t\r\nX-A: a\nContent-Length: 35\r\nConnection: close\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n"],
        expect: &["200|400"],
        seen: (0, 1),
        ..C
    },
    Case {
        name: "space-before-colon",
        about: "9112 §5.1: MUST 400",
        clients: &["GET /a HTTP/1.1\r\nHost: t\r\nX-A : one\r\nConnection: close\r\n\r\n"],
        expect: &["400"],
        seen: (0, 0),
        ..C
    },
    Case {
        name: "cl-space-before-colon",
        about: "9112 §5.1: MUST 400",
        clients: &["POST /p HTTP/1.1\r\nHost: t\r\nContent-Length : 35\r\nConnection: close\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n"],
        expect: &["400"],
        seen: (0, 0),
        ..C
    },
    Case {
        name: "leading-space-first-field",
        about: "9112 §2.2: whitespace after the start-line",
        clients: &["GET /a HTTP/1.1\r\n Host: evil\r\nHost: t\r\nConnection: close\r\n\r\n"],
        expect: &["200|400"],
        seen: (0, 1),
        ..C
    },
    Case {
        name: "bad-field-name",
        about: "9110 §5.1: field-name = token",
        clients: &["GET /a HTTP/1.1\r\nHost: t\r\nX(A): one\r\nConnection: close\r\n\r\n"],
        expect: &["400"],
        seen: (0, 0),
        ..C
    },
    Case {
        name: "nul-in-value",
        about: "9110 §5.5: NUL rejected or replaced",
        clients: &["GET /a HTTP/1.1\r\nHost: t\r\nX-A: a\0b\r\nConnection: close\r\n\r\n"],
        expect: &["200|400"],
        seen: (0, 1),
        ..C
    },
    Case {
        name: "request-line-double-space",
        about: "9112 §3",
        clients: &["GET  /a HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"],
        expect: &["200|400"],
        seen: (0, 1),
        ..C
    },
    Case {
        name: "version-lowercase",
        about: "9112 §2.3: HTTP-name is case-sensitive",
        clients: &["GET /a http/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"],
        expect: &["400|505"],
        seen: (0, 0),
        ..C
    },
    Case {
        name: "version-2-on-h1",
        about: "9112 §2.3",
        clients: &["GET /a HTTP/2.0\r\nHost: t\r\nConnection: close\r\n\r\n"],
        expect: &["400|505"],
        seen: (0, 0),
        ..C
    },
    Case {
        name: "head-too-large",
        about: "bound: request head ≤ 16 KiB",
        clients: &["GET /a HTTP/1.1\r\nHost: t\r\nConnection: close\r\nX-Big: {pad20k}\r\n\r\n"],
        expect: &["400|431|closed"],
        seen: (0, 1),
        reason: Some("the 16 KiB head bound is netsched's own; HAProxy's default buffer (tune.bufsize 16384) holds the case differently"),
        ..C
    },
    // ---- Connection lists -------------------------------------------------------------------
    Case {
        name: "connection-names-content-length",
        about: "9110 §7.6.1 vs 9112 §6.3: a listed framing field may not be dropped (smuggling)",
        clients: &["POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: 35\r\nConnection: content-length, close\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n"],
        expect: &["400"],
        seen: (0, 0),
        ..C
    },
    Case {
        name: "connection-names-transfer-encoding",
        about: "9110 §7.6.1 vs 9112 §6.3: a listed framing field may not be dropped (smuggling)",
        clients: &["POST /p HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: transfer-encoding, close\r\n\r\n23\r\nGET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n\r\n0\r\n\r\n"],
        expect: &["400"],
        seen: (0, 0),
        ..C
    },
    Case {
        name: "connection-names-other",
        about: "9110 §7.6.1: fields named in Connection are removed",
        clients: &["GET /a HTTP/1.1\r\nHost: t\r\nX-Secret: s\r\nKeep-Alive: timeout=5\r\nConnection: x-secret, close\r\n\r\n"],
        hdr: &[("x-secret", None), ("keep-alive", None), ("connection", None)],
        ..C
    },
    Case {
        name: "upgrade-dropped",
        about: "9110 §7.8: a proxy that does not upgrade drops Upgrade",
        clients: &["GET /a HTTP/1.1\r\nHost: t\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\nConnection: Upgrade, HTTP2-Settings, close\r\n\r\n"],
        hdr: &[("upgrade", None), ("http2-settings", None)],
        reason: Some("HAProxy 2.6 forwards the h2c upgrade request as is (the backend answers 200, nothing is upgraded)"),
        ..C
    },
    // ---- targets and Host ---------------------------------------------------------------------
    Case {
        name: "host-missing",
        about: "9112 §3.2: HTTP/1.1 without Host → 400",
        clients: &["GET /a HTTP/1.1\r\nConnection: close\r\n\r\n"],
        expect: &["400"],
        seen: (0, 0),
        ..C
    },
    Case {
        name: "host-duplicate",
        about: "9112 §3.2: more than one Host → 400",
        clients: &["GET /a HTTP/1.1\r\nHost: t\r\nHost: u\r\nConnection: close\r\n\r\n"],
        expect: &["400"],
        seen: (0, 0),
        ..C
    },
    Case {
        name: "host-duplicate-same",
        about: "9112 §3.2: more than one Host field line → 400",
        clients: &["GET /a HTTP/1.1\r\nHost: t\r\nHost: t\r\nConnection: close\r\n\r\n"],
        expect: &["400"],
        seen: (0, 0),
        ..C
    },
    Case {
        name: "host-invalid",
        about: "9112 §3.2: an invalid Host value → 400",
        clients: &["GET /a HTTP/1.1\r\nHost: a b\r\nConnection: close\r\n\r\n"],
        expect: &["400"],
        seen: (0, 0),
        ..C
    },
    Case {
        name: "host-missing-http10",
        about: "9112 §3.2: HTTP/1.0 may omit Host",
        clients: &["GET /a HTTP/1.0\r\n\r\n"],
        ..C
    },
    Case {
        name: "absolute-form",
        about: "9112 §3.2.2",
        clients: &["GET http://t/x?q=1 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"],
        hdr: &[("host", Some("t"))],
        ..C
    },
    Case {
        name: "absolute-form-host-mismatch",
        about: "9112 §3.2.2: Host is replaced by the target's authority",
        clients: &["GET http://a.example/x HTTP/1.1\r\nHost: b.example\r\nConnection: close\r\n\r\n"],
        expect: &["200|400"],
        seen: (0, 1),
        hdr: &[("host", Some("a.example"))],
        reason: Some("RFC 9112 §3.2.2 has the target's authority replace Host, which netsched does (one host for the backend and the hashing); HAProxy 2.6 refuses the mismatch instead"),
        ..C
    },
    Case {
        name: "absolute-form-no-host",
        about: "9112 §3.2: Host required even with absolute-form",
        clients: &["GET http://a.example/x HTTP/1.1\r\nConnection: close\r\n\r\n"],
        expect: &["400"],
        seen: (0, 0),
        ..C
    },
    Case {
        name: "asterisk-get",
        about: "9112 §3.2.4: asterisk-form only for OPTIONS",
        clients: &["GET * HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"],
        // §3: an invalid request-line SHOULD (not MUST) get a 400.
        expect: &["400|200"],
        seen: (0, 1),
        ..C
    },
    Case {
        name: "options-asterisk",
        about: "9112 §3.2.4",
        clients: &["OPTIONS * HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"],
        target: Some("*"),
        ..C
    },
    Case {
        name: "connect",
        about: "9110 §9.3.6, 9112 §3.2.3: refused, or forwarded in authority-form",
        clients: &["CONNECT t:443 HTTP/1.1\r\nHost: t:443\r\n\r\n"],
        expect: &["4xx|5xx|closed"],
        seen: (0, 1),
        target: Some("t:443"),
        ..C
    },
    // ---- responses: HEAD, 1xx, 204, 304 ----------------------------------------------------
    Case {
        name: "head-then-get",
        about: "9112 §6.3 item 1: no body after HEAD, the connection is reusable",
        clients: &["HEAD /1 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", GET2],
        replies: &[Reply::Send("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"), Reply::Send(SECOND)],
        expect: &["200:", "200:second"],
        seen: (2, 2),
        ..C
    },
    Case {
        name: "head-answered-with-body",
        about: "backend sends a body on a HEAD answer (5 ms later): not for the next client",
        clients: &["HEAD /1 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", GET2, "HEAD /3 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", "GET /4 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"],
        replies: &[
            Reply::SendLater("HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n", 5, "injected"),
            Reply::Send(SECOND),
            Reply::SendLater("HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n", 5, "injected"),
            Reply::Send(SECOND),
        ],
        expect: &["200:", "200:second", "200:", "200:second"],
        seen: (4, 4),
        ..C
    },
    Case {
        name: "extra-response-later",
        about: "backend sends an unrequested response 5 ms after one: not for the next client",
        clients: &[GET1, GET2, GET1, GET2, GET1, GET2],
        replies: &[
            Reply::SendLater(OK, 5, INJECTED),
            Reply::Send(SECOND),
            Reply::SendLater(OK, 5, INJECTED),
            Reply::Send(SECOND),
            Reply::SendLater(OK, 5, INJECTED),
            Reply::Send(SECOND),
        ],
        expect: &["200:ok", "200:second", "200:ok", "200:second", "200:ok", "200:second"],
        seen: (6, 6),
        ..C
    },
    Case {
        name: "extra-response-same-write",
        about: "backend sends an unrequested response with one: not for the next client",
        clients: &[GET1, GET2],
        replies: &[Reply::Send(concat!("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\ninjected")), Reply::Send(SECOND)],
        expect: &["200:ok", "200:second"],
        seen: (2, 2),
        ..C
    },
    Case {
        name: "interim-100",
        about: "9110 §15.2: 1xx skipped",
        clients: &[GET1],
        replies: &[Reply::Send("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")],
        expect: &["200:ok"],
        ..C
    },
    Case {
        name: "interim-103",
        about: "9110 §15.2",
        clients: &[GET1],
        replies: &[Reply::Send("HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")],
        expect: &["200:ok"],
        ..C
    },
    Case {
        name: "unrequested-101",
        about: "9110 §15.2.2: no upgrade was asked",
        clients: &[GET1],
        replies: &[Reply::SendStall("HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n")],
        expect: &["502|closed"],
        reason: Some("a response problem: the request reached both backends"),
        ..C
    },
    Case {
        name: "204-with-body",
        about: "9112 §6.3 item 1: 204 has no body; the bytes after it are not for the next client",
        clients: &[GET1, GET2],
        replies: &[Reply::Send("HTTP/1.1 204 No Content\r\nContent-Length: 8\r\n\r\ninjected"), Reply::Send(SECOND)],
        expect: &["204:", "200:second"],
        seen: (2, 2),
        ..C
    },
    Case {
        name: "304-body-later",
        about: "9112 §6.3 item 1: 304 has no body; bytes after it are not for the next client",
        clients: &[GET1, GET2, GET1, GET2],
        replies: &[
            Reply::SendLater("HTTP/1.1 304 Not Modified\r\nContent-Length: 8\r\n\r\n", 5, "injected"),
            Reply::Send(SECOND),
            Reply::SendLater("HTTP/1.1 304 Not Modified\r\nContent-Length: 8\r\n\r\n", 5, "injected"),
            Reply::Send(SECOND),
        ],
        expect: &["304:", "200:second", "304:", "200:second"],
        seen: (4, 4),
        ..C
    },
    // ---- responses: framing -----------------------------------------------------------------
    Case {
        name: "resp-te-and-cl",
        about: "9112 §6.3 item 3: TE wins, CL not forwarded",
        clients: &[GET1],
        replies: &[Reply::Send("HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n")],
        expect: &["200:ok|502"],
        ..C
    },
    Case {
        name: "resp-cl-conflict",
        about: "9112 §6.3 item 5: → 502",
        clients: &[GET1],
        replies: &[Reply::SendStall("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok")],
        expect: &["502"],
        ..C
    },
    Case {
        name: "resp-cl-invalid",
        about: "9112 §6.3 item 5: → 502",
        clients: &[GET1],
        replies: &[Reply::SendStall("HTTP/1.1 200 OK\r\nContent-Length: 2x\r\n\r\nok")],
        expect: &["502"],
        ..C
    },
    Case {
        name: "resp-te-not-chunked",
        about: "9112 §6.3 item 4: a response read until close",
        clients: &[GET1],
        replies: &[Reply::SendClose("HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\n\r\nuntil close")],
        expect: &["200:until close|502"],
        ..C
    },
    Case {
        name: "resp-until-close",
        about: "9112 §6.3 item 8",
        clients: &[GET1],
        replies: &[Reply::SendClose("HTTP/1.1 200 OK\r\n\r\nuntil close")],
        expect: &["200:until close"],
        ..C
    },
    Case {
        name: "resp-chunked-ext-trailer",
        about: "9112 §7.1.1, §7.1.2",
        clients: &[GET1],
        replies: &[Reply::Send("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;e=1\r\nhello\r\n0\r\nX-T: v\r\n\r\n")],
        expect: &["200:hello"],
        ..C
    },
    Case {
        name: "resp-bad-chunk",
        about: "9112 §7.1: a malformed chunk ends the response early",
        clients: &[GET1],
        replies: &[Reply::SendStall("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n")],
        expect: &["cut|closed|502"],
        ..C
    },
    Case {
        name: "resp-obs-fold",
        about: "9112 §5.2: a proxy replaces obs-fold by SP or answers 502",
        clients: &[GET1],
        replies: &[Reply::Send("HTTP/1.1 200 OK\r\nX-A: one\r\n two\r\nContent-Length: 2\r\n\r\nok")],
        expect: &["200:ok|502"],
        ..C
    },
    Case {
        name: "resp-bare-cr",
        about: "9112 §2.2: bare CR rejected or replaced",
        clients: &[GET1],
        replies: &[Reply::Send("HTTP/1.1 200 OK\r\nX-A: one\rtwo\r\nContent-Length: 2\r\n\r\nok")],
        expect: &["200:ok|502"],
        ..C
    },
    Case {
        name: "resp-space-before-colon",
        about: "9112 §5.1: a proxy removes it or answers 502",
        clients: &[GET1],
        replies: &[Reply::Send("HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\nok")],
        expect: &["200:ok|502"],
        ..C
    },
    // ---- backend misbehaviour ---------------------------------------------------------------
    Case {
        name: "early-close",
        about: "backend closes without answering",
        clients: &[GET1],
        replies: &[Reply::Close],
        expect: &["502"],
        ..C
    },
    Case {
        name: "truncated-head",
        about: "backend closes mid-head",
        clients: &[GET1],
        replies: &[Reply::SendClose("HTTP/1.1 200 OK\r\nContent-Le")],
        expect: &["502"],
        ..C
    },
    Case {
        name: "truncated-body",
        about: "backend closes mid-body",
        clients: &[GET1],
        replies: &[Reply::SendClose("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort")],
        // Never a complete response; the head may or may not have been passed on.
        expect: &["cut|closed|502"],
        ..C
    },
    Case {
        name: "endless-head",
        about: "bound: response head ≤ 16 KiB",
        clients: &[GET1],
        replies: &[Reply::Endless("HTTP/1.1 200 OK\r\n", "X-Fill: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n")],
        expect: &["502"],
        backend_closed: true,
        ..C
    },
    Case {
        name: "stalled-before-head",
        about: "timeouts.server: no answer → 504",
        clients: &[GET1],
        replies: &[Reply::SendStall("")],
        expect: &["504"],
        ..C
    },
    Case {
        name: "stalled-mid-head",
        about: "timeouts.server: part of a head → 504",
        clients: &[GET1],
        replies: &[Reply::SendStall("HTTP/1.1 200 OK\r\nContent-Le")],
        expect: &["504"],
        ..C
    },
    Case {
        name: "stalled-mid-body",
        about: "timeouts.server through the body: the response is cut, not held open",
        clients: &[GET1],
        replies: &[Reply::SendStall("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhello")],
        expect: &["cut"],
        backend_closed: true,
        ..C
    },
    Case {
        name: "stalled-mid-chunked",
        about: "timeouts.server through the body (chunked)",
        clients: &[GET1],
        replies: &[Reply::SendStall("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")],
        expect: &["cut"],
        backend_closed: true,
        ..C
    },
    Case {
        name: "client-never-reads",
        about: "timeouts.client through the body: a client that reads nothing is let go",
        clients: &["GET /big HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"],
        replies: &[Reply::Endless("HTTP/1.1 200 OK\r\nContent-Length: 67108864\r\n\r\n", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")],
        expect: &["unread"],
        backend_closed: true,
        ..C
    },
    Case {
        name: "client-stalls-mid-body",
        about: "timeouts.client / server while the request body stalls",
        clients: &["POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\nConnection: close\r\n\r\nhello"],
        expect: &["4xx|5xx|closed"],
        seen: (0, 0),
        backend_closed: true,
        ..C
    },
    // ---- retries (RFC 9110 §9.2.2) ---------------------------------------------------------
    Case {
        name: "retry-get-on-closed-reuse",
        about: "9110 §9.2.2: an idempotent request may be sent again",
        clients: &[GET1, GET2],
        replies: &[Reply::Send(OK), Reply::Close, Reply::Send(SECOND)],
        expect: &["200:ok", "200:second|502"],
        seen: (2, 3),
        ..C
    },
    Case {
        name: "retry-put-on-closed-reuse",
        about: "9110 §9.2.2: PUT is idempotent",
        clients: &[GET1, "PUT /2 HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc"],
        replies: &[Reply::Send(OK), Reply::Close, Reply::Send(SECOND)],
        expect: &["200:ok", "200:second|502"],
        seen: (2, 3),
        ..C
    },
    Case {
        name: "no-retry-post-on-closed-reuse",
        about: "9110 §9.2.2: POST is not idempotent: never sent twice",
        clients: &[GET1, "POST /2 HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc"],
        replies: &[Reply::Send(OK), Reply::Close, Reply::Send(SECOND)],
        expect: &["200:ok", "502|closed"],
        seen: (2, 2),
        ..C
    },
    Case {
        name: "no-retry-post-empty-on-closed-reuse",
        about: "9110 §9.2.2: POST without a body neither",
        clients: &[GET1, "POST /2 HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"],
        replies: &[Reply::Send(OK), Reply::Close, Reply::Send(SECOND)],
        expect: &["200:ok", "502|closed"],
        seen: (2, 2),
        ..C
    },
    Case {
        name: "no-retry-patch-on-closed-reuse",
        about: "9110 §9.2.2: PATCH is not idempotent",
        clients: &[GET1, "PATCH /2 HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc"],
        replies: &[Reply::Send(OK), Reply::Close, Reply::Send(SECOND)],
        expect: &["200:ok", "502|closed"],
        seen: (2, 2),
        ..C
    },
];

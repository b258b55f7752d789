//! An HTTP/1.x response head: parsed by `httparse`, its body's framing decided by RFC 9112
//! §6.3, and whether the connection stays open by §9.3.
//!
//! Source: RFC 9112 (HTTP/1.1) §6.3 "Message Body Length", §7.1 (chunked), §9.3 (persistence);
//! RFC 9110 §15.2 (interim 1xx responses), §7.6.1 (Connection).
//! Cost: one `httparse` pass over the head plus one pass over its fields; no allocation (the
//! caller lends the field array; its size bounds the number of fields).

use super::{Framing, MAX_RESPONSE_HEAD};

/// Why a response head was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadError {
    /// Not an HTTP/1.x status line and fields (or more fields than the array lent), or a
    /// status outside 100–999.
    Malformed,
    /// No end of the head within [`MAX_RESPONSE_HEAD`] bytes.
    TooLarge,
    /// A 101 Switching Protocols (never asked for).
    Upgrade,
    /// A Content-Length that is not one valid number (RFC 9112 §6.3 item 5).
    BadLength,
}

impl std::fmt::Display for HeadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HeadError::Malformed => "malformed response head",
            HeadError::TooLarge => "response head larger than the limit",
            HeadError::Upgrade => "unasked-for 101 Switching Protocols",
            HeadError::BadLength => "invalid Content-Length",
        })
    }
}

impl std::error::Error for HeadError {}

/// A final (non-1xx) response head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// Bytes of the head, its empty line included.
    pub used: usize,
    pub status: u16,
    /// `HTTP/1.1` (else `HTTP/1.0`).
    pub http11: bool,
    /// How many entries of the lent field array hold this head's fields.
    pub fields: usize,
    pub framing: Framing,
    /// The server keeps the connection open: HTTP/1.1 without `Connection: close`, or
    /// HTTP/1.0 with `Connection: keep-alive`; false as well when Transfer-Encoding and
    /// Content-Length were both sent (§6.3 item 3). Close-delimited framing ends it anyway.
    pub keep_alive: bool,
    /// Transfer-Encoding overrode a Content-Length sent beside it (§6.3 item 3): a proxy must
    /// not pass that Content-Length on.
    pub length_overridden: bool,
}

/// What [`parse_response_head`] found at the front of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// The head is not complete yet (and shorter than [`MAX_RESPONSE_HEAD`]).
    Partial,
    /// An interim 1xx response of `used` bytes (no body): the final one follows.
    Interim {
        used: usize,
        status: u16,
    },
    Final(Head),
}

/// The tokens of a `Connection` field value that matter to persistence.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectionTokens {
    pub close: bool,
    pub keep_alive: bool,
    /// Some other token (a field name the field asks to remove).
    pub other: bool,
}

/// The `close` / `keep-alive` / other tokens of one `Connection` value (case-insensitive).
pub fn connection_tokens(value: &[u8]) -> ConnectionTokens {
    let mut t = ConnectionTokens::default();
    for tok in value.split(|&c| c == b',').map(|t| t.trim_ascii()) {
        if tok.eq_ignore_ascii_case(b"close") {
            t.close = true;
        } else if tok.eq_ignore_ascii_case(b"keep-alive") {
            t.keep_alive = true;
        } else if !tok.is_empty() {
            t.other = true;
        }
    }
    t
}

/// Parse the response head at the front of `buf` into `fields` (whose length bounds the
/// number of fields). `head_request`: the request was HEAD, so the response has no body.
pub fn parse_response_head<'b>(
    buf: &'b [u8],
    head_request: bool,
    fields: &mut [httparse::Header<'b>],
) -> Result<Parsed, HeadError> {
    let mut r = httparse::Response::new(fields);
    let used = match r.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_RESPONSE_HEAD => {
            return Err(HeadError::TooLarge)
        }
        Ok(httparse::Status::Partial) => return Ok(Parsed::Partial),
        Err(_) => return Err(HeadError::Malformed),
    };
    if used > MAX_RESPONSE_HEAD {
        return Err(HeadError::TooLarge);
    }
    let status = r.code.ok_or(HeadError::Malformed)?;
    if !(100..=999).contains(&status) {
        return Err(HeadError::Malformed);
    }
    if status == 101 {
        return Err(HeadError::Upgrade);
    }
    if status < 200 {
        return Ok(Parsed::Interim { used, status });
    }
    let http11 = r.version == Some(1);
    let fields = r.headers.len();
    let (framing, keep_alive, length_overridden) =
        framing_of(r.headers, status, http11, head_request)?;
    Ok(Parsed::Final(Head {
        used,
        status,
        http11,
        fields,
        framing,
        keep_alive,
        length_overridden,
    }))
}

/// The body's framing (RFC 9112 §6.3), persistence, and whether a Content-Length was
/// overridden by Transfer-Encoding, from a final response's fields.
fn framing_of(
    fields: &[httparse::Header<'_>],
    status: u16,
    http11: bool,
    head_request: bool,
) -> Result<(Framing, bool, bool), HeadError> {
    let (mut close, mut keep) = (false, false);
    let (mut te_last_chunked, mut has_te, mut has_length) = (None, false, false);
    for f in fields {
        if f.name.eq_ignore_ascii_case("connection") {
            let t = connection_tokens(f.value);
            close |= t.close;
            keep |= t.keep_alive;
        } else if f.name.eq_ignore_ascii_case("transfer-encoding") {
            has_te = true;
            // The last coding of the last field must be chunked (§6.3 item 4, §7).
            te_last_chunked = f
                .value
                .split(|&c| c == b',')
                .next_back()
                .map(|t| t.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if f.name.eq_ignore_ascii_case("content-length") {
            has_length = true;
        }
    }
    let mut keep_alive = if http11 { !close } else { keep };
    // §6.3 item 1: HEAD, 204 and 304 have no body whatever their fields say.
    if head_request || status == 204 || status == 304 {
        return Ok((Framing::Length(0), keep_alive, false));
    }
    if has_te {
        // Item 3: Transfer-Encoding overrides Content-Length; the connection is not reused.
        if has_length {
            keep_alive = false;
        }
        // Item 4: chunked last is decoded; any other last coding is read to close.
        let framing = if te_last_chunked == Some(true) {
            Framing::Chunked
        } else {
            Framing::Close
        };
        return Ok((framing, keep_alive, has_length));
    }
    if has_length {
        return Ok((Framing::Length(content_length(fields)?), keep_alive, false));
    }
    // Item 8: no length → until close.
    Ok((Framing::Close, keep_alive, false))
}

/// §6.3 item 5: every Content-Length value (a field may hold a list) is the same valid number.
fn content_length(fields: &[httparse::Header<'_>]) -> Result<u64, HeadError> {
    let mut len: Option<u64> = None;
    for f in fields
        .iter()
        .filter(|f| f.name.eq_ignore_ascii_case("content-length"))
    {
        for t in f.value.split(|&c| c == b',') {
            let t = t.trim_ascii();
            if t.is_empty() || !t.iter().all(u8::is_ascii_digit) || t.len() > 19 {
                return Err(HeadError::BadLength);
            }
            let n: u64 = std::str::from_utf8(t)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or(HeadError::BadLength)?;
            if len.is_some_and(|l| l != n) {
                return Err(HeadError::BadLength);
            }
            len = Some(n);
        }
    }
    len.ok_or(HeadError::BadLength)
}

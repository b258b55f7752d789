//! Server names (SNI, RFC 6066 §3): the one matching rule the balancer uses for names, and the
//! TLS ClientHello reader of L4 SNI routing (`route = "sni"`, HAProxy's `req.ssl_sni`).
//!
//! Names: a pattern is a DNS name (`www.example.com`) or `*.` and a DNS name
//! (`*.example.com`), letters, digits, `-` and `.`, compared without regard to case. A name
//! matches an exact pattern first, else the wildcard of its parent (one label: `*.example.com`
//! matches `a.example.com`, not `a.b.example.com` nor `example.com`, as RFC 6125 §6.4.3
//! matches wildcards). TLS termination picks certificates by it (tls.rs), L4 routing picks
//! servers by it (service.rs).
//!
//! Reading the ClientHello without terminating TLS: the client's first bytes are read, not
//! answered, until they hold one whole ClientHello; the bytes read are handed back unchanged
//! to be written first to the chosen server, which sees the handshake the client began.
//! - Records (RFC 8446 §5.1): content type 22 (handshake), a legacy version of major 3, a
//!   length from 1 to 2^14. The ClientHello (RFC 8446 §4.1.2; RFC 5246 §7.4.1.2, whose
//!   extensions may be absent) may span several records.
//! - Bound: at most [`MAX_HELLO_BYTES`] bytes are read, record headers included; a
//!   ClientHello that needs more is refused (`too_long`). The reader's caller bounds the time
//!   (`timeouts.client`).
//! - `server_name` (extension 0): the first `host_name` entry. Two `server_name` extensions
//!   are refused: the balancer and the server must not read different names.

use std::collections::HashMap;
use tokio::io::AsyncReadExt;

/// Most bytes read for one ClientHello, record headers included.
pub const MAX_HELLO_BYTES: usize = 16 * 1024;
/// Longest host name (RFC 1035 §2.3.4: 255 octets).
pub const MAX_NAME: usize = 255;

/// A configured name: exact, or the suffix of a wildcard (after `*.`), lower case.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Pattern {
    Exact(String),
    Wildcard(String),
}

impl Pattern {
    /// Check and lower-case a configured name; the error says what a name must be.
    pub fn parse(text: &str) -> Result<Pattern, &'static str> {
        let lower = text.to_ascii_lowercase();
        let (wild, rest) = match lower.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, lower.as_str()),
        };
        let labels_ok = rest.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
        if rest.is_empty() || rest.len() > MAX_NAME || !labels_ok {
            return Err(
                "a DNS name (letters, digits, '-', labels of 1 to 63 bytes joined by \
                        '.'), or `*.` and a DNS name",
            );
        }
        Ok(if wild {
            Pattern::Wildcard(rest.to_string())
        } else {
            Pattern::Exact(rest.to_string())
        })
    }

    /// As written in a configuration (lower case).
    pub fn text(&self) -> String {
        match self {
            Pattern::Exact(n) => n.clone(),
            Pattern::Wildcard(s) => format!("*.{s}"),
        }
    }
}

/// Values by name pattern, looked up by the rule above.
#[derive(Debug, Clone)]
pub struct Names<T> {
    exact: HashMap<String, T>,
    wildcard: HashMap<String, T>,
}

impl<T> Default for Names<T> {
    fn default() -> Self {
        Names {
            exact: HashMap::new(),
            wildcard: HashMap::new(),
        }
    }
}

impl<T> Names<T> {
    /// Add `p`; `Err` gives `v` back when the pattern is taken.
    pub fn insert(&mut self, p: Pattern, v: T) -> Result<(), T> {
        let (map, k) = match p {
            Pattern::Exact(k) => (&mut self.exact, k),
            Pattern::Wildcard(k) => (&mut self.wildcard, k),
        };
        if map.contains_key(&k) {
            return Err(v);
        }
        map.insert(k, v);
        Ok(())
    }

    /// The value of `name`: its exact pattern, else its parent's wildcard.
    pub fn get(&self, name: &str) -> Option<&T> {
        let lower;
        let name = if name.bytes().any(|b| b.is_ascii_uppercase()) {
            lower = name.to_ascii_lowercase();
            lower.as_str()
        } else {
            name
        };
        self.exact.get(name).or_else(|| {
            name.split_once('.')
                .and_then(|(_, parent)| self.wildcard.get(parent))
        })
    }

    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.wildcard.is_empty()
    }
}

/// Why the first bytes are no ClientHello the balancer can route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HelloError {
    /// More bytes are needed (from [`read_hello`]: the client closed before the end).
    Truncated,
    /// The first record is no TLS handshake record.
    NotTls,
    /// A record or the ClientHello breaks its layout (what, in a few words).
    Malformed(&'static str),
    /// The ClientHello needs more than [`MAX_HELLO_BYTES`].
    TooLong,
}

impl HelloError {
    /// The `reason` label it is counted under (`refused{reason}`).
    pub fn reason(self) -> &'static str {
        match self {
            HelloError::Truncated => "sni_truncated",
            HelloError::NotTls => "sni_not_tls",
            HelloError::Malformed(_) => "sni_malformed",
            HelloError::TooLong => "sni_too_long",
        }
    }
}

impl std::fmt::Display for HelloError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HelloError::Truncated => f.write_str("the ClientHello is incomplete"),
            HelloError::NotTls => f.write_str("not a TLS handshake record"),
            HelloError::Malformed(what) => write!(f, "malformed ClientHello: {what}"),
            HelloError::TooLong => write!(f, "ClientHello beyond {MAX_HELLO_BYTES} bytes"),
        }
    }
}

/// The server name of the ClientHello at the start of `buf` (`None`: it names none).
pub fn parse(buf: &[u8]) -> Result<Option<String>, HelloError> {
    // Known from the first byte.
    if buf.first().is_some_and(|&b| b != 22) {
        return Err(HelloError::NotTls);
    }
    let mut hs = Vec::new();
    let mut at = 0;
    loop {
        let Some(head) = buf.get(at..at + 5) else {
            return Err(HelloError::Truncated);
        };
        if head[0] != 22 || head[1] != 3 {
            return Err(if at == 0 {
                HelloError::NotTls
            } else {
                HelloError::Malformed("a record other than handshake inside the ClientHello")
            });
        }
        let len = u16::from_be_bytes([head[3], head[4]]) as usize;
        if len == 0 || len > 1 << 14 {
            return Err(HelloError::Malformed("record length"));
        }
        let body = &buf[at + 5..buf.len().min(at + 5 + len)];
        hs.extend_from_slice(body);
        if hs.len() >= 4 {
            if hs[0] != 1 {
                return Err(HelloError::Malformed(
                    "the first handshake message is no ClientHello",
                ));
            }
            let need = 4 + u32::from_be_bytes([0, hs[1], hs[2], hs[3]]) as usize;
            // Its bytes and at least one record header.
            if need + 5 > MAX_HELLO_BYTES {
                return Err(HelloError::TooLong);
            }
            if hs.len() >= need {
                return server_name(&hs[4..need]);
            }
        }
        if body.len() < len {
            return Err(HelloError::Truncated);
        }
        at += 5 + len;
    }
}

/// Reads of big-endian fields and length-prefixed vectors; `None` past the end.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }
    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()? as usize;
        self.take(n)
    }
    fn vec16(&mut self) -> Option<Cursor<'a>> {
        let n = self.u16()? as usize;
        self.take(n).map(Cursor)
    }
}

/// The `host_name` of a ClientHello's body (RFC 8446 §4.1.2, RFC 6066 §3).
fn server_name(body: &[u8]) -> Result<Option<String>, HelloError> {
    let bad = HelloError::Malformed;
    let mut c = Cursor(body);
    c.take(2 + 32).ok_or(bad("version and random"))?;
    let session = c.vec8().ok_or(bad("session id"))?;
    if session.len() > 32 {
        return Err(bad("session id"));
    }
    c.vec16().ok_or(bad("cipher suites"))?;
    c.vec8().ok_or(bad("compression methods"))?;
    if c.0.is_empty() {
        return Ok(None); // no extensions (RFC 5246 §7.4.1.2)
    }
    let mut exts = c.vec16().ok_or(bad("extensions"))?;
    if !c.0.is_empty() {
        return Err(bad("bytes after the extensions"));
    }
    let mut found = None;
    while !exts.0.is_empty() {
        let kind = exts.u16().ok_or(bad("extension"))?;
        let data = exts.vec16().ok_or(bad("extension"))?;
        if kind != 0 {
            continue;
        }
        if found.is_some() {
            return Err(bad("two server_name extensions"));
        }
        found = Some(host_name(data)?);
    }
    Ok(found.flatten())
}

/// The first `host_name` of a ServerNameList (RFC 6066 §3).
fn host_name(mut data: Cursor<'_>) -> Result<Option<String>, HelloError> {
    let bad = HelloError::Malformed;
    let mut list = data.vec16().ok_or(bad("server name list"))?;
    if !data.0.is_empty() {
        return Err(bad("server_name extension length"));
    }
    while !list.0.is_empty() {
        let kind = list.u8().ok_or(bad("server name"))?;
        let name = list.vec16().ok_or(bad("server name"))?.0;
        if kind != 0 {
            continue;
        }
        if name.is_empty() || name.len() > MAX_NAME || !name.iter().all(|b| b.is_ascii_graphic()) {
            return Err(bad("host name"));
        }
        // ASCII, checked above.
        return Ok(Some(String::from_utf8_lossy(name).to_ascii_lowercase()));
    }
    Ok(None)
}

/// What [`read_hello`] read: the bytes, to be sent first to the server, and the name.
#[derive(Debug)]
pub struct Hello {
    pub bytes: Vec<u8>,
    pub name: Option<String>,
}

/// Read from `stream` until its bytes hold a whole ClientHello, at most [`MAX_HELLO_BYTES`];
/// the caller bounds the time. `Truncated`: the client closed before the end.
pub async fn read_hello<S>(stream: &mut S) -> Result<Hello, HelloError>
where
    S: tokio::io::AsyncRead + Unpin,
{
    let mut buf = vec![0u8; MAX_HELLO_BYTES];
    let mut have = 0;
    loop {
        let n = match stream.read(&mut buf[have..]).await {
            Ok(0) | Err(_) => return Err(HelloError::Truncated),
            Ok(n) => n,
        };
        have += n;
        match parse(&buf[..have]) {
            Ok(name) => {
                buf.truncate(have);
                return Ok(Hello { bytes: buf, name });
            }
            Err(HelloError::Truncated) if have == buf.len() => return Err(HelloError::TooLong),
            Err(HelloError::Truncated) => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// The first bytes a rustls client sends for `name` (`None`: an IP address, which
    /// RFC 6066 §3 leaves out of `server_name`).
    fn rustls_hello(name: &str) -> Vec<u8> {
        #[allow(deprecated)]
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let cc = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let server = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
        let mut c = rustls::ClientConnection::new(Arc::new(cc), server).unwrap();
        let mut out = Vec::new();
        while c.wants_write() {
            c.write_tls(&mut out).unwrap();
        }
        out
    }

    /// `hello`'s handshake bytes cut into records of at most `size` bytes each.
    fn split(hello: &[u8], size: usize) -> Vec<u8> {
        let len = u16::from_be_bytes([hello[3], hello[4]]) as usize;
        let hs = &hello[5..5 + len];
        let mut out = Vec::new();
        for part in hs.chunks(size) {
            out.extend_from_slice(&[22, 3, 1]);
            out.extend_from_slice(&(part.len() as u16).to_be_bytes());
            out.extend_from_slice(part);
        }
        out
    }

    /// A ClientHello of TLS 1.2's layout with `extensions` (none at all when `None`).
    fn hello_with(extensions: Option<&[u8]>) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7; 32]);
        body.extend_from_slice(&[0, 0, 2, 0x13, 0x01, 1, 0]);
        if let Some(e) = extensions {
            body.extend_from_slice(&(e.len() as u16).to_be_bytes());
            body.extend_from_slice(e);
        }
        let mut hs = vec![1];
        hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        hs.extend_from_slice(&body);
        let mut rec = vec![22, 3, 1];
        rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
        rec.extend_from_slice(&hs);
        rec
    }

    fn sni_ext(names: &[(u8, &[u8])]) -> Vec<u8> {
        let mut list = Vec::new();
        for (kind, n) in names {
            list.push(*kind);
            list.extend_from_slice(&(n.len() as u16).to_be_bytes());
            list.extend_from_slice(n);
        }
        let mut data = (list.len() as u16).to_be_bytes().to_vec();
        data.extend_from_slice(&list);
        let mut ext = vec![0, 0];
        ext.extend_from_slice(&(data.len() as u16).to_be_bytes());
        ext.extend_from_slice(&data);
        ext
    }

    #[test]
    fn a_rustls_client_hello_names_its_server() {
        let h = rustls_hello("www.Example.com");
        assert_eq!(parse(&h).unwrap().as_deref(), Some("www.example.com"));
        // Split over records of 1, 7 and 100 handshake bytes.
        for size in [1, 7, 100] {
            let s = split(&h, size);
            if s.len() > MAX_HELLO_BYTES {
                assert_eq!(parse(&s), Err(HelloError::TooLong), "{size}");
                continue;
            }
            assert_eq!(
                parse(&s).unwrap().as_deref(),
                Some("www.example.com"),
                "{size}"
            );
            // Every proper beginning asks for more.
            for cut in [0, 1, 4, 5, 6, s.len() / 2, s.len() - 1] {
                assert_eq!(parse(&s[..cut]), Err(HelloError::Truncated), "{size} {cut}");
            }
        }
        // An IP address is sent without server_name.
        assert_eq!(parse(&rustls_hello("127.0.0.1")), Ok(None));
    }

    #[test]
    fn hellos_without_a_name() {
        assert_eq!(parse(&hello_with(None)), Ok(None));
        assert_eq!(parse(&hello_with(Some(&[]))), Ok(None));
        // ALPN only.
        let alpn = [0, 16, 0, 5, 0, 3, 2, b'h', b'2'];
        assert_eq!(parse(&hello_with(Some(&alpn))), Ok(None));
        // A name type other than host_name (0) is skipped.
        assert_eq!(parse(&hello_with(Some(&sni_ext(&[(9, b"x")])))), Ok(None));
        let two = sni_ext(&[(9, b"x"), (0, b"a.example")]);
        assert_eq!(
            parse(&hello_with(Some(&two))).unwrap().as_deref(),
            Some("a.example")
        );
    }

    #[test]
    fn malformed_hellos_are_refused() {
        let m = |b: &[u8]| matches!(parse(b), Err(HelloError::Malformed(_)));
        let twice = [sni_ext(&[(0, b"a.example")]), sni_ext(&[(0, b"b.example")])].concat();
        assert!(m(&hello_with(Some(&twice))));
        assert!(m(&hello_with(Some(&sni_ext(&[(0, b"")])))));
        assert!(m(&hello_with(Some(&sni_ext(&[(0, b"a b")])))));
        assert!(m(&hello_with(Some(&sni_ext(&[(0, b"\xc3\xa9")])))));
        // An extension longer than its list.
        assert!(m(&hello_with(Some(&[0, 0, 0, 9, 0, 1]))));
        // A session id over 32 bytes.
        let mut h = hello_with(None);
        h[5 + 4 + 34] = 40;
        assert!(m(&h));
        // A record length of 0, another record type after the first, no ClientHello.
        assert!(m(&[22, 3, 1, 0, 0]));
        let mut h = split(&rustls_hello("a.example"), 100);
        h[105] = 23;
        assert!(m(&h));
        assert!(m(&[22, 3, 1, 0, 4, 2, 0, 0, 0]));
        // Bytes after the extensions, inside the ClientHello.
        let mut h = hello_with(Some(&[]));
        h.push(0);
        h[4] += 1;
        h[8] += 1;
        assert!(m(&h));
    }

    #[test]
    fn not_tls_and_too_long() {
        assert_eq!(parse(b"GET / HTTP/1.1\r\n"), Err(HelloError::NotTls));
        assert_eq!(parse(b"SSH-2.0-OpenSSH_9.6\r\n"), Err(HelloError::NotTls));
        assert_eq!(parse(&[22, 2, 0, 0, 1]), Err(HelloError::NotTls));
        assert_eq!(parse(b"G"), Err(HelloError::NotTls));
        // A handshake longer than the bound is refused from its header.
        let mut h = vec![22, 3, 1, 0x40, 0, 1];
        h.extend_from_slice(&((MAX_HELLO_BYTES as u32).to_be_bytes()[1..]));
        assert_eq!(parse(&h), Err(HelloError::TooLong));
    }

    #[test]
    fn names_match_exact_then_one_wildcard_label() {
        let mut n = Names::default();
        for (p, v) in [
            ("www.example.com", 1),
            ("*.example.com", 2),
            ("*.b.example", 3),
        ] {
            n.insert(Pattern::parse(p).unwrap(), v).unwrap();
        }
        assert_eq!(n.get("www.example.com"), Some(&1));
        assert_eq!(n.get("WWW.example.COM"), Some(&1));
        assert_eq!(n.get("api.example.com"), Some(&2));
        assert_eq!(n.get("a.api.example.com"), None);
        assert_eq!(n.get("example.com"), None);
        assert_eq!(n.get("x.b.example"), Some(&3));
        assert!(n
            .insert(Pattern::parse("*.EXAMPLE.com").unwrap(), 4)
            .is_err());
        for bad in [
            "", "*.", "a..b", "-a.b", "a*.b", "*.*.b", "a b", "a_b.c", "é.b",
        ] {
            assert!(Pattern::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            Pattern::parse("*.Example.org").unwrap().text(),
            "*.example.org"
        );
    }

    /// Any bytes: an answer, never a panic.
    #[test]
    fn any_bytes_get_an_answer() {
        let h = rustls_hello("a.example");
        let mut rng = netsched_core::rng::SplitMix64::new(7);
        for _ in 0..2000 {
            let mut b = h.clone();
            for _ in 0..(rng.next_u64() % 4 + 1) {
                let i = (rng.next_u64() as usize) % b.len();
                b[i] = rng.next_u64() as u8;
            }
            let cut = (rng.next_u64() as usize) % (b.len() + 1);
            let _ = parse(&b[..cut]);
        }
    }

    #[tokio::test]
    async fn read_hello_keeps_every_byte_it_read() {
        let h = split(&rustls_hello("b.example"), 300);
        let (mut w, mut r) = tokio::io::duplex(64);
        let sent = h.clone();
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            for part in sent.chunks(50) {
                w.write_all(part).await.unwrap();
                tokio::task::yield_now().await;
            }
            w
        });
        let got = read_hello(&mut r).await.unwrap();
        assert_eq!(got.name.as_deref(), Some("b.example"));
        assert_eq!(got.bytes, h);
        drop(writer.await.unwrap());
        // Closed half-way: Truncated.
        let (mut w, mut r) = tokio::io::duplex(64);
        tokio::io::AsyncWriteExt::write_all(&mut w, &h[..40])
            .await
            .unwrap();
        drop(w);
        assert_eq!(read_hello(&mut r).await.unwrap_err(), HelloError::Truncated);
    }
}

//! TLS termination on the L7 listeners, with rustls (no OpenSSL): `[[tls.certificate]]`
//! entries of the configuration, each a PEM chain and its private key, chosen per handshake by
//! the client's SNI name (RFC 6066 §3): an exact name first, then a wildcard `*.example.com`
//! (one label, as RFC 6125 §6.4.3 matches it), else the first entry (the default, also for
//! a client that sends no name).
//!
//! - **Protocols**: TLS 1.2 and 1.3 only, and only rustls's cipher suites, all AEAD
//!   (rustls's `DEFAULT_CIPHER_SUITES` with the `ring` provider: AES-GCM and
//!   ChaCha20-Poly1305, ECDHE key exchange). ALPN offers `h2` and `http/1.1` (http2.rs).
//! - **Resumption**: an in-memory session cache (rustls's default, 256 sessions) and session
//!   tickets whose key rotates every 6 hours (rustls's `ring::Ticketer`).
//! - **Live replacement**: the table of certificates sits behind one lock, read once per
//!   handshake; a reload (`SIGHUP`, `systemctl reload`) builds a whole new table first and swaps it
//!   in only if every entry loads, so a bad chain, a key that does not match its certificate
//!   or an unreadable file is refused with the reason and the old certificates stay.
//!   Handshakes under way and connections already open are untouched; the ticket key is kept,
//!   so sessions resume across a swap (unless the client certificate settings change, below).
//! - **Validity**: an end-entity certificate outside its validity period (expired, or valid
//!   only later) is refused at load, naming the date; the period is read from the DER
//!   (RFC 5280 §4.1.2.5) by a bounded walker here.
//! - **Key files** are read once per load and never logged; a key file readable by group or
//!   others (mode bits 0o077) is refused unless the entry says `key_mode_check = false`.
//! - **Client certificates** (`client_certificate = "optional" | "required"`, `client_ca`):
//!   the server sends a CertificateRequest (RFC 8446 §4.3.2; RFC 5246 §7.4.4 in TLS 1.2) naming
//!   the CAs of `client_ca`, and verifies the client's Certificate (RFC 8446 §4.4.2) against
//!   them with rustls's `WebPkiClientVerifier` (path, signatures, validity, and the
//!   `clientAuth` extended key usage when the certificate lists usages). `required` fails a
//!   handshake without one; `optional` lets it through unauthenticated. A bad or missing
//!   certificate is told apart from other failures ([`handshake_failure`]). The verified
//!   leaf's subject ([`client_subject`]) goes to the access log and the class rules, never to
//!   a backend.
//! - **Reload of the client CAs**: rustls fixes a `ServerConfig`'s client verifier when the
//!   configuration is built, so a reload builds a new one and swaps it in behind a lock read
//!   once per handshake; each handshake runs with one configuration from start to end. The
//!   new one keeps the session cache and ticket key (sessions resume across the reload) when
//!   the client certificate settings (mode and CA certificates) are unchanged, and gets new
//!   ones when they change: rustls does not verify a client again when a session resumes (its
//!   `server::hs::can_resume` compares suite, extended master secret and SNI only; the session
//!   brings back the certificate of the handshake that made it), so an earlier session would
//!   otherwise pass a newly `required` certificate or a removed CA.
//!
//! Bounds: at most [`MAX_CERTIFICATES`] entries, [`MAX_NAMES`] names each, PEM files of at
//! most [`MAX_PEM_BYTES`] (`client_ca` too), a client subject of at most
//! [`MAX_SUBJECT_BYTES`]. Cost per handshake: two read locks and at most two hash lookups on
//! top of rustls's own work.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::{ClientHello, ResolvesServerCert, StoresServerSessions, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use serde::Deserialize;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// Most `[[tls.certificate]]` entries.
pub const MAX_CERTIFICATES: usize = 1024;
/// Most names of one entry.
pub const MAX_NAMES: usize = 256;
/// Largest certificate or key file.
pub const MAX_PEM_BYTES: u64 = 1 << 20;

/// Longest client certificate subject kept (a longer one is treated as unreadable).
pub const MAX_SUBJECT_BYTES: usize = 1024;
/// Sessions the server's in-memory resumption cache holds (rustls's default size).
const SESSION_CACHE: usize = 256;

/// The `[tls]` table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConf {
    /// The certificates, the first the default.
    pub certificate: Vec<CertificateConf>,
    /// PEM file of the CA certificates client certificates must chain to.
    #[serde(default)]
    pub client_ca: Option<PathBuf>,
    /// Whether clients are asked for a certificate (default `off`).
    #[serde(default)]
    pub client_certificate: ClientAuth,
}

/// `client_certificate` of `[tls]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientAuth {
    /// No CertificateRequest is sent.
    #[default]
    Off,
    /// Asked for; a client without one is served, one with a bad one is refused.
    Optional,
    /// A handshake without a certificate that `client_ca` verifies fails.
    Required,
}

impl ClientAuth {
    pub fn name(self) -> &'static str {
        match self {
            ClientAuth::Off => "off",
            ClientAuth::Optional => "optional",
            ClientAuth::Required => "required",
        }
    }

    /// `, client certificates required` (or `optional`), for the notes of `--check` and of a
    /// reload; empty when off.
    pub fn note(self) -> String {
        match self {
            ClientAuth::Off => String::new(),
            m => format!(", client certificates {}", m.name()),
        }
    }
}

/// One `[[tls.certificate]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertificateConf {
    /// PEM file: the end-entity certificate first, then its intermediates.
    pub cert: PathBuf,
    /// PEM file: the private key (PKCS#8, PKCS#1 RSA or SEC1 EC).
    pub key: PathBuf,
    /// SNI names this certificate answers: exact (`www.example.com`) or one wildcard label
    /// (`*.example.com`). The first entry also answers every name no entry lists.
    #[serde(default)]
    pub names: Vec<String>,
    /// Refuse a key file readable by group or others (default `true`).
    #[serde(default = "yes")]
    pub key_mode_check: bool,
}

fn yes() -> bool {
    true
}

/// Why the certificates could not be loaded: the entry, the file and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsError {
    /// `tls.certificate[i]`, or `tls` for the table as a whole.
    pub entry: String,
    pub why: String,
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.entry, self.why)
    }
}

impl std::error::Error for TlsError {}

/// The certificates in force, by name (the rule of `sni.rs`).
#[derive(Debug)]
struct Table {
    names: crate::sni::Names<Arc<CertifiedKey>>,
    default: Arc<CertifiedKey>,
}

impl Table {
    fn pick(&self, name: Option<&str>) -> Arc<CertifiedKey> {
        name.and_then(|n| self.names.get(n))
            .unwrap_or(&self.default)
            .clone()
    }
}

/// The resolver rustls asks once per handshake; [`Certificates::replace`] swaps its table.
#[derive(Debug)]
struct Resolver(RwLock<Arc<Table>>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let table = self.0.read().unwrap_or_else(|p| p.into_inner()).clone();
        Some(table.pick(hello.server_name()))
    }
}

/// Certificates loaded and checked, not yet in force ([`Certificates::prepare`]).
pub struct Prepared {
    table: Arc<Table>,
    acceptor: Arc<Acceptor>,
    count: usize,
}

/// The rustls configuration one handshake runs with, and whether it asks for a client
/// certificate.
#[derive(Clone)]
pub struct Acceptor {
    pub tls: tokio_rustls::TlsAcceptor,
    pub client_auth: ClientAuth,
    policy: Arc<ClientPolicy>,
    resumption: Resumption,
}

/// The client certificate settings sessions were established under: the mode, and the CA
/// certificates (none when `off`).
#[derive(Debug, PartialEq, Eq)]
struct ClientPolicy {
    auth: ClientAuth,
    cas: Vec<CertificateDer<'static>>,
}

/// Session tickets' key and the session cache: what a resumption needs.
#[derive(Clone)]
struct Resumption {
    ticketer: Arc<dyn rustls::server::ProducesTickets>,
    sessions: Arc<dyn StoresServerSessions>,
}

impl Resumption {
    fn new() -> Result<Resumption, TlsError> {
        let ticketer = rustls::crypto::ring::Ticketer::new().map_err(|e| TlsError {
            entry: "tls".into(),
            why: format!("session ticket key: {e}"),
        })?;
        Ok(Resumption {
            ticketer,
            sessions: rustls::server::ServerSessionMemoryCache::new(SESSION_CACHE),
        })
    }
}

/// The TLS side of the L7 listeners: the rustls configuration every handshake uses, and the
/// certificates and client CAs it serves, replaceable while running.
pub struct Certificates {
    resolver: Arc<Resolver>,
    acceptor: RwLock<Arc<Acceptor>>,
    /// Entries in force.
    count: std::sync::atomic::AtomicUsize,
}

impl fmt::Debug for Certificates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Certificates")
            .field("resolver", &self.resolver)
            .finish_non_exhaustive()
    }
}

impl Certificates {
    /// Load every entry of `conf` and build the rustls configuration.
    pub fn load(conf: &TlsConf) -> Result<Certificates, TlsError> {
        let resolver = Arc::new(Resolver(RwLock::new(Arc::new(load_table(conf)?))));
        let (verifier, policy) = client_verifier(conf)?;
        let first = build_acceptor(&resolver, Resumption::new()?, policy, verifier)?;
        Ok(Certificates {
            resolver,
            acceptor: RwLock::new(first),
            count: conf.certificate.len().into(),
        })
    }

    /// Load `conf` whole, without putting it in force (see [`Certificates::install`]). The
    /// session cache and ticket key in force are kept unless the client certificate settings
    /// change (see the module header).
    pub fn prepare(&self, conf: &TlsConf) -> Result<Prepared, TlsError> {
        let table = Arc::new(load_table(conf)?);
        let (verifier, policy) = client_verifier(conf)?;
        let now = self.acceptor();
        let resumption = if *now.policy == policy {
            now.resumption.clone()
        } else {
            Resumption::new()?
        };
        Ok(Prepared {
            table,
            acceptor: build_acceptor(&self.resolver, resumption, policy, verifier)?,
            count: conf.certificate.len(),
        })
    }

    /// Put prepared certificates in force for the next handshakes; returns how many.
    pub fn install(&self, p: Prepared) -> usize {
        *self.resolver.0.write().unwrap_or_else(|e| e.into_inner()) = p.table;
        *self.acceptor.write().unwrap_or_else(|e| e.into_inner()) = p.acceptor;
        self.count
            .store(p.count, std::sync::atomic::Ordering::Relaxed);
        p.count
    }

    /// Whether the configuration in force asks clients for a certificate.
    pub fn client_auth(&self) -> ClientAuth {
        self.acceptor().client_auth
    }

    /// Entries in force.
    pub fn len(&self) -> usize {
        self.count.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The configuration for the next handshake.
    pub fn acceptor(&self) -> Arc<Acceptor> {
        self.acceptor
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// TLS 1.3 and 1.2 with the `ring` provider, ALPN `http/1.1`, the client verifier when
/// the policy is not `off`.
fn build_acceptor(
    resolver: &Arc<Resolver>,
    resumption: Resumption,
    policy: ClientPolicy,
    verifier: Option<Arc<dyn ClientCertVerifier>>,
) -> Result<Arc<Acceptor>, TlsError> {
    let b = rustls::ServerConfig::builder_with_provider(Arc::new(provider()))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| TlsError {
            entry: "tls".into(),
            why: e.to_string(),
        })?;
    let b = match verifier {
        Some(v) if policy.auth != ClientAuth::Off => b.with_client_cert_verifier(v),
        _ => b.with_no_client_auth(),
    };
    let mut sc = b.with_cert_resolver(resolver.clone());
    // HTTP/2 first (RFC 9113 §3.2), then HTTP/1.1.
    sc.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    sc.ticketer = resumption.ticketer.clone();
    sc.session_storage = resumption.sessions.clone();
    Ok(Arc::new(Acceptor {
        tls: tokio_rustls::TlsAcceptor::from(Arc::new(sc)),
        client_auth: policy.auth,
        policy: Arc::new(policy),
        resumption,
    }))
}

/// The verifier of `client_ca` (when given), checked against `client_certificate`, and the
/// policy it stands for.
fn client_verifier(
    conf: &TlsConf,
) -> Result<(Option<Arc<dyn ClientCertVerifier>>, ClientPolicy), TlsError> {
    let auth = conf.client_certificate;
    let Some(path) = &conf.client_ca else {
        if auth == ClientAuth::Off {
            return Ok((
                None,
                ClientPolicy {
                    auth,
                    cas: Vec::new(),
                },
            ));
        }
        return Err(TlsError {
            entry: "tls.client_certificate".into(),
            why: format!(
                "\"{}\" needs client_ca (a PEM file of the CA certificates client \
                 certificates are verified against)",
                conf.client_certificate.name()
            ),
        });
    };
    let err = |why: String| TlsError {
        entry: "tls.client_ca".into(),
        why: format!("{}: {why}", path.display()),
    };
    let pem =
        netsched_util::read::read_text(path, MAX_PEM_BYTES, "client_ca").map_err(|e| TlsError {
            entry: "tls.client_ca".into(),
            why: e.to_string(),
        })?;
    let mut roots = rustls::RootCertStore::empty();
    let mut cas = Vec::new();
    for (i, c) in CertificateDer::pem_slice_iter(pem.as_bytes()).enumerate() {
        let c = c.map_err(|e| err(e.to_string()))?;
        roots
            .add(c.clone())
            .map_err(|e| err(format!("certificate {}: {e}", i + 1)))?;
        cas.push(c);
    }
    if roots.is_empty() {
        return Err(err("no PEM CERTIFICATE block".into()));
    }
    let b = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::new(provider()));
    let b = match auth {
        ClientAuth::Optional => b.allow_unauthenticated(),
        _ => b,
    };
    let verifier = b.build().map_err(|e| err(e.to_string()))?;
    if auth == ClientAuth::Off {
        cas.clear(); // read and checked, unused
    }
    Ok((Some(verifier), ClientPolicy { auth, cas }))
}

/// The `reason` a failed handshake is counted under: `client_certificate` when the client's
/// certificate was missing (`required`) or did not verify, else `failed`. tokio-rustls hands
/// rustls's error inside the `io::Error`.
pub fn handshake_failure(e: &std::io::Error) -> &'static str {
    match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        Some(rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented) => {
            "client_certificate"
        }
        _ => "failed",
    }
}

fn load_table(conf: &TlsConf) -> Result<Table, TlsError> {
    let top = |why: String| TlsError {
        entry: "tls".into(),
        why,
    };
    if conf.certificate.is_empty() {
        return Err(top("no [[tls.certificate]] entry".into()));
    }
    if conf.certificate.len() > MAX_CERTIFICATES {
        return Err(top(format!(
            "{} certificates; at most {MAX_CERTIFICATES}",
            conf.certificate.len()
        )));
    }
    let provider = provider();
    let mut names = crate::sni::Names::default();
    let mut default = None;
    for (i, c) in conf.certificate.iter().enumerate() {
        let entry = format!("tls.certificate[{i}]");
        let err = |why: String| TlsError {
            entry: entry.clone(),
            why,
        };
        let key = load_entry(c, &provider).map_err(err)?;
        let key = Arc::new(key);
        if c.names.len() > MAX_NAMES {
            return Err(err(format!("{} names; at most {MAX_NAMES}", c.names.len())));
        }
        for n in &c.names {
            let p =
                crate::sni::Pattern::parse(n).map_err(|why| err(format!("name {n:?}: {why}")))?;
            if names.insert(p, key.clone()).is_err() {
                return Err(err(format!("name {n:?} is listed by an earlier entry")));
            }
        }
        default.get_or_insert(key);
    }
    Ok(Table {
        names,
        default: default.expect("at least one entry"),
    })
}

/// rustls's `ring` provider: it builds with the system's C compiler alone. rustls marks it
/// deprecated because it offers no post-quantum key exchange (X25519MLKEM768 needs the
/// `aws-lc-rs` provider); the classical suites it does offer are the ones above.
#[allow(deprecated)]
fn provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// One entry's chain and key, checked against each other.
fn load_entry(
    c: &CertificateConf,
    provider: &rustls::crypto::CryptoProvider,
) -> Result<CertifiedKey, String> {
    let cert_pem = read_pem(&c.cert, "cert")?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("cert {}: {e}", c.cert.display()))?;
    if chain.is_empty() {
        return Err(format!(
            "cert {}: no PEM CERTIFICATE block",
            c.cert.display()
        ));
    }
    check_validity(&chain[0], std::time::SystemTime::now())
        .map_err(|why| format!("cert {}: {why}", c.cert.display()))?;
    if c.key_mode_check {
        check_key_mode(&c.key)?;
    }
    let key_pem = read_pem(&c.key, "key")?;
    // The key's bytes never reach an error text: only the file's name and the parser's kind.
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|_| format!("key {}: no PEM private key block", c.key.display()))?;
    CertifiedKey::from_der(chain, key, provider).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => format!(
            "key {} does not belong to the certificate in {}",
            c.key.display(),
            c.cert.display()
        ),
        e => format!("key {}: {e}", c.key.display()),
    })
}

fn read_pem(path: &Path, what: &str) -> Result<Vec<u8>, String> {
    netsched_util::read::read_text(path, MAX_PEM_BYTES, what)
        .map(String::into_bytes)
        .map_err(|e| e.to_string())
}

/// The end-entity certificate must be valid at `now`: not expired, not valid only later
/// (RFC 5280 §4.1.2.5). A handshake with an expired certificate fails at every client that
/// checks, so it is refused at load rather than served.
fn check_validity(cert: &CertificateDer<'_>, now: std::time::SystemTime) -> Result<(), String> {
    let (not_before, not_after) =
        validity(cert).ok_or("its validity period cannot be read (malformed DER)")?;
    let now = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    if now > not_after {
        return Err(format!("expired on {}", utc(not_after)));
    }
    if now < not_before {
        return Err(format!("not valid before {}", utc(not_before)));
    }
    Ok(())
}

/// One DER item (ITU-T X.690 §8.1): its tag, its contents and what follows it.
fn der_item(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = b.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |a, &x| (a << 8) | x as usize);
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// The fields of a certificate's TBSCertificate from `issuer` on (RFC 5280 §4.1: Certificate →
/// TBSCertificate → [version], serialNumber, signature, issuer, validity, subject, ...).
fn from_issuer(cert: &[u8]) -> Option<&[u8]> {
    let (_, certificate, _) = der_item(cert)?;
    let (_, tbs, _) = der_item(certificate)?;
    let (tag, _, mut rest) = der_item(tbs)?;
    if tag != 0xa0 {
        rest = tbs; // no explicit version (v1): the serial number comes first
    }
    for _ in 0..2 {
        rest = der_item(rest)?.2; // serialNumber, signature
    }
    Some(rest)
}

/// `notBefore` and `notAfter` of a certificate, Unix seconds (RFC 5280 §4.1.2.5).
fn validity(cert: &[u8]) -> Option<(i64, i64)> {
    let rest = der_item(from_issuer(cert)?)?.2;
    let (tag, v, _) = der_item(rest)?;
    if tag != 0x30 {
        return None;
    }
    let (t1, nb, rest) = der_item(v)?;
    let (t2, na, _) = der_item(rest)?;
    Some((time(t1, nb)?, time(t2, na)?))
}

/// OID 2.5.4.3, `id-at-commonName` (RFC 5280 Appendix A.1), as DER contents.
const OID_COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
/// OID 2.5.29.17, `id-ce-subjectAltName` (RFC 5280 §4.2.1.6).
const OID_SUBJECT_ALT_NAME: &[u8] = &[0x55, 0x1d, 0x11];

/// The name a client certificate is known by in the access log and the class rules: the
/// first `commonName` attribute of the subject (RFC 5280 §4.1.2.6), else the first `dNSName`
/// or `rfc822Name` (email) of its subjectAltName extension (§4.2.1.6). `None` when it has
/// neither, or the DER cannot be read, or the name is empty or over [`MAX_SUBJECT_BYTES`].
pub fn client_subject(cert: &[u8]) -> Option<String> {
    let rest = der_item(from_issuer(cert)?)?.2; // issuer
    let rest = der_item(rest)?.2; // validity
    let (tag, subject, rest) = der_item(rest)?;
    if tag != 0x30 {
        return None;
    }
    let name = common_name(subject).or_else(|| alt_name(rest))?;
    (!name.is_empty() && name.len() <= MAX_SUBJECT_BYTES).then_some(name)
}

/// The first commonName of a Name: SEQUENCE OF RelativeDistinguishedName (SET OF
/// AttributeTypeAndValue { type OID, value }), RFC 5280 §4.1.2.4.
fn common_name(mut rdns: &[u8]) -> Option<String> {
    while !rdns.is_empty() {
        let (_, mut set, next) = der_item(rdns)?;
        while !set.is_empty() {
            let (_, atv, more) = der_item(set)?;
            let (oid_tag, oid, value) = der_item(atv)?;
            if oid_tag == 0x06 && oid == OID_COMMON_NAME {
                let (tag, v, _) = der_item(value)?;
                return directory_string(tag, v);
            }
            set = more;
        }
        rdns = next;
    }
    None
}

/// A DirectoryString as text: UTF8String, PrintableString or IA5String, the forms RFC 5280
/// §4.1.2.4 has CAs use; other forms are not read.
fn directory_string(tag: u8, v: &[u8]) -> Option<String> {
    match tag {
        0x0c => std::str::from_utf8(v).ok().map(str::to_string),
        0x13 | 0x16 if v.is_ascii() => std::str::from_utf8(v).ok().map(str::to_string),
        _ => None,
    }
}

/// The first dNSName or rfc822Name of the subjectAltName extension, looked for in the
/// TBSCertificate's fields after `subject`: subjectPublicKeyInfo, then the optional
/// `[1]` issuerUniqueID, `[2]` subjectUniqueID and `[3]` extensions (RFC 5280 §4.1).
fn alt_name(after_subject: &[u8]) -> Option<String> {
    let mut rest = der_item(after_subject)?.2; // subjectPublicKeyInfo
    let exts = loop {
        let (tag, v, next) = der_item(rest)?;
        if tag == 0xa3 {
            break der_item(v)?.1; // Extensions ::= SEQUENCE SIZE (1..MAX) OF Extension
        }
        rest = next;
    };
    let mut exts = exts;
    while !exts.is_empty() {
        let (_, ext, next) = der_item(exts)?;
        let (oid_tag, oid, mut fields) = der_item(ext)?;
        if oid_tag == 0x06 && oid == OID_SUBJECT_ALT_NAME {
            let (tag, _, after) = der_item(fields)?;
            if tag == 0x01 {
                fields = after; // critical BOOLEAN
            }
            let (_, octets, _) = der_item(fields)?;
            let (_, mut names, _) = der_item(octets)?; // GeneralNames
            while !names.is_empty() {
                let (tag, v, more) = der_item(names)?;
                // [1] rfc822Name and [2] dNSName, both IA5String, implicitly tagged.
                if tag == 0x81 || tag == 0x82 {
                    return directory_string(0x16, v);
                }
                names = more;
            }
            return None;
        }
        exts = next;
    }
    None
}

/// UTCTime (`YYMMDDHHMMSSZ`, 50-99 are 19YY) or GeneralizedTime (`YYYYMMDDHHMMSSZ`) as Unix
/// seconds (RFC 5280 §4.1.2.5.1, §4.1.2.5.2).
fn time(tag: u8, v: &[u8]) -> Option<i64> {
    let digits = |s: &[u8]| -> Option<i64> {
        s.iter().try_fold(0i64, |a, &d| {
            d.is_ascii_digit().then(|| a * 10 + (d - b'0') as i64)
        })
    };
    let (year, rest) = match (tag, v.len()) {
        (0x17, 13) => {
            let yy = digits(&v[..2])?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &v[2..])
        }
        (0x18, 15) => (digits(&v[..4])?, &v[4..]),
        _ => return None,
    };
    if rest[10] != b'Z' {
        return None;
    }
    let f = |i: usize| digits(&rest[i..i + 2]);
    let (mo, d, h, mi, s) = (f(0)?, f(2)?, f(4)?, f(6)?, f(8)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    Some(days_from_civil(year, mo, d) * 86_400 + h * 3600 + mi * 60 + s)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant, "chrono-Compatible
/// Low-Level Date Algorithms", `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Unix seconds as `YYYY-MM-DD HH:MM:SS UTC`.
fn utc(t: i64) -> String {
    let (days, secs) = (t.div_euclid(86_400), t.rem_euclid(86_400));
    let (y, m, d) = crate::access_log::civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// A private key must not be readable by group or others.
fn check_key_mode(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|e| format!("key {}: {e}", path.display()))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "key {} is readable by group or others (mode {mode:o}): `chmod 600` it, or set \
             key_mode_check = false for this entry",
            path.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_convert_both_ways_and_times_follow_rfc_5280() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400 + 3661), "2000-02-29 01:01:01 UTC");
        assert_eq!(time(0x17, b"491231235959Z"), Some(2_524_607_999));
        assert_eq!(time(0x17, b"500101000000Z"), Some(-631_152_000));
        assert_eq!(time(0x18, b"20991231235959Z"), Some(4_102_444_799));
        for bad in [
            &b"491231235959"[..],
            b"4912312359590",
            b"491331235959Z",
            b"",
        ] {
            assert_eq!(time(0x17, bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_walker_refuses_truncated_and_oversized_items_without_panicking() {
        assert_eq!(
            der_item(&[0x30, 0x03, 1, 2, 3, 9]),
            Some((0x30, &[1u8, 2, 3][..], &[9u8][..]))
        );
        assert_eq!(
            der_item(&[0x30, 0x82, 0x00, 0x01, 7]),
            Some((0x30, &[7u8][..], &[][..]))
        );
        for bad in [
            &[][..],
            &[0x30],
            &[0x30, 0x05, 1],
            &[0x30, 0x85, 1, 1, 1, 1, 1],
            &[0x30, 0x80],
        ] {
            assert_eq!(der_item(bad), None, "{bad:?}");
        }
        for n in 0..64 {
            let junk: Vec<u8> = (0..n).map(|i| (i * 37 + 11) as u8).collect();
            let _ = validity(&junk);
        }
    }

    #[test]
    fn client_certificate_failures_are_told_apart_from_other_handshake_failures() {
        use std::io::{Error, ErrorKind};
        let wrap = |e: rustls::Error| Error::new(ErrorKind::InvalidData, e);
        assert_eq!(
            handshake_failure(&wrap(rustls::Error::NoCertificatesPresented)),
            "client_certificate"
        );
        assert_eq!(
            handshake_failure(&wrap(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer
            ))),
            "client_certificate"
        );
        assert_eq!(
            handshake_failure(&wrap(rustls::Error::DecryptError)),
            "failed"
        );
        assert_eq!(
            handshake_failure(&Error::from(ErrorKind::ConnectionReset)),
            "failed"
        );
    }

    /// A self-signed certificate with this subject (no attribute when `cn` is `None`) and
    /// these subjectAltNames.
    fn cert(cn: Option<&str>, sans: Vec<rcgen::SanType>) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut p = rcgen::CertificateParams::default();
        p.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(cn) = cn {
            p.distinguished_name
                .push(rcgen::DnType::OrganizationName, "netsched tests");
            p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        }
        p.subject_alt_names = sans;
        p.self_signed(&key).expect("cert").der().to_vec()
    }

    #[test]
    fn the_subject_is_the_common_name_else_the_first_dns_or_email_alt_name() {
        let dns = |n: &str| rcgen::SanType::DnsName(n.try_into().expect("ia5"));
        let email = |n: &str| rcgen::SanType::Rfc822Name(n.try_into().expect("ia5"));
        let c = cert(Some("client-a"), vec![dns("a.test")]);
        assert_eq!(client_subject(&c).as_deref(), Some("client-a"));
        let c = cert(Some("Zoë"), vec![]);
        assert_eq!(client_subject(&c).as_deref(), Some("Zoë"));
        let c = cert(None, vec![dns("b.test"), email("x@b.test")]);
        assert_eq!(client_subject(&c).as_deref(), Some("b.test"));
        let c = cert(None, vec![email("x@b.test"), dns("b.test")]);
        assert_eq!(client_subject(&c).as_deref(), Some("x@b.test"));
        let c = cert(None, vec![rcgen::SanType::IpAddress([192, 0, 2, 1].into())]);
        assert_eq!(client_subject(&c), None);
        let long = "x".repeat(MAX_SUBJECT_BYTES + 1);
        assert_eq!(client_subject(&cert(Some(&long), vec![])), None);
        // Every truncation of a good certificate is refused, never a panic.
        let c = cert(Some("client-a"), vec![dns("a.test")]);
        for n in 0..c.len() {
            assert_eq!(client_subject(&c[..n]), None, "{n} bytes");
        }
    }
}

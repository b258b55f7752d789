//! TLS termination on the L7 listeners, with rustls (no OpenSSL): `[[tls.certificate]]`
//! entries of the configuration, each a PEM chain and its private key, chosen per handshake by
//! the client's SNI name (RFC 6066 §3): an exact name first, then a wildcard `*.example.com`
//! (one label, as RFC 6125 §6.4.3 matches it), else the first entry (the default, also for
//! a client that sends no name).
//!
//! - **Protocols**: TLS 1.2 and 1.3 only, and only rustls's cipher suites, all AEAD
//!   (rustls's `DEFAULT_CIPHER_SUITES` with the `ring` provider: AES-GCM and
//!   ChaCha20-Poly1305, ECDHE key exchange). ALPN offers `http/1.1`.
//! - **Resumption**: an in-memory session cache (rustls's default, 256 sessions) and session
//!   tickets whose key rotates every 6 hours (rustls's `ring::Ticketer`).
//! - **Live replacement**: the table of certificates sits behind one lock, read once per
//!   handshake; a reload (`SIGHUP`, `systemctl reload`) builds a whole new table first and swaps it
//!   in only if every entry loads, so a bad chain, a key that does not match its certificate
//!   or an unreadable file is refused with the reason and the old certificates stay.
//!   Handshakes under way and connections already open are untouched; the ticket key is kept,
//!   so sessions resume across a swap.
//! - **Key files** are read once per load and never logged; a key file readable by group or
//!   others (mode bits 0o077) is refused unless the entry says `key_mode_check = false`.
//!
//! Bounds: at most [`MAX_CERTIFICATES`] entries, [`MAX_NAMES`] names each, PEM files of at
//! most [`MAX_PEM_BYTES`]. Cost per handshake: one read lock and at most two hash lookups on
//! top of rustls's own work.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use serde::Deserialize;
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// Most `[[tls.certificate]]` entries.
pub const MAX_CERTIFICATES: usize = 1024;
/// Most names of one entry.
pub const MAX_NAMES: usize = 256;
/// Largest certificate or key file.
pub const MAX_PEM_BYTES: u64 = 1 << 20;

/// The `[tls]` table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConf {
    /// The certificates, the first the default.
    pub certificate: Vec<CertificateConf>,
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

/// The certificates in force, by name.
#[derive(Debug)]
struct Table {
    exact: HashMap<String, Arc<CertifiedKey>>,
    /// By the suffix after `*.`.
    wildcard: HashMap<String, Arc<CertifiedKey>>,
    default: Arc<CertifiedKey>,
}

impl Table {
    fn pick(&self, name: Option<&str>) -> Arc<CertifiedKey> {
        let Some(name) = name else {
            return self.default.clone();
        };
        let name = name.to_ascii_lowercase();
        if let Some(c) = self.exact.get(&name) {
            return c.clone();
        }
        name.split_once('.')
            .and_then(|(_, parent)| self.wildcard.get(parent))
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

/// The TLS side of the L7 listeners: the rustls configuration every handshake uses, and the
/// certificates it serves, replaceable while running.
pub struct Certificates {
    resolver: Arc<Resolver>,
    acceptor: tokio_rustls::TlsAcceptor,
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
        let table = load_table(conf)?;
        let resolver = Arc::new(Resolver(RwLock::new(Arc::new(table))));
        let provider = Arc::new(provider());
        let mut sc = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| TlsError {
                entry: "tls".into(),
                why: e.to_string(),
            })?
            .with_no_client_auth()
            .with_cert_resolver(resolver.clone());
        sc.alpn_protocols = vec![b"http/1.1".to_vec()];
        sc.ticketer = rustls::crypto::ring::Ticketer::new().map_err(|e| TlsError {
            entry: "tls".into(),
            why: format!("session ticket key: {e}"),
        })?;
        Ok(Certificates {
            resolver,
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(sc)),
            count: conf.certificate.len().into(),
        })
    }

    /// Load `conf` whole, then swap it in; on an error nothing changes.
    pub fn replace(&self, conf: &TlsConf) -> Result<usize, TlsError> {
        let table = Arc::new(load_table(conf)?);
        *self.resolver.0.write().unwrap_or_else(|p| p.into_inner()) = table;
        let n = conf.certificate.len();
        self.count.store(n, std::sync::atomic::Ordering::Relaxed);
        Ok(n)
    }

    /// Entries in force.
    pub fn len(&self) -> usize {
        self.count.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn acceptor(&self) -> &tokio_rustls::TlsAcceptor {
        &self.acceptor
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
    let mut exact = HashMap::new();
    let mut wildcard = HashMap::new();
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
            let lower = n.to_ascii_lowercase();
            let (map, k) = match lower.strip_prefix("*.") {
                Some(rest) => (&mut wildcard, rest.to_string()),
                None => (&mut exact, lower.clone()),
            };
            if k.is_empty() || k.contains('*') || !k.bytes().all(name_byte) {
                return Err(err(format!(
                    "name {n:?}: a DNS name, or `*.` and a DNS name"
                )));
            }
            if map.insert(k, key.clone()).is_some() {
                return Err(err(format!("name {n:?} is listed by an earlier entry")));
            }
        }
        default.get_or_insert(key);
    }
    Ok(Table {
        exact,
        wildcard,
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

fn name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'.'
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

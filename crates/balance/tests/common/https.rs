//! A TLS site for the tests that drive outside clients (headless Chromium, sslscan) against a
//! balancer: a self-signed ECDSA P-256 certificate (rcgen) for `127.0.0.1`, its key file mode
//! 0600, and the base64 SHA-256 of its SubjectPublicKeyInfo, which is what Chromium's
//! `--ignore-certificate-errors-spki-list` takes to trust this one key and no other.

use netsched_testbed::TempDir;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

pub struct Site {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// base64(SHA-256(SubjectPublicKeyInfo DER)).
    pub spki_sha256: String,
    /// The certificate, for a client that trusts it ([`Site::connect`]).
    pub der: rustls::pki_types::CertificateDer<'static>,
}

impl Site {
    /// A certificate for `127.0.0.1` (an IP subjectAltName) and `localhost`, in `dir`.
    pub fn new(dir: &TempDir) -> Site {
        let key = rcgen::KeyPair::generate().unwrap();
        let names = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        let cert = rcgen::CertificateParams::new(names)
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let (c, k) = (dir.path().join("site.pem"), dir.path().join("site.key"));
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        std::fs::set_permissions(&k, std::fs::Permissions::from_mode(0o600)).unwrap();
        Site {
            cert: c,
            key: k,
            spki_sha256: base64(&sha256(&key.public_key_der())),
            der: cert.der().clone(),
        }
    }

    /// A TLS connection over `tcp` to `localhost` by a rustls client that trusts this
    /// certificate alone and offers `alpn`.
    pub async fn connect(
        &self,
        alpn: &[u8],
        tcp: tokio::net::TcpStream,
    ) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.der.clone()).unwrap();
        #[allow(deprecated)]
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let mut cc = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        cc.alpn_protocols = vec![alpn.to_vec()];
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        tokio_rustls::TlsConnector::from(std::sync::Arc::new(cc))
            .connect(name, tcp)
            .await
            .unwrap()
    }

    /// The `[[tls.certificate]]` table serving this certificate.
    pub fn table(&self) -> String {
        format!(
            "[[tls.certificate]]\ncert = \"{}\"\nkey = \"{}\"\n",
            self.cert.display(),
            self.key.display()
        )
    }
}

/// SHA-256, from the hash rustls's ring provider uses for TLS_AES_128_GCM_SHA256.
pub fn sha256(data: &[u8]) -> Vec<u8> {
    let suite = rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256;
    let rustls::SupportedCipherSuite::Tls13(s) = suite else {
        unreachable!("a TLS 1.3 suite")
    };
    s.common.hash_provider.hash(data).as_ref().to_vec()
}

/// Base64 with padding (RFC 4648 §4).
pub fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

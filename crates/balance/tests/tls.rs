//! TLS termination on the L7 listener (loopback, no privileges): certificates made for the
//! test by a test CA (rcgen, ECDSA P-256), clients of rustls. SNI picks the certificate
//! (exact, wildcard, else the first); TLS 1.2 and 1.3 both serve requests with ALPN
//! `http/1.1`; a bad key is refused at start and on reload with the old certificates kept; a
//! certificate replaced by SIGHUP's reload while clients keep connecting fails no handshake,
//! and two certificates swapped every second under load (issue #38) fail no handshake, drop
//! no kept-alive connection and are each served while in force.
//! Client certificates (`client_certificate`, `client_ca`): `required` refuses a client
//! without one or with one of another CA, counting the failure apart, and a verified one's
//! subject shows in the access log (before the request, the TLS version, ALPN protocol and
//! cipher suite after it) and picks its class; `optional` serves both; a reload
//! changes the mode, and a bad `client_ca` is refused naming the field and the file.
//! With `accept_proxy`, the PROXY protocol header comes before the TLS handshake and names the
//! client in the request headers (`proto=https` kept).

mod common;

use common::{config_text, http_backend, start, PATIENCE};
use netsched_balance::config::Config;
use netsched_testbed::TempDir;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[allow(deprecated)]
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A date: year, month, day.
type Ymd = (i32, u8, u8);

/// A test CA and the leaf certificates it signs.
struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Ca {
    fn new() -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name
            .push(DnType::CommonName, "netsched test CA");
        Ca {
            cert: p.self_signed(&key).unwrap(),
            key,
        }
    }

    /// A leaf for `names`, written as `<file>.pem` and `<file>.key` (mode 0600) in `dir`;
    /// returns the two paths and the certificate's DER.
    fn leaf(&self, dir: &TempDir, file: &str, names: &[&str]) -> (PathBuf, PathBuf, Vec<u8>) {
        self.leaf_valid(dir, file, names, None)
    }

    /// [`Ca::leaf`] valid from the first to the second date (year, month, day), when given.
    fn leaf_valid(
        &self,
        dir: &TempDir,
        file: &str,
        names: &[&str],
        valid: Option<(Ymd, Ymd)>,
    ) -> (PathBuf, PathBuf, Vec<u8>) {
        self.leaf_with(dir, file, names, valid, KeyPair::generate().unwrap())
    }

    /// [`Ca::leaf_valid`] with the given key (of another algorithm than P-256).
    fn leaf_with(
        &self,
        dir: &TempDir,
        file: &str,
        names: &[&str],
        valid: Option<(Ymd, Ymd)>,
        key: KeyPair,
    ) -> (PathBuf, PathBuf, Vec<u8>) {
        let mut p = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap();
        if let Some(((y0, m0, d0), (y1, m1, d1))) = valid {
            p.not_before = rcgen::date_time_ymd(y0, m0, d0);
            p.not_after = rcgen::date_time_ymd(y1, m1, d1);
        }
        let cert = p.signed_by(&key, &self.cert, &self.key).unwrap();
        let c = dir
            .create_file(&format!("{file}.pem"), cert.pem().as_bytes())
            .unwrap();
        let k = dir
            .create_file(&format!("{file}.key"), key.serialize_pem().as_bytes())
            .unwrap();
        std::fs::set_permissions(&k, std::fs::Permissions::from_mode(0o600)).unwrap();
        (c, k, cert.der().to_vec())
    }

    fn roots(&self) -> rustls::RootCertStore {
        let mut r = rustls::RootCertStore::empty();
        r.add(self.cert.der().clone()).unwrap();
        r
    }
}

fn tls_table(entries: &[(&PathBuf, &PathBuf, &[&str])]) -> String {
    let mut t = String::new();
    for (c, k, names) in entries {
        let names: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
        t += &format!(
            "[[tls.certificate]]\ncert = \"{}\"\nkey = \"{}\"\nnames = [{}]\n",
            c.display(),
            k.display(),
            names.join(", ")
        );
    }
    t
}

/// Records the certificate the server presented and accepts it (to see which one SNI
/// picked, for names no certificate is valid for).
#[derive(Debug)]
struct Capture(Mutex<Vec<u8>>, Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for Capture {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        *self.0.lock().unwrap() = end_entity.to_vec();
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.1.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.1.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.1.signature_verification_algorithms.supported_schemes()
    }
}

fn client(
    roots: Option<rustls::RootCertStore>,
    version: &'static rustls::SupportedProtocolVersion,
) -> (rustls::ClientConfig, Option<Arc<Capture>>) {
    let b = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[version])
        .unwrap();
    let (mut cfg, cap) = match roots {
        Some(r) => (b.with_root_certificates(r).with_no_client_auth(), None),
        None => {
            let cap = Arc::new(Capture(Mutex::new(Vec::new()), provider()));
            let cfg = b
                .dangerous()
                .with_custom_certificate_verifier(cap.clone())
                .with_no_client_auth();
            (cfg, Some(cap))
        }
    };
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    (cfg, cap)
}

/// One GET over TLS to `addr` with SNI `name`: (status line, body, ALPN protocol).
async fn https_get(
    addr: SocketAddr,
    cfg: rustls::ClientConfig,
    name: &str,
) -> Result<(String, String, Option<Vec<u8>>), String> {
    https_get_after(addr, cfg, name, b"").await
}

/// [`https_get`] with `first` sent before the TLS handshake (a PROXY protocol header).
async fn https_get_after(
    addr: SocketAddr,
    cfg: rustls::ClientConfig,
    name: &str,
    first: &[u8],
) -> Result<(String, String, Option<Vec<u8>>), String> {
    let mut s = tls_connect(addr, Arc::new(cfg), name, first).await?;
    let alpn = s.get_ref().1.alpn_protocol().map(|p| p.to_vec());
    s.write_all(format!("GET / HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    tokio::time::timeout(PATIENCE, s.read_to_end(&mut out))
        .await
        .map_err(|_| "response timed out".to_string())?
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.lines().next().unwrap_or_default().to_string();
    Ok((status, body.to_string(), alpn))
}

/// A TLS connection to `addr` with SNI `name`, `first` sent before the handshake.
async fn tls_connect(
    addr: SocketAddr,
    cfg: Arc<rustls::ClientConfig>,
    name: &str,
    first: &[u8],
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, String> {
    let mut tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    tcp.write_all(first).await.map_err(|e| e.to_string())?;
    let server = ServerName::try_from(name.to_string()).map_err(|e| e.to_string())?;
    tokio::time::timeout(
        PATIENCE,
        tokio_rustls::TlsConnector::from(cfg).connect(server, tcp),
    )
    .await
    .map_err(|_| "handshake timed out".to_string())?
    .map_err(|e| e.to_string())
}

#[tokio::test]
async fn sni_picks_the_certificate_and_both_versions_serve_requests() {
    let dir = TempDir::new("bal-tls").unwrap();
    let ca = Ca::new();
    let (ac, ak, a_der) = ca.leaf(&dir, "a", &["a.test"]);
    let (bc, bk, b_der) = ca.leaf(&dir, "b", &["*.b.test"]);
    let be = http_backend("web").await;
    let text = config_text(
        "l7",
        "{ kind = \"rr\" }",
        "admin = \"127.0.0.1:0\"",
        &tls_table(&[(&ac, &ak, &["a.test"]), (&bc, &bk, &["*.b.test"])]),
        &[&be],
        &dir,
    );
    let r = start(&text, &dir).await;
    let addr = r.listen[0];
    for v in [&rustls::version::TLS13, &rustls::version::TLS12] {
        for name in ["a.test", "www.b.test"] {
            let (cfg, _) = client(Some(ca.roots()), v);
            let (status, body, alpn) = https_get(addr, cfg, name)
                .await
                .unwrap_or_else(|e| panic!("{v:?} {name}: {e}"));
            assert_eq!(status, "HTTP/1.1 200 OK", "{v:?} {name}");
            assert_eq!(body, "web", "{v:?} {name}");
            assert_eq!(alpn.as_deref(), Some(&b"http/1.1"[..]), "{v:?} {name}");
        }
    }
    // Which certificate each name gets: exact, wildcard (one label only), else the first.
    for (name, want) in [
        ("a.test", &a_der),
        ("x.b.test", &b_der),
        ("A.TEST", &a_der),
        ("deep.x.b.test", &a_der),
        ("other.test", &a_der),
    ] {
        let (cfg, cap) = client(None, &rustls::version::TLS13);
        https_get(addr, cfg, name)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let got = cap.unwrap().0.lock().unwrap().clone();
        assert!(&got == want, "{name}: another certificate was served");
    }
    // A name the served certificate does not cover fails a verifying client.
    let (cfg, _) = client(Some(ca.roots()), &rustls::version::TLS13);
    let e = https_get(addr, cfg, "other.test").await.unwrap_err();
    assert!(e.contains("certificate"), "{e}");
    // Plain HTTP on the TLS port is a failed handshake, counted.
    let (status, _) = common::get(addr, "/", "a.test").await;
    assert_ne!(status, 200);
    let m = common::metrics_text(&r);
    assert!(
        common::metric(&m, "netsched_balance_tls_handshakes_total{reason=\"ok\"}") >= 9.0,
        "{m}"
    );
    assert!(
        common::metric(
            &m,
            "netsched_balance_tls_handshakes_total{reason=\"failed\"}"
        ) >= 1.0,
        "{m}"
    );
}

#[tokio::test]
async fn bad_keys_are_refused_with_the_reason_and_a_reload_keeps_the_old_certificates() {
    let dir = TempDir::new("bal-tlsbad").unwrap();
    let ca = Ca::new();
    let (ac, ak, a_der) = ca.leaf(&dir, "a", &["a.test"]);
    let (_, other_key, _) = ca.leaf(&dir, "other", &["other.test"]);
    let be = http_backend("web").await;
    let with = |entries: &[(&PathBuf, &PathBuf, &[&str])]| {
        config_text(
            "l7",
            "{ kind = \"rr\" }",
            "",
            &tls_table(entries),
            &[&be],
            &dir,
        )
    };
    let path = dir.path().join("balance.toml");
    let start_err = |text: String| {
        std::fs::write(&path, &text).unwrap();
        let cfg = Config::load(&path).unwrap();
        let rt = tokio::runtime::Handle::current();
        let path = path.clone();
        std::thread::spawn(move || {
            rt.block_on(netsched_balance::start(cfg, &path))
                .err()
                .map(|e| e.to_string())
        })
        .join()
        .unwrap()
    };
    // A key of another certificate.
    let e = start_err(with(&[(&ac, &other_key, &["a.test"])])).expect("refused");
    assert!(e.contains("does not belong to the certificate"), "{e}");
    // A key readable by others.
    std::fs::set_permissions(&ak, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = start_err(with(&[(&ac, &ak, &["a.test"])])).expect("refused");
    assert!(e.contains("readable by group or others"), "{e}");
    std::fs::set_permissions(&ak, std::fs::Permissions::from_mode(0o600)).unwrap();
    // A certificate out of its validity period: expired, or valid only later.
    let (oc, ok, _) = ca.leaf_valid(&dir, "old", &["a.test"], Some(((2000, 1, 1), (2001, 1, 1))));
    let e = start_err(with(&[(&oc, &ok, &["a.test"])])).expect("refused");
    assert!(e.contains("expired on 2001-01-01 00:00:00 UTC"), "{e}");
    let (fc, fk, _) = ca.leaf_valid(
        &dir,
        "later",
        &["a.test"],
        Some(((2090, 1, 1), (2091, 1, 1))),
    );
    let e = start_err(with(&[(&fc, &fk, &["a.test"])])).expect("refused");
    assert!(
        e.contains("not valid before 2090-01-01 00:00:00 UTC"),
        "{e}"
    );
    // A missing file.
    let missing = dir.path().join("none.pem");
    let e = start_err(with(&[(&missing, &ak, &["a.test"])])).expect("refused");
    assert!(e.contains("none.pem"), "{e}");
    // TLS in mode l4.
    let e = Config::parse(&format!(
        "{}\n",
        config_text(
            "l4",
            "{ kind = \"rr\" }",
            "",
            &tls_table(&[(&ac, &ak, &[])]),
            &[&be],
            &dir
        )
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("mode = \"l7\""), "{e}");

    // Running with a; a reload with a bad key is refused and a stays in force.
    let r = start(&with(&[(&ac, &ak, &["a.test"])]), &dir).await;
    let addr = r.listen[0];
    std::fs::write(&path, with(&[(&ac, &other_key, &["a.test"])])).unwrap();
    let e = r.reload().unwrap_err().to_string();
    assert!(e.contains("does not belong"), "{e}");
    std::fs::write(&path, with(&[(&oc, &ok, &["a.test"])])).unwrap();
    let e = r.reload().unwrap_err().to_string();
    assert!(e.contains("expired on"), "{e}");
    // `ctl reload` is the same reload, answered on the control socket.
    let ctl = |line: &str| netsched_balance::control::request(&r.control_socket, line);
    let e = ctl("reload").unwrap_err().to_string();
    assert!(
        e.contains("reload failed, keeping the old configuration") && e.contains("expired on"),
        "{e}"
    );
    std::fs::write(&path, with(&[(&ac, &ak, &["a.test"])])).unwrap();
    let answer = ctl("reload").unwrap();
    assert!(answer.contains("1 TLS certificates in force"), "{answer}");
    let (cfg, cap) = client(None, &rustls::version::TLS13);
    https_get(addr, cfg, "a.test").await.unwrap();
    assert!(cap.unwrap().0.lock().unwrap().as_slice() == a_der.as_slice());

    // A new certificate for a.test replaced by reload while clients keep connecting: no
    // handshake fails, and the new one is served after.
    let (nc, nk, n_der) = ca.leaf(&dir, "a2", &["a.test"]);
    let roots = ca.roots();
    let clients = tokio::spawn(async move {
        let mut failures = Vec::new();
        for _ in 0..60 {
            let (cfg, _) = client(Some(roots.clone()), &rustls::version::TLS13);
            if let Err(e) = https_get(addr, cfg, "a.test").await {
                failures.push(e);
            }
        }
        failures
    });
    for (i, (c, k)) in [(&nc, &nk), (&ac, &ak), (&nc, &nk)].into_iter().enumerate() {
        std::fs::write(&path, with(&[(c, k, &["a.test"])])).unwrap();
        // SIGHUP's reload and `ctl reload` in turn.
        let notes = if i % 2 == 0 {
            r.reload().unwrap().join("\n")
        } else {
            ctl("reload").unwrap()
        };
        assert!(notes.contains("1 TLS certificates in force"), "{notes}");
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    }
    let failures = clients.await.unwrap();
    assert!(failures.is_empty(), "failed handshakes: {failures:?}");
    let (cfg, cap) = client(None, &rustls::version::TLS13);
    https_get(addr, cfg, "a.test").await.unwrap();
    assert!(cap.unwrap().0.lock().unwrap().as_slice() == n_der.as_slice());
}

/// A client certificate whose subject is `CN=cn`, signed by `ca`: its chain and key.
fn client_cert(ca: &Ca, cn: &str) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, cn);
    let cert = p.signed_by(&key, &ca.cert, &ca.key).unwrap();
    let der = PrivateKeyDer::Pkcs8(key.serialize_der().into());
    (vec![cert.der().clone()], der)
}

/// A client trusting `server_ca`, presenting `cert` when given.
fn mtls_client(
    server_ca: &Ca,
    cert: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
    version: &'static rustls::SupportedProtocolVersion,
) -> rustls::ClientConfig {
    mtls_client_with(provider(), server_ca, cert, version)
}

/// [`mtls_client`] with the cipher suites of `provider`.
fn mtls_client_with(
    provider: Arc<rustls::crypto::CryptoProvider>,
    server_ca: &Ca,
    cert: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
    version: &'static rustls::SupportedProtocolVersion,
) -> rustls::ClientConfig {
    let b = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(server_ca.roots());
    let mut cfg = match cert {
        Some((chain, key)) => b.with_client_auth_cert(chain, key).unwrap(),
        None => b.with_no_client_auth(),
    };
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    cfg
}

/// The `[tls]` table with client certificates, then the server's certificate.
fn mtls_table(mode: &str, client_ca: &std::path::Path, cert: &PathBuf, key: &PathBuf) -> String {
    format!(
        "[tls]\nclient_ca = \"{}\"\nclient_certificate = \"{mode}\"\n{}",
        client_ca.display(),
        tls_table(&[(cert, key, &["a.test"])])
    )
}

/// Whether a GET with `cfg` resumed an earlier session (a ticket or session id `cfg`'s
/// resumption store holds), and was served.
async fn resumed(addr: SocketAddr, cfg: rustls::ClientConfig) -> bool {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let server = ServerName::try_from("a.test").unwrap();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let mut s = tokio::time::timeout(PATIENCE, connector.connect(server, tcp))
        .await
        .unwrap()
        .unwrap();
    let kind = s.get_ref().1.handshake_kind();
    s.write_all(b"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    let read = tokio::time::timeout(PATIENCE, s.read_to_end(&mut out)).await;
    assert!(matches!(read, Ok(Ok(_))), "{read:?}");
    assert!(out.starts_with(b"HTTP/1.1 200 OK"), "{out:?}");
    kind == Some(rustls::HandshakeKind::Resumed)
}

/// The access log's lines once it has `n`.
async fn log_lines(path: &std::path::Path, n: usize) -> Vec<String> {
    let ok =
        common::eventually(|| std::fs::read_to_string(path).is_ok_and(|t| t.lines().count() >= n))
            .await;
    let text = std::fs::read_to_string(path).unwrap_or_default();
    assert!(ok, "expected {n} lines in the access log:\n{text}");
    text.lines().map(str::to_string).collect()
}

/// Waits until the metric `name` reaches `want`; its last value.
async fn metric_reaches(r: &netsched_balance::Running, name: &str, want: f64) -> f64 {
    common::eventually(|| common::metric(&common::metrics_text(r), name) >= want).await;
    common::metric(&common::metrics_text(r), name)
}

const CERT_FAILED: &str = "netsched_balance_tls_handshakes_total{reason=\"client_certificate\"}";
const FAILED: &str = "netsched_balance_tls_handshakes_total{reason=\"failed\"}";

#[tokio::test]
async fn a_required_client_certificate_is_verified_logged_and_picks_the_class() {
    let dir = TempDir::new("bal-mtls").unwrap();
    let (server_ca, client_ca, other_ca) = (Ca::new(), Ca::new(), Ca::new());
    let (sc, sk, _) = server_ca.leaf(&dir, "a", &["a.test"]);
    let ca_pem = dir
        .create_file("clients.pem", client_ca.cert.pem().as_bytes())
        .unwrap();
    let log = dir.path().join("access.log");
    let be = http_backend("web").await;
    let classes = "[[class]]\nname = \"gold\"\nclient_subject = \"client-a\"\n\
                   [[class]]\nname = \"rest\"\n";
    let text = config_text(
        "l7",
        "{ kind = \"rr\" }",
        &format!(
            "admin = \"127.0.0.1:0\"\naccess_log = \"{}\"",
            log.display()
        ),
        &format!("{}{classes}", mtls_table("required", &ca_pem, &sc, &sk)),
        &[&be],
        &dir,
    );
    let r = start(&text, &dir).await;
    let addr = r.listen[0];
    // Without a certificate, and with one of another CA: refused, in both versions.
    let mut refused = 0.0;
    for v in [&rustls::version::TLS13, &rustls::version::TLS12] {
        for cert in [None, Some(client_cert(&other_ca, "client-a"))] {
            let got = https_get(addr, mtls_client(&server_ca, cert, v), "a.test").await;
            assert!(
                got.as_ref().map_or(true, |(s, _, _)| s.is_empty()),
                "{v:?}: served without a good certificate: {got:?}"
            );
            refused += 1.0;
            assert_eq!(metric_reaches(&r, CERT_FAILED, refused).await, refused);
        }
    }
    // Verified ones: served, the subject logged, `client-a` in its class; the cipher suite
    // logged is the one negotiated (rustls's first by default, else the only one offered).
    let chacha = Arc::new(rustls::crypto::CryptoProvider {
        cipher_suites: vec![rustls::crypto::ring::cipher_suite::TLS13_CHACHA20_POLY1305_SHA256],
        ..(*provider()).clone()
    });
    for (cn, p) in [("client-a", provider()), ("client-b", chacha)] {
        let cfg = mtls_client_with(
            p,
            &server_ca,
            Some(client_cert(&client_ca, cn)),
            &rustls::version::TLS13,
        );
        let (status, body, _) = https_get(addr, cfg, "a.test").await.unwrap();
        assert_eq!((status.as_str(), body.as_str()), ("HTTP/1.1 200 OK", "web"));
    }
    let lines = log_lines(&log, 2).await;
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[0]
            .ends_with(" -- {client-a} \"GET / HTTP/1.1\" TLSv1.3/http/1.1 TLS_AES_256_GCM_SHA384"),
        "{lines:?}"
    );
    assert!(
        lines[1].ends_with(
            " -- {client-b} \"GET / HTTP/1.1\" TLSv1.3/http/1.1 TLS_CHACHA20_POLY1305_SHA256"
        ),
        "{lines:?}"
    );
    let gold = "netsched_balance_class_requests_total{class=\"gold\"}";
    let rest = "netsched_balance_class_requests_total{class=\"rest\"}";
    assert_eq!(metric_reaches(&r, gold, 1.0).await, 1.0);
    assert_eq!(metric_reaches(&r, rest, 1.0).await, 1.0);
    let m = common::metrics_text(&r);
    assert_eq!(common::metric(&m, FAILED), 0.0, "{m}");
    assert_eq!(common::metric(&m, CERT_FAILED), 4.0, "{m}");
}

#[tokio::test]
async fn an_optional_client_certificate_serves_both_and_a_reload_changes_the_mode() {
    let dir = TempDir::new("bal-mtlsopt").unwrap();
    let (server_ca, client_ca, other_ca) = (Ca::new(), Ca::new(), Ca::new());
    let (sc, sk, _) = server_ca.leaf(&dir, "a", &["a.test"]);
    let ca_pem = dir
        .create_file("clients.pem", client_ca.cert.pem().as_bytes())
        .unwrap();
    let log = dir.path().join("access.log");
    let be = http_backend("web").await;
    let with = |mode: &str, ca: &std::path::Path| {
        config_text(
            "l7",
            "{ kind = \"rr\" }",
            &format!(
                "admin = \"127.0.0.1:0\"\naccess_log = \"{}\"",
                log.display()
            ),
            &mtls_table(mode, ca, &sc, &sk),
            &[&be],
            &dir,
        )
    };
    let r = start(&with("optional", &ca_pem), &dir).await;
    let addr = r.listen[0];
    let v13 = &rustls::version::TLS13;
    let good = || Some(client_cert(&client_ca, "client-a"));
    for cert in [good(), None] {
        let (status, _, _) = https_get(addr, mtls_client(&server_ca, cert, v13), "a.test")
            .await
            .unwrap();
        assert_eq!(status, "HTTP/1.1 200 OK");
    }
    let lines = log_lines(&log, 2).await;
    assert!(
        lines[0]
            .ends_with(" -- {client-a} \"GET / HTTP/1.1\" TLSv1.3/http/1.1 TLS_AES_256_GCM_SHA384"),
        "{lines:?}"
    );
    assert!(
        lines[1].ends_with(" -- {} \"GET / HTTP/1.1\" TLSv1.3/http/1.1 TLS_AES_256_GCM_SHA384"),
        "{lines:?}"
    );
    // A client without a certificate resumes its session, also after a reload that keeps the
    // client certificate settings.
    let anonymous = mtls_client(&server_ca, None, v13);
    assert!(!resumed(addr, anonymous.clone()).await, "a first handshake");
    assert!(resumed(addr, anonymous.clone()).await, "the second resumes");
    let path = dir.path().join("balance.toml");
    std::fs::write(&path, with("optional", &ca_pem)).unwrap();
    r.reload().unwrap();
    assert!(
        resumed(addr, anonymous.clone()).await,
        "resumed across the reload"
    );
    // A certificate that does not verify is refused even when optional.
    let bad = Some(client_cert(&other_ca, "client-a"));
    let got = https_get(addr, mtls_client(&server_ca, bad, v13), "a.test").await;
    assert!(
        got.as_ref().map_or(true, |(s, _, _)| s.is_empty()),
        "{got:?}"
    );
    assert_eq!(metric_reaches(&r, CERT_FAILED, 1.0).await, 1.0);

    // A reload with an unreadable client_ca is refused; the optional mode stays.
    let missing = dir.path().join("gone.pem");
    std::fs::write(&path, with("required", &missing)).unwrap();
    let e = r.reload().unwrap_err().to_string();
    assert!(e.contains("tls.client_ca") && e.contains("gone.pem"), "{e}");
    let got = https_get(addr, mtls_client(&server_ca, None, v13), "a.test").await;
    assert_eq!(got.unwrap().0, "HTTP/1.1 200 OK");
    // Required from the next handshake on, for a client holding a session from before too:
    // a change of the client certificate settings resumes no earlier session.
    std::fs::write(&path, with("required", &ca_pem)).unwrap();
    let notes = r.reload().unwrap().join("\n");
    assert!(
        notes.contains("1 TLS certificates in force, client certificates required"),
        "{notes}"
    );
    for cfg in [mtls_client(&server_ca, None, v13), anonymous] {
        let got = https_get(addr, cfg, "a.test").await;
        assert!(
            got.as_ref().map_or(true, |(s, _, _)| s.is_empty()),
            "{got:?}"
        );
    }
    assert_eq!(metric_reaches(&r, CERT_FAILED, 3.0).await, 3.0);
    let cfg = mtls_client(&server_ca, good(), v13);
    assert_eq!(
        https_get(addr, cfg, "a.test").await.unwrap().0,
        "HTTP/1.1 200 OK"
    );
}

#[tokio::test]
async fn client_certificate_settings_are_checked_naming_the_field_and_the_file() {
    let dir = TempDir::new("bal-mtlsconf").unwrap();
    let ca = Ca::new();
    let (sc, sk, _) = ca.leaf(&dir, "a", &["a.test"]);
    let be = http_backend("web").await;
    let path = dir.path().join("balance.toml");
    let start_err = |tables: String| {
        let text = config_text("l7", "{ kind = \"rr\" }", "", &tables, &[&be], &dir);
        std::fs::write(&path, &text).unwrap();
        let cfg = Config::load(&path).map_err(|e| e.to_string())?;
        let rt = tokio::runtime::Handle::current();
        let path = path.clone();
        std::thread::spawn(move || rt.block_on(netsched_balance::start(cfg, &path)).err())
            .join()
            .unwrap()
            .map(|e| e.to_string())
            .ok_or_else(|| "started".to_string())
    };
    let entry = tls_table(&[(&sc, &sk, &["a.test"])]);
    for mode in ["optional", "required"] {
        let e = start_err(format!("[tls]\nclient_certificate = \"{mode}\"\n{entry}")).unwrap();
        assert!(
            e.contains(&format!(
                "tls.client_certificate: \"{mode}\" needs client_ca"
            )),
            "{e}"
        );
    }
    let e = start_err(format!(
        "[tls]\nclient_certificate = \"sometimes\"\n{entry}"
    ))
    .unwrap_err();
    assert!(e.contains("sometimes"), "{e}");
    // A client_subject rule with no client certificate asked for could never match.
    let class = "[[class]]\nname = \"a\"\nclient_subject = \"client-a\"\n[[class]]\nname = \"b\"\n";
    for tls in [
        String::new(),
        format!("[tls]\nclient_certificate = \"off\"\n{entry}"),
    ] {
        let e = start_err(format!("{tls}{class}")).unwrap_err();
        assert!(
            e.contains("class[0] (\"a\").client_subject: no client certificate is asked for"),
            "{e}"
        );
    }
    let garbage = dir
        .create_file(
            "garbage.pem",
            b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
    for (file, why) in [
        (dir.path().join("none.pem"), "none.pem"),
        (sk.clone(), "no PEM CERTIFICATE block"),
        (garbage, "garbage.pem"),
    ] {
        let e = start_err(mtls_table("required", &file, &sc, &sk)).unwrap();
        assert!(e.contains("tls.client_ca") && e.contains(why), "{e}");
        assert!(e.contains(&file.display().to_string()), "{e}");
    }
    // Off, a CA given: served as before (the CA is still read and checked).
    let ca_pem = dir.create_file("ca.pem", ca.cert.pem().as_bytes()).unwrap();
    assert_eq!(
        start_err(mtls_table("off", &ca_pem, &sc, &sk)).unwrap_err(),
        "started"
    );
}

/// `accept_proxy`: the header first, then the handshake on the same connection; the backend
/// sees the header's client. A listed client that starts with its ClientHello is refused.
#[tokio::test]
async fn a_proxy_protocol_header_comes_before_the_handshake() {
    use netsched_balance::config::SendProxy;
    use netsched_balance::proxy_proto::header;
    let dir = TempDir::new("bal-tls-pp").unwrap();
    let ca = Ca::new();
    let (c, k, _) = ca.leaf(&dir, "a", &["a.test"]);
    let be = common::header_echo_backend("echo").await;
    let text = config_text(
        "l7",
        "{ kind = \"rr\" }",
        "admin = \"127.0.0.1:0\"\naccept_proxy = [\"127.0.0.1\"]\nforwarded = \"both\"",
        &tls_table(&[(&c, &k, &["a.test"])]),
        &[&be],
        &dir,
    );
    let r = start(&text, &dir).await;
    let addr = r.listen[0];
    for v in [SendProxy::V1, SendProxy::V2] {
        let first = header(v, "203.0.113.9:4711".parse().unwrap(), addr);
        let (cfg, _) = client(Some(ca.roots()), &rustls::version::TLS13);
        let (status, body, _) = https_get_after(addr, cfg, "a.test", &first)
            .await
            .unwrap_or_else(|e| panic!("{v:?}: {e}"));
        assert_eq!(status, "HTTP/1.1 200 OK", "{v:?}");
        assert!(body.contains("x-forwarded-for: 203.0.113.9\n"), "{body}");
        assert!(body.contains("for=203.0.113.9;proto=https"), "{body}");
    }
    let (cfg, _) = client(Some(ca.roots()), &rustls::version::TLS13);
    assert!(https_get(addr, cfg, "a.test").await.is_err());
    let m = common::metrics_text(&r);
    assert_eq!(
        common::metric(
            &m,
            "netsched_balance_refused_total{reason=\"proxy_header\"}"
        ),
        1.0,
        "{m}"
    );
}

/// What the clients of [`certificates_swapped_every_second_under_load_fail_nothing`] saw.
/// `reloads` counts twice per reload, odd while one is under way (a seqlock): a handshake that
/// began and ended with the same even count ran wholly under the certificate of that count.
struct Swaps {
    reloads: std::sync::atomic::AtomicUsize,
    stop: std::sync::atomic::AtomicBool,
    /// The two certificates, in force in turn: the first before any reload.
    ders: [Vec<u8>; 2],
    /// Per count of reloads done: handshakes wholly under it.
    clean: Mutex<Vec<u64>>,
    /// Failed handshakes and requests, a served certificate not the one in force.
    failures: Mutex<Vec<String>>,
    /// Handshakes that saw each certificate; resumed ones; requests answered 200.
    seen: [std::sync::atomic::AtomicU64; 2],
    resumed: std::sync::atomic::AtomicU64,
    served: std::sync::atomic::AtomicU64,
}

impl Swaps {
    fn count(&self) -> usize {
        self.reloads.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn fail(&self, what: String) {
        self.failures.lock().unwrap().push(what);
    }

    /// One handshake seen: its leaf certificate, the reload counts before and after it.
    fn saw(&self, leaf: &[u8], before: usize, after: usize) {
        use std::sync::atomic::Ordering::SeqCst;
        let Some(which) = self.ders.iter().position(|d| d == leaf) else {
            return self.fail("a certificate neither of the two".into());
        };
        self.seen[which].fetch_add(1, SeqCst);
        if before == after && before.is_multiple_of(2) {
            let done = before / 2;
            if which != done % 2 {
                self.fail(format!("after {done} reloads, the other certificate"));
            }
            let mut clean = self.clean.lock().unwrap();
            if clean.len() <= done {
                clean.resize(done + 1, 0);
            }
            clean[done] += 1;
        }
    }

    fn clean_under(&self, done: usize) -> u64 {
        self.clean.lock().unwrap().get(done).copied().unwrap_or(0)
    }
}

/// Connections one after another until the stop: each a handshake (full, or resuming a
/// session when `cfg` keeps them), one request, closed.
async fn churn(addr: SocketAddr, cfg: Arc<rustls::ClientConfig>, w: Arc<Swaps>) {
    use std::sync::atomic::Ordering::SeqCst;
    let get = "GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n";
    while !w.stop.load(SeqCst) {
        let before = w.count();
        let mut s = match tls_connect(addr, cfg.clone(), "a.test", b"").await {
            Ok(s) => s,
            Err(e) => {
                w.fail(format!("handshake: {e}"));
                continue;
            }
        };
        let after = w.count();
        let conn = s.get_ref().1;
        // A resumed session brings back the certificate of the handshake that made it.
        if conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
            w.resumed.fetch_add(1, SeqCst);
        } else {
            match conn.peer_certificates().and_then(|c| c.first()) {
                Some(leaf) => w.saw(leaf, before, after),
                None => w.fail("no server certificate".into()),
            }
        }
        match common::exchange(&mut s, get, false).await {
            Ok((status, _, body)) if status == "http/1.1 200 ok" && body == "web" => {
                w.served.fetch_add(1, SeqCst);
            }
            other => w.fail(format!("request: {other:?}")),
        }
    }
}

/// A request every 100 ms on one kept-alive connection until the stop, and one more after it
/// (so after the last reload); how many, or the first that failed.
async fn kept_alive(
    mut s: tokio_rustls::client::TlsStream<TcpStream>,
    w: Arc<Swaps>,
) -> Result<u64, String> {
    let get = "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n";
    for n in 1.. {
        let last = w.stop.load(std::sync::atomic::Ordering::SeqCst);
        let (status, _, body) = common::exchange(&mut s, get, false)
            .await
            .map_err(|e| format!("request {n}, {} reloads done: {e}", w.count() / 2))?;
        if status != "http/1.1 200 ok" || body != "web" {
            return Err(format!("request {n}: {status} {body:?}"));
        }
        if last {
            return Ok(n);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    unreachable!()
}

/// Issue #38: a certificate swap every second under load. Two certificates for `a.test` (an
/// ECDSA P-256 key, a P-384 one), the configuration file rewritten to name one, then the
/// other, and reloaded [`RELOADS`] times a second apart, in turn by SIGHUP's reload
/// (`Running::reload`) and `ctl reload`; meanwhile four clients open connection after
/// connection (TLS 1.3 and 1.2, full handshakes and resumed ones), and three kept-alive
/// connections opened before the first swap send a request every 100 ms. No handshake fails,
/// at a client or in `tls_handshakes_total`; every request is answered 200; every kept-alive
/// connection serves a request after the last swap; each full handshake wholly between two
/// reloads got the certificate then in force, and every configuration had one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_swapped_every_second_under_load_fail_nothing() {
    use std::sync::atomic::Ordering::SeqCst;
    let dir = TempDir::new("bal-tlsswap").unwrap();
    let ca = Ca::new();
    let (c0, k0, der0) = ca.leaf(&dir, "p256", &["a.test"]);
    let p384 = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384).unwrap();
    let (c1, k1, der1) = ca.leaf_with(&dir, "p384", &["a.test"], None, p384);
    let be = http_backend("web").await;
    let with = |c: &PathBuf, k: &PathBuf| {
        let table = tls_table(&[(c, k, &["a.test"])]);
        let top = "admin = \"127.0.0.1:0\"";
        config_text("l7", "{ kind = \"rr\" }", top, &table, &[&be], &dir)
    };
    let configs = [with(&c0, &k0), with(&c1, &k1)];
    let r = start(&configs[0], &dir).await;
    let addr = r.listen[0];
    let w = Arc::new(Swaps {
        reloads: 0.into(),
        stop: false.into(),
        ders: [der0, der1],
        clean: Mutex::new(Vec::new()),
        failures: Mutex::new(Vec::new()),
        seen: [0.into(), 0.into()],
        resumed: 0.into(),
        served: 0.into(),
    });
    let (v13, v12) = (&rustls::version::TLS13, &rustls::version::TLS12);
    let mut kept = Vec::new();
    for v in [v13, v12, v13] {
        let cfg = Arc::new(client(Some(ca.roots()), v).0);
        let s = tls_connect(addr, cfg, "a.test", b"").await.unwrap();
        kept.push(tokio::spawn(kept_alive(s, w.clone())));
    }
    let mut clients = Vec::new();
    for (v, resume) in [(v13, false), (v12, false), (v13, true), (v12, true)] {
        let (mut cfg, _) = client(Some(ca.roots()), v);
        if !resume {
            cfg.resumption = rustls::client::Resumption::disabled();
        }
        clients.push(tokio::spawn(churn(addr, Arc::new(cfg), w.clone())));
    }
    swap_certificates(&r, &configs, &w, &dir).await;
    w.stop.store(true, SeqCst);
    for c in clients {
        c.await.unwrap();
    }
    for (i, k) in kept.into_iter().enumerate() {
        let n = k.await.unwrap();
        assert!(n.is_ok(), "kept-alive connection {i} failed: {n:?}");
    }
    let failures = w.failures.lock().unwrap().clone();
    let first = &failures[..failures.len().min(10)];
    assert!(
        failures.is_empty(),
        "{} failed, first: {first:?}",
        failures.len()
    );
    let seen = w.seen.each_ref().map(|n| n.load(SeqCst));
    assert!(
        seen[0] > 0 && seen[1] > 0,
        "handshakes per certificate: {seen:?}"
    );
    assert!(w.resumed.load(SeqCst) > 0, "no session resumed");
    let m = tokio::task::block_in_place(|| common::metrics_text(&r));
    let prefix = "netsched_balance_tls_handshakes_total{";
    for l in m.lines().filter(|l| l.starts_with(prefix)) {
        assert!(l.contains("reason=\"ok\"") || l.ends_with(" 0"), "{l}\n{m}");
    }
    let served = w.served.load(SeqCst) as f64;
    assert!(
        common::metric(&m, OK) >= served + 3.0,
        "{served} served\n{m}"
    );
}

/// Reloads of the certificate swap test, a second apart: the file written with the other
/// configuration, then SIGHUP's reload and `ctl reload` in turn, each answered ok. A reload
/// waits for one full handshake under the configuration it replaces.
async fn swap_certificates(
    r: &netsched_balance::Running,
    configs: &[String; 2],
    w: &Swaps,
    dir: &TempDir,
) {
    use std::sync::atomic::Ordering::SeqCst;
    let path = dir.path().join("balance.toml");
    for i in 1..=RELOADS {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        let served = common::eventually(|| w.clean_under(i - 1) > 0).await;
        assert!(served, "no full handshake after {} reloads", i - 1);
        std::fs::write(&path, &configs[i % 2]).unwrap();
        w.reloads.fetch_add(1, SeqCst);
        let notes = tokio::task::block_in_place(|| {
            if i % 2 == 1 {
                r.reload().map(|n| n.join("\n")).map_err(|e| e.to_string())
            } else {
                netsched_balance::control::request(&r.control_socket, "reload")
                    .map_err(|e| e.to_string())
            }
        });
        w.reloads.fetch_add(1, SeqCst);
        let notes = notes.unwrap_or_else(|e| panic!("reload {i}: {e}"));
        assert!(
            notes.contains("1 TLS certificates in force"),
            "reload {i}: {notes}"
        );
    }
    let served = common::eventually(|| w.clean_under(RELOADS) > 0).await;
    assert!(served, "no full handshake after the last reload");
}

/// Reloads of [`certificates_swapped_every_second_under_load_fail_nothing`].
const RELOADS: usize = 9;
const OK: &str = "netsched_balance_tls_handshakes_total{reason=\"ok\"}";

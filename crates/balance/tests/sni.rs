//! L4 SNI routing (`route = "sni"`) on loopback, no privileges needed: three TLS servers of
//! our own (rustls, each its own key), the balancer in mode l4 holding no certificate at all.
//! A client completes its handshake with the server the name routes to and sees that server's
//! certificate, which proves the balancer passed TLS through untouched; the ClientHello bytes
//! the balancer read reach the server unchanged, with both relays. Refusals (no route, not
//! TLS, a ClientHello that stalls past `timeouts.client`) close the connection and are
//! counted; a reload moves names between routes.

mod common;
use common::*;
use netsched_testbed::TempDir;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// Every name a test client asks for: each server's certificate covers them all, so a
/// handshake completes with whichever server is reached and the certificate tells which.
const NAMES: [&str; 5] = [
    "a.example",
    "b.example",
    "x.w.example",
    "other.example",
    "moved.example",
];

#[allow(deprecated)]
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A TLS server that answers each line with `<name> <line>`; its certificate's DER.
struct TlsBackend {
    name: &'static str,
    addr: SocketAddr,
    der: CertificateDer<'static>,
}

async fn tls_backend(name: &'static str) -> TlsBackend {
    let key = rcgen::KeyPair::generate().unwrap();
    // And 127.0.0.1, an IP subjectAltName, for a client that sends no server_name.
    let names: Vec<String> = NAMES
        .iter()
        .chain(&["127.0.0.1"])
        .map(|n| n.to_string())
        .collect();
    let cert = rcgen::CertificateParams::new(names)
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let der = cert.der().clone();
    let pk = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let sc = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![der.clone()], pk)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(sc));
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else { return };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(s).await else {
                    return;
                };
                let mut r = BufReader::new(tls);
                let mut line = String::new();
                while matches!(r.read_line(&mut line).await, Ok(n) if n > 0) {
                    let out = format!("{name} {line}");
                    if r.get_mut().write_all(out.as_bytes()).await.is_err() {
                        return;
                    }
                    line.clear();
                }
            });
        }
    });
    TlsBackend { name, addr, der }
}

type Tls = tokio_rustls::client::TlsStream<TcpStream>;

/// A TLS connection through the balancer asking for `sni`, trusting every backend's
/// certificate; `None` when the connection is refused (the handshake never completes).
async fn open_tls(lb: SocketAddr, sni: &str, trust: &[&TlsBackend]) -> Option<Tls> {
    let mut roots = rustls::RootCertStore::empty();
    for b in trust {
        roots.add(b.der.clone()).unwrap();
    }
    let cc = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = TcpStream::connect(lb).await.unwrap();
    let name = ServerName::try_from(sni.to_string()).unwrap();
    let connect = tokio_rustls::TlsConnector::from(Arc::new(cc)).connect(name, tcp);
    tokio::time::timeout(PATIENCE, connect).await.unwrap().ok()
}

/// [`open_tls`], then the certificate presented and the server's answer to one line.
async fn through(
    lb: SocketAddr,
    sni: &str,
    trust: &[&TlsBackend],
) -> Option<(CertificateDer<'static>, String)> {
    let tls = open_tls(lb, sni, trust).await?;
    let cert = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
    let mut r = BufReader::new(tls);
    // A line larger than a relay chunk in both directions.
    let line = "p".repeat(70_000);
    r.get_mut()
        .write_all(format!("{line}\n").as_bytes())
        .await
        .unwrap();
    let mut back = String::new();
    tokio::time::timeout(PATIENCE, r.read_line(&mut back))
        .await
        .unwrap()
        .unwrap();
    let (who, echoed) = back.trim_end().split_once(' ').unwrap();
    assert_eq!(echoed, line);
    Some((cert, who.to_string()))
}

fn config(relay: &str, servers: &[(&TlsBackend, &str)], dir: &TempDir) -> String {
    let mut t = format!(
        "mode = \"l4\"\nlisten = [\"127.0.0.1:0\"]\nalgorithm = \"wlc\"\nrelay = \"{relay}\"\n\
         route = \"sni\"\nadmin = \"127.0.0.1:0\"\ncontrol_socket = \"{}\"\n\
         [timeouts]\nclient = \"30s\"\n",
        dir.path().join("ctl.sock").display()
    );
    for (b, sni) in servers {
        t += &format!(
            "[[server]]\nname = \"{}\"\naddr = \"{}\"\n{sni}\n",
            b.name, b.addr
        );
    }
    t
}

fn refused(r: &netsched_balance::Running, reason: &str) -> f64 {
    metric(
        &metrics_text(r),
        &format!("netsched_balance_refused_total{{reason=\"{reason}\"}}"),
    )
}

/// Each name reaches its server (exact, wildcard, default), end to end with that server's
/// certificate; both relays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_reach_their_servers_through_both_relays() {
    let (a, b, c) = (
        tls_backend("a").await,
        tls_backend("b").await,
        tls_backend("c").await,
    );
    let all = [&a, &b, &c];
    for relay in ["splice", "copy"] {
        let dir = TempDir::new("bal-sni").unwrap();
        let servers = [
            (&a, "sni = [\"a.example\"]"),
            (&b, "sni = [\"b.example\", \"*.w.example\"]"),
            (&c, ""),
        ];
        let r = start(&config(relay, &servers, &dir), &dir).await;
        for (name, want) in [
            ("a.example", &a),
            ("b.example", &b),
            ("x.w.example", &b),
            ("other.example", &c),
            ("A.EXAMPLE", &a),
        ] {
            for _ in 0..3 {
                let (cert, who) = through(r.listen[0], name, &all).await.unwrap();
                assert_eq!(
                    (who.as_str(), &cert),
                    (want.name, &want.der),
                    "{relay} {name}"
                );
            }
        }
        for s in ["a", "b", "c"] {
            assert!(eventually(|| row(&r, s).active == 0).await, "{relay} {s}");
        }
        r.begin_stop();
    }
}

/// Without a default route an unknown name is refused (`sni_no_route`); a reload moves a
/// name from one route to another and brings a default route back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_route_is_refused_and_a_reload_moves_names() {
    let (a, b, c) = (
        tls_backend("a").await,
        tls_backend("b").await,
        tls_backend("c").await,
    );
    let all = [&a, &b, &c];
    let dir = TempDir::new("bal-sni-reload").unwrap();
    let first = [
        (&a, "sni = [\"a.example\"]"),
        (&b, "sni = [\"b.example\", \"moved.example\"]"),
    ];
    let r = start(&config("splice", &first, &dir), &dir).await;
    assert_eq!(
        through(r.listen[0], "moved.example", &all).await.unwrap().1,
        "b"
    );
    assert!(through(r.listen[0], "other.example", &all).await.is_none());
    assert_eq!(refused(&r, "sni_no_route"), 1.0);
    // An IP address as the name: no server_name at all, so the default route; none here.
    assert!(through(r.listen[0], "127.0.0.1", &all).await.is_none());
    assert_eq!(refused(&r, "sni_no_route"), 2.0);
    let second = [
        (&a, "sni = [\"a.example\", \"moved.example\"]"),
        (&b, "sni = [\"b.example\"]"),
        (&c, ""),
    ];
    std::fs::write(
        dir.path().join("balance.toml"),
        config("splice", &second, &dir),
    )
    .unwrap();
    let notes = r.reload().unwrap();
    assert!(
        notes.iter().any(|n| n.contains("server c added")),
        "{notes:?}"
    );
    for (name, want) in [
        ("moved.example", "a"),
        ("a.example", "a"),
        ("b.example", "b"),
        ("other.example", "c"),
        ("127.0.0.1", "c"),
    ] {
        assert_eq!(
            through(r.listen[0], name, &all).await.unwrap().1,
            want,
            "{name}"
        );
    }
    // `ctl add-server --sni`: a server joins a route of its own.
    let d = tls_backend("d").await;
    r.service
        .add_server(
            &netsched_balance::config::ServerConf {
                name: "d".into(),
                addr: d.addr,
                weight: 1,
                maxconn: None,
                send_proxy: None,
                sni: vec!["x.w.example".into()],
            },
            false,
        )
        .unwrap();
    let all = [&a, &b, &c, &d];
    assert_eq!(
        through(r.listen[0], "x.w.example", &all).await.unwrap().1,
        "d"
    );
    // A name another route serves is refused, naming it (the same list joins that route).
    let e = r
        .service
        .add_server(
            &netsched_balance::config::ServerConf {
                name: "e".into(),
                addr: "127.0.0.1:9".parse().unwrap(),
                weight: 1,
                maxconn: None,
                send_proxy: None,
                sni: vec!["b.example".into(), "new.example".into()],
            },
            false,
        )
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("b.example") && e.contains("another route"),
        "{e}"
    );
    r.begin_stop();
}

/// The first bytes a rustls client sends for `name`.
fn client_hello(name: &str) -> Vec<u8> {
    let cc = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = ServerName::try_from(name.to_string()).unwrap();
    let mut c = rustls::ClientConnection::new(Arc::new(cc), name).unwrap();
    let mut out = Vec::new();
    while c.wants_write() {
        c.write_tls(&mut out).unwrap();
    }
    out
}

/// Read until the balancer closes; how long that took from `since`.
async fn closed_after(s: &mut TcpStream, since: Instant) -> Duration {
    let mut rest = Vec::new();
    tokio::time::timeout(PATIENCE, s.read_to_end(&mut rest))
        .await
        .expect("closed within PATIENCE")
        .ok();
    assert!(rest.is_empty(), "{rest:?}");
    since.elapsed()
}

/// Half a ClientHello and silence: closed once `timeouts.client` (1 s) has passed, never
/// before, counted `client_timeout`; bytes that are not TLS, and a ClientHello over the bound:
/// closed at once, each counted with its reason; no server saw any of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_foreign_and_oversized_hellos_are_closed_and_counted() {
    let a = tls_backend("a").await;
    let dir = TempDir::new("bal-sni-stall").unwrap();
    let text = config("splice", &[(&a, "")], &dir).replace("\"30s\"", "\"1s\"");
    let r = start(&text, &dir).await;
    let hello = client_hello("a.example");
    // Taken before the connection exists: the balancer's clock starts later.
    let since = Instant::now();
    let mut s = TcpStream::connect(r.listen[0]).await.unwrap();
    s.write_all(&hello[..hello.len() / 2]).await.unwrap();
    let took = closed_after(&mut s, since).await;
    assert!(took >= Duration::from_millis(950), "{took:?}");
    assert!(eventually(|| refused(&r, "client_timeout") == 1.0).await);

    let mut s = TcpStream::connect(r.listen[0]).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n")
        .await
        .unwrap();
    closed_after(&mut s, Instant::now()).await;
    assert!(eventually(|| refused(&r, "sni_not_tls") == 1.0).await);

    // A handshake record announcing a ClientHello of 16 KiB.
    let mut s = TcpStream::connect(r.listen[0]).await.unwrap();
    s.write_all(&[22, 3, 1, 0x40, 0, 1, 0, 0x40, 0])
        .await
        .unwrap();
    closed_after(&mut s, Instant::now()).await;
    assert!(eventually(|| refused(&r, "sni_too_long") == 1.0).await);
    let m = metrics_text(&r);
    assert_eq!(
        metric(&m, "netsched_balance_requests_total{backend=\"a\"}"),
        0.0
    );
    r.begin_stop();
}

/// Routes share the maxconn queue: a connection for a full route waits for its own server
/// while another route's connections go through; the slot its server frees is its.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_route_queues_without_holding_up_the_others() {
    let (a, b) = (tls_backend("a").await, tls_backend("b").await);
    let dir = TempDir::new("bal-sni-queue").unwrap();
    // b unlimited: its connections one after the other never wait for each other's end.
    let servers = [(&a, "sni = [\"a.example\"]"), (&b, "maxconn = 0")];
    let text = config("splice", &servers, &dir).replace(
        "[timeouts]\n",
        "[defaults]\nmaxconn = 1\n[timeouts]\nqueue = \"60s\"\n",
    );
    let r = start(&text, &dir).await;
    let lb = r.listen[0];
    let first = open_tls(lb, "a.example", &[&a, &b]).await.unwrap();
    let (ta, tb) = (a.der.clone(), b.der.clone());
    let waiting = tokio::spawn(async move {
        let a = TlsBackend {
            name: "a",
            addr: lb,
            der: ta,
        };
        let b = TlsBackend {
            name: "b",
            addr: lb,
            der: tb,
        };
        through(lb, "a.example", &[&a, &b]).await
    });
    let queued = || metric(&metrics_text(&r), "netsched_balance_queue_length") == 1.0;
    assert!(eventually(queued).await);
    for _ in 0..3 {
        assert_eq!(
            through(lb, "other.example", &[&a, &b]).await.unwrap().1,
            "b"
        );
    }
    assert!(!waiting.is_finished());
    drop(first);
    let (cert, who) = waiting.await.unwrap().unwrap();
    assert_eq!((who.as_str(), &cert), ("a", &a.der));
    r.begin_stop();
}

//! The PROXY protocol both ways (proxy_proto.rs; docs/balance.md, "Client address to
//! backends").
//!
//! Receiving (`accept_proxy`, no privileges, loopback): a client on 127.0.0.1, listed, sends a
//! v1 and a v2 header naming 203.0.113.9, in the same write as its request, and the backend
//! sees that address in X-Forwarded-For and the access log shows it; a listed client without a
//! header (bytes of a request, or nothing until `timeouts.header`) is closed unanswered and
//! counted `refused{reason="proxy_header"}`; a client not listed that sends `PROXY TCP4 ...`
//! gets 400, its header never trusted, until a reload lists it. Class rules by source network
//! see the header's client. In L4 the header's addresses reach a `send_proxy`
//! server, and the bytes after the header reach it unchanged. When Debian's HAProxy is
//! installed, HAProxy (`send-proxy-v2`) in front of the balancer: the backend sees the real
//! client, 127.0.0.2 (skipped with the reason otherwise).
//!
//! Sending: `send_proxy` on reload (no privileges), and a root test: `send_proxy = "v1"` and
//! `"v2"` against Debian's nginx listening with `proxy_protocol`, in a network namespace of our
//! own, in both modes. nginx answers with the addresses the PROXY header gave it and its
//! connection serial, so the test sees the client's address and port arrive (IPv4, and IPv6
//! where the namespace has `::1`), the address it connected to, and (L7) that no backend
//! connection carries more than one request. The HTTP health checks pass only if nginx accepts
//! their headers (v1 the check connection's own addresses, v2 LOCAL). Skips with a reason
//! without root; everything it starts is killed by pid and the namespace deleted when the
//! testbed drops, also on failure.

mod common;
mod nginx;

use netsched_testbed::{privileged_test_allowed, TempDir, Testbed};
use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const PATIENCE: Duration = Duration::from_secs(20);
/// The client's source address: on `lo` like every 127/8 address, but not the balancer's.
const CLIENT: &str = "127.0.0.2";

/// nginx: `v1` on :8091 and `v2` on :8092, both `proxy_protocol`, answering
/// `<name> <client addr> <client port> <server addr> <server port> <peer> <connection>`.
fn nginx_conf(dir: &Path) -> String {
    let d = dir.join("pp");
    std::fs::create_dir_all(d.join("tmp")).unwrap();
    let server = |name: &str, port: u16| {
        format!(
            " server {{ listen 127.0.0.1:{port} proxy_protocol; location / {{ return 200 \"{name} \
$proxy_protocol_addr $proxy_protocol_port $proxy_protocol_server_addr \
$proxy_protocol_server_port $remote_addr $connection\"; }} }}\n"
        )
    };
    format!(
        "master_process off;\ndaemon off;\nworker_processes 1;\nuser root root;\npid {d}/nginx.pid;\n\
error_log {d}/error.log warn;\nevents {{ worker_connections 256; }}\nhttp {{\n access_log off;\n\
 client_body_temp_path {d}/tmp/body;\n proxy_temp_path {d}/tmp/proxy;\n fastcgi_temp_path {d}/tmp/fastcgi;\n\
 uwsgi_temp_path {d}/tmp/uwsgi;\n scgi_temp_path {d}/tmp/scgi;\n{}{}}}\n",
        server("v1", 8091),
        server("v2", 8092),
        d = d.display(),
    )
}

fn balancer_conf(dir: &Path, mode: &str, port: u16, v6: bool) -> String {
    let listen = if v6 {
        format!("\"127.0.0.1:{port}\", \"[::1]:{port}\"")
    } else {
        format!("\"127.0.0.1:{port}\"")
    };
    let health = if mode == "l7" {
        "[health]\nkind = \"http\"\ninterval = \"100ms\"\nrise = 1\nfall = 1\ntimeout = \"1s\"\n"
    } else {
        ""
    };
    format!(
        "mode = \"{mode}\"\nlisten = [{listen}]\nalgorithm = {{ kind = \"rr\" }}\n\
control_socket = \"{}\"\n{health}\
[[server]]\nname = \"v1\"\naddr = \"127.0.0.1:8091\"\nsend_proxy = \"v1\"\n\
[[server]]\nname = \"v2\"\naddr = \"127.0.0.1:8092\"\nsend_proxy = \"v2\"\n",
        dir.join(format!("{mode}.sock")).display()
    )
}

/// A connection to `to`: from [`CLIENT`] over IPv4, from `::1` over IPv6.
async fn connect(to: SocketAddr) -> std::io::Result<TcpStream> {
    if to.is_ipv6() {
        return TcpStream::connect(to).await;
    }
    let s = TcpSocket::new_v4()?;
    s.bind(format!("{CLIENT}:0").parse().unwrap())?;
    s.connect(to).await
}

/// One request on `s`, its response read by its Content-Length: (status, body).
async fn request(s: &mut TcpStream, close: bool) -> (u16, String) {
    let req = format!(
        "GET / HTTP/1.1\r\nHost: pp.test\r\n{}\r\n",
        if close { "Connection: close\r\n" } else { "" }
    );
    if s.write_all(req.as_bytes()).await.is_err() {
        return (0, String::new());
    }
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                let status = head.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
                let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).to_string();
                return (status, body);
            }
        }
        if buf.len() > 64 * 1024 {
            return (0, String::new());
        }
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return (0, String::new()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// What nginx said of one request, checked against the connection it came on.
fn check_answer(body: &str, client: SocketAddr, frontend: SocketAddr) -> (String, String) {
    let f: Vec<&str> = body.split(' ').collect();
    assert_eq!(f.len(), 7, "{body}");
    assert_eq!(f[1], client.ip().to_string(), "client address: {body}");
    assert_eq!(f[2], client.port().to_string(), "client port: {body}");
    assert_eq!(f[3], frontend.ip().to_string(), "destination: {body}");
    assert_eq!(
        f[4],
        frontend.port().to_string(),
        "destination port: {body}"
    );
    assert_eq!(f[5], "127.0.0.1", "the real peer is the balancer: {body}");
    (f[0].to_string(), f[6].to_string())
}

async fn exercise(l7: SocketAddr, l4: SocketAddr) {
    // Up: both servers answer through the L7 balancer (their checks pass).
    let end = Instant::now() + PATIENCE;
    let mut seen = HashSet::new();
    while seen.len() < 2 && Instant::now() < end {
        if let Ok(mut s) = connect(l7).await {
            let (status, body) = request(&mut s, true).await;
            if status == 200 {
                seen.insert(body.split(' ').next().unwrap_or("").to_string());
                continue;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(seen.len(), 2, "both servers up through l7: {seen:?}");

    // L7: 8 requests on one keep-alive client connection; each on a backend connection of
    // its own (nginx's serial differs), each announcing this client.
    let mut s = connect(l7).await.unwrap();
    let me = s.local_addr().unwrap();
    let (mut names, mut serials) = (HashSet::new(), HashSet::new());
    for _ in 0..8 {
        let (status, body) = request(&mut s, false).await;
        assert_eq!(status, 200, "{body}");
        let (name, serial) = check_answer(&body, me, l7);
        names.insert(name);
        assert!(
            serials.insert(serial),
            "a backend connection reused: {body}"
        );
    }
    assert_eq!(names.len(), 2, "{names:?}");

    // L4: each client connection announced, through both versions.
    let mut names = HashSet::new();
    for _ in 0..4 {
        let mut s = connect(l4).await.unwrap();
        let me = s.local_addr().unwrap();
        let (status, body) = request(&mut s, true).await;
        assert_eq!(status, 200, "{body}");
        names.insert(check_answer(&body, me, l4).0);
    }
    assert_eq!(names.len(), 2, "{names:?}");
}

#[test]
fn send_proxy_v1_and_v2_reach_nginx_in_both_modes() {
    if !privileged_test_allowed("send_proxy_v1_and_v2_reach_nginx_in_both_modes") {
        return;
    }
    let mut tb = Testbed::new("bpp").unwrap();
    let ns = tb.add_ns("pp").unwrap();
    let dir = TempDir::new("bal-proxy-proto").unwrap();
    let conf = dir.path().join("nginx.conf");
    std::fs::write(&conf, nginx_conf(dir.path())).unwrap();
    tb.spawn(
        &ns,
        "nginx",
        &["-c", conf.to_str().unwrap(), "-e", "stderr"],
        "nginx",
    )
    .unwrap();
    // IPv6 clients too (TCP6, 0x21) where the namespace's `lo` has `::1`.
    let v6 = tb
        .exec(&ns, "ip", &["-6", "addr", "show", "dev", "lo"])
        .is_ok_and(|out| out.contains("::1"));
    if !v6 {
        eprintln!("no ::1 in the namespace: IPv4 clients only");
    }
    for (mode, port) in [("l7", 8080), ("l4", 8084)] {
        let cfg = dir.path().join(format!("{mode}.toml"));
        std::fs::write(&cfg, balancer_conf(dir.path(), mode, port, v6)).unwrap();
        nginx::start_balancer(&mut tb, &ns, &cfg, &dir.path().join(format!("{mode}.log")));
    }
    let ns2 = ns.clone();
    let r = std::thread::spawn(move || {
        netsched_testbed::enter_netns(&ns2).expect("setns");
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                exercise(
                    "127.0.0.1:8080".parse().unwrap(),
                    "127.0.0.1:8084".parse().unwrap(),
                )
                .await;
                if v6 {
                    exercise("[::1]:8080".parse().unwrap(), "[::1]:8084".parse().unwrap()).await;
                }
            })
    })
    .join();
    if r.is_err() {
        for f in ["l7.log", "l4.log", "pp/error.log"] {
            let text = std::fs::read_to_string(dir.path().join(f)).unwrap_or_default();
            let tail: String = text
                .chars()
                .rev()
                .take(4000)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            eprintln!("--- {f}:\n{tail}");
        }
        panic!("see above");
    }
}

/// A SIGHUP-style reload that changes a server's `send_proxy` replaces the server (its new
/// connections carry the new header), and says so; one that keeps it leaves the server be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_changes_send_proxy_replaces_the_server() {
    use netsched_balance::config::{Config, SendProxy};
    let echo = common::header_echo_backend("s").await;
    let dir = TempDir::new("bal-pp-reload").unwrap();
    let text = common::config_text("l7", "{ kind = \"rr\" }", "", "", &[&echo], &dir);
    let r = common::start(&text, &dir).await;
    let targets = |r: &netsched_balance::Running| {
        r.service
            .check_targets()
            .into_iter()
            .map(|(_, _, v)| v)
            .collect::<Vec<_>>()
    };
    assert_eq!(targets(&r), [None]);
    let with = format!("{text}send_proxy = \"v2\"\n");
    let notes = r.service.reload(&Config::parse(&with).unwrap()).unwrap();
    assert!(
        notes.iter().any(|n| n == "server s send_proxy v2"),
        "{notes:?}"
    );
    assert_eq!(targets(&r), [Some(SendProxy::V2)]);
    let notes = r.service.reload(&Config::parse(&with).unwrap()).unwrap();
    assert!(!notes.iter().any(|n| n.contains("send_proxy")), "{notes:?}");
    let notes = r.service.reload(&Config::parse(&text).unwrap()).unwrap();
    assert!(
        notes.iter().any(|n| n == "server s send_proxy none"),
        "{notes:?}"
    );
    assert_eq!(targets(&r), [None]);
}

// ---------------------------------------------------------------------------------------------
// Receiving: `accept_proxy`.

/// The address the headers of these tests name as the client.
const NAMED: &str = "203.0.113.9";

/// An L7 balancer in front of a header-echo backend: `accept_proxy` as given, the access log
/// in `dir`, a short `timeouts.header`.
async fn accepting(
    accept: &str,
    dir: &TempDir,
) -> (
    netsched_balance::Running,
    common::Backend,
    std::path::PathBuf,
) {
    let echo = common::header_echo_backend("s").await;
    let log = dir.path().join("access.log");
    let top = format!(
        "admin = \"127.0.0.1:0\"\naccept_proxy = {accept}\naccess_log = \"{}\"",
        log.display()
    );
    let text = common::config_text(
        "l7",
        "{ kind = \"rr\" }",
        &top,
        "[timeouts]\nheader = \"300ms\"",
        &[&echo],
        dir,
    );
    (common::start(&text, dir).await, echo, log)
}

/// `first` then a request with `Connection: close`, in one write; everything the balancer
/// sends back before it closes.
async fn exchange(to: SocketAddr, first: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(to).await.unwrap();
    let req = b"GET /pp HTTP/1.1\r\nHost: pp.test\r\nConnection: close\r\n\r\n";
    s.write_all(&[first, &req[..]].concat()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(PATIENCE, s.read_to_end(&mut out)).await;
    out
}

fn refused(r: &netsched_balance::Running) -> f64 {
    common::metric(
        &common::metrics_text(r),
        "netsched_balance_refused_total{reason=\"proxy_header\"}",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listed_client_s_v1_and_v2_headers_name_the_client_to_the_backend_and_the_log() {
    use netsched_balance::config::SendProxy;
    use netsched_balance::proxy_proto::{check_header, header};
    let dir = TempDir::new("bal-pp-accept").unwrap();
    let (r, echo, log) = accepting("[\"10.0.0.0/8\", \"127.0.0.1/32\"]", &dir).await;
    let to = r.listen[0];
    for (v, port) in [(SendProxy::V1, 4711), (SendProxy::V2, 4712)] {
        let named: SocketAddr = format!("{NAMED}:{port}").parse().unwrap();
        let (status, body) = common::parse(&exchange(to, &header(v, named, to)).await);
        assert_eq!(status, 200, "{v:?}: {body}");
        assert!(
            body.contains(&format!("x-forwarded-for: {NAMED}\n")),
            "{v:?}: {body}"
        );
    }
    // v2 LOCAL: the connection's own address.
    let local = check_header(SendProxy::V2, to, to);
    let (status, body) = common::parse(&exchange(to, &local).await);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("x-forwarded-for: 127.0.0.1\n"), "{body}");
    assert_eq!(echo.hits(), 3);
    assert_eq!(refused(&r), 0.0);
    let ok =
        common::eventually(|| std::fs::read_to_string(&log).is_ok_and(|t| t.lines().count() >= 3))
            .await;
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(ok, "three lines expected:\n{text}");
    let clients: Vec<&str> = text.lines().filter_map(|l| l.split(' ').next()).collect();
    assert_eq!(
        clients[..2],
        [format!("{NAMED}:4711"), format!("{NAMED}:4712")],
        "{text}"
    );
    assert!(clients[2].starts_with("127.0.0.1:"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listed_client_without_a_header_is_closed_unanswered_and_counted() {
    let dir = TempDir::new("bal-pp-none").unwrap();
    let (r, echo, _) = accepting("[\"127.0.0.1\"]", &dir).await;
    let to = r.listen[0];
    // A request where the header should be.
    assert_eq!(exchange(to, b"").await, b"");
    // A header the balancer does not take (v2 over UDP).
    let mut udp = netsched_balance::proxy_proto::V2_SIGNATURE.to_vec();
    udp.extend_from_slice(&[0x21, 0x12, 0, 12, 1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 0, 2]);
    assert_eq!(exchange(to, &udp).await, b"");
    // Nothing at all: closed at `timeouts.header`.
    let mut s = TcpStream::connect(to).await.unwrap();
    let mut out = Vec::new();
    let n = tokio::time::timeout(PATIENCE, s.read_to_end(&mut out)).await;
    assert!(matches!(n, Ok(Ok(0)) | Ok(Err(_))), "{n:?}");
    assert!(
        common::eventually(|| refused(&r) == 3.0).await,
        "{}",
        refused(&r)
    );
    assert_eq!(echo.hits(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_from_a_network_not_listed_is_never_trusted() {
    use netsched_balance::config::Config;
    let dir = TempDir::new("bal-pp-unlisted").unwrap();
    for accept in ["[\"10.0.0.0/8\", \"::1\"]", "[]"] {
        let (r, echo, _) = accepting(accept, &dir).await;
        let to = r.listen[0];
        let line = format!("PROXY TCP4 {NAMED} 127.0.0.1 4711 {}\r\n", to.port());
        let (status, body) = common::parse(&exchange(to, line.as_bytes()).await);
        assert_eq!(status, 400, "{accept}: {body}");
        assert_eq!(echo.hits(), 0);
        assert_eq!(refused(&r), 0.0);
        // The same client's plain request is served, with its own address.
        let (status, body) = common::parse(&exchange(to, b"").await);
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("x-forwarded-for: 127.0.0.1\n"), "{body}");
        drop(r);
    }
    // A reload that lists the client: its next connection's header is read and believed.
    let (r, _echo, _) = accepting("[]", &dir).await;
    let to = r.listen[0];
    let mut cfg = Config::load(&dir.path().join("balance.toml")).unwrap();
    cfg.accept_proxy = vec!["127.0.0.0/8".to_string()].try_into().unwrap();
    r.service.reload(&cfg).unwrap();
    let line = format!("PROXY TCP4 {NAMED} 127.0.0.1 4711 {}\r\n", to.port());
    let (status, body) = common::parse(&exchange(to, line.as_bytes()).await);
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains(&format!("x-forwarded-for: {NAMED}\n")),
        "{body}"
    );
}

/// L4: the header's client reaches a `send_proxy = "v1"` server, and every byte after the
/// header reaches it as sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_l4_the_header_s_addresses_go_on_to_a_send_proxy_server() {
    use netsched_balance::config::SendProxy;
    use netsched_balance::proxy_proto::header;
    use tokio::io::AsyncBufReadExt;
    // A server that answers with the first two lines it gets, then closes.
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (s, _) = l.accept().await.unwrap();
        let mut r = tokio::io::BufReader::new(s);
        let (mut a, mut b) = (String::new(), String::new());
        r.read_line(&mut a).await.unwrap();
        r.read_line(&mut b).await.unwrap();
        r.get_mut()
            .write_all(format!("{a}{b}").as_bytes())
            .await
            .unwrap();
    });
    let dir = TempDir::new("bal-pp-l4").unwrap();
    let text = format!(
        "mode = \"l4\"\nlisten = [\"127.0.0.1:0\"]\nalgorithm = {{ kind = \"rr\" }}\n\
         control_socket = \"{}\"\naccept_proxy = [\"127.0.0.0/8\"]\n\
         [[server]]\nname = \"s\"\naddr = \"{addr}\"\nsend_proxy = \"v1\"\n",
        dir.path().join("ctl.sock").display()
    );
    let r = common::start(&text, &dir).await;
    let to = r.listen[0];
    let named: SocketAddr = format!("{NAMED}:4711").parse().unwrap();
    let dst: SocketAddr = "192.0.2.1:443".parse().unwrap();
    let mut s = TcpStream::connect(to).await.unwrap();
    let sent = [header(SendProxy::V2, named, dst), b"hello\n".to_vec()].concat();
    s.write_all(&sent).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(PATIENCE, s.read_to_end(&mut out)).await;
    assert_eq!(
        String::from_utf8_lossy(&out),
        format!("PROXY TCP4 {NAMED} 192.0.2.1 4711 443\r\nhello\n")
    );
    server.await.unwrap();
}

/// HAProxy in mode tcp with `send-proxy-v2` in front of the balancer: the backend sees the
/// client HAProxy accepted (127.0.0.2), not HAProxy (127.0.0.1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_send_proxy_v2_in_front_gives_the_backend_the_real_client() {
    let dir = TempDir::new("bal-pp-haproxy").unwrap();
    let (r, echo, _) = accepting("[\"127.0.0.1/32\"]", &dir).await;
    let to = r.listen[0];
    let config = |f: &[SocketAddr]| {
        format!(
            "global\n    maxconn 100\n\ndefaults\n    mode tcp\n    timeout connect 1s\n    \
             timeout client 5s\n    timeout server 5s\n\nfrontend f\n    bind {}\n    \
             default_backend b\nbackend b\n    server balance {to} send-proxy-v2\n",
            f[0]
        )
    };
    let h = match common::haproxy::start(1, config).await {
        Ok(h) => h,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let mut s = connect(h.frontends[0]).await.unwrap();
    let me = s.local_addr().unwrap();
    let (status, body) = request(&mut s, true).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(me.ip().to_string(), CLIENT);
    assert!(
        body.contains(&format!("x-forwarded-for: {CLIENT}\n")),
        "{body}"
    );
    assert_eq!(echo.hits(), 1);
    assert_eq!(refused(&r), 0.0);
}

/// Class rules by source network see the header's client: a request from 127.0.0.1 naming
/// 203.0.113.9 is in the class of 203.0.113.0/24; one with a LOCAL header stays in `rest`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn class_rules_by_source_see_the_header_s_client() {
    use netsched_balance::config::SendProxy;
    use netsched_balance::proxy_proto::{check_header, header};
    let echo = common::header_echo_backend("s").await;
    let dir = TempDir::new("bal-pp-classes").unwrap();
    let text = common::config_text(
        "l7",
        "{ kind = \"rr\" }",
        "admin = \"127.0.0.1:0\"\naccept_proxy = [\"127.0.0.1\"]\ndefault_class = \"rest\"",
        "[[class]]\nname = \"proxied\"\nsources = [\"203.0.113.0/24\"]\n\
         [[class]]\nname = \"rest\"\n",
        &[&echo],
        &dir,
    );
    let r = common::start(&text, &dir).await;
    let to = r.listen[0];
    let named: SocketAddr = format!("{NAMED}:4711").parse().unwrap();
    for first in [
        header(SendProxy::V1, named, to),
        check_header(SendProxy::V2, to, to),
    ] {
        let (status, body) = common::parse(&exchange(to, &first).await);
        assert_eq!(status, 200, "{body}");
    }
    let count = |class: &str| {
        common::metric(
            &common::metrics_text(&r),
            &format!("netsched_balance_class_requests_total{{class=\"{class}\"}}"),
        )
    };
    assert!(
        common::eventually(|| count("proxied") == 1.0 && count("rest") == 1.0).await,
        "proxied {}, rest {}",
        count("proxied"),
        count("rest")
    );
}

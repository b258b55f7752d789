//! L7 mode on loopback: the client's address in `X-Forwarded-For` / `Forwarded` as the
//! `forwarded` setting chooses, seen by a backend that echoes the request's header fields.

mod common;
use common::*;
use netsched_testbed::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One request with the client's own `X-Forwarded-For` and `Forwarded`; the header lines the
/// backend saw, lower-cased names.
async fn seen(at: std::net::SocketAddr) -> Vec<String> {
    let mut s = TcpStream::connect(at).await.unwrap();
    s.write_all(
        b"GET / HTTP/1.1\r\nHost: a.test:81\r\nX-Forwarded-For: 203.0.113.7\r\n\
Forwarded: for=203.0.113.7\r\nConnection: close\r\n\r\n",
    )
    .await
    .unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(PATIENCE, s.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    let (status, body) = parse(&out);
    assert_eq!(status, 200, "{body}");
    body.lines().map(str::to_string).collect()
}

fn lines<'a>(seen: &'a [String], name: &str) -> Vec<&'a str> {
    seen.iter()
        .filter_map(|l| l.strip_prefix(&format!("{name}: ")))
        .collect()
}

/// Each value of `forwarded` through the balancer: the client's fields are kept and the
/// balancer's element added after a comma; `off` leaves them as the client sent them; absent
/// is `x-forwarded-for`. Over IPv6 too when the host has `::1`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_headers_as_configured_reach_the_backend() {
    let echo = header_echo_backend("echo").await;
    let xff_ours = "203.0.113.7, 127.0.0.1";
    let fwd_ours = "for=203.0.113.7, for=127.0.0.1;proto=http;host=\"a.test:81\"";
    for (setting, xff, fwd) in [
        ("", xff_ours, "for=203.0.113.7"),
        (
            "forwarded = \"x-forwarded-for\"",
            xff_ours,
            "for=203.0.113.7",
        ),
        ("forwarded = \"forwarded\"", "203.0.113.7", fwd_ours),
        ("forwarded = \"both\"", xff_ours, fwd_ours),
        ("forwarded = \"off\"", "203.0.113.7", "for=203.0.113.7"),
    ] {
        let dir = TempDir::new("bal-fwd").unwrap();
        let text = config_text("l7", "{ kind = \"rr\" }", setting, "", &[&echo], &dir);
        let r = start(&text, &dir).await;
        let got = seen(r.listen[0]).await;
        assert_eq!(lines(&got, "x-forwarded-for"), [xff], "{setting}: {got:?}");
        assert_eq!(lines(&got, "forwarded"), [fwd], "{setting}: {got:?}");
        drop(r);
    }
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("no ::1 on this host: the IPv6 client is left to the unit tests");
        return;
    }
    let dir = TempDir::new("bal-fwd6").unwrap();
    let text = config_text(
        "l7",
        "{ kind = \"rr\" }",
        "forwarded = \"both\"",
        "",
        &[&echo],
        &dir,
    )
    .replacen("127.0.0.1:0", "[::1]:0", 1);
    let r = start(&text, &dir).await;
    let got = seen(r.listen[0]).await;
    assert_eq!(
        lines(&got, "x-forwarded-for"),
        ["203.0.113.7, ::1"],
        "{got:?}"
    );
    assert_eq!(
        lines(&got, "forwarded"),
        ["for=203.0.113.7, for=\"[::1]\";proto=http;host=\"a.test:81\""],
        "{got:?}"
    );
    drop(r);
}

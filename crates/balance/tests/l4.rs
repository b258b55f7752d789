//! L4 mode on loopback: relay, IPVS accounting (active, then inactive at the first FIN),
//! drain with established connections, every kind on real connections.

mod common;
use common::*;
use netsched_testbed::TempDir;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;

/// Both relays (`relay = "splice"`, the default, and `"copy"`) must pass the same tests.
const RELAYS: [&str; 2] = ["splice", "copy"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relays_both_ways_and_counts_active_then_inactive_then_gone() {
    for relay in RELAYS {
        relay_and_count(relay).await;
    }
}

async fn relay_and_count(relay: &str) {
    let release = Arc::new(Notify::new());
    let a = tcp_backend("a", release.clone()).await;
    let dir = TempDir::new("bal-l4").unwrap();
    let r = start(
        &config_text(
            "l4",
            "{ kind = \"wlc\" }",
            &format!("relay = \"{relay}\""),
            "",
            &[&a],
            &dir,
        ),
        &dir,
    )
    .await;
    let (mut c, name) = open(r.listen[0]).await;
    assert_eq!(name, "a");
    // A payload larger than the relay buffer goes through intact.
    let big: String = (0..100_000)
        .map(|i| (b'a' + (i % 26) as u8) as char)
        .collect();
    let back = echo(&mut c, &(big.clone() + "\n")).await;
    assert_eq!(back.trim_end(), big, "{relay}");
    assert_eq!(
        (row(&r, "a").active, row(&r, "a").inactive),
        (1, 0),
        "{relay}"
    );
    // Client FIN: the backend holds its side open -> the connection is inactive (half-closed).
    c.get_mut().shutdown().await.unwrap();
    assert!(
        eventually(|| {
            let s = row(&r, "a");
            (s.active, s.inactive) == (0, 1)
        })
        .await,
        "{relay}: {:?}",
        row(&r, "a")
    );
    release.notify_waiters();
    let mut rest = Vec::new();
    tokio::time::timeout(PATIENCE, c.read_to_end(&mut rest))
        .await
        .unwrap()
        .unwrap();
    assert!(
        eventually(|| {
            let s = row(&r, "a");
            (s.active, s.inactive) == (0, 0)
        })
        .await,
        "{relay}: {:?}",
        row(&r, "a")
    );
}

/// The server closes first (it sends its FIN, then keeps reading): the client sees the data
/// and the end of stream, the connection turns inactive, and every byte the client sends after
/// the server's FIN still arrives (half-close passed on, not a full close).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_first_half_close_keeps_the_other_direction() {
    const AFTER: usize = 3 << 20;
    for relay in RELAYS {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let srv = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            s.write_all(b"bye\n").await.unwrap();
            s.shutdown().await.unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).await.unwrap();
            let _ = tx.send(got);
        });
        let dir = TempDir::new("bal-l4half").unwrap();
        let text = config_text(
            "l4",
            "{ kind = \"rr\" }",
            &format!("relay = \"{relay}\""),
            "",
            &[],
            &dir,
        ) + &format!("[[server]]\nname = \"h\"\naddr = \"{addr}\"\n");
        let r = start(&text, &dir).await;
        let mut c = TcpStream::connect(r.listen[0]).await.unwrap();
        let mut first = Vec::new();
        tokio::time::timeout(PATIENCE, c.read_to_end(&mut first))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(first, b"bye\n", "{relay}");
        assert!(
            eventually(|| {
                let s = row(&r, "h");
                (s.active, s.inactive) == (0, 1)
            })
            .await,
            "{relay}: {:?}",
            row(&r, "h")
        );
        let payload: Vec<u8> = (0..AFTER).map(|i| (i * 7 % 251) as u8).collect();
        c.write_all(&payload).await.unwrap();
        c.shutdown().await.unwrap();
        let got = tokio::time::timeout(PATIENCE, rx).await.unwrap().unwrap();
        assert!(
            got == payload,
            "{relay}: {} of {AFTER} bytes, or corrupted",
            got.len()
        );
        assert!(
            eventually(|| {
                let s = row(&r, "h");
                (s.active, s.inactive) == (0, 0)
            })
            .await,
            "{relay}: {:?}",
            row(&r, "h")
        );
        srv.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_balancer_kind_schedules_real_connections() {
    let release = Arc::new(Notify::new());
    let bs = [
        tcp_backend("a", release.clone()).await,
        tcp_backend("b", release.clone()).await,
        tcp_backend("c", release.clone()).await,
    ];
    for kind in kinds() {
        let dir = TempDir::new("bal-l4kinds").unwrap();
        let refs: Vec<&Backend> = bs.iter().collect();
        let r = start(
            &config_text(
                "l4",
                &format!("{{ kind = \"{kind}\" }}"),
                "",
                "",
                &refs,
                &dir,
            ),
            &dir,
        )
        .await;
        // Nine connections held open at once: least-connection kinds must spread them.
        let mut conns = Vec::new();
        let mut seen: HashMap<String, u32> = HashMap::new();
        // ovf (`ip_vs_ovf.c`) gives a server at most `weight` active connections (1 here) and
        // then has no destination: the fourth connection is refused and counted.
        let n = if kind == "ovf" { 3 } else { 9 };
        for i in 0..n {
            let (mut c, name) = open(r.listen[0]).await;
            assert_eq!(
                echo(&mut c, &format!("hello {i}\n")).await,
                format!("hello {i}\n"),
                "{kind}"
            );
            *seen.entry(name).or_default() += 1;
            conns.push(c);
        }
        if ["rr", "wrr", "lc", "wlc", "sed", "nq"].contains(&kind) {
            assert!(seen.values().all(|&v| v == 3), "{kind}: {seen:?}");
        }
        let total: u32 = r.service.show().iter().map(|s| s.active).sum();
        assert_eq!(total, n, "{kind}");
        if kind == "ovf" {
            let (_c, name) = open(r.listen[0]).await;
            assert_eq!(name, "", "ovf: a fourth connection was accepted");
        }
        drop(conns);
        release.notify_waiters();
        assert!(
            eventually(|| r.service.show().iter().all(|s| s.active + s.inactive == 0)).await,
            "{kind}: {:?}",
            r.service.show()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drained_server_gets_no_new_connections_while_established_ones_finish() {
    let release = Arc::new(Notify::new());
    let (a, b) = (
        tcp_backend("a", release.clone()).await,
        tcp_backend("b", release.clone()).await,
    );
    let dir = TempDir::new("bal-drain").unwrap();
    let r = start(
        &config_text("l4", "{ kind = \"rr\" }", "", "", &[&a, &b], &dir),
        &dir,
    )
    .await;
    let (mut ca, na) = open(r.listen[0]).await;
    let (mut cb, nb) = open(r.listen[0]).await;
    assert_eq!((na.as_str(), nb.as_str()), ("a", "b"));
    netsched_balance::control::request(&r.control_socket, "drain a").unwrap();
    let before = a.hits();
    for _ in 0..6 {
        let (_c, n) = open(r.listen[0]).await;
        assert_eq!(n, "b");
    }
    assert_eq!(a.hits(), before, "a drained but got a new connection");
    // The established connection on a still works, and so after maint and del-server.
    assert_eq!(echo(&mut ca, "still here\n").await, "still here\n");
    netsched_balance::control::request(&r.control_socket, "maint a").unwrap();
    assert_eq!(echo(&mut ca, "still\n").await, "still\n");
    netsched_balance::control::request(&r.control_socket, "del-server a").unwrap();
    assert_eq!(echo(&mut ca, "and now\n").await, "and now\n");
    assert_eq!(echo(&mut cb, "b too\n").await, "b too\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_timeout_counts_both_directions() {
    for relay in RELAYS {
        idle_timeout(relay).await;
    }
}

async fn idle_timeout(relay: &str) {
    // A backend that sends one byte every 100 ms, twelve times, to a client that never speaks:
    // with 1 s timeouts (ten gaps' worth, so a loaded machine's late wake-ups cannot end it)
    // the connection lives on because the server side is active.
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let srv = tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            tokio::spawn(async move {
                let mut first = [0u8; 1];
                // "t" = trickle, anything else = stay silent.
                if s.read_exact(&mut first).await.is_err() || first[0] != b't' {
                    tokio::time::sleep(PATIENCE).await;
                    return;
                }
                for _ in 0..12 {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    if s.write_all(b".").await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let dir = TempDir::new("bal-l4idle").unwrap();
    let text = config_text(
        "l4",
        "{ kind = \"rr\" }",
        &format!("admin = \"127.0.0.1:0\"\nrelay = \"{relay}\""),
        "[timeouts]\nclient = \"1s\"\nserver = \"1s\"",
        &[],
        &dir,
    ) + &format!("[[server]]\nname = \"t\"\naddr = \"{addr}\"\n");
    let r = start(&text, &dir).await;
    let mut c = TcpStream::connect(r.listen[0]).await.unwrap();
    c.write_all(b"t").await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(PATIENCE, c.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.len(), 12, "{relay}: trickle cut short: {got:?}");
    // The trickle connection is over once the client closes too; wait for the balancer to
    // see it, so that its ending (an idle half-closed side, if the client was slow to close)
    // cannot be counted with the silent connection's below.
    drop(c);
    let idle_key = "netsched_balance_errors_total{backend=\"t\",reason=\"idle_timeout\"}";
    let done = "netsched_balance_requests_total{backend=\"t\"} 1";
    assert!(
        eventually(|| {
            let m = metrics_text(&r);
            m.contains(done)
                && metric(&m, "netsched_balance_active_connections{backend=\"t\"}") == 0.0
                && metric(&m, "netsched_balance_inactive_connections{backend=\"t\"}") == 0.0
        })
        .await,
        "{relay}: the trickle connection never ended: {}",
        metrics_text(&r)
    );
    let before = metric(&metrics_text(&r), idle_key);
    // Both sides silent: closed by the idle timeout and counted.
    let mut c = TcpStream::connect(r.listen[0]).await.unwrap();
    c.write_all(b"s").await.unwrap();
    let t = std::time::Instant::now();
    let mut got = Vec::new();
    tokio::time::timeout(PATIENCE, c.read_to_end(&mut got))
        .await
        .expect("never closed")
        .ok();
    assert!(
        t.elapsed() >= std::time::Duration::from_millis(950),
        "{:?}",
        t.elapsed()
    );
    let m = metrics_text(&r);
    assert_eq!(metric(&m, idle_key), before + 1.0, "{relay}: {m}");
    srv.abort();
}

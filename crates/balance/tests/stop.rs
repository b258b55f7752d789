//! Graceful stop in process (`Running::stop`): the work in flight finishes, new connections
//! are refused, idle keep-alive connections close at once, and the deadline cuts the rest.

mod common;
use common::*;
use netsched_testbed::TempDir;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;

/// Read one response (head and a body of `Content-Length`) from a keep-alive connection.
async fn read_response(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&out).to_string();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or(0);
            if body.len() >= len {
                return text;
            }
        }
        let n = tokio::time::timeout(PATIENCE, s.read(&mut buf))
            .await
            .expect("response")
            .unwrap();
        assert!(
            n > 0,
            "closed mid-response: {}",
            String::from_utf8_lossy(&out)
        );
        out.extend_from_slice(&buf[..n]);
    }
}

/// Whether a connection to `addr` is refused; counts the ones that were not.
fn refused(addr: std::net::SocketAddr, accepted: &mut u64) -> bool {
    match std::net::TcpStream::connect(addr) {
        Ok(_) => {
            *accepted += 1;
            false
        }
        Err(_) => true,
    }
}

/// Whether the peer closed `s` (EOF or reset) within `within`.
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(within, s.read(&mut buf)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l7_stop_finishes_the_request_in_flight_closes_idle_ones_and_refuses_new_connections() {
    let b = http_backend("a").await;
    let dir = TempDir::new("bal-stop7").unwrap();
    let r = Arc::new(
        start(
            &config_text("l7", "{ kind = \"rr\" }", "", "", &[&b], &dir),
            &dir,
        )
        .await,
    );
    let addr = r.listen[0];
    // An idle keep-alive connection (one request answered) and a slow request in flight.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert!(read_response(&mut idle).await.starts_with("HTTP/1.1 200"));
    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET /sleep/3000 HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert!(
        eventually(|| b.hits() == 2).await,
        "slow request not at the backend"
    );
    let began = Instant::now();
    let stopping = {
        let r = r.clone();
        tokio::spawn(async move { r.stop(Some(Duration::from_secs(30))).await })
    };
    // The idle connection is closed at once, long before the slow response.
    assert!(
        closed_within(&mut idle, Duration::from_millis(1000)).await,
        "idle keep-alive connection still open"
    );
    // New connections are refused (the listener is closed). A probe that got in before the
    // close is served.
    let mut probes = 0;
    assert!(
        eventually(|| refused(addr, &mut probes)).await,
        "still accepting"
    );
    assert!(
        began.elapsed() < Duration::from_millis(2500),
        "{:?}",
        began.elapsed()
    );
    // The request in flight is answered, with `Connection: close`, then the connection ends.
    let resp = read_response(&mut slow).await;
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(
        resp.to_ascii_lowercase().contains("connection: close"),
        "{resp}"
    );
    assert!(resp.ends_with("\r\n\r\na"), "{resp}");
    assert!(closed_within(&mut slow, PATIENCE).await);
    let report = tokio::time::timeout(PATIENCE, stopping)
        .await
        .unwrap()
        .unwrap();
    // The request in flight and the idle connection ended after the stop began: finished. A
    // probe accepted before the stop began may have ended before it too (then it is not the
    // stop's to count), so the probes add between none and all of themselves.
    assert_eq!(report.cut, 0, "{report:?}");
    assert!(
        (2..=2 + probes).contains(&report.finished),
        "{report:?} with {probes} probe(s) accepted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l7_stop_cuts_what_is_left_at_the_deadline_and_counts_it() {
    let b = http_backend("a").await;
    let dir = TempDir::new("bal-cut7").unwrap();
    let r = start(
        &config_text(
            "l7",
            "{ kind = \"rr\" }",
            "admin = \"127.0.0.1:0\"",
            "",
            &[&b],
            &dir,
        ),
        &dir,
    )
    .await;
    let mut slow = TcpStream::connect(r.listen[0]).await.unwrap();
    slow.write_all(b"GET /sleep/10000 HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert!(eventually(|| b.hits() == 1).await);
    let began = Instant::now();
    let report = r.stop(Some(Duration::from_millis(300))).await;
    let took = began.elapsed();
    assert_eq!((report.finished, report.cut), (0, 1), "{report:?}");
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(5),
        "{took:?}"
    );
    // The client sees the connection closed without a response.
    let mut out = Vec::new();
    let _ = tokio::time::timeout(PATIENCE, slow.read_to_end(&mut out)).await;
    assert!(out.is_empty(), "{}", String::from_utf8_lossy(&out));
    let m = metrics_text(&r);
    assert_eq!(
        metric(
            &m,
            "netsched_balance_stop_connections_total{outcome=\"cut\"}"
        ),
        1.0,
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l4_stop_lets_established_relays_run_to_their_end_and_refuses_new_connections() {
    for relay in ["splice", "copy"] {
        let release = Arc::new(Notify::new());
        let t = tcp_backend("t", release.clone()).await;
        let dir = TempDir::new("bal-stop4").unwrap();
        let r = Arc::new(
            start(
                &config_text(
                    "l4",
                    "{ kind = \"rr\" }",
                    &format!("relay = \"{relay}\""),
                    "",
                    &[&t],
                    &dir,
                ),
                &dir,
            )
            .await,
        );
        let addr = r.listen[0];
        let (mut held, name) = open(addr).await;
        assert_eq!(name, "t");
        let stopping = {
            let r = r.clone();
            tokio::spawn(async move { r.stop(Some(Duration::from_secs(30))).await })
        };
        let mut probes = 0;
        assert!(
            eventually(|| refused(addr, &mut probes)).await,
            "{relay}: still accepting"
        );
        // The relay goes on after the stop began.
        assert_eq!(
            echo(&mut held, "during the stop\n").await,
            "during the stop\n"
        );
        assert!(
            !stopping.is_finished(),
            "{relay}: stopped with a relay open"
        );
        // Both directions end: the client's FIN, then the backend's.
        held.get_mut().shutdown().await.unwrap();
        release.notify_waiters();
        let mut rest = Vec::new();
        tokio::time::timeout(PATIENCE, held.read_to_end(&mut rest))
            .await
            .unwrap()
            .unwrap();
        let report = tokio::time::timeout(PATIENCE, stopping)
            .await
            .unwrap()
            .unwrap();
        // The held relay ended after the stop began: finished. A probe accepted before the
        // stop began may have ended before it too (then it is not the stop's to count), so
        // the probes add between none and all of themselves.
        assert_eq!(report.cut, 0, "{relay}: {report:?}");
        assert!(
            (1..=1 + probes).contains(&report.finished),
            "{relay}: {report:?} with {probes} probe(s) accepted"
        );
    }
}

/// Connections that completed their handshake but were not accepted yet when the stop began
/// (in the listener's accept queue) are served, not reset. A current-thread runtime: while
/// this test connects, the accept loop cannot run, so the connections wait in the queue.
#[tokio::test(flavor = "current_thread")]
async fn l7_connections_waiting_in_the_accept_queue_at_the_stop_are_answered() {
    let b = http_backend("a").await;
    let dir = TempDir::new("bal-queue").unwrap();
    let r = start(
        &config_text("l7", "{ kind = \"rr\" }", "", "", &[&b], &dir),
        &dir,
    )
    .await;
    let addr = r.listen[0];
    let mut waiting = Vec::new();
    for i in 0..3 {
        use std::io::Write;
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        let close = if i == 0 { "" } else { "Connection: close\r\n" };
        write!(s, "GET /q{i} HTTP/1.1\r\nHost: x\r\n{close}\r\n").unwrap();
        waiting.push(s);
    }
    let report = tokio::time::timeout(PATIENCE, r.stop(Some(Duration::from_secs(30))))
        .await
        .unwrap();
    assert_eq!((report.from_queue, report.cut), (3, 0), "{report:?}");
    for mut s in waiting {
        use std::io::Read;
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        assert_eq!(parse(&out), (200, "a".to_string()));
    }
}

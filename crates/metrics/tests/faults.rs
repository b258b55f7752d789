//! Faults the metrics listener survives, each against a real listener on loopback: scrapes
//! served while an attacker holds (and reopens) half-open connections, 40 parallel scrapers
//! all answered, a bare-LF request answered, and request heads of 9 KB and 1 MB answered 431
//! (not reset).
//!
//! Timing: no assertion depends on how fast the machine is. Every client waits up to 10 s for
//! an answer that a working listener gives in milliseconds; the verdicts are counts (all
//! scrapes answered 200), never durations.

use netsched_metrics::prometheus_client::metrics::counter::Counter;
use netsched_metrics::prometheus_client::registry::Registry;
use netsched_metrics::{scrape, serve, MetricsServer, Shared};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

fn listener() -> MetricsServer {
    let mut reg = Registry::default();
    let c: Counter = Counter::default();
    reg.register("demo_requests", "Requests seen", c.clone());
    c.inc_by(3);
    let shared: Shared = Arc::new(Mutex::new(reg));
    serve("127.0.0.1:0".parse().unwrap(), shared).unwrap()
}

/// `n` half-open connections (half a request line each), each reopened as soon as the server
/// closes it, until `stop`; `opened` counts the connections made.
fn attacker(
    addr: SocketAddr,
    n: usize,
    stop: Arc<AtomicBool>,
    opened: Arc<AtomicUsize>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let open = || -> Option<TcpStream> {
            let mut s = TcpStream::connect(addr).ok()?;
            s.write_all(b"GET /metr").ok()?;
            s.set_nonblocking(true).ok()?;
            opened.fetch_add(1, Ordering::Relaxed);
            Some(s)
        };
        let mut held: Vec<Option<TcpStream>> = (0..n).map(|_| open()).collect();
        while !stop.load(Ordering::Relaxed) {
            for slot in held.iter_mut() {
                let closed = match slot {
                    None => true,
                    Some(s) => {
                        !matches!(s.read(&mut [0u8; 512]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
                    }
                };
                if closed {
                    *slot = open();
                }
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    })
}

/// Raw bytes out, the whole answer back (a reset reads as what arrived before it).
fn exchange(addr: SocketAddr, req: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.set_write_timeout(Some(WAIT)).unwrap();
    let _ = s.write_all(req);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn scrapes_get_through_while_64_half_open_connections_are_held_and_reopened() {
    let srv = listener();
    let addr = srv.addr();
    let (stop, opened) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
    );
    let attack = attacker(addr, 64, stop.clone(), opened.clone());
    while opened.load(Ordering::Relaxed) < 64 {
        std::thread::sleep(Duration::from_millis(5));
    }
    // 20 scrapes one after another, then 40 scrapers at once, 3 scrapes each.
    let mut failed = Vec::new();
    for _ in 0..20 {
        match scrape(addr, WAIT) {
            Ok((200, body)) if body.contains("demo_requests_total 3") => {}
            other => failed.push(format!("{other:?}")),
        }
    }
    let parallel: Vec<_> = (0..40)
        .map(|_| {
            std::thread::spawn(move || {
                (0..3)
                    .filter_map(|_| match scrape(addr, WAIT) {
                        Ok((200, _)) => None,
                        other => Some(format!("{other:?}")),
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    for t in parallel {
        failed.extend(t.join().unwrap());
    }
    stop.store(true, Ordering::Relaxed);
    attack.join().unwrap();
    assert!(
        failed.is_empty(),
        "{} of 140 scrapes failed while 64 half-open connections were held: {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
}

#[test]
fn a_request_with_bare_lf_line_ends_is_answered() {
    let srv = listener();
    let out = exchange(srv.addr(), b"GET /metrics HTTP/1.1\n\n");
    assert!(out.starts_with("HTTP/1.1 200"), "{out:?}");
    assert!(out.contains("demo_requests_total 3"), "{out}");
    let out = exchange(srv.addr(), b"GET /metrics HTTP/1.1\nHost: x\n\n");
    assert!(out.starts_with("HTTP/1.1 200"), "{out:?}");
}

#[test]
fn heads_of_9_kb_and_1_mb_are_answered_431_then_closed() {
    let srv = listener();
    for size in [9 * 1024, 1 << 20] {
        let mut req = b"GET /metrics HTTP/1.1\r\nX-Fill: ".to_vec();
        req.resize(size, b'a');
        req.extend_from_slice(b"\r\n\r\n");
        let out = exchange(srv.addr(), &req);
        assert!(
            out.starts_with("HTTP/1.1 431 Request Header Fields Too Large"),
            "head of {size} bytes: {out:?}"
        );
    }
    // The listener still serves afterwards, and its own families count both refusals.
    let (code, text) = scrape(srv.addr(), WAIT).unwrap();
    assert_eq!(code, 200);
    assert!(
        text.contains("netsched_metrics_listener_refused_total{reason=\"bad_head\"} 2\n"),
        "{text}"
    );
    assert!(
        text.contains("netsched_metrics_listener_refused_total{reason=\"overloaded\"} 0\n"),
        "{text}"
    );
}

//! Root test of the balancer's live status page in Debian's headless Chromium: the daemon runs
//! in a namespace of its own in front of two nginx (a third server has none, so its health
//! checks take it down), one server is drained, a few requests go through; then the page is
//! loaded from the admin listener, and once it has refreshed, every figure it shows must equal
//! what `/metrics` says right after (the daemon is quiescent by then, so they are exact). Skips
//! with a reason without root or without chromium (fails instead under CI=true); the testbed
//! kills what it started by pid and deletes the namespace, also on failure, and the browser's
//! profile is removed. Below the servers, the client side's tables: no TLS handshakes (a plain
//! listener), the eight HTTP/1.1 connections, no HTTP/2 streams.
//! With `NETSCHED_STATUS_SCREENSHOT=path.png` the page is also saved there (docs/img).

mod nginx;

use netsched_metrics::{parse_exposition, scrape, Sample};
use netsched_testbed::chromium;
use netsched_testbed::status_page::{self, screenshot_asked, StatusPage};
use netsched_testbed::{privileged_test_allowed, TempDir, Testbed};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

const PATIENCE: Duration = Duration::from_secs(20);
const ADMIN: &str = "127.0.0.1:9100";

fn in_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    status_page::in_netns(Some(ns), f)
}

fn get(addr: &str) -> u16 {
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return 0;
    };
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0)
}

/// The value of family `name` for `backend` (summed over other labels); None when absent.
fn value(samples: &[Sample], name: &str, backend: Option<&str>) -> Option<f64> {
    let hits: Vec<f64> = samples
        .iter()
        .filter(|s| s.name == name && (backend.is_none() || s.label("backend") == backend))
        .map(|s| s.value)
        .collect();
    (!hits.is_empty()).then(|| hits.iter().sum())
}

#[test]
fn status_page_shows_what_metrics_says_for_every_server() {
    let test = "status_page_shows_what_metrics_says_for_every_server";
    if !privileged_test_allowed(test) {
        return;
    }
    if !chromium::test_allowed(test) {
        return;
    }
    let mut tb = Testbed::new("bstat").unwrap();
    let ns = tb.add_ns("lb").unwrap();
    let dir = TempDir::new("bal-status").unwrap();
    nginx::Nginx {
        connections: 64,
        keepalive_requests: None,
    }
    .start(&mut tb, &ns, dir.path());
    let sock = dir.path().join("ctl.sock");
    let cfg = dir.path().join("balance.toml");
    std::fs::write(
        &cfg,
        format!(
            "mode = \"l7\"\nlisten = [\"127.0.0.1:8080\"]\nadmin = \"{ADMIN}\"\nalgorithm = {{ kind = \"rr\" }}\n\
control_socket = \"{}\"\n[health]\nkind = \"http\"\ninterval = \"200ms\"\nrise = 2\nfall = 2\ntimeout = \"1s\"\n\
[[server]]\nname = \"a\"\naddr = \"127.0.0.1:8081\"\nweight = 3\n[[server]]\nname = \"b\"\naddr = \"127.0.0.1:8082\"\n\
[[server]]\nname = \"c\"\naddr = \"127.0.0.1:8083\"\nweight = 2\n",
            sock.display()
        ),
    )
    .unwrap();
    nginx::start_balancer(&mut tb, &ns, &cfg, &dir.path().join("log"));
    let log = || std::fs::read_to_string(dir.path().join("log")).unwrap_or_default();
    // c (no nginx) is taken down by its checks; a and b stay up.
    let start = Instant::now();
    loop {
        let servers = netsched_balance::control::request(&sock, "show-servers").unwrap_or_default();
        let down = |n: &str| {
            servers
                .lines()
                .any(|l| l.starts_with(n) && l.contains(" down "))
        };
        if down("c ") && !down("a ") && !down("b ") {
            break;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "c never down: {servers}\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let codes = in_ns(&ns, || {
        (0..8).map(|_| get("127.0.0.1:8080")).collect::<Vec<_>>()
    });
    assert!(codes.iter().all(|c| *c == 200), "{codes:?}\n{}", log());
    let drained = netsched_balance::control::request(&sock, "drain b").unwrap();
    assert!(!drained.contains("error"), "{drained}");

    // The daemon is quiescent by now: one load, the scrape right after.
    let mut page = StatusPage::new(Some(&ns), &format!("http://{ADMIN}/"));
    page.patience = PATIENCE;
    let page_shown = page.load();
    let admin = ADMIN.parse().unwrap();
    let (code, text) = in_ns(&ns, move || scrape(admin, PATIENCE).unwrap());
    assert_eq!(code, 200);
    let samples = parse_exposition(&text).unwrap();
    let dom = &page_shown.dom;
    let servers = page_shown.table("servers");
    let cell = |row: &str, col: &str| servers.cell(row, col);
    let number = |row: &str, col: &str| servers.number(row, col);
    assert_eq!(servers.rows(), ["a", "b", "c"], "{dom}");
    for b in ["a", "b", "c"] {
        let m = |name: &str| {
            value(&samples, name, Some(b)).unwrap_or_else(|| panic!("{name}{{backend={b}}}"))
        };
        let state = samples
            .iter()
            .find(|s| {
                s.name == "netsched_balance_admin_state"
                    && s.label("backend") == Some(b)
                    && s.value == 1.0
            })
            .and_then(|s| s.label("state"))
            .unwrap();
        assert_eq!(cell(b, "state"), state, "{b}");
        let health = if m("netsched_balance_health_up") == 1.0 {
            "up"
        } else {
            "down"
        };
        assert_eq!(cell(b, "health"), health, "{b}");
        for (col, name) in [
            ("weight", "netsched_balance_configured_weight"),
            ("effective", "netsched_balance_effective_weight"),
            ("active", "netsched_balance_active_connections"),
            ("inactive", "netsched_balance_inactive_connections"),
            ("requests", "netsched_balance_requests_total"),
        ] {
            assert_eq!(number(b, col), m(name), "{b}/{col}");
        }
        let errors = value(&samples, "netsched_balance_errors_total", Some(b)).unwrap_or(0.0);
        assert_eq!(number(b, "errors"), errors, "{b}/errors");
        let count = m("netsched_balance_response_seconds_count");
        if count > 0.0 {
            let mean = m("netsched_balance_response_seconds_sum") / count;
            // Shown in ms with 3 decimals.
            assert!(
                (number(b, "response") - mean).abs() <= 0.6e-6,
                "{b}: {mean}"
            );
        } else {
            assert_eq!(cell(b, "response"), "–", "{b}");
        }
        assert_eq!(
            number(b, "rate"),
            0.0,
            "{b}: nothing moved between refreshes"
        );
    }
    // What the scenario made: the page shows it, not only agrees with /metrics.
    assert_eq!(
        (cell("a", "state"), cell("b", "state"), cell("c", "health")),
        ("ready".into(), "drain".into(), "down".into())
    );
    assert_eq!(number("a", "requests") + number("b", "requests"), 8.0);
    let fig = |id: &str| page_shown.figure_number(id);
    assert_eq!(
        fig("requests"),
        value(&samples, "netsched_balance_requests_total", None).unwrap()
    );
    assert_eq!(
        fig("queued"),
        value(&samples, "netsched_balance_queue_length", None).unwrap()
    );
    assert_eq!(
        fig("clients"),
        value(&samples, "netsched_balance_client_connections", None).unwrap()
    );
    assert_eq!(
        fig("errors"),
        value(&samples, "netsched_balance_errors_total", None).unwrap_or(0.0)
    );
    assert_eq!(
        fig("refused"),
        value(&samples, "netsched_balance_refused_total", None).unwrap_or(0.0)
    );
    client_side_tables(&page_shown, &samples);
    if let Some(png) = screenshot_asked() {
        page.screenshot(&png).unwrap();
    }
}

/// The client side's tables and figure: no TLS listener, so no handshakes; the eight requests
/// came on eight HTTP/1.1 connections, none as an HTTP/2 stream.
fn client_side_tables(page: &status_page::Shown, samples: &[Sample]) {
    let dom = &page.dom;
    assert!(page.table("tls").rows().is_empty(), "{dom}");
    assert!(dom.contains("no TLS handshakes"), "{dom}");
    let protocols = page.table("protocols");
    assert_eq!(protocols.rows(), ["http/1.1"], "{dom}");
    let by_protocol = samples
        .iter()
        .find(|s| {
            s.name == "netsched_balance_client_protocol_connections_total"
                && s.label("protocol") == Some("http/1.1")
        })
        .map(|s| s.value);
    assert_eq!(
        Some(protocols.number("http/1.1", "connections")),
        by_protocol
    );
    assert_eq!(by_protocol, Some(8.0));
    assert_eq!(
        page.figure_number("h2_streams"),
        value(samples, "netsched_balance_h2_streams_total", None).unwrap_or(0.0)
    );
    assert_eq!(page.figure_number("h2_streams"), 0.0);
}

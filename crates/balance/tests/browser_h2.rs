//! Debian's headless Chromium loads a page through the balancer over HTTPS and gets it over
//! HTTP/2 (loopback, no privileges): the balancer terminates TLS with a self-signed ECDSA
//! certificate the browser is told to trust by its key alone
//! (`--ignore-certificate-errors-spki-list`, the base64 SHA-256 of the SubjectPublicKeyInfo),
//! in front of a backend answering a page whose script writes the navigation's
//! `nextHopProtocol` (W3C Resource Timing: the ALPN protocol id) into the DOM. The DOM the
//! browser dumps must say `h2`; the balancer must have counted its connections (one, or two
//! when the browser raced a spare one) all `h2` with a handshake `ok` each, none `http/1.1`,
//! and one HTTP/2 stream; its access log must show the request as
//! `"GET https://127.0.0.1:PORT/ HTTP/2.0" TLSv1.3/h2 TLS_…` (a TLS 1.3 suite by its IANA
//! name). Skips with a reason without chromium (fails instead under CI=true); the browser's profile folder is its own and removed, and its processes are ended
//! by id (netsched_testbed::chromium).

mod common;

use common::https::{base64, sha256, Site};
use common::{config_text, html_backend, metric, metrics_text, start, PATIENCE};
use netsched_testbed::{chromium, TempDir};
use std::time::Duration;

/// Writes the protocol the page itself came by into `#proto`, in a form no other text of the
/// page has. Its icon is inline, so the browser fetches nothing else: a `/favicon.ico` goes
/// without credentials, which Chromium sends over a connection of its own, and the count of
/// connections would depend on whether it came before the browser quit.
const PAGE: &str = "<!doctype html><html><head><title>h2</title>\
<link rel=\"icon\" href=\"data:,\"></head><body>\
<p id=\"proto\">pending</p><script>\
const nav = performance.getEntriesByType('navigation')[0];\
document.getElementById('proto').textContent = 'next-hop=' + (nav ? nav.nextHopProtocol : 'none');\
</script></body></html>";

/// The protocol the page reported (what follows `next-hop=` up to the element's end).
fn reported(dom: &str) -> Option<&str> {
    let at = dom.find("next-hop=")? + "next-hop=".len();
    dom[at..].split('<').next()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_loads_a_page_through_the_balancer_over_h2() {
    let test = "chromium_loads_a_page_through_the_balancer_over_h2";
    if !chromium::test_allowed(test) {
        return;
    }
    let dir = TempDir::new("bal-browser-h2").unwrap();
    let site = Site::new(&dir);
    let be = html_backend("page", PAGE).await;
    let log = dir.path().join("access.log");
    let top = format!(
        "admin = \"127.0.0.1:0\"\naccess_log = \"{}\"",
        log.display()
    );
    let text = config_text("l7", "{ kind = \"rr\" }", &top, &site.table(), &[&be], &dir);
    let r = start(&text, &dir).await;
    let url = format!("https://127.0.0.1:{}/", r.listen[0].port());
    let trust = format!("--ignore-certificate-errors-spki-list={}", site.spki_sha256);
    let page = url.clone();
    let dom = tokio::task::spawn_blocking(move || {
        chromium::dump_dom_with(None, &page, &[&trust], Duration::from_secs(5), PATIENCE)
    })
    .await
    .unwrap()
    .unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(reported(&dom), Some("h2"), "{dom}");
    assert!(be.hits() >= 1, "the page came from the backend");

    // Chromium may open a spare connection beside the one the page came on (it races a second
    // socket for a navigation, and closes it unused): every one must be h2, and the page one
    // stream.
    let m = metrics_text(&r);
    let count = |series: &str| metric(&m, series);
    let h2 = count("netsched_balance_client_protocol_connections_total{protocol=\"h2\"}");
    assert!((1.0..=2.0).contains(&h2), "{m}");
    assert_eq!(
        count("netsched_balance_client_protocol_connections_total{protocol=\"http/1.1\"}"),
        0.0,
        "{m}"
    );
    assert_eq!(
        count("netsched_balance_tls_handshakes_total{reason=\"ok\"}"),
        h2,
        "{m}"
    );
    assert_eq!(count("netsched_balance_h2_streams_total"), 1.0, "{m}");

    // An HTTP/2 request's target is its :scheme, :authority and :path (RFC 9113 §8.3.1).
    let want = format!("-- \"GET {url} HTTP/2.0\" TLSv1.3/h2 TLS_");
    let logged =
        common::eventually(|| std::fs::read_to_string(&log).is_ok_and(|t| t.contains(&want))).await;
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(logged, "no line with {want:?}:\n{text}");
}

#[test]
fn base64_and_sha256_match_their_rfc_test_vectors() {
    // RFC 4648 §10.
    for (i, o) in [
        ("", ""),
        ("f", "Zg=="),
        ("fo", "Zm8="),
        ("foo", "Zm9v"),
        ("foobar", "Zm9vYmFy"),
    ] {
        assert_eq!(base64(i.as_bytes()), o);
    }
    // FIPS 180-2 appendix B.1: SHA-256("abc").
    assert_eq!(
        base64(&sha256(b"abc")),
        "ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0="
    );
}

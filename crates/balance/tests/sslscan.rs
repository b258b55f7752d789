//! What an outside scanner sees of a TLS listener (loopback, no privileges): Debian's
//! `sslscan` (OpenSSL underneath) against a balancer serving a self-signed ECDSA certificate,
//! its XML report (`--xml=-`) read back. SSLv2, SSLv3, TLS 1.0 and 1.1 must be disabled and
//! TLS 1.2 and 1.3 enabled; every accepted cipher must be AEAD (AES-GCM or
//! ChaCha20-Poly1305), none CBC, RC4, NULL, 3DES or export-grade. Skips with a reason without
//! sslscan (fails instead under CI=true; scripts/test installs it).

mod common;

use common::https::Site;
use common::{config_text, http_backend, start, PATIENCE};
use netsched_testbed::process::Process;
use netsched_testbed::TempDir;
use std::process::{Command, Stdio};

const SSLSCAN: &str = "/usr/bin/sslscan";

/// `true` if sslscan is here; else why the test skips (a panic under CI=true).
fn sslscan_allowed(test: &str) -> bool {
    if std::path::Path::new(SSLSCAN).exists() {
        return true;
    }
    let why = format!("{SSLSCAN} not found (Debian package `sslscan`; scripts/test installs it)");
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: {why}, and CI=true requires it to run");
    }
    eprintln!("SKIP {test}: {why}");
    false
}

/// The attributes of every `<tag …/>` element of the report, as (name, value) pairs.
fn elements<'a>(xml: &'a str, tag: &str) -> Vec<Vec<(&'a str, &'a str)>> {
    let open = format!("<{tag} ");
    xml.match_indices(&open)
        .filter_map(|(at, _)| {
            let body = &xml[at + open.len()..];
            let body = &body[..body.find('>')?];
            Some(attributes(body))
        })
        .collect()
}

/// `a="1" b="x y"` → [("a", "1"), ("b", "x y")].
fn attributes(mut s: &str) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    while let Some(eq) = s.find("=\"") {
        let name = s[..eq].trim();
        let rest = &s[eq + 2..];
        let Some(end) = rest.find('"') else { break };
        out.push((name, &rest[..end]));
        s = &rest[end + 1..];
    }
    out
}

fn attr<'a>(e: &[(&'a str, &'a str)], name: &str) -> Option<&'a str> {
    e.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
}

/// Whether an OpenSSL or IANA cipher name is an AEAD suite the balancer may offer.
fn aead(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    let sealed =
        n.contains("GCM") || n.contains("CHACHA20-POLY1305") || n.contains("CHACHA20_POLY1305");
    let weak = ["CBC", "RC4", "NULL", "DES", "EXP", "MD5"]
        .iter()
        .any(|w| n.contains(w));
    sealed && !weak
}

/// sslscan's XML report on `addr`.
fn scan(addr: std::net::SocketAddr) -> String {
    let mut cmd = Command::new(SSLSCAN);
    cmd.args([
        "--no-colour",
        "--no-heartbleed",
        "--xml=-",
        &addr.to_string(),
    ])
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let out = Process::start(cmd, "sslscan")
        .and_then(|p| p.finish(PATIENCE * 3))
        .unwrap_or_else(|e| panic!("sslscan: {e:#}"));
    assert!(out.contains("</document>"), "no whole report:\n{out}");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sslscan_finds_only_tls_1_2_and_1_3_with_aead_ciphers() {
    let test = "sslscan_finds_only_tls_1_2_and_1_3_with_aead_ciphers";
    if !sslscan_allowed(test) {
        return;
    }
    let dir = TempDir::new("bal-sslscan").unwrap();
    let site = Site::new(&dir);
    let be = http_backend("web").await;
    let text = config_text("l7", "{ kind = \"rr\" }", "", &site.table(), &[&be], &dir);
    let r = start(&text, &dir).await;
    let addr = r.listen[0];
    let xml = tokio::task::spawn_blocking(move || scan(addr))
        .await
        .unwrap();

    let enabled = |kind: &str, version: &str| {
        elements(&xml, "protocol")
            .iter()
            .find(|p| attr(p, "type") == Some(kind) && attr(p, "version") == Some(version))
            .and_then(|p| attr(p, "enabled"))
            .unwrap_or_else(|| panic!("no protocol {kind} {version} in the report:\n{xml}"))
            == "1"
    };
    for (kind, version) in [("ssl", "2"), ("ssl", "3"), ("tls", "1.0"), ("tls", "1.1")] {
        assert!(!enabled(kind, version), "{kind} {version} enabled:\n{xml}");
    }
    for version in ["1.2", "1.3"] {
        assert!(enabled("tls", version), "TLS {version} disabled:\n{xml}");
    }
    let ciphers = elements(&xml, "cipher");
    let accepted: Vec<_> = ciphers
        .iter()
        .filter(|c| matches!(attr(c, "status"), Some("accepted" | "preferred")))
        .collect();
    for version in ["TLSv1.2", "TLSv1.3"] {
        assert!(
            accepted
                .iter()
                .any(|c| attr(c, "sslversion") == Some(version)),
            "no {version} cipher accepted:\n{xml}"
        );
    }
    for c in &accepted {
        eprintln!(
            "accepted: {} {} {} bits",
            attr(c, "sslversion").unwrap_or_default(),
            attr(c, "cipher").unwrap_or_default(),
            attr(c, "bits").unwrap_or_default()
        );
    }
    for c in &accepted {
        let name = attr(c, "cipher").unwrap_or_default();
        assert!(aead(name), "a cipher that is not AEAD: {c:?}\n{xml}");
        assert!(
            matches!(attr(c, "sslversion"), Some("TLSv1.2" | "TLSv1.3")),
            "{c:?}"
        );
    }
}

#[test]
fn aead_names_are_told_from_the_others() {
    for good in [
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        "TLS_AES_256_GCM_SHA384",
        "TLS_CHACHA20_POLY1305_SHA256",
    ] {
        assert!(aead(good), "{good}");
    }
    for bad in [
        "ECDHE-ECDSA-AES128-SHA",
        "ECDHE-RSA-AES256-SHA384",
        "AES128-CBC-SHA",
        "RC4-SHA",
        "NULL-SHA256",
        "DES-CBC3-SHA",
        "EXP-RC4-MD5",
    ] {
        assert!(!aead(bad), "{bad}");
    }
    let e = attributes(
        r#"status="accepted" sslversion="TLSv1.3" bits="128" cipher="TLS_AES_128_GCM_SHA256" id="0x1301""#,
    );
    assert_eq!(attr(&e, "cipher"), Some("TLS_AES_128_GCM_SHA256"));
    assert_eq!(attr(&e, "id"), Some("0x1301"));
}

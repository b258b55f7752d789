//! Operating a running balancer on loopback: reloads that change health checking, metric
//! series across add/del-server, and what the control socket answers to bad or multiple
//! arguments and to malformed request lines.

mod common;
use common::*;
use netsched_testbed::TempDir;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn ctl(r: &netsched_balance::Running, line: &str) -> Result<String, String> {
    netsched_balance::control::request(&r.control_socket, line).map_err(|e| e.to_string())
}

/// Checks take both servers down (the backends answer 200, the check expects 204); a reload
/// without `[health]` brings them back at once (no check runs any more that could), logged
/// in the reload notes and exported as `health_up` 1; `maint`/`ready` keep them serving; a
/// reload that brings the checks back starts checking again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_taken_down_by_checks_serve_again_after_a_reload_without_health() {
    let (a, b) = (http_backend("a").await, http_backend("b").await);
    let dir = TempDir::new("bal-unhealth").unwrap();
    let failing = "[health]\nkind = \"http\"\npath = \"/health\"\nexpect_status = 204\n\
                   interval = \"100ms\"\nrise = 1\nfall = 1\ntimeout = \"500ms\"";
    let with_checks = config_text(
        "l7",
        "{ kind = \"rr\" }",
        "admin = \"127.0.0.1:0\"",
        failing,
        &[&a, &b],
        &dir,
    );
    let r = start(&with_checks, &dir).await;
    assert!(
        eventually(|| r.service.show().iter().all(|s| s.health == "down")).await,
        "checks never took the servers down: {:?}",
        r.service.show()
    );
    assert_eq!(get(r.listen[0], "/", "x").await.0, 503);

    let without = config_text(
        "l7",
        "{ kind = \"rr\" }",
        "admin = \"127.0.0.1:0\"",
        "",
        &[&a, &b],
        &dir,
    );
    std::fs::write(dir.path().join("balance.toml"), &without).unwrap();
    let notes = r.reload().unwrap();
    for name in ["a", "b"] {
        assert!(
            notes
                .iter()
                .any(|n| n == &format!("server {name} up (health checks removed)")),
            "{notes:?}"
        );
        let row = row(&r, name);
        assert_eq!((row.health, row.effective_weight), ("up", 1), "{row:?}");
        assert_eq!(
            row.last_check, None,
            "a stale check result is shown: {row:?}"
        );
    }
    let m = metrics_text(&r);
    for name in ["a", "b"] {
        let key = format!("netsched_balance_health_up{{backend=\"{name}\"}}");
        assert_eq!(metric(&m, &key), 1.0, "{m}");
    }
    let mut seen = Vec::new();
    for _ in 0..4 {
        let (status, body) = get(r.listen[0], "/", "x").await;
        assert_eq!(status, 200, "{body}");
        seen.push(body);
    }
    seen.sort();
    assert_eq!(seen, ["a", "a", "b", "b"]);

    // maint then ready, and another reload: still serving.
    ctl(&r, "maint a b").unwrap();
    assert_eq!(get(r.listen[0], "/", "x").await.0, 503);
    ctl(&r, "ready a b").unwrap();
    assert_eq!(get(r.listen[0], "/", "x").await.0, 200);
    r.reload().unwrap();
    assert_eq!(get(r.listen[0], "/", "x").await.0, 200);

    // The checks come back with the next reload that configures them.
    std::fs::write(dir.path().join("balance.toml"), &with_checks).unwrap();
    r.reload().unwrap();
    assert!(
        eventually(|| r.service.show().iter().all(|s| s.health == "down")).await,
        "checks did not resume: {:?}",
        r.service.show()
    );
}

/// Add and delete servers many times through the control socket, with requests that create
/// every per-server series (requests, response times, active/inactive, weight, health, an
/// error): `/metrics` after 100 cycles is the size it was after one, and names none of them.
/// An error of a server deleted while its request was in flight is counted under
/// `backend="(removed)"`, not in a series of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_servers_leave_no_metric_series() {
    let live = http_backend("live").await;
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let dir = TempDir::new("bal-series").unwrap();
    let r = start(
        &config_text(
            "l7",
            "{ kind = \"rr\" }",
            "admin = \"127.0.0.1:0\"",
            "[timeouts]\nserver = \"3s\"",
            &[],
            &dir,
        ),
        &dir,
    )
    .await;
    let body_len = |r: &netsched_balance::Running| {
        let m = metrics_text(r);
        m.split_once("\r\n\r\n").map_or(0, |(_, b)| b.len())
    };
    let mut after_one = 0;
    const CYCLES: usize = 100;
    for i in 1..=CYCLES {
        ctl(&r, &format!("add-server s{i} {}", live.addr)).unwrap();
        assert_eq!(get(r.listen[0], "/", "x").await, (200, "live".to_string()));
        if i == 1 {
            let m = metrics_text(&r);
            for key in [
                "netsched_balance_requests_total{backend=\"s1\"}",
                "netsched_balance_response_seconds_count{backend=\"s1\"}",
                "netsched_balance_effective_weight{backend=\"s1\"}",
                "netsched_balance_health_up{backend=\"s1\"}",
            ] {
                assert_eq!(metric(&m, key), 1.0, "{key}: {m}");
            }
        }
        ctl(&r, &format!("del-server s{i}")).unwrap();
        ctl(&r, &format!("add-server d{i} {dead}")).unwrap();
        assert_eq!(get(r.listen[0], "/", "x").await.0, 502);
        if i == 1 {
            let m = metrics_text(&r);
            let key = "netsched_balance_errors_total{backend=\"d1\",reason=\"connect\"}";
            assert_eq!(metric(&m, key), 1.0, "{m}");
        }
        ctl(&r, &format!("del-server d{i}")).unwrap();
        if i == 1 {
            after_one = body_len(&r);
        }
    }
    let m = metrics_text(&r);
    let after_all = body_len(&r);
    let left: Vec<&str> = m
        .lines()
        .filter(|l| l.contains("backend=\"s") || l.contains("backend=\"d"))
        .collect();
    assert!(
        left.is_empty(),
        "{} series of deleted servers, e.g. {:?}",
        left.len(),
        &left[..left.len().min(5)]
    );
    // Only counter digits may differ (refused/requests totals are per-reason, not per-server).
    assert!(
        after_all <= after_one + 64,
        "/metrics grew from {after_one} to {after_all} bytes over {CYCLES} add/del cycles"
    );
    eprintln!(
        "/metrics body: {after_one} bytes after one add/del cycle, {after_all} after {CYCLES}"
    );

    // In flight when deleted (seen active within the 3 s server timeout, polled every 20 ms):
    // the 504 is counted, under the placeholder label.
    ctl(&r, &format!("add-server slow {}", live.addr)).unwrap();
    let addr = r.listen[0];
    let req = tokio::spawn(async move { get(addr, "/sleep/20000", "x").await });
    assert!(eventually(|| row(&r, "slow").active == 1).await);
    ctl(&r, "del-server slow").unwrap();
    let (status, _) = req.await.unwrap();
    assert_eq!(status, 504);
    let m = metrics_text(&r);
    assert_eq!(
        metric(
            &m,
            "netsched_balance_errors_total{backend=\"(removed)\",reason=\"server_timeout\"}"
        ),
        1.0,
        "{m}"
    );
    assert!(!m.contains("backend=\"slow\""), "{m}");
}

/// Send raw bytes to the control socket, half-close, read the whole answer.
async fn raw_request(sock: &std::path::Path, bytes: &[u8]) -> String {
    let mut s = tokio::net::UnixStream::connect(sock).await.unwrap();
    s.write_all(bytes).await.unwrap();
    s.shutdown().await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(PATIENCE, s.read_to_end(&mut out))
        .await
        .expect("no answer")
        .unwrap();
    String::from_utf8_lossy(&out).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_takes_several_names_refuses_extra_arguments_and_answers_bad_lines() {
    let (a, b) = (http_backend("a").await, http_backend("b").await);
    let dir = TempDir::new("bal-ctlargs").unwrap();
    let r = start(
        &config_text("l7", "{ kind = \"rr\" }", "", "", &[&a, &b], &dir),
        &dir,
    )
    .await;
    let admin = |name: &str| format!("{:?}", row(&r, name).admin).to_lowercase();

    // Several names: all of them.
    let out = ctl(&r, "drain a b").unwrap();
    assert_eq!(out, "a drain\nb drain\n");
    assert_eq!((admin("a"), admin("b")), ("drain".into(), "drain".into()));
    assert_eq!(get(r.listen[0], "/", "x").await.0, 503);
    ctl(&r, "ready a b").unwrap();
    assert_eq!((admin("a"), admin("b")), ("ready".into(), "ready".into()));
    // An unknown name refuses the whole line: nothing changes.
    let e = ctl(&r, "maint a nobody").unwrap_err();
    assert!(
        e.contains("nobody") && e.contains("no server changed"),
        "{e}"
    );
    assert_eq!(admin("a"), "ready");
    let e = ctl(&r, "drain").unwrap_err();
    assert!(e.contains("missing server name"), "{e}");

    // Fixed-arity commands refuse what follows.
    for (line, extra) in [
        ("set-weight a 3 4", "\"4\""),
        ("del-server a b", "\"b\""),
        ("show-servers --json x", "\"x\""),
        ("show-servers --jsn", "\"--jsn\""),
        ("show --jsn", "\"--jsn\""),
    ] {
        let e = ctl(&r, line).unwrap_err();
        assert!(e.contains(extra), "{line}: {e}");
    }
    assert_eq!(row(&r, "a").weight, 1);
    assert_eq!(
        r.service.show().len(),
        2,
        "del-server a b removed something"
    );

    // add-server refuses addresses nobody can connect to.
    for addr in ["127.0.0.1:0", "0.0.0.0:80", "[::]:80"] {
        let e = ctl(&r, &format!("add-server z {addr}")).unwrap_err();
        assert!(e.contains(addr) && e.contains("\"z\""), "{addr}: {e}");
    }
    assert_eq!(r.service.show().len(), 2);
    // ... and one another server already has.
    let taken = row(&r, "a").addr;
    let e = ctl(&r, &format!("add-server z {taken}")).unwrap_err();
    assert!(e.contains(&taken) && e.contains("\"a\""), "{e}");
    assert_eq!(r.service.show().len(), 2);

    // Malformed lines get an error line that says what is wrong.
    let sock = r.control_socket.clone();
    let out = raw_request(&sock, b"show-servers").await;
    assert!(
        out.starts_with("error: ") && out.contains("without a newline"),
        "{out:?}"
    );
    let out = raw_request(&sock, b"drain \xff\xfe\n").await;
    assert!(
        out.starts_with("error: ") && out.contains("not UTF-8") && out.contains("0xff"),
        "{out:?}"
    );
    let out = raw_request(&sock, b"").await;
    assert!(out.starts_with("error: no request"), "{out:?}");
    let long = vec![b'x'; 5000];
    let out = raw_request(&sock, &long).await;
    assert!(out.starts_with("error: request longer than"), "{out:?}");
    // Words without a newline from a client that does not half-close: an error at the
    // deadline (a client that sends nothing is closed without one, as before).
    let mut s = tokio::net::UnixStream::connect(&sock).await.unwrap();
    s.write_all(b"show-servers").await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(PATIENCE, s.read_to_end(&mut out))
        .await
        .expect("no answer")
        .unwrap();
    let out = String::from_utf8_lossy(&out);
    assert!(
        out.starts_with("error: no complete request line within 2s: 12 bytes"),
        "{out:?}"
    );
    // A good line still works.
    let out = raw_request(&sock, b"show-servers\n").await;
    assert!(out.starts_with("ok\n"), "{out:?}");
    // And nothing stalled the data path.
    tokio::time::timeout(Duration::from_secs(20), get(r.listen[0], "/", "x"))
        .await
        .unwrap();
}

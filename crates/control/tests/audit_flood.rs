//! Fault: 3,000 refused 4 KB control requests wrote 36 MB of warnings in under a second.
//! Through a real socket and the line handler every daemon of the `ok`/`error:` protocol uses,
//! the warnings are bounded by the rate limit and each refusal is still counted.
//!
//! This file holds one test: it installs the process's global log subscriber (the server's
//! connection threads log through it). No verdict depends on speed: the bound on the log is
//! computed from the time the run took.

use netsched_control::{audit, exchange, BindMode, Limits, LineEnd, LogCapture, OkOrError};
use netsched_control::{Server, ServerConfig, WhenFull};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn three_thousand_refused_4_kb_requests_write_a_bounded_log_and_are_all_counted() {
    let out = LogCapture::default();
    let sink = out.clone();
    tracing::subscriber::set_global_default(
        tracing_subscriber::fmt()
            .with_writer(move || sink.clone())
            .with_ansi(false)
            .finish(),
    )
    .unwrap();
    let dir = std::env::temp_dir().join(format!("netsched-ctl-flood-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("ctl.sock");
    let config = ServerConfig {
        daemon: "test daemon",
        thread_name: "ctl-flood",
        limits: Limits {
            max_connections: 16,
            max_line: 8192,
            request_within: Duration::from_secs(5),
            answer_within: Duration::from_secs(5),
        },
        when_full: WhenFull::Wait,
        line_end: LineEnd::Newline,
        bind: BindMode::Exclusive,
        nice: None,
    };
    let handler = OkOrError(
        |line: &str, _| -> Result<String, String> { Err(format!("unknown command {line:?}")) },
        |verb| verb == "show",
    );
    let server = Server::start(&sock, None, config, Arc::new(handler)).unwrap();
    let bad = format!("set-x {}", "y".repeat(4090));
    let t = Instant::now();
    for _ in 0..3000 {
        let answer = exchange(&sock, &bad, Duration::from_secs(10), "t").unwrap();
        assert!(answer.starts_with("error: unknown command"), "{answer}");
    }
    let took = t.elapsed();
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    let log = out.text();
    let warnings = log.lines().filter(|l| l.contains(" WARN ")).count() as u64;
    // Every refusal counted: written, or left out and counted as such.
    assert_eq!(audit::refused_requests(), 3000);
    assert_eq!(
        warnings + audit::suppressed_warnings(),
        3000,
        "{warnings} written"
    );
    // At most the limit in each second the run took (plus the one it started in), each line
    // at most ~1 KiB: kilobytes, not the megabytes of 3,000 whole requests.
    let seconds = took.as_secs() + 2;
    let most = seconds * u64::from(audit::WARNINGS_PER_SECOND);
    assert!(warnings <= most, "{warnings} warnings in {took:?}");
    assert!(
        log.len() as u64 <= most * 1024,
        "{} bytes of log in {took:?}",
        log.len()
    );
    assert!(
        log.contains("refused requests not logged before this one")
            || took < Duration::from_secs(2)
    );
}

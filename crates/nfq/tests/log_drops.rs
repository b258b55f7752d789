//! The daemons' text and JSON log writers when stderr stops draining (docs/logging.md): a
//! process whose stderr is a pipe nobody reads logs far more lines than the pipe and the
//! writer's queue ([`QUEUE_LINES`]) hold. Every log call returns, the lines that did not fit
//! are dropped and counted, and the count is what `netsched_log_dropped_lines_total` exports
//! (registered as every daemon registers it, nfq's metrics included).
//!
//! The logging process is this test binary run again as a child (`NETSCHED_LOG_DROPS_FORMAT`
//! set), so that the real subscriber ([`netsched_util::logging::init`]) writes to a real
//! stderr; the parent holds the pipe's read end open and never reads it. The verdict is on
//! counts: every call returned, and at least as many lines were dropped as cannot have fit.

use netsched_metrics::prometheus_client::{encoding::text::encode, registry::Registry};
use netsched_util::logging::{self, LogFormat, QUEUE_LINES};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const FORMAT_VAR: &str = "NETSCHED_LOG_DROPS_FORMAT";
/// Events logged: the queue and the pipe together hold far fewer (see [`PAD`]).
const EVENTS: usize = 3 * QUEUE_LINES;
/// Each event carries this many bytes, so a 64 KiB pipe holds at most ~200 lines.
const PAD: usize = 300;

/// The child's side: log [`EVENTS`] events through the real subscriber, then print how many
/// calls returned and the exposition of the dropped-lines counter on stdout.
fn log_into_stderr(format: LogFormat) -> ! {
    let guard = logging::init(format, "netsched-test").unwrap();
    let pad = "x".repeat(PAD);
    let mut returned = 0usize;
    for i in 0..EVENTS {
        tracing::info!(seq = i, pad = pad.as_str(), "event {i}");
        returned += 1;
    }
    let mut registry = Registry::default();
    netsched_metrics::register_log_drops(&mut registry, logging::dropped_lines);
    let mut text = String::new();
    encode(&mut text, &registry).unwrap();
    let mut out = std::io::stdout().lock();
    // On a line of its own (the test harness has begun a line on stdout).
    writeln!(out, "\nreturned {returned}").unwrap();
    write!(out, "{text}").unwrap();
    out.flush().unwrap();
    drop(out);
    // Its flush gives up after about a second (the writer thread is stuck in the pipe).
    drop(guard);
    std::process::exit(0)
}

/// Run this test again as a child logging in `format` with stderr a pipe nobody reads;
/// its stdout lines.
fn run_child(format: &str) -> Vec<String> {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "text_and_json_writers_count_dropped_lines_when_stderr_stalls",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(FORMAT_VAR, format)
        .env_remove("NETSCHED_LOG")
        .env_remove("JOURNAL_STREAM")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Held open, never read: once the pipe is full every write to it waits forever.
    let _stderr = child.stderr.take();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let lines: Vec<String> = BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect();
        let _ = tx.send(lines);
    });
    // Only turns a hang into a failure (and ends the child, by its pid); the verdict is on
    // the counts.
    let lines = rx.recv_timeout(Duration::from_secs(300));
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if child.try_wait().unwrap().is_none() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{format}: the logging process did not end");
    }
    lines.unwrap_or_else(|_| panic!("{format}: no answer from the logging process"))
}

#[test]
fn text_and_json_writers_count_dropped_lines_when_stderr_stalls() {
    if let Ok(f) = std::env::var(FORMAT_VAR) {
        log_into_stderr(f.parse().unwrap());
    }
    for format in ["text", "json"] {
        let lines = run_child(format);
        let text = lines.join("\n");
        assert!(
            lines.iter().any(|l| l == &format!("returned {EVENTS}")),
            "{format}: not every log call returned:\n{text}"
        );
        let dropped: usize = lines
            .iter()
            .find_map(|l| l.strip_prefix("netsched_log_dropped_lines_total "))
            .unwrap_or_else(|| panic!("{format}: no counter in:\n{text}"))
            .trim()
            .parse()
            .unwrap();
        // At most the queue, one line in the writer's hands and what the pipe took (< 64 KiB
        // of lines longer than PAD bytes) were not dropped.
        let kept_at_most = QUEUE_LINES + 1 + (64 << 10) / PAD;
        assert!(
            dropped >= EVENTS - kept_at_most && dropped <= EVENTS,
            "{format}: {dropped} of {EVENTS} lines dropped"
        );
    }
}

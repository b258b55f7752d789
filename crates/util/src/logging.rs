//! Where a netsched program's `tracing` events go: one subscriber, installed once by each
//! binary's `main` (the `netsched` tool and the daemons' own binaries), never by a library.
//!
//! - **text** (the default): one human line per event, `2026-11-27T02:31:07.123456Z  INFO
//!   netsched_balance::service: server s2 is down reason="connect refused"`, UTC timestamps;
//! - **json**: one JSON object per line (`timestamp`, `level`, `target`, `fields`);
//! - **journald**: when started by systemd with stderr connected to the journal, events go to
//!   journald's native protocol (`tracing-journald`), so `journalctl -o verbose` shows every field
//!   as its own journal field and the priority follows the level. systemd.exec(5) ("Environment
//!   variables in spawned processes", `JOURNAL_STREAM`) says how to tell: the variable holds the
//!   device and inode of the stream connected to the journal, and a program compares them with its
//!   own stderr, which also keeps a child whose stderr was redirected from taking the native path.
//!
//! Never blocking the data path: text and json are formatted on the calling thread into a buffer
//! and handed to `tracing-appender`'s non-blocking writer, a bounded queue of [`QUEUE_LINES`]
//! lines drained by one writer thread. It is **lossy**: when stderr does not drain (a pipe
//! nobody reads, a stuck terminal) lines beyond the queue are dropped, never waited for, and
//! counted ([`dropped_lines`], exported by every daemon as `netsched_log_dropped_lines_total`).
//! The journald path sends one datagram per event from the calling thread
//! (`tracing-journald` has no queue of its own); journald's socket has a large receive buffer and
//! the kernel queues datagrams, but a journald that stops reading can make that send wait, which
//! docs/logging.md states as the one bound this module does not give.

use std::fmt;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::str::FromStr;
use std::sync::OnceLock;
use tracing_appender::non_blocking::{ErrorCounter, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Lines waiting for stderr at most; more are dropped and counted.
pub const QUEUE_LINES: usize = 8192;

/// How log lines are written (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// One human line per event with a UTC timestamp.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            _ => Err(format!(
                "--log-format: unknown format {s:?} (expected \"text\" or \"json\")"
            )),
        }
    }
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Text => "text",
            Self::Json => "json",
        })
    }
}

/// Where the subscriber sends events, as chosen by [`init`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sink {
    Stderr(LogFormat),
    Journald,
}

/// Keeps the writer thread alive; dropping it flushes the queued lines (waiting at most about a
/// second, `tracing-appender`'s bound) so the last lines before exit are not lost.
pub struct LogGuard {
    _worker: Option<WorkerGuard>,
    pub sink: Sink,
}

static DROPPED: OnceLock<ErrorCounter> = OnceLock::new();

/// Lines dropped because stderr did not drain (0 before [`init`] and under journald).
pub fn dropped_lines() -> u64 {
    DROPPED.get().map_or(0, |c| c.dropped_lines() as u64)
}

/// True when stderr is the stream systemd connected to the journal (`JOURNAL_STREAM`,
/// systemd.exec(5)).
pub fn stderr_is_journal() -> bool {
    let Ok(v) = std::env::var("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = v.split_once(':') else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    let Ok(fd) = std::io::stderr().as_fd().try_clone_to_owned() else {
        return false;
    };
    match std::fs::File::from(fd).metadata() {
        Ok(m) => m.dev() == dev && m.ino() == ino,
        Err(_) => false,
    }
}

/// The level kept: `NETSCHED_LOG=error|warn|info|debug|trace` (default info). An unknown value
/// is an error naming the variable and the value.
fn level() -> Result<LevelFilter, String> {
    match std::env::var("NETSCHED_LOG") {
        Err(_) => Ok(LevelFilter::INFO),
        Ok(v) => v.parse::<LevelFilter>().map_err(|_| {
            format!(
                "NETSCHED_LOG: unknown level {v:?} (expected error, warn, info, debug or trace)"
            )
        }),
    }
}

/// Install the process's subscriber. Call once, first thing in `main`; keep the guard until
/// the program ends. `program` names the journal's `SYSLOG_IDENTIFIER`.
pub fn init(format: LogFormat, program: &str) -> Result<LogGuard, String> {
    let level = level()?;
    if stderr_is_journal() {
        if let Ok(layer) = tracing_journald::layer() {
            let layer = layer.with_syslog_identifier(program.to_string());
            tracing_subscriber::registry()
                .with(level)
                .with(layer)
                .try_init()
                .map_err(|e| format!("installing the log subscriber: {e}"))?;
            return Ok(LogGuard {
                _worker: None,
                sink: Sink::Journald,
            });
        }
    }
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(QUEUE_LINES)
        .thread_name("netsched-log")
        .finish(std::io::stderr());
    let _ = DROPPED.set(writer.error_counter());
    let base = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_ansi(false)
        .with_target(true);
    let installed = match format {
        LogFormat::Text => tracing_subscriber::registry()
            .with(level)
            .with(base)
            .try_init(),
        LogFormat::Json => tracing_subscriber::registry()
            .with(level)
            .with(base.json())
            .try_init(),
    };
    installed.map_err(|e| format!("installing the log subscriber: {e}"))?;
    Ok(LogGuard {
        _worker: Some(guard),
        sink: Sink::Stderr(format),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_names_parse_and_print_back() {
        for f in [LogFormat::Text, LogFormat::Json] {
            assert_eq!(f.to_string().parse::<LogFormat>(), Ok(f));
        }
        let e = "xml".parse::<LogFormat>().unwrap_err();
        assert!(e.contains("--log-format") && e.contains("xml"), "{e}");
    }

    #[test]
    fn journal_stream_must_match_stderr() {
        // The test's stderr is not the journal: a made-up device:inode must not match, and a
        // malformed value is ignored rather than trusted.
        std::env::set_var("JOURNAL_STREAM", "1:1");
        assert!(!stderr_is_journal());
        std::env::set_var("JOURNAL_STREAM", "nonsense");
        assert!(!stderr_is_journal());
        std::env::remove_var("JOURNAL_STREAM");
        assert!(!stderr_is_journal());
    }
}

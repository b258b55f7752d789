//! Where a netsched program's `tracing` events go: one subscriber, installed once by each
//! binary's `main` (the `netsched` tool and the daemons' own binaries), never by a library.
//!
//! - **text** (the default): one human line per event, `2026-11-27T02:31:07.123456Z  INFO
//!   netsched_balance::service: server s2 is down reason="connect refused"`, UTC timestamps;
//! - **json**: one JSON object per line (`timestamp`, `level`, `target`, `fields`);
//! - **journald**: when started by systemd with stderr connected to the journal, events go to
//!   journald's native protocol ([`crate::journal`]), so `journalctl -o verbose` shows every
//!   field as its own journal field and the priority follows the level. systemd.exec(5)
//!   ("Environment variables in spawned processes", `JOURNAL_STREAM`) says how to tell: the
//!   variable holds the device and inode of the stream connected to the journal, and a program
//!   compares them with its own stderr, which also keeps a child whose stderr was redirected
//!   from taking the native path.
//!
//! Never blocking the data path: every event is formatted on the calling thread and handed to
//! a bounded queue of [`QUEUE_LINES`] entries drained by one writer thread. For text and json
//! that is `tracing-appender`'s non-blocking writer to stderr; for journald it is
//! [`crate::journal`]'s queue to the journal's socket. Both are **lossy**: when the output
//! does not drain (a pipe nobody reads, a stuck terminal, a journald that stops reading)
//! entries beyond the queue are dropped, never waited for, and counted ([`dropped_lines`],
//! exported by every daemon as `netsched_log_dropped_lines_total`).

use crate::journal::{self, JournalConfig, JournalGuard, JournalStats};
use std::fmt;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::str::FromStr;
use std::sync::OnceLock;
use tracing_appender::non_blocking::{ErrorCounter, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Lines (or journal entries) waiting for stderr (or the journal's socket) at most; more are
/// dropped and counted.
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
/// second, `tracing-appender`'s bound and [`JournalConfig::flush`]) so the last lines before
/// exit are not lost.
pub struct LogGuard {
    _worker: Option<WorkerGuard>,
    _journal: Option<JournalGuard>,
    pub sink: Sink,
}

static DROPPED: OnceLock<ErrorCounter> = OnceLock::new();
static JOURNAL: OnceLock<JournalStats> = OnceLock::new();

/// Lines dropped because stderr or the journal did not take them in time (0 before [`init`]).
pub fn dropped_lines() -> u64 {
    DROPPED.get().map_or(0, |c| c.dropped_lines() as u64)
        + JOURNAL.get().map_or(0, |j| j.drops().total())
}

/// The journald sink's counters (drops by reason, entries sent) when it is the sink.
pub fn journal_stats() -> Option<&'static JournalStats> {
    JOURNAL.get()
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

/// The `main` of a daemon binary after its arguments are parsed: install the subscriber
/// ([`init`]; `program` names the journal's identifier), `run`, flush the log and exit — 0, or
/// 1 with `{prefix}: error: {the error's chain}` on stderr when `run` fails, or 2 when logging
/// cannot start.
pub fn run_main<E: Into<anyhow::Error>>(
    format: LogFormat,
    program: &str,
    prefix: &str,
    run: impl FnOnce() -> Result<(), E>,
) -> ! {
    let log = match init(format, program) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("{prefix}: error: {e}");
            std::process::exit(2);
        }
    };
    let result = run().map_err(Into::into);
    drop(log);
    match result {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("{prefix}: error: {e:#}");
            std::process::exit(1);
        }
    }
}

/// Install the process's subscriber. Call once, first thing in `main`; keep the guard until
/// the program ends. `program` names the journal's `SYSLOG_IDENTIFIER`.
pub fn init(format: LogFormat, program: &str) -> Result<LogGuard, String> {
    let level = level()?;
    let cfg = JournalConfig::new(program, QUEUE_LINES);
    // Without the journal's socket (no journald in this namespace) stderr is used instead.
    if stderr_is_journal() && cfg.socket.exists() {
        let (layer, guard, stats) =
            journal::start(cfg).map_err(|e| format!("starting the journal writer: {e}"))?;
        let _ = JOURNAL.set(stats);
        tracing_subscriber::registry()
            .with(level)
            .with(layer)
            .try_init()
            .map_err(|e| format!("installing the log subscriber: {e}"))?;
        return Ok(LogGuard {
            _worker: None,
            _journal: Some(guard),
            sink: Sink::Journald,
        });
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
        _journal: None,
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

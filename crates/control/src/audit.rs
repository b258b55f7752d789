//! One log line per control request that changes a daemon's state: what was asked, by whom
//! (the peer's `SO_PEERCRED` uid and pid, already checked by [`crate::access`]) and what came
//! of it. Read-only requests (`show…`, `stats`) are not logged: a dashboard polling every
//! second would otherwise fill the log.
//!
//! What a client sent can never forge a log line: control characters (CR, LF, ESC, DEL, the
//! C1 controls and U+2028/U+2029) and `\` in the request and the answer are written escaped
//! (`\r`, `\n`, `\t`, `\\`, `\u{1b}`: [`escape`]), and each is cut to [`MAX_LOGGED_CHARS`]
//! characters (the rest named by its length in bytes).
//!
//! Refused requests are warnings, at most [`WARNINGS_PER_SECOND`] a second per process
//! ([`RateLimit`]); the ones over it are not written but counted, and the next warning
//! written says how many were left out. Every refusal is counted in [`refused_requests`],
//! every one left out in [`suppressed_warnings`]. Requests applied are always logged (they are
//! the audit trail and a client must be allowed to make them).
//!
//! Cost: one lock and a clock read per refused request; a line is at most ~1 KiB.

use crate::server::Request;
use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Characters of a request or an answer written to one log line, at most.
pub const MAX_LOGGED_CHARS: usize = 200;
/// Warnings about refused requests written per second, at most.
pub const WARNINGS_PER_SECOND: u32 = 10;

static REFUSED: AtomicU64 = AtomicU64::new(0);
static REFUSED_WARNINGS: RateLimit = RateLimit::new(WARNINGS_PER_SECOND);

/// Refused requests (state-changing ones) since the process started, logged or not.
pub fn refused_requests() -> u64 {
    REFUSED.load(Ordering::Relaxed)
}

/// Warnings about refused requests left out by the rate limit since the process started.
pub fn suppressed_warnings() -> u64 {
    REFUSED_WARNINGS.suppressed_total.load(Ordering::Relaxed)
}

/// Log `r` and its `answer` (the text sent back: `ok…` / `error: …` or a JSON line) unless
/// `read_only`. Newlines in the answer become `; ` so one request stays one line.
pub fn log_request(r: &Request<'_>, read_only: bool, answer: &str) {
    if read_only {
        return;
    }
    let refused = answer.starts_with("error") || answer.contains("\"ok\":false");
    let summary = answer.trim_end().replace('\n', "; ");
    let outcome = if refused {
        Err(summary.as_str())
    } else {
        Ok(summary.as_str())
    };
    log_outcome(r, outcome);
}

/// Log one state-changing request `r` and what came of it (`Ok(summary)` applied,
/// `Err(why)` refused), escaped, bounded and, when refused, rate-limited.
pub fn log_outcome(r: &Request<'_>, outcome: Result<&str, &str>) {
    let (uid, pid) = (r.peer.uid, r.peer.pid);
    let line = escape(r.line.trim());
    match outcome {
        Ok(summary) => {
            let summary = escape(summary);
            tracing::info!(
                uid,
                pid,
                command = &*line,
                "ctl {line} by uid {uid}: {summary}"
            );
        }
        Err(why) => {
            REFUSED.fetch_add(1, Ordering::Relaxed);
            let Some(left_out) = REFUSED_WARNINGS.admit() else {
                return;
            };
            let why = escape(why);
            let note = match left_out {
                0 => String::new(),
                n => format!(" ({n} refused requests not logged before this one)"),
            };
            tracing::warn!(
                uid,
                pid,
                command = &*line,
                "ctl {line} by uid {uid} refused: {why}{note}"
            );
        }
    }
}

/// `s` with control characters and `\` escaped, cut to [`MAX_LOGGED_CHARS`] characters.
pub fn escape(s: &str) -> Cow<'_, str> {
    let clean = |c: char| !c.is_control() && c != '\\' && c != '\u{2028}' && c != '\u{2029}';
    if s.chars().all(clean) && s.len() <= MAX_LOGGED_CHARS {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len().min(4 * MAX_LOGGED_CHARS));
    for (i, c) in s.chars().enumerate() {
        if i == MAX_LOGGED_CHARS {
            let _ = write!(out, "… ({} bytes in all)", s.len());
            break;
        }
        match c {
            '\r' => out.push_str("\\r"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\\' => out.push_str("\\\\"),
            c if !clean(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// At most `per_second` events admitted in each one-second window; the rest counted.
pub struct RateLimit {
    per_second: u32,
    window: Mutex<Window>,
    /// Events not admitted, in all.
    pub suppressed_total: AtomicU64,
}

struct Window {
    start: Option<Instant>,
    admitted: u32,
    /// Not admitted since the last admitted event.
    left_out: u64,
}

impl RateLimit {
    pub const fn new(per_second: u32) -> Self {
        RateLimit {
            per_second,
            window: Mutex::new(Window {
                start: None,
                admitted: 0,
                left_out: 0,
            }),
            suppressed_total: AtomicU64::new(0),
        }
    }

    /// `Some(n)`: write this event, and say `n` were left out before it; `None`: leave it out.
    pub fn admit(&self) -> Option<u64> {
        self.admit_at(Instant::now())
    }

    fn admit_at(&self, now: Instant) -> Option<u64> {
        let mut w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        if w.start
            .is_none_or(|s| now.duration_since(s) >= Duration::from_secs(1))
        {
            w.start = Some(now);
            w.admitted = 0;
        }
        if w.admitted >= self.per_second {
            w.left_out += 1;
            self.suppressed_total.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        w.admitted += 1;
        Some(std::mem::take(&mut w.left_out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LogCapture;
    use netsched_sys::PeerCred;

    fn logged(line: &str, answer: &str) -> String {
        let out = LogCapture::default();
        let sink = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || sink.clone())
            .with_ansi(false)
            .finish();
        let request = Request {
            line,
            peer: PeerCred {
                pid: 1,
                uid: 0,
                gid: 0,
            },
            deadline: Instant::now(),
        };
        tracing::subscriber::with_default(subscriber, || log_request(&request, false, answer));
        out.text()
    }

    /// Fault: a raw CR (or another control character) in a request reached the log as is,
    /// so a request could forge a line of its own.
    #[test]
    fn control_characters_in_a_request_are_escaped_and_cannot_forge_a_line() {
        let forged =
            "set-x 3\r2026-12-07T00:00:00Z  INFO ctl reload by uid 0: ok\n\x1b[2K\u{85}x\\r";
        for answer in ["ok\nx 3\n", "error: no such thing\r\u{2028}\n"] {
            let log = logged(forged, answer);
            assert_eq!(log.matches('\n').count(), 1, "{log:?}");
            assert!(log.ends_with('\n'), "{log:?}");
            assert!(
                !log.trim_end_matches('\n')
                    .chars()
                    .any(|c| c.is_control() || c == '\u{2028}'),
                "a control character reached the log: {log:?}"
            );
            assert!(log.contains(r"set-x 3\r2026-12-07T00:00:00Z"), "{log}");
            assert!(log.contains(r"\u{1b}[2K\u{85}x\\r"), "{log}");
            // The field stays a quoted string, as every other field of the text format.
            assert!(log.contains("command=\"set-x 3"), "{log}");
        }
    }

    #[test]
    fn a_long_request_is_cut_and_its_length_named() {
        let long = "x".repeat(5000);
        let e = escape(&long);
        assert!(e.ends_with("… (5000 bytes in all)"), "{e}");
        assert!(e.len() < MAX_LOGGED_CHARS + 40, "{}", e.len());
        assert!(matches!(escape("plain words"), Cow::Borrowed(_)));
    }

    #[test]
    fn the_rate_limit_admits_its_share_each_second_and_names_what_it_left_out() {
        let l = RateLimit::new(3);
        let t = Instant::now();
        let got: Vec<_> = (0..5).map(|_| l.admit_at(t)).collect();
        assert_eq!(got, [Some(0), Some(0), Some(0), None, None]);
        assert_eq!(l.admit_at(t + Duration::from_millis(999)), None);
        assert_eq!(l.admit_at(t + Duration::from_secs(1)), Some(3));
        assert_eq!(l.suppressed_total.load(Ordering::Relaxed), 3);
    }
}

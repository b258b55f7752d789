//! One log line per control request that changes a daemon's state: what was asked, by whom
//! (the peer's `SO_PEERCRED` uid and pid, already checked by [`crate::access`]) and what came
//! of it. Read-only requests (`show…`, `stats`) are not logged: a dashboard polling every
//! second would otherwise fill the log.

use crate::server::Request;

/// Log `r` and its `answer` (the text sent back: `ok…` / `error: …` or a JSON line) unless
/// `read_only`. Newlines in the answer become `; ` so one request stays one line.
pub fn log_request(r: &Request<'_>, read_only: bool, answer: &str) {
    if read_only {
        return;
    }
    let (uid, pid) = (r.peer.uid, r.peer.pid);
    let line = r.line.trim();
    let summary = answer.trim_end().replace('\n', "; ");
    let refused = answer.starts_with("error") || answer.contains("\"ok\":false");
    if refused {
        tracing::warn!(
            uid,
            pid,
            command = line,
            "ctl {line} by uid {uid} refused: {summary}"
        );
    } else {
        tracing::info!(
            uid,
            pid,
            command = line,
            "ctl {line} by uid {uid}: {summary}"
        );
    }
}

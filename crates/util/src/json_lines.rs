//! The `--stats` printer of the packet engines: a thread that writes each snapshot it
//! receives as one JSON line on stdout. A reader that stops reading blocks this thread, never
//! the packet thread, which hands snapshots over through a bounded channel and counts the ones
//! that did not fit.
//!
//! Cost: one `serde_json` encoding and one write per snapshot, off the packet path.

use serde::Serialize;
use std::io::Write;
use std::sync::mpsc::Receiver;
use std::thread::JoinHandle;

/// Start the thread `name`; it ends when every sender of `rx` is gone or stdout is closed.
pub fn spawn_printer<T: Serialize + Send + 'static>(
    name: &str,
    rx: Receiver<T>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            let mut out = std::io::stdout().lock();
            for s in rx {
                if writeln!(out, "{}", serde_json::to_string(&s).unwrap_or_default()).is_err() {
                    break;
                }
                let _ = out.flush();
            }
        })
}

//! The one client of the daemons' control sockets (`netsched ctl`, `netsched vswitch ctl`,
//! `netsched balance ctl`, and the tests and real runs that drive a daemon): connect, send one
//! line, read the answer until the daemon closes. [`exchange`] returns the answer as it came;
//! [`request_line`] reads the `ok` / `error: …` first line of the line protocol every
//! daemon's socket speaks.
//!
//! Bounds: each read and write within the caller's `wait`; at most [`MAX_ANSWER`] bytes.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Largest answer a control client reads from a daemon (a `show` of thousands of servers or
/// ports is well under a MiB).
pub const MAX_ANSWER: u64 = 16 << 20;

/// Why a control request failed.
#[derive(Debug)]
pub enum ClientError {
    /// No daemon answers on the socket; `hint` says which command should be running.
    Connect {
        socket: PathBuf,
        hint: String,
        source: std::io::Error,
    },
    /// The request could not be sent, or the answer not read, within `wait`.
    Io {
        socket: PathBuf,
        what: &'static str,
        wait: Duration,
        source: std::io::Error,
    },
    /// The daemon closed the connection without a byte of answer.
    NoAnswer { socket: PathBuf },
    /// The daemon answered with an error (its `error: …` line, without the prefix).
    Refused(String),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Connect {
                socket,
                hint,
                source,
            } => write!(
                f,
                "cannot connect to {}: {source} (is `{hint}` running? root or the control group?)",
                socket.display()
            ),
            ClientError::Io {
                socket,
                what,
                wait,
                source,
            } if matches!(
                source.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
            {
                write!(
                    f,
                    "{what} {}: timed out: no answer within {} ms (is the daemon stuck, or is \
                     something else listening there?)",
                    socket.display(),
                    wait.as_millis()
                )
            }
            ClientError::Io {
                socket,
                what,
                source,
                ..
            } => write!(f, "{what} {}: {source}", socket.display()),
            ClientError::NoAnswer { socket } => write!(
                f,
                "the daemon on {} closed the connection without answering",
                socket.display()
            ),
            ClientError::Refused(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for ClientError {}

/// Send `line` (a newline is added) to the Unix `socket` and return the whole answer (at most
/// [`MAX_ANSWER`] bytes, each read and write within `wait`). `hint` names the command that
/// serves the socket, for the "cannot connect" message.
pub fn exchange(
    socket: &Path,
    line: &str,
    wait: Duration,
    hint: &str,
) -> Result<String, ClientError> {
    let io = |what, source| ClientError::Io {
        socket: socket.to_path_buf(),
        what,
        wait,
        source,
    };
    let mut s = UnixStream::connect(socket).map_err(|source| ClientError::Connect {
        socket: socket.to_path_buf(),
        hint: hint.to_string(),
        source,
    })?;
    s.set_read_timeout(Some(wait)).ok();
    s.set_write_timeout(Some(wait)).ok();
    s.write_all(format!("{line}\n").as_bytes())
        .map_err(|e| io("sending to", e))?;
    let mut out = String::new();
    s.take(MAX_ANSWER)
        .read_to_string(&mut out)
        .map_err(|e| io("reading the answer from", e))?;
    if out.is_empty() {
        return Err(ClientError::NoAnswer {
            socket: socket.to_path_buf(),
        });
    }
    Ok(out)
}

/// [`exchange`] for the line protocols: an answer starting with an `ok` line is a success
/// (the rest is returned); anything else is the daemon's error.
pub fn request_line(
    socket: &Path,
    line: &str,
    wait: Duration,
    hint: &str,
) -> Result<String, ClientError> {
    let out = exchange(socket, line, wait, hint)?;
    match out.split_once('\n') {
        Some(("ok", rest)) => Ok(rest.to_string()),
        _ => {
            let t = out.trim();
            Err(ClientError::Refused(
                t.strip_prefix("error: ").unwrap_or(t).to_string(),
            ))
        }
    }
}

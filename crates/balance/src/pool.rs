//! L7 keep-alive connections to one backend: our own HTTP/1.1 client connections (`h1.rs`,
//! driven in the task of the request that uses them), kept in a small idle stack per backend.
//!
//! Why not hyper-util's legacy pooled `Client`: per request it looks the backend up in a shared
//! map keyed by scheme and authority (the backend URI is built as text and parsed for that),
//! and when a response has a body it spawns a task that waits for the connection to become
//! ready again and then puts it back. Here the backend is already known (the lease carries its
//! pool), and the connection goes back to the pool when the response body ends — in the task
//! that forwarded it, with no task spawned.
//!
//! Bounds: at most [`POOL_IDLE_PER_BACKEND`] idle connections per backend; an idle connection
//! is closed after [`POOL_IDLE_TIMEOUT`] (give or take the daemon's 250 ms tick, which sweeps
//! the pools) or, at that sweep, when the backend has closed it or sent something unasked.
//! Each look at an idle connection is one `recv(2)` with `MSG_PEEK` ([`Conn::idle_state`]): at
//! each reuse, and per idle connection at each sweep (≤ 64 per backend every 250 ms).
//! Connections in use are bounded by the requests in flight.
//! Dropping the pool (a deleted server, once its last lease ends) closes its idle connections.
//!
//! Requests use `send(2)` rather than `writev(2)`: the head and the body at hand are gathered
//! into one buffer (`h1.rs`). With writev every flush goes through `vfs_writev` (iovec import,
//! file position and fsnotify hooks), 3% of the director's CPU per L7 request in a profile of
//! the hyper client this replaced; HAProxy uses `send` too.

use crate::h1::{Conn, IdleState};
use std::fmt;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Idle keep-alive connections kept per backend.
pub const POOL_IDLE_PER_BACKEND: usize = 64;
/// An idle connection older than this is closed.
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

struct Idle {
    conn: Conn,
    since: Instant,
}

/// Idle connections of one backend, most recently used on top (a warm connection is reused
/// first, and the oldest ones age out at the bottom).
#[derive(Default)]
pub struct ConnPool(Mutex<Vec<Idle>>);

impl fmt::Debug for ConnPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ConnPool({} idle)", self.idle())
    }
}

impl ConnPool {
    fn lock(&self) -> MutexGuard<'_, Vec<Idle>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The most recently returned connection that shows no sign of having been closed and
    /// received nothing unasked ([`Conn::idle_state`], asked of the kernel), marked reused.
    /// Those that did are closed; `unexpected` is called for each that had received bytes.
    /// Expiry is left to `sweep`, every 250 ms (no clock read per request).
    pub fn take(&self, mut unexpected: impl FnMut()) -> Option<Conn> {
        let mut idle = self.lock();
        while let Some(mut c) = idle.pop() {
            match c.conn.idle_state() {
                IdleState::Ready => {
                    c.conn.mark_reused();
                    return Some(c.conn);
                }
                IdleState::Closed => {}
                IdleState::Unexpected => unexpected(),
            }
        }
        None
    }

    /// Give back a connection whose last response has been read to its end.
    pub fn give(&self, conn: Conn) {
        let mut idle = self.lock();
        if idle.len() < POOL_IDLE_PER_BACKEND {
            idle.push(Idle {
                conn,
                since: Instant::now(),
            });
        }
    }

    /// Close the connections idle longer than [`POOL_IDLE_TIMEOUT`], those the backend
    /// closed, and those it sent bytes on unasked (`unexpected` is called for each).
    pub fn sweep(&self, mut unexpected: impl FnMut()) {
        let mut idle = self.lock();
        idle.retain(|c| match c.conn.idle_state() {
            IdleState::Ready => c.since.elapsed() < POOL_IDLE_TIMEOUT,
            IdleState::Closed => false,
            IdleState::Unexpected => {
                unexpected();
                false
            }
        });
    }

    /// Idle connections kept.
    pub fn idle(&self) -> usize {
        self.lock().len()
    }
}

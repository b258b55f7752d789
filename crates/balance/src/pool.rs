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
//! Bounds: at most [`POOL_IDLE_PER_BACKEND`] idle connections per backend, fewer when fewer
//! are used (see [`ConnPool`]); an idle connection is closed after [`POOL_IDLE_TIMEOUT`] (give or take the daemon's 250 ms tick, which sweeps
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

/// Most idle keep-alive connections kept per backend.
pub const POOL_IDLE_PER_BACKEND: usize = 64;
/// Idle connections a backend's pool may keep whatever its use: the floor of the bound below.
pub const POOL_IDLE_MIN: usize = 8;
/// An idle connection older than this is closed.
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

struct Idle {
    conn: Conn,
    since: Instant,
}

/// Idle connections of one backend, most recently used on top (a warm connection is reused
/// first, and the oldest ones age out at the bottom).
///
/// How many are kept follows their use, as HAProxy's `pool-purge-delay` trims an idle pool
/// that holds more connections than the previous period used (configuration manual,
/// `pool-purge-delay`): at each sweep the bound becomes the number of connections taken since
/// the last one, between [`POOL_IDLE_MIN`] and [`POOL_IDLE_PER_BACKEND`], and the oldest idle
/// connections past it are closed; a connection given back while the pool is at its bound is
/// closed. Why: an idle connection holds a backend's resources (a worker of a
/// thread-per-connection server), and under `http_reuse = "safe"` with clients that send one
/// request per connection nothing ever takes one — kept by the dozen for the idle timeout,
/// they starve such a backend of workers and its health checks fail.
pub struct ConnPool(Mutex<Pool>);

struct Pool {
    conns: Vec<Idle>,
    /// Connections taken since the last sweep.
    taken: usize,
    /// Idle connections kept now.
    keep: usize,
}

impl Default for ConnPool {
    fn default() -> Self {
        ConnPool(Mutex::new(Pool {
            conns: Vec::new(),
            taken: 0,
            keep: POOL_IDLE_MIN,
        }))
    }
}

impl fmt::Debug for ConnPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ConnPool({} idle)", self.idle())
    }
}

impl ConnPool {
    fn lock(&self) -> MutexGuard<'_, Pool> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The most recently returned connection that shows no sign of having been closed and
    /// received nothing unasked ([`Conn::idle_state`], asked of the kernel), marked reused.
    /// Those that did are closed; `unexpected` is called for each that had received bytes.
    /// Expiry is left to `sweep`, every 250 ms (no clock read per request).
    pub fn take(&self, mut unexpected: impl FnMut()) -> Option<Conn> {
        let mut pool = self.lock();
        while let Some(mut c) = pool.conns.pop() {
            match c.conn.idle_state() {
                IdleState::Ready => {
                    c.conn.mark_reused();
                    pool.taken += 1;
                    return Some(c.conn);
                }
                IdleState::Closed => {}
                IdleState::Unexpected => unexpected(),
            }
        }
        None
    }

    /// Give back a connection whose last response has been read to its end; at the pool's
    /// bound it is closed instead.
    pub fn give(&self, conn: Conn) {
        let mut pool = self.lock();
        if pool.conns.len() < pool.keep {
            pool.conns.push(Idle {
                conn,
                since: Instant::now(),
            });
        }
    }

    /// Set the bound from the connections taken since the last sweep, close the oldest idle
    /// connections past it, those idle longer than [`POOL_IDLE_TIMEOUT`], those the backend
    /// closed, and those it sent bytes on unasked (`unexpected` is called for each).
    pub fn sweep(&self, mut unexpected: impl FnMut()) {
        let mut pool = self.lock();
        pool.keep = pool.taken.clamp(POOL_IDLE_MIN, POOL_IDLE_PER_BACKEND);
        pool.taken = 0;
        pool.conns.retain(|c| match c.conn.idle_state() {
            IdleState::Ready => c.since.elapsed() < POOL_IDLE_TIMEOUT,
            IdleState::Closed => false,
            IdleState::Unexpected => {
                unexpected();
                false
            }
        });
        let extra = pool.conns.len().saturating_sub(pool.keep);
        pool.conns.drain(..extra);
    }

    /// Idle connections kept.
    pub fn idle(&self) -> usize {
        self.lock().conns.len()
    }

    /// The bound on idle connections in force (between [`POOL_IDLE_MIN`] and
    /// [`POOL_IDLE_PER_BACKEND`]).
    pub fn bound(&self) -> usize {
        self.lock().keep
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bound follows use: a pool nothing takes from keeps [`POOL_IDLE_MIN`] connections,
    /// closing the rest as they are given back; one whose connections were taken 40 times in a
    /// period keeps up to 40 in the next; a quiet period trims it back to the floor.
    #[tokio::test]
    async fn the_idle_bound_follows_the_connections_taken() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = l.accept().await {
                held.push(s);
            }
        });
        let connect = || Conn::connect(addr, Duration::from_secs(5));
        let pool = ConnPool::default();
        for _ in 0..20 {
            pool.give(connect().await.unwrap());
        }
        assert_eq!(pool.idle(), POOL_IDLE_MIN, "nothing taken: the floor");
        for _ in 0..40 {
            let c = pool.take(|| panic!("nothing unasked")).unwrap();
            pool.give(c);
        }
        pool.sweep(|| panic!("nothing unasked"));
        assert_eq!(pool.bound(), 40);
        for _ in 0..50 {
            pool.give(connect().await.unwrap());
        }
        assert_eq!(pool.idle(), 40, "up to the connections taken last period");
        pool.sweep(|| panic!("nothing unasked"));
        assert_eq!(
            (pool.bound(), pool.idle()),
            (POOL_IDLE_MIN, POOL_IDLE_MIN),
            "a quiet period trims to the floor"
        );
        server.abort();
    }
}

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
//! Bounds: the idle connections of a backend are at most those its requests used at once in
//! the last period (or this one), and at most as many as requests asked the pool for one in
//! it, never fewer than [`POOL_IDLE_MIN`] (see [`ConnPool`]); connections in use are bounded
//! by the requests in flight (and the server's `maxconn`), so the idle ones are too. An idle
//! connection is closed after [`POOL_IDLE_TIMEOUT`] (give or take the daemon's 250 ms tick,
//! which sweeps the pools) or, at that sweep, when the backend has closed it or sent
//! something unasked.
//! Cost: each look at an idle connection is one `recv(2)` with `MSG_PEEK`
//! ([`Conn::idle_state`]): at each reuse, and per idle connection at each sweep (every 250 ms);
//! none when a connection is given back (the look before its reuse sees all that one then
//! would);
//! per request one lock of the pool to take a connection and one to give it back, one atomic
//! `fetch_max` ([`ConnPool::in_use`]) and one atomic load.
//! Dropping the pool (a deleted server, once its last lease ends) closes its idle connections.
//!
//! Requests use `send(2)` rather than `writev(2)`: the head and the body at hand are gathered
//! into one buffer (`h1.rs`). With writev every flush goes through `vfs_writev` (iovec import,
//! file position and fsnotify hooks), 3% of the director's CPU per L7 request in a profile of
//! the hyper client this replaced; HAProxy uses `send` too.

use crate::h1::{Conn, IdleState};
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

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
/// `pool-purge-delay`). At each sweep the bound becomes the smaller of
/// - the most connections in use at once since the last sweep (reported by [`ConnPool::in_use`]
///   as requests in flight on the backend, which bound them): when the responses of a burst
///   end, every connection of the burst goes back to the pool and the next burst reuses it,
///   rather than a connection being closed and another opened per request past a fixed bound
///   (a `connect(2)` per request, and a socket in TIME_WAIT for each);
/// - the requests that asked the pool for a connection since the last sweep (found one or
///   not);
///
/// never below [`POOL_IDLE_MIN`]. Within a period the bound rises at once to that rule applied
/// to the period so far (a burst's connections are kept from its first end on); the oldest
/// idle connections past it are closed at the sweep, and a connection given back while the
/// pool is at its bound is closed. Why the second term: an idle connection holds a backend's
/// resources (a worker of a thread-per-connection server), and under `http_reuse = "safe"`
/// with clients that send one request per connection no request may take one — kept by the
/// dozen for the idle timeout, they would starve such a backend of workers and its health
/// checks fail. When use falls, both terms fall with it.
pub struct ConnPool {
    pool: Mutex<Pool>,
    /// The most connections in use at once since the last sweep.
    peak: AtomicUsize,
}

struct Pool {
    conns: Vec<Idle>,
    /// Requests that asked for a connection since the last sweep.
    asked: usize,
    /// Idle connections kept now.
    keep: usize,
}

impl Default for ConnPool {
    fn default() -> Self {
        ConnPool {
            pool: Mutex::new(Pool {
                conns: Vec::new(),
                asked: 0,
                keep: POOL_IDLE_MIN,
            }),
            peak: AtomicUsize::new(0),
        }
    }
}

impl fmt::Debug for ConnPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ConnPool({} idle)", self.idle())
    }
}

impl ConnPool {
    fn lock(&self) -> MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A request is about to use a connection of this backend (taken or opened) while `n`
    /// requests are in flight on it, this one included: at most `n` connections are in use.
    pub fn in_use(&self, n: usize) {
        self.peak.fetch_max(n, Ordering::Relaxed);
    }

    /// The most recently returned connection that shows no sign of having been closed and
    /// received nothing unasked ([`Conn::idle_state`], asked of the kernel), marked reused.
    /// Those that did are closed; `unexpected` is called for each that had received bytes.
    /// Expiry is left to `sweep`, every 250 ms (no clock read per request).
    pub fn take(&self, mut unexpected: impl FnMut()) -> Option<Conn> {
        let mut pool = self.lock();
        pool.asked += 1;
        while let Some(mut c) = pool.conns.pop() {
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

    /// Give back a connection whose last response has been read to its end; at the pool's
    /// bound (raised to this period's use so far) it is closed instead, after a look at it
    /// ([`Conn::idle_state`]: `unexpected` is called if it had received bytes). A pooled one
    /// is looked at when it is taken or swept, so giving it back costs no system call
    /// (`BackendBody::take_reusable` in h1.rs, "One look is enough").
    pub fn give(&self, conn: Conn, unexpected: impl FnOnce()) {
        let closed = {
            let mut pool = self.lock();
            let now = bound(self.peak.load(Ordering::Relaxed), pool.asked);
            if pool.conns.len() < pool.keep.max(now) {
                pool.conns.push(Idle {
                    conn,
                    since: Instant::now(),
                });
                return;
            }
            conn
        };
        if closed.idle_state() == IdleState::Unexpected {
            unexpected();
        }
    }

    /// Set the bound from the use since the last sweep ([`ConnPool`]), close the oldest idle
    /// connections past it, those idle longer than [`POOL_IDLE_TIMEOUT`], those the backend
    /// closed, and those it sent bytes on unasked (`unexpected` is called for each).
    pub fn sweep(&self, mut unexpected: impl FnMut()) {
        let mut pool = self.lock();
        let peak = self.peak.swap(0, Ordering::Relaxed);
        pool.keep = bound(peak, pool.asked);
        pool.asked = 0;
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

    /// The bound on idle connections in force (at least [`POOL_IDLE_MIN`]).
    pub fn bound(&self) -> usize {
        self.lock().keep
    }
}

/// The idle bound, from the most connections in use at once and the requests that asked the
/// pool for one, in a period ([`ConnPool`]).
fn bound(peak_in_use: usize, asked: usize) -> usize {
    peak_in_use.min(asked).max(POOL_IDLE_MIN)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bound follows use: a pool no request asks keeps [`POOL_IDLE_MIN`] connections,
    /// closing the rest as they are given back; one asked 40 times in a period, with 40
    /// connections in use at once, keeps up to 40 in the next; a quiet period trims it back to
    /// the floor.
    #[tokio::test]
    async fn the_idle_bound_follows_use() {
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
            pool.give(connect().await.unwrap(), || {});
        }
        assert_eq!(pool.idle(), POOL_IDLE_MIN, "nothing asked: the floor");
        for _ in 0..40 {
            let c = pool.take(|| panic!("nothing unasked")).unwrap();
            pool.give(c, || panic!("nothing unasked"));
        }
        pool.in_use(40);
        pool.sweep(|| panic!("nothing unasked"));
        assert_eq!(pool.bound(), 40);
        for _ in 0..50 {
            pool.give(connect().await.unwrap(), || {});
        }
        assert_eq!(pool.idle(), 40, "up to the use of the last period");
        pool.sweep(|| panic!("nothing unasked"));
        assert_eq!(
            (pool.bound(), pool.idle()),
            (POOL_IDLE_MIN, POOL_IDLE_MIN),
            "a quiet period trims to the floor"
        );
        server.abort();
    }

    /// The bound is the most connections in use at once, when the pool was asked at least as
    /// often: no fixed cap below the requests in flight (h2 with 100 streams on each of
    /// several client connections has hundreds in use at once); but a pool no request may take
    /// from (`http_reuse = "safe"`, one request per client connection) keeps only the floor
    /// however many were in use.
    #[test]
    fn the_bound_is_the_peak_in_use_when_the_pool_is_used() {
        assert_eq!(bound(500, 20_000), 500, "every connection of a burst kept");
        assert_eq!(bound(500, 120), 120, "at most as many as asked");
        assert_eq!(bound(30, 0), POOL_IDLE_MIN, "none asked: the floor");
        assert_eq!(bound(2, 1_000), POOL_IDLE_MIN, "never below the floor");
        assert_eq!(bound(0, 0), POOL_IDLE_MIN);
    }

    /// 100 requests at once on one backend, again and again, every connection reusable: from
    /// the first burst on, every connection of a burst goes back to the pool and is taken by
    /// the next; none is closed and none opened, across sweeps too.
    #[tokio::test]
    async fn a_burst_wider_than_the_floor_reuses_its_connections() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let accepted = std::sync::Arc::new(AtomicUsize::new(0));
        let counted = accepted.clone();
        let server = tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                // Held until the pool closes it.
                tokio::spawn(async move {
                    let _ = tokio::io::AsyncReadExt::read(&mut s, &mut [0u8; 1]).await;
                });
            }
        });
        let pool = ConnPool::default();
        burst(&pool, addr).await;
        assert_eq!(pool.idle(), 100, "the whole first burst back in the pool");
        for _ in 0..3 {
            burst(&pool, addr).await;
            pool.sweep(|| panic!("nothing unasked"));
            assert_eq!((pool.bound(), pool.idle()), (100, 100));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            100,
            "no connection opened again"
        );
        pool.sweep(|| panic!("nothing unasked"));
        assert_eq!(
            pool.idle(),
            POOL_IDLE_MIN,
            "a quiet period trims to the floor"
        );
        server.abort();
    }

    /// 100 connections in use at once (taken from the pool, or opened), then all given back.
    async fn burst(pool: &ConnPool, addr: std::net::SocketAddr) {
        let mut out = Vec::new();
        for n in 1..=100 {
            pool.in_use(n);
            out.push(match pool.take(|| panic!("nothing unasked")) {
                Some(c) => c,
                None => Conn::connect(addr, Duration::from_secs(5)).await.unwrap(),
            });
        }
        for c in out {
            pool.give(c, || panic!("nothing unasked"));
        }
    }
}

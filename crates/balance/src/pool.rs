//! L7 keep-alive connections to one backend: hyper's HTTP/1 client connection
//! (`hyper::client::conn::http1`) driven directly, with a small idle stack of our own per
//! backend instead of hyper-util's legacy pooled `Client`.
//!
//! Why not the legacy client: per request it looks the backend up in a shared map keyed by
//! scheme and authority (the backend URI is built as text and parsed for that), and when a
//! response has a body it spawns a task that waits for the connection to become ready again
//! and then puts it back. Here the backend is already known (the lease carries its pool), and
//! the connection goes back to the pool when the response body ends — in the task that
//! forwarded it, with no task spawned.
//!
//! Bounds: at most [`POOL_IDLE_PER_BACKEND`] idle connections per backend; an idle connection
//! is closed after [`POOL_IDLE_TIMEOUT`] (give or take the daemon's 250 ms tick, which sweeps
//! the pools). Connections in use are bounded by the requests in flight.
//! Dropping the pool (a deleted server, once its last lease ends) closes its idle connections.

use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

/// Idle keep-alive connections kept per backend.
pub const POOL_IDLE_PER_BACKEND: usize = 64;
/// An idle connection older than this is closed.
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The sending half of one backend connection; its connection runs in a task of its own.
pub type Sender = SendRequest<Incoming>;

struct Idle {
    tx: Sender,
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

/// Why no connection to the backend could be made.
#[derive(Debug)]
pub enum ConnectError {
    /// `connect(2)` failed, or hyper's handshake did.
    Failed,
    /// Nothing within the connect timeout.
    Timeout,
}

impl ConnPool {
    fn lock(&self) -> MutexGuard<'_, Vec<Idle>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The most recently returned connection that is still open.
    pub fn take(&self) -> Option<Sender> {
        let mut idle = self.lock();
        while let Some(c) = idle.pop() {
            // Expiry is left to `sweep` (every 250 ms): no clock read per request.
            if !c.tx.is_closed() {
                return Some(c.tx);
            }
        }
        None
    }

    /// Give back a connection whose last response has been read to its end.
    pub fn give(&self, tx: Sender) {
        if tx.is_closed() {
            return;
        }
        let mut idle = self.lock();
        if idle.len() < POOL_IDLE_PER_BACKEND {
            idle.push(Idle {
                tx,
                since: Instant::now(),
            });
        }
    }

    /// Close the connections idle longer than [`POOL_IDLE_TIMEOUT`], and those the backend
    /// closed.
    pub fn sweep(&self) {
        let mut idle = self.lock();
        idle.retain(|c| !c.tx.is_closed() && c.since.elapsed() < POOL_IDLE_TIMEOUT);
    }

    /// Idle connections kept.
    pub fn idle(&self) -> usize {
        self.lock().len()
    }
}

/// A new keep-alive connection to `addr` (TCP_NODELAY), its connection task spawned on the
/// current runtime. The task ends when the backend closes or every sender is dropped.
pub async fn connect(addr: SocketAddr, timeout: Duration) -> Result<Sender, ConnectError> {
    let stream = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(_)) => return Err(ConnectError::Failed),
        Err(_) => return Err(ConnectError::Timeout),
    };
    let _ = stream.set_nodelay(true);
    // `writev(false)`: hyper flattens head and body into one buffer and flushes it with one
    // `send(2)`. With writev (its default on a tokio socket) every flush goes through
    // `vfs_writev` (iovec import, file position and fsnotify hooks), 3% of the director's CPU
    // per L7 request in a profile; HAProxy uses `send` too.
    let (tx, conn) = http1::Builder::new()
        .writev(false)
        .handshake(TokioIo::new(stream))
        .await
        .map_err(|_| ConnectError::Failed)?;
    tokio::spawn(async move {
        // Errors end the connection; the request that saw them reports them.
        let _ = conn.await;
    });
    Ok(tx)
}

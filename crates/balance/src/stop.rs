//! Graceful stop (HAProxy's soft stop, bounded by `hard-stop-after`): stop accepting, let the
//! work in flight finish, cut what is left at a deadline, count both.
//!
//! Phases, one [`watch`] value shared by every task:
//! 1. **Running.**
//! 2. **Draining** (SIGTERM/SIGINT, SIGUSR1, `ctl soft-stop`): each accept loop stops waiting,
//!    takes what is already in its listener's accept queue with non-blocking `accept`s, then
//!    closes the listener ([`Acceptor`]). Why the queue is emptied first: with `SO_REUSEPORT`
//!    every listener of the group has its own accept queue, and closing a listener resets the
//!    connections still in its queue and aborts the handshakes in progress on it, unless
//!    `net.ipv4.tcp_migrate_req = 1` (Linux 5.14+, off by default) moves them to another
//!    listener of the group (Documentation/networking/ip-sysctl.rst, `tcp_migrate_req`;
//!    `inet_csk_listen_stop` in net/ipv4/inet_connection_sock.c). The connections taken from
//!    the queue are served like any other. L7 connections turn keep-alive off: an idle one
//!    closes now, one with a request in flight closes after its response, which carries
//!    `Connection: close` (hyper's `graceful_shutdown`); one that has not sent its first
//!    request yet gets it answered with `Connection: close` (l7.rs). L4 relays run on.
//! 3. **Cut** (the deadline passed, or a second SIGTERM/SIGINT): every connection still open
//!    is closed.
//!
//! A connection that ends on its own after the stop began is counted `finished`, one closed
//! by the cut `cut` (`netsched_balance_stop_connections_total{outcome}` and the last log line).

use crate::metrics::Metrics;
use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Most connections taken from one listener's accept queue when it closes (the queue holds at
/// most the listen backlog, `net.core.somaxconn`; the bound stops a flood from keeping the
/// listener open).
pub const MAX_BACKLOG_DRAIN: usize = 65_536;

/// The wait before accepting again after a failed accept (no spinning while descriptors are
/// short).
pub const ACCEPT_RETRY_AFTER: std::time::Duration = std::time::Duration::from_millis(50);
/// Failed accepts are logged at most this often per listener (all are counted).
pub const ACCEPT_ERROR_LOG_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    Running,
    Draining,
    Cut,
}

/// What a stop did, for the last log line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StopReport {
    /// Connections that ended on their own after the stop began.
    pub finished: u64,
    /// Connections closed at the deadline.
    pub cut: u64,
    /// Connections taken from the listeners' accept queues when they closed.
    pub from_queue: u64,
}

struct Counts {
    finished: AtomicU64,
    cut: AtomicU64,
    from_queue: AtomicU64,
}

/// The shared stop state: cheap to clone, one per task.
#[derive(Clone)]
pub struct Stop {
    tx: Arc<watch::Sender<Phase>>,
    rx: watch::Receiver<Phase>,
    /// Set before the phase leaves Running: a flag the data path reads per request.
    stopping: Arc<AtomicBool>,
    counts: Arc<Counts>,
    metrics: Metrics,
}

impl Stop {
    pub fn new(metrics: Metrics) -> Self {
        let (tx, rx) = watch::channel(Phase::Running);
        Stop {
            tx: Arc::new(tx),
            rx,
            stopping: Arc::new(AtomicBool::new(false)),
            counts: Arc::new(Counts {
                finished: AtomicU64::new(0),
                cut: AtomicU64::new(0),
                from_queue: AtomicU64::new(0),
            }),
            metrics,
        }
    }

    pub fn phase(&self) -> Phase {
        *self.rx.borrow()
    }

    /// Move to `p` if it is later than the current phase (phases never go back).
    pub fn advance(&self, p: Phase) {
        if p >= Phase::Draining {
            self.stopping.store(true, Ordering::SeqCst);
        }
        self.tx.send_if_modified(|cur| {
            if p > *cur {
                *cur = p;
                true
            } else {
                false
            }
        });
    }

    /// True once the stop has begun (an atomic load: cheap enough per request).
    pub fn stopping(&self) -> Arc<AtomicBool> {
        self.stopping.clone()
    }

    async fn reached(&self, p: Phase) {
        let mut rx = self.rx.clone();
        // The sender lives as long as any `Stop`, so this only ends when the phase is reached.
        let _ = rx.wait_for(|cur| *cur >= p).await;
    }

    /// Resolves once the stop has begun (at once if it already has).
    pub async fn draining(&self) {
        self.reached(Phase::Draining).await
    }

    /// Run one connection's future until it ends or the cut, counting how it ended if the
    /// stop has begun. `None`: it was cut (the future is dropped, which closes its sockets).
    pub async fn until_cut<T>(&self, f: impl Future<Output = T>) -> Option<T> {
        tokio::select! {
            r = f => {
                if self.phase() >= Phase::Draining {
                    self.counts.finished.fetch_add(1, Ordering::Relaxed);
                    self.metrics.stop_outcome("finished");
                }
                Some(r)
            }
            _ = self.reached(Phase::Cut) => {
                self.counts.cut.fetch_add(1, Ordering::Relaxed);
                self.metrics.stop_outcome("cut");
                None
            }
        }
    }

    pub fn report(&self) -> StopReport {
        StopReport {
            finished: self.counts.finished.load(Ordering::Relaxed),
            cut: self.counts.cut.load(Ordering::Relaxed),
            from_queue: self.counts.from_queue.load(Ordering::Relaxed),
        }
    }
}

/// A listener's accept side until the stop: then its accept queue is emptied and it closes.
pub struct Acceptor {
    listener: Option<TcpListener>,
    queued: VecDeque<(TcpStream, SocketAddr)>,
    stop: Stop,
    /// When a failed accept was last logged.
    logged: Option<std::time::Instant>,
}

impl Acceptor {
    pub fn new(listener: TcpListener, stop: Stop) -> Self {
        Acceptor {
            listener: Some(listener),
            queued: VecDeque::new(),
            stop,
            logged: None,
        }
    }

    pub fn listener(&self) -> Option<&TcpListener> {
        self.listener.as_ref()
    }

    /// The next connection; `None` once the stop has begun, the accept queue has been emptied
    /// and the listener is closed.
    ///
    /// A failed accept (descriptors or memory run out: [`crate::metrics::accept_error_reason`])
    /// is counted, logged at most once per [`ACCEPT_ERROR_LOG_EVERY`], and retried after
    /// [`ACCEPT_RETRY_AFTER`]; the client waits in the listen backlog meanwhile, as HAProxy's
    /// listeners pause on a full descriptor table and resume when one frees.
    pub async fn next(&mut self) -> Option<(TcpStream, SocketAddr)> {
        while let Some(l) = &self.listener {
            let accepted = tokio::select! {
                biased;
                _ = self.stop.draining() => None,
                r = l.accept() => Some(r),
            };
            match accepted {
                Some(Ok(c)) => return Some(c),
                Some(Err(e)) => self.accept_failed(&e).await,
                None => {
                    if let Some(l) = self.listener.take() {
                        self.queued = take_backlog(l, &self.stop.metrics);
                        let n = self.queued.len() as u64;
                        self.stop.counts.from_queue.fetch_add(n, Ordering::Relaxed);
                    }
                }
            }
        }
        self.queued.pop_front()
    }

    async fn accept_failed(&mut self, e: &std::io::Error) {
        self.stop.metrics.accept_error(e);
        let now = std::time::Instant::now();
        if self
            .logged
            .is_none_or(|t| now.duration_since(t) >= ACCEPT_ERROR_LOG_EVERY)
        {
            self.logged = Some(now);
            let addr = self.listener.as_ref().and_then(|l| l.local_addr().ok());
            tracing::warn!(
                listener = ?addr,
                reason = crate::metrics::accept_error_reason(e),
                "accept failed: {e}; clients wait in the listen backlog \
                 (netsched_balance_accept_errors_total)"
            );
        }
        tokio::select! {
            biased;
            _ = self.stop.draining() => {}
            _ = tokio::time::sleep(ACCEPT_RETRY_AFTER) => {}
        }
    }
}

/// Accept without waiting until the queue is empty (or [`MAX_BACKLOG_DRAIN`]), then close the
/// listener (dropping it).
fn take_backlog(l: TcpListener, metrics: &Metrics) -> VecDeque<(TcpStream, SocketAddr)> {
    let mut out = VecDeque::new();
    // Off the reactor: a plain non-blocking socket (tokio set O_NONBLOCK on it).
    let Ok(std_l) = l.into_std() else {
        return out;
    };
    while out.len() < MAX_BACKLOG_DRAIN {
        match std_l.accept() {
            Ok((s, peer)) => {
                // accept(2) does not pass O_NONBLOCK on to the new socket.
                match s
                    .set_nonblocking(true)
                    .and_then(|()| TcpStream::from_std(s))
                {
                    Ok(s) => out.push_back((s, peer)),
                    Err(_) => metrics.refuse("stop_accept"),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // WouldBlock: the queue is empty; anything else: nothing more to take.
            Err(_) => break,
        }
    }
    drop(std_l);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn stop() -> Stop {
        Stop::new(Metrics::new(
            &mut prometheus_client::registry::Registry::default(),
        ))
    }

    /// Connections already in the accept queue when the stop begins are handed out (and can
    /// be served); only then is the listener closed, and new connections are refused.
    #[tokio::test]
    async fn the_accept_queue_is_emptied_before_the_listener_closes() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let st = stop();
        let mut acc = Acceptor::new(l, st.clone());
        // The kernel completes these handshakes; nobody has accepted them yet.
        let mut clients = Vec::new();
        for _ in 0..5 {
            clients.push(TcpStream::connect(addr).await.unwrap());
        }
        st.advance(Phase::Draining);
        let mut served = 0;
        while let Some((mut s, _)) = acc.next().await {
            s.write_all(b"hi").await.unwrap();
            served += 1;
        }
        assert_eq!(served, 5);
        assert_eq!(st.report().from_queue, 5);
        assert!(acc.listener().is_none());
        for c in &mut clients {
            let mut buf = [0u8; 2];
            c.read_exact(&mut buf).await.unwrap();
            assert_eq!(&buf, b"hi");
        }
        assert!(TcpStream::connect(addr).await.is_err(), "still listening");
    }

    #[tokio::test]
    async fn phases_only_move_forward_and_the_cut_ends_a_connection_counted() {
        let st = stop();
        st.advance(Phase::Draining);
        st.advance(Phase::Running);
        assert_eq!(st.phase(), Phase::Draining);
        // Ends on its own after the stop began: finished.
        assert_eq!(st.until_cut(async { 7 }).await, Some(7));
        let st2 = st.clone();
        let pending =
            tokio::spawn(async move { st2.until_cut(std::future::pending::<()>()).await });
        tokio::task::yield_now().await;
        st.advance(Phase::Cut);
        assert_eq!(pending.await.unwrap(), None);
        let r = st.report();
        assert_eq!((r.finished, r.cut), (1, 1));
    }
}

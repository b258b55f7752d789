//! L4 mode: one backend per client connection (IPVS-NAT scheduling, HAProxy `mode tcp`),
//! bytes relayed both ways through bounded buffers.
//!
//! Accounting follows IPVS: the lease is active while both directions are open and turns
//! inactive at the first FIN (half-close), as `ip_vs_proto_tcp.c` moves a connection out of
//! ESTABLISHED; it leaves the table when both directions are done.
//!
//! Relay (`relay` in the configuration):
//! - `splice` (default): when a socket is readable, a pipe is taken from a shared pool, the
//!   bytes are `splice(2)`d from the socket into it and from it into the other socket, and the
//!   empty pipe goes back to the pool. The bytes never enter user space, and a pipe is held
//!   only while bytes are in flight: an idle connection holds none, so its cost is the two
//!   sockets, as with `copy`. If no pipe can be made (out of descriptors), that chunk is
//!   copied instead and counted `errors_total{reason="splice_fallback"}`.
//! - `copy`: `tokio::io` reads into one [`RELAY_BUFFER`]-byte buffer per direction, allocated
//!   when the connection is relayed.
//!
//! Both end a direction the same way: end of stream from one side → `shutdown(SHUT_WR)` on the
//! other (the FIN is passed on), which is the IPVS active → inactive step; when both sides'
//! FINs are in together the sockets are simply closed, which sends both (see [`finish`]).

use crate::config::Relay;
use crate::service::{Lease, Service};
use crate::sys::{self, Pipe};
use netsched_core::balance::FlowKey;
use std::future::Future;
use std::io::ErrorKind;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// Bytes buffered per direction per connection (copy relay; splice fallback chunk).
pub const RELAY_BUFFER: usize = 16 * 1024;
/// Largest splice per call: the default pipe capacity (16 pages, pipe(7)).
pub const SPLICE_CHUNK: usize = 64 * 1024;
/// Empty pipes kept for reuse; more are closed when they come back.
pub const PIPE_POOL: usize = 256;

/// Empty pipes shared by every connection of a listener. A pipe goes back only when empty
/// (a relay that stops with bytes still in its pipe drops it, which closes it).
#[derive(Default)]
pub struct PipePool(Mutex<Vec<Pipe>>);

impl PipePool {
    fn take(&self) -> std::io::Result<Pipe> {
        let idle = self.0.lock().unwrap_or_else(|p| p.into_inner()).pop();
        match idle {
            Some(p) => Ok(p),
            None => Pipe::new(),
        }
    }
    fn give(&self, p: Pipe) {
        let mut idle = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < PIPE_POOL {
            idle.push(p);
        }
    }
    /// Pipes waiting for reuse.
    pub fn idle(&self) -> usize {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

pub async fn serve(listener: TcpListener, svc: Arc<Service>, conns: Arc<Semaphore>, mode: Relay) {
    let pipes = Arc::new(PipePool::default());
    // Accepted sockets inherit TCP_NODELAY from the listener (sys.rs); if it cannot be set
    // there, it is set per connection.
    let inherited = sys::set_nodelay(&listener).is_ok();
    // A listener bound to one address: every connection's local address is that one, so
    // no getsockname per connection.
    let bound = listener
        .local_addr()
        .ok()
        .filter(|a| !a.ip().is_unspecified());
    loop {
        let Ok((client, peer)) = listener.accept().await else {
            // EMFILE and friends: back off instead of spinning.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let Ok(permit) = conns.clone().try_acquire_owned() else {
            svc.metrics.refuse("max_connections");
            continue; // dropping `client` closes it
        };
        let svc = svc.clone();
        let pipes = pipes.clone();
        tokio::spawn(async move {
            svc.metrics.client_connections.inc();
            let local = bound.or_else(|| client.local_addr().ok()).unwrap_or(peer);
            let key = FlowKey::new(peer.ip(), peer.port(), local.ip(), local.port());
            if !inherited {
                let _ = client.set_nodelay(true);
            }
            handle(client, key, &svc, mode, &pipes).await;
            svc.metrics.client_connections.dec();
            drop(permit);
        });
    }
}

async fn handle(
    client: TcpStream,
    key: FlowKey,
    svc: &Arc<Service>,
    mode: Relay,
    pipes: &PipePool,
) {
    let lease = match svc.acquire(key).await {
        Ok(l) => l,
        Err(r) => {
            svc.metrics.refuse(r.reason());
            return;
        }
    };
    let rt = lease.runtime.clone();
    let started = std::time::Instant::now();
    let connect = Duration::from_nanos(rt.timeouts.connect);
    let server = match tokio::time::timeout(connect, TcpStream::connect(lease.backend.addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(_)) => {
            svc.metrics.error(&lease.backend.name, "connect");
            return;
        }
        Err(_) => {
            svc.metrics.error(&lease.backend.name, "connect_timeout");
            return;
        }
    };
    lease
        .backend
        .response_seconds
        .observe(started.elapsed().as_secs_f64());
    let _ = server.set_nodelay(true);
    let idle = Idle {
        client: Duration::from_nanos(rt.timeouts.client),
        server: Duration::from_nanos(rt.timeouts.server),
        epoch: Instant::now(),
        last: AtomicU64::new(0),
        fallbacks: AtomicU64::new(0),
    };
    match mode {
        Relay::Copy => relay_copy(client, server, lease, &idle, svc).await,
        Relay::Splice => {
            let up = splice_pump(&client, &server, pipes, idle.client, &idle);
            let down = splice_pump(&server, &client, pipes, idle.server, &idle);
            let ends = Ends {
                client: client.as_raw_fd(),
                server: server.as_raw_fd(),
            };
            finish(up, down, ends, lease, &idle, svc).await
        }
    }
}

/// The idle rule shared by both directions: a direction gives up waiting only when *neither*
/// direction has moved a byte for its timeout (`last` is in ms since `epoch`), so a long
/// one-way transfer is not cut while the other side is silent.
struct Idle {
    client: Duration,
    server: Duration,
    epoch: Instant,
    last: AtomicU64,
    /// Chunks the splice relay copied because no pipe could be made.
    fallbacks: AtomicU64,
}

impl Idle {
    fn moved(&self) {
        self.last
            .store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
    fn quiet(&self) -> Duration {
        let now = self.epoch.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last.load(Ordering::Relaxed)))
    }
}

#[derive(Debug)]
enum PumpEnd {
    Eof,
    Idle,
    Error,
}

/// Copy until EOF. The FIN is passed on by [`finish`], not here.
async fn pump<R, W>(mut r: R, mut w: W, idle: Duration, shared: &Idle) -> PumpEnd
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; RELAY_BUFFER];
    loop {
        let n = match tokio::time::timeout(idle, r.read(&mut buf)).await {
            Err(_) if shared.quiet() < idle => continue,
            Err(_) => return PumpEnd::Idle,
            Ok(Err(_)) => return PumpEnd::Error,
            Ok(Ok(0)) => return PumpEnd::Eof,
            Ok(Ok(n)) => n,
        };
        shared.moved();
        match tokio::time::timeout(idle, w.write_all(&buf[..n])).await {
            Ok(Ok(())) => {}
            Err(_) => return PumpEnd::Idle,
            Ok(Err(_)) => return PumpEnd::Error,
        }
    }
}

/// Splice until EOF (the FIN is passed on by [`finish`], not here). A pipe is taken from
/// `pipes` once `r` is readable and given back empty after its bytes reached `w`.
///
/// Two things keep the system calls and segments per connection at what a copying proxy
/// needs (HAProxy 2.6 `mode tcp`, `strace -f` in docs/lvs-real.md "Session 7"):
/// - a splice that returned less than it asked for drained the socket, so the readiness is
///   cleared then, as tokio's own `read` does for a short read on epoll (tokio
///   `io/poll_evented.rs`), instead of learning it from one more splice failing with EAGAIN;
/// - when the peer's FIN has already arrived (EPOLLRDHUP) the end of stream is read before the
///   last bytes are passed on, and they go with `SPLICE_F_MORE` (`MSG_MORE`, splice(2)), so the
///   FIN that [`finish`] sends right after rides in the same segment as the data
///   (`tcp_send_fin` adds it to an unsent tail segment), as HAProxy's `sendto(MSG_MORE)` and
///   `shutdown` do.
async fn splice_pump(
    r: &TcpStream,
    w: &TcpStream,
    pipes: &PipePool,
    idle: Duration,
    shared: &Idle,
) -> PumpEnd {
    loop {
        let closed = match tokio::time::timeout(idle, r.ready(Interest::READABLE)).await {
            Err(_) if shared.quiet() < idle => continue,
            Err(_) => return PumpEnd::Idle,
            Ok(Err(_)) => return PumpEnd::Error,
            Ok(Ok(ready)) => ready.is_read_closed(),
        };
        let pipe = match pipes.take() {
            Ok(p) => p,
            Err(_) => {
                shared.fallbacks.fetch_add(1, Ordering::Relaxed);
                match copy_chunk(r, w, idle).await {
                    Some(end) => return end,
                    None => {
                        shared.moved();
                        continue;
                    }
                }
            }
        };
        // A short splice while the peer has not closed: report WouldBlock to `try_io` so that
        // it clears the readiness, and keep the count here.
        let mut short = 0;
        let filled = r.try_io(Interest::READABLE, || {
            let n = pipe.fill_from(r, SPLICE_CHUNK)?;
            if 0 < n && n < SPLICE_CHUNK && !closed {
                short = n;
                return Err(ErrorKind::WouldBlock.into());
            }
            Ok(n)
        });
        let n = match filled {
            Err(e) if e.kind() == ErrorKind::WouldBlock && short > 0 => short,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                pipes.give(pipe);
                continue;
            }
            Err(_) => return PumpEnd::Error,
            Ok(0) => {
                pipes.give(pipe);
                return PumpEnd::Eof;
            }
            Ok(n) => n,
        };
        shared.moved();
        // The peer has closed: if these were its last bytes, say so when passing them on.
        let (mut n, mut last) = (n, false);
        if closed && n < SPLICE_CHUNK {
            match pipe.fill_from(r, SPLICE_CHUNK - n) {
                Ok(0) => last = true,
                Ok(m) => n += m,
                // Pipe full, or an error the next splice reports.
                Err(_) => {}
            }
        }
        let mut left = n;
        while left > 0 {
            let out = w.async_io(Interest::WRITABLE, || pipe.drain_to(w, left, last));
            match tokio::time::timeout(idle, out).await {
                Ok(Ok(m)) if m > 0 => left -= m,
                // A pipe with bytes left in it is dropped (closed), never reused.
                Ok(_) => return PumpEnd::Error,
                Err(_) => return PumpEnd::Idle,
            }
        }
        pipes.give(pipe);
        if last {
            return PumpEnd::Eof;
        }
    }
}

/// Copy one chunk `r` → `w` through a user-space buffer (the splice relay's fallback when no
/// pipe can be made). `None`: moved some bytes, go on.
async fn copy_chunk(r: &TcpStream, w: &TcpStream, idle: Duration) -> Option<PumpEnd> {
    let mut buf = vec![0u8; RELAY_BUFFER];
    let n = match r.try_read(&mut buf) {
        Ok(0) => return Some(PumpEnd::Eof),
        Ok(n) => n,
        Err(e) if e.kind() == ErrorKind::WouldBlock => return None,
        Err(_) => return Some(PumpEnd::Error),
    };
    let mut sent = 0;
    while sent < n {
        let out = w.async_io(Interest::WRITABLE, || w.try_write(&buf[sent..n]));
        match tokio::time::timeout(idle, out).await {
            Ok(Ok(m)) if m > 0 => sent += m,
            Ok(_) => return Some(PumpEnd::Error),
            Err(_) => return Some(PumpEnd::Idle),
        }
    }
    None
}

async fn relay_copy(
    mut client: TcpStream,
    mut server: TcpStream,
    lease: Lease,
    idle: &Idle,
    svc: &Service,
) {
    let ends = Ends {
        client: client.as_raw_fd(),
        server: server.as_raw_fd(),
    };
    let (cr, cw) = client.split();
    let (sr, sw) = server.split();
    let up = pump(cr, sw, idle.client, idle);
    let down = pump(sr, cw, idle.server, idle);
    finish(up, down, ends, lease, idle, svc).await
}

/// The two sockets of a relayed connection, for [`finish`] to pass a FIN on (`shutdown`).
/// Borrowed: their owners outlive `finish`.
struct Ends {
    client: RawFd,
    server: RawFd,
}

/// Run both directions; the lease turns inactive at the first FIN (IPVS) and is released
/// (dropped) when both directions are done or one fails.
///
/// End of stream from one side is passed on as a FIN to the other side (`shutdown(SHUT_WR)`)
/// unless the other direction turns out to be finished too when polled once right then (both
/// FINs came in together, as with a client that closes once it has its answer): then the
/// sockets are closed straight away and `close` sends both FINs, a `shutdown` per connection
/// fewer, as HAProxy closes when it reads both ends of stream in one pass. The direction that
/// ends second never needs a `shutdown`: `close` follows at once.
async fn finish(
    up: impl Future<Output = PumpEnd>,
    down: impl Future<Output = PumpEnd>,
    ends: Ends,
    mut lease: Lease,
    idle: &Idle,
    svc: &Service,
) {
    tokio::pin!(up, down);
    let (first, up_done) = tokio::select! {
        e = &mut up => (e, true),
        e = &mut down => (e, false),
    };
    match first {
        PumpEnd::Eof => {
            lease.set_inactive();
            let second = if up_done {
                rest(down, ends.server).await
            } else {
                rest(up, ends.client).await
            };
            if let PumpEnd::Idle = second {
                svc.metrics.error(&lease.backend.name, "idle_timeout");
            }
        }
        PumpEnd::Idle => svc.metrics.error(&lease.backend.name, "idle_timeout"),
        PumpEnd::Error => svc.metrics.error(
            &lease.backend.name,
            if up_done {
                "client_reset"
            } else {
                "server_reset"
            },
        ),
    }
    // Once per connection, not per chunk: a metric label lookup is not free.
    if idle.fallbacks.load(Ordering::Relaxed) > 0 {
        svc.metrics.error(&lease.backend.name, "splice_fallback");
    }
}

/// The other direction after one side's end of stream: if it is not finished when polled once,
/// pass the FIN on to `fin_to` and wait for it.
async fn rest<F: Future<Output = PumpEnd>>(mut other: Pin<&mut F>, fin_to: RawFd) -> PumpEnd {
    let now = std::future::poll_fn(|cx| Poll::Ready(other.as_mut().poll(cx))).await;
    if let Poll::Ready(end) = now {
        return end;
    }
    let _ = sys::shutdown_write(&fin_to);
    other.await
}

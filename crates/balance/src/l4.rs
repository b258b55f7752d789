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
//! With `route = "sni"` the client's ClientHello is read first (`sni.rs`, within
//! `timeouts.client`), its server name picks the route, and the bytes read are written to the
//! server before the relay starts, so the server sees the handshake as the client sent it.
//!
//! Both end a direction the same way: end of stream from one side → `shutdown(SHUT_WR)` on the
//! other (the FIN is passed on), which is the IPVS active → inactive step.
//!
//! With `access_log` set, each connection gets one line when it ends ([`ConnLog`], the
//! shape of HAProxy's `option tcplog`: `access_log::TcpEntry`), also when a stop cuts it.

use crate::access_log::{ms, AccessLog, TcpEntry};
use crate::config::{Relay, Route};
use crate::service::{Lease, Refusal, Runtime, Service};
use crate::stop::{Acceptor, Stop};
use crate::sys::{self, Pipe};
use netsched_core::balance::FlowKey;
use std::future::Future;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
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

/// Accept until the stop begins; a relay runs to its end or the stop's cut (stop.rs).
pub async fn serve(
    listener: TcpListener,
    svc: Arc<Service>,
    conns: Arc<Semaphore>,
    mode: Relay,
    stop: Stop,
) {
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
    let mut acceptor = Acceptor::new(listener, stop.clone());
    while let Some((client, peer)) = acceptor.next().await {
        let Ok(permit) = conns.clone().try_acquire_owned() else {
            svc.metrics.refuse("max_connections");
            continue; // dropping `client` closes it
        };
        let svc = svc.clone();
        let pipes = pipes.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let accepted = (Instant::now(), SystemTime::now());
            svc.metrics.client_connections.inc();
            let local = bound.or_else(|| client.local_addr().ok()).unwrap_or(peer);
            // From an `accept_proxy` network: a PROXY header first; its addresses stand for
            // the connection's from here on (proxy_proto.rs).
            let mut client = client;
            let rt = svc.runtime();
            let ends = crate::proxy_proto::accept_for(&mut client, (peer, local), &svc, &rt);
            let Some((peer, local)) = ends.await else {
                svc.metrics.client_connections.dec();
                return drop(permit);
            };
            let key = FlowKey::new(peer.ip(), peer.port(), local.ip(), local.port());
            if !inherited {
                let _ = client.set_nodelay(true);
            }
            let log = ConnLog::new(svc.access.get().cloned(), (peer, local), accepted);
            let conn = handle(client, key, (peer, local), &svc, &rt, mode, &pipes, log);
            stop.until_cut(conn).await;
            svc.metrics.client_connections.dec();
            drop(permit);
        });
    }
}

/// One connection's access log line: filled in as the connection goes, sent once when it is
/// dropped — at its end, or when a stop cuts it (state `K` and the phase it was in).
struct ConnLog {
    log: Option<Arc<AccessLog>>,
    accepted: Instant,
    entry: TcpEntry,
    /// `R` reading a ClientHello (`route = "sni"`), `Q` waiting for a server, `C` connecting
    /// to it, `D` relaying.
    phase: u8,
    ended: Option<[u8; 2]>,
    /// Bytes relayed to the client and from it (the relay adds as it goes).
    to_client: AtomicU64,
    from_client: AtomicU64,
}

impl ConnLog {
    fn new(
        log: Option<Arc<AccessLog>>,
        (client, frontend): (SocketAddr, SocketAddr),
        (accepted, date): (Instant, SystemTime),
    ) -> Self {
        ConnLog {
            log,
            accepted,
            entry: TcpEntry {
                client,
                date,
                frontend,
                server: None,
                tw: -1,
                tc: -1,
                tt: -1,
                bytes: 0,
                bytes_up: 0,
                state: *b"--",
            },
            phase: b'Q',
            ended: None,
            to_client: AtomicU64::new(0),
            from_client: AtomicU64::new(0),
        }
    }

    /// A server was chosen: Tw, and the connect phase begins.
    fn server(&mut self, name: &str) {
        if self.log.is_some() {
            self.entry.server = Some(name.to_string());
        }
        self.entry.tw = ms(self.accepted.elapsed());
        self.phase = b'C';
    }

    /// Connected (and the first bytes written): Tc, and the relay begins.
    fn connected(&mut self, took: Duration) {
        self.entry.tc = ms(took);
        self.phase = b'D';
    }

    /// Ended by `who` (HAProxy's first letter: `-` normal, `C`/`S` aborted by the client or
    /// the server, `c`/`s` its timeout, `P` the proxy) in the current phase.
    fn end(&mut self, who: u8) {
        self.ended = Some([who, if who == b'-' { b'-' } else { self.phase }]);
    }
}

impl Drop for ConnLog {
    fn drop(&mut self) {
        let Some(log) = self.log.take() else {
            return;
        };
        let mut e = self.entry.clone();
        e.tt = ms(self.accepted.elapsed());
        e.bytes = self.to_client.load(Ordering::Relaxed);
        e.bytes_up = self.from_client.load(Ordering::Relaxed);
        e.state = self.ended.unwrap_or([b'K', self.phase]);
        log.send_tcp(e);
    }
}

/// `ends`: the client's address and the one it connected to (a PROXY protocol header's).
/// `rt`: the settings read when it was accepted (which route rule).
#[allow(clippy::too_many_arguments)]
async fn handle(
    mut client: TcpStream,
    key: FlowKey,
    ends: (SocketAddr, SocketAddr),
    svc: &Arc<Service>,
    rt: &Runtime,
    mode: Relay,
    pipes: &PipePool,
    mut log: ConnLog,
) {
    // `route = "sni"`: the ClientHello first, its bytes kept for the server (sni.rs).
    let hello = match rt.route {
        Route::None => None,
        Route::Sni => {
            log.phase = b'R';
            match client_hello(&mut client, rt, svc, ends.0).await {
                Some(h) => {
                    log.phase = b'Q';
                    Some(h)
                }
                None => return log.end(b'C'),
            }
        }
    };
    let sni = hello.as_ref().and_then(|h| h.name.as_deref());
    // One class in mode l4 (classes.rs): a connection counts as served once it has a
    // server, judged on how long it waited for it.
    let arrived = std::time::Instant::now();
    let lease = match svc.acquire(key, sni, |_| 0).await {
        Ok(mut l) => {
            l.complete(Some(arrived.elapsed()));
            l
        }
        Err(r) => {
            svc.metrics.refuse(r.reason());
            // No server (or none left in time): HAProxy's `sQ` for a queue timeout, else
            // the proxy ended it.
            return log.end(if r == Refusal::QueueTimeout {
                b's'
            } else {
                b'P'
            });
        }
    };
    log.server(&lease.backend.name);
    let rt = lease.runtime.clone();
    let started = std::time::Instant::now();
    let connect = Duration::from_nanos(rt.timeouts.connect);
    // A server with `send_proxy` gets the header first, before any relayed byte, within the
    // connect timeout (proxy_proto.rs).
    let open = async {
        let mut s = TcpStream::connect(lease.backend.addr).await?;
        if let Some(v) = lease.backend.send_proxy {
            s.write_all(&crate::proxy_proto::header(v, ends.0, ends.1))
                .await?;
        }
        // The client's first bytes, as they came.
        if let Some(h) = &hello {
            s.write_all(&h.bytes).await?;
        }
        Ok::<_, std::io::Error>(s)
    };
    let server = match tokio::time::timeout(connect, open).await {
        Ok(Ok(s)) => s,
        Ok(Err(_)) => {
            svc.metrics.error(&lease.backend.name, "connect");
            return log.end(b'S');
        }
        Err(_) => {
            svc.metrics.error(&lease.backend.name, "connect_timeout");
            return log.end(b's');
        }
    };
    log.connected(started.elapsed());
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
    let (up_bytes, down_bytes) = (&log.from_client, &log.to_client);
    let who = match mode {
        Relay::Copy => relay_copy(client, server, lease, &idle, svc, (up_bytes, down_bytes)).await,
        Relay::Splice => {
            let up = splice_pump(&client, &server, pipes, idle.client, &idle, up_bytes);
            let down = splice_pump(&server, &client, pipes, idle.server, &idle, down_bytes);
            finish(up, down, lease, &idle, svc).await
        }
    };
    log.end(who);
}

/// Read the client's ClientHello within `timeouts.client`; `None` (counted
/// `refused{reason}`, the caller closes the connection) when it is no routable ClientHello
/// or does not come in time.
async fn client_hello(
    client: &mut TcpStream,
    rt: &Runtime,
    svc: &Service,
    peer: SocketAddr,
) -> Option<crate::sni::Hello> {
    let limit = Duration::from_nanos(rt.timeouts.client);
    let reason = match tokio::time::timeout(limit, crate::sni::read_hello(client)).await {
        Ok(Ok(h)) => {
            tracing::debug!(%peer, sni = h.name.as_deref().unwrap_or("-"), "ClientHello read");
            return Some(h);
        }
        Ok(Err(e)) => {
            tracing::debug!(%peer, "connection refused: {e}");
            e.reason()
        }
        Err(_) => "client_timeout",
    };
    svc.metrics.refuse(reason);
    None
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

/// Copy until EOF, then shut down the write side (propagating the FIN); `moved` counts the
/// bytes written.
async fn pump<R, W>(mut r: R, mut w: W, idle: Duration, shared: &Idle, moved: &AtomicU64) -> PumpEnd
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
            Ok(Ok(0)) => {
                let _ = w.shutdown().await;
                return PumpEnd::Eof;
            }
            Ok(Ok(n)) => n,
        };
        shared.moved();
        match tokio::time::timeout(idle, w.write_all(&buf[..n])).await {
            Ok(Ok(())) => {
                moved.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(_) => return PumpEnd::Idle,
            Ok(Err(_)) => return PumpEnd::Error,
        }
    }
}

/// Splice until EOF, then shut down the write side (propagating the FIN). A pipe is taken from
/// `pipes` once `r` is readable and given back empty after its bytes reached `w`.
async fn splice_pump(
    r: &TcpStream,
    w: &TcpStream,
    pipes: &PipePool,
    idle: Duration,
    shared: &Idle,
    moved: &AtomicU64,
) -> PumpEnd {
    loop {
        match tokio::time::timeout(idle, r.readable()).await {
            Err(_) if shared.quiet() < idle => continue,
            Err(_) => return PumpEnd::Idle,
            Ok(Err(_)) => return PumpEnd::Error,
            Ok(Ok(())) => {}
        }
        let pipe = match pipes.take() {
            Ok(p) => p,
            Err(_) => {
                shared.fallbacks.fetch_add(1, Ordering::Relaxed);
                match copy_chunk(r, w, idle, moved).await {
                    Some(PumpEnd::Eof) => {
                        let _ = sys::shutdown_write(w);
                        return PumpEnd::Eof;
                    }
                    Some(end) => return end,
                    None => {
                        shared.moved();
                        continue;
                    }
                }
            }
        };
        let n = match r.try_io(Interest::READABLE, || pipe.fill_from(r, SPLICE_CHUNK)) {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                pipes.give(pipe);
                continue;
            }
            Err(_) => return PumpEnd::Error,
            Ok(0) => {
                pipes.give(pipe);
                let _ = sys::shutdown_write(w);
                return PumpEnd::Eof;
            }
            Ok(n) => n,
        };
        shared.moved();
        let mut left = n;
        while left > 0 {
            let out = w.async_io(Interest::WRITABLE, || pipe.drain_to(w, left));
            match tokio::time::timeout(idle, out).await {
                Ok(Ok(m)) if m > 0 => {
                    left -= m;
                    moved.fetch_add(m as u64, Ordering::Relaxed);
                }
                // A pipe with bytes left in it is dropped (closed), never reused.
                Ok(_) => return PumpEnd::Error,
                Err(_) => return PumpEnd::Idle,
            }
        }
        pipes.give(pipe);
    }
}

/// Copy one chunk `r` → `w` through a user-space buffer (the splice relay's fallback when no
/// pipe can be made). `None`: moved some bytes, go on.
async fn copy_chunk(
    r: &TcpStream,
    w: &TcpStream,
    idle: Duration,
    moved: &AtomicU64,
) -> Option<PumpEnd> {
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
            Ok(Ok(m)) if m > 0 => {
                sent += m;
                moved.fetch_add(m as u64, Ordering::Relaxed);
            }
            Ok(_) => return Some(PumpEnd::Error),
            Err(_) => return Some(PumpEnd::Idle),
        }
    }
    None
}

/// `(up, down)`: the byte counts of the two directions.
async fn relay_copy(
    mut client: TcpStream,
    mut server: TcpStream,
    lease: Lease,
    idle: &Idle,
    svc: &Service,
    (up_bytes, down_bytes): (&AtomicU64, &AtomicU64),
) -> u8 {
    let (cr, cw) = client.split();
    let (sr, sw) = server.split();
    let up = pump(cr, sw, idle.client, idle, up_bytes);
    let down = pump(sr, cw, idle.server, idle, down_bytes);
    finish(up, down, lease, idle, svc).await
}

/// Run both directions; the lease turns inactive at the first FIN (IPVS) and is released
/// (dropped) when both directions are done or one fails. Returns who ended it, as the log's
/// first letter (`-` both directions ended normally, `c`/`s` an idle timeout on the client's
/// or the server's direction, `C`/`S` a reset or error on that side).
async fn finish(
    up: impl Future<Output = PumpEnd>,
    down: impl Future<Output = PumpEnd>,
    mut lease: Lease,
    idle: &Idle,
    svc: &Service,
) -> u8 {
    tokio::pin!(up, down);
    let (first, up_done) = tokio::select! {
        e = &mut up => (e, true),
        e = &mut down => (e, false),
    };
    // The side a direction reads from: the client's for `up`.
    let side = |up: bool, client: u8, server: u8| if up { client } else { server };
    let who = match first {
        PumpEnd::Eof => {
            lease.set_inactive();
            let second = if up_done { down.await } else { up.await };
            match second {
                PumpEnd::Eof => b'-',
                PumpEnd::Idle => {
                    svc.metrics.error(&lease.backend.name, "idle_timeout");
                    side(!up_done, b'c', b's')
                }
                PumpEnd::Error => side(!up_done, b'C', b'S'),
            }
        }
        PumpEnd::Idle => {
            svc.metrics.error(&lease.backend.name, "idle_timeout");
            side(up_done, b'c', b's')
        }
        PumpEnd::Error => {
            let reason = side(up_done, b'C', b'S');
            svc.metrics.error(
                &lease.backend.name,
                if up_done {
                    "client_reset"
                } else {
                    "server_reset"
                },
            );
            reason
        }
    };
    // Once per connection, not per chunk: a metric label lookup is not free.
    if idle.fallbacks.load(Ordering::Relaxed) > 0 {
        svc.metrics.error(&lease.backend.name, "splice_fallback");
    }
    who
}

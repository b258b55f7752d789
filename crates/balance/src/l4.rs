//! L4 mode: one backend per client connection (IPVS-NAT scheduling, HAProxy `mode tcp`),
//! bytes relayed both ways through bounded buffers.
//!
//! Accounting follows IPVS: the lease is active while both directions are open and turns
//! inactive at the first FIN (half-close), as `ip_vs_proto_tcp.c` moves a connection out of
//! ESTABLISHED; it leaves the table when both directions are done.
//!
//! Relay: `tokio::io` reads into one [`RELAY_BUFFER`]-byte buffer per direction, allocated when
//! the connection is relayed; `splice(2)` is not used (see docs/balance.md: not measured yet).

use crate::service::{Lease, Service};
use netsched_core::balance::FlowKey;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// Bytes buffered per direction per connection.
pub const RELAY_BUFFER: usize = 16 * 1024;

pub async fn serve(listener: TcpListener, svc: Arc<Service>, conns: Arc<Semaphore>) {
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
        tokio::spawn(async move {
            svc.metrics.client_connections.inc();
            let local = client.local_addr().unwrap_or(peer);
            let key = FlowKey::new(peer.ip(), peer.port(), local.ip(), local.port());
            handle(client, key, &svc).await;
            svc.metrics.client_connections.dec();
            drop(permit);
        });
    }
}

async fn handle(client: TcpStream, key: FlowKey, svc: &Arc<Service>) {
    let rt = svc.runtime();
    let lease = match svc.acquire(key).await {
        Ok(l) => l,
        Err(r) => {
            svc.metrics.refuse(r.reason());
            return;
        }
    };
    let started = std::time::Instant::now();
    let connect = Duration::from_nanos(rt.timeouts.connect);
    let server = match tokio::time::timeout(connect, TcpStream::connect(lease.addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(_)) => {
            svc.metrics.error(&lease.name, "connect");
            return;
        }
        Err(_) => {
            svc.metrics.error(&lease.name, "connect_timeout");
            return;
        }
    };
    svc.metrics
        .response_seconds
        .get_or_create(&crate::metrics::Metrics::backend(&lease.name))
        .observe(started.elapsed().as_secs_f64());
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    relay(
        client,
        server,
        lease,
        Duration::from_nanos(rt.timeouts.client),
        Duration::from_nanos(rt.timeouts.server),
        svc,
    )
    .await;
}

#[derive(Debug)]
enum PumpEnd {
    Eof,
    Idle,
    Error,
}

/// Copy until EOF, then shut down the write side (propagating the FIN). `idle` ends the copy
/// only when *neither* direction has moved a byte for that long (`last` is shared, in ms
/// since `epoch`), so a long one-way transfer is not cut while the other side is silent.
async fn pump<R, W>(mut r: R, mut w: W, idle: Duration, epoch: Instant, last: &AtomicU64) -> PumpEnd
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; RELAY_BUFFER];
    let quiet = || {
        let now = epoch.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(last.load(Ordering::Relaxed)))
    };
    loop {
        let n = match tokio::time::timeout(idle, r.read(&mut buf)).await {
            Err(_) if quiet() < idle => continue,
            Err(_) => return PumpEnd::Idle,
            Ok(Err(_)) => return PumpEnd::Error,
            Ok(Ok(0)) => {
                let _ = w.shutdown().await;
                return PumpEnd::Eof;
            }
            Ok(Ok(n)) => n,
        };
        last.store(epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
        match tokio::time::timeout(idle, w.write_all(&buf[..n])).await {
            Ok(Ok(())) => {}
            Err(_) => return PumpEnd::Idle,
            Ok(Err(_)) => return PumpEnd::Error,
        }
    }
}

async fn relay(
    mut client: TcpStream,
    mut server: TcpStream,
    mut lease: Lease,
    client_idle: Duration,
    server_idle: Duration,
    svc: &Service,
) {
    let (cr, cw) = client.split();
    let (sr, sw) = server.split();
    let epoch = Instant::now();
    let last = AtomicU64::new(0);
    let up = pump(cr, sw, client_idle, epoch, &last);
    let down = pump(sr, cw, server_idle, epoch, &last);
    tokio::pin!(up, down);
    let (first, up_done) = tokio::select! {
        e = &mut up => (e, true),
        e = &mut down => (e, false),
    };
    match first {
        PumpEnd::Eof => {
            lease.set_inactive();
            let second = if up_done { down.await } else { up.await };
            if let PumpEnd::Idle = second {
                svc.metrics.error(&lease.name, "idle_timeout");
            }
        }
        PumpEnd::Idle => svc.metrics.error(&lease.name, "idle_timeout"),
        PumpEnd::Error => svc.metrics.error(
            &lease.name,
            if up_done {
                "client_reset"
            } else {
                "server_reset"
            },
        ),
    }
}

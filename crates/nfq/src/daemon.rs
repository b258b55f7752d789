//! `netsched nfq`: the percentile scheduling daemon.
//!
//! Start-up order: engine (validates the configuration) → control socket → netlink queue
//! (bound, fail-open, receive buffer sized) → iptables rules. Shut-down order (SIGTERM,
//! SIGINT, or an error): rules removed first (no new packets), then every packet still in the
//! socket and every held packet gets an ACCEPT verdict, then the queue is unbound. Closing a
//! queue with packets pending would drop them (`nfqnl_flush` in instance_destroy), so
//! nothing is closed before its packets are verdicted.
//!
//! Two threads. The packet loop (the calling thread): `poll` on the netlink socket and the
//! command channel's eventfd; read up to 64 packets per `recvmmsg`, decide each with
//! [`crate::engine::Engine`], send the batch of verdicts in one datagram; apply waiting control
//! commands between batches; every 10 ms a tick expires requests and flows. The control thread
//! serves the control socket ([`crate::control`]): nothing a control client does reaches the
//! packet loop except small validated commands.
//!
//! Adaptive polling (`busy_poll`, default 200 µs): for that long after the last packet the
//! loop polls with a zero timeout instead of sleeping, so the next packet of a conversation
//! (the response to a request it just let through) costs no wake-up; after it, the loop
//! blocks (10 ms timeout), so an idle daemon sleeps. Measured in docs/bench-nfq.md.
//!
//! SIGHUP (when started with a reload, as `netsched nfq` is) wakes a thread of its own that
//! reloads the configuration ([`crate::reload`]) through the same command channel as `ctl`.
//!
//! With `--metrics ADDR` a third thread serves `/metrics` ([`crate::metrics`]); the packet loop
//! only publishes a copy of its numbers every 100 ms into a slot it never waits on.

use crate::config::Config;
use crate::control::{self, ControlServer};
use crate::daemon_error::DaemonError;
use crate::engine::Snapshot;
use crate::engine::{Applied, Engine, SocketCounters, Status};
use crate::iptables::{self, Rules};
use crate::netlink::{kernel_queue_counters, NfQueue, PacketMsg};
use crate::reload::Reloader;
use netsched_metrics::{Latest, MetricsServer};
use netsched_sys::process::HangupThread;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the daemon reports when it exits.
#[derive(Debug, Clone)]
pub struct Summary {
    pub counters: crate::engine::Counters,
    pub status: Status,
    /// Packets accepted during shut-down (held + still in the socket).
    pub released_at_exit: usize,
}

/// The control thread's additions to a status answer: the iptables rule counters (cached
/// for [`RULE_COUNT_MAX_AGE`]: each read starts `iptables` processes) and the kernel's queue
/// counters from /proc (this thread's network namespace = the daemon's).
struct KernelFacts {
    iptables: String,
    queue: u16,
    rule_matched: Option<(Instant, u64)>,
}

/// How long a read of the iptables rule counters is reused by later `status` calls.
const RULE_COUNT_MAX_AGE: Duration = Duration::from_secs(1);

impl KernelFacts {
    fn fill(&mut self, st: &mut Status) {
        let now = Instant::now();
        let matched = match self.rule_matched {
            Some((at, n)) if now.duration_since(at) < RULE_COUNT_MAX_AGE => n,
            _ => {
                let n = iptables::rule_packet_count(&self.iptables, self.queue);
                self.rule_matched = Some((now, n));
                n
            }
        };
        let k = &mut st.kernel;
        k.rule_matched = matched;
        if let Some((total, dropped, user)) = kernel_queue_counters(self.queue) {
            k.queue_total = total;
            k.queue_dropped = dropped;
            k.user_dropped = user;
        }
        k.skipped_fail_open = k.rule_matched.saturating_sub(k.received + k.queue_total);
    }
}

fn socket_counters(q: &NfQueue) -> SocketCounters {
    SocketCounters {
        received: q.received,
        enobufs: q.enobufs,
        rcvbuf_bytes: q.rcvbuf() as u64,
    }
}

/// Run the daemon in the calling thread (and network namespace) until `stop` is set.
/// `on_ready` is called once the rules are in place.
///
/// Two threads: this one is the packet loop; a control thread (started here, in the same
/// network namespace, joined before returning) serves the control socket and hands the
/// packet loop validated commands (see [`crate::control`]).
pub fn run_daemon(
    cfg: Config,
    stop: &AtomicBool,
    on_ready: impl FnOnce(&Status),
) -> Result<Summary, DaemonError> {
    run_daemon_with_reload(cfg, None, stop, on_ready)
}

/// [`run_daemon`] with a reload ([`crate::reload`]): SIGHUP and `ctl reload` read the
/// configuration again through `reloader`, on a thread of their own, never in the packet
/// loop. SIGHUP is caught from the start to the end of this call.
pub fn run_daemon_with_reload(
    cfg: Config,
    reloader: Option<Reloader>,
    stop: &AtomicBool,
    on_ready: impl FnOnce(&Status),
) -> Result<Summary, DaemonError> {
    let queue_num = cfg.queue;
    let reloads = reloader
        .as_ref()
        .map_or_else(netsched_metrics::Reloads::new, |r| r.reloads().clone());
    let with_hangup = reloader.is_some();
    let mut engine = Engine::new(cfg.clone())?;
    let ctl = ControlServer::bind(&cfg.control_socket, cfg.control_group.as_deref())?;
    let (outbox, inbox) = control::command_channel().map_err(DaemonError::Channel)?;
    let mut q = NfQueue::open(
        queue_num,
        cfg.limits.kernel_queue_maxlen,
        cfg.limits.rcvbuf_bytes,
    )?;
    // Bound before the rules go in, so a bad address changes nothing.
    let metrics = match cfg.metrics {
        Some(addr) => Some(start_metrics(addr, &cfg, &engine, &q, &reloads)?),
        None => None,
    };
    let rules = Rules::install(&cfg.iptables, &cfg.service, queue_num)?;
    let t0 = Instant::now();
    on_ready(&engine.status());

    // The control threads start here, in this thread's network namespace (the kernel
    // counters a `status` reads are this namespace's).
    // The control plane (requests and reloads) is shared by the control threads and the
    // SIGHUP thread, one at a time.
    let plane = Arc::new(Mutex::new(Plane {
        state: control::ControlState::new(&cfg),
        facts: KernelFacts {
            iptables: cfg.iptables.clone(),
            queue: queue_num,
            rule_matched: None,
        },
        reloader,
        outbox,
    }));
    let control = {
        let plane = Arc::clone(&plane);
        ctl.serve(move |req| lock(&plane).serve(req))?
    };
    let hangup = if with_hangup {
        let plane = Arc::clone(&plane);
        Some(HangupThread::spawn("nfq-sighup", move || {
            // The outcome is logged by the reload.
            let _ = lock(&plane).reload("SIGHUP");
        })?)
    } else {
        None
    };

    let result = packet_loop(
        stop,
        &mut q,
        &mut engine,
        &inbox,
        metrics.as_ref().map(|(latest, _)| latest.as_ref()),
        cfg.busy_poll,
        t0,
    );

    // Shut down: the control socket first (no more commands; the socket file goes with
    // it), then no new packets, then verdict everything.
    netsched_util::notify::stopping("netsched nfq");
    drop(control);
    drop(hangup);
    drop(inbox);
    drop(rules);
    let released = release_all(&mut q, &mut engine);
    let flushed = q.flush();
    let mut snap = engine.snapshot();
    snap.socket = socket_counters(&q);
    if let Some((latest, _)) = &metrics {
        latest.publish(snap.clone());
    }
    let names: Vec<String> = cfg.classes.iter().map(|c| c.name.clone()).collect();
    let mut status = snap.to_status(&names);
    KernelFacts {
        iptables: cfg.iptables.clone(),
        queue: queue_num,
        rule_matched: None,
    }
    .fill(&mut status);
    let _ = q.unbind();
    drop(q);
    result?;
    flushed?;
    Ok(Summary {
        counters: engine.counters.clone(),
        status,
        released_at_exit: released,
    })
}

/// The control plane: the control thread's state, the kernel facts a `status` adds, the
/// reload and the packet loop's command channel.
struct Plane {
    state: control::ControlState,
    facts: KernelFacts,
    reloader: Option<Reloader>,
    outbox: control::CommandOutbox,
}

impl Plane {
    /// Answer one control request (`reload` included).
    fn serve(&mut self, cmd: &control::CtlCmd) -> control::Served {
        if let control::CtlCmd::Reload = cmd {
            return self.reload("ctl").map(control::Answer::Done);
        }
        let out = &self.outbox;
        let facts = &mut self.facts;
        self.state.serve(
            cmd,
            |cmd| out.execute(cmd, control::COMMAND_TIMEOUT),
            &mut |st| facts.fill(st),
        )
    }

    /// Reload (SIGHUP or `ctl reload`, named by `by`) and answer the outcome.
    fn reload(&mut self, by: &str) -> Result<String, control::ControlError> {
        let Some(r) = self.reloader.as_mut() else {
            return Err(control::ControlError::Reload(
                "this daemon was started without a reload".into(),
            ));
        };
        let out = &self.outbox;
        r.answer(
            &mut self.state,
            &mut |cmd| out.execute(cmd, control::COMMAND_TIMEOUT),
            by,
        )
    }
}

fn lock(plane: &Mutex<Plane>) -> std::sync::MutexGuard<'_, Plane> {
    plane.lock().unwrap_or_else(|p| p.into_inner())
}

/// Serve `/metrics` on `addr`, its slot filled with the engine's numbers at start.
fn start_metrics(
    addr: std::net::SocketAddr,
    cfg: &Config,
    engine: &Engine,
    q: &NfQueue,
    reloads: &netsched_metrics::Reloads,
) -> Result<(Arc<Latest<Snapshot>>, MetricsServer), DaemonError> {
    let latest = Arc::new(Latest::new());
    let mut snap = engine.snapshot_without_table();
    snap.socket = socket_counters(q);
    latest.publish(snap);
    let server = crate::metrics::serve(addr, cfg, Arc::clone(&latest), reloads)
        .map_err(|source| DaemonError::Metrics { addr, source })?;
    tracing::info!("metrics on http://{}/metrics", server.addr());
    Ok((latest, server))
}

/// The packet loop, until `stop` is set: each turn drains packets, applies waiting control
/// commands, runs the 10 ms tick and publishes the metrics every
/// [`crate::metrics::PUBLISH_INTERVAL`].
fn packet_loop(
    stop: &AtomicBool,
    q: &mut NfQueue,
    engine: &mut Engine,
    inbox: &control::CommandInbox,
    latest: Option<&Latest<Snapshot>>,
    busy_poll: u64,
    t0: Instant,
) -> Result<(), DaemonError> {
    let now = || t0.elapsed().as_nanos() as u64;
    let mut batch: Vec<PacketMsg> = Vec::with_capacity(crate::netlink::RECV_BATCH);
    let mut accept: Vec<u32> = Vec::with_capacity(1024);
    let mut last_tick = 0u64;
    let mut last_publish = 0u64;
    let mut spin_until = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let mut fds = [
            libc::pollfd {
                fd: q.fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: inbox.fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // Adaptive polling: inside the window after the last packet, look without
        // sleeping (a wake-up from poll costs tens of µs); after it, block.
        let spinning = busy_poll > 0 && now() < spin_until;
        let timeout = if spinning {
            Duration::ZERO
        } else {
            Duration::from_millis(10)
        };
        netsched_sys::poll(&mut fds, timeout).map_err(DaemonError::Poll)?;
        if spinning && fds[0].revents == 0 && fds[1].revents == 0 {
            std::hint::spin_loop();
            continue;
        }
        // Packets: drain up to 16 batches before looking at anything else.
        for _ in 0..16 {
            batch.clear();
            if q.recv_batch(&mut batch)? == 0 {
                break;
            }
            spin_until = now().saturating_add(busy_poll);
            let t = now();
            for p in &batch {
                engine.on_packet(p.id, p.hook, &p.head, t, &mut accept);
            }
            for id in accept.drain(..) {
                q.accept(id);
            }
            q.flush()?;
        }
        if fds[1].revents != 0 {
            let t = now();
            let sock = socket_counters(q);
            inbox.serve(|cmd| {
                let mut a = engine.apply(cmd, t, &mut accept);
                if let Ok(Applied::Snapshot(s)) = &mut a {
                    s.socket = sock;
                }
                a
            });
            for id in accept.drain(..) {
                q.accept(id);
            }
            q.flush()?;
        }
        let t = now();
        if t.saturating_sub(last_tick) >= 10 * crate::MS {
            last_tick = t;
            engine.tick(t, &mut accept);
            for id in accept.drain(..) {
                q.accept(id);
            }
            q.flush()?;
        }
        if let Some(latest) = latest {
            if t.saturating_sub(last_publish) >= crate::metrics::PUBLISH_INTERVAL {
                last_publish = t;
                let mut snap = engine.snapshot_without_table();
                snap.socket = socket_counters(q);
                // Never waits: skipped (and counted) if a scrape holds the slot.
                latest.publish(snap);
            }
        }
    }
    Ok(())
}

/// At shut-down, after the rules are gone: accept every packet still in the socket and
/// every packet the engine holds. Returns how many were accepted (not yet flushed).
fn release_all(q: &mut NfQueue, engine: &mut Engine) -> usize {
    let mut batch: Vec<PacketMsg> = Vec::with_capacity(crate::netlink::RECV_BATCH);
    let mut accept: Vec<u32> = Vec::with_capacity(1024);
    let mut released = 0usize;
    // Packets already in the socket (queued before the rules went away).
    for _ in 0..1000 {
        batch.clear();
        match q.recv_batch(&mut batch) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                for p in &batch {
                    accept.push(p.id);
                }
            }
        }
    }
    engine.drain_all(&mut accept);
    for id in accept.drain(..) {
        q.accept(id);
        released += 1;
    }
    released
}

//! The switch's event loop: N guest ports and one uplink, each a port of the configured
//! backend ([`AnyPort`]: a `TPACKET_V2` ring or `recvmmsg`/`sendmmsg`), one shared [`FramePool`], one core discipline across the
//! guest ports (one class per port) and a forwarding budget.
//!
//! One thread, no per-packet allocation. Each turn:
//! 1. **guest → uplink**: read a batch from every guest port; each frame is checked (at least
//!    an Ethernet header, at most one pool slot), its source MAC learned for the return path,
//!    and it is offered to the discipline in its port's class — a full vif queue drops the new
//!    frame (reason `queue_full`), so a flooding guest fills only its own queue;
//! 2. **budget**: while the forwarding budget ([`crate::budget`]: packets/s or bits/s,
//!    dom0's CPU in P2) has credit, take the next frame from the discipline into the uplink's
//!    send batch;
//! 3. **uplink → guest**: read a batch from the uplink and deliver each frame by destination
//!    MAC like a bridge: a learned unicast address goes to its port, broadcast, multicast and
//!    unknown unicast to every guest port;
//! 4. sleep in `epoll_pwait2` on all sockets until input, the next budget credit or 100 ms.
//!
//! The pool has one slot per vif-queue place plus room for the batches in flight, so it never
//! runs dry and a port can never hold more than its queue: memory is fixed at start.
//!
//! Every frame read from a guest port is accounted on that port:
//! `received = forwarded + dropped (per reason) + queued` ([`PortStats::identity_holds`]).
//! A port whose interface disappears (checked every [`LIVENESS_EVERY`]) is closed with a log
//! line; its queued frames are dropped as `removed`; the others keep being served.
//!
//! Runtime control ([`crate::control`]) reaches the loop only through a bounded channel it
//! drains with `try_recv` once per turn; a tier or weight change rebuilds the discipline at
//! the next round start ([`Switch::rebuild`]) without losing a queued frame. Metrics
//! ([`crate::metrics`]) are published as atomic stores every
//! [`crate::metrics::PUBLISH_EVERY`].

use crate::budget::Budget;
use crate::config::{Discipline, SwitchConfig};
use crate::control::{Answer, Command, Envelope, Inbox, COMMAND_QUEUE};
pub use crate::frame::Frame;
use crate::latency::LatencyTrace;
use crate::macs::MacTable;
use crate::metrics::{SwitchMetrics, PUBLISH_EVERY};
pub use crate::stats::{PortStats, SwitchStats, UplinkStats};
use crate::switch_error::{epoll, SwitchError};
use crate::trace::{Trace, TraceKind};
use netsched_core::qdisc::{AnyQdisc, Qdisc, Verdict};
use netsched_core::{Nanos, MS};
use netsched_sys as sys;
use netsched_sys::port::{FramePool, FramePort, Rx, BATCH, SLOT};
use netsched_sys::AnyPort;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;

/// Ethernet header: destination, source, EtherType.
pub const ETH_HEADER: u32 = 14;
/// How often the packet thread checks that every port's interface still exists.
pub const LIVENESS_EVERY: Nanos = 200 * MS;
/// The loop wakes at least this often (stop flag, liveness, stats).
const MAX_SLEEP: Nanos = 100 * MS;
/// Shortest `--stats` interval.
pub const MIN_STATS_INTERVAL: Nanos = 100 * MS;
/// Snapshots waiting for the printer; one more is dropped and counted.
pub const STATS_QUEUE: usize = 16;

/// The packet thread's end of the bounded counter hand-off: never blocks.
pub struct StatsOutlet {
    tx: SyncSender<SwitchStats>,
    dropped: Arc<AtomicU64>,
}

impl StatsOutlet {
    /// An outlet and the printer's end, holding at most [`STATS_QUEUE`] snapshots.
    pub fn new() -> (Self, Receiver<SwitchStats>) {
        let (tx, rx) = sync_channel(STATS_QUEUE);
        (
            Self {
                tx,
                dropped: Arc::new(AtomicU64::new(0)),
            },
            rx,
        )
    }

    fn offer(&self, mut s: SwitchStats) {
        s.stats_dropped = self.dropped.load(Ordering::Relaxed);
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = self.tx.try_send(s) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

struct GuestPort {
    /// `None` once removed.
    port: Option<AnyPort>,
    ifindex: u32,
    class: usize,
    stats: PortStats,
    passed: u64,
    backlogged: bool,
}

/// The switch. Build with [`Switch::open`] in the namespace of its interfaces.
pub struct Switch {
    guests: Vec<GuestPort>,
    port_of_class: Vec<usize>,
    uplink: AnyPort,
    uplink_ifindex: u32,
    /// Why `auto` fell back to `packet` on a port, if it did.
    fallbacks: Vec<String>,
    /// Blocking waits (`epoll_pwait2` with a timeout) that returned.
    wakeups: u64,
    up: UplinkStats,
    pool: FramePool,
    qdisc: AnyQdisc<Frame>,
    discipline: Discipline,
    macs: MacTable,
    /// Frames taken from the discipline, waiting for `sendmmsg` on the uplink.
    pending: Vec<Frame>,
    /// The forwarding budget (rate, on/off periods, credit).
    budget: Budget,
    /// Adaptive polling: look without sleeping until then ([`SwitchConfig::busy_poll`] after
    /// the last frame read).
    spin_until: Nanos,
    busy_poll: Nanos,
    /// Start of the run (stats); the budget's periods and the trace count from the budget's
    /// origin ([`SwitchConfig::budget_origin`], else `t0`).
    t0: Nanos,
    rounds: u64,
    /// Every open port's socket, token = guest index (the uplink: the number of guests).
    epoll: sys::Epoll,
    events: Vec<libc::epoll_event>,
    /// Per guest port, then the uplink: whether to read it this turn. After a wait only
    /// the sockets it found readable are read (the others have nothing: a read would be an
    /// empty syscall per port per wake-up); when the loop goes round without polling (budget
    /// credit due now), every socket is read.
    ready: Vec<bool>,
    stats_interval: Option<Nanos>,
    /// The configuration as changed at runtime (tiers, weights): what a rebuild builds.
    cfg: SwitchConfig,
    /// A tier or weight changed: rebuild the discipline at the next round start.
    rebuild_pending: bool,
    rebuilds: u64,
    control: Option<Inbox>,
    metrics: Option<SwitchMetrics>,
    /// Off unless [`Switch::enable_trace`].
    trace: Option<Trace>,
    /// Off unless [`SwitchConfig::trace_latency`].
    latency: Option<Box<LatencyTrace>>,
    /// The last wait before this turn blocked (the thread slept).
    slept: bool,
}

impl Switch {
    /// Open every port (in the calling thread's network namespace).
    pub fn open(cfg: &SwitchConfig, stats_interval: Option<Nanos>) -> Result<Self, SwitchError> {
        cfg.check()?;
        if let Some(i) = stats_interval {
            if i < MIN_STATS_INTERVAL {
                return Err(SwitchError::StatsInterval {
                    value: i,
                    min: MIN_STATS_INTERVAL,
                });
            }
        }
        let class_of = cfg.class_of();
        let mut port_of_class = vec![0; class_of.len()];
        let mut guests = Vec::with_capacity(cfg.ports.len());
        let mut fallbacks = Vec::new();
        let opts = cfg.port_options();
        for (i, p) in cfg.ports.iter().enumerate() {
            let (port, fallback) =
                AnyPort::open(&p.dev, &opts).map_err(|source| SwitchError::Port {
                    index: Some(i),
                    dev: p.dev.clone(),
                    source,
                })?;
            fallbacks.extend(fallback);
            let ifindex = sys::ifindex(&p.dev).unwrap_or(0);
            port_of_class[class_of[i]] = i;
            guests.push(GuestPort {
                port: Some(port),
                ifindex,
                class: class_of[i],
                stats: PortStats {
                    dev: p.dev.clone(),
                    tier: p.tier,
                    weight: p.weight,
                    ..PortStats::default()
                },
                passed: 0,
                backlogged: false,
            });
        }
        let (uplink, fallback) =
            AnyPort::open(&cfg.uplink, &opts).map_err(|source| SwitchError::Port {
                index: None,
                dev: cfg.uplink.clone(),
                source,
            })?;
        fallbacks.extend(fallback);
        let uplink_ifindex = sys::ifindex(&cfg.uplink).unwrap_or(0);
        let qdisc: AnyQdisc<Frame> = cfg.qdisc().build()?;
        if let AnyQdisc::DelayConstrained(d) = &qdisc {
            if cfg.discipline == Discipline::DelayConstrained {
                for g in guests.iter_mut() {
                    g.stats.bound_rounds = d.wait_bound_rounds(g.class);
                }
            }
        }
        // Every queue place, one receive batch, the uplink send batch, one return batch.
        let slots: usize = (0..cfg.ports.len())
            .map(|i| cfg.port_queue(i))
            .sum::<usize>()
            + 3 * BATCH;
        let _ = sys::set_timer_slack(1000);
        let ep = sys::Epoll::new().map_err(epoll("epoll_create1"))?;
        for (gi, g) in guests.iter().enumerate() {
            if let Some(p) = &g.port {
                ep.add(p.raw_fd(), gi as u64).map_err(epoll("epoll_ctl"))?;
            }
        }
        ep.add(uplink.raw_fd(), guests.len() as u64)
            .map_err(epoll("epoll_ctl"))?;
        Ok(Self {
            epoll: ep,
            events: vec![libc::epoll_event { events: 0, u64: 0 }; guests.len() + 1],
            ready: vec![true; guests.len() + 1],
            guests,
            port_of_class,
            uplink,
            uplink_ifindex,
            fallbacks,
            wakeups: 0,
            up: UplinkStats {
                dev: cfg.uplink.clone(),
                ..UplinkStats::default()
            },
            pool: FramePool::new(slots),
            qdisc,
            discipline: cfg.discipline,
            macs: MacTable::new(cfg.mac_table),
            pending: Vec::with_capacity(BATCH),
            budget: Budget::new(cfg),
            spin_until: 0,
            busy_poll: cfg.busy_poll,
            t0: 0,
            rounds: 0,
            stats_interval,
            cfg: cfg.clone(),
            rebuild_pending: false,
            rebuilds: 0,
            control: None,
            metrics: None,
            trace: None,
            latency: cfg
                .trace_latency
                .then(|| Box::new(LatencyTrace::new(slots))),
            slept: false,
        })
    }

    /// Take runtime commands from `inbox` (the packet thread's end of
    /// [`crate::control::channel`]); at most [`COMMAND_QUEUE`] per loop turn, never waiting.
    pub fn attach_control(&mut self, inbox: Inbox) {
        self.control = Some(inbox);
    }

    /// Publish counters to `metrics` every [`PUBLISH_EVERY`] (atomic stores only).
    pub fn attach_metrics(&mut self, metrics: SwitchMetrics) {
        self.metrics = Some(metrics);
    }

    /// Record every guest frame's arrival (queued or dropped) and departure, up to `capacity`
    /// events ([`crate::trace`]); the entries are allocated now.
    pub fn enable_trace(&mut self, capacity: usize) {
        self.trace = Some(Trace::new(capacity));
    }

    /// The trace, if enabled (taken: recording stops).
    pub fn take_trace(&mut self) -> Option<Trace> {
        self.trace.take()
    }

    /// Carry out the waiting control commands (at most [`COMMAND_QUEUE`]); never blocks.
    fn serve_control(&mut self) {
        for _ in 0..COMMAND_QUEUE {
            let Some(env) = self.control.as_ref().and_then(Inbox::take) else {
                return;
            };
            self.carry_out(env);
        }
    }

    fn carry_out(&mut self, env: Envelope) {
        let answer = match &env.command {
            Command::Show => Answer::Stats(Box::new(self.stats(self.t0))),
            Command::SetTier { port, tier } => self.set_param(port, *tier, true),
            Command::SetWeight { port, weight } => self.set_param(port, *weight, false),
        };
        env.answer(answer);
    }

    /// Record a new tier (`tier = true`) or weight for `port`; the discipline is rebuilt at
    /// the next round start. Refused, with the reason, when the discipline does not use it.
    fn set_param(&mut self, port: &str, value: u32, tier: bool) -> Answer {
        let what = if tier { "tier" } else { "weight" };
        let Some(gi) = self.guests.iter().position(|g| g.stats.dev == port) else {
            let names: Vec<&str> = self.guests.iter().map(|g| g.stats.dev.as_str()).collect();
            return Answer::Refused(format!(
                "set-{what}: no guest port {port:?} (ports: {})",
                names.join(", ")
            ));
        };
        if self.guests[gi].port.is_none() {
            return Answer::Refused(format!(
                "set-{what} {port}: the port was removed (its interface disappeared)"
            ));
        }
        if !(1..=1000).contains(&value) {
            return Answer::Refused(format!(
                "set-{what} {port} {value}: must be between 1 and 1000"
            ));
        }
        let d = self.discipline;
        let uses = if tier {
            matches!(
                d,
                Discipline::StrictPriority
                    | Discipline::DelayConstrained
                    | Discipline::DelayWallClock
            )
        } else {
            matches!(d, Discipline::Drr | Discipline::Wf2q)
        };
        if !uses {
            let what_it_uses = match d {
                Discipline::Drr | Discipline::Wf2q => "the ports' weights (use set-weight)",
                Discipline::Edf => "each port's bound as its deadline (neither tier nor weight)",
                _ => "the ports' tiers (use set-tier)",
            };
            return Answer::Refused(format!(
                "set-{what} {port} {value}: discipline {} does not use a {what}; it orders by \
                 {what_it_uses}",
                d.as_str()
            ));
        }
        let p = &mut self.cfg.ports[gi];
        let s = &mut self.guests[gi].stats;
        let (cfg_slot, shown) = if tier {
            (&mut p.tier, &mut s.tier)
        } else {
            (&mut p.weight, &mut s.weight)
        };
        let old = std::mem::replace(cfg_slot, value);
        *shown = value;
        if old == value {
            return Answer::Done(format!("{port}: {what} already {value}; unchanged"));
        }
        self.rebuild_pending = true;
        Answer::Done(format!(
            "{port}: {what} {old} -> {value} (applies at the next round start)"
        ))
    }

    /// A rebuild waits for the open round of delay_constrained to close (a netback batch is
    /// not interrupted), unless nothing is queued.
    fn may_rebuild(&self) -> bool {
        match &self.qdisc {
            AnyQdisc::DelayConstrained(d) => {
                !d.round_open() || self.qdisc.stats().queued_packets == 0
            }
            _ => true,
        }
    }

    /// Build the discipline anew from the changed configuration and move every queued frame
    /// into it, per port in arrival order and with its arrival time (so the wall-clock
    /// variant still sees its age): no frame is lost or reordered within its port. What a
    /// discipline keeps besides its queues starts afresh: delay bitmaps and promotions,
    /// DRR deficits, WF2Q+ virtual time. So the pass-over measure restarts too
    /// (`max_rounds_passed` keeps the longest run seen).
    fn rebuild(&mut self) {
        self.rebuild_pending = false;
        let fresh: AnyQdisc<Frame> = match self.cfg.qdisc().build() {
            Ok(q) => q,
            Err(e) => {
                // Cannot happen (values are checked before they are recorded); keep serving.
                tracing::warn!("rebuilding the discipline failed ({e}); keeping the old one");
                return;
            }
        };
        let held = std::mem::replace(&mut self.qdisc, fresh).reset();
        let class_of = self.cfg.class_of();
        for (gi, g) in self.guests.iter_mut().enumerate() {
            g.class = class_of[gi];
            self.port_of_class[class_of[gi]] = gi;
            g.passed = 0;
            g.backlogged = false;
        }
        if let AnyQdisc::DelayConstrained(d) = &self.qdisc {
            if self.discipline == Discipline::DelayConstrained {
                for g in self.guests.iter_mut() {
                    g.stats.bound_rounds = d.wait_bound_rounds(g.class);
                }
            }
        }
        for f in held {
            let class = self.guests[f.port as usize].class;
            let lost = match self.qdisc.enqueue(class, f, f.arrived) {
                Verdict::Queued => None,
                Verdict::Dropped { item, .. } => Some(item),
                Verdict::QueuedEvicting { evicted, .. } => Some(evicted),
            };
            // Not possible with the same queue limits; accounted anyway.
            if let Some(x) = lost {
                let s = &mut self.guests[x.port as usize].stats;
                s.queued -= 1;
                s.dropped_discipline += 1;
                self.pool.release(x.slot);
            }
        }
        self.rebuilds += 1;
    }

    /// Why `auto` fell back to `packet` on a port, if it did.
    pub fn fallbacks(&self) -> &[String] {
        &self.fallbacks
    }

    /// The open ports (for offload warnings, backend and memory): guests first, then the
    /// uplink.
    pub fn ports(&self) -> impl Iterator<Item = &AnyPort> {
        self.guests
            .iter()
            .filter_map(|g| g.port.as_ref())
            .chain(std::iter::once(&self.uplink))
    }

    /// Current counters.
    pub fn stats(&mut self, t0: Nanos) -> SwitchStats {
        for g in &mut self.guests {
            if let Some(p) = &g.port {
                g.stats.kernel_drops += p.take_kernel_drops();
            }
        }
        self.up.kernel_drops += self.uplink.take_kernel_drops();
        SwitchStats {
            elapsed_ns: sys::now_ns().saturating_sub(t0),
            cpu_ns: sys::thread_cpu_ns(),
            discipline: self.discipline.as_str().to_string(),
            rounds: self.rounds,
            rebuilds: self.rebuilds,
            budget_lost_ns: self.budget.lost_ns(),
            mac_learned: self.macs.len() as u64,
            mac_table_full: self.macs.refused(),
            stats_dropped: 0,
            port_backend: self.uplink.backend(),
            ring_bytes: self.ports().map(|p| p.ring_bytes() as u64).sum(),
            xdp_drops: self
                .ports()
                .fold(netsched_sys::XdpStats::default(), |mut t, p| {
                    t.add(&p.xdp_stats());
                    t
                }),
            wakeups: self.wakeups,
            wakeups_per_frame: {
                let rx =
                    self.up.received + self.guests.iter().map(|g| g.stats.received).sum::<u64>();
                if rx == 0 {
                    0.0
                } else {
                    self.wakeups as f64 / rx as f64
                }
            },
            uplink: self.up.clone(),
            ports: self.guests.iter().map(|g| g.stats.clone()).collect(),
            latency: self.latency.as_ref().map(|l| l.report()),
        }
    }

    /// Read one batch from guest `gi` into the discipline. Returns frames read.
    fn recv_guest(&mut self, gi: usize, now: Nanos) -> usize {
        let Some(port) = self.guests[gi].port.as_ref() else {
            return 0;
        };
        let mut events = [Rx::Oversize { len: 0 }; BATCH];
        let (read, k) = port.recv(&mut self.pool, &mut events);
        if let Some(l) = &mut self.latency {
            let t = sys::clock::realtime_ns();
            for (e, rx) in events[..k].iter().enumerate() {
                if let Rx::Frame { slot, .. } = *rx {
                    l.guest_read(slot, port.rx_stamp(e), t);
                }
            }
        }
        let class = self.guests[gi].class;
        for rx in &events[..k] {
            let g = &mut self.guests[gi];
            g.stats.received += 1;
            match *rx {
                Rx::Oversize { .. } => g.stats.dropped_oversize += 1,
                Rx::Frame { slot, len } if len < ETH_HEADER => {
                    g.stats.dropped_malformed += 1;
                    self.pool.release(slot);
                }
                Rx::Frame { slot, len } => {
                    let data = self.pool.data(slot, len);
                    let mut src = [0u8; 6];
                    src.copy_from_slice(&data[6..12]);
                    self.macs.learn(src, gi as u32);
                    let frame = Frame {
                        slot,
                        len,
                        port: gi as u32,
                        arrived: now,
                    };
                    let verdict = self.qdisc.enqueue(class, frame, now);
                    if let Some(t) = &mut self.trace {
                        let kind = match verdict {
                            Verdict::Dropped { .. } => TraceKind::Dropped,
                            _ => TraceKind::Queued,
                        };
                        t.record(now.saturating_sub(self.budget.origin()), gi as u32, kind);
                    }
                    match verdict {
                        Verdict::Queued => g.stats.queued += 1,
                        Verdict::Dropped { item, .. } => {
                            g.stats.dropped_queue_full += 1;
                            self.pool.release(item.slot);
                        }
                        Verdict::QueuedEvicting { evicted, .. } => {
                            // Not done by the disciplines configured here; accounted anyway.
                            g.stats.queued += 1;
                            let e = &mut self.guests[evicted.port as usize].stats;
                            e.queued -= 1;
                            e.dropped_discipline += 1;
                            self.pool.release(evicted.slot);
                        }
                    }
                }
            }
        }
        read
    }

    /// Move frames from the discipline into the uplink's send batch while the budget allows.
    fn dequeue_budgeted(&mut self, now: Nanos) {
        if self.budget.open_turn(now) {
            self.dequeue_within_budget(now);
        }
        // Frames in the send batch are already paid for: only the discipline's wait.
        self.budget
            .close_turn(self.qdisc.stats().queued_packets > 0);
    }

    fn dequeue_within_budget(&mut self, now: Nanos) {
        while self.pending.len() < BATCH && self.budget.due(now) {
            if self.rebuild_pending && self.may_rebuild() {
                self.rebuild();
            }
            let round_start = match &self.qdisc {
                AnyQdisc::DelayConstrained(d) if !d.round_open() => {
                    for g in self.guests.iter_mut() {
                        g.backlogged = d.iface_len(g.class) > 0;
                    }
                    true
                }
                _ => false,
            };
            let next = self.qdisc.dequeue(now);
            for (f, _) in self.qdisc.take_evicted() {
                let s = &mut self.guests[f.port as usize].stats;
                s.queued -= 1;
                s.dropped_discipline += 1;
                self.pool.release(f.slot);
            }
            let Some(f) = next else {
                return;
            };
            if round_start {
                self.rounds += 1;
                for (gi, g) in self.guests.iter_mut().enumerate() {
                    if gi == f.port as usize || !g.backlogged {
                        g.passed = 0;
                    } else {
                        g.passed += 1;
                        g.stats.max_rounds_passed = g.stats.max_rounds_passed.max(g.passed);
                    }
                }
            } else if !matches!(self.qdisc, AnyQdisc::DelayConstrained(_)) {
                self.rounds += 1;
            }
            let g = &mut self.guests[f.port as usize];
            if g.port.is_none() {
                g.stats.queued -= 1;
                g.stats.dropped_removed += 1;
                self.pool.release(f.slot);
                continue;
            }
            self.budget.charge(f.len);
            if let Some(l) = &mut self.latency {
                l.taken(f.slot, sys::clock::realtime_ns());
            }
            if let Some(t) = &mut self.trace {
                t.record(
                    now.saturating_sub(self.budget.origin()),
                    f.port,
                    TraceKind::Sent,
                );
            }
            self.pending.push(f);
        }
    }

    /// `sendmmsg` the pending batch on the uplink.
    fn send_pending(&mut self) {
        while !self.pending.is_empty() {
            let mut batch = [(0u32, 0u32); BATCH];
            for (b, f) in batch.iter_mut().zip(&self.pending) {
                *b = (f.slot, f.len);
            }
            let n = self.pending.len();
            match self.uplink.send(&self.pool, &batch[..n]) {
                Ok(sent) => {
                    if let Some(l) = &mut self.latency {
                        let t = sys::clock::realtime_ns();
                        for f in &self.pending[..sent] {
                            l.sent(f.slot, t);
                        }
                    }
                    for f in self.pending.drain(..sent) {
                        let s = &mut self.guests[f.port as usize].stats;
                        s.queued -= 1;
                        s.forwarded += 1;
                        s.forwarded_bytes += f.len as u64;
                        self.pool.release(f.slot);
                    }
                    if sent < n {
                        return;
                    }
                }
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.raw_os_error() == Some(libc::ENOBUFS) =>
                {
                    return; // busy: the next turn retries
                }
                Err(_) => {
                    // Drop the first frame so the loop makes progress.
                    let f = self.pending.remove(0);
                    let s = &mut self.guests[f.port as usize].stats;
                    s.queued -= 1;
                    s.dropped_send_error += 1;
                    self.up.send_errors += 1;
                    self.pool.release(f.slot);
                }
            }
        }
    }

    /// Read one batch from the uplink and deliver it by destination MAC. Returns frames read.
    fn recv_uplink(&mut self) -> usize {
        let mut events = [Rx::Oversize { len: 0 }; BATCH];
        let (read, k) = self.uplink.recv(&mut self.pool, &mut events);
        let read_at = self.latency.is_some().then(sys::clock::realtime_ns);
        for (e, rx) in events[..k].iter().enumerate() {
            self.up.received += 1;
            let (slot, len) = match *rx {
                Rx::Oversize { .. } => {
                    self.up.dropped_oversize += 1;
                    continue;
                }
                Rx::Frame { slot, len } if len < ETH_HEADER => {
                    self.up.dropped_malformed += 1;
                    self.pool.release(slot);
                    continue;
                }
                Rx::Frame { slot, len } => (slot, len),
            };
            let mut dst = [0u8; 6];
            dst.copy_from_slice(&self.pool.data(slot, len)[..6]);
            let group = dst[0] & 1 == 1;
            match (!group).then(|| self.macs.lookup(&dst)).flatten() {
                Some(gi) => {
                    let ok = self.deliver(gi as usize, slot, len);
                    if ok {
                        self.up.delivered_unicast += 1;
                    } else {
                        self.up.dropped_no_port += 1;
                    }
                }
                None => {
                    let mut any = false;
                    for gi in 0..self.guests.len() {
                        any |= self.deliver(gi, slot, len);
                    }
                    if any {
                        self.up.flooded += 1;
                    } else {
                        self.up.dropped_no_port += 1;
                    }
                }
            }
            if let (Some(l), Some(read)) = (&mut self.latency, read_at) {
                l.uplink_frame(self.uplink.rx_stamp(e), read, sys::clock::realtime_ns());
            }
            self.pool.release(slot);
        }
        read
    }

    fn deliver(&mut self, gi: usize, slot: u32, len: u32) -> bool {
        let g = &mut self.guests[gi];
        let Some(p) = &g.port else {
            return false;
        };
        match p.send(&self.pool, &[(slot, len)]) {
            Ok(1) => {
                g.stats.delivered += 1;
                true
            }
            _ => {
                g.stats.deliver_failed += 1;
                false
            }
        }
    }

    /// Close ports whose interface is gone (or was replaced: another index). `Err` if the
    /// uplink is gone.
    fn check_liveness(&mut self) -> Result<(), SwitchError> {
        if sys::ifindex(&self.up.dev) != Some(self.uplink_ifindex) {
            return Err(SwitchError::UplinkGone(self.up.dev.clone()));
        }
        let mut removed_any = false;
        for g in &mut self.guests {
            if g.port.is_some() && sys::ifindex(&g.stats.dev) != Some(g.ifindex) {
                if let Some(p) = g.port.take() {
                    let _ = self.epoll.remove(p.raw_fd());
                    g.stats.kernel_drops += p.take_kernel_drops();
                }
                g.stats.removed = true;
                removed_any = true;
                tracing::warn!(
                    "port {} (ifindex {}) disappeared: closed, its {} queued frames \
                     are dropped as `removed`; still serving the other ports",
                    g.stats.dev,
                    g.ifindex,
                    g.stats.queued
                );
            }
        }
        if removed_any {
            self.macs
                .forget_if(|gi| self.guests[gi as usize].port.is_none());
            // Frames of removed ports waiting in the send batch go too.
            let guests = &mut self.guests;
            let pool = &mut self.pool;
            self.pending.retain(|f| {
                let g = &mut guests[f.port as usize];
                if g.port.is_some() {
                    return true;
                }
                g.stats.queued -= 1;
                g.stats.dropped_removed += 1;
                pool.release(f.slot);
                false
            });
        }
        Ok(())
    }

    /// Forward until `stop()` (or `duration`); snapshots to `outlet` every stats interval.
    /// Returns the final counters after the queues were emptied (held frames counted as
    /// `dropped_shutdown`), so every identity closes with `queued == 0`.
    pub fn run(
        &mut self,
        stop: &dyn Fn() -> bool,
        duration: Option<Nanos>,
        outlet: Option<&StatsOutlet>,
    ) -> Result<SwitchStats, SwitchError> {
        let t0 = sys::now_ns();
        let end = duration.map(|d| t0 + d);
        let interval = outlet.and(self.stats_interval);
        let mut next_stats = interval.map(|i| t0 + i);
        let mut next_liveness = t0 + LIVENESS_EVERY;
        self.t0 = t0;
        self.budget.start(t0, self.cfg.budget_origin.unwrap_or(t0));
        if let Some(t) = &mut self.trace {
            t.set_origin(self.budget.origin());
        }
        if let Some(l) = &mut self.latency {
            l.start(sys::clock::realtime_ns());
        }
        let result = self.run_loop(
            stop,
            end,
            interval,
            &mut next_stats,
            &mut next_liveness,
            outlet,
            t0,
        );
        self.shutdown();
        let last = self.stats(t0);
        if let Some(m) = &self.metrics {
            m.publish(&last);
        }
        // Commands that arrived meanwhile are answered, not left to time out.
        while let Some(env) = self.control.as_ref().and_then(Inbox::take) {
            env.answer(Answer::Refused("the switch is stopping".into()));
        }
        result.map(|()| last)
    }

    #[allow(clippy::too_many_arguments)]
    fn run_loop(
        &mut self,
        stop: &dyn Fn() -> bool,
        end: Option<Nanos>,
        interval: Option<Nanos>,
        next_stats: &mut Option<Nanos>,
        next_liveness: &mut Nanos,
        outlet: Option<&StatsOutlet>,
        t0: Nanos,
    ) -> Result<(), SwitchError> {
        let mut next_publish = t0;
        while !stop() {
            let now = sys::now_ns();
            if end.is_some_and(|e| now >= e) {
                break;
            }
            if let Some(l) = &mut self.latency {
                l.turn(sys::clock::realtime_ns(), self.slept);
            }
            if self.control.is_some() {
                self.serve_control();
                if self.rebuild_pending && self.may_rebuild() {
                    self.rebuild();
                }
            }
            let mut read = 0;
            let n_guests = self.guests.len();
            for gi in 0..n_guests {
                if self.ready[gi] {
                    read += self.recv_guest(gi, now);
                }
            }
            self.dequeue_budgeted(now);
            let sending = !self.pending.is_empty();
            self.send_pending();
            // Up to a few return batches per turn, so a flood from the uplink cannot starve
            // the guests' direction. Also read after sending: the reply to what was just sent
            // often arrives during the send (the peer answers in the same softirq), and is
            // then delivered in this turn instead of after another wait.
            for _ in 0..4 {
                if !(self.ready[n_guests] || sending) {
                    break;
                }
                let n = self.recv_uplink();
                read += n;
                if n < BATCH {
                    break;
                }
            }
            if read > 0 {
                self.spin_until = now.saturating_add(self.busy_poll);
            }
            if now >= *next_liveness {
                self.check_liveness()?;
                *next_liveness = now + LIVENESS_EVERY;
            }
            if let (Some(ns), Some(iv), Some(o)) = (*next_stats, interval, outlet) {
                if now >= ns {
                    let s = self.stats(t0);
                    o.offer(s);
                    *next_stats = Some(ns + iv);
                }
            }
            if self.metrics.is_some() && now >= next_publish {
                let s = self.stats(t0);
                if let Some(m) = &self.metrics {
                    m.publish(&s);
                }
                next_publish = now + PUBLISH_EVERY;
            }
            // Sleep until input, the next budget credit (if something waits) or a timer.
            let now = sys::now_ns();
            let backlog = self.qdisc.stats().queued_packets > 0 || !self.pending.is_empty();
            let mut wake = now + MAX_SLEEP;
            if backlog {
                wake = wake.min(
                    self.budget
                        .next_credit()
                        .max(now + if self.pending.is_empty() { 0 } else { 20_000 }),
                );
            }
            if let Some(t) = self.qdisc.next_timer(now) {
                wake = wake.min(t);
            }
            let publish = self.metrics.is_some().then_some(next_publish);
            for t in [*next_stats, end, Some(*next_liveness), publish]
                .into_iter()
                .flatten()
            {
                wake = wake.min(t);
            }
            let timeout = wake.saturating_sub(now);
            self.slept = false;
            if timeout == 0 {
                self.ready.fill(true);
                continue;
            }
            let n = if now < self.spin_until {
                // Inside the polling window: look without sleeping until input, the window's
                // end or the next timer.
                let until = self.spin_until.min(wake);
                loop {
                    let n = self
                        .epoll
                        .wait(&mut self.events, 0)
                        .map_err(epoll("epoll_pwait2"))?;
                    if n > 0 || sys::now_ns() >= until || stop() {
                        break n;
                    }
                    std::hint::spin_loop();
                }
            } else {
                self.wakeups += 1;
                self.slept = true;
                self.epoll
                    .wait(&mut self.events, timeout)
                    .map_err(epoll("epoll_pwait2"))?
            };
            self.ready.fill(false);
            for e in &self.events[..n] {
                if let Some(r) = self.ready.get_mut(e.u64 as usize) {
                    *r = true;
                }
            }
        }
        Ok(())
    }

    /// Empty the discipline and the send batch; what they held is `dropped_shutdown`.
    fn shutdown(&mut self) {
        let held: Vec<Frame> = self.pending.drain(..).chain(self.qdisc.reset()).collect();
        for f in held {
            let s = &mut self.guests[f.port as usize].stats;
            s.queued -= 1;
            s.dropped_shutdown += 1;
            self.pool.release(f.slot);
        }
    }

    pub fn port_of_class(&self, class: usize) -> usize {
        self.port_of_class[class]
    }
}

/// A switch running on its own thread inside a named network namespace; `stop()` returns
/// its final counters.
pub type SwitchHandle = netsched_testbed::NetnsThread<SwitchStats>;

/// Start a switch on a new thread that has entered network namespace `netns` (an `ip netns`
/// name); returns once every port is open (or with the error).
pub fn spawn_in_netns(netns: &str, cfg: SwitchConfig) -> Result<SwitchHandle, SwitchError> {
    SwitchHandle::spawn(
        "switch",
        format!("vswitch-{netns}"),
        netns,
        move || Ok(Switch::open(&cfg, None)?),
        |mut sw, stop| Ok(sw.run(stop, None, None)?),
    )
    .map_err(|e| SwitchError::Thread(format!("{e:#}")))
}

/// A switch with a trace ([`crate::trace`]) on its own thread; `stop()` returns its final
/// counters and the trace.
pub type TracedSwitchHandle = netsched_testbed::NetnsThread<(SwitchStats, Trace)>;

/// [`spawn_in_netns`] with a trace of at most `trace_capacity` events.
pub fn spawn_in_netns_traced(
    netns: &str,
    cfg: SwitchConfig,
    trace_capacity: usize,
) -> Result<TracedSwitchHandle, SwitchError> {
    TracedSwitchHandle::spawn(
        "switch",
        format!("vswitch-{netns}"),
        netns,
        move || {
            let mut sw = Switch::open(&cfg, None)?;
            sw.enable_trace(trace_capacity);
            Ok(sw)
        },
        |mut sw, stop| {
            let stats = sw.run(stop, None, None)?;
            Ok((stats, sw.take_trace().unwrap_or_default()))
        },
    )
    .map_err(|e| SwitchError::Thread(format!("{e:#}")))
}

/// Largest frame the switch keeps (one pool slot).
pub const MAX_FRAME: usize = SLOT;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_that_never_reads_cannot_block_the_packet_thread() {
        let (outlet, rx) = StatsOutlet::new();
        for _ in 0..STATS_QUEUE + 5 {
            outlet.offer(SwitchStats::default());
        }
        assert_eq!(outlet.dropped.load(Ordering::Relaxed), 5);
        assert_eq!(rx.try_iter().count(), STATS_QUEUE);
    }
}

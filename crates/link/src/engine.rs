//! `netsched link`: a userspace link engine — the testbed's link emulator (there is no netem
//! on this kernel) and proof that the core disciplines behave on real traffic.
//!
//! It forwards Ethernet frames between two interfaces, each a port of the configured backend
//! ([`AnyPort`]: an mmap'ed `TPACKET_V2` ring or `recvmmsg`/`sendmmsg`), through two
//! [`LinkEmulator`]s (a→b and b→a: discipline, rate, delay line). This file is the event loop;
//! the layers below it, read top-down:
//! - [`crate::emulation`]: one direction of the link (no sockets, time is a parameter);
//! - [`netsched_sys::any_port`]: a port of either backend (ring or socket, batched rx/tx,
//!   offloads);
//! - [`netsched_sys`]: the system calls, each behind a safe function.
//!
//! The loop (one thread, no per-packet allocation): read up to a few batches from each port,
//! let each direction move frames from its discipline onto its delay line while its link is
//! free, `sendmmsg` what is due, then sleep in `ppoll` on both sockets until input or the next
//! departure (timer slack 1 µs: the default 50 µs would be added latency; `--busy-poll` never
//! sleeps; at least every 100 ms to notice `stop`). After a turn that read a frame the loop
//! looks again without sleeping for up to `spin` (bounded by [`MAX_SPIN`]): a burst's next
//! frame is then picked up without a wake-up. Wake-ups (returns from `ppoll`) are counted, per
//! frame received in the stats. Time is `CLOCK_MONOTONIC` in nanoseconds,
//! handed to the disciplines as `now`. When a direction's pool is empty its socket is not read
//! and the kernel drops, counted from `PACKET_STATISTICS`.
//!
//! Counters leave the packet thread through a bounded hand-off ([`StatsOutlet`]): the loop
//! never blocks on a slow reader (a stdout pipe nobody reads); a snapshot that does not fit is
//! dropped and counted. With `--metrics` the loop also publishes a copy every
//! [`METRICS_INTERVAL`] into a slot it fills without ever waiting
//! ([`netsched_metrics::Latest`]); scrapes read the copy, never the loop's state.

use crate::emulation::LinkEmulator;
use crate::engine_error::{EngineConfigError, EngineError};
use netsched_core::{Nanos, MS};
use netsched_sys as sys;
use netsched_sys::port::{FramePort, Rx, BATCH};
use netsched_sys::{AnyPort, PortBackend, PortOptions, XdpStats};
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;

// The names `bench.rs`, `experiment.rs` and the tests use, from their layers.
pub use crate::emulation::{DirConfig, DirStats};
pub use crate::qdisc_spec::{parse_qdisc, ClassMode, QdiscSpec};

/// Shortest `--stats` interval: 100 ms (10 lines/s). Shorter intervals flood the reader (0 s
/// printed 458 k lines in 2 s) and cost the packet thread a snapshot per loop turn.
pub const MIN_STATS_INTERVAL: Nanos = 100 * MS;
/// Snapshots waiting for the printer; one more is dropped and counted.
pub const STATS_QUEUE: usize = 16;
/// Batches read per port per loop turn before output gets its turn (so a flood on input
/// cannot starve output).
const RX_ROUNDS: usize = 4;
/// How often [`Engine::run`] publishes its counters for `/metrics` ([`crate::metrics`]).
pub const METRICS_INTERVAL: Nanos = 100 * MS;
/// The loop wakes at least this often to notice `stop`.
const MAX_SLEEP: Nanos = 100 * MS;
/// Longest `spin` (looking for input without sleeping after a frame): 10 ms.
pub const MAX_SPIN: Nanos = 10 * MS;
/// The CLI's default `--busy-poll` window.
pub const DEFAULT_SPIN: Nanos = 50_000;

#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub dev_a: String,
    pub dev_b: String,
    pub ab: DirConfig,
    pub ba: DirConfig,
    /// Frame slots per direction (2 KiB each).
    pub pool: usize,
    /// Most frames in flight on one direction's delay line.
    pub delay_line: usize,
    /// Counters every this often (≥ [`MIN_STATS_INTERVAL`]) to the [`StatsOutlet`], if any.
    pub stats_interval: Option<Nanos>,
    /// Never sleep: poll the sockets in a loop (one core at 100 %, lowest latency).
    pub busy_poll: bool,
    /// After a turn that received a frame, keep looking without sleeping this long
    /// (≤ [`MAX_SPIN`]).
    pub spin: Nanos,
    /// Port backend and ring sizes.
    pub port: PortOptions,
}

impl EngineConfig {
    /// Bounds of the sizes: pool 64..=2^20 slots, delay line 1..=2^20 frames, stats interval
    /// ≥ [`MIN_STATS_INTERVAL`].
    pub fn check(&self) -> Result<(), EngineConfigError> {
        if self.dev_a == self.dev_b {
            return Err(EngineConfigError::SameDevices(self.dev_a.clone()));
        }
        if self.pool < 64 || self.pool > 1 << 20 {
            return Err(EngineConfigError::Pool {
                value: self.pool,
                min: 64,
                max: 1 << 20,
            });
        }
        if self.delay_line < 1 || self.delay_line > 1 << 20 {
            return Err(EngineConfigError::DelayLine {
                value: self.delay_line,
                max: 1 << 20,
            });
        }
        if self.port.backend != PortBackend::Packet {
            self.port
                .ring
                .check("--ring-frames", "--tx-ring-frames")
                .map_err(EngineConfigError::Ring)?;
        }
        if self.spin > MAX_SPIN {
            return Err(EngineConfigError::Spin {
                value: self.spin,
                max: MAX_SPIN,
            });
        }
        if let Some(i) = self.stats_interval {
            if i < MIN_STATS_INTERVAL {
                return Err(EngineConfigError::StatsInterval {
                    value: i,
                    min: MIN_STATS_INTERVAL,
                });
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct EngineStats {
    /// Time since the engine started, nanoseconds (was `t`, seconds as a float).
    pub elapsed_ns: u64,
    /// CPU time the engine thread used (`CLOCK_THREAD_CPUTIME_ID`), nanoseconds (was `cpu_s`,
    /// seconds as a float).
    pub cpu_ns: u64,
    /// Snapshots the printer could not take in time (dropped, never blocking the loop).
    pub stats_dropped: u64,
    /// The port backend in use (`xdp`, `tpacket` or `packet`).
    pub port: PortBackend,
    /// Bytes of ring memory both ports mapped (0 for `packet`; UMEM and rings for `xdp`).
    pub ring_bytes: u64,
    /// The `xdp` backend's AF_XDP drop and error counters (`XDP_STATISTICS`) of port a and
    /// port b since open (zeros on other backends). Their receive losses are also in each
    /// direction's `kernel_socket_drops`.
    pub xdp_drops: [XdpStats; 2],
    /// Times the loop woke from `ppoll` (input, timer or stop check).
    pub wakeups: u64,
    /// `wakeups` per frame received (both directions); 0 before the first frame.
    pub wakeups_per_frame: f64,
    pub ab: DirStats,
    pub ba: DirStats,
}

/// The packet thread's end of the bounded counter hand-off: `try_send`, never blocks.
pub struct StatsOutlet {
    tx: SyncSender<EngineStats>,
    dropped: Arc<AtomicU64>,
}

impl StatsOutlet {
    /// An outlet and the printer's receiving end, holding at most [`STATS_QUEUE`] snapshots.
    pub fn new() -> (Self, Receiver<EngineStats>, Arc<AtomicU64>) {
        let (tx, rx) = sync_channel(STATS_QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        (
            Self {
                tx,
                dropped: Arc::clone(&dropped),
            },
            rx,
            dropped,
        )
    }

    fn offer(&self, mut s: EngineStats) {
        s.stats_dropped = self.dropped.load(Ordering::Relaxed);
        match self.tx.try_send(s) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The engine: two ports, two directions.
pub struct Engine {
    a: AnyPort,
    b: AnyPort,
    /// Fallback reasons of `auto` (printed by the CLI).
    fallbacks: Vec<String>,
    wakeups: u64,
    spin: Nanos,
    ab: LinkEmulator,
    ba: LinkEmulator,
    stats_interval: Option<Nanos>,
    busy_poll: bool,
    /// Where [`Engine::run`] publishes its counters for `/metrics`.
    metrics: Option<Arc<netsched_metrics::Latest<EngineStats>>>,
}

impl Engine {
    /// Open both ports (in the current thread's network namespace).
    pub fn open(cfg: &EngineConfig) -> Result<Self, EngineError> {
        cfg.check()?;
        let port = |flag: &'static str, dev: &str| {
            AnyPort::open(dev, &cfg.port).map_err(|source| EngineError::Port { flag, source })
        };
        let (a, fa) = port("--dev-a", &cfg.dev_a)?;
        let (b, fb) = port("--dev-b", &cfg.dev_b)?;
        let ab = LinkEmulator::new(&cfg.ab, cfg.pool, cfg.delay_line)?;
        let ba = LinkEmulator::new(&cfg.ba, cfg.pool, cfg.delay_line)?;
        // Timer slack 1 µs: ppoll timeouts would otherwise be stretched by up to 50 µs.
        let _ = sys::set_timer_slack(1000);
        Ok(Self {
            a,
            b,
            fallbacks: fa.into_iter().chain(fb).collect(),
            wakeups: 0,
            spin: cfg.spin,
            ab,
            ba,
            stats_interval: cfg.stats_interval,
            busy_poll: cfg.busy_poll,
            metrics: None,
        })
    }

    /// Make [`Engine::run`] publish its counters into `latest` every
    /// [`METRICS_INTERVAL`] (and once at start and at stop). Publishes the
    /// counters as they are now at once, so a scrape before `run` sees every family.
    pub fn publish_metrics_to(&mut self, latest: Arc<netsched_metrics::Latest<EngineStats>>) {
        self.metrics = Some(latest);
        self.publish(sys::now_ns());
    }

    /// The two ports (for offload warnings, backend and memory).
    pub fn ports(&self) -> [&AnyPort; 2] {
        [&self.a, &self.b]
    }

    /// Why `auto` fell back to `packet` on a port, if it did.
    pub fn fallbacks(&self) -> &[String] {
        &self.fallbacks
    }

    fn stats(&mut self, t0: Nanos) -> EngineStats {
        self.ab.add_kernel_drops(self.a.take_kernel_drops());
        self.ba.add_kernel_drops(self.b.take_kernel_drops());
        let (ab, ba) = (self.ab.stats(), self.ba.stats());
        let rx = ab.rx_frames + ba.rx_frames;
        EngineStats {
            elapsed_ns: sys::now_ns().saturating_sub(t0),
            cpu_ns: sys::thread_cpu_ns(),
            stats_dropped: 0,
            port: self.a.backend(),
            ring_bytes: (self.a.ring_bytes() + self.b.ring_bytes()) as u64,
            xdp_drops: [self.a.xdp_stats(), self.b.xdp_stats()],
            wakeups: self.wakeups,
            wakeups_per_frame: if rx == 0 {
                0.0
            } else {
                self.wakeups as f64 / rx as f64
            },
            ab,
            ba,
        }
    }

    /// Send what is due on `out` from `link`, in batches.
    fn send_due(link: &mut LinkEmulator, out: &AnyPort, now: Nanos) {
        let mut due = [(0u32, 0u32); BATCH];
        loop {
            let n = link.due(now, &mut due);
            if n == 0 {
                return;
            }
            match out.send(&link.pool, &due[..n]) {
                Ok(sent) => {
                    link.sent(sent);
                    if sent < n {
                        return;
                    }
                }
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.raw_os_error() == Some(libc::ENOBUFS) =>
                {
                    // Device busy: retry on the next loop turn.
                    return;
                }
                // Any other error drops the first frame, so the loop makes progress.
                Err(_) => link.send_failed(),
            }
        }
    }

    /// Forward until `stop()` says so (or `duration` passed); counters go to `outlet` every
    /// `stats_interval`. Returns the final counters, after the queues were reset (held frames
    /// counted).
    pub fn run(
        &mut self,
        stop: &dyn Fn() -> bool,
        duration: Option<Nanos>,
        outlet: Option<&StatsOutlet>,
    ) -> Result<EngineStats, EngineError> {
        let t0 = sys::now_ns();
        let end = duration.map(|d| t0 + d);
        let interval = outlet.and(self.stats_interval);
        let mut next_stats = interval.map(|i| t0 + i);
        let mut next_publish = self.metrics.as_ref().map(|_| t0);
        // Drain stale kernel counters.
        let _ = (self.a.take_kernel_drops(), self.b.take_kernel_drops());
        let mut spin_until: Nanos = 0;
        while !stop() {
            let now = sys::now_ns();
            if end.is_some_and(|e| now >= e) {
                break;
            }
            // Input first (up to RX_ROUNDS batches, so output is never starved by a flood).
            let mut ra = recv_into(&self.a, &mut self.ab, now);
            let mut rb = recv_into(&self.b, &mut self.ba, now);
            let mut rounds = 1;
            while rounds < RX_ROUNDS && (ra == BATCH || rb == BATCH) {
                ra = recv_into(&self.a, &mut self.ab, now);
                rb = recv_into(&self.b, &mut self.ba, now);
                rounds += 1;
            }
            if ra + rb > 0 {
                spin_until = now.saturating_add(self.spin);
            }
            self.ab.transmit(now);
            Self::send_due(&mut self.ab, &self.b, now);
            self.ba.transmit(now);
            Self::send_due(&mut self.ba, &self.a, now);
            if let (Some(ns), Some(iv), Some(o)) = (next_stats, interval, outlet) {
                if now >= ns {
                    let s = self.stats(t0);
                    o.offer(s);
                    next_stats = Some(ns + iv);
                }
            }
            if next_publish.is_some_and(|p| now >= p) {
                self.publish(t0);
                next_publish = Some(now + METRICS_INTERVAL);
            }
            // Sleep until input or the next departure.
            let now = sys::now_ns();
            let wake = [
                self.ab.next_wake(now),
                self.ba.next_wake(now),
                next_stats,
                next_publish,
                end,
            ]
            .into_iter()
            .flatten()
            .min()
            .map_or(now + MAX_SLEEP, |w| w.min(now + MAX_SLEEP));
            let timeout = wake.saturating_sub(now);
            if timeout == 0 || self.busy_poll || now < spin_until {
                continue;
            }
            self.wakeups += 1;
            sys::poll_in(
                &[
                    (self.a.raw_fd(), self.ab.pool.free_slots() > 0),
                    (self.b.raw_fd(), self.ba.pool.free_slots() > 0),
                ],
                timeout,
            )
            .map_err(EngineError::Poll)?;
        }
        self.ab.shutdown();
        self.ba.shutdown();
        self.publish(t0);
        Ok(self.stats(t0))
    }

    /// Hand a copy of the counters to the metrics slot, if any (never waits).
    fn publish(&mut self, t0: Nanos) {
        if self.metrics.is_some() {
            let s = self.stats(t0);
            if let Some(m) = &self.metrics {
                m.publish(s);
            }
        }
    }
}

/// Read one batch from `port` into `link`. Returns frames read.
fn recv_into(port: &AnyPort, link: &mut LinkEmulator, now: Nanos) -> usize {
    let mut events = [Rx::Oversize { len: 0 }; BATCH];
    let (read, k) = port.recv(&mut link.pool, &mut events);
    for rx in &events[..k] {
        link.arrive(*rx, now);
    }
    read
}

/// An engine running on its own thread inside a named network namespace (`ip netns`);
/// `stop()` returns its final counters.
pub type EngineHandle = netsched_testbed::NetnsThread<EngineStats>;

/// Start an engine on a new thread that has entered network namespace `netns` (an `ip netns`
/// name); returns once both ports are open (or with their error).
pub fn spawn_in_netns(netns: &str, cfg: EngineConfig) -> Result<EngineHandle, EngineError> {
    // The testbed's thread speaks its own error type; the engine's errors go through it as
    // text, and its error comes back as text.
    EngineHandle::spawn(
        "link engine",
        format!("link-{netns}"),
        netns,
        move || Ok(Engine::open(&cfg)?),
        |mut engine, stop| Ok(engine.run(stop, None, None)?),
    )
    .map_err(|e| EngineError::Thread(format!("{e:#}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stats_line_names_every_number_with_its_unit() {
        let mut s = EngineStats {
            elapsed_ns: 1_500_000_000,
            wakeups_per_frame: 0.25,
            ..EngineStats::default()
        };
        s.ab.drops.insert("tail".into(), 2);
        let v = serde_json::to_value(&s).unwrap();
        let bad = netsched_util::json_units::violations(&v);
        assert!(bad.is_empty(), "{bad:?}\n{v}");
    }

    #[test]
    fn a_reader_that_never_reads_cannot_block_the_packet_thread() {
        let (outlet, rx, dropped) = StatsOutlet::new();
        // Nobody reads `rx`: the first STATS_QUEUE snapshots wait, the rest are dropped and
        // counted; `offer` returns every time (this test would hang otherwise).
        for _ in 0..STATS_QUEUE + 40 {
            outlet.offer(EngineStats::default());
        }
        assert_eq!(dropped.load(Ordering::Relaxed), 40);
        // What was queued carries the drop count at its time.
        let got: Vec<u64> = rx.try_iter().map(|s| s.stats_dropped).collect();
        assert_eq!(got.len(), STATS_QUEUE);
        assert!(got.iter().all(|&d| d == 0));
        outlet.offer(EngineStats::default());
        assert_eq!(rx.try_recv().unwrap().stats_dropped, 40);
    }
}

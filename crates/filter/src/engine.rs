//! `netsched filter`'s packet thread: receive on one interface, hand frames to the
//! [`Pipeline`] (dispatcher + workers), send what it releases on the other interface, in flow
//! order, and account for every frame.
//!
//! One thread does receive, dispatch and transmit (the dispatcher); workers only compute.
//! Frames stay in their receive buffer slot (a `netsched_sys::FramePool`) until they are
//! sent or dropped, so the pool bounds everything inside the filter; workers read them there
//! (the slot is lent to them, not copied). Control requests are taken with `try_recv` between batches (never waited for) and
//! a rule swap is an `Arc` exchange: the tables were built by the control thread.
//!
//! Stop (flag, duration): no more receiving; what is inside drains for up to [`DRAIN`], the
//! reorder window is flushed, and anything still inside is counted as dropped (`shutdown`).
//!
//! Progress: each loop iteration and drain step bumps the heartbeat of a
//! [`crate::watchdog::Health`]; the wait for traffic is marked idle. The daemon's main thread
//! watches it ([`crate::watchdog`]).
//!
//! Cost per frame: the pipeline's work and one slot of a batched send; no copy.

use crate::control::{Answer, Command, Inbox};
use crate::pipeline::{DispatchMode, Pipeline, PipelineConfig, Released};
use crate::stats::{FilterStats, Totals};
use crate::verdict::{DropReason, Verdict};
use crate::watchdog::Health;
use crate::work::Tables;
use netsched_sys::port::{FramePool, FramePort, Rx, BATCH};
use netsched_sys::{AnyPort, PortOptions};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest wait for packets inside to finish when stopping.
pub const DRAIN: Duration = Duration::from_millis(500);
/// Most buffer slots (frames inside the filter).
pub const MAX_POOL: usize = 1 << 16;
/// Waiting tasks above which the dispatcher stops receiving until workers catch up.
const WAITING_LIMIT_PER_WORKER: usize = 256;

/// Where the filter sits and how it works.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub input: String,
    /// `None`: accepted frames are consumed (counted as `no_output` drops).
    pub output: Option<String>,
    pub pool_slots: usize,
    /// Port backend and ring sizes of both interfaces.
    pub port: PortOptions,
    pub pipeline: PipelineConfig,
}

/// Why the engine could not start.
#[derive(Debug)]
pub enum EngineError {
    Open { dev: String, error: std::io::Error },
    Pool(usize),
    Pipeline(crate::pipeline::PipelineError),
}

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EngineError::Open { dev, error } => write!(f, "opening interface {dev}: {error}"),
            EngineError::Pool(n) => write!(f, "--pool {n}: between {BATCH} and {MAX_POOL}"),
            EngineError::Pipeline(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for EngineError {}

/// The open filter.
pub struct Engine {
    rx: AnyPort,
    tx: Option<AnyPort>,
    pool: FramePool,
    pipeline: Pipeline,
    totals: Totals,
    to_send: Vec<(u32, u32)>,
    released: Vec<Released>,
    control: Option<Inbox>,
    metrics: Option<Arc<netsched_metrics::Latest<FilterStats>>>,
    start: Instant,
    workers: usize,
    health: Arc<Health>,
    /// Test hook ([`Engine::stall_after`]): when the packet thread stops making progress.
    stall_at: Option<Instant>,
}

/// Open `dev` on the configured backend; under `auto` a refused backend falls back to the next
/// (`xdp`, `tpacket`, `packet`) and the reasons are printed.
fn open(dev: &str, opts: &PortOptions) -> Result<AnyPort, EngineError> {
    let (port, fallback) = AnyPort::open(dev, opts).map_err(|error| EngineError::Open {
        dev: dev.into(),
        error,
    })?;
    if let Some(reason) = fallback {
        tracing::warn!("{reason}");
    }
    tracing::info!(
        "{dev}: port backend {} (ring {} KiB)",
        port.backend(),
        port.ring_bytes() / 1024
    );
    Ok(port)
}

impl Engine {
    /// Open the ports (in the calling thread's namespace) and start the workers.
    pub fn open(cfg: &EngineConfig, tables: Arc<Tables>) -> Result<Self, EngineError> {
        if !(BATCH..=MAX_POOL).contains(&cfg.pool_slots) {
            return Err(EngineError::Pool(cfg.pool_slots));
        }
        let rx = open(&cfg.input, &cfg.port)?;
        let tx = cfg
            .output
            .as_deref()
            .map(|dev| open(dev, &cfg.port))
            .transpose()?;
        let pool = FramePool::new(cfg.pool_slots);
        let pipeline =
            Pipeline::start(cfg.pipeline.clone(), tables, &pool).map_err(EngineError::Pipeline)?;
        let totals = Totals {
            port: rx.backend(),
            ring_bytes: (rx.ring_bytes() + tx.as_ref().map_or(0, |t| t.ring_bytes())) as u64,
            ..Totals::default()
        };
        Ok(Self {
            rx,
            tx,
            pool,
            pipeline,
            totals,
            to_send: Vec::with_capacity(cfg.pool_slots),
            released: Vec::with_capacity(BATCH),
            control: None,
            metrics: None,
            start: Instant::now(),
            workers: cfg.pipeline.workers,
            health: Arc::new(Health::default()),
            stall_at: None,
        })
    }

    /// The ports, for the offload warning.
    pub fn ports(&self) -> Vec<&dyn FramePort> {
        let mut v: Vec<&dyn FramePort> = vec![&self.rx];
        if let Some(t) = &self.tx {
            v.push(t);
        }
        v
    }

    /// The input and output interface names (`""` without an output), as the metrics label
    /// them.
    pub fn devs(&self) -> [String; 2] {
        [
            self.rx.name().to_string(),
            self.tx
                .as_ref()
                .map_or(String::new(), |t| t.name().to_string()),
        ]
    }

    /// The AF_XDP counters of both ports (zeros off `xdp`).
    fn xdp_drops(&self) -> [netsched_sys::XdpStats; 2] {
        [
            self.rx.xdp_stats(),
            self.tx.as_ref().map(|t| t.xdp_stats()).unwrap_or_default(),
        ]
    }

    pub fn attach_control(&mut self, inbox: Inbox) {
        self.control = Some(inbox);
    }

    pub fn attach_metrics(&mut self, latest: Arc<netsched_metrics::Latest<FilterStats>>) {
        self.metrics = Some(latest);
    }

    /// The packet thread's heartbeat, for a [`crate::watchdog::Watchdog`].
    pub fn health(&self) -> Arc<Health> {
        self.health.clone()
    }

    /// Test hook (the hidden `--fault-stall-after`): `after` the engine started, the packet
    /// thread stops making progress for good (it sleeps in a loop and never beats again), as a
    /// packet thread caught in an endless loop would. Only the watchdog's tests use it.
    pub fn stall_after(&mut self, after: Duration) {
        self.stall_at = Some(self.start + after);
    }

    /// The counters now (identity checked).
    pub fn stats(&mut self) -> FilterStats {
        let queued = (self.pipeline.in_flight() + self.to_send.len()) as u64;
        let ns = self.start.elapsed().as_nanos() as u64;
        self.totals.xdp_drops = self.xdp_drops();
        self.totals.packet_thread_stalls = self.health.stalls();
        self.totals.line(ns, queued, self.pipeline.stats())
    }

    fn receive(&mut self) -> bool {
        let waiting_limit = WAITING_LIMIT_PER_WORKER * self.workers;
        if self.pool.free_slots() == 0 || self.pipeline.waiting_tasks() > waiting_limit {
            return false;
        }
        let mut events = [Rx::Oversize { len: 0 }; BATCH];
        let (_, n) = self.rx.recv(&mut self.pool, &mut events);
        for ev in &events[..n] {
            self.totals.received += 1;
            match *ev {
                Rx::Frame { slot, len } => {
                    self.pipeline.submit(&mut self.pool, slot, len);
                }
                Rx::Oversize { .. } => self.totals.drop(DropReason::Oversize, 1),
            }
        }
        n > 0
    }

    fn settle(&mut self) {
        for r in self.released.drain(..) {
            match r.verdict {
                Verdict::Forward { class, marked } => {
                    if let Some(c) = class {
                        *self.totals.forwarded_by_class.entry(c).or_default() += 1;
                    }
                    self.totals.signature_marked += marked as u64;
                    if self.tx.is_some() {
                        self.to_send.push((r.slot, r.len));
                        continue;
                    }
                    self.totals.drop(DropReason::NoOutput, 1);
                }
                Verdict::Drop(reason) => self.totals.drop(reason, 1),
            }
            self.pool.release(r.slot);
        }
    }

    fn transmit(&mut self) -> bool {
        let Some(tx) = &self.tx else {
            return false;
        };
        let mut sent_any = false;
        while !self.to_send.is_empty() {
            let batch = self.to_send.len().min(BATCH);
            match tx.send(&self.pool, &self.to_send[..batch]) {
                Ok(0) => {
                    self.totals.tx_retries += 1;
                    break;
                }
                Ok(n) => {
                    for (slot, _) in self.to_send.drain(..n) {
                        self.pool.release(slot);
                    }
                    self.totals.forwarded += n as u64;
                    sent_any = true;
                }
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.raw_os_error() == Some(libc::ENOBUFS) =>
                {
                    self.totals.tx_retries += 1;
                    break;
                }
                Err(_) => {
                    let (slot, _) = self.to_send.remove(0);
                    self.pool.release(slot);
                    self.totals.drop(DropReason::TxError, 1);
                }
            }
        }
        sent_any
    }

    fn control(&mut self) {
        let Some(inbox) = &self.control else {
            return;
        };
        let mut envelopes = Vec::new();
        while let Some(e) = inbox.take() {
            envelopes.push(e);
            if envelopes.len() >= crate::control::COMMAND_QUEUE {
                break;
            }
        }
        for env in envelopes {
            let answer = match &env.command {
                Command::Show => Answer::Stats(Box::new(self.stats())),
                Command::SwapTables(t) => {
                    let mut in_force = self.pipeline.tables().clone();
                    let answer = crate::control::swap_in(&mut in_force, t);
                    if let Answer::Done(_) = answer {
                        self.pipeline.set_tables(in_force);
                        self.totals.rule_swaps += 1;
                    }
                    answer
                }
                Command::SetDispatch(m) => {
                    self.pipeline.set_mode(*m);
                    Answer::Done(format!("dispatch {}", m.name()))
                }
                Command::EditRule(c) => match self.pipeline.edit_rules(c) {
                    Ok(e) => {
                        self.totals.rule_edits += 1;
                        Answer::Done(crate::rule_edit::describe(&e))
                    }
                    Err(e) => Answer::Refused(e),
                },
                Command::ShowRules { from, count } => {
                    Answer::Done(self.pipeline.tables().classifier.page(*from, *count))
                }
            };
            env.answer(answer);
        }
    }

    /// Run until `stop()` or `duration`; `on_stats` gets a line every `stats_every`.
    pub fn run(
        &mut self,
        stop: &dyn Fn() -> bool,
        duration: Option<Duration>,
        stats_every: Option<Duration>,
        on_stats: &mut dyn FnMut(&FilterStats),
    ) -> FilterStats {
        let mut next_stats = stats_every.map(|d| Instant::now() + d);
        let mut next_publish = Instant::now();
        while !stop() && duration.is_none_or(|d| self.start.elapsed() < d) {
            self.health.beat();
            if self.stall_at.is_some_and(|at| Instant::now() >= at) {
                loop {
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
            self.control();
            let got = self.receive();
            let done = self.pipeline.pump(&mut self.pool, &mut self.released);
            self.settle();
            let sent = self.transmit();
            self.totals.kernel_drops += self.rx.take_kernel_drops();
            let now = Instant::now();
            if let (Some(at), Some(every)) = (next_stats, stats_every) {
                if now >= at {
                    let s = self.stats();
                    on_stats(&s);
                    next_stats = Some(at + every);
                }
            }
            if self.metrics.is_some() && now >= next_publish {
                let s = self.stats();
                if let Some(m) = &self.metrics {
                    m.publish(s);
                }
                next_publish = now + Duration::from_millis(100);
            }
            if got || done || sent {
                continue;
            }
            if self.pipeline.in_flight() > 0 {
                self.pipeline.wait(
                    Duration::from_micros(200),
                    &mut self.pool,
                    &mut self.released,
                );
                self.settle();
            } else if self.to_send.is_empty() {
                self.health.set_idle(true);
                let _ = netsched_sys::epoll::poll_in(&[(self.rx.raw_fd(), true)], 10_000_000);
                self.health.set_idle(false);
            }
        }
        self.drain()
    }

    /// Finish what is inside (up to [`DRAIN`]), then stop the workers.
    fn drain(&mut self) -> FilterStats {
        let until = Instant::now() + DRAIN;
        while (self.pipeline.in_flight() > 0 || !self.to_send.is_empty()) && Instant::now() < until
        {
            self.health.beat();
            self.pipeline
                .wait(Duration::from_millis(1), &mut self.pool, &mut self.released);
            self.settle();
            self.transmit();
        }
        self.pipeline.flush_order(&mut self.released);
        self.settle();
        self.transmit();
        for (slot, _) in std::mem::take(&mut self.to_send) {
            self.pool.release(slot);
            self.totals.drop(DropReason::Shutdown, 1);
        }
        self.stats()
    }

    /// Stop the workers; anything still inside counts as dropped (`shutdown`). The final
    /// counters.
    pub fn finish(mut self) -> FilterStats {
        self.totals.kernel_drops += self.rx.take_kernel_drops();
        self.totals.xdp_drops = self.xdp_drops();
        self.totals.packet_thread_stalls = self.health.stalls();
        // Joining the workers is a wait, bounded by their queued tasks.
        self.health.set_idle(true);
        let Engine {
            pipeline,
            mut pool,
            mut totals,
            start,
            to_send,
            ..
        } = self;
        let mut p = pipeline.stats();
        for (slot, _) in pipeline.stop(&mut pool) {
            pool.release(slot);
            totals.drop(DropReason::Shutdown, 1);
        }
        p.in_flight = 0;
        p.waiting_tasks = 0;
        totals.line(start.elapsed().as_nanos() as u64, to_send.len() as u64, p)
    }

    /// Change the dispatch policy now.
    pub fn set_dispatch(&mut self, m: DispatchMode) {
        self.pipeline.set_mode(m);
    }
}

/// A filter running on its own thread in namespace `netns`; `stop()` returns its final
/// counters (tests and the lab use it).
pub type FilterHandle = netsched_testbed::NetnsThread<FilterStats>;

/// Open the filter inside `netns` and run it on its own thread (with a control inbox when
/// given) until the handle stops it.
pub fn spawn_in_netns(
    netns: &str,
    cfg: EngineConfig,
    tables: Arc<Tables>,
    control: Option<Inbox>,
) -> anyhow::Result<FilterHandle> {
    FilterHandle::spawn(
        "filter",
        format!("filter-{netns}"),
        netns,
        move || {
            let mut e = Engine::open(&cfg, tables)?;
            if let Some(c) = control {
                e.attach_control(c);
            }
            Ok(e)
        },
        |mut e, stop| {
            e.run(stop, None, None, &mut |_| {});
            Ok(e.finish())
        },
    )
}

//! The dispatcher's logic and the workers behind it, without any port: frames in, verdicts
//! out in per-flow order. The engine ([`crate::engine`]) feeds it from one interface and
//! sends what it releases on the other; tests feed it from memory.
//!
//! - **Cutting**: a frame becomes `ceil(len / block_size)` blocks (P1 §II's mpackets;
//!   `netsched_core::dispatch::packet_blocks`). In a block mode ([`DispatchMode::Block`]) each
//!   block is a task and core's policy (static RR, modified RR, FCFS, modified FCFS)
//!   names the worker, one block at a time, in stream order; in a flow mode
//!   ([`DispatchMode::FlowHash`], [`DispatchMode::WorkStealing`]) the whole packet is one task
//!   and `netsched_core::dispatch::FlowDispatch` names the worker from the flow's bucket.
//! - **Waiting**: tasks wait in one FIFO (the shared receive buffer of P1's centralised
//!   queue model). Three stalls are counted per policy: the policy named a busy worker (the
//!   block queues behind it: static RR), no worker was idle (`None`: FCFS and friends), and
//!   the named worker's queue was full (`--worker-queue`). A worker's own waits for a
//!   predecessor's hand-off are counted by the worker.
//! - **Order**: each packet gets its flow's next sequence number when it is submitted;
//!   `netsched_core::dispatch::FlowOrder` holds what finishes early (bounded window, timeout)
//!   and releases in order.
//!
//! Busy/idle for the policies: a worker is busy while it holds a task; it became idle when its
//! last task was reported done (the dispatcher's clock). Engines (for RR's "another engine"
//! and modified FCFS's per-engine SOP counts): worker `i` is on engine `i mod cpus`.
//!
//! - **Hand-off**: the frame stays in its pool slot and is lent to the worker
//!   (`netsched_sys::frame_pool`); each worker has a bounded single-producer/single-consumer
//!   ring of jobs and one of completions (`rtrb`), so nothing per packet takes a lock,
//!   allocates or touches a reference count. A rule swap travels through the same rings, in
//!   order with the packets, so every block of a packet is checked against the same tables.
//!
//! Cost per packet: O(blocks × workers) for the block policies' scans, O(1) for the flow
//! policies, O(1) for order when a flow's packets finish in order (always under `flow_hash`),
//! O(log held) when they do not. Memory: bounded by the caller's buffer pool (one in-flight
//! record and one hand-off state per slot) and `workers × (worker_queue + 4)` ring entries.

use crate::packet::{parse, Parsed};
use crate::rule_edit::{EditError, RuleChange, RuleEdit};
use crate::verdict::Verdict;
use crate::work::{self, Progress, Tables, WorkPolicy};
use crate::worker::{Done, Job, Shared, Task, Worker, WorkerCounters, WorkerStats};
use netsched_core::dispatch::{
    AnyDispatch, BlockKind, Dispatch, DispatchConfig, DispatchKind, FlowDispatch, FlowMode,
    FlowOrder, OrderCounters, Release, Ticket, WorkerState, WorkerView,
};
use netsched_sys::FramePool;
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant};

/// Most workers.
pub const MAX_WORKERS: usize = 64;
/// Flow buckets of the flow modes (as an RSS indirection table: 128 entries).
pub const BUCKETS: usize = 128;
/// Ring entries beyond `worker_queue` tasks, for rule swaps in flight.
const SWAP_ROOM: usize = 4;

/// How work is handed to workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DispatchMode {
    /// One block at a time by one of P1's policies.
    Block(DispatchKind),
    /// Whole packets by a fixed flow hash (RSS, `PACKET_FANOUT_HASH`).
    FlowHash,
    /// Whole packets by flow bucket; drained buckets of busy workers move to idle ones.
    WorkStealing,
    /// Run to completion: the packet thread checks each packet itself as it takes it in, and
    /// the workers stay idle. No hand-off and no wake-up per packet: on a host with fewer
    /// cores than pipeline threads this is the fastest mode (docs/filter.md, "Measured").
    Inline,
}

impl DispatchMode {
    /// Every mode's name, as `--dispatch` reads it.
    pub const NAMES: &'static [&'static str] = &[
        "static_rr",
        "modified_rr",
        "fcfs",
        "modified_fcfs",
        "flow_hash",
        "work_stealing",
        "inline",
    ];

    pub fn parse(name: &str) -> Result<Self, UnknownDispatch> {
        Ok(match name {
            "static_rr" => Self::Block(DispatchKind::StaticRr),
            "modified_rr" => Self::Block(DispatchKind::ModifiedRr),
            "fcfs" => Self::Block(DispatchKind::Fcfs),
            "modified_fcfs" => Self::Block(DispatchKind::ModifiedFcfs),
            "flow_hash" => Self::FlowHash,
            "work_stealing" => Self::WorkStealing,
            "inline" => Self::Inline,
            other => return Err(UnknownDispatch(other.to_string())),
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Block(k) => k.name(),
            Self::FlowHash => "flow_hash",
            Self::WorkStealing => "work_stealing",
            Self::Inline => "inline",
        }
    }
}

/// The pipeline's settings.
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    pub workers: usize,
    pub block_size: u32,
    /// Tasks a worker may hold (queued + running).
    pub worker_queue: usize,
    pub reorder_window: usize,
    pub reorder_timeout_ns: u64,
    pub max_flows: usize,
    pub mode: DispatchMode,
    pub work: WorkPolicy,
    /// Pin worker `i` to allowed CPU `i mod cpus` (only when there are more CPUs than workers).
    pub pin: bool,
}

/// Stalls counted under one policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Stalls {
    /// The policy named a busy worker; the block queued behind its work.
    pub assigned_busy: u64,
    /// No worker was idle; the task waited in the shared buffer.
    pub no_idle_worker: u64,
    /// The named worker's queue was full.
    pub queue_full: u64,
}

/// A packet leaving the pipeline, in flow order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    pub slot: u32,
    pub len: u32,
    pub verdict: Verdict,
}

/// What the pipeline counts.
#[derive(Debug, Clone, Serialize)]
pub struct PipelineStats {
    pub dispatch: &'static str,
    pub workers: Vec<WorkerStats>,
    pub stalls: BTreeMap<&'static str, Stalls>,
    pub order: OrderCounters,
    pub bucket_steals: u64,
    pub in_flight: usize,
    pub waiting_tasks: usize,
    pub rules_generation: u64,
    pub malformed_frames: u64,
    pub non_ip_frames: u64,
    pub later_fragments: u64,
    /// Packets the packet thread checked itself (`inline`), and the panics caught in them.
    pub inline_packets: u64,
    pub inline_panics: u64,
}

struct InFlight {
    ticket: Ticket,
    len: u32,
    tasks_left: u32,
    verdict: Option<Verdict>,
}

/// What waits in the shared buffer: a task, or a rule swap or edit for every worker.
enum Item {
    Task(Task),
    Tables(Arc<Tables>),
    Edit(Arc<RuleEdit>),
}

struct Waiting {
    item: Item,
    worker: Option<usize>,
    stalled: bool,
    queue_stalled: bool,
}

/// Dispatcher state plus the worker threads.
pub struct Pipeline {
    cfg: PipelineConfig,
    mode: DispatchMode,
    block: AnyDispatch,
    flow: FlowDispatch,
    jobs: Vec<rtrb::Producer<Job>>,
    done: Vec<rtrb::Consumer<Done>>,
    threads: Vec<JoinHandle<()>>,
    counters: Vec<Arc<WorkerCounters>>,
    shared: Arc<Shared>,
    cpus: Vec<Option<usize>>,
    view: Vec<WorkerState>,
    outstanding: Vec<usize>,
    idle_since: Vec<u64>,
    waiting: VecDeque<Waiting>,
    order: FlowOrder<u32>,
    /// By pool slot.
    inflight: Vec<Option<InFlight>>,
    in_flight: usize,
    stalls: BTreeMap<&'static str, Stalls>,
    tables: Arc<Tables>,
    released: Vec<Release<u32>>,
    /// Workers pushed to since the last wake-up offer (one bit each).
    pushed: u64,
    dispatcher: Option<ThreadId>,
    epoch: Instant,
    malformed: u64,
    non_ip: u64,
    later_fragments: u64,
    inline_packets: u64,
    inline_panics: u64,
}

/// Why the pipeline could not start.
#[derive(Debug)]
pub enum PipelineError {
    Workers(usize),
    Spawn(std::io::Error),
}

impl std::fmt::Display for PipelineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PipelineError::Workers(n) => {
                write!(f, "--workers {n}: between 1 and {MAX_WORKERS}")
            }
            PipelineError::Spawn(e) => write!(f, "starting a worker thread: {e}"),
        }
    }
}

impl std::error::Error for PipelineError {}

fn block_policy(mode: DispatchMode) -> AnyDispatch {
    let kind = match mode {
        DispatchMode::Block(k) => k,
        _ => DispatchKind::Fcfs,
    };
    match DispatchConfig::of_kind(kind).build() {
        Ok(p) => p,
        Err(e) => match e {},
    }
}

fn flow_policy(mode: DispatchMode, workers: usize) -> FlowDispatch {
    let m = if mode == DispatchMode::WorkStealing {
        FlowMode::Steal
    } else {
        FlowMode::Hash
    };
    FlowDispatch::new(m, workers, BUCKETS)
}

fn block_kind(k: u32, blocks: u32) -> BlockKind {
    match (k, blocks) {
        (_, 1) => BlockKind::Single,
        (0, _) => BlockKind::Sop,
        (k, b) if k + 1 == b => BlockKind::Eop,
        _ => BlockKind::Middle,
    }
}

impl Pipeline {
    /// Start `cfg.workers` workers checking packets of `pool` against `tables`.
    pub fn start(
        cfg: PipelineConfig,
        tables: Arc<Tables>,
        pool: &FramePool,
    ) -> Result<Self, PipelineError> {
        let n = cfg.workers;
        if n == 0 || n > MAX_WORKERS {
            return Err(PipelineError::Workers(n));
        }
        let queue = cfg.worker_queue.max(1);
        let cpus = netsched_sys::thread::allowed_cpus();
        let ncpu = cpus.len().max(1);
        let shared = Arc::new(Shared::new(pool.capacity(), n, ncpu));
        let pin = cfg.pin && ncpu > n;
        let (mut jobs, mut dones) = (Vec::with_capacity(n), Vec::with_capacity(n));
        let (mut threads, mut counters) = (Vec::with_capacity(n), Vec::with_capacity(n));
        let mut pinned = Vec::with_capacity(n);
        for i in 0..n {
            let (job_tx, job_rx) = rtrb::RingBuffer::new(queue + SWAP_ROOM);
            let (done_tx, done_rx) = rtrb::RingBuffer::new(queue + SWAP_ROOM);
            let c = Arc::new(WorkerCounters::default());
            let worker = Worker {
                id: i,
                jobs: job_rx,
                done: done_tx,
                policy: cfg.work.clone(),
                counters: c.clone(),
                shared: shared.clone(),
                reader: pool.reader(),
                tables: tables.clone(),
                block_size: cfg.block_size.max(1),
                unannounced: 0,
            };
            let cpu = pin.then(|| cpus.get(i % ncpu).copied()).flatten();
            let h = std::thread::Builder::new()
                .name(format!("filter-w{i}"))
                .spawn(move || {
                    if let Some(cpu) = cpu {
                        let _ = netsched_sys::thread::pin_to_cpu(cpu);
                    }
                    worker.run()
                })
                .map_err(PipelineError::Spawn)?;
            jobs.push(job_tx);
            dones.push(done_rx);
            threads.push(h);
            counters.push(c);
            pinned.push(cpu);
        }
        shared
            .workers
            .set(threads.iter().map(|h| h.thread().clone()).collect());
        let view = (0..n)
            .map(|i| WorkerState {
                engine: i % ncpu,
                busy: false,
                idle_since: 0,
            })
            .collect();
        Ok(Self {
            mode: cfg.mode,
            block: block_policy(cfg.mode),
            flow: flow_policy(cfg.mode, n),
            order: FlowOrder::new(cfg.reorder_window, cfg.reorder_timeout_ns, cfg.max_flows),
            cfg,
            jobs,
            done: dones,
            threads,
            counters,
            shared,
            cpus: pinned,
            view,
            outstanding: vec![0; n],
            idle_since: vec![0; n],
            waiting: VecDeque::new(),
            inflight: (0..pool.capacity()).map(|_| None).collect(),
            in_flight: 0,
            stalls: BTreeMap::new(),
            tables,
            released: Vec::new(),
            pushed: 0,
            dispatcher: None,
            epoch: Instant::now(),
            malformed: 0,
            non_ip: 0,
            later_fragments: 0,
            inline_packets: 0,
            inline_panics: 0,
        })
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Packets inside (dispatched, working, or held for order).
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Tasks (and rule swaps) waiting for a worker.
    pub fn waiting_tasks(&self) -> usize {
        self.waiting.len()
    }

    pub fn mode(&self) -> DispatchMode {
        self.mode
    }

    /// Use another policy from the next task on (tasks already cut keep their shape).
    pub fn set_mode(&mut self, mode: DispatchMode) {
        if mode != self.mode {
            self.mode = mode;
            self.block = block_policy(mode);
            self.flow = flow_policy(mode, self.cfg.workers);
        }
    }

    /// Packets submitted from now on are checked against `tables`: the swap queues behind the
    /// tasks already cut and reaches every worker in order with them.
    pub fn set_tables(&mut self, tables: Arc<Tables>) {
        self.tables = tables.clone();
        self.waiting.push_back(Waiting {
            item: Item::Tables(tables),
            worker: None,
            stalled: false,
            queue_stalled: false,
        });
        self.dispatch();
    }

    pub fn tables(&self) -> &Arc<Tables> {
        &self.tables
    }

    /// Change one rule: resolved and applied to the dispatcher's copy of the tables, then
    /// queued behind the tasks already cut, so it reaches every worker in order with them
    /// (packets submitted before it are classified without it, those after with it). The
    /// first edit after a swap copies the tables once per thread. Returns the edit applied.
    pub fn edit_rules(&mut self, change: &RuleChange) -> Result<RuleEdit, EditError> {
        let edit = self.tables.classifier.resolve(change)?;
        Arc::make_mut(&mut self.tables).classifier.apply(&edit)?;
        self.waiting.push_back(Waiting {
            item: Item::Edit(Arc::new(edit.clone())),
            worker: None,
            stalled: false,
            queue_stalled: false,
        });
        self.dispatch();
        Ok(edit)
    }

    /// Take in the `len`-byte frame held in `pool`'s slot `slot` (the caller keeps the slot
    /// until it is released; the workers read it in place).
    pub fn submit(&mut self, pool: &mut FramePool, slot: u32, len: u32) {
        let Some(entry) = self.inflight.get(slot as usize) else {
            return; // not a slot of the pool the pipeline was started with
        };
        debug_assert!(entry.is_none(), "slot {slot} submitted twice");
        let frame = pool.data(slot, len);
        let len = frame.len() as u32;
        let parsed = parse(frame);
        let flow = self.flow_of(&parsed);
        let ticket = self.order.admit(flow);
        if self.mode == DispatchMode::Inline {
            return self.run_inline(pool, slot, len, parsed, ticket);
        }
        let blocks = work::blocks(len, self.cfg.block_size);
        let block_mode = matches!(self.mode, DispatchMode::Block(_));
        self.inflight[slot as usize] = Some(InFlight {
            ticket,
            len,
            tasks_left: if block_mode { blocks } else { 1 },
            verdict: None,
        });
        self.in_flight += 1;
        if block_mode {
            self.shared.states[slot as usize].reset(Progress::start(&self.tables));
            for k in 0..blocks {
                self.queue(Task {
                    frame: pool.lend(slot, len),
                    parsed,
                    first: k,
                    last: k,
                    bucket: None,
                });
            }
        } else {
            let bucket = Some(self.flow.bucket_of(flow));
            self.queue(Task {
                frame: pool.lend(slot, len),
                parsed,
                first: 0,
                last: blocks - 1,
                bucket,
            });
        }
        self.dispatch();
    }

    /// `inline`: every block of the packet on this thread, now, against the current tables;
    /// then released in flow order (at once, unless an earlier packet of its flow is still
    /// with a worker after a mode change).
    fn run_inline(
        &mut self,
        pool: &mut FramePool,
        slot: u32,
        len: u32,
        parsed: Parsed,
        ticket: Ticket,
    ) {
        let frame = work::Frame {
            bytes: pool.data(slot, len),
            parsed,
            block_size: self.cfg.block_size.max(1),
        };
        let (verdict, panicked) = work::run_packet(&frame, &self.tables, &self.cfg.work);
        self.inline_packets += 1;
        self.inline_panics += panicked as u64;
        self.inflight[slot as usize] = Some(InFlight {
            ticket,
            len,
            tasks_left: 0,
            verdict: Some(verdict),
        });
        self.in_flight += 1;
        let sent = matches!(verdict, Verdict::Forward { .. });
        let now = self.now();
        self.order
            .complete(ticket, slot, sent, now, &mut self.released);
    }

    fn flow_of(&mut self, parsed: &Parsed) -> u64 {
        match *parsed {
            Parsed::Ip {
                tuple,
                later_fragment,
                ..
            } => {
                self.later_fragments += later_fragment as u64;
                tuple.flow_hash()
            }
            Parsed::NotIp { .. } => {
                self.non_ip += 1;
                0
            }
            Parsed::Malformed { .. } => {
                self.malformed += 1;
                0
            }
        }
    }

    fn queue(&mut self, task: Task) {
        self.waiting.push_back(Waiting {
            item: Item::Task(task),
            worker: None,
            stalled: false,
            queue_stalled: false,
        });
    }

    /// Hand waiting tasks to workers, in order, until one must wait; then wake the workers
    /// that got work.
    fn dispatch(&mut self) {
        let now = self.now();
        while self.dispatch_front(now) {}
        let mut w = std::mem::take(&mut self.pushed);
        while w != 0 {
            self.shared.wake_worker(w.trailing_zeros() as usize);
            w &= w - 1;
        }
    }

    /// Hand over the front of the waiting buffer; `false` when it must wait (or is empty).
    fn dispatch_front(&mut self, now: u64) -> bool {
        let name = self.mode.name();
        let Some(front) = self.waiting.front_mut() else {
            return false;
        };
        let (bucket, first, blocks) = match &front.item {
            Item::Tables(_) | Item::Edit(_) => return self.broadcast(),
            Item::Task(t) => (
                t.bucket,
                t.first,
                work::blocks(t.frame.len(), self.cfg.block_size),
            ),
        };
        let w = match front.worker {
            Some(w) => w,
            None => {
                let chosen = match bucket {
                    Some(b) => Some(self.flow.assign(b, &self.outstanding, &self.idle_since)),
                    None => self.block.assign(
                        block_kind(first, blocks),
                        &WorkerView::new(&self.view),
                        now,
                    ),
                };
                let Some(w) = chosen.filter(|&w| w < self.jobs.len()) else {
                    if !front.stalled {
                        front.stalled = true;
                        self.stalls.entry(name).or_default().no_idle_worker += 1;
                    }
                    return false;
                };
                if self.view[w].busy && bucket.is_none() {
                    self.stalls.entry(name).or_default().assigned_busy += 1;
                }
                front.worker = Some(w);
                w
            }
        };
        if self.outstanding[w] >= self.cfg.worker_queue.max(1) || self.jobs[w].is_full() {
            if !front.queue_stalled {
                front.queue_stalled = true;
                self.stalls.entry(name).or_default().queue_full += 1;
            }
            return false;
        }
        let Some(Waiting {
            item: Item::Task(task),
            ..
        }) = self.waiting.pop_front()
        else {
            return false;
        };
        // Cannot fail: the ring has room (checked above) and only this thread pushes.
        if let Err(rtrb::PushError::Full(Job::Task(task))) = self.jobs[w].push(Job::Task(task)) {
            self.waiting.push_front(Waiting {
                item: Item::Task(task),
                worker: Some(w),
                stalled: true,
                queue_stalled: true,
            });
            return false;
        }
        self.outstanding[w] += 1;
        self.view[w].busy = true;
        self.pushed |= 1 << w;
        true
    }

    /// A rule swap or edit at the front: to every worker's ring at once, when each has room.
    fn broadcast(&mut self) -> bool {
        if self.jobs.iter().any(|j| j.is_full()) {
            return false;
        }
        let job = |item: &Item| match item {
            Item::Tables(t) => Some(Job::Tables(t.clone())),
            Item::Edit(e) => Some(Job::Edit(e.clone())),
            Item::Task(_) => None,
        };
        let Some(item) = self.waiting.pop_front().map(|w| w.item) else {
            return false;
        };
        for (w, ring) in self.jobs.iter_mut().enumerate() {
            // Cannot fail: every ring has room (checked above).
            if let Some(j) = job(&item) {
                let _ = ring.push(j);
                self.pushed |= 1 << w;
            }
        }
        true
    }

    fn on_done(
        &mut self,
        w: usize,
        d: Done,
        now: u64,
        pool: &mut FramePool,
        out: &mut Vec<Released>,
    ) {
        self.outstanding[w] = self.outstanding[w].saturating_sub(1);
        if self.outstanding[w] == 0 {
            self.view[w].busy = false;
            self.view[w].idle_since = now;
            self.idle_since[w] = now;
        }
        if let Some(b) = d.task.bucket {
            self.flow.done(b);
        }
        let slot = d.task.frame.slot();
        pool.give_back(d.task.frame);
        let Some(Some(p)) = self.inflight.get_mut(slot as usize) else {
            return;
        };
        p.tasks_left = p.tasks_left.saturating_sub(1);
        if d.verdict.is_some() {
            p.verdict = d.verdict;
        }
        if p.tasks_left > 0 {
            return;
        }
        let verdict = p
            .verdict
            .unwrap_or(Verdict::Drop(crate::verdict::DropReason::WorkerPanic));
        p.verdict = Some(verdict);
        let sent = matches!(verdict, Verdict::Forward { .. });
        let ticket = p.ticket;
        self.order
            .complete(ticket, slot, sent, now, &mut self.released);
        self.take_released(out);
    }

    fn take_released(&mut self, out: &mut Vec<Released>) {
        for (slot, _) in self.released.drain(..) {
            if let Some(p) = self.inflight.get_mut(slot as usize).and_then(Option::take) {
                self.in_flight -= 1;
                out.push(Released {
                    slot,
                    len: p.len,
                    verdict: p
                        .verdict
                        .unwrap_or(Verdict::Drop(crate::verdict::DropReason::WorkerPanic)),
                });
            }
        }
    }

    /// Take every finished task, dispatch, release timed-out holds. Returns whether anything
    /// finished or was released (`inline` packets finish in `submit` and leave here).
    pub fn pump(&mut self, pool: &mut FramePool, out: &mut Vec<Released>) -> bool {
        let before = out.len();
        let mut any = false;
        let now = self.now();
        for w in 0..self.done.len() {
            while let Ok(d) = self.done[w].pop() {
                self.on_done(w, d, now, pool, out);
                any = true;
            }
        }
        self.dispatch();
        self.order.expire(now, &mut self.released);
        self.take_released(out);
        any || out.len() > before
    }

    /// Wait up to `timeout` for a finished task (parked: a worker wakes this thread), then
    /// [`Pipeline::pump`].
    pub fn wait(
        &mut self,
        timeout: Duration,
        pool: &mut FramePool,
        out: &mut Vec<Released>,
    ) -> bool {
        if self.pump(pool, out) {
            return true;
        }
        // A completion is usually a few microseconds away: with a core of its own, poll
        // before parking (a park and its wake-up cost more than that).
        for _ in 0..self.shared.workers.spins {
            if self.done.iter().any(|d| !d.is_empty()) {
                return self.pump(pool, out);
            }
            std::hint::spin_loop();
        }
        let me = std::thread::current();
        if self.dispatcher != Some(me.id()) {
            self.dispatcher = Some(me.id());
            *self
                .shared
                .dispatcher
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = Some(me);
        }
        self.shared.dispatcher_asleep.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if self.done.iter().all(|d| d.is_empty()) {
            std::thread::park_timeout(timeout);
        }
        self.shared
            .dispatcher_asleep
            .store(false, Ordering::Relaxed);
        self.pump(pool, out)
    }

    /// Release whatever the reorder window holds (shutdown).
    pub fn flush_order(&mut self, out: &mut Vec<Released>) {
        self.order.flush(&mut self.released);
        self.take_released(out);
    }

    pub fn stats(&self) -> PipelineStats {
        PipelineStats {
            dispatch: self.mode.name(),
            workers: self
                .counters
                .iter()
                .zip(&self.cpus)
                .map(|(c, cpu)| c.snapshot(*cpu))
                .collect(),
            stalls: self.stalls.clone(),
            order: self.order.counters(),
            bucket_steals: self.flow.steals(),
            in_flight: self.in_flight,
            waiting_tasks: self.waiting.len(),
            rules_generation: self.tables.generation,
            malformed_frames: self.malformed,
            non_ip_frames: self.non_ip,
            later_fragments: self.later_fragments,
            inline_packets: self.inline_packets,
            inline_panics: self.inline_panics,
        }
    }

    /// Stop the workers (after the caller drained what it wanted), take back every lent
    /// slot, and return the slots of the packets still inside, which the caller counts as
    /// dropped.
    pub fn stop(mut self, pool: &mut FramePool) -> Vec<(u32, u32)> {
        for w in self.waiting.drain(..) {
            if let Item::Task(t) = w.item {
                pool.give_back(t.frame);
            }
        }
        // Workers report their queued tasks unworked (the packets are returned below, to be
        // counted as dropped at shutdown), see their ring abandoned, and end.
        self.shared.workers.stopping.store(true, Ordering::Relaxed);
        self.jobs.clear();
        self.shared.workers.wake_all();
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
        let mut out = Vec::new();
        let now = self.now();
        for w in 0..self.done.len() {
            while let Ok(d) = self.done[w].pop() {
                self.on_done(w, d, now, pool, &mut out);
            }
        }
        let mut left: Vec<(u32, u32)> = self
            .inflight
            .iter_mut()
            .enumerate()
            .filter_map(|(s, p)| p.take().map(|p| (s as u32, p.len)))
            .collect();
        self.in_flight = 0;
        left.extend(out.iter().map(|r| (r.slot, r.len)));
        left
    }
}

/// A dispatch name that is none of [`DispatchMode::NAMES`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownDispatch(pub String);

impl fmt::Display for UnknownDispatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown dispatch {:?}; expected one of {}",
            self.0,
            DispatchMode::NAMES.join(", ")
        )
    }
}

impl std::error::Error for UnknownDispatch {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classifier::build_classifier;
    use crate::packet::udp4_frame;
    use crate::rules::RuleSet;
    use crate::signatures::Signatures;
    use crate::verdict::{DropReason, Fragments, OnPanic, OnSignature};

    fn tables() -> Arc<Tables> {
        let rules = "[[rule]]\naction = \"drop\"\nproto = \"udp\"\ndport = \"9\"\n\
                     [[rule]]\naction = \"class\"\nclass = 2\ndport = \"2000-2999\"\n";
        Arc::new(Tables {
            classifier: build_classifier(
                RuleSet::from_toml_str(rules, "t").unwrap(),
                netsched_core::classify::acl::ClassifierKind::TupleMerge,
                &Default::default(),
            )
            .unwrap(),
            signatures: Signatures::parse("EVIL\n", "s").unwrap(),
            generation: 1,
        })
    }

    fn config(mode: DispatchMode, window: usize) -> PipelineConfig {
        PipelineConfig {
            workers: 4,
            block_size: 64,
            worker_queue: 8,
            reorder_window: window,
            reorder_timeout_ns: 10_000_000_000,
            max_flows: 1024,
            mode,
            work: WorkPolicy {
                on_signature: OnSignature::Drop,
                on_panic: OnPanic::Drop,
                accept_non_ip: true,
                fragments: Fragments::Drop,
                fault_panic_on: Some(b"BOOM".to_vec()),
            },
            pin: false,
        }
    }

    /// Frame `i` of the test stream: flow `i % 8`, its sequence number in the payload, a size
    /// from 64 B to 1500 B; some dropped by rule (flow 7: port 9), some by signature, one
    /// panics, some malformed or not IP.
    fn frame(i: u32) -> (Vec<u8>, u64, &'static str) {
        let flow = i % 8;
        let size = [18usize, 200, 460, 1400][(i as usize / 8) % 4];
        let mut payload = vec![b'.'; size];
        payload[..4].copy_from_slice(&i.to_be_bytes());
        let dport = if flow == 7 { 9 } else { 2000 + flow as u16 };
        let mut want = if flow == 7 { "rule" } else { "forward" };
        if i % 97 == 5 && flow != 7 {
            let at = size - 4; // at the end: the scan has to carry state over every block
            payload[at..].copy_from_slice(b"EVIL");
            want = "signature";
        }
        if i == 301 {
            payload[10..14].copy_from_slice(b"BOOM");
            want = "panic";
        }
        let mut f = udp4_frame(
            [10, 0, 0, 1],
            [10, 0, 0, 2],
            1000 + flow as u16,
            dport,
            &payload,
        );
        if i % 211 == 3 {
            f.truncate(30);
            want = "malformed";
        }
        if i % 223 == 4 {
            f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
            want = "non_ip";
        }
        (f, flow as u64, want)
    }

    /// Drive `n` frames through 4 workers with at most `slots` inside, returning what was
    /// released, in release order, as (frame index, verdict).
    fn drive(p: &mut Pipeline, pool: &mut FramePool, n: u32) -> Vec<(u32, Verdict)> {
        let slots = pool.capacity() as u32;
        let mut at_slot = vec![u32::MAX; slots as usize];
        let mut out = Vec::new();
        let mut released = Vec::new();
        let mut next = 0;
        let deadline = Instant::now() + Duration::from_secs(60);
        while (next < n || p.in_flight() > 0) && Instant::now() < deadline {
            while next < n && p.waiting_tasks() < 64 {
                let Some(slot) = pool.alloc() else { break };
                at_slot[slot as usize] = next;
                let len = pool.fill(slot, &frame(next).0);
                p.submit(pool, slot, len);
                next += 1;
            }
            p.wait(Duration::from_millis(1), pool, &mut released);
            for r in released.drain(..) {
                out.push((at_slot[r.slot as usize], r.verdict));
                pool.release(r.slot);
            }
        }
        out
    }

    #[test]
    fn every_policy_with_four_workers_releases_every_packet_once_in_flow_order() {
        let n = 1200;
        for name in DispatchMode::NAMES {
            let mode = DispatchMode::parse(name).unwrap();
            let mut pool = FramePool::new(96);
            let mut p = Pipeline::start(config(mode, 4096), tables(), &pool).unwrap();
            let out = drive(&mut p, &mut pool, n);
            assert_eq!(out.len(), n as usize, "{name}: every packet released");
            let mut seen = vec![false; n as usize];
            let mut last_sent = [None::<u32>; 9];
            for &(i, v) in &out {
                assert!(
                    !std::mem::replace(&mut seen[i as usize], true),
                    "{name}: {i} twice"
                );
                let (_, flow, want) = frame(i);
                if want == "non_ip" {
                    assert!(
                        matches!(v, Verdict::Forward { class: None, .. }),
                        "{name}: {i}"
                    );
                    continue;
                }
                let got = match v {
                    Verdict::Forward { class, .. } => {
                        assert_eq!(class, Some(2), "{name}: {i}");
                        "forward"
                    }
                    Verdict::Drop(DropReason::Rule) => "rule",
                    Verdict::Drop(DropReason::Signature) => "signature",
                    Verdict::Drop(DropReason::WorkerPanic) => "panic",
                    Verdict::Drop(DropReason::Malformed) => "malformed",
                    Verdict::Drop(r) => panic!("{name}: {i}: {r:?}"),
                };
                assert_eq!(got, want, "{name}: frame {i}");
                if got == "forward" {
                    if let Some(prev) = last_sent[flow as usize] {
                        assert!(prev < i, "{name}: flow {flow}: {i} sent after {prev}");
                    }
                    last_sent[flow as usize] = Some(i);
                }
            }
            let s = p.stats();
            assert_eq!(s.order.violations_after, 0, "{name}");
            assert_eq!(s.in_flight, 0);
            let blocks: u64 = s.workers.iter().map(|w| w.blocks).sum();
            let panics: u64 = s.workers.iter().map(|w| w.panics).sum::<u64>() + s.inline_panics;
            assert_eq!(panics, 1, "{name}");
            if *name == "inline" {
                // The packet thread did it all; the workers stayed idle.
                assert_eq!((s.inline_packets, blocks), (n as u64, 0), "{name}");
            } else {
                assert!(blocks >= n as u64, "{name}");
                assert_eq!(s.inline_packets, 0, "{name}");
            }
            // The stats line this pipeline is part of names every number with its unit.
            let mut totals = crate::stats::Totals::default();
            totals.drop(DropReason::Rule, 3);
            totals.forwarded_by_class.insert(2, 5);
            let line = serde_json::to_value(totals.line(1_500_000, 0, s)).unwrap();
            let bad = netsched_util::json_units::violations(&line);
            assert!(bad.is_empty(), "{name}: {bad:?}\n{line}");
            assert!(p.stop(&mut pool).is_empty());
            assert_eq!(pool.free_slots(), 96, "{name}: every slot back");
            assert_eq!(pool.refused_releases(), 0, "{name}");
        }
    }

    #[test]
    fn block_policies_spread_one_packets_blocks_and_flow_policies_do_not() {
        // A single 1500-byte flow: block policies use several workers for it; flow_hash one.
        for (name, spread) in [("fcfs", true), ("static_rr", true), ("flow_hash", false)] {
            let mut pool = FramePool::new(64);
            let cfg = config(DispatchMode::parse(name).unwrap(), 64);
            let mut p = Pipeline::start(cfg, tables(), &pool).unwrap();
            let mut released = Vec::new();
            for k in 0..20u32 {
                let f = udp4_frame([10, 0, 0, 1], [10, 0, 0, 2], 5, 6, &[b'a'; 1400]);
                let len = pool.fill(k, &f);
                p.submit(&mut pool, k, len);
            }
            while p.in_flight() > 0 {
                p.wait(Duration::from_millis(5), &mut pool, &mut released);
            }
            let used = p.stats().workers.iter().filter(|w| w.blocks > 0).count();
            assert_eq!(used > 1, spread, "{name}: {used} workers used");
            assert_eq!(released.len(), 20);
            p.stop(&mut pool);
        }
    }

    #[test]
    fn static_rr_counts_blocks_given_to_busy_workers() {
        let mut pool = FramePool::new(64);
        let cfg = config(DispatchMode::parse("static_rr").unwrap(), 64);
        let mut p = Pipeline::start(cfg, tables(), &pool).unwrap();
        let mut released = Vec::new();
        // 40 packets of 23 blocks submitted at once: RR must hand blocks to busy workers.
        for k in 0..40u32 {
            let f = udp4_frame([10, 0, 0, 1], [10, 0, 0, 2], 5, 6, &[b'a'; 1400]);
            let len = pool.fill(k, &f);
            p.submit(&mut pool, k, len);
        }
        while p.in_flight() > 0 {
            p.wait(Duration::from_millis(5), &mut pool, &mut released);
        }
        let st = p.stats().stalls["static_rr"];
        assert!(st.assigned_busy > 0, "{st:?}");
        assert_eq!(
            st.no_idle_worker, 0,
            "static RR never waits for an idle worker"
        );
        p.stop(&mut pool);
    }

    #[test]
    fn a_swap_applies_to_packets_submitted_after_it_only() {
        // Tables 1 drop "EVIL" (the test tables); tables 2 know no signature and drop port 6.
        // Under every policy, each packet's blocks (spread over workers or not) are checked
        // against the tables of its submission: a swap between two packets never mixes them.
        let f = {
            let mut payload = vec![b'.'; 1000];
            payload[500..504].copy_from_slice(b"EVIL"); // inside block 8 of 17
            udp4_frame([10, 0, 0, 1], [10, 0, 0, 2], 5, 6, &payload)
        };
        for name in DispatchMode::NAMES {
            let mut pool = FramePool::new(32);
            let cfg = config(DispatchMode::parse(name).unwrap(), 64);
            let mut p = Pipeline::start(cfg, tables(), &pool).unwrap();
            let drop_6 = Arc::new(Tables {
                classifier: build_classifier(
                    RuleSet::from_toml_str("[[rule]]\naction = \"drop\"\ndport = \"6\"\n", "d")
                        .unwrap(),
                    netsched_core::classify::acl::ClassifierKind::TupleMerge,
                    &Default::default(),
                )
                .unwrap(),
                signatures: Signatures::empty(),
                generation: 2,
            });
            for slot in 0..32u32 {
                let len = pool.fill(slot, &f);
                if slot == 16 {
                    p.set_tables(drop_6.clone());
                }
                p.submit(&mut pool, slot, len);
            }
            let mut out = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(30);
            while p.in_flight() > 0 && Instant::now() < deadline {
                p.wait(Duration::from_millis(5), &mut pool, &mut out);
            }
            assert_eq!(out.len(), 32, "{name}");
            for r in out {
                let want = if r.slot < 16 {
                    DropReason::Signature
                } else {
                    DropReason::Rule
                };
                assert_eq!(r.verdict, Verdict::Drop(want), "{name}: slot {}", r.slot);
            }
            assert_eq!(p.stats().rules_generation, 2);
            assert!(p.stop(&mut pool).is_empty());
        }
    }

    /// Rules added, inserted and deleted one at a time between packets, under every policy:
    /// each packet's verdict is the first match in the rules held when it was submitted (a
    /// model list), never a mix, and every packet is released once.
    #[test]
    fn rule_edits_apply_to_packets_submitted_after_them_only() {
        use crate::rule_edit::{parse_rule_words, Place, RuleChange, RuleEdit};
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        for name in DispatchMode::NAMES {
            let mut pool = FramePool::new(32);
            let cfg = config(DispatchMode::parse(name).unwrap(), 4096);
            let start = Arc::new(Tables {
                signatures: Signatures::empty(),
                ..(*tables()).clone()
            });
            let mut p = Pipeline::start(cfg, start, &pool).unwrap();
            // The test tables' two rules, handles 1 and 2.
            let mut model: Vec<(u64, crate::rules::AclRule)> = vec![
                (
                    1,
                    parse_rule_words(&["action=drop", "proto=udp", "dport=9"]).unwrap(),
                ),
                (
                    2,
                    parse_rule_words(&["action=class", "class=2", "dport=2000-2999"]).unwrap(),
                ),
            ];
            let mut want = vec![None; 600];
            let mut out = Vec::new();
            let mut i = 0usize;
            let deadline = Instant::now() + Duration::from_secs(60);
            while (i < want.len() || p.in_flight() > 0) && Instant::now() < deadline {
                if i < want.len() {
                    if let Some(slot) = pool.alloc() {
                        if next(3) == 0 {
                            edit_both(&mut p, &mut model, &mut next);
                        }
                        let dport = 2000 + next(24) as u16;
                        let payload = vec![b'.'; [10, 300, 900][i % 3]];
                        let f = udp4_frame([10, 0, 0, 1], [10, 0, 0, 2], 7, dport, &payload);
                        let t = crate::packet::FiveTuple {
                            src: [10, 0, 0, 1].into(),
                            dst: [10, 0, 0, 2].into(),
                            proto: 17,
                            sport: 7,
                            dport,
                        };
                        want[i] = Some(
                            match model
                                .iter()
                                .find(|(_, r)| r.matches(&t))
                                .map(|x| x.1.action)
                            {
                                Some(crate::rules::Action::Drop) => Verdict::Drop(DropReason::Rule),
                                Some(crate::rules::Action::Class(c)) => Verdict::Forward {
                                    class: Some(c),
                                    marked: false,
                                },
                                _ => Verdict::Forward {
                                    class: None,
                                    marked: false,
                                },
                            },
                        );
                        let len = pool.fill(slot, &f);
                        p.submit(&mut pool, slot, len);
                        out.push((slot, i));
                        i += 1;
                    }
                }
                let mut released = Vec::new();
                p.wait(Duration::from_micros(200), &mut pool, &mut released);
                for r in released {
                    let k = out.iter().position(|&(s, _)| s == r.slot).unwrap();
                    let (_, idx) = out.swap_remove(k);
                    assert_eq!(Some(r.verdict), want[idx], "{name}: packet {idx}");
                    want[idx] = None;
                    pool.release(r.slot);
                }
            }
            assert!(
                want.iter().all(Option::is_none),
                "{name}: every packet released"
            );
            assert!(p.stats().workers.iter().all(|w| w.edit_failures == 0));
            assert!(p.stop(&mut pool).is_empty());
        }

        /// One random edit, to the pipeline and to the model.
        fn edit_both(
            p: &mut Pipeline,
            model: &mut Vec<(u64, crate::rules::AclRule)>,
            next: &mut impl FnMut(u64) -> u64,
        ) {
            let port = (2000 + next(24)).to_string();
            let action = ["action=drop", "action=accept", "action=class class=5"][next(3) as usize];
            let mut words: Vec<&str> = action.split(' ').collect();
            let dport = format!("dport={port}");
            words.push(&dport);
            let rule = parse_rule_words(&words).unwrap();
            let at = match (next(5), model.len()) {
                (0, _) | (_, 0) => Place::Top,
                (1, _) => Place::Bottom,
                (2, n) => Place::Before(model[next(n as u64) as usize].0),
                (3, n) => Place::After(model[next(n as u64) as usize].0),
                (_, n) => {
                    let (h, _) = model.remove(next(n as u64) as usize);
                    p.edit_rules(&RuleChange::Delete { handle: h }).unwrap();
                    return;
                }
            };
            let pos = match at {
                Place::Top => 0,
                Place::Bottom => model.len(),
                Place::Before(h) => model.iter().position(|x| x.0 == h).unwrap(),
                Place::After(h) => model.iter().position(|x| x.0 == h).unwrap() + 1,
            };
            let e = p
                .edit_rules(&RuleChange::Insert {
                    at,
                    rule: rule.clone(),
                })
                .unwrap();
            let RuleEdit::Insert { handle, .. } = e else {
                panic!("an insert answered {e:?}");
            };
            model.insert(pos, (handle, rule));
        }
    }
}

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
//! Cost per packet: O(blocks × workers) for the block policies' scans, O(log held) for order.
//! Memory: bounded by the caller's buffer pool (one [`Packet`] per slot in flight) and
//! `workers × worker_queue` queued tasks.

use crate::packet::{parse, Parsed};
use crate::verdict::Verdict;
use crate::work::{Packet, Tables, WorkPolicy};
use crate::worker::{self, Done, Task, WorkerCounters, WorkerStats};
use netsched_core::dispatch::{
    AnyDispatch, BlockKind, Dispatch, DispatchConfig, DispatchKind, FlowDispatch, FlowMode,
    FlowOrder, OrderCounters, Release, Ticket, WorkerState, WorkerView,
};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Most workers.
pub const MAX_WORKERS: usize = 64;
/// Flow buckets of the flow modes (as an RSS indirection table: 128 entries).
pub const BUCKETS: usize = 128;

/// How work is handed to workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DispatchMode {
    /// One block at a time by one of P1's policies.
    Block(DispatchKind),
    /// Whole packets by a fixed flow hash (RSS, `PACKET_FANOUT_HASH`).
    FlowHash,
    /// Whole packets by flow bucket; drained buckets of busy workers move to idle ones.
    WorkStealing,
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
    ];

    pub fn parse(name: &str) -> Result<Self, UnknownDispatch> {
        Ok(match name {
            "static_rr" => Self::Block(DispatchKind::StaticRr),
            "modified_rr" => Self::Block(DispatchKind::ModifiedRr),
            "fcfs" => Self::Block(DispatchKind::Fcfs),
            "modified_fcfs" => Self::Block(DispatchKind::ModifiedFcfs),
            "flow_hash" => Self::FlowHash,
            "work_stealing" => Self::WorkStealing,
            other => return Err(UnknownDispatch(other.to_string())),
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Block(k) => k.name(),
            Self::FlowHash => "flow_hash",
            Self::WorkStealing => "work_stealing",
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
}

struct InFlight {
    ticket: Ticket,
    len: u32,
    tasks_left: u32,
    verdict: Option<Verdict>,
}

struct Waiting {
    task: Task,
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
    senders: Vec<SyncSender<Task>>,
    done: Receiver<Done>,
    threads: Vec<JoinHandle<()>>,
    counters: Vec<Arc<WorkerCounters>>,
    cpus: Vec<Option<usize>>,
    view: Vec<WorkerState>,
    outstanding: Vec<usize>,
    idle_since: Vec<u64>,
    waiting: VecDeque<Waiting>,
    order: FlowOrder<u32>,
    inflight: HashMap<u32, InFlight>,
    stalls: BTreeMap<&'static str, Stalls>,
    tables: Arc<Tables>,
    released: Vec<Release<u32>>,
    epoch: Instant,
    malformed: u64,
    non_ip: u64,
    later_fragments: u64,
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
    /// Start `cfg.workers` workers checking packets against `tables`.
    pub fn start(cfg: PipelineConfig, tables: Arc<Tables>) -> Result<Self, PipelineError> {
        let n = cfg.workers;
        if n == 0 || n > MAX_WORKERS {
            return Err(PipelineError::Workers(n));
        }
        let queue = cfg.worker_queue.max(1);
        let (done_tx, done) = sync_channel(n * (queue + 1));
        let cpus = netsched_sys::thread::allowed_cpus();
        let ncpu = cpus.len().max(1);
        let pin = cfg.pin && ncpu > n;
        let mut senders = Vec::with_capacity(n);
        let mut threads = Vec::with_capacity(n);
        let mut counters = Vec::with_capacity(n);
        let mut pinned = Vec::with_capacity(n);
        for i in 0..n {
            let (tx, rx) = sync_channel::<Task>(queue);
            let c = Arc::new(WorkerCounters::default());
            let (d, w, c2) = (done_tx.clone(), cfg.work.clone(), c.clone());
            let cpu = pin.then(|| cpus.get(i % ncpu).copied()).flatten();
            let h = std::thread::Builder::new()
                .name(format!("filter-w{i}"))
                .spawn(move || {
                    if let Some(cpu) = cpu {
                        let _ = netsched_sys::thread::pin_to_cpu(cpu);
                    }
                    worker::run(i, rx, d, w, c2)
                })
                .map_err(PipelineError::Spawn)?;
            senders.push(tx);
            threads.push(h);
            counters.push(c);
            pinned.push(cpu);
        }
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
            senders,
            done,
            threads,
            counters,
            cpus: pinned,
            view,
            outstanding: vec![0; n],
            idle_since: vec![0; n],
            waiting: VecDeque::new(),
            inflight: HashMap::new(),
            stalls: BTreeMap::new(),
            tables,
            released: Vec::new(),
            epoch: Instant::now(),
            malformed: 0,
            non_ip: 0,
            later_fragments: 0,
        })
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Packets inside (dispatched, working, or held for order).
    pub fn in_flight(&self) -> usize {
        self.inflight.len()
    }

    /// Tasks waiting for a worker.
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

    /// Packets submitted from now on are checked against `tables`.
    pub fn set_tables(&mut self, tables: Arc<Tables>) {
        self.tables = tables;
    }

    pub fn tables(&self) -> &Arc<Tables> {
        &self.tables
    }

    /// Take in the frame held in buffer `slot` (the caller keeps the slot until it is released).
    pub fn submit(&mut self, slot: u32, frame: &[u8]) {
        let parsed = parse(frame);
        let flow = match parsed {
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
        };
        let ticket = self.order.admit(flow);
        let packet = Arc::new(Packet::new(
            slot,
            frame,
            parsed,
            self.tables.clone(),
            self.cfg.block_size,
        ));
        let blocks = packet.blocks;
        let tasks = match self.mode {
            DispatchMode::Block(_) => blocks,
            _ => 1,
        };
        self.inflight.insert(
            slot,
            InFlight {
                ticket,
                len: frame.len() as u32,
                tasks_left: tasks,
                verdict: None,
            },
        );
        let mut push = |task| {
            self.waiting.push_back(Waiting {
                task,
                worker: None,
                stalled: false,
                queue_stalled: false,
            })
        };
        if let DispatchMode::Block(_) = self.mode {
            for k in 0..blocks {
                push(Task {
                    packet: packet.clone(),
                    first: k,
                    last: k,
                    bucket: None,
                });
            }
        } else {
            let bucket = Some(self.flow.bucket_of(flow));
            push(Task {
                packet,
                first: 0,
                last: blocks - 1,
                bucket,
            });
        }
        self.dispatch();
    }

    /// Hand waiting tasks to workers, in order, until one must wait.
    fn dispatch(&mut self) {
        let now = self.now();
        let name = self.mode.name();
        while let Some(front) = self.waiting.front_mut() {
            let w = match front.worker {
                Some(w) => w,
                None => {
                    let chosen = match front.task.bucket {
                        Some(b) => Some(self.flow.assign(b, &self.outstanding, &self.idle_since)),
                        None => {
                            let kind = block_kind(front.task.first, front.task.packet.blocks);
                            self.block.assign(kind, &WorkerView::new(&self.view), now)
                        }
                    };
                    let Some(w) = chosen.filter(|&w| w < self.senders.len()) else {
                        if !front.stalled {
                            front.stalled = true;
                            self.stalls.entry(name).or_default().no_idle_worker += 1;
                        }
                        return;
                    };
                    if self.view[w].busy && front.task.bucket.is_none() {
                        self.stalls.entry(name).or_default().assigned_busy += 1;
                    }
                    front.worker = Some(w);
                    w
                }
            };
            if self.outstanding[w] >= self.cfg.worker_queue.max(1) {
                if !front.queue_stalled {
                    front.queue_stalled = true;
                    self.stalls.entry(name).or_default().queue_full += 1;
                }
                return;
            }
            let Some(item) = self.waiting.pop_front() else {
                return;
            };
            match self.senders[w].try_send(item.task) {
                Ok(()) => {
                    self.outstanding[w] += 1;
                    self.view[w].busy = true;
                }
                Err(TrySendError::Full(task)) | Err(TrySendError::Disconnected(task)) => {
                    // Cannot happen while `outstanding` bounds the queue; put it back.
                    self.waiting.push_front(Waiting {
                        task,
                        worker: Some(w),
                        stalled: true,
                        queue_stalled: true,
                    });
                    return;
                }
            }
        }
    }

    fn on_done(&mut self, d: Done, out: &mut Vec<Released>) {
        let now = self.now();
        let w = d.worker;
        self.outstanding[w] = self.outstanding[w].saturating_sub(1);
        if self.outstanding[w] == 0 {
            self.view[w].busy = false;
            self.view[w].idle_since = now;
            self.idle_since[w] = now;
        }
        if let Some(b) = d.task.bucket {
            self.flow.done(b);
        }
        let slot = d.task.packet.slot;
        let Some(p) = self.inflight.get_mut(&slot) else {
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
            if let Some(p) = self.inflight.remove(&slot) {
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
    /// finished.
    pub fn pump(&mut self, out: &mut Vec<Released>) -> bool {
        let mut any = false;
        while let Ok(d) = self.done.try_recv() {
            self.on_done(d, out);
            any = true;
        }
        self.dispatch();
        let now = self.now();
        self.order.expire(now, &mut self.released);
        self.take_released(out);
        any
    }

    /// Block up to `timeout` for one finished task, then [`Pipeline::pump`].
    pub fn wait(&mut self, timeout: Duration, out: &mut Vec<Released>) -> bool {
        match self.done.recv_timeout(timeout) {
            Ok(d) => {
                self.on_done(d, out);
                self.pump(out);
                true
            }
            Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => self.pump(out),
        }
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
            in_flight: self.inflight.len(),
            waiting_tasks: self.waiting.len(),
            rules_generation: self.tables.generation,
            malformed_frames: self.malformed,
            non_ip_frames: self.non_ip,
            later_fragments: self.later_fragments,
        }
    }

    /// Stop the workers (after the caller drained what it wanted) and return the slots of the
    /// packets still inside, which the caller counts as dropped.
    pub fn stop(mut self) -> Vec<(u32, u32)> {
        self.waiting.clear();
        self.senders.clear();
        let mut out = Vec::new();
        // Workers finish their queued tasks (every predecessor of a sent block was sent).
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
        while let Ok(d) = self.done.try_recv() {
            self.on_done(d, &mut out);
        }
        let mut left: Vec<(u32, u32)> = self.inflight.drain().map(|(s, p)| (s, p.len)).collect();
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
    use crate::packet::udp4_frame;
    use crate::rules::{build_classifier, RuleSet};
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
    fn drive(p: &mut Pipeline, n: u32, slots: u32) -> Vec<(u32, Verdict)> {
        let mut free: Vec<u32> = (0..slots).collect();
        let mut at_slot = vec![u32::MAX; slots as usize];
        let mut out = Vec::new();
        let mut released = Vec::new();
        let mut next = 0;
        let deadline = Instant::now() + Duration::from_secs(60);
        while (next < n || p.in_flight() > 0) && Instant::now() < deadline {
            while next < n && p.waiting_tasks() < 64 {
                let Some(slot) = free.pop() else { break };
                at_slot[slot as usize] = next;
                p.submit(slot, &frame(next).0);
                next += 1;
            }
            p.wait(Duration::from_millis(1), &mut released);
            for r in released.drain(..) {
                out.push((at_slot[r.slot as usize], r.verdict));
                free.push(r.slot);
            }
        }
        out
    }

    #[test]
    fn every_policy_with_four_workers_releases_every_packet_once_in_flow_order() {
        let n = 1200;
        for name in DispatchMode::NAMES {
            let mode = DispatchMode::parse(name).unwrap();
            let mut p = Pipeline::start(config(mode, 4096), tables()).unwrap();
            let out = drive(&mut p, n, 96);
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
            let panics: u64 = s.workers.iter().map(|w| w.panics).sum();
            assert_eq!(panics, 1, "{name}");
            assert!(blocks >= n as u64, "{name}");
            // The stats line this pipeline is part of names every number with its unit.
            let mut totals = crate::stats::Totals::default();
            totals.drop(DropReason::Rule, 3);
            totals.forwarded_by_class.insert(2, 5);
            let line = serde_json::to_value(totals.line(1_500_000, 0, s)).unwrap();
            let bad = netsched_util::json_units::violations(&line);
            assert!(bad.is_empty(), "{name}: {bad:?}\n{line}");
            assert!(p.stop().is_empty());
        }
    }

    #[test]
    fn block_policies_spread_one_packets_blocks_and_flow_policies_do_not() {
        // A single 1500-byte flow: block policies use several workers for it; flow_hash one.
        for (name, spread) in [("fcfs", true), ("static_rr", true), ("flow_hash", false)] {
            let mut p =
                Pipeline::start(config(DispatchMode::parse(name).unwrap(), 64), tables()).unwrap();
            let mut released = Vec::new();
            for k in 0..20u32 {
                let f = udp4_frame([10, 0, 0, 1], [10, 0, 0, 2], 5, 6, &[b'a'; 1400]);
                p.submit(k, &f);
            }
            while p.in_flight() > 0 {
                p.wait(Duration::from_millis(5), &mut released);
            }
            let used = p.stats().workers.iter().filter(|w| w.blocks > 0).count();
            assert_eq!(used > 1, spread, "{name}: {used} workers used");
            assert_eq!(released.len(), 20);
            p.stop();
        }
    }

    #[test]
    fn static_rr_counts_blocks_given_to_busy_workers() {
        let mut p = Pipeline::start(
            config(DispatchMode::parse("static_rr").unwrap(), 64),
            tables(),
        )
        .unwrap();
        let mut released = Vec::new();
        // 40 packets of 23 blocks submitted at once: RR must hand blocks to busy workers.
        for k in 0..40u32 {
            p.submit(
                k,
                &udp4_frame([10, 0, 0, 1], [10, 0, 0, 2], 5, 6, &[b'a'; 1400]),
            );
        }
        while p.in_flight() > 0 {
            p.wait(Duration::from_millis(5), &mut released);
        }
        let st = p.stats().stalls["static_rr"];
        assert!(st.assigned_busy > 0, "{st:?}");
        assert_eq!(
            st.no_idle_worker, 0,
            "static RR never waits for an idle worker"
        );
        p.stop();
    }

    #[test]
    fn a_swap_applies_to_packets_submitted_after_it_only() {
        let mut p = Pipeline::start(config(DispatchMode::FlowHash, 64), tables()).unwrap();
        let f = udp4_frame([10, 0, 0, 1], [10, 0, 0, 2], 5, 6, b"x");
        p.submit(0, &f);
        let drop_all = Arc::new(Tables {
            classifier: build_classifier(
                RuleSet::from_toml_str("default = \"drop\"", "d").unwrap(),
                netsched_core::classify::acl::ClassifierKind::TupleMerge,
                &Default::default(),
            )
            .unwrap(),
            signatures: Signatures::empty(),
            generation: 2,
        });
        p.set_tables(drop_all);
        p.submit(1, &f);
        let mut out = Vec::new();
        while p.in_flight() > 0 {
            p.wait(Duration::from_millis(5), &mut out);
        }
        out.sort_by_key(|r| r.slot);
        assert!(matches!(out[0].verdict, Verdict::Forward { .. }));
        assert_eq!(out[1].verdict, Verdict::Drop(DropReason::Rule));
        assert_eq!(p.stats().rules_generation, 2);
        p.stop();
    }
}

//! A worker thread: takes jobs (a task — one block, or every block of a packet — the tables
//! from now on, or a rule edit) from its bounded single-producer/single-consumer ring in order, runs them, and
//! puts each finished task on its own completion ring to the dispatcher.
//!
//! Waiting: an empty ring is polled a few dozen times (only when every pipeline thread has a
//! core: `work::Wakers`), then the worker marks itself asleep and parks; the dispatcher wakes it after its next push (a SeqCst fence
//! on both sides, so a push and a sleep cannot miss each other; the park has a timeout as a
//! safety net). After its last queued task, and every 16 tasks, the worker wakes the
//! dispatcher if it sleeps.
//!
//! Busy time runs from taking a job on an empty-handed worker to finding the ring empty again
//! (waits for a predecessor's hand-off are inside it, also counted apart, so busy − hand-off
//! wait is the time spent working); idle time is the rest. A worker ends when its ring is
//! empty and the dispatcher has dropped its end.
//!
//! Cost per task: one ring pop and one push (no lock, no allocation), and two clock reads per
//! busy period, not per task. Memory: its two rings.

use crate::packet::Parsed;
use crate::rule_edit::RuleEdit;
use crate::verdict::Verdict;
use crate::work::{self, BlockState, Frame, Tables, Wakers, WorkPolicy};
use netsched_sys::{Lent, PoolReader};
use serde::Serialize;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// Work for one worker: blocks `first..=last` of the frame in a lent pool slot.
#[derive(Debug)]
pub struct Task {
    pub frame: Lent,
    pub parsed: Parsed,
    pub first: u32,
    pub last: u32,
    /// The flow bucket, for whole-packet dispatch (`None`: one block of a block policy).
    pub bucket: Option<usize>,
}

/// What a worker's ring carries.
#[derive(Debug)]
pub enum Job {
    Task(Task),
    /// Check the tasks after this against these tables.
    Tables(Arc<Tables>),
    /// A rule edit, applied to the worker's own copy of the tables (copied on the first edit
    /// after a swap).
    Edit(Arc<RuleEdit>),
}

/// A finished task.
#[derive(Debug)]
pub struct Done {
    pub task: Task,
    /// Set when the task ran the packet's last block.
    pub verdict: Option<Verdict>,
}

/// One worker's counters (atomics: the worker writes, the dispatcher reads).
#[derive(Debug, Default)]
pub struct WorkerCounters {
    pub busy_ns: AtomicU64,
    pub idle_ns: AtomicU64,
    pub blocks: AtomicU64,
    pub tasks: AtomicU64,
    /// Header blocks (SOP / SOP_EOP) this worker ran: where P1's expensive work landed.
    pub sops: AtomicU64,
    /// The thread's CPU time when it last went idle (ns): its work without the time it waited
    /// for a core, which busy time includes.
    pub cpu_ns: AtomicU64,
    pub handoff_waits: AtomicU64,
    pub handoff_wait_ns: AtomicU64,
    pub panics: AtomicU64,
    /// Rule edits this worker's copy refused though the dispatcher's took them.
    pub edit_failures: AtomicU64,
}

/// A snapshot of [`WorkerCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct WorkerStats {
    pub busy_ns: u64,
    pub idle_ns: u64,
    pub blocks: u64,
    pub tasks: u64,
    pub sops: u64,
    pub cpu_ns: u64,
    pub handoff_waits: u64,
    pub handoff_wait_ns: u64,
    pub panics: u64,
    pub edit_failures: u64,
    pub cpu: Option<usize>,
}

impl WorkerCounters {
    pub fn snapshot(&self, cpu: Option<usize>) -> WorkerStats {
        WorkerStats {
            busy_ns: self.busy_ns.load(Relaxed),
            idle_ns: self.idle_ns.load(Relaxed),
            blocks: self.blocks.load(Relaxed),
            tasks: self.tasks.load(Relaxed),
            sops: self.sops.load(Relaxed),
            cpu_ns: self.cpu_ns.load(Relaxed),
            handoff_waits: self.handoff_waits.load(Relaxed),
            edit_failures: self.edit_failures.load(Relaxed),
            handoff_wait_ns: self.handoff_wait_ns.load(Relaxed),
            panics: self.panics.load(Relaxed),
            cpu,
        }
    }
}

/// What the dispatcher and its workers share.
#[derive(Debug)]
pub struct Shared {
    /// Per pool slot: the hand-off state of a packet under a block policy.
    pub states: Box<[BlockState]>,
    /// The worker threads, to wake one.
    pub workers: Wakers,
    /// Per worker: parked on an empty ring.
    pub asleep: Box<[AtomicBool]>,
    /// The dispatcher is parked waiting for a completion.
    pub dispatcher_asleep: AtomicBool,
    pub dispatcher: Mutex<Option<Thread>>,
}

impl Shared {
    /// For `workers` workers on `cpus` CPUs and a pool of `slots`.
    pub fn new(slots: usize, workers: usize, cpus: usize) -> Self {
        Self {
            states: (0..slots).map(|_| BlockState::default()).collect(),
            workers: Wakers::new(workers + 1, cpus),
            asleep: (0..workers).map(|_| AtomicBool::new(false)).collect(),
            dispatcher_asleep: AtomicBool::new(false),
            dispatcher: Mutex::new(None),
        }
    }

    /// Wake worker `w` if it sleeps (after a push to its ring).
    #[inline]
    pub fn wake_worker(&self, w: usize) {
        fence(Ordering::SeqCst);
        if self.asleep[w].swap(false, Relaxed) {
            self.workers.wake(w);
        }
    }

    /// Wake the dispatcher if it sleeps (after a push to a completion ring).
    fn wake_dispatcher(&self) {
        fence(Ordering::SeqCst);
        if self.dispatcher_asleep.swap(false, Relaxed) {
            let t = self.dispatcher.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(t) = &*t {
                t.unpark();
            }
        }
    }
}

/// A worker's longest park on an empty ring (the dispatcher wakes it; this is a safety net).
const PARK: Duration = Duration::from_millis(100);

/// One worker: its rings and what it works with.
pub struct Worker {
    pub id: usize,
    pub jobs: rtrb::Consumer<Job>,
    pub done: rtrb::Producer<Done>,
    pub policy: WorkPolicy,
    pub counters: Arc<WorkerCounters>,
    pub shared: Arc<Shared>,
    pub reader: PoolReader,
    pub tables: Arc<Tables>,
    pub block_size: u32,
    /// Completions since the dispatcher was last offered a wake-up.
    pub unannounced: u32,
}

/// Completions after which a busy worker offers the dispatcher a wake-up.
const ANNOUNCE_EVERY: u32 = 16;

fn ns(since: Instant) -> u64 {
    since.elapsed().as_nanos() as u64
}

impl Worker {
    /// The worker loop (runs until its ring is empty and abandoned, or the dispatcher is gone).
    pub fn run(mut self) {
        let mut busy_since: Option<Instant> = None;
        let mut idle_since = Instant::now();
        loop {
            match self.jobs.pop() {
                Ok(job) => {
                    if busy_since.is_none() {
                        self.counters.idle_ns.fetch_add(ns(idle_since), Relaxed);
                        busy_since = Some(Instant::now());
                    }
                    match job {
                        Job::Tables(t) => self.tables = t,
                        Job::Edit(e) => self.edit(&e),
                        Job::Task(task) => {
                            if !self.run_task(task) {
                                return;
                            }
                        }
                    }
                }
                Err(_) => {
                    if let Some(b) = busy_since.take() {
                        self.counters.busy_ns.fetch_add(ns(b), Relaxed);
                        idle_since = Instant::now();
                        // About to wait: the CPU time so far (one clock read per idle period).
                        self.counters
                            .cpu_ns
                            .store(netsched_sys::clock::thread_cpu_ns(), Relaxed);
                    }
                    self.unannounced = 0;
                    self.shared.wake_dispatcher();
                    if !self.wait_for_job() {
                        return;
                    }
                }
            }
        }
    }

    /// Apply a rule edit the dispatcher's copy took: it applies here too (the same rules, the
    /// same limits), so a failure means the copies differ — counted, and logged.
    fn edit(&mut self, e: &RuleEdit) {
        let tables = Arc::make_mut(&mut self.tables);
        if let Err(err) = tables.classifier.apply(e) {
            self.counters.edit_failures.fetch_add(1, Relaxed);
            tracing::error!("worker {}: a rule edit failed: {err}; reload", self.id);
        }
    }

    /// Run one task and report it; `false` when the dispatcher is gone.
    fn run_task(&mut self, task: Task) -> bool {
        if self.shared.workers.stopping.load(Relaxed) {
            return self.report(Done {
                task,
                verdict: None,
            });
        }
        let frame = Frame {
            bytes: self.reader.read(&task.frame),
            parsed: task.parsed,
            block_size: self.block_size,
        };
        let verdict = match task.bucket {
            Some(_) => {
                let (v, panicked) = work::run_packet(&frame, &self.tables, &self.policy);
                self.counters.panics.fetch_add(panicked as u64, Relaxed);
                Some(v)
            }
            None => {
                let state = &self.shared.states[task.frame.slot() as usize];
                let (out, v) = state.run(
                    self.id,
                    &self.shared.workers,
                    &frame,
                    &self.tables,
                    task.first,
                    &self.policy,
                );
                if out.waited {
                    self.counters.handoff_waits.fetch_add(1, Relaxed);
                    self.counters
                        .handoff_wait_ns
                        .fetch_add(out.wait_ns, Relaxed);
                }
                self.counters.panics.fetch_add(out.panicked as u64, Relaxed);
                v
            }
        };
        let c = &self.counters;
        c.blocks
            .fetch_add((task.last + 1 - task.first) as u64, Relaxed);
        c.tasks.fetch_add(1, Relaxed);
        c.sops.fetch_add((task.first == 0) as u64, Relaxed);
        self.report(Done { task, verdict })
    }

    /// Put a completion on the ring (never full while the dispatcher bounds what it hands
    /// out; if it is, wait for room); `false` when the dispatcher is gone.
    fn report(&mut self, mut d: Done) -> bool {
        loop {
            match self.done.push(d) {
                Ok(()) => {
                    self.unannounced += 1;
                    if self.unannounced >= ANNOUNCE_EVERY {
                        self.unannounced = 0;
                        self.shared.wake_dispatcher();
                    }
                    return true;
                }
                Err(rtrb::PushError::Full(back)) => {
                    if self.done.is_abandoned() {
                        return false;
                    }
                    d = back;
                    self.shared.wake_dispatcher();
                    std::thread::yield_now();
                }
            }
        }
    }

    /// Wait until the ring has a job; `false` once it is empty and abandoned.
    fn wait_for_job(&mut self) -> bool {
        let mut round = 0u32;
        while self.jobs.is_empty() {
            if self.jobs.is_abandoned() {
                return !self.jobs.is_empty();
            }
            round += 1;
            if round <= self.shared.workers.spins {
                std::hint::spin_loop();
            } else {
                self.shared.asleep[self.id].store(true, Relaxed);
                fence(Ordering::SeqCst);
                if self.jobs.is_empty() && !self.jobs.is_abandoned() {
                    std::thread::park_timeout(PARK);
                }
                self.shared.asleep[self.id].store(false, Relaxed);
            }
        }
        true
    }
}

//! A worker thread: takes tasks (one block, or every block of a packet) from its bounded
//! queue in order, runs them, and reports each finished task to the dispatcher.
//!
//! Busy time is the time spent running tasks (including waits for a predecessor's hand-off,
//! also counted apart, so busy − hand-off wait is the time spent working); idle time is the time blocked on an empty queue. A worker ends when its
//! queue is closed. Cost: one channel receive and one send per task. Memory: its queue.

use crate::verdict::Verdict;
use crate::work::{Packet, WorkPolicy};
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError};
use std::sync::Arc;
use std::time::Instant;

/// Work for one worker: blocks `first..=last` of a packet.
#[derive(Debug, Clone)]
pub struct Task {
    pub packet: Arc<Packet>,
    pub first: u32,
    pub last: u32,
    /// The flow bucket, for whole-packet dispatch.
    pub bucket: Option<usize>,
}

/// A finished task.
#[derive(Debug)]
pub struct Done {
    pub worker: usize,
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
            handoff_wait_ns: self.handoff_wait_ns.load(Relaxed),
            panics: self.panics.load(Relaxed),
            cpu,
        }
    }
}

fn ns(since: Instant) -> u64 {
    since.elapsed().as_nanos() as u64
}

/// The worker loop (runs until `tasks` closes or `done` is gone).
pub fn run(
    id: usize,
    tasks: Receiver<Task>,
    done: SyncSender<Done>,
    policy: WorkPolicy,
    counters: Arc<WorkerCounters>,
) {
    loop {
        let idle = Instant::now();
        let task = match tasks.try_recv() {
            Ok(t) => t,
            Err(TryRecvError::Disconnected) => return,
            Err(TryRecvError::Empty) => {
                // About to wait: the CPU time so far (one clock read per idle period, none
                // on the busy path).
                counters
                    .cpu_ns
                    .store(netsched_sys::clock::thread_cpu_ns(), Relaxed);
                let Ok(t) = tasks.recv() else {
                    return;
                };
                t
            }
        };
        counters.idle_ns.fetch_add(ns(idle), Relaxed);
        let busy = Instant::now();
        let mut verdict = None;
        for k in task.first..=task.last {
            let out = task.packet.run_block(k, &policy);
            if out.waited {
                counters.handoff_waits.fetch_add(1, Relaxed);
                counters.handoff_wait_ns.fetch_add(out.wait_ns, Relaxed);
            }
            if out.panicked {
                counters.panics.fetch_add(1, Relaxed);
            }
            verdict = verdict.or(out.verdict);
        }
        counters
            .blocks
            .fetch_add((task.last + 1 - task.first) as u64, Relaxed);
        counters.tasks.fetch_add(1, Relaxed);
        if task.first == 0 {
            counters.sops.fetch_add(1, Relaxed);
        }
        counters.busy_ns.fetch_add(ns(busy), Relaxed);
        if done
            .send(Done {
                worker: id,
                task,
                verdict,
            })
            .is_err()
        {
            return;
        }
    }
}

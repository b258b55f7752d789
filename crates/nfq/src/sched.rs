//! The daemon's view of a discipline: the core's queue disciplines behind one small enum,
//! plus the per-discipline setters the control API needs (percentile target, deadline).
//! No scheduling logic lives here — only dispatch to `netsched_core::qdisc`.

use crate::config::{Deadline, DisciplineKind};
use netsched_core::qdisc::fifo::Fifo;
use netsched_core::qdisc::percentile::{PercentileDeadline, PercentileMemory, PercentileQueue};
use netsched_core::qdisc::prio::{BandConfig, StrictPriority};
use netsched_core::qdisc::{ClassId, ClassStatus, Feedback, Packet, Qdisc, Verdict};
use netsched_core::Nanos;

/// A held request: the first packet's id; follow-up packets of the same flow wait in the
/// flow table until this one is released.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldRequest {
    pub packet_id: u32,
    pub flow: crate::engine::FlowKey,
    pub arrived: Nanos,
    /// Arrival order, to release in arrival order on stop/shutdown.
    pub seq: u64,
    pub bytes: u32,
    pub class: ClassId,
}

impl Packet for HeldRequest {
    fn len(&self) -> u32 {
        self.bytes
    }
}

/// One discipline instance.
#[derive(Debug)]
pub enum Scheduler {
    Fifo(Fifo<HeldRequest>),
    Percentile(PercentileQueue<HeldRequest>),
    Strict(StrictPriority<HeldRequest>),
}

macro_rules! each {
    ($self:expr, $q:ident => $e:expr) => {
        match $self {
            Scheduler::Fifo($q) => $e,
            Scheduler::Percentile($q) => $e,
            Scheduler::Strict($q) => $e,
        }
    };
}

impl Scheduler {
    /// Build the discipline for `classes` (percentile targets in percent) and `deadline`.
    pub fn new(
        kind: DisciplineKind,
        percentiles: &[u32],
        deadline: &Deadline,
        limit: usize,
    ) -> Result<Self, String> {
        Ok(match kind {
            DisciplineKind::Fifo => Scheduler::Fifo(Fifo::new(limit, u64::MAX)),
            DisciplineKind::Percentile => Scheduler::Percentile(PercentileQueue::new(
                percentiles,
                limit,
                deadline_config(deadline),
                PercentileMemory::Forever,
            )?),
            DisciplineKind::Strict => Scheduler::Strict(
                StrictPriority::new(&vec![
                    BandConfig::with_limits(limit, u64::MAX);
                    percentiles.len()
                ])
                .map_err(|e| e.to_string())?,
            ),
        })
    }

    pub fn enqueue(
        &mut self,
        class: ClassId,
        item: HeldRequest,
        now: Nanos,
    ) -> Verdict<HeldRequest> {
        each!(self, q => q.enqueue(class, item, now))
    }
    pub fn dequeue(&mut self, now: Nanos) -> Option<HeldRequest> {
        each!(self, q => q.dequeue(now))
    }
    pub fn reset(&mut self) -> Vec<HeldRequest> {
        each!(self, q => q.reset())
    }
    pub fn len(&self) -> usize {
        each!(self, q => q.len())
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn stats(&self) -> &netsched_core::qdisc::QdiscStats {
        each!(self, q => q.stats())
    }
    /// Tell the discipline a request completed (Percentile counts S / fail from it).
    pub fn completed(&mut self, class: ClassId, latency: Nanos, now: Nanos) {
        each!(self, q => q.feedback(Feedback::Completed { class, latency }, now))
    }
    pub fn set_percentile(&mut self, class: ClassId, p: u32) -> Result<(), String> {
        match self {
            Scheduler::Percentile(q) => q.set_percentile(class, p),
            _ => Ok(()),
        }
    }
    /// Auto modes: the discipline keeps the running mean / quantile itself.
    pub fn set_deadline(&mut self, d: &Deadline) -> Result<(), String> {
        match self {
            Scheduler::Percentile(q) => q.set_deadline(deadline_config(d)),
            _ => Ok(()),
        }
    }
    pub fn reset_counters(&mut self) {
        if let Scheduler::Percentile(q) = self {
            q.reset_counters();
        }
    }
    /// Per-class status from the discipline (Percentile: n, s, fail, p, priority...).
    pub fn class_status(&self) -> Vec<ClassStatus> {
        match self {
            Scheduler::Percentile(q) => q.class_status(),
            Scheduler::Strict(q) => q.class_status(),
            Scheduler::Fifo(_) => Vec::new(),
        }
    }
}

fn deadline_config(d: &Deadline) -> PercentileDeadline {
    match *d {
        Deadline::Fixed(ns) => PercentileDeadline::Ns(ns.max(1)),
        Deadline::Auto { .. } => PercentileDeadline::Auto,
        Deadline::AutoQuantile { .. } => PercentileDeadline::AutoQuantile,
    }
}

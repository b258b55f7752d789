//! The daemon's view of a discipline: the core's [`AnyQdisc`] (the enum every engine
//! dispatches through), plus the Percentile setters the control API needs (percentile target,
//! deadline). No scheduling logic and no dispatch of its own live here.

use crate::config::{Deadline, DisciplineKind};
use crate::packet::FiveTuple;
use netsched_core::qdisc::fifo::Fifo;
use netsched_core::qdisc::percentile::{PercentileMemory, PercentileQueue};
use netsched_core::qdisc::prio::{BandConfig, StrictPriority};
use netsched_core::qdisc::{
    AnyQdisc, ClassId, ClassStatus, Feedback, Packet, PercentileConfigError, Qdisc,
    QdiscConfigError, Verdict,
};
use netsched_core::Nanos;

/// A held request: the first packet's id; follow-up packets of the same flow wait in the
/// flow table until this one is released.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldRequest {
    pub packet_id: u32,
    pub flow: FiveTuple,
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

/// Why the discipline could not be built: the core's own error, naming the field.
#[derive(Debug, Clone, PartialEq)]
pub enum SchedulerError {
    /// The Percentile discipline's classes or deadline.
    Percentile(PercentileConfigError),
    /// Strict priority's bands.
    Bands(QdiscConfigError),
}

impl std::fmt::Display for SchedulerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SchedulerError::Percentile(e) => e.fmt(f),
            SchedulerError::Bands(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for SchedulerError {}

/// One discipline instance.
#[derive(Debug)]
pub struct Scheduler(AnyQdisc<HeldRequest>);

impl Scheduler {
    /// Build the discipline for `classes` (percentile targets in percent) and `deadline`.
    pub fn new(
        kind: DisciplineKind,
        percentiles: &[u32],
        deadline: &Deadline,
        limit: usize,
    ) -> Result<Self, SchedulerError> {
        Ok(Scheduler(match kind {
            DisciplineKind::Fifo => AnyQdisc::Fifo(Fifo::new(limit, u64::MAX)),
            DisciplineKind::Percentile => AnyQdisc::Percentile(
                PercentileQueue::new(
                    percentiles,
                    limit,
                    deadline.core(),
                    PercentileMemory::Forever,
                )
                .map_err(SchedulerError::Percentile)?,
            ),
            DisciplineKind::Strict => AnyQdisc::StrictPriority(
                StrictPriority::new(&vec![
                    BandConfig::with_limits(limit, u64::MAX);
                    percentiles.len()
                ])
                .map_err(SchedulerError::Bands)?,
            ),
        }))
    }

    pub fn enqueue(
        &mut self,
        class: ClassId,
        item: HeldRequest,
        now: Nanos,
    ) -> Verdict<HeldRequest> {
        self.0.enqueue(class, item, now)
    }
    pub fn dequeue(&mut self, now: Nanos) -> Option<HeldRequest> {
        self.0.dequeue(now)
    }
    pub fn reset(&mut self) -> Vec<HeldRequest> {
        self.0.reset()
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn stats(&self) -> &netsched_core::qdisc::QdiscStats {
        self.0.stats()
    }
    /// Tell the discipline a request completed (Percentile judges S / fail from it).
    pub fn completed(&mut self, class: ClassId, latency: Nanos, now: Nanos) {
        self.0.feedback(Feedback::Completed { class, latency }, now)
    }
    pub fn set_percentile(&mut self, class: ClassId, p: u32) -> Result<(), PercentileConfigError> {
        match &mut self.0 {
            AnyQdisc::Percentile(q) => q.set_percentile(class, p),
            _ => Ok(()),
        }
    }
    /// Auto modes: the discipline keeps the running mean / quantile itself.
    pub fn set_deadline(&mut self, d: &Deadline) -> Result<(), PercentileConfigError> {
        match &mut self.0 {
            AnyQdisc::Percentile(q) => q.set_deadline(d.core()),
            _ => Ok(()),
        }
    }
    pub fn reset_counters(&mut self) {
        if let AnyQdisc::Percentile(q) = &mut self.0 {
            q.reset_counters();
        }
    }
    /// Per class: (the thesis's priority for Percentile, queued requests). Cheap for
    /// Percentile (no allocation per class).
    pub fn class_brief(&self, classes: usize) -> Vec<(Option<f64>, u64)> {
        match &self.0 {
            AnyQdisc::Percentile(q) => (0..classes)
                .map(|i| {
                    q.class_brief(i)
                        .map(|(p, len)| (p.map(|p| p as f64), len as u64))
                        .unwrap_or((None, 0))
                })
                .collect(),
            AnyQdisc::Fifo(_) => vec![(None, 0); classes],
            q => {
                let rows = q.class_status();
                (0..classes)
                    .map(|i| {
                        let len = rows
                            .iter()
                            .find(|r| r.class == i)
                            .map(|r| r.queued_packets)
                            .unwrap_or(0);
                        (None, len)
                    })
                    .collect()
            }
        }
    }

    /// Per-class status from the discipline (Percentile: n, s, fail, p, priority...); none
    /// for FIFO (one queue, no classes).
    pub fn class_status(&self) -> Vec<ClassStatus> {
        match &self.0 {
            AnyQdisc::Fifo(_) => Vec::new(),
            q => q.class_status(),
        }
    }
}

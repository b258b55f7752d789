//! Queue disciplines: who leaves the queue next.
//!
//! Every discipline is the same small ops table, as in Linux `struct Qdisc_ops`
//! (`include/net/sch_generic.h`): [`Qdisc::enqueue`], [`Qdisc::dequeue`], [`Qdisc::peek`],
//! [`Qdisc::reset`], [`Qdisc::stats`], plus [`Qdisc::next_timer`] (smoltcp's `poll_at`): a
//! non-work-conserving discipline tells its engine when to call again.
//!
//! Rules every discipline keeps (checked by the property tests in `tests/`):
//! - it is bounded (packets and bytes); nothing is lost silently: a rejected or evicted item is
//!   handed back in the [`Verdict`] with a [`DropReason`], and counted per reason;
//! - `stats().received == stats().enqueued + stats().dropped_on_arrival()`, and
//!   `stats().enqueued == stats().dequeued + stats().evicted() + len()` (+ what `reset` returned);
//! - it takes `now` on every call and never reads a clock;
//! - the class of an item is decided by a classifier ([`crate::classify`]) and passed in; the
//!   discipline does not parse packets (ACK separation's filter reads [`Packet::ack_info`]).
//!
//! Engines dispatch through [`AnyQdisc`] (an enum, no boxed trait object per packet).

use crate::time::{Duration, Instant};
use serde::{Deserialize, Serialize};

pub mod ack;
mod any;
pub mod delay;
pub mod drr;
pub mod edf;
mod error;
pub mod fifo;
pub mod latency_quantile;
pub mod limits;
pub mod percentile;
pub mod prio;
pub mod wf2q;
pub use any::{AnyQdisc, QdiscConfig, QdiscKind};
pub use error::{IdentityError, PercentileConfigError, QdiscConfigError};

/// Index of a class (band, interface, client class) inside a discipline. Class 0 is the
/// first configured class; disciplines document whether lower means more important.
pub type ClassId = usize;

/// What a discipline needs to know about an item. Engines implement it for their packet or
/// request type (the simulator's packets, raw frames in `netsched-link`, held NFQUEUE ids...).
// `len` is a size in bytes, not a collection length: an `is_empty` would mean nothing.
#[allow(clippy::len_without_is_empty)]
pub trait Packet {
    /// Size in bytes, counted against byte limits and used by byte-fair disciplines.
    fn len(&self) -> u32;
    /// TCP ACK facts for the ACK filter of [`ack`] (None for non-TCP or unknown).
    fn ack_info(&self) -> Option<crate::wire::AckInfo> {
        None
    }
}

/// Why an item was dropped. One counter per reason in [`QdiscStats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// The queue (or the item's class queue) was at its packet limit.
    QueueFullPackets,
    /// The queue was at its byte limit.
    QueueFullBytes,
    /// The class id is not one this discipline was configured with.
    UnknownClass,
    /// A queued pure ACK was made redundant by a newer cumulative ACK of the same flow.
    AckFiltered,
    /// The item waited past its deadline and the discipline discards late items.
    DeadlineExpired,
    /// Removed by `reset` (engine shutdown) — handed back, counted here.
    Reset,
    /// Taken back by the engine with `withdraw`: the request it stands for gave up waiting
    /// (it timed out in the queue, or its client left) — handed back, counted here.
    Withdrawn,
}

impl DropReason {
    pub const ALL: [DropReason; 7] = [
        DropReason::QueueFullPackets,
        DropReason::QueueFullBytes,
        DropReason::UnknownClass,
        DropReason::AckFiltered,
        DropReason::DeadlineExpired,
        DropReason::Reset,
        DropReason::Withdrawn,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::QueueFullPackets => "queue_full_packets",
            DropReason::QueueFullBytes => "queue_full_bytes",
            DropReason::UnknownClass => "unknown_class",
            DropReason::AckFiltered => "ack_filtered",
            DropReason::DeadlineExpired => "deadline_expired",
            DropReason::Reset => "reset",
            DropReason::Withdrawn => "withdrawn",
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

/// The result of [`Qdisc::enqueue`].
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a dropped item must be accounted for by the engine"]
pub enum Verdict<T> {
    /// The item is queued.
    Queued,
    /// The new item was not queued; it is handed back.
    Dropped { item: T, reason: DropReason },
    /// The new item was queued, and an older queued item was evicted to make room or because
    /// it became redundant (ACK filter); the evicted item is handed back.
    QueuedEvicting { evicted: T, reason: DropReason },
}

impl<T> Verdict<T> {
    pub fn is_queued(&self) -> bool {
        !matches!(self, Verdict::Dropped { .. })
    }
}

/// Counters every discipline keeps. Identities (checked in tests):
/// `received == enqueued + dropped_on_arrival()`;
/// `enqueued == dequeued + evicted() + queued_packets`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QdiscStats {
    pub received: u64,
    pub enqueued: u64,
    pub dequeued: u64,
    pub dequeued_bytes: u64,
    /// New items refused at enqueue, per [`DropReason`] (indexed by `DropReason as usize`).
    pub drops_on_arrival: [u64; 7],
    /// Items removed after being queued (eviction, reset), per [`DropReason`].
    pub drops_evicted: [u64; 7],
    pub queued_packets: u64,
    pub queued_bytes: u64,
}

impl QdiscStats {
    pub fn dropped_on_arrival(&self) -> u64 {
        self.drops_on_arrival.iter().sum()
    }
    pub fn evicted(&self) -> u64 {
        self.drops_evicted.iter().sum()
    }
    pub fn dropped(&self) -> u64 {
        self.dropped_on_arrival() + self.evicted()
    }
    pub fn drops_for(&self, reason: DropReason) -> u64 {
        self.drops_on_arrival[reason.index()] + self.drops_evicted[reason.index()]
    }
    /// Book-keeping functions, so every discipline counts the same way.
    pub fn on_arrival_drop(&mut self, reason: DropReason) {
        self.received += 1;
        self.drops_on_arrival[reason.index()] += 1;
    }
    pub fn on_enqueue(&mut self, bytes: u32) {
        self.received += 1;
        self.enqueued += 1;
        self.queued_packets += 1;
        self.queued_bytes += bytes as u64;
    }
    pub fn on_dequeue(&mut self, bytes: u32) {
        self.dequeued += 1;
        self.dequeued_bytes += bytes as u64;
        self.queued_packets -= 1;
        self.queued_bytes -= bytes as u64;
    }
    pub fn on_evict(&mut self, bytes: u32, reason: DropReason) {
        self.drops_evicted[reason.index()] += 1;
        self.queued_packets -= 1;
        self.queued_bytes -= bytes as u64;
    }
    /// The identities above; `Err` names the one that fails.
    pub fn check_identities(&self) -> Result<(), IdentityError> {
        if self.received != self.enqueued + self.dropped_on_arrival() {
            return Err(IdentityError::Arrivals {
                received: self.received,
                enqueued: self.enqueued,
                dropped_on_arrival: self.dropped_on_arrival(),
            });
        }
        if self.enqueued != self.dequeued + self.evicted() + self.queued_packets {
            return Err(IdentityError::Departures {
                enqueued: self.enqueued,
                dequeued: self.dequeued,
                evicted: self.evicted(),
                queued: self.queued_packets,
            });
        }
        Ok(())
    }
}

/// Feedback an engine reports back to a discipline that learns from outcomes (Percentile:
/// did the request of this class complete within the deadline?). Others ignore it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feedback {
    /// A request of `class` completed; `latency` is its measured response time.
    Completed { class: ClassId, latency: Duration },
}

/// The ops table of a queue discipline.
pub trait Qdisc<T: Packet> {
    /// Offer `item` of `class` at time `now`.
    fn enqueue(&mut self, class: ClassId, item: T, now: Instant) -> Verdict<T>;
    /// Take the next item to send at `now`, if the discipline releases one now.
    fn dequeue(&mut self, now: Instant) -> Option<T>;
    /// The item `dequeue(now)` would return, without taking it.
    fn peek(&mut self, now: Instant) -> Option<&T>;
    /// Remove everything queued (engine shutdown) and hand it back; counted as `Reset`.
    fn reset(&mut self) -> Vec<T>;
    fn stats(&self) -> &QdiscStats;
    /// Items queued now.
    fn len(&self) -> usize {
        self.stats().queued_packets as usize
    }
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// For non-work-conserving disciplines: the earliest time at which `dequeue` may return
    /// an item although it returns `None` now. Work-conserving disciplines return `None`.
    fn next_timer(&self, _now: Instant) -> Option<Instant> {
        None
    }
    /// Outcome feedback (see [`Feedback`]); ignored by most disciplines.
    fn feedback(&mut self, _fb: Feedback, _now: Instant) {}
}

/// Per-class snapshot, for status tables and reports (queue length, and for Percentile the
/// attainment figures). Disciplines without classes report one entry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClassStatus {
    pub class: ClassId,
    pub queued_packets: u64,
    pub queued_bytes: u64,
    pub dequeued: u64,
    pub dropped: u64,
    /// Discipline-specific figures (Percentile: n, s, fail, p, priority, attainment).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra: Vec<(String, f64)>,
}

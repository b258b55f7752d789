//! A bounded trace of the guest ports' frames: for each frame read from a guest port, when
//! it was read and whether its vif queue took it or dropped it; for each frame the budget
//! moved to the uplink, when and from which port. Off by default; a run that wants to inspect
//! the arrival process the switch really saw (the real vm-delay run) turns it on with
//! [`crate::Switch::enable_trace`] or [`crate::switch::spawn_in_netns_traced`].
//!
//! Bounded: the entries are allocated once, when the trace is enabled (16 bytes each); past
//! `capacity` nothing more is recorded and [`Trace::overflow`] counts what was not. Recording
//! is one push into that vector on the packet thread (no allocation, no lock).

use netsched_core::Nanos;
use serde::{Deserialize, Serialize};

/// Largest trace the switch accepts, entries (64 MiB).
pub const MAX_TRACE: usize = 4 << 20;

/// What happened to a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TraceKind {
    /// Read from the guest port and taken by its vif queue.
    Queued,
    /// Read from the guest port and dropped: its vif queue was full.
    Dropped,
    /// Taken from the discipline by the budget, on its way to the uplink.
    Sent,
}

/// One frame's event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceEvent {
    /// Nanoseconds since the switch started forwarding (the budget's periods count from
    /// then too). Frames read by one `recvmmsg` share the time of the loop turn that read them.
    pub t: Nanos,
    /// Guest port (index in the configuration).
    pub port: u32,
    pub kind: TraceKind,
}

/// The trace: events in the order the packet thread saw them (time never decreases).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Trace {
    events: Vec<TraceEvent>,
    capacity: usize,
    /// Events not recorded because the trace was full.
    overflow: u64,
    /// `CLOCK_MONOTONIC` (ns) when the switch started forwarding: the time every event counts
    /// from, so that another thread's timestamps can be put on the trace's clock.
    #[serde(default)]
    origin: Nanos,
}

impl Trace {
    /// A trace of at most `capacity` events (clamped to [`MAX_TRACE`]), allocated now.
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.min(MAX_TRACE);
        Self {
            events: Vec::with_capacity(capacity),
            capacity,
            overflow: 0,
            origin: 0,
        }
    }

    pub(crate) fn set_origin(&mut self, t0: Nanos) {
        self.origin = t0;
    }

    /// `CLOCK_MONOTONIC` (ns, `netsched_sys::now_ns`) of the trace's time 0: when the
    /// switch started forwarding (0 before it did).
    pub fn origin(&self) -> Nanos {
        self.origin
    }

    #[inline]
    pub(crate) fn record(&mut self, t: Nanos, port: u32, kind: TraceKind) {
        if self.events.len() < self.capacity {
            self.events.push(TraceEvent { t, port, kind });
        } else {
            self.overflow += 1;
        }
    }

    pub fn events(&self) -> &[TraceEvent] {
        &self.events
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Events that did not fit.
    pub fn overflow(&self) -> u64 {
        self.overflow
    }

    /// Frames read from guest ports, `(time, port)`, in time order (queued and dropped alike).
    pub fn arrivals(&self) -> Vec<(Nanos, usize)> {
        self.events
            .iter()
            .filter(|e| e.kind != TraceKind::Sent)
            .map(|e| (e.t, e.port as usize))
            .collect()
    }

    /// Per port: (read, dropped, sent) in the trace.
    pub fn per_port(&self, ports: usize) -> Vec<(u64, u64, u64)> {
        let mut v = vec![(0, 0, 0); ports];
        for e in &self.events {
            if let Some(c) = v.get_mut(e.port as usize) {
                match e.kind {
                    TraceKind::Queued => c.0 += 1,
                    TraceKind::Dropped => {
                        c.0 += 1;
                        c.1 += 1
                    }
                    TraceKind::Sent => c.2 += 1,
                }
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trace_is_bounded_and_counts_what_did_not_fit() {
        let mut t = Trace::new(3);
        for i in 0..5 {
            t.record(i, (i % 2) as u32, TraceKind::Queued);
        }
        t.record(9, 0, TraceKind::Dropped);
        assert_eq!(t.events().len(), 3);
        assert_eq!(t.overflow(), 3);
        assert_eq!(t.events.capacity(), 3, "allocated once");
        assert_eq!(t.arrivals(), vec![(0, 0), (1, 1), (2, 0)]);
        assert_eq!(t.per_port(2), vec![(2, 0, 0), (1, 0, 0)]);
    }
}

//! One direction of an emulated link, without sockets: a core discipline fed by a classifier,
//! a transmitter that serialises frames at `rate` (frame bytes × 8 / rate), and a propagation
//! delay line. Frames live in the direction's [`FramePool`]; the discipline and the delay line
//! hold small [`Frame`] handles (slot, length, ACK facts). Time is a parameter (`now`).
//!
//! Link model: when the link is free (`link_free_at ≤ now`) the discipline's `dequeue(now)`
//! gives the next frame; it leaves at `start + len×8/rate + delay`, `start` being when the
//! previous frame finished (a wake-up up to [`CATCH_UP`] late is caught up, a longer gap means
//! the link was idle). The delay line is a bounded FIFO of (due time, frame), in order since the
//! delay is constant.
//!
//! Accounting: every frame received is sent, dropped for a counted reason, or still held —
//! `rx == tx + drops + queued + in flight` ([`DirStats::check_accounting`]).

use crate::engine_error::EngineError;
use crate::qdisc_spec::{self, ClassMode};
use netsched_core::qdisc::{AnyQdisc, ClassId, DropReason, Packet, Qdisc, Verdict};
use netsched_core::wire::{self, AckInfo};
use netsched_core::{Nanos, SEC};
use netsched_sys::port::{FramePool, Rx, BATCH};
use serde::Serialize;
use std::collections::VecDeque;

/// A late wake-up up to this long is caught up (keeps the average rate).
pub const CATCH_UP: Nanos = 200_000;

/// A frame held by the engine: its pool slot and what the discipline needs.
#[derive(Debug, Clone, Copy)]
pub struct Frame {
    slot: u32,
    len: u32,
    ack: Option<AckInfo>,
}

impl Packet for Frame {
    fn len(&self) -> u32 {
        self.len
    }
    fn ack_info(&self) -> Option<AckInfo> {
        self.ack
    }
}

/// One direction of the emulated link.
#[derive(Debug, Clone)]
pub struct DirConfig {
    /// Bits per second; None = unlimited.
    pub rate_bps: Option<u64>,
    pub delay: Nanos,
    pub qdisc: qdisc_spec::QdiscSpec,
}

/// Counters of one direction, reported as JSON.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DirStats {
    pub rx_frames: u64,
    pub rx_bytes: u64,
    pub tx_frames: u64,
    pub tx_bytes: u64,
    /// Pure TCP ACKs classified (ACK class), when the discipline separates them.
    pub acks_classified: u64,
    /// Drops per reason: the discipline's reasons plus the engine's own.
    pub drops: std::collections::BTreeMap<String, u64>,
    /// Frames the kernel dropped because the socket queue was full (`PACKET_STATISTICS`).
    pub kernel_socket_drops: u64,
    pub queued_frames: u64,
    pub queued_bytes: u64,
    pub in_flight_frames: u64,
    pub max_delay_line: u64,
    /// Frames held (queued + in flight) when the engine was stopped; they are then counted as
    /// `reset` / `shutdown_in_flight` drops.
    pub held_at_stop: u64,
}

impl DirStats {
    /// Every frame received is sent, dropped (for a counted reason) or still held:
    /// `rx == tx + drops + queued + in flight`. `Err` shows the numbers.
    pub fn check_accounting(&self) -> Result<(), AccountingError> {
        let drops: u64 = self.drops.values().sum();
        let held = self.queued_frames + self.in_flight_frames;
        if self.rx_frames == self.tx_frames + drops + held {
            Ok(())
        } else {
            Err(AccountingError {
                rx: self.rx_frames,
                tx: self.tx_frames,
                drops,
                held,
            })
        }
    }
}

/// A direction whose frames do not add up: `rx != tx + drops + held`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccountingError {
    pub rx: u64,
    pub tx: u64,
    pub drops: u64,
    /// Queued and in flight.
    pub held: u64,
}

impl std::fmt::Display for AccountingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rx {} != tx {} + drops {} + held {}",
            self.rx, self.tx, self.drops, self.held
        )
    }
}

impl std::error::Error for AccountingError {}

/// The engine's own drop reasons (the discipline's are [`DropReason`]).
#[derive(Debug, Clone, Copy)]
enum OwnDrop {
    DelayLineFull = 0,
    Oversize = 1,
    SendError = 2,
    ShutdownInFlight = 3,
}

const OWN_DROPS: [&str; 4] = [
    "delay_line_full",
    "oversize",
    "send_error",
    "shutdown_in_flight",
];

/// One direction: discipline, transmitter, delay line, and the pool its frames live in.
pub struct LinkEmulator {
    pub pool: FramePool,
    qdisc: AnyQdisc<Frame>,
    classify: ClassMode,
    rate_bps: Option<u64>,
    delay: Nanos,
    link_free_at: Nanos,
    delay_line: VecDeque<(Nanos, Frame)>,
    delay_cap: usize,
    st: DirStats,
    own_drops: [u64; 4],
}

impl LinkEmulator {
    pub fn new(cfg: &DirConfig, pool_slots: usize, delay_cap: usize) -> Result<Self, EngineError> {
        Ok(Self {
            pool: FramePool::new(pool_slots),
            qdisc: cfg.qdisc.config.build().map_err(EngineError::Qdisc)?,
            classify: cfg.qdisc.classify,
            rate_bps: cfg.rate_bps,
            delay: cfg.delay,
            link_free_at: 0,
            delay_line: VecDeque::with_capacity(delay_cap.min(65536)),
            delay_cap,
            st: DirStats::default(),
            own_drops: [0; 4],
        })
    }

    fn drop_own(&mut self, why: OwnDrop, slot: u32) {
        self.own_drops[why as usize] += 1;
        self.pool.release(slot);
    }

    /// A frame arrived (from [`netsched_sys::Port::recv`]): count, classify, enqueue.
    pub fn arrive(&mut self, rx: Rx, now: Nanos) {
        match rx {
            Rx::Oversize { len } => {
                self.st.rx_frames += 1;
                self.st.rx_bytes += len as u64;
                self.own_drops[OwnDrop::Oversize as usize] += 1;
            }
            Rx::Frame { slot, len } => {
                self.st.rx_frames += 1;
                self.st.rx_bytes += len as u64;
                let mut frame = Frame {
                    slot,
                    len,
                    ack: None,
                };
                let class: ClassId = match self.classify {
                    ClassMode::Single => 0,
                    ClassMode::PureAck => {
                        let data = self.pool.data(slot, len);
                        frame.ack = wire::ethernet_payload(data).ok().and_then(wire::ack_info);
                        let c = qdisc_spec::class_of(data);
                        if c == qdisc_spec::ACK_CLASS {
                            self.st.acks_classified += 1;
                        }
                        c
                    }
                };
                match self.qdisc.enqueue(class, frame, now) {
                    Verdict::Queued => {}
                    Verdict::Dropped { item, .. } => self.pool.release(item.slot),
                    Verdict::QueuedEvicting { evicted, .. } => self.pool.release(evicted.slot),
                }
            }
        }
    }

    /// Move frames from the discipline onto the delay line while the link is free.
    pub fn transmit(&mut self, now: Nanos) {
        loop {
            if self.rate_bps.is_some() && self.link_free_at > now {
                return;
            }
            let frame = self.qdisc.dequeue(now);
            // Items a discipline discards while choosing (EDF's expired ones): counted by the
            // discipline, their slots come back here.
            for (f, _) in self.qdisc.take_evicted() {
                self.pool.release(f.slot);
            }
            let Some(frame) = frame else {
                return;
            };
            let due = match self.rate_bps {
                None => now + self.delay,
                Some(rate) => {
                    let start = if self.link_free_at + CATCH_UP >= now {
                        self.link_free_at
                    } else {
                        now
                    };
                    let tx_time = frame.len as u64 * 8 * SEC / rate;
                    self.link_free_at = start + tx_time;
                    self.link_free_at + self.delay
                }
            };
            if self.delay_line.len() >= self.delay_cap {
                self.drop_own(OwnDrop::DelayLineFull, frame.slot);
                continue;
            }
            self.delay_line.push_back((due, frame));
            self.st.max_delay_line = self.st.max_delay_line.max(self.delay_line.len() as u64);
        }
    }

    /// The frames due at `now`, oldest first, as `(slot, len)` (at most [`BATCH`]).
    pub fn due(&self, now: Nanos, out: &mut [(u32, u32); BATCH]) -> usize {
        let mut n = 0;
        for (due, f) in self.delay_line.iter().take(BATCH) {
            if *due > now {
                break;
            }
            out[n] = (f.slot, f.len);
            n += 1;
        }
        n
    }

    /// The first `n` due frames left on the wire.
    pub fn sent(&mut self, n: usize) {
        for _ in 0..n {
            let Some((_, f)) = self.delay_line.pop_front() else {
                return;
            };
            self.st.tx_frames += 1;
            self.st.tx_bytes += f.len as u64;
            self.pool.release(f.slot);
        }
    }

    /// Sending the first due frame failed for good: drop it (counted), so the loop progresses.
    pub fn send_failed(&mut self) {
        if let Some((_, f)) = self.delay_line.pop_front() {
            self.drop_own(OwnDrop::SendError, f.slot);
        }
    }

    /// When this direction needs the loop again (None = only on input).
    pub fn next_wake(&self, now: Nanos) -> Option<Nanos> {
        let mut t = self.delay_line.front().map(|(d, _)| *d);
        if !self.qdisc.is_empty() {
            let q = match self.rate_bps {
                Some(_) => self.link_free_at.max(now),
                None => now,
            };
            t = Some(t.map_or(q, |x| x.min(q)));
        }
        if let Some(q) = self.qdisc.next_timer(now) {
            t = Some(t.map_or(q, |x| x.min(q)));
        }
        t
    }

    /// Add kernel socket drops (counted by the receiving port) to this direction.
    pub fn add_kernel_drops(&mut self, n: u64) {
        self.st.kernel_socket_drops += n;
    }

    /// The counters now.
    pub fn stats(&self) -> DirStats {
        let qs = self.qdisc.stats();
        let mut drops = std::collections::BTreeMap::new();
        for r in DropReason::ALL {
            let n = qs.drops_for(r);
            if n > 0 {
                drops.insert(r.as_str().to_string(), n);
            }
        }
        for (i, name) in OWN_DROPS.iter().enumerate() {
            if self.own_drops[i] > 0 {
                drops.insert(name.to_string(), self.own_drops[i]);
            }
        }
        let mut s = self.st.clone();
        s.drops = drops;
        s.queued_frames = qs.queued_packets;
        s.queued_bytes = qs.queued_bytes;
        s.in_flight_frames = self.delay_line.len() as u64;
        s
    }

    /// Shutdown: hand back everything held, counted (`reset`, `shutdown_in_flight`).
    pub fn shutdown(&mut self) {
        self.st.held_at_stop = self.qdisc.len() as u64 + self.delay_line.len() as u64;
        for f in self.qdisc.reset() {
            self.pool.release(f.slot);
        }
        while let Some((_, f)) = self.delay_line.pop_front() {
            self.drop_own(OwnDrop::ShutdownInFlight, f.slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qdisc_spec::parse_qdisc;

    fn link(rate: Option<u64>, delay: Nanos, q: &str) -> LinkEmulator {
        let cfg = DirConfig {
            rate_bps: rate,
            delay,
            qdisc: parse_qdisc(q).unwrap(),
        };
        LinkEmulator::new(&cfg, 64, 8).unwrap()
    }

    fn arrive(l: &mut LinkEmulator, len: u32, now: Nanos) {
        let slot = l.pool.alloc().unwrap();
        l.arrive(Rx::Frame { slot, len }, now);
    }

    #[test]
    fn frames_leave_after_serialisation_plus_delay() {
        // 1000 bytes at 8 Mbit/s = 1 ms on the wire, plus 10 ms propagation.
        let mut l = link(Some(8_000_000), 10_000_000, "fifo:10");
        arrive(&mut l, 1000, 0);
        arrive(&mut l, 1000, 0);
        l.transmit(0);
        let mut out = [(0, 0); BATCH];
        assert_eq!(l.due(10_999_999, &mut out), 0);
        assert_eq!(l.due(11_000_000, &mut out), 1);
        // The second waits for the link: it starts at 1 ms.
        l.transmit(1_000_000);
        assert_eq!(l.due(12_000_000, &mut out), 2);
        l.sent(2);
        let s = l.stats();
        assert_eq!((s.rx_frames, s.tx_frames), (2, 2));
        s.check_accounting().unwrap();
        assert_eq!(l.pool.free_slots(), 64);
    }

    #[test]
    fn every_frame_is_accounted_for_with_a_reason() {
        // Queue of 2, delay line of 8, unlimited rate: 20 arrivals, some dropped at the queue,
        // some at the delay line, some oversize, the rest held at shutdown.
        let mut l = link(None, 1_000_000, "fifo:2");
        for i in 0..20u64 {
            arrive(&mut l, 100, i);
            if i % 3 == 0 {
                l.transmit(i);
            }
        }
        l.arrive(Rx::Oversize { len: 9000 }, 21);
        let mut out = [(0, 0); BATCH];
        let n = l.due(1_000_003, &mut out);
        l.sent(n.min(1));
        l.send_failed();
        l.stats().check_accounting().unwrap();
        l.shutdown();
        let s = l.stats();
        s.check_accounting().unwrap();
        assert!(s.drops["queue_full_packets"] > 0, "{s:?}");
        assert_eq!(s.drops["oversize"], 1);
        assert_eq!(s.drops["send_error"], 1);
        assert_eq!(s.queued_frames + s.in_flight_frames, 0);
        assert_eq!(l.pool.free_slots(), 64, "a slot leaked");
    }
}

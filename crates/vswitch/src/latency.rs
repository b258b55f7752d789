//! Where a frame's time goes inside the switch (`--trace-latency`; off by default): from the
//! kernel writing it into the port's receive ring to the system call that passed it on,
//! cut into stages at timestamps taken on the packet path.
//!
//! Guest → uplink:
//! 1. `up_wait`: the kernel's receive stamp ([`netsched_sys::port::FramePort::rx_stamp`]) →
//!    the loop turn that reads it begins (its `epoll_pwait2` returned). When the thread slept
//!    this is its wake-up, counted apart in `up_wait_slept`; when it was awake (polling, or
//!    busy with the previous turn), `up_wait_awake`;
//! 2. `up_read`: turn start → the frame copied out of the ring (the batch's read);
//! 3. `up_queue`: read → taken from the discipline into the uplink's send batch (the
//!    discipline's wait and the forwarding budget's);
//! 4. `up_send`: taken → the uplink's `sendmmsg` returned (the kernel forwards to the peer
//!    inside that call on veth);
//! - `up_total`: kernel stamp → `sendmmsg` returned.
//!
//! Uplink → guest: `down_wait` (kernel stamp → the start of the turn that reads it, 0 when
//! the frame came in during that turn, as a reply often does during the uplink's send),
//! `down_read` (→ copied out of the ring), `down_deliver` (→ the guest port's send returned),
//! `down_total`.
//!
//! The stamps are `CLOCK_REALTIME` (the ring's clock; [`netsched_sys::clock::realtime_ns`]).
//! Only the ring backends (`tpacket`, `tpacket_v3`) carry a receive stamp: on `xdp` and
//! `packet` the `*_wait` stages and the totals stay empty and the rest is still measured.
//!
//! Memory: one histogram per stage of [`BUCKETS`] one-microsecond buckets (8 bytes each,
//! about 16 KiB per stage, 200 KiB in all) and 24 bytes per pool slot, allocated when
//! tracing is turned on; fixed afterwards, however long the run. Cost when on: one
//! `CLOCK_REALTIME` read (vDSO) per loop turn, per read batch, per send batch and per
//! frame taken from the discipline (`taken`), and a few bucket increments per frame; off, one
//! branch per batch and per frame taken.

use serde::Serialize;

/// One-microsecond buckets per histogram; longer times land in the last one (and in `max`).
pub const BUCKETS: usize = 2048;

/// The stages, in the order of [`LatencyReport::stages`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    UpWaitSlept,
    UpWaitAwake,
    UpRead,
    UpQueue,
    UpSend,
    UpTotal,
    DownWait,
    DownRead,
    DownDeliver,
    DownTotal,
}

impl Stage {
    pub const ALL: [Stage; 10] = [
        Stage::UpWaitSlept,
        Stage::UpWaitAwake,
        Stage::UpRead,
        Stage::UpQueue,
        Stage::UpSend,
        Stage::UpTotal,
        Stage::DownWait,
        Stage::DownRead,
        Stage::DownDeliver,
        Stage::DownTotal,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Stage::UpWaitSlept => "up_wait_slept",
            Stage::UpWaitAwake => "up_wait_awake",
            Stage::UpRead => "up_read",
            Stage::UpQueue => "up_queue",
            Stage::UpSend => "up_send",
            Stage::UpTotal => "up_total",
            Stage::DownWait => "down_wait",
            Stage::DownRead => "down_read",
            Stage::DownDeliver => "down_deliver",
            Stage::DownTotal => "down_total",
        }
    }
}

/// A histogram of one stage: counts per microsecond, and the longest time seen.
#[derive(Debug, Clone)]
struct Histogram {
    buckets: Box<[u64]>,
    count: u64,
    max_ns: u64,
}

impl Histogram {
    fn new() -> Self {
        Self {
            buckets: vec![0; BUCKETS].into_boxed_slice(),
            count: 0,
            max_ns: 0,
        }
    }

    #[inline]
    fn add(&mut self, ns: u64) {
        let b = ((ns / 1000) as usize).min(BUCKETS - 1);
        self.buckets[b] += 1;
        self.count += 1;
        self.max_ns = self.max_ns.max(ns);
    }

    /// The upper edge (ns) of the bucket holding quantile `q` (0..=1); `None` when empty.
    fn quantile_ns(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (b, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(if b == BUCKETS - 1 {
                    self.max_ns
                } else {
                    ((b as u64 + 1) * 1000).min(self.max_ns)
                });
            }
        }
        Some(self.max_ns)
    }
}

/// One stage's figures: how many frames, and percentiles to the microsecond (the upper edge
/// of the bucket, capped at the longest time seen).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StageReport {
    pub stage: &'static str,
    pub count: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

/// Every stage, in [`Stage::ALL`]'s order (`--stats` lines, `ctl show --json`, the final line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LatencyReport {
    pub stages: Vec<StageReport>,
    /// Frames from the guests, and from the uplink, with no usable kernel stamp: stamped
    /// before the switch began forwarding (they waited for the switch to exist), or read on a
    /// backend without stamps. They have no wait and no total; every other stage has them.
    pub up_unstamped: u64,
    pub down_unstamped: u64,
}

impl LatencyReport {
    pub fn stage(&self, name: &str) -> Option<&StageReport> {
        self.stages.iter().find(|s| s.stage == name)
    }
}

/// The times of the frame in one pool slot (realtime ns; 0 = unknown).
#[derive(Debug, Clone, Copy, Default)]
struct SlotTimes {
    kernel: u64,
    read: u64,
    taken: u64,
}

/// The packet thread's latency accounting.
#[derive(Debug)]
pub struct LatencyTrace {
    hist: Vec<Histogram>,
    slots: Box<[SlotTimes]>,
    /// Start of the current turn (realtime ns), and whether the thread slept before it.
    turn: u64,
    slept: bool,
    /// When the switch began forwarding (realtime): frames the kernel stamped before it
    /// waited for the switch to exist, not for its thread, and get no wait or total.
    origin: u64,
    up_unstamped: u64,
    down_unstamped: u64,
}

impl LatencyTrace {
    /// For a pool of `slots` slots.
    pub fn new(slots: usize) -> Self {
        Self {
            hist: Stage::ALL.iter().map(|_| Histogram::new()).collect(),
            slots: vec![SlotTimes::default(); slots].into_boxed_slice(),
            turn: 0,
            slept: false,
            origin: 0,
            up_unstamped: 0,
            down_unstamped: 0,
        }
    }

    /// The switch begins forwarding at `now` (realtime).
    pub fn start(&mut self, now: u64) {
        self.origin = now;
    }

    #[inline]
    fn add(&mut self, stage: Stage, ns: u64) {
        self.hist[stage as usize].add(ns);
    }

    /// A loop turn begins at `now` (realtime), after a blocking wait (`slept`) or not.
    #[inline]
    pub fn turn(&mut self, now: u64, slept: bool) {
        self.turn = now;
        self.slept = slept;
    }

    /// A frame from a guest port, stamped `kernel` by the ring (if it has stamps), is in
    /// `slot` since `read`.
    #[inline]
    pub fn guest_read(&mut self, slot: u32, kernel: Option<u64>, read: u64) {
        let kernel = kernel.filter(|&k| k >= self.origin).unwrap_or(0);
        if kernel != 0 {
            let wait = self.turn.saturating_sub(kernel);
            let stage = if self.slept {
                Stage::UpWaitSlept
            } else {
                Stage::UpWaitAwake
            };
            self.add(stage, wait);
        } else {
            self.up_unstamped += 1;
        }
        self.add(Stage::UpRead, read.saturating_sub(self.turn));
        if let Some(s) = self.slots.get_mut(slot as usize) {
            *s = SlotTimes {
                kernel,
                read,
                taken: 0,
            };
        }
    }

    /// The frame in `slot` was taken from the discipline at `now`.
    #[inline]
    pub fn taken(&mut self, slot: u32, now: u64) {
        let Some(s) = self.slots.get_mut(slot as usize) else {
            return;
        };
        s.taken = now;
        let read = s.read;
        self.add(Stage::UpQueue, now.saturating_sub(read));
    }

    /// The frame in `slot` left on the uplink (its `sendmmsg` returned at `now`).
    #[inline]
    pub fn sent(&mut self, slot: u32, now: u64) {
        let Some(&s) = self.slots.get(slot as usize) else {
            return;
        };
        self.add(Stage::UpSend, now.saturating_sub(s.taken));
        if s.kernel != 0 {
            self.add(Stage::UpTotal, now.saturating_sub(s.kernel));
        }
    }

    /// A frame from the uplink stamped `kernel` was read at `read` and handed to the guest
    /// port(s) by `delivered`.
    #[inline]
    pub fn uplink_frame(&mut self, kernel: Option<u64>, read: u64, delivered: u64) {
        if let Some(k) = kernel.filter(|&k| k != 0 && k >= self.origin) {
            self.add(Stage::DownWait, self.turn.saturating_sub(k));
            self.add(Stage::DownTotal, delivered.saturating_sub(k));
            self.add(Stage::DownRead, read.saturating_sub(self.turn.max(k)));
        } else {
            self.down_unstamped += 1;
            self.add(Stage::DownRead, read.saturating_sub(self.turn));
        }
        self.add(Stage::DownDeliver, delivered.saturating_sub(read));
    }

    /// Every stage's figures so far.
    pub fn report(&self) -> LatencyReport {
        LatencyReport {
            stages: Stage::ALL
                .iter()
                .map(|&st| {
                    let h = &self.hist[st as usize];
                    let q = |x| h.quantile_ns(x).unwrap_or(0);
                    StageReport {
                        stage: st.name(),
                        count: h.count,
                        p50_ns: q(0.50),
                        p90_ns: q(0.90),
                        p99_ns: q(0.99),
                        max_ns: h.max_ns,
                    }
                })
                .collect(),
            up_unstamped: self.up_unstamped,
            down_unstamped: self.down_unstamped,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_the_bucket_edges_capped_at_the_longest() {
        let mut h = Histogram::new();
        for us in 1..=100u64 {
            h.add(us * 1000 + 500);
        }
        // 100 values 1.5 .. 100.5 µs: the 50th is 50.5 µs, in bucket [50, 51) µs.
        assert_eq!(h.quantile_ns(0.5), Some(51_000));
        assert_eq!(h.quantile_ns(0.99), Some(100_000));
        assert_eq!(h.quantile_ns(1.0), Some(100_500));
        h.add(10_000_000_000);
        assert_eq!(h.quantile_ns(1.0), Some(10_000_000_000));
        assert_eq!(Histogram::new().quantile_ns(0.5), None);
    }

    #[test]
    fn a_frame_is_cut_into_its_stages() {
        let mut t = LatencyTrace::new(4);
        t.turn(1_100_000, true);
        t.guest_read(2, Some(1_000_000), 1_103_000);
        t.taken(2, 1_110_000);
        t.sent(2, 1_130_000);
        let r = t.report();
        let p50 = |s: &str| r.stage(s).unwrap().p50_ns;
        // One value per stage: the bucket's edge is capped at it.
        assert_eq!(p50("up_wait_slept"), 100_000);
        assert_eq!(r.stage("up_wait_awake").unwrap().count, 0);
        assert_eq!(p50("up_read"), 3_000);
        assert_eq!(p50("up_queue"), 7_000);
        assert_eq!(p50("up_send"), 20_000);
        assert_eq!(p50("up_total"), 130_000);
        // A reply that came in during the turn waited 0 for it.
        t.uplink_frame(Some(1_120_000), 1_125_000, 1_140_000);
        let r = t.report();
        assert_eq!(r.stage("down_wait").unwrap().p50_ns, 0);
        assert_eq!(r.stage("down_read").unwrap().p50_ns, 5_000);
        assert_eq!(r.stage("down_deliver").unwrap().p50_ns, 15_000);
        assert_eq!(r.stage("down_total").unwrap().p50_ns, 20_000);
    }

    #[test]
    fn frames_stamped_before_the_start_get_no_wait() {
        let mut t = LatencyTrace::new(1);
        t.start(5_000);
        t.turn(6_000, false);
        t.guest_read(0, Some(4_000), 7_000);
        t.uplink_frame(Some(4_500), 7_000, 8_000);
        let r = t.report();
        for s in ["up_wait_slept", "up_wait_awake", "down_wait", "down_total"] {
            assert_eq!(r.stage(s).unwrap().count, 0, "{s}");
        }
        assert_eq!(r.stage("up_read").unwrap().count, 1);
        assert_eq!((r.up_unstamped, r.down_unstamped), (1, 1));
    }

    #[test]
    fn without_ring_stamps_the_waits_stay_empty() {
        let mut t = LatencyTrace::new(1);
        t.turn(1_000, false);
        t.guest_read(0, None, 2_000);
        t.taken(0, 3_000);
        t.sent(0, 4_000);
        t.uplink_frame(None, 5_000, 6_000);
        let r = t.report();
        for s in [
            "up_wait_slept",
            "up_wait_awake",
            "up_total",
            "down_wait",
            "down_total",
        ] {
            assert_eq!(r.stage(s).unwrap().count, 0, "{s}");
        }
        for s in [
            "up_read",
            "up_queue",
            "up_send",
            "down_read",
            "down_deliver",
        ] {
            assert_eq!(r.stage(s).unwrap().count, 1, "{s}");
        }
        // Out-of-range slots are ignored, not a panic.
        t.taken(9, 1);
        t.sent(9, 1);
    }
}

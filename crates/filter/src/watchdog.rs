//! The packet thread's watchdog: the daemon's main thread answers SIGTERM/Ctrl-C and watches
//! the packet thread whatever it does; the control socket and `/metrics` are served by their
//! own threads and, while the packet thread is stalled, answer from its last published counters.
//!
//! - **Heartbeat**: the packet thread bumps [`Health::beat`] once per loop iteration (and per
//!   drain step) and marks the stretches where it waits for traffic as idle
//!   ([`Health::set_idle`]; such a wait is bounded, 10 ms). Cost on the packet path: one
//!   relaxed atomic add per iteration, two stores around an idle wait.
//! - **Stall**: the [`Watchdog`], checked every [`TICK`] by the main thread, calls the packet
//!   thread stalled when the heartbeat has not moved for [`STALL`] while it is not idle. A stall
//!   is logged (error) and counted once (`packet_thread_stalls` in the stats line and `show`,
//!   `netsched_filter_packet_thread_stalls_total`); a heartbeat that moves again ends it (logged).
//! - **Fail safe**: after SIGTERM/Ctrl-C the packet thread drains and stops on its own (up to
//!   `engine::DRAIN`); if it is stalled, or has not stopped within [`STOP_BOUND`], the main
//!   thread logs an error, removes the control socket, and the process exits non-zero without
//!   waiting for it. So a signal ends the process within `STALL + TICK` (plus the cleanup) of
//!   the last heartbeat, and within `STOP_BOUND` in any case.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A packet thread whose heartbeat has not moved this long (while not idle) is stalled.
pub const STALL: Duration = Duration::from_millis(500);
/// How often the main thread checks the heartbeat and the signal flag.
pub const TICK: Duration = Duration::from_millis(20);
/// Longest wait for a packet thread that still beats to drain and stop after a signal.
pub const STOP_BOUND: Duration = Duration::from_secs(5);

/// Stalls detected in this process (for `/metrics`, read at scrape time).
static STALLS: AtomicU64 = AtomicU64::new(0);

/// Stalls of the packet thread detected in this process.
pub fn stalls_total() -> u64 {
    STALLS.load(Ordering::Relaxed)
}

/// What the packet thread shows of its progress, and what the watchdog concluded.
#[derive(Debug, Default)]
pub struct Health {
    beats: AtomicU64,
    idle: AtomicBool,
    stalls: AtomicU64,
    stalled: AtomicBool,
}

impl Health {
    /// One step of progress (a loop iteration of the packet thread).
    #[inline]
    pub fn beat(&self) {
        self.beats.fetch_add(1, Ordering::Relaxed);
    }

    /// The packet thread starts (`true`) or ends (`false`) a bounded wait for work.
    #[inline]
    pub fn set_idle(&self, idle: bool) {
        self.idle.store(idle, Ordering::Relaxed);
    }

    /// Stalls detected so far.
    pub fn stalls(&self) -> u64 {
        self.stalls.load(Ordering::Relaxed)
    }

    /// Whether the packet thread is stalled now.
    pub fn stalled(&self) -> bool {
        self.stalled.load(Ordering::Relaxed)
    }
}

/// The main thread's view of a [`Health`]: the last heartbeat seen and since when.
#[derive(Debug)]
pub struct Watchdog {
    last: u64,
    since: Instant,
    stall_after: Duration,
}

impl Watchdog {
    pub fn new(health: &Health, stall_after: Duration, now: Instant) -> Self {
        Self {
            last: health.beats.load(Ordering::Relaxed),
            since: now,
            stall_after,
        }
    }

    /// Look at `health` at `now`; returns whether the packet thread is stalled. Logs and
    /// counts a stall once, when it starts.
    pub fn check(&mut self, health: &Health, now: Instant) -> bool {
        let beats = health.beats.load(Ordering::Relaxed);
        if beats != self.last || health.idle.load(Ordering::Relaxed) {
            if health.stalled.swap(false, Ordering::Relaxed) {
                tracing::warn!(
                    "packet thread: progress again after {} ms without",
                    now.saturating_duration_since(self.since).as_millis()
                );
            }
            self.last = beats;
            self.since = now;
            return false;
        }
        let quiet = now.saturating_duration_since(self.since);
        if quiet >= self.stall_after && !health.stalled.swap(true, Ordering::Relaxed) {
            health.stalls.fetch_add(1, Ordering::Relaxed);
            STALLS.fetch_add(1, Ordering::Relaxed);
            tracing::error!(
                "packet thread: no progress for {} ms (stall {}); stats, `show` and SIGTERM are \
                 served without it",
                quiet.as_millis(),
                health.stalls()
            );
        }
        health.stalled()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_still_heartbeat_is_a_stall_once_an_idle_or_moving_one_is_not() {
        let h = Health::default();
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut w = Watchdog::new(&h, Duration::from_millis(500), t0);
        assert!(!w.check(&h, ms(499)));
        assert!(w.check(&h, ms(500)));
        assert!(w.check(&h, ms(900)));
        assert_eq!(h.stalls(), 1, "one stall, counted once");
        assert!(h.stalled());
        h.beat();
        assert!(!w.check(&h, ms(910)));
        assert!(!h.stalled());
        // Idle waits are not stalls, however long.
        h.set_idle(true);
        assert!(!w.check(&h, ms(5_000)));
        h.set_idle(false);
        assert!(!w.check(&h, ms(5_400)));
        assert!(w.check(&h, ms(5_500)));
        assert_eq!(h.stalls(), 2);
        assert!(stalls_total() >= 2);
    }
}

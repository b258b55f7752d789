//! The forwarding budget: what makes guests contend, as dom0's CPU did in P2 (§4.1.3: the CPU
//! kept 50 % busy). A service rate — packets/s, or bits/s on the uplink — that is on and off
//! in strictly alternating periods counted from an origin (on first), and the credit rules:
//!
//! - a frame may leave when the budget is on and its credit is due (`free_at <= now`); each
//!   frame then moves `free_at` by its cost;
//! - **idle** since the last turn, the switch keeps at most [`BUDGET_SLACK`] of credit, so an
//!   idle period does not become a burst;
//! - **backlogged** (frames waited), a turn that got the CPU later than that slack would lose
//!   on-time to the host (another process, a hypervisor's steal), and the load the discipline
//!   sees would rise above the one offered. Up to `catch_up` of it is made up at once (never in
//!   an off period); the rest is counted as lost ([`Budget::lost_ns`]).
//!
//! No clock: every method takes `now` (`CLOCK_MONOTONIC` ns). Memory: a few words.

use crate::config::SwitchConfig;
use netsched_core::{Nanos, MS, SEC};

/// Budget credit a late wake-up keeps (keeps the average rate without letting an idle period
/// turn into a burst larger than this).
pub const BUDGET_SLACK: Nanos = MS;

/// The budget's state; one per switch.
#[derive(Debug, Clone)]
pub struct Budget {
    ns_per_packet: Option<Nanos>,
    bits_per_s: Option<u64>,
    /// (on, off) lengths; `None`: always on.
    periods: Option<(Nanos, Nanos)>,
    origin: Nanos,
    catch_up: Nanos,
    /// The next frame's credit is due then.
    free_at: Nanos,
    /// Frames waited when the last turn closed.
    backlogged: bool,
    lost_ns: Nanos,
}

impl Budget {
    /// The budget `cfg` describes; [`Self::start`] sets its clock.
    pub fn new(cfg: &SwitchConfig) -> Self {
        Self {
            ns_per_packet: cfg.packet_rate.map(|r| (SEC / r.max(1)).max(1)),
            bits_per_s: cfg.rate,
            periods: cfg.budget_periods(),
            origin: 0,
            catch_up: cfg.budget_catch_up,
            free_at: 0,
            backlogged: false,
            lost_ns: 0,
        }
    }

    /// Start at `now`; periods count from `origin` ([`SwitchConfig::budget_origin`]).
    pub fn start(&mut self, now: Nanos, origin: Nanos) {
        self.free_at = now;
        self.origin = origin;
    }

    /// The time the periods (and the switch's trace) count from.
    #[inline]
    pub fn origin(&self) -> Nanos {
        self.origin
    }

    /// Whether there is a budget at all (without one every frame may leave at once).
    #[inline]
    pub fn limited(&self) -> bool {
        self.ns_per_packet.is_some() || self.bits_per_s.is_some()
    }

    /// Cost of one frame of `len` bytes, ns.
    #[inline]
    pub fn cost(&self, len: u32) -> Nanos {
        match (self.ns_per_packet, self.bits_per_s) {
            (Some(ns), _) => ns,
            (None, Some(bits)) => (len as u64 * 8 * SEC / bits.max(1)).max(1),
            (None, None) => 0,
        }
    }

    /// Open a turn at `now`: settle the credit (see the module's rules). Returns whether the
    /// budget is on; in an off period the next credit is its end.
    #[inline]
    pub fn open_turn(&mut self, now: Nanos) -> bool {
        let from = self.free_at + BUDGET_SLACK;
        if !self.backlogged || now <= from {
            self.free_at = self.free_at.max(now.saturating_sub(BUDGET_SLACK));
        } else {
            let late = self.on_time_between(from, now);
            let off = self.off_remaining(now).is_some();
            let repay = if off { 0 } else { late.min(self.catch_up) };
            self.lost_ns += late - repay;
            self.free_at = self.free_at.max(now.saturating_sub(BUDGET_SLACK + repay));
        }
        match self.off_remaining(now) {
            Some(left) => {
                // No service until the off period ends; no credit accumulates meanwhile.
                self.free_at = self.free_at.max(now + left);
                false
            }
            None => true,
        }
    }

    /// Whether the next frame's credit is due at `now`.
    #[inline]
    pub fn due(&self, now: Nanos) -> bool {
        self.free_at <= now
    }

    /// A frame of `len` bytes leaves.
    #[inline]
    pub fn charge(&mut self, len: u32) {
        self.free_at += self.cost(len);
    }

    /// Close the turn: whether frames still wait for the budget (frames already taken for
    /// sending are paid for and do not count).
    #[inline]
    pub fn close_turn(&mut self, frames_waiting: bool) {
        self.backlogged = self.limited() && frames_waiting;
    }

    /// When the next frame's credit is due.
    #[inline]
    pub fn next_credit(&self) -> Nanos {
        self.free_at
    }

    /// On-time lost to late turns while frames waited, not made up, ns.
    pub fn lost_ns(&self) -> Nanos {
        self.lost_ns
    }

    /// In an off period at `now`: the time left until it ends.
    fn off_remaining(&self, now: Nanos) -> Option<Nanos> {
        let (on, off) = self.periods?;
        let cycle = (on + off).max(1) as i128;
        let phase = (now as i128 - self.origin as i128).rem_euclid(cycle) as Nanos;
        (phase >= on).then(|| cycle as Nanos - phase)
    }

    /// The on-time between `a` and `b` (`a <= b`): all of it without periods.
    fn on_time_between(&self, a: Nanos, b: Nanos) -> Nanos {
        match self.periods {
            None => b.saturating_sub(a),
            Some(p) => on_time(b, self.origin, p).wrapping_sub(on_time(a, self.origin, p)),
        }
    }
}

/// The on-time of the periods `(on, off)` from `origin` to `t`, modulo 2^64 (before `origin`
/// it counts down): the on-time between two times is the wrapping difference.
fn on_time(t: Nanos, origin: Nanos, (on, off): (Nanos, Nanos)) -> Nanos {
    let cycle = (on + off).max(1) as i128;
    let d = t as i128 - origin as i128;
    let whole = d.div_euclid(cycle) * on as i128 + d.rem_euclid(cycle).min(on as i128);
    whole.rem_euclid(1 << 64) as Nanos
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1000 packets/s (1 ms per frame), on 14 ms / off 6 ms from `origin` (when `busy`).
    fn budget(busy: bool, catch_up: Nanos, origin: Nanos) -> Budget {
        let mut b = Budget {
            ns_per_packet: Some(MS),
            bits_per_s: None,
            periods: busy.then_some((14 * MS, 6 * MS)),
            origin: 0,
            catch_up,
            free_at: 0,
            backlogged: false,
            lost_ns: 0,
        };
        b.start(origin, origin);
        b
    }

    /// Frames sent in one turn at `now` with `queued` waiting; returns (sent, still waiting).
    fn turn(b: &mut Budget, now: Nanos, queued: u64) -> (u64, u64) {
        let mut sent = 0;
        if b.open_turn(now) {
            while sent < queued && b.due(now) {
                b.charge(64);
                sent += 1;
            }
        }
        b.close_turn(queued > sent);
        (sent, queued - sent)
    }

    #[test]
    fn periods_count_from_the_origin_on_first() {
        let b = budget(true, 0, 100 * MS);
        assert_eq!(b.off_remaining(100 * MS), None);
        assert_eq!(b.off_remaining(113 * MS), None);
        assert_eq!(b.off_remaining(114 * MS), Some(6 * MS));
        assert_eq!(b.off_remaining(119 * MS), Some(MS));
        assert_eq!(b.off_remaining(120 * MS), None);
        // Before the origin the same cycle runs backwards: 94..100 ms is an off period.
        assert_eq!(b.off_remaining(95 * MS), Some(5 * MS));
        assert_eq!(b.off_remaining(93 * MS), None);
    }

    #[test]
    fn on_time_counts_only_on_periods() {
        let b = budget(true, 0, 100);
        let between = |x, y| b.on_time_between(x, y);
        assert_eq!(between(100, 100 + 14 * MS), 14 * MS);
        assert_eq!(between(100, 100 + 20 * MS), 14 * MS);
        assert_eq!(between(100 + 10 * MS, 100 + 50 * MS), (4 + 14 + 10) * MS);
        assert_eq!(between(100 + 15 * MS, 100 + 19 * MS), 0);
        // Across the origin.
        assert_eq!(between(90 * MS + 100, 105 * MS + 100), (4 + 5) * MS);
    }

    #[test]
    fn an_idle_switch_keeps_one_slack_of_credit() {
        let mut b = budget(false, 10 * MS, 0);
        assert_eq!(turn(&mut b, 0, 0), (0, 0));
        // Idle for 50 ms, then 20 frames: only the slack's worth leaves at once (1 ms = 1
        // frame, plus the one due now), the catch-up does not apply to an idle period.
        assert_eq!(turn(&mut b, 50 * MS, 20), (2, 18));
        assert_eq!(b.lost_ns(), 0);
    }

    #[test]
    fn a_late_turn_with_frames_waiting_loses_on_time_unless_made_up() {
        for (catch_up, sent, lost) in [(0, 2, 4 * MS), (10 * MS, 6, 0), (2 * MS, 4, 2 * MS)] {
            let mut b = budget(false, catch_up, 0);
            assert_eq!(turn(&mut b, 0, 30), (1, 29));
            // Due at 1 ms; the turn comes at 6 ms: 4 ms beyond the slack.
            let (s, _) = turn(&mut b, 6 * MS, 29);
            assert_eq!((s, b.lost_ns()), (sent, lost), "catch_up {catch_up}");
            // The rate over the whole time is the budget's when it was made up.
            if catch_up >= 4 * MS {
                assert_eq!(1 + s, 7);
            }
        }
    }

    #[test]
    fn an_off_period_serves_nothing_and_late_on_time_in_it_is_lost() {
        let mut b = budget(true, 10 * MS, 0);
        // Idle until 13 ms: the slack's frame (due 12 ms) and the one due now leave.
        assert_eq!(turn(&mut b, 13 * MS, 5), (2, 3));
        // 15 ms is in the off period (14..20): nothing leaves, the next credit is its end.
        assert_eq!(turn(&mut b, 15 * MS, 3), (0, 3));
        assert_eq!(b.next_credit(), 20 * MS);
        // On again, on time: frames leave at the rate.
        assert_eq!(turn(&mut b, 20 * MS, 3).0, 1);
        assert_eq!(b.lost_ns(), 0);
        // Due at 21 ms, the turn comes at 35 ms: on-time 22..34 is late (12 ms), and 35 is
        // in an off period, so none of it is made up.
        assert_eq!(turn(&mut b, 35 * MS, 2).0, 0);
        assert_eq!(b.lost_ns(), 12 * MS);
    }
}

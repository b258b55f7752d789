//! Per-flow order restoration: sequence numbers at receive, a bounded reorder window before
//! transmit.
//!
//! Packets of one flow get consecutive sequence numbers when they arrive ([`FlowOrder::admit`]).
//! Workers finish them in any order; [`FlowOrder::complete`] releases a packet only when it
//! is the next of its flow, holding later ones — as DPDK's `rte_reorder` library holds
//! packets by sequence number until the gap closes (DPDK `doc/guides/prog_guide/reorder_lib.rst`),
//! but per flow (only a flow's own order matters to its receiver). The window is bounded:
//! at most `window` packets are held over all flows; one more forces a release for the flow
//! of the oldest held packet, and [`FlowOrder::expire`] forces releases while the oldest held
//! packet has waited the timeout. A packet that finishes after its gap was skipped is released
//! at once, late.
//!
//! ## What a forced release does, and the guarantees
//! A forced release (overflow, timeout, [`FlowOrder::flush`]) takes the flow `F` of the
//! oldest held packet and skips `F`'s gap up to `F`'s *lowest held* sequence number — not to
//! the oldest packet's own number, which may lie above other held packets of `F` that
//! finished later — then releases from there in order, as far as `F` has no gap. So:
//! - **Progress**: every forced release releases at least one held packet (`F`'s lowest). A
//!   call of `complete`, `expire` or `flush` thus does at most `held` forced releases; none
//!   can spin on the same entry. `expire` ends with nothing held that has waited the timeout,
//!   `complete` and `expire` with at most `window` held, `flush` with nothing held.
//! - **Order**: every held packet of a flow has a sequence number at or above the flow's next
//!   release, and a flow's packets leave in sequence order, except *late* ones — a packet
//!   that completes after a forced release skipped past its number leaves at once, after
//!   higher numbers of its flow. Late packets are counted (`late`); sent packets that leave
//!   after a higher number of their flow are counted (`violations_after`), and with
//!   `window > 0` each of them is a late one.
//! - **Once**: each completed packet is released exactly once (with the `sent` flag the caller
//!   gave: a packet the caller drops still passes through the window, so it holds its place).
//!   A packet admitted but never completed is never released; its flow skips it only by a
//!   forced release.
//!
//! Counted: completions out of order per flow (before the window), releases out of order
//! among the items the caller counts as transmitted (after the window), packets held, the
//! peak held, and releases forced by overflow and by timeout. With `window = 0` nothing is
//! held and every packet is released when it completes.
//!
//! The flow table is bounded by `max_flows`: flows with nothing in flight are evicted when it
//! is full (their numbering restarts — nothing of theirs is outstanding); a flow that cannot
//! get an entry is admitted untracked (counted) and released as it completes.
//!
//! Cost: O(log held) per packet (ordered maps), a forced release O(log held) per packet it
//! releases; eviction is an O(flows) sweep, amortised over at least `max_flows / 2`
//! admissions. Memory: one entry per tracked flow plus held items.

use crate::time::{Duration, Instant};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// A packet's place in its flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    pub flow: u64,
    /// `None`: the flow table was full; the packet is not ordered.
    pub seq: Option<u64>,
}

#[derive(Debug, Default)]
struct Flow {
    next_seq: u64,
    next_release: u64,
    outstanding: u64,
    highest_done: Option<u64>,
    highest_sent: Option<u64>,
    held: BTreeMap<u64, (Instant, bool)>,
}

/// What [`FlowOrder`] has counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct OrderCounters {
    /// Completions with a lower sequence number than an earlier completion of the flow.
    pub violations_before: u64,
    /// Sent packets with a lower sequence number than an earlier sent packet of the flow.
    pub violations_after: u64,
    /// Packets that waited in the window.
    pub held: u64,
    /// Most packets held at once.
    pub held_peak: u64,
    /// Forced releases because more than `window` packets were held (each releases at least
    /// one held packet: its flow's lowest, and what follows it in order).
    pub released_by_overflow: u64,
    /// Forced releases because the oldest held packet had waited the timeout (each releases
    /// at least one held packet, as above).
    pub released_by_timeout: u64,
    /// Packets that completed after a forced release had skipped past them, released at once.
    pub late: u64,
    /// Packets admitted without order (flow table full).
    pub untracked: u64,
}

/// A released packet: its key and whether the caller will send it (`sent`).
pub type Release<K> = (K, bool);

/// Per-flow reorder window over items keyed by `K` (a buffer slot, say).
#[derive(Debug)]
pub struct FlowOrder<K: Ord + Copy> {
    window: usize,
    timeout: Duration,
    max_flows: usize,
    flows: HashMap<u64, Flow>,
    /// Held items: (flow, seq) → key, and by hold time for the oldest.
    keys: HashMap<(u64, u64), K>,
    by_age: BTreeSet<(Instant, u64, u64)>,
    counters: OrderCounters,
}

impl<K: Ord + Copy> FlowOrder<K> {
    /// Hold at most `window` packets, each at most `timeout`; track at most `max_flows` flows.
    pub fn new(window: usize, timeout: Duration, max_flows: usize) -> Self {
        Self {
            window,
            timeout,
            max_flows: max_flows.max(1),
            flows: HashMap::new(),
            keys: HashMap::new(),
            by_age: BTreeSet::new(),
            counters: OrderCounters::default(),
        }
    }

    pub fn counters(&self) -> OrderCounters {
        self.counters
    }

    /// Packets held now.
    pub fn held_now(&self) -> usize {
        self.keys.len()
    }

    /// Flows tracked now.
    pub fn flows(&self) -> usize {
        self.flows.len()
    }

    /// Change the window and timeout (held packets beyond the new window are released by the
    /// next completion or [`FlowOrder::expire`], by forced releases).
    pub fn set_window(&mut self, window: usize, timeout: Duration) {
        self.window = window;
        self.timeout = timeout;
    }

    /// Number the next packet of `flow`.
    pub fn admit(&mut self, flow: u64) -> Ticket {
        if !self.flows.contains_key(&flow) && self.flows.len() >= self.max_flows {
            self.flows
                .retain(|_, f| f.outstanding > 0 || !f.held.is_empty());
            if self.flows.len() >= self.max_flows {
                self.counters.untracked += 1;
                return Ticket { flow, seq: None };
            }
        }
        let f = self.flows.entry(flow).or_default();
        let seq = f.next_seq;
        f.next_seq += 1;
        f.outstanding += 1;
        Ticket {
            flow,
            seq: Some(seq),
        }
    }

    /// Packet `ticket` (in buffer `key`) finished at `now`; `sent` says whether the caller
    /// will transmit it. Released packets are appended to `out` in the order to act on them.
    /// Ends with at most `window` held (forced releases, each releasing at least one).
    pub fn complete(
        &mut self,
        ticket: Ticket,
        key: K,
        sent: bool,
        now: Instant,
        out: &mut Vec<Release<K>>,
    ) {
        self.take(ticket, key, sent, now, out);
        // Also after a packet passed through: a window made smaller leaves extra packets held.
        while self.keys.len() > self.window {
            self.counters.released_by_overflow += 1;
            self.release_oldest(out);
        }
    }

    /// Release `ticket` at once (untracked, late, or window 0 with nothing of its flow held),
    /// or hold it and release what is next in order.
    fn take(
        &mut self,
        ticket: Ticket,
        key: K,
        sent: bool,
        now: Instant,
        out: &mut Vec<Release<K>>,
    ) {
        let Some(seq) = ticket.seq else {
            out.push((key, sent));
            return;
        };
        let Some(f) = self.flows.get_mut(&ticket.flow) else {
            out.push((key, sent));
            return;
        };
        f.outstanding = f.outstanding.saturating_sub(1);
        if f.highest_done.is_some_and(|h| seq < h) {
            self.counters.violations_before += 1;
        }
        f.highest_done = Some(f.highest_done.map_or(seq, |h| h.max(seq)));
        if self.window == 0 && f.held.is_empty() {
            f.next_release = f.next_release.max(seq + 1);
            Self::send(&mut self.counters, f, seq, key, sent, out);
            return;
        }
        if seq < f.next_release {
            self.counters.late += 1;
            Self::send(&mut self.counters, f, seq, key, sent, out);
            return;
        }
        f.held.insert(seq, (now, sent));
        self.keys.insert((ticket.flow, seq), key);
        self.by_age.insert((now, ticket.flow, seq));
        self.drain(ticket.flow, out);
        let held = self.keys.len();
        if self.keys.contains_key(&(ticket.flow, seq)) {
            self.counters.held += 1;
            self.counters.held_peak = self.counters.held_peak.max(held as u64);
        }
    }

    /// Force releases while the oldest held packet has waited the timeout, then while more
    /// than `window` are held (a window made smaller by [`FlowOrder::set_window`]). Each
    /// forced release releases at least one packet.
    pub fn expire(&mut self, now: Instant, out: &mut Vec<Release<K>>) {
        while let Some(&(t, _, _)) = self.by_age.first() {
            if now.saturating_sub(t) < self.timeout {
                break;
            }
            self.counters.released_by_timeout += 1;
            self.release_oldest(out);
        }
        while self.keys.len() > self.window {
            self.counters.released_by_overflow += 1;
            self.release_oldest(out);
        }
    }

    /// Release everything held (shutdown), oldest first.
    pub fn flush(&mut self, out: &mut Vec<Release<K>>) {
        while !self.by_age.is_empty() {
            self.release_oldest(out);
        }
    }

    /// One forced release: the flow of the oldest held packet skips its gap up to its own
    /// lowest held sequence number, which is released with whatever follows it in order. At
    /// least one held packet leaves (the flow's lowest, which `drain` finds at `next_release`),
    /// and no held packet of the flow is ever left below `next_release`.
    fn release_oldest(&mut self, out: &mut Vec<Release<K>>) {
        let Some(&(_, flow, _)) = self.by_age.first() else {
            return;
        };
        let Some(lowest) = self
            .flows
            .get(&flow)
            .and_then(|f| f.held.first_key_value().map(|(&s, _)| s))
        else {
            // Unreachable while `by_age` and the flows' `held` agree; drop the stray entry so
            // the caller's loop still ends.
            self.by_age.pop_first();
            return;
        };
        if let Some(f) = self.flows.get_mut(&flow) {
            f.next_release = f.next_release.max(lowest);
        }
        self.drain(flow, out);
    }

    /// Release the held packets of `flow` that are next in order.
    fn drain(&mut self, flow: u64, out: &mut Vec<Release<K>>) {
        let Some(f) = self.flows.get_mut(&flow) else {
            return;
        };
        while let Some((&seq, &(t, sent))) = f.held.first_key_value() {
            if seq != f.next_release {
                break;
            }
            f.held.remove(&seq);
            self.by_age.remove(&(t, flow, seq));
            let key = self.keys.remove(&(flow, seq)).expect("held key");
            f.next_release = seq + 1;
            Self::send(&mut self.counters, f, seq, key, sent, out);
        }
    }

    fn send(
        c: &mut OrderCounters,
        f: &mut Flow,
        seq: u64,
        key: K,
        sent: bool,
        out: &mut Vec<Release<K>>,
    ) {
        if sent {
            if f.highest_sent.is_some_and(|h| seq < h) {
                c.violations_after += 1;
            }
            f.highest_sent = Some(f.highest_sent.map_or(seq, |h| h.max(seq)));
        }
        out.push((key, sent));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(out: &[Release<u32>]) -> Vec<u32> {
        out.iter().map(|r| r.0).collect()
    }

    #[test]
    fn out_of_order_completions_leave_in_order() {
        let mut o = FlowOrder::new(8, 1_000, 16);
        let t: Vec<Ticket> = (0..4).map(|_| o.admit(7)).collect();
        let mut out = Vec::new();
        for i in [2usize, 1, 3, 0] {
            o.complete(t[i], i as u32, true, 10, &mut out);
        }
        assert_eq!(keys(&out), [0, 1, 2, 3]);
        let c = o.counters();
        assert_eq!(c.violations_before, 2); // 1 after 2, 0 after 3
        assert_eq!(c.violations_after, 0);
        assert_eq!(c.held, 3);
        assert_eq!(c.held_peak, 3);
        assert_eq!(o.held_now(), 0);
    }

    #[test]
    fn window_zero_passes_disorder_through_and_counts_it() {
        let mut o = FlowOrder::new(0, 1_000, 16);
        let t: Vec<Ticket> = (0..3).map(|_| o.admit(1)).collect();
        let mut out = Vec::new();
        for i in [1usize, 0, 2] {
            o.complete(t[i], i as u32, true, 0, &mut out);
        }
        assert_eq!(keys(&out), [1, 0, 2]);
        let c = o.counters();
        assert_eq!((c.violations_before, c.violations_after), (1, 1));
        assert_eq!((c.held, c.released_by_overflow, c.late), (0, 0, 0));
    }

    #[test]
    fn a_full_window_releases_the_oldest_and_the_straggler_is_late() {
        let mut o = FlowOrder::new(1, 1_000, 16);
        let t: Vec<Ticket> = (0..3).map(|_| o.admit(1)).collect();
        let mut out = Vec::new();
        o.complete(t[1], 1, true, 0, &mut out);
        assert!(out.is_empty());
        o.complete(t[2], 2, true, 1, &mut out);
        assert_eq!(keys(&out), [1, 2]);
        o.complete(t[0], 0, true, 2, &mut out);
        assert_eq!(keys(&out), [1, 2, 0]);
        let c = o.counters();
        assert_eq!(
            (c.released_by_overflow, c.late, c.violations_after),
            (1, 1, 1)
        );
    }

    #[test]
    fn the_timeout_releases_and_drops_do_not_count_as_sent_disorder() {
        let mut o = FlowOrder::new(8, 100, 16);
        let t: Vec<Ticket> = (0..2).map(|_| o.admit(1)).collect();
        let mut out = Vec::new();
        o.complete(t[1], 1, true, 0, &mut out);
        o.expire(99, &mut out);
        assert!(out.is_empty());
        o.expire(100, &mut out);
        assert_eq!(keys(&out), [1]);
        o.complete(t[0], 0, false, 200, &mut out);
        let c = o.counters();
        assert_eq!(
            (c.released_by_timeout, c.late, c.violations_after),
            (1, 1, 0)
        );
    }

    #[test]
    fn flows_are_independent_and_the_table_is_bounded() {
        let mut o = FlowOrder::new(8, 100, 2);
        let a = o.admit(1);
        let b = o.admit(2);
        let c = o.admit(3);
        assert_eq!(c.seq, None);
        assert_eq!(o.counters().untracked, 1);
        let mut out = Vec::new();
        o.complete(b, 20, true, 0, &mut out);
        o.complete(a, 10, true, 0, &mut out);
        o.complete(c, 30, true, 0, &mut out);
        assert_eq!(keys(&out), [20, 10, 30]);
        assert_eq!(o.counters().violations_before, 0);
        // Both flows drained: a new flow evicts them.
        assert_eq!(o.admit(4).seq, Some(0));
        assert_eq!(o.flows(), 1);
    }

    #[test]
    fn flush_releases_everything() {
        let mut o = FlowOrder::new(8, 100, 4);
        let t: Vec<Ticket> = (0..3).map(|_| o.admit(1)).collect();
        let mut out = Vec::new();
        o.complete(t[2], 2, true, 0, &mut out);
        o.complete(t[1], 1, true, 0, &mut out);
        o.flush(&mut out);
        assert_eq!(keys(&out), [1, 2]);
        assert_eq!(o.held_now(), 0);
    }

    /// Runs `f` on its own thread and fails if it has not returned within 5 s (a forced
    /// release that makes no progress never returns; the thread is then left behind).
    fn within_deadline<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(std::time::Duration::from_secs(5))
            .expect("no progress within 5 s")
    }

    /// Issue #37: seq 3 held at t = 1, seq 1 held at t = 2 (seq 0 and 2 outstanding). The
    /// timeout forces seq 3 out; the flow's lower held seq 1 leaves first, in order.
    #[test]
    fn a_forced_release_with_a_lower_held_seq_of_the_flow_makes_progress() {
        let (out, o) = within_deadline(|| {
            let mut o = FlowOrder::new(8, 10, 16);
            let t: Vec<Ticket> = (0..4).map(|_| o.admit(1)).collect();
            let mut out = Vec::new();
            o.complete(t[3], 3, true, 1, &mut out);
            o.complete(t[1], 1, true, 2, &mut out);
            assert!(out.is_empty());
            o.expire(11, &mut out);
            (out, o)
        });
        assert_eq!(keys(&out), [1, 3]);
        assert_eq!(o.held_now(), 0);
        let c = o.counters();
        assert_eq!(c.released_by_timeout, 2);
        assert_eq!(c.violations_after, 0);
    }

    /// The same shape forced by overflow: window 1, seq 3 then seq 1 complete.
    #[test]
    fn an_overflow_with_a_lower_held_seq_of_the_flow_makes_progress() {
        let (out, o) = within_deadline(|| {
            let mut o = FlowOrder::new(2, 1_000, 16);
            let t: Vec<Ticket> = (0..5).map(|_| o.admit(1)).collect();
            let mut out = Vec::new();
            o.complete(t[4], 4, true, 1, &mut out);
            o.complete(t[2], 2, true, 2, &mut out);
            o.set_window(1, 1_000);
            o.complete(t[3], 3, true, 3, &mut out);
            (out, o)
        });
        assert_eq!(keys(&out), [2, 3, 4]);
        assert_eq!(o.held_now(), 0);
        assert_eq!(o.counters().violations_after, 0);
    }
}

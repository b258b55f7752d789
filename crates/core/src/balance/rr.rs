//! Round robin (`net/netfilter/ipvs/ip_vs_rr.c`) and weighted round robin
//! (`net/netfilter/ipvs/ip_vs_wrr.c`).
//!
//! **rr**: remember the position of the last pick; the next pick is the next available server
//! after it in table order, wrapping around (weight 0 or overloaded servers are skipped).
//! Cost: O(1) when servers are available, O(n) worst case. Memory: one index.
//!
//! **wrr**: the IPVS scheme with `mw` (maximum weight), `di` (gcd of the positive weights)
//! and `cw` (current weight). Walk the table in order and pick the next server whose weight
//! is >= `cw`; at the end of the table lower `cw` by `di`; when `cw` drops to 0 or below,
//! start again at `cw = mw`. IPVS sets `mw = max_weight - (di - 1)` so the last pass is at
//! `cw = 1` and a server whose weight fell below `di` still gets picked (ip_vs_wrr.c header
//! comment). A cycle therefore gives each server weight/di picks, interleaved: for weights
//! a=4, b=3, c=2 (di = 1, mw = 4) the passes are cw=4: a; cw=3: a b; cw=2: a b c;
//! cw=1: a b c — the sequence `a a b a b c a b c` (derived by hand from the algorithm, see
//! `wrr_classic_sequence_4_3_2`). After a change of weights or membership `di` and `mw` are
//! recomputed and `cw` is kept in range as `ip_vs_wrr_dest_changed` does.
//! Cost: amortised O(mw/di · n / Σ(w/di)) per pick, O(1) with equal weights; O(n) rebuild on
//! change. Memory: O(1).

use super::{Balancer, FlowKey, ServerId, ServerTable};
use crate::time::Instant;

/// Round robin.
#[derive(Debug, Clone, Default)]
pub struct RoundRobin {
    /// Position of the last pick; `None` before the first pick (IPVS starts at the list head).
    last: Option<usize>,
}

impl RoundRobin {
    pub fn new() -> Self {
        Self::default()
    }
}

impl Balancer for RoundRobin {
    #[inline]
    fn pick(&mut self, servers: &ServerTable, _key: &FlowKey, _now: Instant) -> Option<ServerId> {
        let list = servers.servers();
        let n = list.len();
        if n == 0 {
            return None;
        }
        let mut pos = match self.last {
            Some(p) if p < n => p + 1,
            _ => 0,
        };
        for _ in 0..n {
            if pos >= n {
                pos = 0;
            }
            if list[pos].is_available() {
                self.last = Some(pos);
                return Some(list[pos].id);
            }
            pos += 1;
        }
        None
    }
}

fn gcd(mut a: u32, mut b: u32) -> u32 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Weighted round robin (IPVS current-weight scheme).
#[derive(Debug, Clone)]
pub struct WeightedRoundRobin {
    /// Position of the last pick; `None` = list head.
    last: Option<usize>,
    /// Current weight `cw`.
    cw: i64,
    /// `mw = max weight - (di - 1)`.
    mw: i64,
    /// Step `di = gcd of positive weights` (1 if none).
    di: i64,
    generation: u64,
}

impl Default for WeightedRoundRobin {
    fn default() -> Self {
        Self::new()
    }
}

impl WeightedRoundRobin {
    pub fn new() -> Self {
        Self {
            last: None,
            cw: 0,
            mw: 0,
            di: 1,
            generation: u64::MAX,
        }
    }

    /// Recompute `di`, `mw`, and bring `cw` back in range (ip_vs_wrr_dest_changed).
    fn wrr_refresh(&mut self, servers: &ServerTable) {
        let mut g = 0u32;
        let mut max = 0u32;
        for s in servers.servers() {
            if s.weight > 0 {
                g = if g == 0 { s.weight } else { gcd(g, s.weight) };
            }
            max = max.max(s.weight);
        }
        self.di = if g == 0 { 1 } else { g as i64 };
        self.mw = max as i64 - (self.di - 1);
        if self.cw > self.mw || self.cw <= 0 {
            self.cw = self.mw;
        } else if self.di > 1 {
            self.cw = (self.cw / self.di) * self.di + 1;
        }
        // IPVS resets the position to the list head on any change
        self.last = None;
        self.generation = servers.layout_generation();
    }
}

impl Balancer for WeightedRoundRobin {
    #[inline]
    fn pick(&mut self, servers: &ServerTable, _key: &FlowKey, _now: Instant) -> Option<ServerId> {
        if self.generation != servers.layout_generation() {
            self.wrr_refresh(servers);
        }
        if self.mw <= 0 {
            return None; // all weights 0
        }
        let list = servers.servers();
        let n = list.len();
        let mut pos = self.last.map_or(0, |p| p + 1);
        // After mw/di + 1 ends of table every server has been checked at cw <= di (the last
        // pass catches weight >= 1), so a longer walk means nothing is available.
        let max_visits = (n + 1) * (self.mw / self.di + 2) as usize;
        for _ in 0..max_visits {
            if pos >= n {
                pos = 0;
                self.cw -= self.di;
                if self.cw <= 0 {
                    self.cw = self.mw;
                }
                continue;
            }
            let s = &list[pos];
            if !s.overloaded && s.weight as i64 >= self.cw {
                self.last = Some(pos);
                return Some(s.id);
            }
            pos += 1;
        }
        self.last = None;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::*;

    fn run<B: Balancer>(b: &mut B, t: &ServerTable, n: usize) -> Vec<u32> {
        (0..n)
            .map(|_| b.pick(t, &any_key(), 0).unwrap().0)
            .collect()
    }

    #[test]
    fn rr_cycles_in_table_order() {
        let t = table(&[1, 1, 1]);
        let mut rr = RoundRobin::new();
        assert_eq!(run(&mut rr, &t, 7), vec![0, 1, 2, 0, 1, 2, 0]);
    }

    #[test]
    fn rr_skips_drained_and_overloaded() {
        let mut t = table(&[1, 0, 1, 1]);
        t.set_overloaded(ServerId(2), true).unwrap();
        let mut rr = RoundRobin::new();
        assert_eq!(run(&mut rr, &t, 4), vec![0, 3, 0, 3]);
        t.set_weight(ServerId(0), 0).unwrap();
        t.set_weight(ServerId(3), 0).unwrap();
        assert_eq!(rr.pick(&t, &any_key(), 0), None);
        assert_eq!(
            RoundRobin::new().pick(&ServerTable::new(), &any_key(), 0),
            None
        );
    }

    /// Weights a=4, b=3, c=2: di=1, mw=4; passes cw=4 {a}, cw=3 {a,b}, cw=2 {a,b,c},
    /// cw=1 {a,b,c} give the classic sequence a a b a b c a b c (worked by hand from
    /// ip_vs_wrr.c's algorithm), then the cycle repeats.
    #[test]
    fn wrr_classic_sequence_4_3_2() {
        let t = table(&[4, 3, 2]);
        let mut wrr = WeightedRoundRobin::new();
        let got = run(&mut wrr, &t, 18);
        let cycle = vec![0, 0, 1, 0, 1, 2, 0, 1, 2];
        assert_eq!(got[..9], cycle[..]);
        assert_eq!(got[9..], cycle[..]);
    }

    /// Weights 4 and 2: di = 2, mw = 4 - 1 = 3; passes cw=3 {a}, cw=1 {a,b} → a a b.
    #[test]
    fn wrr_gcd_step() {
        let t = table(&[4, 2]);
        let mut wrr = WeightedRoundRobin::new();
        assert_eq!(run(&mut wrr, &t, 6), vec![0, 0, 1, 0, 0, 1]);
    }

    #[test]
    fn wrr_shares_match_weights_and_weight_zero_drains() {
        let mut t = table(&[5, 0, 2, 3]);
        let mut wrr = WeightedRoundRobin::new();
        let mut count = [0; 4];
        for id in run(&mut wrr, &t, 1000) {
            count[id as usize] += 1;
        }
        assert_eq!(count, [500, 0, 200, 300]);
        t.set_overloaded(ServerId(0), true).unwrap();
        t.set_overloaded(ServerId(2), true).unwrap();
        t.set_overloaded(ServerId(3), true).unwrap();
        assert_eq!(wrr.pick(&t, &any_key(), 0), None);
        t.set_overloaded(ServerId(2), false).unwrap();
        assert_eq!(run(&mut wrr, &t, 3), vec![2, 2, 2]);
    }
}

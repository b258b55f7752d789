//! Power of two random choices (Mitzenmacher, "The Power of Two Choices in Randomized Load
//! Balancing", IEEE TPDS 2001; survey by Mitzenmacher, Richa, Sitaraman 2001): sampling two
//! servers and keeping the less loaded one brings the maximum load from Θ(log n / log log n)
//! (one random choice) down to Θ(log log n), without a global scan.
//!
//! **twos** (`net/netfilter/ipvs/ip_vs_twos.c`): draw two servers at random *in proportion to
//! their weights* among available ones (weight > 0, not overloaded), keep the second if
//! `overhead2·weight1 < overhead1·weight2` (weighted least-connection between the two).
//! Deviation: the kernel walks the list (O(n)) with random values in `[0, total_weight]`
//! inclusive (so the first server gets a slightly larger share); here an alias table
//! (Walker 1977, built with Vose's method, 1991), rebuilt when availability changes, gives
//! weight-proportional draws in O(1): a uniform slot, then a biased coin between the slot's
//! server and its alias.
//!
//! **least-request p2c** (Envoy's `LEAST_REQUEST`, tower `balance::p2c`, pingora): two
//! distinct servers uniformly at random among available ones, keep the one with fewer
//! outstanding requests (`active`; the engine counts a request with `on_open`/`on_close`),
//! the first drawn on ties. Cost O(1) per pick.
//!
//! Randomness: a [`SplitMix64`] passed at construction (`from_rng`), so a seed reproduces the
//! picks. Memory: O(n) cache of available positions (and the alias table for twos).

use super::{lighter, Balancer, FlowKey, ServerId, ServerTable};
use crate::rng::SplitMix64;
use crate::time::Instant;

/// twos: weighted random two, weighted least-connection between them.
#[derive(Debug, Clone)]
pub struct TwoChoices {
    rng: SplitMix64,
    /// Alias table over the available servers: slot i keeps its own server (`positions[i]`)
    /// with probability `keep[i]`, else takes `positions[alias[i]]`.
    positions: Vec<u32>,
    keep: Vec<f64>,
    alias: Vec<u32>,
    generation: u64,
}

impl TwoChoices {
    pub fn from_rng(rng: SplitMix64) -> Self {
        Self {
            rng,
            positions: Vec::new(),
            keep: Vec::new(),
            alias: Vec::new(),
            generation: u64::MAX,
        }
    }

    /// Vose's alias method over the weights of the available servers.
    fn twos_refresh(&mut self, servers: &ServerTable) {
        self.generation = servers.availability_generation();
        self.positions.clear();
        let mut scaled: Vec<f64> = Vec::new();
        for (pos, s) in servers.servers().iter().enumerate() {
            if s.is_available() {
                self.positions.push(pos as u32);
                scaled.push(s.weight as f64);
            }
        }
        let n = scaled.len();
        let total: f64 = scaled.iter().sum();
        for w in scaled.iter_mut() {
            *w = *w * n as f64 / total;
        }
        self.keep = vec![1.0; n];
        self.alias = (0..n as u32).collect();
        let (mut small, mut large): (Vec<usize>, Vec<usize>) =
            (0..n).partition(|&i| scaled[i] < 1.0);
        while let (Some(&s), Some(&l)) = (small.last(), large.last()) {
            small.pop();
            self.keep[s] = scaled[s];
            self.alias[s] = l as u32;
            scaled[l] += scaled[s] - 1.0;
            if scaled[l] < 1.0 {
                large.pop();
                small.push(l);
            }
        }
        // what remains (numerically ~1) keeps its own slot: keep = 1.0 already
    }

    /// A position drawn with probability weight / total weight.
    #[inline]
    fn draw(&mut self) -> usize {
        let i = self.rng.below(self.positions.len() as u64) as usize;
        let j = if self.rng.unit() < self.keep[i] {
            i
        } else {
            self.alias[i] as usize
        };
        self.positions[j] as usize
    }
}

impl Balancer for TwoChoices {
    #[inline]
    fn pick(&mut self, servers: &ServerTable, _key: &FlowKey, _now: Instant) -> Option<ServerId> {
        if self.generation != servers.availability_generation() {
            self.twos_refresh(servers);
        }
        if self.positions.is_empty() {
            return None;
        }
        let list = servers.servers();
        let a = &list[self.draw()];
        let b = &list[self.draw()];
        // ip_vs_twos.c: choice2 wins when weight2*overhead1 > weight1*overhead2
        if lighter(b.overhead(), b.weight, a.overhead(), a.weight) {
            Some(b.id)
        } else {
            Some(a.id)
        }
    }
}

/// Least outstanding requests between two uniformly drawn distinct servers.
#[derive(Debug, Clone)]
pub struct LeastRequestP2c {
    rng: SplitMix64,
    positions: Vec<u32>,
    generation: u64,
}

impl LeastRequestP2c {
    pub fn from_rng(rng: SplitMix64) -> Self {
        Self {
            rng,
            positions: Vec::new(),
            generation: u64::MAX,
        }
    }
}

impl Balancer for LeastRequestP2c {
    #[inline]
    fn pick(&mut self, servers: &ServerTable, _key: &FlowKey, _now: Instant) -> Option<ServerId> {
        let list = servers.servers();
        if self.generation != servers.availability_generation() {
            self.positions.clear();
            self.positions.extend(
                list.iter()
                    .enumerate()
                    .filter(|(_, s)| s.is_available())
                    .map(|(p, _)| p as u32),
            );
            self.generation = servers.availability_generation();
        }
        let n = self.positions.len() as u64;
        match n {
            0 => None,
            1 => Some(list[self.positions[0] as usize].id),
            _ => {
                let i = self.rng.below(n);
                // a second index different from the first: shift by 1..n-1
                let j = (i + 1 + self.rng.below(n - 1)) % n;
                let a = &list[self.positions[i as usize] as usize];
                let b = &list[self.positions[j as usize] as usize];
                Some(if b.active < a.active { b.id } else { a.id })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::*;

    #[test]
    fn twos_draws_in_proportion_to_weight() {
        // with all counts at 0 the first draw always wins (ties keep choice 1), so picks
        // follow the weighted draw exactly: shares 1/6, 2/6, 3/6
        let t = table(&[1, 2, 3]);
        let mut b = TwoChoices::from_rng(SplitMix64::new(7));
        let mut c = [0u32; 3];
        for _ in 0..60_000 {
            c[b.pick(&t, &any_key(), 0).unwrap().0 as usize] += 1;
        }
        for (i, w) in [1u32, 2, 3].iter().enumerate() {
            let ideal = 10_000 * w;
            assert!(c[i].abs_diff(ideal) < 600, "{c:?}");
        }
    }

    /// The alias table reproduces the weights exactly: P(i) = Σ over slots of
    /// (keep if own, 1 - keep if alias) / n.
    #[test]
    fn twos_alias_table_is_exact() {
        let t = table(&[5, 1, 0, 3, 7]);
        let mut b = TwoChoices::from_rng(SplitMix64::new(1));
        b.twos_refresh(&t);
        let n = b.positions.len();
        let mut p = vec![0.0; t.len()];
        for i in 0..n {
            p[b.positions[i] as usize] += b.keep[i] / n as f64;
            p[b.positions[b.alias[i] as usize] as usize] += (1.0 - b.keep[i]) / n as f64;
        }
        for (pos, w) in [5.0, 1.0, 0.0, 3.0, 7.0].iter().enumerate() {
            assert!((p[pos] - w / 16.0).abs() < 1e-12, "{p:?}");
        }
    }

    #[test]
    fn twos_prefers_the_lighter_of_the_two_and_drains_weight_zero() {
        // two servers, one heavily loaded: it wins only when drawn twice (prob 1/4)
        let mut t = table(&[1, 1, 0]);
        t.set_conns(ServerId(0), 10, 0).unwrap();
        let mut b = TwoChoices::from_rng(SplitMix64::new(11));
        let mut c = [0u32; 3];
        for _ in 0..40_000 {
            c[b.pick(&t, &any_key(), 0).unwrap().0 as usize] += 1;
        }
        assert_eq!(c[2], 0);
        assert!(c[0].abs_diff(10_000) < 600, "{c:?}");
        t.set_weight(ServerId(0), 0).unwrap();
        t.set_overloaded(ServerId(1), true).unwrap();
        assert_eq!(b.pick(&t, &any_key(), 0), None);
    }

    #[test]
    fn same_seed_same_picks() {
        let t = table(&[3, 1, 4, 1, 5]);
        let mut a = TwoChoices::from_rng(SplitMix64::new(5));
        let mut b = TwoChoices::from_rng(SplitMix64::new(5));
        let mut p = LeastRequestP2c::from_rng(SplitMix64::new(5));
        let mut q = LeastRequestP2c::from_rng(SplitMix64::new(5));
        for _ in 0..100 {
            assert_eq!(a.pick(&t, &any_key(), 0), b.pick(&t, &any_key(), 0));
            assert_eq!(p.pick(&t, &any_key(), 0), q.pick(&t, &any_key(), 0));
        }
    }

    /// Balls into bins: n = 64 servers, 64·16 requests that stay open. One random choice
    /// leaves the fullest server well above the mean; two choices keep it within a few.
    #[test]
    fn p2c_keeps_max_load_close_to_mean() {
        let n = 64;
        let mut t = table(&vec![1; n]);
        let mut p2c = LeastRequestP2c::from_rng(SplitMix64::new(3));
        for _ in 0..n * 16 {
            let id = p2c.pick(&t, &any_key(), 0).unwrap();
            t.on_open(id).unwrap();
        }
        let max = t.servers().iter().map(|s| s.active).max().unwrap();
        assert!(max <= 16 + 3, "max {max}");
        // one random choice for comparison
        let mut one = vec![0u32; n];
        let mut r = SplitMix64::new(3);
        for _ in 0..n * 16 {
            one[r.below(n as u64) as usize] += 1;
        }
        assert!(*one.iter().max().unwrap() > max);
    }

    #[test]
    fn p2c_never_picks_unavailable_and_handles_one_server() {
        let mut t = table(&[0, 1, 0]);
        let mut p2c = LeastRequestP2c::from_rng(SplitMix64::new(1));
        for _ in 0..20 {
            assert_eq!(p2c.pick(&t, &any_key(), 0), sid(1));
        }
        t.set_overloaded(ServerId(1), true).unwrap();
        assert_eq!(p2c.pick(&t, &any_key(), 0), None);
    }
}

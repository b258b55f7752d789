//! The connection-count family: one scan of the table, keep the best server.
//!
//! | balancer | rule (ties: first in table order) | source |
//! |---|---|---|
//! | [`LeastConn`] (lc) | least overhead = active·256 + inactive | `ip_vs_lc.c` |
//! | [`WeightedLeastConn`] (wlc) | least overhead/weight, compared as `o1·w2 < o2·w1` | `ip_vs_wlc.c` |
//! | [`ShortestExpectedDelay`] (sed) | least (active+1)/weight | `ip_vs_sed.c` |
//! | [`NeverQueue`] (nq) | the first idle server (active = 0), else as sed | `ip_vs_nq.c` |
//! | [`WeightedFailover`] (fo) | the highest weight | `ip_vs_fo.c` |
//! | [`Overflow`] (ovf) | the highest weight whose active < weight | `ip_vs_ovf.c` |
//!
//! All skip servers of weight 0 (drain) and servers flagged overloaded, as the kernel files
//! do. The overhead formula is `ip_vs_dest_conn_overhead` (`include/net/ip_vs.h`): an active
//! connection is taken to cost 256 times an inactive one. sed counts only active connections
//! plus the one being placed (Kleinrock's shortest expected delay with service rate ∝ weight).
//!
//! Cost: O(n) per pick (nq stops at the first idle server), no allocation. Memory: none.

use super::{lighter, weighted_least_conn, Balancer, FlowKey, ServerId, ServerTable};
use crate::time::Instant;

/// True when there is no best yet, or when `beats` says the candidate beats it.
#[inline]
fn replaces<T>(best: &Option<T>, beats: impl FnOnce(&T) -> bool) -> bool {
    match best {
        None => true,
        Some(b) => beats(b),
    }
}

/// lc: least connections (overhead), ignoring weight except that weight 0 drains.
#[derive(Debug, Clone, Default)]
pub struct LeastConn;

impl Balancer for LeastConn {
    fn pick(&mut self, servers: &ServerTable, _key: &FlowKey, _now: Instant) -> Option<ServerId> {
        let mut best: Option<(u64, ServerId)> = None;
        for s in servers.servers() {
            if !s.is_available() {
                continue;
            }
            let o = s.overhead();
            // ip_vs_lc.c: replace only when strictly smaller
            if replaces(&best, |&(bo, _)| o < bo) {
                best = Some((o, s.id));
            }
        }
        best.map(|(_, id)| id)
    }
}

/// wlc: weighted least connections, the IPVS default scheduler.
#[derive(Debug, Clone, Default)]
pub struct WeightedLeastConn;

impl Balancer for WeightedLeastConn {
    fn pick(&mut self, servers: &ServerTable, _key: &FlowKey, _now: Instant) -> Option<ServerId> {
        weighted_least_conn(servers)
    }
}

/// sed: shortest expected delay, (active + 1) / weight.
#[derive(Debug, Clone, Default)]
pub struct ShortestExpectedDelay;

impl Balancer for ShortestExpectedDelay {
    fn pick(&mut self, servers: &ServerTable, _key: &FlowKey, _now: Instant) -> Option<ServerId> {
        let mut best: Option<(u64, u32, ServerId)> = None;
        for s in servers.servers() {
            if !s.is_available() {
                continue;
            }
            let o = s.sed_overhead();
            if replaces(&best, |&(bo, bw, _)| lighter(o, s.weight, bo, bw)) {
                best = Some((o, s.weight, s.id));
            }
        }
        best.map(|(_, _, id)| id)
    }
}

/// nq: never queue — an idle server if there is one, else shortest expected delay.
#[derive(Debug, Clone, Default)]
pub struct NeverQueue;

impl Balancer for NeverQueue {
    fn pick(&mut self, servers: &ServerTable, _key: &FlowKey, _now: Instant) -> Option<ServerId> {
        let mut best: Option<(u64, u32, ServerId)> = None;
        for s in servers.servers() {
            if !s.is_available() {
                continue;
            }
            // ip_vs_nq.c: a server with no active connection is taken at once
            if s.active == 0 {
                return Some(s.id);
            }
            let o = s.sed_overhead();
            if replaces(&best, |&(bo, bw, _)| lighter(o, s.weight, bo, bw)) {
                best = Some((o, s.weight, s.id));
            }
        }
        best.map(|(_, _, id)| id)
    }
}

/// fo: weighted failover — always the available server of highest weight.
#[derive(Debug, Clone, Default)]
pub struct WeightedFailover;

impl Balancer for WeightedFailover {
    fn pick(&mut self, servers: &ServerTable, _key: &FlowKey, _now: Instant) -> Option<ServerId> {
        let mut best: Option<(u32, ServerId)> = None;
        for s in servers.servers() {
            if s.is_available() && replaces(&best, |&(bw, _)| s.weight > bw) {
                best = Some((s.weight, s.id));
            }
        }
        best.map(|(_, id)| id)
    }
}

/// ovf: overflow — the highest-weight server that still has fewer active connections than
/// its weight; weight acts as a connection limit, and traffic overflows to the next server.
#[derive(Debug, Clone, Default)]
pub struct Overflow;

impl Balancer for Overflow {
    fn pick(&mut self, servers: &ServerTable, _key: &FlowKey, _now: Instant) -> Option<ServerId> {
        let mut best: Option<(u32, ServerId)> = None;
        for s in servers.servers() {
            if s.is_available() && s.active < s.weight && replaces(&best, |&(bw, _)| s.weight > bw)
            {
                best = Some((s.weight, s.id));
            }
        }
        best.map(|(_, id)| id)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::*;

    fn pick<B: Balancer>(mut b: B, t: &ServerTable) -> Option<ServerId> {
        b.pick(t, &any_key(), 0)
    }

    fn with_conns(weights: &[u32], conns: &[(u32, u32)]) -> ServerTable {
        let mut t = table(weights);
        for (i, &(a, ia)) in conns.iter().enumerate() {
            t.set_conns(ServerId(i as u32), a, ia).unwrap();
        }
        t
    }

    /// overheads: 2*256+0 = 512, 1*256+300 = 556, 1*256+10 = 266 → server 2.
    #[test]
    fn lc_uses_active_times_256_plus_inactive() {
        let t = with_conns(&[1, 1, 1], &[(2, 0), (1, 300), (1, 10)]);
        assert_eq!(pick(LeastConn, &t), sid(2));
        // ties keep the first
        let t = with_conns(&[1, 1], &[(1, 0), (1, 0)]);
        assert_eq!(pick(LeastConn, &t), sid(0));
    }

    /// weights 1, 3, 2; active 1, 2, 2 → overhead/weight = 256, 170.7, 256 → server 1.
    /// lc ignores weights and picks server 0 (least overhead).
    #[test]
    fn wlc_divides_by_weight() {
        let t = with_conns(&[1, 3, 2], &[(1, 0), (2, 0), (2, 0)]);
        assert_eq!(pick(WeightedLeastConn, &t), sid(1));
        assert_eq!(pick(LeastConn, &t), sid(0));
    }

    #[test]
    fn wlc_drains_weight_zero_and_skips_overloaded() {
        let mut t = with_conns(&[0, 1, 1], &[(0, 0), (5, 0), (9, 0)]);
        assert_eq!(pick(WeightedLeastConn, &t), sid(1));
        t.set_overloaded(ServerId(1), true).unwrap();
        assert_eq!(pick(WeightedLeastConn, &t), sid(2));
        t.set_overloaded(ServerId(2), true).unwrap();
        assert_eq!(pick(WeightedLeastConn, &t), None);
        assert_eq!(pick(LeastConn, &t), None);
    }

    /// sed: weights 1, 2; active 0, 1 → (0+1)/1 = 1 vs (1+1)/2 = 1: tie → server 0.
    /// With active 1, 1: 2/1 vs 2/2 → server 1. wlc would see 0 vs 128 and pick server 0.
    #[test]
    fn sed_counts_the_new_connection() {
        let t = with_conns(&[1, 2], &[(0, 0), (1, 0)]);
        assert_eq!(pick(ShortestExpectedDelay, &t), sid(0));
        let t = with_conns(&[1, 2], &[(1, 0), (1, 0)]);
        assert_eq!(pick(ShortestExpectedDelay, &t), sid(1));
        let t = with_conns(&[10, 1], &[(0, 0), (0, 0)]);
        assert_eq!(pick(ShortestExpectedDelay, &t), sid(0));
    }

    /// nq takes an idle server even when sed would prefer a heavier one: weights 10, 1;
    /// active 1, 0 → sed: 2/10 < 1/1 picks 0, nq picks the idle server 1.
    #[test]
    fn nq_prefers_idle_server() {
        let t = with_conns(&[10, 1], &[(1, 0), (0, 0)]);
        assert_eq!(pick(ShortestExpectedDelay, &t), sid(0));
        assert_eq!(pick(NeverQueue, &t), sid(1));
        let t = with_conns(&[10, 1], &[(1, 0), (1, 0)]);
        assert_eq!(pick(NeverQueue, &t), sid(0));
    }

    #[test]
    fn fo_highest_weight_then_fails_over() {
        let mut t = table(&[5, 10, 10, 1]);
        assert_eq!(pick(WeightedFailover, &t), sid(1));
        t.set_overloaded(ServerId(1), true).unwrap();
        assert_eq!(pick(WeightedFailover, &t), sid(2));
        t.set_weight(ServerId(2), 0).unwrap();
        assert_eq!(pick(WeightedFailover, &t), sid(0));
    }

    #[test]
    fn ovf_overflows_when_weight_reached() {
        let mut t = table(&[3, 2]);
        let mut ovf = Overflow;
        let mut got = vec![];
        for _ in 0..6 {
            let id = ovf.pick(&t, &any_key(), 0);
            if let Some(id) = id {
                t.on_open(id).unwrap();
            }
            got.push(id.map(|i| i.0));
        }
        assert_eq!(got, vec![Some(0), Some(0), Some(0), Some(1), Some(1), None]);
        t.on_close(ServerId(0)).unwrap();
        assert_eq!(ovf.pick(&t, &any_key(), 0), sid(0));
    }
}

//! Static and modified round robin (P1 §II).
//!
//! **Static RR**: "the successor of each thread is statically a thread of another processor"
//! (P1 §II), so the hand-off needs no decision. We build that chain from the [`WorkerView`]:
//! thread 0 of engine 0, thread 0 of engine 1, …, thread 0 of the last engine, thread 1 of
//! engine 0, … (consecutive blocks go to different engines), and hand blocks along it — even
//! to a thread still busy with an SOP, where the block waits: the stall that makes RR's idle
//! time rise at 256 and 512 bytes in P1 §III. With `N` threads and `b` blocks per packet the
//! SOPs fall on only `N / gcd(N, b)` threads (test `static_rr_sops_land_on_n_over_gcd`).
//!
//! **Modified RR**: the same chain, but "when the successor is working, the block goes to the
//! thread after it" (P1 §II, last paragraph): skip busy threads; if every thread is busy, the
//! static successor takes it (and the block waits for it).
//!
//! Cost: static RR O(1); modified RR O(threads) in the worst case (a walk of the chain).
//! The chain is rebuilt only when the number of workers changes. Memory: one id per worker.

use super::{BlockKind, DecisionCost, Dispatch, DispatchProfile, WorkerId, WorkerView};
use crate::time::Instant;

/// The successor chain: rank 0 of every engine, then rank 1, … (engines alternate).
fn rr_chain(workers: &WorkerView) -> Vec<WorkerId> {
    let engines = workers.engines();
    let mut per_engine: Vec<Vec<WorkerId>> = vec![Vec::new(); engines];
    for (id, w) in workers.workers().iter().enumerate() {
        per_engine[w.engine].push(id);
    }
    let depth = per_engine.iter().map(Vec::len).max().unwrap_or(0);
    let mut chain = Vec::with_capacity(workers.len());
    for rank in 0..depth {
        for e in &per_engine {
            if let Some(&id) = e.get(rank) {
                chain.push(id);
            }
        }
    }
    chain
}

/// P1 Round-Robin: a fixed successor on another engine, busy or not.
#[derive(Debug, Clone, Default)]
pub struct StaticRoundRobin {
    chain: Vec<WorkerId>,
    cursor: usize,
}

impl StaticRoundRobin {
    pub fn new() -> Self {
        Self::default()
    }
    /// The hand-off order (worker ids), as built from the last view.
    pub fn chain(&self) -> &[WorkerId] {
        &self.chain
    }
}

impl Dispatch for StaticRoundRobin {
    fn assign(
        &mut self,
        _block: BlockKind,
        workers: &WorkerView,
        _now: Instant,
    ) -> Option<WorkerId> {
        if workers.is_empty() {
            return None;
        }
        if self.chain.len() != workers.len() {
            self.chain = rr_chain(workers);
            self.cursor = 0;
        }
        let id = self.chain[self.cursor];
        self.cursor = (self.cursor + 1) % self.chain.len();
        Some(id)
    }
    fn profile(&self) -> DispatchProfile {
        DispatchProfile {
            decision_cost: DecisionCost::Static,
            needs_next_is_sop: false,
            may_assign_busy: true,
        }
    }
}

/// P1 Modified RR: the static chain, skipping busy successors.
#[derive(Debug, Clone, Default)]
pub struct ModifiedRoundRobin {
    chain: Vec<WorkerId>,
    cursor: usize,
    skipped: u64,
}

impl ModifiedRoundRobin {
    pub fn new() -> Self {
        Self::default()
    }
    /// Busy successors skipped so far.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }
}

impl Dispatch for ModifiedRoundRobin {
    fn assign(
        &mut self,
        _block: BlockKind,
        workers: &WorkerView,
        _now: Instant,
    ) -> Option<WorkerId> {
        if workers.is_empty() {
            return None;
        }
        if self.chain.len() != workers.len() {
            self.chain = rr_chain(workers);
            self.cursor = 0;
        }
        let n = self.chain.len();
        for step in 0..n {
            let pos = (self.cursor + step) % n;
            let id = self.chain[pos];
            if workers.get(id).is_some_and(|w| !w.busy) {
                self.skipped += step as u64;
                self.cursor = (pos + 1) % n;
                return Some(id);
            }
        }
        // Everyone is busy: the static successor takes it.
        let id = self.chain[self.cursor];
        self.cursor = (self.cursor + 1) % n;
        Some(id)
    }
    fn profile(&self) -> DispatchProfile {
        DispatchProfile {
            decision_cost: DecisionCost::SkipBusy,
            needs_next_is_sop: false,
            may_assign_busy: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{packet_blocks, WorkerState};
    use super::*;
    use std::collections::BTreeSet;

    fn gcd(a: usize, b: usize) -> usize {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }

    /// P1 §II: consecutive blocks go to threads of different engines.
    #[test]
    fn static_chain_alternates_engines() {
        let w = WorkerView::uniform(6, 4);
        let view = WorkerView::new(&w);
        let mut rr = StaticRoundRobin::new();
        let engines: Vec<usize> = (0..24)
            .map(|_| w[rr.assign(BlockKind::Middle, &view, 0).unwrap()].engine)
            .collect();
        assert_eq!(&engines[..7], &[0, 1, 2, 3, 4, 5, 0]);
        assert!(engines.windows(2).all(|p| p[0] != p[1]));
        let mut ids = rr.chain().to_vec();
        ids.sort();
        assert_eq!(ids, (0..24).collect::<Vec<_>>());
    }

    /// The brief's modelling hint for P1: static RR over N threads with b blocks per packet
    /// puts the SOPs on only N / gcd(N, b) threads (e.g. 24 threads, 256-byte packets = 4
    /// blocks: 6 threads do all the header work).
    #[test]
    fn static_rr_sops_land_on_n_over_gcd() {
        for (engines, threads) in [(6, 4), (2, 4), (4, 1), (3, 2), (6, 1), (1, 8)] {
            let n = engines * threads;
            let w = WorkerView::uniform(engines, threads);
            let view = WorkerView::new(&w);
            for b in 1..=10usize {
                let mut rr = StaticRoundRobin::new();
                let mut sop_threads = BTreeSet::new();
                for _ in 0..(3 * n) {
                    for block in packet_blocks(b as u32 * 64, 64) {
                        let id = rr.assign(block, &view, 0).unwrap();
                        if block.carries_header() {
                            sop_threads.insert(id);
                        }
                    }
                }
                assert_eq!(sop_threads.len(), n / gcd(n, b), "N {n} b {b}");
            }
        }
    }

    /// Static RR hands a block to its busy successor; modified RR skips it.
    #[test]
    fn modified_rr_skips_busy_successor() {
        let mut w = WorkerView::uniform(2, 2); // chain: 0 (e0), 2 (e1), 1 (e0), 3 (e1)
        let mut rr = StaticRoundRobin::new();
        let mut mrr = ModifiedRoundRobin::new();
        assert_eq!(rr.assign(BlockKind::Sop, &WorkerView::new(&w), 0), Some(0));
        assert_eq!(mrr.assign(BlockKind::Sop, &WorkerView::new(&w), 0), Some(0));
        w[0].busy = true;
        w[2].busy = true; // the successor of 0 is busy with an SOP
        assert_eq!(
            rr.assign(BlockKind::Middle, &WorkerView::new(&w), 0),
            Some(2)
        );
        assert_eq!(
            mrr.assign(BlockKind::Middle, &WorkerView::new(&w), 0),
            Some(1)
        );
        assert_eq!(mrr.skipped(), 1);
        // the chain continues after the thread that took the block
        assert_eq!(mrr.assign(BlockKind::Eop, &WorkerView::new(&w), 0), Some(3));
        // all busy: the static successor (after 3 comes 0) takes it and the block waits
        for s in w.iter_mut() {
            *s = WorkerState { busy: true, ..*s };
        }
        assert_eq!(mrr.assign(BlockKind::Sop, &WorkerView::new(&w), 0), Some(0));
    }
}

//! Work stealing with packet affinity — a modern baseline for P1's policies (not in P1).
//!
//! Today's multi-core packet engines (DPDK run-to-completion pipelines, Linux RPS/RFS) keep
//! the work of one packet on one core for cache locality and balance load by letting idle
//! cores take work from busy ones. As a block dispatcher: an SOP (or SOP_EOP) goes to the
//! engine with the most idle threads (ties: lowest engine), to its longest-waiting thread, and
//! that engine becomes the packet's *home*; the packet's later blocks go to an idle thread of
//! the home engine, and only when the home engine has none does another engine's
//! longest-waiting idle thread *steal* the block (counted). No idle thread: the block waits.
//!
//! Cost: O(threads) per decision. Memory: one counter per engine, scratch, reused.

use super::{BlockKind, DecisionCost, Dispatch, DispatchProfile, WorkerId, WorkerView};
use crate::time::Instant;

#[derive(Debug, Clone, Default)]
pub struct WorkStealing {
    home: Option<usize>,
    steals: u64,
    idle_per_engine: Vec<usize>,
}

impl WorkStealing {
    pub fn new() -> Self {
        Self::default()
    }
    /// Blocks taken by a thread outside their packet's home engine.
    pub fn steals(&self) -> u64 {
        self.steals
    }
}

impl Dispatch for WorkStealing {
    fn assign(
        &mut self,
        block: BlockKind,
        workers: &WorkerView,
        _now: Instant,
    ) -> Option<WorkerId> {
        if block.carries_header() || self.home.is_none() {
            self.idle_per_engine.clear();
            self.idle_per_engine.resize(workers.engines(), 0);
            for w in workers.workers().iter().filter(|w| !w.busy) {
                self.idle_per_engine[w.engine] += 1;
            }
            let (engine, &idle) = self
                .idle_per_engine
                .iter()
                .enumerate()
                .max_by_key(|&(e, n)| (*n, std::cmp::Reverse(e)))?;
            if idle == 0 {
                return None;
            }
            self.home = Some(engine);
            return workers.longest_idle(|w| w.engine == engine);
        }
        let home = self.home?;
        if let Some(id) = workers.longest_idle(|w| w.engine == home) {
            return Some(id);
        }
        let id = workers.longest_idle(|_| true)?;
        self.steals += 1;
        Some(id)
    }
    fn profile(&self) -> DispatchProfile {
        DispatchProfile {
            decision_cost: DecisionCost::ScanIdle,
            needs_next_is_sop: false,
            may_assign_busy: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A packet's blocks stay on its home engine while it has idle threads; then they are
    /// stolen.
    #[test]
    fn blocks_follow_home_engine_then_steal() {
        let mut w = WorkerView::uniform(3, 2);
        w[0].busy = true; // engine 0 has 1 idle, engines 1 and 2 have 2
        let mut p = WorkStealing::new();
        let sop = p.assign(BlockKind::Sop, &WorkerView::new(&w), 0).unwrap();
        assert_eq!(w[sop].engine, 1);
        w[sop].busy = true;
        let mid = p
            .assign(BlockKind::Middle, &WorkerView::new(&w), 0)
            .unwrap();
        assert_eq!(w[mid].engine, 1);
        w[mid].busy = true;
        let eop = p.assign(BlockKind::Eop, &WorkerView::new(&w), 0).unwrap();
        assert_ne!(w[eop].engine, 1);
        assert_eq!(p.steals(), 1);
        for s in w.iter_mut() {
            s.busy = true;
        }
        assert_eq!(p.assign(BlockKind::Sop, &WorkerView::new(&w), 0), None);
        assert_eq!(p.assign(BlockKind::Middle, &WorkerView::new(&w), 0), None);
    }
}

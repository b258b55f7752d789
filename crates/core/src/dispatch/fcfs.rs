//! FCFS and modified FCFS (P1 §II).
//!
//! **FCFS**: the thread handing off "finds a thread that has finished its block and is
//! waiting, and makes it the successor" (P1 §II). We take the idle thread that has waited
//! longest (first come, first served among waiting threads; ties: lowest id). If none is idle,
//! the block waits in the shared buffer (`None`).
//!
//! **Modified FCFS**: FCFS, but SOP blocks are spread over the engines "using a field that
//! records how many SOPs each processor has" (P1 §II): an SOP (or SOP_EOP) goes to an idle
//! thread on the engine with the fewest SOPs assigned so far (ties: the longest-waiting
//! thread). To know that the next block is an SOP the current thread must first recognise its
//! own block as an EOP, so the hand-off signal goes out late — reported by
//! `profile().needs_next_is_sop` for simulators to charge.
//!
//! Cost: O(threads) per decision (a scan of the idle threads). Memory: one counter per engine.

use super::{BlockKind, DecisionCost, Dispatch, DispatchProfile, WorkerId, WorkerView};
use crate::time::Instant;

/// P1 FCFS: the longest-waiting idle thread.
#[derive(Debug, Clone, Default)]
pub struct Fcfs;

impl Fcfs {
    pub fn new() -> Self {
        Self
    }
}

impl Dispatch for Fcfs {
    fn assign(
        &mut self,
        _block: BlockKind,
        workers: &WorkerView,
        _now: Instant,
    ) -> Option<WorkerId> {
        workers.longest_idle(|_| true)
    }
    fn profile(&self) -> DispatchProfile {
        DispatchProfile {
            decision_cost: DecisionCost::ScanIdle,
            needs_next_is_sop: false,
            may_assign_busy: false,
        }
    }
}

/// P1 Modified FCFS: FCFS with SOPs spread over engines by a per-engine SOP counter.
#[derive(Debug, Clone, Default)]
pub struct ModifiedFcfs {
    sop_per_engine: Vec<u64>,
}

impl ModifiedFcfs {
    pub fn new() -> Self {
        Self::default()
    }
    /// SOP (and SOP_EOP) blocks assigned to each engine so far.
    pub fn sop_counts(&self) -> &[u64] {
        &self.sop_per_engine
    }
}

impl Dispatch for ModifiedFcfs {
    fn assign(
        &mut self,
        block: BlockKind,
        workers: &WorkerView,
        _now: Instant,
    ) -> Option<WorkerId> {
        if !block.carries_header() {
            return workers.longest_idle(|_| true);
        }
        if self.sop_per_engine.len() < workers.engines() {
            self.sop_per_engine.resize(workers.engines(), 0);
        }
        let counts = &self.sop_per_engine;
        let id = workers
            .workers()
            .iter()
            .enumerate()
            .filter(|(_, w)| !w.busy)
            .min_by_key(|(id, w)| (counts[w.engine], w.idle_since, *id))
            .map(|(id, _)| id)?;
        let engine = workers.get(id)?.engine;
        self.sop_per_engine[engine] += 1;
        Some(id)
    }
    fn profile(&self) -> DispatchProfile {
        DispatchProfile {
            decision_cost: DecisionCost::ScanIdleAndCounters,
            needs_next_is_sop: true,
            may_assign_busy: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::WorkerState;
    use super::*;
    use crate::rng::SplitMix64;

    /// Random busy patterns on 6 engines × 4 threads, each engine keeping at least one idle
    /// thread; returns SOPs per engine after 600 packets of 4 blocks.
    fn sop_spread(policy: &mut dyn Dispatch) -> Vec<u64> {
        let mut rng = SplitMix64::new(11);
        let mut counts = vec![0u64; 6];
        let blocks = [
            BlockKind::Sop,
            BlockKind::Middle,
            BlockKind::Middle,
            BlockKind::Eop,
        ];
        for step in 0..2400u64 {
            let mut w = WorkerView::uniform(6, 4);
            for (id, s) in w.iter_mut().enumerate() {
                *s = WorkerState {
                    engine: id / 4,
                    busy: id % 4 != 0 && rng.below(2) == 0,
                    idle_since: rng.below(1000),
                };
            }
            let block = blocks[(step % 4) as usize];
            let id = policy.assign(block, &WorkerView::new(&w), step).unwrap();
            assert!(!w[id].busy);
            if block.carries_header() {
                counts[w[id].engine] += 1;
            }
        }
        counts
    }

    /// P1 §II: modified FCFS spreads SOP blocks evenly over the engines; plain FCFS does not.
    #[test]
    fn modified_fcfs_spreads_sops_evenly() {
        let mut m = ModifiedFcfs::new();
        let spread = sop_spread(&mut m);
        assert_eq!(spread.iter().sum::<u64>(), 600);
        let (lo, hi) = (spread.iter().min().unwrap(), spread.iter().max().unwrap());
        assert!(hi - lo <= 1, "modified FCFS SOPs per engine {spread:?}");
        assert_eq!(m.sop_counts(), &spread[..]);
        let plain = sop_spread(&mut Fcfs::new());
        let (lo, hi) = (plain.iter().min().unwrap(), plain.iter().max().unwrap());
        assert!(hi - lo > 5, "FCFS SOPs per engine {plain:?}");
    }

    /// FCFS: the longest-waiting idle thread; `None` when all are busy.
    #[test]
    fn fcfs_takes_longest_waiting() {
        let mut w = WorkerView::uniform(2, 2);
        w[0].busy = true;
        w[1].idle_since = 50;
        w[2].idle_since = 20;
        w[3].idle_since = 20;
        let mut f = Fcfs::new();
        assert_eq!(f.assign(BlockKind::Sop, &WorkerView::new(&w), 60), Some(2));
        for s in w.iter_mut() {
            s.busy = true;
        }
        assert_eq!(f.assign(BlockKind::Sop, &WorkerView::new(&w), 60), None);
        assert_eq!(
            ModifiedFcfs::new().assign(BlockKind::Sop, &WorkerView::new(&w), 60),
            None
        );
    }
}

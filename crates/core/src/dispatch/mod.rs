//! Dispatch policies: which worker thread takes the next packet block (P1).
//!
//! Source: P1, "A study of task scheduling algorithms for packet processing on a
//! multi-processor multi-threaded network system", Ajou Univ. (P1 in `docs/papers.md`),
//! §II: an Intel IXP1200 (6 microengines × 4 hardware threads) with one shared receive buffer
//! (centralised queue model); packets are cut into fixed blocks (64-byte mpackets) of four
//! kinds — SOP (first block, carries the header, expensive: matched against the filter
//! rules), EOP (last), nSOP_nEOP (middle) and SOP_EOP (a packet in one block). The thread that
//! takes a block signals its successor, which takes the next block.
//!
//! ## The interface
//! A policy is one method, [`Dispatch::assign`]: given the kind of the next block and a
//! [`WorkerView`] (which threads exist, on which engine, busy or idle and since when), name
//! the worker that takes it. `None` means "no worker now, the block waits in the shared buffer;
//! ask again when a worker becomes idle". A policy may name a *busy* worker (static RR): the
//! block then waits for that worker — the stall P1 describes. [`Dispatch::profile`] tells a
//! simulator what the decision costs ([`DecisionCost`]) and whether the hand-off signal can
//! only be sent once the current block is known to be an EOP (`needs_next_is_sop`, modified
//! FCFS: "the mail is sent considerably later", P1 §II), so both overheads can be modelled.
//!
//! ## Policies
//! | policy | file | P1 name | decision |
//! |---|---|---|---|
//! | [`StaticRoundRobin`] | `rr.rs` | Round-Robin | fixed successor on another engine, even if busy |
//! | [`ModifiedRoundRobin`] | `rr.rs` | Modified RR | the fixed successor, skipping busy ones |
//! | [`Fcfs`] | `fcfs.rs` | FCFS | the thread that has waited idle longest |
//! | [`ModifiedFcfs`] | `fcfs.rs` | Modified FCFS | FCFS, SOPs spread over engines by a per-engine SOP counter |
//! | [`WorkStealing`] | `steal.rs` | (modern baseline) | blocks follow their packet's engine; idle engines steal |
//!
//! Whole-packet policies for engines that keep flows on one worker: [`FlowDispatch`]
//! (`flow.rs`: RSS-style flow hash, and stealing of drained hash buckets), and the per-flow
//! reorder window [`FlowOrder`] (`order.rs`) that restores order after block dispatch.
//!
//! [`AnyDispatch`] is the enum engines dispatch through and [`DispatchConfig`] its serde form
//! (`kind = "static_rr" | "modified_rr" | "fcfs" | "modified_fcfs" | "work_stealing"`).
//!
//! Modelling hint (P1 brief), tested in `rr.rs`: with static RR over `N` threads and `b`
//! blocks per packet, SOPs land on only `N / gcd(N, b)` threads.

use crate::time::Instant;
use serde::{Deserialize, Serialize};

mod fcfs;
mod flow;
mod order;
mod rr;
mod steal;
pub use fcfs::{Fcfs, ModifiedFcfs};
pub use flow::{FlowDispatch, FlowMode};
pub use order::{FlowOrder, OrderCounters, Release, Ticket};
pub use rr::{ModifiedRoundRobin, StaticRoundRobin};
pub use steal::WorkStealing;

/// Index of a worker thread in the [`WorkerView`].
pub type WorkerId = usize;

/// Block kinds of P1 §II (IXP1200 mpackets).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockKind {
    /// Start of packet: carries the header, the expensive block (filter matching).
    Sop,
    /// End of packet.
    Eop,
    /// Neither first nor last (nSOP_nEOP).
    Middle,
    /// The whole packet in one block (SOP_EOP, e.g. 64-byte packets).
    Single,
}

impl BlockKind {
    /// True for the blocks that carry the header (SOP and SOP_EOP).
    pub fn carries_header(self) -> bool {
        matches!(self, BlockKind::Sop | BlockKind::Single)
    }
    /// True for the last block of a packet (EOP and SOP_EOP): the next block is an SOP.
    pub fn ends_packet(self) -> bool {
        matches!(self, BlockKind::Eop | BlockKind::Single)
    }
}

/// The blocks of a packet of `len` bytes cut into `block_bytes` blocks (64 on the IXP1200):
/// `[Single]` if it fits one block, else `Sop, Middle…, Eop`. Zero-length packets are one
/// block; `block_bytes` 0 is treated as 1.
pub fn packet_blocks(len: u32, block_bytes: u32) -> impl Iterator<Item = BlockKind> {
    let b = block_bytes.max(1);
    let count = len.div_ceil(b).max(1);
    (0..count).map(move |i| match (i, count) {
        (_, 1) => BlockKind::Single,
        (0, _) => BlockKind::Sop,
        (i, c) if i + 1 == c => BlockKind::Eop,
        _ => BlockKind::Middle,
    })
}

/// One worker thread as a policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerState {
    /// The engine (processor, core) the thread runs on.
    pub engine: usize,
    /// Processing a block now.
    pub busy: bool,
    /// When it last became idle (meaningful when not busy; FCFS picks the smallest).
    pub idle_since: Instant,
}

/// The workers, indexed by [`WorkerId`].
#[derive(Debug, Clone, Copy)]
pub struct WorkerView<'a> {
    workers: &'a [WorkerState],
}

impl<'a> WorkerView<'a> {
    pub fn new(workers: &'a [WorkerState]) -> Self {
        Self { workers }
    }
    /// `engines × threads_per_engine` idle workers, thread `t` of engine `e` at id
    /// `e · threads_per_engine + t` (the IXP1200: 6 × 4).
    pub fn uniform(engines: usize, threads_per_engine: usize) -> Vec<WorkerState> {
        (0..engines * threads_per_engine)
            .map(|id| WorkerState {
                engine: id / threads_per_engine.max(1),
                busy: false,
                idle_since: 0,
            })
            .collect()
    }
    pub fn len(&self) -> usize {
        self.workers.len()
    }
    pub fn is_empty(&self) -> bool {
        self.workers.is_empty()
    }
    pub fn get(&self, id: WorkerId) -> Option<&WorkerState> {
        self.workers.get(id)
    }
    pub fn workers(&self) -> &'a [WorkerState] {
        self.workers
    }
    /// Number of engines (highest engine index + 1).
    pub fn engines(&self) -> usize {
        self.workers.iter().map(|w| w.engine + 1).max().unwrap_or(0)
    }
    /// The idle worker that has waited longest (ties: lowest id), among those `filter` keeps.
    pub fn longest_idle(&self, filter: impl Fn(&WorkerState) -> bool) -> Option<WorkerId> {
        self.workers
            .iter()
            .enumerate()
            .filter(|(_, w)| !w.busy && filter(w))
            .min_by_key(|(id, w)| (w.idle_since, *id))
            .map(|(id, _)| id)
    }
}

/// What a policy's decision costs, for simulators that charge it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionCost {
    /// A fixed successor: no decision at hand-off (static RR).
    Static,
    /// Walk the successor chain until an idle thread (modified RR): O(threads) worst case.
    SkipBusy,
    /// Scan the idle threads for the longest-waiting one (FCFS, work stealing).
    ScanIdle,
    /// Scan idle threads and the per-engine SOP counters (modified FCFS).
    ScanIdleAndCounters,
}

/// Facts a simulator needs to charge a policy's overheads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DispatchProfile {
    pub decision_cost: DecisionCost,
    /// The hand-off signal can be sent only after the current block has been read far enough
    /// to know it is an EOP, i.e. that the next block is an SOP (modified FCFS, P1 §II).
    pub needs_next_is_sop: bool,
    /// The policy may name a busy worker (the block then waits for it).
    pub may_assign_busy: bool,
}

/// A block-to-worker dispatch policy.
pub trait Dispatch {
    /// The worker that takes the next block of kind `block`, or `None` if it must wait for a
    /// worker to become idle.
    fn assign(&mut self, block: BlockKind, workers: &WorkerView, now: Instant) -> Option<WorkerId>;

    /// Overheads to model; see [`DispatchProfile`].
    fn profile(&self) -> DispatchProfile {
        DispatchProfile {
            decision_cost: DecisionCost::ScanIdle,
            needs_next_is_sop: false,
            may_assign_busy: false,
        }
    }
}

/// Configuration of a dispatch policy (TOML/JSON `kind = "..."`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum DispatchConfig {
    StaticRr {},
    ModifiedRr {},
    Fcfs {},
    ModifiedFcfs {},
    WorkStealing {},
}

crate::kinds::kinds! {
    /// Every dispatch policy kind, named as `kind = "..."` reads it; see
    /// [`crate::qdisc::QdiscKind`] for how it forces coverage.
    pub enum DispatchKind {
        StaticRr => "static_rr",
        ModifiedRr => "modified_rr",
        Fcfs => "fcfs",
        ModifiedFcfs => "modified_fcfs",
        WorkStealing => "work_stealing",
    }
}

impl DispatchConfig {
    /// Which kind this is.
    pub fn kind(&self) -> DispatchKind {
        match self {
            DispatchConfig::StaticRr {} => DispatchKind::StaticRr,
            DispatchConfig::ModifiedRr {} => DispatchKind::ModifiedRr,
            DispatchConfig::Fcfs {} => DispatchKind::Fcfs,
            DispatchConfig::ModifiedFcfs {} => DispatchKind::ModifiedFcfs,
            DispatchConfig::WorkStealing {} => DispatchKind::WorkStealing,
        }
    }

    /// The configuration of `kind` (every kind has one, with no options today).
    pub fn of_kind(kind: DispatchKind) -> DispatchConfig {
        match kind {
            DispatchKind::StaticRr => DispatchConfig::StaticRr {},
            DispatchKind::ModifiedRr => DispatchConfig::ModifiedRr {},
            DispatchKind::Fcfs => DispatchConfig::Fcfs {},
            DispatchKind::ModifiedFcfs => DispatchConfig::ModifiedFcfs {},
            DispatchKind::WorkStealing => DispatchConfig::WorkStealing {},
        }
    }

    /// Build the policy. (No field can be wrong today; `Result` keeps the shape of the
    /// other `build`s.)
    pub fn build(&self) -> Result<AnyDispatch, DispatchConfigError> {
        Ok(match self {
            DispatchConfig::StaticRr {} => AnyDispatch::StaticRr(StaticRoundRobin::new()),
            DispatchConfig::ModifiedRr {} => AnyDispatch::ModifiedRr(ModifiedRoundRobin::new()),
            DispatchConfig::Fcfs {} => AnyDispatch::Fcfs(Fcfs::new()),
            DispatchConfig::ModifiedFcfs {} => AnyDispatch::ModifiedFcfs(ModifiedFcfs::new()),
            DispatchConfig::WorkStealing {} => AnyDispatch::WorkStealing(WorkStealing::new()),
        })
    }
}

/// Why a dispatch policy refuses its configuration. No policy has an option that can be
/// wrong today, so there is no variant: `build` cannot fail, and the compiler knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DispatchConfigError {}

impl core::fmt::Display for DispatchConfigError {
    fn fmt(&self, _: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {}
    }
}

impl std::error::Error for DispatchConfigError {}

/// Every policy, statically dispatched.
#[derive(Debug, Clone)]
pub enum AnyDispatch {
    StaticRr(StaticRoundRobin),
    ModifiedRr(ModifiedRoundRobin),
    Fcfs(Fcfs),
    ModifiedFcfs(ModifiedFcfs),
    WorkStealing(WorkStealing),
}

impl AnyDispatch {
    pub fn name(&self) -> &'static str {
        self.kind().name()
    }

    /// Which kind this is.
    pub fn kind(&self) -> DispatchKind {
        match self {
            AnyDispatch::StaticRr(_) => DispatchKind::StaticRr,
            AnyDispatch::ModifiedRr(_) => DispatchKind::ModifiedRr,
            AnyDispatch::Fcfs(_) => DispatchKind::Fcfs,
            AnyDispatch::ModifiedFcfs(_) => DispatchKind::ModifiedFcfs,
            AnyDispatch::WorkStealing(_) => DispatchKind::WorkStealing,
        }
    }
}

impl Dispatch for AnyDispatch {
    #[inline]
    fn assign(&mut self, block: BlockKind, workers: &WorkerView, now: Instant) -> Option<WorkerId> {
        match self {
            AnyDispatch::StaticRr(p) => p.assign(block, workers, now),
            AnyDispatch::ModifiedRr(p) => p.assign(block, workers, now),
            AnyDispatch::Fcfs(p) => p.assign(block, workers, now),
            AnyDispatch::ModifiedFcfs(p) => p.assign(block, workers, now),
            AnyDispatch::WorkStealing(p) => p.assign(block, workers, now),
        }
    }
    fn profile(&self) -> DispatchProfile {
        match self {
            AnyDispatch::StaticRr(p) => p.profile(),
            AnyDispatch::ModifiedRr(p) => p.profile(),
            AnyDispatch::Fcfs(p) => p.profile(),
            AnyDispatch::ModifiedFcfs(p) => p.profile(),
            AnyDispatch::WorkStealing(p) => p.profile(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use BlockKind::*;

    /// IXP1200 64-byte mpackets (P1 §II): 64 B is one SOP_EOP block, 256 B is four blocks.
    #[test]
    fn packet_blocks_cut_like_mpackets() {
        let cut = |len| packet_blocks(len, 64).collect::<Vec<_>>();
        assert_eq!(cut(64), [Single]);
        assert_eq!(cut(40), [Single]);
        assert_eq!(cut(65), [Sop, Eop]);
        assert_eq!(cut(256), [Sop, Middle, Middle, Eop]);
        assert_eq!(cut(1500).len(), 24);
        assert!(Sop.carries_header() && Single.carries_header() && !Eop.carries_header());
        assert!(Eop.ends_packet() && Single.ends_packet() && !Middle.ends_packet());
    }

    #[test]
    fn config_round_trip_and_profiles() {
        for &k in DispatchKind::ALL {
            // Exhaustive: a new policy fails to compile until its profile is stated here.
            let (cost, late) = match k {
                DispatchKind::StaticRr => (DecisionCost::Static, false),
                DispatchKind::ModifiedRr => (DecisionCost::SkipBusy, false),
                DispatchKind::Fcfs => (DecisionCost::ScanIdle, false),
                DispatchKind::ModifiedFcfs => (DecisionCost::ScanIdleAndCounters, true),
                DispatchKind::WorkStealing => (DecisionCost::ScanIdle, false),
            };
            let kind = k.name();
            let cfg: DispatchConfig =
                serde_json::from_str(&format!(r#"{{"kind":"{kind}"}}"#)).unwrap();
            assert_eq!(cfg, DispatchConfig::of_kind(k));
            assert_eq!(cfg.kind(), k);
            let p = cfg.build().unwrap();
            assert_eq!(p.kind(), k);
            assert_eq!(p.name(), kind);
            assert_eq!(p.profile().decision_cost, cost, "{kind}");
            assert_eq!(p.profile().needs_next_is_sop, late, "{kind}");
            assert_eq!(
                serde_json::to_string(&cfg).unwrap(),
                format!(r#"{{"kind":"{kind}"}}"#)
            );
        }
        let err = serde_json::from_str::<DispatchConfig>(r#"{"kind":"lottery"}"#).unwrap_err();
        assert!(err.to_string().contains("lottery"), "{err}");
        let err =
            serde_json::from_str::<DispatchConfig>(r#"{"kind":"fcfs","engines":6}"#).unwrap_err();
        assert!(err.to_string().contains("engines"), "{err}");
    }

    /// Every policy returns a worker that exists, and `None` only when it may wait.
    #[test]
    fn assignments_are_valid_workers() {
        let mut rng = crate::rng::SplitMix64::new(3);
        for &kind in DispatchKind::ALL {
            let mut p = DispatchConfig::of_kind(kind).build().unwrap();
            let mut w = WorkerView::uniform(6, 4);
            for step in 0..2000u64 {
                for s in w.iter_mut() {
                    if rng.below(4) == 0 {
                        s.busy = !s.busy;
                        s.idle_since = step;
                    }
                }
                let view = WorkerView::new(&w);
                let kind_of = [Sop, Middle, Eop, Single][rng.below(4) as usize];
                match p.assign(kind_of, &view, step) {
                    Some(id) => {
                        assert!(id < 24);
                        if !p.profile().may_assign_busy {
                            assert!(!w[id].busy, "{kind} assigned a busy worker");
                        }
                    }
                    None => assert!(w.iter().all(|s| s.busy), "{kind} waited with idle workers"),
                }
            }
            let none: Vec<WorkerState> = Vec::new();
            assert_eq!(p.assign(Sop, &WorkerView::new(&none), 0), None);
        }
    }
}

//! np-dispatch's model: the typed scenario with its bounds, the cost model, and one simulated
//! configuration (policy × packet size) of the hand-off chain on the engines' ALUs.

use anyhow::{anyhow, bail};
use netsched_core::dispatch::{
    packet_blocks, AnyDispatch, BlockKind, DecisionCost, Dispatch, DispatchConfig, WorkerState,
    WorkerView,
};
use netsched_core::rng::SplitMix64;
use netsched_core::Nanos;
use netsched_sim::event::EventQueue;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The cost model (nanoseconds of engine ALU time unless said otherwise).
#[derive(Debug, Clone)]
pub struct Costs {
    pub sop_ns: f64,
    pub middle_ns: f64,
    pub eop_ns: f64,
    pub jitter: f64,
    pub signal_ns: f64,
    pub decision_static_ns: f64,
    pub decision_skip_per_thread_ns: f64,
    pub decision_scan_idle_ns: f64,
    pub decision_scan_counters_ns: f64,
    pub late_signal_ns: f64,
    pub lock_ns: f64,
    /// Latency of one read of shared dispatch state (thread status word, per-engine SOP
    /// counters) by the deciding thread, in ns: `mem_read_cycles / clock_mhz`. Not ALU time —
    /// the thread swaps out while it waits — but it sits on the hand-off chain's critical path:
    /// the successor cannot be signalled before the read returns.
    pub mem_read_ns: f64,
    /// Dependent (serial) shared-state reads per decision, by `DecisionCost` class.
    pub reads_static: f64,
    pub reads_skip_busy: f64,
    pub reads_scan_idle: f64,
    pub reads_scan_counters: f64,
}

/// One configuration.
#[derive(Debug, Clone)]
pub struct NpConfig {
    pub engines: usize,
    pub threads_per_engine: usize,
    pub block_bytes: u32,
    pub packet_bytes: u32,
    pub packets: usize,
    /// A core `DispatchConfig` kind, or `shared_queue`.
    pub policy: String,
    pub costs: Costs,
}

/// What one configuration measured.
#[derive(Debug, Clone, PartialEq)]
pub struct NpResult {
    pub idle_pct: f64,
    pub rate_mbps: f64,
    pub elapsed_us: f64,
    /// Time blocks waited for a named-but-busy successor or for any idle thread (µs, summed).
    pub stall_us: f64,
    /// ALU time spent deciding (µs, summed over engines).
    pub decision_us: f64,
    /// Time the hand-off chain waited on shared-state reads (µs, summed over decisions).
    pub read_wait_us: f64,
    /// Threads that processed at least one header block (SOP / SOP_EOP).
    pub sop_threads: usize,
    pub blocks: usize,
    /// Per thread: ALU time of the blocks it ran (µs) and the header blocks among them.
    pub thread_work_us: Vec<f64>,
    pub thread_sops: Vec<u64>,
}

enum Ev {
    /// Worker takes block i.
    Take { worker: usize, block: usize },
    /// The decision about who takes block i is made now.
    Decide { block: usize },
    /// Worker finished its block.
    Finish { worker: usize },
    /// Shared-queue mode: the worker acquired the buffer lock and takes the head block.
    Pull { worker: usize },
}

struct Worker {
    state: WorkerState,
    /// Block waiting for this busy worker, with the time its mail arrived.
    pending: Option<(usize, Nanos)>,
    sop_seen: bool,
    work_ns: f64,
    sops: u64,
}

/// Simulate one configuration.
pub fn simulate(cfg: &NpConfig, seed: u64) -> anyhow::Result<NpResult> {
    let mut chain = Chain::new(cfg, seed)?;
    while let Some((now, ev)) = chain.q.pop() {
        match ev {
            Ev::Decide { block } => chain.decide(block, now)?,
            Ev::Take { worker, block } => chain.take(worker, block, now),
            Ev::Finish { worker } => chain.finish(worker, now),
            Ev::Pull { worker } => chain.pull(worker, now),
        }
    }
    chain.result()
}

/// The dispatch policy of `cfg`; none for the shared queue.
fn dispatch_policy(cfg: &NpConfig) -> anyhow::Result<Option<AnyDispatch>> {
    if cfg.policy == "shared_queue" {
        return Ok(None);
    }
    let c: DispatchConfig = serde_json::from_value(json!({ "kind": cfg.policy }))
        .map_err(|e| anyhow!("unknown dispatch policy {:?}: {e}", cfg.policy))?;
    Ok(Some(
        c.build()
            .map_err(|e| anyhow!("policy {}: {e}", cfg.policy))?,
    ))
}

/// What a hand-off costs under a policy (none: the shared queue, no hand-off): the decision's
/// ALU time, the wait for the shared state it reads first, and the late signal of a policy
/// that must know whether the next block starts a packet.
struct HandOff {
    decision_ns: f64,
    read_ns: f64,
    late_ns: f64,
}

impl HandOff {
    fn of(c: &Costs, policy: Option<&AnyDispatch>) -> Self {
        let profile = policy.map(|p| p.profile());
        let decision_ns = match profile.map(|p| p.decision_cost) {
            None => 0.0,
            Some(DecisionCost::Static) => c.decision_static_ns,
            Some(DecisionCost::SkipBusy) => c.decision_skip_per_thread_ns,
            Some(DecisionCost::ScanIdle) => c.decision_scan_idle_ns,
            Some(DecisionCost::ScanIdleAndCounters) => c.decision_scan_counters_ns,
        };
        let read_ns = c.mem_read_ns
            * match profile.map(|p| p.decision_cost) {
                None => 0.0,
                Some(DecisionCost::Static) => c.reads_static,
                Some(DecisionCost::SkipBusy) => c.reads_skip_busy,
                Some(DecisionCost::ScanIdle) => c.reads_scan_idle,
                Some(DecisionCost::ScanIdleAndCounters) => c.reads_scan_counters,
            };
        let late_ns = if profile.map(|p| p.needs_next_is_sop).unwrap_or(false) {
            c.late_signal_ns
        } else {
            0.0
        };
        HandOff {
            decision_ns,
            read_ns,
            late_ns,
        }
    }
}

/// ALU time of a block of kind `k`, with the cost model's jitter.
fn block_cost(c: &Costs, k: BlockKind, rng: &mut SplitMix64) -> f64 {
    let base = match k {
        BlockKind::Sop => c.sop_ns,
        BlockKind::Single => c.sop_ns + c.eop_ns,
        BlockKind::Middle => c.middle_ns,
        BlockKind::Eop => c.eop_ns,
    };
    base * (1.0 + c.jitter * (2.0 * rng.unit() - 1.0))
}

/// One configuration being simulated: the blocks, the threads, the engines' ALU clocks, the
/// events, and the tallies of the result.
struct Chain<'a> {
    cfg: &'a NpConfig,
    kinds: Vec<BlockKind>,
    shared: bool,
    policy: Option<AnyDispatch>,
    hand_off: HandOff,
    workers: Vec<Worker>,
    engine_free: Vec<Nanos>,
    useful_ns: f64,
    decision_total: f64,
    stall_ns: f64,
    read_wait_ns: f64,
    waiting_decision: Option<(usize, Nanos)>,
    finished: usize,
    last_finish: Nanos,
    next_shared: usize,
    lock_free: Nanos,
    q: EventQueue<Ev>,
    rng: SplitMix64,
}

impl<'a> Chain<'a> {
    /// The configuration's blocks and threads, and the first events: every thread queues for
    /// the buffer lock (shared queue), or the first block's decision (hand-off chain).
    fn new(cfg: &'a NpConfig, seed: u64) -> anyhow::Result<Self> {
        let rng = SplitMix64::new(seed);
        let kinds: Vec<BlockKind> = (0..cfg.packets)
            .flat_map(|_| packet_blocks(cfg.packet_bytes, cfg.block_bytes))
            .collect();
        let policy = dispatch_policy(cfg)?;
        let hand_off = HandOff::of(&cfg.costs, policy.as_ref());
        let workers: Vec<Worker> = WorkerView::uniform(cfg.engines, cfg.threads_per_engine)
            .into_iter()
            .map(|state| Worker {
                state,
                pending: None,
                sop_seen: false,
                work_ns: 0.0,
                sops: 0,
            })
            .collect();
        if workers.is_empty() {
            bail!("processor has no threads (engines × threads_per_engine = 0)");
        }
        let mut chain = Chain {
            cfg,
            kinds,
            shared: policy.is_none(),
            policy,
            hand_off,
            workers,
            engine_free: vec![0; cfg.engines],
            useful_ns: 0.0,
            decision_total: 0.0,
            stall_ns: 0.0,
            read_wait_ns: 0.0,
            waiting_decision: None,
            finished: 0,
            last_finish: 0,
            next_shared: 0,
            lock_free: 0,
            q: EventQueue::new(),
            rng,
        };
        if chain.shared {
            let lock_ns = cfg.costs.lock_ns as Nanos;
            for (w, wk) in chain.workers.iter_mut().enumerate() {
                wk.state.busy = true;
                let at = chain.lock_free + lock_ns;
                chain.lock_free = at;
                chain.q.schedule(at, Ev::Pull { worker: w });
            }
        } else {
            chain.q.schedule(0, Ev::Decide { block: 0 });
        }
        Ok(chain)
    }

    /// The policy names the thread that takes `block`: it takes it when the signal arrives,
    /// or after its current block; no thread named, the block waits for the next idle one.
    fn decide(&mut self, block: usize, now: Nanos) -> anyhow::Result<()> {
        let cfg = self.cfg;
        let c = &cfg.costs;
        let p = self.policy.as_mut().expect("chain mode has a policy");
        let states: Vec<WorkerState> = self.workers.iter().map(|w| w.state).collect();
        let skipped_before = match p {
            AnyDispatch::ModifiedRr(m) => m.skipped(),
            _ => 0,
        };
        match p.assign(self.kinds[block], &WorkerView::new(&states), now) {
            Some(w) if w < self.workers.len() => {
                if let AnyDispatch::ModifiedRr(m) = p {
                    // Walking past busy threads costs ALU time on the decider's side;
                    // charged as decision time.
                    let extra =
                        (m.skipped() - skipped_before) as f64 * c.decision_skip_per_thread_ns;
                    self.decision_total += extra;
                }
                let ready = now + c.signal_ns as Nanos;
                if self.workers[w].state.busy {
                    self.workers[w].pending = Some((block, ready));
                } else {
                    self.workers[w].state.busy = true;
                    self.q.schedule(ready, Ev::Take { worker: w, block });
                }
            }
            Some(w) => bail!(
                "policy {} named worker {w} of {}",
                cfg.policy,
                self.workers.len()
            ),
            None => self.waiting_decision = Some((block, now)),
        }
        Ok(())
    }

    /// `worker` takes `block`: its engine's ALU runs the hand-off decision and the block, and
    /// the next block's decision is made as soon as the thread has this one.
    fn take(&mut self, worker: usize, block: usize, now: Nanos) {
        let c = &self.cfg.costs;
        let n_blocks = self.kinds.len();
        let k = self.kinds[block];
        let cost = block_cost(c, k, &mut self.rng);
        if k.carries_header() {
            self.workers[worker].sop_seen = true;
            self.workers[worker].sops += 1;
        }
        let e = self.workers[worker].state.engine;
        let start = self.engine_free[e].max(now);
        let d = if block + 1 < n_blocks && !self.shared {
            self.hand_off.decision_ns
        } else {
            0.0
        };
        // Whole nanoseconds, and the same rounding for the ALU clock and the idle-time
        // book-keeping (so idle time can never come out negative).
        let (cost_ns, d_ns) = (cost as Nanos, d as Nanos);
        let end = start + d_ns + cost_ns;
        self.engine_free[e] = end;
        self.useful_ns += cost_ns as f64;
        self.workers[worker].work_ns += cost_ns as f64;
        self.decision_total += d_ns as f64;
        if block + 1 < n_blocks && !self.shared {
            // The hand-off runs as soon as the thread has the block (threads switch on
            // every memory access, so a short decision does not queue behind the other
            // threads' blocks); its ALU time is still charged to the engine. A dynamic
            // decision first reads shared state (`read_ns`): the thread is swapped out
            // meanwhile, so the engine is not charged, but the successor is signalled
            // only after the read returns.
            let r_ns = self.hand_off.read_ns as Nanos;
            self.read_wait_ns += r_ns as f64;
            let decide_at = now + self.hand_off.late_ns as Nanos + d_ns + r_ns;
            self.q.schedule(decide_at, Ev::Decide { block: block + 1 });
        }
        self.q.schedule(end, Ev::Finish { worker });
    }

    /// `worker` finished its block: it queues for the lock again (shared queue), takes the
    /// block waiting for it, or goes idle and takes the decision that waited for an idle one.
    fn finish(&mut self, worker: usize, now: Nanos) {
        self.finished += 1;
        self.last_finish = now;
        if self.shared {
            if self.next_shared < self.kinds.len() {
                let at = self.lock_free.max(now) + self.cfg.costs.lock_ns as Nanos;
                self.lock_free = at;
                self.q.schedule(at, Ev::Pull { worker });
            } else {
                self.workers[worker].state.busy = false;
            }
            return;
        }
        if let Some((block, ready)) = self.workers[worker].pending.take() {
            self.stall_ns += now.saturating_sub(ready) as f64;
            self.q.schedule(now.max(ready), Ev::Take { worker, block });
        } else {
            self.workers[worker].state.busy = false;
            self.workers[worker].state.idle_since = now;
            if let Some((block, since)) = self.waiting_decision.take() {
                self.stall_ns += now.saturating_sub(since) as f64;
                self.q.schedule(now, Ev::Decide { block });
            }
        }
    }

    /// Shared queue: `worker` holds the buffer lock and takes the head block, if any.
    fn pull(&mut self, worker: usize, now: Nanos) {
        if self.next_shared >= self.kinds.len() {
            self.workers[worker].state.busy = false;
            return;
        }
        let block = self.next_shared;
        self.next_shared += 1;
        self.q.schedule(now, Ev::Take { worker, block });
    }

    /// The result, once no event is left; every block must have finished.
    fn result(self) -> anyhow::Result<NpResult> {
        let cfg = self.cfg;
        let (finished, n_blocks) = (self.finished, self.kinds.len());
        if finished != n_blocks {
            bail!(
                "np-dispatch {}: {finished} of {n_blocks} blocks finished (the chain deadlocked)",
                cfg.policy
            );
        }
        let elapsed = self.last_finish.max(1) as f64;
        let bytes = cfg.packets as f64 * cfg.packet_bytes as f64;
        Ok(NpResult {
            idle_pct: 100.0 * (1.0 - self.useful_ns / (cfg.engines as f64 * elapsed)),
            rate_mbps: bytes * 8.0 / elapsed * 1e3,
            elapsed_us: elapsed / 1e3,
            stall_us: self.stall_ns / 1e3,
            decision_us: self.decision_total / 1e3,
            read_wait_us: self.read_wait_ns / 1e3,
            sop_threads: self.workers.iter().filter(|w| w.sop_seen).count(),
            blocks: n_blocks,
            thread_work_us: self.workers.iter().map(|w| w.work_ns / 1e3).collect(),
            thread_sops: self.workers.iter().map(|w| w.sops).collect(),
        })
    }
}

/// Bounds on the scenario (far above P1's IXP1200: 6 engines × 4 threads, 64-byte blocks, four
/// packet sizes): a typo is a named error, not gigabytes of worker state or blocks.
pub const MAX_ENGINES: usize = 64;
pub const MAX_THREADS_PER_ENGINE: usize = 64;
pub const MAX_PACKET_SIZES: usize = 16;
pub const MAX_PACKET_BYTES: u32 = 65_535;
pub const MAX_PACKETS: usize = 1_000_000;
/// Blocks of one (policy, size) run, one byte each while it runs.
pub const MAX_BLOCKS: usize = 20_000_000;
pub const MAX_POLICIES: usize = 16;

/// The scenario file (`scenarios/np-dispatch.toml`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    pub processor: Processor,
    pub traffic: Traffic,
    pub cost: CostParams,
    pub policies: Policies,
    /// The report's sensitivity table (P1's four policies at variants of the cost model).
    #[serde(default = "yes")]
    pub sensitivity: bool,
    /// `[real]`: the run through `netsched filter` (`--real`), typed and checked by
    /// `crate::real::np_dispatch`; the simulation does not read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub real: Option<serde_json::Value>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Processor {
    pub engines: usize,
    pub threads_per_engine: usize,
    pub block_bytes: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Traffic {
    pub packet_sizes: Vec<u32>,
    pub packets: usize,
}

/// `[cost]` as written in the scenario (see `scenarios/np-dispatch.toml` for each key).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostParams {
    pub sop_base_ns: f64,
    pub per_rule_ns: f64,
    /// Filter rules each SOP is matched against, bounded by 0..=1e9 like every cost. The model
    /// takes them as a cost (SOP = base + rules × per-rule), so neither time nor memory grows
    /// with them: 100 to 10,000 rules measured the same CPU time and peak RSS (0.3 s and
    /// 6.3 MiB for the default scenario without the sensitivity table;
    /// docs/bench-lab-scale.md).
    pub rules: f64,
    pub middle_ns: f64,
    pub eop_ns: f64,
    pub jitter: f64,
    pub signal_ns: f64,
    pub decision_static_ns: f64,
    pub decision_skip_per_thread_ns: f64,
    pub decision_scan_idle_ns: f64,
    pub decision_scan_counters_ns: f64,
    pub mem_read_cycles: f64,
    pub clock_mhz: f64,
    pub decision_reads_static: f64,
    pub decision_reads_skip_busy: f64,
    pub decision_reads_scan_idle: f64,
    pub decision_reads_scan_counters: f64,
    pub late_signal_ns: f64,
    pub lock_ns: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policies {
    /// P1's policies (core `DispatchConfig` kinds); the checks are about these.
    pub compare: Vec<String>,
    /// Baselines P1 did not measure (`work_stealing`, `shared_queue`).
    #[serde(default)]
    pub extras: Vec<String>,
}

impl Params {
    /// Check every bound; errors name the key and the value.
    pub fn validate(&self) -> anyhow::Result<()> {
        let pr = &self.processor;
        let range = |key: &str, v: usize, max: usize| -> anyhow::Result<()> {
            if v == 0 || v > max {
                bail!("np-dispatch: {key} = {v}: must be in 1..={max}");
            }
            Ok(())
        };
        range("processor.engines", pr.engines, MAX_ENGINES)?;
        range(
            "processor.threads_per_engine",
            pr.threads_per_engine,
            MAX_THREADS_PER_ENGINE,
        )?;
        range(
            "processor.block_bytes",
            pr.block_bytes as usize,
            MAX_PACKET_BYTES as usize,
        )?;
        range("traffic.packets", self.traffic.packets, MAX_PACKETS)?;
        let sizes = &self.traffic.packet_sizes;
        if sizes.is_empty() || sizes.len() > MAX_PACKET_SIZES {
            bail!(
                "np-dispatch: traffic.packet_sizes has {} entries: must be 1..={MAX_PACKET_SIZES}",
                sizes.len()
            );
        }
        for &s in sizes {
            range(
                "traffic.packet_sizes[..]",
                s as usize,
                MAX_PACKET_BYTES as usize,
            )?;
            let blocks = self.traffic.packets * s.div_ceil(pr.block_bytes) as usize;
            if blocks > MAX_BLOCKS {
                bail!(
                    "np-dispatch: traffic.packets = {} of {s} B in {} B blocks = {blocks} blocks per run: at most {MAX_BLOCKS}",
                    self.traffic.packets,
                    pr.block_bytes
                );
            }
        }
        let n = self.policies.compare.len() + self.policies.extras.len();
        if self.policies.compare.is_empty() || n > MAX_POLICIES {
            bail!("np-dispatch: policies.compare + policies.extras: 1..={MAX_POLICIES} policies (compare not empty), got {n}");
        }
        let c = &self.cost;
        for (key, v) in [
            ("sop_base_ns", c.sop_base_ns),
            ("per_rule_ns", c.per_rule_ns),
            ("rules", c.rules),
            ("middle_ns", c.middle_ns),
            ("eop_ns", c.eop_ns),
            ("jitter", c.jitter),
            ("signal_ns", c.signal_ns),
            ("decision_static_ns", c.decision_static_ns),
            ("decision_skip_per_thread_ns", c.decision_skip_per_thread_ns),
            ("decision_scan_idle_ns", c.decision_scan_idle_ns),
            ("decision_scan_counters_ns", c.decision_scan_counters_ns),
            ("mem_read_cycles", c.mem_read_cycles),
            ("decision_reads_static", c.decision_reads_static),
            ("decision_reads_skip_busy", c.decision_reads_skip_busy),
            ("decision_reads_scan_idle", c.decision_reads_scan_idle),
            (
                "decision_reads_scan_counters",
                c.decision_reads_scan_counters,
            ),
            ("late_signal_ns", c.late_signal_ns),
            ("lock_ns", c.lock_ns),
        ] {
            if !(v.is_finite() && (0.0..=1e9).contains(&v)) {
                bail!("np-dispatch: cost.{key} = {v}: must be a number in 0..=1e9");
            }
        }
        if c.jitter >= 1.0 {
            bail!("np-dispatch: cost.jitter = {}: must be < 1", c.jitter);
        }
        if !(c.clock_mhz.is_finite() && c.clock_mhz > 0.0 && c.clock_mhz <= 100_000.0) {
            bail!(
                "np-dispatch: cost.clock = {}MHz: must be in (0, 100GHz]",
                c.clock_mhz
            );
        }
        Ok(())
    }

    /// The cost model in nanoseconds.
    pub fn costs(&self) -> Costs {
        let c = &self.cost;
        Costs {
            sop_ns: c.sop_base_ns + c.rules * c.per_rule_ns,
            middle_ns: c.middle_ns,
            eop_ns: c.eop_ns,
            jitter: c.jitter,
            signal_ns: c.signal_ns,
            decision_static_ns: c.decision_static_ns,
            decision_skip_per_thread_ns: c.decision_skip_per_thread_ns,
            decision_scan_idle_ns: c.decision_scan_idle_ns,
            decision_scan_counters_ns: c.decision_scan_counters_ns,
            late_signal_ns: c.late_signal_ns,
            lock_ns: c.lock_ns,
            mem_read_ns: c.mem_read_cycles * 1e3 / c.clock_mhz,
            reads_static: c.decision_reads_static,
            reads_skip_busy: c.decision_reads_skip_busy,
            reads_scan_idle: c.decision_reads_scan_idle,
            reads_scan_counters: c.decision_reads_scan_counters,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn costs() -> Costs {
        Costs {
            sop_ns: 900.0,
            middle_ns: 120.0,
            eop_ns: 120.0,
            jitter: 0.0,
            signal_ns: 20.0,
            decision_static_ns: 0.0,
            decision_skip_per_thread_ns: 6.0,
            decision_scan_idle_ns: 30.0,
            decision_scan_counters_ns: 45.0,
            late_signal_ns: 150.0,
            lock_ns: 40.0,
            mem_read_ns: 0.0,
            reads_static: 0.0,
            reads_skip_busy: 1.0,
            reads_scan_idle: 1.0,
            reads_scan_counters: 1.0,
        }
    }

    fn cfg(policy: &str, size: u32) -> NpConfig {
        NpConfig {
            engines: 6,
            threads_per_engine: 4,
            block_bytes: 64,
            packet_bytes: size,
            packets: 500,
            policy: policy.into(),
            costs: costs(),
        }
    }

    #[test]
    fn every_block_is_processed_and_work_is_conserved() {
        for p in [
            "static_rr",
            "fcfs",
            "modified_fcfs",
            "modified_rr",
            "work_stealing",
            "shared_queue",
        ] {
            let r = simulate(&cfg(p, 256), 1).unwrap();
            assert_eq!(r.blocks, 2000, "{p}");
            assert!(
                r.idle_pct >= 0.0 && r.idle_pct < 100.0,
                "{p}: {}",
                r.idle_pct
            );
        }
    }

    #[test]
    fn static_rr_at_64_bytes_is_alu_bound() {
        // Every block is SOP_EOP (1020 ns); 6 ALUs ⇒ at best 6 blocks per 1020 ns.
        let r = simulate(&cfg("static_rr", 64), 1).unwrap();
        let best_us = 500.0 * 1020.0 / 6.0 / 1e3;
        assert!(
            r.elapsed_us >= best_us * 0.999 && r.elapsed_us < best_us * 1.05,
            "{}",
            r.elapsed_us
        );
        assert_eq!(r.sop_threads, 24);
    }

    #[test]
    fn idle_time_is_never_negative_when_alus_are_saturated() {
        // The shared queue keeps every ALU busy at 256 B: idle time near 0 must not round
        // below it (fractional block costs once made it -0.07%).
        let mut c = cfg("shared_queue", 256);
        c.packets = 6000;
        c.costs.jitter = 0.1;
        let r = simulate(&c, 1).unwrap();
        assert!(r.idle_pct >= 0.0 && r.idle_pct < 5.0, "{}", r.idle_pct);
    }

    #[test]
    fn shared_state_read_delays_the_chain_but_costs_no_alu_time() {
        // FCFS at 1500 B is chain-bound: every hand-off takes mail 20 + decision 30 + read 65.
        let mut c = cfg("fcfs", 1500);
        c.costs.mem_read_ns = 65.0;
        let r = simulate(&c, 1).unwrap();
        let chain_us = 500.0 * 24.0 * (20.0 + 30.0 + 65.0) / 1e3;
        assert!(
            r.elapsed_us >= chain_us * 0.99 && r.elapsed_us < chain_us * 1.02,
            "{} vs {chain_us}",
            r.elapsed_us
        );
        assert!((r.read_wait_us - (r.blocks as f64 - 1.0) * 0.065).abs() < 1e-6);
        // The same decisions' ALU time with or without the read.
        c.costs.mem_read_ns = 0.0;
        let r0 = simulate(&c, 1).unwrap();
        assert!((r.decision_us - r0.decision_us).abs() < 1e-6);
        assert!(r0.elapsed_us < r.elapsed_us * 0.5);
        // Static RR reads nothing: identical results with and without a read latency.
        let mut rr = cfg("static_rr", 1500);
        let a = simulate(&rr, 1).unwrap();
        rr.costs.mem_read_ns = 65.0;
        assert_eq!(simulate(&rr, 1).unwrap(), a);
    }

    #[test]
    fn unknown_policy_is_an_error() {
        assert!(simulate(&cfg("lottery", 64), 1)
            .unwrap_err()
            .to_string()
            .contains("lottery"));
    }
}

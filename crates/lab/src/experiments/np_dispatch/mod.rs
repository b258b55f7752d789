//! The `np-dispatch` experiment (P1 in `docs/papers.md`): block dispatch policies
//! on a 6-engine × 4-thread network processor (Intel IXP1200), from `netsched_core::dispatch`.
//!
//! Model (discrete events on `netsched_sim::event::EventQueue`):
//! - the receive buffer always holds the next block (saturated input); packets of one size are
//!   cut into 64-byte blocks by `dispatch::packet_blocks` (SOP, middle…, EOP, or SOP_EOP);
//! - a hand-off chain: the thread that takes block i decides who takes block i+1 (the core
//!   policy's `assign`), pays the policy's decision cost on its engine's ALU, and mails the
//!   successor (`signal_ns`). A dynamic policy first reads shared dispatch state (thread
//!   status, SOP counters: scratchpad/SRAM on the IXP1200) — `mem_read_ns` per dependent read,
//!   by decision class: latency on the chain's critical path, not ALU time (the thread swaps
//!   out while it waits). Static RR reads nothing. Modified FCFS can mail only after recognising its own block as an
//!   EOP (`late_signal_ns`, the core's `needs_next_is_sop`). A successor that is still busy
//!   (static RR may name one) takes the block when it finishes — the chain stalls meanwhile;
//!   if the policy names nobody (no idle thread) the hand-off waits for the next idle thread;
//! - each engine has one ALU shared by its four threads (FIFO): a block's cost is ALU time —
//!   SOP = `sop_base + rules × per_rule` (filter matching), middle/EOP cheap, ± jitter;
//! - baseline `shared_queue`: no chain; an idle thread takes the head of the shared buffer
//!   under a lock (`lock_ns` each).
//!
//! Metrics per (policy, size): engine idle time = 1 − (ALU time spent on blocks) / (engines ×
//! elapsed) — decision work counts as idle, it forwards nothing; so does waiting on a read —,
//! transfer rate (Mbit/s), stall time, read wait, and on how many threads SOPs landed (P1 hint: N / gcd(N, b) under static RR).
//!
//! Cost: O(log n) per event, ~3 events per block.
//!
//! Layout: [`model`] is what is simulated (typed scenario, cost model, one configuration),
//! `report` the checks, tables, charts and notes. The report ends with a sensitivity table:
//! P1's four policies again at variants of each cost P1 does not print.

pub mod model;
pub mod report;

pub use model::{simulate, Costs, NpConfig, NpResult, Params};
use netsched_core::rng::SplitMix64;
use netsched_report::{Check, ExperimentOutput};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// Packets per size in each sensitivity variant (fewer than the main run's; the orderings
/// are averages over thousands of blocks either way).
const SENS_PACKETS: usize = 2000;

/// What one run of the experiment measured.
pub struct Runs {
    /// (policy, packet size) → result.
    pub m: BTreeMap<(String, usize), NpResult>,
    /// Modified RR at the largest size without the shared-state read (the earlier model).
    pub counterfactual: Option<NpResult>,
    pub sens: Vec<SensRow>,
}

/// One variant of the sensitivity table: its claims, decided by the same code as the main run.
pub struct SensRow {
    pub label: String,
    /// `None` inside P1's regime (its IXP1200, costs it does not print); else why not.
    pub regime: Option<String>,
    pub packets: usize,
    pub claims: Vec<(&'static str, Check)>,
}

/// Every (policy, size) of `p`, one seed per size drawn from `seed` (every policy sees the same
/// block costs: common random numbers).
fn measure(
    p: &Params,
    policies: &[String],
    seed: u64,
) -> anyhow::Result<BTreeMap<(String, usize), NpResult>> {
    let costs = p.costs();
    let mut m = BTreeMap::new();
    let mut seeds = SplitMix64::new(seed);
    for &size in &p.traffic.packet_sizes {
        let s = seeds.next_u64();
        for pol in policies {
            let cfg = NpConfig {
                engines: p.processor.engines,
                threads_per_engine: p.processor.threads_per_engine,
                block_bytes: p.processor.block_bytes,
                packet_bytes: size,
                packets: p.traffic.packets,
                policy: pol.clone(),
                costs: costs.clone(),
            };
            m.insert((pol.clone(), size as usize), simulate(&cfg, s)?);
        }
    }
    Ok(m)
}

/// P1's policies at variants of the costs P1 does not print: filter rules (SOP cost), the
/// shared-state read latency over its sourced range, the hand-off mail, modified FCFS's late
/// signal, jitter, and threads per engine.
fn sensitivity(p: &Params, seed: u64) -> anyhow::Result<Vec<SensRow>> {
    let with = |label: String, f: &dyn Fn(&mut Params)| {
        let mut q = p.clone();
        q.traffic.packets = p.traffic.packets.min(SENS_PACKETS);
        f(&mut q);
        (label, q)
    };
    // P1's hardware: the IXP1200's 6 engines × 4 threads; its dispatch state in scratchpad,
    // SRAM or SDRAM (12-40 cycles at 166-232 MHz = 52-241 ns, sources in the scenario file).
    let outside = |q: &Params| -> Option<String> {
        let mut why = Vec::new();
        if (q.processor.engines, q.processor.threads_per_engine) != (6, 4) {
            why.push("not the IXP1200's 6 × 4 threads");
        }
        let read_ns = q.costs().mem_read_ns;
        if !(52.0 - 0.5..=241.0 + 0.5).contains(&read_ns) {
            why.push("read latency outside the sourced 52–241 ns");
        }
        (!why.is_empty()).then(|| why.join(", "))
    };
    let c = &p.cost;
    let variants = vec![
        with("as configured".into(), &|_| {}),
        with(format!("{} rules", c.rules / 4.0), &|q| {
            q.cost.rules = c.rules / 4.0
        }),
        with(format!("{} rules", c.rules * 2.0), &|q| {
            q.cost.rules = c.rules * 2.0
        }),
        with("read 12 cycles at 232 MHz (52 ns)".into(), &|q| {
            q.cost.mem_read_cycles = 12.0;
            q.cost.clock_mhz = 232.0;
        }),
        with("read 40 cycles at 166 MHz (241 ns)".into(), &|q| {
            q.cost.mem_read_cycles = 40.0;
            q.cost.clock_mhz = 166.0;
        }),
        with("no shared-state read".into(), &|q| {
            q.cost.mem_read_cycles = 0.0
        }),
        with(format!("mail {} ns", c.signal_ns * 4.0), &|q| {
            q.cost.signal_ns = c.signal_ns * 4.0
        }),
        with(format!("late signal {} ns", c.late_signal_ns / 3.0), &|q| {
            q.cost.late_signal_ns = c.late_signal_ns / 3.0
        }),
        with("no jitter".into(), &|q| q.cost.jitter = 0.0),
        with(
            format!("{} threads per engine", p.processor.threads_per_engine / 2),
            &|q| q.processor.threads_per_engine = (p.processor.threads_per_engine / 2).max(1),
        ),
        with(
            format!("{} threads per engine", p.processor.threads_per_engine * 2),
            &|q| q.processor.threads_per_engine = p.processor.threads_per_engine * 2,
        ),
    ];
    let mut rows = Vec::new();
    for (label, q) in variants {
        q.validate()
            .map_err(|e| anyhow::anyhow!("sensitivity variant {label:?}: {e}"))?;
        let m = measure(&q, &q.policies.compare, seed)?;
        let sizes: Vec<usize> = q.traffic.packet_sizes.iter().map(|s| *s as usize).collect();
        let claims = report::claims(
            &m,
            &sizes,
            &q.policies.compare,
            q.processor.engines,
            q.processor.threads_per_engine,
            q.processor.block_bytes,
        );
        rows.push(SensRow {
            regime: outside(&q),
            label,
            packets: q.traffic.packets,
            claims,
        });
    }
    Ok(rows)
}

/// Run the experiment.
/// The scenario typed and checked, nothing run (`Experiment::check`).
pub fn check(params: &Value) -> anyhow::Result<()> {
    crate::scenario::typed::<Params>(params, "np-dispatch")?.validate()
}

pub fn run(params: &Value, seed: u64, out: &Path) -> anyhow::Result<ExperimentOutput> {
    let p: Params = crate::scenario::typed(params, "np-dispatch")?;
    p.validate()?;
    std::fs::create_dir_all(out)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", out.display()))?;
    let policies: Vec<String> = p
        .policies
        .compare
        .iter()
        .chain(p.policies.extras.iter())
        .cloned()
        .collect();
    let m = measure(&p, &policies, seed)?;
    let counterfactual = match p.traffic.packet_sizes.iter().max() {
        Some(&big) => Some(simulate(
            &NpConfig {
                engines: p.processor.engines,
                threads_per_engine: p.processor.threads_per_engine,
                block_bytes: p.processor.block_bytes,
                packet_bytes: big,
                packets: p.traffic.packets,
                policy: "modified_rr".into(),
                costs: Costs {
                    mem_read_ns: 0.0,
                    ..p.costs()
                },
            },
            seed,
        )?),
        None => None,
    };
    let sens = if p.sensitivity {
        sensitivity(&p, seed)?
    } else {
        Vec::new()
    };
    report::write(
        &p,
        params,
        seed,
        &Runs {
            m,
            counterfactual,
            sens,
        },
        out,
    )
}

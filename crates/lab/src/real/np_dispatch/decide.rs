//! Which of P1's claims this host can decide, settled before the run from the simulator.
//!
//! The model of `experiments::np_dispatch` is run at this host's shape (engines = usable cores
//! that divide the workers, threads = the filter's workers) with the block costs measured on
//! this host ([`super::calibrate`]). From it, per packet size:
//! - **where SOPs land under static RR**: on N / gcd(N, b) workers (b blocks per packet), a
//!   property of the policy, decided on any host;
//! - **per-worker idle time under static RR**: those workers carry a share of the work above
//!   their fair share k/N. Decided when every runnable thread has a core (else a worker's
//!   wall-clock time in its blocks holds the time slices the other threads took), at a size
//!   where the model predicts an excess of at least
//!   [`MIN_EXCESS`] and a SOP's extra work exceeds one hand-off between threads measured on
//!   this host (below that, the hand-offs' wake-ups and waits for a core, which land in the
//!   workers' time at random, hide it); asserted with a margin of half the predicted excess
//!   (fixed here, before the run);
//! - **P1's idle-time and rate orderings and the effect of decision cost**: decided only when
//!   every runnable thread (workers, dispatcher, sender, receiver) has a core and the input
//!   is saturated, as on the IXP1200 (P1's hardware threads interleave per memory access and
//!   its buffer always holds the next block). Otherwise reported with the reason and the
//!   command that decides them.

use super::calibrate::BlockCosts;
use super::params::{RealParams, BLOCK_BYTES};
use crate::experiments::np_dispatch::model::{simulate, Costs, NpConfig, NpResult, Params};
use crate::experiments::np_dispatch::report::gcd;
use anyhow::Result;
use netsched_core::rng::SplitMix64;
use std::collections::BTreeMap;

/// Least predicted excess (share points over k/N) for the work-share claim to be asserted.
pub const MIN_EXCESS: f64 = 0.10;
/// Threads besides the workers that run during a measurement: dispatcher, sender, receiver.
pub const SPARE_THREADS: usize = 3;
/// P1's four policies, the ones its claims are about.
pub const P1_POLICIES: [&str; 4] = ["static_rr", "fcfs", "modified_fcfs", "modified_rr"];

/// The work-share claim at one size, as the model predicts it.
#[derive(Debug, Clone)]
pub struct ShareAt {
    pub size: u32,
    /// Workers static RR puts the SOPs on: N / gcd(N, b).
    pub sop_workers: usize,
    /// Their fair share of the work, k / N.
    pub fair: f64,
    /// Their share in the model.
    pub sim_share: f64,
    /// `None`: asserted at `fair + (sim_share − fair) / 2`; else why not.
    pub not_decided: Option<String>,
}

impl ShareAt {
    pub fn threshold(&self) -> f64 {
        self.fair + (self.sim_share - self.fair) / 2.0
    }
}

/// What the run will assert, and the sim column.
#[derive(Debug, Clone)]
pub struct Decided {
    pub engines: usize,
    pub threads_per_engine: usize,
    /// (policy, size) → the model at this host's shape (P1's four policies).
    pub sim: BTreeMap<(String, usize), NpResult>,
    pub share: Vec<ShareAt>,
    /// `None`: P1's idle/rate orderings are asserted; else why not.
    pub orderings_not_decided: Option<String>,
    /// The command that decides the orderings on a bigger machine.
    pub bigger_machine: String,
}

/// Workers static RR puts SOPs on with `n` workers and `size`-byte packets.
pub fn sop_workers(n: usize, size: u32) -> usize {
    let b = RealParams::blocks_of(size) as usize;
    n / gcd(n, b)
}

/// The share of `work` carried by the `k` workers with the most `sops`.
pub fn top_share(work: &[f64], sops: &[u64], k: usize) -> f64 {
    let mut idx: Vec<usize> = (0..work.len()).collect();
    idx.sort_by(|&a, &b| sops[b].cmp(&sops[a]).then(a.cmp(&b)));
    let total: f64 = work.iter().sum();
    let top: f64 = idx.iter().take(k).map(|&i| work[i]).sum();
    if total > 0.0 {
        top / total
    } else {
        f64::NAN
    }
}

/// Worker imbalance: the busiest worker's work over the mean (1 = even; `n` = one worker did
/// everything). NaN when no work was done.
pub fn imbalance(work: &[f64]) -> f64 {
    let total: f64 = work.iter().sum();
    if work.is_empty() || total <= 0.0 {
        return f64::NAN;
    }
    let max = work.iter().cloned().fold(0.0, f64::max);
    max / (total / work.len() as f64)
}

/// The host's shape: the most engines ≤ `cores` that divide `workers`.
fn shape(workers: usize, cores: usize) -> (usize, usize) {
    let e = (1..=cores.min(workers))
        .rev()
        .find(|e| workers.is_multiple_of(*e))
        .unwrap_or(1);
    (e, workers / e)
}

/// Decide (see the module header).
pub fn decide(
    p: &Params,
    rp: &RealParams,
    cores: usize,
    costs: &BlockCosts,
    seed: u64,
) -> Result<Decided> {
    let n = rp.workers;
    let (engines, tpe) = shape(n, cores);
    let model = Costs {
        sop_ns: costs.sop_ns,
        middle_ns: costs.other_ns,
        eop_ns: costs.other_ns,
        ..p.costs()
    };
    let mut sim = BTreeMap::new();
    let mut seeds = SplitMix64::new(seed);
    for &size in &rp.sizes {
        let s = seeds.next_u64();
        for pol in P1_POLICIES {
            let cfg = NpConfig {
                engines,
                threads_per_engine: tpe,
                block_bytes: BLOCK_BYTES,
                packet_bytes: size,
                packets: p.traffic.packets.min(6000),
                policy: pol.to_string(),
                costs: model.clone(),
            };
            sim.insert((pol.to_string(), size as usize), simulate(&cfg, s)?);
        }
    }
    let share = rp
        .sizes
        .iter()
        .map(|&size| {
            let k = sop_workers(n, size);
            let fair = k as f64 / n as f64;
            let sim_share = sim
                .get(&("static_rr".to_string(), size as usize))
                .map_or(f64::NAN, |r| top_share(&r.thread_work_us, &r.thread_sops, k));
            let not_decided = if k == n {
                Some("SOPs on every worker: no share to exceed".to_string())
            } else if cores < n + SPARE_THREADS {
                Some(format!(
                    "a worker's time in its blocks is wall-clock time, and with {} runnable \
                     threads on {cores} cores it holds the time slices the others took (on the \
                     2-core development host the share at 512 B ranged 0.17–0.82 over six runs \
                     of the same configuration); decided on a host with ≥ {} usable cores",
                    n + SPARE_THREADS,
                    n + SPARE_THREADS
                ))
            } else if costs.sop_ns - costs.other_ns < costs.handoff_ns {
                Some(format!(
                    "a SOP's extra work ({:.0} ns) is below one hand-off between threads on \
                     this host ({:.0} ns), whose wake-up and wait for a core land in the \
                     workers' time at random; more rules make a SOP dearer: \
                     `netsched lab run np-dispatch --real --set real.rules=N`",
                    costs.sop_ns - costs.other_ns,
                    costs.handoff_ns
                ))
            } else if (sim_share - fair).is_nan() || sim_share - fair < MIN_EXCESS {
                Some(format!(
                    "the model predicts {:.2} against a fair {fair:.2}, an excess below {MIN_EXCESS}",
                    sim_share
                ))
            } else {
                None
            };
            ShareAt {
                size,
                sop_workers: k,
                fair,
                sim_share,
                not_decided,
            }
        })
        .collect();
    let mut why = Vec::new();
    if cores < n + SPARE_THREADS {
        why.push(format!(
            "{n} workers + dispatcher + sender + receiver = {} runnable threads on {cores} cores: \
             the kernel time-slices them (milliseconds), where P1's hardware threads interleave \
             per memory access (nanoseconds), so idle time and rate measure the host's scheduler; \
             and the filter's dispatcher decides in nanoseconds while a hand-off between threads \
             costs a wake-up (microseconds), so the decision cost is hidden",
            n + SPARE_THREADS
        ));
    }
    if rp.block_rate > 0 {
        why.push(format!(
            "the input is paced at {} blocks/s, where P1's receive buffer always holds the next \
             block (idle time then follows the offered load)",
            rp.block_rate
        ));
    }
    Ok(Decided {
        engines,
        threads_per_engine: tpe,
        sim,
        share,
        orderings_not_decided: (!why.is_empty()).then(|| why.join("; ")),
        bigger_machine: "on a host with ≥ 27 usable cores: `netsched lab run np-dispatch --real \
                         --set real.workers=24 --set real.block_rate=0` (P1's 24 threads, a \
                         saturated input)"
            .into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imbalance_is_the_busiest_worker_over_the_mean() {
        assert_eq!(imbalance(&[1.0, 1.0, 1.0, 1.0]), 1.0);
        assert_eq!(imbalance(&[4.0, 0.0, 0.0, 0.0]), 4.0);
        assert_eq!(imbalance(&[3.0, 1.0]), 1.5);
        assert!(imbalance(&[0.0, 0.0]).is_nan());
        assert!(imbalance(&[]).is_nan());
    }
}

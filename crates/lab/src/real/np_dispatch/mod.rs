//! `netsched lab run np-dispatch --real` (root): P1's block dispatch through `netsched filter`
//! between real interfaces.
//!
//! ```text
//!  snd ──veth── [flt: netsched filter, N workers] ──veth── rcv
//!  AF_PACKET sender                                         AF_PACKET receiver
//!  (paced UDP frames, 8 flows,                              (per-flow order, arrivals)
//!   per-flow sequence numbers)
//! ```
//!
//! Per packet size (P1's 64/256/512/1500 B, frames of exactly that length, cut into 64 B
//! blocks) and per dispatch policy, one filter run: the sender offers a fixed number of blocks
//! at a fixed block rate; the filter's SOP work is the header matched against `real.rules`
//! rules that the test flows do not match (first match, so every rule is tried: P1's "SOP
//! is expensive", cost ∝ rules), every block's payload is scanned for signatures. No address
//! and no IPv6 on any interface, so the filter sees the test frames and nothing else (a stray
//! frame would move static RR's cursor).
//!
//! **Decided before the run, from the simulator** ([`decide`]): the model of
//! `experiments::np_dispatch` at this host's shape (engines = usable cores, threads = workers)
//! with block costs measured on this host before the run ([`calibrate`]) predicts, per size,
//! where static RR puts the SOPs (N / gcd(N, b) workers) and the share of the work those
//! workers carry; a size whose predicted excess over their fair share is below
//! [`decide::MIN_EXCESS`] is not asserted. P1's idle-time and rate orderings need the
//! workers, the dispatcher, the sender and the receiver each on a core of their own and a
//! saturated input, as on the IXP1200's hardware threads; below that they are reported with
//! the reason and the command that decides them.
//!
//! - `params.rs`: `[real]` of the scenario, typed and bounded;
//! - `calibrate.rs`: block costs measured on this host, for the sim column;
//! - `rig.rs`: the namespaces and the filter's configuration and tables;
//! - `traffic.rs`: the paced sender and the receiver;
//! - `run.rs`: one (policy, size) run and what it measured;
//! - `decide.rs`: which claims this host can decide, from the simulator;
//! - `checks.rs`: the decided claims as checks, the others as a table;
//! - `report.rs`: paper | sim | real, `real.csv`, the chart and notes.

mod calibrate;
mod checks;
pub mod decide;
mod params;
mod report;
mod rig;
mod run;
mod traffic;

pub use params::RealParams;
pub use run::RealRun;

use crate::experiments::np_dispatch::model::Params;
use anyhow::{bail, Context, Result};
use netsched_report::ExperimentOutput;
use serde_json::Value;
use std::path::Path;

/// `netsched lab run np-dispatch --real`. `quick`: a third of the blocks per run.
pub fn run_real(params: &Value, seed: u64, out: &Path, quick: bool) -> Result<ExperimentOutput> {
    if !netsched_testbed::is_root() {
        bail!(
            "np-dispatch --real needs root (namespaces, AF_PACKET); run the simulated lab instead"
        );
    }
    let p: Params = crate::scenario::typed(params, "np-dispatch")?;
    let rp = RealParams::from_params(p.real.as_ref(), quick)?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let _signals = netsched_testbed::SignalGuard::install()?;
    let cores = netsched_sys::thread::allowed_cpus().len().max(1);
    let costs = calibrate::block_costs(&rp)?;
    eprintln!(
        "np-dispatch --real: {} workers on {cores} cores; on this host: SOP {:.0} ns, other \
         block {:.0} ns ({} rules, {}), hand-off between threads {:.0} ns",
        rp.workers, costs.sop_ns, costs.other_ns, rp.rules, rp.classifier, costs.handoff_ns
    );
    let decided = decide::decide(&p, &rp, cores, &costs, seed)?;
    let net = rig::build()?;
    let mut runs = Vec::new();
    for &size in &rp.sizes {
        for policy in &rp.policies {
            netsched_testbed::check_interrupted()?;
            eprintln!("np-dispatch --real: {policy}, {size} B");
            let r = run::run_one(&net, &rp, policy, size)
                .with_context(|| format!("{policy} at {size} B"))?;
            eprintln!("  {}", r.summary());
            runs.push(r);
        }
    }
    let tag = net.tb.tag().to_string();
    drop(net);
    let left = netsched_testbed::namespaces_with(&tag);
    if !left.is_empty() {
        bail!("namespaces left after the runs: {left:?}");
    }
    report::output(&p, params, &rp, seed, out, cores, &costs, &decided, &runs)
}

//! The sender — filter — receiver testbed that the filter's root tests and
//! `netsched lab run np-dispatch --real` both run on: namespaces snd, flt and rcv of one
//! [`Testbed`] (removed when it is dropped, also after a failed assertion), joined by two veth
//! pairs, the filter's two ends without addresses; and the filter configuration both use (P1's
//! 64-byte blocks, a reorder window as large as the frame pool, so order is restored for every
//! packet held).

use crate::engine::EngineConfig;
use crate::pipeline::{DispatchMode, PipelineConfig};
use crate::verdict::{Fragments, OnPanic, OnSignature};
use crate::work::WorkPolicy;
use anyhow::{Context, Result};
use netsched_testbed::Testbed;

/// The namespaces and interface names of a rig.
pub struct Net {
    pub tb: Testbed,
    pub snd: String,
    pub flt: String,
    pub rcv: String,
    /// The sender's end of snd — flt.
    pub s0: String,
    /// The filter's input (flt's end of snd — flt).
    pub fin: String,
    /// The filter's output (flt's end of flt — rcv).
    pub fout: String,
    /// The receiver's end of flt — rcv.
    pub r0: String,
}

/// How to build a rig.
#[derive(Debug, Clone, Copy, Default)]
pub struct RigSpec<'a> {
    /// Prefix of the testbed's namespace names.
    pub label: &'a str,
    /// Addresses (CIDR) of the sender's and the receiver's ends; "" for none.
    pub snd_addr: &'a str,
    pub rcv_addr: &'a str,
    /// Turn IPv6 off in the three namespaces before the links come up (no router
    /// solicitations or MLD reports: the filter sees the test frames and nothing else).
    pub ipv6_off: bool,
}

/// snd ── flt ── rcv as `spec` says.
pub fn build(spec: RigSpec<'_>) -> Result<Net> {
    let mut tb = Testbed::new(spec.label)?;
    let snd = tb.add_ns("snd")?;
    let flt = tb.add_ns("flt")?;
    let rcv = tb.add_ns("rcv")?;
    if spec.ipv6_off {
        for ns in [&snd, &flt, &rcv] {
            tb.sysctl(ns, "net.ipv6.conf.all.disable_ipv6=1")?;
            tb.sysctl(ns, "net.ipv6.conf.default.disable_ipv6=1")?;
        }
    }
    let (s0, fin, fout, r0) = (
        tb.ifname("s0"),
        tb.ifname("fi"),
        tb.ifname("fo"),
        tb.ifname("r0"),
    );
    tb.veth((&snd, &s0, spec.snd_addr), (&flt, &fin, ""))
        .context("veth snd — flt")?;
    tb.veth((&flt, &fout, ""), (&rcv, &r0, spec.rcv_addr))
        .context("veth flt — rcv")?;
    Ok(Net {
        tb,
        snd,
        flt,
        rcv,
        s0,
        fin,
        fout,
        r0,
    })
}

impl Net {
    /// The filter from `fin` to `fout`: `workers` pinned workers under `mode`, 64-byte blocks,
    /// `pool` frames held at most and a reorder window of the same size, `max_flows` flows
    /// tracked; signature matches, worker panics and IP fragments drop, non-IP frames pass.
    pub fn engine_config(
        &self,
        workers: usize,
        mode: DispatchMode,
        pool: usize,
        max_flows: usize,
    ) -> EngineConfig {
        EngineConfig {
            input: self.fin.clone(),
            output: Some(self.fout.clone()),
            pool_slots: pool,
            port: netsched_sys::PortOptions::default(),
            pipeline: PipelineConfig {
                workers,
                block_size: 64,
                worker_queue: 64,
                reorder_window: pool,
                reorder_timeout_ns: 5_000_000_000,
                max_flows,
                mode,
                work: WorkPolicy {
                    on_signature: OnSignature::Drop,
                    on_panic: OnPanic::Drop,
                    accept_non_ip: true,
                    fragments: Fragments::Drop,
                    fault_panic_on: None,
                },
                pin: true,
            },
        }
    }
}

//! The testbed of `np-dispatch --real`: namespaces snd — flt — rcv joined by two veth pairs,
//! no address and no IPv6 anywhere (the filter sees the test frames and nothing else), and
//! the filter's configuration and tables for one run.

use super::params::{RealParams, BLOCK_BYTES};
use anyhow::{Context, Result};
use netsched_filter::engine::EngineConfig;
use netsched_filter::pipeline::{DispatchMode, PipelineConfig};
use netsched_filter::rules::{build_classifier, RuleSet};
use netsched_filter::signatures::Signatures;
use netsched_filter::verdict::{OnPanic, OnSignature};
use netsched_filter::work::{Tables, WorkPolicy};
use netsched_testbed::Testbed;
use std::sync::Arc;

/// Source and destination of the test stream (never on an interface).
pub const SRC: [u8; 4] = [10, 99, 0, 1];
pub const DST: [u8; 4] = [10, 99, 0, 2];
/// Frames the filter may hold (its buffer pool).
const POOL: usize = 8192;

/// The namespaces of the run.
pub struct Net {
    pub tb: Testbed,
    pub snd: String,
    pub flt: String,
    pub rcv: String,
    pub s0: String,
    pub fin: String,
    pub fout: String,
    pub r0: String,
}

/// snd ── flt ── rcv, IPv6 off before the links come up, no addresses.
pub fn build() -> Result<Net> {
    let mut tb = Testbed::new("npr")?;
    let snd = tb.add_ns("snd")?;
    let flt = tb.add_ns("flt")?;
    let rcv = tb.add_ns("rcv")?;
    for ns in [&snd, &flt, &rcv] {
        // No router solicitations or MLD reports: nothing but the test frames on the links.
        tb.sysctl(ns, "net.ipv6.conf.all.disable_ipv6=1")?;
        tb.sysctl(ns, "net.ipv6.conf.default.disable_ipv6=1")?;
    }
    let (s0, fin, fout, r0) = (
        tb.ifname("s0"),
        tb.ifname("fi"),
        tb.ifname("fo"),
        tb.ifname("r0"),
    );
    tb.veth((&snd, &s0, ""), (&flt, &fin, ""))
        .context("veth snd — flt")?;
    tb.veth((&flt, &fout, ""), (&rcv, &r0, ""))
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

/// The filter of one run: `policy`, P1's 64 B blocks, a window that holds everything inside.
pub fn engine_config(net: &Net, rp: &RealParams, policy: &str) -> Result<EngineConfig> {
    let mode = DispatchMode::parse(policy).map_err(|e| anyhow::anyhow!(e))?;
    Ok(EngineConfig {
        input: net.fin.clone(),
        output: Some(net.fout.clone()),
        pool_slots: POOL,
        port: netsched_sys::PortOptions::default(),
        pipeline: PipelineConfig {
            workers: rp.workers,
            block_size: BLOCK_BYTES,
            worker_queue: 64,
            reorder_window: POOL,
            reorder_timeout_ns: 5_000_000_000,
            max_flows: 1024,
            mode,
            work: WorkPolicy {
                on_signature: OnSignature::Drop,
                on_panic: OnPanic::Drop,
                accept_non_ip: true,
                fault_panic_on: None,
            },
            pin: true,
        },
    })
}

/// `n` rules the test stream never matches (sources in 10.200.0.0/16, UDP to low ports), so
/// the first-match scan tries every one: P1's "SOP is matched against the filter rules".
pub fn rules_toml(n: usize) -> String {
    let mut s = String::from("default = \"accept\"\n");
    for i in 0..n {
        s += &format!(
            "[[rule]]\naction = \"drop\"\nproto = \"udp\"\nsrc = \"10.200.{}.{}/32\"\ndst = \"10.99.0.0/24\"\ndport = \"{}\"\n",
            (i / 256) % 256,
            i % 256,
            1 + i % 1000
        );
    }
    s
}

/// The tables of the run: the generated rules under the configured classifier, and one
/// signature the stream never holds (every byte is scanned, nothing matches).
pub fn tables(rp: &RealParams) -> Result<Arc<Tables>> {
    let set = RuleSet::from_toml_str(&rules_toml(rp.rules), "np-dispatch rules")
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let classifier = build_classifier(set, rp.classifier_kind()?, &Default::default())
        .map_err(|e| anyhow::anyhow!("building the classifier: {e}"))?;
    let signatures = Signatures::parse("NEVER-IN-THE-TEST-STREAM\n", "np-dispatch signatures")
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(Arc::new(Tables {
        classifier,
        signatures,
        generation: 1,
    }))
}

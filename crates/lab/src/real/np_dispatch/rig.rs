//! The testbed of `np-dispatch --real`: namespaces snd — flt — rcv joined by two veth pairs,
//! no address and no IPv6 anywhere (the filter sees the test frames and nothing else), and
//! the filter's configuration and tables for one run.

use super::params::{RealParams, BLOCK_BYTES};
use anyhow::Result;
use netsched_filter::classifier::build_classifier;
use netsched_filter::engine::EngineConfig;
use netsched_filter::pipeline::DispatchMode;
pub use netsched_filter::rig::Net;
use netsched_filter::rig::RigSpec;
use netsched_filter::rules::RuleSet;
use netsched_filter::signatures::Signatures;
use netsched_filter::work::Tables;
use std::sync::Arc;

/// Source and destination of the test stream (never on an interface).
pub const SRC: [u8; 4] = [10, 99, 0, 1];
pub const DST: [u8; 4] = [10, 99, 0, 2];
/// Frames the filter may hold (its buffer pool).
const POOL: usize = 8192;

/// snd ── flt ── rcv, IPv6 off before the links come up, no addresses.
pub fn build() -> Result<Net> {
    netsched_filter::rig::build(RigSpec {
        label: "npr",
        ipv6_off: true,
        ..RigSpec::default()
    })
}

/// The filter of one run: `policy`, P1's blocks, a window that holds everything inside.
pub fn engine_config(net: &Net, rp: &RealParams, policy: &str) -> Result<EngineConfig> {
    let mode = DispatchMode::parse(policy).map_err(|e| anyhow::anyhow!(e))?;
    let mut cfg = net.engine_config(rp.workers, mode, POOL, 1024);
    cfg.pipeline.block_size = BLOCK_BYTES as _;
    Ok(cfg)
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

//! `[real]` of `scenarios/np-dispatch.toml`: the run through `netsched filter`, typed (a
//! misspelt key is refused) and bounded (every count and rate has a stated limit).

use anyhow::{bail, Result};
use netsched_core::classify::acl::ClassifierKind;
use netsched_filter::pipeline::{DispatchMode, MAX_WORKERS};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Most rules of the generated set (the filter's own bound is higher; this keeps a run short).
pub const MAX_RULES: usize = 100_000;
/// Most blocks offered per (policy, size) run.
pub const MAX_BLOCKS: u64 = 10_000_000;
/// Most blocks per second offered (0 = as fast as the sender can).
pub const MAX_BLOCK_RATE: u64 = 10_000_000;
/// Packet sizes a run may use (frames of that length; an Ethernet frame without FCS).
pub const SIZE_RANGE: std::ops::RangeInclusive<u32> = 64..=1514;

fn d_workers() -> usize {
    4
}
fn d_rules() -> usize {
    10_000
}
fn d_classifier() -> String {
    "linear".into()
}
fn d_blocks() -> u64 {
    48_000
}
fn d_block_rate() -> u64 {
    40_000
}
fn d_sizes() -> Vec<u32> {
    vec![64, 256, 512, 1500]
}
/// Every mode that hands work to workers (`inline` has none to compare).
fn d_policies() -> Vec<String> {
    DispatchMode::NAMES
        .iter()
        .filter(|&&n| n != "inline")
        .map(|s| s.to_string())
        .collect()
}
fn d_flows() -> u8 {
    8
}

/// The real run's parameters (all optional in the scenario; defaults below).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RealParams {
    /// Worker threads of the filter (P1: 24 hardware threads).
    #[serde(default = "d_workers")]
    pub workers: usize,
    /// Rules the SOP block is matched against (none matches the test flows: all are tried).
    #[serde(default = "d_rules")]
    pub rules: usize,
    /// `linear` (P1's per-rule SOP cost), `tuple_space` or `tuple_merge`.
    #[serde(default = "d_classifier")]
    pub classifier: String,
    /// Blocks offered per (policy, size) run (`--quick`: a third).
    #[serde(default = "d_blocks")]
    pub blocks: u64,
    /// Blocks per second offered; 0 = unpaced (a saturated input, as in P1's model).
    #[serde(default = "d_block_rate")]
    pub block_rate: u64,
    #[serde(default = "d_sizes")]
    pub sizes: Vec<u32>,
    /// Filter dispatch modes (`netsched filter --dispatch`).
    #[serde(default = "d_policies")]
    pub policies: Vec<String>,
    /// Flows of the test stream (UDP ports differ per flow).
    #[serde(default = "d_flows")]
    pub flows: u8,
}

impl RealParams {
    /// From the scenario's `[real]` table (absent: every default).
    pub fn from_params(real: Option<&Value>, quick: bool) -> Result<Self> {
        let v = real.cloned().unwrap_or_else(|| serde_json::json!({}));
        let mut p: RealParams = crate::scenario::typed(&v, "np-dispatch [real]")?;
        if quick {
            p.blocks = (p.blocks / 3).max(1);
        }
        p.validate()?;
        Ok(p)
    }

    fn validate(&self) -> Result<()> {
        if !(1..=MAX_WORKERS).contains(&self.workers) {
            bail!("real.workers = {}: must be 1..={MAX_WORKERS}", self.workers);
        }
        if self.rules > MAX_RULES {
            bail!("real.rules = {}: at most {MAX_RULES}", self.rules);
        }
        if !(1..=MAX_BLOCKS).contains(&self.blocks) {
            bail!("real.blocks = {}: must be 1..={MAX_BLOCKS}", self.blocks);
        }
        if self.block_rate > MAX_BLOCK_RATE {
            bail!(
                "real.block_rate = {}: at most {MAX_BLOCK_RATE}",
                self.block_rate
            );
        }
        if self.sizes.is_empty() || self.sizes.len() > 16 {
            bail!("real.sizes: 1 to 16 sizes, got {}", self.sizes.len());
        }
        if let Some(s) = self.sizes.iter().find(|s| !SIZE_RANGE.contains(s)) {
            bail!("real.sizes: {s} B is outside {SIZE_RANGE:?}");
        }
        if self.policies.is_empty() {
            bail!("real.policies: at least one of {:?}", DispatchMode::NAMES);
        }
        for name in &self.policies {
            DispatchMode::parse(name).map_err(|e| anyhow::anyhow!("real.policies: {e}"))?;
        }
        self.classifier_kind()?;
        if !(1..=64).contains(&self.flows) {
            bail!("real.flows = {}: must be 1..=64", self.flows);
        }
        Ok(())
    }

    pub fn classifier_kind(&self) -> Result<ClassifierKind> {
        self.classifier
            .parse()
            .map_err(|e| anyhow::anyhow!("real.classifier = {:?}: {e}", self.classifier))
    }

    /// Blocks of a frame of `size` bytes at 64-byte blocks.
    pub fn blocks_of(size: u32) -> u32 {
        size.div_ceil(BLOCK_BYTES).max(1)
    }

    /// Packets of one run at `size`.
    pub fn packets(&self, size: u32) -> u64 {
        (self.blocks / Self::blocks_of(size) as u64).max(1)
    }
}

/// P1's block (mpacket) size, the filter's default `--block-size`.
pub const BLOCK_BYTES: u32 = 64;

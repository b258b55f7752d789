//! # netsched-report — one output format for simulated and real runs
//!
//! Every experiment, whether `"mode": "sim"` (the lab) or `"mode": "real"` (namespaces and real
//! Linux), writes the same things into its output folder:
//! - `results.json` ([`Results`]): experiment, mode, seed, every parameter, the netsched version
//!   and git commit, the command line, and one entry per run configuration with its metrics,
//!   named and converted by the JSON unit rule on the way out ([`lab_units`]);
//! - CSV series (time series, CDFs);
//! - SVG plots (drawn by this crate, no font or system library needed);
//! - `report.md`: a "paper | this run" table for every number the paper reports ([`Comparison`]).

#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::Path;

/// The `results.json` document.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Results {
    pub experiment: String,
    /// `"sim"` or `"real"`.
    pub mode: String,
    pub seed: u64,
    pub params: Value,
    pub runs: Vec<Run>,
    pub netsched_version: String,
    pub git_commit: String,
    pub command_line: Vec<String>,
}

/// One configuration of an experiment and what it measured.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Run {
    pub config: Value,
    pub metrics: Value,
}

/// One row of the "paper | this run" table.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Comparison {
    /// What is compared, e.g. "upload with FIFO, both directions (kbit/s)".
    pub quantity: String,
    /// The paper's figure as printed (may be "—" where the paper gives none).
    pub paper: String,
    /// Our figure.
    pub ours: String,
}

impl Results {
    pub fn new(experiment: &str, mode: &str, seed: u64, params: Value) -> Self {
        Self {
            experiment: experiment.to_string(),
            mode: mode.to_string(),
            seed,
            params,
            runs: Vec::new(),
            netsched_version: env!("CARGO_PKG_VERSION").to_string(),
            git_commit: git_commit(),
            command_line: std::env::args().collect(),
        }
    }

    /// Write `results.json` into `dir` (created if missing), the metrics named and converted
    /// by the JSON unit rule ([`lab_units`]).
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
        let path = dir.join("results.json");
        let text = serde_json::to_string_pretty(&self.to_rule())?;
        std::fs::write(&path, text + "\n")
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
        Ok(())
    }
}

impl Results {
    /// This document as written: every run's metrics named and converted by the JSON unit
    /// rule ([`lab_units::to_rule`]).
    pub fn to_rule(&self) -> Results {
        let mut r = self.clone();
        for run in &mut r.runs {
            run.metrics = lab_units::to_rule(&run.metrics);
        }
        r
    }
}

/// The commit of the source tree: `NETSCHED_GIT_COMMIT` at build time if set, else
/// `git rev-parse HEAD` in the source tree the binary was built from (so it works from any
/// directory), else in the current directory, else "unknown". (A build script that embeds the
/// commit would rebuild every dependent crate on every commit of a busy shared tree.)
pub fn git_commit() -> String {
    if let Some(c) = option_env!("NETSCHED_GIT_COMMIT") {
        return c.to_string();
    }
    let at = |dir: Option<&str>| -> Option<String> {
        let mut cmd = std::process::Command::new("git");
        if let Some(d) = dir {
            cmd.arg("-C").arg(d);
        }
        cmd.args(["rev-parse", "HEAD"])
            .stderr(std::process::Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .filter(|c| !c.is_empty())
    };
    at(Some(env!("CARGO_MANIFEST_DIR")))
        .or_else(|| at(None))
        .unwrap_or_else(|| "unknown".to_string())
}

/// A claim a reproduction must show (from the issue / the paper), checked on measured numbers.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Check {
    /// What must hold, e.g. "ACK separation: upload ≥ 80% of its rate alone".
    pub claim: String,
    pub passed: bool,
    /// The measured numbers behind the verdict.
    pub detail: String,
    /// The claim as a number against a threshold, when it is one (`value op threshold`). Runs over
    /// several seeds or repeats decide such a check on the interval of `value`, not on one run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<Evidence>,
}

/// A check stated as `value op threshold`, e.g. "upload share ≥ 0.80".
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Evidence {
    pub value: f64,
    pub op: Cmp,
    pub threshold: f64,
}

/// The comparison of an [`Evidence`].
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub enum Cmp {
    #[serde(rename = ">=")]
    Ge,
    #[serde(rename = ">")]
    Gt,
    #[serde(rename = "<=")]
    Le,
    #[serde(rename = "<")]
    Lt,
}

impl Cmp {
    /// Does `value op threshold` hold?
    pub fn holds(self, value: f64, threshold: f64) -> bool {
        match self {
            Cmp::Ge => value >= threshold,
            Cmp::Gt => value > threshold,
            Cmp::Le => value <= threshold,
            Cmp::Lt => value < threshold,
        }
    }

    pub fn symbol(self) -> &'static str {
        match self {
            Cmp::Ge => "≥",
            Cmp::Gt => ">",
            Cmp::Le => "≤",
            Cmp::Lt => "<",
        }
    }
}

impl Check {
    /// A yes/no check decided by the experiment itself (no single number behind it).
    pub fn new(claim: impl Into<String>, passed: bool, detail: impl Into<String>) -> Self {
        Self {
            claim: claim.into(),
            passed,
            detail: detail.into(),
            evidence: None,
        }
    }

    /// A check that holds iff `value op threshold`; `passed` is computed, never passed in.
    pub fn measured(
        claim: impl Into<String>,
        value: f64,
        op: Cmp,
        threshold: f64,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            claim: claim.into(),
            passed: op.holds(value, threshold),
            detail: detail.into(),
            evidence: Some(Evidence {
                value,
                op,
                threshold,
            }),
        }
    }
}

/// A figure written into the output folder.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Figure {
    pub title: String,
    /// File name relative to the output folder (an `.svg`).
    pub file: String,
}

/// Everything one experiment run produces. The lab runner writes `results.json` and
/// `report.md` from it; the experiment itself writes its CSV and SVG files into the folder.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ExperimentOutput {
    pub results: Results,
    pub comparisons: Vec<Comparison>,
    pub checks: Vec<Check>,
    pub figures: Vec<Figure>,
    /// Markdown paragraphs: how the model maps to the paper, what differs and why.
    pub notes: Vec<String>,
}

pub mod aggregate;
pub mod chart_data;
pub mod chart_mean;
pub mod csv;
pub mod figure;
pub mod lab_units;
pub mod mark;
pub mod markdown;
pub mod metric_name;
pub mod sensitivity;
pub mod style;
pub mod svg;
pub mod xml;

/// Sample statistics and the bounded file read: their home is the leaf `netsched-util` (which
/// data planes use without this crate); re-exported here for the lab and the CLI.
pub use netsched_util::{read, stats};

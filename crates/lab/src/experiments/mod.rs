//! The experiments. Each module exposes
//! `pub fn run(params: &serde_json::Value, seed: u64, out: &Path) -> anyhow::Result<ExperimentOutput>`
//! where `params` is the scenario file (`scenarios/NAME.toml`) with `--set` overrides applied,
//! converted to JSON. The function writes its CSV/SVG files into `out`; the runner writes
//! `results.json` and `report.md`.
//!
//! [`ALL`] lists them for the runner: name, paper, one line, and the simulated and (where a data
//! plane exists) real entry points.
pub mod adsl_ack;
pub mod lvs_cluster;
pub mod np_dispatch;
pub mod percentile_web;
pub mod vm_delay;

use netsched_report::ExperimentOutput;
use std::path::Path;

/// A simulated run: `(params, seed, out_dir)`.
pub type SimFn = fn(&serde_json::Value, u64, &Path) -> anyhow::Result<ExperimentOutput>;
/// A real run: `(params, seed, out_dir, quick)`.
pub type RealFn = fn(&serde_json::Value, u64, &Path, bool) -> anyhow::Result<ExperimentOutput>;

/// A parameter check: `params` typed and within the experiment's bounds.
pub type CheckFn = fn(&serde_json::Value) -> anyhow::Result<()>;

/// One experiment as the runner sees it.
pub struct Experiment {
    pub name: &'static str,
    /// Paper reference.
    pub paper: &'static str,
    /// Report title.
    pub title: &'static str,
    /// One line for `netsched lab list`.
    pub summary: &'static str,
    pub run: SimFn,
    /// The scenario parameters typed and checked against the experiment's bounds, without
    /// running anything: what `lab sweep` applies to every grid point before it creates a
    /// folder.
    pub check: CheckFn,
    pub run_real: Option<RealFn>,
    /// The data planes the real run can drive (`lab run --real --engine NAME`, the same as
    /// `--set real.engine=NAME`), the default first; empty when there is one.
    pub real_engines: &'static [&'static str],
    /// The scenario key `lab run --directors N` sets (the same as `--set KEY=N`), for an
    /// experiment whose cluster can have several directors behind ECMP; `None` elsewhere.
    pub directors_key: Option<&'static str>,
}

/// Every experiment, in paper order.
pub static ALL: &[Experiment] = &[
    Experiment {
        name: "percentile-web",
        paper: "P0 — Percentile network scheduler for differentiated service (Hansung Univ., 2006)",
        title: "percentile-web — percentile scheduling of web requests by customer class",
        summary: "5 client classes with percentile targets 90..50 share one web server; FIFO vs Percentile",
        run: percentile_web::run,
        check: percentile_web::check,
        run_real: Some(percentile_web_real),
        real_engines: &["nfq", "balance"],
        directors_key: None,
    },
    Experiment {
        name: "np-dispatch",
        paper: "P1 — Packet-processing task scheduling on a multi-processor multi-threaded network processor (Ajou Univ., IXP1200)",
        title: "np-dispatch — block dispatch policies on a 6×4-thread network processor",
        summary: "6 engines × 4 threads, 64-byte blocks; RR, FCFS, modified FCFS, modified RR: idle time and rate per packet size",
        run: np_dispatch::run,
        check: np_dispatch::check,
        run_real: Some(crate::real::np_dispatch::run_real),
        real_engines: &[],
        directors_key: None,
    },
    Experiment {
        name: "vm-delay",
        paper: "P2 — Delay-constrained scheduling for game-server virtual machines (Soongsil Univ., 2016)",
        title: "vm-delay — delay-constrained backend scheduling of guest interfaces",
        summary: "9/18 domains in 3 tiers behind dom0 netback; strict priority vs delay-constrained bitmaps: tail latency and loss",
        run: vm_delay::run,
        check: vm_delay::check,
        run_real: Some(crate::real::vm_delay::run_real),
        real_engines: &[],
        directors_key: None,
    },
    Experiment {
        name: "adsl-ack",
        paper: "P3 — ACK-separation queueing on an asymmetric-link home gateway (Seoul National Univ., 2005)",
        title: "adsl-ack — ACK separation on an asymmetric ADSL uplink",
        summary: "upload + download over 800k/2.1M ADSL; FIFO-100 vs ACK-priority queue",
        run: adsl_ack::run,
        check: adsl_ack::check,
        run_real: Some(crate::real::adsl_ack::run_real),
        real_engines: &[],
        directors_key: None,
    },
    Experiment {
        name: "lvs-cluster",
        paper: "P4 — Scheduling algorithms for a scalable wireless-internet proxy cluster (Soongsil Univ., 2004)",
        title: "lvs-cluster — LVS-NAT scheduling for a proxy/distiller cluster",
        summary: "LVS-NAT director + 1..15 hosts, closed-loop client; rr, lc, lblc, dh (+ extras), same vs per-host object sizes",
        run: lvs_cluster::run,
        check: lvs_cluster::check,
        run_real: Some(crate::real::lvs_cluster::run_real),
        real_engines: &[],
        directors_key: Some("cluster.directors"),
    },
];

/// percentile-web's real mode: `real.engine = "nfq"` (default) drives the NFQUEUE daemon in
/// front of one nginx (`real::percentile_web`); `"balance"` puts P0's classes at a load
/// balancer's request queue, netsched balance against HAProxy (`real::balance_classes`).
fn percentile_web_real(
    params: &serde_json::Value,
    seed: u64,
    out: &Path,
    quick: bool,
) -> anyhow::Result<ExperimentOutput> {
    match params.pointer("/real/engine") {
        None => crate::real::percentile_web::run_real(params, seed, out, quick),
        Some(v) if v.as_str() == Some("nfq") => {
            crate::real::percentile_web::run_real(params, seed, out, quick)
        }
        Some(v) if v.as_str() == Some("balance") => {
            crate::real::balance_classes::run_real(params, seed, out, quick)
        }
        Some(v) => anyhow::bail!(
            "real.engine = {v}: expected \"nfq\" (the NFQUEUE daemon) or \"balance\" \
             (netsched balance and HAProxy)"
        ),
    }
}

/// The experiment called `name`, or an error listing the valid names.
pub fn find(name: &str) -> anyhow::Result<&'static Experiment> {
    ALL.iter().find(|e| e.name == name).ok_or_else(|| {
        let names: Vec<&str> = ALL.iter().map(|e| e.name).collect();
        anyhow::anyhow!(
            "unknown experiment {name:?}; experiments: {}",
            names.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_unknown_real_engine_is_refused_by_name() {
        let params = serde_json::json!({ "real": { "engine": "xdp" } });
        let out = std::env::temp_dir().join("netsched-no-such-run");
        let e = super::percentile_web_real(&params, 1, &out, true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("real.engine = \"xdp\""), "{e}");
        assert!(!out.exists());
    }
}

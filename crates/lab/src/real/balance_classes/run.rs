//! One engine of balance-classes: start the balancer (netsched balance or HAProxy) in the
//! server namespace, run the closed-loop load from the five client namespaces through it
//! (percentile-web's load generator), read netsched's own per-class counters
//! (`ctl show-classes --json`), stop the balancer by its process id.
//!
//! Cost: the run's length; memory of every answered request's sample.

use super::engine::{haproxy_config, netsched_config, Engine, Shape};
use super::rig::ClassBed;
use super::Params;
use crate::real::percentile_web::client::{run_load, LoadResult, LoadSpec};
use crate::real::percentile_web::star::server_addr;
use anyhow::{anyhow, Context, Result};
use serde::Deserialize;
use std::process::Stdio;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// netsched balance's own view of one class (a subset of `show-classes --json`).
#[derive(Debug, Clone, Deserialize)]
pub struct ClassRow {
    pub name: String,
    pub n: u64,
    pub s: u64,
    pub fail: u64,
    /// Requests that left the queue by the class's `max_hold`, not by P0's rule.
    #[serde(default)]
    pub served_by_max_hold: u64,
    /// S / (N·P): the figure P0's judge equalises (Table 14's Priority row, inverted).
    pub attainment: f64,
}

#[derive(Deserialize)]
struct ShowClasses {
    classes: Vec<ClassRow>,
}

/// What one engine measured.
#[derive(Debug, Clone)]
pub struct EngineRun {
    pub engine: Engine,
    pub load: LoadResult,
    /// Response times per class, ms, sorted.
    pub lat_ms: Vec<Vec<f64>>,
    /// netsched balance's counters at the end of the load (`None` for HAProxy).
    pub balancer: Option<Vec<ClassRow>>,
}

impl EngineRun {
    pub fn completed(&self, k: usize) -> u64 {
        self.lat_ms[k].len() as u64
    }
    pub fn mean_ms(&self, k: usize) -> f64 {
        netsched_report::stats::mean(&self.lat_ms[k]).unwrap_or(f64::NAN)
    }
    /// The class's P-th percentile response time, ms.
    pub fn pth_ms(&self, k: usize, p: u32) -> f64 {
        netsched_report::stats::percentile(&self.lat_ms[k], p as f64 / 100.0).unwrap_or(f64::NAN)
    }
    /// Share of the class's requests (sent) answered within `deadline_ms` (client-measured).
    pub fn attainment(&self, k: usize, deadline_ms: f64) -> f64 {
        let n = self.load.sent[k];
        if n == 0 {
            return 0.0;
        }
        self.lat_ms[k].iter().filter(|&&x| x <= deadline_ms).count() as f64 / n as f64
    }
    /// Mean response time over every class, ms.
    pub fn overall_mean_ms(&self) -> f64 {
        let all: Vec<f64> = self.lat_ms.iter().flatten().copied().collect();
        netsched_report::stats::mean(&all).unwrap_or(f64::NAN)
    }
}

/// Start `e` in the bed, run the load, stop it.
pub fn run_engine(bed: &mut ClassBed, p: &Params, shape: &Shape, e: Engine) -> Result<EngineRun> {
    let bin = crate::real::lvs_cluster::director::netsched_binary();
    let bin_s = bin.display().to_string();
    let ctl = bed.dir.join(format!("ctl-{}.sock", e.name()));
    let ctl_s = ctl.display().to_string();
    let (text, ext) = if e.is_haproxy() {
        (haproxy_config(e, shape), "cfg")
    } else {
        (netsched_config(e, shape, &ctl_s), "toml")
    };
    let cfg = bed.dir.join(format!("{}.{ext}", e.name()));
    std::fs::write(&cfg, text).with_context(|| format!("writing {}", cfg.display()))?;
    let cfg_s = cfg.display().to_string();
    let log = bed.dir.join(format!("{}.log", e.name()));
    let logf =
        std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    let cpu = p.client_cpu.to_string();
    let mut args: Vec<&str> = vec!["-c", &cpu];
    if e.is_haproxy() {
        args.extend(["haproxy", "-db", "-f", &cfg_s]);
    } else {
        args.extend([bin_s.as_str(), "balance", "--config", &cfg_s]);
    }
    let ns = bed.server_ns.clone();
    let pid = bed.tb.spawn_with(
        &ns,
        "taskset",
        &args,
        e.name(),
        Stdio::null(),
        Stdio::from(logf),
    )?;
    let result = drive(bed, p, e, &bin_s, &ctl_s);
    let _ = bed.tb.stop(pid, Duration::from_secs(2));
    result.map_err(|err| {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let tail: String = text
            .chars()
            .rev()
            .take(2048)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        err.context(format!("{} log: {}", e.name(), tail.trim()))
    })
}

fn drive(bed: &ClassBed, p: &Params, e: Engine, bin: &str, ctl: &str) -> Result<EngineRun> {
    wait_listening(bed)?;
    let spec = LoadSpec {
        clients: bed.clients(),
        port: super::rig::LISTEN_PORT,
        path: "/index.html".into(),
        threads_per_client: p.threads_per_client,
        duration: p.duration,
        max_requests_per_thread: u64::MAX,
        cpu: Some(p.client_cpu),
        // Beyond the 60 s queue timeout: a starved request is answered (or refused) by the
        // balancer, never given up on by the client.
        read_timeout: Duration::from_secs(70),
        stop_when_a_class_finishes: false,
    };
    let load = run_load(&spec, &AtomicBool::new(false))?;
    netsched_testbed::check_interrupted()?;
    let balancer = if e.is_haproxy() {
        None
    } else {
        let out = netsched_testbed::run(
            bin,
            &[
                "balance",
                "ctl",
                "--control-socket",
                ctl,
                "show-classes",
                "--json",
            ],
        )?;
        let doc: ShowClasses = serde_json::from_str(&out)
            .map_err(|err| anyhow!("show-classes --json: {err}: {out}"))?;
        Some(doc.classes)
    };
    let n = bed.client_ns.len();
    let mut lat_ms: Vec<Vec<f64>> = vec![Vec::new(); n];
    for s in &load.samples {
        lat_ms[s.class].push(s.latency_ns as f64 / 1e6);
    }
    for v in &mut lat_ms {
        netsched_report::stats::sort(v);
    }
    Ok(EngineRun {
        engine: e,
        load,
        lat_ms,
        balancer,
    })
}

/// Wait (≤ 10 s) until the balancer accepts connections on class 0's address. Only a TCP
/// connection, never a request: a probe request would count in a class's N.
fn wait_listening(bed: &ClassBed) -> Result<()> {
    let probe = format!(
        "exec 3<>/dev/tcp/{}/{}",
        server_addr(0),
        super::rig::LISTEN_PORT
    );
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < until {
        if bed
            .tb
            .exec(&bed.client_ns[0], "bash", &["-c", &probe])
            .is_ok()
        {
            return Ok(());
        }
        netsched_testbed::sleep_unless_interrupted(Duration::from_millis(100))?;
    }
    Err(anyhow!("the balancer did not listen within 10 s"))
}

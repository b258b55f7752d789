//! P0's five classes at a load balancer's request queue, on real Linux
//! (`netsched lab run percentile-web --real --set real.engine=balance`): five client
//! namespaces (one per class, P = 90, 80, 70, 60, 50, classified by source CIDR as P0's IP
//! table), closed-loop HTTP/1.1 clients as in P0 §4 (4 persistent connections per class,
//! requests back to back), through one balancer to Debian nginx backends whose slots are
//! scarce (`maxconn` per server), so the balancer's queue is where contention happens. In one
//! run, on the same namespaces, backends and offered load: netsched balance with the FIFO,
//! strict-priority and percentile queues, and HAProxy 2.6 with `set-priority-class` and with
//! `set-priority-offset` ([`engine`]).
//!
//! The deadline (a request is a success when answered within it) is by default the netsched
//! FIFO run's mean response time, measured by the clients: the fixed counterpart of balance's
//! `deadline = "auto"` (P0 §3.2.2's automatic deadline, the running mean response time). The
//! same number judges every engine and is the percentile queue's fixed deadline.
//! `"fifo_server_mean"` (the mean time a request holds a backend slot, P0's "mean processing
//! time") is the tighter alternative; docs/balance-classes.md, "The real experiment", reports
//! what each gives.
//!
//! Parameters: the `real.balance` table of the percentile-web scenario (units converted):
//! `duration_s` 30 (quick: `quick_duration_s` 10) per engine, `threads_per_client` 4,
//! `backends` 2, `maxconn` 2 (per backend: 4 slots for 20 connections), `page_kb` 24,
//! `server_cpu` 0 (nginx), `client_cpu` 1 (the load and the balancer), `engines` (all five),
//! `deadline` ("fifo_mean", "fifo_server_mean" or a duration), `offset_step` ("deadline" or a duration: HAProxy
//! class k's offset is k × this), `max_hold` (every netsched class's bound on waiting in the
//! percentile queue: "deadline", the default, "off" or a duration). The percentiles are the
//! scenario's `clients.percentiles`.
//!
//! Inside: [`rig`] the namespaces and nginx, [`engine`] the five configurations, [`run`] one
//! engine, [`sim`] the simulated twin (run first: the sim column), [`checks`] P0's claims,
//! [`report`] Table 14 per engine and the files.

pub mod checks;
pub mod engine;
pub mod report;
pub mod rig;
pub mod run;
pub mod sim;

pub use checks::checks;
pub use engine::{Engine, ALL_ENGINES};
pub use run::EngineRun;

use crate::real::percentile_web::star::client_cidr;
use crate::real::percentile_web::THESIS_P;
use anyhow::{anyhow, bail, Context, Result};
use netsched_core::qdisc::percentile::MaxHold;
use netsched_report::ExperimentOutput;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// How the deadline is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DeadlineChoice {
    /// The mean time a request holds a backend slot in the netsched FIFO run (P0 §3.2.2: the
    /// mean processing time), by Little's law: slots / answers per second, the slots being
    /// always taken under this overload.
    FifoServerMean,
    /// The netsched FIFO run's mean response time.
    FifoMean,
    Fixed(Duration),
}

/// Settings of a balance-classes run.
#[derive(Debug, Clone)]
pub struct Params {
    pub percentiles: Vec<u32>,
    pub threads_per_client: usize,
    pub backends: usize,
    pub maxconn: u32,
    pub page_kb: usize,
    pub duration: Duration,
    pub server_cpu: usize,
    pub client_cpu: usize,
    pub engines: Vec<Engine>,
    pub deadline: DeadlineChoice,
    /// HAProxy's offset per class step; `None` = the deadline.
    pub offset_step: Option<Duration>,
    /// Every netsched class's `max_hold` (the percentile queue's bound on waiting).
    pub max_hold: MaxHold,
}

fn parse_dur(key: &str, v: &Value) -> Result<Duration> {
    let text = v
        .as_str()
        .ok_or_else(|| anyhow!("real.balance.{key}: expected a duration string, got {v}"))?;
    let ns = netsched_core::units::parse_duration(text)
        .map_err(|e| anyhow!("real.balance.{key} = {text:?}: {e}"))?;
    if ns == 0 {
        bail!("real.balance.{key} = {text:?}: must be above zero");
    }
    Ok(Duration::from_nanos(ns))
}

impl Params {
    pub fn from_json(params: &Value, quick: bool) -> Result<Self> {
        let empty = Value::Object(Default::default());
        let b = params.pointer("/real/balance").unwrap_or(&empty);
        let num = |k: &str, d: f64, lo: f64, hi: f64| -> Result<f64> {
            let x = match b.get(k) {
                None => d,
                Some(v) => v
                    .as_f64()
                    .ok_or_else(|| anyhow!("real.balance.{k}: expected a number, got {v}"))?,
            };
            if !(lo..=hi).contains(&x) {
                bail!("real.balance.{k} = {x}: must be in {lo}..={hi}");
            }
            Ok(x)
        };
        let percentiles = match params.pointer("/clients/percentiles") {
            None => THESIS_P.to_vec(),
            Some(v) => v
                .as_array()
                .ok_or_else(|| anyhow!("clients.percentiles: expected an array"))?
                .iter()
                .map(|x| match x.as_u64() {
                    Some(p @ 1..=100) => Ok(p as u32),
                    _ => Err(anyhow!("clients.percentiles: {x} is not in 1..=100")),
                })
                .collect::<Result<Vec<_>>>()?,
        };
        if percentiles.is_empty() || percentiles.len() > 50 {
            bail!("clients.percentiles: 1 to 50 classes");
        }
        let engines = match b.get("engines") {
            None => ALL_ENGINES.to_vec(),
            Some(v) => v
                .as_array()
                .ok_or_else(|| anyhow!("real.balance.engines: expected an array"))?
                .iter()
                .map(|e| Engine::parse(e.as_str().unwrap_or("?")))
                .collect::<Result<Vec<_>>>()?,
        };
        let deadline = match b.get("deadline") {
            None => DeadlineChoice::FifoMean,
            Some(Value::String(s)) if s == "fifo_server_mean" => DeadlineChoice::FifoServerMean,
            Some(Value::String(s)) if s == "fifo_mean" => DeadlineChoice::FifoMean,
            Some(v) => DeadlineChoice::Fixed(parse_dur("deadline", v)?),
        };
        if !matches!(deadline, DeadlineChoice::Fixed(_)) && !engines.contains(&Engine::NetschedFifo)
        {
            bail!(
                "real.balance.deadline = \"fifo_server_mean\" or \"fifo_mean\" needs the netsched-fifo engine in \
                 real.balance.engines (or give the deadline as a duration)"
            );
        }
        let offset_step = match b.get("offset_step") {
            None => None,
            Some(Value::String(s)) if s == "deadline" => None,
            Some(v) => Some(parse_dur("offset_step", v)?),
        };
        let max_hold = match b.get("max_hold") {
            None => MaxHold::Deadline,
            Some(Value::String(s)) => {
                MaxHold::parse(s).map_err(|why| anyhow!("real.balance.max_hold = {s:?}: {why}"))?
            }
            Some(v) => {
                bail!("real.balance.max_hold = {v}: expected \"off\", \"deadline\" or a duration")
            }
        };
        let dur = if quick {
            num("quick_duration_s", 10.0, 1.0, 3600.0)?
        } else {
            num("duration_s", 30.0, 1.0, 3600.0)?
        };
        Ok(Params {
            percentiles,
            threads_per_client: num("threads_per_client", 4.0, 1.0, 64.0)? as usize,
            backends: num("backends", 2.0, 1.0, 16.0)? as usize,
            maxconn: num("maxconn", 2.0, 1.0, 64.0)? as u32,
            page_kb: num("page_kb", 24.0, 1.0, 1024.0)? as usize,
            duration: Duration::from_secs_f64(dur),
            server_cpu: num("server_cpu", 0.0, 0.0, 1023.0)? as usize,
            client_cpu: num("client_cpu", 1.0, 0.0, 1023.0)? as usize,
            engines,
            deadline,
            offset_step,
            max_hold,
        })
    }
}

/// What a whole run measured.
#[derive(Debug, Clone)]
pub struct ClassesRun {
    pub runs: Vec<EngineRun>,
    /// The deadline every engine is judged against, ms.
    pub deadline_ms: f64,
    /// HAProxy's offset step, ms.
    pub offset_step_ms: u64,
    /// The unique tag of the testbed (in every namespace name, folder and config path it made).
    pub testbed_tag: String,
    /// The simulated twin at the same shape, run before the real engines.
    pub sim: sim::SimColumn,
}

/// Build the testbed, run every engine, write the files, return the output and the runs.
pub fn run_experiment(
    params: &Value,
    seed: u64,
    out: &Path,
    quick: bool,
) -> Result<(ExperimentOutput, ClassesRun)> {
    let p = Params::from_json(params, quick)?;
    if p.engines.iter().any(|e| e.is_haproxy()) {
        netsched_testbed::run("haproxy", &["-v"]).context(
            "HAProxy engines need Debian's haproxy (apt-get install haproxy), \
             or leave them out of real.balance.engines",
        )?;
    }
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    // The sim column first: the claims' margins are read from it, not from the real run.
    let sim = sim::simulate(&p, p.max_hold, seed).context("the simulated twin")?;
    // Ctrl-C / SIGTERM: the load stops within a response time, the balancer is stopped by its
    // id, the bed (nginx, namespaces, folder) is dropped, and the run returns an error.
    let _signals = netsched_testbed::SignalGuard::install()?;
    let mut bed = rig::ClassBed::new(
        p.percentiles.len(),
        p.backends,
        p.page_kb,
        p.server_cpu,
        seed,
    )?;
    let mut engines = p.engines.clone();
    engines.sort_by_key(|e| *e != Engine::NetschedFifo);
    let mut shape = engine::Shape {
        listen_port: rig::LISTEN_PORT,
        backends: bed.backends.clone(),
        maxconn: p.maxconn,
        classes: (0..p.percentiles.len())
            .map(|k| (client_cidr(k), p.percentiles[k]))
            .collect(),
        deadline_ns: match p.deadline {
            DeadlineChoice::Fixed(d) => Some(d.as_nanos() as u64),
            _ => None,
        },
        offset_step_ms: 0,
        max_hold: p.max_hold,
    };
    let mut runs = Vec::new();
    for e in engines {
        netsched_testbed::check_interrupted()?;
        if shape.deadline_ns.is_none() && e != Engine::NetschedFifo {
            bail!("no deadline: the netsched-fifo run must come first");
        }
        shape.offset_step_ms = match (p.offset_step, shape.deadline_ns) {
            (Some(d), _) => (d.as_millis() as u64).max(1),
            (None, Some(ns)) => ns.div_ceil(1_000_000).max(1),
            (None, None) => 1,
        };
        let r = run::run_engine(&mut bed, &p, &shape, e).with_context(|| e.name().to_string())?;
        if e == Engine::NetschedFifo && shape.deadline_ns.is_none() {
            let answered: u64 = (0..p.percentiles.len()).map(|k| r.completed(k)).sum();
            let slots = (p.backends as u32 * p.maxconn) as f64;
            let ms = match p.deadline {
                DeadlineChoice::FifoMean => r.overall_mean_ms(),
                _ => slots * r.load.elapsed.as_secs_f64() * 1e3 / answered as f64,
            };
            if !ms.is_finite() || answered == 0 {
                bail!("the netsched-fifo run answered no request: no deadline to judge by");
            }
            shape.deadline_ns = Some(((ms * 1e6) as u64).max(1000));
        }
        runs.push(r);
    }
    let testbed_tag = bed.tb.tag().to_string();
    drop(bed);
    let run = ClassesRun {
        testbed_tag,
        runs,
        deadline_ms: shape.deadline_ns.unwrap_or(0) as f64 / 1e6,
        offset_step_ms: shape.offset_step_ms,
        sim,
    };
    let output = report::output(params, seed, out, &p, &run)?;
    Ok((output, run))
}

/// The lab's entry point (`RealFn`), called by percentile-web's real mode for
/// `real.engine = "balance"`.
pub fn run_real(params: &Value, seed: u64, out: &Path, quick: bool) -> Result<ExperimentOutput> {
    run_experiment(params, seed, out, quick).map(|(o, _)| o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn params_default_to_the_thesis_classes_and_refuse_bad_values_by_name() {
        let p = Params::from_json(&json!({}), true).unwrap();
        assert_eq!(p.percentiles, THESIS_P.to_vec());
        assert_eq!(p.engines, ALL_ENGINES.to_vec());
        assert_eq!(p.deadline, DeadlineChoice::FifoMean);
        assert_eq!(p.duration, Duration::from_secs(10));
        let bad = |v: Value| Params::from_json(&json!({ "real": { "balance": v } }), false);
        let e = bad(json!({ "maxconn": 0 })).unwrap_err().to_string();
        assert!(e.contains("real.balance.maxconn = 0"), "{e}");
        let e = bad(json!({ "deadline": "soon" })).unwrap_err().to_string();
        assert!(e.contains("real.balance.deadline = \"soon\""), "{e}");
        let e = bad(json!({ "engines": ["haproxy-class"] }))
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs the netsched-fifo engine"), "{e}");
        let p = bad(json!({ "engines": ["haproxy-class"], "deadline": "20ms" })).unwrap();
        assert_eq!(p.deadline, DeadlineChoice::Fixed(Duration::from_millis(20)));
        assert_eq!(p.max_hold, MaxHold::Deadline);
        let e = bad(json!({ "max_hold": "0s" })).unwrap_err().to_string();
        assert!(e.contains("real.balance.max_hold = \"0s\""), "{e}");
        let p = bad(json!({ "max_hold": "off" })).unwrap();
        assert_eq!(p.max_hold, MaxHold::Off);
        let e = Params::from_json(&json!({ "clients": { "percentiles": [90, 0] } }), true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("clients.percentiles: 0"), "{e}");
    }
}

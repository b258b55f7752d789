//! `netsched lab run lvs-cluster --real`: P4's cluster (an LVS-NAT director in front of 1, 5,
//! 10, 15 proxy hosts, one ApacheBench client; P4 §3, Tables 3 and 4) on real Linux
//! namespaces and real TCP. Method, figures and pass counts: `docs/lvs-real.md`.
//!
//! - `rig.rs`: the namespaces (client, director, n hosts; or client, router, m directors
//!   behind its ECMP, hub, n hosts);
//! - `cpu.rs`: CPU accounting (procfs);
//! - `host.rs`: a host with the capacity of one of P4's machines (virtual FIFO server);
//! - `client.rs`: the ab-like closed loop, every request accounted;
//! - `director.rs`: the director, `netsched balance` or HAProxy behind one abstraction;
//! - `report.rs`: paper | sim | real, checks, charts.
//!
//! Parameters: the simulated scenario (`scenarios/lvs-cluster.toml`: sizes, one-host rates,
//! jitter, concurrency, origins — shared with the simulation so both model the same cluster)
//! plus an optional `[real]` table ([`RealParams`], every key optional).

pub mod client;
pub mod cpu;
pub mod director;
pub mod host;
mod report;
pub mod rig;

use crate::experiments::lvs_cluster::{service_times, Case, Setup};
use anyhow::{anyhow, bail, Context, Result};
use client::{ClientResult, ClientSpec};
use director::Director;
use host::Service;
use netsched_core::units;
use netsched_report::ExperimentOutput;
use rig::Rig;
use serde::Deserialize;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// The `[real]` table: what the real run measures. Every key is optional; defaults depend on
/// `--quick` ([`RealParams::defaults`]).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RealParamsToml {
    pub director: Option<String>,
    /// `"l7"` (default: HTTP, a decision per request) or `"l4"` (TCP, a decision per
    /// connection, as IPVS-NAT).
    pub mode: Option<String>,
    pub hosts: Option<Vec<usize>>,
    pub sizes: Option<Vec<String>>,
    pub algorithms: Option<Vec<String>>,
    pub per_host_hosts: Option<Vec<usize>>,
    pub per_host_algorithms: Option<Vec<String>>,
    /// Per cell, a duration.
    pub duration: Option<String>,
    /// Completions before this are not counted in the rate.
    pub warmup: Option<String>,
    pub concurrency: Option<usize>,
    pub workers_per_host: Option<usize>,
    pub response_timeout: Option<String>,
    pub max_requests_per_cell: Option<u64>,
}

/// The validated real-run settings.
#[derive(Debug, Clone)]
pub struct RealParams {
    pub director: String,
    pub mode: director::ProxyMode,
    pub hosts: Vec<usize>,
    /// Indices into `Setup::sizes` (P4 Table 3).
    pub sizes: Vec<usize>,
    pub algorithms: Vec<String>,
    /// Host counts of the per-host-size case (P4 Table 4); empty = not run.
    pub per_host_hosts: Vec<usize>,
    pub per_host_algorithms: Vec<String>,
    pub duration: Duration,
    pub warmup: Duration,
    pub concurrency: usize,
    pub workers_per_host: usize,
    pub response_timeout: Duration,
    pub max_requests_per_cell: u64,
    /// Directors behind the router's ECMP: the scenario's `cluster.directors` (the simulated
    /// and the real cluster have the same number; `--directors N`).
    pub directors: usize,
}

/// Bounds of the real run.
pub mod bounds {
    pub const MAX_CELL: std::time::Duration = std::time::Duration::from_secs(600);
    pub const MAX_REQUESTS_PER_CELL: u64 = 10_000_000;
}

impl RealParams {
    /// `quick`: RR at 1 and 5 hosts with 10K objects (scaling), RR and LC at 5 hosts with
    /// per-host sizes (Table 4), 10 s cells. Full: every size, algorithm and host count of the
    /// scenario, 12 s cells.
    pub fn defaults(s: &Setup, quick: bool) -> RealParamsToml {
        let (hosts, sizes, algs, ph_hosts, ph_algs, dur) = if quick {
            let size = if s.sizes.iter().any(|x| x == "10K") {
                "10K".to_string()
            } else {
                s.sizes[0].clone()
            };
            (
                vec![1, 5],
                vec![size],
                vec!["rr".to_string()],
                vec![5],
                vec!["rr".to_string(), "lc".to_string()],
                "10s",
            )
        } else {
            (
                s.hosts.clone(),
                s.sizes.clone(),
                s.all_algorithms(),
                s.hosts.clone(),
                s.all_algorithms(),
                "12s",
            )
        };
        RealParamsToml {
            director: Some("auto".into()),
            mode: Some("l7".into()),
            hosts: Some(hosts),
            sizes: Some(sizes),
            algorithms: Some(algs),
            per_host_hosts: Some(ph_hosts),
            per_host_algorithms: Some(ph_algs),
            duration: Some(dur.into()),
            warmup: Some("2s".into()),
            concurrency: Some(s.base.concurrency),
            workers_per_host: None,
            response_timeout: Some("60s".into()),
            max_requests_per_cell: Some(1_000_000),
        }
    }

    pub fn from_json(real: Option<&Value>, s: &Setup, quick: bool) -> Result<RealParams> {
        let given: RealParamsToml = match real {
            None => RealParamsToml::default(),
            Some(v) => crate::scenario::typed(v, "lvs-cluster [real]")?,
        };
        let d = Self::defaults(s, quick);
        let hosts = given.hosts.or(d.hosts).unwrap_or_default();
        let per_host_hosts = given
            .per_host_hosts
            .or(d.per_host_hosts)
            .unwrap_or_default();
        for &n in hosts.iter().chain(&per_host_hosts) {
            if n == 0 || n > rig::MAX_HOSTS {
                bail!("real.hosts: {n} is outside 1..={}", rig::MAX_HOSTS);
            }
        }
        let sizes = given
            .sizes
            .or(d.sizes)
            .unwrap_or_default()
            .iter()
            .map(|z| {
                s.sizes.iter().position(|x| x == z).ok_or_else(|| {
                    anyhow!(
                        "real.sizes: {z:?} is not one of service.sizes {:?}",
                        s.sizes
                    )
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let algorithms = given.algorithms.or(d.algorithms).unwrap_or_default();
        let per_host_algorithms = given
            .per_host_algorithms
            .or(d.per_host_algorithms)
            .unwrap_or_default();
        let known = netsched_core::balance::BalancerConfig::all_defaults();
        for a in algorithms.iter().chain(&per_host_algorithms) {
            if !known.iter().any(|c| c.name() == a) {
                let names: Vec<&str> = known.iter().map(|c| c.name()).collect();
                bail!(
                    "real.algorithms: {a:?} is not a core balancer ({})",
                    names.join(", ")
                );
            }
        }
        let dur = |key: &str, v: Option<String>, dv: Option<String>| -> Result<Duration> {
            let text = v.or(dv).unwrap_or_default();
            let ns = units::parse_duration_in(
                &text,
                netsched_core::MS,
                bounds::MAX_CELL.as_nanos() as u64,
            )
            .map_err(|e| anyhow!("real.{key}: {e}"))?;
            Ok(Duration::from_nanos(ns))
        };
        let duration = dur("duration", given.duration, d.duration)?;
        let warmup = dur("warmup", given.warmup, d.warmup)?;
        if warmup >= duration {
            bail!("real.warmup must be shorter than real.duration");
        }
        let response_timeout = dur(
            "response_timeout",
            given.response_timeout,
            d.response_timeout,
        )?;
        let concurrency = given.concurrency.or(d.concurrency).unwrap_or(1);
        if concurrency == 0 || concurrency > client::MAX_CONCURRENCY {
            bail!(
                "real.concurrency = {concurrency} is outside 1..={}",
                client::MAX_CONCURRENCY
            );
        }
        // Every request of the closed loop may sit at one host (RR behind a slow host).
        let workers_per_host = given
            .workers_per_host
            .unwrap_or((concurrency + 8).min(host::MAX_WORKERS));
        if workers_per_host == 0 || workers_per_host > host::MAX_WORKERS {
            bail!(
                "real.workers_per_host = {workers_per_host} is outside 1..={}",
                host::MAX_WORKERS
            );
        }
        let max_requests_per_cell = given
            .max_requests_per_cell
            .or(d.max_requests_per_cell)
            .unwrap_or(1);
        if max_requests_per_cell == 0 || max_requests_per_cell > bounds::MAX_REQUESTS_PER_CELL {
            bail!(
                "real.max_requests_per_cell = {max_requests_per_cell} is outside 1..={}",
                bounds::MAX_REQUESTS_PER_CELL
            );
        }
        let mode = director::ProxyMode::parse(&given.mode.or(d.mode).unwrap_or_default())?;
        Ok(RealParams {
            director: given.director.or(d.director).unwrap_or_default(),
            mode,
            hosts,
            sizes,
            algorithms,
            per_host_hosts,
            per_host_algorithms,
            duration,
            warmup,
            concurrency,
            workers_per_host,
            response_timeout,
            max_requests_per_cell,
            directors: s.base.directors,
        })
    }
}

/// Body bytes of a size name (`300B`, `1K`, `10K`, `100K`; tc(8) size grammar). `mixed` (P4's
/// "Variation", whose mix P4 does not print) is served as 10 KiB bodies at its own calibrated
/// service time: the time, not the bytes, is what the host's capacity follows.
pub fn body_bytes(size: &str) -> Result<usize> {
    if size == "mixed" {
        return Ok(10 * 1024);
    }
    let b = units::parse_size_in(size, 1, host::MAX_BODY as u64)
        .map_err(|e| anyhow!("service.sizes: {e}"))?;
    Ok(b as usize)
}

/// What each host serves in `case` with `n` hosts.
pub fn services(s: &Setup, case: Case, n: usize) -> Result<Vec<Service>> {
    let means = service_times(&s.rates, case, n);
    (0..n)
        .map(|k| {
            let size = match case {
                Case::Same(i) => &s.sizes[i],
                Case::PerHost => &s.sizes[k % s.sizes.len()],
            };
            Ok(Service {
                mean_s: means[k],
                jitter_cv: s.base.jitter_cv,
                body_bytes: body_bytes(size)?,
            })
        })
        .collect()
}

/// CPU use during a cell's measurement window, in cores (1.0 = one core busy).
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuUse {
    pub client: f64,
    /// Every director together.
    pub director: f64,
    pub hosts: f64,
    /// The whole machine's busy fraction (all users; the machine is shared).
    pub machine_busy: f64,
}

/// One measured cell.
#[derive(Debug, Clone)]
pub struct Cell {
    pub case: Case,
    pub alg: String,
    pub hosts: usize,
    pub client: ClientResult,
    /// Requests each host answered inside the window.
    pub host_served: Vec<u64>,
    /// Busy fraction of each emulated host inside the window.
    pub host_busy: Vec<f64>,
    pub host_bad_requests: u64,
    pub cpu: CpuUse,
    /// Directors of the rig (1 = P4's cluster).
    pub directors: usize,
    /// Requests (L7) or connections (L4) each director sent to the hosts over the whole cell,
    /// from its `/metrics`, in director order; empty when the director has none (HAProxy).
    pub director_requests: Vec<u64>,
}

/// One cell to measure: which case and algorithm, what each host serves, how many origins
/// the client's URIs name, and the client's seed.
#[derive(Debug, Clone)]
pub struct CellSpec {
    pub case: Case,
    pub alg: String,
    pub services: Vec<Service>,
    pub origins: usize,
    pub seed: u64,
}

/// Measure one cell on a built rig.
pub fn measure_cell(
    rig: &mut Rig,
    director: &Director,
    p: &RealParams,
    cell: &CellSpec,
) -> Result<Cell> {
    let (case, alg, origins, seed) = (cell.case, cell.alg.as_str(), cell.origins, cell.seed);
    let services = &cell.services;
    rig.configure(services)?;
    rig.start_director(director, alg)?;
    let spec = ClientSpec {
        vip: rig::vip(),
        concurrency: p.concurrency,
        duration: p.duration,
        warmup: p.warmup,
        origins,
        max_requests: p.max_requests_per_cell,
        response_timeout: p.response_timeout,
        seed,
    };
    let ns = rig.client_ns.clone();
    let client = std::thread::spawn(move || client::run(&ns, &spec));
    let waited = netsched_testbed::sleep_unless_interrupted(p.warmup);
    // Window start: zero the hosts' counters, take CPU snapshots.
    for h in &rig.hosts {
        h.reset();
    }
    let t0 = std::time::Instant::now();
    let dpids = rig.director_pids();
    let d0: u64 = dpids.iter().map(|p| cpu::process_cpu_ns(*p)).sum();
    let h0: u64 = rig.hosts.iter().map(|h| h.cpu_ns()).sum();
    let m0 = cpu::machine_jiffies();
    let result = client
        .join()
        .map_err(|_| anyhow!("the client thread panicked"))?;
    let window = t0.elapsed().as_secs_f64().max(1e-9);
    let d1: u64 = dpids.iter().map(|p| cpu::process_cpu_ns(*p)).sum();
    let h1: u64 = rig.hosts.iter().map(|h| h.cpu_ns()).sum();
    let m1 = cpu::machine_jiffies();
    let stats: Vec<_> = rig.hosts.iter().map(|h| h.stats()).collect();
    let director_requests = match director.kind {
        director::DirectorKind::Netsched => rig.director_requests(),
        director::DirectorKind::Haproxy => Ok(Vec::new()),
    };
    rig.stop_director();
    let director_requests = director_requests?;
    waited?;
    // A cell cut short by SIGINT/SIGTERM is not a measurement.
    netsched_testbed::check_interrupted()?;
    let client = result.with_context(|| format!("client, {alg}, {} hosts", rig.hosts.len()))?;
    let whole = p.duration.as_secs_f64();
    let cpu = CpuUse {
        client: client.cpu_ns as f64 / 1e9 / whole,
        director: d1.saturating_sub(d0) as f64 / 1e9 / window,
        hosts: h1.saturating_sub(h0) as f64 / 1e9 / window,
        machine_busy: {
            let (b, t) = (m1.0.saturating_sub(m0.0), m1.1.saturating_sub(m0.1));
            if t > 0 {
                b as f64 / t as f64
            } else {
                f64::NAN
            }
        },
    };
    Ok(Cell {
        case,
        alg: alg.to_string(),
        hosts: rig.hosts.len(),
        host_served: stats.iter().map(|s| s.served).collect(),
        host_busy: stats.iter().map(|s| (s.busy_s / window).min(1.0)).collect(),
        host_bad_requests: stats.iter().map(|s| s.bad_requests).sum(),
        client,
        cpu,
        directors: rig.director_count(),
        director_requests,
    })
}

/// Everything measured by one real run.
#[derive(Debug)]
pub struct Measured {
    pub director: Director,
    pub cells: Vec<Cell>,
    /// Algorithms asked for that the director cannot run, each with the reason.
    pub not_run: Vec<(String, &'static str)>,
}

/// Build the rigs and measure every cell of `p`.
pub fn measure(s: &Setup, p: &RealParams, seed: u64) -> Result<Measured> {
    let director = Director::detect(&p.director)?.with_mode(p.mode);
    let mut not_run: Vec<(String, &'static str)> = Vec::new();
    let mut cells = Vec::new();
    let mut seeds = netsched_core::rng::SplitMix64::new(seed);
    let mut counts: Vec<usize> = p.hosts.iter().chain(&p.per_host_hosts).copied().collect();
    counts.sort_unstable();
    counts.dedup();
    for n in counts {
        netsched_testbed::check_interrupted()?;
        let mut todo: Vec<(Case, &String)> = Vec::new();
        if p.hosts.contains(&n) {
            for &i in &p.sizes {
                for a in &p.algorithms {
                    todo.push((Case::Same(i), a));
                }
            }
        }
        if p.per_host_hosts.contains(&n) {
            for a in &p.per_host_algorithms {
                todo.push((Case::PerHost, a));
            }
        }
        let mut rig = Rig::build_with(n, p.directors, p.workers_per_host, seeds.next_u64())?;
        for (case, alg) in todo {
            netsched_testbed::check_interrupted()?;
            if let Some(why) = director.cannot_run(alg) {
                if !not_run.iter().any(|(a, _)| a == alg) {
                    not_run.push((alg.clone(), why));
                }
                continue;
            }
            let spec = CellSpec {
                case,
                alg: alg.clone(),
                services: services(s, case, n)?,
                origins: s.origins_at(n),
                seed: seeds.next_u64(),
            };
            let cell = measure_cell(&mut rig, &director, p, &spec)?;
            eprintln!(
                "[lvs-real] {} hosts, {} director(s) {:?}, {}, {alg}: {:.1} req/s ({} ok, {} errors, {} cut), CPU client {:.2} director {:.2} hosts {:.2} cores, machine {:.0}% busy",
                n,
                cell.directors,
                cell.director_requests,
                match case {
                    Case::Same(i) => s.sizes[i].as_str(),
                    Case::PerHost => "per-host",
                },
                cell.client.rate(),
                cell.client.ok,
                cell.client.errors_total(),
                cell.client.cut_at_end,
                cell.cpu.client,
                cell.cpu.director,
                cell.cpu.hosts,
                100.0 * cell.cpu.machine_busy
            );
            cells.push(cell);
        }
        drop(rig);
    }
    Ok(Measured {
        director,
        cells,
        not_run,
    })
}

/// The simulated scenario: `params` without the `real` table.
fn sim_params(params: &Value) -> Value {
    let mut v = params.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("real");
    }
    v
}

/// The lab's real entry point (`netsched lab run lvs-cluster --real [--quick]`).
pub fn run_real(params: &Value, seed: u64, out: &Path, quick: bool) -> Result<ExperimentOutput> {
    let _signals = netsched_testbed::SignalGuard::install()?;
    let sim = sim_params(params);
    let s = Setup::from_params(&sim)?;
    let p = RealParams::from_json(params.get("real"), &s, quick)?;
    let measured = measure(&s, &p, seed)?;
    // The simulated run of the same scenario, for the sim column (its own folder).
    let mut sim_quick = sim.clone();
    if let Some(v) = sim_quick.pointer_mut("/sensitivity/enabled") {
        *v = Value::Bool(false);
    }
    let sim_out = out.join("sim");
    std::fs::create_dir_all(&sim_out).with_context(|| format!("creating {}", sim_out.display()))?;
    let sim_output = crate::experiments::lvs_cluster::run(&sim_quick, seed, &sim_out)?;
    report::build(&s, &p, &measured, &sim_output, seed, params, out)
}

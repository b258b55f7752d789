//! The `lvs-cluster` experiment (P4, `/work/shared/papers/004_*.txt`): an LVS-NAT director
//! in front of 1, 5, 10, 15 proxy hosts, one ApacheBench-like closed-loop client, IPVS
//! balancers from `netsched_core::balance`.
//!
//! Model (discrete events on `netsched_sim::event::EventQueue`):
//! - the client keeps `concurrency` requests outstanding; each new request opens a connection
//!   whose `FlowKey` names the client address, a fresh source port, and the origin (destination)
//!   address the request is for; the director calls `Balancer::pick` and counts the connection
//!   active on the chosen host (`ServerTable::on_open`);
//! - each host is one FCFS server (Squid + distiller on one CPU) whose service time depends on
//!   the object size it returns, calibrated from P4 Table 3's one-host column
//!   (mean = 1 / rate, e.g. 1/318 s at 300 B);
//! - on completion the director moves the connection to inactive (`on_inactive`) and forgets
//!   it after the IPVS TIME_WAIT timeout (`on_inactive_close`); the client sends the next
//!   request at once.
//! - client ports come from a bounded range used in order; a port whose previous connection
//!   is still in IPVS TIME_WAIT reuses that entry and its host, bypassing the scheduler
//!   (`ip_vs_in` looks the connection up before scheduling, ip_vs_core.c);
//! - case "same": every host serves the same object size; case "per-host": host k serves only
//!   size k mod 5 (300 B, 1 K, 10 K, 100 K, mixed, repeating; P4 §3.3 (2)).
//!
//! Cost: O(log n) per event; about 4 events per request.

use crate::params;
use anyhow::{anyhow, Context};
use netsched_core::balance::{
    AnyBalancer, Balancer, BalancerConfig, FlowKey, ServerId, ServerTable,
};
use netsched_core::rng::SplitMix64;
use netsched_core::{Nanos, SEC};
use netsched_report::{svg, Check, Comparison, ExperimentOutput, Figure, Results, Run};
use netsched_sim::event::EventQueue;
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

/// P4 Table 3: requests/s with the same object for all requests, per size, algorithm and host
/// count (1, 5, 10, 15).
/// One algorithm's row: name and requests/s at 1, 5, 10, 15 hosts.
type PaperRow = (&'static str, [f64; 4]);
const PAPER_SAME: [(&str, [PaperRow; 4]); 5] = [
    (
        "300B",
        [
            ("rr", [318.0, 1453.0, 2868.0, 4322.0]),
            ("lc", [304.0, 1378.0, 2684.0, 3343.0]),
            ("lblc", [300.0, 1166.0, 1879.0, 2446.0]),
            ("dh", [305.0, 1367.0, 2675.0, 3479.0]),
        ],
    ),
    (
        "1K",
        [
            ("rr", [231.0, 1089.0, 2162.0, 3244.0]),
            ("lc", [213.0, 1027.0, 2017.0, 2985.0]),
            ("lblc", [211.0, 1004.0, 1625.0, 2270.0]),
            ("dh", [220.0, 1011.0, 1991.0, 2938.0]),
        ],
    ),
    (
        "10K",
        [
            ("rr", [36.0, 182.0, 363.0, 545.0]),
            ("lc", [33.0, 172.0, 345.0, 518.0]),
            ("lblc", [34.0, 160.0, 218.0, 282.0]),
            ("dh", [35.0, 172.0, 342.0, 499.0]),
        ],
    ),
    (
        "100K",
        [
            ("rr", [2.30, 11.91, 23.92, 35.99]),
            ("lc", [2.24, 11.35, 22.81, 34.29]),
            ("lblc", [2.24, 10.95, 21.34, 32.11]),
            ("dh", [2.25, 11.35, 22.80, 34.29]),
        ],
    ),
    (
        "mixed",
        [
            ("rr", [65.0, 321.0, 637.0, 965.0]),
            ("lc", [62.0, 305.0, 605.0, 880.0]),
            ("lblc", [61.0, 267.0, 406.0, 444.0]),
            ("dh", [63.0, 302.0, 597.0, 895.0]),
        ],
    ),
];

/// P4 Table 4: requests/s when host k serves only one size.
const PAPER_PER_HOST: [(&str, [f64; 4]); 4] = [
    ("rr", [12.43, 18.88, 29.6, 41.53]),
    ("lc", [11.49, 246.0, 369.0, 409.0]),
    ("lblc", [10.29, 14.95, 37.06, 57.64]),
    ("dh", [11.49, 18.29, 28.83, 37.73]),
];
const PAPER_HOSTS: [usize; 4] = [1, 5, 10, 15];

fn paper_same(size: &str, alg: &str, hosts: usize) -> Option<f64> {
    let hi = PAPER_HOSTS.iter().position(|h| *h == hosts)?;
    let (_, rows) = PAPER_SAME.iter().find(|(s, _)| *s == size)?;
    rows.iter().find(|(a, _)| *a == alg).map(|(_, v)| v[hi])
}

fn paper_per_host(alg: &str, hosts: usize) -> Option<f64> {
    let hi = PAPER_HOSTS.iter().position(|h| *h == hosts)?;
    PAPER_PER_HOST
        .iter()
        .find(|(a, _)| *a == alg)
        .map(|(_, v)| v[hi])
}

/// Everything one simulated configuration needs.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    pub algorithm: String,
    /// Mean service time (s) of each host, in host order.
    pub host_service_s: Vec<f64>,
    pub jitter_cv: f64,
    pub concurrency: usize,
    /// Distinct origin addresses the requests name (chosen uniformly per request).
    pub origins: usize,
    pub requests: u64,
    pub max_time: Nanos,
    pub warmup_fraction: f64,
    pub inactive_timeout: Nanos,
    /// Size of the client's ephemeral port range (`ip_local_port_range`), used in order like
    /// the Linux 2.4 port rover. 0 = never reuse a port (every connection is new to IPVS).
    pub client_ports: u32,
}

/// What one configuration measured.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterResult {
    /// Completed requests per second after warm-up.
    pub req_per_s: f64,
    pub completed: u64,
    pub mean_response_ms: f64,
    /// Requests each host served (whole run).
    pub per_host: Vec<u64>,
    /// Requests the balancer could not place ("no destination available"); 0 in these runs.
    pub unplaced: u64,
    /// Connections whose client port still had an IPVS entry (TIME_WAIT) and were forwarded to
    /// that entry's host without asking the scheduler (whole run).
    pub reused: u64,
}

enum Ev {
    /// A client slot sends its next request.
    Send,
    /// Host finished its current request.
    Done { host: usize },
    /// An inactive connection at the director expires (if its entry was not reused since:
    /// `generation` must still match).
    Forget {
        host: usize,
        port: u32,
        generation: u64,
    },
}

struct Req {
    sent: Nanos,
    port: u32,
}

/// The director's IPVS connection entry for one client port.
#[derive(Clone, Copy)]
struct ConnEntry {
    host: usize,
    /// Still in flight (active); an inactive entry waits for its TIME_WAIT expiry.
    active: bool,
    generation: u64,
}

struct Host {
    queue: VecDeque<Req>,
    busy: bool,
    service_s: f64,
}

fn origin_addr(i: usize) -> IpAddr {
    // Origins 10.1.x.y, consecutive like a block of server addresses.
    let i = i as u32 + 1;
    IpAddr::V4(Ipv4Addr::new(10, 1, (i >> 8) as u8, (i & 0xff) as u8))
}

/// Simulate one configuration.
pub fn simulate(cfg: &ClusterConfig, seed: u64) -> anyhow::Result<ClusterResult> {
    if cfg.client_ports != 0 && (cfg.client_ports as usize) <= cfg.concurrency {
        anyhow::bail!(
            "client.ports ({}) must exceed client.concurrency ({}) so a free port exists",
            cfg.client_ports,
            cfg.concurrency
        );
    }
    let mut rng = SplitMix64::new(seed);
    let bal_cfg: BalancerConfig = serde_json::from_value(json!({ "kind": cfg.algorithm }))
        .map_err(|e| anyhow!("unknown balancer {:?}: {e}", cfg.algorithm))?;
    let mut balancer: AnyBalancer = bal_cfg
        .build(&mut rng)
        .map_err(|e| anyhow!("balancer {}: {e}", cfg.algorithm))?;
    let mut table = ServerTable::new();
    let mut hosts = Vec::new();
    for (i, s) in cfg.host_service_s.iter().enumerate() {
        let addr = IpAddr::V4(Ipv4Addr::new(192, 168, 1, 10 + i as u8));
        table
            .add_server(i as u32, addr, 3128, 1)
            .map_err(|e| anyhow!("server table: {e}"))?;
        hosts.push(Host {
            queue: VecDeque::new(),
            busy: false,
            service_s: *s,
        });
    }
    let client = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    // Client ports: index into the ephemeral range; the rover moves one port per connection
    // and skips ports still in flight (Linux 2.4 tcp_v4_get_port / tcp_port_rover).
    let ports = if cfg.client_ports == 0 {
        u32::MAX
    } else {
        cfg.client_ports
    };
    let mut rover: u32 = ports - 1;
    // One slot per client port (none when ports are never reused).
    let mut conns: Vec<Option<ConnEntry>> = vec![None; cfg.client_ports as usize];
    let mut generation: u64 = 0;
    let mut reused = 0u64;
    let mut q: EventQueue<Ev> = EventQueue::new();
    for _ in 0..cfg.concurrency {
        q.schedule(0, Ev::Send);
    }
    let warmup = (cfg.requests as f64 * cfg.warmup_fraction) as u64;
    let (mut completed, mut unplaced) = (0u64, 0u64);
    let mut warm_at: Nanos = 0;
    let mut warmed = false;
    let warm_time = (cfg.max_time as f64 * cfg.warmup_fraction) as Nanos;
    let mut measured = 0u64;
    let mut resp_sum = 0.0;
    let mut per_host = vec![0u64; hosts.len()];
    let mut last: Nanos = 0;
    let service = |rng: &mut SplitMix64, mean: f64| -> Nanos {
        let s = mean * (1.0 - cfg.jitter_cv + cfg.jitter_cv * rng.exp(1.0));
        (s * SEC as f64) as Nanos
    };
    while let Some((now, ev)) = q.pop() {
        if now > cfg.max_time || completed >= cfg.requests {
            break;
        }
        last = now;
        match ev {
            Ev::Send => {
                let port = loop {
                    rover = (rover + 1) % ports;
                    if !conns
                        .get(rover as usize)
                        .is_some_and(|c| c.is_some_and(|c| c.active))
                    {
                        break rover;
                    }
                };
                let dst = origin_addr(rng.below(cfg.origins as u64) as usize);
                generation += 1;
                // IPVS looks the connection up before it schedules (ip_vs_in →
                // conn_in_get, net/netfilter/ipvs/ip_vs_core.c): a SYN whose 4-tuple still
                // has an entry in TIME_WAIT reuses it and goes to the same real server. Only
                // Linux 4.2's `conn_reuse_mode` made IPVS reschedule such connections.
                let h = if let Some(Some(c)) = conns.get_mut(port as usize) {
                    c.active = true;
                    c.generation = generation;
                    reused += 1;
                    table
                        .on_inactive_close(ServerId(c.host as u32))
                        .map_err(|e| anyhow!(e))?;
                    c.host
                } else {
                    let wire_port = 1024 + (port % (u16::MAX as u32 - 1024)) as u16;
                    let key = FlowKey::new(client, wire_port, dst, 80);
                    let Some(ServerId(id)) = balancer.pick(&table, &key, now) else {
                        unplaced += 1;
                        // Retry after 1 ms, as a client would after a refused connection.
                        q.schedule_in(SEC / 1000, Ev::Send);
                        continue;
                    };
                    if let Some(slot) = conns.get_mut(port as usize) {
                        *slot = Some(ConnEntry {
                            host: id as usize,
                            active: true,
                            generation,
                        });
                    }
                    id as usize
                };
                table.on_open(ServerId(h as u32)).map_err(|e| anyhow!(e))?;
                hosts[h].queue.push_back(Req { sent: now, port });
                if !hosts[h].busy {
                    hosts[h].busy = true;
                    let d = service(&mut rng, hosts[h].service_s);
                    q.schedule_in(d, Ev::Done { host: h });
                }
            }
            Ev::Done { host } => {
                let req = hosts[host]
                    .queue
                    .pop_front()
                    .context("done with empty queue")?;
                completed += 1;
                per_host[host] += 1;
                // Warm-up ends after `warmup` completions or a `warmup_fraction` of the time
                // limit, whichever comes first (slow clusters may never reach the count).
                if !warmed && (completed >= warmup || now >= warm_time) {
                    warmed = true;
                    warm_at = now;
                } else if warmed {
                    measured += 1;
                    resp_sum += (now - req.sent) as f64 / 1e6;
                }
                table
                    .on_inactive(ServerId(host as u32))
                    .map_err(|e| anyhow!(e))?;
                let generation = match conns.get_mut(req.port as usize) {
                    Some(Some(c)) => {
                        c.active = false;
                        c.generation
                    }
                    _ => 0,
                };
                q.schedule_in(
                    cfg.inactive_timeout,
                    Ev::Forget {
                        host,
                        port: req.port,
                        generation,
                    },
                );
                if hosts[host].queue.is_empty() {
                    hosts[host].busy = false;
                } else {
                    let d = service(&mut rng, hosts[host].service_s);
                    q.schedule_in(d, Ev::Done { host });
                }
                q.schedule(now, Ev::Send);
            }
            Ev::Forget {
                host,
                port,
                generation,
            } => {
                if cfg.client_ports > 0 {
                    // A reused entry was re-armed: this expiry is stale.
                    match conns.get_mut(port as usize) {
                        Some(slot @ Some(_))
                            if slot.is_some_and(|c| c.generation == generation && !c.active) =>
                        {
                            *slot = None;
                        }
                        _ => continue,
                    }
                }
                table
                    .on_inactive_close(ServerId(host as u32))
                    .map_err(|e| anyhow!(e))?;
            }
        }
    }
    let span = (last.saturating_sub(warm_at)) as f64 / SEC as f64;
    let req_per_s = if measured > 0 && span > 0.0 {
        measured as f64 / span
    } else {
        0.0
    };
    Ok(ClusterResult {
        req_per_s,
        completed,
        mean_response_ms: if measured > 0 {
            resp_sum / measured as f64
        } else {
            f64::NAN
        },
        per_host,
        unplaced,
        reused,
    })
}

struct Setup {
    hosts: Vec<usize>,
    algorithms: Vec<String>,
    extras: Vec<String>,
    sizes: Vec<String>,
    rates: Vec<f64>,
    base: ClusterConfig,
    origins_per_host: usize,
    /// If > 0: this many origins whatever the cluster size.
    origins_fixed: usize,
}

fn setup(p: &Value) -> anyhow::Result<Setup> {
    let sizes = params::str_list(p, "service.sizes")?;
    let rates = params::f64_list(p, "service.rate_1host")?;
    if sizes.len() != rates.len() {
        anyhow::bail!(
            "service.sizes has {} entries but service.rate_1host has {}",
            sizes.len(),
            rates.len()
        );
    }
    if let Some(r) = rates.iter().find(|r| **r <= 0.0) {
        anyhow::bail!("service.rate_1host: {r} is not > 0");
    }
    let cv = params::f64_at(p, "service.jitter_cv")?;
    if !(0.0..=1.0).contains(&cv) {
        anyhow::bail!("service.jitter_cv must be within 0..1, got {cv}");
    }
    let wf = params::f64_at(p, "client.warmup_fraction")?;
    if !(0.0..0.9).contains(&wf) {
        anyhow::bail!("client.warmup_fraction must be within 0..0.9, got {wf}");
    }
    Ok(Setup {
        hosts: params::count_list(p, "cluster.hosts")?,
        algorithms: params::str_list(p, "cluster.algorithms")?,
        extras: params::str_list_or_empty(p, "cluster.extra_algorithms")?,
        sizes,
        rates,
        origins_per_host: params::count_at(p, "client.origins_per_host")?,
        origins_fixed: params::u64_at(p, "client.origins")? as usize,
        base: ClusterConfig {
            algorithm: String::new(),
            host_service_s: Vec::new(),
            jitter_cv: cv,
            concurrency: params::count_at(p, "client.concurrency")?,
            origins: 1,
            requests: params::count_at(p, "client.requests")? as u64,
            max_time: (params::positive_f64(p, "client.max_time_s")? * SEC as f64) as Nanos,
            warmup_fraction: wf,
            inactive_timeout: (params::f64_at(p, "ipvs.inactive_timeout_s")?.max(0.0) * SEC as f64)
                as Nanos,
            client_ports: params::u64_at(p, "client.ports")?
                .try_into()
                .map_err(|_| anyhow!("client.ports must be below 2^32"))?,
        },
    })
}

fn fmt_rate(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}

/// Run the experiment.
pub fn run(params: &Value, seed: u64, out: &Path) -> anyhow::Result<ExperimentOutput> {
    let s = setup(params)?;
    let mut results = Results::new("lvs-cluster", "sim", seed, params.clone());
    let mut comparisons = Vec::new();
    let all_algs: Vec<String> = s
        .algorithms
        .iter()
        .chain(s.extras.iter())
        .cloned()
        .collect();
    // measured[(case, size, alg, hosts)] = req/s
    let mut measured: BTreeMap<(String, String, String, usize), f64> = BTreeMap::new();
    let mut run_seed = SplitMix64::new(seed);
    let cases: Vec<(String, Option<usize>)> = s
        .sizes
        .iter()
        .enumerate()
        .map(|(i, sz)| (sz.clone(), Some(i)))
        .chain(std::iter::once(("per-host".to_string(), None)))
        .collect();
    for (case_name, size_idx) in &cases {
        for &n in &s.hosts {
            for alg in &all_algs {
                let service: Vec<f64> = (0..n)
                    .map(|k| 1.0 / s.rates[size_idx.unwrap_or(k % s.rates.len())])
                    .collect();
                let cfg = ClusterConfig {
                    algorithm: alg.clone(),
                    host_service_s: service,
                    origins: if s.origins_fixed > 0 {
                        s.origins_fixed
                    } else {
                        s.origins_per_host * n
                    },
                    ..s.base.clone()
                };
                let r = simulate(&cfg, run_seed.next_u64())?;
                let case = if size_idx.is_some() {
                    "same"
                } else {
                    "per-host"
                };
                measured.insert(
                    (case.into(), case_name.clone(), alg.clone(), n),
                    r.req_per_s,
                );
                results.runs.push(Run {
                    config: json!({"case": case, "size": case_name, "algorithm": alg, "hosts": n}),
                    metrics: json!({
                        "req_per_s": r.req_per_s,
                        "mean_response_ms": r.mean_response_ms,
                        "completed": r.completed,
                        "unplaced": r.unplaced,
                        "reused_connections": r.reused,
                        "per_host_requests": r.per_host,
                    }),
                });
            }
        }
    }
    let get = |case: &str, size: &str, alg: &str, n: usize| -> f64 {
        measured
            .get(&(case.to_string(), size.to_string(), alg.to_string(), n))
            .copied()
            .unwrap_or(f64::NAN)
    };
    // Paper | this run, every cell of Tables 3 and 4 that we ran.
    for size in &s.sizes {
        for alg in &s.algorithms {
            for &n in &s.hosts {
                comparisons.push(Comparison {
                    quantity: format!("same object {size}, {alg}, {n} host(s) (req/s)"),
                    paper: paper_same(size, alg, n)
                        .map(fmt_rate)
                        .unwrap_or_else(|| "—".into()),
                    ours: fmt_rate(get("same", size, alg, n)),
                });
            }
        }
    }
    for alg in &s.algorithms {
        for &n in &s.hosts {
            comparisons.push(Comparison {
                quantity: format!("per-host sizes, {alg}, {n} host(s) (req/s)"),
                paper: paper_per_host(alg, n)
                    .map(fmt_rate)
                    .unwrap_or_else(|| "—".into()),
                ours: fmt_rate(get("per-host", "per-host", alg, n)),
            });
        }
    }
    // Figures: one grouped bar chart per case, like P4 Tables 3/4.
    let mut figures = Vec::new();
    let cats: Vec<String> = s.hosts.iter().map(|n| format!("{n} host(s)")).collect();
    for (case_name, size_idx) in &cases {
        let case = if size_idx.is_some() {
            "same"
        } else {
            "per-host"
        };
        let series: Vec<(String, Vec<f64>)> = all_algs
            .iter()
            .map(|a| {
                (
                    a.clone(),
                    s.hosts
                        .iter()
                        .map(|&n| get(case, case_name, a, n))
                        .collect(),
                )
            })
            .collect();
        let file = format!("rate-{case_name}.svg");
        let title = if size_idx.is_some() {
            format!("Same object ({case_name}) for every request")
        } else {
            "Different object size per host (300B, 1K, 10K, 100K, mixed, …)".to_string()
        };
        svg::bar_chart(&title, "requests/s", &cats, &series, &out.join(&file))?;
        figures.push(Figure { title, file });
    }
    // CSV of every measured cell.
    let rows: Vec<Vec<String>> = measured
        .iter()
        .map(|((c, sz, a, n), v)| {
            vec![
                c.clone(),
                sz.clone(),
                a.clone(),
                n.to_string(),
                format!("{v}"),
            ]
        })
        .collect();
    netsched_report::csv::write_table(
        &out.join("rates.csv"),
        &["case", "size", "algorithm", "hosts", "req_per_s"],
        &rows,
    )?;

    // Checks.
    let mut checks = Vec::new();
    let big = *s.hosts.iter().max().unwrap_or(&1);
    let have = |a: &str| s.algorithms.iter().chain(s.extras.iter()).any(|x| x == a);
    if have("rr") && have("lc") && have("lblc") && have("dh") && big > 1 {
        let mut ok_rr_lc = true;
        let mut ok_lblc = true;
        let mut detail = Vec::new();
        for size in &s.sizes {
            let (rr, lc, lblc, dh) = (
                get("same", size, "rr", big),
                get("same", size, "lc", big),
                get("same", size, "lblc", big),
                get("same", size, "dh", big),
            );
            // "At least as good": within 2% (seed noise of a closed loop).
            ok_rr_lc &= rr >= lc * 0.98;
            ok_lblc &= lblc <= rr.min(lc).min(dh);
            detail.push(format!(
                "{size}: rr {} lc {} lblc {} dh {}",
                fmt_rate(rr),
                fmt_rate(lc),
                fmt_rate(lblc),
                fmt_rate(dh)
            ));
        }
        checks.push(Check {
            claim: format!("Same object: RR at least as good as LC (within 2%) at {big} hosts, every size (P4 Table 3)"),
            passed: ok_rr_lc,
            detail: detail.join("; "),
        });
        checks.push(Check {
            claim: format!("Same object: LBLC is the worst of rr/lc/lblc/dh at {big} hosts, every size (P4 Table 3)"),
            passed: ok_lblc,
            detail: detail.join("; "),
        });
        let (rr, lc, dh) = (
            get("per-host", "per-host", "rr", big),
            get("per-host", "per-host", "lc", big),
            get("per-host", "per-host", "dh", big),
        );
        checks.push(Check {
            claim: format!("Per-host sizes: LC far ahead (≥ 3×) of RR and DH at {big} hosts (P4 Table 4: 409 vs 41.5 and 37.7)"),
            passed: lc >= 3.0 * rr && lc >= 3.0 * dh,
            detail: format!("lc {} rr {} dh {}", fmt_rate(lc), fmt_rate(rr), fmt_rate(dh)),
        });
        let dh1 = get("same", &s.sizes[0], "dh", 1);
        let dhb = get("same", &s.sizes[0], "dh", big);
        checks.push(Check {
            claim: format!(
                "DH scales with hosts when requests name several origins ({} origin(s) per host)",
                s.origins_per_host
            ),
            passed: dhb >= 0.5 * big as f64 * dh1,
            detail: format!(
                "dh {}: {} req/s at 1 host, {} at {big}",
                s.sizes[0],
                fmt_rate(dh1),
                fmt_rate(dhb)
            ),
        });
    }
    let notes = vec![
        "**Service model.** Each host is one FCFS server whose mean service time is calibrated from P4 Table 3's one-host RR column (300 B: 1/318 s, 1 K: 1/231 s, 10 K: 1/36 s, 100 K: 1/2.30 s, mixed: 1/65 s); a service time is `mean × (1 − cv + cv·Exp(1))`. The one-host cells therefore match by construction; every other cell is a prediction of the model. The director's CPU is not modelled (see below); the differences the model reproduces come from *where* requests go.".to_string(),
        "**What the destinations were.** IPVS `dh`, `lblc` and `lblcr` hash the connection's *destination* address (`ip_vs_dh.c`, `ip_vs_lblc.c`). Behind a single virtual address every request would hash to the same host and DH would stay at the one-host rate whatever the cluster size — yet P4's DH scales almost like RR (305 → 3479 req/s). P4 Table 2 says the origin web server sits on each cache host itself (\"웹 서버: Cache 서버 자체에 둠\"), and these algorithms are LVS's transparent-proxy-cache schedulers, where the director intercepts requests addressed to the origin servers. We therefore model requests that name one of `origins_per_host × N` origin addresses (image URLs on many origin servers — P4 keeps an origin web server on each cache host), chosen uniformly per request; dh maps them through its 256-bucket table, lblc keeps each origin on its cache until that cache is overloaded. With 1 origin per host some hosts get two origins and some none (DH ≈ 0.2–0.3 of RR); with the default 10 per host DH lands at 0.7–0.8 of RR, P4's ratio (3479/4322 at 300 B, 15 hosts); with `client.origins = 1` (one virtual address) DH stays at the one-host rate.".to_string(),
        format!("**Client ports and IPVS connection reuse (why RR beats LC).** IPVS looks a packet's connection up *before* it schedules (`ip_vs_in` → `conn_in_get`, net/netfilter/ipvs/ip_vs_core.c), and a finished connection stays in its table in TIME_WAIT for 2 min (ip_vs_proto_tcp.c). ab's kernel hands out ephemeral ports in order (Linux 2.4 `tcp_port_rover`) from `ip_local_port_range` — 32768–61000 (28232 ports) above 128 MB of memory, 1024–4999 (3976) below (ip-sysctl.txt, `tcp_init`); P4's client has exactly 128 MB, so we chose between them with Table 4 (lc at 15 hosts: ~1500 req/s with 3976 ports, ~360 with 28232, paper 409), not with the Table 3 order checked here, which is the same with both. Once the client has used every port within 2 min (rate × 120 s > ports: every size but 100 KB at 15 hosts), a new connection finds its port's TIME_WAIT entry and goes to that entry's host *without* asking the scheduler (only Linux 4.2's `conn_reuse_mode` changed this). The port → host map the scheduler built during the first pass is then replayed for the rest of the run: rr's is a perfect cycle over the hosts, lc's follows the load it happened to see during the first pass, so replaying it sends runs of requests to the same hosts and lc loses 5–6% (`reused_connections` per run counts this; here client.ports = {}). With `client.ports = 0` (never reuse) lc beats rr as join-the-least-connected must; with 3976 ports, with seeds 2 and 3, and with concurrency 15 or 60 the order is the same (lc 2–9% below rr at 300 B–10 K and mixed). At 100 KB (≈ 32 req/s × 120 s = 3900 connections, fewer than either range has ports) no port is reused and lc stays ahead of rr by ~4%: the paper's gap there (35.99 vs 34.29, 4.7%) is no larger than its own spread between algorithms at *one* host (2.3–8%), where no scheduling choice exists — so the \"every size\" check fails at 100 KB.", s.base.client_ports),
        "**LBLC is not the worst here.** P4's DH reaches 0.80 of RR at 15 hosts (300 B), which with IPVS dh requires many destinations (with 1 or 3 origins per host dh falls to 0.18 or 0.53 of RR in this model). With that many destinations, IPVS lblc at weight 1 moves a destination whenever its host has > 1 active connection and another host has none (`is_overloaded`, ip_vs_lblc.c): it behaves almost like lc (0.91 of RR against lc's 0.94) and stays above dh (0.79), whereas P4 has lblc at 0.57. Concentrating lblc enough to be worst needs few destinations, which would stop dh scaling; we found no mechanism of the setup that gives both, so the LBLC check fails — stated, not tuned.".to_string(),
        "**What is not modelled, and why.** The director's CPU: P4 §3.1 chose a faster client and director (P-IV 2.4 GHz) precisely so they would not be the bottleneck, and a scheduling decision (rr O(1), lc a 15-entry scan, dh/lblc a hash lookup) costs well under a microsecond against ~230 µs per connection at 4322 req/s; it cannot produce 5–45% gaps, so P4's explanation by \"hash computation time\" is not reproduced. Squid warm-up: with the same object per request each host misses once (15 misses in ~10^5 requests); with 10 origins per host rr misses 150 × 15 times, still < 3% of a run, and it would favour lblc/dh, not rr.".to_string(),
        "**Per-host sizes (Table 4).** Host k serves only size k mod 5. The paper's one-host cell (12.43 req/s) cannot be host 1 serving only 300 B (Table 3 says 318 req/s for that); it is close to a host serving all five sizes in turn (harmonic mean ≈ 10 req/s). Our one-host cell is host 1 = 300 B, so it does not match; the larger clusters follow the paper's reading: RR and DH are held back by the 100 KB hosts where requests pile up, LC keeps sending to the hosts that finish fast. **Why LC saturates (Table 4: 246 → 369 → 409).** IPVS lc ranks hosts by `activeconns × 256 + inactconns` (`ip_vs_lc.c`), and a finished HTTP/1.0 connection stays inactive at the director for the TIME_WAIT timeout (2 min). A fast host that served λ requests/s carries ≈ 120·λ inactive connections, so lc sends it new work only while 256·Δactive exceeds that gap: with 30 connections in flight a fast host cannot get much more than ~60 requests/s above the slow ones. This is why the runs last 300 s and are measured over their second half: LC then grows sublinearly like P4's (a short run without this history would make LC pick the fast hosts freely and overshoot P4 several times). Port reuse (above) replays the map lc built during the client's first pass over its 28232 ports, when those inactive counts were already building up: lc measures 181 / 274 / 407 req/s at 5 / 10 / 15 hosts against P4's 246 / 369 / 409 (with 3976 ports the first pass is too short for the counts to build up and lc reaches ~1500 at 15 hosts).".to_string(),
        format!("**Client.** ab-like closed loop with concurrency {} (not printed in P4; chosen as 2 × the largest cluster so that RR keeps every host busy, as its near-linear scaling implies). `sh` hashes the source address: with one client every request goes to one host — why P4 excluded it.", s.base.concurrency),
    ];
    Ok(ExperimentOutput {
        results,
        comparisons,
        checks,
        figures,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(alg: &str, service: Vec<f64>) -> ClusterConfig {
        ClusterConfig {
            algorithm: alg.into(),
            host_service_s: service,
            jitter_cv: 0.5,
            concurrency: 8,
            origins: 4,
            requests: 3000,
            max_time: 100 * SEC,
            warmup_fraction: 0.1,
            inactive_timeout: 120 * SEC,
            client_ports: 0,
        }
    }

    #[test]
    fn one_host_rate_matches_its_calibration() {
        let r = simulate(&cfg("rr", vec![1.0 / 318.0]), 1).unwrap();
        assert!(
            (r.req_per_s - 318.0).abs() < 318.0 * 0.05,
            "{}",
            r.req_per_s
        );
        assert_eq!(r.unplaced, 0);
    }

    #[test]
    fn rr_spreads_evenly_over_identical_hosts() {
        let r = simulate(&cfg("rr", vec![0.01; 4]), 2).unwrap();
        let (lo, hi) = (
            r.per_host.iter().min().unwrap(),
            r.per_host.iter().max().unwrap(),
        );
        // Assignments alternate exactly; completions differ by what is still queued.
        assert!(hi - lo <= 8, "{:?}", r.per_host);
        assert!(r.req_per_s > 3.0 * 100.0, "{}", r.req_per_s);
    }

    #[test]
    fn a_reused_port_goes_to_its_previous_host_without_scheduling() {
        // 20 ports, 4 hosts, 3000 requests: after the first pass almost every connection
        // finds its port's TIME_WAIT entry (120 s ≫ the run) and follows it.
        let mut c = cfg("rr", vec![0.01; 4]);
        c.client_ports = 20;
        let r = simulate(&c, 3).unwrap();
        assert!(
            r.reused + 20 >= r.completed,
            "{} of {}",
            r.reused,
            r.completed
        );
        // Fresh ports: never reused.
        c.client_ports = 0;
        assert_eq!(simulate(&c, 3).unwrap().reused, 0);
    }

    #[test]
    fn too_few_ports_is_a_clear_error() {
        let mut c = cfg("rr", vec![0.01; 4]);
        c.client_ports = 8; // concurrency 8: no free port would remain
        let e = simulate(&c, 1).unwrap_err().to_string();
        assert!(e.contains("client.ports"), "{e}");
    }

    #[test]
    fn unknown_algorithm_is_a_clear_error() {
        let e = simulate(&cfg("nope", vec![0.01]), 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("nope"), "{e}");
    }
}

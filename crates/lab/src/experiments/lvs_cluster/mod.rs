//! The `lvs-cluster` experiment (P4 in `docs/papers.md`): an LVS-NAT director
//! in front of 1, 5, 10, 15 proxy hosts, one ApacheBench-like closed-loop client, IPVS
//! balancers from `netsched_core::balance`.
//!
//! - `mod.rs` (here): the typed scenario ([`Params`], with bounds), and [`run`]: the grid of P4
//!   Tables 3 and 4 plus the sensitivity variants;
//! - `model.rs`: what is simulated ([`simulate`] one configuration);
//! - `report.rs`: P4's numbers, comparisons, checks, charts, the sensitivity table and the
//!   notes — every number in the prose comes from the runs or from P4's tables.

mod model;
mod report;

pub use model::{
    ecmp_director, simulate, ClientModel, ClusterConfig, ClusterResult, MAX_DIRECTORS,
};

use anyhow::{anyhow, bail};
use netsched_core::units;
use netsched_core::{Nanos, MS, SEC};
use netsched_report::ExperimentOutput;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// Bounds of the scenario (every count and size has one; a run's memory follows the
/// requests × hosts × algorithms it simulates and the TIME_WAIT entries, rate × timeout).
pub mod bounds {
    /// Hosts of one cluster (host addresses are 192.168.1.10 + k, counting on past .255).
    /// Measured cost (docs/bench-lab-scale.md: the default scenario with `cluster.hosts=[N]`
    /// and `client.concurrency = 2N`, no sensitivity table, i.e. 9 algorithms × 6 cases of
    /// 150,000 requests): about 10 ms of CPU and 4 KiB of memory per host over a fixed ~1 s
    /// and 38 MiB, growing linearly (lc, wlc, sed, lblc and lblcr scan every host per pick, as
    /// IPVS does); 1,000 hosts: 10.0 s of CPU, 42 MiB peak RSS. The bound, 10,000 hosts, is
    /// about 100 s of CPU and 80 MiB.
    pub const MAX_HOSTS: usize = 10_000;
    /// Entries of `cluster.hosts`, `cluster.algorithms` + `extra_algorithms`, `service.sizes`.
    pub const MAX_LIST: usize = 16;
    /// Requests one ab closed loop keeps outstanding (`client.concurrency`).
    pub const MAX_CONCURRENCY: usize = 10_000;
    /// `client.per_origin_concurrency`.
    pub const MAX_PER_ORIGIN_CONCURRENCY: usize = 64;
    /// Distinct origin addresses of one run (they are 10.1.x.y).
    pub const MAX_ORIGINS: usize = 60_000;
    /// Client ephemeral ports (`ip_local_port_range` cannot exceed 1024..65535).
    pub const MAX_PORTS: u32 = 64_512;
    /// Completed requests per simulated configuration (`client.requests`).
    pub const MAX_REQUESTS: u64 = 2_000_000;
    /// One host's calibrated rate, requests/s.
    pub const MAX_RATE: f64 = 1e6;
}

/// `[cluster]` of `scenarios/lvs-cluster.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterParams {
    pub hosts: Vec<usize>,
    pub algorithms: Vec<String>,
    #[serde(default)]
    pub extra_algorithms: Vec<String>,
    /// Directors behind the router's ECMP (1 = P4's cluster; `--directors N`).
    #[serde(default = "one")]
    pub directors: usize,
    /// A director's time per connection (a duration; `"0"` = no cost, the default).
    #[serde(default = "zero")]
    pub director_service: String,
}

fn one() -> usize {
    1
}

fn zero() -> String {
    "0".into()
}

/// `[service]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceParams {
    pub sizes: Vec<String>,
    pub rate_1host: Vec<f64>,
    pub jitter_cv: f64,
}

/// `[client]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientParams {
    pub model: ClientModel,
    pub per_origin_concurrency: usize,
    pub concurrency: usize,
    pub origins_per_host: usize,
    pub origins: usize,
    pub ports: u32,
    pub requests: u64,
    /// Duration (`"300s"`).
    pub max_time: String,
    pub warmup_fraction: f64,
}

/// `[ipvs]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IpvsParams {
    /// Duration (`"120s"`).
    pub inactive_timeout: String,
    pub lblc_active_weight: u32,
    /// Duration (`"0"` = off, `"400us"`).
    pub handshake: String,
}

/// `[sensitivity]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SensitivityParams {
    pub enabled: bool,
    /// The object size (one of `service.sizes`) the variants run at.
    pub size: String,
}

/// The whole scenario, typed.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    pub cluster: ClusterParams,
    pub service: ServiceParams,
    pub client: ClientParams,
    pub ipvs: IpvsParams,
    pub sensitivity: SensitivityParams,
}

fn duration(key: &str, text: &str, min: Nanos, max: Nanos) -> anyhow::Result<Nanos> {
    units::parse_duration_in(text, min, max).map_err(|e| anyhow!("{key}: {e}"))
}

fn check_list(key: &str, len: usize) -> anyhow::Result<()> {
    if len == 0 || len > bounds::MAX_LIST {
        bail!("{key}: {len} entries; must be 1..={}", bounds::MAX_LIST);
    }
    Ok(())
}

fn check_count(key: &str, v: usize, max: usize) -> anyhow::Result<()> {
    if v == 0 || v > max {
        bail!("{key} = {v} is outside 1..={max}");
    }
    Ok(())
}

/// The validated scenario: what [`run`] simulates.
#[derive(Debug, Clone)]
pub struct Setup {
    pub hosts: Vec<usize>,
    pub algorithms: Vec<String>,
    pub extras: Vec<String>,
    pub sizes: Vec<String>,
    /// One host's requests/s per size (P4 Table 3, one-host column).
    pub rates: Vec<f64>,
    /// Everything but algorithm, hosts and origins.
    pub base: ClusterConfig,
    pub origins_per_host: usize,
    /// If > 0: this many origins whatever the cluster size.
    pub origins_fixed: usize,
    /// Index into `sizes` of the sensitivity variants, if enabled.
    pub sensitivity_size: Option<usize>,
}

impl Setup {
    /// The scenario `params` (JSON of the TOML), typed and checked against [`bounds`].
    pub fn from_params(params: &Value) -> anyhow::Result<Setup> {
        let p: Params = crate::scenario::typed(params, "lvs-cluster")?;
        Self::from_typed(&p)
    }

    fn from_typed(p: &Params) -> anyhow::Result<Setup> {
        use bounds::*;
        check_list("cluster.hosts", p.cluster.hosts.len())?;
        for &n in &p.cluster.hosts {
            check_count("cluster.hosts", n, MAX_HOSTS)?;
        }
        check_list(
            "cluster.algorithms + extra_algorithms",
            p.cluster.algorithms.len() + p.cluster.extra_algorithms.len(),
        )?;
        check_list("service.sizes", p.service.sizes.len())?;
        if p.service.sizes.len() != p.service.rate_1host.len() {
            bail!(
                "service.sizes has {} entries but service.rate_1host has {}",
                p.service.sizes.len(),
                p.service.rate_1host.len()
            );
        }
        if let Some(r) = p
            .service
            .rate_1host
            .iter()
            .find(|r| !(**r > 0.0 && **r <= MAX_RATE))
        {
            bail!("service.rate_1host: {r} is outside (0, {MAX_RATE}] requests/s");
        }
        let cv = p.service.jitter_cv;
        if !(0.0..=1.0).contains(&cv) {
            bail!("service.jitter_cv = {cv} is outside 0..=1");
        }
        let c = &p.client;
        check_count("client.concurrency", c.concurrency, MAX_CONCURRENCY)?;
        check_count(
            "client.per_origin_concurrency",
            c.per_origin_concurrency,
            MAX_PER_ORIGIN_CONCURRENCY,
        )?;
        let max_hosts = p.cluster.hosts.iter().copied().max().unwrap_or(1);
        check_count(
            "client.origins_per_host",
            c.origins_per_host,
            MAX_ORIGINS / max_hosts,
        )?;
        if c.origins > MAX_ORIGINS {
            bail!(
                "client.origins = {} is outside 0..={MAX_ORIGINS}",
                c.origins
            );
        }
        if c.ports > MAX_PORTS {
            bail!("client.ports = {} is outside 0..={MAX_PORTS}", c.ports);
        }
        if c.requests == 0 || c.requests > MAX_REQUESTS {
            bail!(
                "client.requests = {} is outside 1..={MAX_REQUESTS}",
                c.requests
            );
        }
        if !(0.0..0.9).contains(&c.warmup_fraction) {
            bail!(
                "client.warmup_fraction = {} is outside 0..0.9",
                c.warmup_fraction
            );
        }
        let max_time = duration("client.max_time", &c.max_time, MS, 3600 * SEC)?;
        let inactive_timeout = duration(
            "ipvs.inactive_timeout",
            &p.ipvs.inactive_timeout,
            0,
            3600 * SEC,
        )?;
        let handshake = duration("ipvs.handshake", &p.ipvs.handshake, 0, SEC)?;
        check_count("cluster.directors", p.cluster.directors, MAX_DIRECTORS)?;
        let director_service = duration(
            "cluster.director_service",
            &p.cluster.director_service,
            0,
            SEC,
        )?;
        if p.ipvs.lblc_active_weight == 0 {
            bail!("ipvs.lblc_active_weight = 0 is outside 1..=2^32-1");
        }
        let sensitivity_size = if p.sensitivity.enabled {
            Some(
                p.service
                    .sizes
                    .iter()
                    .position(|s| *s == p.sensitivity.size)
                    .ok_or_else(|| {
                        anyhow!(
                            "sensitivity.size = {:?} is not one of service.sizes {:?}",
                            p.sensitivity.size,
                            p.service.sizes
                        )
                    })?,
            )
        } else {
            None
        };
        Ok(Setup {
            hosts: p.cluster.hosts.clone(),
            algorithms: p.cluster.algorithms.clone(),
            extras: p.cluster.extra_algorithms.clone(),
            sizes: p.service.sizes.clone(),
            rates: p.service.rate_1host.clone(),
            origins_per_host: c.origins_per_host,
            origins_fixed: c.origins,
            sensitivity_size,
            base: ClusterConfig {
                algorithm: String::new(),
                host_service_s: Vec::new(),
                jitter_cv: cv,
                concurrency: c.concurrency,
                model: c.model,
                origins: 1,
                per_origin_concurrency: c.per_origin_concurrency,
                requests: c.requests,
                max_time,
                warmup_fraction: c.warmup_fraction,
                inactive_timeout,
                handshake,
                lblc_active_weight: p.ipvs.lblc_active_weight,
                client_ports: c.ports,
                directors: p.cluster.directors,
                director_service,
            },
        })
    }

    /// The algorithms run: P4's, then the extras.
    pub fn all_algorithms(&self) -> Vec<String> {
        self.algorithms
            .iter()
            .chain(self.extras.iter())
            .cloned()
            .collect()
    }

    /// Origin addresses the requests name at `n` hosts.
    pub fn origins_at(&self, n: usize) -> usize {
        if self.origins_fixed > 0 {
            self.origins_fixed
        } else {
            self.origins_per_host * n
        }
    }

    /// The largest cluster.
    pub fn big(&self) -> usize {
        self.hosts.iter().copied().max().unwrap_or(1)
    }
}

/// Which object sizes the hosts serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Case {
    /// Every request for the same size (index into `Setup::sizes`), P4 Table 3.
    Same(usize),
    /// Host k serves only size k mod sizes, P4 Table 4.
    PerHost,
}

/// The mean service time of each of `n` hosts in `case`.
pub fn service_times(rates: &[f64], case: Case, n: usize) -> Vec<f64> {
    (0..n)
        .map(|k| match case {
            Case::Same(i) => 1.0 / rates[i],
            Case::PerHost => 1.0 / rates[k % rates.len()],
        })
        .collect()
}

/// One simulated cell: case, algorithm, hosts.
pub type CellKey = (Case, String, usize);

/// Every cell of one set of runs.
#[derive(Debug, Default)]
pub struct Grid {
    pub cells: BTreeMap<CellKey, ClusterResult>,
}

impl Grid {
    /// Requests/s of a cell (NaN if it was not run).
    pub fn rate(&self, case: Case, alg: &str, n: usize) -> f64 {
        self.get(case, alg, n)
            .map(|r| r.req_per_s)
            .unwrap_or(f64::NAN)
    }
    pub fn get(&self, case: Case, alg: &str, n: usize) -> Option<&ClusterResult> {
        self.cells.get(&(case, alg.to_string(), n))
    }
}

/// Simulate `alg` at `n` hosts in `case` with `cfg` (a variant of the scenario).
fn cell(
    s: &Setup,
    cfg: &ClusterConfig,
    origins: usize,
    case: Case,
    alg: &str,
    n: usize,
    seed: u64,
) -> anyhow::Result<ClusterResult> {
    simulate(
        &ClusterConfig {
            algorithm: alg.to_string(),
            host_service_s: service_times(&s.rates, case, n),
            origins,
            ..cfg.clone()
        },
        seed,
    )
}

/// P4's Tables 3 and 4: every case × host count × algorithm.
fn measure_grid(s: &Setup, seed: u64) -> anyhow::Result<Grid> {
    // Every cell's seed is drawn first, in grid order, so the cells can run in any order (in
    // parallel on the cores) and still give the same numbers.
    let mut seeds = netsched_core::rng::SplitMix64::new(seed);
    let cases = (0..s.sizes.len())
        .map(Case::Same)
        .chain(std::iter::once(Case::PerHost));
    let mut jobs = Vec::new();
    for case in cases {
        for &n in &s.hosts {
            for alg in s.all_algorithms() {
                jobs.push((case, alg, n, seeds.next_u64()));
            }
        }
    }
    let results = in_parallel(&jobs, |(case, alg, n, cell_seed)| {
        cell(s, &s.base, s.origins_at(*n), *case, alg, *n, *cell_seed)
    });
    let mut grid = Grid::default();
    for ((case, alg, n, _), r) in jobs.into_iter().zip(results) {
        grid.cells.insert((case, alg, n), r?);
    }
    Ok(grid)
}

/// `f` over `jobs` on the machine's cores (scoped threads pulling the next job from a shared
/// counter); results in job order. A 1,000-host grid spends its time in the O(hosts) picks
/// of lc/wlc/sed/lblc/lblcr, one cell at a time per core.
fn in_parallel<J: Sync, R: Send>(jobs: &[J], f: impl Fn(&J) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, jobs.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let out: Vec<std::sync::Mutex<Option<R>>> =
        jobs.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|sc| {
        for _ in 0..threads {
            sc.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(job) = jobs.get(i) else { break };
                let r = f(job);
                *out[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
            });
        }
    });
    out.into_iter()
        .map(|m| {
            m.into_inner()
                .unwrap_or_else(|p| p.into_inner())
                .expect("every job ran")
        })
        .collect()
}

/// One variant of the sensitivity table: what changed, and P4's four algorithms at one size
/// (and at one host, for DH's scaling) and in the per-host case.
#[derive(Debug)]
pub struct Variant {
    pub label: String,
    /// Why this variant is outside P4's regime, if it is.
    pub regime: Option<String>,
    pub hosts: usize,
    /// Index into `Setup::sizes`.
    pub size: usize,
    pub grid: Grid,
}

/// A variant to run: label, regime note, configuration, fixed origin count, hosts.
type VariantSpec = (String, Option<String>, ClusterConfig, Option<usize>, usize);

/// The sensitivity variants: the parameters P4 does not print (client concurrency, origins,
/// ports, handshake, lblc's weight, run length), and the cluster size, each varied alone at
/// the size `size` and the largest cluster.
fn measure_variants(s: &Setup, size: usize, seed: u64) -> anyhow::Result<Vec<Variant>> {
    let big = s.big();
    let b = &s.base;
    let with = |f: &dyn Fn(&mut ClusterConfig)| {
        let mut c = b.clone();
        f(&mut c);
        c
    };
    let origins = s.origins_at(big);
    // (label, regime note, config, origins at `big`, hosts)
    let mut specs: Vec<VariantSpec> = vec![("as configured".into(), None, b.clone(), None, big)];
    for &n in s.hosts.iter().filter(|n| **n > 1 && **n < big) {
        specs.push((format!("{n} hosts"), None, b.clone(), None, n));
    }
    for k in [0.5, 2.0, 4.0] {
        let conc = ((b.concurrency as f64 * k).round() as usize).max(1);
        specs.push((
            format!("ab concurrency {conc} (×{k})"),
            None,
            with(&|c| c.concurrency = conc),
            None,
            big,
        ));
    }
    for per_host in [1usize, 3] {
        if per_host != s.origins_per_host && s.origins_fixed == 0 {
            specs.push((
                format!("{per_host} origin(s) per host"),
                None,
                b.clone(),
                Some(per_host * big),
                big,
            ));
        }
    }
    specs.push((
        "one origin address".into(),
        Some(
            "outside P4's regime: dh hashes the destination, so DH cannot scale behind one address"
                .into(),
        ),
        b.clone(),
        Some(1),
        big,
    ));
    let other_model = match b.model {
        ClientModel::Uniform => ClientModel::PerOriginAb,
        ClientModel::PerOriginAb => ClientModel::Uniform,
    };
    specs.push((
        format!("client.model = {}, one origin per host", other_model.name()),
        None,
        with(&|c| c.model = other_model),
        Some(big),
        big,
    ));
    specs.push((
        "fresh client ports (no TIME_WAIT reuse)".into(),
        None,
        with(&|c| c.client_ports = 0),
        None,
        big,
    ));
    specs.push((
        "handshake 400us (SYN_RECV inactive)".into(),
        None,
        with(&|c| c.handshake = 400_000),
        None,
        big,
    ));
    let other_weight = if b.lblc_active_weight == 256 { 50 } else { 256 };
    specs.push((
        format!("lblc active weight {other_weight}"),
        None,
        with(&|c| c.lblc_active_weight = other_weight),
        None,
        big,
    ));
    for k in [0.5, 2.0] {
        specs.push((
            format!("run length ×{k} (requests and time limit)"),
            None,
            with(&|c| {
                c.requests = ((c.requests as f64 * k) as u64).max(1);
                c.max_time = (c.max_time as f64 * k) as Nanos;
            }),
            None,
            big,
        ));
    }
    let mut seeds = netsched_core::rng::SplitMix64::new(seed ^ 0x5e45_1717);
    let mut out = Vec::new();
    for (label, regime, cfg, fixed_origins, n) in specs {
        let mut grid = Grid::default();
        let origins_n =
            fixed_origins.unwrap_or_else(|| if n == big { origins } else { s.origins_at(n) });
        let origins_1 = fixed_origins
            .map(|o| o.min(origins_n))
            .unwrap_or(s.origins_at(1));
        for alg in report::PAPER_ALGORITHMS {
            let seed = seeds.next_u64();
            grid.cells.insert(
                (Case::Same(size), alg.to_string(), n),
                cell(s, &cfg, origins_n, Case::Same(size), alg, n, seed)?,
            );
            let seed = seeds.next_u64();
            grid.cells.insert(
                (Case::PerHost, alg.to_string(), n),
                cell(s, &cfg, origins_n, Case::PerHost, alg, n, seed)?,
            );
        }
        let seed = seeds.next_u64();
        grid.cells.insert(
            (Case::Same(size), "dh".to_string(), 1),
            cell(s, &cfg, origins_1, Case::Same(size), "dh", 1, seed)?,
        );
        out.push(Variant {
            label,
            regime,
            hosts: n,
            size,
            grid,
        });
    }
    Ok(out)
}

/// Run the experiment.
/// The scenario typed and checked, nothing run (`Experiment::check`).
pub fn check(params: &Value) -> anyhow::Result<()> {
    Setup::from_params(params).map(|_| ())
}

pub fn run(params: &Value, seed: u64, out: &Path) -> anyhow::Result<ExperimentOutput> {
    let s = Setup::from_params(params)?;
    let grid = measure_grid(&s, seed)?;
    let variants = match s.sensitivity_size {
        Some(size) => measure_variants(&s, size, seed)?,
        None => Vec::new(),
    };
    report::build(&s, &grid, &variants, seed, params, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario() -> Value {
        let text = crate::scenario::embedded("lvs-cluster").unwrap();
        let table = crate::scenario::parse(text, "lvs-cluster.toml").unwrap();
        crate::scenario::to_json(&table).unwrap()
    }

    #[test]
    fn the_embedded_scenario_is_valid() {
        let s = Setup::from_params(&scenario()).unwrap();
        assert_eq!(s.hosts, vec![1, 5, 10, 15]);
        assert_eq!(s.base.max_time, 300 * SEC);
    }

    #[test]
    fn unknown_keys_and_bad_values_name_the_key() {
        let mut p = scenario();
        p["client"]["concurency"] = 3.into();
        let e = Setup::from_params(&p).unwrap_err().to_string();
        assert!(e.contains("lvs-cluster") && e.contains("concurency"), "{e}");
        let mut p = scenario();
        p["client"]["model"] = "poisson".into();
        let e = Setup::from_params(&p).unwrap_err().to_string();
        assert!(e.contains("model") && e.contains("poisson"), "{e}");
        let mut p = scenario();
        p["client"]["max_time"] = "300".into();
        let e = Setup::from_params(&p).unwrap_err().to_string();
        assert!(e.contains("client.max_time") && e.contains("300"), "{e}");
    }

    #[test]
    fn counts_have_bounds() {
        for (section, key, v) in [
            ("cluster", "hosts", serde_json::json!([1, 10_001])),
            ("client", "concurrency", serde_json::json!(100_000_000u64)),
            ("client", "requests", serde_json::json!(100_000_000u64)),
            ("client", "origins_per_host", serde_json::json!(10_000)),
        ] {
            let mut p = scenario();
            p[section][key] = v;
            let e = Setup::from_params(&p).unwrap_err().to_string();
            assert!(e.contains(key) && e.contains("outside"), "{key}: {e}");
        }
    }
}

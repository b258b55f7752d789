//! percentile-web's model: the scenario (typed, bounded) and one simulated run of a scheduler.

use netsched_core::qdisc::percentile::{MaxHold, PercentileDeadline, PercentileMemory};
use netsched_core::qdisc::{prio::BandConfig, QdiscConfig};
use netsched_core::{Nanos, MS, SEC};
use netsched_sim::app::{ClientConfig, ClientMode, Dist, ServerConfig};
use netsched_sim::net::{LinkClassRule, Sim};
use serde::{Deserialize, Serialize};

/// The suffix of a run that holds every waiting request in the scheduler ([`Params::for_run`]).
pub const ALL_HELD: &str = "_all_held";

/// Bounds on the scenario's counts and sizes (each far above the thesis's setup: 5 classes ×
/// 4 threads × 15000 requests, one CPU), so a typo cannot exhaust memory.
pub const MAX_THREADS: u32 = 256;
pub const MAX_REQUESTS_PER_THREAD: u64 = 1_000_000;
/// Every response time of a run is kept (for percentiles): 8 bytes each.
pub const MAX_TOTAL_REQUESTS: u64 = 5_000_000;
pub const MAX_WORKERS: usize = 256;
pub const MAX_QUEUE: usize = 1_000_000;
pub const MAX_DURATION_S: f64 = 3600.0;
pub const MAX_BINS: usize = 100_000;
pub const MAX_MESSAGE_BYTES: u32 = 1 << 20;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Params {
    /// Upper bound on simulated time per run.
    pub max_duration_s: f64,
    /// Width of the per-second series (s).
    pub bin_s: f64,
    /// Seconds at the start left out of means (warm-up).
    pub warmup_s: f64,
    pub network: Network,
    pub server: Server,
    pub clients: Clients,
    pub percentile: Percentile,
    /// Per-class queue limit of the FIFO and strict-priority runs.
    pub queue_limit: usize,
    /// Run the sensitivity table (FIFO and Percentile at variants of the scenario).
    pub sensitivity: bool,
    /// Parameters of the real run only (`--real`; read by `netsched_nfq::experiment`,
    /// which checks them): the simulation ignores this table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub real: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Network {
    pub link_mbps: f64,
    pub link_delay_ms: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Server {
    pub workers: usize,
    pub listen_limit: usize,
    pub service: Dist,
    pub response_bytes: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Clients {
    /// Percentile target of each class, class 0 first (P0: 90, 80, 70, 60, 50).
    pub percentiles: Vec<u32>,
    pub threads: u32,
    pub requests_per_thread: u64,
    pub think: Dist,
    pub request_bytes: u32,
    /// `None`: the closed loop of P0 Fig. 15 (each thread sends, waits for the answer, thinks).
    /// `Some(ρ)`: an open loop instead, each class a Poisson stream of `threads ×
    /// requests_per_thread` requests at ρ × (the server's capacity ÷ the number of classes),
    /// capacity = workers ÷ mean service time (not P0's setting: a sensitivity knob).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_load: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Percentile {
    pub deadline: PercentileDeadline,
    /// An extra Percentile run with this fixed deadline (ms), to show the sensitivity to the
    /// success criterion; `None` skips it.
    pub extra_fixed_deadline_ms: Option<f64>,
    pub memory: PercentileMemory,
    pub queue_limit: usize,
    /// Every class's bound on waiting (core `MaxHold`: "off", "deadline" or a duration).
    pub max_hold: MaxHold,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            max_duration_s: 300.0,
            bin_s: 1.0,
            warmup_s: 1.0,
            network: Network {
                link_mbps: 100.0,
                link_delay_ms: 0.05,
            },
            server: Server::default(),
            clients: Clients::default(),
            percentile: Percentile::default(),
            queue_limit: 1000,
            sensitivity: true,
            real: None,
        }
    }
}
impl Default for Network {
    fn default() -> Self {
        Self {
            link_mbps: 100.0,
            link_delay_ms: 0.05,
        }
    }
}
impl Default for Server {
    fn default() -> Self {
        Self {
            workers: 1,
            listen_limit: 15,
            service: Dist::Exponential { mean_ms: 0.6 },
            response_bytes: 1500,
        }
    }
}
impl Default for Clients {
    fn default() -> Self {
        Self {
            percentiles: vec![90, 80, 70, 60, 50],
            threads: 4,
            requests_per_thread: 2000,
            think: Dist::Exponential { mean_ms: 0.0 },
            request_bytes: 300,
            open_load: None,
        }
    }
}
impl Default for Percentile {
    fn default() -> Self {
        Self {
            deadline: PercentileDeadline::Auto,
            extra_fixed_deadline_ms: Some(4.0),
            memory: PercentileMemory::Forever,
            queue_limit: 1000,
            max_hold: MaxHold::Off,
        }
    }
}

impl Params {
    pub fn validate(&self) -> anyhow::Result<()> {
        let bad = |what: &str| Err(anyhow::anyhow!("percentile-web: {what}"));
        if !(self.max_duration_s.is_finite() && self.max_duration_s > 0.0) {
            return bad(&format!(
                "max_duration_s = {}: must be positive",
                self.max_duration_s
            ));
        }
        if !(self.bin_s.is_finite() && self.bin_s > 0.0) {
            return bad(&format!("bin_s = {}: must be positive", self.bin_s));
        }
        if !(self.warmup_s >= 0.0 && self.warmup_s < self.max_duration_s) {
            return bad(&format!(
                "warmup_s = {}: must be in [0, max_duration_s)",
                self.warmup_s
            ));
        }
        if !(self.network.link_mbps.is_finite() && self.network.link_mbps > 0.0) {
            return bad(&format!(
                "network.link_mbps = {}: must be positive",
                self.network.link_mbps
            ));
        }
        if self.network.link_delay_ms.is_nan() || self.network.link_delay_ms < 0.0 {
            return bad("network.link_delay_ms: must be ≥ 0");
        }
        let n = self.clients.percentiles.len();
        if n == 0 || n > 64 {
            return bad(&format!(
                "clients.percentiles: need 1..=64 classes, got {n}"
            ));
        }
        if let Some(p) = self
            .clients
            .percentiles
            .iter()
            .find(|p| **p == 0 || **p > 100)
        {
            return bad(&format!(
                "clients.percentiles: {p} is not a percentage in 1..=100"
            ));
        }
        if self.clients.threads == 0 || self.clients.threads > MAX_THREADS {
            return bad(&format!(
                "clients.threads = {}: must be in 1..={MAX_THREADS}",
                self.clients.threads
            ));
        }
        if self.clients.requests_per_thread == 0
            || self.clients.requests_per_thread > MAX_REQUESTS_PER_THREAD
        {
            return bad(&format!(
                "clients.requests_per_thread = {}: must be in 1..={MAX_REQUESTS_PER_THREAD}",
                self.clients.requests_per_thread
            ));
        }
        let total = n as u64 * self.clients.threads as u64 * self.clients.requests_per_thread;
        if total > MAX_TOTAL_REQUESTS {
            return bad(&format!(
                "{n} classes × clients.threads {} × clients.requests_per_thread {} = {total} requests per run: at most {MAX_TOTAL_REQUESTS} (every response time is kept)",
                self.clients.threads, self.clients.requests_per_thread
            ));
        }
        if self.server.workers == 0 || self.server.workers > MAX_WORKERS {
            return bad(&format!(
                "server.workers = {}: must be in 1..={MAX_WORKERS}",
                self.server.workers
            ));
        }
        if self.max_duration_s > MAX_DURATION_S {
            return bad(&format!(
                "max_duration_s = {}: at most {MAX_DURATION_S} s",
                self.max_duration_s
            ));
        }
        if self.max_duration_s / self.bin_s > MAX_BINS as f64 {
            return bad(&format!(
                "bin_s = {}: max_duration_s / bin_s must be at most {MAX_BINS} bins",
                self.bin_s
            ));
        }
        for (key, v) in [
            ("server.response_bytes", self.server.response_bytes),
            ("clients.request_bytes", self.clients.request_bytes),
        ] {
            if v == 0 || v > MAX_MESSAGE_BYTES {
                return bad(&format!("{key} = {v}: must be in 1..={MAX_MESSAGE_BYTES}"));
            }
        }
        fn context(e: impl std::fmt::Display) -> anyhow::Error {
            anyhow::anyhow!("percentile-web: {e}")
        }
        self.server
            .service
            .validate("server.service")
            .map_err(context)?;
        self.clients
            .think
            .validate("clients.think")
            .map_err(context)?;
        if let Some(rho) = self.clients.open_load {
            if !(rho.is_finite() && rho > 0.0 && rho <= 100.0) {
                return bad(&format!("clients.open_load = {rho}: must be in (0, 100]"));
            }
            if self.server.service.mean_ms() <= 0.0 {
                return bad("clients.open_load needs a server.service with a mean above zero");
            }
        }
        self.percentile.deadline.validate().map_err(context)?;
        self.percentile.memory.validate().map_err(context)?;
        if let Some(ms) = self.percentile.extra_fixed_deadline_ms {
            PercentileDeadline::Ms(ms)
                .validate()
                .map_err(|e| anyhow::anyhow!("percentile-web: percentile.extra_fixed_{e}"))?;
        }
        for (key, v) in [
            ("queue_limit", self.queue_limit),
            ("percentile.queue_limit", self.percentile.queue_limit),
            ("server.listen_limit", self.server.listen_limit.max(1)),
        ] {
            if v == 0 || v > MAX_QUEUE {
                return bad(&format!("{key} = {v}: must be in 1..={MAX_QUEUE}"));
            }
        }
        Ok(())
    }

    /// The clients' loop: P0's closed loop, or the open-loop variant of `clients.open_load`.
    pub fn client_mode(&self) -> ClientMode {
        match self.clients.open_load {
            None => ClientMode::Closed {
                think: self.clients.think.clone(),
            },
            Some(rho) => {
                let capacity = self.server.workers as f64 * 1000.0 / self.server.service.mean_ms();
                ClientMode::Open {
                    rate_per_s: rho * capacity / self.clients.percentiles.len() as f64,
                }
            }
        }
    }

    /// Requests each sender of a class sends: a closed-loop thread's own, or the whole class's
    /// when one open-loop stream sends them all.
    pub fn requests_per_sender(&self) -> u64 {
        match self.clients.open_load {
            None => self.clients.requests_per_thread,
            Some(_) => self.clients.requests_per_thread * u64::from(self.clients.threads),
        }
    }

    /// The scenario a run simulates: a run named `…_all_held` holds every waiting request in
    /// the scheduler (listen queue 0: released only when the worker is free), whatever the
    /// scenario's `server.listen_limit`.
    pub fn for_run(&self, run: &str) -> Params {
        let mut q = self.clone();
        if run.ends_with(ALL_HELD) {
            q.server.listen_limit = 0;
        }
        q
    }

    pub fn sched(&self, run: &str) -> QdiscConfig {
        let classes = self.clients.percentiles.len();
        match run.trim_end_matches(ALL_HELD) {
            "percentile" | "percentile_fixed_deadline" => QdiscConfig::Percentile {
                percentiles: self.clients.percentiles.clone(),
                queue_limit: self.percentile.queue_limit,
                deadline: match (run, self.percentile.extra_fixed_deadline_ms) {
                    ("percentile_fixed_deadline", Some(ms)) => PercentileDeadline::Ms(ms),
                    _ => self.percentile.deadline,
                },
                memory: self.percentile.memory,
                max_hold: self.percentile.max_hold,
            },
            "strict_priority" => QdiscConfig::StrictPriority {
                bands: vec![BandConfig::with_limits(self.queue_limit, u64::MAX); classes],
            },
            _ => QdiscConfig::Fifo {
                queue_limit: self.queue_limit * classes,
                size_limit: u64::MAX,
            },
        }
    }
}

/// What one run measured, per class.
#[derive(Debug, Clone, Default)]
pub struct ClassResult {
    pub completed: u64,
    pub refused: u64,
    /// Client-side response time (send → response), s.
    pub mean_s: f64,
    pub p95_s: f64,
    pub throughput: f64,
    /// Scheduler counters (Percentile: N, S, priority, attainment; others: from our stats).
    pub n: f64,
    pub s: f64,
    pub priority: Option<f64>,
    /// S/(N·P) with P as a fraction.
    pub attainment: f64,
    /// Per bin: (completed, mean response s).
    pub series: Vec<(u64, f64)>,
    /// Longest run of bins without a completion after warm-up.
    pub longest_gap_bins: usize,
}

pub struct RunResult {
    pub duration_s: f64,
    pub classes: Vec<ClassResult>,
    pub server_utilisation: f64,
    pub events: u64,
}

/// The topology of a run in `sim`: one client node per class and the server behind a switch,
/// every link at the scenario's rate and delay; the server with `run`'s scheduler, one group
/// of closed-loop threads per class. Returns the server and the client groups.
fn build(sim: &mut Sim, p: &Params, run: &str) -> anyhow::Result<(usize, Vec<usize>)> {
    let err =
        |e: netsched_sim::error::SimConfigError| anyhow::anyhow!("percentile-web ({run}): {e}");
    let rate = (p.network.link_mbps * 1e6) as u64;
    let delay = (p.network.link_delay_ms * MS as f64) as Nanos;
    let big = QdiscConfig::Fifo {
        queue_limit: 10_000,
        size_limit: u64::MAX,
    };
    let switch = sim.add_node("switch");
    let server = sim.add_node("server");
    sim.add_link(switch, server, rate, delay, &big, LinkClassRule::Single(0))
        .map_err(err)?;
    sim.add_link(server, switch, rate, delay, &big, LinkClassRule::Single(0))
        .map_err(err)?;
    let srv = sim
        .add_server(
            server,
            ServerConfig {
                workers: p.server.workers,
                listen_limit: p.for_run(run).server.listen_limit,
                service: p.server.service.clone(),
                response_bytes: p.server.response_bytes,
                sched: p.sched(run),
            },
        )
        .map_err(err)?;
    let classes = p.clients.percentiles.len();
    let mut groups = Vec::new();
    for c in 0..classes {
        let host = sim.add_node(&format!("client{c}"));
        sim.add_link(host, switch, rate, delay, &big, LinkClassRule::Single(0))
            .map_err(err)?;
        sim.add_link(switch, host, rate, delay, &big, LinkClassRule::Single(0))
            .map_err(err)?;
        groups.push(
            sim.add_clients(ClientConfig {
                node: host,
                server,
                class: c as u8,
                threads: p.clients.threads,
                mode: p.client_mode(),
                request_bytes: p.clients.request_bytes,
                requests: p.requests_per_sender(),
                start: 0,
            })
            .map_err(err)?,
        );
    }
    Ok((srv, groups))
}

/// One run of `run` (a scheduler name): the clients, the switch and the server, simulated
/// until the first class has sent all its requests; per class the figures of [`ClassResult`].
pub fn simulate(p: &Params, run: &str, seed: u64) -> anyhow::Result<RunResult> {
    let bin = (p.bin_s * SEC as f64) as Nanos;
    let mut sim = Sim::new(seed, bin);
    let (srv, groups) = build(&mut sim, p, run)?;
    let classes = p.clients.percentiles.len();
    // Run until the first class has completed all its requests (or the time limit).
    let max = (p.max_duration_s * SEC as f64) as Nanos;
    let step = 10 * MS;
    let mut t = 0;
    let target = p.requests_per_sender();
    while t < max {
        t = (t + step).min(max);
        sim.run_until(t);
        if groups
            .iter()
            .any(|&g| sim.client_done(g).iter().all(|&d| d >= target))
        {
            break;
        }
    }
    let end = sim.now().max(1);
    let duration_s = end as f64 / SEC as f64;
    let warm_bins = (p.warmup_s / p.bin_s).floor() as usize;
    let status = sim.server_sched(srv).class_status();
    let deadline = match (run, p.percentile.extra_fixed_deadline_ms) {
        ("percentile_fixed_deadline", Some(ms)) => PercentileDeadline::Ms(ms),
        _ => p.percentile.deadline,
    };
    let deadline_ns = match deadline {
        PercentileDeadline::Ms(ms) => Some((ms * MS as f64) as Nanos),
        PercentileDeadline::Ns(ns) => Some(ns),
        PercentileDeadline::Auto | PercentileDeadline::AutoQuantile => None,
    };
    let server_stats = sim.server_stats(srv);
    let mut out = Vec::new();
    for c in 0..classes {
        let cs = sim.client_stats.get(c).cloned().unwrap_or_default();
        let mut lat: Vec<Nanos> = cs.latencies.clone();
        lat.sort_unstable();
        let p95 = lat
            .get(((lat.len() as f64) * 0.95) as usize)
            .or(lat.last())
            .map_or(f64::NAN, |v| *v as f64 / 1e9);
        let series: Vec<(u64, f64)> = cs
            .bins
            .iter()
            .map(|(n, sum)| {
                (
                    *n,
                    if *n > 0 {
                        *sum as f64 / *n as f64 / 1e9
                    } else {
                        f64::NAN
                    },
                )
            })
            .collect();
        let last_bin = (end / bin) as usize;
        let mut gap = 0;
        let mut longest = 0;
        for b in warm_bins..last_bin {
            if series.get(b).map_or(0, |x| x.0) == 0 {
                gap += 1;
                longest = longest.max(gap);
            } else {
                gap = 0;
            }
        }
        let pc = p.clients.percentiles[c] as f64 / 100.0;
        let extra = |key: &str| -> Option<f64> {
            status
                .get(c)
                .and_then(|s| s.extra.iter().find(|(k, _)| k == key).map(|(_, v)| *v))
        };
        // N and S as the thesis counts them; for FIFO/priority from our own server counters
        // with the same deadline.
        let (n, s) = match (extra("n"), extra("s")) {
            (Some(n), Some(s)) => (n, s),
            _ => {
                let ss = server_stats.get(c);
                let n = ss.map_or(0, |x| x.completed) as f64;
                let s = match (ss, deadline_ns) {
                    (Some(x), Some(d)) => x.latencies.iter().filter(|l| **l <= d).count() as f64,
                    _ => f64::NAN,
                };
                (n, s)
            }
        };
        out.push(ClassResult {
            completed: cs.completed,
            refused: cs.refused,
            mean_s: cs.mean() / 1e9,
            p95_s: p95,
            throughput: cs.completed as f64 / duration_s,
            n,
            s,
            priority: extra("priority"),
            attainment: if n > 0.0 { s / (n * pc) } else { 0.0 },
            series,
            longest_gap_bins: longest,
        });
    }
    Ok(RunResult {
        duration_s,
        classes: out,
        server_utilisation: sim.server_busy_ns(srv) as f64 / end as f64,
        events: sim.events(),
    })
}

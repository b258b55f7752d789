//! The `vm-delay` experiment (P2, `/work/shared/papers/002_*.txt`): dom0's netback serves the
//! guests' virtual interfaces with `netsched_core::qdisc::StrictPriority` (the prior work:
//! preemptive priority by domain) or `netsched_core::qdisc::delay::DelayConstrained` (P2's
//! delay bitmaps, and the core's wall-clock variant).
//!
//! Model (discrete events on `netsched_sim::event::EventQueue`):
//! - 9 or 18 domains in three tiers; each domain sends one packet per tier period (± jitter)
//!   into its own bounded vif queue (one class per vif); a full queue drops the packet
//!   (counted per tier as loss);
//! - the backend takes packets from the discipline one at a time (`dequeue`), each costing
//!   `per_packet_ms` of dom0 CPU; the discipline forms its batch rounds itself;
//! - dom0 has the CPU only part of the time: a background load keeps it `cpu_busy` busy, in
//!   alternating on/off slices of random length around `slice_ms` (a packet being moved when
//!   the CPU is taken away finishes when it comes back);
//! - every packet is an ICMP-like probe: its latency is departure − arrival.
//!
//! Measured per (scheduler, domain count, tier): mean, p95, p99, max latency, share above
//! 60 ms, loss; for the delay-constrained runs also the longest run of round starts that
//! passed over a backlogged vif, compared with the core's proven bound.
//!
//! Cost: O(log n) per event plus the discipline's O(vifs) round start.

use crate::params;
use anyhow::{anyhow, bail};
use netsched_core::qdisc::delay::{DelayConstrained, DelayInterfaceConfig};
use netsched_core::qdisc::prio::{BandConfig, StrictPriority};
use netsched_core::qdisc::{Packet, Qdisc, Verdict};
use netsched_core::rng::SplitMix64;
use netsched_core::{Nanos, MS, SEC};
use netsched_report::{svg, Check, Comparison, ExperimentOutput, Figure, Results, Run};
use netsched_sim::event::EventQueue;
use serde_json::{json, Value};
use std::path::Path;

/// One tier of domains.
#[derive(Debug, Clone)]
pub struct Tier {
    pub name: String,
    pub priority: u32,
    pub period_ms: f64,
    pub bound_ms: f64,
    pub bitmap_len: u32,
}

/// One configuration.
#[derive(Debug, Clone)]
pub struct VmConfig {
    pub scheduler: String,
    pub domains: usize,
    pub tiers: Vec<Tier>,
    pub jitter: f64,
    pub batch: usize,
    pub per_packet_ms: f64,
    pub vif_queue: usize,
    pub cpu_busy: f64,
    pub slice_ms: f64,
    pub duration: Nanos,
    pub threshold_ms: f64,
}

/// Per-tier measurements.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TierResult {
    pub sent: u64,
    pub delivered: u64,
    pub lost: u64,
    /// Latencies (ms) of delivered packets.
    pub latencies_ms: Vec<f64>,
    /// Longest run of round starts that passed over a backlogged vif of this tier.
    pub max_rounds_passed: u64,
    /// The core's bound on that run (`bitmap_len + n − 2`); 0 for strict priority.
    pub bound_rounds: u64,
}

impl TierResult {
    pub fn loss_pct(&self) -> f64 {
        if self.sent == 0 {
            0.0
        } else {
            100.0 * self.lost as f64 / self.sent as f64
        }
    }
    pub fn mean_ms(&self) -> f64 {
        if self.latencies_ms.is_empty() {
            f64::NAN
        } else {
            self.latencies_ms.iter().sum::<f64>() / self.latencies_ms.len() as f64
        }
    }
    pub fn quantile_ms(&self, q: f64) -> f64 {
        let mut v = self.latencies_ms.clone();
        if v.is_empty() {
            return f64::NAN;
        }
        v.sort_by(|a, b| a.total_cmp(b));
        let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
        v[i]
    }
    pub fn share_above_pct(&self, ms: f64) -> f64 {
        if self.latencies_ms.is_empty() {
            return 0.0;
        }
        100.0 * self.latencies_ms.iter().filter(|x| **x > ms).count() as f64
            / self.latencies_ms.len() as f64
    }
}

#[derive(Debug, Clone)]
struct Probe {
    vif: usize,
    sent: Nanos,
}

impl Packet for Probe {
    fn len(&self) -> u32 {
        98 // an ICMP echo of 56 data bytes in IPv4 over Ethernet
    }
}

enum Sched {
    Prio(StrictPriority<Probe>),
    Delay(DelayConstrained<Probe>),
}

impl Sched {
    fn q(&mut self) -> &mut dyn Qdisc<Probe> {
        match self {
            Sched::Prio(p) => p,
            Sched::Delay(d) => d,
        }
    }
}

enum Ev {
    Send { vif: usize },
    CpuOn,
    CpuOff,
    Done,
}

/// Simulate one configuration; returns one result per tier.
pub fn simulate(cfg: &VmConfig, seed: u64) -> anyhow::Result<Vec<TierResult>> {
    let ntiers = cfg.tiers.len();
    if ntiers == 0 || (cfg.domains / ntiers) * ntiers != cfg.domains {
        bail!(
            "domains.counts: {} domains cannot be split into {ntiers} equal tiers",
            cfg.domains
        );
    }
    let per_tier = cfg.domains / ntiers;
    // vif v belongs to tier v / per_tier; vifs are ordered High first, so lower index =
    // more important, matching both disciplines' tie-breaking.
    let tier_of = |v: usize| v / per_tier;
    let mut sched = match cfg.scheduler.as_str() {
        "strict_priority" => {
            // One band per vif, bands ordered by tier priority.
            let bands: Vec<BandConfig> = (0..cfg.domains)
                .map(|_| BandConfig::with_limits(cfg.vif_queue, u64::MAX))
                .collect();
            Sched::Prio(StrictPriority::new(&bands).map_err(|e| anyhow!("strict priority: {e}"))?)
        }
        "delay_constrained" | "delay_wall_clock" => {
            let wall = cfg.scheduler == "delay_wall_clock";
            let ifaces: Vec<DelayInterfaceConfig> = (0..cfg.domains)
                .map(|v| {
                    let t = &cfg.tiers[tier_of(v)];
                    DelayInterfaceConfig {
                        priority: t.priority,
                        bitmap_len: t.bitmap_len,
                        bound_ns: Some((t.bound_ms * MS as f64) as u64),
                        limit_packets: cfg.vif_queue,
                    }
                })
                .collect();
            Sched::Delay(
                DelayConstrained::new(&ifaces, cfg.batch, wall)
                    .map_err(|e| anyhow!("delay-constrained: {e}"))?,
            )
        }
        other => bail!(
            "unknown scheduler {other:?} (strict_priority, delay_constrained, delay_wall_clock)"
        ),
    };
    let mut rng = SplitMix64::new(seed);
    let mut q: EventQueue<Ev> = EventQueue::new();
    for v in 0..cfg.domains {
        let period = cfg.tiers[tier_of(v)].period_ms * MS as f64;
        q.schedule((rng.unit() * period) as Nanos, Ev::Send { vif: v });
    }
    let slice = cfg.slice_ms * MS as f64;
    let on_mean = slice * (1.0 - cfg.cpu_busy) / 0.5;
    let off_mean = slice * cfg.cpu_busy / 0.5;
    let draw = |rng: &mut SplitMix64, mean: f64| -> Nanos { (mean * (0.5 + rng.unit())) as Nanos };
    let mut cpu_on = true;
    if cfg.cpu_busy > 0.0 {
        let d = draw(&mut rng, on_mean);
        q.schedule(d, Ev::CpuOff);
    }
    let per_packet = (cfg.per_packet_ms * MS as f64) as Nanos;
    let mut serving: Option<(Probe, Nanos)> = None; // packet and remaining CPU time
    let mut service_started: Nanos = 0;
    let mut tiers = vec![TierResult::default(); ntiers];
    let mut passed = vec![0u64; cfg.domains];
    if let Sched::Delay(d) = &sched {
        for (v, _) in passed.iter().enumerate() {
            let t = tier_of(v);
            tiers[t].bound_rounds = tiers[t].bound_rounds.max(d.wait_bound_rounds(v));
        }
    }
    let mut sp_decisions_passed = vec![0u64; cfg.domains];
    // Start serving the next packet if the CPU is ours and nothing is in service.
    macro_rules! kick {
        ($now:expr) => {
            if cpu_on && serving.is_none() {
                let now = $now;
                // Round accounting (delay-constrained): a round starts at this dequeue.
                let (backlogged, round_start): (Vec<bool>, bool) = match &sched {
                    Sched::Delay(d) => (
                        (0..cfg.domains).map(|v| d.iface_len(v) > 0).collect(),
                        !d.round_open(),
                    ),
                    Sched::Prio(_) => (Vec::new(), false),
                };
                if let Some(p) = sched.q().dequeue(now) {
                    if round_start {
                        for v in 0..cfg.domains {
                            if v == p.vif || !backlogged[v] {
                                passed[v] = 0;
                            } else {
                                passed[v] += 1;
                                let t = tier_of(v);
                                tiers[t].max_rounds_passed =
                                    tiers[t].max_rounds_passed.max(passed[v]);
                            }
                        }
                    }
                    if let Sched::Prio(_) = &sched {
                        sp_decisions_passed[p.vif] = 0;
                    }
                    serving = Some((p, per_packet));
                    service_started = now;
                    q.schedule(now + per_packet, Ev::Done);
                }
            }
        };
    }
    let mut done_gen_valid = true;
    while let Some((now, ev)) = q.pop() {
        if now > cfg.duration {
            break;
        }
        match ev {
            Ev::Send { vif } => {
                let t = tier_of(vif);
                let period = cfg.tiers[t].period_ms * MS as f64;
                let next = period * (1.0 + cfg.jitter * (2.0 * rng.unit() - 1.0));
                q.schedule(now + next.max(1.0) as Nanos, Ev::Send { vif });
                tiers[t].sent += 1;
                match sched.q().enqueue(vif, Probe { vif, sent: now }, now) {
                    Verdict::Queued => {}
                    Verdict::Dropped { .. } => tiers[t].lost += 1,
                    Verdict::QueuedEvicting { evicted, .. } => {
                        tiers[tier_of(evicted.vif)].lost += 1
                    }
                }
                kick!(now);
            }
            Ev::CpuOff => {
                cpu_on = false;
                if let Some((_, remaining)) = &mut serving {
                    // The packet in service is suspended; its Done event is now stale.
                    *remaining = remaining.saturating_sub(now - service_started);
                    done_gen_valid = false;
                }
                let d = draw(&mut rng, off_mean);
                q.schedule(now + d, Ev::CpuOn);
            }
            Ev::CpuOn => {
                cpu_on = true;
                if let Some((_, remaining)) = &serving {
                    service_started = now;
                    done_gen_valid = true;
                    q.schedule(now + *remaining, Ev::Done);
                }
                let d = draw(&mut rng, on_mean);
                q.schedule(now + d, Ev::CpuOff);
                kick!(now);
            }
            Ev::Done => {
                // Ignore a stale completion (scheduled before the CPU was taken away), and
                // a completion that does not match the remaining time.
                let Some((_, remaining)) = &serving else {
                    continue;
                };
                if !cpu_on || !done_gen_valid || now < service_started + *remaining {
                    continue;
                }
                let (p, _) = serving.take().expect("checked above");
                let t = tier_of(p.vif);
                tiers[t].delivered += 1;
                tiers[t]
                    .latencies_ms
                    .push((now - p.sent) as f64 / MS as f64);
                kick!(now);
            }
        }
    }
    let _ = SEC;
    Ok(tiers)
}

fn tiers_from(p: &Value) -> anyhow::Result<Vec<Tier>> {
    let names = params::str_list(p, "tiers.names")?;
    let prio = params::count_list(p, "tiers.priority")?;
    let period = params::f64_list(p, "tiers.period_ms")?;
    let bound = params::f64_list(p, "tiers.bound_ms")?;
    let bits = params::count_list(p, "tiers.bitmap_len")?;
    let n = names.len();
    for (k, len) in [
        ("priority", prio.len()),
        ("period_ms", period.len()),
        ("bound_ms", bound.len()),
        ("bitmap_len", bits.len()),
    ] {
        if len != n {
            bail!("tiers.{k} has {len} entries but tiers.names has {n}");
        }
    }
    if let Some(x) = period.iter().find(|x| **x <= 0.0) {
        bail!("tiers.period_ms: {x} is not > 0");
    }
    Ok((0..n)
        .map(|i| Tier {
            name: names[i].clone(),
            priority: prio[i] as u32,
            period_ms: period[i],
            bound_ms: bound[i],
            bitmap_len: bits[i] as u32,
        })
        .collect())
}

/// Run the experiment.
pub fn run(params: &Value, seed: u64, out: &Path) -> anyhow::Result<ExperimentOutput> {
    let tiers = tiers_from(params)?;
    let counts = params::count_list(params, "domains.counts")?;
    let schedulers = params::str_list(params, "run.schedulers")?;
    let cpu_busy = params::f64_at(params, "load.cpu_busy")?;
    if !(0.0..1.0).contains(&cpu_busy) {
        bail!("load.cpu_busy must be within 0..1, got {cpu_busy}");
    }
    let threshold = params::positive_f64(params, "run.threshold_ms")?;
    let base = VmConfig {
        scheduler: String::new(),
        domains: 0,
        tiers: tiers.clone(),
        jitter: params::f64_at(params, "tiers.jitter")?.clamp(0.0, 0.99),
        batch: params::count_at(params, "backend.batch")?,
        per_packet_ms: params::positive_f64(params, "backend.per_packet_ms")?,
        vif_queue: params::count_at(params, "backend.vif_queue_packets")?,
        cpu_busy,
        slice_ms: params::positive_f64(params, "load.slice_ms")?,
        duration: (params::positive_f64(params, "run.duration_s")? * SEC as f64) as Nanos,
        threshold_ms: threshold,
    };
    let mut results = Results::new("vm-delay", "sim", seed, params.clone());
    let mut all: Vec<(String, usize, Vec<TierResult>)> = Vec::new();
    let mut seeds = SplitMix64::new(seed);
    for &n in &counts {
        // Same arrivals and CPU slices for every scheduler at this domain count.
        let s = seeds.next_u64();
        for sch in &schedulers {
            let cfg = VmConfig {
                scheduler: sch.clone(),
                domains: n,
                ..base.clone()
            };
            let r = simulate(&cfg, s)?;
            for (t, tr) in tiers.iter().zip(&r) {
                results.runs.push(Run {
                    config: json!({"scheduler": sch, "domains": n, "tier": t.name}),
                    metrics: json!({
                        "sent": tr.sent, "delivered": tr.delivered, "lost": tr.lost,
                        "loss_pct": tr.loss_pct(),
                        "mean_ms": tr.mean_ms(), "p95_ms": tr.quantile_ms(0.95),
                        "p99_ms": tr.quantile_ms(0.99), "max_ms": tr.quantile_ms(1.0),
                        "above_threshold_pct": tr.share_above_pct(threshold),
                        "max_rounds_passed": tr.max_rounds_passed,
                        "bound_rounds": tr.bound_rounds,
                    }),
                });
            }
            all.push((sch.clone(), n, r));
        }
    }
    let find = |sch: &str, n: usize| {
        all.iter()
            .find(|(s, m, _)| s == sch && *m == n)
            .map(|(_, _, r)| r)
    };
    let low = tiers.len() - 1;
    let overall = |r: &[TierResult]| -> (f64, f64) {
        let total: usize = r.iter().map(|t| t.latencies_ms.len()).sum();
        let above: usize = r
            .iter()
            .map(|t| t.latencies_ms.iter().filter(|x| **x > threshold).count())
            .sum();
        let sent: u64 = r.iter().map(|t| t.sent).sum();
        let lost: u64 = r.iter().map(|t| t.lost).sum();
        (
            100.0 * above as f64 / total.max(1) as f64,
            100.0 * lost as f64 / sent.max(1) as f64,
        )
    };
    // Figures: CDF per tier (Fig. 7/8), share above 60 ms (Fig. 9), mean per tier vs #VMs (Fig. 6).
    let mut figures = Vec::new();
    for (sch, n, r) in &all {
        let samples: Vec<(String, Vec<f64>)> = tiers
            .iter()
            .zip(r)
            .map(|(t, tr)| (t.name.clone(), tr.latencies_ms.clone()))
            .collect();
        let file = format!("cdf-{sch}-{n}.svg");
        svg::cdf_chart(
            &format!("Latency CDF per tier — {sch}, {n} domains"),
            "latency (ms)",
            &samples,
            &out.join(&file),
        )?;
        figures.push(Figure {
            title: format!("Latency CDF per tier, {sch}, {n} domains (P2 Fig. 7/8)"),
            file,
        });
    }
    let cats: Vec<String> = counts
        .iter()
        .flat_map(|n| tiers.iter().map(move |t| format!("{} ({n})", t.name)))
        .collect();
    let share_series: Vec<(String, Vec<f64>)> = schedulers
        .iter()
        .map(|sch| {
            (
                sch.clone(),
                counts
                    .iter()
                    .flat_map(|&n| (0..tiers.len()).map(move |ti| (n, ti)))
                    .map(|(n, ti)| {
                        find(sch, n)
                            .map(|r| r[ti].share_above_pct(threshold))
                            .unwrap_or(f64::NAN)
                    })
                    .collect(),
            )
        })
        .collect();
    svg::bar_chart(
        &format!("Share of packets above {threshold} ms per tier (domains)"),
        "share (%)",
        &cats,
        &share_series,
        &out.join("above-threshold.svg"),
    )?;
    figures.push(Figure {
        title: format!("Share above {threshold} ms (P2 Fig. 9)"),
        file: "above-threshold.svg".into(),
    });
    let mean_series: Vec<(String, Vec<(f64, f64)>)> = schedulers
        .iter()
        .flat_map(|sch| {
            tiers
                .iter()
                .enumerate()
                .map(move |(ti, t)| (sch.clone(), ti, t.name.clone()))
        })
        .map(|(sch, ti, name)| {
            (
                format!("{name} / {sch}"),
                counts
                    .iter()
                    .map(|&n| {
                        (
                            n as f64,
                            find(&sch, n).map(|r| r[ti].mean_ms()).unwrap_or(f64::NAN),
                        )
                    })
                    .collect(),
            )
        })
        .collect();
    svg::line_chart(
        "Mean latency per tier vs number of domains",
        "domains",
        "mean latency (ms)",
        &mean_series,
        &out.join("mean-vs-domains.svg"),
    )?;
    figures.push(Figure {
        title: "Mean latency per tier vs number of VMs (P2 Fig. 6)".into(),
        file: "mean-vs-domains.svg".into(),
    });
    // CSV of the per-tier table.
    let rows: Vec<Vec<String>> = all
        .iter()
        .flat_map(|(sch, n, r)| {
            tiers.iter().zip(r).map(move |(t, tr)| {
                vec![
                    sch.clone(),
                    n.to_string(),
                    t.name.clone(),
                    format!("{}", tr.mean_ms()),
                    format!("{}", tr.quantile_ms(0.99)),
                    format!("{}", tr.share_above_pct(threshold)),
                    format!("{}", tr.loss_pct()),
                    tr.max_rounds_passed.to_string(),
                ]
            })
        })
        .collect();
    netsched_report::csv::write_table(
        &out.join("tiers.csv"),
        &[
            "scheduler",
            "domains",
            "tier",
            "mean_ms",
            "p99_ms",
            "above_threshold_pct",
            "loss_pct",
            "max_rounds_passed",
        ],
        &rows,
    )?;

    let mut comparisons = Vec::new();
    for (sch, n, r) in &all {
        for (t, tr) in tiers.iter().zip(r) {
            comparisons.push(Comparison {
                quantity: format!(
                    "{sch}, {n} domains, {}: mean / p99 / >{threshold} ms / loss",
                    t.name
                ),
                paper: "— (plots only)".into(),
                ours: format!(
                    "{:.1} ms / {:.1} ms / {:.1}% / {:.2}%",
                    tr.mean_ms(),
                    tr.quantile_ms(0.99),
                    tr.share_above_pct(threshold),
                    tr.loss_pct()
                ),
            });
        }
    }
    let mut checks = Vec::new();
    let (nmin, nmax) = (
        *counts.iter().min().unwrap_or(&0),
        *counts.iter().max().unwrap_or(&0),
    );
    if let (Some(sp_small), Some(sp_big)) =
        (find("strict_priority", nmin), find("strict_priority", nmax))
    {
        if nmin < nmax {
            let (a, b) = (&sp_small[low], &sp_big[low]);
            let detail = format!(
                "{}: p99 {:.1} → {:.1} ms, loss {:.2} → {:.2}%",
                tiers[low].name,
                a.quantile_ms(0.99),
                b.quantile_ms(0.99),
                a.loss_pct(),
                b.loss_pct()
            );
            // Two claims, checked apart: the latency growth is P2 Fig. 6/7; the loss growth
            // is what P2 §1/§5 imply, and depends on the vif queue size (see the notes).
            checks.push(Check {
                claim: format!("Strict priority: the low tier's p99 latency grows from {nmin} to {nmax} domains (P2 Fig. 6/7)"),
                passed: b.quantile_ms(0.99) > a.quantile_ms(0.99),
                detail: detail.clone(),
            });
            checks.push(Check {
                claim: format!("Strict priority: the low tier's loss grows from {nmin} to {nmax} domains (P2 §1)"),
                passed: b.loss_pct() > a.loss_pct(),
                detail,
            });
        }
    }
    if let (Some(sp), Some(dc)) = (
        find("strict_priority", nmax),
        find("delay_constrained", nmax),
    ) {
        let (sa, sl) = overall(sp);
        let (da, dl) = overall(dc);
        checks.push(Check {
            claim: format!("delay_constrained vs strict priority at {nmax} domains: a smaller share of packets above {threshold} ms (P2 Fig. 9)"),
            passed: da < sa,
            detail: format!("above {threshold} ms: {sa:.2}% → {da:.2}%"),
        });
        let per_tier = |r: &[TierResult]| {
            r.iter()
                .map(|t| format!("{:.2}%", t.loss_pct()))
                .collect::<Vec<_>>()
                .join("/")
        };
        checks.push(Check {
            claim: format!("delay_constrained vs strict priority at {nmax} domains: less packet loss overall (P2 §5)"),
            passed: dl < sl,
            detail: format!("loss {sl:.3}% → {dl:.3}% (per tier {} → {})", per_tier(sp), per_tier(dc)),
        });
        // Fairness (P2 §5): the latency gap between the best and the worst tier shrinks.
        let gap = |r: &[TierResult]| {
            let p: Vec<f64> = r.iter().map(|t| t.quantile_ms(0.99)).collect();
            p.iter().cloned().fold(f64::NEG_INFINITY, f64::max)
                - p.iter().cloned().fold(f64::INFINITY, f64::min)
        };
        checks.push(Check {
            claim: format!("delay_constrained vs strict priority at {nmax} domains: the p99 latency gap between tiers shrinks (fairness, P2 §5)"),
            passed: gap(dc) < gap(sp),
            detail: format!("p99 gap {:.1} ms → {:.1} ms", gap(sp), gap(dc)),
        });
    }
    let mut ok = true;
    let mut detail = Vec::new();
    for (sch, n, r) in all.iter().filter(|(s, _, _)| s == "delay_constrained") {
        for (t, tr) in tiers.iter().zip(r) {
            ok &= tr.max_rounds_passed <= tr.bound_rounds;
            detail.push(format!(
                "{n}/{}: {} ≤ {}",
                t.name, tr.max_rounds_passed, tr.bound_rounds
            ));
            let _ = sch;
        }
    }
    if !detail.is_empty() {
        checks.push(Check {
            claim: "Delay-constrained: no vif is passed over by more round starts than its bitmap allows (bitmap_len + n − 2, the core's proven bound)".into(),
            passed: ok,
            detail: detail.join(", "),
        });
    }
    let notes = vec![
        format!("**Model.** {} tiers ({}), one vif queue of {} packets per domain, one packet per period per domain (± {:.0}% jitter). dom0 moves a packet in {} ms of CPU and has the CPU {:.0}% of the time, in on/off slices around {} ms (the background MD5 load of P2). Batch {} packets per round. The per-packet cost is a modelling choice that puts 18 domains near the backend's capacity, so the disciplines differ; P2 prints its results only as plots, so the \"paper\" column has no numbers.", tiers.len(), tiers.iter().map(|t| format!("{} {} ms / bound {} ms / bitmap {}", t.name, t.period_ms, t.bound_ms, t.bitmap_len)).collect::<Vec<_>>().join(", "), base.vif_queue, base.jitter * 100.0, base.per_packet_ms, 100.0 * (1.0 - cpu_busy), base.slice_ms, base.batch),
        "**Strict priority** is the core's `StrictPriority` with one band per vif, bands ordered by tier (High vifs first): the prior work's preemptive priority by domain. **delay_constrained** is the core's `DelayConstrained` (P2 Fig. 4 bitmaps); **delay_wall_clock** is its wall-clock variant (a vif is promoted at a round start when its head packet has waited its QoS bound 30/60/100 ms), which the paper does not have. In this model it trims the High tier's mean but leaves Mid/Low tails far longer than the bitmaps do: bounds of 60–100 ms are looser than what 6–10 rounds of ~1 ms amount to here.".into(),
        format!("**Loss.** P2 reports fewer lost packets with delay-constrained scheduling (abstract, §5) but prints no loss figure, and does not say where its losses occur. In this model a packet is lost only when its vif queue overflows. Earlier versions used 4-packet vif queues, a size from neither P2 nor Xen: a packet count gives a High vif (1 packet / 10 ms) only 40 ms of buffer against a Low vif's 400 ms, so the result hung on that choice — 60 s, 18 domains, strict priority → delay-constrained: 4 packets 0.109% → 0.126% (loss moves from Low to High), 8 packets 0.019% → 0.006%, 16 or more 0 → 0. With Xen's own sizes ({} packets here: XENVIF_QUEUE_LENGTH = 32 in dom0, 256-slot TX rings) no packet is lost by either discipline at 9 or 18 domains: the longest Low wait under strict priority (a few hundred ms, see the table) is far below the 3.2 s a 32-packet Low queue holds. The two loss checks therefore fail — P2's loss reduction is not reproduced by this model, and we do not shrink the queues to make it appear. Losses on P2's testbed may come from what is not modelled (guest VCPU scheduling, ping time-outs, the physical NIC).", base.vif_queue),
        "**Round accounting.** A round starts at every dequeue where the discipline has no open round; at each start every backlogged vif that is not chosen has its passed-over counter incremented (reset when chosen or empty). The maximum is compared with `wait_bound_rounds` = bitmap_len + n − 2 (proof in `crates/core/src/qdisc/delay.rs`).".into(),
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

    fn cfg(sch: &str, domains: usize) -> VmConfig {
        VmConfig {
            scheduler: sch.into(),
            domains,
            tiers: vec![
                Tier {
                    name: "H".into(),
                    priority: 1,
                    period_ms: 10.0,
                    bound_ms: 30.0,
                    bitmap_len: 3,
                },
                Tier {
                    name: "M".into(),
                    priority: 2,
                    period_ms: 50.0,
                    bound_ms: 60.0,
                    bitmap_len: 6,
                },
                Tier {
                    name: "L".into(),
                    priority: 3,
                    period_ms: 100.0,
                    bound_ms: 100.0,
                    bitmap_len: 10,
                },
            ],
            jitter: 0.2,
            batch: 2,
            per_packet_ms: 0.6,
            vif_queue: 8,
            cpu_busy: 0.5,
            slice_ms: 10.0,
            duration: 5 * SEC,
            threshold_ms: 60.0,
        }
    }

    #[test]
    fn packets_are_conserved() {
        for sch in ["strict_priority", "delay_constrained", "delay_wall_clock"] {
            let r = simulate(&cfg(sch, 9), 3).unwrap();
            for t in &r {
                // Sent = delivered + lost + still queued or in service (at most a queue's worth per vif + 1).
                let in_flight = t.sent - t.delivered - t.lost;
                assert!(in_flight <= 3 * 8 + 1, "{sch}: {t:?}");
                assert!(t.latencies_ms.iter().all(|x| *x >= 0.6 - 1e-9));
            }
        }
    }

    #[test]
    fn idle_backend_has_service_time_latency() {
        let mut c = cfg("delay_constrained", 3);
        c.cpu_busy = 0.0;
        let r = simulate(&c, 1).unwrap();
        for t in &r {
            assert_eq!(t.lost, 0);
            assert!(
                t.quantile_ms(1.0) < 0.6 * 3.0 + 1e-6,
                "{}",
                t.quantile_ms(1.0)
            );
        }
    }

    #[test]
    fn bad_domain_split_is_an_error() {
        assert!(simulate(&cfg("strict_priority", 10), 1)
            .unwrap_err()
            .to_string()
            .contains("10 domains"));
        assert!(simulate(&cfg("fifo", 9), 1)
            .unwrap_err()
            .to_string()
            .contains("fifo"));
    }
}

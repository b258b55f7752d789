//! What `vm-delay` simulates: dom0's netback serves the guests' virtual interfaces with `netsched_core::qdisc::StrictPriority` (the prior work:
//! preemptive priority by domain) or `netsched_core::qdisc::delay::DelayConstrained` (P2's
//! delay bitmaps, and the core's wall-clock variant).
//!
//! Model (discrete events on `netsched_sim::event::EventQueue`):
//! - 9 or 18 domains in three tiers; every domain's packets go into its own bounded vif queue
//!   (one class per vif; XENVIF_QUEUE_LENGTH = 32 packets in Linux 3.10); a full queue drops
//!   the arriving packet;
//! - three kinds of packets per domain (P2 §4.1.3):
//!   - *probes*: the ICMP packets P2 measures latency with, one per tier period (10 / 50 /
//!     100 ms, ± jitter);
//!   - *application data* ("plain string data, voice and video packets, each sent irregularly
//!     at the same ratio"): bursts of back-to-back packets at exponential intervals, the same
//!     mean rate in every tier;
//!   - *stream*: the "continuous network I/O" of the real-time (High) domains, one packet every
//!     1/`stream_pps` s (0 for the other tiers);
//! - the backend takes packets from the discipline one at a time (`dequeue`), each costing
//!   `per_packet_ms` of dom0 CPU; the discipline forms its batch rounds itself;
//! - dom0 has the CPU only part of the time: a background load keeps it `cpu_busy` busy, in
//!   alternating on/off slices of random length around `slice_ms`, uniform in
//!   `mean · [1 − slice_spread, 1 + slice_spread]` (0: strictly alternating, as the real
//!   switch's budget; a packet being moved when the CPU is taken away finishes when it comes
//!   back).
//!
//! Measured per (scheduler, domain count, tier): probe latency (departure − arrival: mean,
//! p95, p99, max, share above 60 ms); sent / delivered / lost / still held, separately for
//! probes, application data and stream; for the delay-constrained runs also the longest run
//! of round starts that passed over a backlogged vif, compared with the core's proven bound.
//!
//! Cost: O(log n) per event plus the discipline's O(vifs) round start.

use anyhow::{anyhow, bail};
use netsched_core::qdisc::delay::DelayInterfaceConfig;
use netsched_core::qdisc::prio::BandConfig;
use netsched_core::qdisc::{AnyQdisc, Packet, Qdisc, QdiscConfig, Verdict};
use netsched_core::rng::SplitMix64;
use netsched_core::{Nanos, MS, SEC};
use netsched_sim::event::EventQueue;

/// One tier of domains.
#[derive(Debug, Clone)]
pub struct Tier {
    pub name: String,
    pub priority: u32,
    /// Probe period (P2 Table 4).
    pub period_ms: f64,
    pub bound_ms: f64,
    pub bitmap_len: u32,
    /// Continuous stream of each domain of this tier, packets/s (0 = none).
    pub stream_pps: f64,
}

/// One configuration.
#[derive(Debug, Clone)]
pub struct VmConfig {
    pub scheduler: String,
    pub domains: usize,
    pub tiers: Vec<Tier>,
    /// Probe send-time jitter (fraction of the period).
    pub jitter: f64,
    /// Application data per domain (every tier alike), packets/s.
    pub data_pps: f64,
    /// Mean application-data burst, packets (sizes uniform in 1..=2·mean−1).
    pub data_burst: f64,
    pub batch: usize,
    pub per_packet_ms: f64,
    pub vif_queue: usize,
    pub cpu_busy: f64,
    pub slice_ms: f64,
    /// On/off period lengths are drawn uniformly in `mean · [1 − spread, 1 + spread]`
    /// (0 = strictly alternating periods of their means, as the real switch's budget does).
    pub slice_spread: f64,
    pub duration: Nanos,
    pub threshold_ms: f64,
}

impl VmConfig {
    /// Mean offered load over the CPU time dom0 gets (1.0 = the backend is saturated).
    pub fn offered_load(&self) -> f64 {
        self.offered_pps() * self.per_packet_ms / 1000.0 / (1.0 - self.cpu_busy)
    }

    /// The backend's `(on, off)` period lengths, ns: on = slice·(1 − busy)/0.5, off =
    /// slice·busy/0.5 (the means the model draws around; the switch's `budget_periods` are the
    /// same); `None` when the CPU is never busy.
    pub fn budget_cycle(&self) -> Option<(Nanos, Nanos)> {
        let slice = self.slice_ms * MS as f64;
        (self.cpu_busy > 0.0).then(|| {
            (
                (slice * (1.0 - self.cpu_busy) / 0.5) as Nanos,
                (slice * self.cpu_busy / 0.5) as Nanos,
            )
        })
    }

    /// The offered load `seed`'s traffic realises over `duration` (every packet it generates
    /// × the per-packet time, over the on-time): [`Self::offered_load`] varies by seed.
    pub fn realized_load(&self, seed: u64) -> anyhow::Result<f64> {
        let packets = generated_arrivals(self, seed)?.len() as f64;
        let on_ms = self.duration as f64 / MS as f64 * (1.0 - self.cpu_busy);
        Ok(packets * self.per_packet_ms / on_ms.max(f64::MIN_POSITIVE))
    }

    /// Packets/s all domains together offer (probes, data and streams).
    pub fn offered_pps(&self) -> f64 {
        let per_tier = (self.domains / self.tiers.len().max(1)) as f64;
        self.tiers
            .iter()
            .map(|t| per_tier * (1000.0 / t.period_ms + self.data_pps + t.stream_pps))
            .sum()
    }
}

/// Packet accounting of one kind of packet in one tier.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub sent: u64,
    pub delivered: u64,
    /// Dropped at a full vif queue.
    pub lost: u64,
    /// Still queued or in service when the run ended.
    pub held: u64,
}

impl Counts {
    pub fn loss_pct(&self) -> f64 {
        if self.sent == 0 {
            0.0
        } else {
            100.0 * self.lost as f64 / self.sent as f64
        }
    }
    fn add(&self, o: &Counts) -> Counts {
        Counts {
            sent: self.sent + o.sent,
            delivered: self.delivered + o.delivered,
            lost: self.lost + o.lost,
            held: self.held + o.held,
        }
    }
}

/// The kinds of packets a domain sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Probe,
    Data,
    Stream,
}

/// Per-tier measurements.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TierResult {
    pub probe: Counts,
    pub data: Counts,
    pub stream: Counts,
    /// Latencies (ms) of delivered probes.
    pub latencies_ms: Vec<f64>,
    /// Longest run of round starts that passed over a backlogged vif of this tier.
    pub max_rounds_passed: u64,
    /// The core's bound on that run (`bitmap_len + n − 2`); 0 for strict priority.
    pub bound_rounds: u64,
}

impl TierResult {
    fn counts_mut(&mut self, k: Kind) -> &mut Counts {
        match k {
            Kind::Probe => &mut self.probe,
            Kind::Data => &mut self.data,
            Kind::Stream => &mut self.stream,
        }
    }
    /// Application data and stream together (everything but the probes).
    pub fn bulk(&self) -> Counts {
        self.data.add(&self.stream)
    }
    /// Every packet of the tier.
    pub fn all(&self) -> Counts {
        self.probe.add(&self.bulk())
    }
    /// Loss of every packet of the tier, %.
    pub fn loss_pct(&self) -> f64 {
        self.all().loss_pct()
    }
    pub fn mean_ms(&self) -> f64 {
        netsched_report::stats::mean(&self.latencies_ms).unwrap_or(f64::NAN)
    }
    /// The nearest-rank `q`-quantile (`netsched_report::stats`), NaN for no sample.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        netsched_report::stats::percentile_of(&self.latencies_ms, q).unwrap_or(f64::NAN)
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
struct Pkt {
    vif: usize,
    kind: Kind,
    sent: Nanos,
}

impl Packet for Pkt {
    fn len(&self) -> u32 {
        match self.kind {
            Kind::Probe => 98, // an ICMP echo of 56 data bytes in IPv4 over Ethernet
            _ => 1514,         // a full Ethernet frame (the backend's cost is per packet)
        }
    }
}

enum Ev {
    Probe {
        vif: usize,
    },
    Burst {
        vif: usize,
    },
    Stream {
        vif: usize,
    },
    /// A recorded arrival ([`replay`]).
    /// Recorded arrivals `from..to` of [`replay`]'s slice, all at one time (offered together,
    /// then the backend looks for work once, as after a generated burst).
    Arrive {
        from: usize,
        to: usize,
    },
    CpuOn,
    CpuOff,
    Done,
}

/// Simulate one configuration; returns one result per tier.
pub fn simulate(cfg: &VmConfig, seed: u64) -> anyhow::Result<Vec<TierResult>> {
    Ok(run_model(cfg, seed, None)?.0)
}

/// Per vif, what a replay did with the recorded arrivals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VifReplay {
    pub arrived: u64,
    /// Dropped at the full vif queue.
    pub dropped: u64,
}

/// Feed recorded arrivals (`(time, vif)`, time in ns from the start, in time order) through
/// the same backend as [`simulate`] — the discipline of `cfg`, its vif queues, per-packet cost
/// and on/off periods (the CPU starts on) — instead of generated traffic. Every arrival counts
/// as application data. Returns per vif what arrived and what its queue dropped: with the
/// arrivals a real switch read, the difference between its drops and these is what its
/// service did differently from the model's.
pub fn replay(cfg: &VmConfig, arrivals: &[(Nanos, usize)]) -> anyhow::Result<Vec<VifReplay>> {
    if let Some((_, v)) = arrivals.iter().find(|(_, v)| *v >= cfg.domains) {
        bail!(
            "replay: arrival at vif {v}, but there are {} vifs",
            cfg.domains
        );
    }
    Ok(run_model(cfg, 0, Some(arrivals))?.1)
}

/// The arrivals [`simulate`] generates for `cfg` and `seed` (`(time, vif)`, in time order):
/// what [`replay`] needs to compare the model's traffic with a real switch's, or to mix them.
pub fn generated_arrivals(cfg: &VmConfig, seed: u64) -> anyhow::Result<Vec<(Nanos, usize)>> {
    Ok(generated_arrivals_with_kind(cfg, seed)?
        .into_iter()
        .map(|(t, v, _)| (t, v))
        .collect())
}

/// [`generated_arrivals`] with each packet's kind (probe, application data, stream).
pub fn generated_arrivals_with_kind(
    cfg: &VmConfig,
    seed: u64,
) -> anyhow::Result<Vec<(Nanos, usize, Kind)>> {
    let mut log = Vec::new();
    run_model_logged(cfg, seed, None, Some(&mut log))?;
    Ok(log)
}

fn run_model(
    cfg: &VmConfig,
    seed: u64,
    arrivals: Option<&[(Nanos, usize)]>,
) -> anyhow::Result<(Vec<TierResult>, Vec<VifReplay>)> {
    run_model_logged(cfg, seed, arrivals, None)
}

/// Refuse a configuration the model cannot run; returns the number of domains per tier.
fn validate(cfg: &VmConfig) -> anyhow::Result<usize> {
    let ntiers = cfg.tiers.len();
    if ntiers == 0 || (cfg.domains / ntiers) * ntiers != cfg.domains {
        bail!(
            "domains.counts: {} domains cannot be split into {ntiers} equal tiers",
            cfg.domains
        );
    }
    if cfg.data_pps < 0.0 || !cfg.data_pps.is_finite() {
        bail!("traffic.data_pps must be >= 0, got {}", cfg.data_pps);
    }
    if cfg.data_pps > 0.0 && (cfg.data_burst.is_nan() || cfg.data_burst < 1.0) {
        bail!(
            "traffic.data_burst_packets must be >= 1, got {}",
            cfg.data_burst
        );
    }
    if let Some(t) = cfg
        .tiers
        .iter()
        .find(|t| t.stream_pps < 0.0 || !t.stream_pps.is_finite())
    {
        bail!(
            "tiers.stream_pps: {} for tier {} is not >= 0",
            t.stream_pps,
            t.name
        );
    }
    Ok(cfg.domains / ntiers)
}

/// The discipline of `cfg.scheduler` over one queue per vif (`tier_of` maps a vif to its tier).
fn build_qdisc(cfg: &VmConfig, tier_of: impl Fn(usize) -> usize) -> anyhow::Result<AnyQdisc<Pkt>> {
    let qdisc = match cfg.scheduler.as_str() {
        // One band per vif, bands ordered by tier priority.
        "strict_priority" => QdiscConfig::StrictPriority {
            bands: (0..cfg.domains)
                .map(|_| BandConfig::with_limits(cfg.vif_queue, u64::MAX))
                .collect(),
        },
        "delay_constrained" | "delay_wall_clock" => QdiscConfig::DelayConstrained {
            interfaces: (0..cfg.domains)
                .map(|v| {
                    let t = &cfg.tiers[tier_of(v)];
                    DelayInterfaceConfig {
                        priority: t.priority,
                        bitmap_len: t.bitmap_len,
                        bound_ns: Some((t.bound_ms * MS as f64) as u64),
                        queue_limit: cfg.vif_queue,
                    }
                })
                .collect(),
            batch: cfg.batch,
            wall_clock: cfg.scheduler == "delay_wall_clock",
            literal_fig4: false,
        },
        other => bail!(
            "unknown scheduler {other:?} (strict_priority, delay_constrained, delay_wall_clock)"
        ),
    };
    qdisc.build().map_err(|e| anyhow!("{}: {e}", cfg.scheduler))
}

/// The random streams of one run. Independent: probes, data bursts, stream phases and CPU
/// slices do not depend on one another, and none depends on the scheduler (same arrivals for
/// every discipline).
struct Streams {
    /// Probes and CPU slices (as before the data traffic existed).
    rng: SplitMix64,
    data: SplitMix64,
    stream: SplitMix64,
}

impl Streams {
    fn new(seed: u64) -> Self {
        let mut root = SplitMix64::new(seed);
        let rng = root.split();
        let data = root.split();
        let stream = root.split();
        Self { rng, data, stream }
    }
}

/// The first event of every traffic source: the recorded arrivals grouped by time, or else
/// each vif's first probe, data burst and stream packet.
fn schedule_traffic(
    q: &mut EventQueue<Ev>,
    cfg: &VmConfig,
    arrivals: Option<&[(Nanos, usize)]>,
    streams: &mut Streams,
    tier_of: impl Fn(usize) -> usize,
) {
    if let Some(arr) = arrivals {
        let mut from = 0;
        while from < arr.len() {
            let t = arr[from].0;
            let to = from + arr[from..].iter().take_while(|a| a.0 == t).count();
            q.schedule(t, Ev::Arrive { from, to });
            from = to;
        }
        return;
    }
    for v in 0..cfg.domains {
        let t = &cfg.tiers[tier_of(v)];
        let period = t.period_ms * MS as f64;
        q.schedule((streams.rng.unit() * period) as Nanos, Ev::Probe { vif: v });
        if cfg.data_pps > 0.0 {
            let gap = cfg.data_burst / cfg.data_pps * SEC as f64;
            q.schedule(streams.data.exp(gap) as Nanos, Ev::Burst { vif: v });
        }
        if t.stream_pps > 0.0 {
            let gap = SEC as f64 / t.stream_pps;
            q.schedule(
                (streams.stream.unit() * gap) as Nanos,
                Ev::Stream { vif: v },
            );
        }
    }
}

/// dom0's backend during a run: the vif queues behind the discipline, the packet in service,
/// the CPU's on/off state, and what each tier and vif has seen so far.
struct Backend<'a> {
    sched: AnyQdisc<Pkt>,
    domains: usize,
    per_tier: usize,
    per_packet: Nanos,
    cpu_on: bool,
    /// The packet in service and its remaining CPU time.
    serving: Option<(Pkt, Nanos)>,
    service_started: Nanos,
    /// Per vif: round starts passed over in a row while backlogged, and backlogged at the
    /// current round start.
    passed: Vec<u64>,
    backlogged: Vec<bool>,
    tiers: Vec<TierResult>,
    per_vif: Vec<VifReplay>,
    log: Option<&'a mut Vec<(Nanos, usize, Kind)>>,
}

impl<'a> Backend<'a> {
    fn new(
        cfg: &VmConfig,
        per_tier: usize,
        sched: AnyQdisc<Pkt>,
        log: Option<&'a mut Vec<(Nanos, usize, Kind)>>,
    ) -> Self {
        let mut tiers = vec![TierResult::default(); cfg.tiers.len()];
        if let AnyQdisc::DelayConstrained(d) = &sched {
            for v in 0..cfg.domains {
                let t = v / per_tier;
                tiers[t].bound_rounds = tiers[t].bound_rounds.max(d.wait_bound_rounds(v));
            }
        }
        Self {
            sched,
            domains: cfg.domains,
            per_tier,
            per_packet: (cfg.per_packet_ms * MS as f64) as Nanos,
            cpu_on: true,
            serving: None,
            service_started: 0,
            passed: vec![0; cfg.domains],
            backlogged: vec![false; cfg.domains],
            tiers,
            per_vif: vec![VifReplay::default(); cfg.domains],
            log,
        }
    }

    /// vif v belongs to tier v / per_tier; vifs are ordered High first, so lower index =
    /// more important, matching both disciplines' tie-breaking.
    fn tier_of(&self, vif: usize) -> usize {
        vif / self.per_tier
    }

    fn lost(&mut self, p: &Pkt) {
        let t = self.tier_of(p.vif);
        self.tiers[t].counts_mut(p.kind).lost += 1;
    }

    /// Start serving the next packet if the CPU is ours and nothing is in service.
    fn kick(&mut self, q: &mut EventQueue<Ev>, now: Nanos) {
        if !self.cpu_on || self.serving.is_some() {
            return;
        }
        // Round accounting (delay-constrained): a round starts at this dequeue.
        let round_start = match &self.sched {
            AnyQdisc::DelayConstrained(d) if !d.round_open() => {
                for (v, b) in self.backlogged.iter_mut().enumerate() {
                    *b = d.iface_len(v) > 0;
                }
                true
            }
            _ => false,
        };
        let dequeued = self.sched.dequeue(now);
        // Nothing these two disciplines discard while choosing, but an engine collects
        // it anyway (architecture.md): counted as lost, never silently.
        for (p, _) in self.sched.take_evicted() {
            self.lost(&p);
        }
        let Some(p) = dequeued else {
            return;
        };
        if round_start {
            self.count_passed_over(p.vif);
        }
        self.serving = Some((p, self.per_packet));
        self.service_started = now;
        q.schedule(now + self.per_packet, Ev::Done);
    }

    /// At a round start that chose `chosen`: every other backlogged vif was passed over once
    /// more; the chosen and the empty ones start again from 0.
    fn count_passed_over(&mut self, chosen: usize) {
        for v in 0..self.domains {
            if v == chosen || !self.backlogged[v] {
                self.passed[v] = 0;
            } else {
                self.passed[v] += 1;
                let t = self.tier_of(v);
                self.tiers[t].max_rounds_passed =
                    self.tiers[t].max_rounds_passed.max(self.passed[v]);
            }
        }
    }

    /// Offer one packet to its vif queue.
    fn offer(&mut self, vif: usize, kind: Kind, now: Nanos) {
        let t = self.tier_of(vif);
        self.tiers[t].counts_mut(kind).sent += 1;
        self.per_vif[vif].arrived += 1;
        if let Some(l) = self.log.as_mut() {
            l.push((now, vif, kind));
        }
        let dropped = match self.sched.enqueue(
            vif,
            Pkt {
                vif,
                kind,
                sent: now,
            },
            now,
        ) {
            Verdict::Queued => return,
            Verdict::Dropped { item, .. } => item,
            Verdict::QueuedEvicting { evicted, .. } => evicted,
        };
        self.lost(&dropped);
        self.per_vif[dropped.vif].dropped += 1;
    }

    /// The packet in service is done: delivered, and a probe's latency recorded.
    fn deliver(&mut self, p: Pkt, now: Nanos) {
        let t = self.tier_of(p.vif);
        self.tiers[t].counts_mut(p.kind).delivered += 1;
        if p.kind == Kind::Probe {
            self.tiers[t]
                .latencies_ms
                .push((now - p.sent) as f64 / MS as f64);
        }
    }

    /// What is still in the vif queues or in service at the end is held, not lost.
    fn finish(mut self) -> (Vec<TierResult>, Vec<VifReplay>) {
        let left = self.sched.reset();
        for p in left.into_iter().chain(self.serving.take().map(|(p, _)| p)) {
            let t = self.tier_of(p.vif);
            self.tiers[t].counts_mut(p.kind).held += 1;
        }
        (self.tiers, self.per_vif)
    }
}

fn run_model_logged(
    cfg: &VmConfig,
    seed: u64,
    arrivals: Option<&[(Nanos, usize)]>,
    log: Option<&mut Vec<(Nanos, usize, Kind)>>,
) -> anyhow::Result<(Vec<TierResult>, Vec<VifReplay>)> {
    let per_tier = validate(cfg)?;
    let tier_of = |v: usize| v / per_tier;
    let sched = build_qdisc(cfg, tier_of)?;
    let mut streams = Streams::new(seed);
    let mut q: EventQueue<Ev> = EventQueue::new();
    schedule_traffic(&mut q, cfg, arrivals, &mut streams, tier_of);
    let Streams {
        mut rng,
        data: mut data_rng,
        ..
    } = streams;
    let slice = cfg.slice_ms * MS as f64;
    let on_mean = slice * (1.0 - cfg.cpu_busy) / 0.5;
    let off_mean = slice * cfg.cpu_busy / 0.5;
    let spread = cfg.slice_spread;
    let draw = |rng: &mut SplitMix64, mean: f64| -> Nanos {
        (mean * (1.0 + spread * (2.0 * rng.unit() - 1.0))) as Nanos
    };
    if cfg.cpu_busy > 0.0 {
        let d = draw(&mut rng, on_mean);
        q.schedule(d, Ev::CpuOff);
    }
    let mut b = Backend::new(cfg, per_tier, sched, log);
    let mut done_gen_valid = true;
    while let Some((now, ev)) = q.pop() {
        if now > cfg.duration {
            break;
        }
        match ev {
            Ev::Probe { vif } => {
                let period = cfg.tiers[tier_of(vif)].period_ms * MS as f64;
                let next = period * (1.0 + cfg.jitter * (2.0 * rng.unit() - 1.0));
                q.schedule(now + next.max(1.0) as Nanos, Ev::Probe { vif });
                b.offer(vif, Kind::Probe, now);
            }
            Ev::Burst { vif } => {
                // Burst size uniform in 1..=2·mean−1 (mean `data_burst`), back to back.
                let max = (2.0 * cfg.data_burst - 1.0).round().max(1.0) as u64;
                let size = 1 + data_rng.below(max);
                for _ in 0..size {
                    b.offer(vif, Kind::Data, now);
                }
                let gap = cfg.data_burst / cfg.data_pps * SEC as f64;
                q.schedule(now + (data_rng.exp(gap) as Nanos).max(1), Ev::Burst { vif });
            }
            Ev::Stream { vif } => {
                let gap = SEC as f64 / cfg.tiers[tier_of(vif)].stream_pps;
                q.schedule(now + (gap as Nanos).max(1), Ev::Stream { vif });
                b.offer(vif, Kind::Stream, now);
            }
            Ev::Arrive { from, to } => {
                for &(_, vif) in &arrivals.unwrap_or_default()[from..to] {
                    b.offer(vif, Kind::Data, now);
                }
            }
            Ev::CpuOff => {
                b.cpu_on = false;
                if let Some((_, remaining)) = &mut b.serving {
                    // The packet in service is suspended; its Done event is now stale.
                    *remaining = remaining.saturating_sub(now - b.service_started);
                    done_gen_valid = false;
                }
                let d = draw(&mut rng, off_mean);
                q.schedule(now + d, Ev::CpuOn);
                continue;
            }
            Ev::CpuOn => {
                b.cpu_on = true;
                if let Some((_, remaining)) = &b.serving {
                    b.service_started = now;
                    done_gen_valid = true;
                    q.schedule(now + *remaining, Ev::Done);
                }
                let d = draw(&mut rng, on_mean);
                q.schedule(now + d, Ev::CpuOff);
            }
            Ev::Done => {
                // Ignore a stale completion (scheduled before the CPU was taken away), and
                // a completion that does not match the remaining time.
                let Some((_, remaining)) = &b.serving else {
                    continue;
                };
                if !b.cpu_on || !done_gen_valid || now < b.service_started + *remaining {
                    continue;
                }
                let (p, _) = b.serving.take().expect("checked above");
                b.deliver(p, now);
            }
        }
        b.kick(&mut q, now);
    }
    Ok(b.finish())
}

/// Probe tail and loss over a range of tiers.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    /// Share of delivered probes above the threshold, %.
    pub above_pct: f64,
    /// Loss of every packet, %.
    pub loss_pct: f64,
    /// Loss of probes, %.
    pub probe_loss_pct: f64,
}

/// [`Summary`] of tiers `range` of one run.
pub fn summary(r: &[TierResult], range: std::ops::Range<usize>, threshold_ms: f64) -> Summary {
    let r = &r[range];
    let total: usize = r.iter().map(|t| t.latencies_ms.len()).sum();
    let above: usize = r
        .iter()
        .map(|t| t.latencies_ms.iter().filter(|x| **x > threshold_ms).count())
        .sum();
    let all = r.iter().fold(Counts::default(), |a, t| a.add(&t.all()));
    let probe = r.iter().fold(Counts::default(), |a, t| a.add(&t.probe));
    Summary {
        above_pct: 100.0 * above as f64 / total.max(1) as f64,
        loss_pct: all.loss_pct(),
        probe_loss_pct: probe.loss_pct(),
    }
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
                    stream_pps: 130.0,
                },
                Tier {
                    name: "M".into(),
                    priority: 2,
                    period_ms: 50.0,
                    bound_ms: 60.0,
                    bitmap_len: 6,
                    stream_pps: 0.0,
                },
                Tier {
                    name: "L".into(),
                    priority: 3,
                    period_ms: 100.0,
                    bound_ms: 100.0,
                    bitmap_len: 10,
                    stream_pps: 0.0,
                },
            ],
            jitter: 0.2,
            data_pps: 43.0,
            data_burst: 8.0,
            batch: 2,
            per_packet_ms: 0.2,
            vif_queue: 8,
            cpu_busy: 0.5,
            slice_ms: 10.0,
            slice_spread: 0.5,
            duration: 5 * SEC,
            threshold_ms: 60.0,
        }
    }

    #[test]
    fn application_traffic_depends_on_the_seed_only() {
        // The real run sends the model's data and streams for its seed and simulates its sim
        // column with another scheduler, regular periods and the probe rate ping really sent:
        // those must not change the data and streams (or the two would offer different
        // traffic); the seed must.
        let app = |c: &VmConfig, seed| -> Vec<(Nanos, usize, Kind)> {
            generated_arrivals_with_kind(c, seed)
                .unwrap()
                .into_iter()
                .filter(|a| a.2 != Kind::Probe)
                .collect()
        };
        let base = cfg("strict_priority", 18);
        let a = app(&base, 7);
        assert!(a.iter().any(|x| x.2 == Kind::Data) && a.iter().any(|x| x.2 == Kind::Stream));
        let mut other = cfg("delay_constrained", 18);
        other.slice_spread = 0.0;
        other.tiers[0].period_ms = 13.0;
        other.tiers[2].period_ms = 120.0;
        assert_eq!(app(&other, 7), a);
        assert_ne!(app(&base, 8), a);
    }

    #[test]
    fn replaying_the_models_own_arrivals_drops_what_it_dropped() {
        // The replay is the same backend: fed the arrivals the model generated, it must drop
        // exactly the packets the model dropped, per tier (a saturated 18-domain run with
        // drops in every tier under strict priority, and under delay-constrained).
        for sch in ["strict_priority", "delay_constrained"] {
            let mut c = cfg(sch, 18);
            c.duration = 20 * SEC;
            c.slice_spread = 0.0;
            let r = simulate(&c, 3).unwrap();
            let arr = generated_arrivals(&c, 3).unwrap();
            let sent: u64 = r.iter().map(|t| t.all().sent).sum();
            assert_eq!(arr.len() as u64, sent);
            let rep = replay(&c, &arr).unwrap();
            let per_tier = 18 / c.tiers.len();
            for (ti, t) in r.iter().enumerate() {
                let dropped: u64 = rep[ti * per_tier..(ti + 1) * per_tier]
                    .iter()
                    .map(|v| v.dropped)
                    .sum();
                assert_eq!(dropped, t.all().lost, "{sch}, tier {ti}");
            }
            let lost: u64 = r.iter().map(|t| t.all().lost).sum();
            assert!(lost > 0, "{sch}: a run without drops tests nothing");
        }
        // A recorded arrival at a vif that does not exist is an error, not a panic.
        let c = cfg("strict_priority", 9);
        assert!(replay(&c, &[(0, 9)])
            .unwrap_err()
            .to_string()
            .contains("vif 9"));
    }

    #[test]
    fn packets_are_conserved() {
        for sch in ["strict_priority", "delay_constrained", "delay_wall_clock"] {
            for (queue, busy, spread) in [(32, 0.5, 0.5), (2, 0.7, 0.5), (32, 0.5, 0.0)] {
                let mut c = cfg(sch, 9);
                c.vif_queue = queue;
                c.cpu_busy = busy;
                c.slice_spread = spread;
                let r = simulate(&c, 3).unwrap();
                for t in &r {
                    for k in [t.probe, t.data, t.stream] {
                        assert_eq!(
                            k.sent,
                            k.delivered + k.lost + k.held,
                            "{sch} {queue}: {k:?}"
                        );
                    }
                    assert!(t.latencies_ms.iter().all(|x| *x >= 0.2 - 1e-9));
                    assert_eq!(t.latencies_ms.len() as u64, t.probe.delivered);
                }
                // Overload (2-packet queues, 30% of the CPU) must lose packets; the High
                // tier is the only one with a stream.
                if queue == 2 {
                    assert!(r.iter().map(|t| t.all().lost).sum::<u64>() > 0, "{sch}");
                }
                assert!(r[0].stream.sent > 0);
                assert_eq!(r[1].stream.sent + r[2].stream.sent, 0);
            }
        }
    }

    #[test]
    fn traffic_rates_match_the_configuration() {
        let mut c = cfg("strict_priority", 3);
        // Long enough that the bursty data count is within ±20% (≈ 4.4 σ at 120 s).
        c.duration = 120 * SEC;
        let r = simulate(&c, 5).unwrap();
        let secs = c.duration as f64 / SEC as f64;
        // One domain per tier: probes 100/20/10 per s, data 43 per s, stream 130 per s.
        for (t, probes) in r.iter().zip([100.0, 20.0, 10.0]) {
            let p = t.probe.sent as f64 / secs;
            assert!((p - probes).abs() < 0.05 * probes + 1.0, "{p}");
            let d = t.data.sent as f64 / secs;
            assert!((d - 43.0).abs() < 0.2 * 43.0, "{d}");
        }
        let s = r[0].stream.sent as f64 / secs;
        assert!((s - 130.0).abs() < 1.0, "{s}");
    }

    #[test]
    fn idle_backend_has_service_time_latency() {
        let mut c = cfg("delay_constrained", 3);
        c.cpu_busy = 0.0;
        c.data_pps = 0.0;
        c.tiers[0].stream_pps = 0.0;
        let r = simulate(&c, 1).unwrap();
        for t in &r {
            assert_eq!(t.all().lost, 0);
            assert!(
                t.quantile_ms(1.0) < 0.2 * 3.0 + 1e-6,
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
        let mut c = cfg("strict_priority", 9);
        c.data_burst = 0.5;
        assert!(simulate(&c, 1)
            .unwrap_err()
            .to_string()
            .contains("traffic.data_burst_packets"));
    }
}

//! The request queue of one balancer: where work waits when every usable server is at
//! `maxconn`, and the order in which it gets a slot when one frees — FIFO, strict priority
//! by class, or P0's percentile scheduler. The disciplines are the core's own (`Fifo`,
//! `StrictPriority`, `PercentileQueue`: the same code as `netsched nfq` and the simulator);
//! this file only keeps the waiters and the counters.
//!
//! How it runs (every call is made under the service's lock, so a freed slot is handed to a
//! waiter before any other request can see it): a request that finds no slot is queued as a
//! [`Ticket`] holding a oneshot sender; when a slot frees, the service asks
//! [`RequestQueue::next_waiter`] for the discipline's choice, picks a server for that
//! request's key and [`hand`](RequestQueue::hand)s it the lease. A waiter that gives up (its
//! class's `queue_timeout`, or its client left) closes its receiver under the lock and is
//! counted at once ([`give_up`](RequestQueue::give_up)); its ticket is skipped when it
//! reaches the head, or taken back with the core's `withdraw` when the discipline's own bound
//! ([`SLACK`] times the live limit) is reached.
//!
//! Counting (P0 §3.2.3 `per_input_skb` / `per_fail_check`): every classified request counts
//! once in its class's N — served at once, queued, or refused at arrival — and once as S
//! (response head within the class's deadline, measured by the balancer from the request
//! head received to the response head handed to the client connection) or as a failure
//! (late, a backend error, refused, timed out, client gone): the figures of `/metrics` and
//! `show-classes`, N = S + fail + requests in progress. The decision (a [`PercentileJudge`]
//! for every discipline, judging each completion against its class's deadline, and the
//! percentile discipline's own counters) sees only the requests the queue admitted: a request
//! refused at arrival does not raise its class's priority, else a class flooding beyond its
//! `queue_limit` would look furthest below its target and take every slot.
//!
//! Bound on waiting (percentile only): a class's `max_hold` (core `MaxHold`) lets its oldest
//! waiter leave before P0's rule decides once it has waited that long (the overdue waiter that
//! came first goes first); each such hand-over is counted by class (`served_by_max_hold`), so
//! an operator sees how much of a class's service came from the bound rather than the rule.
//!
//! Bounds: at most `defaults.queue_limit` live waiters over all classes and each class's own
//! `queue_limit`; each refusal counted by class and reason (`queue_full`,
//! `class_queue_full`, `no_server`, `queue_timeout`, `client_gone`).
//!
//! Cost per queued request: the discipline's enqueue and dequeue (O(1), percentile's scan of
//! ≤ 64 classes), one oneshot channel; per completion the judge's O(1) update.

use crate::classes::{ClassSet, ClassSpec, Deadline, QueueKind};
use netsched_core::balance::FlowKey;
use netsched_core::qdisc::fifo::Fifo;
use netsched_core::qdisc::percentile::{
    JudgeCounts, PercentileDeadline, PercentileJudge, PercentileMemory, PercentileQueue,
};
use netsched_core::qdisc::prio::{BandConfig, StrictPriority};
use netsched_core::qdisc::{ClassId, Feedback, Packet, Qdisc};
use netsched_core::Nanos;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use serde::Serialize;
use std::sync::atomic::AtomicU64;
use tokio::sync::oneshot;

/// The discipline holds at most this many times the live limit (dead tickets included)
/// before they are taken back.
pub const SLACK: usize = 2;

/// A waiting request.
#[derive(Debug)]
pub struct Ticket<L> {
    pub class: ClassId,
    pub key: FlowKey,
    /// L4 SNI routing: the client's server name, which picks the servers it may have.
    pub sni: Option<std::sync::Arc<str>>,
    /// When it was queued (the service's clock, ns).
    pub since: Nanos,
    tx: oneshot::Sender<L>,
}

impl<L> Packet for Ticket<L> {
    fn len(&self) -> u32 {
        1
    }
}

/// Why a request was refused before reaching a backend, for the per-class counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueRefusal {
    /// The balancer's `queue_limit` live waiters are queued.
    QueueFull,
    /// The class's own `queue_limit` live waiters are queued.
    ClassQueueFull,
    /// No usable server.
    NoServer,
    /// Waited its class's `queue_timeout`.
    QueueTimeout,
    /// Its client left while it waited.
    ClientGone,
    /// A reload rebuilt the classes or the discipline while it waited.
    Reload,
}

impl QueueRefusal {
    pub fn reason(self) -> &'static str {
        match self {
            QueueRefusal::QueueFull => "queue_full",
            QueueRefusal::ClassQueueFull => "class_queue_full",
            QueueRefusal::NoServer => "no_server",
            QueueRefusal::QueueTimeout => "queue_timeout",
            QueueRefusal::ClientGone => "client_gone",
            QueueRefusal::Reload => "reload",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClassLabel {
    pub class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClassReasonLabel {
    pub class: String,
    pub reason: String,
}

fn wait_hist() -> Histogram {
    // 100 us .. ~6.5 s
    Histogram::new(exponential_buckets(0.0001, 2.0, 17))
}

/// The per-class Prometheus families (`netsched_balance_class_*`).
#[derive(Clone)]
pub struct ClassMetrics {
    pub requests: Family<ClassLabel, Counter>,
    pub within_deadline: Family<ClassLabel, Counter>,
    pub failed: Family<ClassLabel, Counter>,
    pub attainment: Family<ClassLabel, Gauge<f64, AtomicU64>>,
    pub queue_length: Family<ClassLabel, Gauge>,
    pub wait_seconds: Family<ClassLabel, Histogram, fn() -> Histogram>,
    pub refused: Family<ClassReasonLabel, Counter>,
    pub max_hold_served: Family<ClassLabel, Counter>,
}

impl ClassMetrics {
    pub fn register(r: &mut Registry) -> Self {
        let m = ClassMetrics {
            requests: Family::default(),
            within_deadline: Family::default(),
            failed: Family::default(),
            attainment: Family::default(),
            queue_length: Family::default(),
            wait_seconds: Family::new_with_constructor(wait_hist),
            refused: Family::default(),
            max_hold_served: Family::default(),
        };
        let help: [(&str, &str); 8] = [
            (
                "class_requests",
                "Requests classified in the class (P0's N)",
            ),
            (
                "class_within_deadline",
                "Requests of the class answered within its deadline (P0's S)",
            ),
            (
                "class_failed",
                "Requests of the class late, failed, refused or abandoned",
            ),
            (
                "class_attainment",
                "S / (N * P/100) of the class: 1 = its percentile target met",
            ),
            (
                "class_queue_length",
                "Requests of the class waiting for a slot",
            ),
            (
                "class_wait_seconds",
                "Time requests of the class waited in the queue (those that waited)",
            ),
            ("class_refused", "Requests of the class refused, by reason"),
            (
                "class_max_hold_served",
                "Requests of the class that left the queue by its max_hold, not by the percentile rule",
            ),
        ];
        r.register(help[0].0, help[0].1, m.requests.clone());
        r.register(help[1].0, help[1].1, m.within_deadline.clone());
        r.register(help[2].0, help[2].1, m.failed.clone());
        r.register(help[3].0, help[3].1, m.attainment.clone());
        r.register(help[4].0, help[4].1, m.queue_length.clone());
        r.register(help[5].0, help[5].1, m.wait_seconds.clone());
        r.register(help[6].0, help[6].1, m.refused.clone());
        r.register(help[7].0, help[7].1, m.max_hold_served.clone());
        m
    }

    fn remove(&self, name: &str, reasons: &[&str]) {
        let l = ClassLabel { class: name.into() };
        self.requests.remove(&l);
        self.within_deadline.remove(&l);
        self.failed.remove(&l);
        self.attainment.remove(&l);
        self.queue_length.remove(&l);
        self.wait_seconds.remove(&l);
        self.max_hold_served.remove(&l);
        for r in reasons {
            self.refused.remove(&ClassReasonLabel {
                class: name.into(),
                reason: r.to_string(),
            });
        }
    }
}

const REASONS: [QueueRefusal; 6] = [
    QueueRefusal::QueueFull,
    QueueRefusal::ClassQueueFull,
    QueueRefusal::NoServer,
    QueueRefusal::QueueTimeout,
    QueueRefusal::ClientGone,
    QueueRefusal::Reload,
];

/// One class at run time: its settings, live waiters and the handles of its series.
struct ClassState {
    spec: ClassSpec,
    /// N, S, fail over every request of the class (refused ones included).
    counts: JudgeCounts,
    live: usize,
    refused: [u64; 6],
    served_at_once: u64,
    served_from_queue: u64,
    /// Of `served_from_queue`, those the bound on waiting chose.
    served_by_max_hold: u64,
    max_hold_served: Counter,
    requests: Counter,
    within: Counter,
    failed: Counter,
    attainment: Gauge<f64, AtomicU64>,
    queue_length: Gauge,
    wait: Histogram,
}

impl ClassState {
    fn new(spec: ClassSpec, m: &ClassMetrics) -> Self {
        let l = ClassLabel {
            class: spec.name.clone(),
        };
        ClassState {
            spec,
            counts: JudgeCounts::default(),
            live: 0,
            refused: [0; 6],
            served_at_once: 0,
            served_from_queue: 0,
            served_by_max_hold: 0,
            max_hold_served: m.max_hold_served.get_or_create(&l).clone(),
            requests: m.requests.get_or_create(&l).clone(),
            within: m.within_deadline.get_or_create(&l).clone(),
            failed: m.failed.get_or_create(&l).clone(),
            attainment: m.attainment.get_or_create(&l).clone(),
            queue_length: m.queue_length.get_or_create(&l).clone(),
            wait: m.wait_seconds.get_or_create(&l).clone(),
        }
    }
}

/// The core discipline the waiters are queued in.
enum Discipline<L> {
    Fifo(Fifo<Ticket<L>>),
    Priority(StrictPriority<Ticket<L>>),
    Percentile(PercentileQueue<Ticket<L>>),
}

impl<L> Discipline<L> {
    fn build(set: &ClassSet, total: usize) -> Self {
        let physical = |n: usize| n.max(1).saturating_mul(SLACK);
        match set.queue {
            QueueKind::Fifo => Discipline::Fifo(Fifo::new(physical(total), u64::MAX)),
            QueueKind::Priority => {
                let bands: Vec<BandConfig> = set
                    .specs
                    .iter()
                    .map(|s| BandConfig::with_limits(physical(s.queue_limit), u64::MAX))
                    .collect();
                Discipline::Priority(StrictPriority::new(&bands).expect("checked class count"))
            }
            QueueKind::Percentile => {
                let ps: Vec<u32> = set.specs.iter().map(|s| s.percentile).collect();
                let limit = set.specs.iter().map(|s| s.queue_limit).max().unwrap_or(1);
                let mut q = PercentileQueue::new(
                    &ps,
                    physical(limit),
                    PercentileDeadline::Auto,
                    PercentileMemory::Forever,
                )
                .expect("percentiles checked in classes.rs");
                for (i, s) in set.specs.iter().enumerate() {
                    let _ = q.set_class_deadline(i, s.deadline.fixed());
                    q.set_max_hold(i, s.max_hold)
                        .expect("max_hold checked in classes.rs");
                }
                Discipline::Percentile(q)
            }
        }
    }

    fn q(&mut self) -> &mut dyn Qdisc<Ticket<L>> {
        match self {
            Discipline::Fifo(q) => q,
            Discipline::Priority(q) => q,
            Discipline::Percentile(q) => q,
        }
    }

    fn withdraw_dead(&mut self) -> usize {
        let alive = |t: &Ticket<L>| !t.tx.is_closed();
        match self {
            Discipline::Fifo(q) => q.withdraw(alive).len(),
            Discipline::Priority(q) => q.withdraw(alive).len(),
            Discipline::Percentile(q) => q.withdraw(alive).len(),
        }
    }
}

/// One row of `show-classes`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ClassView {
    pub name: String,
    pub percentile: u32,
    /// `auto` or a duration.
    pub deadline: String,
    /// The deadline requests of the class are judged against now, nanoseconds (absent while
    /// auto has no sample; was `deadline_now_ms`, a float).
    pub deadline_now_ns: Option<u64>,
    pub n: u64,
    pub s: u64,
    pub fail: u64,
    /// S / (N·P/100) over every request of the class; 1 = the target met. 0 while N = 0.
    pub attainment: f64,
    /// The same over the requests the queue admitted (served at once or queued): what the
    /// percentile discipline decides on.
    pub decision_attainment: f64,
    pub queued: usize,
    pub queue_limit: usize,
    /// Nanoseconds (was `queue_timeout_ms`, a float).
    pub queue_timeout_ns: u64,
    pub served_at_once: u64,
    pub served_from_queue: u64,
    /// The class's bound on waiting (`off`, `deadline` or a duration; percentile only).
    pub max_hold: String,
    /// Of `served_from_queue`, the requests the bound on waiting chose, not P0's rule.
    pub served_by_max_hold: u64,
    /// Refusals by reason.
    pub refused: Vec<(String, u64)>,
}

/// Why `set-class` refused a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetClassError {
    UnknownClass {
        name: String,
        known: Vec<String>,
    },
    UnknownField {
        field: String,
    },
    BadValue {
        field: &'static str,
        value: String,
        why: String,
    },
}

impl std::fmt::Display for SetClassError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SetClassError::UnknownClass { name, known } => {
                write!(f, "no class {name:?} (classes: {})", known.join(", "))
            }
            SetClassError::UnknownField { field } => {
                write!(f, "unknown field {field:?} (percentile or deadline)")
            }
            SetClassError::BadValue { field, value, why } => {
                write!(f, "{field} {value:?}: {why}")
            }
        }
    }
}

impl std::error::Error for SetClassError {}

/// The queue and the per-class counters. See the module header.
pub struct RequestQueue<L> {
    kind: QueueKind,
    disc: Discipline<L>,
    judge: PercentileJudge,
    classes: Vec<ClassState>,
    live_total: usize,
    total_limit: usize,
    metrics: ClassMetrics,
    /// Bumped when [`reconfigure`](Self::reconfigure) rebuilds (class indices may change).
    generation: u64,
}

impl<L> RequestQueue<L> {
    /// `total_limit`: `defaults.queue_limit` (0: nothing waits).
    pub fn new(set: &ClassSet, total_limit: usize, metrics: ClassMetrics) -> Self {
        let ps: Vec<u32> = set.specs.iter().map(|s| s.percentile).collect();
        let mut judge =
            PercentileJudge::new(&ps, PercentileDeadline::Auto).expect("auto is always valid");
        for (i, s) in set.specs.iter().enumerate() {
            judge.set_class_deadline(i, s.deadline.fixed());
        }
        RequestQueue {
            kind: set.queue,
            disc: Discipline::build(set, total_limit),
            judge,
            classes: set
                .specs
                .iter()
                .map(|s| ClassState::new(s.clone(), &metrics))
                .collect(),
            live_total: 0,
            total_limit,
            metrics,
            generation: 0,
        }
    }

    /// Changes when a reload rebuilds the classes: a class index taken before belongs to
    /// the old classes.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn kind(&self) -> QueueKind {
        self.kind
    }

    /// Live waiters over all classes.
    pub fn len(&self) -> usize {
        self.live_total
    }

    pub fn is_empty(&self) -> bool {
        self.live_total == 0
    }

    /// The class's queue timeout (ns); the balancer's for an unknown class.
    pub fn queue_timeout(&self, class: ClassId) -> Option<Nanos> {
        self.classes.get(class).map(|c| c.spec.queue_timeout)
    }

    fn class_of(&self, class: ClassId) -> ClassId {
        class.min(self.classes.len() - 1)
    }

    /// N += 1 in the class's figures; in the judge's (the decision's) only if `admitted`.
    fn count_arrival(&mut self, class: ClassId, admitted: bool) {
        if admitted {
            self.judge.arrival(class);
        }
        let c = &mut self.classes[class];
        c.counts.n += 1;
        c.requests.inc();
    }

    /// A request served at once (a server had a slot): N += 1.
    pub fn arrive_served(&mut self, class: ClassId, now: Nanos) {
        let class = self.class_of(class);
        self.count_arrival(class, true);
        self.classes[class].served_at_once += 1;
        if let Discipline::Percentile(q) = &mut self.disc {
            let _ = q.arrive_unqueued(class, now);
        }
    }

    /// A request refused before waiting (queue full, no server): N += 1 and a failure in
    /// the class's figures, but not in the decision's: a refused request does not raise its
    /// class's priority, else a class flooding beyond its `queue_limit` would look furthest
    /// below its target and take every slot.
    pub fn refuse_at_arrival(&mut self, class: ClassId, why: QueueRefusal) {
        let class = self.class_of(class);
        self.count_arrival(class, false);
        let c = &mut self.classes[class];
        c.counts.fail += 1;
        c.failed.inc();
        self.publish_attainment(class);
        self.count_refusal(class, why);
    }

    fn count_refusal(&mut self, class: ClassId, why: QueueRefusal) {
        let c = &mut self.classes[class];
        c.refused[why as usize] += 1;
        self.metrics
            .refused
            .get_or_create(&ClassReasonLabel {
                class: c.spec.name.clone(),
                reason: why.reason().into(),
            })
            .inc();
    }

    /// Queue a request of `class` that found no slot; `Err` when a limit refuses it (counted).
    pub fn enqueue(
        &mut self,
        class: ClassId,
        key: FlowKey,
        sni: Option<std::sync::Arc<str>>,
        now: Nanos,
    ) -> Result<oneshot::Receiver<L>, QueueRefusal> {
        let class = self.class_of(class);
        if self.live_total >= self.total_limit {
            self.refuse_at_arrival(class, QueueRefusal::QueueFull);
            return Err(QueueRefusal::QueueFull);
        }
        if self.classes[class].live >= self.classes[class].spec.queue_limit {
            self.refuse_at_arrival(class, QueueRefusal::ClassQueueFull);
            return Err(QueueRefusal::ClassQueueFull);
        }
        let (tx, rx) = oneshot::channel();
        let mut ticket = Ticket {
            class,
            key,
            sni,
            since: now,
            tx,
        };
        for attempt in 0..2 {
            match self.disc.q().enqueue(class, ticket, now) {
                netsched_core::qdisc::Verdict::Dropped { item, .. } if attempt == 0 => {
                    // Only dead tickets can fill the discipline beyond the live limits.
                    self.disc.withdraw_dead();
                    ticket = item;
                }
                netsched_core::qdisc::Verdict::Dropped { .. } => {
                    // Unreachable while the live limits hold; refused and counted if not.
                    self.refuse_at_arrival(class, QueueRefusal::QueueFull);
                    return Err(QueueRefusal::QueueFull);
                }
                _ => break,
            }
        }
        self.count_arrival(class, true);
        let c = &mut self.classes[class];
        c.live += 1;
        c.queue_length.set(c.live as i64);
        self.live_total += 1;
        Ok(rx)
    }

    /// The live waiter the discipline serves next (dead tickets at the head are dropped).
    pub fn next_waiter(&mut self, now: Nanos) -> Option<&Ticket<L>> {
        loop {
            let dead = self.disc.q().peek(now)?.tx.is_closed();
            if !dead {
                break;
            }
            let _ = self.disc.q().dequeue(now);
        }
        self.disc.q().peek(now)
    }

    /// Give `lease` to the waiter [`next_waiter`](Self::next_waiter) returned. `Err` hands
    /// the lease back if that waiter is gone (it cannot be while the lock is held).
    pub fn hand(&mut self, lease: L, now: Nanos) -> Result<(), L> {
        let before = self.max_hold_releases();
        let Some(t) = self.disc.q().dequeue(now) else {
            return Err(lease);
        };
        let by_bound = self.max_hold_releases() > before;
        let c = &mut self.classes[t.class];
        c.live -= 1;
        c.served_from_queue += 1;
        if by_bound {
            c.served_by_max_hold += 1;
            c.max_hold_served.inc();
        }
        c.queue_length.set(c.live as i64);
        c.wait.observe(now.saturating_sub(t.since) as f64 / 1e9);
        self.live_total -= 1;
        t.tx.send(lease)
    }

    /// Hand-overs the percentile queue's bound on waiting made, over all classes.
    fn max_hold_releases(&self) -> u64 {
        match &self.disc {
            Discipline::Percentile(q) => (0..q.class_count()).map(|i| q.max_hold_releases(i)).sum(),
            _ => 0,
        }
    }

    /// No usable server for the next waiter (its route has none): it alone is released, as
    /// by [`release_all`](Self::release_all).
    pub fn release_next(&mut self, now: Nanos) {
        drop(self.disc.q().dequeue(now));
    }

    /// No usable server: every waiter is released (its receiver sees the sender dropped
    /// and it counts itself with [`give_up`](Self::give_up), `NoServer`).
    pub fn release_all(&mut self) {
        for t in self.disc.q().reset() {
            drop(t);
        }
    }

    /// A waiter left without a lease (timed out, client gone, released): counted, and its
    /// ticket is dead from now on (the caller drops its receiver under the same lock).
    pub fn give_up(&mut self, class: ClassId, since: Nanos, why: QueueRefusal, now: Nanos) {
        let class = self.class_of(class);
        let c = &mut self.classes[class];
        c.live = c.live.saturating_sub(1);
        c.queue_length.set(c.live as i64);
        c.wait.observe(now.saturating_sub(since) as f64 / 1e9);
        self.live_total = self.live_total.saturating_sub(1);
        self.miss(class, now.saturating_sub(since), now);
        self.count_refusal(class, why);
    }

    fn miss(&mut self, class: ClassId, age: Nanos, now: Nanos) {
        self.judge.complete_as_miss(class, age);
        if let Discipline::Percentile(q) = &mut self.disc {
            q.report_miss(class, age, now);
        }
        let c = &mut self.classes[class];
        c.counts.fail += 1;
        c.failed.inc();
        self.publish_attainment(class);
    }

    /// A request of `class` ended: `Some(latency)` when its response head went to the
    /// client, `None` when it failed at the backend. Judged against the class's deadline.
    pub fn complete(&mut self, class: ClassId, latency: Option<Nanos>, now: Nanos) {
        let class = self.class_of(class);
        let Some(latency) = latency else {
            self.miss(class, 0, now);
            return;
        };
        let ok = self.judge.complete(class, latency);
        if let Discipline::Percentile(q) = &mut self.disc {
            q.feedback(Feedback::Completed { class, latency }, now);
        }
        let c = &mut self.classes[class];
        if ok {
            c.counts.s += 1;
            c.within.inc();
        } else {
            c.counts.fail += 1;
            c.failed.inc();
        }
        self.publish_attainment(class);
    }

    fn publish_attainment(&self, class: ClassId) {
        let c = &self.classes[class];
        c.attainment.set(attainment(c.counts, c.spec.percentile));
    }

    /// Rows of `show-classes`.
    pub fn view(&self) -> Vec<ClassView> {
        self.classes
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let (k, d) = (c.counts, self.judge.counts()[i]);
                ClassView {
                    name: c.spec.name.clone(),
                    percentile: c.spec.percentile,
                    deadline: c.spec.deadline.to_string(),
                    deadline_now_ns: self.judge.class_deadline(i),
                    n: k.n,
                    s: k.s,
                    fail: k.fail,
                    attainment: attainment(k, c.spec.percentile),
                    decision_attainment: attainment(d, c.spec.percentile),
                    queued: c.live,
                    queue_limit: c.spec.queue_limit,
                    queue_timeout_ns: c.spec.queue_timeout,
                    served_at_once: c.served_at_once,
                    served_from_queue: c.served_from_queue,
                    max_hold: match self.kind {
                        QueueKind::Percentile => c.spec.max_hold.to_string(),
                        _ => "off".to_string(),
                    },
                    served_by_max_hold: c.served_by_max_hold,
                    refused: REASONS
                        .iter()
                        .map(|r| (r.reason().to_string(), c.refused[*r as usize]))
                        .collect(),
                }
            })
            .collect()
    }

    /// `set-class NAME percentile|deadline VALUE`: applied to the next decision and the next
    /// completion. The deadline may not exceed the class's queue timeout.
    pub fn set_class(
        &mut self,
        name: &str,
        field: &str,
        value: &str,
    ) -> Result<String, SetClassError> {
        let Some(i) = self.classes.iter().position(|c| c.spec.name == name) else {
            return Err(SetClassError::UnknownClass {
                name: name.into(),
                known: self.classes.iter().map(|c| c.spec.name.clone()).collect(),
            });
        };
        match field {
            "percentile" => {
                let p: u32 = value
                    .parse()
                    .ok()
                    .filter(|p| (1..=100).contains(p))
                    .ok_or_else(|| SetClassError::BadValue {
                        field: "percentile",
                        value: value.into(),
                        why: "must be a whole number in 1..=100".into(),
                    })?;
                self.judge.set_percentile(i, p);
                if let Discipline::Percentile(q) = &mut self.disc {
                    q.set_percentile(i, p).expect("checked range and class");
                }
                self.classes[i].spec.percentile = p;
                self.publish_attainment(i);
                Ok(format!("{name} percentile {p}"))
            }
            "deadline" => {
                let d =
                    Deadline::parse(value, self.classes[i].spec.queue_timeout).map_err(|why| {
                        SetClassError::BadValue {
                            field: "deadline",
                            value: value.into(),
                            why,
                        }
                    })?;
                self.judge.set_class_deadline(i, d.fixed());
                if let Discipline::Percentile(q) = &mut self.disc {
                    q.set_class_deadline(i, d.fixed())
                        .expect("checked value and class");
                }
                self.classes[i].spec.deadline = d;
                Ok(format!("{name} deadline {d}"))
            }
            other => Err(SetClassError::UnknownField {
                field: other.into(),
            }),
        }
    }

    /// A reloaded configuration. The same classes (names, order), queue limits and
    /// discipline: settings updated in place, waiting requests stay. Otherwise the queue is rebuilt: classes that
    /// still exist (by name) keep their counters and series, removed classes lose theirs,
    /// and the requests waiting are released (refused `reload`, a failure of their class;
    /// the auto deadline's running mean starts again).
    /// Returns what changed, for the log.
    pub fn reconfigure(&mut self, set: &ClassSet, total_limit: usize, now: Nanos) -> Vec<String> {
        let same = self.kind == set.queue
            && self.classes.len() == set.specs.len()
            && self
                .classes
                .iter()
                .zip(&set.specs)
                .all(|(c, s)| c.spec.name == s.name && c.spec.queue_limit == s.queue_limit)
            && self.total_limit == total_limit;
        if same {
            let mut notes = Vec::new();
            for (i, s) in set.specs.iter().enumerate() {
                if self.classes[i].spec != *s {
                    notes.push(format!("class {} settings changed", s.name));
                }
                self.judge.set_percentile(i, s.percentile);
                self.judge.set_class_deadline(i, s.deadline.fixed());
                if let Discipline::Percentile(q) = &mut self.disc {
                    let _ = q.set_percentile(i, s.percentile);
                    let _ = q.set_class_deadline(i, s.deadline.fixed());
                    let _ = q.set_max_hold(i, s.max_hold);
                }
                self.classes[i].spec = s.clone();
            }
            return notes;
        }
        self.rebuild(set, total_limit, now)
    }

    fn rebuild(&mut self, set: &ClassSet, total_limit: usize, now: Nanos) -> Vec<String> {
        let mut next = RequestQueue::new(set, total_limit, self.metrics.clone());
        next.generation = self.generation + 1;
        let mut notes = vec![format!(
            "discipline {} with {} classes",
            set.queue.name(),
            set.specs.len()
        )];
        let mut carried: Vec<JudgeCounts> = vec![JudgeCounts::default(); set.specs.len()];
        for (i, c) in self.classes.iter().enumerate() {
            match set.index_of(&c.spec.name) {
                Some(j) => {
                    carried[j] = self.judge.counts()[i];
                    let n = &mut next.classes[j];
                    n.counts = c.counts;
                    n.refused = c.refused;
                    n.served_at_once = c.served_at_once;
                    n.served_from_queue = c.served_from_queue;
                    n.served_by_max_hold = c.served_by_max_hold;
                }
                None => {
                    notes.push(format!("class {} removed", c.spec.name));
                    let reasons: Vec<&str> = REASONS.iter().map(|r| r.reason()).collect();
                    self.metrics.remove(&c.spec.name, &reasons);
                }
            }
        }
        // Waiting requests are released (refused `reload`): each is a failure of its class.
        for t in self.disc.q().reset() {
            if t.tx.is_closed() {
                continue;
            }
            let name = &self.classes[t.class].spec.name;
            if let Some(j) = set.index_of(name) {
                carried[j].fail += 1;
                let c = &mut next.classes[j];
                c.counts.fail += 1;
                c.refused[QueueRefusal::Reload as usize] += 1;
                c.failed.inc();
            }
        }
        for (j, k) in carried.into_iter().enumerate() {
            next.judge.restore_counts(j, k);
            if let Discipline::Percentile(q) = &mut next.disc {
                let _ = q.restore_counts(j, k, now);
            }
            let c = &next.classes[j];
            c.queue_length.set(c.live as i64);
            next.publish_attainment(j);
        }
        *self = next;
        notes
    }
}

/// `S / (N·P/100)`; 0 while N = 0.
fn attainment(k: JudgeCounts, p: u32) -> f64 {
    if k.n == 0 {
        0.0
    } else {
        k.s as f64 * 100.0 / (k.n as f64 * p as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classes::{ClassConf, HeaderRule, QueueBounds};
    use netsched_core::qdisc::percentile::MaxHold;
    use netsched_core::{MS, SEC};

    fn set(queue: QueueKind, ps: &[u32], class_limit: Option<usize>) -> ClassSet {
        let confs: Vec<ClassConf> = ps
            .iter()
            .enumerate()
            .map(|(i, &p)| ClassConf {
                name: format!("c{i}"),
                percentile: Some(p),
                deadline: Some("10ms".into()),
                sources: Vec::new(),
                header: Some(HeaderRule {
                    name: "x-class".into(),
                    value: format!("c{i}"),
                }),
                path_prefix: None,
                client_subject: None,
                queue_limit: class_limit,
                queue_timeout: None,
                max_hold: None,
            })
            .collect();
        let b = QueueBounds {
            queue_limit: 1000,
            queue_timeout: SEC,
        };
        ClassSet::build(queue, &confs, None, b).unwrap()
    }

    fn metrics() -> ClassMetrics {
        ClassMetrics::register(&mut Registry::default())
    }

    fn key() -> FlowKey {
        let a = "10.0.0.1".parse().unwrap();
        FlowKey::new(a, 0, a, 0)
    }

    /// One server slot, `slots` completions: each freed slot goes to the discipline's choice,
    /// whose request then takes `service` ns. Returns the classes served, in order.
    fn drain(q: &mut RequestQueue<u32>, slots: usize, service: Nanos) -> Vec<ClassId> {
        let mut now = 0;
        let mut served = Vec::new();
        for _ in 0..slots {
            let Some(t) = q.next_waiter(now) else { break };
            let class = t.class;
            q.hand(7, now).unwrap();
            now += service;
            q.complete(class, Some(service), now);
            served.push(class);
        }
        served
    }

    /// A flood from class 0 (the lowest target) leaves class 1 its share under the
    /// percentile queue (P0's, N1·P1 / ΣN·P of the slots, from the first few on) — and
    /// nothing under FIFO, where it waits behind the flood — and its own queue_limit refuses
    /// the flood's excess (counted by class and reason) while class 1 still gets in.
    #[test]
    fn a_flood_from_one_class_leaves_the_others_their_share() {
        for (kind, want_fair) in [(QueueKind::Percentile, true), (QueueKind::Fifo, false)] {
            let mut q = RequestQueue::<u32>::new(&set(kind, &[50, 90], Some(100)), 1000, metrics());
            let mut rxs = Vec::new();
            for _ in 0..150 {
                if let Ok(rx) = q.enqueue(0, key(), None, 0) {
                    rxs.push(rx);
                }
            }
            for _ in 0..20 {
                rxs.push(q.enqueue(1, key(), None, 0).expect("class 1 is not full"));
            }
            let v = q.view();
            assert_eq!(v[0].queued, 100);
            assert_eq!(v[0].refused[1], ("class_queue_full".to_string(), 50));
            assert_eq!(v[0].n, 150, "refused requests count in N");
            assert_eq!(v[0].fail, 50);
            // 40 slots: 2 ms each, deadline 10 ms (all on time, the order is what differs).
            let served = drain(&mut q, 40, 2 * MS);
            let c1 = served.iter().filter(|&&c| c == 1).count();
            if want_fair {
                // P0 equalises S/(N·P): with every request on time, class 1's share of the
                // slots is N1·P1 / (N0·P0 + N1·P1), N over the admitted requests (the 50
                // refused do not raise the flood's priority).
                let share = 40.0 * (20.0 * 90.0) / (100.0 * 50.0 + 20.0 * 90.0);
                assert!(
                    (c1 as f64 - share).abs() <= 1.0,
                    "class 1 got {c1} of the first 40 slots, its share is {share:.1}"
                );
                let first = served.iter().position(|&c| c == 1).unwrap();
                assert!(first <= 5, "class 1 first served at slot {first}");
            } else {
                assert_eq!(c1, 0, "FIFO: class 1 waits behind the flood");
            }
            let v = q.view();
            for r in &v {
                assert_eq!(r.n, r.s + r.fail + r.queued as u64, "nothing lost: {r:?}");
            }
        }
    }

    /// A class P0's rule leaves waiting (class 0 below its target forever: every answer
    /// late; class 1 tied at 0 loses to the lower index) is served once its oldest waiter
    /// has waited its `max_hold`, and the hand-over is counted for it in show-classes and
    /// /metrics; with `max_hold = "off"` it waits for as long as class 0 has requests.
    #[test]
    fn max_hold_serves_a_class_the_rule_leaves_waiting_and_counts_it() {
        for (hold, want) in [(MaxHold::Off, None), (MaxHold::Fixed(50 * MS), Some(5))] {
            let mut s = set(QueueKind::Percentile, &[90, 50], None);
            s.specs[1].max_hold = hold;
            let mut reg = Registry::default();
            let m = ClassMetrics::register(&mut reg);
            let mut q = RequestQueue::<u32>::new(&s, 1000, m.clone());
            let mut rxs = vec![q.enqueue(1, key(), None, 0).unwrap()];
            for _ in 0..30 {
                rxs.push(q.enqueue(0, key(), None, 0).unwrap());
            }
            let mut now = 0;
            let mut served_1_at = None;
            for slot in 0..20 {
                let class = q.next_waiter(now).unwrap().class;
                q.hand(7, now).unwrap();
                if class == 1 {
                    served_1_at = Some(slot);
                }
                now += 10 * MS;
                q.complete(class, Some(20 * MS), now);
            }
            assert_eq!(served_1_at, want, "{hold}");
            let v = q.view();
            let by_hold = want.is_some() as u64;
            assert_eq!(v[1].served_by_max_hold, by_hold);
            assert_eq!(v[0].served_by_max_hold, 0);
            assert_eq!(v[1].max_hold, hold.to_string());
            let l = ClassLabel { class: "c1".into() };
            assert_eq!(m.max_hold_served.get_or_create(&l).get(), by_hold);
        }
    }

    /// Strict priority serves class 0 first whatever came first; a waiter that gives up is
    /// counted once (N = S + fail + queued) and skipped when it reaches the head.
    #[test]
    fn priority_order_and_waiters_that_give_up() {
        let mut q =
            RequestQueue::<u32>::new(&set(QueueKind::Priority, &[50, 90], None), 3, metrics());
        let mut a = q.enqueue(1, key(), None, 0).unwrap();
        let b = q.enqueue(1, key(), None, 0).unwrap();
        let mut c = q.enqueue(0, key(), None, 0).unwrap();
        assert_eq!(
            q.enqueue(0, key(), None, 0).unwrap_err(),
            QueueRefusal::QueueFull
        );
        // The second class-1 waiter times out: counted, its ticket dead.
        q.give_up(1, 0, QueueRefusal::QueueTimeout, 5 * MS);
        drop(b);
        assert_eq!(q.len(), 2);
        assert_eq!(q.next_waiter(0).unwrap().class, 0);
        q.hand(1, 0).unwrap();
        assert_eq!(c.try_recv().unwrap(), 1);
        assert_eq!(q.next_waiter(0).unwrap().class, 1);
        q.hand(2, 0).unwrap();
        assert_eq!(a.try_recv().unwrap(), 2);
        assert!(q.next_waiter(0).is_none(), "the dead ticket is skipped");
        let v = q.view();
        assert_eq!((v[1].n, v[1].fail, v[1].queued), (2, 1, 0));
        assert_eq!(v[1].refused[3], ("queue_timeout".to_string(), 1));
        assert_eq!(v[0].refused[0], ("queue_full".to_string(), 1));
    }

    /// Dead tickets never fill the discipline: past SLACK × the limit they are withdrawn.
    #[test]
    fn dead_tickets_are_withdrawn_when_they_would_fill_the_queue() {
        let mut q = RequestQueue::<u32>::new(&set(QueueKind::Fifo, &[50], None), 2, metrics());
        for i in 0..50 {
            let rx = q.enqueue(0, key(), None, i).unwrap();
            q.give_up(0, i, QueueRefusal::ClientGone, i);
            drop(rx);
        }
        assert!(q.enqueue(0, key(), None, 60).is_ok());
        assert_eq!(q.len(), 1);
        assert_eq!(q.view()[0].n, 51);
    }

    /// set-class: applied to the next completion; unknown names, fields and values are
    /// refused with the reason.
    #[test]
    fn set_class_changes_and_refusals() {
        let mut q =
            RequestQueue::<u32>::new(&set(QueueKind::Percentile, &[50, 90], None), 10, metrics());
        assert_eq!(
            q.set_class("c1", "percentile", "70").unwrap(),
            "c1 percentile 70"
        );
        assert_eq!(q.view()[1].percentile, 70);
        assert_eq!(
            q.set_class("c1", "deadline", "20ms").unwrap(),
            "c1 deadline 20ms"
        );
        q.arrive_served(1, 0);
        q.complete(1, Some(15 * MS), 0);
        assert_eq!(q.view()[1].s, 1, "15 ms within the new 20 ms");
        assert_eq!(
            q.set_class("c1", "deadline", "auto").unwrap(),
            "c1 deadline auto"
        );
        let e = q
            .set_class("gold", "percentile", "70")
            .unwrap_err()
            .to_string();
        assert_eq!(e, "no class \"gold\" (classes: c0, c1)");
        let e = q
            .set_class("c1", "percentile", "0")
            .unwrap_err()
            .to_string();
        assert!(e.contains("percentile \"0\""), "{e}");
        let e = q.set_class("c1", "deadline", "2s").unwrap_err().to_string();
        assert!(e.contains("deadline \"2s\""), "{e}");
        let e = q.set_class("c1", "weight", "2").unwrap_err().to_string();
        assert!(e.contains("unknown field \"weight\""), "{e}");
    }

    /// A reload with the same classes keeps everything; one that rebuilds keeps the counters
    /// of the classes that remain (by name) and releases the waiters, counted as `reload`.
    #[test]
    fn reload_keeps_the_counters_of_classes_that_remain() {
        let mut q =
            RequestQueue::<u32>::new(&set(QueueKind::Percentile, &[50, 90], None), 10, metrics());
        q.arrive_served(0, 0);
        q.complete(0, Some(MS), 0);
        let rx = q.enqueue(1, key(), None, 0).unwrap();
        assert!(
            q.reconfigure(&set(QueueKind::Percentile, &[60, 90], None), 10, 0)
                .len()
                == 1
        );
        assert_eq!(q.generation(), 0);
        assert_eq!(q.len(), 1, "same classes: the waiter stays");
        // Three classes now (c0, c1, c2): rebuilt.
        q.reconfigure(&set(QueueKind::Priority, &[60, 90, 40], None), 10, 0);
        assert_eq!(q.generation(), 1);
        drop(rx);
        let v = q.view();
        assert_eq!((v[0].n, v[0].s), (1, 1));
        assert_eq!((v[1].n, v[1].fail, v[1].queued), (1, 1, 0));
        assert_eq!(v[1].refused[5], ("reload".to_string(), 1));
        assert_eq!(v[2].n, 0);
        assert!(q.is_empty());
    }
}

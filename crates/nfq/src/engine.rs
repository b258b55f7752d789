//! The daemon's decision engine: what happens to each queued packet. No sockets and no clock
//! (time is `now`), so every rule below is unit-tested without root.
//!
//! ## What a request is, and when it completes
//! - **Request**: a packet to the service (hook LOCAL_IN, destination port in the service's
//!   ports, destination address if one is configured) that carries payload (TCP), or any
//!   datagram (UDP), on a flow with no request outstanding. Handshakes (SYN), pure ACKs,
//!   FIN/RST without data pass at once — they are not work for the server, and holding them
//!   would only stall TCP.
//! - A flow is the 5-tuple. One request per flow is outstanding at a time (HTTP/1.1 without
//!   pipelining, as in the thesis's client): while a request is **held**, every later packet
//!   of that flow (more request segments, ACKs, FIN) is held behind it and released with it,
//!   so the daemon never reorders a flow; once the request is **inside the server**, further
//!   payload of that flow (a request's later segments) passes at once.
//! - **Completion**: the first response packet carrying payload (hook LOCAL_OUT, source port
//!   of the service, the flow reversed). For a small-object web service that is when the
//!   server has done its work for the request (parsed it, read the file, written the response
//!   into the socket); the transfer of a large body after that costs the link, not the
//!   server, so it should not hold a budget slot. The thesis's `per_fail_check` likewise looks
//!   at the response on the output path (P0 §3, `ip_finish_output`). A server FIN or RST on a
//!   flow with a request inside completes it as a failure (aborted).
//! - **Response time** is measured from the request's arrival at the daemon (before any
//!   holding) to completion; success = within the deadline. The deadline is fixed, `auto`:
//!   the running mean of all response times since start/reset (P0 §4: "the deadline is the
//!   mean processing time"), or `auto_quantile`: the running `q`-quantile of them with
//!   `q = Σ N_i·P_i / Σ N_i` (beyond the thesis; docs/nfq.md), kept in the core's bounded
//!   `LatencyQuantile` histogram.
//! - **Budget**: at most `budget` requests inside the server at once. With no budget every
//!   request goes through the discipline and leaves it at once (nothing queues). With one, a
//!   request waits while the server is full, and each completion releases the next request by
//!   the discipline's rule.
//!
//! ## Expiry and bounds
//! A request inside the server with no response after `request_timeout` counts as failed and
//! frees its slot (a response lost or bypassed must not leak the budget). An idle flow is
//! forgotten after `flow_idle_timeout`. Held packets, flows and table entries are bounded;
//! past a bound traffic passes at once and is counted (`passed_over_limit`,
//! `untracked_flows`) — fail-open, like the kernel side.
//!
//! Cost per packet: one hash-map lookup, one header parse, O(classes) in the discipline.

use crate::address_table::AddressTable;
use crate::command_error::CommandError;
#[cfg(test)]
use crate::config::parse_cidr;
use crate::config::{Cidr, Config, Deadline, DisciplineKind};
use crate::discipline::{HeldRequest, Scheduler};
use crate::engine_error::EngineError;
use crate::netlink::{NF_INET_LOCAL_IN, NF_INET_LOCAL_OUT};
use crate::packet::{self, FiveTuple, PacketInfo, TCP_FIN, TCP_RST, TCP_SYN};
use netsched_core::qdisc::percentile::{JudgeCounts, PercentileJudge};
use netsched_core::qdisc::{DropReason, Verdict};
use netsched_core::Nanos;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::net::IpAddr;

/// The outstanding request of a flow. `missed`: its miss was already reported (early miss).
#[derive(Debug, Clone, Copy, PartialEq)]
enum FlowState {
    Idle,
    Held {
        class: usize,
        arrived: Nanos,
        missed: bool,
        /// The request's arrival number and first packet (for a `max_hold` release).
        seq: u64,
        first_id: u32,
    },
    InServer {
        class: usize,
        arrived: Nanos,
        missed: bool,
        /// When the daemon let it into the server.
        released: Nanos,
    },
}

#[derive(Debug)]
struct Flow {
    state: FlowState,
    /// TCP: end of the highest client payload seen (seq + len), to tell a retransmitted
    /// request segment (already counted) from a new request.
    client_seq_end: Option<u32>,
    /// Packets of this flow that arrived after its held request (released with it).
    follow: Vec<u32>,
    last_seen: Nanos,
}

/// Per-class counters kept by the engine beside the judge's N, S, fail (all disciplines, so
/// FIFO runs report them too).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ClassCounters {
    pub timeouts: u64,
    pub completed: u64,
    /// Completed by a response (not aborted / timed out): the mean response time's base.
    pub responded: u64,
    pub latency_sum_ns: u128,
}

/// Engine-wide counters.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Counters {
    pub packets: u64,
    pub requests: u64,
    /// Packets accepted without holding (handshakes, ACKs, responses, other traffic).
    pub passed_at_once: u64,
    pub held: u64,
    pub released: u64,
    /// Not ours (protocol, port, address, hook) or unparsable.
    pub other: u64,
    /// Passed because a bound (held packets) was reached.
    pub passed_over_limit: u64,
    /// New flows not tracked because `max_flows` was reached.
    pub untracked_flows: u64,
    /// Requests the discipline refused (queue limit), passed at once.
    pub discipline_drops_passed: u64,
    pub aborted: u64,
    pub expired_flows: u64,
    /// Misses reported when a request's age passed the deadline (before its response).
    pub early_misses: u64,
    /// Request segments seen again (TCP retransmissions) on an idle flow: passed, not counted.
    pub retransmissions: u64,
    /// Requests released because they were held longer than `max_hold`.
    pub max_hold_releases: u64,
    /// Queue entries of requests already released by `max_hold`, skipped at dequeue.
    pub stale_skipped: u64,
    /// Packets passed while stopped.
    pub passed_stopped: u64,
}

/// Everything `status` shows, per class.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ClassRow {
    pub class: usize,
    pub name: String,
    pub n: u64,
    pub s: u64,
    pub fail: u64,
    pub percentile: u32,
    /// The thesis's integer priority `N·P/S × 10` (Table 14; higher = served first), from the
    /// discipline when it is Percentile.
    pub priority: Option<f64>,
    /// `S / (N · P)` — 1.0 = exactly at target.
    pub attainment: f64,
    pub queue_len: u64,
    pub held_packets: u64,
    pub completed: u64,
    pub timeouts: u64,
    /// Mean response time of the class's answered requests, ns.
    pub mean_response_ns: u64,
}

/// The `status` document.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Status {
    pub running: bool,
    pub discipline: String,
    pub deadline_ns: u64,
    /// True for both running modes (`auto`, `auto_quantile`).
    pub deadline_auto: bool,
    /// "fixed", "auto" (running mean) or "auto_quantile".
    #[serde(default)]
    pub deadline_mode: String,
    /// `auto_quantile`: the quantile the deadline tracks now (`Σ N·P / Σ N`, a fraction).
    #[serde(default)]
    pub deadline_quantile: Option<f64>,
    pub budget: Option<usize>,
    pub in_server: usize,
    /// Mean time a request spent inside the server (release → first response byte), ns:
    /// the thesis's "mean processing time" (P0 §4).
    #[serde(default)]
    pub mean_server_ns: u64,
    /// The `max_hold` bound in force now, ns: `[limits] max_hold`, or with `max_hold_factor`
    /// that many recent server times, clamped (docs/nfq.md).
    #[serde(default)]
    pub max_hold_ns: u64,
    /// `[limits] max_hold_factor`, when the bound follows the server.
    #[serde(default)]
    pub max_hold_factor: Option<f64>,
    pub held_packets: usize,
    pub flows: usize,
    pub default_class: String,
    pub classes: Vec<ClassRow>,
    pub table: Vec<(String, String)>,
    pub counters: Counters,
    /// Socket-level facts filled in by the daemon (ENOBUFS, kernel queue drops).
    #[serde(default)]
    pub kernel: KernelCounters,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct KernelCounters {
    pub enobufs: u64,
    pub rcvbuf_bytes: u64,
    /// From /proc/net/netfilter/nfnetlink_queue: packets the kernel could not queue
    /// (queue full → accepted by fail-open) and could not send to us.
    pub queue_dropped: u64,
    pub user_dropped: u64,
    pub queue_total: u64,
    /// Packets that matched our iptables rules since start, and those of them the daemon
    /// never received (let through unscheduled by fail-open: queue or socket buffer full).
    pub rule_matched: u64,
    pub received: u64,
    pub skipped_fail_open: u64,
}

pub struct Engine {
    pub cfg: Config,
    sched: Scheduler,
    table: AddressTable,
    flows: HashMap<FiveTuple, Flow>,
    running: bool,
    in_server: usize,
    held_packets: usize,
    held_per_class: Vec<u64>,
    seq: u64,
    deadline: Nanos,
    per_class: Vec<ClassCounters>,
    /// N, S, fail per class and the deadline in every mode: the core's judge, the same code
    /// the Percentile discipline judges with (here for every discipline).
    judge: PercentileJudge,
    server_time_sum: u128,
    server_time_count: u64,
    /// Recent mean time inside the server (release → first response), ns, an exponentially
    /// weighted mean with weight [`SERVER_TIME_EWMA_WEIGHT`] per response; 0 before the first.
    server_time_recent: f64,
    pub counters: Counters,
}

/// Weight of one response in [`Engine::recent_server_time`]: 1/64, so the estimate follows
/// the server within ≈ 64 responses (tens of ms to a fraction of a second at 300–1500
/// responses/s) and one slow response moves it by under 2%.
pub const SERVER_TIME_EWMA_WEIGHT: f64 = 1.0 / 64.0;

impl Engine {
    pub fn new(cfg: Config) -> Result<Self, EngineError> {
        cfg.validate()?;
        let deadline = match cfg.deadline {
            Deadline::Fixed(d) => d,
            Deadline::Auto { initial } | Deadline::AutoQuantile { initial } => initial,
        };
        let ps: Vec<u32> = cfg.classes.iter().map(|c| c.percentile).collect();
        let sched = Scheduler::new(cfg.discipline, &ps, &cfg.deadline, cfg.limits.queue_limit)
            .map_err(|source| EngineError::Discipline {
                discipline: cfg.discipline.as_str(),
                source,
            })?;
        let mut table = AddressTable::new(cfg.limits.max_table_entries);
        for (cidr, class) in &cfg.table {
            table.insert(*cidr, *class)?;
        }
        let n = cfg.classes.len();
        Ok(Engine {
            sched,
            table,
            flows: HashMap::new(),
            running: true,
            in_server: 0,
            held_packets: 0,
            held_per_class: vec![0; n],
            seq: 0,
            deadline,
            per_class: vec![ClassCounters::default(); n],
            judge: PercentileJudge::new(&ps, cfg.deadline.core()).map_err(EngineError::Deadline)?,
            server_time_sum: 0,
            server_time_count: 0,
            server_time_recent: 0.0,
            counters: Counters::default(),
            cfg,
        })
    }

    pub fn held_packets(&self) -> usize {
        self.held_packets
    }
    pub fn in_server(&self) -> usize {
        self.in_server
    }
    pub fn deadline(&self) -> Nanos {
        self.deadline
    }

    /// Recent mean time a request spends inside the server (release → first response), ns;
    /// `None` before the first response. Kept across `reset` (it describes the server, not
    /// the counters the thesis's `perReset` clears).
    pub fn recent_server_time(&self) -> Option<Nanos> {
        (self.server_time_recent > 0.0).then_some(self.server_time_recent as Nanos)
    }

    /// The `max_hold` bound in force now. Fixed: `[limits] max_hold`. With `max_hold_factor`
    /// k: `k ×` [`Self::recent_server_time`], clamped to `[MAX_HOLD_AUTO_MIN, max_hold]`
    /// (`max_hold` itself until the first response).
    pub fn max_hold(&self) -> Nanos {
        let ceiling = self.cfg.limits.max_hold;
        match (self.cfg.limits.max_hold_factor, self.recent_server_time()) {
            (Some(k), Some(t)) => {
                let floor = crate::config::MAX_HOLD_AUTO_MIN.min(ceiling);
                ((k * t as f64) as Nanos).clamp(floor, ceiling)
            }
            _ => ceiling,
        }
    }
    pub fn is_running(&self) -> bool {
        self.running
    }

    /// Decide on one queued packet. Packet ids to accept now are appended to `accept`
    /// (possibly including earlier held packets this one's completion released).
    pub fn on_packet(&mut self, id: u32, hook: u8, head: &[u8], now: Nanos, accept: &mut Vec<u32>) {
        self.counters.packets += 1;
        let info = match packet::parse(head) {
            Some(i) if i.protocol == self.cfg.service.protocol => i,
            _ => {
                self.counters.other += 1;
                accept.push(id);
                return;
            }
        };
        if !self.running {
            self.counters.passed_stopped += 1;
            accept.push(id);
            return;
        }
        let ports = &self.cfg.service.ports;
        let addr_ok = |a: IpAddr| self.cfg.service.address.is_none_or(|s| s == a);
        if hook == NF_INET_LOCAL_IN && ports.contains(&info.dst_port) && addr_ok(info.dst) {
            self.inbound(id, &info, now, accept);
        } else if hook == NF_INET_LOCAL_OUT && ports.contains(&info.src_port) && addr_ok(info.src) {
            self.outbound(&info, now, accept);
            self.counters.passed_at_once += 1;
            accept.push(id);
        } else {
            self.counters.other += 1;
            accept.push(id);
        }
    }

    fn inbound(&mut self, id: u32, info: &PacketInfo, now: Nanos, accept: &mut Vec<u32>) {
        let key = FiveTuple {
            client: info.src,
            client_port: info.src_port,
            server: info.dst,
            server_port: info.dst_port,
            protocol: info.protocol,
        };
        let is_request_packet = info.protocol == packet::PROTO_UDP
            || (info.payload_len > 0 && info.flags & (TCP_SYN | TCP_RST) == 0);
        if !self.flows.contains_key(&key) {
            if !is_request_packet {
                self.counters.passed_at_once += 1;
                accept.push(id);
                return;
            }
            if self.flows.len() >= self.cfg.limits.max_flows {
                self.counters.untracked_flows += 1;
                self.counters.passed_at_once += 1;
                accept.push(id);
                return;
            }
            self.flows.insert(
                key,
                Flow {
                    state: FlowState::Idle,
                    client_seq_end: None,
                    follow: Vec::new(),
                    last_seen: now,
                },
            );
        }
        let over_limit = self.held_packets >= self.cfg.limits.max_held_packets;
        let flow = self.flows.get_mut(&key).expect("inserted above");
        flow.last_seen = now;
        // A TCP segment whose payload ends at or before what this flow already sent is a
        // retransmission (RFC 9293 §3.10.7.4: sequence space comparison modulo 2^32): not a
        // new request. Without this, a request retransmitted after its response would count
        // as a phantom request and hold a budget slot until request_timeout.
        let mut retransmission = false;
        if info.protocol == packet::PROTO_TCP && info.payload_len > 0 {
            let end = info.seq.wrapping_add(info.payload_len);
            match flow.client_seq_end {
                Some(prev) if (end.wrapping_sub(prev) as i32) <= 0 => retransmission = true,
                _ => flow.client_seq_end = Some(end),
            }
        }
        match flow.state {
            FlowState::Held { class, .. } => {
                // Keep the flow's order: everything behind a held request waits with it.
                if over_limit {
                    self.counters.passed_over_limit += 1;
                    accept.push(id);
                } else {
                    flow.follow.push(id);
                    self.held_packets += 1;
                    self.held_per_class[class] += 1;
                    self.counters.held += 1;
                }
            }
            FlowState::InServer { .. } => {
                if info.flags & TCP_RST != 0 {
                    self.finish(&key, now, Outcome::Aborted);
                }
                self.counters.passed_at_once += 1;
                accept.push(id);
            }
            FlowState::Idle => {
                if !is_request_packet || retransmission {
                    if retransmission {
                        self.counters.retransmissions += 1;
                    }
                    self.counters.passed_at_once += 1;
                    accept.push(id);
                    return;
                }
                let class = self
                    .table
                    .lookup(info.src)
                    .unwrap_or(self.cfg.default_class);
                self.counters.requests += 1;
                self.judge.arrival(class);
                if over_limit {
                    self.counters.passed_over_limit += 1;
                    flow.state = FlowState::InServer {
                        class,
                        arrived: now,
                        missed: false,
                        released: now,
                    };
                    self.in_server += 1;
                    accept.push(id);
                    return;
                }
                self.seq += 1;
                let seq = self.seq;
                let item = HeldRequest {
                    packet_id: id,
                    flow: key,
                    arrived: now,
                    seq: self.seq,
                    bytes: info.total_len,
                    class,
                };
                flow.state = FlowState::Held {
                    class,
                    arrived: now,
                    missed: false,
                    seq,
                    first_id: id,
                };
                self.held_packets += 1;
                self.held_per_class[class] += 1;
                self.counters.held += 1;
                match self.sched.enqueue(class, item, now) {
                    Verdict::Queued => {}
                    Verdict::Dropped { item, reason } => {
                        self.counters.discipline_drops_passed += 1;
                        self.release(item, now, accept);
                        let _ = reason;
                    }
                    Verdict::QueuedEvicting { evicted, reason } => {
                        self.counters.discipline_drops_passed += 1;
                        let _: DropReason = reason;
                        self.release(evicted, now, accept);
                    }
                }
                self.release_while_allowed(now, accept);
            }
        }
    }

    fn outbound(&mut self, info: &PacketInfo, now: Nanos, accept: &mut Vec<u32>) {
        let key = FiveTuple {
            client: info.dst,
            client_port: info.dst_port,
            server: info.src,
            server_port: info.src_port,
            protocol: info.protocol,
        };
        let Some(flow) = self.flows.get_mut(&key) else {
            return;
        };
        flow.last_seen = now;
        if let FlowState::InServer { .. } = flow.state {
            if info.payload_len > 0 || info.protocol == packet::PROTO_UDP {
                self.finish(&key, now, Outcome::Responded);
                self.release_while_allowed(now, accept);
            } else if info.flags & (TCP_FIN | TCP_RST) != 0 {
                self.finish(&key, now, Outcome::Aborted);
                self.release_while_allowed(now, accept);
            }
        }
    }

    /// Complete the request inside the server on flow `key`.
    fn finish(&mut self, key: &FiveTuple, now: Nanos, outcome: Outcome) {
        let Some(flow) = self.flows.get_mut(key) else {
            return;
        };
        let FlowState::InServer {
            class,
            arrived,
            missed,
            released,
        } = flow.state
        else {
            return;
        };
        flow.state = FlowState::Idle;
        self.in_server = self.in_server.saturating_sub(1);
        let latency = now.saturating_sub(arrived);
        let c = &mut self.per_class[class];
        c.completed += 1;
        match outcome {
            Outcome::Responded => {
                c.latency_sum_ns += latency as u128;
                c.responded += 1;
                let t = now.saturating_sub(released);
                self.server_time_sum += t as u128;
                self.server_time_count += 1;
                self.server_time_recent = if self.server_time_recent > 0.0 {
                    self.server_time_recent
                        + SERVER_TIME_EWMA_WEIGHT * (t as f64 - self.server_time_recent)
                } else {
                    (t as f64).max(1.0)
                };
                if !missed {
                    self.report(class, latency, now);
                }
            }
            Outcome::Aborted | Outcome::TimedOut => {
                if outcome == Outcome::TimedOut {
                    c.timeouts += 1;
                } else {
                    self.counters.aborted += 1;
                }
                if !missed {
                    // A miss; its latency is unknown, so the age now stands for it.
                    self.report_miss(class, latency.max(self.deadline.saturating_add(1)), now);
                }
            }
        }
    }

    /// The deadline before any completion: the fixed one, or the modes' `initial`.
    fn initial_deadline(&self) -> Nanos {
        match self.cfg.deadline {
            Deadline::Fixed(d) => d,
            Deadline::Auto { initial } | Deadline::AutoQuantile { initial } => initial,
        }
    }

    fn refresh_deadline(&mut self) {
        self.deadline = self
            .judge
            .deadline()
            .unwrap_or_else(|| self.initial_deadline())
            .max(1);
    }

    /// Judge a request's outcome (S or fail) and tell the discipline — once per request.
    fn report(&mut self, class: usize, latency: Nanos, now: Nanos) {
        self.judge.complete(class, latency);
        self.sched.completed(class, latency, now);
        self.refresh_deadline();
    }

    /// A request that failed whatever the deadline (aborted, timed out, or early miss): its
    /// age stands for its latency.
    fn report_miss(&mut self, class: usize, age: Nanos, now: Nanos) {
        self.judge.complete_as_miss(class, age);
        self.sched.completed(class, age, now);
        self.refresh_deadline();
    }

    /// Early miss: a request still held or inside the server whose age passed the deadline
    /// can no longer succeed; report the miss now instead of when its late response leaves.
    fn report_early_misses(&mut self, now: Nanos) {
        let deadline = self.deadline;
        let mut missed = Vec::new();
        for f in self.flows.values_mut() {
            match &mut f.state {
                FlowState::Held {
                    class,
                    arrived,
                    missed: m,
                    ..
                }
                | FlowState::InServer {
                    class,
                    arrived,
                    missed: m,
                    ..
                } if !*m && now.saturating_sub(*arrived) > deadline => {
                    *m = true;
                    missed.push((*class, now - *arrived));
                }
                _ => {}
            }
        }
        self.counters.early_misses += missed.len() as u64;
        for (class, age) in missed {
            self.report_miss(class, age, now);
        }
    }

    /// Release a request the discipline handed out. An item whose flow no longer holds it
    /// (released earlier by `max_hold`) is stale: skipped, nothing accepted twice.
    fn release(&mut self, item: HeldRequest, now: Nanos, accept: &mut Vec<u32>) {
        let class = item.class;
        let Some(flow) = self.flows.get_mut(&item.flow) else {
            self.counters.stale_skipped += 1;
            return;
        };
        let missed = match flow.state {
            FlowState::Held { seq, missed, .. } if seq == item.seq => missed,
            _ => {
                self.counters.stale_skipped += 1;
                return;
            }
        };
        accept.push(item.packet_id);
        let n = 1 + flow.follow.len();
        accept.append(&mut flow.follow);
        flow.state = FlowState::InServer {
            class,
            arrived: item.arrived,
            missed,
            released: now,
        };
        flow.last_seen = now;
        self.in_server += 1;
        self.held_packets -= n;
        self.held_per_class[class] -= n as u64;
        self.counters.released += n as u64;
    }

    fn release_while_allowed(&mut self, now: Nanos, accept: &mut Vec<u32>) {
        while self.cfg.budget.is_none_or(|b| self.in_server < b) {
            match self.sched.dequeue(now) {
                Some(item) => self.release(item, now, accept),
                None => break,
            }
        }
    }

    /// Periodic work: request timeouts, idle-flow expiry. Call every few milliseconds.
    pub fn tick(&mut self, now: Nanos, accept: &mut Vec<u32>) {
        let rt = self.cfg.limits.request_timeout;
        let idle = self.cfg.limits.flow_idle_timeout;
        let timed_out: Vec<FiveTuple> = self
            .flows
            .iter()
            .filter(|(_, f)| {
                matches!(f.state, FlowState::InServer { arrived, .. } if now.saturating_sub(arrived) > rt)
            })
            .map(|(k, _)| *k)
            .collect();
        for k in &timed_out {
            self.finish(k, now, Outcome::TimedOut);
        }
        if self.cfg.early_miss {
            self.report_early_misses(now);
        }
        self.release_over_max_hold(now, accept);
        let before = self.flows.len();
        self.flows
            .retain(|_, f| !(f.state == FlowState::Idle && now.saturating_sub(f.last_seen) > idle));
        self.counters.expired_flows += (before - self.flows.len()) as u64;
        self.release_while_allowed(now, accept);
    }

    /// Safety bound beyond the thesis: a request held longer than `max_hold` is released
    /// whatever the discipline says (its queue entry becomes stale and is skipped later), so
    /// no class waits without bound — the P0 rule alone can freeze a class whose attainment
    /// sits above what the others reach (see `closed_loop_strong_holding_freezes_a_class_ratio`).
    fn release_over_max_hold(&mut self, now: Nanos, accept: &mut Vec<u32>) {
        let max_hold = self.max_hold();
        for f in self.flows.values_mut() {
            if let FlowState::Held {
                class,
                arrived,
                missed,
                first_id,
                ..
            } = f.state
            {
                if now.saturating_sub(arrived) > max_hold {
                    accept.push(first_id);
                    let n = 1 + f.follow.len();
                    accept.append(&mut f.follow);
                    f.state = FlowState::InServer {
                        class,
                        arrived,
                        missed,
                        released: now,
                    };
                    self.in_server += 1;
                    self.held_packets -= n;
                    self.held_per_class[class] -= n as u64;
                    self.counters.released += n as u64;
                    self.counters.max_hold_releases += 1;
                }
            }
        }
    }

    /// Release every held packet in arrival order and forget all flows (stop / shutdown).
    pub fn drain_all(&mut self, accept: &mut Vec<u32>) {
        let mut items = self.sched.reset();
        items.sort_by_key(|i| i.seq);
        for item in items {
            if let Some(flow) = self.flows.get_mut(&item.flow) {
                if matches!(flow.state, FlowState::Held { seq, .. } if seq == item.seq) {
                    accept.push(item.packet_id);
                    accept.append(&mut flow.follow);
                }
            }
        }
        // Anything still recorded as held (should be none) goes too.
        for f in self.flows.values_mut() {
            accept.append(&mut f.follow);
        }
        self.counters.released += self.held_packets as u64;
        self.flows.clear();
        self.held_packets = 0;
        self.held_per_class.iter_mut().for_each(|h| *h = 0);
        self.in_server = 0;
    }

    // ---- control verbs -------------------------------------------------------------------

    pub fn start(&mut self) {
        self.running = true;
    }

    pub fn stop(&mut self, accept: &mut Vec<u32>) {
        self.running = false;
        self.drain_all(accept);
    }

    /// Clear the address table and every counter (the thesis's `perReset`).
    pub fn reset(&mut self) {
        self.table.clear();
        self.per_class
            .iter_mut()
            .for_each(|c| *c = ClassCounters::default());
        self.counters = Counters::default();
        self.server_time_sum = 0;
        self.server_time_count = 0;
        self.sched.reset_counters();
        self.judge.reset();
        self.refresh_deadline();
    }

    pub fn set_percentile(&mut self, class: usize, p: i64) -> Result<(), EngineError> {
        let p = crate::config::validate_percentile(p)?;
        if class >= self.cfg.classes.len() {
            return Err(EngineError::NoSuchClass(class));
        }
        self.sched
            .set_percentile(class, p)
            .map_err(EngineError::Refused)?;
        self.judge.set_percentile(class, p);
        self.cfg.classes[class].percentile = p;
        Ok(())
    }

    /// Switching to `auto_quantile` starts its histogram empty (as the discipline does):
    /// the initial deadline holds until the next completion.
    pub fn set_deadline(&mut self, d: Deadline) -> Result<(), EngineError> {
        self.sched.set_deadline(&d).map_err(EngineError::Refused)?;
        self.judge
            .set_mode(d.core())
            .map_err(EngineError::Refused)?;
        self.cfg.deadline = d;
        self.refresh_deadline();
        Ok(())
    }

    pub fn set_budget(&mut self, b: Option<usize>, now: Nanos, accept: &mut Vec<u32>) {
        self.cfg.budget = b;
        self.release_while_allowed(now, accept);
    }

    pub fn add_ip(&mut self, cidr: Cidr, class: usize) -> Result<(), EngineError> {
        if class >= self.cfg.classes.len() {
            return Err(EngineError::NoSuchClass(class));
        }
        self.table.insert(cidr, class)
    }

    pub fn del_ip(&mut self, cidr: Cidr) -> Result<(), EngineError> {
        if !self.table.remove(cidr) {
            return Err(EngineError::NotInTable(cidr));
        }
        Ok(())
    }

    /// Everything `status` shows, copied (no formatting). Cost: O(classes + table entries).
    pub fn snapshot(&self) -> Snapshot {
        let mut s = self.snapshot_without_table();
        s.table = self.table.entries();
        s
    }

    /// [`snapshot`](Self::snapshot) without the address table — what the packet loop hands
    /// the control thread, which mirrors the table itself (only control commands change it).
    /// Cost: O(classes), no allocation per class beyond the copied vectors.
    pub fn snapshot_without_table(&self) -> Snapshot {
        let n = self.per_class.len();
        Snapshot {
            running: self.running,
            discipline: self.cfg.discipline,
            deadline_ns: self.deadline,
            deadline: self.cfg.deadline,
            quantile_weights: self.judge.quantile_weights(),
            budget: self.cfg.budget,
            in_server: self.in_server,
            server_time_sum: self.server_time_sum,
            server_time_count: self.server_time_count,
            max_hold_ns: self.max_hold(),
            max_hold_factor: self.cfg.limits.max_hold_factor,
            held_packets: self.held_packets,
            flows: self.flows.len(),
            default_class: self.cfg.default_class,
            percentiles: self.cfg.classes.iter().map(|c| c.percentile).collect(),
            per_class: self.per_class.clone(),
            judged: self.judge.counts().to_vec(),
            held_per_class: self.held_per_class.clone(),
            per_discipline: self.sched.class_brief(n),
            table: Vec::new(),
            counters: self.counters.clone(),
            socket: SocketCounters::default(),
        }
    }

    /// The status document (a snapshot, formatted here; the daemon formats in its control
    /// thread instead).
    pub fn status(&self) -> Status {
        let names: Vec<String> = self.cfg.classes.iter().map(|c| c.name.clone()).collect();
        self.snapshot().to_status(&names)
    }

    /// Apply one validated control command (the packet loop calls this between batches).
    /// Packets it releases go to `accept`.
    pub fn apply(
        &mut self,
        cmd: Command,
        now: Nanos,
        accept: &mut Vec<u32>,
    ) -> Result<Applied, CommandError> {
        let refused = |e: EngineError| CommandError::Refused {
            reason: e.to_string(),
        };
        Ok(match cmd {
            Command::Start => {
                self.start();
                Applied::Done
            }
            Command::Stop => {
                let before = accept.len();
                self.stop(accept);
                Applied::Released(accept.len() - before)
            }
            Command::Reset => {
                self.reset();
                Applied::Done
            }
            Command::Snapshot => Applied::Snapshot(Box::new(self.snapshot_without_table())),
            Command::SetPercentile { class, p } => {
                self.set_percentile(class, p as i64).map_err(refused)?;
                Applied::Done
            }
            Command::SetDeadline(d) => {
                self.set_deadline(d).map_err(refused)?;
                Applied::Done
            }
            Command::SetBudget(b) => {
                let before = accept.len();
                self.set_budget(b, now, accept);
                Applied::Released(accept.len() - before)
            }
            Command::AddIp { cidr, class } => {
                self.add_ip(cidr, class).map_err(refused)?;
                Applied::Done
            }
            Command::DelIp(cidr) => {
                self.del_ip(cidr).map_err(refused)?;
                Applied::Done
            }
        })
    }
}

/// A control verb, already parsed and validated by the control thread: all the packet loop
/// does with it is [`Engine::apply`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Command {
    Start,
    Stop,
    Reset,
    Snapshot,
    SetPercentile { class: usize, p: u32 },
    SetDeadline(Deadline),
    SetBudget(Option<usize>),
    AddIp { cidr: Cidr, class: usize },
    DelIp(Cidr),
}

/// What applying a [`Command`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Applied {
    Done,
    /// Held packets released by it (stop, a larger budget).
    Released(usize),
    Snapshot(Box<Snapshot>),
}

/// Counters of the netlink socket, filled in by the daemon's packet loop.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SocketCounters {
    pub received: u64,
    pub enobufs: u64,
    pub rcvbuf_bytes: u64,
}

/// The engine's state as plain numbers: a cheap copy for the control thread.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub running: bool,
    pub discipline: DisciplineKind,
    pub deadline_ns: Nanos,
    pub deadline: Deadline,
    pub quantile_weights: (u128, u128),
    pub budget: Option<usize>,
    pub in_server: usize,
    pub server_time_sum: u128,
    pub server_time_count: u64,
    pub max_hold_ns: Nanos,
    pub max_hold_factor: Option<f64>,
    pub held_packets: usize,
    pub flows: usize,
    pub default_class: usize,
    pub percentiles: Vec<u32>,
    pub per_class: Vec<ClassCounters>,
    /// The judge's N, S, fail per class.
    pub judged: Vec<JudgeCounts>,
    pub held_per_class: Vec<u64>,
    /// Per class from the discipline: (the thesis's priority, queued requests).
    pub per_discipline: Vec<(Option<f64>, u64)>,
    pub table: Vec<(Cidr, usize)>,
    pub counters: Counters,
    pub socket: SocketCounters,
}

impl Snapshot {
    /// The status document; `names` are the class names (fixed for the daemon's life).
    pub fn to_status(&self, names: &[String]) -> Status {
        let name = |k: usize| names.get(k).cloned().unwrap_or_else(|| k.to_string());
        let classes = self
            .per_class
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let p = self.percentiles[i];
                let (priority, queue_len) = self.per_discipline[i];
                let j = self.judged[i];
                let attainment = if j.n == 0 {
                    0.0
                } else {
                    j.s as f64 / (j.n as f64 * p as f64 / 100.0)
                };
                ClassRow {
                    class: i,
                    name: name(i),
                    n: j.n,
                    s: j.s,
                    fail: j.fail,
                    percentile: p,
                    priority: if self.discipline == DisciplineKind::Percentile {
                        priority
                    } else {
                        None
                    },
                    attainment,
                    queue_len,
                    held_packets: self.held_per_class[i],
                    completed: c.completed,
                    timeouts: c.timeouts,
                    mean_response_ns: c
                        .latency_sum_ns
                        .checked_div(c.responded as u128)
                        .unwrap_or(0) as u64,
                }
            })
            .collect();
        Status {
            running: self.running,
            discipline: self.discipline.as_str().into(),
            deadline_ns: self.deadline_ns,
            deadline_auto: !matches!(self.deadline, Deadline::Fixed(_)),
            deadline_mode: self.deadline.mode().into(),
            deadline_quantile: matches!(self.deadline, Deadline::AutoQuantile { .. }).then(|| {
                let (num, den) = self.quantile_weights;
                num as f64 / den as f64
            }),
            budget: self.budget,
            in_server: self.in_server,
            mean_server_ns: self
                .server_time_sum
                .checked_div(self.server_time_count as u128)
                .unwrap_or(0) as u64,
            max_hold_ns: self.max_hold_ns,
            max_hold_factor: self.max_hold_factor,
            held_packets: self.held_packets,
            flows: self.flows,
            default_class: name(self.default_class),
            classes,
            table: self
                .table
                .iter()
                .map(|(c, k)| (c.to_string(), name(*k)))
                .collect(),
            counters: self.counters.clone(),
            kernel: KernelCounters {
                received: self.socket.received,
                enobufs: self.socket.enobufs,
                rcvbuf_bytes: self.socket.rcvbuf_bytes,
                ..KernelCounters::default()
            },
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Responded,
    Aborted,
    TimedOut,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ClassSpec;
    use crate::packet::build_ipv4_tcp;
    use netsched_core::MS;
    use std::net::Ipv4Addr;

    const SRV: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 1);

    fn cfg(kind: DisciplineKind, budget: Option<usize>) -> Config {
        let mut c = Config {
            discipline: kind,
            budget,
            deadline: Deadline::Fixed(4 * MS),
            ..Config::default()
        };
        for (i, p) in [90u32, 50].iter().enumerate() {
            c.classes.push(ClassSpec {
                name: format!("c{i}"),
                percentile: *p,
            });
        }
        c.table.push((parse_cidr("10.1.0.0/16").unwrap(), 0));
        c.default_class = 1;
        c
    }

    fn client(class: u8, n: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, class + 1, 0, n)
    }
    fn req(c: Ipv4Addr, port: u16) -> Vec<u8> {
        build_ipv4_tcp(c, SRV, port, 80, 0x18, 100)
    }
    fn ack(c: Ipv4Addr, port: u16) -> Vec<u8> {
        build_ipv4_tcp(c, SRV, port, 80, 0x10, 0)
    }
    fn resp(c: Ipv4Addr, port: u16) -> Vec<u8> {
        build_ipv4_tcp(SRV, c, 80, port, 0x18, 500)
    }

    /// Issue #9: one judge. With the Percentile discipline the engine's S / fail (shown by
    /// `ctl status`, kept for every discipline) and the discipline's own (used for its
    /// decision) come from the same core `PercentileJudge`, so they agree after every
    /// completion in every deadline mode. (Before, the engine kept a copy that judged `auto`
    /// against the mean *before* the completion, the discipline after it — the same verdict
    /// except for the first completion, which the copy judged against `initial`.)
    #[test]
    fn engine_and_discipline_judge_alike_in_every_deadline_mode() {
        let modes = [
            Deadline::Fixed(4 * MS),
            Deadline::Auto { initial: 10 * MS },
            Deadline::AutoQuantile { initial: 10 * MS },
        ];
        for mode in modes {
            let mut c = cfg(DisciplineKind::Percentile, None);
            c.deadline = mode;
            let mut e = Engine::new(c).unwrap();
            let mut acc = Vec::new();
            let mut t = 0;
            for k in 0..60u32 {
                let who = client((k % 2) as u8, 1);
                let port = 3000 + k as u16;
                // Response times 1..13 ms in a fixed scrambled order, the first (12 ms) above
                // the auto modes' initial 10 ms.
                let latency = ((k * 7919 + 11) % 13 + 1) as Nanos * MS;
                e.on_packet(2 * k, NF_INET_LOCAL_IN, &req(who, port), t, &mut acc);
                e.on_packet(
                    2 * k + 1,
                    NF_INET_LOCAL_OUT,
                    &resp(who, port),
                    t + latency,
                    &mut acc,
                );
                t += latency + MS;
                let st = e.status();
                let rows = e.sched.class_status();
                for (i, row) in st.classes.iter().enumerate() {
                    let x = |key: &str| {
                        rows[i]
                            .extra
                            .iter()
                            .find(|(n, _)| n == key)
                            .map(|(_, v)| *v as u64)
                    };
                    assert_eq!(
                        (Some(row.n), Some(row.s), Some(row.fail)),
                        (x("n_total"), x("s_total"), x("fail_total")),
                        "{mode:?}, after request {k}, class {i}"
                    );
                }
            }
            let st = e.status();
            let s: u64 = st.classes.iter().map(|c| c.s).sum();
            assert!(
                s > 0 && s < 60,
                "{mode:?}: {s} of 60 on time — the deadline judged"
            );
        }
    }

    #[test]
    fn engine_handshake_and_acks_pass_at_once() {
        let mut e = Engine::new(cfg(DisciplineKind::Fifo, Some(1))).unwrap();
        let mut acc = Vec::new();
        let syn = build_ipv4_tcp(client(0, 1), SRV, 1000, 80, TCP_SYN, 0);
        e.on_packet(1, NF_INET_LOCAL_IN, &syn, 0, &mut acc);
        e.on_packet(2, NF_INET_LOCAL_IN, &ack(client(0, 1), 1000), 0, &mut acc);
        assert_eq!(acc, vec![1, 2]);
        assert_eq!(e.counters.requests, 0);
    }

    #[test]
    fn engine_no_budget_nothing_queues() {
        let mut e = Engine::new(cfg(DisciplineKind::Fifo, None)).unwrap();
        let mut acc = Vec::new();
        for i in 0..10u32 {
            e.on_packet(
                i,
                NF_INET_LOCAL_IN,
                &req(client(0, 1), 2000 + i as u16),
                0,
                &mut acc,
            );
        }
        assert_eq!(acc.len(), 10);
        assert_eq!(e.held_packets(), 0);
        assert_eq!(e.in_server(), 10);
    }

    #[test]
    fn engine_budget_holds_and_completion_releases_next() {
        let mut e = Engine::new(cfg(DisciplineKind::Fifo, Some(1))).unwrap();
        let mut acc = Vec::new();
        e.on_packet(1, NF_INET_LOCAL_IN, &req(client(0, 1), 1000), 0, &mut acc);
        e.on_packet(2, NF_INET_LOCAL_IN, &req(client(1, 1), 1001), MS, &mut acc);
        // A later ACK of the held flow waits behind its request (no reordering).
        e.on_packet(3, NF_INET_LOCAL_IN, &ack(client(1, 1), 1001), MS, &mut acc);
        assert_eq!(acc, vec![1]);
        assert_eq!(e.held_packets(), 2);
        // The response of flow 1 (3 ms after arrival: within the 4 ms deadline) completes it.
        e.on_packet(
            4,
            NF_INET_LOCAL_OUT,
            &resp(client(0, 1), 1000),
            3 * MS,
            &mut acc,
        );
        assert_eq!(acc, vec![1, 2, 3, 4]);
        let st = e.status();
        assert_eq!(st.classes[0].s, 1);
        assert_eq!(st.classes[1].n, 1);
        assert_eq!(st.in_server, 1);
        // Flow 2 answers 9 ms after it arrived: late.
        e.on_packet(
            5,
            NF_INET_LOCAL_OUT,
            &resp(client(1, 1), 1001),
            10 * MS,
            &mut acc,
        );
        let st = e.status();
        assert_eq!((st.classes[1].s, st.classes[1].fail), (0, 1));
        assert_eq!(st.in_server, 0);
    }

    #[test]
    fn engine_early_miss_counts_a_waiting_request_once() {
        let mut c = cfg(DisciplineKind::Fifo, Some(1));
        c.early_miss = true;
        let mut e = Engine::new(c).unwrap();
        let mut acc = Vec::new();
        e.on_packet(1, NF_INET_LOCAL_IN, &req(client(0, 1), 1000), 0, &mut acc);
        e.on_packet(2, NF_INET_LOCAL_IN, &req(client(1, 1), 1001), 0, &mut acc);
        e.tick(3 * MS, &mut acc);
        assert_eq!(e.status().classes[1].fail, 0);
        // 5 ms > the 4 ms deadline: both requests can no longer succeed.
        e.tick(5 * MS, &mut acc);
        let st = e.status();
        assert_eq!((st.classes[0].fail, st.classes[1].fail), (1, 1));
        assert_eq!(st.counters.early_misses, 2);
        // Their late responses do not count them again.
        e.on_packet(
            3,
            NF_INET_LOCAL_OUT,
            &resp(client(0, 1), 1000),
            6 * MS,
            &mut acc,
        );
        e.on_packet(
            4,
            NF_INET_LOCAL_OUT,
            &resp(client(1, 1), 1001),
            7 * MS,
            &mut acc,
        );
        let st = e.status();
        assert_eq!((st.classes[0].fail, st.classes[1].fail), (1, 1));
        assert_eq!((st.classes[0].s, st.classes[1].s), (0, 0));
        assert_eq!(st.classes[1].completed, 1);
        assert_eq!(st.classes[1].mean_response_ns, 7_000_000);
    }

    #[test]
    fn engine_thesis_miss_counting_waits_for_the_response() {
        let mut c = cfg(DisciplineKind::Fifo, Some(1));
        c.early_miss = false;
        let mut e = Engine::new(c).unwrap();
        let mut acc = Vec::new();
        e.on_packet(1, NF_INET_LOCAL_IN, &req(client(1, 1), 1001), 0, &mut acc);
        e.tick(50 * MS, &mut acc);
        assert_eq!(e.status().classes[1].fail, 0);
        e.on_packet(
            2,
            NF_INET_LOCAL_OUT,
            &resp(client(1, 1), 1001),
            60 * MS,
            &mut acc,
        );
        assert_eq!(e.status().classes[1].fail, 1);
    }

    /// `max_hold_factor`: the bound is k × the recent server time, so the same wait that a
    /// fixed 1 s bound leaves held is released after 3 server times; clamped both ways.
    #[test]
    fn engine_max_hold_factor_follows_the_server_time() {
        let run = |factor: Option<f64>| {
            let mut c = cfg(DisciplineKind::Strict, Some(1));
            c.limits.max_hold = crate::SEC;
            c.limits.max_hold_factor = factor;
            c.limits.request_timeout = 10 * crate::SEC;
            let mut e = Engine::new(c).unwrap();
            let mut acc = Vec::new();
            assert_eq!(e.max_hold(), crate::SEC, "the ceiling until a response");
            e.on_packet(1, NF_INET_LOCAL_IN, &req(client(0, 1), 1), 0, &mut acc);
            e.on_packet(
                2,
                NF_INET_LOCAL_OUT,
                &resp(client(0, 1), 1),
                20 * MS,
                &mut acc,
            );
            assert_eq!(e.recent_server_time(), Some(20 * MS));
            e.on_packet(
                3,
                NF_INET_LOCAL_IN,
                &req(client(0, 1), 3),
                21 * MS,
                &mut acc,
            );
            e.on_packet(
                4,
                NF_INET_LOCAL_IN,
                &req(client(1, 1), 4),
                22 * MS,
                &mut acc,
            );
            e.tick(77 * MS, &mut acc);
            let early = e.counters.max_hold_releases;
            e.tick(83 * MS, &mut acc);
            (
                e.max_hold(),
                early,
                e.counters.max_hold_releases,
                e.status(),
            )
        };
        let (bound, early, late, st) = run(Some(3.0));
        assert_eq!(bound, 60 * MS);
        assert_eq!((early, late), (0, 1), "held 55 ms: kept; 61 ms: released");
        assert_eq!(st.max_hold_ns, 60 * MS);
        assert_eq!(st.max_hold_factor, Some(3.0));
        let (bound, early, late, st) = run(None);
        assert_eq!(bound, crate::SEC);
        assert_eq!((early, late), (0, 0));
        assert_eq!(st.max_hold_factor, None);
        // Clamped to [MAX_HOLD_AUTO_MIN, max_hold]; the estimate follows new responses.
        let mut c = cfg(DisciplineKind::Fifo, None);
        c.limits.max_hold = 400 * MS;
        c.limits.max_hold_factor = Some(3.0);
        let mut e = Engine::new(c).unwrap();
        let mut acc = Vec::new();
        e.on_packet(1, NF_INET_LOCAL_IN, &req(client(0, 1), 1), 0, &mut acc);
        e.on_packet(2, NF_INET_LOCAL_OUT, &resp(client(0, 1), 1), MS, &mut acc);
        assert_eq!(e.max_hold(), crate::config::MAX_HOLD_AUTO_MIN);
        let mut t = MS;
        for i in 0..400u32 {
            let port = 10 + (i % 1000) as u16;
            e.on_packet(
                10 + 2 * i,
                NF_INET_LOCAL_IN,
                &req(client(0, 2), port),
                t,
                &mut acc,
            );
            t += 500 * MS;
            e.on_packet(
                11 + 2 * i,
                NF_INET_LOCAL_OUT,
                &resp(client(0, 2), port),
                t,
                &mut acc,
            );
        }
        assert!(e.recent_server_time().unwrap() > 490 * MS);
        assert_eq!(e.max_hold(), 400 * MS, "the ceiling");
        // Kept across reset (it describes the server, not the thesis's counters).
        e.reset();
        assert_eq!(e.max_hold(), 400 * MS);
    }

    #[test]
    fn engine_max_hold_releases_a_starved_request_once() {
        let mut c = cfg(DisciplineKind::Strict, Some(1));
        c.limits.max_hold = 100 * MS;
        c.limits.request_timeout = 10 * crate::SEC;
        let mut e = Engine::new(c).unwrap();
        let mut acc = Vec::new();
        e.on_packet(1, NF_INET_LOCAL_IN, &req(client(0, 1), 1), 0, &mut acc); // in server
        e.on_packet(2, NF_INET_LOCAL_IN, &req(client(1, 1), 2), 0, &mut acc); // c1 waits
        e.on_packet(3, NF_INET_LOCAL_IN, &ack(client(1, 1), 2), 0, &mut acc); // behind it
        e.tick(50 * MS, &mut acc);
        assert_eq!(acc, vec![1]);
        e.tick(101 * MS, &mut acc);
        assert_eq!(acc, vec![1, 2, 3]);
        assert_eq!(e.held_packets(), 0);
        assert_eq!(e.in_server(), 2);
        assert_eq!(e.counters.max_hold_releases, 1);
        // c0's response frees a slot; the stale queue entry of c1 is skipped, not re-accepted.
        e.on_packet(
            4,
            NF_INET_LOCAL_OUT,
            &resp(client(0, 1), 1),
            110 * MS,
            &mut acc,
        );
        e.on_packet(
            5,
            NF_INET_LOCAL_OUT,
            &resp(client(1, 1), 2),
            120 * MS,
            &mut acc,
        );
        assert_eq!(acc, vec![1, 2, 3, 4, 5]);
        assert_eq!(e.counters.stale_skipped, 1);
        assert_eq!(e.in_server(), 0);
        assert_eq!(e.status().classes[1].completed, 1);
    }

    #[test]
    fn engine_retransmitted_request_is_not_a_new_request() {
        let mut e = Engine::new(cfg(DisciplineKind::Fifo, Some(1))).unwrap();
        let mut acc = Vec::new();
        let c = client(0, 1);
        let mut r1 = req(c, 1000);
        r1[24..28].copy_from_slice(&5000u32.to_be_bytes()); // seq 5000, 100 bytes
        e.on_packet(1, NF_INET_LOCAL_IN, &r1, 0, &mut acc);
        e.on_packet(2, NF_INET_LOCAL_OUT, &resp(c, 1000), MS, &mut acc);
        // The same segment again after the response: passes, no new request.
        e.on_packet(3, NF_INET_LOCAL_IN, &r1, 2 * MS, &mut acc);
        assert_eq!(acc, vec![1, 2, 3]);
        assert_eq!(e.status().classes[0].n, 1);
        assert_eq!(e.in_server(), 0);
        assert_eq!(e.counters.retransmissions, 1);
        // The next request (seq 5100) is new, also across the 2^32 wrap.
        let mut r2 = req(c, 1000);
        r2[24..28].copy_from_slice(&5100u32.to_be_bytes());
        e.on_packet(4, NF_INET_LOCAL_IN, &r2, 3 * MS, &mut acc);
        assert_eq!(e.status().classes[0].n, 2);
        let mut e = Engine::new(cfg(DisciplineKind::Fifo, None)).unwrap();
        let mut w1 = req(c, 7);
        w1[24..28].copy_from_slice(&(u32::MAX - 50).to_be_bytes());
        let mut w2 = req(c, 7);
        w2[24..28].copy_from_slice(&49u32.to_be_bytes());
        e.on_packet(1, NF_INET_LOCAL_IN, &w1, 0, &mut acc);
        e.on_packet(2, NF_INET_LOCAL_OUT, &resp(c, 7), MS, &mut acc);
        e.on_packet(3, NF_INET_LOCAL_IN, &w2, 2 * MS, &mut acc);
        assert_eq!(e.status().classes[0].n, 2);
    }

    #[test]
    fn engine_request_timeout_frees_the_slot() {
        let mut c = cfg(DisciplineKind::Fifo, Some(1));
        c.limits.request_timeout = 100 * MS;
        let mut e = Engine::new(c).unwrap();
        let mut acc = Vec::new();
        e.on_packet(1, NF_INET_LOCAL_IN, &req(client(0, 1), 1000), 0, &mut acc);
        e.on_packet(2, NF_INET_LOCAL_IN, &req(client(0, 2), 1000), 0, &mut acc);
        assert_eq!(acc, vec![1]);
        e.tick(50 * MS, &mut acc);
        assert_eq!(acc, vec![1]);
        e.tick(101 * MS, &mut acc);
        assert_eq!(acc, vec![1, 2]);
        assert_eq!(e.status().classes[0].timeouts, 1);
    }

    #[test]
    fn engine_stop_releases_everything_in_arrival_order() {
        let mut e = Engine::new(cfg(DisciplineKind::Strict, Some(1))).unwrap();
        let mut acc = Vec::new();
        e.on_packet(1, NF_INET_LOCAL_IN, &req(client(0, 1), 1), 0, &mut acc);
        e.on_packet(2, NF_INET_LOCAL_IN, &req(client(1, 1), 2), 1, &mut acc);
        e.on_packet(3, NF_INET_LOCAL_IN, &req(client(0, 2), 3), 2, &mut acc);
        e.on_packet(4, NF_INET_LOCAL_IN, &ack(client(1, 1), 2), 3, &mut acc);
        assert_eq!(acc, vec![1]);
        e.stop(&mut acc);
        assert_eq!(acc, vec![1, 2, 4, 3]);
        assert_eq!(e.held_packets(), 0);
        // Stopped: everything passes in arrival order.
        e.on_packet(5, NF_INET_LOCAL_IN, &req(client(1, 1), 9), 4, &mut acc);
        assert_eq!(*acc.last().unwrap(), 5);
        assert_eq!(e.status().counters.passed_stopped, 1);
    }

    #[test]
    fn engine_strict_priority_serves_class0_first() {
        let mut e = Engine::new(cfg(DisciplineKind::Strict, Some(1))).unwrap();
        let mut acc = Vec::new();
        e.on_packet(1, NF_INET_LOCAL_IN, &req(client(1, 1), 1), 0, &mut acc); // c1 in server
        e.on_packet(2, NF_INET_LOCAL_IN, &req(client(1, 2), 2), 1, &mut acc); // c1 waits
        e.on_packet(3, NF_INET_LOCAL_IN, &req(client(0, 1), 3), 2, &mut acc); // c0 waits
        e.on_packet(4, NF_INET_LOCAL_OUT, &resp(client(1, 1), 1), 3, &mut acc);
        assert_eq!(acc, vec![1, 3, 4]); // c0 released first, then the response passes
    }

    #[test]
    fn engine_held_limit_passes_and_counts() {
        let mut c = cfg(DisciplineKind::Fifo, Some(1));
        c.limits.max_held_packets = 2;
        let mut e = Engine::new(c).unwrap();
        let mut acc = Vec::new();
        for i in 0..5u32 {
            e.on_packet(
                i,
                NF_INET_LOCAL_IN,
                &req(client(0, i as u8), 7),
                0,
                &mut acc,
            );
        }
        // 1 in server, 2 held, 2 passed over the limit.
        assert_eq!(acc, vec![0, 3, 4]);
        assert_eq!(e.counters.passed_over_limit, 2);
        assert_eq!(e.held_packets(), 2);
    }

    #[test]
    fn engine_auto_deadline_is_the_running_mean() {
        let mut c = cfg(DisciplineKind::Fifo, None);
        c.deadline = Deadline::Auto { initial: 10 * MS };
        let mut e = Engine::new(c).unwrap();
        let mut acc = Vec::new();
        assert_eq!(e.deadline(), 10 * MS);
        for (i, lat) in [2u64, 4, 6].iter().enumerate() {
            let port = 100 + i as u16;
            e.on_packet(0, NF_INET_LOCAL_IN, &req(client(0, 1), port), 0, &mut acc);
            e.on_packet(
                0,
                NF_INET_LOCAL_OUT,
                &resp(client(0, 1), port),
                lat * MS,
                &mut acc,
            );
        }
        assert_eq!(e.deadline(), 4 * MS);
    }

    /// `auto_quantile` in the engine's own counters (any discipline, here FIFO): all requests
    /// of class 0 (P = 90), so q = 0.9; the k-th response, the largest so far, is judged
    /// against the ⌈0.9·k⌉-th of the k: on time for k ≤ 9, late for k = 10.
    #[test]
    fn engine_auto_quantile_deadline_is_the_weighted_quantile() {
        let mut c = cfg(DisciplineKind::Fifo, None);
        c.deadline = Deadline::AutoQuantile { initial: 10 * MS };
        let mut e = Engine::new(c).unwrap();
        let mut acc = Vec::new();
        assert_eq!(e.deadline(), 10 * MS);
        assert_eq!(
            e.status().deadline_quantile,
            Some(0.7),
            "no N: mean of 90, 50"
        );
        for lat in 1..=10u64 {
            let port = 100 + lat as u16;
            e.on_packet(0, NF_INET_LOCAL_IN, &req(client(0, 1), port), 0, &mut acc);
            e.on_packet(
                0,
                NF_INET_LOCAL_OUT,
                &resp(client(0, 1), port),
                lat * MS,
                &mut acc,
            );
        }
        let st = e.status();
        assert_eq!((st.classes[0].s, st.classes[0].fail), (9, 1));
        assert_eq!(st.deadline_quantile, Some(0.9));
        assert_eq!(st.deadline_mode, "auto_quantile");
        let d = e.deadline() as f64;
        assert!((d / (9.0 * MS as f64) - 1.0).abs() <= 1.0 / 64.0, "{d}");
        e.reset();
        assert_eq!(e.deadline(), 10 * MS);
        e.set_deadline(Deadline::Fixed(3 * MS)).unwrap();
        assert_eq!(e.status().deadline_quantile, None);
    }

    #[test]
    fn engine_other_traffic_passes() {
        let mut e = Engine::new(cfg(DisciplineKind::Fifo, Some(1))).unwrap();
        let mut acc = Vec::new();
        let p = build_ipv4_tcp(client(0, 1), SRV, 5, 22, 0x18, 10);
        e.on_packet(9, NF_INET_LOCAL_IN, &p, 0, &mut acc);
        e.on_packet(10, NF_INET_LOCAL_IN, &[1, 2, 3], 0, &mut acc);
        assert_eq!(acc, vec![9, 10]);
        assert_eq!(e.counters.other, 2);
    }

    #[test]
    fn engine_control_verbs_validate() {
        let mut e = Engine::new(cfg(DisciplineKind::Percentile, Some(2))).unwrap();
        assert!(e.set_percentile(5, 50).is_err());
        assert!(e.set_percentile(0, 0).is_err());
        e.set_percentile(1, 60).unwrap();
        assert_eq!(e.status().classes[1].percentile, 60);
        assert!(e.del_ip(parse_cidr("1.2.3.0/24").unwrap()).is_err());
        e.add_ip(parse_cidr("10.2.0.0/16").unwrap(), 0).unwrap();
        assert_eq!(e.status().table.len(), 2);
        e.reset();
        assert!(e.status().table.is_empty());
    }
}

/// A closed-loop model of the testbed (thesis §4: clients × threads, each one request at a
/// time) driving the real engine: a single server processing released requests one at a
/// time for `service` each. Used to check the engine + discipline without namespaces.
#[cfg(test)]
mod closed_loop {
    use super::*;
    use crate::config::ClassSpec;
    use crate::packet::build_ipv4_tcp;
    use netsched_core::MS;
    use std::collections::VecDeque;
    use std::net::Ipv4Addr;

    pub struct Outcome {
        pub completed: Vec<u64>,
        pub mean_ms: Vec<f64>,
        pub status: Status,
        pub max_wait_ms: Vec<f64>,
    }

    pub fn run(
        kind: DisciplineKind,
        deadline: Deadline,
        early: bool,
        seconds: u64,
        budget: usize,
    ) -> Outcome {
        run_with(
            kind,
            deadline,
            early,
            seconds,
            budget,
            crate::config::Limits::default().max_hold,
        )
    }

    pub fn run_with(
        kind: DisciplineKind,
        deadline: Deadline,
        early: bool,
        seconds: u64,
        budget: usize,
        max_hold: Nanos,
    ) -> Outcome {
        let classes = 5;
        let threads = 4;
        let mut c = Config {
            discipline: kind,
            budget: Some(budget),
            deadline,
            early_miss: early,
            ..Config::default()
        };
        c.limits.max_hold = max_hold;
        for (i, p) in [90u32, 80, 70, 60, 50].iter().enumerate() {
            c.classes.push(ClassSpec {
                name: format!("C{i}"),
                percentile: *p,
            });
            c.table
                .push((parse_cidr(&format!("10.77.{i}.0/24")).unwrap(), i));
        }
        c.default_class = 4;
        let mut e = Engine::new(c).unwrap();
        let srv = Ipv4Addr::new(10, 9, 0, 1);
        let addr = |k: usize| Ipv4Addr::new(10, 77, k as u8, 2);
        let mut rng = netsched_core::rng::SplitMix64::new(5);
        // id -> (class, thread)
        let mut next_id = 1u32;
        let mut ids: HashMap<u32, (usize, usize)> = HashMap::new();
        let mut sent_at = vec![vec![0u64; threads]; classes];
        let mut seq = vec![vec![0u32; threads]; classes];
        let mut server: VecDeque<(usize, usize)> = VecDeque::new();
        let mut busy_until = 0u64;
        let mut completed = vec![0u64; classes];
        let mut lat_sum = vec![0f64; classes];
        let mut max_wait = vec![0f64; classes];
        let mut acc = Vec::new();
        let mut pending: Vec<(u64, usize, usize)> = Vec::new(); // (send time, class, thread)
        for k in 0..classes {
            for t in 0..threads {
                pending.push((rng.below(MS), k, t));
            }
        }
        let end = seconds * netsched_core::SEC;
        let step = 100_000; // 0.1 ms
        let mut now = 0;
        let mut last_tick = 0;
        while now < end {
            // clients send
            let mut i = 0;
            while i < pending.len() {
                if pending[i].0 <= now {
                    let (_, k, t) = pending.swap_remove(i);
                    let id = next_id;
                    next_id += 1;
                    ids.insert(id, (k, t));
                    sent_at[k][t] = now;
                    let mut p = build_ipv4_tcp(addr(k), srv, 1000 + t as u16, 80, 0x18, 100);
                    // each request continues the flow's sequence space (100 bytes each)
                    seq[k][t] = seq[k][t].wrapping_add(100);
                    p[24..28].copy_from_slice(&seq[k][t].to_be_bytes());
                    e.on_packet(id, NF_INET_LOCAL_IN, &p, now, &mut acc);
                } else {
                    i += 1;
                }
            }
            for id in acc.drain(..) {
                if let Some(kt) = ids.remove(&id) {
                    server.push_back(kt);
                }
            }
            // server: one at a time, service 3-5 ms
            if now >= busy_until {
                if let Some((k, t)) = server.pop_front() {
                    busy_until = now + 3 * MS + rng.below(2 * MS);
                    let p = build_ipv4_tcp(srv, addr(k), 80, 1000 + t as u16, 0x18, 500);
                    e.on_packet(0, NF_INET_LOCAL_OUT, &p, busy_until, &mut acc);
                    let lat = (busy_until - sent_at[k][t]) as f64 / 1e6;
                    completed[k] += 1;
                    lat_sum[k] += lat;
                    if lat > max_wait[k] {
                        max_wait[k] = lat;
                    }
                    pending.push((busy_until + 200_000, k, t));
                    now = busy_until;
                    for id in acc.drain(..) {
                        if let Some(kt) = ids.remove(&id) {
                            server.push_back(kt);
                        }
                    }
                }
            }
            if now >= last_tick + 10 * MS {
                last_tick = now;
                e.tick(now, &mut acc);
            }
            now += step;
        }
        Outcome {
            mean_ms: (0..classes)
                .map(|k| lat_sum[k] / completed[k].max(1) as f64)
                .collect(),
            completed,
            status: e.status(),
            max_wait_ms: max_wait,
        }
    }

    #[test]
    fn closed_loop_percentile_reproduces_table14_shape_with_weak_holding() {
        // 20 connections, budget 16: 4 requests wait at a time (the thesis reorders only a
        // small backlog too, perSetQlen).
        let auto = Deadline::Auto { initial: 10 * MS };
        let p = run(DisciplineKind::Percentile, auto, false, 30, 16);
        assert!(p.mean_ms.windows(2).all(|w| w[0] < w[1]), "{:?}", p.mean_ms);
        let att: Vec<f64> = p.status.classes.iter().map(|c| c.attainment).collect();
        let (lo, hi) = (
            att.iter().cloned().fold(f64::MAX, f64::min),
            att.iter().cloned().fold(0.0, f64::max),
        );
        assert!(hi / lo - 1.0 <= 0.10, "{att:?}");
        assert!(
            p.completed[4] as f64 >= 0.5 * p.completed[0] as f64,
            "{:?}",
            p.completed
        );
        let f = run(DisciplineKind::Fifo, auto, false, 30, 16);
        let (lo, hi) = (
            f.mean_ms.iter().cloned().fold(f64::MAX, f64::min),
            f.mean_ms.iter().cloned().fold(0.0, f64::max),
        );
        assert!(hi / lo - 1.0 <= 0.15, "{:?}", f.mean_ms);
        let s = run(DisciplineKind::Strict, auto, false, 30, 16);
        assert!(s.mean_ms[0] < s.mean_ms[4], "{:?}", s.mean_ms);
    }

    /// The testbed's setting (20 connections, budget 10, `max_hold` 400 ms as the real
    /// experiment): with `auto_quantile` every class ends at its target, attainments within
    /// 2% (measured 0.996–1.003), means ordered C0 < … < C4 (50…180 ms); the status shows
    /// q = Σ N·P / Σ N. (`auto` equalises too in this model, at
    /// 1.086–1.092: the model's response times are less skewed than the testbed's.)
    #[test]
    fn closed_loop_auto_quantile_puts_every_class_at_its_target() {
        let d = Deadline::AutoQuantile { initial: 10 * MS };
        let p = run_with(DisciplineKind::Percentile, d, false, 30, 10, 400 * MS);
        let att: Vec<f64> = p.status.classes.iter().map(|c| c.attainment).collect();
        let (lo, hi) = (
            att.iter().cloned().fold(f64::MAX, f64::min),
            att.iter().cloned().fold(0.0, f64::max),
        );
        assert!(hi / lo - 1.0 <= 0.02 && (lo - 1.0).abs() < 0.03, "{att:?}");
        assert!(p.mean_ms.windows(2).all(|w| w[0] < w[1]), "{:?}", p.mean_ms);
        assert!(p.completed.iter().all(|&c| c > 0), "{:?}", p.completed);
        assert_eq!(p.status.deadline_mode, "auto_quantile");
        let n: Vec<u64> = p.status.classes.iter().map(|c| c.n).collect();
        let q = (0..5)
            .map(|k| n[k] as f64 * (90 - 10 * k) as f64)
            .sum::<f64>()
            / (100.0 * n.iter().sum::<u64>() as f64);
        assert!((p.status.deadline_quantile.unwrap() - q).abs() < 1e-9);
        // The deadline sits where the weighted target puts it: between the fastest class's
        // mean and the slowest's.
        let dl = p.status.deadline_ns as f64 / 1e6;
        assert!(
            p.mean_ms[0] < dl && dl < p.mean_ms[4],
            "deadline {dl} ms, {:?}",
            p.mean_ms
        );
    }

    #[test]
    fn closed_loop_max_hold_bounds_the_wait_under_strong_holding() {
        let p = run(
            DisciplineKind::Percentile,
            Deadline::Fixed(30 * MS),
            false,
            30,
            4,
        );
        let max_hold_ms = crate::config::Limits::default().max_hold as f64 / 1e6;
        for (k, w) in p.max_wait_ms.iter().enumerate() {
            // held ≤ max_hold (+ one 10 ms tick), then queued behind ≤ 20 requests of 3-5 ms
            assert!(
                *w <= max_hold_ms + 10.0 + 20.0 * 5.0 + 1.0,
                "class {k} waited {w} ms"
            );
        }
        assert!(p.completed.iter().all(|&c| c > 0), "{:?}", p.completed);
    }

    #[test]
    fn closed_loop_strong_holding_freezes_a_class_ratio() {
        // Budget 4 of 20 and a fixed deadline: classes whose attainment sits above what the
        // others can reach stop getting service (no arrivals, no completions: the ratio never
        // moves) — a limit of the P0 rule under strong holding, documented in docs/nfq.md.
        let p = run_with(
            DisciplineKind::Percentile,
            Deadline::Fixed(30 * MS),
            false,
            30,
            4,
            Nanos::MAX,
        );
        let total: u64 = p.completed.iter().sum();
        assert!(
            p.completed[3] + p.completed[4] < total / 50,
            "{:?}",
            p.completed
        );
    }
}

//! Applications: request–response servers and clients (message level), UDP constant-bit-rate
//! probes and ICMP-echo pingers. The engine logic that drives them lives in `net/`; this file
//! holds their configuration, state and statistics.
//!
//! Requests and responses are single packets routed over the links like any other packet (no
//! TCP per request): a persistent connection is a client thread with at most one request
//! outstanding. The server puts each arriving request into its scheduler (a discipline from
//! `netsched_core`), and takes the next one out only when a worker is free or its listen queue
//! has room — the "release budget" that lets a backlog form in the scheduler, as the thesis's
//! `perSetQlen` does (P0 ch. 4).

use crate::packet::{NodeId, SimPacket};
use netsched_core::qdisc::{AnyQdisc, QdiscConfig};
use netsched_core::rng::SplitMix64;
use netsched_core::{Nanos, MS};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// A time distribution, in milliseconds, as written in scenario files.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "dist", rename_all = "snake_case", deny_unknown_fields)]
pub enum Dist {
    Fixed { ms: f64 },
    Exponential { mean_ms: f64 },
    Uniform { min_ms: f64, max_ms: f64 },
}

impl Dist {
    pub fn sample(&self, rng: &mut SplitMix64) -> Nanos {
        let ms = match *self {
            Dist::Fixed { ms } => ms,
            Dist::Exponential { mean_ms } => rng.exp(mean_ms),
            Dist::Uniform { min_ms, max_ms } => min_ms + (max_ms - min_ms) * rng.unit(),
        };
        (ms * MS as f64).round().max(0.0) as Nanos
    }
    pub fn mean_ms(&self) -> f64 {
        match *self {
            Dist::Fixed { ms } => ms,
            Dist::Exponential { mean_ms } => mean_ms,
            Dist::Uniform { min_ms, max_ms } => (min_ms + max_ms) / 2.0,
        }
    }
    /// `Err` names where the distribution is used and its value.
    pub fn validate(&self, what: &str) -> Result<(), DistError> {
        let ok = |v: f64| v.is_finite() && v >= 0.0;
        let good = match *self {
            Dist::Fixed { ms } => ok(ms),
            Dist::Exponential { mean_ms } => ok(mean_ms),
            Dist::Uniform { min_ms, max_ms } => ok(min_ms) && ok(max_ms) && min_ms <= max_ms,
        };
        if good {
            Ok(())
        } else {
            Err(DistError {
                what: what.to_string(),
                dist: self.clone(),
            })
        }
    }
}

/// A server: scheduler → listen queue → workers.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// Requests served at once (Apache worker limit; the thesis's single CPU = 1).
    pub workers: usize,
    /// Requests released by the scheduler but not yet taken by a worker (accept backlog).
    pub listen_limit: usize,
    pub service: Dist,
    pub response_bytes: u32,
    /// The discipline between network and server; class = the request's client class.
    pub sched: QdiscConfig,
}

/// Per-class request statistics (at the server or at the clients).
#[derive(Debug, Clone, Default)]
pub struct ClassStats {
    pub completed: u64,
    pub refused: u64,
    pub latency_sum: u128,
    /// Every response time, ns (for means, percentiles and CDFs).
    pub latencies: Vec<Nanos>,
    /// Per time bin: (completed, latency sum ns).
    pub bins: Vec<(u64, u128)>,
}

impl ClassStats {
    pub fn record(&mut self, latency: Nanos, bin: usize) {
        self.completed += 1;
        self.latency_sum += latency as u128;
        self.latencies.push(latency);
        if self.bins.len() <= bin {
            self.bins.resize(bin + 1, (0, 0));
        }
        self.bins[bin].0 += 1;
        self.bins[bin].1 += latency as u128;
    }
    pub fn mean(&self) -> f64 {
        if self.completed == 0 {
            f64::NAN
        } else {
            self.latency_sum as f64 / self.completed as f64
        }
    }
}

pub(crate) struct Server {
    pub node: NodeId,
    pub cfg: ServerConfig,
    pub sched: AnyQdisc<SimPacket>,
    pub listen: VecDeque<SimPacket>,
    /// In service, one slot per worker.
    pub slots: Vec<Option<SimPacket>>,
    pub busy: usize,
    /// Per class: completions and the time from arrival at the server to the response.
    pub stats: Vec<ClassStats>,
    pub refused: Vec<u64>,
    pub busy_ns: Nanos,
}

/// How a client group issues requests.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientMode {
    /// Each thread: send, wait for the response, think, send again (persistent connection).
    Closed { think: Dist },
    /// Poisson arrivals at `rate_per_s` for the whole group, independent of responses.
    Open { rate_per_s: f64 },
}

#[derive(Debug, Clone, PartialEq)]
pub struct ClientConfig {
    pub node: NodeId,
    pub server: NodeId,
    pub class: u8,
    pub threads: u32,
    pub mode: ClientMode,
    pub request_bytes: u32,
    /// Requests per thread (closed loop) or in total (open loop).
    pub requests: u64,
    pub start: Nanos,
}

pub(crate) struct ClientThread {
    pub group: usize,
    pub sent: u64,
    pub done: u64,
}

pub(crate) struct ClientGroup {
    pub cfg: ClientConfig,
    pub first_thread: u32,
}

/// Constant-bit-rate UDP probe.
#[derive(Debug, Clone, Default)]
pub struct UdpFlow {
    pub src: NodeId,
    pub dst: NodeId,
    pub len: u32,
    pub interval: Nanos,
    pub stop: Nanos,
    pub sent: u64,
    pub received: u64,
}

/// ICMP-echo pinger.
#[derive(Debug, Clone, Default)]
pub struct Pinger {
    pub src: NodeId,
    pub dst: NodeId,
    pub len: u32,
    pub interval: Nanos,
    pub count: u64,
    pub sent: u64,
    /// (send time, round-trip time) of every reply.
    pub rtts: Vec<(Nanos, Nanos)>,
}

/// A time distribution whose parameters are not finite, negative, or out of order.
#[derive(Debug, Clone, PartialEq)]
pub struct DistError {
    /// Where the distribution is used (`server service time`, `clients.think`, …).
    pub what: String,
    pub dist: Dist,
}

impl std::fmt::Display for DistError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: bad distribution {:?} (times must be finite and ≥ 0)",
            self.what, self.dist
        )
    }
}

impl std::error::Error for DistError {}

//! `netsched replay qdisc`: items from a trace through one queue discipline served by one
//! server (a link of a given rate, or a fixed time per item), printing every enqueue, drop,
//! eviction, dequeue and completion.
//!
//! Time is checked where it enters: trace times and `per_item` are at most
//! [`units::MAX_DURATION`], sizes at most `u32::MAX` bytes, service times are computed in 128
//! bits and every sum is checked, so a time never wraps or saturates (an overflow is an error
//! naming the item's line).

use crate::config::read_toml;
use crate::trace::TraceReader;
use anyhow::{anyhow, bail, Result};
use clap::Args;
use netsched_core::qdisc::fifo::TestItem;
use netsched_core::qdisc::{AnyQdisc, Feedback, Qdisc, QdiscConfig, Verdict};
use netsched_core::units::{self, MAX_RATE_BITS};
use netsched_core::{Nanos, SEC};
use serde::Deserialize;
use serde_json::json;
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::PathBuf;

pub const HELP: &str = "\
CONFIG (TOML): the discipline and the service model.

    [qdisc]                 # any discipline netsched-core has; `kind` picks it
    kind = \"fifo\"
    queue_limit = 100

    [service]               # one of:
    rate = \"800kbit\"        #   service time = size * 8 / rate (kbit = 1000 bit/s; kbps = 1000 BYTES/s)
    # per_item = \"4ms\"      #   or a fixed time per item

TRACE (CSV with a header, or JSON lines), one item per row, in time order:

    time,class,size,id
    0ms,0,1500,1
    0.5ms,1,40,2

or   {\"time\": \"0.5ms\", \"class\": 1, \"size\": 40, \"id\": 2}

`time` needs a unit (only 0 may go without); `size` is in bytes (at most 4294967295);
an `id` may be reused once its item has left the queue and the server.

OUTPUT events: enqueue, drop (with reason), evict (an older item pushed out), dequeue,
complete (with latency_ns; fed back to disciplines that learn from outcomes, e.g. percentile).

EXAMPLE:
    netsched replay qdisc --config examples/replay/fifo.toml --trace examples/replay/burst.csv";

#[derive(Debug, Args)]
pub struct QdiscReplay {
    /// Discipline and service model (TOML).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// The items to replay (CSV or JSON lines).
    #[arg(long, value_name = "FILE")]
    trace: PathBuf,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct QdiscReplayConfig {
    qdisc: QdiscConfig,
    service: ServiceConfig,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServiceConfig {
    rate: Option<String>,
    per_item: Option<String>,
}

/// How long the server takes for an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Service {
    /// A link of this many bits per second (at least 1).
    Rate(u64),
    PerItem(Nanos),
}

impl Service {
    /// Service time of an item of `size` bytes, rounded up; `None` if it exceeds `u64` ns.
    fn time(self, size: u32) -> Option<Nanos> {
        match self {
            // size*8 bits at `bits` per second, in ns: at most 2^32 * 8 * 10^9 < 2^70, so
            // computed in 128 bits and checked on the way back.
            Service::Rate(bits) => {
                let ns = (u128::from(size) * 8 * u128::from(SEC)).div_ceil(u128::from(bits));
                Nanos::try_from(ns).ok()
            }
            Service::PerItem(t) => Some(t),
        }
    }
}

/// The discipline and service a configuration describes; `name` is the file, for errors.
pub(crate) fn setup(name: &str, cfg: &QdiscReplayConfig) -> Result<(AnyQdisc<TestItem>, Service)> {
    let service = match (&cfg.service.rate, &cfg.service.per_item) {
        (Some(r), None) => Service::Rate(
            units::parse_rate_in(r, 1, MAX_RATE_BITS)
                .map_err(|e| anyhow!("{name}: service.rate: {e}"))?,
        ),
        (None, Some(t)) => Service::PerItem(
            units::parse_duration(t).map_err(|e| anyhow!("{name}: service.per_item: {e}"))?,
        ),
        _ => bail!("{name}: [service] needs exactly one of `rate` or `per_item`"),
    };
    let q = cfg
        .qdisc
        .build::<TestItem>()
        .map_err(|e| anyhow!("{name}: [qdisc] {e}"))?;
    Ok((q, service))
}

pub fn run(a: &QdiscReplay, out: &mut impl Write) -> Result<()> {
    let cfg: QdiscReplayConfig = read_toml(&a.config)?;
    let (q, service) = setup(&a.config.display().to_string(), &cfg)?;
    let mut trace = TraceReader::open(&a.trace)?;
    replay(q, service, &mut trace, out)
}

/// One row of the trace, waiting for its time.
#[derive(Clone, Copy)]
struct Arrival {
    t: Nanos,
    class: usize,
    item: TestItem,
    line: usize,
}

/// What is known about an item in the system (queued or in service).
#[derive(Clone, Copy)]
struct InFlight {
    class: usize,
    arrived: Nanos,
    line: usize,
}

struct Replay<'a, R, W> {
    q: AnyQdisc<TestItem>,
    service: Service,
    trace: &'a mut TraceReader<R>,
    /// The trace's name, for errors.
    file: String,
    out: &'a mut W,
    /// Items queued or in service, by id: bounded by the discipline's limits plus one.
    in_flight: HashMap<u64, InFlight>,
    /// The item being served and when it completes.
    in_service: Option<(TestItem, Nanos)>,
    last_t: Nanos,
    items: u64,
    completed: u64,
    dropped: u64,
}

/// Run the replay: arrivals, the discipline and the server, in time order.
pub(crate) fn replay<R: BufRead, W: Write>(
    q: AnyQdisc<TestItem>,
    service: Service,
    trace: &mut TraceReader<R>,
    out: &mut W,
) -> Result<()> {
    let mut r = Replay {
        q,
        service,
        file: trace.path.clone(),
        trace,
        out,
        in_flight: HashMap::new(),
        in_service: None,
        last_t: 0,
        items: 0,
        completed: 0,
        dropped: 0,
    };
    r.run()
}

impl<R: BufRead, W: Write> Replay<'_, R, W> {
    /// The next row of the trace, checked; `None` at the end.
    fn next_arrival(&mut self) -> Result<Option<Arrival>> {
        let Some(rec) = self.trace.next_record()? else {
            return Ok(None);
        };
        let file = self.file.as_str();
        let t = rec.time_ns(file, "time")?;
        if t < self.last_t {
            bail!(
                "{file}:{}: field `time`: items must be in time order ({t} ns is before {} ns)",
                rec.line,
                self.last_t
            );
        }
        let class = rec.u64(file, "class")?;
        let class = usize::try_from(class)
            .map_err(|_| anyhow!("{file}:{}: field `class`: {class} is too large", rec.line))?;
        let size = rec.size(file, "size", u64::from(u32::MAX))?;
        let id = rec.u64(file, "id")?;
        self.last_t = t;
        self.items += 1;
        Ok(Some(Arrival {
            t,
            class,
            item: TestItem {
                id,
                len: size as u32, // bounded to u32::MAX by `size` above
            },
            line: rec.line,
        }))
    }

    fn emit(&mut self, v: serde_json::Value) -> Result<()> {
        writeln!(self.out, "{v}")?;
        Ok(())
    }

    /// If the server is idle and the discipline releases an item at `now`, start serving it.
    fn try_start(&mut self, now: Nanos) -> Result<()> {
        if self.in_service.is_some() || self.q.is_empty() {
            return Ok(());
        }
        let next = self.q.dequeue(now);
        // Items a discipline discarded while choosing (EDF's expired ones) are handed back here.
        for (late, reason) in self.q.take_evicted() {
            let class = self
                .in_flight
                .remove(&late.id)
                .map_or(usize::MAX, |m| m.class);
            self.dropped += 1;
            self.emit(
                json!({"time_ns": now, "event": "evict", "id": late.id, "class": class,
                             "reason": reason.as_str()}),
            )?;
        }
        if let Some(item) = next {
            let m = self.in_flight[&item.id];
            let done = self
                .service
                .time(item.len)
                .and_then(|s| now.checked_add(s))
                .ok_or_else(|| {
                    anyhow!(
                        "{}:{}: item {}: {} bytes started at {now} ns would complete after \
                         the largest time ({} ns); use a faster rate or smaller items",
                        self.file,
                        m.line,
                        item.id,
                        item.len,
                        Nanos::MAX
                    )
                })?;
            self.emit(
                json!({"time_ns": now, "event": "dequeue", "id": item.id, "class": m.class}),
            )?;
            self.in_service = Some((item, done));
        }
        Ok(())
    }

    fn arrive(&mut self, a: Arrival) -> Result<()> {
        let Arrival {
            t,
            class,
            item,
            line,
        } = a;
        let entry = InFlight {
            class,
            arrived: t,
            line,
        };
        if let Some(prev) = self.in_flight.insert(item.id, entry) {
            bail!(
                "{}:{line}: field `id`: {} is still queued or in service (from line {})",
                self.file,
                item.id,
                prev.line
            );
        }
        match self.q.enqueue(class, item, t) {
            Verdict::Queued => {
                self.emit(
                    json!({"time_ns": t, "event": "enqueue", "id": item.id, "class": class}),
                )?;
            }
            Verdict::Dropped { item, reason } => {
                self.in_flight.remove(&item.id);
                self.dropped += 1;
                self.emit(
                    json!({"time_ns": t, "event": "drop", "id": item.id, "class": class,
                                 "reason": reason.as_str()}),
                )?;
            }
            Verdict::QueuedEvicting { evicted, reason } => {
                let eclass = self
                    .in_flight
                    .remove(&evicted.id)
                    .map_or(usize::MAX, |m| m.class);
                self.dropped += 1;
                self.emit(
                    json!({"time_ns": t, "event": "enqueue", "id": item.id, "class": class}),
                )?;
                self.emit(
                    json!({"time_ns": t, "event": "evict", "id": evicted.id, "class": eclass,
                                 "reason": reason.as_str()}),
                )?;
            }
        }
        Ok(())
    }

    fn complete(&mut self, item: TestItem, t: Nanos) -> Result<()> {
        let m = self
            .in_flight
            .remove(&item.id)
            .ok_or_else(|| anyhow!("internal error: item {} completed twice", item.id))?;
        let latency = t.checked_sub(m.arrived).ok_or_else(|| {
            anyhow!(
                "internal error: item {} completed before it arrived",
                item.id
            )
        })?;
        self.q.feedback(
            Feedback::Completed {
                class: m.class,
                latency,
            },
            t,
        );
        self.completed += 1;
        self.emit(
            json!({"time_ns": t, "event": "complete", "id": item.id, "class": m.class,
                         "latency_ns": latency}),
        )
    }

    fn run(&mut self) -> Result<()> {
        let mut upcoming = self.next_arrival()?;
        let mut now: Nanos = 0;
        loop {
            self.try_start(now)?;
            let t_arr = upcoming.map(|a| a.t);
            let t_done = self.in_service.map(|s| s.1);
            let t_timer = if self.in_service.is_none() && !self.q.is_empty() {
                self.q.next_timer(now)
            } else {
                None
            };
            let Some(t) = [t_arr, t_done, t_timer].into_iter().flatten().min() else {
                break;
            };
            now = t;
            // Completions first at equal times: the server frees before the next arrival.
            if t_done == Some(t) {
                let (item, _) = self.in_service.take().expect("in service");
                self.complete(item, t)?;
            }
            while let Some(a) = upcoming.filter(|a| a.t == t) {
                self.arrive(a)?;
                // A NIC or server takes the head item the moment it is idle, before the next
                // arrival of the same instant.
                self.try_start(t)?;
                upcoming = self.next_arrival()?;
            }
        }
        let stats = self.q.stats();
        stats
            .check_identities()
            .map_err(|e| anyhow!("internal accounting error: {e}"))?;
        let summary = json!({"event": "summary", "items": self.items,
                             "completed": self.completed, "dropped": self.dropped,
                             "stats": stats});
        self.emit(summary)
    }
}

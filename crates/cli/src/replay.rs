//! `netsched replay`: feed a trace through one algorithm with a simple service model and print,
//! as JSON lines, what happened to every item. The same `QdiscConfig` / `BalancerConfig` the
//! simulator and the data planes use, so a replay is the quickest way to see an algorithm act.

use crate::trace::{parse_duration_ns, parse_rate_bps, Trace};
use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use netsched_core::qdisc::fifo::TestItem;
use netsched_core::qdisc::{AnyQdisc, Feedback, Qdisc, QdiscConfig, Verdict};
use netsched_core::Nanos;
use serde::Deserialize;
use serde_json::json;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, Args)]
#[command(after_long_help = REPLAY_HELP)]
pub struct ReplayArgs {
    #[command(subcommand)]
    what: ReplayWhat,
}

const REPLAY_HELP: &str = "\
Times in traces take a unit (1500ns, 250us, 4ms, 1.5s); a bare number is seconds.
Rates take tc-style units (800kbit, 2.1mbit, 1gbit).
Output: one JSON object per line on stdout, in time order; a final {\"event\":\"summary\",...}.";

#[derive(Debug, Subcommand)]
enum ReplayWhat {
    /// Replay packets or requests through a queue discipline served by one server.
    #[command(after_long_help = QDISC_HELP)]
    Qdisc(QdiscReplay),
    /// Replay connection open/close events through a load balancer.
    #[command(after_long_help = BALANCE_HELP)]
    Balance(BalanceReplay),
}

const QDISC_HELP: &str = "\
CONFIG (TOML): the discipline and the service model.

    [qdisc]                 # any discipline netsched-core has; `kind` picks it
    kind = \"fifo\"
    limit_packets = 100

    [service]               # one of:
    rate = \"800kbit\"        #   service time = size * 8 / rate
    # per_item = \"4ms\"      #   or a fixed time per item

TRACE (CSV with a header, or JSON lines), one item per row, in time order:

    time,class,size,id
    0ms,0,1500,1
    0.5ms,1,40,2

or   {\"time\": \"0.5ms\", \"class\": 1, \"size\": 40, \"id\": 2}

OUTPUT events: enqueue, drop (with reason), evict (an older item pushed out), dequeue,
complete (with latency_ns; fed back to disciplines that learn from outcomes, e.g. percentile).

EXAMPLE:
    netsched replay qdisc --config examples/replay/fifo.toml --trace examples/replay/burst.csv";

const BALANCE_HELP: &str = "\
CONFIG (TOML): the balancer and its servers.

    [balancer]
    kind = \"wlc\"              # rr wrr lc wlc sed nq lblc lblcr dh sh mh fo ovf twos p2c

    [[servers]]
    addr = \"10.0.0.1\"
    weight = 3

TRACE (CSV or JSON lines), in time order: a connection opens (a server is picked) or closes.

    time,event,conn,client,dest
    0ms,open,1,192.0.2.10:40000,198.51.100.1:80
    5ms,close,1,,

OUTPUT events: pick (conn, server index and address) or reject (no server available), close.

EXAMPLE:
    netsched replay balance --config examples/replay/wlc.toml --trace examples/replay/conns.csv";

#[derive(Debug, Args)]
struct QdiscReplay {
    /// Discipline and service model (TOML).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// The items to replay (CSV or JSON lines).
    #[arg(long, value_name = "FILE")]
    trace: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct BalanceReplay {
    /// Balancer and servers (TOML).
    #[arg(long, value_name = "FILE")]
    pub(crate) config: PathBuf,
    /// Connection open/close events (CSV or JSON lines).
    #[arg(long, value_name = "FILE")]
    pub(crate) trace: PathBuf,
}

pub fn run(args: ReplayArgs) -> Result<()> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    match args.what {
        ReplayWhat::Qdisc(a) => replay_qdisc(&a.config, &a.trace, &mut out),
        ReplayWhat::Balance(a) => crate::replay_balance::replay_balance(&a, &mut out),
    }?;
    out.flush()?;
    Ok(())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct QdiscReplayConfig {
    qdisc: QdiscConfig,
    service: ServiceConfig,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServiceConfig {
    rate: Option<String>,
    per_item: Option<String>,
}

enum Service {
    Rate(u64),
    PerItem(Nanos),
}

impl Service {
    fn time(&self, size: u32) -> Nanos {
        match self {
            // size*8 bits at `bps` bits per second, in ns, rounded up.
            Service::Rate(bps) => (size as u64 * 8 * 1_000_000_000).div_ceil(*bps),
            Service::PerItem(t) => *t,
        }
    }
}

/// Read a TOML config file, naming the file in every error.
pub(crate) fn read_toml<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config {}", path.display()))?;
    toml::from_str(&text).map_err(|e| anyhow!("{}: {e}", path.display()))
}

/// If the server is idle and the discipline releases an item at `now`, start serving it.
fn try_start(
    q: &mut AnyQdisc<TestItem>,
    in_service: &mut Option<(TestItem, Nanos)>,
    meta: &mut HashMap<u64, (usize, Nanos)>,
    service: &Service,
    now: Nanos,
    dropped: &mut u64,
    out: &mut impl Write,
) -> Result<()> {
    if in_service.is_some() || q.is_empty() {
        return Ok(());
    }
    let next = q.dequeue(now);
    // Items a discipline discarded while choosing (EDF's expired ones) are handed back here.
    for (late, reason) in q.take_evicted() {
        let (class, _) = meta.remove(&late.id).unwrap_or((usize::MAX, 0));
        *dropped += 1;
        writeln!(
            out,
            "{}",
            json!({"t": now, "event": "evict", "id": late.id, "class": class, "reason": reason.as_str()})
        )?;
    }
    if let Some(item) = next {
        let done = now + service.time(item.len);
        writeln!(
            out,
            "{}",
            json!({"t": now, "event": "dequeue", "id": item.id, "class": meta[&item.id].0})
        )?;
        *in_service = Some((item, done));
    }
    Ok(())
}

fn replay_qdisc(config: &Path, trace: &Path, out: &mut impl Write) -> Result<()> {
    let cfg: QdiscReplayConfig = read_toml(config)?;
    let cname = config.display();
    let service = match (&cfg.service.rate, &cfg.service.per_item) {
        (Some(r), None) => {
            Service::Rate(parse_rate_bps(r).map_err(|e| anyhow!("{cname}: service.rate: {e}"))?)
        }
        (None, Some(t)) => Service::PerItem(
            parse_duration_ns(t).map_err(|e| anyhow!("{cname}: service.per_item: `{t}` {e}"))?,
        ),
        _ => bail!("{cname}: [service] needs exactly one of `rate` or `per_item`"),
    };
    let mut q = cfg
        .qdisc
        .build::<TestItem>()
        .map_err(|e| anyhow!("{cname}: [qdisc] {e}"))?;

    // Parse the whole trace first so a bad line fails before any output.
    let tr = Trace::read(trace)?;
    let mut arrivals = Vec::with_capacity(tr.records.len());
    let mut seen = HashMap::new();
    let mut last_t = 0;
    for r in &tr.records {
        let t = r.time_ns(&tr.path, "time")?;
        if t < last_t {
            bail!(
                "{}:{}: field `time`: items must be in time order ({t} ns is before {last_t} ns)",
                tr.path,
                r.line
            );
        }
        last_t = t;
        let class = r.u64(&tr.path, "class")? as usize;
        let size = r.u64(&tr.path, "size")?;
        let size = u32::try_from(size).map_err(|_| {
            anyhow!(
                "{}:{}: field `size`: {size} is larger than 4 GiB",
                tr.path,
                r.line
            )
        })?;
        let id = r.u64(&tr.path, "id")?;
        if let Some(prev) = seen.insert(id, r.line) {
            bail!(
                "{}:{}: field `id`: {id} was already used on line {prev}",
                tr.path,
                r.line
            );
        }
        arrivals.push((t, class, TestItem { id, len: size }));
    }

    let mut meta: HashMap<u64, (usize, Nanos)> = HashMap::new(); // id -> (class, arrival)
    let mut next = 0usize;
    let mut in_service: Option<(TestItem, Nanos)> = None; // (item, done at)
    let mut now: Nanos = 0;
    let (mut completed, mut dropped) = (0u64, 0u64);
    loop {
        try_start(
            &mut q,
            &mut in_service,
            &mut meta,
            &service,
            now,
            &mut dropped,
            out,
        )?;
        let t_arr = arrivals.get(next).map(|a| a.0);
        let t_done = in_service.as_ref().map(|s| s.1);
        let t_timer = if in_service.is_none() && !q.is_empty() {
            q.next_timer(now)
        } else {
            None
        };
        let Some(t) = [t_arr, t_done, t_timer].into_iter().flatten().min() else {
            break;
        };
        now = t;
        // Completions first at equal times: the server frees before the next arrival.
        if t_done == Some(t) {
            let (item, _) = in_service.take().expect("in service");
            let (class, arrived) = meta.remove(&item.id).expect("known item");
            let latency = t - arrived;
            q.feedback(Feedback::Completed { class, latency }, t);
            completed += 1;
            writeln!(
                out,
                "{}",
                json!({"t": t, "event": "complete", "id": item.id, "class": class, "latency_ns": latency})
            )?;
        }
        while let Some(&(ta, class, item)) = arrivals.get(next) {
            if ta != t {
                break;
            }
            next += 1;
            meta.insert(item.id, (class, ta));
            let verdict = q.enqueue(class, item, t);
            match verdict {
                Verdict::Queued => {
                    writeln!(
                        out,
                        "{}",
                        json!({"t": t, "event": "enqueue", "id": item.id, "class": class})
                    )?;
                }
                Verdict::Dropped { item, reason } => {
                    meta.remove(&item.id);
                    dropped += 1;
                    writeln!(
                        out,
                        "{}",
                        json!({"t": t, "event": "drop", "id": item.id, "class": class, "reason": reason.as_str()})
                    )?;
                }
                Verdict::QueuedEvicting { evicted, reason } => {
                    let (eclass, _) = meta.remove(&evicted.id).unwrap_or((usize::MAX, 0));
                    dropped += 1;
                    writeln!(
                        out,
                        "{}",
                        json!({"t": t, "event": "enqueue", "id": item.id, "class": class})
                    )?;
                    writeln!(
                        out,
                        "{}",
                        json!({"t": t, "event": "evict", "id": evicted.id, "class": eclass, "reason": reason.as_str()})
                    )?;
                }
            }
            // A NIC or server takes the head item the moment it is idle, before the next
            // arrival of the same instant.
            try_start(
                &mut q,
                &mut in_service,
                &mut meta,
                &service,
                t,
                &mut dropped,
                out,
            )?;
        }
    }
    let stats = q.stats();
    stats
        .check_identities()
        .map_err(|e| anyhow!("internal accounting error: {e}"))?;
    writeln!(
        out,
        "{}",
        json!({"event": "summary", "items": arrivals.len(), "completed": completed, "dropped": dropped,
               "stats": stats})
    )?;
    Ok(())
}

//! `netsched filter`: the arguments, their checks, and the entry point the binary calls.

use crate::control::{self, ControlServer, CtlArgs, Loader};
use crate::control_error::TablesError;
use crate::engine::{Engine, EngineConfig, MAX_POOL};
use crate::pipeline::{DispatchMode, PipelineConfig, MAX_WORKERS};
use crate::rules::{build_classifier, Action, RuleSet, RulesFormat, RulesOptions};
use crate::signatures::Signatures;
use crate::verdict::{Fragments, OnPanic, OnSignature};
use crate::watchdog;
use crate::work::{Tables, WorkPolicy};
use anyhow::{Context, Result};
use netsched_core::classify::acl::{ClassifierKind, ClassifierLimits};
use netsched_core::units;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest `--block-size` (a buffer slot).
pub const MAX_BLOCK: u32 = 2048;
/// Largest `--worker-queue`.
pub const MAX_WORKER_QUEUE: usize = 4096;
/// Largest `--reorder-window`.
pub const MAX_WINDOW: usize = 1 << 16;

#[derive(Debug, clap::Args)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    about = "Userspace firewall between two interfaces; workers take packet blocks under P1's dispatch policies",
    after_help = "Example:
  netsched filter --input veth-in --output veth-out --rules rules.toml \\
      --signatures sigs.txt --dispatch modified_fcfs --workers 4 --stats 1s

Rules: the TOML rule file (docs/rules.md), or a ClassBench filter set, one rule per line
  @10.1.0.0/16  192.0.2.0/24  0 : 65535  80 : 80  0x06/0xFF  0x0000/0x0000
(source, destination, source ports, destination ports, protocol value/mask, TCP flags that
are ignored), found by its first line starting with @. ClassBench rules carry no action:
--classbench-action gives every rule one and the rest gets the other (drop, the default: a
blocklist, the rest accepted; accept: an allowlist, the rest dropped). For example:
  netsched classify gen --profile acl --rules 10000 --out acl10k.rules
  netsched filter --input veth-in --output veth-out --rules acl10k.rules --classbench-action drop
Every load and reload logs what it loaded, and `ctl reload` answers it:
  rules: 10000 loaded from acl10k.rules (classbench), default accept, tuple_merge, 0.21 s

Dispatch: static_rr, modified_rr, fcfs, modified_fcfs (one block at a time, P1),
flow_hash, work_stealing (whole packets by flow bucket). See docs/filter.md.
Turn offloads off on both interfaces (ethtool -K IF gro off gso off tso off).
Ctrl-C / SIGTERM stops it: what is inside drains, the final counters print as one JSON line.
SIGHUP reloads the rule file as `ctl reload` does (a bad file is refused, the old rules stay).
Runtime control: netsched filter ctl [--control-socket S] show [--json] | reload | set-dispatch MODE."
)]
pub struct FilterArgs {
    /// Interface frames arrive on.
    #[arg(long, required = true)]
    pub input: Option<String>,
    /// Interface accepted frames leave on, or `none` (accepted frames are consumed).
    #[arg(long, required = true)]
    pub output: Option<String>,
    /// Rule file, first match wins: the TOML rule file (docs/rules.md) or a ClassBench filter
    /// set (see --rules-format).
    #[arg(long, required = true)]
    pub rules: Option<PathBuf>,
    /// Format of the rule file: `toml`, `classbench`, or `auto`: ClassBench when its first
    /// line that is neither blank nor a `#` comment starts with `@`, TOML otherwise (decided
    /// again on every reload).
    #[arg(long, default_value = "auto", value_parser = ["auto", "toml", "classbench"])]
    pub rules_format: String,
    /// The action of every rule of a ClassBench file, which has none; a packet no rule
    /// matches gets the other one. `drop` (the default): a blocklist, the rest accepted;
    /// `accept`: an allowlist, the rest dropped. Refused with a TOML file (its rules and
    /// `default` say what they do).
    #[arg(long, value_parser = ["accept", "drop"])]
    pub classbench_action: Option<String>,
    /// How IPv4 packets are matched against the rules: `tuple_merge` (TupleMerge, Daly & Torng
    /// 2017), `tuple_space` (tuple space search) or `linear` (the rules in order); every one
    /// gives the first match. IPv6 packets are matched in order.
    #[arg(long, default_value = "tuple_merge")]
    pub classifier: String,
    /// Signature file (one pattern per line, `\xNN` escapes).
    #[arg(long)]
    pub signatures: Option<PathBuf>,
    /// What a signature match does: drop or mark (forward, counted).
    #[arg(long, default_value = "drop", value_parser = ["drop", "mark"])]
    pub on_signature: String,
    /// What a worker panic does to its packet: drop (fail closed) or forward (fail open).
    #[arg(long, default_value = "drop", value_parser = ["drop", "forward"])]
    pub on_panic: String,
    /// Frames that are not IPv4/IPv6 (ARP…): accept or drop.
    #[arg(long, default_value = "accept", value_parser = ["accept", "drop"])]
    pub non_ip: String,
    /// IP fragments (IPv4 MF or offset ≠ 0, IPv6 Fragment header): drop (counted as
    /// `fragment`) or pass (each classified on its own: a later one without ports, and a
    /// signature split across fragments is not seen).
    #[arg(long, default_value = "drop", value_parser = ["drop", "pass"])]
    pub fragments: String,
    /// static_rr, modified_rr, fcfs, modified_fcfs, flow_hash or work_stealing.
    #[arg(long, default_value = "modified_fcfs")]
    pub dispatch: String,
    /// Worker threads (1..=64).
    #[arg(long, default_value_t = 4)]
    pub workers: usize,
    /// Bytes per block (P1's 64-byte mpackets), 1..=2048.
    #[arg(long, default_value_t = 64)]
    pub block_size: u32,
    /// Tasks one worker may hold (queued and running).
    #[arg(long, default_value_t = 64)]
    pub worker_queue: usize,
    /// Packets the reorder window may hold over all flows (0: no reordering).
    #[arg(long, default_value_t = 1024)]
    pub reorder_window: usize,
    /// Longest a packet waits in the reorder window, e.g. `5ms`.
    #[arg(long, default_value = "5ms")]
    pub reorder_timeout: String,
    /// Receive buffer slots (frames inside the filter at most).
    #[arg(long, default_value_t = 4096)]
    pub pool: usize,
    /// Port backend: `xdp` (an AF_XDP socket per receive queue fed by an XDP program, native
    /// mode), `tpacket` (mmap'ed TPACKET_V2 receive ring), `tpacket-v3` (TPACKET_V3 receive
    /// ring of blocks, 1 ms retire timer), `packet` (recvmmsg/sendmmsg) or `auto` (xdp, else
    /// the tpacket ring, else packet, with the reasons printed).
    #[arg(long, default_value = "auto")]
    pub port: String,
    /// Receive ring frames per port (2 KiB each; 64..=65536, rounded up to 8; xdp: UMEM
    /// receive chunks, at most 32768, rounded up to a power of two).
    #[arg(long, default_value_t = 4096)]
    pub ring_frames: usize,
    /// CPU pinning of the workers: `auto` pins one worker per CPU when there are more CPUs
    /// than workers; `off` leaves them to the scheduler.
    #[arg(long, default_value = "off", value_parser = ["auto", "off"])]
    pub cpu: String,
    /// Deprecated spelling of `--cpu auto`.
    #[arg(long, hide = true)]
    pub pin: bool,
    /// Print counters as JSON lines this often (at least 100ms), e.g. `1s`.
    #[arg(long)]
    pub stats: Option<String>,
    /// Stop after this long (e.g. `30s`); default: until Ctrl-C / SIGTERM.
    #[arg(long)]
    pub duration: Option<String>,
    /// Enter this network namespace (`ip netns` name) before opening the interfaces.
    #[arg(long)]
    pub netns: Option<String>,
    /// Control socket (mode 0660): `netsched filter ctl` talks to it.
    #[arg(long = "control-socket", alias = "control", default_value = control::DEFAULT_SOCKET)]
    pub control: PathBuf,
    /// Group (name or gid) whose members may use the control socket besides root and us.
    #[arg(long)]
    pub control_group: Option<String>,
    /// No control socket.
    #[arg(long, conflicts_with_all = ["control_group"])]
    pub no_control: bool,
    /// Serve Prometheus `GET /metrics` on this loopback address (`PORT` or `IP:PORT`).
    #[arg(long)]
    pub metrics: Option<String>,
    /// Test hook: a block holding these bytes makes its worker panic.
    #[arg(long, hide = true)]
    pub fault_panic_on: Option<String>,
    /// Test hook: this long after start (e.g. `300ms`) the packet thread stops making
    /// progress for good, so the watchdog's tests can stall it (`Engine::stall_after`).
    #[arg(long, hide = true)]
    pub fault_stall_after: Option<String>,
    #[command(subcommand)]
    pub cmd: Option<FilterCmd>,
}

#[derive(Debug, clap::Subcommand)]
pub enum FilterCmd {
    /// Talk to a running filter over its control socket.
    Ctl(CtlArgs),
}

/// Duplicated rules reported shown at most, per load.
const DUPLICATES_SHOWN: usize = 10;

/// A warning per rule that repeats an earlier rule's fields (the first
/// [`DUPLICATES_SHOWN`], then how many more).
fn warn_duplicates(file: &std::path::Path, set: &RuleSet) {
    let dups = set.duplicates();
    for d in dups.iter().take(DUPLICATES_SHOWN) {
        tracing::warn!("{}: {d}", file.display());
    }
    if dups.len() > DUPLICATES_SHOWN {
        tracing::warn!(
            "{}: {} more rules repeat an earlier rule's fields",
            file.display(),
            dups.len() - DUPLICATES_SHOWN
        );
    }
}

/// `--rules-format` and `--classbench-action`, checked.
pub fn rules_options(a: &FilterArgs) -> Result<RulesOptions> {
    let format = match a.rules_format.as_str() {
        "auto" => None,
        "toml" => Some(RulesFormat::Toml),
        "classbench" => Some(RulesFormat::ClassBench),
        other => anyhow::bail!("--rules-format {other}: auto, toml or classbench"),
    };
    let classbench_action = match a.classbench_action.as_deref() {
        None => None,
        Some("accept") => Some(Action::Accept),
        Some("drop") => Some(Action::Drop),
        Some(other) => anyhow::bail!("--classbench-action {other}: accept or drop"),
    };
    anyhow::ensure!(
        !(format == Some(RulesFormat::Toml) && classbench_action.is_some()),
        "--classbench-action applies to ClassBench rule files, not to --rules-format toml"
    );
    Ok(RulesOptions {
        format,
        classbench_action,
    })
}

/// Read the rule (and signature) files into tables of generation `generation`, and log what
/// was loaded (`rules: N loaded from FILE (FORMAT), default ACTION, STRUCTURE, T s`).
pub fn load_tables(
    rules: &std::path::Path,
    options: &RulesOptions,
    signatures: Option<&std::path::Path>,
    classifier: ClassifierKind,
    generation: u64,
) -> Result<Tables, TablesError> {
    let set = RuleSet::load(rules, options).map_err(TablesError::Rules)?;
    warn_duplicates(rules, &set);
    let classifier =
        build_classifier(set, classifier, &ClassifierLimits::default()).map_err(|source| {
            TablesError::Classifier {
                rules: rules.to_path_buf(),
                source,
            }
        })?;
    tracing::info!("{}", classifier.summary());
    let signatures = match signatures {
        Some(p) => Signatures::load(p).map_err(TablesError::Signatures)?,
        None => Signatures::empty(),
    };
    Ok(Tables {
        classifier,
        signatures,
        generation,
    })
}

/// Check the arguments into an engine configuration.
/// `--port` and `--ring-frames`, checked.
fn port_options(a: &FilterArgs) -> Result<netsched_sys::PortOptions> {
    let backend = a
        .port
        .parse::<netsched_sys::PortBackend>()
        .context("--port")?;
    let ring = netsched_sys::RingConfig {
        rx_frames: a.ring_frames,
        tx_frames: 0,
    };
    ring.check("--ring-frames", "--ring-frames")?;
    Ok(netsched_sys::PortOptions { backend, ring })
}

pub fn engine_config(a: &FilterArgs) -> Result<EngineConfig> {
    let mode = DispatchMode::parse(&a.dispatch).map_err(|e| anyhow::anyhow!("--dispatch: {e}"))?;
    anyhow::ensure!(
        (1..=MAX_WORKERS).contains(&a.workers),
        "--workers {}: between 1 and {MAX_WORKERS}",
        a.workers
    );
    anyhow::ensure!(
        (1..=MAX_BLOCK).contains(&a.block_size),
        "--block-size {}: between 1 and {MAX_BLOCK} bytes",
        a.block_size
    );
    anyhow::ensure!(
        (1..=MAX_WORKER_QUEUE).contains(&a.worker_queue),
        "--worker-queue {}: between 1 and {MAX_WORKER_QUEUE}",
        a.worker_queue
    );
    anyhow::ensure!(
        a.reorder_window <= MAX_WINDOW,
        "--reorder-window {}: at most {MAX_WINDOW}",
        a.reorder_window
    );
    anyhow::ensure!(
        (netsched_sys::port::BATCH..=MAX_POOL).contains(&a.pool),
        "--pool {}: between {} and {MAX_POOL}",
        a.pool,
        netsched_sys::port::BATCH
    );
    let timeout = units::parse_duration_in(&a.reorder_timeout, 1_000, 10_000_000_000)
        .context("--reorder-timeout")?;
    let output = a.output.clone().filter(|o| o != "none");
    Ok(EngineConfig {
        input: a.input.clone().unwrap_or_default(),
        output,
        pool_slots: a.pool,
        port: port_options(a)?,
        pipeline: PipelineConfig {
            workers: a.workers,
            block_size: a.block_size,
            worker_queue: a.worker_queue,
            reorder_window: a.reorder_window,
            reorder_timeout_ns: timeout,
            // More flows than slots: a flow with a packet inside always has an entry.
            max_flows: a.pool * 4,
            mode,
            work: WorkPolicy {
                on_signature: if a.on_signature == "mark" {
                    OnSignature::Mark
                } else {
                    OnSignature::Drop
                },
                on_panic: if a.on_panic == "forward" {
                    OnPanic::Forward
                } else {
                    OnPanic::Drop
                },
                accept_non_ip: a.non_ip == "accept",
                fragments: if a.fragments == "pass" {
                    Fragments::Pass
                } else {
                    Fragments::Drop
                },
                fault_panic_on: a.fault_panic_on.as_ref().map(|s| s.as_bytes().to_vec()),
            },
            pin: a.pin || a.cpu == "auto",
        },
    })
}

pub fn run_filter(a: FilterArgs) -> Result<()> {
    if let Some(FilterCmd::Ctl(c)) = &a.cmd {
        return control::run_ctl(c);
    }
    let cfg = engine_config(&a)?;
    let rules = a.rules.clone().context("--rules FILE is needed")?;
    let options = rules_options(&a)?;
    let sigs = a.signatures.clone();
    let kind: ClassifierKind = a
        .classifier
        .parse()
        .map_err(|e| anyhow::anyhow!("--classifier: {e}"))?;
    let tables = load_tables(&rules, &options, sigs.as_deref(), kind, 1)?;
    let metrics_addr = a
        .metrics
        .as_deref()
        .map(|m| netsched_metrics::parse_addr("--metrics", m, false, "(none)"))
        .transpose()?;
    let stats_every = a
        .stats
        .as_deref()
        .map(|s| units::parse_duration_in(s, 100_000_000, units::MAX_DURATION))
        .transpose()
        .context("--stats")?
        .map(Duration::from_nanos);
    let duration = a
        .duration
        .as_deref()
        .map(|d| units::parse_duration_in(d, 1, units::MAX_DURATION))
        .transpose()
        .context("--duration")?
        .map(Duration::from_nanos);
    let stall_after = a
        .fault_stall_after
        .as_deref()
        .map(|d| units::parse_duration_in(d, 1, units::MAX_DURATION))
        .transpose()
        .context("--fault-stall-after")?
        .map(Duration::from_nanos);
    let _signals = netsched_testbed::SignalGuard::install()?;
    if let Some(ns) = &a.netns {
        netsched_testbed::enter_netns(ns).with_context(|| format!("--netns {ns}"))?;
    }
    let mut engine = Engine::open(&cfg, Arc::new(tables))?;
    if let Some(d) = stall_after {
        engine.stall_after(d);
    }
    let health = engine.health();
    // The packet thread's counters, published every ~100 ms: `/metrics` scrapes them, and
    // `show` reads them while the packet thread is stalled.
    let latest = Arc::new(netsched_metrics::Latest::new());
    engine.attach_metrics(latest.clone());
    for p in engine.ports() {
        if let Some(w) = p.offloads().warning("netsched filter", p.name()) {
            tracing::warn!("{w}");
        }
    }
    tracing::info!(
        "{} -> {} with {} over {} workers, {}-byte blocks (Ctrl-C stops)",
        cfg.input,
        cfg.output.as_deref().unwrap_or("none"),
        cfg.pipeline.mode.name(),
        cfg.pipeline.workers,
        cfg.pipeline.block_size
    );
    // One command channel for `ctl reload` and SIGHUP: the rule file is read and compiled
    // on a build thread, never on the packet thread (control.rs).
    let rules_file = rules.clone();
    let loader: Loader =
        Arc::new(move |g| load_tables(&rules, &options, sigs.as_deref(), kind, g).map(Arc::new));
    let (outbox, inbox) = control::channel(loader);
    let outbox = outbox.with_watchdog(health.clone(), latest.clone());
    engine.attach_control(inbox);
    let reloads = outbox.reloads().clone();
    let _hangup = {
        let outbox = outbox.clone();
        netsched_sys::process::HangupThread::spawn("filter-sighup", move || {
            outbox.reload_on_signal(&rules_file)
        })?
    };
    let _control = if a.no_control {
        None
    } else {
        let server = ControlServer::start(&a.control, a.control_group.as_deref(), outbox)?;
        tracing::info!("control socket {}", a.control.display());
        Some(server)
    };
    let _metrics = match metrics_addr {
        None => None,
        Some(addr) => {
            let server =
                crate::metrics::serve_with_reloads(addr, latest.clone(), engine.devs(), &reloads)?;
            tracing::info!("metrics on http://{}/metrics", server.addr());
            Some(server)
        }
    };
    let print = |s: &crate::stats::FilterStats| {
        if !s.identity_holds {
            tracing::error!("accounting identity broken: {s:?}");
        }
        println!("{}", serde_json::to_string(s).unwrap_or_default());
    };
    // The packet thread runs the engine; this thread answers signals and watches it.
    let packet = std::thread::Builder::new()
        .name("filter-packet".into())
        .spawn(move || {
            let mut print = print;
            engine.run(
                &netsched_testbed::interrupted,
                duration,
                stats_every,
                &mut print,
            );
            engine.finish()
        })
        .context("starting the packet thread")?;
    let final_stats = watch(packet, &health)?;
    println!(
        "{}",
        serde_json::to_string(&serde_json::json!({ "final": final_stats }))?
    );
    anyhow::ensure!(
        final_stats.identity_holds,
        "accounting identity broken at the end: received {} != forwarded {} + dropped {} + queued {}",
        final_stats.received,
        final_stats.forwarded,
        final_stats.dropped,
        final_stats.queued
    );
    Ok(())
}

/// Wait for the packet thread, watching its heartbeat ([`crate::watchdog`]). After
/// SIGINT/SIGTERM it gets until it stops on its own, unless it is stalled or has not stopped
/// within [`watchdog::STOP_BOUND`]: then the error returned makes the caller clean up (the
/// control socket file goes with its server) and exit non-zero without it.
fn watch(
    packet: std::thread::JoinHandle<crate::stats::FilterStats>,
    health: &crate::watchdog::Health,
) -> Result<crate::stats::FilterStats> {
    let mut dog = watchdog::Watchdog::new(health, watchdog::STALL, Instant::now());
    let mut signalled: Option<Instant> = None;
    loop {
        if packet.is_finished() {
            return packet
                .join()
                .map_err(|_| anyhow::anyhow!("the packet thread panicked"));
        }
        let now = Instant::now();
        let stalled = dog.check(health, now);
        if netsched_testbed::interrupted() {
            let at = *signalled.get_or_insert(now);
            if stalled || now.duration_since(at) >= watchdog::STOP_BOUND {
                tracing::error!(
                    "stopping without the packet thread ({}): no final counters",
                    if stalled {
                        "stalled"
                    } else {
                        "not stopped in time"
                    }
                );
                anyhow::bail!(
                    "the packet thread did not stop after the signal ({} stalls); exited without it",
                    health.stalls()
                );
            }
        }
        // The watchdog's period: a signal or a stall is seen within one tick.
        std::thread::sleep(watchdog::TICK);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        filter: FilterArgs,
    }

    fn parse(extra: &[&str]) -> Result<EngineConfig> {
        let base = [
            "filter", "--input", "a", "--output", "b", "--rules", "r.toml",
        ];
        let args = Cmd::try_parse_from(base.iter().chain(extra))?;
        engine_config(&args.filter)
    }

    #[test]
    fn fragments_drop_by_default_pass_on_request_and_nothing_else_is_taken() {
        let fragments = |extra: &[&str]| parse(extra).map(|c| c.pipeline.work.fragments);
        assert_eq!(fragments(&[]).unwrap(), Fragments::Drop);
        assert_eq!(
            fragments(&["--fragments", "drop"]).unwrap(),
            Fragments::Drop
        );
        assert_eq!(
            fragments(&["--fragments", "pass"]).unwrap(),
            Fragments::Pass
        );
        let e = fragments(&["--fragments", "reassemble"]).unwrap_err();
        assert!(e.to_string().contains("reassemble"), "{e}");
    }
}

//! `netsched filter`: the arguments, their checks, and the entry point the binary calls.

use crate::classifier::build_classifier;
use crate::config::{FilterOptions, Settings};
use crate::control::{self, ControlServer, CtlArgs, Loader};
use crate::control_error::TablesError;
use crate::engine::{Engine, EngineConfig, MAX_POOL};
use crate::pipeline::{DispatchMode, PipelineConfig, MAX_WORKERS};
use crate::rules::{Action, RuleSet, RulesFormat, RulesOptions};
use crate::signatures::Signatures;
use crate::verdict::{Fragments, OnPanic, OnSignature};
use crate::watchdog;
use crate::work::{Tables, WorkPolicy};
use anyhow::{Context, Result};
use netsched_core::classify::acl::{ClassifierKind, ClassifierLimits};
use netsched_core::units;
use netsched_sys::iface_watch::{self, InterfaceWatch};
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
The same from a file (each flag a key in snake_case; flags on the command line win):
  netsched filter --config /etc/netsched/filter/example.toml --check
  netsched filter --config /etc/netsched/filter/example.toml

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
SIGHUP reloads as `ctl reload` does: the --config file again (rules, rules_format,
classbench_action, classifier, signatures; another changed key refuses the file), then the rule
and signature files; a bad file is refused whole and the old rules stay.
Runtime control: netsched filter ctl [--control-socket PATH | --instance NAME]
  show [--json] | reload | set-dispatch MODE | rules [--from N] [--count N] |
  rule add|insert|delete ... (rules changed one at a time while packets flow)."
)]
pub struct FilterArgs {
    /// Configuration file (TOML): every setting below as a key, its flag's long name in
    /// snake_case (`block_size = 64`; docs/filter.md). A flag given here wins over the file;
    /// SIGHUP and `ctl reload` read the file again.
    #[arg(long, short = 'c')]
    pub config: Option<PathBuf>,
    /// Validate the settings, the rule and signature files and what they ask of the host —
    /// the interfaces exist (in --netns if given), the control socket path can be taken, the
    /// group exists, the metrics address can be bound — then exit: 0 valid, 1 invalid.
    #[arg(long)]
    pub check: bool,
    #[command(flatten)]
    pub opts: FilterOptions,
    /// No control socket.
    #[arg(long, conflicts_with_all = ["control_group"])]
    pub no_control: bool,
    /// Deprecated spelling of `--cpu auto`.
    #[arg(long, hide = true)]
    pub pin: bool,
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

/// `rules_format` and `classbench_action`, checked.
pub fn rules_options(s: &Settings) -> Result<RulesOptions> {
    let o = &s.opts;
    let format = match s.choice(
        "rules_format",
        o.rules_format.as_deref(),
        "auto",
        &["auto", "toml", "classbench"],
    )? {
        "toml" => Some(RulesFormat::Toml),
        "classbench" => Some(RulesFormat::ClassBench),
        _ => None,
    };
    let classbench_action = match o.classbench_action.as_deref() {
        None => None,
        Some(v) => match s.choice("classbench_action", Some(v), "", &["accept", "drop"])? {
            "accept" => Some(Action::Accept),
            _ => Some(Action::Drop),
        },
    };
    anyhow::ensure!(
        !(format == Some(RulesFormat::Toml) && classbench_action.is_some()),
        "{}: applies to ClassBench rule files, not to rules_format toml",
        s.key("classbench_action")
    );
    Ok(RulesOptions {
        format,
        classbench_action,
    })
}

/// The rule file, its options and the classifier structure: what a (re)load reads.
pub struct RuleSource {
    pub rules: PathBuf,
    pub options: RulesOptions,
    pub signatures: Option<PathBuf>,
    pub classifier: ClassifierKind,
}

impl RuleSource {
    pub fn of(s: &Settings) -> Result<RuleSource> {
        let rules = s
            .opts
            .rules
            .clone()
            .with_context(|| need(s, "rules", "FILE"))?;
        let classifier = s.opts.classifier.as_deref().unwrap_or("tuple_merge");
        Ok(RuleSource {
            rules,
            options: rules_options(s)?,
            signatures: s.opts.signatures.clone(),
            classifier: classifier
                .parse()
                .map_err(|e| anyhow::anyhow!("{} {classifier}: {e}", s.key("classifier")))?,
        })
    }

    pub fn load(&self, generation: u64) -> Result<Tables, TablesError> {
        load_tables(
            &self.rules,
            &self.options,
            self.signatures.as_deref(),
            self.classifier,
            generation,
        )
    }
}

/// The error for a setting that must be given.
fn need(s: &Settings, key: &str, what: &str) -> String {
    match &s.file {
        Some(f) => format!(
            "{key} is needed: --{} {what}, or `{key} = ...` in {}",
            key.replace('_', "-"),
            f.display()
        ),
        None => format!(
            "--{} {what} is needed (or --config FILE)",
            key.replace('_', "-")
        ),
    }
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

/// `port` and `ring_frames`, checked.
fn port_options(s: &Settings) -> Result<netsched_sys::PortOptions> {
    let port = s.opts.port.as_deref().unwrap_or("auto");
    let backend = port
        .parse::<netsched_sys::PortBackend>()
        .with_context(|| format!("{} {port}", s.key("port")))?;
    let ring = netsched_sys::RingConfig {
        rx_frames: s.opts.ring_frames.unwrap_or(4096),
        tx_frames: 0,
    };
    let key = s.key("ring_frames");
    ring.check(&key, &key)?;
    Ok(netsched_sys::PortOptions { backend, ring })
}

/// A count setting with its default, within `range`.
fn count<T>(
    s: &Settings,
    key: &'static str,
    v: Option<T>,
    default: T,
    range: std::ops::RangeInclusive<T>,
) -> Result<T>
where
    T: PartialOrd + Copy + std::fmt::Display,
{
    let v = v.unwrap_or(default);
    anyhow::ensure!(
        range.contains(&v),
        "{} {v}: between {} and {}",
        s.key(key),
        range.start(),
        range.end()
    );
    Ok(v)
}

/// The worker's per-packet policies (`on_signature`, `on_panic`, `non_ip`, `fragments`).
fn work_policy(a: &FilterArgs, s: &Settings) -> Result<WorkPolicy> {
    let o = &s.opts;
    Ok(WorkPolicy {
        on_signature: match s.choice(
            "on_signature",
            o.on_signature.as_deref(),
            "drop",
            &["drop", "mark"],
        )? {
            "mark" => OnSignature::Mark,
            _ => OnSignature::Drop,
        },
        on_panic: match s.choice(
            "on_panic",
            o.on_panic.as_deref(),
            "drop",
            &["drop", "forward"],
        )? {
            "forward" => OnPanic::Forward,
            _ => OnPanic::Drop,
        },
        accept_non_ip: s.choice("non_ip", o.non_ip.as_deref(), "accept", &["accept", "drop"])?
            == "accept",
        fragments: match s.choice(
            "fragments",
            o.fragments.as_deref(),
            "drop",
            &["drop", "pass"],
        )? {
            "pass" => Fragments::Pass,
            _ => Fragments::Drop,
        },
        fault_panic_on: a.fault_panic_on.as_ref().map(|s| s.as_bytes().to_vec()),
    })
}

/// Check the settings into an engine configuration.
pub fn engine_config(a: &FilterArgs, s: &Settings) -> Result<EngineConfig> {
    let o = &s.opts;
    let dispatch = o.dispatch.as_deref().unwrap_or("modified_fcfs");
    let mode = DispatchMode::parse(dispatch)
        .map_err(|e| anyhow::anyhow!("{} {dispatch}: {e}", s.key("dispatch")))?;
    let workers = count(s, "workers", o.workers, 4, 1..=MAX_WORKERS)?;
    let block_size = count(s, "block_size", o.block_size, 64, 1..=MAX_BLOCK)?;
    let worker_queue = count(s, "worker_queue", o.worker_queue, 64, 1..=MAX_WORKER_QUEUE)?;
    let reorder_window = count(s, "reorder_window", o.reorder_window, 1024, 0..=MAX_WINDOW)?;
    let pool = count(
        s,
        "pool",
        o.pool,
        4096,
        netsched_sys::port::BATCH..=MAX_POOL,
    )?;
    let timeout = o.reorder_timeout.as_deref().unwrap_or("5ms");
    let reorder_timeout_ns = units::parse_duration_in(timeout, 1_000, 10_000_000_000)
        .with_context(|| format!("{} {timeout}", s.key("reorder_timeout")))?;
    let input = o.input.clone().with_context(|| need(s, "input", "IF"))?;
    let output = o
        .output
        .clone()
        .with_context(|| need(s, "output", "IF|none"))?;
    let cpu = s.choice("cpu", o.cpu.as_deref(), "off", &["auto", "off"])?;
    Ok(EngineConfig {
        input,
        output: Some(output).filter(|o| o != "none"),
        pool_slots: pool,
        port: port_options(s)?,
        pipeline: PipelineConfig {
            workers,
            block_size,
            worker_queue,
            reorder_window,
            reorder_timeout_ns,
            // More flows than slots: a flow with a packet inside always has an entry.
            max_flows: pool * 4,
            mode,
            work: work_policy(a, s)?,
            pin: a.pin || cpu == "auto",
        },
    })
}

/// A duration setting within `min_ns..=MAX_DURATION`.
fn duration(
    s: &Settings,
    key: &'static str,
    v: Option<&str>,
    min_ns: u64,
) -> Result<Option<Duration>> {
    v.map(|d| {
        units::parse_duration_in(d, min_ns, units::MAX_DURATION)
            .with_context(|| format!("{} {d}", s.key(key)))
            .map(Duration::from_nanos)
    })
    .transpose()
}

/// `--check`: what a start needs of the host besides valid settings.
fn check_host(
    a: &FilterArgs,
    s: &Settings,
    cfg: &EngineConfig,
    metrics: Option<std::net::SocketAddr>,
) -> Result<()> {
    use netsched_testbed::check;
    if let Some(ns) = &s.opts.netns {
        netsched_testbed::enter_netns(ns).with_context(|| format!("{} {ns}", s.key("netns")))?;
    }
    check::interface(&s.key("input"), &cfg.input)?;
    if let Some(o) = &cfg.output {
        check::interface(&s.key("output"), o)?;
    }
    let mut running = false;
    if !a.no_control {
        running = check::socket_path(&s.key("control_socket"), &control_socket(s))?
            == check::SocketPath::Running;
        if let Some(g) = &s.opts.control_group {
            check::group(&s.key("control_group"), g)?;
        }
    }
    // A filter at the socket is the one a reload checks for: its address is its own.
    if let Some(m) = metrics.filter(|_| !running) {
        check::tcp_address(&s.key("metrics"), m)?;
    }
    Ok(())
}

fn control_socket(s: &Settings) -> PathBuf {
    s.opts
        .control_socket
        .clone()
        .unwrap_or_else(|| PathBuf::from(control::DEFAULT_SOCKET))
}

/// What a reload reads: the configuration file again when there is one (refused whole when
/// it changes a key only a restart applies, `config.rs`), else the same rule files.
fn loader(a: &FilterArgs, running: Settings, start: RuleSource) -> Loader {
    let Some(file) = a.config.clone() else {
        return Arc::new(move |g| start.load(g).map(Arc::new));
    };
    let flags = a.opts.clone();
    Arc::new(move |g| {
        let bad = |e: String| TablesError::Config(e);
        let read = Settings::resolve(&flags, Some(&file)).map_err(|e| bad(e.to_string()))?;
        running
            .check_reload(&read)
            .map_err(|e| bad(e.to_string()))?;
        let source = RuleSource::of(&read).map_err(|e| bad(format!("{e:#}")))?;
        source.load(g).map(Arc::new)
    })
}

pub fn run_filter(a: FilterArgs) -> Result<()> {
    if let Some(FilterCmd::Ctl(c)) = &a.cmd {
        return control::run_ctl(c);
    }
    let settings = Settings::resolve(&a.opts, a.config.as_deref())?;
    let s = &settings;
    let cfg = engine_config(&a, s)?;
    let source = RuleSource::of(s)?;
    let tables = source.load(1)?;
    let metrics_addr = s
        .opts
        .metrics
        .as_deref()
        .map(|m| {
            let public = s.opts.metrics_public.unwrap_or(false);
            netsched_metrics::parse_addr(&s.key("metrics"), m, public, "--metrics-public")
        })
        .transpose()?;
    let stats_every = duration(s, "stats", s.opts.stats.as_deref(), 100_000_000)?;
    let duration_limit = duration(s, "duration", s.opts.duration.as_deref(), 1)?;
    let stall_after = duration(s, "fault_stall_after", a.fault_stall_after.as_deref(), 1)?;
    if a.check {
        check_host(&a, s, &cfg, metrics_addr)?;
        println!(
            "{}: ok ({} -> {}, {} rules file {}, {} over {} workers)",
            a.config
                .as_deref()
                .map_or("flags".to_string(), |c| c.display().to_string()),
            cfg.input,
            cfg.output.as_deref().unwrap_or("none"),
            tables.classifier.summary(),
            source.rules.display(),
            cfg.pipeline.mode.name(),
            cfg.pipeline.workers,
        );
        return Ok(());
    }
    let _signals = netsched_testbed::SignalGuard::install()?;
    if let Some(ns) = &s.opts.netns {
        netsched_testbed::enter_netns(ns).with_context(|| format!("{} {ns}", s.key("netns")))?;
    }
    let mut engine = Engine::open(&cfg, Arc::new(tables))?;
    // An interface deleted (or made again) under the filter stops it with the reason.
    let (input_key, output_key) = (s.key("input"), s.key("output"));
    let mut devs = vec![(input_key.as_str(), cfg.input.as_str())];
    if let Some(out) = &cfg.output {
        devs.push((output_key.as_str(), out.as_str()));
    }
    let ifaces = InterfaceWatch::spawn(&devs, iface_watch::PERIOD)?;
    let lost = ifaces.lost();
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
    // One command channel for `ctl reload` and SIGHUP: the files are read and compiled on a
    // build thread, never on the packet thread (control.rs).
    let reread = a.config.clone().unwrap_or_else(|| source.rules.clone());
    let (outbox, inbox) = control::channel(loader(&a, settings.clone(), source));
    let outbox = outbox.with_watchdog(health.clone(), latest.clone());
    engine.attach_control(inbox);
    let reloads = outbox.reloads().clone();
    let _hangup = {
        let outbox = outbox.clone();
        netsched_sys::process::HangupThread::spawn("filter-sighup", move || {
            outbox.reload_on_signal(&reread)
        })?
    };
    let _control = if a.no_control {
        None
    } else {
        let path = control_socket(s);
        let server = ControlServer::start(&path, s.opts.control_group.as_deref(), outbox)?;
        tracing::info!("control socket {}", path.display());
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
    let stop_lost = lost.clone();
    // The packet thread runs the engine; this thread answers signals and watches it.
    let packet = std::thread::Builder::new()
        .name("filter-packet".into())
        .spawn(move || {
            let mut print = print;
            engine.run(
                &|| netsched_testbed::interrupted() || stop_lost.is_set(),
                duration_limit,
                stats_every,
                &mut print,
            );
            engine.finish()
        })
        .context("starting the packet thread")?;
    netsched_util::notify::ready("netsched filter", "filtering");
    let watched = watch(packet, &health);
    netsched_util::notify::stopping("netsched filter");
    let final_stats = watched?;
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
    match lost.why() {
        Some(why) => Err(anyhow::anyhow!("{why}: stopped filtering")),
        None => Ok(()),
    }
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
        let s = Settings::resolve(&args.filter.opts, None)?;
        engine_config(&args.filter, &s)
    }

    #[test]
    fn a_bad_value_from_the_file_names_the_file_and_key() {
        let dir = std::env::temp_dir().join(format!("netsched-filter-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("f.toml");
        std::fs::write(
            &f,
            "input = \"a\"\noutput = \"b\"\nworkers = 99\nfragments = \"keep\"\n",
        )
        .unwrap();
        let args = Cmd::try_parse_from(["filter", "--config", f.to_str().unwrap()]).unwrap();
        let s = Settings::resolve(&args.filter.opts, args.filter.config.as_deref()).unwrap();
        let e = engine_config(&args.filter, &s).unwrap_err().to_string();
        assert_eq!(
            e,
            format!("{}: workers = 99: between 1 and 64", f.display())
        );
        let args =
            Cmd::try_parse_from(["filter", "-c", f.to_str().unwrap(), "--workers", "2"]).unwrap();
        let s = Settings::resolve(&args.filter.opts, args.filter.config.as_deref()).unwrap();
        let e = engine_config(&args.filter, &s).unwrap_err().to_string();
        assert_eq!(
            e,
            format!("{}: fragments = keep: one of drop, pass", f.display())
        );
        let args = Cmd::try_parse_from(["filter", "--workers", "0"]).unwrap();
        let s = Settings::resolve(&args.filter.opts, None).unwrap();
        let e = engine_config(&args.filter, &s).unwrap_err().to_string();
        assert_eq!(e, "--workers 0: between 1 and 64");
        std::fs::remove_dir_all(&dir).unwrap();
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

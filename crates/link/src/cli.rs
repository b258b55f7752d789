//! The command line of this crate: `netsched link` (run, `bench`) and `netsched shape`
//! (apply, show, clear) — clap arguments, their conversion into the typed configurations of
//! [`crate::engine`] and [`crate::shape`], and the two entry points the `netsched` binary
//! calls. Every duration and rate goes through `netsched_core::units` with this file's bounds.

use crate::args_error::ArgsError;
use crate::engine::{DirConfig, Engine, EngineConfig, StatsOutlet};
use crate::shape::{self, ShapePlan, Target};
use anyhow::{Context, Result};
use netsched_core::units::{self, format_rate, UnitError};
use netsched_core::{Nanos, SEC};
use netsched_sys::iface_watch::{self, InterfaceWatch};

/// Longest propagation delay of one direction: 10 s (a delay line of 4096 frames at 10 s
/// is already far beyond any access link).
pub const MAX_DELAY: Nanos = 10 * SEC;
/// Longest `--stats` interval.
pub const MAX_STATS_INTERVAL: Nanos = 3600 * SEC;

/// Arguments of `netsched link`.
#[derive(Debug, clap::Args)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    about = "Run the userspace link engine between two interfaces (AF_PACKET)",
    long_about = "Forward Ethernet frames between two interfaces with AF_PACKET, emulating a \
link in each direction: a core queue discipline (FIFO, ACK separation, ...), a rate and a \
propagation delay. Both interfaces should carry no IP addresses (the engine is the wire). \
Turn TSO/GSO/GRO off on them (ethtool -K IF tso off gso off gro off) so frames are \
wire-sized.",
    after_help = "Examples:
  # ADSL-like access link: 800 kbit/s up with a 100-packet FIFO, 2.1 Mbit/s down, 10 ms each way
  netsched link --dev-a lan0 --dev-b wan0 --ab-rate 800kbit --ab-qdisc fifo:100 \\
      --ba-rate 2.1mbit --ba-qdisc fifo:1000 --delay 10ms --stats 1s
  # the same with P3's ACK separation on the uplink (pure ACKs strictly first)
  netsched link --dev-a lan0 --dev-b wan0 --ab-rate 800kbit --ab-qdisc ack_sep:100 \\
      --ba-rate 2.1mbit --delay 10ms
  # strong asymmetry: ACK filter (RFC 3449) and ACKs capped at half of the uplink
  netsched link --dev-a lan0 --dev-b wan0 --ab-rate 1mbit --ab-qdisc ack_sep:100+filter+cap=0.5 \\
      --ba-rate 50mbit --delay 10ms
  # any discipline as JSON (the scenario-file form of QdiscConfig)
  netsched link --dev-a a --dev-b b --ab-qdisc '{\"kind\":\"fifo\",\"queue_limit\":50}'
  # measure forwarding speed against the kernel (creates and removes its own namespaces)
  netsched link bench

Rates as in tc(8) (800kbit, 2.1mbit, 1gbit, 100kbps = bytes/s; `none` = unlimited).
Delays: 10ms, 500us, 0 (at most 10s). --stats: at least 100ms; --duration: at most 30 days."
)]
pub struct LinkArgs {
    #[command(subcommand)]
    pub sub: Option<LinkSub>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, clap::Subcommand)]
pub enum LinkSub {
    /// Measure packets/s and added latency of the engine against kernel forwarding.
    Bench(crate::bench::BenchArgs),
}

#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// First interface (a→b is "up" in the ADSL experiment).
    #[arg(long, required = true)]
    pub dev_a: Option<String>,
    /// Second interface.
    #[arg(long, required = true)]
    pub dev_b: Option<String>,
    /// Rate a→b (`none` = unlimited).
    #[arg(long, default_value = "none")]
    pub ab_rate: String,
    /// Rate b→a (`none` = unlimited).
    #[arg(long, default_value = "none")]
    pub ba_rate: String,
    /// Propagation delay both ways (overridden per direction by --ab-delay / --ba-delay).
    #[arg(long, default_value = "0")]
    pub delay: String,
    /// Propagation delay a→b (default: --delay).
    #[arg(long)]
    pub ab_delay: Option<String>,
    /// Propagation delay b→a (default: --delay).
    #[arg(long)]
    pub ba_delay: Option<String>,
    /// Discipline a→b: `fifo[:N]`, `ack_sep[:N][+filter][+cap=S]`, or a QdiscConfig as JSON.
    #[arg(long, default_value = "fifo:1000")]
    pub ab_qdisc: String,
    /// Discipline b→a.
    #[arg(long, default_value = "fifo:1000")]
    pub ba_qdisc: String,
    /// Frame slots per direction (2 KiB each): the engine's memory bound.
    #[arg(long, default_value_t = 8192)]
    pub pool: usize,
    /// Most frames in flight on one direction's delay line.
    #[arg(long, default_value_t = 4096)]
    pub delay_line: usize,
    /// Print a JSON line of counters at this interval (e.g. 1s; at least 100ms).
    #[arg(long)]
    pub stats: Option<String>,
    /// After a frame, keep polling for input without sleeping this long (0 = off, sleep at
    /// once; at most 10ms): fewer wake-ups and less latency in bursts, for a little CPU.
    /// `always` never sleeps: lowest latency, one core at 100 %.
    #[arg(long, default_value = "50us", num_args = 0..=1, default_missing_value = "always")]
    pub busy_poll: String,
    /// Deprecated spelling of --busy-poll DURATION.
    #[arg(long, hide = true, conflicts_with = "busy_poll")]
    pub spin: Option<String>,
    /// Port backend: `xdp` (an AF_XDP socket per receive queue fed by an XDP program, native
    /// mode), `tpacket` (mmap'ed TPACKET_V2 receive ring), `tpacket_v3` (TPACKET_V3 receive
    /// ring of blocks, 1 ms retire timer), `packet` (recvmmsg/sendmmsg) or `auto` (xdp, else
    /// the tpacket ring, else packet, with the reasons printed).
    #[arg(long, default_value = "auto")]
    pub port: String,
    /// Receive ring frames per port (2 KiB each; 64..=65536, rounded up to 8; xdp: UMEM
    /// receive chunks, at most 32768, rounded up to a power of two).
    #[arg(long, default_value_t = 4096)]
    pub ring_frames: usize,
    /// Transmit ring frames per port (2 KiB each; 0 = send with sendmmsg; xdp: UMEM transmit
    /// chunks, 0 = 1024).
    #[arg(long, default_value_t = 0)]
    pub tx_ring_frames: usize,
    /// Stop after this long (e.g. 30s); default: until SIGINT/SIGTERM.
    #[arg(long)]
    pub duration: Option<String>,
    /// Serve Prometheus metrics on GET /metrics at ADDR: PORT (= 127.0.0.1:PORT), IP:PORT or
    /// [IPv6]:PORT; port 0 picks a free port (printed). Loopback only unless --metrics-public.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// Allow --metrics on an address that is not loopback.
    #[arg(long, requires = "metrics")]
    pub metrics_public: bool,
    /// Validate the flags and what they ask of the host — both interfaces exist, the
    /// metrics address can be bound — then exit: 0 valid, 1 invalid.
    #[arg(long)]
    pub check: bool,
}

#[derive(Debug, clap::Args)]
#[command(
    about = "Install ACK separation (P3) on a gateway interface with tc (HTB + u32)",
    long_about = "Install ACK separation (P3) on a gateway interface with tc: an HTB root \
shaped a few percent below the uplink rate (so the queue sits in the gateway, not the modem), \
an ACK class served with strict priority and a bulk class, each with a pfifo of bounded \
length, and u32 filters sending pure TCP ACKs (IPv4 and IPv6) to the ACK class.",
    after_help = "Examples:
  netsched shape apply --dev eth1 --up 800kbit --dry-run      # print the exact tc script
  netsched shape apply --dev eth1 --up 800kbit --queue-limit 100 --ack-queue-limit 100
  netsched shape apply --dev eth1 --up 1mbit --down 50mbit --ifb ifb0
  netsched shape apply --dev eth1 --up 800kbit --no-ack-priority   # one FIFO (baseline)
  netsched shape show --dev eth1 --json
  netsched shape clear --dev eth1

Rates as in tc(8): bit, kbit, mbit, gbit (bits/s; k = 1000) or bps, kbps, mbps, gbps
(bytes/s), e.g. 800kbit, 2.1mbit, 1gbit; between 8bit and 400gbit."
)]
pub struct ShapeArgs {
    #[command(subcommand)]
    pub cmd: ShapeCmd,
}

#[derive(Debug, clap::Subcommand)]
pub enum ShapeCmd {
    /// Install (or replace) the ACK-separation tree on an interface.
    Apply(ApplyArgs),
    /// Show the installed classes with packets, drops and backlog.
    Show {
        /// Interface.
        #[arg(long)]
        dev: String,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Remove what `apply` installed (root qdisc, ingress redirect, IFB tree) — only that.
    Clear {
        /// Interface.
        #[arg(long)]
        dev: String,
    },
}

#[derive(Debug, Clone, clap::Args)]
pub struct ApplyArgs {
    /// Uplink interface (egress is shaped).
    #[arg(long)]
    pub dev: String,
    /// Uplink line rate, e.g. 800kbit. The HTB root is set `--headroom` percent below it.
    #[arg(long)]
    pub up: String,
    /// Downlink line rate, e.g. 2.1mbit: shape ingress too, through `--ifb`.
    #[arg(long, requires = "ifb")]
    pub down: Option<String>,
    /// IFB device used for download shaping (created if missing; must be of kind ifb).
    #[arg(long, requires = "down")]
    pub ifb: Option<String>,
    /// Most packets the bulk class queues (its tc `pfifo limit`).
    #[arg(long = "queue-limit", alias = "queue", default_value_t = 100)]
    pub queue: u32,
    /// Most packets the ACK class queues.
    #[arg(long = "ack-queue-limit", alias = "ack-queue", default_value_t = 100)]
    pub ack_queue: u32,
    /// Percent below the line rate to shape at (0–50).
    #[arg(long, default_value_t = 5.0)]
    pub headroom: f64,
    /// No ACK class: one bulk FIFO only (the paper's baseline, shaped the same way).
    #[arg(long)]
    pub no_ack_priority: bool,
    /// Discard a configuration not installed by netsched shape (it cannot be restored).
    #[arg(long)]
    pub replace: bool,
    /// Print the exact commands and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Validate the flags and what they ask of the host — the interface exists, the IFB
    /// name is free or an IFB device, tc is installed — change nothing, then exit: 0 valid,
    /// 1 invalid.
    #[arg(long, conflicts_with = "dry_run")]
    pub check: bool,
}

/// `netsched link`: run the engine (or `bench`).
pub fn run_link(args: LinkArgs) -> Result<()> {
    if let Some(LinkSub::Bench(b)) = args.sub {
        return crate::bench::run(b);
    }
    let cfg = args.run.config()?;
    let duration = args
        .run
        .duration
        .as_deref()
        .map(|d| units::parse_duration_in(d, 1, units::MAX_DURATION))
        .transpose()
        .context("--duration")?;
    let metrics_addr = args.run.metrics_addr()?;
    if args.run.check {
        use netsched_testbed::check;
        let host = || -> Result<(), check::HostCheckError> {
            check::interface("--dev-a", &cfg.dev_a)?;
            check::interface("--dev-b", &cfg.dev_b)?;
            if let Some(a) = metrics_addr {
                check::tcp_address("--metrics", a)?;
            }
            Ok(())
        };
        host()?;
        println!("ok ({} <-> {})", cfg.dev_a, cfg.dev_b);
        return Ok(());
    }
    let _signals = netsched_testbed::SignalGuard::install()?;
    // SIGHUP is caught (never the default action, which would end the link): the link reads
    // only its flags, so there is nothing to read again; a change of flags needs a restart.
    let _hangup = netsched_sys::process::HangupThread::spawn("link-sighup", || {
        tracing::info!(
            by = "SIGHUP",
            "nothing to reload: netsched link reads only its flags (a change of them needs a restart); still running"
        )
    })?;
    let mut engine = Engine::open(&cfg)?;
    // An interface deleted (or made again) under the link stops it with the reason.
    let watch = InterfaceWatch::spawn(
        &[("--dev-a", &cfg.dev_a), ("--dev-b", &cfg.dev_b)],
        iface_watch::PERIOD,
    )?;
    let lost = watch.lost();
    let _metrics = match metrics_addr {
        Some(addr) => {
            let server = crate::metrics::serve(addr, &cfg, &mut engine)?;
            tracing::info!("metrics on http://{}/metrics", server.addr());
            Some(server)
        }
        None => None,
    };
    for p in engine.ports() {
        p.warn_if_offloads("netsched link");
    }
    for f in engine.fallbacks() {
        tracing::warn!("{f}");
    }
    let [pa, pb] = engine.ports();
    tracing::info!(
        "port backend {} ({} KiB of rings)",
        pa.backend(),
        (pa.ring_bytes() + pb.ring_bytes()) / 1024
    );
    tracing::info!("forwarding {} <-> {} (Ctrl-C stops)", cfg.dev_a, cfg.dev_b);
    // The printer runs on its own thread: a reader that stops reading blocks it, never the
    // packet thread (which hands over at most STATS_QUEUE snapshots, then counts drops).
    let (outlet, rx, dropped) = StatsOutlet::new();
    let printer = netsched_util::json_lines::spawn_printer("link-stats", rx)
        .context("starting the stats printer")?;
    let stop = || netsched_testbed::interrupted() || lost.is_set();
    netsched_util::notify::ready("netsched link", "forwarding");
    let final_stats = engine.run(&stop, duration, Some(&outlet));
    netsched_util::notify::stopping("netsched link");
    let mut final_stats = final_stats?;
    drop(outlet);
    let _ = printer.join();
    final_stats.stats_dropped = dropped.load(std::sync::atomic::Ordering::Relaxed);
    println!(
        "{}",
        serde_json::to_string(&serde_json::json!({ "final": final_stats }))?
    );
    match lost.why() {
        Some(why) => Err(anyhow::anyhow!("{why}: stopped forwarding")),
        None => Ok(()),
    }
}

/// A rate of `netsched link` (`none` = unlimited) in bits/s.
pub fn parse_link_rate(text: &str) -> Result<Option<u64>, UnitError> {
    if text.trim().eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    Ok(Some(units::parse_rate_in(
        text,
        shape::MIN_RATE,
        shape::MAX_RATE,
    )?))
}

fn parse_delay(text: &str) -> Result<Nanos, UnitError> {
    units::parse_duration_in(text, 0, MAX_DELAY)
}

impl RunArgs {
    /// The `--metrics` address, if given (loopback unless `--metrics-public`).
    pub fn metrics_addr(&self) -> Result<Option<std::net::SocketAddr>, ArgsError> {
        self.metrics
            .as_deref()
            .map(|m| {
                netsched_metrics::parse_addr(
                    "--metrics",
                    m,
                    self.metrics_public,
                    "--metrics-public",
                )
            })
            .transpose()
            .map_err(ArgsError::Metrics)
    }

    /// The engine configuration, every value checked; errors name the flag and the text.
    pub fn config(&self) -> Result<EngineConfig, ArgsError> {
        let dev_a = self.dev_a.clone().ok_or(ArgsError::Missing("--dev-a"))?;
        let dev_b = self.dev_b.clone().ok_or(ArgsError::Missing("--dev-b"))?;
        let delay = parse_delay(&self.delay).map_err(ArgsError::units("--delay"))?;
        let dir = |rate: &str, d: &Option<String>, q: &str, name: &str| {
            Ok::<_, ArgsError>(DirConfig {
                rate_bps: parse_link_rate(rate)
                    .map_err(ArgsError::units(format!("--{name}-rate")))?,
                delay: match d {
                    Some(d) => {
                        parse_delay(d).map_err(ArgsError::units(format!("--{name}-delay")))?
                    }
                    None => delay,
                },
                qdisc: crate::qdisc_spec::parse_qdisc(q).map_err(|source| ArgsError::Qdisc {
                    flag: format!("--{name}-qdisc"),
                    source,
                })?,
            })
        };
        let cfg = EngineConfig {
            ab: dir(&self.ab_rate, &self.ab_delay, &self.ab_qdisc, "ab")?,
            ba: dir(&self.ba_rate, &self.ba_delay, &self.ba_qdisc, "ba")?,
            dev_a,
            dev_b,
            pool: self.pool,
            delay_line: self.delay_line,
            stats_interval: self
                .stats
                .as_deref()
                .map(|s| {
                    units::parse_duration_in(
                        s,
                        crate::engine::MIN_STATS_INTERVAL,
                        MAX_STATS_INTERVAL,
                    )
                })
                .transpose()
                .map_err(ArgsError::units("--stats"))?,
            busy_poll: self.busy_poll.trim() == "always",
            spin: match (&self.spin, self.busy_poll.trim()) {
                (Some(s), _) => units::parse_duration_in(s, 0, crate::engine::MAX_SPIN)
                    .map_err(ArgsError::units("--spin"))?,
                (None, "always") => crate::engine::DEFAULT_SPIN,
                (None, d) => units::parse_duration_in(d, 0, crate::engine::MAX_SPIN).map_err(
                    ArgsError::units("--busy-poll (a duration such as 50us, 0 = off, or `always`)"),
                )?,
            },
            port: netsched_sys::PortOptions {
                backend: self
                    .port
                    .parse::<netsched_sys::PortBackend>()
                    .map_err(ArgsError::Port)?,
                ring: netsched_sys::RingConfig {
                    rx_frames: self.ring_frames,
                    tx_frames: self.tx_ring_frames,
                },
            },
        };
        cfg.check().map_err(ArgsError::Engine)?;
        Ok(cfg)
    }
}

impl ApplyArgs {
    /// The plan, every value checked before anything changes.
    pub fn plan(&self) -> Result<ShapePlan, ArgsError> {
        let rate = |t: &str| units::parse_rate_in(t, shape::MIN_RATE, shape::MAX_RATE);
        let up = rate(&self.up).map_err(ArgsError::units("--up"))?;
        let down = match (&self.down, &self.ifb) {
            (Some(d), Some(ifb)) => {
                Some((ifb.as_str(), rate(d).map_err(ArgsError::units("--down"))?))
            }
            (None, None) => None,
            _ => return Err(ArgsError::DownWithoutIfb),
        };
        ShapePlan::new(
            &self.dev,
            up,
            down,
            self.queue,
            self.ack_queue,
            self.headroom,
            !self.no_ack_priority,
        )
        .map_err(ArgsError::Plan)
    }
}

/// `netsched shape`.
pub fn run_shape(args: ShapeArgs) -> Result<()> {
    match args.cmd {
        ShapeCmd::Apply(a) => {
            let plan = a.plan()?;
            apply_check_host(&a, &plan)?;
            if a.check {
                println!(
                    "ok ({} shaped at {})",
                    a.dev,
                    format_rate(plan.up.shaped_bps())
                );
                return Ok(());
            }
            if a.dry_run {
                print!("{}", plan.script());
                return Ok(());
            }
            let applied = shape::apply(&Target::local(&a.dev), &plan, a.replace)?;
            println!(
                "netsched shape: {} shaped at {} ({}% below {}), {}",
                a.dev,
                format_rate(plan.up.shaped_bps()),
                plan.up.headroom_pct,
                format_rate(plan.up.line_bps),
                if plan.up.ack_priority {
                    "ACK class with strict priority"
                } else {
                    "one FIFO"
                }
            );
            if !applied.replaced.is_empty() {
                println!(
                    "netsched shape: discarded (--replace, not restorable): {}",
                    applied.replaced.join("; ")
                );
            }
            Ok(())
        }
        ShapeCmd::Show { dev, json } => {
            let st = shape::show(&Target::local(&dev))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&st)?);
            } else {
                print!("{}", st.table());
            }
            Ok(())
        }
        ShapeCmd::Clear { dev } => {
            let c = shape::clear(&Target::local(&dev))?;
            println!("netsched shape: {dev}: {c}");
            Ok(())
        }
    }
}

/// What `shape apply` (also with --dry-run or --check) needs of the host besides valid
/// flags: the interface exists, and (for --check) tc is installed and the IFB name is free
/// or an IFB device.
fn apply_check_host(a: &ApplyArgs, plan: &ShapePlan) -> Result<()> {
    use netsched_testbed::check;
    check::interface("--dev", &a.dev)?;
    if a.check {
        check::program("tc", "tc")?;
        let t = Target::local(&a.dev);
        if let Some(d) = &plan.down {
            if let Some(l) = t.link(&d.dev)? {
                if l.kind != "ifb" {
                    anyhow::bail!("--ifb {}: is not an IFB device", d.dev);
                }
            }
        }
    }
    Ok(())
}

/// Valid flags the tests start from (shared with `tests/error_texts.rs`).
#[cfg(test)]
#[path = "../tests/example_args/mod.rs"]
mod example_args;

#[cfg(test)]
mod tests {
    use super::*;

    use super::example_args::{apply_args as args, run_args};
    use clap::{CommandFactory, Parser};

    /// The two subcommands as the `netsched` binary mounts them.
    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: Cmd,
    }
    #[derive(Debug, clap::Subcommand)]
    enum Cmd {
        Shape(ShapeArgs),
        Link(Box<LinkArgs>),
    }

    #[test]
    fn clap_definitions_are_consistent_and_parse_the_examples() {
        Cli::command().debug_assert();
        let ok = |args: &[&str]| Cli::try_parse_from(args).unwrap();
        ok(&[
            "n",
            "shape",
            "apply",
            "--dev",
            "eth1",
            "--up",
            "800kbit",
            "--dry-run",
        ]);
        ok(&[
            "n", "shape", "apply", "--dev", "eth1", "--up", "1mbit", "--down", "50mbit", "--ifb",
            "ifb0",
        ]);
        ok(&["n", "shape", "show", "--dev", "eth1", "--json"]);
        ok(&["n", "shape", "clear", "--dev", "eth1"]);
        let c = ok(&[
            "n",
            "link",
            "--dev-a",
            "a",
            "--dev-b",
            "b",
            "--ab-qdisc",
            "ack_sep:100+filter+cap=0.5",
            "--stats",
            "1s",
        ]);
        match c.cmd {
            Cmd::Link(l) => {
                assert!(l.sub.is_none());
                assert_eq!(l.run.ab_qdisc, "ack_sep:100+filter+cap=0.5");
            }
            _ => panic!("not link"),
        }
        match ok(&["n", "link", "bench", "--duration", "2s"]).cmd {
            Cmd::Link(l) => assert!(l.sub.is_some()),
            _ => panic!("not link"),
        }
        // --down without --ifb is refused by clap itself.
        assert!(Cli::try_parse_from([
            "n", "shape", "apply", "--dev", "e", "--up", "1mbit", "--down", "2mbit"
        ])
        .is_err());
    }

    #[test]
    fn metrics_address_is_loopback_unless_public_and_errors_name_the_flag() {
        let mut a = run_args();
        assert_eq!(a.metrics_addr().unwrap(), None);
        a.metrics = Some("9101".into());
        assert_eq!(
            a.metrics_addr().unwrap().unwrap().to_string(),
            "127.0.0.1:9101"
        );
        for bad in ["0.0.0.0:9101", "localhost:9101", "99999"] {
            a.metrics = Some(bad.into());
            let e = format!("{:#}", a.metrics_addr().unwrap_err());
            assert!(e.contains("--metrics") && e.contains(bad), "{bad}: {e}");
        }
        a.metrics = Some("0.0.0.0:9101".into());
        a.metrics_public = true;
        assert_eq!(
            a.metrics_addr().unwrap().unwrap().to_string(),
            "0.0.0.0:9101"
        );
    }

    #[test]
    fn engine_config_names_the_bad_flag() {
        let mut a = run_args();
        a.ba_rate = "fast".into();
        let e = format!("{:#}", a.config().err().unwrap());
        assert!(e.contains("--ba-rate") && e.contains("`fast`"), "{e}");
        a.ba_rate = "2mbit".into();
        a.dev_b = Some("a".into());
        assert!(a.config().is_err());
        a.dev_b = Some("b".into());
        let c = a.config().unwrap();
        assert_eq!(c.ab.delay, 10 * netsched_core::MS);
        assert_eq!(c.ba.rate_bps, Some(2_000_000));
        // tc(8) units: bps is bytes per second.
        a.ab_rate = "100kbps".into();
        assert_eq!(a.config().unwrap().ab.rate_bps, Some(800_000));
        a.delay = "10".into();
        let e = format!("{:#}", a.config().unwrap_err());
        assert!(e.contains("--delay") && e.contains("`10`"), "{e}");
        a.delay = "11s".into();
        let e = format!("{:#}", a.config().unwrap_err());
        assert!(e.contains("--delay") && e.contains("10s"), "{e}");
    }

    #[test]
    fn rates_accept_none_as_unlimited() {
        assert_eq!(parse_link_rate("none").unwrap(), None);
        assert_eq!(parse_link_rate("2.1mbit").unwrap(), Some(2_100_000));
        assert!(parse_link_rate("0").is_err());
    }

    #[test]
    fn stats_interval_has_a_documented_minimum() {
        let mut a = run_args();
        for bad in ["0s", "0", "99ms", "10us"] {
            a.stats = Some(bad.into());
            let e = format!("{:#}", a.config().unwrap_err());
            assert!(e.contains("--stats") && e.contains("100ms"), "{bad}: {e}");
        }
        a.stats = Some("100ms".into());
        assert_eq!(
            a.config().unwrap().stats_interval,
            Some(crate::engine::MIN_STATS_INTERVAL)
        );
    }

    #[test]
    fn rates_read_tc_units_through_core_units() {
        for (text, bits) in [
            ("800kbit", 800_000),
            ("2.1mbit", 2_100_000),
            ("1gbit", 1_000_000_000),
            ("100kbps", 800_000),
            ("64000", 64_000),
            ("1Mbit", 1_000_000),
        ] {
            assert_eq!(
                args("eth1", text).plan().unwrap().up.line_bps,
                bits,
                "{text}"
            );
        }
    }

    #[test]
    fn rate_parser_rejects_zero_and_garbage_with_the_text() {
        for bad in [
            "0",
            "0kbit",
            "fast",
            "",
            "kbit",
            "1.2.3mbit",
            "5furlongs",
            "-3mbit",
            "500gbit",
        ] {
            let e = format!("{:#}", args("eth1", bad).plan().unwrap_err());
            assert!(e.contains("--up"), "{bad}: {e}");
            if !bad.is_empty() {
                assert!(e.contains(&format!("`{bad}`")), "{bad}: {e}");
            }
        }
    }

    #[test]
    fn plan_shapes_five_percent_below_the_line_rate() {
        let p = args("eth1", "800kbit").plan().unwrap();
        assert_eq!(p.up.shaped_bps(), 760_000);
        let lines = p.batch_lines();
        assert!(lines[1].contains("rate 760000bit ceil 760000bit"));
        // ACK class strict priority: owns 99 %, bulk 1 %; both may borrow to the root rate.
        assert!(lines[2].contains("classid 1:10 htb rate 752400bit ceil 760000bit prio 0"));
        assert!(lines[3].contains("classid 1:20 htb rate 7600bit ceil 760000bit prio 1"));
        assert_eq!(
            lines.iter().filter(|l| l.contains("flowid 1:10")).count(),
            22
        );
    }

    #[test]
    fn ack_filters_match_headers_only_lengths() {
        let p = args("eth1", "1mbit").plan().unwrap();
        let lines = p.batch_lines();
        // Plain 20-byte TCP header: IPv4 total length 40, data offset 5.
        assert!(lines
            .iter()
            .any(|l| l.contains("match u16 40 0xffff at 2 match u8 0x50 0xf0 at 32")));
        // Timestamps (32-byte TCP header): total length 52, data offset 8.
        assert!(lines
            .iter()
            .any(|l| l.contains("match u16 52 0xffff at 2 match u8 0x80 0xf0 at 32")));
        // IPv6 with timestamps: payload length 32.
        assert!(lines
            .iter()
            .any(|l| l.contains("match u16 32 0xffff at 4 match u8 0x80 0xf0 at 52")));
    }

    #[test]
    fn no_ack_priority_installs_one_fifo() {
        let mut a = args("eth1", "800kbit");
        a.no_ack_priority = true;
        a.queue = 42;
        let lines = a.plan().unwrap().batch_lines();
        assert_eq!(lines.len(), 4);
        assert!(lines[3].ends_with("pfifo limit 42"));
    }

    #[test]
    fn download_shaping_redirects_ingress_to_the_ifb() {
        let mut a = args("eth1", "800kbit");
        a.down = Some("2.1mbit".into());
        a.ifb = Some("ifb0".into());
        let p = a.plan().unwrap();
        let s = p.script();
        assert!(s.contains("qdisc add dev eth1 handle ffff: ingress"));
        assert!(s.contains("action mirred egress redirect dev ifb0"));
        assert!(s.contains("class add dev ifb0 parent 1: classid 1:1 htb rate 1995000bit"));
        assert!(s.contains("ip link add ifb0 type ifb"));
    }

    #[test]
    fn bad_arguments_are_refused_before_anything_runs() {
        let mut a = args("eth1", "0kbit");
        assert!(a.plan().unwrap_err().to_string().contains("--up"));
        a.up = "1mbit".into();
        a.queue = 0;
        assert!(format!("{:#}", a.plan().unwrap_err()).contains("--queue-limit 0"));
        let a = args("this-name-is-far-too-long", "1mbit");
        assert!(format!("{:#}", a.plan().unwrap_err()).contains("not valid"));
    }
}

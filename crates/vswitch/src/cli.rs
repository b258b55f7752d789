//! `netsched vswitch`: the arguments and the entry point the binary calls.

use crate::config::SwitchConfig;
use crate::control::{self, ControlServer, CtlArgs};
use crate::metrics::{Budget, SwitchMetrics};
use crate::reload::Reloader;
use crate::switch::{StatsOutlet, Switch};
use anyhow::{Context, Result};
use netsched_core::units;
use std::path::PathBuf;
use std::sync::Arc;

/// Longest `--stats` interval and `--duration`.
const MAX_INTERVAL: netsched_core::Nanos = units::MAX_DURATION;

#[derive(Debug, clap::Args)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    about = "Host switch: schedule N guest interfaces (veth/TAP) onto one uplink with a core discipline",
    after_help = "Example:
  netsched vswitch --config host.toml --stats 1s

The file names the uplink, the discipline (strict_priority, delay_constrained,
delay_wall_clock, drr, wf2q_plus, edf), the forwarding budget (packet_rate = N packets/s, or
rate = \"100mbit\") and one [[port]] per guest (dev, tier, weight, bound). See docs/vswitch.md.
Turn offloads off on every port (ethtool -K IF gro off gso off tso off).
Ctrl-C / SIGTERM stops it and prints the final counters as one JSON line. SIGHUP reads the
file again: tiers and weights are applied; a file that changes any other key, or is invalid,
is refused whole and the running configuration stays.
Runtime control: netsched vswitch ctl [--control-socket S] show [--json] | set-tier PORT TIER |
set-weight PORT W | reload. Metrics: --metrics 127.0.0.1:9102 serves GET /metrics."
)]
pub struct VswitchArgs {
    /// The switch's TOML configuration.
    #[arg(long, required = true)]
    pub config: Option<PathBuf>,
    /// Control socket (mode 0660): `netsched vswitch ctl` talks to it.
    #[arg(long = "control-socket", alias = "control", default_value = control::DEFAULT_SOCKET)]
    pub control: PathBuf,
    /// Group (name or gid) whose members may use the control socket besides root and us.
    #[arg(long)]
    pub control_group: Option<String>,
    /// No control socket.
    #[arg(long, conflicts_with_all = ["control_group"])]
    pub no_control: bool,
    /// Serve Prometheus `GET /metrics` on this address: `PORT` (loopback), `IP:PORT` or
    /// `[IPv6]:PORT`; an address that is not loopback needs --metrics-public.
    #[arg(long)]
    pub metrics: Option<String>,
    /// Allow a --metrics address that is not loopback.
    #[arg(long)]
    pub metrics_public: bool,
    #[command(subcommand)]
    pub cmd: Option<VswitchCmd>,
    /// Print counters as JSON lines this often (at least 100ms), e.g. `1s`.
    #[arg(long)]
    pub stats: Option<String>,
    /// Stop after this long (e.g. `30s`); default: until Ctrl-C / SIGTERM.
    #[arg(long)]
    pub duration: Option<String>,
    /// Account for each frame's time inside the switch, stage by stage (kernel ring → loop
    /// turn → read → discipline → send): percentiles per stage in the `--stats` lines, `ctl
    /// show --json` and the final line, under `latency`. Costs a few clock reads per batch;
    /// the ring backends (`tpacket`, `tpacket_v3`) give the kernel's side. See
    /// docs/vswitch.md, "Where the time goes".
    #[arg(long)]
    pub trace_latency: bool,
    /// Enter this network namespace (`ip netns` name) before opening the ports.
    #[arg(long)]
    pub netns: Option<String>,
    /// Validate the configuration and what it asks of the host — every interface exists
    /// (in --netns if given), the control socket path can be taken, the group exists, the
    /// metrics address can be bound — then exit: 0 valid, 1 invalid.
    #[arg(long)]
    pub check: bool,
}

#[derive(Debug, clap::Subcommand)]
pub enum VswitchCmd {
    /// Talk to a running switch over its control socket.
    Ctl(CtlArgs),
}

pub fn run_vswitch(args: VswitchArgs) -> Result<()> {
    if let Some(VswitchCmd::Ctl(c)) = &args.cmd {
        return run_ctl(c);
    }
    let Some(config) = &args.config else {
        anyhow::bail!("--config FILE is needed to run the switch (or use `netsched vswitch ctl`)");
    };
    let mut cfg = SwitchConfig::load(config)?;
    cfg.trace_latency = args.trace_latency;
    let metrics_addr = args
        .metrics
        .as_deref()
        .map(|a| {
            netsched_metrics::parse_addr("--metrics", a, args.metrics_public, "--metrics-public")
        })
        .transpose()?;
    let stats = args
        .stats
        .as_deref()
        .map(|s| units::parse_duration_in(s, crate::switch::MIN_STATS_INTERVAL, MAX_INTERVAL))
        .transpose()
        .context("--stats")?;
    let duration = args
        .duration
        .as_deref()
        .map(|d| units::parse_duration_in(d, 1, MAX_INTERVAL))
        .transpose()
        .context("--duration")?;
    if args.check {
        if let Some(ns) = &args.netns {
            netsched_testbed::enter_netns(ns).with_context(|| format!("--netns {ns}"))?;
        }
        check_host(&args, &cfg, metrics_addr)?;
        println!(
            "{}: ok ({} guest ports -> {}, {})",
            config.display(),
            cfg.ports.len(),
            cfg.uplink,
            cfg.discipline.as_str()
        );
        return Ok(());
    }
    let _signals = netsched_testbed::SignalGuard::install()?;
    if let Some(ns) = &args.netns {
        netsched_testbed::enter_netns(ns).with_context(|| format!("--netns {ns}"))?;
    }
    let mut sw = Switch::open(&cfg, stats)?;
    for p in sw.ports() {
        p.warn_if_offloads("netsched vswitch");
    }
    for f in sw.fallbacks() {
        tracing::warn!("{f}");
    }
    tracing::info!(
        "port backend {} ({} KiB of rings)",
        sw.ports().last().map_or("none", |p| p.backend().name()),
        sw.ports().map(|p| p.ring_bytes()).sum::<usize>() / 1024
    );
    tracing::info!(
        "{} guest ports -> {} with {} (Ctrl-C stops)",
        cfg.ports.len(),
        cfg.uplink,
        cfg.discipline.as_str()
    );
    // Control and metrics are bound after the switch opened its ports (in its namespace),
    // and dropped (socket file removed, listener stopped) when this function returns.
    // One command channel for the control socket and SIGHUP's reload (crate::reload); the
    // reload runs on the SIGHUP thread or a control thread, never on the packet thread.
    let (outbox, inbox) = control::channel();
    sw.attach_control(inbox);
    let reloads = netsched_metrics::Reloads::new();
    let reloader = Arc::new(Reloader::new(config, &cfg, outbox.clone(), reloads.clone()));
    let _hangup = {
        let r = reloader.clone();
        netsched_sys::process::HangupThread::spawn("vswitch-sighup", move || {
            let _ = crate::reload::reload_answer(&r, "SIGHUP");
        })?
    };
    let _control = if args.no_control {
        None
    } else {
        let server = ControlServer::start_with_reload(
            &args.control,
            args.control_group.as_deref(),
            outbox,
            Some(Arc::new(move |by: &str| {
                crate::reload::reload_answer(&reloader, by)
            })),
        )
        .map_err(|e| anyhow::anyhow!("--control: {e}"))?;
        tracing::info!("control socket {}", args.control.display());
        Some(server)
    };
    let _metrics = match metrics_addr {
        None => None,
        Some(addr) => {
            let mut reg = prometheus_client::registry::Registry::default();
            netsched_metrics::register_daemon(
                &mut reg,
                "vswitch",
                netsched_util::logging::dropped_lines,
            );
            netsched_metrics::register_control_audit(
                &mut reg,
                netsched_control::audit::refused_requests,
                netsched_control::audit::suppressed_warnings,
            );
            let names: Vec<String> = cfg.ports.iter().map(|p| p.dev.clone()).collect();
            let budget = Budget {
                packet_rate: cfg.packet_rate,
                bit_rate: cfg.rate,
                busy: cfg.budget_busy,
            };
            sw.attach_metrics(SwitchMetrics::register(&mut reg, &names, budget));
            reloads.register(&mut reg, "netsched_vswitch");
            let server = crate::metrics::serve(addr, reg)
                .map_err(|e| anyhow::anyhow!("--metrics {addr}: {e}"))?;
            tracing::info!("metrics on http://{}/metrics", server.addr());
            Some(server)
        }
    };
    // The printer has its own thread: a reader that stops reading blocks it, never the packet
    // thread (which hands over at most STATS_QUEUE snapshots, then counts drops).
    let (outlet, rx) = StatsOutlet::new();
    let printer = netsched_util::json_lines::spawn_printer("vswitch-stats", rx)
        .context("starting the stats printer")?;
    netsched_util::notify::ready("netsched vswitch", "switching");
    let final_stats = sw.run(&netsched_testbed::interrupted, duration, Some(&outlet));
    netsched_util::notify::stopping("netsched vswitch");
    drop(outlet);
    let _ = printer.join();
    let final_stats = final_stats?;
    println!(
        "{}",
        serde_json::to_string(&serde_json::json!({ "final": final_stats }))?
    );
    Ok(())
}

/// What a start needs of the host besides a valid configuration (`--check`).
fn check_host(
    args: &VswitchArgs,
    cfg: &SwitchConfig,
    metrics: Option<std::net::SocketAddr>,
) -> Result<(), netsched_testbed::check::HostCheckError> {
    use netsched_testbed::check;
    check::interface("uplink", &cfg.uplink)?;
    for (i, p) in cfg.ports.iter().enumerate() {
        check::interface(&format!("port[{i}].dev"), &p.dev)?;
    }
    let mut running = false;
    if !args.no_control {
        if let Some(g) = &args.control_group {
            check::group("--control-group", g)?;
        }
        running =
            check::socket_path("--control-socket", &args.control)? == check::SocketPath::Running;
    }
    // A switch at the socket is the one a reload checks for: its address is its own.
    if let Some(a) = metrics.filter(|_| !running) {
        check::tcp_address("--metrics", a)?;
    }
    Ok(())
}

/// `netsched vswitch ctl`: one request line to the switch's control socket, its answer printed.
fn run_ctl(a: &control::CtlArgs) -> Result<()> {
    let out = control::request(&a.socket.locate("vswitch")?, &a.op.line())?;
    print!("{out}");
    Ok(())
}

//! `netsched vswitch`: the arguments and the entry point the binary calls.

use crate::config::SwitchConfig;
use crate::switch::{StatsOutlet, Switch};
use anyhow::{Context, Result};
use netsched_core::units;
use std::path::PathBuf;

/// Longest `--stats` interval and `--duration`.
const MAX_INTERVAL: netsched_core::Nanos = units::MAX_DURATION;

#[derive(Debug, clap::Args)]
#[command(
    about = "Host switch: schedule N guest interfaces (veth/TAP) onto one uplink with a core discipline",
    after_help = "Example:
  netsched vswitch --config host.toml --stats 1s

The file names the uplink, the discipline (strict_priority, delay_constrained,
delay_wall_clock, drr, wf2q, edf), the forwarding budget (packet_rate = N packets/s, or
rate = \"100mbit\") and one [[port]] per guest (dev, tier, weight, bound). See docs/vswitch.md.
Turn offloads off on every port (ethtool -K IF gro off gso off tso off).
Ctrl-C / SIGTERM stops it and prints the final counters as one JSON line."
)]
pub struct VswitchArgs {
    /// The switch's TOML configuration.
    #[arg(long)]
    pub config: PathBuf,
    /// Print counters as JSON lines this often (at least 100ms), e.g. `1s`.
    #[arg(long)]
    pub stats: Option<String>,
    /// Stop after this long (e.g. `30s`); default: until Ctrl-C / SIGTERM.
    #[arg(long)]
    pub duration: Option<String>,
    /// Enter this network namespace (`ip netns` name) before opening the ports.
    #[arg(long)]
    pub netns: Option<String>,
}

pub fn run_vswitch(args: VswitchArgs) -> Result<()> {
    let cfg = SwitchConfig::load(&args.config)?;
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
    let _signals = netsched_testbed::SignalGuard::install()?;
    if let Some(ns) = &args.netns {
        netsched_testbed::enter_netns(ns).with_context(|| format!("--netns {ns}"))?;
    }
    let mut sw = Switch::open(&cfg, stats)?;
    for p in sw.ports() {
        p.warn_if_offloads("netsched vswitch");
    }
    eprintln!(
        "netsched vswitch: {} guest ports -> {} with {} (Ctrl-C stops)",
        cfg.ports.len(),
        cfg.uplink,
        cfg.discipline.as_str()
    );
    // The printer has its own thread: a reader that stops reading blocks it, never the packet
    // thread (which hands over at most STATS_QUEUE snapshots, then counts drops).
    let (outlet, rx) = StatsOutlet::new();
    let printer = std::thread::Builder::new()
        .name("vswitch-stats".into())
        .spawn(move || {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            for s in rx {
                if writeln!(out, "{}", serde_json::to_string(&s).unwrap_or_default()).is_err() {
                    break;
                }
                let _ = out.flush();
            }
        })
        .context("starting the stats printer")?;
    let final_stats = sw.run(&netsched_testbed::interrupted, duration, Some(&outlet));
    drop(outlet);
    let _ = printer.join();
    let final_stats = final_stats?;
    println!(
        "{}",
        serde_json::to_string(&serde_json::json!({ "final": final_stats }))?
    );
    Ok(())
}

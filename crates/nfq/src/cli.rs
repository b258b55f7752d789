//! The command line of the NFQUEUE daemon: `netsched nfq` (and `netsched-nfqd nfq`) — its
//! flags, its subcommands (`cleanup`, `bench`) and how they map onto a [`Config`]. The daemon
//! itself is [`crate::daemon`]; the control client is [`crate::ctl_client`].

use crate::config::{
    self, parse_cidr, parse_deadline, parse_protocol, resolve_class, ClassSpec, Config,
};
use crate::control;
use crate::daemon::run_daemon_with_reload;
use crate::iptables;
use crate::reload::Reloader;
use anyhow::{Context, Result};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

const EXAMPLES: &str = "\
Examples:
  # Schedule HTTP on port 80: three classes, unknown clients in the lowest, hold requests
  # while 4 are inside the server, deadline = running mean response time.
  netsched nfq --port 80 --class gold=90 --class silver=70 --class bronze=50 \\
      --map 192.168.1.0/24=gold --map 10.0.0.0/8=silver --budget 4 --deadline auto

  # The same from a file (see docs/nfq.md for every key)
  netsched nfq --config /etc/netsched/nfq.toml

  # While it runs
  netsched nfq ctl show
  netsched nfq ctl set-percentile gold 95
  netsched nfq ctl add-ip 172.16.0.0/12 silver

  # After a crash (SIGKILL): remove the iptables rules it left behind
  netsched nfq cleanup

  # Throughput and added latency of the packet path, in two scratch namespaces
  netsched nfq bench

What is a request: a packet with payload to the service (handshakes and pure ACKs pass at
once). It completes when the first response packet with payload leaves the server.";

/// Arguments of `netsched nfq`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, after_help = EXAMPLES)]
pub struct NfqArgs {
    #[command(subcommand)]
    pub cmd: Option<NfqCmd>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, clap::Subcommand)]
pub enum NfqCmd {
    /// Remove iptables rules (and the control socket) left behind by a killed daemon.
    Cleanup {
        /// iptables front end the daemon used.
        #[arg(long, default_value = "iptables")]
        iptables: String,
        /// Only the rules of this queue number (default: all netsched-nfq rules).
        #[arg(long)]
        queue: Option<u16>,
        /// Control socket to remove if stale.
        #[arg(long = "control-socket", alias = "socket", default_value = config::DEFAULT_SOCKET)]
        socket: PathBuf,
    },
    /// Measure the daemon's throughput and added latency between two scratch namespaces.
    Bench(crate::bench::BenchArgs),
    /// Control a running daemon over its control socket.
    Ctl(crate::ctl_client::CtlArgs),
}

/// Flags of the daemon itself (each overrides the config file).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RunArgs {
    /// TOML configuration file (docs/nfq.md).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// NFQUEUE number.
    #[arg(long)]
    pub queue: Option<u16>,
    /// Service protocol: tcp or udp.
    #[arg(long)]
    pub protocol: Option<String>,
    /// Service port (repeat for several); replaces the file's list.
    #[arg(long = "port")]
    pub ports: Vec<u16>,
    /// Service address (only requests to it are scheduled).
    #[arg(long)]
    pub address: Option<String>,
    /// A class NAME=P (percentile target 1..=100), in priority order; replaces the file's.
    #[arg(long = "class", value_name = "NAME=P")]
    pub classes: Vec<String>,
    /// An address-table entry CIDR=CLASS (added to the file's).
    #[arg(long = "map", value_name = "CIDR=CLASS")]
    pub maps: Vec<String>,
    /// Class of addresses no entry matches (name or index; default: the last class).
    #[arg(long)]
    pub default_class: Option<String>,
    /// Deadline: a duration ("4ms"), "auto" (running mean response time) or "auto_quantile"
    /// (running q-quantile of response times, q = Σ N·P / Σ N).
    #[arg(long)]
    pub deadline: Option<String>,
    /// Requests inside the server at once (a number, or "off" for no holding).
    #[arg(long)]
    pub budget: Option<String>,
    /// percentile (P0), fifo, or strict (class 0 first).
    #[arg(long)]
    pub discipline: Option<String>,
    /// Control socket path.
    #[arg(long = "control-socket", alias = "socket")]
    pub socket: Option<PathBuf>,
    /// Group allowed to use the control socket.
    #[arg(long = "control-group", alias = "group")]
    pub group: Option<String>,
    /// iptables front end (iptables, iptables-legacy, iptables-nft).
    #[arg(long)]
    pub iptables: Option<String>,
    /// Count a miss as soon as a request's age passes the deadline (true), or only when its
    /// late response leaves (false, default, as in the thesis).
    #[arg(long)]
    pub early_miss: Option<bool>,
    /// Keep polling this long after each burst of packets before sleeping ("200us"; "0" = off,
    /// always sleep).
    #[arg(long)]
    pub busy_poll: Option<String>,
    /// Pin the daemon to this CPU.
    #[arg(long)]
    pub cpu: Option<usize>,
    /// Serve Prometheus metrics on GET /metrics at ADDR: PORT (= 127.0.0.1:PORT), IP:PORT or
    /// [IPv6]:PORT; port 0 picks a free port (printed). Loopback only unless --metrics-public.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// Allow --metrics on an address that is not loopback.
    #[arg(long, requires = "metrics")]
    pub metrics_public: bool,
    /// Validate the configuration (file and flags) and what it asks of the host — the
    /// control socket path can be taken, the group exists, the iptables front end is
    /// installed, the metrics address can be bound — then exit: 0 valid, 1 invalid.
    #[arg(long)]
    pub check: bool,
}

impl RunArgs {
    /// The configuration: file (if any), then flags.
    pub fn to_config(&self) -> Result<Config> {
        let mut c = match &self.config {
            Some(p) => Config::from_file(p)?,
            None => Config::default(),
        };
        if let Some(q) = self.queue {
            c.queue = q;
        }
        if let Some(p) = &self.protocol {
            c.service.protocol = parse_protocol(p).context("--protocol")?;
        }
        if !self.ports.is_empty() {
            c.service.ports = self.ports.clone();
        }
        if let Some(a) = &self.address {
            c.service.address = Some(
                a.parse()
                    .map_err(|_| anyhow::anyhow!("--address {a:?}: not an IP address"))?,
            );
        }
        if !self.classes.is_empty() {
            c.classes.clear();
            for s in &self.classes {
                let (name, p) = s
                    .split_once('=')
                    .with_context(|| format!("--class {s:?}: expected NAME=P, e.g. gold=90"))?;
                let p: i64 = p
                    .trim()
                    .parse()
                    .map_err(|_| anyhow::anyhow!("--class {s:?}: {p:?} is not a number"))?;
                let p = config::validate_percentile(p).with_context(|| format!("--class {s:?}"))?;
                c.classes.push(ClassSpec {
                    name: name.trim().to_string(),
                    percentile: p,
                });
            }
            c.default_class = c.classes.len() - 1;
        }
        if let Some(d) = &self.default_class {
            c.default_class = resolve_class(&c.classes, d).context("--default-class")?;
        }
        for m in &self.maps {
            let (cidr, class) = m
                .split_once('=')
                .with_context(|| format!("--map {m:?}: expected CIDR=CLASS"))?;
            let cidr = parse_cidr(cidr).with_context(|| format!("--map {m:?}"))?;
            let k =
                resolve_class(&c.classes, class.trim()).with_context(|| format!("--map {m:?}"))?;
            c.table.push((cidr, k));
        }
        if let Some(d) = &self.deadline {
            c.deadline = parse_deadline(d).context("--deadline")?;
        }
        if let Some(b) = &self.budget {
            c.budget = control::parse_budget(b).context("--budget")?;
        }
        if let Some(d) = &self.discipline {
            c.discipline = config::DisciplineKind::parse(d).context("--discipline")?;
        }
        if let Some(s) = &self.socket {
            c.control_socket = s.clone();
        }
        if let Some(g) = &self.group {
            c.control_group = Some(g.clone());
        }
        if let Some(i) = &self.iptables {
            c.iptables = i.clone();
        }
        if let Some(e) = self.early_miss {
            c.early_miss = e;
        }
        if let Some(b) = &self.busy_poll {
            c.busy_poll =
                config::parse_duration(b, config::BUSY_POLL_RANGE).context("--busy-poll")?;
        }
        if let Some(m) = &self.metrics {
            c.metrics = Some(netsched_metrics::parse_addr(
                "--metrics",
                m,
                self.metrics_public,
                "--metrics-public",
            )?);
        }
        c.validate()?;
        Ok(c)
    }
}

pub fn run(args: NfqArgs) -> Result<()> {
    match args.cmd {
        Some(NfqCmd::Cleanup {
            iptables: bin,
            queue,
            socket,
        }) => {
            // A front end that is not installed removed nothing: an error, not "removed 0".
            netsched_testbed::check::program("--iptables", &bin)?;
            // The socket first: a live daemon (or something that is not its socket) stops
            // the cleanup before any rule is touched.
            let removed_socket = control::remove_stale_socket(&socket)?;
            let n = iptables::cleanup(&bin, queue)?;
            println!(
                "removed {n} leftover rule(s){}",
                if removed_socket {
                    format!(" and the stale socket {}", socket.display())
                } else {
                    String::new()
                }
            );
            Ok(())
        }
        Some(NfqCmd::Bench(b)) => crate::bench::run(b),
        Some(NfqCmd::Ctl(c)) => crate::ctl_client::run(c),
        None => {
            let cfg = args.run.to_config()?;
            if args.run.check {
                check_host(&cfg)?;
                println!(
                    "{}ok (queue {}, {} classes, discipline {})",
                    args.run
                        .config
                        .as_ref()
                        .map(|p| format!("{}: ", p.display()))
                        .unwrap_or_default(),
                    cfg.queue,
                    cfg.classes.len(),
                    cfg.discipline.as_str()
                );
                return Ok(());
            }
            if let Some(cpu) = args.run.cpu {
                netsched_testbed::pin_to_cpu(cpu).context("--cpu")?;
            }
            let stop = Arc::new(AtomicBool::new(false));
            for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
                signal_hook::flag::register(sig, Arc::clone(&stop))
                    .context("installing signal handlers")?;
            }
            let reloader = Reloader::new(args.run.clone(), &cfg, netsched_metrics::Reloads::new());
            let summary = run_daemon_with_reload(cfg, Some(reloader), &stop, |st| {
                netsched_util::notify::ready("netsched nfq", "scheduling");
                tracing::info!(
                    "running ({} classes, discipline {}, budget {}); Ctrl-C to stop",
                    st.classes.len(),
                    st.discipline,
                    st.budget.map(|b| b.to_string()).unwrap_or("off".into())
                )
            })
            .map_err(needs_root)?;
            tracing::info!(
                "stopped; {} packets seen, {} requests, {} released at exit",
                summary.counters.packets,
                summary.counters.requests,
                summary.released_at_exit
            );
            Ok(())
        }
    }
}

/// A start refused for want of privilege says what it needs, not only the kernel's
/// "Operation not permitted" (the netfilter queue and the iptables rules need
/// CAP_NET_ADMIN).
fn needs_root(e: anyhow::Error) -> anyhow::Error {
    let denied = e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::PermissionDenied)
            || c.to_string().contains("Operation not permitted")
    });
    if denied && !netsched_testbed::is_root() {
        anyhow::anyhow!("netsched nfq needs root (CAP_NET_ADMIN): {e:#}")
    } else {
        e
    }
}

/// What a start needs of the host besides a valid configuration (`--check`).
fn check_host(cfg: &Config) -> Result<(), netsched_testbed::check::HostCheckError> {
    use netsched_testbed::check;
    if let Some(g) = &cfg.control_group {
        check::group("control_group", g)?;
    }
    let running = check::socket_path("control_socket", &cfg.control_socket)?;
    check::program("iptables", &cfg.iptables)?;
    // A daemon at the socket is the one a reload checks for: its address is its own.
    if let Some(a) = cfg.metrics.filter(|_| running == check::SocketPath::Free) {
        check::tcp_address("metrics", a)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct T {
        #[command(flatten)]
        a: NfqArgs,
    }

    /// Issue #10.6: `--cpu 100000` panicked in CPU_SET; now an error naming the CPU, before
    /// anything is installed.
    #[test]
    fn cli_cpu_out_of_range_is_an_error_not_a_panic() {
        let t = T::try_parse_from([
            "nfq", "--port", "8080", "--class", "a=90", "--cpu", "100000",
        ])
        .unwrap();
        let e = format!("{:#}", run(t.a).unwrap_err());
        assert!(e.contains("--cpu") && e.contains("100000"), "{e}");
    }

    #[test]
    fn cli_busy_poll_and_deadline_use_core_units_with_ranges() {
        let parse = |extra: &[&str]| {
            let mut argv = vec!["nfq", "--port", "80", "--class", "a=90"];
            argv.extend_from_slice(extra);
            T::try_parse_from(argv).unwrap().a.run.to_config()
        };
        assert_eq!(parse(&["--busy-poll", "50us"]).unwrap().busy_poll, 50_000);
        assert_eq!(parse(&["--busy-poll", "0"]).unwrap().busy_poll, 0);
        assert_eq!(parse(&[]).unwrap().busy_poll, config::DEFAULT_BUSY_POLL);
        assert_eq!(
            parse(&["--metrics", "9101"]).unwrap().metrics,
            Some("127.0.0.1:9101".parse().unwrap())
        );
        assert_eq!(parse(&[]).unwrap().metrics, None);
        let e = format!("{:#}", parse(&["--metrics", "0.0.0.0:9101"]).unwrap_err());
        assert!(e.contains("--metrics-public"), "{e}");
        assert_eq!(
            parse(&["--metrics", "0.0.0.0:9101", "--metrics-public"])
                .unwrap()
                .metrics,
            Some("0.0.0.0:9101".parse().unwrap())
        );
        for (flag, v) in [
            ("--metrics", "localhost:9101"),
            ("--metrics", "70000"),
            ("--busy-poll", "1s"),
            ("--busy-poll", "50"),
            ("--deadline", "1e300s"),
        ] {
            let e = format!("{:#}", parse(&[flag, v]).unwrap_err());
            assert!(e.contains(flag) && e.contains(v), "{e}");
        }
    }
}

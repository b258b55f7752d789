//! The command line of the NFQUEUE daemon: `netsched nfq` (and `netsched-nfqd nfq`) — its
//! flags, its subcommands (`cleanup`, `bench`) and how they map onto a [`Config`]. The daemon
//! itself is [`crate::daemon`]; the control client is [`crate::ctl_client`].

use crate::config::{self, Config};
use crate::control;
use crate::daemon::run_daemon_with_reload;
use crate::daemon_error::DaemonError;
use crate::iptables;
use crate::reload::Reloader;
pub use crate::run_args::RunArgs;
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
        /// Only the rules of this NFQUEUE number (default: all netsched-nfq rules).
        #[arg(long = "nfqueue", alias = "queue")]
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
                    "{}ok (nfqueue {}, {} classes, discipline {})",
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
fn needs_root(e: DaemonError) -> anyhow::Error {
    use crate::netlink::QueueError;
    let denied = matches!(
        &e,
        DaemonError::Queue(QueueError::Socket(io) | QueueError::NetlinkBind(io))
            if io.kind() == std::io::ErrorKind::PermissionDenied
    ) || e.to_string().contains("Operation not permitted");
    if denied && !netsched_testbed::is_root() {
        anyhow::anyhow!("netsched nfq needs root (CAP_NET_ADMIN): {e}")
    } else {
        e.into()
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

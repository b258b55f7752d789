//! `netsched nfq`: the percentile scheduling daemon.
//!
//! Start-up order: engine (validates the configuration) → control socket → netlink queue
//! (bound, fail-open, receive buffer sized) → iptables rules. Shut-down order (SIGTERM,
//! SIGINT, or an error): rules removed first (no new packets), then every packet still in the
//! socket and every held packet gets an ACCEPT verdict, then the queue is unbound. Closing a
//! queue with packets pending would drop them (`nfqnl_flush` in instance_destroy), so
//! nothing is closed before its packets are verdicted.
//!
//! The loop: `poll` on the netlink socket and the control socket (10 ms timeout); read up to
//! 64 packets per `recvmmsg`, decide each with [`crate::engine::Engine`], send the batch of
//! verdicts in one datagram; every 10 ms a tick expires requests and flows.

use crate::config::{
    self, parse_cidr, parse_deadline, parse_protocol, resolve_class, ClassSpec, Config,
};
use crate::control::{self, ControlServer};
use crate::engine::{Applied, Engine, SocketCounters, Status};
use crate::iptables::{self, Rules};
use crate::netlink::{NfQueue, PacketMsg};
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const EXAMPLES: &str = "\
Examples:
  # Schedule HTTP on port 80: three classes, unknown clients in the lowest, hold requests
  # while 4 are inside the server, deadline = running mean response time.
  netsched nfq --port 80 --class gold=90 --class silver=70 --class bronze=50 \\
      --map 192.168.1.0/24=gold --map 10.0.0.0/8=silver --budget 4 --deadline auto

  # The same from a file (see docs/nfq.md for every key)
  netsched nfq --config /etc/netsched/nfq.toml

  # While it runs
  netsched ctl status
  netsched ctl set-percentile gold 95
  netsched ctl add-ip 172.16.0.0/12 silver

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
        #[arg(long, default_value = config::DEFAULT_SOCKET)]
        socket: PathBuf,
    },
    /// Measure the daemon's throughput and added latency between two scratch namespaces.
    Bench(crate::bench::BenchArgs),
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
    /// Deadline: a duration ("4ms"), "auto" (running mean response time) or "auto-quantile"
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
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// Group allowed to use the control socket.
    #[arg(long)]
    pub group: Option<String>,
    /// iptables front end (iptables, iptables-legacy, iptables-nft).
    #[arg(long)]
    pub iptables: Option<String>,
    /// Count a miss as soon as a request's age passes the deadline (true), or only when its
    /// late response leaves (false, default, as in the thesis).
    #[arg(long)]
    pub early_miss: Option<bool>,
    /// Pin the daemon to this CPU.
    #[arg(long)]
    pub cpu: Option<usize>,
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
            let n = iptables::cleanup(&bin, queue)?;
            let removed_socket = control::remove_stale_socket(&socket)?;
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
        None => {
            let cfg = args.run.to_config()?;
            if let Some(cpu) = args.run.cpu {
                netsched_testbed::pin_to_cpu(cpu).context("--cpu")?;
            }
            let stop = Arc::new(AtomicBool::new(false));
            for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
                signal_hook::flag::register(sig, Arc::clone(&stop))
                    .context("installing signal handlers")?;
            }
            let summary = run_daemon(cfg, &stop, |st| {
                eprintln!(
                    "netsched nfq: running ({} classes, discipline {}, budget {}); Ctrl-C to stop",
                    st.classes.len(),
                    st.discipline,
                    st.budget.map(|b| b.to_string()).unwrap_or("off".into())
                )
            })?;
            eprintln!(
                "netsched nfq: stopped; {} packets seen, {} requests, {} released at exit",
                summary.counters.packets, summary.counters.requests, summary.released_at_exit
            );
            Ok(())
        }
    }
}

/// What the daemon reports when it exits.
#[derive(Debug, Clone)]
pub struct Summary {
    pub counters: crate::engine::Counters,
    pub status: Status,
    /// Packets accepted during shut-down (held + still in the socket).
    pub released_at_exit: usize,
}

/// The kernel's per-queue counters from /proc/net/netfilter/nfnetlink_queue (this netns).
fn kernel_queue_counters(queue: u16) -> Option<(u64, u64, u64)> {
    let text = std::fs::read_to_string("/proc/thread-self/net/netfilter/nfnetlink_queue").ok()?;
    for line in text.lines() {
        let f: Vec<u64> = line
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        // queue_number portid queue_total copy_mode copy_range queue_dropped user_dropped id_seq 1
        if f.len() >= 7 && f[0] == queue as u64 {
            return Some((f[2], f[5], f[6]));
        }
    }
    None
}

/// The control thread's additions to a status answer: the iptables rule counters (cached
/// for [`RULE_COUNT_MAX_AGE`]: each read starts `iptables` processes) and the kernel's queue
/// counters from /proc (this thread's network namespace = the daemon's).
struct KernelFacts {
    iptables: String,
    queue: u16,
    rule_matched: Option<(Instant, u64)>,
}

/// How long a read of the iptables rule counters is reused by later `status` calls.
const RULE_COUNT_MAX_AGE: Duration = Duration::from_secs(1);

impl KernelFacts {
    fn fill(&mut self, st: &mut Status) {
        let now = Instant::now();
        let matched = match self.rule_matched {
            Some((at, n)) if now.duration_since(at) < RULE_COUNT_MAX_AGE => n,
            _ => {
                let n = iptables::rule_packet_count(&self.iptables, self.queue);
                self.rule_matched = Some((now, n));
                n
            }
        };
        let k = &mut st.kernel;
        k.rule_matched = matched;
        if let Some((total, dropped, user)) = kernel_queue_counters(self.queue) {
            k.queue_total = total;
            k.queue_dropped = dropped;
            k.user_dropped = user;
        }
        k.skipped_fail_open = k.rule_matched.saturating_sub(k.received + k.queue_total);
    }
}

fn socket_counters(q: &NfQueue) -> SocketCounters {
    SocketCounters {
        received: q.received,
        enobufs: q.enobufs,
        rcvbuf_bytes: q.rcvbuf() as u64,
    }
}

/// Run the daemon in the calling thread (and network namespace) until `stop` is set.
/// `on_ready` is called once the rules are in place.
///
/// Two threads: this one is the packet loop; a control thread (started here, in the same
/// network namespace, joined before returning) serves the control socket and hands the
/// packet loop validated commands (see [`crate::control`]).
pub fn run_daemon(
    cfg: Config,
    stop: &AtomicBool,
    on_ready: impl FnOnce(&Status),
) -> Result<Summary> {
    let queue_num = cfg.queue;
    let mut engine = Engine::new(cfg.clone())?;
    let ctl = ControlServer::bind(&cfg.control_socket, cfg.control_group.as_deref())?;
    let (outbox, inbox) = control::command_channel()?;
    let mut q = NfQueue::open(
        queue_num,
        cfg.limits.kernel_queue_maxlen,
        cfg.limits.rcvbuf_bytes,
    )?;
    let rules = Rules::install(&cfg.iptables, &cfg.service, queue_num)?;
    let t0 = Instant::now();
    let now = || t0.elapsed().as_nanos() as u64;
    on_ready(&engine.status());

    let quit_control = Arc::new(AtomicBool::new(false));
    let control_thread = {
        let quit = Arc::clone(&quit_control);
        let classes = cfg.classes.clone();
        let mut facts = KernelFacts {
            iptables: cfg.iptables.clone(),
            queue: queue_num,
            rule_matched: None,
        };
        std::thread::Builder::new()
            .name("nfq-control".into())
            .spawn(move || {
                ctl.run(&quit, |req| {
                    control::serve_request(
                        req,
                        &classes,
                        |cmd| outbox.execute(cmd, control::COMMAND_TIMEOUT),
                        &mut |st| facts.fill(st),
                    )
                });
                // `ctl` drops here: the socket file goes with the thread.
            })
            .context("starting the control thread")?
    };

    let mut batch: Vec<PacketMsg> = Vec::with_capacity(crate::netlink::RECV_BATCH);
    let mut accept: Vec<u32> = Vec::with_capacity(1024);
    let mut last_tick = 0u64;
    let result: Result<()> = (|| {
        while !stop.load(Ordering::Relaxed) {
            let mut fds = [
                libc::pollfd {
                    fd: q.fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: inbox.fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            crate::sys::poll(&mut fds, Duration::from_millis(10)).context("poll")?;
            // Packets: drain up to 16 batches before looking at anything else.
            for _ in 0..16 {
                batch.clear();
                if q.recv_batch(&mut batch)? == 0 {
                    break;
                }
                let t = now();
                for p in &batch {
                    engine.on_packet(p.id, p.hook, &p.head, t, &mut accept);
                }
                for id in accept.drain(..) {
                    q.accept(id);
                }
                q.flush()?;
            }
            if fds[1].revents != 0 {
                let t = now();
                let sock = socket_counters(&q);
                inbox.serve(|cmd| {
                    let mut a = engine.apply(cmd, t, &mut accept);
                    if let Ok(Applied::Snapshot(s)) = &mut a {
                        s.socket = sock;
                    }
                    a
                });
                for id in accept.drain(..) {
                    q.accept(id);
                }
                q.flush()?;
            }
            let t = now();
            if t.saturating_sub(last_tick) >= 10 * crate::MS {
                last_tick = t;
                engine.tick(t, &mut accept);
                for id in accept.drain(..) {
                    q.accept(id);
                }
                q.flush()?;
            }
        }
        Ok(())
    })();

    // Shut down: the control thread first (no more commands), then no new packets, then
    // verdict everything.
    quit_control.store(true, Ordering::Relaxed);
    let control_joined = control_thread.join();
    drop(inbox);
    drop(rules);
    let mut released = 0usize;
    accept.clear();
    // Packets already in the socket (queued before the rules went away).
    for _ in 0..1000 {
        batch.clear();
        match q.recv_batch(&mut batch) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                for p in &batch {
                    accept.push(p.id);
                }
            }
        }
    }
    engine.drain_all(&mut accept);
    for id in accept.drain(..) {
        q.accept(id);
        released += 1;
    }
    let flushed = q.flush();
    let mut snap = engine.snapshot();
    snap.socket = socket_counters(&q);
    let names: Vec<String> = cfg.classes.iter().map(|c| c.name.clone()).collect();
    let mut status = snap.to_status(&names);
    KernelFacts {
        iptables: cfg.iptables.clone(),
        queue: queue_num,
        rule_matched: None,
    }
    .fill(&mut status);
    let _ = q.unbind();
    drop(q);
    result?;
    flushed?;
    if control_joined.is_err() {
        bail!("the control thread panicked");
    }
    Ok(Summary {
        counters: engine.counters.clone(),
        status,
        released_at_exit: released,
    })
}

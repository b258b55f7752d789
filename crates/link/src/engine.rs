//! `netsched link`: a userspace link engine — the testbed's link emulator (there is no netem
//! on this kernel) and proof that the core disciplines behave on real traffic.
//!
//! It forwards Ethernet frames between two interfaces with `AF_PACKET` raw sockets
//! (`packet(7)`). Per direction it emulates a link: an egress discipline from the core library
//! (any [`QdiscConfig`]: FIFO, ACK separation, ...) fed by a classifier, a transmitter that
//! serialises frames at `rate` (frame bytes × 8 / rate), and a propagation delay line.
//!
//! Design (one thread, no per-packet allocation):
//! - frames live in a fixed buffer pool per direction (slots of 2 KiB); the qdisc and the delay
//!   line hold small [`Frame`] handles (slot index, length, ACK facts);
//! - receive: `recvmmsg` in batches of 32 directly into free slots; outgoing-packet echo is
//!   ignored (`PACKET_IGNORE_OUTGOING`, and `sll_pkttype == PACKET_OUTGOING` is checked too);
//! - transmit: when the link is free (`link_free_at <= now`), dequeue, schedule the frame at
//!   `tx_start + len×8/rate + delay` on the delay line (a bounded FIFO of (due, frame): delay
//!   is constant so due times are in order), and `sendmmsg` what is due;
//! - sleep: `ppoll` on both sockets with a timeout to the next departure (timer slack set to
//!   1 µs with `PR_SET_TIMERSLACK`; the default 50 µs slack would show up as latency);
//! - time is `CLOCK_MONOTONIC` in nanoseconds, handed to the discipline as `now`.
//!
//! `AF_PACKET` with `recvmmsg` instead of a `TPACKET_V3` ring: a V3 ring retires a block only
//! when full or after its timeout (8 ms by default) — a latency floor for a link emulator;
//! `recvmmsg` hands packets over as soon as they arrive.
//!
//! Bounded memory: pool slots per direction (`--pool`), delay line ≤ `--delay-line` frames.
//! Every drop is counted per reason (qdisc reasons from [`DropReason`], plus `delay_line_full`,
//! `oversize`, `send_error`, and the kernel's socket drops from `PACKET_STATISTICS` when the
//! engine falls behind). On SIGINT/SIGTERM it stops, resets the queues (frames counted as
//! `reset`) and reports what was held.
//!
//! Cost per frame: two syscalls amortised over a batch, O(1) pool and delay-line operations,
//! plus the discipline's cost (O(1) FIFO; ACK filter parses headers, O(header bytes)).

use anyhow::{anyhow, bail, Context, Result};
use netsched_core::qdisc::{AnyQdisc, ClassId, DropReason, Packet, Qdisc, QdiscConfig};
use netsched_core::wire::{self, AckInfo};
use netsched_core::{Nanos, MS, SEC};
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Arguments of `netsched link`.
#[derive(Debug, clap::Args)]
#[command(
    args_conflicts_with_subcommands = true,
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
  netsched link --dev-a lan0 --dev-b wan0 --ab-rate 800kbit --ab-qdisc ack-sep:100 \\
      --ba-rate 2.1mbit --delay 10ms
  # strong asymmetry: ACK filter (RFC 3449) and ACKs capped at half of the uplink
  netsched link --dev-a lan0 --dev-b wan0 --ab-rate 1mbit --ab-qdisc ack-sep:100+filter+cap=0.5 \\
      --ba-rate 50mbit --delay 10ms
  # any discipline as JSON (the scenario-file form of QdiscConfig)
  netsched link --dev-a a --dev-b b --ab-qdisc '{\"kind\":\"fifo\",\"limit_packets\":50}'
  # measure forwarding speed against the kernel (creates and removes its own namespaces)
  netsched link bench

Rates as in tc(8) (800kbit, 2.1mbit, 1gbit; `none` = unlimited). Delays: 10ms, 500us, 0."
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
    #[arg(long)]
    pub dev_a: Option<String>,
    /// Second interface.
    #[arg(long)]
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
    #[arg(long)]
    pub ab_delay: Option<String>,
    #[arg(long)]
    pub ba_delay: Option<String>,
    /// Discipline a→b: `fifo[:N]`, `ack-sep[:N][+filter][+cap=S]`, or a QdiscConfig as JSON.
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
    /// Print a JSON line of counters at this interval (e.g. 1s).
    #[arg(long)]
    pub stats: Option<String>,
    /// Never sleep in poll: lowest latency, one core at 100 %.
    #[arg(long)]
    pub busy_poll: bool,
    /// Stop after this long (e.g. 30s); default: until SIGINT/SIGTERM.
    #[arg(long)]
    pub duration: Option<String>,
}

pub fn run(args: LinkArgs) -> Result<()> {
    if let Some(LinkSub::Bench(b)) = args.sub {
        return crate::bench::run(b);
    }
    let cfg = EngineConfig::from_args(&args.run)?;
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, Arc::clone(&stop))
        .context("installing the SIGINT handler")?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, Arc::clone(&stop))
        .context("installing the SIGTERM handler")?;
    let duration = args
        .run
        .duration
        .as_deref()
        .map(parse_duration)
        .transpose()
        .context("--duration")?;
    let mut engine = Engine::open(&cfg)?;
    eprintln!(
        "netsched link: forwarding {} <-> {} (Ctrl-C stops)",
        cfg.dev_a, cfg.dev_b
    );
    let final_stats = engine.run(&stop, duration, &mut |s| {
        println!("{}", serde_json::to_string(s).unwrap_or_default());
    })?;
    println!(
        "{}",
        serde_json::to_string(&serde_json::json!({ "final": final_stats }))?
    );
    Ok(())
}

/// Parse `10ms`, `500us`, `2s`, `0` into nanoseconds.
pub fn parse_duration(text: &str) -> Result<Nanos> {
    let t = text.trim().to_ascii_lowercase();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num.parse().map_err(|_| {
        anyhow!("duration `{text}`: expected a number with a unit (10ms, 500us, 2s)")
    })?;
    let mult = match unit {
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "" if v == 0.0 => 0.0,
        "" => bail!("duration `{text}`: needs a unit (ns, us, ms, s)"),
        _ => bail!("duration `{text}`: unknown unit `{unit}` (ns, us, ms, s)"),
    };
    let ns = v * mult;
    if !ns.is_finite() || ns > 3600e9 {
        bail!("duration `{text}`: must be at most one hour");
    }
    Ok(ns.round() as Nanos)
}

/// Parse a rate (`none`/`0`... no: `none` means unlimited) into bits/s; `None` = unlimited.
pub fn parse_link_rate(text: &str) -> Result<Option<u64>> {
    if text.trim().eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    crate::shape::parse_rate(text).map(Some)
}

/// Parse a discipline spec: `fifo[:N]`, `ack-sep[:N][+filter][+cap=S]` or JSON `{"kind": ...}`.
pub fn parse_qdisc(text: &str) -> Result<QdiscSpec> {
    let t = text.trim();
    let config: QdiscConfig = if t.starts_with('{') {
        serde_json::from_str(t).map_err(|e| anyhow!("qdisc `{t}`: not a valid QdiscConfig: {e}"))?
    } else {
        if let Some(rest) = t.strip_prefix("ack-sep") {
            crate::ackcfg::ack_separation(rest).map_err(|e| anyhow!("qdisc `{t}`: {e}"))?
        } else {
            let (name, n) = match t.split_once(':') {
                Some((a, b)) => (
                    a,
                    Some(
                        b.parse::<usize>()
                            .map_err(|_| anyhow!("qdisc `{t}`: `{b}` is not a packet count"))?,
                    ),
                ),
                None => (t, None),
            };
            match name {
                "fifo" => QdiscConfig::Fifo {
                    limit_packets: n.unwrap_or(1000),
                    limit_bytes: u64::MAX,
                },
                _ => bail!(
                    "qdisc `{t}`: unknown discipline `{name}` (fifo[:N], ack-sep[:N][+filter][+cap=S], or JSON)"
                ),
            }
        }
    };
    // Validate now, so a bad config fails before any socket is opened.
    config
        .build::<Frame>()
        .map_err(|e| anyhow!("qdisc `{t}`: {e}"))?;
    let classify = crate::ackcfg::classifier_for(&config);
    Ok(QdiscSpec { config, classify })
}

/// How a frame's class is decided for a discipline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ClassMode {
    /// Every frame is class 0; headers are not parsed (FIFO).
    Single,
    /// Pure TCP ACKs vs the rest, by the core's pure-ACK classifier; ACK facts are attached
    /// to the frame for the ACK filter.
    PureAck,
}

#[derive(Debug, Clone)]
pub struct QdiscSpec {
    pub config: QdiscConfig,
    pub classify: ClassMode,
}

/// One direction of the emulated link.
#[derive(Debug, Clone)]
pub struct DirConfig {
    /// Bits per second; None = unlimited.
    pub rate_bps: Option<u64>,
    pub delay: Nanos,
    pub qdisc: QdiscSpec,
}

#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub dev_a: String,
    pub dev_b: String,
    pub ab: DirConfig,
    pub ba: DirConfig,
    pub pool: usize,
    pub delay_line: usize,
    pub stats_interval: Option<Nanos>,
    /// Never sleep: poll the sockets in a loop (one core at 100 %, lowest latency).
    pub busy_poll: bool,
}

impl EngineConfig {
    pub fn from_args(a: &RunArgs) -> Result<Self> {
        let dev_a = a
            .dev_a
            .clone()
            .ok_or_else(|| anyhow!("--dev-a is required"))?;
        let dev_b = a
            .dev_b
            .clone()
            .ok_or_else(|| anyhow!("--dev-b is required"))?;
        if dev_a == dev_b {
            bail!("--dev-a and --dev-b are both `{dev_a}`: they must differ");
        }
        let delay = parse_duration(&a.delay).context("--delay")?;
        let dir = |rate: &str, d: &Option<String>, q: &str, name: &str| -> Result<DirConfig> {
            Ok(DirConfig {
                rate_bps: parse_link_rate(rate).with_context(|| format!("--{name}-rate"))?,
                delay: match d {
                    Some(d) => parse_duration(d).with_context(|| format!("--{name}-delay"))?,
                    None => delay,
                },
                qdisc: parse_qdisc(q).with_context(|| format!("--{name}-qdisc"))?,
            })
        };
        if a.pool < 64 || a.pool > 1 << 20 {
            bail!("--pool {}: must be between 64 and 1048576 slots", a.pool);
        }
        if a.delay_line < 1 || a.delay_line > 1 << 20 {
            bail!(
                "--delay-line {}: must be between 1 and 1048576",
                a.delay_line
            );
        }
        Ok(Self {
            ab: dir(&a.ab_rate, &a.ab_delay, &a.ab_qdisc, "ab")?,
            ba: dir(&a.ba_rate, &a.ba_delay, &a.ba_qdisc, "ba")?,
            dev_a,
            dev_b,
            pool: a.pool,
            delay_line: a.delay_line,
            stats_interval: a
                .stats
                .as_deref()
                .map(parse_duration)
                .transpose()
                .context("--stats")?,
            busy_poll: a.busy_poll,
        })
    }
}

/// Bytes per pool slot: an MTU-1500 frame (1514 B) plus room; larger frames are `oversize`.
pub const SLOT: usize = 2048;
const BATCH: usize = 32;

/// A frame held by the engine: its pool slot and what the discipline needs.
#[derive(Debug, Clone, Copy)]
pub struct Frame {
    slot: u32,
    len: u32,
    ack: Option<AckInfo>,
}

impl Packet for Frame {
    fn len(&self) -> u32 {
        self.len
    }
    fn ack_info(&self) -> Option<AckInfo> {
        self.ack
    }
}

/// Fixed buffer pool: one allocation at start, slots handed out by index.
struct Pool {
    bytes: Vec<u8>,
    free: Vec<u32>,
}

impl Pool {
    fn new(slots: usize) -> Self {
        Self {
            bytes: vec![0u8; slots * SLOT],
            free: (0..slots as u32).rev().collect(),
        }
    }
    fn slot_ptr(&mut self, slot: u32) -> *mut u8 {
        // SAFETY: slot < slots, so the offset is inside `bytes`.
        unsafe { self.bytes.as_mut_ptr().add(slot as usize * SLOT) }
    }
    fn data(&self, f: &Frame) -> &[u8] {
        let s = f.slot as usize * SLOT;
        &self.bytes[s..s + f.len as usize]
    }
}

/// Counters of one direction, reported as JSON.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DirStats {
    pub rx_frames: u64,
    pub rx_bytes: u64,
    pub tx_frames: u64,
    pub tx_bytes: u64,
    /// Pure TCP ACKs classified (ACK class), when the discipline separates them.
    pub acks_classified: u64,
    /// Drops per reason: the discipline's reasons plus the engine's own.
    pub drops: std::collections::BTreeMap<String, u64>,
    /// Frames the kernel dropped because the socket queue was full (`PACKET_STATISTICS`).
    pub kernel_socket_drops: u64,
    pub queued_frames: u64,
    pub queued_bytes: u64,
    pub in_flight_frames: u64,
    pub max_delay_line: u64,
    /// Frames held (queued + in flight) when the engine was stopped; they are then counted as
    /// `reset` / `shutdown_in_flight` drops.
    pub held_at_stop: u64,
}

impl DirStats {
    /// Every frame received is sent, dropped (for a counted reason) or still held:
    /// `rx == tx + drops + queued + in flight`. `Err` shows the numbers.
    pub fn check_accounting(&self) -> Result<(), String> {
        let drops: u64 = self.drops.values().sum();
        let held = self.queued_frames + self.in_flight_frames;
        if self.rx_frames == self.tx_frames + drops + held {
            Ok(())
        } else {
            Err(format!(
                "rx {} != tx {} + drops {} + held {}",
                self.rx_frames, self.tx_frames, drops, held
            ))
        }
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct EngineStats {
    /// Seconds since the engine started.
    pub t: f64,
    /// CPU seconds the engine thread used (`CLOCK_THREAD_CPUTIME_ID`).
    pub cpu_s: f64,
    pub ab: DirStats,
    pub ba: DirStats,
}

struct Direction {
    rx: i32,
    tx: i32,
    qdisc: AnyQdisc<Frame>,
    classify: ClassMode,
    rate_bps: Option<u64>,
    delay: Nanos,
    link_free_at: Nanos,
    delay_line: VecDeque<(Nanos, Frame)>,
    delay_cap: usize,
    pool: Pool,
    st: DirStats,
    own_drops: [u64; 4],
}

const OWN_DROPS: [&str; 4] = [
    "delay_line_full",
    "oversize",
    "send_error",
    "shutdown_in_flight",
];

fn now_ns() -> Nanos {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * SEC + ts.tv_nsec as u64
}

fn thread_cpu_ns() -> Nanos {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * SEC + ts.tv_nsec as u64
}

/// An open AF_PACKET raw socket bound to one interface.
struct PacketSocket {
    fd: i32,
}

impl Drop for PacketSocket {
    fn drop(&mut self) {
        // SAFETY: we own the descriptor.
        unsafe { libc::close(self.fd) };
    }
}

const PACKET_IGNORE_OUTGOING: i32 = 23; // include/uapi/linux/if_packet.h
const PACKET_QDISC_BYPASS: i32 = 20;

fn setsockopt_int(fd: i32, level: i32, opt: i32, val: i32) -> std::io::Result<()> {
    // SAFETY: pointer to a live i32 and its size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            &val as *const i32 as *const libc::c_void,
            std::mem::size_of::<i32>() as u32,
        )
    };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

impl PacketSocket {
    fn open(dev: &str) -> Result<Self> {
        let cname = std::ffi::CString::new(dev).map_err(|_| anyhow!("bad interface name"))?;
        // SAFETY: C string valid for the call.
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        if ifindex == 0 {
            bail!("interface `{dev}` does not exist (in this network namespace)");
        }
        // Protocol 0: receive nothing until bound to the interface (no stray frames).
        // SAFETY: plain syscall.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if fd < 0 {
            bail!(
                "socket(AF_PACKET) for {dev}: {} (needs root / CAP_NET_RAW)",
                std::io::Error::last_os_error()
            );
        }
        let s = Self { fd };
        // Our own transmissions must not come back as input (packet(7)).
        let _ = setsockopt_int(fd, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1);
        let _ = setsockopt_int(fd, libc::SOL_PACKET, PACKET_QDISC_BYPASS, 1);
        let _ = setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, 4 << 20);
        let _ = setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, 4 << 20);
        // SAFETY: zeroed sockaddr_ll is valid; fields set below.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: pointer and size of a sockaddr_ll.
        let r = unsafe {
            libc::bind(
                fd,
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if r < 0 {
            bail!(
                "bind AF_PACKET to {dev}: {}",
                std::io::Error::last_os_error()
            );
        }
        // Promiscuous: frames for the far end's MAC address are ours to forward.
        // SAFETY: zeroed packet_mreq is valid.
        let mut mr: libc::packet_mreq = unsafe { std::mem::zeroed() };
        mr.mr_ifindex = ifindex as i32;
        mr.mr_type = libc::PACKET_MR_PROMISC as u16;
        // SAFETY: pointer and size of a packet_mreq.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_PACKET,
                libc::PACKET_ADD_MEMBERSHIP,
                &mr as *const libc::packet_mreq as *const libc::c_void,
                std::mem::size_of::<libc::packet_mreq>() as u32,
            )
        };
        Ok(s)
    }

    /// Kernel drops since the last call (`PACKET_STATISTICS` resets on read).
    fn kernel_drops(&self) -> u64 {
        // SAFETY: zeroed tpacket_stats is valid; pointer and length passed.
        let mut st: libc::tpacket_stats = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::tpacket_stats>() as u32;
        let r = unsafe {
            libc::getsockopt(
                self.fd,
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                &mut st as *mut libc::tpacket_stats as *mut libc::c_void,
                &mut len,
            )
        };
        if r < 0 {
            0
        } else {
            st.tp_drops as u64
        }
    }
}

impl Direction {
    fn new(rx: i32, tx: i32, cfg: &DirConfig, pool: usize, delay_cap: usize) -> Result<Self> {
        Ok(Self {
            rx,
            tx,
            qdisc: cfg
                .qdisc
                .config
                .build()
                .map_err(|e| anyhow!("qdisc: {e}"))?,
            classify: cfg.qdisc.classify,
            rate_bps: cfg.rate_bps,
            delay: cfg.delay,
            link_free_at: 0,
            delay_line: VecDeque::with_capacity(delay_cap.min(65536)),
            delay_cap,
            pool: Pool::new(pool),
            st: DirStats::default(),
            own_drops: [0; 4],
        })
    }

    /// Receive up to a batch of frames into free slots and enqueue them. Returns frames read.
    fn receive(&mut self, now: Nanos) -> usize {
        let want = BATCH.min(self.pool.free.len());
        if want == 0 {
            return 0;
        }
        let mut slots = [0u32; BATCH];
        for x in slots.iter_mut().take(want) {
            *x = self.pool.free.pop().expect("want <= free slots");
        }
        // SAFETY: zeroed iovec/mmsghdr/sockaddr_ll are valid initial values.
        let mut iov: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
        let mut addrs: [libc::sockaddr_ll; BATCH] = unsafe { std::mem::zeroed() };
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        for i in 0..want {
            iov[i].iov_base = self.pool.slot_ptr(slots[i]) as *mut libc::c_void;
            iov[i].iov_len = SLOT;
            msgs[i].msg_hdr.msg_iov = &mut iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
            msgs[i].msg_hdr.msg_name = &mut addrs[i] as *mut libc::sockaddr_ll as *mut libc::c_void;
            msgs[i].msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as u32;
        }
        // SAFETY: msgs points to `want` initialised headers whose buffers are pool slots.
        let n = unsafe {
            libc::recvmmsg(
                self.rx,
                msgs.as_mut_ptr(),
                want as u32,
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                std::ptr::null_mut(),
            )
        };
        let n = n.max(0) as usize;
        // Slots recvmmsg did not fill go back to the pool.
        for &slot in &slots[n..want] {
            self.pool.free.push(slot);
        }
        for i in 0..n {
            let len = msgs[i].msg_len as usize;
            let slot = slots[i];
            // Our own sends never come back with IGNORE_OUTGOING; older kernels: check type.
            if addrs[i].sll_pkttype == libc::PACKET_OUTGOING {
                self.pool.free.push(slot);
                continue;
            }
            self.st.rx_frames += 1;
            self.st.rx_bytes += len as u64;
            if len > SLOT {
                self.own_drops[1] += 1;
                self.pool.free.push(slot);
                continue;
            }
            let mut frame = Frame {
                slot,
                len: len as u32,
                ack: None,
            };
            let class: ClassId = match self.classify {
                ClassMode::Single => 0,
                ClassMode::PureAck => {
                    let data = self.pool.data(&frame);
                    frame.ack = wire::ethernet_payload(data).ok().and_then(wire::ack_info);
                    let c = crate::ackcfg::class_of(data);
                    if c == crate::ackcfg::ACK_CLASS {
                        self.st.acks_classified += 1;
                    }
                    c
                }
            };
            self.enqueue(class, frame, now);
        }
        n
    }

    fn enqueue(&mut self, class: ClassId, frame: Frame, now: Nanos) {
        match self.qdisc.enqueue(class, frame, now) {
            netsched_core::qdisc::Verdict::Queued => {}
            netsched_core::qdisc::Verdict::Dropped { item, .. } => self.pool.free.push(item.slot),
            netsched_core::qdisc::Verdict::QueuedEvicting { evicted, .. } => {
                self.pool.free.push(evicted.slot)
            }
        }
    }

    /// Move frames from the discipline onto the wire while the link is free.
    fn transmit(&mut self, now: Nanos) {
        loop {
            if let Some(_rate) = self.rate_bps {
                if self.link_free_at > now {
                    return;
                }
            }
            let Some(frame) = self.qdisc.dequeue(now) else {
                return;
            };
            let due = match self.rate_bps {
                None => now + self.delay,
                Some(rate) => {
                    // A late wake-up of up to 200 µs is caught up (keeps the average rate);
                    // after a longer gap the link was idle and starts now.
                    let start = if self.link_free_at + 200_000 >= now {
                        self.link_free_at
                    } else {
                        now
                    };
                    let tx_time = frame.len as u64 * 8 * SEC / rate;
                    self.link_free_at = start + tx_time;
                    self.link_free_at + self.delay
                }
            };
            if self.delay_line.len() >= self.delay_cap {
                self.own_drops[0] += 1;
                self.pool.free.push(frame.slot);
                continue;
            }
            self.delay_line.push_back((due, frame));
            self.st.max_delay_line = self.st.max_delay_line.max(self.delay_line.len() as u64);
        }
    }

    /// Send every frame whose due time has come, in batches.
    fn send_due(&mut self, now: Nanos) {
        while self.delay_line.front().is_some_and(|(due, _)| *due <= now) {
            let mut n = 0;
            // SAFETY: zeroed iovec/mmsghdr are valid initial values.
            let mut iov: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
            let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
            for (due, f) in self.delay_line.iter().take(BATCH) {
                if *due > now {
                    break;
                }
                iov[n].iov_base = self.pool.slot_ptr(f.slot) as *mut libc::c_void;
                iov[n].iov_len = f.len as usize;
                n += 1;
            }
            for i in 0..n {
                msgs[i].msg_hdr.msg_iov = &mut iov[i];
                msgs[i].msg_hdr.msg_iovlen = 1;
            }
            // SAFETY: n initialised headers pointing at live pool slots.
            let sent = unsafe { libc::sendmmsg(self.tx, msgs.as_mut_ptr(), n as u32, 0) };
            let sent = if sent < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.raw_os_error() == Some(libc::ENOBUFS)
                {
                    // Device busy: retry on the next loop turn.
                    return;
                }
                // Any other error drops the first frame, so the loop makes progress.
                let (_, f) = self.delay_line.pop_front().expect("n >= 1");
                self.own_drops[2] += 1;
                self.pool.free.push(f.slot);
                continue;
            } else {
                sent as usize
            };
            for _ in 0..sent {
                let (_, f) = self.delay_line.pop_front().expect("sent <= n");
                self.st.tx_frames += 1;
                self.st.tx_bytes += f.len as u64;
                self.pool.free.push(f.slot);
            }
            if sent < n {
                return;
            }
        }
    }

    /// When this direction needs the loop again (None = only on input).
    fn next_wake(&self, now: Nanos) -> Option<Nanos> {
        let mut t = self.delay_line.front().map(|(d, _)| *d);
        if !self.qdisc.is_empty() {
            let q = match self.rate_bps {
                Some(_) => self.link_free_at.max(now),
                None => now,
            };
            t = Some(t.map_or(q, |x| x.min(q)));
        }
        if let Some(q) = self.qdisc.next_timer(now) {
            t = Some(t.map_or(q, |x| x.min(q)));
        }
        t
    }

    fn snapshot(&mut self, sock_drops: u64) -> DirStats {
        self.st.kernel_socket_drops += sock_drops;
        let qs = self.qdisc.stats();
        let mut drops = std::collections::BTreeMap::new();
        for r in DropReason::ALL {
            let n = qs.drops_for(r);
            if n > 0 {
                drops.insert(r.as_str().to_string(), n);
            }
        }
        for (i, name) in OWN_DROPS.iter().enumerate() {
            if self.own_drops[i] > 0 {
                drops.insert(name.to_string(), self.own_drops[i]);
            }
        }
        let mut s = self.st.clone();
        s.drops = drops;
        s.queued_frames = qs.queued_packets;
        s.queued_bytes = qs.queued_bytes;
        s.in_flight_frames = self.delay_line.len() as u64;
        s
    }

    /// Shutdown: hand back everything held, counted.
    fn shutdown(&mut self) {
        self.st.held_at_stop = self.qdisc.len() as u64 + self.delay_line.len() as u64;
        for f in self.qdisc.reset() {
            self.pool.free.push(f.slot);
        }
        while let Some((_, f)) = self.delay_line.pop_front() {
            self.own_drops[3] += 1;
            self.pool.free.push(f.slot);
        }
    }
}

/// The engine: two sockets, two directions.
pub struct Engine {
    sock_a: PacketSocket,
    sock_b: PacketSocket,
    ab: Direction,
    ba: Direction,
    stats_interval: Option<Nanos>,
    busy_poll: bool,
}

impl Engine {
    /// Open both sockets (in the current thread's network namespace).
    pub fn open(cfg: &EngineConfig) -> Result<Self> {
        let sock_a = PacketSocket::open(&cfg.dev_a).context("--dev-a")?;
        let sock_b = PacketSocket::open(&cfg.dev_b).context("--dev-b")?;
        let ab = Direction::new(sock_a.fd, sock_b.fd, &cfg.ab, cfg.pool, cfg.delay_line)?;
        let ba = Direction::new(sock_b.fd, sock_a.fd, &cfg.ba, cfg.pool, cfg.delay_line)?;
        // Timer slack 1 µs: ppoll timeouts would otherwise be stretched by up to 50 µs.
        // SAFETY: prctl with integer arguments.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000u64, 0u64, 0u64, 0u64) };
        Ok(Self {
            sock_a,
            sock_b,
            ab,
            ba,
            stats_interval: cfg.stats_interval,
            busy_poll: cfg.busy_poll,
        })
    }

    fn stats(&mut self, t0: Nanos) -> EngineStats {
        let (da, db) = (self.sock_a.kernel_drops(), self.sock_b.kernel_drops());
        EngineStats {
            t: (now_ns() - t0) as f64 / 1e9,
            cpu_s: thread_cpu_ns() as f64 / 1e9,
            ab: self.ab.snapshot(da),
            ba: self.ba.snapshot(db),
        }
    }

    /// Forward until `stop` is set (or `duration` passed); `on_stats` gets periodic counters.
    /// Returns the final counters, after the queues were reset (held frames counted).
    pub fn run(
        &mut self,
        stop: &AtomicBool,
        duration: Option<Nanos>,
        on_stats: &mut dyn FnMut(&EngineStats),
    ) -> Result<EngineStats> {
        let t0 = now_ns();
        let end = duration.map(|d| t0 + d);
        let mut next_stats = self.stats_interval.map(|i| t0 + i);
        // Drain stale kernel counters.
        let _ = (self.sock_a.kernel_drops(), self.sock_b.kernel_drops());
        while !stop.load(Ordering::Relaxed) {
            let now = now_ns();
            if end.is_some_and(|e| now >= e) {
                break;
            }
            // Input first (up to a few batches, so output is never starved by a flood).
            for _ in 0..4 {
                let a = self.ab.receive(now);
                let b = self.ba.receive(now);
                if a < BATCH && b < BATCH {
                    break;
                }
            }
            for d in [&mut self.ab, &mut self.ba] {
                d.transmit(now);
                d.send_due(now);
            }
            if let (Some(ns), Some(iv)) = (next_stats, self.stats_interval) {
                if now >= ns {
                    let s = self.stats(t0);
                    on_stats(&s);
                    next_stats = Some(ns + iv);
                }
            }
            // Sleep until input or the next departure.
            let now = now_ns();
            let mut wake = [
                self.ab.next_wake(now),
                self.ba.next_wake(now),
                next_stats,
                end,
            ]
            .into_iter()
            .flatten()
            .min();
            // Wake at least every 100 ms to notice `stop`.
            wake = Some(wake.map_or(now + 100 * MS, |w| w.min(now + 100 * MS)));
            let timeout = wake.map(|w| w.saturating_sub(now)).unwrap_or(0);
            if timeout == 0 || self.busy_poll {
                continue;
            }
            let mut fds = [
                libc::pollfd {
                    fd: self.sock_a.fd,
                    events: if self.ab.pool.free.is_empty() {
                        0
                    } else {
                        libc::POLLIN
                    },
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.sock_b.fd,
                    events: if self.ba.pool.free.is_empty() {
                        0
                    } else {
                        libc::POLLIN
                    },
                    revents: 0,
                },
            ];
            let ts = libc::timespec {
                tv_sec: (timeout / SEC) as libc::time_t,
                tv_nsec: (timeout % SEC) as libc::c_long,
            };
            // SAFETY: two valid pollfds, a valid timespec, no signal mask change.
            let r = unsafe { libc::ppoll(fds.as_mut_ptr(), 2, &ts, std::ptr::null()) };
            if r < 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EINTR) {
                    return Err(anyhow!("ppoll: {e}"));
                }
            }
        }
        self.ab.shutdown();
        self.ba.shutdown();
        Ok(self.stats(t0))
    }
}

/// An engine running on its own thread inside a named network namespace (`ip netns`).
pub struct EngineHandle {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Result<EngineStats>>>,
}

impl EngineHandle {
    /// Stop the engine and return its final counters.
    pub fn stop(mut self) -> Result<EngineStats> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => bail!("the link engine thread panicked"),
            None => bail!("the link engine was already stopped"),
        }
    }
}

impl Drop for EngineHandle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Start an engine on a new thread that has entered network namespace `netns` (a name under
/// `/var/run/netns`); returns once both sockets are open (or with their error).
pub fn spawn_in_netns(netns: &str, cfg: EngineConfig) -> Result<EngineHandle> {
    let path = format!("/var/run/netns/{netns}");
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel::<Result<()>>();
    let stop2 = Arc::clone(&stop);
    let thread = std::thread::Builder::new()
        .name(format!("link-{netns}"))
        .spawn(move || -> Result<EngineStats> {
            let enter = || -> Result<Engine> {
                let f = std::fs::File::open(&path)
                    .with_context(|| format!("network namespace {path}"))?;
                use std::os::fd::AsRawFd;
                // SAFETY: setns on a namespace fd affects only this thread.
                if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } < 0 {
                    bail!("setns({path}): {}", std::io::Error::last_os_error());
                }
                Engine::open(&cfg)
            };
            let mut engine = match enter() {
                Ok(e) => {
                    let _ = tx.send(Ok(()));
                    e
                }
                Err(e) => {
                    let msg = format!("{e:#}");
                    let _ = tx.send(Err(e));
                    bail!("{msg}");
                }
            };
            engine.run(&stop2, None, &mut |_| {})
        })
        .context("starting the link engine thread")?;
    match rx.recv() {
        Ok(Ok(())) => Ok(EngineHandle {
            stop,
            thread: Some(thread),
        }),
        Ok(Err(e)) => {
            let _ = thread.join();
            Err(e)
        }
        Err(_) => {
            let _ = thread.join();
            bail!("the link engine thread ended before opening its sockets")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("10ms").unwrap(), 10 * MS);
        assert_eq!(parse_duration("500us").unwrap(), 500_000);
        assert_eq!(parse_duration("2s").unwrap(), 2 * SEC);
        assert_eq!(parse_duration("0").unwrap(), 0);
        assert!(parse_duration("10")
            .unwrap_err()
            .to_string()
            .contains("unit"));
        assert!(parse_duration("soon")
            .unwrap_err()
            .to_string()
            .contains("`soon`"));
    }

    #[test]
    fn qdisc_specs_parse() {
        let q = parse_qdisc("fifo:100").unwrap();
        assert_eq!(
            q.config,
            QdiscConfig::Fifo {
                limit_packets: 100,
                limit_bytes: u64::MAX
            }
        );
        assert_eq!(q.classify, ClassMode::Single);
        let q = parse_qdisc(r#"{"kind":"fifo","limit_packets":7}"#).unwrap();
        assert!(matches!(
            q.config,
            QdiscConfig::Fifo {
                limit_packets: 7,
                ..
            }
        ));
        assert!(parse_qdisc("fifo:0")
            .unwrap_err()
            .to_string()
            .contains("limit_packets"));
        assert!(parse_qdisc("fifo:x")
            .unwrap_err()
            .to_string()
            .contains("`x`"));
        assert!(parse_qdisc("red")
            .unwrap_err()
            .to_string()
            .contains("unknown discipline"));
        assert!(parse_qdisc("{bad")
            .unwrap_err()
            .to_string()
            .contains("QdiscConfig"));
    }

    #[test]
    fn rates_accept_none_as_unlimited() {
        assert_eq!(parse_link_rate("none").unwrap(), None);
        assert_eq!(parse_link_rate("2.1mbit").unwrap(), Some(2_100_000));
        assert!(parse_link_rate("0").is_err());
    }

    #[test]
    fn engine_config_names_the_bad_flag() {
        let mut a = RunArgs {
            dev_a: Some("a".into()),
            dev_b: Some("b".into()),
            ab_rate: "800kbit".into(),
            ba_rate: "fast".into(),
            delay: "10ms".into(),
            ab_delay: None,
            ba_delay: None,
            ab_qdisc: "fifo:100".into(),
            ba_qdisc: "fifo:1000".into(),
            pool: 1024,
            delay_line: 1024,
            stats: None,
            busy_poll: false,
            duration: None,
        };
        let e = format!("{:#}", EngineConfig::from_args(&a).err().unwrap());
        assert!(e.contains("--ba-rate") && e.contains("`fast`"), "{e}");
        a.ba_rate = "2mbit".into();
        a.dev_b = Some("a".into());
        assert!(EngineConfig::from_args(&a).is_err());
        a.dev_b = Some("b".into());
        let c = EngineConfig::from_args(&a).unwrap();
        assert_eq!(c.ab.delay, 10 * MS);
        assert_eq!(c.ba.rate_bps, Some(2_000_000));
    }

    #[test]
    fn open_refuses_an_unknown_interface() {
        // No privilege needed to learn that the interface does not exist.
        let e = PacketSocket::open("nsx-no-such0")
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("does not exist"), "{e}");
    }
}

//! `netsched link bench`: forwarding speed of the link engine against the kernel, in one run.
//!
//! Two namespace chains are built, src — fwd — dst, with offloads off:
//! - **kernel**: fwd routes IPv4 (`ip_forward=1`) between two subnets;
//! - **engine**: fwd runs `netsched link` (FIFO 1000, no rate limit, no delay) between its two
//!   interfaces, src and dst share one subnet.
//!
//! Packets/s: a generator thread in src (`AF_PACKET`, `sendmmsg` of prebuilt UDP frames,
//! pinned to CPU 0) sends for `--duration` at full speed; the count of frames arriving on dst's
//! interface (its `rx_packets`) over the same time is the forwarding rate. Frames are addressed
//! (MAC) to a host that does not exist on dst's link, so dst drops them at once without
//! answering; the kernel forwarder reaches that MAC through a static neighbour entry. The
//! engine thread is pinned to CPU 1 (one core). 64-byte frames mean 60 bytes on the veth
//! (the minimum Ethernet frame without its 4-byte FCS), 1500-byte frames are 1514 bytes.
//!
//! Latency: `ping` src → dst at light load (one every 10 ms); added latency = p50 RTT through
//! the engine − p50 RTT through the kernel (each RTT crosses the forwarder twice).

use crate::engine::{parse_qdisc, spawn_in_netns, DirConfig, EngineConfig};
use anyhow::{anyhow, bail, Context, Result};
use netsched_sys::mmsg::send_repeated;
use netsched_sys::packet::{PacketFd, PACKET_QDISC_BYPASS};
use netsched_sys::{PortBackend, PortOptions, RingConfig};
use netsched_testbed::{
    allowed_cpus, check_interrupted, enter_netns, interrupted, pin_to_cpu, SignalGuard, Testbed,
};
use netsched_util::json_units::us_as_ns;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Arguments of `netsched link bench`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "Example:
  netsched link bench --duration 3s --pings 300   # root; prints a table, --json for JSON")]
pub struct BenchArgs {
    /// Traffic per packets/s measurement, whole seconds from 1s to 60s (e.g. 3s).
    #[arg(long, default_value = "3s")]
    pub duration: String,
    /// Deprecated spelling of --duration in seconds (`--secs 3` = `--duration 3s`).
    #[arg(long, hide = true, conflicts_with = "duration")]
    pub secs: Option<u32>,
    /// Pings per latency measurement (every 10 ms).
    #[arg(long, default_value_t = 300)]
    pub pings: u32,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Port backends to measure the engine on, in this order (comma-separated).
    #[arg(long, default_value = "xdp,tpacket,packet")]
    pub ports: String,
    /// Transmit ring frames of the `tpacket` ports (0 = sendmmsg); TX chunks of the `xdp`
    /// ports (0 = 1024).
    #[arg(long, default_value_t = 0)]
    pub tx_ring_frames: usize,
}

/// The engine's `spin` in every phase (the CLI's default).
const DEFAULT_SPIN: netsched_core::Nanos = 50_000;

/// One path's figures. Fields keep their measuring unit (µs, packets/s); `--json` prints
/// them in the JSON rule's units (docs/cli.md): whole nanoseconds and `*_per_s`.
#[derive(Debug, Clone, Serialize)]
pub struct PathResult {
    pub path: String,
    #[serde(rename = "packets_64b_per_s")]
    pub pps_64: f64,
    #[serde(rename = "packets_1500b_per_s")]
    pub pps_1500: f64,
    #[serde(rename = "offered_packets_64b_per_s")]
    pub offered_pps_64: f64,
    #[serde(rename = "offered_packets_1500b_per_s")]
    pub offered_pps_1500: f64,
    #[serde(rename = "rtt_p50_ns", serialize_with = "us_as_ns")]
    pub rtt_p50_us: f64,
    #[serde(rename = "rtt_p90_ns", serialize_with = "us_as_ns")]
    pub rtt_p90_us: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct EnginePath {
    #[serde(flatten)]
    pub path: PathResult,
    /// Wake-ups from `ppoll` per frame received, at 64 B and at 1500 B.
    pub wakeups_per_frame_64: f64,
    pub wakeups_per_frame_1500: f64,
    /// Frames forwarded per second of the engine thread's CPU time: its rate on one whole
    /// core, whatever else the machine was running.
    #[serde(rename = "packets_64b_per_cpu_s")]
    pub pps_per_cpu_second_64: f64,
    #[serde(rename = "packets_1500b_per_cpu_s")]
    pub pps_per_cpu_second_1500: f64,
    /// RTT with `--busy-poll` (the engine never sleeps).
    #[serde(rename = "busy_poll_rtt_p50_ns", serialize_with = "us_as_ns")]
    pub busy_poll_rtt_p50_us: f64,
    #[serde(rename = "busy_poll_rtt_p90_ns", serialize_with = "us_as_ns")]
    pub busy_poll_rtt_p90_us: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct EngineRun {
    #[serde(flatten)]
    pub engine: EnginePath,
    /// Engine p50 RTT − kernel p50 RTT, µs (two forwarder crossings).
    #[serde(rename = "added_rtt_p50_ns", serialize_with = "us_as_ns")]
    pub added_rtt_p50_us: f64,
    /// Half of it: added latency of one crossing of the engine.
    #[serde(rename = "added_one_way_p50_ns", serialize_with = "us_as_ns")]
    pub added_one_way_p50_us: f64,
    #[serde(rename = "busy_poll_added_one_way_p50_ns", serialize_with = "us_as_ns")]
    pub busy_poll_added_one_way_p50_us: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchResult {
    pub kernel: PathResult,
    /// One per measured backend (`path` = `engine/tpacket`, `engine/packet`).
    pub engines: Vec<EngineRun>,
    /// 1-minute load average when the bench ended (other work on the machine).
    pub load_average: String,
}

pub fn run(a: BenchArgs) -> Result<()> {
    let secs = match a.secs {
        Some(s) if (1..=60).contains(&s) => s,
        Some(s) => bail!("--secs {s}: must be between 1 and 60"),
        None => {
            let ns =
                netsched_core::units::parse_duration_in(&a.duration, 1_000_000_000, 60_000_000_000)
                    .context("--duration")?;
            if ns % 1_000_000_000 != 0 {
                bail!("--duration {}: whole seconds (1s to 60s)", a.duration);
            }
            (ns / 1_000_000_000) as u32
        }
    };
    if a.pings < 10 || a.pings > 10_000 {
        bail!("--pings {}: must be between 10 and 10000", a.pings);
    }
    let ports = a
        .ports
        .split(',')
        .map(|p| match p.trim().parse::<PortBackend>() {
            Ok(PortBackend::Auto) => Err(anyhow!("--ports: name the backends, not `auto`")),
            Ok(b) => Ok(b),
            Err(e) => Err(anyhow!("--ports: {e}")),
        })
        .collect::<Result<Vec<_>>>()?;
    if ports.is_empty() || ports.len() > 4 {
        bail!("--ports: one to four backends");
    }
    let r = bench(secs, a.pings, &ports, a.tx_ring_frames)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print_table(&r);
    }
    Ok(())
}

fn print_table(r: &BenchResult) {
    println!(
        "{:<16} {:>12} {:>12} {:>11} {:>11} {:>10} {:>10}",
        "path",
        "pkt/s @64B",
        "pkt/s @1500B",
        "RTT p50 µs",
        "RTT p90 µs",
        "x kern 64",
        "x kern 1500"
    );
    let k = &r.kernel;
    println!(
        "{:<16} {:>12.0} {:>12.0} {:>11.1} {:>11.1}",
        k.path, k.pps_64, k.pps_1500, k.rtt_p50_us, k.rtt_p90_us
    );
    for e in &r.engines {
        let p = &e.engine.path;
        println!(
            "{:<16} {:>12.0} {:>12.0} {:>11.1} {:>11.1} {:>10.2} {:>10.2}",
            p.path,
            p.pps_64,
            p.pps_1500,
            p.rtt_p50_us,
            p.rtt_p90_us,
            p.pps_64 / k.pps_64,
            p.pps_1500 / k.pps_1500
        );
    }
    for e in &r.engines {
        println!(
            "{}: per CPU-second {:.0} pkt/s @64B, {:.0} @1500B; wake-ups per frame {:.4} @64B, {:.4} @1500B; added p50 per crossing {:.1} µs sleeping, {:.1} µs busy-poll (RTT p50 {:.1}, p90 {:.1})",
            e.engine.path.path,
            e.engine.pps_per_cpu_second_64,
            e.engine.pps_per_cpu_second_1500,
            e.engine.wakeups_per_frame_64,
            e.engine.wakeups_per_frame_1500,
            e.added_one_way_p50_us,
            e.busy_poll_added_one_way_p50_us,
            e.engine.busy_poll_rtt_p50_us,
            e.engine.busy_poll_rtt_p90_us
        );
    }
    println!("load average: {}", r.load_average);
}

const SINK_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x99];

fn mac_of(tb: &Testbed, ns: &str, dev: &str) -> Result<[u8; 6]> {
    let out = tb.exec(ns, "cat", &[&format!("/sys/class/net/{dev}/address")])?;
    let parts: Vec<u8> = out
        .trim()
        .split(':')
        .map(|h| u8::from_str_radix(h, 16))
        .collect::<Result<_, _>>()
        .map_err(|_| anyhow!("cannot parse MAC `{}`", out.trim()))?;
    parts
        .try_into()
        .map_err(|_| anyhow!("MAC `{}` is not 6 bytes", out.trim()))
}

fn rx_packets(tb: &Testbed, ns: &str, dev: &str) -> Result<u64> {
    let out = tb.exec(
        ns,
        "cat",
        &[&format!("/sys/class/net/{dev}/statistics/rx_packets")],
    )?;
    out.trim()
        .parse()
        .map_err(|_| anyhow!("rx_packets of {dev}: `{}`", out.trim()))
}

/// RFC 791 header checksum (RFC 1071 one's-complement sum).
fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for c in h.chunks(2) {
        sum += u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An Ethernet/IPv4/UDP frame of `len` bytes (≥ 42).
fn udp_frame(
    len: usize,
    dst_mac: [u8; 6],
    src_mac: [u8; 6],
    src: [u8; 4],
    dst: [u8; 4],
) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[0..6].copy_from_slice(&dst_mac);
    f[6..12].copy_from_slice(&src_mac);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip_len = (len - 14) as u16;
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[8] = 64; // TTL
    ip[9] = 17; // UDP
    ip[12..16].copy_from_slice(&src);
    ip[16..20].copy_from_slice(&dst);
    let c = ipv4_checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    f[34..36].copy_from_slice(&9u16.to_be_bytes()); // discard port
    f[36..38].copy_from_slice(&9u16.to_be_bytes());
    f[38..40].copy_from_slice(&((len - 34) as u16).to_be_bytes()); // UDP length, checksum 0
    f
}

/// Send `frame` from `dev` in namespace `ns` as fast as possible for `secs`; returns frames sent.
fn generate(ns: &str, dev: &str, frame: Vec<u8>, secs: u32, stop: Arc<AtomicBool>) -> Result<u64> {
    let ns = ns.to_string();
    let dev = dev.to_string();
    let t = std::thread::spawn(move || -> Result<u64> {
        enter_netns(&ns)?;
        // Best effort: on a one-CPU machine the generator just runs unpinned.
        let _ = pin_to_cpu(0);
        let Some(ifindex) = netsched_sys::ifindex(&dev) else {
            bail!("generator: no interface {dev}");
        };
        let fd = PacketFd::open_blocking().map_err(|e| anyhow!("generator socket: {e}"))?;
        // Best effort, like the engine's ports: without it frames still go out.
        let _ = fd.set_int(libc::SOL_PACKET, PACKET_QDISC_BYPASS, 1);
        fd.bind_send_only(ifindex)
            .map_err(|e| anyhow!("generator bind to {dev}: {e}"))?;
        const B: usize = 64;
        let end = Instant::now() + Duration::from_secs(secs as u64);
        let mut sent = 0u64;
        while Instant::now() < end && !stop.load(Ordering::Relaxed) && !interrupted() {
            match send_repeated(&fd, &frame, B) {
                Ok(n) if n > 0 => sent += n as u64,
                _ => std::thread::yield_now(),
            }
        }
        Ok(sent)
    });
    t.join().map_err(|_| anyhow!("generator thread panicked"))?
}

fn ping_rtts_us(tb: &Testbed, ns: &str, dst: &str, count: u32) -> Result<Vec<f64>> {
    check_interrupted()?;
    let out = tb.exec(
        ns,
        "ping",
        &["-n", "-i", "0.01", "-c", &count.to_string(), "-W", "1", dst],
    )?;
    let mut v: Vec<f64> = out
        .lines()
        .filter_map(|l| l.split("time=").nth(1))
        .filter_map(|t| t.split_whitespace().next()?.parse::<f64>().ok())
        .map(|ms| ms * 1000.0)
        .collect();
    // Skip the first few (ARP, cold caches).
    if v.len() > 10 {
        v.drain(..5);
    }
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        bail!("no ping replies from {dst}");
    }
    Ok(v)
}

/// The `p`-th percentile (0–100) of a sorted sample (`netsched_util::stats`, nearest rank).
fn pct(v: &[f64], p: f64) -> f64 {
    netsched_util::stats::percentile(v, p / 100.0).unwrap_or(f64::NAN)
}

struct Chain {
    tb: Testbed,
    src: String,
    fwd: String,
    dst: String,
    s0: String,
    d0: String,
    fa: String,
    fb: String,
}

fn chain(label: &str, routed: bool) -> Result<Chain> {
    let mut tb = Testbed::new(label)?;
    let src = tb.add_ns("src")?;
    let fwd = tb.add_ns("fwd")?;
    let dst = tb.add_ns("dst")?;
    let (s0, fa, fb, d0) = (
        tb.ifname("s0"),
        tb.ifname("fa"),
        tb.ifname("fb"),
        tb.ifname("d0"),
    );
    for ns in [&src, &fwd, &dst] {
        tb.sysctl(ns, "net.ipv6.conf.all.disable_ipv6=1")?;
        tb.sysctl(ns, "net.ipv6.conf.default.disable_ipv6=1")?;
    }
    if routed {
        tb.veth((&src, &s0, "10.204.1.1/24"), (&fwd, &fa, "10.204.1.254/24"))?;
        tb.veth((&fwd, &fb, "10.204.2.254/24"), (&dst, &d0, "10.204.2.1/24"))?;
        tb.sysctl(&fwd, "net.ipv4.ip_forward=1")?;
        tb.exec(
            &src,
            "ip",
            &["route", "add", "default", "via", "10.204.1.254"],
        )?;
        tb.exec(
            &dst,
            "ip",
            &["route", "add", "default", "via", "10.204.2.254"],
        )?;
        tb.exec(
            &fwd,
            "ip",
            &[
                "neigh",
                "add",
                "10.204.2.99",
                "lladdr",
                "02:00:00:00:00:99",
                "dev",
                &fb,
                "nud",
                "permanent",
            ],
        )?;
    } else {
        tb.veth((&src, &s0, "10.205.0.1/24"), (&fwd, &fa, ""))?;
        tb.veth((&fwd, &fb, ""), (&dst, &d0, "10.205.0.2/24"))?;
    }
    Ok(Chain {
        tb,
        src,
        fwd,
        dst,
        s0,
        d0,
        fa,
        fb,
    })
}

fn measure_pps(
    c: &Chain,
    dst_mac: [u8; 6],
    dst_ip: [u8; 4],
    src_ip: [u8; 4],
    len: usize,
    secs: u32,
) -> Result<(f64, f64)> {
    let src_mac = mac_of(&c.tb, &c.src, &c.s0)?;
    let frame = udp_frame(len, dst_mac, src_mac, src_ip, dst_ip);
    let before = rx_packets(&c.tb, &c.dst, &c.d0)?;
    let t0 = Instant::now();
    let sent = generate(&c.src, &c.s0, frame, secs, Arc::new(AtomicBool::new(false)))?;
    // Let queued frames drain before reading the counter.
    std::thread::sleep(Duration::from_millis(200));
    let el = t0.elapsed().as_secs_f64() - 0.2;
    let after = rx_packets(&c.tb, &c.dst, &c.d0)?;
    check_interrupted()?;
    Ok(((after - before) as f64 / el, sent as f64 / el))
}

/// Run the whole benchmark (root). SIGINT/SIGTERM stop the traffic and return an error; the
/// namespaces are removed either way.
pub fn bench(
    secs: u32,
    pings: u32,
    ports: &[PortBackend],
    tx_ring_frames: usize,
) -> Result<BenchResult> {
    let _signals = SignalGuard::install()?;
    // Kernel forwarding.
    let kernel = {
        let c = chain("bk", true)?;
        let _ =
            c.tb.exec(&c.src, "ping", &["-n", "-c", "2", "-W", "1", "10.204.2.1"]);
        let fwd_mac = mac_of(&c.tb, &c.fwd, &c.fa)?;
        let (p64, o64) = measure_pps(&c, fwd_mac, [10, 204, 2, 99], [10, 204, 1, 1], 60, secs)?;
        let (p1500, o1500) =
            measure_pps(&c, fwd_mac, [10, 204, 2, 99], [10, 204, 1, 1], 1514, secs)?;
        let rtt = ping_rtts_us(&c.tb, &c.src, "10.204.2.1", pings)?;
        PathResult {
            path: "kernel".into(),
            pps_64: p64,
            pps_1500: p1500,
            offered_pps_64: o64,
            offered_pps_1500: o1500,
            rtt_p50_us: pct(&rtt, 50.0),
            rtt_p90_us: pct(&rtt, 90.0),
        }
    };
    let mut engines = Vec::new();
    for &port in ports {
        let engine = engine_path(port, tx_ring_frames, secs, pings)?;
        let added = engine.path.rtt_p50_us - kernel.rtt_p50_us;
        let added_busy = engine.busy_poll_rtt_p50_us - kernel.rtt_p50_us;
        engines.push(EngineRun {
            engine,
            added_rtt_p50_us: added,
            added_one_way_p50_us: added / 2.0,
            busy_poll_added_one_way_p50_us: added_busy / 2.0,
        });
    }
    Ok(BenchResult {
        kernel,
        engines,
        load_average: std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_string(),
    })
}

/// The engine's figures on port backend `backend` (a chain of its own).
fn engine_path(
    backend: PortBackend,
    tx_ring_frames: usize,
    secs: u32,
    pings: u32,
) -> Result<EnginePath> {
    let c = chain("be", false)?;
    let port = PortOptions {
        backend,
        ring: RingConfig {
            tx_frames: tx_ring_frames,
            ..RingConfig::default()
        },
    };
    let cfg = |busy_poll: bool| -> Result<EngineConfig> {
        let dir = || -> Result<DirConfig> {
            Ok(DirConfig {
                rate_bps: None,
                delay: 0,
                qdisc: parse_qdisc("fifo:1000")?,
            })
        };
        Ok(EngineConfig {
            dev_a: c.fa.clone(),
            dev_b: c.fb.clone(),
            ab: dir()?,
            ba: dir()?,
            pool: 8192,
            delay_line: 4096,
            stats_interval: None,
            busy_poll,
            spin: DEFAULT_SPIN,
            port,
        })
    };
    // A fresh engine per phase, so its thread CPU time belongs to that phase.
    let phase = |len: usize| -> Result<(f64, f64, f64, f64)> {
        let h = spawn_in_netns_pinned(&c.fwd, cfg(false)?)?;
        let (pps, offered) =
            measure_pps(&c, SINK_MAC, [10, 205, 0, 99], [10, 205, 0, 1], len, secs)?;
        let st = h.stop()?;
        let per_cpu = if st.cpu_ns > 0 {
            st.ab.tx_frames as f64 / (st.cpu_ns as f64 / 1e9)
        } else {
            0.0
        };
        if st.port != backend {
            bail!("the engine ran on {} instead of {backend}", st.port);
        }
        Ok((pps, offered, per_cpu, st.wakeups_per_frame))
    };
    let (p64, o64, c64, w64) = phase(60)?;
    let (p1500, o1500, c1500, w1500) = phase(1514)?;
    let rtt_of = |busy: bool| -> Result<Vec<f64>> {
        let h = spawn_in_netns_pinned(&c.fwd, cfg(busy)?)?;
        let r = ping_rtts_us(&c.tb, &c.src, "10.205.0.2", pings);
        h.stop()?;
        r
    };
    let rtt = rtt_of(false)?;
    let rtt_busy = rtt_of(true)?;
    Ok(EnginePath {
        path: PathResult {
            path: format!("engine/{backend}"),
            pps_64: p64,
            pps_1500: p1500,
            offered_pps_64: o64,
            offered_pps_1500: o1500,
            rtt_p50_us: pct(&rtt, 50.0),
            rtt_p90_us: pct(&rtt, 90.0),
        },
        wakeups_per_frame_64: w64,
        wakeups_per_frame_1500: w1500,
        pps_per_cpu_second_64: c64,
        pps_per_cpu_second_1500: c1500,
        busy_poll_rtt_p50_us: pct(&rtt_busy, 50.0),
        busy_poll_rtt_p90_us: pct(&rtt_busy, 90.0),
    })
}

/// The engine on its own thread, pinned to CPU 1 (the generator has CPU 0).
fn spawn_in_netns_pinned(ns: &str, cfg: EngineConfig) -> Result<crate::engine::EngineHandle> {
    // The engine thread inherits the affinity of the thread that creates it.
    let ns = ns.to_string();
    std::thread::spawn(move || {
        if allowed_cpus().contains(&1) {
            pin_to_cpu(1)?;
        }
        Ok(spawn_in_netns(&ns, cfg)?)
    })
    .join()
    .map_err(|_| anyhow!("engine start thread panicked"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_have_valid_ipv4_checksums() {
        let f = udp_frame(
            60,
            SINK_MAC,
            [2, 0, 0, 0, 0, 1],
            [10, 0, 0, 1],
            [10, 0, 0, 2],
        );
        assert_eq!(f.len(), 60);
        // A header with its checksum in place sums to 0xffff (RFC 1071).
        assert_eq!(ipv4_checksum(&f[14..34]), 0);
        let ip = netsched_core::wire::parse_ip(&f[14..]).unwrap();
        assert_eq!(ip.protocol, 17);
        assert_eq!(
            udp_frame(1514, SINK_MAC, SINK_MAC, [1; 4], [2; 4]).len(),
            1514
        );
    }

    #[test]
    fn the_json_report_names_every_number_with_its_unit() {
        let path = |name: &str| PathResult {
            path: name.into(),
            pps_64: 1.5,
            pps_1500: 2.0,
            offered_pps_64: 3.0,
            offered_pps_1500: 4.0,
            rtt_p50_us: 12.3456,
            rtt_p90_us: 20.0,
        };
        let r = BenchResult {
            kernel: path("kernel"),
            engines: vec![EngineRun {
                engine: EnginePath {
                    path: path("engine/tpacket"),
                    wakeups_per_frame_64: 0.5,
                    wakeups_per_frame_1500: 0.25,
                    pps_per_cpu_second_64: 1e6,
                    pps_per_cpu_second_1500: 1e5,
                    busy_poll_rtt_p50_us: 8.0,
                    busy_poll_rtt_p90_us: 9.0,
                },
                added_rtt_p50_us: 4.0,
                added_one_way_p50_us: 2.0,
                busy_poll_added_one_way_p50_us: 1.0,
            }],
            load_average: "0.50".into(),
        };
        let v = serde_json::to_value(&r).unwrap();
        let bad = netsched_util::json_units::violations(&v);
        assert!(bad.is_empty(), "{bad:?}");
        assert_eq!(v["kernel"]["rtt_p50_ns"], 12346);
        assert_eq!(v["engines"][0]["added_one_way_p50_ns"], 2000);
    }
}

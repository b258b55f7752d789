//! `netsched nfq bench`: the daemon's packet rate and added latency, in one run, between two
//! scratch namespaces (a: client, b: server; veth 10.78.0.1 ↔ 10.78.0.2).
//!
//! - **Latency** at light load: one UDP request at a time (pinged every 200 µs) to an echo
//!   server in b; p50/p99 round trip without any NFQUEUE rule, then with the daemon. Each round
//!   trip crosses the daemon twice (request on INPUT, echo on OUTPUT), so "added per packet"
//!   is half the added round trip.
//! - **Throughput**: `flows` UDP sockets in a closed loop (each datagram is a request; the echo
//!   completes it), so every packet takes the full scheduled path: parse, classify (CIDR
//!   table), Percentile enqueue + dequeue on the way in, completion feedback on the way out.
//!   Rate = packets the daemon verdicted / time; packets the kernel let bypass the daemon
//!   (fail-open: queue or socket buffer full) are counted separately and not in the rate.
//!
//! The daemon runs pinned to one CPU (`--cpu`, default 1); clients and echo server on the
//! other (`--load-cpu`, default 0).
//!
//! Ctrl-C / SIGTERM stop the bench within ≈ 50 ms of the current step: the daemon removes its
//! rules, the namespaces and the private folder (control socket) are removed, and the command
//! exits with an error.

use crate::config::{parse_cidr, ClassSpec, Config, Deadline, DisciplineKind};
use anyhow::{anyhow, bail, Context, Result};
use netsched_sys::mmsg::send_repeated;
use netsched_testbed::{
    check_interrupted, enter_netns, interrupted, pin_to_cpu, sleep_unless_interrupted, SignalGuard,
    TempDir, Testbed,
};
use netsched_util::json_units::{s_as_ns, us_as_ns};
use serde::Serialize;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// How long the closed-loop load for the throughput figure runs (e.g. 5s; at most 10m).
    #[arg(long, default_value = "5s")]
    pub duration: String,
    /// Deprecated spelling of --duration in seconds (`--seconds 5` = `--duration 5s`).
    #[arg(long, hide = true, conflicts_with = "duration")]
    pub seconds: Option<f64>,
    /// Concurrent UDP flows for the throughput figure (enough to keep the daemon's batches full).
    #[arg(long, default_value_t = 1000)]
    pub flows: usize,
    /// Round trips sampled for each latency figure.
    #[arg(long, default_value_t = 5000)]
    pub samples: usize,
    /// CPU the daemon is pinned to.
    #[arg(long, default_value_t = 1)]
    pub cpu: usize,
    /// CPU the load generator and echo server are pinned to.
    #[arg(long, default_value_t = 0)]
    pub load_cpu: usize,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Serialize)]
/// The bench's figures. Fields keep their measuring unit (µs, seconds); `--json` prints them
/// in the JSON rule's units (docs/cli.md): whole nanoseconds, `*_per_s`.
pub struct BenchResult {
    #[serde(rename = "rtt_p50_without_ns", serialize_with = "us_as_ns")]
    pub rtt_p50_us_without: f64,
    #[serde(rename = "rtt_p99_without_ns", serialize_with = "us_as_ns")]
    pub rtt_p99_us_without: f64,
    #[serde(rename = "rtt_p50_with_ns", serialize_with = "us_as_ns")]
    pub rtt_p50_us_with: f64,
    #[serde(rename = "rtt_p99_with_ns", serialize_with = "us_as_ns")]
    pub rtt_p99_us_with: f64,
    #[serde(rename = "added_rtt_p50_ns", serialize_with = "us_as_ns")]
    pub added_rtt_p50_us: f64,
    #[serde(rename = "added_per_packet_p50_ns", serialize_with = "us_as_ns")]
    pub added_per_packet_p50_us: f64,
    #[serde(rename = "added_rtt_p99_ns", serialize_with = "us_as_ns")]
    pub added_rtt_p99_us: f64,
    pub packets_per_s: f64,
    /// Closed-loop round trips per second with no NFQUEUE rule (the load's own limit).
    #[serde(rename = "requests_without_per_s")]
    pub requests_per_s_without: f64,
    /// CPU time (user + system) the daemon's thread spent per packet, and the rate one core
    /// would sustain at that cost: the capacity figure, robust to a busy machine.
    #[serde(rename = "daemon_cpu_per_packet_ns", serialize_with = "us_as_ns")]
    pub daemon_cpu_us_per_packet: f64,
    #[serde(rename = "one_core_capacity_packets_per_s")]
    pub one_core_capacity_pps: f64,
    /// Open-loop flood (64 flows, sendmmsg, no answers): packets/s the daemon verdicted while
    /// saturated, and what the kernel let bypass it (fail-open, counted, not in the rate).
    pub flood_packets_per_s: f64,
    pub flood_sent_per_s: f64,
    pub flood_bypassed: u64,
    pub flood_enobufs: u64,
    /// Load average when the bench ran (a busy machine inflates the latency figures).
    #[serde(rename = "load_average")]
    pub loadavg_1min: f64,
    pub requests_per_s: f64,
    pub daemon_packets: u64,
    pub bypassed_fail_open: u64,
    pub enobufs: u64,
    #[serde(rename = "duration_ns", serialize_with = "s_as_ns")]
    pub seconds: f64,
    pub flows: usize,
}

const PORT: u16 = 9000;
/// Port of the open-loop flood (a service port too; a sink drains it, nothing answers).
const FLOOD_PORT: u16 = 9001;

/// The `q`-quantile of a sample (`netsched_util::stats`, nearest rank); sorts `v`.
fn quantile(v: &mut [f64], q: f64) -> f64 {
    netsched_util::stats::sort(v);
    netsched_util::stats::percentile(v, q).unwrap_or(f64::NAN)
}

fn echo_server(ns: String, cpu: usize, stop: Arc<AtomicBool>) -> Result<()> {
    enter_netns(&ns)?;
    let _ = pin_to_cpu(cpu);
    let s = UdpSocket::bind(("10.78.0.2", PORT)).context("echo bind")?;
    s.set_read_timeout(Some(Duration::from_millis(50)))?;
    let mut buf = [0u8; 2048];
    while !stop.load(Ordering::Relaxed) && !interrupted() {
        if let Ok((n, from)) = s.recv_from(&mut buf) {
            let _ = s.send_to(&buf[..n], from);
        }
    }
    Ok(())
}

/// `samples` round trips, one at a time, 200 µs apart. Returns RTTs in µs.
fn latency(ns: &str, cpu: usize, samples: usize) -> Result<Vec<f64>> {
    let ns = ns.to_string();
    std::thread::spawn(move || -> Result<Vec<f64>> {
        enter_netns(&ns)?;
        let _ = pin_to_cpu(cpu);
        let s = UdpSocket::bind("10.78.0.1:0")?;
        s.connect(("10.78.0.2", PORT))?;
        s.set_read_timeout(Some(Duration::from_millis(500)))?;
        let mut out = Vec::with_capacity(samples);
        let mut buf = [0u8; 64];
        let mut lost = 0;
        for i in 0..samples + 200 {
            check_interrupted()?;
            let t0 = Instant::now();
            s.send(&[7u8; 32])?;
            match s.recv(&mut buf) {
                Ok(_) => {
                    if i >= 200 {
                        // the first 200 warm caches and the flow table
                        out.push(t0.elapsed().as_nanos() as f64 / 1e3);
                    }
                }
                Err(_) => lost += 1,
            }
            let until = t0 + Duration::from_micros(200);
            while Instant::now() < until {
                std::hint::spin_loop();
            }
        }
        if lost > samples / 100 {
            bail!("{lost} of {samples} echo requests lost");
        }
        Ok(out)
    })
    .join()
    .map_err(|_| anyhow!("latency thread panicked"))?
}

/// Closed loop over `flows` sockets for `secs`; returns completed round trips.
fn throughput(ns: &str, cpu: usize, flows: usize, secs: f64) -> Result<u64> {
    let ns = ns.to_string();
    std::thread::spawn(move || -> Result<u64> {
        enter_netns(&ns)?;
        let _ = pin_to_cpu(cpu);
        let socks: Vec<UdpSocket> = (0..flows)
            .map(|_| -> Result<UdpSocket> {
                let s = UdpSocket::bind("10.78.0.1:0")?;
                s.connect(("10.78.0.2", PORT))?;
                s.set_nonblocking(true)?;
                Ok(s)
            })
            .collect::<Result<_>>()?;
        let mut sent_at = vec![Instant::now(); flows];
        for (i, s) in socks.iter().enumerate() {
            s.send(&[1u8; 32])?;
            sent_at[i] = Instant::now();
        }
        let mut fds: Vec<libc::pollfd> = socks
            .iter()
            .map(|s| libc::pollfd {
                fd: s.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let end = Instant::now() + Duration::from_secs_f64(secs);
        let mut done = 0u64;
        let mut buf = [0u8; 64];
        while Instant::now() < end && !interrupted() {
            let _ = netsched_sys::poll(&mut fds, Duration::from_millis(10));
            for (i, f) in fds.iter_mut().enumerate() {
                if f.revents != 0 {
                    f.revents = 0;
                    while socks[i].recv(&mut buf).is_ok() {
                        done += 1;
                        let _ = socks[i].send(&[1u8; 32]);
                        sent_at[i] = Instant::now();
                    }
                } else if sent_at[i].elapsed() > Duration::from_millis(200) {
                    // lost (fail-open does not lose; a full socket buffer might): resend
                    let _ = socks[i].send(&[1u8; 32]);
                    sent_at[i] = Instant::now();
                }
            }
        }
        check_interrupted()?;
        Ok(done)
    })
    .join()
    .map_err(|_| anyhow!("throughput thread panicked"))?
}

/// Drain FLOOD_PORT in namespace `ns` until `stop`.
fn sink(ns: String, cpu: usize, stop: Arc<AtomicBool>) -> Result<u64> {
    enter_netns(&ns)?;
    let _ = pin_to_cpu(cpu);
    let s = UdpSocket::bind(("10.78.0.2", FLOOD_PORT))?;
    s.set_read_timeout(Some(Duration::from_millis(50)))?;
    let mut buf = [0u8; 2048];
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) && !interrupted() {
        if s.recv(&mut buf).is_ok() {
            n += 1;
        }
    }
    Ok(n)
}

/// Send as fast as possible from 64 sockets for `secs` (sendmmsg, 32 per call). Returns sent.
fn flood(ns: &str, cpu: usize, secs: f64) -> Result<u64> {
    let ns = ns.to_string();
    std::thread::spawn(move || -> Result<u64> {
        enter_netns(&ns)?;
        let _ = pin_to_cpu(cpu);
        let socks: Vec<UdpSocket> = (0..64)
            .map(|_| -> Result<UdpSocket> {
                let s = UdpSocket::bind("10.78.0.1:0")?;
                s.connect(("10.78.0.2", FLOOD_PORT))?;
                Ok(s)
            })
            .collect::<Result<_>>()?;
        let payload = [3u8; 32];
        let end = Instant::now() + Duration::from_secs_f64(secs);
        let mut sent = 0u64;
        let mut i = 0usize;
        while Instant::now() < end && !interrupted() {
            if let Ok(n) = send_repeated(&socks[i % 64], &payload, 32) {
                sent += n as u64;
            }
            i += 1;
        }
        check_interrupted()?;
        Ok(sent)
    })
    .join()
    .map_err(|_| anyhow!("flood thread panicked"))?
}

fn daemon_config(socket: std::path::PathBuf) -> Result<Config> {
    let mut c = Config {
        discipline: DisciplineKind::Percentile,
        budget: None,
        deadline: Deadline::Fixed(crate::MS),
        control_socket: socket,
        ..Config::default()
    };
    c.service.protocol = crate::packet::PROTO_UDP;
    c.service.ports = vec![PORT, FLOOD_PORT];
    for (name, p) in [("gold", 90), ("rest", 50)] {
        c.classes.push(ClassSpec {
            name: name.into(),
            percentile: p,
        });
    }
    c.table.push((parse_cidr("10.78.0.0/24")?, 0));
    c.default_class = 1;
    c.validate()?;
    Ok(c)
}

/// Run the bench. SIGINT/SIGTERM stop it (see the module notes); everything it created is
/// removed before it returns, whatever the outcome.
pub fn measure(a: &BenchArgs) -> Result<BenchResult> {
    let load_secs = a.secs()?;
    let _signals = SignalGuard::install()?;
    let mut tb = Testbed::new("nfqb")?;
    let na = tb.add_ns("a")?;
    let nb = tb.add_ns("b")?;
    let (ia, ib) = (tb.ifname("a"), tb.ifname("b"));
    tb.veth((&na, &ia, "10.78.0.1/24"), (&nb, &ib, "10.78.0.2/24"))?;
    let stop_echo = Arc::new(AtomicBool::new(false));
    let echo = {
        let (nb, stop, cpu) = (nb.clone(), Arc::clone(&stop_echo), a.load_cpu);
        std::thread::spawn(move || echo_server(nb, cpu, stop))
    };
    let result = (|| -> Result<BenchResult> {
        sleep_unless_interrupted(Duration::from_millis(200))?;
        let mut without = latency(&na, a.load_cpu, a.samples)?;
        let t0 = Instant::now();
        let base_done = throughput(&na, a.load_cpu, a.flows, load_secs.min(3.0))?;
        let base_rps = base_done as f64 / t0.elapsed().as_secs_f64();
        let dir = TempDir::new(tb.tag())?;
        let socket = dir.path().join("ctl.sock");
        let cfg = daemon_config(socket.clone())?;
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let daemon = {
            let (nb, stop, cpu) = (nb.clone(), Arc::clone(&stop), a.cpu);
            std::thread::spawn(move || -> Result<crate::daemon::Summary> {
                enter_netns(&nb)?;
                pin_to_cpu(cpu)?;
                let tid = netsched_sys::thread::gettid();
                Ok(crate::daemon::run_daemon(cfg, &stop, |_| {
                    let _ = tx.send(tid);
                })?)
            })
        };
        let tid = match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(t) => t,
            Err(_) => {
                stop.store(true, Ordering::Relaxed);
                return Err(match daemon.join() {
                    Ok(Err(e)) => e,
                    _ => anyhow!("daemon did not start"),
                });
            }
        };
        #[allow(clippy::type_complexity)]
        let run = || -> Result<(Vec<f64>, u64, u64, f64, f64, (f64, f64, u64, u64))> {
            let with = latency(&na, a.load_cpu, a.samples)?;
            let st0 = status(&socket)?;
            let cpu0 = thread_cpu_s(tid)?;
            let t0 = Instant::now();
            let done = throughput(&na, a.load_cpu, a.flows, load_secs)?;
            let secs = t0.elapsed().as_secs_f64();
            let cpu1 = thread_cpu_s(tid)?;
            let st1 = status(&socket)?;
            let pk = st1.counters.packets - st0.counters.packets;
            let bypass = st1.kernel.skipped_fail_open - st0.kernel.skipped_fail_open;
            let _ = done;
            // Open-loop flood: the daemon saturated.
            let stop_sink = Arc::new(AtomicBool::new(false));
            let sink_h = {
                let (nb, stop, cpu) = (nb.clone(), Arc::clone(&stop_sink), a.load_cpu);
                std::thread::spawn(move || sink(nb, cpu, stop))
            };
            sleep_unless_interrupted(Duration::from_millis(100))?;
            let f0 = status(&socket)?;
            let t0 = Instant::now();
            let fsent = flood(&na, a.load_cpu, load_secs.min(3.0))?;
            // let the daemon drain what is queued before reading its counters
            sleep_unless_interrupted(Duration::from_millis(300))?;
            let fsecs = t0.elapsed().as_secs_f64() - 0.3;
            let f1 = status(&socket)?;
            stop_sink.store(true, Ordering::Relaxed);
            let _ = sink_h.join();
            let fpk = f1.counters.packets - f0.counters.packets;
            let fby = f1.kernel.skipped_fail_open - f0.kernel.skipped_fail_open;
            let fen = f1.kernel.enobufs - f0.kernel.enobufs;
            let flood_r = (fpk as f64 / fsecs, fsent as f64 / fsecs, fby, fen);
            Ok((with, pk, bypass, secs, cpu1 - cpu0, flood_r))
        };
        let r = run();
        stop.store(true, Ordering::Relaxed);
        let summary = daemon.join().map_err(|_| anyhow!("daemon panicked"))??;
        drop(dir);
        let (mut with, pk, bypass, secs, cpu_s, flood_r) = r?;
        let cpu_per_pkt = cpu_s / pk.max(1) as f64;
        let (p50o, p99o) = (quantile(&mut without, 0.5), quantile(&mut without, 0.99));
        let (p50w, p99w) = (quantile(&mut with, 0.5), quantile(&mut with, 0.99));
        Ok(BenchResult {
            rtt_p50_us_without: p50o,
            rtt_p99_us_without: p99o,
            rtt_p50_us_with: p50w,
            rtt_p99_us_with: p99w,
            added_rtt_p50_us: p50w - p50o,
            added_per_packet_p50_us: (p50w - p50o) / 2.0,
            added_rtt_p99_us: p99w - p99o,
            packets_per_s: pk as f64 / secs,
            requests_per_s_without: base_rps,
            flood_packets_per_s: flood_r.0,
            flood_sent_per_s: flood_r.1,
            flood_bypassed: flood_r.2,
            flood_enobufs: flood_r.3,
            daemon_cpu_us_per_packet: cpu_per_pkt * 1e6,
            one_core_capacity_pps: if cpu_per_pkt > 0.0 {
                1.0 / cpu_per_pkt
            } else {
                f64::NAN
            },
            loadavg_1min: std::fs::read_to_string("/proc/loadavg")
                .ok()
                .and_then(|l| l.split_whitespace().next().and_then(|x| x.parse().ok()))
                .unwrap_or(f64::NAN),
            requests_per_s: pk as f64 / 2.0 / secs,
            daemon_packets: pk,
            bypassed_fail_open: bypass,
            enobufs: summary.status.kernel.enobufs,
            seconds: secs,
            flows: a.flows,
        })
    })();
    stop_echo.store(true, Ordering::Relaxed);
    let _ = echo.join();
    result
}

/// utime + stime of one of our threads, seconds (/proc/self/task/TID/stat fields 14, 15).
fn thread_cpu_s(tid: i32) -> Result<f64> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))?;
    // The command name (field 2) may contain spaces; count fields after its ')'.
    let rest = text
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| anyhow!("bad /proc stat"))?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
    let hz = netsched_sys::clock::clock_ticks_per_second() as f64;
    Ok(ticks / hz)
}

fn status(socket: &std::path::Path) -> Result<crate::engine::Status> {
    Ok(crate::control::status(socket)?)
}

impl BenchArgs {
    /// The load's length in seconds, from `--duration` (or the deprecated `--seconds`).
    pub fn secs(&self) -> Result<f64> {
        let ns = match self.seconds {
            Some(s) if s.is_finite() && s > 0.0 => (s * 1e9) as u64,
            Some(s) => anyhow::bail!("--seconds {s}: must be a positive number of seconds"),
            None => {
                netsched_core::units::parse_duration_in(&self.duration, 1_000_000, 600_000_000_000)
                    .context("--duration")?
            }
        };
        Ok(ns as f64 / 1e9)
    }
}

pub fn run(a: BenchArgs) -> Result<()> {
    let r = measure(&a)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    println!(
        "netsched nfq bench (daemon on CPU {}, load on CPU {})",
        a.cpu, a.load_cpu
    );
    println!(
        "latency, one UDP request at a time (round trip = 2 daemon passes):\n  without NFQUEUE  p50 {:>8.1} us   p99 {:>8.1} us\n  with the daemon  p50 {:>8.1} us   p99 {:>8.1} us\n  added            p50 {:>8.1} us   p99 {:>8.1} us   (per packet p50 {:.1} us)",
        r.rtt_p50_us_without, r.rtt_p99_us_without, r.rtt_p50_us_with, r.rtt_p99_us_with,
        r.added_rtt_p50_us, r.added_rtt_p99_us, r.added_per_packet_p50_us
    );
    println!(
        "throughput, {} UDP flows closed loop, every packet scheduled (Percentile):\n  {:.0} packets/s through the daemon ({:.0} requests/s; {:.0} requests/s with no rule), {} packets in {:.1} s\n  daemon CPU {:.2} us/packet -> one core sustains {:.0} packets/s\n  bypassed by fail-open: {}   ENOBUFS: {}   load average {:.1}",
        r.flows, r.packets_per_s, r.requests_per_s, r.requests_per_s_without, r.daemon_packets, r.seconds,
        r.daemon_cpu_us_per_packet, r.one_core_capacity_pps, r.bypassed_fail_open, r.enobufs, r.loadavg_1min
    );
    println!(
        "open-loop flood, 64 UDP flows, no answers (first packet of a flow scheduled, the rest pass):\n  sent {:.0} packets/s; the daemon verdicted {:.0} packets/s; bypassed by fail-open {}; ENOBUFS {}",
        r.flood_sent_per_s, r.flood_packets_per_s, r.flood_bypassed, r.flood_enobufs
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_report_names_every_number_with_its_unit() {
        let r = BenchResult {
            rtt_p50_us_without: 30.5,
            rtt_p99_us_without: 60.0,
            rtt_p50_us_with: 50.25,
            rtt_p99_us_with: 90.0,
            added_rtt_p50_us: 19.75,
            added_per_packet_p50_us: 9.875,
            added_rtt_p99_us: 30.0,
            packets_per_s: 1000.0,
            requests_per_s_without: 20000.0,
            daemon_cpu_us_per_packet: 2.5,
            one_core_capacity_pps: 400000.0,
            flood_packets_per_s: 1e5,
            flood_sent_per_s: 2e5,
            flood_bypassed: 3,
            flood_enobufs: 4,
            loadavg_1min: 0.5,
            requests_per_s: 500.0,
            daemon_packets: 1000,
            bypassed_fail_open: 0,
            enobufs: 0,
            seconds: 2.0,
            flows: 1,
        };
        let v = serde_json::to_value(&r).unwrap();
        let bad = netsched_util::json_units::violations(&v);
        assert!(bad.is_empty(), "{bad:?}");
        assert_eq!(v["added_per_packet_p50_ns"], 9875);
        assert_eq!(v["duration_ns"], 2_000_000_000u64);
    }
}

//! `cargo run --release -p netsched-vswitch --example bench_vswitch` (root): the switch vs the
//! kernel's bridge between the same namespaces — aggregate packets/s with 18 guest ports at
//! 64 B and 1500 B, the discipline's cost per packet, and the latency the switch adds at light
//! load. A benchmark, not a test: the numbers depend on the machine and its load (printed).

use netsched_core::qdisc::{AnyQdisc, Packet, Qdisc};
use netsched_link::port::Port;
use netsched_testbed::Testbed;
use netsched_vswitch::{spawn_in_netns, SwitchConfig};
use std::process::Command;
use std::time::{Duration, Instant};

const GUESTS: usize = 18;
const EXT_IP: &str = "10.79.0.254";

struct Bed {
    tb: Testbed,
    sw: String,
    ext: String,
    ext_if: String,
    uplink: String,
    guests: Vec<(String, String, String)>,
}

fn build() -> anyhow::Result<Bed> {
    let mut tb = Testbed::new("vswbn")?;
    let sw = tb.add_ns("sw")?;
    let ext = tb.add_ns("ext")?;
    let uplink = tb.ifname("up");
    let ext_if = tb.ifname("ue");
    tb.veth((&sw, &uplink, ""), (&ext, &ext_if, &format!("{EXT_IP}/24")))?;
    let mut guests = Vec::new();
    for i in 0..GUESTS {
        let g = tb.add_ns(&format!("g{i}"))?;
        let (p, e) = (tb.ifname(&format!("p{i}")), tb.ifname(&format!("e{i}")));
        tb.veth((&sw, &p, ""), (&g, &e, &format!("10.79.0.{}/24", i + 1)))?;
        guests.push((g, p, e));
    }
    Ok(Bed {
        tb,
        sw,
        ext,
        ext_if,
        uplink,
        guests,
    })
}

fn rx_packets(bed: &Bed) -> u64 {
    let out = bed
        .tb
        .exec(
            &bed.ext,
            "cat",
            &[&format!(
                "/sys/class/net/{}/statistics/rx_packets",
                bed.ext_if
            )],
        )
        .unwrap_or_default();
    out.trim().parse().unwrap_or(0)
}

/// One thread sending `len`-byte frames round-robin from every guest for `dur`.
fn blast(bed: &Bed, len: usize, dur: Duration) -> u64 {
    let guests: Vec<(String, String)> = bed
        .guests
        .iter()
        .map(|(g, _, e)| (g.clone(), e.clone()))
        .collect();
    std::thread::spawn(move || {
        let mut ports = Vec::new();
        for (ns, dev) in &guests {
            netsched_testbed::enter_netns(ns).unwrap();
            ports.push(Port::open(dev).unwrap());
        }
        let mut frame = vec![0u8; len];
        frame[..6].copy_from_slice(&[2, 0, 0, 0, 1, 0]);
        frame[12..14].copy_from_slice(&[0x88, 0xb5]);
        let end = Instant::now() + dur;
        let mut sent = 0u64;
        while Instant::now() < end {
            for (i, p) in ports.iter().enumerate() {
                frame[6..12].copy_from_slice(&[2, 0, 0, 0, 2, i as u8]);
                for _ in 0..8 {
                    // SAFETY: a valid buffer on an open socket.
                    let r = unsafe { libc::send(p.raw_fd(), frame.as_ptr() as *const _, len, 0) };
                    if r == len as isize {
                        sent += 1;
                    }
                }
            }
        }
        sent
    })
    .join()
    .unwrap()
}

fn rtts(ns: &str, n: u32) -> Vec<f64> {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            "ping",
            "-n",
            "-c",
            &n.to_string(),
            "-i",
            "0.01",
            EXT_IP,
        ])
        .output()
        .unwrap();
    let mut v: Vec<f64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split("time=").nth(1))
        .filter_map(|t| t.split_whitespace().next()?.parse().ok())
        .collect();
    v.sort_by(f64::total_cmp);
    v
}

fn q(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1]
}

#[derive(Clone, Copy)]
struct F(u32);
impl Packet for F {
    fn len(&self) -> u32 {
        self.0
    }
}

fn sched_cost(bed: &Bed) {
    for d in [
        "strict_priority",
        "delay_constrained",
        "delay_wall_clock",
        "drr",
        "wf2q",
        "edf",
    ] {
        let cfg = config(bed, d);
        let mut q: AnyQdisc<F> = cfg.qdisc().build().unwrap();
        let n = 2_000_000u64;
        let t = Instant::now();
        let mut now = 0u64;
        for i in 0..n {
            now += 100;
            let _ = q.enqueue((i % GUESTS as u64) as usize, F(64 + (i % 1400) as u32), now);
            if i % 2 == 1 {
                std::hint::black_box(q.dequeue(now));
                std::hint::black_box(q.dequeue(now));
            }
        }
        let ns = t.elapsed().as_nanos() as f64 / n as f64;
        println!("sched_cost discipline={d} ns_per_packet(enqueue+dequeue)={ns:.0}");
    }
}

fn config(bed: &Bed, d: &str) -> SwitchConfig {
    config_polling(bed, d, None)
}

/// `busy_poll`: the adaptive polling window (`None` = the default).
fn config_polling(bed: &Bed, d: &str, busy_poll: Option<&str>) -> SwitchConfig {
    let mut t = format!(
        "uplink = \"{}\"\ndiscipline = \"{d}\"\nbatch = 8\n",
        bed.uplink
    );
    if let Some(b) = busy_poll {
        t += &format!("busy_poll = \"{b}\"\n");
    }
    for (i, (_, p, _)) in bed.guests.iter().enumerate() {
        t += &format!(
            "[[port]]\ndev = \"{p}\"\ntier = {}\nbound = \"{}ms\"\n",
            i / 6 + 1,
            30 * (i / 6 + 1)
        );
    }
    SwitchConfig::parse(&t, "bench").unwrap()
}

fn main() -> anyhow::Result<()> {
    if !netsched_testbed::is_root() {
        eprintln!("bench_vswitch needs root");
        return Ok(());
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "machine: {} cpus, loadavg {}",
        std::thread::available_parallelism()?.get(),
        load.trim()
    );
    let bed = build()?;
    sched_cost(&bed);
    let dur = Duration::from_secs(3);
    // The switch (delay_constrained, no budget).
    for len in [64usize, 1500] {
        let sw = spawn_in_netns(&bed.sw, config(&bed, "delay_constrained"))?;
        let before = rx_packets(&bed);
        let t = Instant::now();
        let sent = blast(&bed, len, dur);
        let secs = t.elapsed().as_secs_f64();
        std::thread::sleep(Duration::from_millis(200));
        let st = sw.stop()?;
        let got = rx_packets(&bed) - before;
        let fwd: u64 = st.ports.iter().map(|p| p.forwarded).sum();
        println!(
            "vswitch len={len} offered_pps={:.0} forwarded_pps={:.0} ext_rx_pps={:.0} switch_cpu_s={:.2} pkt_per_cpu_s={:.0} kernel_drops={} queue_drops={}",
            sent as f64 / secs,
            fwd as f64 / secs,
            got as f64 / secs,
            st.cpu_s,
            fwd as f64 / st.cpu_s.max(1e-9),
            st.ports.iter().map(|p| p.kernel_drops).sum::<u64>(),
            st.ports.iter().map(|p| p.dropped_queue_full).sum::<u64>(),
        );
    }
    let sw = spawn_in_netns(&bed.sw, config(&bed, "delay_constrained"))?;
    let _ = rtts(&bed.guests[0].0, 5);
    let v_sw = rtts(&bed.guests[0].0, 300);
    let polled = sw.stop()?;
    // The same with the adaptive polling window off: the switch sleeps in poll when idle.
    let sw = spawn_in_netns(
        &bed.sw,
        config_polling(&bed, "delay_constrained", Some("0")),
    )?;
    let _ = rtts(&bed.guests[0].0, 5);
    let v_sleep = rtts(&bed.guests[0].0, 300);
    let slept = sw.stop()?;
    // The kernel bridge between the same namespaces.
    let br = bed.tb.ifname("br");
    bed.tb
        .exec(&bed.sw, "ip", &["link", "add", &br, "type", "bridge"])?;
    bed.tb.exec(&bed.sw, "ip", &["link", "set", &br, "up"])?;
    for dev in bed
        .guests
        .iter()
        .map(|g| &g.1)
        .chain(std::iter::once(&bed.uplink))
    {
        bed.tb
            .exec(&bed.sw, "ip", &["link", "set", dev, "master", &br])?;
    }
    std::thread::sleep(Duration::from_millis(300));
    for len in [64usize, 1500] {
        let before = rx_packets(&bed);
        let t = Instant::now();
        let sent = blast(&bed, len, dur);
        let secs = t.elapsed().as_secs_f64();
        std::thread::sleep(Duration::from_millis(200));
        let got = rx_packets(&bed) - before;
        println!(
            "bridge len={len} offered_pps={:.0} ext_rx_pps={:.0}",
            sent as f64 / secs,
            got as f64 / secs
        );
    }
    let _ = rtts(&bed.guests[0].0, 5);
    let v_br = rtts(&bed.guests[0].0, 300);
    println!(
        "latency ping 100/s: vswitch p50={:.3} p99={:.3} ms; bridge p50={:.3} p99={:.3} ms; added p50={:.0} us p99={:.0} us",
        q(&v_sw, 0.5),
        q(&v_sw, 0.99),
        q(&v_br, 0.5),
        q(&v_br, 0.99),
        (q(&v_sw, 0.5) - q(&v_br, 0.5)) * 1000.0,
        (q(&v_sw, 0.99) - q(&v_br, 0.99)) * 1000.0
    );
    println!(
        "latency busy_poll=0: vswitch p50={:.3} p99={:.3} ms; added p50={:.0} us p99={:.0} us",
        q(&v_sleep, 0.5),
        q(&v_sleep, 0.99),
        (q(&v_sleep, 0.5) - q(&v_br, 0.5)) * 1000.0,
        (q(&v_sleep, 0.99) - q(&v_br, 0.99)) * 1000.0
    );
    println!(
        "switch thread CPU over the 300 pings (~3 s): busy_poll default {:.2} s, busy_poll=0 {:.2} s",
        polled.cpu_s, slept.cpu_s
    );
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("loadavg after: {}", load.trim());
    Ok(())
}

//! `cargo run --release -p netsched-vswitch --example bench_vswitch` (root): the switch vs the
//! kernel's bridge between the same namespaces — aggregate packets/s with 18 guest ports at
//! 64 B and 1500 B, the discipline's cost per packet, and the latency the switch adds at light
//! load. A benchmark, not a test: the numbers depend on the machine and its load (printed).
//!
//! The added latency is measured **interleaved**: R rounds, each running every variant once
//! (the kernel bridge between the same namespaces, and the switch in each mode) in an order
//! rotated from round to round, P pings per variant (`ping -i 0.01`; on the 2-vCPU test VM they
//! left every 16 ms, not 10, seen in a kernel trace: docs/vswitch.md, "Design notes"). The pinging guest runs on one
//! CPU (`taskset`), the switch on another (its packet thread pinned, or the whole process);
//! per round, "added" = the variant's p50 (p99) minus the bridge's p50 (p99) of the same
//! round, and the verdict is read on the medians over rounds.
//!
//! ```text
//! bench_vswitch                      throughput, discipline cost, latency (3 rounds, in-process)
//! bench_vswitch backends [--rounds R]   packets/s at 64 B, xdp vs tpacket vs packet port backend
//! bench_vswitch latency [--rounds R] [--probes P] [--busy-poll 0,200us]
//!                       [--switch NAME=PATH]...  [--ping-cpu C] [--switch-cpu C|none] [--same-cpu-too]
//!                       [--trace-latency] [--discipline NAME] [--backend NAME]
//! ```
//! `--trace-latency` runs each switch with its per-stage accounting on
//! (`netsched_vswitch::latency`) and prints each stage's p50 and p99, median over rounds.
//! `--switch NAME=PATH` runs that `netsched` binary (`netsched vswitch --netns …`) as a
//! variant, so two builds can be compared in one run; without it the switch runs in-process.
//! `--same-cpu-too` adds every switch variant once more, pinned to the ping's CPU.
//! A `--busy-poll` window longer than the gap between pings (e.g. `50ms`) keeps the switch
//! thread awake, which is the configuration for a core given to the switch.

use netsched_core::qdisc::{AnyQdisc, Packet, Qdisc};
use netsched_sys::port::Port;
use netsched_testbed::Testbed;
use netsched_vswitch::{spawn_in_netns, SwitchConfig};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
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
                    if p.send_frame(&frame[..len]).is_ok_and(|r| r == len) {
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

/// `n` ping RTTs (ms, sorted) from namespace `ns` to the external host at 100/s, the ping
/// pinned to `cpu` when given.
fn rtts(ns: &str, n: u32, cpu: Option<usize>) -> Vec<f64> {
    let mut cmd = match cpu {
        Some(c) => {
            let mut t = Command::new("taskset");
            t.args(["-c", &c.to_string(), "ip"]);
            t
        }
        None => Command::new("ip"),
    };
    let out = cmd
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
        "wf2q_plus",
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

/// The default configuration on port backend `backend` (`xdp`, `tpacket`, `packet`).
fn config_on(bed: &Bed, d: &str, backend: &str) -> SwitchConfig {
    let text = config_text(bed, d, None).replacen(
        "batch = 8\n",
        &format!("batch = 8\nport_backend = \"{backend}\"\n"),
        1,
    );
    SwitchConfig::parse(&text, "bench").unwrap()
}

/// `busy_poll`: the adaptive polling window (`None` = the default).
fn config_polling(bed: &Bed, d: &str, busy_poll: Option<&str>) -> SwitchConfig {
    SwitchConfig::parse(&config_text(bed, d, busy_poll), "bench").unwrap()
}

fn config_text(bed: &Bed, d: &str, busy_poll: Option<&str>) -> String {
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
    t
}

/// What the latency rounds compare.
#[derive(Clone, Debug)]
enum Variant {
    /// The kernel bridge between the same namespaces (the baseline).
    Bridge,
    /// The switch on a thread of this process, packet thread pinned to the switch CPU.
    InProcess { busy_poll: String },
    /// `PATH vswitch --netns …` as a process pinned to the switch CPU (`name` labels it).
    Binary {
        name: String,
        path: PathBuf,
        busy_poll: String,
    },
}

impl Variant {
    fn label(&self) -> String {
        match self {
            Variant::Bridge => "bridge".into(),
            Variant::InProcess { busy_poll } => format!("switch busy_poll={busy_poll}"),
            Variant::Binary {
                name, busy_poll, ..
            } => format!("{name} busy_poll={busy_poll}"),
        }
    }
}

fn label((v, cpu): &(Variant, Option<usize>)) -> String {
    match cpu {
        Some(c) if !matches!(v, Variant::Bridge) => format!("{} @cpu{c}", v.label()),
        _ => v.label(),
    }
}

struct LatencyOpts {
    rounds: usize,
    probes: u32,
    /// Each with the CPU its switch is pinned to.
    variants: Vec<(Variant, Option<usize>)>,
    ping_cpu: Option<usize>,
    /// Run the switches with `--trace-latency` and print where their time went.
    trace_latency: bool,
    /// The switches' discipline (P2's `delay_constrained` unless `--discipline`).
    discipline: String,
    /// The switches' port backend (`auto` unless `--backend`).
    backend: String,
}

impl LatencyOpts {
    fn parse(args: &[String]) -> anyhow::Result<Self> {
        let (mut rounds, mut probes) = (10usize, 300u32);
        let mut polls = vec!["0".to_string(), "200us".to_string()];
        let mut bins: Vec<(String, PathBuf)> = Vec::new();
        let mut same_cpu_too = false;
        let mut trace_latency = false;
        let mut discipline = "delay_constrained".to_string();
        let mut backend = "auto".to_string();
        let cpus = netsched_testbed::allowed_cpus();
        let (mut ping_cpu, mut switch_cpu) = (cpus.first().copied(), cpus.get(1).copied());
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut val = || {
                it.next()
                    .cloned()
                    .ok_or_else(|| anyhow::anyhow!("{a}: a value is needed"))
            };
            match a.as_str() {
                "--rounds" => rounds = val()?.parse()?,
                "--probes" => probes = val()?.parse()?,
                "--busy-poll" => polls = val()?.split(',').map(str::to_string).collect(),
                "--ping-cpu" => ping_cpu = Some(val()?.parse()?),
                "--switch-cpu" => {
                    let v = val()?;
                    // `none`: not pinned (the scheduler places it).
                    switch_cpu = if v == "none" { None } else { Some(v.parse()?) };
                }
                "--same-cpu-too" => same_cpu_too = true,
                "--trace-latency" => trace_latency = true,
                "--discipline" => discipline = val()?,
                "--backend" => backend = val()?,
                "--switch" => {
                    let v = val()?;
                    let (n, p) = v
                        .split_once('=')
                        .ok_or_else(|| anyhow::anyhow!("--switch {v}: want NAME=PATH"))?;
                    bins.push((n.to_string(), PathBuf::from(p)));
                }
                _ => anyhow::bail!("unknown argument {a:?}\n{USAGE}"),
            }
        }
        anyhow::ensure!(
            (1..=1000).contains(&rounds) && (10..=100_000).contains(&probes),
            "--rounds 1..=1000, --probes 10..=100000"
        );
        let mut switches = Vec::new();
        for bp in &polls {
            if bins.is_empty() {
                switches.push(Variant::InProcess {
                    busy_poll: bp.clone(),
                });
            }
            for (name, path) in &bins {
                switches.push(Variant::Binary {
                    name: name.clone(),
                    path: path.clone(),
                    busy_poll: bp.clone(),
                });
            }
        }
        let mut variants = vec![(Variant::Bridge, None)];
        variants.extend(switches.iter().map(|v| (v.clone(), switch_cpu)));
        if same_cpu_too {
            variants.extend(switches.into_iter().map(|v| (v, ping_cpu)));
        }
        Ok(Self {
            rounds,
            probes,
            variants,
            ping_cpu,
            trace_latency,
            discipline,
            backend,
        })
    }
}

/// Attach every guest port and the uplink to bridge `br` (created if needed) and bring it up,
/// or (`on = false`) detach them and take it down: one `ip -batch` each way.
fn bridge(bed: &Bed, dir: &Path, br: &str, on: bool) -> anyhow::Result<()> {
    let mut cmds = String::new();
    let devs: Vec<&String> = bed
        .guests
        .iter()
        .map(|g| &g.1)
        .chain(std::iter::once(&bed.uplink))
        .collect();
    if on {
        for d in &devs {
            cmds += &format!("link set dev {d} master {br}\n");
        }
        cmds += &format!("link set dev {br} up\n");
    } else {
        for d in &devs {
            cmds += &format!("link set dev {d} nomaster\n");
        }
        cmds += &format!("link set dev {br} down\n");
    }
    let f = dir.join("bridge.batch");
    std::fs::write(&f, cmds)?;
    netsched_testbed::run(
        "ip",
        &["-netns", &bed.sw, "-batch", &f.display().to_string()],
    )?;
    Ok(())
}

/// A switch running for one variant: in-process (pinned thread) or a process (pinned).
enum Running {
    Thread(netsched_vswitch::SwitchHandle),
    Proc(netsched_testbed::Process, PathBuf),
}

impl Running {
    fn start(
        bed: &Bed,
        dir: &Path,
        v: &Variant,
        cpu: Option<usize>,
        o: &LatencyOpts,
    ) -> anyhow::Result<Option<Self>> {
        let trace_latency = o.trace_latency;
        let discipline = o.discipline.as_str();
        // Top-level keys first: after the first `[[port]]` they would belong to it.
        let text = |busy_poll: &str| {
            format!("port_backend = \"{}\"\n", o.backend)
                + &config_text(bed, discipline, Some(busy_poll))
        };
        match v {
            Variant::Bridge => Ok(None),
            Variant::InProcess { busy_poll } => {
                let mut cfg = SwitchConfig::parse(&text(busy_poll), "bench")?;
                cfg.trace_latency = trace_latency;
                let h = netsched_vswitch::SwitchHandle::spawn(
                    "switch",
                    "vswitch-bench".into(),
                    &bed.sw,
                    move || {
                        if let Some(c) = cpu {
                            netsched_testbed::pin_to_cpu(c)?;
                        }
                        Ok(netsched_vswitch::Switch::open(&cfg, None)?)
                    },
                    |mut sw, stop| Ok(sw.run(stop, None, None)?),
                )?;
                Ok(Some(Running::Thread(h)))
            }
            Variant::Binary {
                path, busy_poll, ..
            } => {
                let conf = dir.join("switch.toml");
                std::fs::write(&conf, config_text(bed, discipline, Some(busy_poll)))?;
                let (out, err) = (dir.join("switch.out"), dir.join("switch.err"));
                let mut cmd = match cpu {
                    Some(c) => {
                        let mut t = Command::new("taskset");
                        t.args(["-c", &c.to_string()]).arg(path);
                        t
                    }
                    None => Command::new(path),
                };
                cmd.args(["vswitch", "--no-control", "--netns", &bed.sw, "--config"])
                    .arg(&conf)
                    .args(trace_latency.then_some("--trace-latency"))
                    .stdin(Stdio::null())
                    .stdout(std::fs::File::create(&out)?)
                    .stderr(std::fs::File::create(&err)?);
                let p = netsched_testbed::Process::start(cmd, "netsched vswitch")?;
                // Ready once it says which ports it serves (printed after they are open).
                let until = Instant::now() + Duration::from_secs(10);
                loop {
                    let e = std::fs::read_to_string(&err).unwrap_or_default();
                    if e.contains("guest ports ->") {
                        break;
                    }
                    anyhow::ensure!(
                        Instant::now() < until,
                        "{} did not start: {e}",
                        path.display()
                    );
                    std::thread::sleep(Duration::from_millis(10));
                }
                Ok(Some(Running::Proc(p, out)))
            }
        }
    }

    /// Stop it; the packet thread's CPU seconds and, when traced, its latency stages.
    fn stop(self) -> anyhow::Result<(f64, Option<serde_json::Value>)> {
        match self {
            Running::Thread(h) => {
                let s = h.stop()?;
                let mut lat = s.latency.map(serde_json::to_value).transpose()?;
                if let Some(l) = &mut lat {
                    l["port_backend"] = s.port_backend.to_string().into();
                }
                Ok((s.cpu_ns as f64 / 1e9, lat))
            }
            Running::Proc(p, out) => {
                p.stop(Duration::from_secs(3));
                let text = std::fs::read_to_string(&out)?;
                let last = text
                    .lines()
                    .rev()
                    .find(|l| l.starts_with("{\"final\""))
                    .ok_or_else(|| anyhow::anyhow!("no final line from the switch"))?;
                let v: serde_json::Value = serde_json::from_str(last)?;
                let cpu = v["final"]["cpu_ns"]
                    .as_u64()
                    .map_or(f64::NAN, |ns| ns as f64 / 1e9);
                let mut lat = v["final"].get("latency").cloned();
                if let Some(l) = &mut lat {
                    l["port_backend"] = v["final"]["port_backend"].clone();
                }
                Ok((cpu, lat))
            }
        }
    }
}

/// Per stage name, per round: (p50, p99) in µs.
type StageSeries = Vec<(String, Vec<(f64, f64)>)>;

/// One round's `latency` report (stage, p50_ns, p99_ns, count) into the per-stage series
/// (and the port backend it ran on as a stage of its own name, so a round that fell back
/// to a backend without ring stamps shows).
fn add_stages(into: &mut StageSeries, lat: &serde_json::Value) {
    let backend = format!("backend {}", lat["port_backend"].as_str().unwrap_or("?"));
    match into.iter_mut().find(|(n, _)| *n == backend) {
        Some((_, rounds)) => rounds.push((0.0, 0.0)),
        None => into.push((backend, vec![(0.0, 0.0)])),
    }
    for st in lat["stages"].as_array().into_iter().flatten() {
        let name = st["stage"].as_str().unwrap_or("?").to_string();
        if st["count"].as_u64().unwrap_or(0) == 0 {
            continue;
        }
        let us = |k: &str| st[k].as_u64().unwrap_or(0) as f64 / 1e3;
        let v = (us("p50_ns"), us("p99_ns"));
        match into.iter_mut().find(|(n, _)| *n == name) {
            Some((_, rounds)) => rounds.push(v),
            None => into.push((name, vec![v])),
        }
    }
}

/// Per stage: the median over rounds of its p50 and p99 (µs), with the rounds' range.
fn print_stages(label: &str, stages: &mut [(String, Vec<(f64, f64)>)]) {
    for (name, rounds) in stages.iter_mut() {
        if name.starts_with("backend ") {
            println!("{label}: {name} in {} round(s)", rounds.len());
            continue;
        }
        let mut p50: Vec<f64> = rounds.iter().map(|r| r.0).collect();
        let mut p99: Vec<f64> = rounds.iter().map(|r| r.1).collect();
        println!(
            "{label}: stage {name:14} p50 median {:6.1} us (rounds {:.0}..{:.0}), p99 median {:7.1} us",
            median(&mut p50),
            p50[0],
            p50[p50.len() - 1],
            median(&mut p99)
        );
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    q(v, 0.5)
}

/// The interleaved latency rounds (see the module header); prints every round and the
/// medians over rounds.
#[allow(clippy::needless_range_loop)] // rounds index every variant's results alike
fn latency(bed: &Bed, o: &LatencyOpts) -> anyhow::Result<()> {
    let dir = netsched_testbed::TempDir::new("vswbl")?;
    let br = bed.tb.ifname("br");
    bed.tb
        .exec(&bed.sw, "ip", &["link", "add", &br, "type", "bridge"])?;
    println!(
        "latency: {} rounds x {:?}, {} pings at 100/s each, ping on CPU {:?}",
        o.rounds,
        o.variants.iter().map(label).collect::<Vec<_>>(),
        o.probes,
        o.ping_cpu,
    );
    let k = o.variants.len();
    // Per variant: per round (p50, p99) in ms, and the switch's CPU seconds.
    let mut got = vec![vec![(f64::NAN, f64::NAN, 0.0); o.rounds]; k];
    // Per variant: stage name → per round (p50, p99) in µs (`--trace-latency`).
    let mut stages: Vec<StageSeries> = vec![Vec::new(); k];
    let g0 = &bed.guests[0].0;
    for r in 0..o.rounds {
        for j in 0..k {
            let vi = (r + j) % k;
            let (v, cpu) = &o.variants[vi];
            if matches!(v, Variant::Bridge) {
                bridge(bed, dir.path(), &br, true)?;
                std::thread::sleep(Duration::from_millis(200));
            }
            let run = Running::start(bed, dir.path(), v, *cpu, o)?;
            let _ = rtts(g0, 5, o.ping_cpu);
            let x = rtts(g0, o.probes, o.ping_cpu);
            let (cpu, lat) = match run {
                Some(run) => run.stop()?,
                None => (0.0, None),
            };
            if let Some(lat) = lat {
                add_stages(&mut stages[vi], &lat);
            }
            if matches!(v, Variant::Bridge) {
                bridge(bed, dir.path(), &br, false)?;
            }
            anyhow::ensure!(
                x.len() as f64 >= 0.9 * o.probes as f64,
                "{}: only {} of {} replies",
                label(&o.variants[vi]),
                x.len(),
                o.probes
            );
            got[vi][r] = (q(&x, 0.5), q(&x, 0.99), cpu);
        }
        let br0 = got[0][r];
        let row: Vec<String> = (1..k)
            .map(|vi| {
                let g = got[vi][r];
                format!(
                    "{}: p50 {:.3} p99 {:.3} ms, added {:+.0} / {:+.0} us, cpu {:.3} s",
                    label(&o.variants[vi]),
                    g.0,
                    g.1,
                    (g.0 - br0.0) * 1e3,
                    (g.1 - br0.1) * 1e3,
                    g.2
                )
            })
            .collect();
        println!(
            "round {:2}: bridge p50 {:.3} p99 {:.3} ms; {}",
            r + 1,
            br0.0,
            br0.1,
            row.join("; ")
        );
    }
    let mut b50: Vec<f64> = got[0].iter().map(|g| g.0).collect();
    let mut b99: Vec<f64> = got[0].iter().map(|g| g.1).collect();
    println!(
        "bridge: p50 median {:.3} ms (range {:.3}..{:.3}); p99 median {:.3} ms",
        median(&mut b50),
        b50[0],
        b50[b50.len() - 1],
        median(&mut b99)
    );
    for vi in 1..k {
        let mut a50: Vec<f64> = (0..o.rounds)
            .map(|r| (got[vi][r].0 - got[0][r].0) * 1e3)
            .collect();
        let mut a99: Vec<f64> = (0..o.rounds)
            .map(|r| (got[vi][r].1 - got[0][r].1) * 1e3)
            .collect();
        let mut cpu: Vec<f64> = got[vi].iter().map(|g| g.2).collect();
        let (m50, m99) = (median(&mut a50), median(&mut a99));
        println!(
            "{}: added p50 median {m50:.0} us (rounds {:.0}..{:.0}, quartiles {:.0}..{:.0}); \
             added p99 median {m99:.0} us (rounds {:.0}..{:.0}); switch CPU median {:.3} s; \
             target < 50 us p50: {}",
            label(&o.variants[vi]),
            a50[0],
            a50[a50.len() - 1],
            q(&a50, 0.25),
            q(&a50, 0.75),
            a99[0],
            a99[a99.len() - 1],
            median(&mut cpu),
            if m50 < 50.0 { "met" } else { "NOT met" }
        );
    }
    for vi in 1..k {
        print_stages(&label(&o.variants[vi]), &mut stages[vi]);
    }
    // Also the variants against each other, round by round (pairs of switch variants).
    for a in 1..k {
        for b in a + 1..k {
            let mut d: Vec<f64> = (0..o.rounds)
                .map(|r| (got[b][r].0 - got[a][r].0) * 1e3)
                .collect();
            let m = median(&mut d);
            println!(
                "{} minus {}: p50 median {m:+.0} us (rounds {:+.0}..{:+.0})",
                label(&o.variants[b]),
                label(&o.variants[a]),
                d[0],
                d[d.len() - 1]
            );
        }
    }
    bed.tb.exec(&bed.sw, "ip", &["link", "del", &br])?;
    Ok(())
}

const USAGE: &str = "\
bench_vswitch                      throughput, discipline cost, latency (3 rounds, in-process)
bench_vswitch backends [--rounds R]  packets/s at 64 B on the xdp, tpacket and packet backends
bench_vswitch latency [--rounds R] [--probes P] [--busy-poll 0,200us,50ms]
                      [--switch NAME=PATH]... [--ping-cpu C] [--switch-cpu C|none] [--same-cpu-too]
                      [--trace-latency] [--discipline NAME] [--backend NAME]

Root. The switch against the kernel bridge between the same namespaces. Latency rounds are
interleaved (every variant once per round, order rotated); \"added\" = variant p50 (p99) minus
the bridge's in the same round; the verdict is on the medians over rounds.
  --busy-poll LIST   polling windows to compare; one longer than the gap between pings
                     (e.g. 50ms) keeps the switch awake (a core given to the switch)
  --switch NAME=PATH run that netsched binary as a variant (compare two builds in one run)
  --same-cpu-too     also run every switch variant pinned to the ping's CPU
  --trace-latency    run the switches with --trace-latency and print, per stage (kernel ring
                     -> loop turn -> read -> discipline -> send), the medians over rounds
  --discipline NAME  the switches' discipline (default delay_constrained, P2's; e.g. strict
                     to see what the discipline's own share is)
  --backend NAME     the switches' port backend (default auto; tpacket gives the kernel's
                     receive stamp, so --trace-latency sees the wait for the switch thread)
Example:
  bench_vswitch latency --rounds 6 --probes 300 --busy-poll 0,50ms --switch C=target/release/netsched";

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return Ok(());
    }
    if !netsched_testbed::is_root() {
        eprintln!("bench_vswitch needs root");
        return Ok(());
    }
    let latency_only = args.first().map(String::as_str) == Some("latency");
    if args.first().map(String::as_str) == Some("backends") {
        let rounds: usize = match args.get(1).map(String::as_str) {
            Some("--rounds") => args.get(2).and_then(|r| r.parse().ok()).unwrap_or(0),
            None => 3,
            _ => 0,
        };
        anyhow::ensure!((1..=100).contains(&rounds), "backends [--rounds 1..=100]");
        let bed = build()?;
        return backends(&bed, rounds);
    }
    let opts = if latency_only {
        LatencyOpts::parse(&args[1..])?
    } else {
        anyhow::ensure!(args.is_empty(), "unknown arguments {args:?}\n{USAGE}");
        LatencyOpts::parse(&["--rounds".into(), "3".into()])?
    };
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "machine: {} cpus, loadavg {}",
        std::thread::available_parallelism()?.get(),
        load.trim()
    );
    let bed = build()?;
    if !latency_only {
        throughput(&bed)?;
    }
    latency(&bed, &opts)?;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("loadavg after: {}", load.trim());
    Ok(())
}

/// Packets/s of the switch at 64 B on each port backend, `rounds` rounds, the order of the
/// backends rotating from round to round; the load average before each measurement.
fn backends(bed: &Bed, rounds: usize) -> anyhow::Result<()> {
    let dur = Duration::from_secs(3);
    for round in 0..rounds {
        let mut order = ["xdp", "tpacket", "packet"];
        order.rotate_left(round % 3);
        for backend in order {
            let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
            let sw = spawn_in_netns(&bed.sw, config_on(bed, "delay_constrained", backend))?;
            let before = rx_packets(bed);
            let t = Instant::now();
            let sent = blast(bed, 64, dur);
            let secs = t.elapsed().as_secs_f64();
            std::thread::sleep(Duration::from_millis(200));
            let st = sw.stop()?;
            let got = rx_packets(bed) - before;
            let fwd: u64 = st.ports.iter().map(|p| p.forwarded).sum();
            anyhow::ensure!(
                st.port_backend.name() == backend,
                "ran on {}",
                st.port_backend
            );
            println!(
                "round={round} backend={backend} len=64 offered_pps={:.0} forwarded_pps={:.0} ext_rx_pps={:.0} pkt_per_cpu_s={:.0} wakeups_per_frame={:.4} kernel_drops={} ring_kib={} loadavg={}",
                sent as f64 / secs,
                fwd as f64 / secs,
                got as f64 / secs,
                fwd as f64 / (st.cpu_ns as f64 / 1e9).max(1e-9),
                st.wakeups_per_frame,
                st.ports.iter().map(|p| p.kernel_drops).sum::<u64>(),
                st.ring_bytes / 1024,
                load.split_whitespace().next().unwrap_or("?"),
            );
        }
    }
    Ok(())
}

/// Discipline cost, then packets/s through the switch and through the kernel bridge.
fn throughput(bed: &Bed) -> anyhow::Result<()> {
    sched_cost(bed);
    let dur = Duration::from_secs(3);
    // The switch (delay_constrained, no budget).
    for len in [64usize, 1500] {
        let sw = spawn_in_netns(&bed.sw, config(bed, "delay_constrained"))?;
        let before = rx_packets(bed);
        let t = Instant::now();
        let sent = blast(bed, len, dur);
        let secs = t.elapsed().as_secs_f64();
        std::thread::sleep(Duration::from_millis(200));
        let st = sw.stop()?;
        let got = rx_packets(bed) - before;
        let fwd: u64 = st.ports.iter().map(|p| p.forwarded).sum();
        println!(
            "vswitch len={len} offered_pps={:.0} forwarded_pps={:.0} ext_rx_pps={:.0} switch_cpu_s={:.2} pkt_per_cpu_s={:.0} kernel_drops={} queue_drops={}",
            sent as f64 / secs,
            fwd as f64 / secs,
            got as f64 / secs,
            st.cpu_ns as f64 / 1e9,
            fwd as f64 / (st.cpu_ns as f64 / 1e9).max(1e-9),
            st.ports.iter().map(|p| p.kernel_drops).sum::<u64>(),
            st.ports.iter().map(|p| p.dropped_queue_full).sum::<u64>(),
        );
    }
    // The kernel bridge between the same namespaces.
    let dir = netsched_testbed::TempDir::new("vswbt")?;
    let br = bed.tb.ifname("bt");
    bed.tb
        .exec(&bed.sw, "ip", &["link", "add", &br, "type", "bridge"])?;
    bridge(bed, dir.path(), &br, true)?;
    std::thread::sleep(Duration::from_millis(300));
    for len in [64usize, 1500] {
        let before = rx_packets(bed);
        let t = Instant::now();
        let sent = blast(bed, len, dur);
        let secs = t.elapsed().as_secs_f64();
        std::thread::sleep(Duration::from_millis(200));
        let got = rx_packets(bed) - before;
        println!(
            "bridge len={len} offered_pps={:.0} ext_rx_pps={:.0}",
            sent as f64 / secs,
            got as f64 / secs
        );
    }
    bridge(bed, dir.path(), &br, false)?;
    bed.tb.exec(&bed.sw, "ip", &["link", "del", &br])?;
    Ok(())
}

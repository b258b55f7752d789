//! The adsl-ack experiment (P3) on real Linux: namespaces local — gateway — modem — remote.
//!
//! ```text
//!  local ──LAN 10 Mbit/s── gateway ──veth── [modem: netsched link] ──veth── remote
//!  10.203.1.1           .1.254 | .2.254        up 800 kbit/s, FIFO 100        10.203.2.1
//!                                            down 2.1 Mbit/s, FIFO 300
//!                                            + propagation delay each way
//! ```
//!
//! The access link (P3: ADSL 800 kbit/s up, 2.1 Mbit/s down, uplink FIFO of 100 packets) is
//! emulated by `netsched link` in the `modem` namespace (there is no netem on this kernel): a
//! rate, a propagation delay (default 10 ms each way) and a core discipline per direction. The
//! LAN is shaped to 10 Mbit/s with `tbf`. TCP runs between the end hosts (iperf3 in `local`
//! and `remote`), never on a shaping hop. Offloads are off on every veth.
//!
//! Runs per variant (congestion control × window clamp): upload alone, download alone, both
//! with FIFO, both with ACK separation by `netsched shape` on the gateway (HTB + u32, shaped
//! 5 % below the uplink so the queue is the gateway's), both with ACK separation by
//! `netsched link` (the core `AckSeparation` as the modem's uplink discipline). The "strong
//! asymmetry" set (1 Mbit/s up, 50 Mbit/s down) adds: strict ACK priority by tc, strict by the
//! link engine, and the link engine with the RFC 3449 ACK filter and an ACK-share cap.
//!
//! Every run builds its own [`Testbed`]; processes (iperf3, ping) are stopped by id with
//! their process group and the engine thread is stopped when the run ends, also on error,
//! panic or Ctrl-C/SIGTERM (a [`SignalGuard`] for the whole experiment: the current run
//! stops within ≈ 50 ms, everything it created is removed, and the experiment returns an
//! error).

use anyhow::{anyhow, bail, Context, Result};
use netsched_core::{Nanos, MS};
use netsched_link::engine::{parse_qdisc, spawn_in_netns, DirConfig, EngineConfig, EngineStats};
use netsched_link::shape::{self, ShapePlan, Target, TreePlan};
use netsched_report::{Check, Cmp, Comparison, ExperimentOutput, Figure, Results, Run};
use netsched_testbed::{
    check_interrupted, sleep_unless_interrupted, Process, SignalGuard, Testbed,
};
use serde::Serialize;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// TCP segment payload on a 1500-byte MTU with timestamps (1500 − 20 − 20 − 12).
const MSS: u64 = 1448;
const LOCAL: &str = "10.203.1.1";
const GW_LAN: &str = "10.203.1.254";
const REMOTE: &str = "10.203.2.1";
const GW_WAN: &str = "10.203.2.254";
const PORT_UP: &str = "5201";
const PORT_DOWN: &str = "5202";

/// The access network of one run set.
#[derive(Debug, Clone, Serialize)]
pub struct Access {
    pub up_bps: u64,
    pub down_bps: u64,
    pub lan_bps: u64,
    pub up_queue: usize,
    pub down_queue: usize,
    /// One-way propagation delay of the access link.
    pub delay: Nanos,
}

/// Who separates ACKs from data on the uplink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Separation {
    /// Plain FIFO in the modem (the paper's problem).
    Fifo,
    /// `netsched shape` on the gateway: HTB + u32, strict ACK priority.
    Shape,
    /// `netsched link`: core AckSeparation, strict priority (the paper's discipline).
    Link,
    /// `netsched link`: AckSeparation with the ACK filter and an ACK-share cap.
    LinkFiltered,
}

impl Separation {
    fn label(self) -> &'static str {
        match self {
            Separation::Fifo => "FIFO",
            Separation::Shape => "ACK sep. (tc)",
            Separation::Link => "ACK sep. (link)",
            Separation::LinkFiltered => "ACK filter+cap (link)",
        }
    }
}

/// TCP settings of a variant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Variant {
    /// Congestion control: "reno", "cubic", ... or "default" (the machine's).
    pub cc: String,
    /// Window clamp of the upload in packets (iperf3 `-w`, socket buffers of
    /// `packets × MSS`), or none.
    pub window_packets: Option<u32>,
    /// Window clamp of the download (the same as the upload's unless given separately).
    pub down_window_packets: Option<u32>,
}

impl Variant {
    pub fn name(&self) -> String {
        let w = |x: Option<u32>| x.map(|w| w.to_string()).unwrap_or_else(|| "none".into());
        if self.window_packets == self.down_window_packets {
            match self.window_packets {
                Some(n) => format!("{}-w{n}", self.cc),
                None => self.cc.clone(),
            }
        } else {
            format!(
                "{}-up{}-down{}",
                self.cc,
                w(self.window_packets),
                w(self.down_window_packets)
            )
        }
    }
}

/// One measured run.
#[derive(Debug, Clone, Serialize)]
pub struct RunSpec {
    pub set: String,
    pub upload: bool,
    pub download: bool,
    pub sep: Separation,
    pub variant: Variant,
    pub secs: u32,
    pub access: Access,
    /// Share cap for `LinkFiltered`.
    pub ack_share_max: f64,
}

impl RunSpec {
    pub fn name(&self) -> String {
        let what = match (self.upload, self.download) {
            (true, false) => "upload alone".to_string(),
            (false, true) => "download alone".to_string(),
            _ => format!("both, {}", self.sep.label()),
        };
        format!("{} / {} / {}", self.set, self.variant.name(), what)
    }
}

/// What one run measured.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunOutcome {
    /// Mean goodput after the warm-up, kbit/s (receiver side).
    pub up_kbit: Option<f64>,
    pub down_kbit: Option<f64>,
    /// (time s, kbit/s) per second, receiver side.
    pub up_series: Vec<(f64, f64)>,
    pub down_series: Vec<(f64, f64)>,
    /// Ping RTTs local → remote during the run, ms.
    pub ping_ms: Vec<f64>,
    pub ping_sent: u32,
    pub link: Option<EngineStats>,
    pub shape: Option<shape::ShapeState>,
    /// Congestion control actually in force in the sender namespaces.
    pub cc_in_force: String,
    /// The unique tag of the run's testbed (in every namespace name it created).
    pub testbed_tag: String,
    /// Share of the traffic time (%) a 1 ms sleeper of this process woke later than the link
    /// engine catches up ([`netsched_link::emulation::CATCH_UP`]), and its longest late
    /// wake-up (ms): how much of the machine the run got ([`super::watch_lateness`]).
    pub host_late_pct: f64,
    pub host_max_late_ms: f64,
}

/// Start `args` in namespace `ns` with its output captured (read by [`Process::finish`]).
fn start(ns: &str, args: &[&str], label: &str) -> Result<Process> {
    Process::start_in(ns, args, label, Stdio::piped(), Stdio::piped())
}

/// Clears a `netsched shape` installation when dropped.
struct ShapeGuard(Option<Target>);

impl Drop for ShapeGuard {
    fn drop(&mut self) {
        if let Some(t) = &self.0 {
            let _ = shape::clear(t);
        }
    }
}

/// The namespaces of one run.
struct Net {
    tb: Testbed,
    local: String,
    gw: String,
    modem: String,
    remote: String,
    gw_wan: String,
    modem_a: String,
    modem_b: String,
}

fn build_net(access: &Access) -> Result<Net> {
    let mut tb = Testbed::new("adslr")?;
    let local = tb.add_ns("local")?;
    let gw = tb.add_ns("gw")?;
    let modem = tb.add_ns("modem")?;
    let remote = tb.add_ns("remote")?;
    let (l0, g0, g1, ma, mb, r0) = (
        tb.ifname("l0"),
        tb.ifname("g0"),
        tb.ifname("g1"),
        tb.ifname("ma"),
        tb.ifname("mb"),
        tb.ifname("r0"),
    );
    for ns in [&local, &gw, &modem, &remote] {
        // IPv4 only: keeps router solicitations and MLD reports off the measured links.
        tb.sysctl(ns, "net.ipv6.conf.all.disable_ipv6=1")?;
        tb.sysctl(ns, "net.ipv6.conf.default.disable_ipv6=1")?;
    }
    tb.veth(
        (&local, &l0, &format!("{LOCAL}/24")),
        (&gw, &g0, &format!("{GW_LAN}/24")),
    )?;
    tb.veth((&gw, &g1, &format!("{GW_WAN}/24")), (&modem, &ma, ""))?;
    tb.veth((&modem, &mb, ""), (&remote, &r0, &format!("{REMOTE}/24")))?;
    tb.sysctl(&gw, "net.ipv4.ip_forward=1")?;
    tb.exec(&local, "ip", &["route", "add", "default", "via", GW_LAN])?;
    tb.exec(
        &remote,
        "ip",
        &["route", "add", "10.203.1.0/24", "via", GW_WAN],
    )?;
    // LAN at its rate both ways (tbf, burst of a few frames, ≈ 50 ms of queue).
    let lan = format!("{}bit", access.lan_bps);
    let limit = (access.lan_bps / 8 / 20).max(30_000).to_string();
    for (ns, dev) in [(&local, &l0), (&gw, &g0)] {
        tb.exec(
            ns,
            "tc",
            &[
                "qdisc", "add", "dev", dev, "root", "tbf", "rate", &lan, "burst", "15000", "limit",
                &limit,
            ],
        )?;
    }
    Ok(Net {
        tb,
        local,
        gw,
        modem,
        remote,
        gw_wan: g1,
        modem_a: ma,
        modem_b: mb,
    })
}

fn wait_listening(tb: &Testbed, ns: &str, port: &str) -> Result<()> {
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        check_interrupted()?;
        let out = tb.exec(ns, "ss", &["-Hltn"]).unwrap_or_default();
        if out.contains(&format!(":{port} ")) {
            return Ok(());
        }
        sleep_unless_interrupted(Duration::from_millis(50))?;
    }
    bail!("iperf3 server on port {port} in {ns} did not start listening within 5 s")
}

/// Per-second receiver goodput from an iperf3 server's JSON (`intervals[].sum`).
fn iperf_series(json_text: &str, what: &str) -> Result<Vec<(f64, f64)>> {
    let v: Value = serde_json::from_str(json_text.trim())
        .with_context(|| format!("{what}: iperf3 output is not JSON: {:.200}", json_text))?;
    if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
        bail!("{what}: iperf3 reported: {e}");
    }
    let ivs = v
        .get("intervals")
        .and_then(|i| i.as_array())
        .ok_or_else(|| anyhow!("{what}: iperf3 JSON has no intervals"))?;
    Ok(ivs
        .iter()
        .filter_map(|iv| {
            let s = iv.get("sum")?;
            Some((
                s.get("end")?.as_f64()?,
                s.get("bits_per_second")?.as_f64()? / 1e3,
            ))
        })
        .collect())
}

/// Mean of the series after the warm-up (slow start and queue fill).
fn mean_after(series: &[(f64, f64)], warmup: f64) -> Option<f64> {
    let v: Vec<f64> = series
        .iter()
        .filter(|(t, _)| *t > warmup + 0.5)
        .map(|(_, r)| *r)
        .collect();
    if v.is_empty() {
        None
    } else {
        Some(v.iter().sum::<f64>() / v.len() as f64)
    }
}

fn link_qdisc_up(spec: &RunSpec) -> String {
    let q = spec.access.up_queue;
    match spec.sep {
        Separation::Fifo | Separation::Shape => format!("fifo:{q}"),
        Separation::Link => format!("ack-sep:{q}"),
        Separation::LinkFiltered => format!("ack-sep:{q}+filter+cap={}", spec.ack_share_max),
    }
}

/// Run one configuration end to end; everything it created is gone when it returns.
pub fn run_one(spec: &RunSpec) -> Result<RunOutcome> {
    let a = &spec.access;
    let net = build_net(a).with_context(|| format!("{}: building the namespaces", spec.name()))?;
    for ns in [&net.local, &net.remote] {
        if spec.variant.cc != "default" {
            net.tb
                .sysctl(
                    ns,
                    &format!("net.ipv4.tcp_congestion_control={}", spec.variant.cc),
                )
                .with_context(|| format!("congestion control `{}`", spec.variant.cc))?;
        }
    }
    let cc_in_force = net
        .tb
        .exec(
            &net.local,
            "sysctl",
            &["-n", "net.ipv4.tcp_congestion_control"],
        )?
        .trim()
        .to_string();
    let engine_cfg = EngineConfig {
        dev_a: net.modem_a.clone(),
        dev_b: net.modem_b.clone(),
        ab: DirConfig {
            rate_bps: Some(a.up_bps),
            delay: a.delay,
            qdisc: parse_qdisc(&link_qdisc_up(spec))?,
        },
        ba: DirConfig {
            rate_bps: Some(a.down_bps),
            delay: a.delay,
            qdisc: parse_qdisc(&format!("fifo:{}", a.down_queue))?,
        },
        pool: 4096,
        delay_line: 4096,
        stats_interval: None,
        busy_poll: false,
    };
    let engine = spawn_in_netns(&net.modem, engine_cfg).context("starting netsched link")?;
    let gw_target = Target::in_netns(&net.gw, &net.gw_wan);
    // Declared after `net`, so dropped before it: `clear` runs while the namespace exists and
    // removes the state file `apply` wrote, also when the run fails.
    let _shape_guard = ShapeGuard(if spec.sep == Separation::Shape {
        Some(gw_target.clone())
    } else {
        None
    });
    if spec.sep == Separation::Shape {
        let plan = ShapePlan {
            up: TreePlan {
                dev: net.gw_wan.clone(),
                line_bps: a.up_bps,
                headroom_pct: 5.0,
                queue: a.up_queue as u32,
                ack_queue: a.up_queue as u32,
                ack_priority: true,
            },
            down: None,
            ingress_dev: net.gw_wan.clone(),
        };
        shape::apply(&gw_target, &plan, false).context("netsched shape apply on the gateway")?;
    }
    // Warm ARP through the engine before measuring.
    let _ = net.tb.exec(
        &net.local,
        "ping",
        &["-n", "-c", "2", "-i", "0.2", "-W", "2", REMOTE],
    );

    let secs = spec.secs.to_string();
    let window_of = |w: Option<u32>| w.map(|w| (w as u64 * MSS).to_string());
    let client_args = |dst: &str, port: &str, window: Option<String>| -> Vec<String> {
        let mut v: Vec<String> = ["iperf3", "-c", dst, "-p", port, "-t", &secs, "-J"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        v.extend(["--connect-timeout".into(), "3000".into()]);
        if let Some(w) = window {
            v.extend(["-w".to_string(), w]);
        }
        v
    };
    let mut servers = Vec::new();
    if spec.upload {
        servers.push((
            "up",
            start(
                &net.remote,
                &["iperf3", "-s", "-1", "-J", "-p", PORT_UP],
                "iperf3 upload server",
            )?,
        ));
        wait_listening(&net.tb, &net.remote, PORT_UP)?;
    }
    if spec.download {
        servers.push((
            "down",
            start(
                &net.local,
                &["iperf3", "-s", "-1", "-J", "-p", PORT_DOWN],
                "iperf3 download server",
            )?,
        ));
        wait_listening(&net.tb, &net.local, PORT_DOWN)?;
    }
    let ping_count = (spec.secs * 5).saturating_sub(5).max(1);
    let ping = start(
        &net.local,
        &[
            "ping",
            "-n",
            "-i",
            "0.2",
            "-c",
            &ping_count.to_string(),
            "-W",
            "5",
            REMOTE,
        ],
        "ping",
    )?;
    let stop_watch = Arc::new(AtomicBool::new(false));
    let watch = super::watch_lateness(Arc::clone(&stop_watch), netsched_link::emulation::CATCH_UP);
    let mut clients = Vec::new();
    if spec.upload {
        let args = client_args(REMOTE, PORT_UP, window_of(spec.variant.window_packets));
        let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        clients.push(start(&net.local, &args, "iperf3 upload client")?);
    }
    if spec.download {
        let args = client_args(
            LOCAL,
            PORT_DOWN,
            window_of(spec.variant.down_window_packets),
        );
        let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        clients.push(start(&net.remote, &args, "iperf3 download client")?);
    }
    let limit = Duration::from_secs(spec.secs as u64 + 20);
    let finished: Result<Vec<_>> = clients.into_iter().map(|c| c.finish(limit)).collect();
    stop_watch.store(true, Ordering::Relaxed);
    let (host_late_pct, host_max_late_ms) = watch.join().unwrap_or((f64::NAN, f64::NAN));
    finished?;
    let mut out = RunOutcome {
        host_late_pct,
        host_max_late_ms,
        cc_in_force,
        testbed_tag: net.tb.tag().to_string(),
        ping_sent: ping_count,
        ..Default::default()
    };
    let warmup = if spec.secs >= 20 { 5.0 } else { 3.0 };
    for (dir, s) in servers {
        let text = s.finish(Duration::from_secs(10))?;
        let series = iperf_series(&text, &format!("{} ({dir})", spec.name()))?;
        let mean = mean_after(&series, warmup);
        if dir == "up" {
            out.up_series = series;
            out.up_kbit = mean;
        } else {
            out.down_series = series;
            out.down_kbit = mean;
        }
    }
    let ping_text = ping.finish(Duration::from_secs(10)).unwrap_or_default();
    out.ping_ms = ping_text
        .lines()
        .filter_map(|l| l.split("time=").nth(1))
        .filter_map(|t| t.split_whitespace().next()?.parse().ok())
        .collect();
    if spec.sep == Separation::Shape {
        out.shape = shape::show(&gw_target).ok();
    }
    out.link = Some(engine.stop()?);
    // Dropped in reverse order: the shape guard (clear), then the namespaces.
    Ok(out)
}

/// The `p`-th percentile (0–100) of an unsorted sample, by the one definition in
/// `netsched_report::stats` (nearest rank).
fn percentile(v: &[f64], p: f64) -> Option<f64> {
    netsched_report::stats::percentile(&netsched_report::stats::sorted(v), p / 100.0)
}

/// Parameters of the real experiment (keys of the scenario's parameter object; all optional).
#[derive(Debug, Clone, Serialize)]
pub struct RealParams {
    pub up_kbit: f64,
    pub down_kbit: f64,
    pub lan_kbit: f64,
    pub up_queue: usize,
    pub down_queue: usize,
    pub delay_ms: f64,
    pub duration_s: u32,
    /// Variants as "cc" or "cc/window" (e.g. "reno/88", "default/none").
    pub variants: Vec<String>,
    /// Run the strong-asymmetry set.
    pub strong: bool,
    pub strong_up_kbit: f64,
    pub strong_down_kbit: f64,
    pub strong_variant: String,
    pub ack_share_max: f64,
}

/// The first of `keys` present in `p` (a key may be a dotted path into nested objects, as the
/// scenario's `[topology]` table arrives: `topology.up_kbps`).
fn get_f64(p: &Value, keys: &[&str], default: f64) -> Result<f64> {
    for k in keys {
        let mut v = Some(p);
        for part in k.split('.') {
            v = v.and_then(|x| x.get(part));
        }
        if let Some(v) = v {
            return v
                .as_f64()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .ok_or_else(|| anyhow!("parameter `{k}`: {v} is not a non-negative number"));
        }
    }
    Ok(default)
}

impl RealParams {
    pub fn from_json(p: &Value, quick: bool) -> Result<Self> {
        let variants = match p.get("real_variants") {
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| anyhow!("parameter `real_variants`: {v} is not a string"))
                })
                .collect::<Result<Vec<_>>>()?,
            Some(v) => bail!("parameter `real_variants`: {v} is not a list of strings"),
            None => vec![
                "reno/88".into(),
                "default/88".into(),
                "reno/none".into(),
                "default/none".into(),
                "reno/none/88".into(),
                "default/none/88".into(),
            ],
        };
        // The scenario's duration_s (70 s, the paper's) is for the simulator; real runs take
        // real time (25 runs), so they use real_duration_s, default 40 s (quick: 15 s).
        let duration = get_f64(p, &["real_duration_s"], if quick { 15.0 } else { 40.0 })?;
        let duration = if quick { duration.min(15.0) } else { duration };
        let rp = Self {
            up_kbit: get_f64(p, &["up_kbit", "topology.up_kbps"], 800.0)?,
            down_kbit: get_f64(p, &["down_kbit", "topology.down_kbps"], 2100.0)?,
            lan_kbit: get_f64(p, &["lan_kbit", "topology.lan_kbps"], 10_000.0)?,
            up_queue: get_f64(p, &["up_queue", "topology.uplink_fifo_packets"], 100.0)? as usize,
            // Not the scenario's large_queue_packets (1000): with 15–40 s runs a loss-based
            // download overshoots a 5.7 s buffer and spends the run recovering.
            down_queue: get_f64(p, &["real_down_queue"], 300.0)? as usize,
            delay_ms: get_f64(p, &["delay_ms", "topology.wan_delay_ms"], 10.0)?,
            duration_s: duration as u32,
            variants,
            strong: p
                .get("real_strong")
                .and_then(|v| v.as_bool())
                .unwrap_or(true),
            strong_up_kbit: get_f64(p, &["strong_up_kbit"], 128.0)?,
            strong_down_kbit: get_f64(p, &["strong_down_kbit"], 25_000.0)?,
            strong_variant: p
                .get("strong_variant")
                .and_then(|v| v.as_str())
                .unwrap_or("default/none")
                .to_string(),
            ack_share_max: get_f64(p, &["ack_share_max"], 0.5)?,
        };
        if rp.up_kbit < 8.0 || rp.down_kbit < 8.0 || rp.lan_kbit < 8.0 {
            bail!("parameters up_kbit, down_kbit, lan_kbit: must be at least 8 kbit/s");
        }
        if rp.up_queue == 0 || rp.down_queue == 0 {
            bail!("parameters up_queue, down_queue: must be at least 1 packet");
        }
        if rp.duration_s < 5 || rp.duration_s > 600 {
            bail!("parameter duration: {} s is outside 5..600", rp.duration_s);
        }
        if rp.delay_ms > 1000.0 {
            bail!(
                "parameter delay_ms: {} is more than one second",
                rp.delay_ms
            );
        }
        Ok(rp)
    }
}

/// Parse "reno/88" (both windows 88 packets), "default/none", "cubic", or
/// "reno/none/88" (upload window / download window).
pub fn parse_variant(s: &str) -> Result<Variant> {
    let mut parts = s.split('/');
    let cc = parts.next().unwrap_or("");
    if cc.is_empty() || !cc.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        bail!("variant `{s}`: `{cc}` is not a congestion control name");
    }
    let window = |w: &str| -> Result<Option<u32>> {
        match w {
            "none" | "" => Ok(None),
            n => Ok(Some(
                n.parse::<u32>()
                    .ok()
                    .filter(|n| (2..=100_000).contains(n))
                    .ok_or_else(|| {
                        anyhow!("variant `{s}`: window `{n}` is not a packet count 2..100000")
                    })?,
            )),
        }
    };
    let up = window(parts.next().unwrap_or("none"))?;
    let down = match parts.next() {
        Some(d) => window(d)?,
        None => up,
    };
    if parts.next().is_some() {
        bail!("variant `{s}`: expected cc[/window[/download window]]");
    }
    Ok(Variant {
        cc: cc.to_string(),
        window_packets: up,
        down_window_packets: down,
    })
}

struct Measured {
    spec: RunSpec,
    out: RunOutcome,
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

fn fmt_k(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.0}")).unwrap_or_else(|| "—".into())
}

fn fmt_pct(v: Option<f64>) -> String {
    v.map(|x| format!("{:.0}%", x * 100.0))
        .unwrap_or_else(|| "—".into())
}

/// `netsched lab run adsl-ack --real`.
pub fn run_real(params: &Value, seed: u64, out: &Path, quick: bool) -> Result<ExperimentOutput> {
    let rp = RealParams::from_json(params, quick)?;
    let variants: Vec<Variant> = rp
        .variants
        .iter()
        .map(|s| parse_variant(s))
        .collect::<Result<_>>()?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let adsl = Access {
        up_bps: (rp.up_kbit * 1e3) as u64,
        down_bps: (rp.down_kbit * 1e3) as u64,
        lan_bps: (rp.lan_kbit * 1e3) as u64,
        up_queue: rp.up_queue,
        down_queue: rp.down_queue,
        delay: (rp.delay_ms * MS as f64) as Nanos,
    };
    let mut specs = Vec::new();
    for v in &variants {
        for (upload, download, sep) in [
            (true, false, Separation::Fifo),
            (false, true, Separation::Fifo),
            (true, true, Separation::Fifo),
            (true, true, Separation::Shape),
            (true, true, Separation::Link),
        ] {
            specs.push(RunSpec {
                set: "adsl".into(),
                upload,
                download,
                sep,
                variant: v.clone(),
                secs: rp.duration_s,
                access: adsl.clone(),
                ack_share_max: rp.ack_share_max,
            });
        }
    }
    if rp.strong {
        let strong = Access {
            up_bps: (rp.strong_up_kbit * 1e3) as u64,
            down_bps: (rp.strong_down_kbit * 1e3) as u64,
            // The LAN must not be the download's bottleneck here.
            lan_bps: ((rp.strong_down_kbit * 2e3) as u64).max(adsl.lan_bps),
            ..adsl.clone()
        };
        let v = parse_variant(&rp.strong_variant)?;
        for (upload, download, sep) in [
            (true, false, Separation::Fifo),
            (false, true, Separation::Fifo),
            (true, true, Separation::Shape),
            (true, true, Separation::Link),
            (true, true, Separation::LinkFiltered),
        ] {
            specs.push(RunSpec {
                set: "strong".into(),
                upload,
                download,
                sep,
                variant: v.clone(),
                secs: rp.duration_s,
                access: strong.clone(),
                ack_share_max: rp.ack_share_max,
            });
        }
    }

    let _signals = SignalGuard::install()?;
    let mut measured = Vec::new();
    for spec in specs {
        check_interrupted()?;
        eprintln!("adsl-ack --real: {} ({} s)", spec.name(), spec.secs);
        let o = run_one(&spec).with_context(|| spec.name())?;
        eprintln!(
            "  upload {} kbit/s, download {} kbit/s, ping p50 {} ms",
            fmt_k(o.up_kbit),
            fmt_k(o.down_kbit),
            fmt_k(percentile(&o.ping_ms, 50.0))
        );
        measured.push(Measured { spec, out: o });
    }
    assemble(&rp, seed, out, &variants, measured)
}

fn find<'a>(
    m: &'a [Measured],
    set: &str,
    v: &Variant,
    up: bool,
    down: bool,
    sep: Separation,
) -> Option<&'a RunOutcome> {
    m.iter()
        .find(|x| {
            x.spec.set == set
                && &x.spec.variant == v
                && x.spec.upload == up
                && x.spec.download == down
                && (x.spec.sep == sep || !(up && down))
        })
        .map(|x| &x.out)
}

fn assemble(
    rp: &RealParams,
    seed: u64,
    out: &Path,
    variants: &[Variant],
    measured: Vec<Measured>,
) -> Result<ExperimentOutput> {
    let mut results = Results::new("adsl-ack", "real", seed, serde_json::to_value(rp)?);
    let mut checks = Vec::new();
    let mut comparisons = Vec::new();
    let mut figures = Vec::new();
    let mut notes = Vec::new();

    // Per-run metrics and the CSV of throughput over time.
    let mut rows: Vec<Vec<String>> = Vec::new();
    for m in &measured {
        let o = &m.out;
        let link = o.link.as_ref();
        results.runs.push(Run {
            config: json!({
                "set": m.spec.set,
                "variant": m.spec.variant.name(),
                "cc": m.spec.variant.cc,
                "cc_in_force": o.cc_in_force,
                "window_packets": m.spec.variant.window_packets,
                "download_window_packets": m.spec.variant.down_window_packets,
                "upload": m.spec.upload,
                "download": m.spec.download,
                "separation": m.spec.sep,
                "uplink_qdisc": link_qdisc_up(&m.spec),
                "access": m.spec.access,
                "duration_s": m.spec.secs,
                "testbed": o.testbed_tag,
            }),
            metrics: json!({
                "upload_kbit": o.up_kbit,
                "download_kbit": o.down_kbit,
                "ping_p50_ms": percentile(&o.ping_ms, 50.0),
                "ping_p90_ms": percentile(&o.ping_ms, 90.0),
                "ping_received": o.ping_ms.len(),
                "ping_sent": o.ping_sent,
                "link_accounting": link.map(|l| {
                    match (l.ab.check_accounting(), l.ba.check_accounting()) {
                        (Ok(()), Ok(())) => "balanced".to_string(),
                        (a, b) => format!("{:?} {:?}", a.err(), b.err()),
                    }
                }),
                "link_up": link.map(|l| &l.ab),
                "link_down": link.map(|l| &l.ba),
                "shape": o.shape,
                "host_late_pct": o.host_late_pct,
                "host_max_late_ms": o.host_max_late_ms,
            }),
        });
        for (dir, series) in [("upload", &o.up_series), ("download", &o.down_series)] {
            for (t, r) in series {
                rows.push(vec![
                    m.spec.set.clone(),
                    m.spec.variant.name(),
                    if m.spec.upload && m.spec.download {
                        m.spec.sep.label().to_string()
                    } else {
                        "alone".into()
                    },
                    dir.to_string(),
                    format!("{t:.1}"),
                    format!("{r:.1}"),
                ]);
            }
        }
    }
    netsched_report::csv::write_table(
        &out.join("throughput.csv"),
        &["set", "variant", "config", "direction", "t_s", "kbit_s"],
        &rows,
    )?;

    // The ADSL set: paper | colleague | ours, and the checks, per variant.
    for v in variants {
        let up_alone =
            find(&measured, "adsl", v, true, false, Separation::Fifo).and_then(|o| o.up_kbit);
        let down_alone =
            find(&measured, "adsl", v, false, true, Separation::Fifo).and_then(|o| o.down_kbit);
        let vn = v.name();
        let row = |q: &str, paper: &str, ours: Option<f64>| Comparison {
            quantity: format!("[{vn}] {q} (kbit/s)"),
            paper: paper.to_string(),
            ours: fmt_k(ours),
        };
        comparisons.push(row("upload alone", "≈750 (colleague: 765)", up_alone));
        comparisons.push(row("download alone", "≈1900 (colleague: 2009)", down_alone));
        let mut per_sep = Vec::new();
        for (sep, pu, pd) in [
            (
                Separation::Fifo,
                "≈250–300 (colleague: 641)",
                "≈1900 (colleague: 1479)",
            ),
            (
                Separation::Shape,
                "≈750 (colleague HTB+u32: 678)",
                "≈2000 (colleague: 1907)",
            ),
            (Separation::Link, "≈750", "≈2000"),
        ] {
            let o = find(&measured, "adsl", v, true, true, sep);
            let (u, d) = (o.and_then(|o| o.up_kbit), o.and_then(|o| o.down_kbit));
            comparisons.push(row(&format!("both, {}: upload", sep.label()), pu, u));
            comparisons.push(row(&format!("both, {}: download", sep.label()), pd, d));
            let p50 = o.and_then(|o| percentile(&o.ping_ms, 50.0));
            comparisons.push(Comparison {
                quantity: format!("[{vn}] both, {}: ping RTT p50 (ms)", sep.label()),
                paper: "—".into(),
                ours: fmt_k(p50),
            });
            per_sep.push((sep, ratio(u, up_alone), ratio(d, down_alone)));
        }
        for (sep, ru, rd) in per_sep {
            let detail = format!(
                "upload {} of alone, download {} of alone",
                fmt_pct(ru),
                fmt_pct(rd)
            );
            let nan = f64::NAN;
            match sep {
                Separation::Fifo => checks.push(Check::measured(
                    format!(
                        "[{vn}] FIFO, both directions busy: at least one direction < 80% of its rate alone (the smaller share)"
                    ),
                    ru.unwrap_or(nan).min(rd.unwrap_or(nan)),
                    Cmp::Lt,
                    0.8,
                    detail,
                )),
                _ => {
                    checks.push(Check::measured(
                        format!(
                            "[{vn}] {}: upload ≥ 80% of its rate alone",
                            sep.label()
                        ),
                        ru.unwrap_or(nan),
                        Cmp::Ge,
                        0.8,
                        detail.clone(),
                    ));
                    checks.push(Check::measured(
                        format!(
                            "[{vn}] {}: download ≥ 90% of its rate alone",
                            sep.label()
                        ),
                        rd.unwrap_or(nan),
                        Cmp::Ge,
                        0.9,
                        detail,
                    ));
                }
            }
        }
        // Throughput over time of the "both" runs.
        let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        for sep in [Separation::Fifo, Separation::Shape, Separation::Link] {
            if let Some(o) = find(&measured, "adsl", v, true, true, sep) {
                series.push((format!("{} up", sep.label()), o.up_series.clone()));
                series.push((format!("{} down", sep.label()), o.down_series.clone()));
            }
        }
        if !series.is_empty() {
            let file = format!("throughput-adsl-{vn}.svg");
            netsched_report::svg::line_chart(
                &format!("adsl-ack real, {vn}: both directions busy"),
                "time (s)",
                "goodput (kbit/s)",
                &series,
                &out.join(&file),
            )?;
            figures.push(Figure {
                title: format!("Throughput over time, both directions ({vn})"),
                file,
            });
        }
    }

    // Strong asymmetry.
    if let Some(sv) = measured
        .iter()
        .find(|m| m.spec.set == "strong")
        .map(|m| m.spec.variant.clone())
    {
        let up_alone =
            find(&measured, "strong", &sv, true, false, Separation::Fifo).and_then(|o| o.up_kbit);
        let down_alone =
            find(&measured, "strong", &sv, false, true, Separation::Fifo).and_then(|o| o.down_kbit);
        comparisons.push(Comparison {
            quantity: "[strong] upload / download alone (kbit/s)".into(),
            paper: "— (beyond the paper; RFC 3449 §5)".into(),
            ours: format!("{} / {}", fmt_k(up_alone), fmt_k(down_alone)),
        });
        let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        for sep in [
            Separation::Shape,
            Separation::Link,
            Separation::LinkFiltered,
        ] {
            let o = find(&measured, "strong", &sv, true, true, sep);
            let (u, d) = (o.and_then(|o| o.up_kbit), o.and_then(|o| o.down_kbit));
            comparisons.push(Comparison {
                quantity: format!("[strong] both, {}: upload / download (kbit/s)", sep.label()),
                paper: "—".into(),
                ours: format!("{} / {}", fmt_k(u), fmt_k(d)),
            });
            if let Some(o) = o {
                series.push((format!("{} up", sep.label()), o.up_series.clone()));
            }
            let ru = ratio(u, up_alone);
            let rd = ratio(d, down_alone);
            let detail = format!(
                "upload {} kbit/s = {} of alone; download {} kbit/s = {} of alone",
                fmt_k(u),
                fmt_pct(ru),
                fmt_k(d),
                fmt_pct(rd)
            );
            let nan = f64::NAN;
            match sep {
                Separation::LinkFiltered => {
                    checks.push(Check::measured(
                        format!(
                            "[strong] ACK filter + ACK share ≤ {} (link): upload keeps ≥ 30% of its rate alone",
                            rp.ack_share_max
                        ),
                        ru.unwrap_or(nan),
                        Cmp::Ge,
                        0.3,
                        detail.clone(),
                    ));
                    checks.push(Check::measured(
                        format!(
                            "[strong] ACK filter + ACK share ≤ {} (link): download keeps ≥ 50% of its rate alone",
                            rp.ack_share_max
                        ),
                        rd.unwrap_or(nan),
                        Cmp::Ge,
                        0.5,
                        detail,
                    ));
                }
                _ => checks.push(Check::measured(
                    format!(
                        "[strong] strict ACK priority ({}): the download's ACKs starve the upload (< 20% of its rate alone)",
                        sep.label()
                    ),
                    ru.unwrap_or(nan),
                    Cmp::Lt,
                    0.2,
                    detail,
                )),
            }
        }
        if !series.is_empty() {
            let file = "throughput-strong-upload.svg".to_string();
            netsched_report::svg::line_chart(
                &format!(
                    "Strong asymmetry ({:.0} kbit/s up, {:.0} kbit/s down): upload goodput",
                    rp.strong_up_kbit, rp.strong_down_kbit
                ),
                "time (s)",
                "upload goodput (kbit/s)",
                &series,
                &out.join(&file),
            )?;
            figures.push(Figure {
                title: "Strong asymmetry: upload under strict ACK priority vs ACK filter + cap"
                    .into(),
                file,
            });
        }
    }

    notes.push(format!(
        "Real Linux: namespaces local — gateway — modem — remote; the access link ({:.0} kbit/s up \
         with a {}-packet FIFO, {:.0} kbit/s down with {} packets, {} ms propagation delay each \
         way) is `netsched link` (AF_PACKET) in the modem namespace, the LAN is tbf at {:.0} kbit/s, \
         offloads off. Goodput is iperf3's receiver-side rate per second, averaged after a warm-up; \
         `throughput.csv` has every second. Ping runs local → remote every 200 ms during each run.",
        rp.up_kbit, rp.up_queue, rp.down_kbit, rp.down_queue, rp.delay_ms, rp.lan_kbit
    ));
    notes.push(
        "Which direction collapses depends on the TCP settings. The paper's TCP (2005, window \
         ≤ 88 packets both ways) could not fill the 100-packet uplink FIFO alone; data and the \
         download's ACKs shared the slots (88 + 88 > 100) and the upload lost data. An upload \
         without a window limit fills the whole FIFO — a loss-based one (Reno/CUBIC) by \
         design: 100 × 1514 B at 800 kbit/s ≈ 1.5 s of queue. The download's ACKs wait behind \
         it and the download is limited to window / RTT: with an 88-packet window \
         88 × 1448 B / 1.5 s ≈ 680 kbit/s. So the deciding settings are the upload's window \
         (and congestion control) against the uplink queue, and the download's window against \
         the ACK delay that queue adds. BBR keeps the queue shorter (ping ≈ 150 ms instead of \
         1.5 s) but its probing still overflows the FIFO and delays and drops the ACKs. With no \
         window limit on either side both FIFOs fill and the upload suffers most, as in the \
         paper. Ping (ICMP) is not an ACK: with ACK separation it still waits behind the \
         upload's data."
            .into(),
    );
    notes.push(
        "netsched shape shapes the gateway 5 % below the uplink rate so the queue is the \
         gateway's HTB, not the modem's FIFO; the ACK class has strict priority (HTB prio 0, \
         99 % of the rate as its own). netsched link runs the core AckSeparation as the modem's \
         uplink discipline (class from the core pure-ACK test)."
            .into(),
    );
    notes.push(format!(
        "Strong asymmetry (beyond the paper, RFC 3449 §3 and §5): {:.0} kbit/s up, {:.0} kbit/s \
         down. With delayed ACKs the download sends one ≈66-byte ACK per two 1514-byte frames; \
         ACKs alone congest the uplink when the normalised ratio k = (down/up) ÷ (1514/66) \
         exceeds 2 — here k ≈ {:.1}. Strict ACK priority then gives the uplink to ACKs and \
         starves the upload. The ACK filter alone does not prevent this (the ACK queue is never \
         empty); the ACK-share cap ({}) bounds the ACKs' share while data is waiting, and the \
         filter keeps the fewer ACKs cumulative, so the download keeps (or gains) its rate.",
        rp.strong_up_kbit,
        rp.strong_down_kbit,
        (rp.strong_down_kbit / rp.strong_up_kbit) / (1514.0 / 66.0),
        rp.ack_share_max
    ));
    Ok(ExperimentOutput {
        results,
        comparisons,
        checks,
        figures,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_parse() {
        assert_eq!(
            parse_variant("reno/88").unwrap(),
            Variant {
                cc: "reno".into(),
                window_packets: Some(88),
                down_window_packets: Some(88)
            }
        );
        let v = parse_variant("reno/none/88").unwrap();
        assert_eq!((v.window_packets, v.down_window_packets), (None, Some(88)));
        assert_eq!(v.name(), "reno-upnone-down88");
        assert!(parse_variant("reno/1/2/3").is_err());
        assert_eq!(parse_variant("default").unwrap().window_packets, None);
        assert!(parse_variant("reno/x").is_err());
        assert!(parse_variant("re no/88").is_err());
    }

    #[test]
    fn params_have_defaults_and_reject_nonsense() {
        let p = RealParams::from_json(&json!({}), true).unwrap();
        assert_eq!((p.up_kbit, p.down_kbit, p.up_queue), (800.0, 2100.0, 100));
        assert_eq!(p.duration_s, 15);
        assert!(RealParams::from_json(&json!({"up_kbit": "fast"}), true)
            .unwrap_err()
            .to_string()
            .contains("up_kbit"));
        assert!(RealParams::from_json(&json!({"up_queue": 0}), true).is_err());
        assert!(RealParams::from_json(&json!({"real_variants": "reno"}), true).is_err());
        // The scenario's [topology] table is read too.
        let p = RealParams::from_json(
            &json!({"topology": {"up_kbps": 640.0, "wan_delay_ms": 5.0}, "duration_s": 70.0}),
            false,
        )
        .unwrap();
        assert_eq!((p.up_kbit, p.delay_ms, p.duration_s), (640.0, 5.0, 40));
    }

    #[test]
    fn iperf_json_series_and_warmup_mean() {
        let text = r#"{"intervals":[{"sum":{"end":1.0,"bits_per_second":100000}},
            {"sum":{"end":2.0,"bits_per_second":700000}},{"sum":{"end":3.0,"bits_per_second":800000}},
            {"sum":{"end":4.0,"bits_per_second":800000}}]}"#;
        let s = iperf_series(text, "t").unwrap();
        assert_eq!(s.len(), 4);
        assert_eq!(mean_after(&s, 2.0), Some(800.0));
        assert!(iperf_series(r#"{"error":"unable to connect"}"#, "t")
            .unwrap_err()
            .to_string()
            .contains("unable to connect"));
    }
}

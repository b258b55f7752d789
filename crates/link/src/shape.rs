//! `netsched shape`: install ACK separation (P3) on a gateway interface with `tc`.
//!
//! What it installs (P3 §4 "Fix": an HTB root, two FIFO children, a filter sending TCP ACKs to
//! the high-priority child, default = the other):
//!
//! ```text
//! root 1: htb default 20
//!  └─ 1:1   htb rate R ceil R                     R = line rate × (1 − headroom)
//!      ├─ 1:10 htb prio 0 rate R−R/100 ceil R  → 10: pfifo limit ACK_QUEUE   (pure TCP ACKs)
//!      └─ 1:20 htb prio 1 rate R/100   ceil R  → 20: pfifo limit QUEUE       (everything else)
//! ```
//!
//! Why the rates look like that: HTB (`net/sched/sch_htb.c`, `htb_dequeue_tree`) first serves
//! classes that are within their *own* rate, lowest `prio` first, and only then lends the
//! parent's spare tokens, again lowest `prio` first. A leaf within its own rate never asks its
//! parent, so the children's rates must add up to at most R, or together they exceed R. Strict
//! priority for ACKs therefore means: the ACK class owns (nearly) all of R and the bulk class
//! keeps 1 % so HTB has a valid rate for it; both may borrow up to R.
//!
//! Why shape below the line rate ("headroom", default 5 %): the modem serialises at the line
//! rate with its own FIFO. If the gateway hands it packets at the line rate or faster, the
//! queue — and the ACK-behind-data problem — sits in the modem, where no discipline of ours
//! applies. A few percent below the line rate keeps the modem's queue empty and the queue in
//! the gateway's HTB (the usual wondershaper/LARTC practice; the paper's gateway *was* the
//! modem, so it did not need this).
//!
//! The pure-ACK filter (RFC 3449 §5.2.1: ACK flag, no data, no SYN/FIN/RST) is written with
//! `u32` matches (`tc-u32(8)`: `match u8|u16|u32 VALUE MASK at OFFSET`, offsets counted from
//! the network header). u32 cannot do arithmetic, so "no payload" is matched exactly with one
//! filter per TCP data-offset value d = 5..15 (header 20..60 bytes):
//! - IPv4 (no IP options, IHL = 5): `u8 0x05 0x0f at 0` (IHL), `u8 6 0xff at 9` (protocol TCP),
//!   `u16 20+4d 0xffff at 2` (total length = headers only), `u8 d<<4 0xf0 at 32` (TCP data
//!   offset), `u8 0x10 0x17 at 33` (flags: ACK set; FIN 0x01, SYN 0x02, RST 0x04 clear;
//!   PSH/URG/ECE/CWR ignored).
//! - IPv6 (no extension headers): `u8 6 0xff at 6` (next header TCP), `u16 4d 0xffff at 4`
//!   (payload length = TCP header only), `u8 d<<4 0xf0 at 52`, `u8 0x10 0x17 at 53`.
//!
//! Packets with IPv4 options or IPv6 extension headers go to the bulk class (safe default).
//!
//! Atomic for the user: before changing anything the interface, rates and limits are checked;
//! the previous configuration is snapshotted (either the kernel default or a tree this tool
//! installed, remembered in `/run/netsched/shape/`); if any command fails, the previous state
//! is restored and the error names the failing command and tc's message. A configuration not
//! installed by this tool is never silently discarded (`--replace` says so explicitly).
//!
//! Cost: 2 × 11 u32 filters, tried in order by the kernel per packet (a few dozen compares).

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Arguments of `netsched shape`.
#[derive(Debug, clap::Args)]
#[command(
    about = "Install ACK separation (P3) on a gateway interface with tc (HTB + u32)",
    long_about = "Install ACK separation (P3) on a gateway interface with tc: an HTB root \
shaped a few percent below the uplink rate (so the queue sits in the gateway, not the modem), \
an ACK class served with strict priority and a bulk class, each with a pfifo of bounded \
length, and u32 filters sending pure TCP ACKs (IPv4 and IPv6) to the ACK class.",
    after_help = "Examples:
  netsched shape apply --dev eth1 --up 800kbit --dry-run      # print the exact tc script
  netsched shape apply --dev eth1 --up 800kbit --queue 100 --ack-queue 100
  netsched shape apply --dev eth1 --up 1mbit --down 50mbit --ifb ifb0
  netsched shape apply --dev eth1 --up 800kbit --no-ack-priority   # one FIFO (baseline)
  netsched shape show --dev eth1 --json
  netsched shape clear --dev eth1

Rates: a number with a unit as in tc(8): bit, kbit, mbit, gbit (bits/s; k = 1000) or
bps, kbps, mbps, gbps (bytes/s), e.g. 800kbit, 2.1mbit, 1gbit."
)]
pub struct ShapeArgs {
    #[command(subcommand)]
    pub cmd: ShapeCmd,
}

#[derive(Debug, clap::Subcommand)]
pub enum ShapeCmd {
    /// Install (or replace) the ACK-separation tree on an interface.
    Apply(ApplyArgs),
    /// Show the installed classes with packets, drops and backlog.
    Show {
        /// Interface.
        #[arg(long)]
        dev: String,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Remove what `apply` installed (root qdisc, ingress redirect, IFB tree).
    Clear {
        /// Interface.
        #[arg(long)]
        dev: String,
    },
}

#[derive(Debug, Clone, clap::Args)]
pub struct ApplyArgs {
    /// Uplink interface (egress is shaped).
    #[arg(long)]
    pub dev: String,
    /// Uplink line rate, e.g. 800kbit. The HTB root is set `--headroom` percent below it.
    #[arg(long)]
    pub up: String,
    /// Downlink line rate, e.g. 2.1mbit: shape ingress too, through `--ifb`.
    #[arg(long, requires = "ifb")]
    pub down: Option<String>,
    /// IFB device used for download shaping (created if missing).
    #[arg(long, requires = "down")]
    pub ifb: Option<String>,
    /// Bulk class queue limit in packets.
    #[arg(long, default_value_t = 100)]
    pub queue: u32,
    /// ACK class queue limit in packets.
    #[arg(long, default_value_t = 100)]
    pub ack_queue: u32,
    /// Percent below the line rate to shape at (0–50).
    #[arg(long, default_value_t = 5.0)]
    pub headroom: f64,
    /// No ACK class: one bulk FIFO only (the paper's baseline, shaped the same way).
    #[arg(long)]
    pub no_ack_priority: bool,
    /// Discard a configuration not installed by netsched shape.
    #[arg(long)]
    pub replace: bool,
    /// Print the exact commands and change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

pub fn run(args: ShapeArgs) -> Result<()> {
    match args.cmd {
        ShapeCmd::Apply(a) => {
            let plan = ShapePlan::from_args(&a)?;
            if a.dry_run {
                print!("{}", plan.script());
                return Ok(());
            }
            let target = Target::local(&a.dev);
            apply(&target, &plan, a.replace)?;
            println!(
                "netsched shape: {} shaped at {} ({}% below {}), {}",
                a.dev,
                format_rate(plan.up.shaped_bps()),
                plan.up.headroom_pct,
                format_rate(plan.up.line_bps),
                if plan.up.ack_priority {
                    "ACK class with strict priority"
                } else {
                    "one FIFO"
                }
            );
            Ok(())
        }
        ShapeCmd::Show { dev, json } => {
            let target = Target::local(&dev);
            let st = show(&target)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&st)?);
            } else {
                print!("{}", st.table());
            }
            Ok(())
        }
        ShapeCmd::Clear { dev } => {
            let target = Target::local(&dev);
            clear(&target)?;
            println!("netsched shape: cleared {dev}");
            Ok(())
        }
    }
}

/// Parse a tc-style rate into bits per second: `800kbit`, `2.1mbit`, `1gbit`, `100kbps`
/// (bytes/s), bare numbers are bits/s as in tc(8). Zero, negative and garbage are refused.
pub fn parse_rate(text: &str) -> Result<u64> {
    let t = text.trim().to_ascii_lowercase();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        bail!("rate `{text}`: expected a number with a unit, e.g. 800kbit, 2.1mbit, 1gbit");
    }
    let value: f64 = num
        .parse()
        .map_err(|_| anyhow!("rate `{text}`: `{num}` is not a number"))?;
    let mult: f64 = match unit {
        "" | "bit" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        "bps" => 8.0,
        "kbps" => 8e3,
        "mbps" => 8e6,
        "gbps" => 8e9,
        _ => bail!(
            "rate `{text}`: unknown unit `{unit}` (use bit, kbit, mbit, gbit, or bps, kbps, mbps, gbps)"
        ),
    };
    let bps = value * mult;
    if !bps.is_finite() || bps < 8.0 {
        bail!("rate `{text}`: must be at least 8bit (one byte per second)");
    }
    if bps > 400e9 {
        bail!("rate `{text}`: more than 400gbit is not a link rate tc can shape");
    }
    Ok(bps.round() as u64)
}

/// Rate as tc reads it (whole bits per second, `bit` unit — exact, no rounding surprises).
pub fn tc_rate(bps: u64) -> String {
    format!("{bps}bit")
}

fn format_rate(bps: u64) -> String {
    if bps >= 1_000_000 {
        format!("{:.3} Mbit/s", bps as f64 / 1e6)
    } else {
        format!("{:.1} kbit/s", bps as f64 / 1e3)
    }
}

/// One shaped direction: an HTB tree on one device.
#[derive(Debug, Clone, PartialEq)]
pub struct TreePlan {
    pub dev: String,
    pub line_bps: u64,
    pub headroom_pct: f64,
    pub queue: u32,
    pub ack_queue: u32,
    pub ack_priority: bool,
}

impl TreePlan {
    /// The HTB root rate: line rate minus headroom.
    pub fn shaped_bps(&self) -> u64 {
        ((self.line_bps as f64) * (1.0 - self.headroom_pct / 100.0)).round() as u64
    }

    fn batch(&self, out: &mut Vec<String>) {
        let d = &self.dev;
        let r = self.shaped_bps();
        out.push(format!("qdisc add dev {d} root handle 1: htb default 20"));
        out.push(format!(
            "class add dev {d} parent 1: classid 1:1 htb rate {} ceil {}",
            tc_rate(r),
            tc_rate(r)
        ));
        if !self.ack_priority {
            out.push(format!(
                "class add dev {d} parent 1:1 classid 1:20 htb rate {} ceil {} prio 1 quantum 1514",
                tc_rate(r),
                tc_rate(r)
            ));
            out.push(format!(
                "qdisc add dev {d} parent 1:20 handle 20: pfifo limit {}",
                self.queue
            ));
            return;
        }
        // Bulk keeps 1 % (at least 8 bit/s) as its own rate; ACKs own the rest (see header).
        let bulk = (r / 100).max(8);
        let ack = r.saturating_sub(bulk).max(8);
        out.push(format!(
            "class add dev {d} parent 1:1 classid 1:10 htb rate {} ceil {} prio 0 quantum 1514",
            tc_rate(ack),
            tc_rate(r)
        ));
        out.push(format!(
            "class add dev {d} parent 1:1 classid 1:20 htb rate {} ceil {} prio 1 quantum 1514",
            tc_rate(bulk),
            tc_rate(r)
        ));
        out.push(format!(
            "qdisc add dev {d} parent 1:10 handle 10: pfifo limit {}",
            self.ack_queue
        ));
        out.push(format!(
            "qdisc add dev {d} parent 1:20 handle 20: pfifo limit {}",
            self.queue
        ));
        for doff in 5u32..=15 {
            // IPv4, IHL 5: total length == 20 + TCP header length (no payload).
            out.push(format!(
                "filter add dev {d} parent 1: protocol ip prio 1 u32 \
                 match u8 0x05 0x0f at 0 match u8 0x06 0xff at 9 \
                 match u16 {} 0xffff at 2 match u8 0x{:02x} 0xf0 at 32 \
                 match u8 0x10 0x17 at 33 flowid 1:10",
                20 + 4 * doff,
                doff << 4
            ));
        }
        for doff in 5u32..=15 {
            // IPv6, no extension header: payload length == TCP header length.
            out.push(format!(
                "filter add dev {d} parent 1: protocol ipv6 prio 2 u32 \
                 match u8 0x06 0xff at 6 match u16 {} 0xffff at 4 \
                 match u8 0x{:02x} 0xf0 at 52 match u8 0x10 0x17 at 53 flowid 1:10",
                4 * doff,
                doff << 4
            ));
        }
    }
}

/// Everything `apply` will do, computed and validated before anything changes.
#[derive(Debug, Clone, PartialEq)]
pub struct ShapePlan {
    pub up: TreePlan,
    /// Download shaping: the IFB tree, and the device whose ingress is redirected to it.
    pub down: Option<TreePlan>,
    pub ingress_dev: String,
}

impl ShapePlan {
    pub fn from_args(a: &ApplyArgs) -> Result<Self> {
        validate_ifname(&a.dev).context("--dev")?;
        let up = parse_rate(&a.up).context("--up")?;
        if !(0.0..=50.0).contains(&a.headroom) {
            bail!(
                "--headroom {}: must be between 0 and 50 percent",
                a.headroom
            );
        }
        for (name, v) in [("--queue", a.queue), ("--ack-queue", a.ack_queue)] {
            if v == 0 || v > 100_000 {
                bail!("{name} {v}: must be between 1 and 100000 packets");
            }
        }
        let tree = |dev: &str, bps: u64| TreePlan {
            dev: dev.to_string(),
            line_bps: bps,
            headroom_pct: a.headroom,
            queue: a.queue,
            ack_queue: a.ack_queue,
            ack_priority: !a.no_ack_priority,
        };
        let down = match (&a.down, &a.ifb) {
            (Some(d), Some(ifb)) => {
                validate_ifname(ifb).context("--ifb")?;
                if ifb == &a.dev {
                    bail!("--ifb {ifb}: must differ from --dev");
                }
                Some(tree(ifb, parse_rate(d).context("--down")?))
            }
            (None, None) => None,
            _ => bail!("--down and --ifb go together"),
        };
        let p = Self {
            up: tree(&a.dev, up),
            down,
            ingress_dev: a.dev.clone(),
        };
        if p.up.shaped_bps() < 8 {
            bail!("--up {}: shaped rate would be below 8bit/s", a.up);
        }
        Ok(p)
    }

    /// The tc batch lines (one command each, as `tc -batch` reads them).
    pub fn batch_lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.up.batch(&mut out);
        if let Some(down) = &self.down {
            let d = &self.ingress_dev;
            out.push(format!("qdisc add dev {d} handle ffff: ingress"));
            // Every packet arriving on the uplink goes to the IFB's egress, where it is shaped.
            out.push(format!(
                "filter add dev {d} parent ffff: protocol all prio 1 u32 match u32 0 0 \
                 action mirred egress redirect dev {}",
                down.dev
            ));
            down.batch(&mut out);
        }
        out
    }

    /// `ip link` commands run before the batch (IFB creation).
    pub fn pre_commands(&self) -> Vec<Vec<String>> {
        match &self.down {
            Some(down) => vec![
                vec![
                    "link".into(),
                    "add".into(),
                    down.dev.clone(),
                    "type".into(),
                    "ifb".into(),
                ],
                vec!["link".into(), "set".into(), down.dev.clone(), "up".into()],
            ],
            None => vec![],
        }
    }

    /// The exact script `apply` runs, as a shell script.
    pub fn script(&self) -> String {
        let mut s = String::from("#!/bin/sh\n# netsched shape apply: the exact commands\nset -e\n");
        if let Some(down) = &self.down {
            let _ = writeln!(
                s,
                "# created only if missing; ifb brings ingress traffic to an egress qdisc"
            );
            let _ = writeln!(
                s,
                "ip link show {0} >/dev/null 2>&1 || ip link add {0} type ifb",
                down.dev
            );
            let _ = writeln!(s, "ip link set {} up", down.dev);
        }
        s.push_str("tc -batch - <<'EOF'\n");
        for l in self.batch_lines() {
            s.push_str(&l);
            s.push('\n');
        }
        s.push_str("EOF\n");
        s
    }
}

fn validate_ifname(name: &str) -> Result<()> {
    if name.is_empty()
        || name.len() > 15
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c))
    {
        bail!("interface name `{name}` is not valid (1–15 characters: letters, digits, - _ . @)");
    }
    Ok(())
}

/// Where commands run: an interface, optionally inside a named network namespace.
#[derive(Debug, Clone)]
pub struct Target {
    pub netns: Option<String>,
    pub dev: String,
}

impl Target {
    pub fn local(dev: &str) -> Self {
        Self {
            netns: None,
            dev: dev.to_string(),
        }
    }
    pub fn in_netns(ns: &str, dev: &str) -> Self {
        Self {
            netns: Some(ns.to_string()),
            dev: dev.to_string(),
        }
    }

    fn command(&self, prog: &str) -> Command {
        match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, prog]);
                c
            }
            None => Command::new(prog),
        }
    }

    /// Run `prog args`, with `stdin` fed if given; Err carries the command and stderr.
    fn run(&self, prog: &str, args: &[&str], stdin: Option<&str>) -> Result<String> {
        use std::io::Write;
        let mut c = self.command(prog);
        c.args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            });
        let mut child = c
            .spawn()
            .with_context(|| format!("cannot start `{prog}` (is iproute2 installed?)"))?;
        if let Some(input) = stdin {
            let mut si = child.stdin.take().expect("piped stdin");
            si.write_all(input.as_bytes())
                .with_context(|| format!("writing to `{prog}`"))?;
        }
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!("{}", String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn link_exists(&self, dev: &str) -> bool {
        self.run("ip", &["link", "show", "dev", dev], None).is_ok()
    }

    fn state_file(&self) -> Result<PathBuf> {
        // Key by network namespace identity: /run is shared between namespaces.
        let ns = self.run("readlink", &["/proc/self/ns/net"], None)?;
        let ns: String = ns
            .trim()
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect();
        Ok(PathBuf::from("/run/netsched/shape").join(format!("{ns}-{}.json", self.dev)))
    }
}

/// What was installed before `apply`, to restore on failure.
#[derive(Debug, Clone, PartialEq)]
enum Snapshot {
    /// The kernel's default root qdisc and no ingress qdisc.
    Default,
    /// A tree installed by netsched shape (its batch lines and pre-commands).
    Ours(SavedState),
}

#[derive(Debug, Clone, PartialEq, serde::Deserialize, Serialize)]
struct SavedState {
    lines: Vec<String>,
    ifb: Option<String>,
    ifb_created: bool,
}

const DEFAULT_ROOTS: [&str; 6] = ["noqueue", "pfifo_fast", "fq_codel", "mq", "fq", "cake"];

fn qdisc_json(t: &Target, dev: &str, stats: bool) -> Result<Vec<serde_json::Value>> {
    let mut args = vec!["-j"];
    if stats {
        args.push("-s");
    }
    args.extend(["qdisc", "show", "dev", dev]);
    let out = t
        .run("tc", &args, None)
        .with_context(|| format!("`tc {}`", args.join(" ")))?;
    let v: serde_json::Value = serde_json::from_str(out.trim())
        .with_context(|| format!("cannot parse the JSON of `tc {}`", args.join(" ")))?;
    Ok(v.as_array().cloned().unwrap_or_default())
}

fn snapshot(t: &Target, replace: bool) -> Result<Snapshot> {
    let qdiscs = qdisc_json(t, &t.dev, false)?;
    let saved: Option<SavedState> = t
        .state_file()
        .ok()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|s| serde_json::from_str(&s).ok());
    let root = qdiscs
        .iter()
        .find(|q| q.get("root").and_then(|r| r.as_bool()) == Some(true));
    let root_kind = root
        .and_then(|q| q.get("kind"))
        .and_then(|k| k.as_str())
        .unwrap_or("noqueue");
    let has_ingress = qdiscs.iter().any(|q| {
        matches!(
            q.get("kind").and_then(|k| k.as_str()),
            Some("ingress" | "clsact")
        )
    });
    if DEFAULT_ROOTS.contains(&root_kind) && !has_ingress {
        return Ok(Snapshot::Default);
    }
    let root_handle = root
        .and_then(|q| q.get("handle"))
        .and_then(|h| h.as_str())
        .unwrap_or("");
    if root_kind == "htb" && root_handle == "1:" {
        if let Some(s) = saved {
            return Ok(Snapshot::Ours(s));
        }
    }
    if replace {
        return Ok(Snapshot::Default);
    }
    bail!(
        "{}: the installed configuration (root qdisc {} {}{}) was not installed by netsched \
         shape; remove it (`netsched shape clear --dev {}` or `tc qdisc del dev {} root`) or \
         pass --replace to discard it",
        t.dev,
        root_kind,
        root_handle,
        if has_ingress {
            ", plus an ingress qdisc"
        } else {
            ""
        },
        t.dev,
        t.dev
    )
}

/// Remove root and ingress qdiscs of `t.dev` (ignoring "nothing to delete").
fn remove_tree(t: &Target, ifb: Option<&str>) {
    let _ = t.run("tc", &["qdisc", "del", "dev", &t.dev, "root"], None);
    let _ = t.run("tc", &["qdisc", "del", "dev", &t.dev, "ingress"], None);
    if let Some(ifb) = ifb {
        let _ = t.run("tc", &["qdisc", "del", "dev", ifb, "root"], None);
    }
}

/// Run batch lines; Err names the failing line and tc's message.
fn run_batch(t: &Target, lines: &[String]) -> Result<()> {
    let mut input = lines.join("\n");
    input.push('\n');
    match t.run("tc", &["-batch", "-"], Some(&input)) {
        Ok(_) => Ok(()),
        Err(e) => {
            let msg = e.to_string();
            // tc -batch reports "Command failed -:N" (1-based line of the batch).
            let failed = msg
                .lines()
                .find_map(|l| l.strip_prefix("Command failed -:"))
                .and_then(|n| n.trim().parse::<usize>().ok());
            let reason: Vec<&str> = msg
                .lines()
                .filter(|l| !l.starts_with("Command failed"))
                .collect();
            match failed.and_then(|n| lines.get(n.wrapping_sub(1))) {
                Some(cmd) => bail!("`tc {cmd}` failed: {}", reason.join("; ")),
                None => bail!("`tc -batch` failed: {msg}"),
            }
        }
    }
}

/// Install `plan` on `t` (the device in `plan` must be `t.dev`). On failure the previous
/// configuration is restored and the error names the failing command.
pub fn apply(t: &Target, plan: &ShapePlan, replace: bool) -> Result<()> {
    if !t.link_exists(&t.dev) {
        bail!("interface `{}` does not exist{}", t.dev, ns_suffix(t));
    }
    let before = snapshot(t, replace)?;
    let mut ifb_created = false;
    let result = (|| -> Result<()> {
        if let Some(down) = &plan.down {
            if !t.link_exists(&down.dev) {
                t.run("ip", &["link", "add", &down.dev, "type", "ifb"], None)
                    .with_context(|| {
                        format!(
                            "`ip link add {} type ifb` failed (is the ifb module loaded?)",
                            down.dev
                        )
                    })?;
                ifb_created = true;
            }
            t.run("ip", &["link", "set", &down.dev, "up"], None)
                .with_context(|| format!("`ip link set {} up` failed", down.dev))?;
        }
        // Remove the old tree (ours, or the default root) so the new one can be added.
        remove_tree(t, ifb_of(&before).as_deref());
        run_batch(t, &plan.batch_lines())
    })();
    match result {
        Ok(()) => {
            let prev_created = match &before {
                Snapshot::Ours(s) => s.ifb_created,
                Snapshot::Default => false,
            };
            let state = SavedState {
                lines: plan.batch_lines(),
                ifb: plan.down.as_ref().map(|d| d.dev.clone()),
                ifb_created: ifb_created || prev_created,
            };
            if let Ok(p) = t.state_file() {
                let _ = std::fs::create_dir_all(p.parent().unwrap_or(std::path::Path::new("/")));
                let _ = std::fs::write(&p, serde_json::to_string(&state).unwrap_or_default());
            }
            Ok(())
        }
        Err(e) => {
            remove_tree(t, plan.down.as_ref().map(|d| d.dev.as_str()));
            let restored = match &before {
                Snapshot::Default => Ok(()),
                Snapshot::Ours(s) => run_batch(t, &s.lines),
            };
            if ifb_created {
                if let Some(d) = &plan.down {
                    let _ = t.run("ip", &["link", "del", &d.dev], None);
                }
            }
            match restored {
                Ok(()) => Err(e.context(format!(
                    "nothing changed on {}: the previous configuration was restored",
                    t.dev
                ))),
                Err(r) => Err(e.context(format!(
                    "and restoring the previous configuration of {} failed too: {r:#}",
                    t.dev
                ))),
            }
        }
    }
}

fn ifb_of(s: &Snapshot) -> Option<String> {
    match s {
        Snapshot::Ours(s) => s.ifb.clone(),
        Snapshot::Default => None,
    }
}

fn ns_suffix(t: &Target) -> String {
    t.netns
        .as_ref()
        .map(|n| format!(" in network namespace {n}"))
        .unwrap_or_default()
}

/// Remove the tree installed by `apply` (and the IFB device if apply created it).
pub fn clear(t: &Target) -> Result<()> {
    if !t.link_exists(&t.dev) {
        bail!("interface `{}` does not exist{}", t.dev, ns_suffix(t));
    }
    let saved: Option<SavedState> = t
        .state_file()
        .ok()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|s| serde_json::from_str(&s).ok());
    remove_tree(t, saved.as_ref().and_then(|s| s.ifb.as_deref()));
    if let Some(s) = &saved {
        if s.ifb_created {
            if let Some(ifb) = &s.ifb {
                let _ = t.run("ip", &["link", "del", ifb], None);
            }
        }
    }
    if let Ok(p) = t.state_file() {
        let _ = std::fs::remove_file(p);
    }
    Ok(())
}

/// One HTB class with its counters (from `tc -s class show`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ClassState {
    pub dev: String,
    pub classid: String,
    pub parent: String,
    /// "ack", "bulk" or "" (inner class), by the layout `apply` installs.
    pub role: String,
    pub prio: Option<u32>,
    pub rate: String,
    pub ceil: String,
    pub sent_bytes: u64,
    pub packets: u64,
    pub drops: u64,
    pub overlimits: u64,
    pub backlog_bytes: u64,
    pub backlog_packets: u64,
}

/// One qdisc with its counters (from `tc -s -j qdisc show`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct QdiscState {
    pub dev: String,
    pub kind: String,
    pub handle: String,
    pub parent: String,
    pub packets: u64,
    pub bytes: u64,
    pub drops: u64,
    pub backlog_bytes: u64,
    pub backlog_packets: u64,
    pub limit: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ShapeState {
    pub classes: Vec<ClassState>,
    pub qdiscs: Vec<QdiscState>,
}

impl ShapeState {
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:<12} {:<6} {:<5} {:<4} {:>12} {:>12} {:>10} {:>8} {:>9}",
            "dev", "class", "role", "prio", "rate", "packets", "bytes", "drops", "backlog"
        );
        for c in &self.classes {
            let _ = writeln!(
                s,
                "{:<12} {:<6} {:<5} {:<4} {:>12} {:>12} {:>10} {:>8} {:>6}p/{}b",
                c.dev,
                c.classid,
                c.role,
                c.prio.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
                c.rate,
                c.packets,
                c.sent_bytes,
                c.drops,
                c.backlog_packets,
                c.backlog_bytes
            );
        }
        let _ = writeln!(s, "\nqdiscs:");
        for q in &self.qdiscs {
            let _ = writeln!(
                s,
                "{:<12} {:<8} {:<6} parent {:<6} limit {:<6} packets {:<10} drops {:<8} backlog {}p/{}b",
                q.dev,
                q.kind,
                q.handle,
                q.parent,
                q.limit.map(|l| l.to_string()).unwrap_or_else(|| "-".into()),
                q.packets,
                q.drops,
                q.backlog_packets,
                q.backlog_bytes
            );
        }
        s
    }

    /// The class with `classid` (e.g. "1:10") on `dev`.
    pub fn class(&self, dev: &str, classid: &str) -> Option<&ClassState> {
        self.classes
            .iter()
            .find(|c| c.dev == dev && c.classid == classid)
    }
}

/// Read classes and qdiscs of `t.dev` (and of its IFB, if `apply` installed one).
pub fn show(t: &Target) -> Result<ShapeState> {
    if !t.link_exists(&t.dev) {
        bail!("interface `{}` does not exist{}", t.dev, ns_suffix(t));
    }
    let mut devs = vec![t.dev.clone()];
    let saved: Option<SavedState> = t
        .state_file()
        .ok()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|s| serde_json::from_str(&s).ok());
    if let Some(ifb) = saved.and_then(|s| s.ifb) {
        if t.link_exists(&ifb) {
            devs.push(ifb);
        }
    }
    let mut st = ShapeState::default();
    for dev in &devs {
        // `tc -j class show` is not JSON in iproute2 6.1 for htb, so the text form is parsed.
        let text = t
            .run("tc", &["-s", "class", "show", "dev", dev], None)
            .with_context(|| format!("`tc -s class show dev {dev}`"))?;
        st.classes.extend(parse_class_text(dev, &text));
        for q in qdisc_json(t, dev, true)? {
            let g = |k: &str| q.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
            let s = |k: &str| q.get(k).and_then(|v| v.as_str()).unwrap_or("").to_string();
            st.qdiscs.push(QdiscState {
                dev: dev.clone(),
                kind: s("kind"),
                handle: s("handle"),
                parent: if q.get("root").and_then(|r| r.as_bool()) == Some(true) {
                    "root".into()
                } else {
                    s("parent")
                },
                packets: g("packets"),
                bytes: g("bytes"),
                drops: g("drops"),
                backlog_bytes: g("backlog"),
                backlog_packets: g("qlen"),
                limit: q
                    .get("options")
                    .and_then(|o| o.get("limit"))
                    .and_then(|l| l.as_u64()),
            });
        }
    }
    Ok(st)
}

/// Parse `tc -s class show` text (iproute2 6.x layout):
/// `class htb 1:20 parent 1:1 leaf 20: prio 1 rate 700Kbit ceil 760Kbit burst ...`
/// ` Sent 86 bytes 1 pkt (dropped 0, overlimits 0 requeues 0)`
/// ` backlog 0b 0p requeues 0`
pub fn parse_class_text(dev: &str, text: &str) -> Vec<ClassState> {
    let mut out: Vec<ClassState> = Vec::new();
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let after = |key: &str| {
            w.iter()
                .position(|x| *x == key)
                .and_then(|i| w.get(i + 1))
                .map(|s| s.trim_end_matches([',', ')']).to_string())
        };
        let num = |s: Option<String>| {
            s.map(|s| {
                s.trim_end_matches(|c: char| c.is_ascii_alphabetic())
                    .parse::<u64>()
                    .unwrap_or(0)
            })
            .unwrap_or(0)
        };
        if w.first() == Some(&"class") && w.len() >= 3 {
            let classid = w[2].to_string();
            let role = match classid.as_str() {
                "1:10" => "ack",
                "1:20" => "bulk",
                _ => "",
            };
            out.push(ClassState {
                dev: dev.to_string(),
                parent: if w.get(3) == Some(&"root") {
                    "root".into()
                } else {
                    after("parent").unwrap_or_default()
                },
                classid,
                role: role.into(),
                prio: after("prio").and_then(|p| p.parse().ok()),
                rate: after("rate").unwrap_or_default(),
                ceil: after("ceil").unwrap_or_default(),
                ..Default::default()
            });
        } else if let Some(c) = out.last_mut() {
            if w.first() == Some(&"Sent") {
                c.sent_bytes = num(w.get(1).map(|s| s.to_string()));
                c.packets = num(w.get(3).map(|s| s.to_string()));
                c.drops = num(after("(dropped"));
                c.overlimits = num(after("overlimits"));
            } else if w.first() == Some(&"backlog") {
                c.backlog_bytes = num(w.get(1).map(|s| s.to_string()));
                c.backlog_packets = num(w.get(2).map(|s| s.to_string()));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(dev: &str, up: &str) -> ApplyArgs {
        ApplyArgs {
            dev: dev.into(),
            up: up.into(),
            down: None,
            ifb: None,
            queue: 100,
            ack_queue: 100,
            headroom: 5.0,
            no_ack_priority: false,
            replace: false,
            dry_run: true,
        }
    }

    #[test]
    fn rate_parser_reads_tc_units() {
        assert_eq!(parse_rate("800kbit").unwrap(), 800_000);
        assert_eq!(parse_rate("2.1mbit").unwrap(), 2_100_000);
        assert_eq!(parse_rate("1gbit").unwrap(), 1_000_000_000);
        assert_eq!(parse_rate("100kbps").unwrap(), 800_000);
        assert_eq!(parse_rate("64000").unwrap(), 64_000);
        assert_eq!(parse_rate("1Mbit").unwrap(), 1_000_000);
    }

    #[test]
    fn rate_parser_rejects_zero_and_garbage_with_the_text() {
        for bad in [
            "0",
            "0kbit",
            "fast",
            "",
            "kbit",
            "1.2.3mbit",
            "5furlongs",
            "-3mbit",
        ] {
            let e = parse_rate(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("`{bad}`")), "{bad}: {e}");
        }
    }

    #[test]
    fn plan_shapes_five_percent_below_the_line_rate() {
        let p = ShapePlan::from_args(&args("eth1", "800kbit")).unwrap();
        assert_eq!(p.up.shaped_bps(), 760_000);
        let lines = p.batch_lines();
        assert!(lines[1].contains("rate 760000bit ceil 760000bit"));
        // ACK class strict priority: owns 99 %, bulk 1 %; both may borrow to the root rate.
        assert!(lines[2].contains("classid 1:10 htb rate 752400bit ceil 760000bit prio 0"));
        assert!(lines[3].contains("classid 1:20 htb rate 7600bit ceil 760000bit prio 1"));
        assert_eq!(
            lines.iter().filter(|l| l.contains("flowid 1:10")).count(),
            22
        );
    }

    #[test]
    fn ack_filters_match_headers_only_lengths() {
        let p = ShapePlan::from_args(&args("eth1", "1mbit")).unwrap();
        let lines = p.batch_lines();
        // Plain 20-byte TCP header: IPv4 total length 40, data offset 5.
        assert!(lines
            .iter()
            .any(|l| l.contains("match u16 40 0xffff at 2 match u8 0x50 0xf0 at 32")));
        // Timestamps (32-byte TCP header): total length 52, data offset 8.
        assert!(lines
            .iter()
            .any(|l| l.contains("match u16 52 0xffff at 2 match u8 0x80 0xf0 at 32")));
        // IPv6 with timestamps: payload length 32.
        assert!(lines
            .iter()
            .any(|l| l.contains("match u16 32 0xffff at 4 match u8 0x80 0xf0 at 52")));
    }

    #[test]
    fn no_ack_priority_installs_one_fifo() {
        let mut a = args("eth1", "800kbit");
        a.no_ack_priority = true;
        a.queue = 42;
        let lines = ShapePlan::from_args(&a).unwrap().batch_lines();
        assert_eq!(lines.len(), 4);
        assert!(lines[3].ends_with("pfifo limit 42"));
    }

    #[test]
    fn download_shaping_redirects_ingress_to_the_ifb() {
        let mut a = args("eth1", "800kbit");
        a.down = Some("2.1mbit".into());
        a.ifb = Some("ifb0".into());
        let p = ShapePlan::from_args(&a).unwrap();
        let s = p.script();
        assert!(s.contains("qdisc add dev eth1 handle ffff: ingress"));
        assert!(s.contains("action mirred egress redirect dev ifb0"));
        assert!(s.contains("class add dev ifb0 parent 1: classid 1:1 htb rate 1995000bit"));
        assert!(s.contains("ip link add ifb0 type ifb"));
    }

    #[test]
    fn bad_arguments_are_refused_before_anything_runs() {
        let mut a = args("eth1", "0kbit");
        assert!(ShapePlan::from_args(&a)
            .unwrap_err()
            .to_string()
            .contains("--up"));
        a.up = "1mbit".into();
        a.queue = 0;
        assert!(format!("{:#}", ShapePlan::from_args(&a).unwrap_err()).contains("--queue 0"));
        let a = args("this-name-is-far-too-long", "1mbit");
        assert!(format!("{:#}", ShapePlan::from_args(&a).unwrap_err()).contains("not valid"));
    }

    #[test]
    fn class_text_is_parsed() {
        let text = "class htb 1:1 root rate 760Kbit ceil 760Kbit burst 1599b cburst 1599b \n \
Sent 86 bytes 1 pkt (dropped 0, overlimits 0 requeues 0) \n backlog 0b 0p requeues 0\n\n\
class htb 1:20 parent 1:1 leaf 20: prio 1 rate 700Kbit ceil 760Kbit burst 1599b cburst 1599b \n \
Sent 9086 bytes 12 pkt (dropped 3, overlimits 4 requeues 0) \n backlog 1514b 1p requeues 0\n";
        let c = parse_class_text("eth1", text);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].parent, "root");
        assert_eq!(c[1].role, "bulk");
        assert_eq!(c[1].prio, Some(1));
        assert_eq!((c[1].sent_bytes, c[1].packets, c[1].drops), (9086, 12, 3));
        assert_eq!((c[1].backlog_bytes, c[1].backlog_packets), (1514, 1));
        assert_eq!(c[1].rate, "700Kbit");
    }
}

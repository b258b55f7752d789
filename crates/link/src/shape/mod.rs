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
//! ## Never destroy what we did not install
//!
//! `apply` and `clear` go through one path ([`transaction`]): **snapshot** every device they
//! may touch (qdiscs, classes and filters as `tc -j` shows them, [`snapshot::DeviceConfig`]),
//! decide who owns each part (the kernel's default, netsched — equal to the record
//! [`state::Installed`] kept after the last apply — or someone else), **change** only parts
//! the kernel or netsched own (someone else's only with `--replace`), **verify** the result,
//! and on any failure **restore** — re-run netsched's recorded lines, or delete what was added
//! so the kernel default returns — then snapshot again and compare with the first snapshot.
//! The error says truthfully whether the comparison matched and, if not, what differs.
//! `clear` removes only parts still equal to netsched's record, and never touches a device
//! netsched did not shape. `--ifb` must name an IFB device (`ip -d -j link show`: kind `ifb`).
//!
//! Cost: 2 × 11 u32 filters, tried in order by the kernel per packet (a few dozen compares).

pub mod error;
pub mod show;
pub mod snapshot;
pub mod state;
pub mod tc;
pub mod tc_error;

pub use error::{PlanError, Restore, ShapeError, StateError};
pub use show::{parse_class_text, show, ClassState, QdiscState, ShapeState};
pub use tc::{LinkInfo, Target};
pub use tc_error::TcError;

use snapshot::{DeviceConfig, Owner, Part};
use state::{IfbRecord, Installed};
use std::fmt::Write as _;

/// Lowest and highest line rate `shape` accepts, bits/s (tc(8) cannot shape below one byte per
/// second; 400 Gbit/s is above any link HTB shapes in software).
pub const MIN_RATE: u64 = 8;
pub const MAX_RATE: u64 = 400_000_000_000;
/// Most packets a pfifo of ours may hold.
pub const MAX_QUEUE: u32 = 100_000;

/// Rate as tc reads it (whole bits per second, `bit` unit — exact, no rounding surprises).
pub fn tc_rate(bps: u64) -> String {
    format!("{bps}bit")
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
    /// A plan for `dev` shaped at `up_bps` (and, with `down = Some((ifb, bps))`, its ingress
    /// through `ifb`), checked: names, rates, queue lengths, headroom.
    pub fn new(
        dev: &str,
        up_bps: u64,
        down: Option<(&str, u64)>,
        queue: u32,
        ack_queue: u32,
        headroom_pct: f64,
        ack_priority: bool,
    ) -> Result<Self, PlanError> {
        validate_ifname("--dev", dev)?;
        if !(0.0..=50.0).contains(&headroom_pct) {
            return Err(PlanError::Headroom(headroom_pct));
        }
        for (flag, value) in [("--queue-limit", queue), ("--ack-queue-limit", ack_queue)] {
            if value == 0 || value > MAX_QUEUE {
                return Err(PlanError::Queue {
                    flag,
                    value,
                    max: MAX_QUEUE,
                });
            }
        }
        let tree = |dev: &str, bps: u64| TreePlan {
            dev: dev.to_string(),
            line_bps: bps,
            headroom_pct,
            queue,
            ack_queue,
            ack_priority,
        };
        let down = match down {
            Some((ifb, bps)) => {
                validate_ifname("--ifb", ifb)?;
                if ifb == dev {
                    return Err(PlanError::IfbIsDev(ifb.to_string()));
                }
                Some(tree(ifb, bps))
            }
            None => None,
        };
        let p = Self {
            up: tree(dev, up_bps),
            down,
            ingress_dev: dev.to_string(),
        };
        for (flag, t) in [("--up", Some(&p.up)), ("--down", p.down.as_ref())] {
            if let Some(t) = t {
                if !(MIN_RATE..=MAX_RATE).contains(&t.line_bps) || t.shaped_bps() < MIN_RATE {
                    return Err(PlanError::Rate {
                        flag,
                        line_bps: t.line_bps,
                        min: MIN_RATE,
                        max: MAX_RATE,
                    });
                }
            }
        }
        Ok(p)
    }

    /// The tc batch lines (one command each, as `tc -batch` reads them).
    pub fn batch_lines(&self) -> Vec<String> {
        let mut out = self.up_lines();
        out.extend(self.ingress_lines());
        out.extend(self.down_lines());
        out
    }

    fn up_lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.up.batch(&mut out);
        out
    }

    /// Every packet arriving on the uplink goes to the IFB's egress, where it is shaped.
    fn ingress_lines(&self) -> Vec<String> {
        let Some(down) = &self.down else {
            return Vec::new();
        };
        let d = &self.ingress_dev;
        vec![
            format!("qdisc add dev {d} handle ffff: ingress"),
            format!(
                "filter add dev {d} parent ffff: protocol all prio 1 u32 match u32 0 0 \
                 action mirred egress redirect dev {}",
                down.dev
            ),
        ]
    }

    fn down_lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(down) = &self.down {
            down.batch(&mut out);
        }
        out
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

fn validate_ifname(flag: &'static str, name: &str) -> Result<(), PlanError> {
    if name.is_empty()
        || name.len() > 15
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c))
    {
        return Err(PlanError::IfName {
            flag,
            name: name.to_string(),
        });
    }
    Ok(())
}

/// The lines that rebuild each part netsched owns, kept in the record.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PartLines {
    pub dev_egress: Vec<String>,
    pub dev_ingress: Vec<String>,
    pub ifb_egress: Vec<String>,
}

/// What `apply` did.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    /// Someone else's configuration discarded with `--replace` (it is not restored by clear).
    pub replaced: Vec<String>,
}

/// What `clear` did.
#[derive(Debug, Clone, PartialEq)]
pub struct Cleared {
    /// Parts removed, e.g. `eth1 egress [htb 1: root, ...]`.
    pub removed: Vec<String>,
    /// Whether the IFB device `apply` had created was deleted.
    pub ifb_deleted: Option<String>,
    /// What `--replace` had discarded at apply time (gone for good).
    pub replaced: Option<String>,
}

impl std::fmt::Display for Cleared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.removed.is_empty() && self.ifb_deleted.is_none() {
            return write!(f, "nothing installed by netsched shape: nothing changed");
        }
        write!(f, "removed {}", self.removed.join("; "))?;
        if let Some(i) = &self.ifb_deleted {
            write!(f, "; deleted IFB device {i}")?;
        }
        if let Some(r) = &self.replaced {
            write!(
                f,
                "; the configuration apply --replace discarded ({r}) is not restored"
            )?;
        }
        Ok(())
    }
}

/// One part of one device: what the transaction does with it.
#[derive(Debug, Clone, PartialEq, Eq, Copy)]
enum Side {
    Egress,
    Ingress,
}

impl Side {
    fn of(self, d: &DeviceConfig) -> &Part {
        match self {
            Side::Egress => &d.egress,
            Side::Ingress => &d.ingress,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Side::Egress => "egress",
            Side::Ingress => "ingress",
        }
    }
    /// Delete the whole part (ignoring "nothing to delete").
    fn delete(self, t: &Target, dev: &str, d: &DeviceConfig) {
        match self {
            Side::Egress => {
                let _ = t.run("tc", &["qdisc", "del", "dev", dev, "root"], None);
            }
            Side::Ingress => {
                let kind = if d
                    .ingress
                    .qdiscs
                    .iter()
                    .any(|q| q.get("kind").and_then(|k| k.as_str()) == Some("clsact"))
                {
                    "clsact"
                } else {
                    "ingress"
                };
                let _ = t.run("tc", &["qdisc", "del", "dev", dev, kind], None);
            }
        }
    }
}

/// A part the transaction changes: device, side, who owned it before, and the lines that
/// rebuild it if netsched did.
#[derive(Debug, Clone)]
struct Touched {
    dev: String,
    side: Side,
    owner: Owner,
    rebuild: Vec<String>,
}

fn owner_of(now: &Part, recorded: Option<&Part>) -> Owner {
    if now.is_kernel_default() {
        Owner::Kernel
    } else if recorded == Some(now) {
        Owner::Netsched
    } else {
        Owner::Foreign
    }
}

fn find<'a>(all: &'a [DeviceConfig], dev: &str) -> &'a DeviceConfig {
    all.iter()
        .find(|d| d.dev == dev)
        .expect("every touched device was captured")
}

fn capture_all(t: &Target, devs: &[String]) -> Result<Vec<DeviceConfig>, ShapeError> {
    devs.iter().map(|d| DeviceConfig::capture(t, d)).collect()
}

/// Undo log of link-level changes (IFB creation, bringing it up).
#[derive(Debug, Default)]
struct LinkUndo {
    created: Option<String>,
    set_up: Option<String>,
}

/// The one path of `apply` and `clear`: `change` runs after `before` was recorded and the
/// touched parts were judged; on error every touched part is put back (`restore`), the devices
/// are recorded again and compared with `before`, and the error says what could not be
/// restored.
fn transaction<T>(
    t: &Target,
    devs: &[String],
    before: &[DeviceConfig],
    touched: &[Touched],
    undo: &mut LinkUndo,
    change: impl FnOnce(&mut LinkUndo) -> Result<T, ShapeError>,
) -> Result<T, ShapeError> {
    let e = match change(undo) {
        Ok(v) => return Ok(v),
        Err(e) => e,
    };
    // Restore: clear each touched part, rebuild the ones netsched owned.
    let mut rebuild = Vec::new();
    for p in touched {
        let now = DeviceConfig::capture(t, &p.dev).unwrap_or_default();
        if now.exists && !p.side.of(&now).is_kernel_default() {
            p.side.delete(t, &p.dev, &now);
        }
        if p.owner == Owner::Netsched {
            rebuild.extend(p.rebuild.iter().cloned());
        }
    }
    let rebuilt = t.batch(&rebuild);
    if let Some(dev) = &undo.created {
        let _ = t.run("ip", &["link", "del", dev], None);
    } else if let Some(dev) = &undo.set_up {
        let _ = t.run("ip", &["link", "set", dev, "down"], None);
    }
    // Verify the restore: the same record as before?
    let rolled_back = |restore| ShapeError::RolledBack {
        restore,
        source: Box::new(e),
    };
    let after = match capture_all(t, devs) {
        Ok(a) => a,
        Err(c) => return Err(rolled_back(Restore::Unchecked(c.to_string()))),
    };
    let mut differs = Vec::new();
    for (b, a) in before.iter().zip(&after) {
        if b.exists != a.exists {
            differs.push(format!(
                "{} {}",
                b.dev,
                if b.exists {
                    "was deleted"
                } else {
                    "was left behind"
                }
            ));
            continue;
        }
        if b.up != a.up {
            differs.push(format!(
                "{} is {} (was {})",
                b.dev,
                if a.up { "up" } else { "down" },
                if b.up { "up" } else { "down" }
            ));
        }
        for side in [Side::Egress, Side::Ingress] {
            if let Some(d) = side.of(b).difference(side.of(a)) {
                let why = touched
                    .iter()
                    .find(|p| p.dev == b.dev && p.side == side && p.owner == Owner::Foreign)
                    .map(|_| {
                        " (not installed by netsched: --replace discarded it, it cannot be rebuilt)"
                    })
                    .unwrap_or("");
                differs.push(format!("{} {}: {d}{why}", b.dev, side.name()));
            }
        }
    }
    if let Err(r) = rebuilt {
        differs.push(format!("re-running netsched's previous lines failed: {r}"));
    }
    Err(rolled_back(if differs.is_empty() {
        Restore::Verified {
            ns: t.ns_suffix(),
            devs: devs.to_vec(),
        }
    } else {
        Restore::Incomplete {
            ns: t.ns_suffix(),
            differs,
        }
    }))
}

/// What `apply` found before changing anything: the device, the record of an earlier apply,
/// the devices it touches and their configuration now.
struct Found {
    link: LinkInfo,
    cookie: u64,
    inode: u64,
    rec: Option<Installed>,
    /// The IFB device the plan names, if it exists.
    ifb_link: Option<LinkInfo>,
    new_ifb: Option<String>,
    old_ifb: Option<IfbRecord>,
    /// The shaped device, the plan's IFB, and an old IFB apply had created, in that order.
    devs: Vec<String>,
    before: Vec<DeviceConfig>,
}

/// Check the plan against the target and record what is there (changes nothing).
fn find_current(t: &Target, plan: &ShapePlan) -> Result<Found, ShapeError> {
    if plan.up.dev != t.dev || plan.ingress_dev != t.dev {
        return Err(ShapeError::PlanTarget {
            plan_dev: plan.up.dev.clone(),
            target_dev: t.dev.clone(),
        });
    }
    let Some(link) = t.link(&t.dev)? else {
        return Err(ShapeError::NoSuchInterface {
            dev: t.dev.clone(),
            ns: t.ns_suffix(),
        });
    };
    let (cookie, inode) = t.netns_id()?;
    let rec = state::load(t, cookie, link.ifindex)?;
    let ifb_link = match &plan.down {
        Some(d) => t.link(&d.dev)?,
        None => None,
    };
    if let (Some(d), Some(l)) = (&plan.down, &ifb_link) {
        if l.kind != "ifb" {
            return Err(ShapeError::NotIfb {
                dev: d.dev.clone(),
                kind: l.kind.clone(),
            });
        }
    }
    let new_ifb = plan.down.as_ref().map(|d| d.dev.clone());
    let old_ifb = rec.as_ref().and_then(|r| r.ifb.clone());
    let mut devs = vec![t.dev.clone()];
    devs.extend(new_ifb.iter().cloned());
    if let Some(o) = &old_ifb {
        if Some(&o.dev) != new_ifb.as_ref() && t.link(&o.dev)?.map(|l| l.ifindex) == Some(o.ifindex)
        {
            devs.push(o.dev.clone());
        }
    }
    let before = capture_all(t, &devs)?;
    Ok(Found {
        link,
        cookie,
        inode,
        rec,
        ifb_link,
        new_ifb,
        old_ifb,
        devs,
        before,
    })
}

/// Judge every part this apply changes: who owns it now, and the lines that rebuild it.
fn judge_parts(t: &Target, plan: &ShapePlan, f: &Found) -> Vec<Touched> {
    let rec = f.rec.as_ref();
    let lines = rec.map(|r| r.lines_by_part()).unwrap_or_default();
    let dev_now = find(&f.before, &t.dev);
    let mut touched = vec![Touched {
        dev: t.dev.clone(),
        side: Side::Egress,
        owner: owner_of(&dev_now.egress, rec.map(|r| &r.dev_egress)),
        rebuild: lines.dev_egress.clone(),
    }];
    let rec_ingress = rec.and_then(|r| r.dev_ingress.as_ref());
    let ingress_owner = owner_of(&dev_now.ingress, rec_ingress);
    if plan.down.is_some() || (rec_ingress.is_some() && ingress_owner == Owner::Netsched) {
        touched.push(Touched {
            dev: t.dev.clone(),
            side: Side::Ingress,
            owner: ingress_owner,
            rebuild: lines.dev_ingress.clone(),
        });
    }
    for dev in f.devs.iter().skip(1) {
        let was_ours = f.old_ifb.as_ref().is_some_and(|o| &o.dev == dev);
        let owner = owner_of(
            &find(&f.before, dev).egress,
            if was_ours {
                rec.and_then(|r| r.ifb_egress.as_ref())
            } else {
                None
            },
        );
        // An old IFB that is no longer ours is left alone.
        if Some(dev) != f.new_ifb.as_ref() && owner != Owner::Netsched {
            continue;
        }
        touched.push(Touched {
            dev: dev.clone(),
            side: Side::Egress,
            owner,
            rebuild: if was_ours {
                lines.ifb_egress.clone()
            } else {
                Vec::new()
            },
        });
    }
    touched
}

/// Install `plan` on `t` (`plan.up.dev` must be `t.dev`). Refuses, before changing anything,
/// to discard a configuration netsched did not install unless `replace`; on failure restores
/// the previous configuration and says whether that succeeded.
pub fn apply(t: &Target, plan: &ShapePlan, replace: bool) -> Result<Applied, ShapeError> {
    let found = find_current(t, plan)?;
    let touched = judge_parts(t, plan, &found);
    let foreign: Vec<String> = touched
        .iter()
        .filter(|p| p.owner == Owner::Foreign)
        .map(|p| {
            format!(
                "{} {} [{}]",
                p.dev,
                p.side.name(),
                p.side.of(find(&found.before, &p.dev)).summary()
            )
        })
        .collect();
    if !foreign.is_empty() && !replace {
        return Err(ShapeError::Foreign {
            dev: t.dev.clone(),
            ns: t.ns_suffix(),
            parts: foreign,
        });
    }
    let mut undo = LinkUndo::default();
    transaction(t, &found.devs, &found.before, &touched, &mut undo, |undo| {
        install(t, plan, &found, &touched, undo)?;
        let (after, parts) = verify_installed(t, plan, &found.devs)?;
        record_installed(t, plan, &found, &after, parts, undo, &foreign)?;
        if let Some(o) = &found.old_ifb {
            // Remove an old IFB that apply had created and this plan no longer uses.
            if Some(&o.dev) != found.new_ifb.as_ref() && o.created && found.devs.contains(&o.dev) {
                let _ = t.run("ip", &["link", "del", &o.dev], None);
            }
        }
        Ok(Applied {
            replaced: foreign.clone(),
        })
    })
}

/// The change itself: create and raise the IFB device if needed, delete the parts being
/// replaced, and run the plan's tc batch.
fn install(
    t: &Target,
    plan: &ShapePlan,
    f: &Found,
    touched: &[Touched],
    undo: &mut LinkUndo,
) -> Result<(), ShapeError> {
    let step = |step: String| move |source| ShapeError::Step { step, source };
    if let (Some(down), None) = (&plan.down, &f.ifb_link) {
        t.run("ip", &["link", "add", &down.dev, "type", "ifb"], None)
            .map_err(step(format!(
                "`ip link add {} type ifb` failed (is the ifb module loaded?)",
                down.dev
            )))?;
        undo.created = Some(down.dev.clone());
    }
    if let Some(down) = &plan.down {
        if !f.ifb_link.as_ref().is_some_and(|l| l.up) {
            t.run("ip", &["link", "set", &down.dev, "up"], None)
                .map_err(step(format!("`ip link set {} up` failed", down.dev)))?;
            undo.set_up = Some(down.dev.clone());
        }
    }
    for p in touched {
        if p.owner != Owner::Kernel {
            p.side.delete(t, &p.dev, find(&f.before, &p.dev));
        }
    }
    t.batch(&plan.batch_lines())?;
    Ok(())
}

/// Verify that the tree planned is what tc shows now: per planned part (device egress, then
/// with an IFB device ingress and the IFB's egress), the device and the part as read; and
/// every device as captured.
#[allow(clippy::type_complexity)]
fn verify_installed(
    t: &Target,
    plan: &ShapePlan,
    devs: &[String],
) -> Result<(Vec<DeviceConfig>, Vec<(DeviceConfig, Part)>), ShapeError> {
    let after = capture_all(t, devs)?;
    let mut expect = vec![(t.dev.clone(), Side::Egress)];
    if let Some(d) = &plan.down {
        expect.push((t.dev.clone(), Side::Ingress));
        expect.push((d.dev.clone(), Side::Egress));
    }
    let mut parts = Vec::new();
    for (dev, side) in &expect {
        let d = now_dev(t, &after, dev)?;
        let p = side.of(&d).clone();
        let want = match side {
            Side::Egress => "htb",
            Side::Ingress => "ingress",
        };
        if !p
            .qdiscs
            .iter()
            .any(|q| q.get("kind").and_then(|k| k.as_str()) == Some(want))
        {
            return Err(ShapeError::Verify {
                dev: dev.clone(),
                side: side.name(),
                shows: p.summary(),
                still: false,
            });
        }
        parts.push((d, p));
    }
    Ok((after, parts))
}

/// `dev` as captured in `after`, or captured now if it was not.
fn now_dev(t: &Target, after: &[DeviceConfig], dev: &str) -> Result<DeviceConfig, ShapeError> {
    after
        .iter()
        .find(|x| x.dev == dev)
        .cloned()
        .map_or_else(|| DeviceConfig::capture(t, dev), Ok)
}

/// Store the record of what this apply installed (what `clear` and the next apply read).
fn record_installed(
    t: &Target,
    plan: &ShapePlan,
    f: &Found,
    after: &[DeviceConfig],
    parts: Vec<(DeviceConfig, Part)>,
    undo: &LinkUndo,
    foreign: &[String],
) -> Result<(), ShapeError> {
    let mut ifb_rec = None;
    if let Some(d) = &plan.down {
        let ifb_now = now_dev(t, after, &d.dev)?;
        let prev = f.old_ifb.as_ref().filter(|o| o.dev == d.dev);
        ifb_rec = Some(IfbRecord {
            dev: d.dev.clone(),
            ifindex: ifb_now.ifindex,
            created: undo.created.is_some() || prev.is_some_and(|o| o.created),
            was_up: prev.map_or(f.ifb_link.as_ref().is_some_and(|l| l.up), |o| o.was_up),
        });
    }
    let record = Installed {
        netns_cookie: f.cookie,
        netns_inode: f.inode,
        dev: t.dev.clone(),
        ifindex: f.link.ifindex,
        lines: PartLines {
            dev_egress: plan.up_lines(),
            dev_ingress: plan.ingress_lines(),
            ifb_egress: plan.down_lines(),
        }
        .into_lines(),
        dev_egress: parts[0].1.clone(),
        dev_ingress: parts.get(1).map(|p| p.1.clone()),
        ifb: ifb_rec,
        ifb_egress: parts.get(2).map(|p| p.1.clone()),
        replaced: if foreign.is_empty() {
            f.rec.as_ref().and_then(|r| r.replaced.clone())
        } else {
            Some(foreign.join("; "))
        },
    };
    state::store(&record)?;
    Ok(())
}

impl PartLines {
    /// Flattened with a marker line per part (`# part`), as kept in the record.
    fn into_lines(self) -> Vec<String> {
        let mut out = vec!["# dev_egress".to_string()];
        out.extend(self.dev_egress);
        out.push("# dev_ingress".into());
        out.extend(self.dev_ingress);
        out.push("# ifb_egress".into());
        out.extend(self.ifb_egress);
        out
    }
}

impl Installed {
    /// The recorded lines, per part.
    fn lines_by_part(&self) -> PartLines {
        let mut p = PartLines::default();
        let mut cur: Option<&mut Vec<String>> = None;
        for l in &self.lines {
            match l.as_str() {
                "# dev_egress" => cur = Some(&mut p.dev_egress),
                "# dev_ingress" => cur = Some(&mut p.dev_ingress),
                "# ifb_egress" => cur = Some(&mut p.ifb_egress),
                _ => {
                    if let Some(c) = cur.as_mut() {
                        c.push(l.clone());
                    }
                }
            }
        }
        p
    }
}

/// Remove what `apply` installed on `t.dev` — only parts still exactly as apply left them —
/// and the IFB device if apply created it. A device netsched never shaped is not touched.
/// Parts changed since apply are left as they are, and the error names them.
pub fn clear(t: &Target) -> Result<Cleared, ShapeError> {
    let Some(link) = t.link(&t.dev)? else {
        return Err(ShapeError::NoSuchInterface {
            dev: t.dev.clone(),
            ns: t.ns_suffix(),
        });
    };
    let (cookie, _) = t.netns_id()?;
    let Some(rec) = state::load(t, cookie, link.ifindex)? else {
        return Ok(Cleared {
            removed: Vec::new(),
            ifb_deleted: None,
            replaced: None,
        });
    };
    let lines = rec.lines_by_part();
    let ifb = rec
        .ifb
        .clone()
        .filter(|i| matches!(t.link(&i.dev), Ok(Some(l)) if l.ifindex == i.ifindex));
    let mut devs = vec![t.dev.clone()];
    devs.extend(ifb.iter().map(|i| i.dev.clone()));
    let before = capture_all(t, &devs)?;
    let mut candidates = vec![(
        t.dev.clone(),
        Side::Egress,
        Some(&rec.dev_egress),
        lines.dev_egress.clone(),
    )];
    if rec.dev_ingress.is_some() {
        candidates.push((
            t.dev.clone(),
            Side::Ingress,
            rec.dev_ingress.as_ref(),
            lines.dev_ingress.clone(),
        ));
    }
    if let Some(i) = &ifb {
        candidates.push((
            i.dev.clone(),
            Side::Egress,
            rec.ifb_egress.as_ref(),
            lines.ifb_egress.clone(),
        ));
    }
    let mut touched = Vec::new();
    let mut left = Vec::new();
    for (dev, side, recorded, rebuild) in candidates {
        let now = side.of(find(&before, &dev));
        match owner_of(now, recorded) {
            Owner::Netsched => touched.push(Touched {
                dev,
                side,
                owner: Owner::Netsched,
                rebuild,
            }),
            Owner::Kernel => {}
            Owner::Foreign => left.push(format!(
                "{dev} {} [{}] (changed since netsched applied it)",
                side.name(),
                now.summary()
            )),
        }
    }
    // An IFB still referenced by a redirect someone changed is not deleted under it.
    let keep_ifb = !left.is_empty();
    let mut undo = LinkUndo::default();
    let cleared = transaction(t, &devs, &before, &touched, &mut undo, |_| {
        for p in &touched {
            p.side.delete(t, &p.dev, find(&before, &p.dev));
        }
        let after = capture_all(t, &devs)?;
        for p in &touched {
            let part = p.side.of(find(&after, &p.dev));
            if !part.is_kernel_default() {
                return Err(ShapeError::Verify {
                    dev: p.dev.clone(),
                    side: p.side.name(),
                    shows: part.summary(),
                    still: true,
                });
            }
        }
        let mut ifb_deleted = None;
        if let Some(i) = ifb.as_ref().filter(|i| i.created && !keep_ifb) {
            let d = find(&after, &i.dev);
            if d.egress.is_kernel_default() && d.ingress.is_kernel_default() {
                t.run("ip", &["link", "del", &i.dev], None)
                    .map_err(|source| ShapeError::Step {
                        step: format!("`ip link del {}`", i.dev),
                        source,
                    })?;
                ifb_deleted = Some(i.dev.clone());
            } else {
                left.push(format!(
                    "IFB device {} (it carries configuration netsched did not install)",
                    i.dev
                ));
            }
        }
        Ok(Cleared {
            removed: touched
                .iter()
                .map(|p| {
                    format!(
                        "{} {} [{}]",
                        p.dev,
                        p.side.name(),
                        p.side.of(find(&before, &p.dev)).summary()
                    )
                })
                .collect(),
            ifb_deleted,
            replaced: rec.replaced.clone(),
        })
    })?;
    // Nothing of the record is ours any more: removed, or changed by someone else.
    state::remove(cookie, &t.dev);
    if !left.is_empty() {
        return Err(ShapeError::LeftAsIs {
            dev: t.dev.clone(),
            ns: t.ns_suffix(),
            cleared: cleared.to_string(),
            left,
        });
    }
    Ok(cleared)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_lines_split_back_into_their_parts() {
        let p = ShapePlan::new(
            "eth1",
            1_000_000,
            Some(("ifb0", 2_000_000)),
            10,
            10,
            5.0,
            true,
        )
        .unwrap();
        let parts = PartLines {
            dev_egress: p.up_lines(),
            dev_ingress: p.ingress_lines(),
            ifb_egress: p.down_lines(),
        };
        let rec = Installed {
            netns_cookie: 1,
            netns_inode: 2,
            dev: "eth1".into(),
            ifindex: 3,
            lines: parts.clone().into_lines(),
            dev_egress: Part::default(),
            dev_ingress: None,
            ifb: None,
            ifb_egress: None,
            replaced: None,
        };
        assert_eq!(rec.lines_by_part(), parts);
        assert!(parts.dev_ingress[0].contains("ingress"));
        assert!(parts.ifb_egress.iter().all(|l| l.contains("dev ifb0")));
        assert!(parts.dev_egress.iter().all(|l| l.contains("dev eth1")));
    }

    #[test]
    fn plans_out_of_bounds_are_refused() {
        assert!(ShapePlan::new("eth1", 4, None, 10, 10, 5.0, true).is_err());
        assert!(ShapePlan::new("eth1", 1_000_000, None, 0, 10, 5.0, true).is_err());
        assert!(ShapePlan::new("eth1", 1_000_000, None, 10, 10, 51.0, true).is_err());
        assert!(ShapePlan::new("eth1", 1_000_000, Some(("eth1", 1)), 10, 10, 5.0, true).is_err());
    }
}

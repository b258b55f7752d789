//! The switch's configuration file (TOML): the uplink, the discipline, the forwarding budget
//! and one `[[port]]` table per guest interface with its tier, weight and latency bound.
//!
//! ```toml
//! uplink = "up0"
//! discipline = "delay_constrained"  # strict_priority | delay_constrained | delay_wall_clock
//!                                   # | drr | wf2q_plus | edf
//! packet_rate = 20000               # forwarding budget, packets/s (or `rate = "100mbit"`)
//! batch = 238                       # packets per round (delay_constrained; P2 §3.2.1)
//!
//! [[port]]
//! dev = "vg0"
//! tier = 1          # 1 = most important (P2 Table 4: High 1, Middle 2, Low 3)
//! weight = 1        # DRR quantum multiplier, WF2Q+ weight
//! bound = "30ms"    # latency bound: bitmap length, wall-clock bound, EDF deadline
//! ```
//!
//! Every error names the file, the key and the value. Durations and rates use the project's
//! grammar (`netsched_core::units`, tc(8) units: `bit` = bits/s, `bps` = bytes/s).

use crate::config_error::{ConfigError, ConfigProblem, NeedsBudget};
use netsched_core::qdisc::delay::DelayInterfaceConfig;
use netsched_core::qdisc::drr::DrrClassConfig;
use netsched_core::qdisc::edf::EdfClassConfig;
use netsched_core::qdisc::prio::BandConfig;
use netsched_core::qdisc::wf2q::Wf2qClassConfig;
use netsched_core::qdisc::QdiscConfig;
use netsched_core::units::{serde_duration, serde_rate};
use netsched_core::{Nanos, MS, SEC};
use netsched_sys::{PortBackend, PortOptions, RingConfig};
use serde::Deserialize;
use std::path::Path;

/// Xen netback's per-vif queue, `XENVIF_QUEUE_LENGTH` = 32 packets (Linux
/// `drivers/net/xen-netback/common.h`, 3.x series; the queue P2 §3.2 schedules across).
pub const XENVIF_QUEUE_LENGTH: usize = 32;
/// P2 §3.2.1: netback moves up to 238 packets per round.
pub const NETBACK_ROUND_BATCH: usize = 238;
/// Most guest ports (each costs a socket and a class; the round start is O(ports)).
pub const MAX_PORTS: usize = 1024;
/// Largest vif queue, packets.
pub const MAX_QUEUE: usize = 65_536;
/// Largest MAC learning table.
pub const MAX_MAC_TABLE: usize = 1 << 20;
/// Largest configuration file read, bytes.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// P2 §3.3.2: bitmap lengths proportional to the bounds, 30/60/100 ms → 3/6/10 bits, i.e.
/// one bit per 10 ms; the default when `bitmap_len` is not given.
pub const BOUND_PER_BIT: Nanos = 10 * MS;

/// Which discipline serves the uplink across guest ports (one class per port).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Discipline {
    /// Strict priority by tier (ties: config order) — the Xen-like baseline.
    StrictPriority,
    /// P2's delay-constrained priority with delay bitmaps.
    DelayConstrained,
    /// The same with promotion by the head packet's age (`bound`).
    DelayWallClock,
    /// Deficit round robin, quantum = `weight` × 1514 bytes.
    Drr,
    /// WF2Q+ with the port's `weight` (`wf2q` is the old spelling, read with a warning).
    #[serde(rename = "wf2q_plus", alias = "wf2q")]
    Wf2q,
    /// Earliest deadline first, deadline = the port's `bound`.
    Edf,
}

impl Discipline {
    pub fn as_str(self) -> &'static str {
        match self {
            Discipline::StrictPriority => "strict_priority",
            Discipline::DelayConstrained => "delay_constrained",
            Discipline::DelayWallClock => "delay_wall_clock",
            Discipline::Drr => "drr",
            Discipline::Wf2q => "wf2q_plus",
            Discipline::Edf => "edf",
        }
    }
}

/// Old spellings in a configuration file that still work for one release, each as a warning
/// naming the new one (docs/cli.md, "Renames").
pub fn old_spellings(table: &toml::Table) -> Vec<String> {
    let mut out = Vec::new();
    if table.get("discipline").and_then(|v| v.as_str()) == Some("wf2q") {
        out.push("discipline = \"wf2q\" is renamed \"wf2q_plus\"".to_string());
    }
    if table.contains_key("queue") {
        out.push("queue (packets of a vif queue) is renamed queue_limit".to_string());
    }
    let ports = table.get("port").and_then(|p| p.as_array());
    for (i, p) in ports.into_iter().flatten().enumerate() {
        if p.get("queue").is_some() {
            out.push(format!("port[{i}].queue is renamed queue_limit"));
        }
    }
    out
}

fn default_tier() -> u32 {
    1
}
fn default_weight() -> u32 {
    1
}
fn default_bound() -> Nanos {
    100 * MS
}
fn default_slice() -> Nanos {
    10 * MS
}
fn default_batch() -> usize {
    NETBACK_ROUND_BATCH
}
fn default_queue() -> usize {
    XENVIF_QUEUE_LENGTH
}
fn default_mac_table() -> usize {
    4096
}
/// Default of [`SwitchConfig::busy_poll`]: off. A window shorter than the traffic's gaps only
/// spins (200 µs, nfq's default, did not measurably lower the switch's added latency), and
/// spinning costs a core (docs/vswitch.md, "Design notes").
pub const DEFAULT_BUSY_POLL: Nanos = 0;
/// Longest `busy_poll` window. Beyond the gaps of light traffic (a probe every 10–100 ms) the
/// thread never sleeps, which is what a core given to the switch wants
/// (docs/vswitch.md, "Design notes": the added latency is the wake-up of a sleeping thread).
pub const MAX_BUSY_POLL: Nanos = SEC;
/// Longest [`SwitchConfig::budget_catch_up`].
pub const MAX_BUDGET_CATCH_UP: Nanos = SEC;
fn default_busy_poll() -> Nanos {
    DEFAULT_BUSY_POLL
}
/// Most ring memory of all ports together (`tpacket` rings, `xdp` UMEM): 1 GiB.
pub const MAX_RING_BYTES: usize = 1 << 30;
/// Default of [`SwitchConfig::ring_frames`]: 1024 (2 MiB per port, 38 MiB for 18 ports and the
/// uplink).
pub const DEFAULT_RING_FRAMES: usize = 1024;
fn default_ring_frames() -> usize {
    DEFAULT_RING_FRAMES
}
fn serde_backend<'de, D: serde::Deserializer<'de>>(d: D) -> Result<PortBackend, D::Error> {
    let s = String::deserialize(d)?;
    s.parse().map_err(serde::de::Error::custom)
}

/// One guest port.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortConfig {
    /// Interface name (veth end or TAP device) in the switch's namespace.
    pub dev: String,
    /// 1 = most important.
    #[serde(default = "default_tier")]
    pub tier: u32,
    #[serde(default = "default_weight")]
    pub weight: u32,
    #[serde(default = "default_bound", deserialize_with = "serde_duration")]
    pub bound: Nanos,
    /// Delay bitmap length; default `bound / 10ms` (at least 2).
    #[serde(default)]
    pub bitmap_len: Option<u32>,
    /// Most packets in this port's vif queue; default the file's `queue_limit`. `queue` is
    /// its old spelling, read with a warning ([`old_spellings`]).
    #[serde(default, alias = "queue")]
    pub queue_limit: Option<usize>,
}

impl PortConfig {
    pub fn bitmap_len(&self) -> u32 {
        self.bitmap_len
            .unwrap_or_else(|| (self.bound / BOUND_PER_BIT).clamp(2, 63) as u32)
    }
}

fn opt_rate<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    serde_rate(d).map(Some)
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwitchConfig {
    pub uplink: String,
    pub discipline: Discipline,
    /// Forwarding budget in packets/s (dom0's CPU); at most one of this and `rate`.
    #[serde(default)]
    pub packet_rate: Option<u64>,
    /// Forwarding budget in bits/s on the uplink.
    #[serde(default, deserialize_with = "opt_rate")]
    pub rate: Option<u64>,
    /// Share of time the budget is off (dom0's CPU taken by other work, P2 §4's MD5 load),
    /// 0..0.95; the budget alternates on and off periods of mean `budget_slice` each at 0.5
    /// (on = slice·(1−busy)/0.5, off = slice·busy/0.5, as the simulator's model).
    #[serde(default)]
    pub budget_busy: f64,
    #[serde(default = "default_slice", deserialize_with = "serde_duration")]
    pub budget_slice: Nanos,
    /// Budget a late wake-up may make up, beyond the 1 ms of credit every wake-up keeps, when
    /// frames waited for it (0..=[`MAX_BUDGET_CATCH_UP`], default 0). The budget models a
    /// backend's CPU (dom0's in P2): with it, a host that runs the switch late (another
    /// process, a hypervisor's steal) delays the waiting frames but does not take their
    /// capacity, which would raise the load the discipline sees. An idle switch earns no credit.
    #[serde(default, deserialize_with = "serde_duration")]
    pub budget_catch_up: Nanos,
    #[serde(default = "default_batch")]
    pub batch: usize,
    /// Most packets in a vif queue (Xen's `XENVIF_QUEUE_LENGTH`), for every port that does
    /// not set its own. `queue` is its old spelling, read with a warning ([`old_spellings`]).
    #[serde(default = "default_queue", alias = "queue")]
    pub queue_limit: usize,
    /// Most learned MAC addresses (return path); new addresses beyond it are not learned.
    #[serde(default = "default_mac_table")]
    pub mac_table: usize,
    /// Adaptive polling: for this long after the last frame the switch looks for the next one
    /// without sleeping (each wake-up from `poll` costs tens of µs of added latency per
    /// crossing), then it blocks again. 0 = always sleep; at most [`MAX_BUSY_POLL`]. A window
    /// longer than the gap between packets keeps the thread awake on a dedicated core.
    #[serde(default = "default_busy_poll", deserialize_with = "serde_duration")]
    pub busy_poll: Nanos,
    /// Port backend: `auto` (`xdp`, else the `TPACKET_V2` ring, else `packet`, with the
    /// reasons printed), `xdp` (AF_XDP), `tpacket`, `tpacket_v3` (TPACKET_V3 blocks, 1 ms retire
    /// timer) or `packet` (`recvmmsg`/`sendmmsg`).
    #[serde(rename = "port_backend", default, deserialize_with = "serde_backend")]
    pub port_backend: PortBackend,
    /// Receive ring frames per port (2 KiB each, 64..=65536, rounded up to 8); every port and
    /// the uplink get one ring, so memory is `(ports + 1) × ring_frames × 2 KiB`.
    #[serde(default = "default_ring_frames")]
    pub ring_frames: usize,
    #[serde(rename = "port")]
    pub ports: Vec<PortConfig>,
    /// The `CLOCK_MONOTONIC` time (ns) from which the budget's on/off periods are counted, on
    /// period first, and the switch's trace times; `None`: the switch's start. Not a file key:
    /// a program that offers traffic against the budget's phase sets it (the lab's real
    /// vm-delay run starts its traffic at an on period's start, as the simulator does, and
    /// replays the trace on the same phase).
    #[serde(skip)]
    pub budget_origin: Option<Nanos>,
    /// Account for each frame's time stage by stage ([`crate::latency`]); `--trace-latency`,
    /// not a file key (a measurement, not a setting to keep).
    #[serde(skip)]
    pub trace_latency: bool,
}

impl SwitchConfig {
    /// How every port is opened.
    pub fn port_options(&self) -> PortOptions {
        PortOptions {
            backend: self.port_backend,
            ring: RingConfig {
                rx_frames: self.ring_frames,
                tx_frames: 0,
            },
        }
    }

    /// Read and check `path` (at most [`MAX_CONFIG_BYTES`]).
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        // A regular file only (`/dev/zero` or a FIFO would never end), bounded, UTF-8.
        let text = netsched_util::read::read_text(path, MAX_CONFIG_BYTES, "switch configuration")
            .map_err(|e| ConfigError::Read(format!("{e:#}")))?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parse and check `text`; `origin` (a file name) prefixes every error.
    pub fn parse(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let cfg: SwitchConfig = toml::from_str(text).map_err(|source| ConfigError::Toml {
            file: origin.to_string(),
            source,
        })?;
        if let Ok(table) = text.parse::<toml::Table>() {
            for w in old_spellings(&table) {
                eprintln!("netsched: warning: {origin}: {w}");
            }
        }
        cfg.check().map_err(|problem| ConfigError::Invalid {
            file: origin.to_string(),
            problem,
        })?;
        Ok(cfg)
    }

    /// Bounds and consistency; the error names the key and its value.
    pub fn check(&self) -> Result<(), ConfigProblem> {
        if self.ports.is_empty() {
            return Err(ConfigProblem::NoPorts);
        }
        if self.ports.len() > MAX_PORTS {
            return Err(ConfigProblem::TooManyPorts {
                count: self.ports.len(),
                max: MAX_PORTS,
            });
        }
        self.check_budget()?;
        count("batch", self.batch as u64, 1, 1 << 20)?;
        count("queue_limit", self.queue_limit as u64, 1, MAX_QUEUE as u64)?;
        if self.port_backend != PortBackend::Packet {
            self.port_options()
                .ring
                .check("ring_frames", "tx ring")
                .map_err(ConfigProblem::Ring)?;
            // `xdp` (tried first by `auto`) maps a power of two of receive chunks plus its
            // transmit chunks per port: the larger of the two backends' needs.
            let per_port = match self.port_backend {
                PortBackend::Tpacket => self.ring_frames,
                _ => {
                    self.ring_frames.next_power_of_two() + netsched_sys::xdp_port::DEFAULT_TX_FRAMES
                }
            };
            let bytes = (self.ports.len() + 1) * per_port * netsched_sys::tpacket::RING_FRAME;
            if bytes > MAX_RING_BYTES {
                return Err(ConfigProblem::RingMemory {
                    frames: self.ring_frames,
                    ports: self.ports.len(),
                    mib: bytes >> 20,
                    max_mib: MAX_RING_BYTES >> 20,
                });
            }
        }
        count("mac_table", self.mac_table as u64, 1, MAX_MAC_TABLE as u64)?;
        check_ifname("uplink", &self.uplink)?;
        for (i, p) in self.ports.iter().enumerate() {
            self.check_port(i, p)?;
        }
        // The discipline itself refuses what it cannot build (names the class).
        self.qdisc()
            .build::<crate::frame::Frame>()
            .map_err(|source| ConfigProblem::Discipline {
                name: self.discipline.as_str(),
                source,
            })?;
        Ok(())
    }

    /// The forwarding budget's keys: `packet_rate`, `rate`, `budget_*` and `busy_poll`.
    fn check_budget(&self) -> Result<(), ConfigProblem> {
        let no_budget = self.packet_rate.is_none() && self.rate.is_none();
        if self.packet_rate.is_some() && self.rate.is_some() {
            return Err(ConfigProblem::TwoBudgets);
        }
        if let Some(r) = self.packet_rate {
            if !(1..=100_000_000).contains(&r) {
                return Err(ConfigProblem::Count {
                    key: "packet_rate".to_string(),
                    value: r,
                    min: 1,
                    max: 100_000_000,
                    unit: "packets/s",
                });
            }
        }
        if self.rate == Some(0) {
            return Err(ConfigProblem::ZeroRate);
        }
        if !(0.0..=0.95).contains(&self.budget_busy) {
            return Err(ConfigProblem::BusyShare {
                value: self.budget_busy,
                max: 0.95,
            });
        }
        if self.budget_busy > 0.0 && no_budget {
            return Err(ConfigProblem::NeedsBudget(NeedsBudget::Busy(
                self.budget_busy,
            )));
        }
        if self.budget_catch_up > MAX_BUDGET_CATCH_UP {
            return Err(ConfigProblem::CatchUp {
                value: self.budget_catch_up,
                max: MAX_BUDGET_CATCH_UP,
            });
        }
        if self.budget_catch_up > 0 && no_budget {
            return Err(ConfigProblem::NeedsBudget(NeedsBudget::CatchUp(
                self.budget_catch_up,
            )));
        }
        if !(MS / 10..=10 * 1000 * MS).contains(&self.budget_slice) {
            return Err(ConfigProblem::Duration {
                key: "budget_slice".to_string(),
                value: self.budget_slice,
                rule: "must be between 100us and 10s",
            });
        }
        if self.busy_poll > MAX_BUSY_POLL {
            return Err(ConfigProblem::Duration {
                key: "busy_poll".to_string(),
                value: self.busy_poll,
                rule: "must be between 0 (off) and 1s",
            });
        }
        Ok(())
    }

    /// `port[i]`: its device (a name, not the uplink, not another port's) and its values.
    fn check_port(&self, i: usize, p: &PortConfig) -> Result<(), ConfigProblem> {
        check_ifname(&format!("port[{i}].dev"), &p.dev)?;
        if p.dev == self.uplink {
            return Err(ConfigProblem::DevIsUplink {
                index: i,
                dev: p.dev.clone(),
            });
        }
        if let Some(j) = self.ports[..i].iter().position(|q| q.dev == p.dev) {
            return Err(ConfigProblem::DevTwice {
                index: i,
                dev: p.dev.clone(),
                first: j,
            });
        }
        count(&format!("port[{i}].tier"), p.tier.into(), 1, 1000)?;
        count(&format!("port[{i}].weight"), p.weight.into(), 1, 1000)?;
        if p.bound == 0 || p.bound > 60_000 * MS {
            return Err(ConfigProblem::Duration {
                key: format!("port[{i}].bound"),
                value: p.bound,
                rule: "must be above 0 and at most 60s",
            });
        }
        if let Some(b) = p.bitmap_len {
            count(&format!("port[{i}].bitmap_len"), b.into(), 2, 63)?;
        }
        if let Some(q) = p.queue_limit {
            count(
                &format!("port[{i}].queue_limit"),
                q as u64,
                1,
                MAX_QUEUE as u64,
            )?;
        }
        Ok(())
    }

    /// (on, off) lengths of the budget's periods in ns; `None` when always on.
    pub fn budget_periods(&self) -> Option<(Nanos, Nanos)> {
        (self.budget_busy > 0.0).then(|| {
            let s = self.budget_slice as f64;
            (
                (s * (1.0 - self.budget_busy) / 0.5) as Nanos,
                (s * self.budget_busy / 0.5) as Nanos,
            )
        })
    }

    pub fn port_queue(&self, i: usize) -> usize {
        self.ports[i].queue_limit.unwrap_or(self.queue_limit)
    }

    /// Class order: ports sorted by (tier, config order). `class_of[port]`.
    pub fn class_of(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.ports.len()).collect();
        order.sort_by_key(|&i| (self.ports[i].tier, i));
        let mut class_of = vec![0; order.len()];
        for (class, &port) in order.iter().enumerate() {
            class_of[port] = class;
        }
        class_of
    }

    /// The core discipline, one class per port in [`SwitchConfig::class_of`] order.
    pub fn qdisc(&self) -> QdiscConfig {
        let class_of = self.class_of();
        let mut by_class = vec![0; class_of.len()];
        for (port, &c) in class_of.iter().enumerate() {
            by_class[c] = port;
        }
        let ports = by_class
            .iter()
            .map(|&p| (&self.ports[p], self.port_queue(p)));
        match self.discipline {
            Discipline::StrictPriority => QdiscConfig::StrictPriority {
                bands: ports
                    .map(|(_, q)| BandConfig::with_limits(q, u64::MAX))
                    .collect(),
            },
            Discipline::DelayConstrained | Discipline::DelayWallClock => {
                QdiscConfig::DelayConstrained {
                    interfaces: ports
                        .map(|(p, q)| DelayInterfaceConfig {
                            priority: p.tier,
                            bitmap_len: p.bitmap_len(),
                            bound_ns: Some(p.bound),
                            queue_limit: q,
                        })
                        .collect(),
                    batch: self.batch,
                    wall_clock: self.discipline == Discipline::DelayWallClock,
                    literal_fig4: false,
                }
            }
            Discipline::Drr => QdiscConfig::Drr {
                classes: ports
                    .map(|(p, q)| DrrClassConfig::new(p.weight * 1514, q, u64::MAX))
                    .collect(),
            },
            Discipline::Wf2q => QdiscConfig::Wf2qPlus {
                classes: ports
                    .map(|(p, q)| Wf2qClassConfig::new(p.weight, q, u64::MAX))
                    .collect(),
            },
            Discipline::Edf => QdiscConfig::Edf {
                classes: ports
                    .map(|(p, q)| EdfClassConfig::new(p.bound / 1000, q, u64::MAX))
                    .collect(),
                drop_expired: false,
            },
        }
    }
}

/// `key = value` within `min..=max`.
fn count(key: &str, value: u64, min: u64, max: u64) -> Result<(), ConfigProblem> {
    if (min..=max).contains(&value) {
        return Ok(());
    }
    Err(ConfigProblem::Count {
        key: key.to_string(),
        value,
        min,
        max,
        unit: "",
    })
}

fn check_ifname(key: &str, name: &str) -> Result<(), ConfigProblem> {
    if name.is_empty() || name.len() > 15 || name.contains(['/', ' ', '\0']) {
        return Err(ConfigProblem::IfName {
            key: key.to_string(),
            name: name.to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str = r#"
uplink = "up0"
discipline = "delay_constrained"
packet_rate = 20000
[[port]]
dev = "vg0"
tier = 1
bound = "30ms"
[[port]]
dev = "vg1"
tier = 3
bound = "100ms"
[[port]]
dev = "vg2"
tier = 2
bound = "60ms"
"#;

    #[test]
    fn a_good_file_builds_one_class_per_port_in_tier_order() {
        let c = SwitchConfig::parse(OK, "sw.toml").unwrap();
        assert_eq!(c.class_of(), vec![0, 2, 1]);
        assert_eq!(c.port_queue(1), XENVIF_QUEUE_LENGTH);
        assert_eq!(c.ports[1].bitmap_len(), 10);
        match c.qdisc() {
            QdiscConfig::DelayConstrained {
                interfaces, batch, ..
            } => {
                assert_eq!(batch, NETBACK_ROUND_BATCH);
                let p: Vec<u32> = interfaces.iter().map(|i| i.priority).collect();
                assert_eq!(p, vec![1, 2, 3]);
                let b: Vec<u32> = interfaces.iter().map(|i| i.bitmap_len).collect();
                assert_eq!(b, vec![3, 6, 10]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn errors_name_the_file_the_key_and_the_value() {
        let cases = [
            (OK.replace("\"30ms\"", "\"30\""), "30"),
            (OK.replace("tier = 3", "tier = 0"), "port[1].tier = 0"),
            (OK.replace("tier = 3", "tire = 3"), "tire"),
            (OK.replace("\"vg2\"", "\"vg0\""), "port[2].dev = \"vg0\""),
            (
                OK.replace("packet_rate = 20000", "packet_rate = 0"),
                "packet_rate = 0",
            ),
            (
                OK.replace("packet_rate = 20000", "packet_rate = 1\nrate = \"1mbit\""),
                "both set",
            ),
            (OK.replace("delay_constrained", "fifo"), "fifo"),
            (
                OK.replace("packet_rate = 20000", "packet_rate = 9\nbudget_busy = 1.5"),
                "budget_busy = 1.5",
            ),
            (OK.replace("\"up0\"", "\"vg1\""), "is also the uplink"),
            (
                OK.replace("packet_rate = 20000", "packet_rate = 9\nbusy_poll = \"2s\""),
                "busy_poll = \"2s\"",
            ),
            (
                OK.replace(
                    "packet_rate = 20000",
                    "packet_rate = 9\nbudget_catch_up = \"2s\"",
                ),
                "budget_catch_up = \"2s\": must be at most 1s",
            ),
            (
                OK.replace("packet_rate = 20000", "budget_catch_up = \"10ms\""),
                "needs a budget",
            ),
        ];
        for (text, want) in cases {
            let e = format!("{:#}", SwitchConfig::parse(&text, "sw.toml").unwrap_err());
            assert!(e.starts_with("sw.toml"), "{e}");
            assert!(e.contains(want), "want {want:?} in: {e}");
        }
    }

    #[test]
    fn errors_are_typed_and_keep_their_texts_whole() {
        let e = SwitchConfig::parse(&OK.replace("tier = 3", "tier = 0"), "sw.toml").unwrap_err();
        match &e {
            ConfigError::Invalid {
                file,
                problem: ConfigProblem::Count { key, value: 0, .. },
            } => assert_eq!((file.as_str(), key.as_str()), ("sw.toml", "port[1].tier")),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            e.to_string(),
            "sw.toml: port[1].tier = 0: must be between 1 and 1000"
        );
        let text = OK.replace("packet_rate = 20000", "packet_rate = 0");
        assert_eq!(
            SwitchConfig::parse(&text, "sw.toml")
                .unwrap_err()
                .to_string(),
            "sw.toml: packet_rate = 0: must be between 1 and 100000000 packets/s"
        );
        let text = OK.replace("packet_rate = 20000", "budget_busy = 0.5");
        assert_eq!(
            SwitchConfig::parse(&text, "sw.toml")
                .unwrap_err()
                .to_string(),
            "sw.toml: budget_busy = 0.5: needs a budget (packet_rate or rate)"
        );
        let e = SwitchConfig::parse(&OK.replace("tier = 3", "tire = 3"), "sw.toml").unwrap_err();
        assert!(matches!(e, ConfigError::Toml { .. }), "{e:?}");
        let e = SwitchConfig::load(Path::new("/nonexistent/x.toml")).unwrap_err();
        assert!(matches!(e, ConfigError::Read(_)), "{e:?}");
    }

    #[test]
    fn a_polling_window_up_to_a_second_is_accepted() {
        let c = SwitchConfig::parse(
            &OK.replace("packet_rate = 20000", "packet_rate = 9\nbusy_poll = \"1s\""),
            "sw.toml",
        )
        .unwrap();
        assert_eq!(c.busy_poll, MAX_BUSY_POLL);
        assert_eq!(SwitchConfig::parse(OK, "sw.toml").unwrap().busy_poll, 0);
    }

    #[test]
    fn load_refuses_devices_and_missing_files_by_name() {
        let e = format!(
            "{:#}",
            SwitchConfig::load(Path::new("/dev/zero")).unwrap_err()
        );
        assert!(e.contains("/dev/zero"), "{e}");
        let e = format!(
            "{:#}",
            SwitchConfig::load(Path::new("/nonexistent/x.toml")).unwrap_err()
        );
        assert!(e.contains("/nonexistent/x.toml"), "{e}");
    }

    #[test]
    fn every_discipline_builds() {
        for d in [
            "strict_priority",
            "delay_constrained",
            "delay_wall_clock",
            "drr",
            "wf2q_plus",
            "edf",
        ] {
            let t = OK.replace("delay_constrained", d);
            let c = SwitchConfig::parse(&t, "x").unwrap();
            assert_eq!(c.discipline.as_str(), d);
        }
    }

    #[test]
    fn the_old_wf2q_spelling_still_reads_and_is_reported() {
        let t = OK.replace("delay_constrained", "wf2q");
        let c = SwitchConfig::parse(&t, "x").unwrap();
        assert_eq!(c.discipline, Discipline::Wf2q);
        let w = old_spellings(&t.parse().unwrap());
        assert!(w.len() == 1 && w[0].contains("\"wf2q_plus\""), "{w:?}");
        assert!(old_spellings(&OK.parse().unwrap()).is_empty());
    }

    /// `queue` (a vif queue's length) reads as `queue_limit`, with a warning; `queue_limit`
    /// without one.
    #[test]
    fn the_old_queue_spelling_still_reads_and_is_reported() {
        let new = OK.replace(
            "packet_rate = 20000\n",
            "packet_rate = 20000\nqueue_limit = 64\n",
        );
        assert_ne!(new, OK);
        let new = new.replacen("tier = 1", "tier = 1\nqueue_limit = 16", 1);
        let old = new.replace("queue_limit", "queue");
        for t in [&new, &old] {
            let c = SwitchConfig::parse(t, "x").unwrap();
            assert_eq!((c.port_queue(0), c.port_queue(1)), (16, 64), "{t}");
        }
        assert!(old_spellings(&new.parse().unwrap()).is_empty());
        let w = old_spellings(&old.parse().unwrap()).join("\n");
        assert!(
            w.contains("queue (packets of a vif queue) is renamed queue_limit")
                && w.contains("port[0].queue is renamed queue_limit"),
            "{w}"
        );
        let e = SwitchConfig::parse(&new.replace("= 64", "= 0"), "sw.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("sw.toml") && e.contains("queue_limit = 0"),
            "{e}"
        );
    }

    #[test]
    fn the_port_backend_and_its_rings_are_checked_with_the_key_named() {
        let c = SwitchConfig::parse(OK, "sw.toml").unwrap();
        assert_eq!(c.port_backend, PortBackend::Auto);
        assert_eq!(c.ring_frames, DEFAULT_RING_FRAMES);
        let with = |extra: &str| {
            OK.replace(
                "packet_rate = 20000",
                &format!("packet_rate = 20000\n{extra}"),
            )
        };
        let c = SwitchConfig::parse(&with("port_backend = \"packet\""), "sw.toml").unwrap();
        assert_eq!(c.port_options().backend, PortBackend::Packet);
        for (extra, want) in [
            ("port_backend = \"xdpp\"", "port backend `xdpp`: unknown"),
            (
                "ring_frames = 8",
                "ring_frames 8: must be between 64 and 65536",
            ),
            ("ring_frames = 65536", "more than the 1024 MiB allowed"),
        ] {
            // Eight guest ports and the uplink: 9 × 128 MiB at the largest ring.
            let more: String = (3..8)
                .map(|i| format!("[[port]]\ndev = \"vg{i}\"\ntier = 1\nbound = \"30ms\"\n"))
                .collect();
            let text = with(extra) + &more;
            let e = format!("{:#}", SwitchConfig::parse(&text, "sw.toml").unwrap_err());
            assert!(e.contains(want), "{extra}: {e}");
        }
        // The packet backend maps no ring: its size is not checked.
        assert!(SwitchConfig::parse(
            &with("port_backend = \"packet\"\nring_frames = 8"),
            "sw.toml"
        )
        .is_ok());
    }
}

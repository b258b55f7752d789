//! The daemon's configuration: a TOML file, overridden by command-line flags.
//!
//! ```toml
//! nfqueue = 0                    # NFQUEUE number
//! discipline = "percentile"      # percentile | fifo | strict_priority
//! deadline = "auto"              # "4ms", "250us", "1.5s", "auto" (running mean response time)
//!                                # or "auto_quantile" (running q-quantile, q = Σ N·P / Σ N)
//! budget = 4                     # requests inside the server at once; "off" or omit: no budget
//! default_class = "bronze"       # class of addresses no table entry matches
//! control_socket = "/run/netsched/nfq.sock"
//! control_group = "netsched"     # members may use `netsched ctl` (root always may)
//!
//! [service]
//! protocol = "tcp"               # tcp | udp
//! ports = [80]
//! address = "10.0.0.1"           # optional: only this destination address
//!
//! [[class]]
//! name = "gold"
//! percentile = 90                # target: share of requests answered within the deadline
//! sources = ["192.168.0.0/16"]   # networks of this class (the address table), as balance's
//! ```
//!
//! Every error names the file, the field and the value.

pub use crate::config_error::ConfigError;
use serde::Deserialize;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use crate::Nanos;

/// Which discipline orders the held requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DisciplineKind {
    /// P0: serve the class furthest below its percentile target.
    Percentile,
    /// Arrival order (the "no scheduler" baseline when a budget holds requests).
    Fifo,
    /// Class 0 first, then 1, ... (starves lower classes under load).
    #[serde(rename = "strict_priority")]
    Strict,
}

impl DisciplineKind {
    pub fn parse(s: &str) -> Result<Self, ConfigError> {
        match s {
            "percentile" => Ok(Self::Percentile),
            "fifo" => Ok(Self::Fifo),
            "strict_priority" => Ok(Self::Strict),
            // Old spellings, read for one release with a warning (`old_spelling`).
            "strict" | "prio" => Ok(Self::Strict),
            _ => Err(ConfigError::UnknownDiscipline(s.to_string())),
        }
    }
    /// The name `s` is an old spelling of, if it is one (docs/cli.md, "Renames").
    pub fn old_spelling(s: &str) -> Option<&'static str> {
        matches!(s, "strict" | "prio").then_some("strict_priority")
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Percentile => "percentile",
            Self::Fifo => "fifo",
            Self::Strict => "strict_priority",
        }
    }
}

/// The deadline a response must meet to count as a success.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deadline {
    Fixed(Nanos),
    /// The running mean response time, as in the thesis (P0 §4: the deadline is the mean
    /// processing time); `initial` until the first response completes.
    Auto {
        initial: Nanos,
    },
    /// Beyond the thesis: the running `q`-quantile of all response times, `q` = the
    /// request-weighted mean target `Σ N_i·P_i / Σ N_i` (core `PercentileDeadline::AutoQuantile`,
    /// docs/nfq.md); `initial` until the first response completes.
    AutoQuantile {
        initial: Nanos,
    },
}

impl Deadline {
    /// "fixed", "auto" or "auto_quantile" (status, reports).
    pub fn mode(&self) -> &'static str {
        match self {
            Deadline::Fixed(_) => "fixed",
            Deadline::Auto { .. } => "auto",
            Deadline::AutoQuantile { .. } => "auto_quantile",
        }
    }
}

impl Deadline {
    /// The core's form (the judge and the Percentile discipline keep the running figures;
    /// `initial` stays with the daemon).
    pub fn core(&self) -> netsched_core::qdisc::percentile::PercentileDeadline {
        use netsched_core::qdisc::percentile::PercentileDeadline;
        match *self {
            Deadline::Fixed(ns) => PercentileDeadline::Ns(ns.max(1)),
            Deadline::Auto { .. } => PercentileDeadline::Auto,
            Deadline::AutoQuantile { .. } => PercentileDeadline::AutoQuantile,
        }
    }

    /// The deadline as `ctl` and the logs show it: `4ms`, `auto`, `auto_quantile`.
    pub fn describe(&self) -> String {
        match self {
            Deadline::Fixed(ns) => format_duration(*ns),
            other => other.mode().to_string(),
        }
    }
}

/// The range of a fixed deadline: 1 µs (below it nothing could succeed) to 1 hour (above it
/// nothing could fail within `request_timeout`'s own maximum).
pub const DEADLINE_RANGE: (Nanos, Nanos) = (crate::MS / 1000, 3600 * crate::SEC);
/// The range of the `[limits]` durations (`max_hold`, `request_timeout`): 1 ms to 1 hour.
pub const LIMIT_RANGE: (Nanos, Nanos) = (crate::MS, 3600 * crate::SEC);
/// The range of `[limits] max_hold_factor`: a bound under half a server time would release
/// nearly every request unscheduled; one over 100 server times bounds nothing the rule does.
pub const MAX_HOLD_FACTOR_RANGE: (f64, f64) = (0.5, 100.0);
/// The shortest `max_hold` a factor may give: two of the daemon's 10 ms ticks (the bound is
/// checked once per tick, so a shorter one would be quantised to the tick anyway).
pub const MAX_HOLD_AUTO_MIN: Nanos = 20 * crate::MS;
/// The range of `flow_idle_timeout`: 1 s to 1 day.
pub const IDLE_RANGE: (Nanos, Nanos) = (crate::SEC, 24 * 3600 * crate::SEC);

/// `max_hold_factor` within [`MAX_HOLD_FACTOR_RANGE`]; the error names the key and the value.
pub fn validate_max_hold_factor(k: f64) -> Result<f64, ConfigError> {
    let (lo, hi) = MAX_HOLD_FACTOR_RANGE;
    if !(lo..=hi).contains(&k) {
        return Err(ConfigError::MaxHoldFactor {
            value: k,
            min: lo,
            max: hi,
        });
    }
    Ok(k)
}

/// A duration in the core's grammar (`netsched_core::units`: "4ms", "250us", "1.5s"; bare
/// numbers refused), within `range`. The error names the text, the bound and the forms.
pub fn parse_duration(s: &str, (min, max): (Nanos, Nanos)) -> Result<Nanos, ConfigError> {
    parse_duration_in(s, min, max).map_err(|mut e| {
        // Past the core's own ceiling the core names that; name this field's range instead.
        if let Problem::OutOfRange { .. } = e.problem {
            e.problem = Problem::OutOfRange {
                min: format_duration(min),
                max: format_duration(max),
            };
        }
        ConfigError::Unit(e)
    })
}

/// "auto", "auto_quantile" or a duration in [`DEADLINE_RANGE`].
pub fn parse_deadline(s: &str) -> Result<Deadline, ConfigError> {
    let t = s.trim();
    if t == "auto" {
        Ok(Deadline::Auto {
            initial: 10 * crate::MS,
        })
    } else if t == "auto_quantile" || t == "auto-quantile" {
        if t == "auto-quantile" {
            eprintln!(
                "netsched: warning: deadline \"auto-quantile\" is a deprecated spelling; write \"auto_quantile\""
            );
        }
        Ok(Deadline::AutoQuantile {
            initial: 10 * crate::MS,
        })
    } else if t.starts_with("auto") || t.is_empty() {
        Err(ConfigError::Deadline(s.to_string()))
    } else {
        let d = parse_duration(s, DEADLINE_RANGE).map_err(|e| e.within("deadline"))?;
        Ok(Deadline::Fixed(d))
    }
}

/// Human form of a duration in nanoseconds (the core's format).
pub use netsched_core::units::format_duration as fmt_duration;
use netsched_core::units::{format_duration, parse_duration_in, Problem};

/// An IPv4/IPv6 prefix (the core classifier's type, so the daemon accepts exactly what the
/// table stores; a prefix with host bits set is refused, naming the network it probably meant).
pub use netsched_core::classify::Cidr;

/// Parse "10.1.0.0/16", "2001:db8::/32" or a bare address.
pub fn parse_cidr(s: &str) -> Result<Cidr, ConfigError> {
    s.parse::<Cidr>().map_err(ConfigError::Cidr)
}

/// `budget` in the file: a count, or `"off"` (no holding).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum FileBudget {
    Count(usize),
    Word(String),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    /// `queue` is its old spelling, read with a warning ([`old_spellings`]).
    #[serde(alias = "queue")]
    nfqueue: Option<u16>,
    discipline: Option<String>,
    deadline: Option<String>,
    budget: Option<FileBudget>,
    default_class: Option<toml::Value>,
    control_socket: Option<PathBuf>,
    control_group: Option<String>,
    iptables: Option<String>,
    early_miss: Option<bool>,
    busy_poll: Option<String>,
    service: Option<FileService>,
    #[serde(default, rename = "class")]
    classes: Vec<FileClass>,
    /// Old form of `[[class]] sources`, read with a warning ([`old_spellings`]).
    #[serde(default)]
    table: Vec<FileEntry>,
    limits: Option<FileLimits>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileService {
    protocol: Option<String>,
    ports: Option<Vec<u16>>,
    address: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileClass {
    name: String,
    percentile: i64,
    /// Networks of this class: entries of the address table (longest prefix wins), the key
    /// `netsched balance`'s classes use.
    #[serde(default)]
    sources: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileEntry {
    cidr: String,
    class: toml::Value,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLimits {
    /// `max_held_packets` is its old spelling, read with a warning ([`old_spellings`]).
    #[serde(alias = "max_held_packets")]
    held_limit: Option<usize>,
    max_flows: Option<usize>,
    max_table_entries: Option<usize>,
    queue_limit: Option<usize>,
    flow_idle_timeout: Option<String>,
    request_timeout: Option<String>,
    max_hold: Option<String>,
    max_hold_factor: Option<f64>,
    rcvbuf: Option<String>,
    /// Old spelling of `rcvbuf` (bytes), read with a warning.
    rcvbuf_bytes: Option<usize>,
    /// `kernel_queue_maxlen` is its old spelling, read with a warning ([`old_spellings`]).
    #[serde(alias = "kernel_queue_maxlen")]
    nfqueue_limit: Option<u32>,
}

/// Old spellings in a configuration file that still work for one release, each as a warning
/// naming the new one (docs/cli.md, "Renames"; printed with the file's name by
/// [`Config::from_file`]).
pub fn old_spellings(table: &toml::Table) -> Vec<String> {
    let mut out = Vec::new();
    if table.contains_key("queue") {
        out.push("queue is renamed nfqueue (the NFQUEUE number)".to_string());
    }
    if let Some(d) = table.get("discipline").and_then(|v| v.as_str()) {
        if let Some(new) = DisciplineKind::old_spelling(d) {
            out.push(format!("discipline = \"{d}\" is renamed \"{new}\""));
        }
    }
    if table.contains_key("table") {
        out.push(
            "[[table]] (cidr, class) is written sources = [\"CIDR\", ...] in the class's [[class]]"
                .to_string(),
        );
    }
    let limits = table.get("limits").and_then(|l| l.as_table());
    for (old, new) in [
        ("max_held_packets", "held_limit"),
        ("kernel_queue_maxlen", "nfqueue_limit"),
    ] {
        if limits.is_some_and(|l| l.contains_key(old)) {
            out.push(format!("[limits] {old} is renamed {new}"));
        }
    }
    out
}

/// One class: a name and its percentile target (percent, 1..=100).
#[derive(Debug, Clone, PartialEq, serde::Serialize, Deserialize)]
pub struct ClassSpec {
    pub name: String,
    pub percentile: u32,
}

/// Bounds on everything the daemon keeps.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Packets held (awaiting a verdict) at once; beyond it new requests pass at once.
    pub max_held_packets: usize,
    /// Tracked flows; beyond it new flows pass untracked.
    pub max_flows: usize,
    pub max_table_entries: usize,
    /// Per-discipline queue limit (requests).
    pub queue_limit: usize,
    /// An idle flow (no request outstanding) is forgotten after this long.
    pub flow_idle_timeout: Nanos,
    /// A request held longer than this is released whatever the discipline says (bounds the
    /// wait of every class; the P0 rule alone can starve one under strong holding).
    pub max_hold: Nanos,
    /// When set, the bound follows the server: `max_hold = factor × recent mean time a request
    /// spends inside the server`, clamped to [`MAX_HOLD_AUTO_MIN`, `max_hold`] (so `max_hold`
    /// becomes the ceiling; it is also the bound until the first response). docs/nfq.md.
    pub max_hold_factor: Option<f64>,
    /// A released request with no response after this long is counted as failed and frees
    /// its budget slot (response lost, bypassed, connection reset...).
    pub request_timeout: Nanos,
    pub rcvbuf_bytes: usize,
    pub kernel_queue_maxlen: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_held_packets: 20_000,
            max_flows: 65_536,
            max_table_entries: 4096,
            queue_limit: 10_000,
            flow_idle_timeout: 120 * crate::SEC,
            request_timeout: 5 * crate::SEC,
            max_hold: crate::SEC,
            max_hold_factor: None,
            rcvbuf_bytes: 16 << 20,
            kernel_queue_maxlen: 65_536,
        }
    }
}

/// The service whose requests are scheduled.
#[derive(Debug, Clone, PartialEq)]
pub struct Service {
    pub protocol: u8,
    pub ports: Vec<u16>,
    pub address: Option<IpAddr>,
}

/// Complete, validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub queue: u16,
    pub discipline: DisciplineKind,
    pub deadline: Deadline,
    pub budget: Option<usize>,
    pub default_class: usize,
    pub control_socket: PathBuf,
    pub control_group: Option<String>,
    pub iptables: String,
    pub service: Service,
    pub classes: Vec<ClassSpec>,
    pub table: Vec<(Cidr, usize)>,
    pub limits: Limits,
    /// Report a miss as soon as a request's age passes the deadline (true), or only when its
    /// late response leaves, as the thesis does (false, default). See docs/nfq.md.
    pub early_miss: bool,
    /// Adaptive polling: after handling packets the packet loop keeps polling without
    /// sleeping for this long, then blocks again (0: always block). A packet that arrives
    /// inside the window costs no wake-up; an idle daemon sleeps. See docs/bench-nfq.md.
    pub busy_poll: Nanos,
    /// Serve Prometheus `/metrics` here (flag `--metrics`; not a file key). See docs/nfq.md.
    pub metrics: Option<std::net::SocketAddr>,
}

/// Default of [`Config::busy_poll`] (measured: docs/bench-nfq.md).
pub const DEFAULT_BUSY_POLL: Nanos = 200 * crate::MS / 1000;
/// Range of `busy_poll`: 0 (off) to 10 ms (beyond it the daemon would rarely sleep).
pub const BUSY_POLL_RANGE: (Nanos, Nanos) = (0, 10 * crate::MS);

/// Largest configuration file read.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

pub const DEFAULT_SOCKET: &str = "/run/netsched/nfq.sock";

impl Default for Config {
    fn default() -> Self {
        Config {
            queue: 0,
            discipline: DisciplineKind::Percentile,
            deadline: Deadline::Auto {
                initial: 10 * crate::MS,
            },
            budget: None,
            default_class: 0,
            control_socket: PathBuf::from(DEFAULT_SOCKET),
            control_group: None,
            iptables: "iptables".into(),
            service: Service {
                protocol: crate::packet::PROTO_TCP,
                ports: vec![80],
                address: None,
            },
            classes: Vec::new(),
            table: Vec::new(),
            limits: Limits::default(),
            early_miss: false,
            busy_poll: DEFAULT_BUSY_POLL,
            metrics: None,
        }
    }
}

/// Resolve a class given by name or index.
pub fn resolve_class(classes: &[ClassSpec], v: &str) -> Result<usize, ConfigError> {
    if let Some(i) = classes.iter().position(|c| c.name == v) {
        return Ok(i);
    }
    if let Ok(i) = v.parse::<usize>() {
        if i < classes.len() {
            return Ok(i);
        }
        return Err(ConfigError::ClassIndex {
            index: i,
            count: classes.len(),
        });
    }
    Err(ConfigError::ClassName {
        name: v.to_string(),
        known: classes.iter().map(|c| c.name.clone()).collect(),
    })
}

fn toml_class(classes: &[ClassSpec], v: &toml::Value) -> Result<usize, ConfigError> {
    match v {
        toml::Value::String(s) => resolve_class(classes, s),
        toml::Value::Integer(i) if *i >= 0 => resolve_class(classes, &i.to_string()),
        other => Err(ConfigError::ClassValue(other.to_string())),
    }
}

pub fn parse_protocol(s: &str) -> Result<u8, ConfigError> {
    match s {
        "tcp" => Ok(crate::packet::PROTO_TCP),
        "udp" => Ok(crate::packet::PROTO_UDP),
        _ => Err(ConfigError::Protocol(s.to_string())),
    }
}

/// A percentile target in percent, 1..=100 (the thesis's `perSetPvalue` takes an integer).
pub fn validate_percentile(p: i64) -> Result<u32, ConfigError> {
    if !(1..=100).contains(&p) {
        return Err(ConfigError::Percentile(p));
    }
    Ok(p as u32)
}

impl Config {
    /// Read (at most [`MAX_CONFIG_BYTES`]) and validate a TOML file. Errors name the file (and, from the TOML parser, the
    /// line and column).
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        // A regular file of at most MAX_CONFIG_BYTES (`-c /dev/zero` would never end).
        let text = netsched_util::read::read_text(path, MAX_CONFIG_BYTES, "config file")
            .map_err(|e| ConfigError::Unreadable(format!("{e:#}")))?;
        let c = Self::from_toml(&text)
            .map_err(|e| e.within(format!("config file {}", path.display())))?;
        if let Ok(table) = text.parse::<toml::Table>() {
            for w in old_spellings(&table) {
                eprintln!("netsched: warning: {}: {w}", path.display());
            }
        }
        Ok(c)
    }

    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let f: FileConfig = toml::from_str(text).map_err(ConfigError::Toml)?;
        let mut c = Config::default();
        if let Some(q) = f.nfqueue {
            c.queue = q;
        }
        if let Some(d) = &f.discipline {
            c.discipline = DisciplineKind::parse(d)?;
        }
        if let Some(d) = &f.deadline {
            c.deadline = parse_deadline(d)?;
        }
        match f.budget {
            None => {}
            Some(FileBudget::Count(0)) => return Err(ConfigError::ZeroBudget),
            Some(FileBudget::Count(b)) => c.budget = Some(b),
            // "off" as `--budget off` and `ctl set-budget off` take it.
            Some(FileBudget::Word(w)) if w == "off" => c.budget = None,
            Some(FileBudget::Word(w)) => return Err(ConfigError::BadBudget(w)),
        }
        if let Some(s) = f.control_socket {
            c.control_socket = s;
        }
        c.control_group = f.control_group;
        if let Some(i) = f.iptables {
            c.iptables = i;
        }
        if let Some(e) = f.early_miss {
            c.early_miss = e;
        }
        if let Some(b) = &f.busy_poll {
            c.busy_poll = parse_duration(b, BUSY_POLL_RANGE).map_err(|e| e.within("busy_poll"))?;
        }
        if let Some(s) = f.service {
            if let Some(p) = &s.protocol {
                c.service.protocol = parse_protocol(p).map_err(|e| e.within("[service]"))?;
            }
            if let Some(p) = s.ports {
                c.service.ports = p;
            }
            if let Some(a) = &s.address {
                c.service.address =
                    Some(a.parse().map_err(|_| ConfigError::Address(a.to_string()))?);
            }
        }
        for (i, cl) in f.classes.iter().enumerate() {
            let p = validate_percentile(cl.percentile)
                .map_err(|e| e.within(format!("[[class]] #{} ({:?})", i + 1, cl.name)))?;
            c.classes.push(ClassSpec {
                name: cl.name.clone(),
                percentile: p,
            });
        }
        if let Some(d) = &f.default_class {
            c.default_class = toml_class(&c.classes, d).map_err(|e| e.within("default_class"))?;
        } else {
            c.default_class = c.classes.len().saturating_sub(1);
        }
        for (i, cl) in f.classes.iter().enumerate() {
            for (j, s) in cl.sources.iter().enumerate() {
                let cidr = parse_cidr(s).map_err(|x| {
                    x.within(format!("[[class]] #{} ({:?}) sources[{j}]", i + 1, cl.name))
                })?;
                c.table.push((cidr, i));
            }
        }
        for (i, e) in f.table.iter().enumerate() {
            let cidr =
                parse_cidr(&e.cidr).map_err(|x| x.within(format!("[[table]] #{}", i + 1)))?;
            let class = toml_class(&c.classes, &e.class)
                .map_err(|x| x.within(format!("[[table]] #{} ({})", i + 1, e.cidr)))?;
            c.table.push((cidr, class));
        }
        if let Some(l) = f.limits {
            let d = &mut c.limits;
            if let Some(v) = l.held_limit {
                d.max_held_packets = v;
            }
            if let Some(v) = l.max_flows {
                d.max_flows = v;
            }
            if let Some(v) = l.max_table_entries {
                d.max_table_entries = v;
            }
            if let Some(v) = l.queue_limit {
                d.queue_limit = v;
            }
            if let Some(v) = &l.flow_idle_timeout {
                d.flow_idle_timeout = parse_duration(v, IDLE_RANGE)
                    .map_err(|e| e.within("[limits] flow_idle_timeout"))?;
            }
            if let Some(v) = &l.request_timeout {
                d.request_timeout = parse_duration(v, LIMIT_RANGE)
                    .map_err(|e| e.within("[limits] request_timeout"))?;
            }
            if let Some(v) = &l.max_hold {
                d.max_hold =
                    parse_duration(v, LIMIT_RANGE).map_err(|e| e.within("[limits] max_hold"))?;
            }
            if let Some(k) = l.max_hold_factor {
                d.max_hold_factor =
                    Some(validate_max_hold_factor(k).map_err(|e| e.within("[limits]"))?);
            }
            if let Some(v) = l.rcvbuf_bytes {
                eprintln!("netsched: warning: [limits] rcvbuf_bytes is renamed rcvbuf = \"{v}b\" (units grammar)");
                d.rcvbuf_bytes = v;
            }
            if let Some(v) = &l.rcvbuf {
                let b = netsched_core::units::parse_size_in(v, 4096, 1 << 30)
                    .map_err(|e| ConfigError::Unit(e).within("[limits] rcvbuf"))?;
                d.rcvbuf_bytes = b as usize;
            }
            if let Some(v) = l.nfqueue_limit {
                d.kernel_queue_maxlen = v;
            }
        }
        Ok(c)
    }

    /// Checks that need the whole configuration (after flags were applied).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.classes.is_empty() {
            return Err(ConfigError::NoClasses);
        }
        if self.classes.len() > 64 {
            return Err(ConfigError::TooManyClasses(self.classes.len()));
        }
        for (i, a) in self.classes.iter().enumerate() {
            if self.classes[..i].iter().any(|b| b.name == a.name) {
                return Err(ConfigError::ClassTwice(a.name.clone()));
            }
        }
        if self.default_class >= self.classes.len() {
            return Err(ConfigError::DefaultClass {
                index: self.default_class,
                count: self.classes.len(),
            });
        }
        if self.service.ports.is_empty() {
            return Err(ConfigError::NoPorts);
        }
        if self.service.ports.contains(&0) {
            return Err(ConfigError::PortZero);
        }
        if let Some((i, p)) = self
            .service
            .ports
            .iter()
            .enumerate()
            .find(|(i, p)| self.service.ports[..*i].contains(p))
        {
            return Err(ConfigError::PortTwice { index: i, port: *p });
        }
        for (j, (cidr, _)) in self.table.iter().enumerate() {
            if let Some(i) = self.table[..j].iter().position(|(c, _)| c == cidr) {
                let class = |k: usize| {
                    self.classes
                        .get(self.table[k].1)
                        .map_or_else(|| self.table[k].1.to_string(), |c| c.name.clone())
                };
                return Err(ConfigError::NetworkTwice {
                    first: class(i),
                    again: class(j),
                    cidr: cidr.to_string(),
                });
            }
        }
        if self.table.len() > self.limits.max_table_entries {
            return Err(ConfigError::TableTooLong {
                entries: self.table.len(),
                max: self.limits.max_table_entries,
            });
        }
        let l = &self.limits;
        if l.max_held_packets == 0 || l.max_flows == 0 || l.queue_limit == 0 {
            return Err(ConfigError::LimitZero);
        }
        if l.request_timeout == 0 || l.flow_idle_timeout == 0 || l.max_hold == 0 {
            return Err(ConfigError::TimeoutZero);
        }
        if let Some(k) = l.max_hold_factor {
            validate_max_hold_factor(k).map_err(|e| e.within("[limits]"))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
nfqueue = 3
discipline = "percentile"
deadline = "4ms"
budget = 4
default_class = "c4"
[service]
protocol = "tcp"
ports = [80, 8080]
address = "10.0.0.1"
[[class]]
name = "c0"
percentile = 90
sources = ["10.1.0.0/16"]
[[class]]
name = "c4"
percentile = 50
sources = ["10.2.0.9"]
[limits]
request_timeout = "2s"
"#;

    #[test]
    fn config_example_parses() {
        let c = Config::from_toml(EXAMPLE).unwrap();
        c.validate().unwrap();
        assert_eq!(c.queue, 3);
        assert_eq!(c.deadline, Deadline::Fixed(4 * crate::MS));
        assert_eq!(c.budget, Some(4));
        assert_eq!(c.default_class, 1);
        assert_eq!(c.service.ports, vec![80, 8080]);
        assert_eq!(c.table[0].1, 0);
        assert_eq!(c.table[1].0.prefix_len(), 32);
        assert_eq!(c.limits.request_timeout, 2 * crate::SEC);
    }

    #[test]
    fn a_port_or_a_network_given_twice_is_refused() {
        let twice = EXAMPLE.replace("ports = [80, 8080]", "ports = [80, 8080, 80]");
        let e = Config::from_toml(&twice).unwrap().validate().unwrap_err();
        assert_eq!(e.to_string(), "[service] ports[2] = 80: listed twice");
        let c = Config::from_toml(EXAMPLE).unwrap();
        let mut again = c.clone();
        let (net, _) = again.table[0];
        again.table.push((net, 1));
        let e = again.validate().unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "sources: {net} in class \"c0\" and again in class \"c4\""
            )),
            "{e}"
        );
    }

    /// The old spellings (docs/cli.md, "Renames") read as the new ones, each with a warning;
    /// the new ones without.
    #[test]
    fn old_spellings_are_read_with_a_warning_and_new_ones_without() {
        let new = "nfqueue = 3\ndiscipline = \"strict_priority\"\n[[class]]\nname = \"a\"\n\
                   percentile = 90\n[limits]\nheld_limit = 7\nnfqueue_limit = 99\n";
        let old = new
            .replace("nfqueue = 3", "queue = 3")
            .replace("strict_priority", "strict")
            .replace("held_limit = 7", "max_held_packets = 7")
            .replace("nfqueue_limit", "kernel_queue_maxlen");
        let (a, b) = (
            Config::from_toml(new).unwrap(),
            Config::from_toml(&old).unwrap(),
        );
        for c in [&a, &b] {
            assert_eq!(c.queue, 3);
            assert_eq!(c.discipline, DisciplineKind::Strict);
            assert_eq!(c.limits.max_held_packets, 7);
            assert_eq!(c.limits.kernel_queue_maxlen, 99);
        }
        assert!(old_spellings(&new.parse().unwrap()).is_empty());
        let w = old_spellings(&old.parse().unwrap()).join("\n");
        for (o, n) in [
            ("queue", "nfqueue"),
            ("\"strict\"", "\"strict_priority\""),
            ("max_held_packets", "held_limit"),
            ("kernel_queue_maxlen", "nfqueue_limit"),
        ] {
            assert!(w.contains(&format!("{o} is renamed {n}")), "{w}");
        }
        // `[[table]]` entries and `sources` fill the same address table.
        let tabled = EXAMPLE
            .replace("sources = [\"10.1.0.0/16\"]\n", "")
            .replace("sources = [\"10.2.0.9\"]\n", "")
            + "[[table]]\ncidr = \"10.1.0.0/16\"\nclass = \"c0\"\n\
               [[table]]\ncidr = \"10.2.0.9\"\nclass = 1\n";
        assert_eq!(
            Config::from_toml(&tabled).unwrap().table,
            Config::from_toml(EXAMPLE).unwrap().table
        );
        assert!(old_spellings(&EXAMPLE.parse().unwrap()).is_empty());
        let w = old_spellings(&tabled.parse().unwrap()).join("\n");
        assert!(
            w.contains("[[table]] (cidr, class) is written sources"),
            "{w}"
        );
        let e = Config::from_toml(&EXAMPLE.replace("10.2.0.9", "10.2.0.0/40"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("[[class]] #2 (\"c4\") sources[0]") && e.contains("10.2.0.0/40"),
            "{e}"
        );
        assert_eq!(DisciplineKind::Strict.as_str(), "strict_priority");
        assert_eq!(
            DisciplineKind::old_spelling("prio"),
            Some("strict_priority")
        );
        assert_eq!(DisciplineKind::old_spelling("strict_priority"), None);
        // Both spellings at once: refused, naming the key.
        let e = Config::from_toml("queue = 1\nnfqueue = 2\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("nfqueue"), "{e}");
    }

    #[test]
    fn config_errors_name_the_field_and_value() {
        let e = Config::from_toml("budget = 0").unwrap_err().to_string();
        assert!(e.contains("budget"), "{e}");
        let e = Config::from_toml("budget = \"some\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("budget = \"some\""), "{e}");
        let c = Config::from_toml("budget = \"off\"\n[[class]]\nname = \"a\"\npercentile = 90");
        assert_eq!(c.unwrap().budget, None);
        let e = format!(
            "{:#}",
            Config::from_toml("[[class]]\nname='a'\npercentile=120").unwrap_err()
        );
        assert!(e.contains("percentile 120"), "{e}");
        let e = format!(
            "{:#}",
            Config::from_toml(
                "[[class]]\nname='a'\npercentile=50\n[[table]]\ncidr='10.0.0.0/40'\nclass='a'"
            )
            .unwrap_err()
        );
        assert!(
            e.contains("10.0.0.0/40") && e.contains("longer than 32"),
            "{e}"
        );
        let e = format!(
            "{:#}",
            Config::from_toml(
                "[[class]]\nname='a'\npercentile=50\n[[table]]\ncidr='10.0.0.0/8'\nclass='zz'"
            )
            .unwrap_err()
        );
        assert!(e.contains("\"zz\"") && e.contains("known: a"), "{e}");
        let e = format!("{:#}", Config::from_toml("deadline = \"4\"").unwrap_err());
        assert!(e.contains("needs a unit"), "{e}");
        let e = format!("{:#}", Config::from_toml("bogus = 1").unwrap_err());
        assert!(e.contains("bogus"), "{e}");
        assert!(Config::default().validate().is_err());
    }

    #[test]
    fn config_errors_are_typed_and_keep_their_texts_whole() {
        let e = Config::from_toml("[[class]]\nname='a'\npercentile=120").unwrap_err();
        match &e {
            ConfigError::In { what, source } => {
                assert_eq!(what, "[[class]] #1 (\"a\")");
                assert!(
                    matches!(**source, ConfigError::Percentile(120)),
                    "{source:?}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            e.to_string(),
            "[[class]] #1 (\"a\"): percentile 120: must be an integer in 1..=100"
        );
        let e = Config::from_toml("[service]\nprotocol = 'sctp'").unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            "[service]: protocol: unknown value \"sctp\" (expected tcp or udp)"
        );
        assert!(matches!(
            Config::default().validate(),
            Err(ConfigError::NoClasses)
        ));
        let missing = Path::new("/nonexistent/nfq.toml");
        let e = Config::from_file(missing).unwrap_err();
        assert!(matches!(e, ConfigError::Unreadable(_)), "{e:?}");
        assert!(
            e.to_string()
                .starts_with("cannot read config file /nonexistent/nfq.toml: "),
            "{e}"
        );
        // A device is refused before a byte is read (`/dev/zero` never ends).
        let e = Config::from_file(Path::new("/dev/zero")).unwrap_err();
        assert!(e.to_string().contains("/dev/zero"), "{e}");
    }

    #[test]
    fn config_max_hold_factor_is_read_and_bounded() {
        let c = Config::from_toml("[limits]\nmax_hold_factor = 3.0\nmax_hold = \"2s\"").unwrap();
        assert_eq!(c.limits.max_hold_factor, Some(3.0));
        assert_eq!(c.limits.max_hold, 2 * crate::SEC);
        assert_eq!(Config::default().limits.max_hold_factor, None);
        for bad in ["0.1", "1000.0", "-3.0", "nan"] {
            let e = format!(
                "{:#}",
                Config::from_toml(&format!("[limits]\nmax_hold_factor = {bad}")).unwrap_err()
            );
            assert!(
                e.contains("max_hold_factor") && e.contains("limits"),
                "{bad}: {e}"
            );
        }
        let mut c = Config::default();
        c.limits.max_hold_factor = Some(f64::INFINITY);
        c.classes.push(ClassSpec {
            name: "a".into(),
            percentile: 90,
        });
        let e = format!("{:#}", c.validate().unwrap_err());
        assert!(e.contains("max_hold_factor") && e.contains("inf"), "{e}");
    }

    #[test]
    fn config_durations() {
        let r = DEADLINE_RANGE;
        assert_eq!(parse_duration("250us", r).unwrap(), 250_000);
        assert_eq!(parse_duration("1.5s", r).unwrap(), 1_500_000_000);
        assert_eq!(parse_duration("3ms", r).unwrap(), 3_000_000);
        assert!(parse_duration("-3ms", r).is_err());
        // Issue #10.7: 1e300s was stored as 18446744073.7 s; now a range error naming it.
        for (text, needle) in [
            ("1e300s", "1e300s"),
            ("2h", "2h"),
            ("500ns", "500ns"),
            ("4", "4"),
        ] {
            let e = format!("{:#}", parse_deadline(text).unwrap_err());
            assert!(e.contains(needle) && e.contains("deadline"), "{text}: {e}");
        }
        let e = format!("{:#}", parse_deadline("1e300s").unwrap_err());
        assert!(e.contains("1h"), "names the bound: {e}");
        assert_eq!(
            parse_deadline("1h").unwrap(),
            Deadline::Fixed(3600 * crate::SEC)
        );
        let e = format!(
            "{:#}",
            Config::from_toml("[limits]\nmax_hold = \"1e30s\"").unwrap_err()
        );
        assert!(e.contains("max_hold") && e.contains("1e30s"), "{e}");
        let e = format!(
            "{:#}",
            Config::from_toml("[limits]\nflow_idle_timeout = \"10ms\"").unwrap_err()
        );
        assert!(e.contains("flow_idle_timeout") && e.contains("10ms"), "{e}");
        assert!(matches!(
            parse_deadline("auto").unwrap(),
            Deadline::Auto { .. }
        ));
        assert!(parse_deadline("0ms").is_err());
        for s in ["auto-quantile", "auto_quantile", " auto-quantile "] {
            assert!(matches!(
                parse_deadline(s).unwrap(),
                Deadline::AutoQuantile { .. }
            ));
        }
        let e = format!("{:#}", parse_deadline("auto-quantil").unwrap_err());
        assert!(
            e.contains("\"auto-quantil\"") && e.contains("auto_quantile"),
            "{e}"
        );
        let e = format!(
            "{:#}",
            Config::from_toml("deadline = \"autoq\"").unwrap_err()
        );
        assert!(e.contains("autoq"), "{e}");
    }
}

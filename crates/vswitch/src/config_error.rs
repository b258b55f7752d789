//! What can be wrong with a switch configuration, typed: the file as read and parsed
//! ([`ConfigError`]) and the key whose value the checks refuse ([`ConfigProblem`]). Every text
//! names the file, the key (with the port's index) and the value, as `key = value: rule`.
//!
//! Cost: built only when a configuration is refused.

use netsched_core::qdisc::QdiscConfigError;
use netsched_core::units::format_duration;
use netsched_core::Nanos;
use std::fmt;

/// A key that needs a forwarding budget (`packet_rate` or `rate`), with its value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NeedsBudget {
    /// `budget_busy`, the share of time the budget is off.
    Busy(f64),
    /// `budget_catch_up`, ns.
    CatchUp(Nanos),
}

/// Why a parsed configuration is refused: the key, its value and the rule.
#[derive(Debug)]
pub enum ConfigProblem {
    /// No `[[port]]` table.
    NoPorts,
    /// More `[[port]]` tables than the bound.
    TooManyPorts { count: usize, max: usize },
    /// Both `packet_rate` and `rate`.
    TwoBudgets,
    /// A count outside `min..=max`; `unit` (e.g. `packets/s`) follows the bound when not empty.
    Count {
        key: String,
        value: u64,
        min: u64,
        max: u64,
        unit: &'static str,
    },
    /// `rate = "0"`.
    ZeroRate,
    /// `budget_busy` outside `0..=max`.
    BusyShare { value: f64, max: f64 },
    /// A budget setting without a budget.
    NeedsBudget(NeedsBudget),
    /// `budget_catch_up` above its bound.
    CatchUp { value: Nanos, max: Nanos },
    /// A duration outside its range; `rule` says the range (e.g. `must be between 100us and 10s`).
    Duration {
        key: String,
        value: Nanos,
        rule: &'static str,
    },
    /// The receive rings' sizes (`ring_frames`), the text of `netsched_sys`'s check.
    Ring(std::io::Error),
    /// The rings of all ports and the uplink together above the memory bound.
    RingMemory {
        frames: usize,
        ports: usize,
        mib: usize,
        max_mib: usize,
    },
    /// `key = name` is no interface name.
    IfName { key: String, name: String },
    /// `port[index].dev` is the uplink.
    DevIsUplink { index: usize, dev: String },
    /// `port[index].dev` repeats `port[first].dev`.
    DevTwice {
        index: usize,
        dev: String,
        first: usize,
    },
    /// The discipline (`discipline = name`) refuses the classes the ports make.
    Discipline {
        name: &'static str,
        source: QdiscConfigError,
    },
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ConfigProblem::*;
        match self {
            NoPorts => write!(f, "[[port]]: at least one guest port is needed"),
            TooManyPorts { count, max } => {
                write!(f, "[[port]]: {count} ports, more than the {max} supported")
            }
            TwoBudgets => write!(
                f,
                "packet_rate and rate are both set: give one forwarding budget"
            ),
            Count {
                key,
                value,
                min,
                max,
                unit,
            } => {
                write!(f, "{key} = {value}: must be between {min} and {max}")?;
                if !unit.is_empty() {
                    write!(f, " {unit}")?;
                }
                Ok(())
            }
            ZeroRate => write!(
                f,
                "rate = \"0\": must be positive (leave it out for no budget)"
            ),
            BusyShare { value, max } => {
                write!(f, "budget_busy = {value}: must be between 0 and {max}")
            }
            NeedsBudget(what) => {
                match what {
                    self::NeedsBudget::Busy(v) => write!(f, "budget_busy = {v}")?,
                    self::NeedsBudget::CatchUp(d) => {
                        write!(f, "budget_catch_up = {:?}", format_duration(*d))?
                    }
                }
                write!(f, ": needs a budget (packet_rate or rate)")
            }
            CatchUp { value, max } => write!(
                f,
                "budget_catch_up = {:?}: must be at most {}",
                format_duration(*value),
                format_duration(*max)
            ),
            Duration { key, value, rule } => {
                write!(f, "{key} = {:?}: {rule}", format_duration(*value))
            }
            Ring(e) => write!(f, "{e}"),
            RingMemory {
                frames,
                ports,
                mib,
                max_mib,
            } => write!(
                f,
                "ring_frames = {frames}: {ports} ports and the uplink would map {mib} MiB of \
                 rings, more than the {max_mib} MiB allowed; lower ring_frames or use \
                 port_backend = \"packet\""
            ),
            IfName { key, name } => write!(
                f,
                "{key} = {name:?}: not an interface name (1..15 bytes, no '/', space or NUL)"
            ),
            DevIsUplink { index, dev } => {
                write!(f, "port[{index}].dev = {dev:?}: is also the uplink")
            }
            DevTwice { index, dev, first } => {
                write!(f, "port[{index}].dev = {dev:?}: already port[{first}]")
            }
            Discipline { name, source } => write!(f, "discipline {name}: {source}"),
        }
    }
}

// No `source()`: the text already holds the inner error's, and a chain printed with `{:#}`
// would repeat it.
impl std::error::Error for ConfigProblem {}

/// A switch configuration that could not be used, naming the file (or the origin of the text).
#[derive(Debug)]
pub enum ConfigError {
    /// The file could not be read (the reader's text names the file: size, kind, I/O error).
    Read(String),
    /// TOML syntax or a key serde refused (toml's text: line, column, key, value).
    Toml {
        file: String,
        source: toml::de::Error,
    },
    /// The checks refused a key.
    Invalid {
        file: String,
        problem: ConfigProblem,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Read(why) => write!(f, "{why}"),
            ConfigError::Toml { file, source } => write!(f, "{file}: {source}"),
            ConfigError::Invalid { file, problem } => write!(f, "{file}: {problem}"),
        }
    }
}

impl std::error::Error for ConfigError {}

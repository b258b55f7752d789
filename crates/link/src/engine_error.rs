//! What can go wrong with the link engine, typed: a configuration its bounds refuse
//! ([`EngineConfigError`], naming the flag and the value) and an engine that cannot open, run
//! or serve its metrics ([`EngineError`], naming the port's flag, the address or the system
//! call).
//!
//! Cost: built only when the engine refuses to start or stops on an error.

use netsched_core::qdisc::QdiscConfigError;
use netsched_core::units::format_duration;
use netsched_core::Nanos;
use std::fmt;
use std::net::SocketAddr;

/// A size or interval of [`crate::engine::EngineConfig`] outside its bounds, as the flag that
/// sets it.
#[derive(Debug)]
pub enum EngineConfigError {
    /// `--dev-a` and `--dev-b` name the same interface.
    SameDevices(String),
    /// `--pool` outside `min..=max` slots.
    Pool {
        value: usize,
        min: usize,
        max: usize,
    },
    /// `--delay-line` outside `1..=max`.
    DelayLine { value: usize, max: usize },
    /// The ring sizes (`--ring-frames`, `--tx-ring-frames`): the text of `netsched_sys`'s check.
    Ring(std::io::Error),
    /// `--busy-poll` above its bound.
    Spin { value: Nanos, max: Nanos },
    /// `--stats` below its bound.
    StatsInterval { value: Nanos, min: Nanos },
}

impl fmt::Display for EngineConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use EngineConfigError::*;
        match self {
            SameDevices(dev) => write!(f, "--dev-a and --dev-b are both `{dev}`: they must differ"),
            Pool { value, min, max } => {
                write!(f, "--pool {value}: must be between {min} and {max} slots")
            }
            DelayLine { value, max } => {
                write!(f, "--delay-line {value}: must be between 1 and {max}")
            }
            Ring(e) => write!(f, "{e}"),
            Spin { value, max } => write!(
                f,
                "--busy-poll {}: must be at most {} (or `always`)",
                format_duration(*value),
                format_duration(*max)
            ),
            StatsInterval { value, min } => write!(
                f,
                "--stats {}: must be at least {}",
                format_duration(*value),
                format_duration(*min)
            ),
        }
    }
}

// No `source()`: the text already holds the inner error's, and a chain printed with `{:#}`
// would repeat it.
impl std::error::Error for EngineConfigError {}

/// Why the engine could not start, run or serve its counters.
#[derive(Debug)]
pub enum EngineError {
    /// The configuration is refused.
    Config(EngineConfigError),
    /// A port could not be opened: the flag naming its interface (`--dev-a`) and the system's
    /// error.
    Port {
        flag: &'static str,
        source: std::io::Error,
    },
    /// A direction's discipline refuses its configuration.
    Qdisc(QdiscConfigError),
    /// Waiting for input failed.
    Poll(std::io::Error),
    /// The metrics listener could not be started.
    Metrics {
        addr: SocketAddr,
        source: netsched_metrics::MetricsError,
    },
    /// The engine's thread in a network namespace could not start or open its ports (the
    /// testbed's text: namespace, thread, or the engine's own error).
    Thread(String),
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineError::Config(e) => write!(f, "{e}"),
            EngineError::Port { flag, source } => write!(f, "{flag}: {source}"),
            EngineError::Qdisc(e) => write!(f, "qdisc: {e}"),
            EngineError::Poll(e) => write!(f, "ppoll: {e}"),
            EngineError::Metrics { addr, source } => write!(f, "--metrics {addr}: {source}"),
            EngineError::Thread(why) => write!(f, "{why}"),
        }
    }
}

impl std::error::Error for EngineError {}

impl From<EngineConfigError> for EngineError {
    fn from(e: EngineConfigError) -> Self {
        EngineError::Config(e)
    }
}

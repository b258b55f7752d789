//! What can stop a switch from opening or running, typed ([`SwitchError`]): a configuration
//! the checks refuse, a port that cannot be opened (named by its index and interface), a
//! discipline that refuses its settings, an epoll call that fails, or the uplink vanishing
//! while the switch runs.
//!
//! Cost: built only when the switch refuses to start or stops on an error.

use crate::config_error::ConfigProblem;
use netsched_core::qdisc::QdiscConfigError;
use netsched_core::units::format_duration;
use netsched_core::Nanos;
use std::fmt;
use std::io;

/// Why a switch could not open, or stopped.
#[derive(Debug)]
pub enum SwitchError {
    /// The configuration is refused (the key and its value).
    Config(ConfigProblem),
    /// `--stats` below its bound.
    StatsInterval { value: Nanos, min: Nanos },
    /// A port could not be opened: its index in `ports` (`None`: the uplink), its interface and
    /// the system's error.
    Port {
        index: Option<usize>,
        dev: String,
        source: io::Error,
    },
    /// The discipline refuses its configuration.
    Qdisc(QdiscConfigError),
    /// An epoll call failed (`epoll_create1`, `epoll_ctl`, `epoll_pwait2`).
    Epoll {
        call: &'static str,
        source: io::Error,
    },
    /// The uplink's interface was removed or replaced while the switch ran.
    UplinkGone(String),
    /// The switch's thread in a network namespace could not start (the namespace or the
    /// thread: the text of the rig's error).
    Thread(String),
}

impl fmt::Display for SwitchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SwitchError::Config(e) => write!(f, "{e}"),
            SwitchError::StatsInterval { value, min } => write!(
                f,
                "--stats {}: must be at least {}",
                format_duration(*value),
                format_duration(*min)
            ),
            SwitchError::Port {
                index: Some(i),
                dev,
                source,
            } => write!(f, "port[{i}] ({dev}): {source}"),
            SwitchError::Port {
                index: None,
                dev,
                source,
            } => write!(f, "uplink ({dev}): {source}"),
            SwitchError::Qdisc(e) => write!(f, "discipline: {e}"),
            SwitchError::Epoll { call, source } => write!(f, "{call}: {source}"),
            SwitchError::UplinkGone(dev) => write!(
                f,
                "uplink {dev} disappeared (interface removed or replaced); stopping"
            ),
            SwitchError::Thread(why) => write!(f, "{why}"),
        }
    }
}

// No `source()`: the text already holds the inner error's, and a chain printed with `{:#}`
// would repeat it.
impl std::error::Error for SwitchError {}

impl From<ConfigProblem> for SwitchError {
    fn from(e: ConfigProblem) -> Self {
        SwitchError::Config(e)
    }
}

impl From<QdiscConfigError> for SwitchError {
    fn from(e: QdiscConfigError) -> Self {
        SwitchError::Qdisc(e)
    }
}

/// `map_err` for an epoll call.
pub(crate) fn epoll(call: &'static str) -> impl FnOnce(io::Error) -> SwitchError {
    move |source| SwitchError::Epoll { call, source }
}

//! What can be wrong with the flags of `netsched link` and `netsched shape apply`, typed: each
//! variant names the flag, and the inner error the value and the rule (the units grammar's,
//! the discipline spec's, the engine's or the plan's bounds).
//!
//! Cost: built only when a flag is refused.

use crate::engine_error::EngineConfigError;
use crate::shape::PlanError;
use crate::spec_error::QdiscSpecError;
use netsched_core::units::UnitError;
use std::fmt;

/// A flag whose value cannot be used.
#[derive(Debug)]
pub enum ArgsError {
    /// A required flag is missing.
    Missing(&'static str),
    /// A duration or rate outside the units grammar or its bounds; `flag` may carry a hint
    /// (e.g. `--busy-poll (a duration such as 50us, ...)`).
    Units { flag: String, source: UnitError },
    /// A discipline spec (`--ab-qdisc`, `--ba-qdisc`).
    Qdisc {
        flag: String,
        source: QdiscSpecError,
    },
    /// `--port` names no backend.
    Port(netsched_sys::UnknownBackend),
    /// `--metrics` (the flag and the value are in the text).
    Metrics(netsched_metrics::AddrError),
    /// The engine's bounds (pool, delay line, rings, intervals).
    Engine(EngineConfigError),
    /// `--down` without `--ifb` or the reverse.
    DownWithoutIfb,
    /// The shaping plan's bounds.
    Plan(PlanError),
}

impl fmt::Display for ArgsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgsError::Missing(flag) => write!(f, "{flag} is required"),
            ArgsError::Units { flag, source } => write!(f, "{flag}: {source}"),
            ArgsError::Qdisc { flag, source } => write!(f, "{flag}: {source}"),
            ArgsError::Port(e) => write!(f, "--port: {e}"),
            ArgsError::Metrics(e) => write!(f, "{e}"),
            ArgsError::Engine(e) => write!(f, "{e}"),
            ArgsError::DownWithoutIfb => write!(f, "--down and --ifb go together"),
            ArgsError::Plan(e) => write!(f, "{e}"),
        }
    }
}

// No `source()`: every text already holds its inner error's, and a chain printed with `{:#}`
// would repeat it.
impl std::error::Error for ArgsError {}

impl ArgsError {
    /// A closure for `map_err` that names `flag` on a units error.
    pub fn units(flag: impl Into<String>) -> impl FnOnce(UnitError) -> Self {
        let flag = flag.into();
        move |source| ArgsError::Units { flag, source }
    }
}

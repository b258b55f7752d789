//! Typed errors of the balancers: [`TableError`] (a server-table operation that does not
//! apply) and [`BalancerConfigError`] (a configuration a balancer refuses).

use super::ServerId;
use core::fmt;

/// Why a [`super::ServerTable`] operation was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableError {
    /// `add`: the id is already in the table.
    DuplicateServer(ServerId),
    /// The id is not in the table.
    UnknownServer(ServerId),
    /// `set_thresholds`: `lower > upper` with an upper threshold set.
    ThresholdsInverted {
        server: ServerId,
        lower: u32,
        upper: u32,
    },
    /// A connection event (`on_close`, `on_inactive`, ...) for a server with no connection
    /// in the state it leaves.
    NoConnection {
        server: ServerId,
        event: &'static str,
        state: &'static str,
    },
}

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TableError::DuplicateServer(id) => {
                write!(f, "server {}: id already in the table", id.0)
            }
            TableError::UnknownServer(id) => write!(f, "server {}: not in the table", id.0),
            TableError::ThresholdsInverted {
                server,
                lower,
                upper,
            } => write!(
                f,
                "server {}: lower_threshold {lower} > upper_threshold {upper}",
                server.0
            ),
            TableError::NoConnection {
                server,
                event,
                state,
            } => write!(f, "server {}: {event} with no {state} connection", server.0),
        }
    }
}

impl std::error::Error for TableError {}

/// Why a balancer refuses its configuration; `field` is the option's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BalancerConfigError {
    /// `field` must be at least `min`.
    TooSmall { field: &'static str, min: u64 },
    /// `field` holds `value`, outside `min..=max`.
    OutOfRange {
        field: &'static str,
        value: u64,
        min: u64,
        max: u64,
    },
    /// `field` must be a prime number (Maglev's table size).
    NotPrime { field: &'static str, value: u64 },
}

impl BalancerConfigError {
    /// The option the error is about.
    pub fn field(&self) -> &'static str {
        match self {
            BalancerConfigError::TooSmall { field, .. }
            | BalancerConfigError::OutOfRange { field, .. }
            | BalancerConfigError::NotPrime { field, .. } => field,
        }
    }
}

impl fmt::Display for BalancerConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BalancerConfigError::TooSmall { field, min } => {
                write!(f, "{field}: must be at least {min}")
            }
            BalancerConfigError::OutOfRange {
                field,
                value,
                min,
                max,
            } => write!(f, "{field}: {value} is outside {min}..={max}"),
            BalancerConfigError::NotPrime { field, value } => {
                write!(f, "{field}: {value} is not a prime number")
            }
        }
    }
}

impl std::error::Error for BalancerConfigError {}

//! What a change to the balancer's servers can run into, typed: a bad name or address (naming
//! the value and the rule), a name that exists or does not, the server limit, a weight above
//! the maximum, or the core table's refusal. The texts are the control protocol's
//! `error: …` lines and the reload's messages.
//!
//! A reload that fails names which part ([`ReloadError`]).
//!
//! Cost: built only when a change is refused.

use netsched_core::balance::{BalancerConfigError, TableError};
use std::fmt;
use std::net::{IpAddr, SocketAddr};

/// Why a server name is refused (names appear in metrics labels and `ctl`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameError {
    /// Empty, or longer than 64 bytes.
    Length,
    /// A byte other than `[A-Za-z0-9_.-]`.
    Characters,
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NameError::Length => "must be 1 to 64 characters",
            NameError::Characters => "only letters, digits, '_', '-' and '.'",
        })
    }
}

impl std::error::Error for NameError {}

/// Why a backend address is no address to connect to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrError {
    /// Port 0.
    PortZero,
    /// `0.0.0.0` or `::`.
    Unspecified(IpAddr),
}

impl fmt::Display for AddrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddrError::PortZero => f.write_str("port 0 is not a port to connect to"),
            AddrError::Unspecified(ip) => write!(
                f,
                "{ip} is the unspecified address (any local address), not a server's address"
            ),
        }
    }
}

impl std::error::Error for AddrError {}

/// Why a change to the servers was refused; nothing changed.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerError {
    BadName {
        name: String,
        why: NameError,
    },
    BadAddr {
        name: String,
        addr: SocketAddr,
        why: AddrError,
    },
    Exists {
        name: String,
    },
    /// Another server already has the address (`other`).
    AddrInUse {
        name: String,
        addr: SocketAddr,
        other: String,
    },
    TooMany {
        max: usize,
    },
    Unknown {
        name: String,
    },
    WeightTooLarge {
        weight: u32,
        max: u32,
    },
    /// The core's server table refused it.
    Table {
        name: String,
        source: TableError,
    },
    /// Its `sni` list holds `value`, refused for `why`.
    Sni {
        name: String,
        value: String,
        why: String,
    },
    /// The balancer of a route made for its names could not be built.
    Algorithm(BalancerConfigError),
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerError::BadName { name, why } => write!(f, "server name {name:?}: {why}"),
            ServerError::BadAddr { name, addr, why } => write!(f, "server {name:?} {addr}: {why}"),
            ServerError::Exists { name } => write!(f, "server {name:?} already exists"),
            ServerError::AddrInUse { name, addr, other } => write!(
                f,
                "server {name:?}: {addr} is already server {other:?}'s (one entry per backend; \
                 set-weight it instead)"
            ),
            ServerError::TooMany { max } => write!(f, "at most {max} servers"),
            ServerError::Unknown { name } => write!(f, "no server named {name:?}"),
            ServerError::WeightTooLarge { weight, max } => {
                write!(f, "weight {weight}: at most {max}")
            }
            ServerError::Table { name, source } => write!(f, "server {name:?}: {source}"),
            ServerError::Sni { name, value, why } => {
                write!(f, "server {name:?}: sni {value:?}: {why}")
            }
            ServerError::Algorithm(e) => write!(f, "algorithm: {e}"),
        }
    }
}

impl std::error::Error for ServerError {}

/// Why a reload was not applied in full.
#[derive(Debug, Clone, PartialEq)]
pub enum ReloadError {
    /// The new algorithm could not be built.
    Algorithm(BalancerConfigError),
    /// A server of the new file could not be added, moved or updated.
    Server(ServerError),
    /// The new classes or queue discipline are wrong.
    Classes(crate::classes::ClassError),
}

impl fmt::Display for ReloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReloadError::Algorithm(e) => write!(f, "algorithm: {e}"),
            ReloadError::Server(e) => e.fmt(f),
            ReloadError::Classes(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ReloadError {}

impl From<ServerError> for ReloadError {
    fn from(e: ServerError) -> Self {
        ReloadError::Server(e)
    }
}

//! What can be wrong with a balancer configuration, typed: the file as read and parsed
//! ([`ConfigProblem`]), the host it would start on ([`HostProblem`]), and a start that failed
//! ([`StartError`]). Every text names the key (with its index and server name where there is
//! one) and the value, as `key = value: rule`.
//!
//! Cost: built only when a configuration or a start is refused.

use crate::server_error::{AddrError, NameError, ServerError};
use netsched_core::balance::BalancerConfigError;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Why `accept_proxy` is refused (carried in toml's text, which adds the line).
#[derive(Debug, Clone, PartialEq)]
pub enum AcceptProxyError {
    /// More networks (`given`) than the bound (`max`).
    TooMany { given: usize, max: usize },
    /// `accept_proxy[index]` is no network.
    Network {
        index: usize,
        text: String,
        why: netsched_core::classify::CidrError,
    },
    /// `accept_proxy[index]` repeats `accept_proxy[first]`.
    Twice {
        index: usize,
        text: String,
        first: usize,
    },
}

impl fmt::Display for AcceptProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AcceptProxyError::TooMany { given, max } => {
                write!(f, "accept_proxy: {given} networks, at most {max}")
            }
            AcceptProxyError::Network { index, text, why } => {
                write!(f, "accept_proxy[{index}] = {text:?}: {why}")
            }
            AcceptProxyError::Twice { index, text, first } => write!(
                f,
                "accept_proxy[{index}] = {text:?}: the same network as accept_proxy[{first}]"
            ),
        }
    }
}

impl std::error::Error for AcceptProxyError {}

/// Why a configuration text is refused.
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigProblem {
    /// The file could not be read (the reader's text: size, kind of file, I/O error).
    Read(String),
    /// TOML syntax or a key serde refused (toml's text: line, column, key, value).
    Toml(String),
    /// `listen` holds no address.
    NoListen,
    /// A list longer than its bound: `key`, its length, the bound and what the entries are.
    TooMany {
        key: &'static str,
        count: usize,
        max: usize,
        entries: &'static str,
    },
    /// `listen[index]` repeats `listen[first]` (port 0 may repeat).
    ListenTwice {
        index: usize,
        addr: SocketAddr,
        first: usize,
    },
    /// A count outside `min..=max`.
    Range {
        key: &'static str,
        value: u64,
        min: u64,
        max: u64,
    },
    /// A count above its bound; `note` explains a special value, if any.
    AtMost {
        key: &'static str,
        value: u64,
        max: u64,
        note: &'static str,
    },
    /// The service classes or the queue discipline (`[[class]]`, `queue`, `default_class`).
    Classes(crate::classes::ClassError),
    /// A hash key other than `source` in mode `l4`.
    HashKeyInL4(&'static str),
    /// The algorithm's options are refused by the core.
    Algorithm {
        name: &'static str,
        source: BalancerConfigError,
    },
    /// `server[index].name` is no valid name.
    ServerName {
        index: usize,
        name: String,
        why: NameError,
    },
    /// `server[index].name` appears before.
    ServerNameTwice { index: usize, name: String },
    /// `server[index].addr` is no address to connect to.
    ServerAddr {
        index: usize,
        name: String,
        addr: SocketAddr,
        why: AddrError,
    },
    /// `server[index].weight` above the maximum.
    ServerWeight {
        index: usize,
        name: String,
        weight: u32,
        max: u32,
    },
    /// `server[index].sni` holds `value`, refused for `why`.
    ServerSni {
        index: usize,
        name: String,
        value: String,
        why: String,
    },
    /// `route = "sni"` in mode l7.
    RouteInL7,
    /// `health.path` is not a path to request.
    HealthPath(String),
    /// `relay` written in mode `l7` (the value as written).
    RelayInL7(String),
    /// `http_reuse` written in mode `l4` (the value as written).
    HttpReuseInL4(String),
    /// `[tls]` in mode l4 (which relays bytes and terminates nothing).
    TlsInL4,
    /// A `client_subject` class rule while no client certificate is asked for.
    ClientSubjectWithoutCertificates { index: usize, name: String },
    /// An L7-only key written in mode `l4` (the value as written).
    InL4 { key: &'static str, value: String },
    /// `server[index].addr` is also `server[first]`'s.
    ServerAddrTwice {
        index: usize,
        name: String,
        addr: SocketAddr,
        first: String,
    },
    /// An HTTP check's key (`path`, `expect_status`) in a `kind = "tcp"` check.
    HealthHttpOnly { key: &'static str, value: String },
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ConfigProblem::*;
        match self {
            Read(text) | Toml(text) => f.write_str(text),
            NoListen => f.write_str("listen: at least one address is needed"),
            TooMany {
                key,
                count,
                max,
                entries,
            } => write!(f, "{key}: {count} {entries}, at most {max}"),
            ListenTwice { index, addr, first } => {
                write!(f, "listen[{index}] = {addr}: the same as listen[{first}]")
            }
            Range {
                key,
                value,
                min,
                max,
            } => write!(f, "{key} = {value}: must be {min}..={max}"),
            AtMost {
                key,
                value,
                max,
                note,
            } => write!(f, "{key} = {value}: at most {max}{note}"),
            Classes(e) => e.fmt(f),
            HashKeyInL4(k) => write!(
                f,
                "hash_key = \"{}\": only \"source\" in mode \"l4\" (there is no HTTP to read)",
                k
            ),
            Algorithm { name, source } => write!(f, "algorithm ({name}): {source}"),
            ServerName { index, name, why } => write!(f, "server[{index}].name = {name:?}: {why}"),
            ServerNameTwice { index, name } => {
                write!(f, "server[{index}].name = {name:?}: used twice")
            }
            ServerAddr {
                index,
                name,
                addr,
                why,
            } => write!(f, "server[{index}] ({name}).addr = {addr}: {why}"),
            ServerWeight {
                index,
                name,
                weight,
                max,
            } => write!(f, "server[{index}] ({name}).weight = {weight}: at most {max}"),
            ServerSni {
                index,
                name,
                value,
                why,
            } => write!(f, "server[{index}] ({name}).sni = {value:?}: {why}"),
            RouteInL7 => f.write_str(
                "route = \"sni\": only in mode \"l4\" (mode \"l7\" terminates TLS and picks \
                 certificates by the server name, [tls]); remove the key",
            ),
            HealthPath(path) => write!(
                f,
                "health.path = {path:?}: must start with / , hold no whitespace and be at most 1024 bytes"
            ),
            RelayInL7(value) => write!(
                f,
                "relay = {value}: only in mode \"l4\" (mode \"l7\" forwards requests through its \
                 own HTTP client, there is no byte relay to choose); remove the key"
            ),
            TlsInL4 => write!(
                f,
                "tls: mode = \"l4\" relays bytes and terminates no TLS; TLS termination needs \
                 mode = \"l7\""
            ),
            ClientSubjectWithoutCertificates { index, name } => write!(
                f,
                "class[{index}] ({name:?}).client_subject: no client certificate is asked for, \
                 so the rule could never match; set [tls] client_certificate = \"optional\" or \
                 \"required\" (with client_ca)"
            ),
            ServerAddrTwice {
                index,
                name,
                addr,
                first,
            } => write!(
                f,
                "server[{index}] ({name}): addr = \"{addr}\" is also server {first}'s; one \
                 entry per backend (give it the weight of both)"
            ),
            HealthHttpOnly { key, value } => write!(
                f,
                "health.{key} = {value}: only with kind = \"http\" (a tcp check only \
                 connects); remove the key or set kind = \"http\""
            ),
            InL4 { key, value } => write!(
                f,
                "{key} = {value}: only in mode \"l7\" (mode \"l4\" relays bytes and reads no \
                 HTTP, there is no header to add); remove the key"
            ),
            HttpReuseInL4(value) => write!(
                f,
                "http_reuse = {value}: only in mode \"l7\" (mode \"l4\" relays each client \
                 connection over a backend connection of its own, there is no HTTP connection \
                 to reuse); remove the key"
            ),
        }
    }
}

impl std::error::Error for ConfigProblem {}

/// A configuration that could not be used: the file and what is wrong with which key.
#[derive(Debug)]
pub struct ConfigError {
    pub file: PathBuf,
    pub problem: ConfigProblem,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file.display(), self.problem)
    }
}

impl std::error::Error for ConfigError {}

/// What a start would find wrong on this host (`--check`).
#[derive(Debug)]
pub enum HostProblem {
    /// `control_group` is no group here.
    ControlGroup {
        group: String,
        why: netsched_control::access::GroupError,
    },
    /// `control_socket` names something other than a socket.
    NotASocket(PathBuf),
    /// `control_socket`'s directory does not exist.
    NoDirectory { socket: PathBuf, dir: PathBuf },
    /// Two addresses one host cannot bind at once (`listen[i]` or `admin`).
    Overlap {
        key: String,
        addr: SocketAddr,
        other_key: String,
        other: SocketAddr,
    },
    /// An address that could not be bound.
    Bind {
        key: String,
        addr: SocketAddr,
        source: std::io::Error,
    },
}

impl fmt::Display for HostProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostProblem::ControlGroup { group, why } => {
                write!(f, "control_group = {group:?}: {why}")
            }
            HostProblem::NotASocket(p) => write!(
                f,
                "control_socket = {}: exists and is not a socket",
                p.display()
            ),
            HostProblem::NoDirectory { socket, dir } => write!(
                f,
                "control_socket = {}: directory {} does not exist",
                socket.display(),
                dir.display()
            ),
            HostProblem::Overlap {
                key,
                addr,
                other_key,
                other,
            } => write!(
                f,
                "{key} = {addr}: cannot be bound beside {other_key} = {other} (same port)"
            ),
            HostProblem::Bind { key, addr, source } => {
                write!(f, "{key} = {addr}: ")?;
                match source.kind() {
                    std::io::ErrorKind::AddrInUse => {
                        f.write_str("address already in use (another socket listens there)")
                    }
                    std::io::ErrorKind::PermissionDenied if addr.port() < 1024 => write!(
                        f,
                        "{source} (a port below 1024 needs root or CAP_NET_BIND_SERVICE)"
                    ),
                    std::io::ErrorKind::AddrNotAvailable => {
                        write!(f, "{source} (not an address of this host)")
                    }
                    _ => write!(f, "{source}"),
                }
            }
        }
    }
}

impl std::error::Error for HostProblem {}

/// Why a balancer did not start, or a reload was not applied.
#[derive(Debug)]
pub enum StartError {
    /// The configuration file (reload).
    Config(ConfigError),
    /// The algorithm could not be built.
    Algorithm(BalancerConfigError),
    /// A server of the file could not be added.
    Server(ServerError),
    /// The service classes or the queue discipline.
    Classes(crate::classes::ClassError),
    /// The access log could not be set up (`access_log` of the file).
    AccessLog { file: PathBuf, why: String },
    /// The TLS certificates of the file could not be loaded.
    Tls {
        file: PathBuf,
        source: crate::tls::TlsError,
    },
    /// A change the reload refused, naming the file.
    Reload {
        file: PathBuf,
        source: crate::server_error::ReloadError,
    },
    /// A listen address could not be bound or read back.
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// The `/metrics` listener.
    Metrics(netsched_metrics::MetricsError),
    /// The control socket.
    Control(netsched_control::BindError),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Config(e) => e.fmt(f),
            StartError::Algorithm(e) => write!(f, "algorithm: {e}"),
            StartError::Server(e) => e.fmt(f),
            StartError::Classes(e) => e.fmt(f),
            StartError::AccessLog { file, why } => write!(f, "{}: {why}", file.display()),
            StartError::Tls { file, source } => write!(f, "{}: {source}", file.display()),
            StartError::Reload { file, source } => write!(f, "{}: {source}", file.display()),
            StartError::Listen { addr, source } => write!(f, "listen {addr}: {source}"),
            StartError::Metrics(e) => e.fmt(f),
            StartError::Control(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for StartError {}

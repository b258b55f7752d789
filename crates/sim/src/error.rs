//! Typed errors of the simulator's builders. Each variant names the element (node, link, field)
//! and the value, so the lab can say what to change; `Display` gives the sentence.

use netsched_core::qdisc::QdiscConfigError;

use crate::app::Dist;
use crate::packet::{LinkId, NodeId};

/// A [`crate::tcp::TcpConfig`] field out of range. The message starts with the field's name, so
/// a caller can prefix the table it came from (`tcp.` in a scenario).
#[derive(Debug, Clone, PartialEq)]
pub enum TcpConfigError {
    /// `max_window_segments` outside `1..=max`.
    Window { value: u32, max: u32 },
    /// `segment_bytes` or `ack_bytes` below the 40 bytes of IP and TCP headers.
    HeaderBytes { segment_bytes: u32, ack_bytes: u32 },
    /// A count that must be at least 1 (`initial_cwnd`, `ack_every`).
    Zero { field: &'static str },
    /// `dupthresh` outside `1..=64`.
    Dupthresh { value: u32 },
    /// A time in ms that must be a positive finite number.
    NotPositive { field: &'static str, value: f64 },
}

impl std::fmt::Display for TcpConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Window { value, max } => {
                write!(f, "max_window_segments = {value}: must be in 1..={max}")
            }
            Self::HeaderBytes {
                segment_bytes,
                ack_bytes,
            } => write!(
                f,
                "segment_bytes = {segment_bytes}, ack_bytes = {ack_bytes}: both must be at \
                 least 40 (IP + TCP headers)"
            ),
            Self::Zero { field } => write!(f, "{field}: must be at least 1"),
            Self::Dupthresh { value } => write!(f, "dupthresh = {value}: must be in 1..=64"),
            Self::NotPositive { field, value } => {
                write!(f, "{field} = {value}: must be a positive number")
            }
        }
    }
}

impl std::error::Error for TcpConfigError {}

/// A time distribution whose parameters are not finite, negative, or out of order.
#[derive(Debug, Clone, PartialEq)]
pub struct DistError {
    /// Where the distribution is used (`server service time`, `clients.think`, …).
    pub what: String,
    pub dist: Dist,
}

impl std::fmt::Display for DistError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: bad distribution {:?} (times must be finite and ≥ 0)",
            self.what, self.dist
        )
    }
}

impl std::error::Error for DistError {}

/// Why a [`crate::net::Sim`] builder refused an element.
#[derive(Debug, Clone, PartialEq)]
pub enum SimConfigError {
    /// A link between nodes that do not exist.
    LinkNodes { from: NodeId, to: NodeId },
    /// A link with rate 0.
    LinkRate { from: NodeId, to: NodeId },
    /// A link's egress discipline did not build.
    LinkQdisc {
        from: NodeId,
        to: NodeId,
        source: QdiscConfigError,
    },
    /// An element placed on a node that does not exist (`input stage`, `server`).
    UnknownNode { what: &'static str, node: NodeId },
    /// An input stage's class map names a link that does not exist.
    UnknownLink { node: NodeId, link: LinkId },
    /// An input stage's or server's discipline did not build.
    Qdisc {
        what: &'static str,
        source: QdiscConfigError,
    },
    /// A TCP connection's configuration.
    Tcp {
        src: NodeId,
        dst: NodeId,
        source: TcpConfigError,
    },
    /// A service or think-time distribution.
    Dist(DistError),
    /// A server with no worker.
    NoWorkers,
    /// A client group whose node or server node does not exist.
    ClientNodes { node: NodeId, server: NodeId },
    /// An open-loop client group whose rate is not a positive number.
    ClientRate { rate_per_s: f64 },
}

impl std::fmt::Display for SimConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::LinkNodes { from, to } => write!(f, "link {from}→{to}: unknown node"),
            Self::LinkRate { from, to } => {
                write!(f, "link {from}→{to}: rate_bps must be positive")
            }
            Self::LinkQdisc { from, to, source } => {
                write!(f, "link {from}→{to} qdisc: {source}")
            }
            Self::UnknownNode { what, node } => write!(f, "{what}: unknown node {node}"),
            Self::UnknownLink { node, link } => {
                write!(f, "input stage of node {node}: unknown link {link}")
            }
            Self::Qdisc { what, source } => write!(f, "{what}: {source}"),
            Self::Tcp { src, dst, source } => write!(f, "tcp {src}→{dst}: {source}"),
            Self::Dist(e) => e.fmt(f),
            Self::NoWorkers => write!(f, "server: workers must be at least 1"),
            Self::ClientNodes { node, server } => {
                write!(f, "clients: unknown node ({node} or server {server})")
            }
            Self::ClientRate { rate_per_s } => {
                write!(f, "clients rate_per_s = {rate_per_s}: must be positive")
            }
        }
    }
}

impl std::error::Error for SimConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::LinkQdisc { source, .. } | Self::Qdisc { source, .. } => Some(source),
            Self::Tcp { source, .. } => Some(source),
            Self::Dist(e) => Some(e),
            _ => None,
        }
    }
}

impl From<DistError> for SimConfigError {
    fn from(e: DistError) -> Self {
        Self::Dist(e)
    }
}

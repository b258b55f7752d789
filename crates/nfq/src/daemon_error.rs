//! Why the daemon could not start or stopped on an error, typed ([`DaemonError`]): each
//! variant carries the error of the part that failed (engine, control socket, netlink
//! queue, metrics listener, iptables rules, a thread, the wait for packets), whose text names
//! the value, path, address or system call.
//!
//! Cost: built only when the daemon fails.

use crate::engine_error::EngineError;
use crate::iptables_error::IptablesError;
use crate::netlink::QueueError;
use netsched_control::BindError;
use netsched_metrics::MetricsError;
use netsched_sys::process::SignalError;
use std::fmt;
use std::io;
use std::net::SocketAddr;

#[derive(Debug)]
pub enum DaemonError {
    /// The engine refuses the configuration.
    Engine(EngineError),
    /// The control socket could not be bound or served.
    Control(BindError),
    /// The command channel's eventfd could not be made.
    Channel(io::Error),
    /// The netlink queue failed (open, bind, receive, send).
    Queue(QueueError),
    /// The metrics listener could not be started (`--metrics ADDR`).
    Metrics {
        addr: SocketAddr,
        source: MetricsError,
    },
    /// The iptables rules could not be installed.
    Iptables(IptablesError),
    /// The SIGHUP thread could not be started.
    Signal(SignalError),
    /// Waiting for packets (`poll(2)`) failed.
    Poll(io::Error),
}

impl fmt::Display for DaemonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DaemonError::Engine(e) => write!(f, "{e}"),
            DaemonError::Control(e) => write!(f, "{e}"),
            DaemonError::Channel(e) => write!(f, "{e}"),
            DaemonError::Queue(e) => write!(f, "{e}"),
            DaemonError::Metrics { addr, source } => write!(f, "--metrics {addr}: {source}"),
            DaemonError::Iptables(e) => write!(f, "{e}"),
            DaemonError::Signal(e) => write!(f, "{e}"),
            DaemonError::Poll(e) => write!(f, "poll: {e}"),
        }
    }
}

// No `source()`: the text already holds the inner error's, and a chain printed with `{:#}`
// would repeat it.
impl std::error::Error for DaemonError {}

macro_rules! from {
    ($($t:ty => $v:ident),* $(,)?) => {$(
        impl From<$t> for DaemonError {
            fn from(e: $t) -> Self {
                DaemonError::$v(e)
            }
        }
    )*};
}

from!(
    EngineError => Engine,
    BindError => Control,
    QueueError => Queue,
    IptablesError => Iptables,
    SignalError => Signal,
);

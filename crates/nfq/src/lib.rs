//! # netsched-nfq — P0 on real Linux
//!
//! - [`daemon`]: `netsched nfq`, the percentile scheduler on the NFQUEUE packet path
//!   ([`daemon_error`]: why it could not start or stopped)
//! - [`ctl_client`]: `netsched ctl`, the thesis's control API over a local socket
//!
//! The experiment that runs the daemon behind nginx under the thesis's closed-loop load
//! (`netsched lab run percentile-web --real`) lives in the lab
//! (`netsched_lab::real::percentile_web`: rig, load generator, checks).
//!
//! Inside: [`engine`] decides (no I/O, unit-tested; [`engine_error`] what it refuses),
//! [`netlink`] talks nfnetlink_queue (over `netsched_sys`'s netlink socket, where every system
//! call of the crate is; [`netlink::QueueError`] what fails there),
//! [`control`] is the daemon's side of the control socket (protocol, validation, the
//! hand-off to the packet loop; [`command_error`] what a command can run into), [`metrics`] the `/metrics` families (`--metrics`),
//! [`iptables`] installs and removes the rules,
//! [`discipline`] and [`address_table`] wrap the core's discipline and address table.

#![forbid(unsafe_code)]

pub mod address_table;
pub mod bench;
pub mod cli;
pub mod command_error;
pub mod config;
pub mod config_error;
pub mod control;
pub mod ctl_client;
pub mod daemon;
pub mod daemon_error;
pub mod discipline;
pub mod engine;
pub mod engine_error;
pub mod iptables;
pub mod iptables_error;
pub mod metrics;
pub mod netlink;
pub mod packet;
pub mod reload;
pub mod run_args;
pub mod status;
pub mod verbs;

pub use netsched_core::{Nanos, MS, SEC};

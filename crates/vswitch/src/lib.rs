//! # netsched-vswitch — a host switch that schedules guest interfaces (P2 on real traffic)
//!
//! `netsched vswitch` moves Ethernet frames from N guest interfaces (veth ends whose peers sit
//! in guest namespaces, or TAP devices a VM monitor holds) onto one uplink, as Xen's netback
//! moves packets from the guests' vifs to the physical link (P2, "Delay-constrained
//! scheduling for game-server VMs", §3.2). Each guest port has a bounded vif queue; one core
//! discipline (strict tier priority, P2's delay bitmaps, the wall-clock variant, DRR, WF2Q+,
//! EDF) decides which port's frame goes next, within a forwarding budget that makes guests
//! contend as dom0's CPU did. The way back is a learning bridge.
//!
//! Read top-down:
//! - [`cli`]: the `netsched vswitch` arguments and entry point;
//! - [`config`]: the TOML file (ports, tiers, weights, bounds, budget) → a core discipline;
//! - [`switch`]: the event loop, per-port accounting, removal of vanished ports;
//! - [`switch_error`]: why a switch could not open or stopped, typed;
//! - [`budget`]: the forwarding budget (rate, on/off periods, credit, lost budget);
//! - [`control`]: the control socket (`--control`) and `netsched vswitch ctl`;
//! - [`control_error`]: what a control request can run into, typed;
//! - [`reload`]: SIGHUP and `ctl reload`: the file read again, tiers and weights applied, or
//!   the whole file refused;
//! - [`metrics`]: the Prometheus families (`--metrics`);
//! - [`macs`]: the bounded MAC learning table of the return path;
//! - [`stats`]: what is counted, per port and for the uplink;
//! - [`trace`]: an optional bounded trace of every guest frame's arrival and departure;
//! - [`frame`]: what the disciplines queue (a pool slot and its port).
//!
//! The AF_PACKET ports, the frame pool, epoll, clocks and TAP devices are `netsched_sys`'s.

#![forbid(unsafe_code)]

pub mod budget;
pub mod cli;
pub mod config;
pub mod config_error;
pub mod control;
pub mod control_error;
pub mod frame;
pub mod latency;
pub mod macs;
pub mod metrics;
pub mod reload;
pub mod stats;
pub mod status;
pub mod switch;
pub mod switch_error;
pub mod trace;

pub use config::{Discipline, PortConfig, SwitchConfig};
pub use switch::{
    spawn_in_netns, spawn_in_netns_traced, PortStats, Switch, SwitchHandle, SwitchStats,
    TracedSwitchHandle,
};
pub use switch_error::SwitchError;
pub use trace::{Trace, TraceEvent, TraceKind};

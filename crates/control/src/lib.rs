//! # netsched-control — the daemons' control socket
//!
//! One implementation, used by `netsched nfq`, `netsched vswitch` and `netsched balance`, of
//! what a daemon's local control socket needs: the socket file (mode 0660, the control
//! group, removed only by its owner, taken over by rename for a hitless restart:
//! [`socket_file`]), who may connect ([`access`]: root, the daemon's user, or the control
//! group, by `SO_PEERCRED`), a bounded server that runs the daemon's handler off the packet
//! path ([`server`]: connections, line length, request time; [`line_handler`] words the
//! `ok`/`error:` answers of a line protocol), the bounded hand-off of commands from the
//! control threads to a packet thread and of answers back ([`handoff`]), the one client
//! ([`client`]) and where it finds a daemon's socket ([`run_dir`]: `/run/netsched`, the
//! units' layout), and the log line of each request that changes state ([`audit`]; tests
//! read it with [`log_capture`]). What the requests mean — their verbs, their answers, when the packet thread looks for commands —
//! stays in each daemon.
//!
//! Why a crate of its own: all three data planes need it and none may depend on another; it
//! needs only `netsched-sys` (the socket option, `poll`, `nice`), so it sits beside
//! `testbed` as a layer every data plane may use. No `unsafe`: the system calls are
//! `netsched_sys`'s.

#![forbid(unsafe_code)]

pub mod access;
pub mod audit;
pub mod client;
pub mod handoff;
pub mod line_handler;
pub mod log_capture;
pub mod run_dir;
pub mod server;
pub mod socket_file;

pub use client::{exchange, request_line, ClientError, MAX_ANSWER};
pub use handoff::HandOffError;
pub use line_handler::OkOrError;
pub use log_capture::LogCapture;
pub use run_dir::{CtlSocket, LocateError};
pub use server::{Handler, Limits, LineEnd, Refusal, Request, Server, ServerConfig, WhenFull};
pub use socket_file::{remove_stale_socket, BindError, BindMode};

//! # netsched-link — P3 on real Linux
//!
//! Read top-down:
//! - [`cli`]: the command line of `netsched shape` and `netsched link` (clap arguments, their
//!   conversion into checked configurations, the entry points the binary calls);
//! - [`shape`]: `netsched shape`, the gateway configuration (HTB + u32 ACK class via
//!   `tc -batch`), with one snapshot / apply / verify / restore path;
//! - [`engine`]: `netsched link`, the userspace link engine's event loop, over
//!   - [`emulation`]: one direction of an emulated link (discipline, rate, delay line),
//!   - [`qdisc_spec`]: the discipline spec (`fifo:N`, `ack_sep...`, JSON) and its classifier,
//!   - the AF_PACKET ports (socket, frame pool, batched rx/tx, offloads) and every system
//!     call, behind safe wrappers, come from `netsched_sys` ([`netsched_sys::port`]);
//! - [`metrics`]: `netsched link --metrics ADDR`, the engine's counters on `/metrics`;
//! - [`bench`]: `netsched link bench`.
//!
//! The adsl-ack experiment on real Linux (`netsched lab run adsl-ack --real`) lives in the lab
//! (`netsched_lab::real::adsl_ack`) and drives these.

#![forbid(unsafe_code)]

pub mod args_error;
pub mod bench;
pub mod cli;
pub mod emulation;
pub mod engine;
pub mod engine_error;
pub mod metrics;
pub mod qdisc_spec;
pub mod shape;
pub mod spec_error;
pub mod status;

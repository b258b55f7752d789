//! # netsched-filter — P1's dispatch policies in a real userspace firewall
//!
//! `netsched filter` sits between two interfaces: one dispatcher thread receives frames on the
//! input, cuts each into fixed blocks (64 B by default, the IXP1200's mpackets of P1 §II),
//! and hands work to N worker threads under one of P1's policies (static RR, modified RR,
//! FCFS, modified FCFS — core's, unchanged) or whole packets by flow (flow hash as RSS,
//! bucket work stealing). The SOP block's work is the header matched against an ordered rule
//! set (first match: accept, drop, class); every block's payload is scanned for signatures
//! (Aho-Corasick), each block resuming from the automaton state its predecessor handed over.
//! A per-flow reorder window restores order before the frames leave on the output.
//!
//! Read top-down:
//! - [`cli`]: `netsched filter` arguments and entry point;
//! - [`engine`]: the packet thread (receive, dispatch, order, transmit, accounting);
//! - [`pipeline`]: the dispatcher's logic and the workers, without ports;
//! - [`worker`]: a worker thread and its counters;
//! - [`work`]: the work on one packet, block by block, and the hand-off;
//! - [`packet`]: the frame's tuple, payload bounds and fragment flags, read by the core's header
//!   parser (`netsched_core::wire::parse_frame`: Ethernet, VLAN, IPv4 options, IPv6 extension
//!   headers, fragments);
//! - [`rules`]: the rule file;
//! - [`classifier`]: the classifier seam ([`classifier::build_classifier`]);
//! - [`rule_edit`]: rules held with their handles, changed one at a time while packets flow;
//! - [`signatures`]: the signature file and the resumable scan;
//! - [`verdict`]: verdicts and drop reasons;
//! - [`stats`]: the counters and the accounting identity;
//! - [`control`]: the control socket (`reload`, `set-dispatch`, `show`, `show rules`, `rule`)
//!   and `netsched filter ctl`;
//! - [`control_error`]: what a control request can get wrong (request, tables, packet thread), typed;
//! - [`metrics`]: `GET /metrics`;
//! - [`watchdog`]: the packet thread's heartbeat, and the daemon's fail-safe stop when it stalls;
//! - [`rig`]: the sender — filter — receiver namespaces of the root tests and the lab's real run.
//!
//! The dispatch policies, the flow buckets and the reorder window are
//! `netsched_core::dispatch`'s; ports, the frame pool, polling and pinning `netsched_sys`'s.

#![forbid(unsafe_code)]

pub mod classifier;
pub mod cli;
pub mod config;
pub mod control;
pub mod control_error;
pub mod engine;
pub mod metrics;
pub mod packet;
pub mod pipeline;
pub mod rig;
pub mod rule_edit;
pub mod rules;
pub mod signatures;
pub mod stats;
pub mod status;
pub mod verdict;
pub mod watchdog;
pub mod work;
pub mod worker;

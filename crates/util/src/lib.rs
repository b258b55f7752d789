//! # netsched-util — statistics, bounded file reads and HTTP/1 responses, with no other netsched dependency
//!
//! Small things several layers need and none should pull a larger crate in for:
//! - [`stats`]: the one definition of percentiles (nearest rank), means, spreads and 95%
//!   confidence intervals, so "p99" means the same thing in a data plane's bench, the lab and
//!   the report (`netsched_report::stats` re-exports this module);
//! - [`read`]: [`read::read_text`], the bounded, regular-file-only read every configuration or
//!   results file goes through (`netsched_report::read` re-exports it);
//! - [`notify`]: the sd_notify(3) datagram a daemon sends its service manager (`READY=1`
//!   once its sockets are bound, `RELOADING=1`, `STOPPING=1`).
//! - [`logging`]: the one `tracing` subscriber every binary installs (text, JSON or journald;
//!   a bounded, lossy queue to stderr or to the journal whose drops are counted);
//!   [`journal`] and [`journal_entry`]: the journald sink and journald's native protocol.
//! - [`http1`]: the one HTTP/1.x response reader (head, framing, body decoding), shared by the
//!   balancer's backend client and every load generator.
//! - [`json_lines`]: the packet engines' `--stats` printer thread (one JSON line a snapshot);
//!   [`json_units`]: the JSON outputs' unit rule, checked, and serializers into its units.
//! - [`markdown`]: the fenced examples of a document, for tests that feed them to their parser.
//!
//! A leaf: it depends on `serde`, `serde_json`, `anyhow`, `httparse` and the `tracing` family
//! only, so a data plane can use it without
//! depending on the report (SVG, markdown) or on another data plane.

#![forbid(unsafe_code)]

pub mod http1;
pub mod journal;
pub mod journal_entry;
pub mod json_lines;
pub mod json_units;
pub mod logging;
pub mod markdown;
pub mod notify;
pub mod read;
pub mod stats;

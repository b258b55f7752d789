//! The experiments on real Linux (`netsched lab run NAME --real`): each builds its own
//! namespaces with `netsched_testbed`, drives a data plane (`netsched_link`'s engine and `tc`
//! shaping, `netsched_nfq`'s daemon with nginx and the HTTP load generator), measures, and
//! states the paper's claims as checks, like its simulated twin in [`crate::experiments`].
//! Interrupted runs (Ctrl-C, SIGTERM) stop promptly and remove everything they created.
//!
//! | module | paper | data plane |
//! |---|---|---|
//! | [`adsl_ack`] | P3, ACK separation on an ADSL uplink | `netsched link` (AF_PACKET) + `netsched shape` (tc) |
//! | [`percentile_web`] | P0, percentile scheduling of web requests | `netsched nfq` (NFQUEUE) + nginx |
//! | [`vm_delay`] | P2, delay-constrained scheduling of guest interfaces | `netsched vswitch` (AF_PACKET ports) |
//! | [`lvs_cluster`] | P4, LVS-NAT cluster of 1–15 hosts | `netsched balance` or HAProxy, emulated hosts |

pub mod adsl_ack;
pub mod lvs_cluster;
pub mod percentile_web;
pub mod vm_delay;

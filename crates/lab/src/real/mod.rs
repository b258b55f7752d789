//! The experiments on real Linux (`netsched lab run NAME --real`): each builds its own
//! namespaces with `netsched_testbed`, drives a data plane (`netsched_link`'s engine and `tc`
//! shaping, `netsched_nfq`'s daemon with nginx and the HTTP load generator), measures, and
//! states the paper's claims as checks, like its simulated twin in [`crate::experiments`].
//! Interrupted runs (Ctrl-C, SIGTERM) stop promptly and remove everything they created.
//!
//! | module | paper | data plane |
//! |---|---|---|
//! | [`adsl_ack`] | P3, ACK separation on an ADSL uplink | `netsched link` (AF_PACKET) + `netsched shape` (tc) |
//! | [`np_dispatch`] | P1, block dispatch on a multi-threaded network processor | `netsched filter` (AF_PACKET, worker threads) |
//! | [`percentile_web`] | P0, percentile scheduling of web requests | `netsched nfq` (NFQUEUE) + nginx |
//! | [`vm_delay`] | P2, delay-constrained scheduling of guest interfaces | `netsched vswitch` (AF_PACKET ports) |
//! | [`balance_classes`] | P0's classes at a balancer's request queue | `netsched balance` or HAProxy + nginx |
//! | [`lvs_cluster`] | P4, LVS-NAT cluster of 1–15 hosts | `netsched balance` or HAProxy, emulated hosts |

pub mod adsl_ack;
pub mod balance_classes;
pub mod lvs_cluster;
pub mod np_dispatch;
pub mod percentile_web;
pub mod vm_delay;

use netsched_core::{Nanos, MS};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// How late a thread of this process wakes while `stop` is false — how much of the machine a
/// real run got. Returns (the share of the elapsed time, %, spent more than `slack` past a
/// requested 1 ms sleep; the longest late wake-up, ms). A userspace data plane (the switch,
/// the link engine) waits for a CPU as long as this thread does, so this is the share of its
/// time a busy host took away. Used as a measured precondition: a claim whose margin is
/// smaller than that share cannot be decided by the run.
pub fn watch_lateness(stop: Arc<AtomicBool>, slack: Nanos) -> std::thread::JoinHandle<(f64, f64)> {
    std::thread::spawn(move || {
        let _ = netsched_sys::set_timer_slack(1000);
        let now = netsched_sys::now_ns;
        let (t0, mut lost, mut worst) = (now(), 0u64, 0u64);
        while !stop.load(Ordering::Relaxed) {
            let t = now();
            std::thread::sleep(std::time::Duration::from_millis(1));
            let late = now().saturating_sub(t + MS);
            lost += late.saturating_sub(slack);
            worst = worst.max(late);
        }
        (
            100.0 * lost as f64 / now().saturating_sub(t0).max(1) as f64,
            worst as f64 / MS as f64,
        )
    })
}

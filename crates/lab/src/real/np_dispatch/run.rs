//! One (policy, size) run of `np-dispatch --real`: a fresh filter in the flt namespace (static
//! RR's cursor starts at worker 0), the receiver, the paced sender, and what they counted.
//! The filter and both threads are stopped when it returns, also on error or Ctrl-C.

use super::params::RealParams;
use super::rig::{engine_config, tables, Net};
use super::traffic::{start_receiver, start_sender, Arrivals, Sent};
use anyhow::{Context, Result};
use netsched_filter::engine::spawn_in_netns;
use netsched_filter::stats::FilterStats;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest wait for the receiver after the sender finished, without a new arrival.
const QUIET: Duration = Duration::from_secs(2);

/// What one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct RealRun {
    pub policy: String,
    pub size: u32,
    pub workers: usize,
    pub sent: u64,
    pub refused: u64,
    pub send_secs: f64,
    pub arrived: u64,
    pub arrived_bytes: u64,
    pub out_of_order_at_receiver: u64,
    pub receiver_kernel_drops: u64,
    pub span_s: f64,
    pub filter: FilterStats,
    /// Share of the time (%) a 1 ms sleeper of this process woke > 1 ms late, and its
    /// longest late wake-up (ms): how much of the machine the run got.
    pub host_late_pct: f64,
    pub host_max_late_ms: f64,
}

impl RealRun {
    /// Per worker: time spent running blocks (busy − waiting for a predecessor's hand-off),
    /// ns. Its thread's CPU time is no measure of the blocks' work here: the wake-ups of a
    /// hand-off between threads cost more CPU than a block (see the report's note).
    pub fn work_ns(&self) -> Vec<f64> {
        self.filter
            .pipeline
            .workers
            .iter()
            .map(|w| w.busy_ns.saturating_sub(w.handoff_wait_ns) as f64)
            .collect()
    }

    /// Per worker: header blocks taken.
    pub fn sops(&self) -> Vec<u64> {
        self.filter
            .pipeline
            .workers
            .iter()
            .map(|w| w.sops)
            .collect()
    }

    /// Workers that took at least one header block.
    pub fn sop_workers(&self) -> usize {
        self.sops().iter().filter(|&&s| s > 0).count()
    }

    /// 1 − work / (workers × arrival span), %: P1's idle time (waiting counts as idle).
    pub fn idle_pct(&self) -> f64 {
        let work: f64 = self.work_ns().iter().sum();
        let span = self.span_s.max(1e-3) * 1e9 * self.workers as f64;
        100.0 * (1.0 - work / span)
    }

    /// Forwarded bytes over the arrival span, Mbit/s.
    pub fn rate_mbps(&self) -> f64 {
        self.arrived_bytes as f64 * 8.0 / self.span_s.max(1e-3) / 1e6
    }

    /// Frames the filter received that were not sent by the test (0 on a quiet link).
    pub fn strays(&self) -> u64 {
        self.filter.received.saturating_sub(self.sent)
    }

    pub fn summary(&self) -> String {
        let f = &self.filter;
        format!(
            "sent {} arrived {} (kernel drops filter {} receiver {}), forwarded {} dropped {}, \
             order before/after window {}/{}, at receiver {}; SOPs per worker {:?}; idle {:.1}%; \
             late wake-ups {:.1}%",
            self.sent,
            self.arrived,
            f.kernel_drops,
            self.receiver_kernel_drops,
            f.forwarded,
            f.dropped,
            f.pipeline.order.violations_before,
            f.pipeline.order.violations_after,
            self.out_of_order_at_receiver,
            self.sops(),
            self.idle_pct(),
            self.host_late_pct
        )
    }
}

/// Run `policy` at `size` bytes through a fresh filter.
pub fn run_one(net: &Net, rp: &RealParams, policy: &str, size: u32) -> Result<RealRun> {
    let packets = rp.packets(size);
    let pps = rp.block_rate as f64 / RealParams::blocks_of(size) as f64;
    let rx = start_receiver(&net.rcv, &net.r0, rp.flows)?;
    let filter = spawn_in_netns(&net.flt, engine_config(net, rp, policy)?, tables(rp)?, None)
        .context("starting netsched filter")?;
    let stop_watch = Arc::new(AtomicBool::new(false));
    let watch = crate::real::watch_lateness(Arc::clone(&stop_watch), netsched_core::MS);
    let sender = start_sender(&net.snd, &net.s0, packets, size, rp.flows, pps)?;
    // Bounded: three times the paced time plus 30 s, then the sender is stopped.
    let limit = Duration::from_secs_f64(if pps > 0.0 {
        3.0 * packets as f64 / pps
    } else {
        0.0
    }) + Duration::from_secs(30);
    let t0 = Instant::now();
    while sender.is_running() && t0.elapsed() < limit {
        if netsched_testbed::interrupted() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let sent: Sent = sender.stop()?;
    netsched_testbed::check_interrupted()?;
    rx.wait_for(sent.frames, QUIET)?;
    let stats = filter.stop()?;
    stop_watch.store(true, Ordering::Relaxed);
    let (host_late_pct, host_max_late_ms) = watch.join().unwrap_or((f64::NAN, f64::NAN));
    std::thread::sleep(Duration::from_millis(100));
    let a: Arrivals = rx.thread.stop()?;
    Ok(RealRun {
        policy: policy.to_string(),
        size,
        workers: rp.workers,
        sent: sent.frames,
        refused: sent.refused,
        send_secs: sent.secs,
        arrived: a.frames,
        arrived_bytes: a.bytes,
        out_of_order_at_receiver: a.out_of_order,
        receiver_kernel_drops: a.kernel_drops,
        span_s: a.span_s,
        filter: stats,
        host_late_pct,
        host_max_late_ms,
    })
}

//! The filter's block costs on this host, measured before the run for the sim column, through
//! the filter's own pipeline with one worker: a header block (classification against the
//! run's rules + the signature scan of its bytes) and a payload block (the scan), each with
//! what a worker spends per task; and one hand-off between two threads (a condition
//! variable wake-up, as between a block and its successor on another worker). Medians, so a
//! preemption or two does not move them.

use super::params::{RealParams, BLOCK_BYTES};
use super::rig::{tables, DST, SRC};
use anyhow::Result;
use netsched_filter::packet::udp4_frame;
use netsched_filter::pipeline::{DispatchMode, Pipeline, PipelineConfig};
use netsched_filter::verdict::{Fragments, OnPanic, OnSignature};
use netsched_filter::work::{Tables, WorkPolicy};
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Packets per measurement, and measurements (alternating sizes; medians).
const PACKETS: usize = 400;
const REPEATS: usize = 5;
/// Frame length of the long packets (24 blocks: one header block, 23 payload blocks).
const FRAME: usize = 1500;

/// Block costs on this host (ns), as a worker sees them: a block's work plus what the worker
/// spends on each task besides (its queue, its counters, the report to the dispatcher).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct BlockCosts {
    pub sop_ns: f64,
    pub other_ns: f64,
    /// One hand-off between two threads (half a ping-pong round trip).
    pub handoff_ns: f64,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Through a one-worker pipeline with the run's tables: busy time per packet of 64 B (one
/// header block: `sop_ns`) and of 1500 B (a header block and 23 payload blocks:
/// `other_ns` = the difference / 23). One worker, so no hand-off ever waits; the same method
/// for both, so a busy host inflates both alike.
pub fn block_costs(rp: &RealParams) -> Result<BlockCosts> {
    let t = tables(rp)?;
    let small = udp4_frame(SRC, DST, 1000, 2000, &[b'.'; 64 - 42]);
    let big = udp4_frame(SRC, DST, 1000, 2000, &vec![b'.'; FRAME - 42]);
    let (mut s, mut b) = (Vec::new(), Vec::new());
    for _ in 0..REPEATS {
        s.push(busy_per_packet(&t, &small)?);
        b.push(busy_per_packet(&t, &big)?);
    }
    let (sop_ns, big_ns) = (median(&mut s), median(&mut b));
    let blocks = (FRAME as f64 / BLOCK_BYTES as f64).ceil();
    Ok(BlockCosts {
        sop_ns,
        other_ns: ((big_ns - sop_ns) / (blocks - 1.0)).max(0.0),
        handoff_ns: handoff_ns(),
    })
}

/// Mean busy time per packet of one worker taking [`PACKETS`] copies of `frame` block by
/// block (static RR over one worker), through the filter's own pipeline.
fn busy_per_packet(t: &Arc<Tables>, frame: &[u8]) -> Result<f64> {
    let mut pool = netsched_sys::FramePool::new(PACKETS);
    let mut p = Pipeline::start(
        PipelineConfig {
            workers: 1,
            block_size: BLOCK_BYTES,
            worker_queue: 64,
            reorder_window: PACKETS,
            reorder_timeout_ns: 5_000_000_000,
            max_flows: 16,
            mode: DispatchMode::parse("static_rr").map_err(|e| anyhow::anyhow!(e))?,
            work: WorkPolicy {
                on_signature: OnSignature::Drop,
                on_panic: OnPanic::Drop,
                accept_non_ip: true,
                fragments: Fragments::Drop,
                fault_panic_on: None,
            },
            pin: false,
        },
        t.clone(),
        &pool,
    )
    .map_err(|e| anyhow::anyhow!("calibration pipeline: {e}"))?;
    let mut out = Vec::new();
    for slot in 0..PACKETS as u32 {
        let len = pool.fill(slot, frame);
        p.submit(&mut pool, slot, len);
    }
    let until = Instant::now() + std::time::Duration::from_secs(30);
    while p.in_flight() > 0 && Instant::now() < until {
        p.wait(std::time::Duration::from_millis(5), &mut pool, &mut out);
    }
    let w = p.stats().workers[0];
    let _ = p.stop(&mut pool);
    if w.tasks == 0 {
        anyhow::bail!("calibration pipeline ran no task");
    }
    Ok(w.busy_ns as f64 / PACKETS as f64)
}

/// Round trips of the hand-off measurement.
const ROUND_TRIPS: usize = 2000;

/// Half the median round trip of a turn passed between two threads through an atomic
/// counter, each side spinning (then yielding) until its turn comes: how a block hands over
/// to its successor in `netsched_filter::work` when the successor is already waiting.
fn handoff_ns() -> f64 {
    let turn = Arc::new(AtomicU64::new(0));
    let other = Arc::clone(&turn);
    let wait_for = |t: &AtomicU64, want: u64| {
        let mut spins = 0u32;
        while t.load(Ordering::Acquire) != want {
            spins += 1;
            if spins < 256 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    };
    let peer = std::thread::spawn(move || {
        for i in 0..ROUND_TRIPS as u64 {
            wait_for(&other, 2 * i + 1);
            other.store(2 * i + 2, Ordering::Release);
        }
    });
    let mut rounds = Vec::with_capacity(ROUND_TRIPS);
    for i in 0..ROUND_TRIPS as u64 {
        let at = Instant::now();
        turn.store(2 * i + 1, Ordering::Release);
        wait_for(&turn, 2 * i + 2);
        rounds.push(at.elapsed().as_nanos() as f64 / 2.0);
    }
    let _ = peer.join();
    median(&mut rounds)
}

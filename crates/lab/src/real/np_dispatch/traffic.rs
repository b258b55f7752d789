//! The test stream of `np-dispatch --real`: a paced AF_PACKET sender of UDP frames of one
//! length (flow id and per-flow sequence number in the payload) and an AF_PACKET receiver that
//! counts them and checks each flow's order. Both run on their own thread in their namespace
//! and stop on request (Ctrl-C included); every wait is bounded.

use super::rig::{DST, SRC};
use anyhow::Result;
use netsched_filter::packet::udp4_frame;
use netsched_sys::port::{FramePool, Port, Rx, BATCH};
use netsched_testbed::NetnsThread;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MAGIC: &[u8; 4] = b"NPR1";
/// Headers before the payload: Ethernet 14 + IPv4 20 + UDP 8.
const HEADERS: usize = 42;
/// Frames sent back to back between pauses.
const BURST: u64 = 16;
/// Tries of one frame the sending socket refuses for now (ENOBUFS), 200 µs apart.
const SEND_TRIES: u32 = 100;

/// What the sender did.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sent {
    pub frames: u64,
    /// Frames the sending socket refused `SEND_TRIES` times.
    pub refused: u64,
    pub secs: f64,
}

/// Frame `seq` of `flow`, exactly `size` bytes long.
fn frame(flow: u8, seq: u32, size: u32) -> Vec<u8> {
    let mut payload = vec![b'.'; (size as usize).saturating_sub(HEADERS).max(9)];
    payload[..4].copy_from_slice(MAGIC);
    payload[4] = flow;
    payload[5..9].copy_from_slice(&seq.to_be_bytes());
    udp4_frame(SRC, DST, 1000 + flow as u16, 2000 + flow as u16, &payload)
}

/// (flow, seq) of a test frame.
fn tag(f: &[u8]) -> Option<(u8, u32)> {
    let b = f.get(HEADERS..HEADERS + 9)?;
    (&b[..4] == MAGIC).then(|| (b[4], u32::from_be_bytes([b[5], b[6], b[7], b[8]])))
}

/// Send `packets` frames of `size` bytes round robin over `flows` flows from `dev` in `ns`,
/// `pps` per second in bursts of [`BURST`] (0: as fast as the socket takes them).
pub fn start_sender(
    ns: &str,
    dev: &str,
    packets: u64,
    size: u32,
    flows: u8,
    pps: f64,
) -> Result<NetnsThread<Sent>> {
    let dev = dev.to_string();
    NetnsThread::spawn(
        "sender",
        "np-sender".into(),
        ns,
        move || Ok(Port::open(&dev)?),
        move |port, stop| {
            let mut templates: Vec<Vec<u8>> = (0..flows).map(|f| frame(f, 0, size)).collect();
            let t0 = Instant::now();
            let mut sent = Sent::default();
            for i in 0..packets {
                if stop() {
                    break;
                }
                if pps > 0.0 && i % BURST == 0 {
                    let due = t0 + Duration::from_secs_f64(i as f64 / pps);
                    if let Some(wait) = due.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                }
                let flow = (i % flows as u64) as usize;
                let seq = (i / flows as u64) as u32;
                let f = &mut templates[flow];
                f[HEADERS + 5..HEADERS + 9].copy_from_slice(&seq.to_be_bytes());
                let mut tries = 0;
                while port.send_frame(f).is_err() && tries < SEND_TRIES && !stop() {
                    tries += 1;
                    std::thread::sleep(Duration::from_micros(200));
                }
                if tries < SEND_TRIES && !stop() {
                    sent.frames += 1;
                } else {
                    sent.refused += 1;
                }
            }
            sent.secs = t0.elapsed().as_secs_f64();
            Ok(sent)
        },
    )
}

/// What the receiver saw.
#[derive(Debug, Clone, Copy, Default)]
pub struct Arrivals {
    pub frames: u64,
    pub bytes: u64,
    /// Frames whose sequence number was not above their flow's previous one.
    pub out_of_order: u64,
    /// Frames the receiver's kernel socket dropped.
    pub kernel_drops: u64,
    /// First to last arrival, s.
    pub span_s: f64,
}

/// A running receiver and how many test frames it has seen so far.
pub struct Receiver {
    pub thread: NetnsThread<Arrivals>,
    pub seen: Arc<AtomicU64>,
}

impl Receiver {
    /// Wait until `want` test frames arrived, or none arrived for `quiet` (a backlog still
    /// draining keeps the wait going).
    pub fn wait_for(&self, want: u64, quiet: Duration) -> Result<()> {
        let mut last = self.seen.load(Ordering::Relaxed);
        let mut since = Instant::now();
        while last < want && since.elapsed() < quiet {
            netsched_testbed::check_interrupted()?;
            std::thread::sleep(Duration::from_millis(20));
            let now = self.seen.load(Ordering::Relaxed);
            if now != last {
                last = now;
                since = Instant::now();
            }
        }
        Ok(())
    }
}

/// Count test frames on `dev` in `ns` until stopped.
pub fn start_receiver(ns: &str, dev: &str, flows: u8) -> Result<Receiver> {
    let dev = dev.to_string();
    let seen = Arc::new(AtomicU64::new(0));
    let seen2 = seen.clone();
    let thread = NetnsThread::spawn(
        "receiver",
        "np-receiver".into(),
        ns,
        move || Ok(Port::open(&dev)?),
        move |port, stop| {
            let mut pool = FramePool::new(512);
            let mut ev = [Rx::Oversize { len: 0 }; BATCH];
            let mut last: Vec<Option<u32>> = vec![None; flows as usize];
            let mut a = Arrivals::default();
            let (mut first, mut latest) = (None, Instant::now());
            while !stop() {
                let (_, n) = port.recv(&mut pool, &mut ev);
                for e in &ev[..n] {
                    if let Rx::Frame { slot, len } = *e {
                        if let Some((flow, seq)) = tag(pool.data(slot, len)) {
                            let now = Instant::now();
                            first.get_or_insert(now);
                            latest = now;
                            a.frames += 1;
                            a.bytes += len as u64;
                            if let Some(prev) = last.get_mut(flow as usize) {
                                if prev.is_some_and(|p| seq <= p) {
                                    a.out_of_order += 1;
                                }
                                *prev = Some(seq);
                            }
                            seen2.fetch_add(1, Ordering::Relaxed);
                        }
                        pool.release(slot);
                    }
                }
                a.kernel_drops += port.take_kernel_drops();
                if n == 0 {
                    let _ = netsched_sys::epoll::poll_in(&[(port.raw_fd(), true)], 5_000_000);
                }
            }
            a.span_s = first.map_or(0.0, |f| latest.duration_since(f).as_secs_f64());
            Ok(a)
        },
    )?;
    Ok(Receiver { thread, seen })
}

//! The ring port: one interface read through an mmap'ed `PACKET_RX_RING` (`TPACKET_V2`,
//! [`crate::tpacket`], or `TPACKET_V3`, [`crate::tpacket_v3`]) and written with `sendmmsg(2)` or through a `PACKET_TX_RING`
//! (packet(7); kernel Documentation/networking/packet_mmap.rst). It implements
//! [`FramePort`], so the link engine and the host switch run on it unchanged: each frame is
//! copied out of the ring into a [`FramePool`] slot and its ring frame handed straight back,
//! because a frame may then wait for a long time (a delay line, a scheduler queue) and must not
//! hold the ring.
//!
//! **`TPACKET_V2` by default, `TPACKET_V3` on request** ([`RingPort::open_v3`], backend
//! `tpacket_v3`): a V3 block is handed to userspace only when it is full or when its retire
//! timer (`tp_retire_blk_tov`, whole milliseconds) fires (packet_mmap.rst, "TPACKET_V3"), and
//! the socket is woken per block; V2 hands over every frame as soon as it is written. Measured
//! (docs/bench-link.md, "Receive ring", eight alternating runs on 2026-11-27, load 7–9): per
//! CPU-second of the link engine's thread the two forward the same (V3/V2 median 1.01× at 64 B,
//! 0.98× at 1500 B), while V3 adds 0.2–1.7 ms per crossing at light load against 15–34 µs on
//! V2. Against `recvmmsg` (six runs on 2026-11-26, load 15–19): 528–720 k pkt/s per CPU-second
//! at 64 B on the V2 ring against 309–429 k.
//!
//! **Transmit**: `sendmmsg` from the pool by default; with `tx_frames > 0` the frames are copied
//! into a `PACKET_TX_RING` and sent by one `send(2)` with no data (`MSG_DONTWAIT`), which the
//! kernel turns into one skb per marked frame. Measured (same page, two interleaved pairs at
//! load 12–13): 717 k / 465 k pkt/s per CPU-second at 64 B with `sendmmsg`, 635 k / 585 k with
//! a 4096-frame TX ring — no gain beyond the spread, so `sendmmsg` is the default (no ring
//! memory; a frame is taken or not when the call returns).
//!
//! The socket is set up like [`crate::port::Port`]'s (protocol 0 until the ring exists, then
//! `ETH_P_ALL`, promiscuous, `PACKET_IGNORE_OUTGOING`, `PACKET_QDISC_BYPASS`). Kernel drops are
//! `PACKET_STATISTICS`' `tp_drops`: with a ring there is no socket queue, so they are frames
//! that found the ring full (V2 has no `tp_freeze_q_cnt`, a V3 field).
//!
//! Cost per frame: one status load, one copy of the frame, one status store; one `poll` or
//! `epoll_wait` per wake-up. Memory: [`RingPort::ring_bytes`], mapped at open.

use crate::packet::PacketFd;
use crate::port::{self, FramePool, FramePort, Offloads, Rx, BATCH, SLOT};
use crate::tpacket::{ring_frames, Ring, RxFrame};
use crate::tpacket_v3::RingV3;
use crate::vlan;
use std::cell::Cell;
use std::io;
use std::os::fd::RawFd;

/// Ring sizes of one port, in frames of [`crate::tpacket::RING_FRAME`] bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct RingConfig {
    /// RX ring frames ([`crate::tpacket::MIN_RING_FRAMES`]..=[`crate::tpacket::MAX_RING_FRAMES`],
    /// rounded up to whole blocks).
    pub rx_frames: usize,
    /// TX ring frames; 0: no TX ring, send with `sendmmsg`.
    pub tx_frames: usize,
}

impl Default for RingConfig {
    /// 4096 RX frames (8 MiB), no TX ring.
    fn default() -> Self {
        Self {
            rx_frames: 4096,
            tx_frames: 0,
        }
    }
}

impl RingConfig {
    /// The sizes within their bounds, or an error naming the one that is not (as `rx_name` /
    /// `tx_name`, the caller's names for them).
    pub fn check(&self, rx_name: &str, tx_name: &str) -> io::Result<()> {
        ring_frames(self.rx_frames, rx_name)?;
        if self.tx_frames != 0 {
            ring_frames(self.tx_frames, tx_name)?;
        }
        Ok(())
    }
}

/// The receive ring of a [`RingPort`]: frame by frame (`TPACKET_V2`, with an optional TX
/// ring) or block by block (`TPACKET_V3`, receive only).
#[derive(Debug)]
enum RxRing {
    V2(Ring),
    V3(RingV3),
}

/// An open ring port on one interface.
#[derive(Debug)]
pub struct RingPort {
    ring: RxRing,
    fd: PacketFd,
    name: String,
    offloads: Offloads,
    /// TX ring: `send(2)` kicks that failed (frames stay marked; the next kick sends them).
    kick_errors: Cell<u64>,
    /// The kernel's receive time of each event of the last [`RingPort::recv`] (0: none).
    stamps: Box<[Cell<u64>]>,
}

impl RingPort {
    /// Open interface `dev` in the calling thread's network namespace with `TPACKET_V2` rings
    /// of `cfg`.
    pub fn open(dev: &str, cfg: RingConfig) -> io::Result<Self> {
        Self::open_version(dev, cfg, false)
    }

    /// Open interface `dev` with a `TPACKET_V3` receive ring of `cfg.rx_frames` frames' worth
    /// of blocks; it transmits with `sendmmsg` (a `cfg.tx_frames` other than 0 is refused).
    pub fn open_v3(dev: &str, cfg: RingConfig) -> io::Result<Self> {
        Self::open_version(dev, cfg, true)
    }

    fn open_version(dev: &str, cfg: RingConfig, v3: bool) -> io::Result<Self> {
        if v3 && cfg.tx_frames != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "ring on {dev}: tpacket_v3 transmits with sendmmsg; tx ring frames {} must be 0",
                    cfg.tx_frames
                ),
            ));
        }
        let (fd, ifindex) = port::open_socket(dev, false)?;
        // The ring is set up before bind, so no frame arrives outside it.
        let ring = if v3 {
            RingV3::setup(&fd, cfg.rx_frames).map(RxRing::V3)
        } else {
            Ring::setup(&fd, cfg.rx_frames, cfg.tx_frames).map(RxRing::V2)
        }
        .map_err(|e| io::Error::new(e.kind(), format!("ring on {dev}: {e}")))?;
        let offloads = port::attach(&fd, ifindex, dev)?;
        Ok(Self {
            ring,
            fd,
            name: dev.to_string(),
            offloads,
            kick_errors: Cell::new(0),
            stamps: (0..BATCH).map(|_| Cell::new(0)).collect(),
        })
    }

    /// `true` on a `TPACKET_V3` receive ring.
    pub fn is_v3(&self) -> bool {
        matches!(self.ring, RxRing::V3(_))
    }
    /// Bytes of ring memory mapped for this port.
    pub fn ring_bytes(&self) -> usize {
        match &self.ring {
            RxRing::V2(r) => r.bytes(),
            RxRing::V3(r) => r.bytes(),
        }
    }
    /// The ring sizes in use (after rounding to whole blocks).
    pub fn ring_config(&self) -> RingConfig {
        match &self.ring {
            RxRing::V2(r) => RingConfig {
                rx_frames: r.rx_frames(),
                tx_frames: r.tx_frames(),
            },
            RxRing::V3(r) => RingConfig {
                rx_frames: r.rx_frames(),
                tx_frames: 0,
            },
        }
    }
    /// TX ring frames the kernel refused so far (`TP_STATUS_WRONG_FORMAT`; the engines count
    /// such a frame as sent: it left their pool).
    pub fn tx_rejected(&self) -> u64 {
        match &self.ring {
            RxRing::V2(r) => r.tx_rejected(),
            RxRing::V3(_) => 0,
        }
    }

    /// The next received frame to `f`, from whichever ring this port has.
    #[inline]
    fn rx_next<R>(&self, f: impl FnOnce(RxFrame<'_>) -> R) -> Option<R> {
        match &self.ring {
            RxRing::V2(r) => r.rx_next(f),
            RxRing::V3(r) => r.rx_next(f),
        }
    }
    /// TX ring kicks (`send(2)`) that failed so far.
    pub fn kick_errors(&self) -> u64 {
        self.kick_errors.get()
    }

    /// Copy up to `out.len()` (≤ [`BATCH`]) waiting ring frames into free slots of `pool`;
    /// see [`crate::port::Port::recv`].
    #[inline]
    pub fn recv(&self, pool: &mut FramePool, out: &mut [Rx]) -> (usize, usize) {
        let (mut read, mut k) = (0, 0);
        let want = out.len().min(BATCH);
        while k < want {
            let Some(slot) = pool.alloc() else { break };
            let got = self.rx_next(|f| {
                if f.outgoing {
                    return None;
                }
                self.stamps[k].set(f.stamp_ns);
                let tagged = f.wire_len + f.vlan.map_or(0, |_| vlan::TAG_LEN);
                if f.wire_len > f.data.len() {
                    return Some(Rx::Oversize { len: tagged });
                }
                match vlan::copy_with_tag(pool.slot_mut(slot), f.data, f.vlan) {
                    Some(len) => Some(Rx::Frame {
                        slot,
                        len: len as u32,
                    }),
                    None => Some(Rx::Oversize { len: tagged }),
                }
            });
            match got {
                None => {
                    pool.release(slot);
                    break;
                }
                Some(ev) => {
                    read += 1;
                    match ev {
                        Some(rx @ Rx::Frame { .. }) => {
                            out[k] = rx;
                            k += 1;
                        }
                        Some(rx) => {
                            pool.release(slot);
                            out[k] = rx;
                            k += 1;
                        }
                        None => pool.release(slot),
                    }
                }
            }
        }
        (read, k)
    }

    /// Send `(slot, len)` frames of `pool` (at most [`BATCH`]): through the TX ring if there
    /// is one (returns how many found a ring frame), else with one `sendmmsg`.
    #[inline]
    pub fn send(&self, pool: &FramePool, frames: &[(u32, u32)]) -> io::Result<usize> {
        let frames = &frames[..frames.len().min(BATCH)];
        let ring = match &self.ring {
            RxRing::V2(r) if r.tx_frames() > 0 => r,
            _ => {
                let (base, buf_len) = pool.raw_const();
                // SAFETY: the kernel only reads the listed slots; nobody writes them during
                // the call (writes need `&mut pool`).
                return unsafe { self.fd.send_batch(base, buf_len, SLOT, frames) };
            }
        };
        let mut put = 0;
        for &(slot, len) in frames {
            if len as usize > SLOT || !ring.tx_put(pool.data(slot, len)) {
                break;
            }
            put += 1;
        }
        if self.fd.kick_tx().is_err() {
            self.kick_errors.set(self.kick_errors.get() + 1);
        }
        Ok(put)
    }

    /// Frames the kernel dropped since the last call (the ring was full).
    pub fn take_kernel_drops(&self) -> u64 {
        self.fd.take_drops()
    }

    /// When the kernel wrote event `event` of the last [`RingPort::recv`] into the ring
    /// (`CLOCK_REALTIME` ns, [`crate::tpacket::RxFrame::stamp_ns`]).
    #[inline]
    pub fn rx_stamp(&self, event: usize) -> Option<u64> {
        self.stamps.get(event).map(Cell::get).filter(|&t| t != 0)
    }
}

impl FramePort for RingPort {
    fn name(&self) -> &str {
        &self.name
    }
    fn raw_fd(&self) -> RawFd {
        self.fd.raw()
    }
    #[inline]
    fn recv(&self, pool: &mut FramePool, out: &mut [Rx]) -> (usize, usize) {
        RingPort::recv(self, pool, out)
    }
    #[inline]
    fn send(&self, pool: &FramePool, frames: &[(u32, u32)]) -> io::Result<usize> {
        RingPort::send(self, pool, frames)
    }
    fn take_kernel_drops(&self) -> u64 {
        RingPort::take_kernel_drops(self)
    }
    fn rx_stamp(&self, event: usize) -> Option<u64> {
        RingPort::rx_stamp(self, event)
    }
    fn offloads(&self) -> Offloads {
        self.offloads
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_v3_ring_with_a_tx_ring_is_refused_by_name() {
        let cfg = RingConfig {
            rx_frames: 64,
            tx_frames: 64,
        };
        let e = RingPort::open_v3("nsx-any0", cfg).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(
            e.to_string().contains("nsx-any0") && e.to_string().contains("tx ring frames 64"),
            "{e}"
        );
    }
}

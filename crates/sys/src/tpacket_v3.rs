//! A `TPACKET_V3` receive ring of an `AF_PACKET` socket (packet(7); kernel
//! Documentation/networking/packet_mmap.rst, "TPACKET_V3"): the kernel fills whole blocks with
//! variable-length frames and hands a block over at once, when it is full or when its retire
//! timer (`tp_retire_blk_tov`, whole milliseconds) fires; frames are read in place and the block
//! is given back when its last frame has been read. Every pointer into the mapping is made and
//! bounds-checked here; the port built on it is [`crate::ring_port`] (`tpacket_v3`).
//!
//! Layout (`include/uapi/linux/if_packet.h`): a block opens with `struct tpacket_block_desc`
//! (`version` u32 at 0, `offset_to_priv` u32 at 4, then `struct tpacket_hdr_v1`:
//! `block_status` u32 at 8, `num_pkts` u32 at 12, `offset_to_first_pkt` u32 at 16); each frame
//! opens with `struct tpacket3_hdr` (`tp_next_offset` u32 at 0, `tp_sec` and `tp_nsec` u32 at 4 and 8, `tp_snaplen` u32 at 12,
//! `tp_len` u32 at 16, `tp_mac` u16 at 24; 48 bytes), followed by the `struct sockaddr_ll`
//! (`sll_pkttype` its byte 10). Ownership passes through `block_status`: `TP_STATUS_USER` when
//! the kernel closed the block, `TP_STATUS_KERNEL` when we give it back; read with acquire and
//! written with release ordering.
//!
//! Cost: the kernel copies each frame into the open block in softirq and wakes the socket once
//! per block (not per frame); reading a frame is the caller's copy, a block one status load and
//! one store. A lone frame waits for its block's retire timer: [`RETIRE_MS`]. Memory: the same
//! `rx_frames × RING_FRAME` bytes as the V2 ring of that size, in blocks of [`RING_BLOCK`].

use crate::packet::PacketFd;
use crate::socket::setsockopt;
use crate::tpacket::{
    ring_frames, Mapping, RxFrame, FRAMES_PER_BLOCK, PACKET_RX_RING, PACKET_VERSION, RING_BLOCK,
    RING_FRAME, TP_STATUS_KERNEL, TP_STATUS_USER,
};
use crate::vlan::VlanTag;
use std::cell::Cell;
use std::io;
use std::sync::atomic::{AtomicU32, Ordering};

/// `include/uapi/linux/if_packet.h` (`enum tpacket_versions`).
const TPACKET_V3: i32 = 2;
/// Block retire timeout, milliseconds: the smallest the option takes (0 asks the kernel to
/// derive one from the link speed, 8 ms on a link without one: net/packet/af_packet.c,
/// `prb_calc_retire_blk_tmo`).
pub const RETIRE_MS: u32 = 1;
/// `sizeof(struct tpacket3_hdr)`; the `sockaddr_ll` follows at this (16-aligned) offset.
const HDR_LEN: usize = 48;
/// Offset of `sll_pkttype` from a frame's start.
const SLL_PKTTYPE_OFFSET: usize = HDR_LEN + 10;

/// `struct tpacket_req3` (`include/uapi/linux/if_packet.h`).
#[repr(C)]
struct TpacketReq3 {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
    retire_blk_tov: u32,
    sizeof_priv: u32,
    feature_req_word: u32,
}

/// The V3 RX ring of one `AF_PACKET` socket.
#[derive(Debug)]
pub struct RingV3 {
    map: Mapping,
    blocks: usize,
    rx_frames: usize,
    /// The block being read (or next to look at).
    cur: Cell<usize>,
    /// Frames of the current block not yet read (0: no block open).
    left: Cell<u32>,
    /// Offset of the next frame inside the current block.
    next: Cell<usize>,
}

impl RingV3 {
    /// Switch `fd` to `TPACKET_V3` and give it an RX ring of `rx_frames` worth of
    /// [`RING_FRAME`] bytes (rounded up to whole blocks), blocks retired after [`RETIRE_MS`].
    /// Call before `bind`.
    pub fn setup(fd: &PacketFd, rx_frames: usize) -> io::Result<Self> {
        let rx_frames = ring_frames(rx_frames, "rx ring")?;
        fd.set_int(libc::SOL_PACKET, PACKET_VERSION, TPACKET_V3)
            .map_err(|e| io::Error::new(e.kind(), format!("PACKET_VERSION TPACKET_V3: {e}")))?;
        let blocks = rx_frames / FRAMES_PER_BLOCK;
        let req = TpacketReq3 {
            block_size: RING_BLOCK as u32,
            block_nr: blocks as u32,
            frame_size: RING_FRAME as u32,
            frame_nr: rx_frames as u32,
            retire_blk_tov: RETIRE_MS,
            sizeof_priv: 0,
            feature_req_word: 0,
        };
        setsockopt(fd, libc::SOL_PACKET, PACKET_RX_RING, &req)
            .map_err(|e| io::Error::new(e.kind(), format!("PACKET_RX_RING (V3): {e}")))?;
        Ok(Self {
            map: Mapping::of_rings(fd, blocks * RING_BLOCK, "the V3 ring")?,
            blocks,
            rx_frames,
            cur: Cell::new(0),
            left: Cell::new(0),
            next: Cell::new(0),
        })
    }

    /// Bytes mapped.
    pub fn bytes(&self) -> usize {
        self.map.len
    }
    /// The ring's size in [`RING_FRAME`]s (its memory; a block holds as many frames as fit).
    pub fn rx_frames(&self) -> usize {
        self.rx_frames
    }

    /// Start of block `i` (< blocks: inside the mapping).
    #[inline]
    fn block(&self, i: usize) -> *mut u8 {
        self.map.base.wrapping_add(i * RING_BLOCK)
    }

    #[inline]
    fn u32_at(&self, p: *mut u8) -> u32 {
        // SAFETY: callers pass a pointer at least 4 bytes before the end of a block of the
        // mapping; plain integers the kernel wrote before releasing the block.
        unsafe { std::ptr::read_unaligned(p as *const u32) }
    }

    #[inline]
    fn status(&self, block: *mut u8) -> &AtomicU32 {
        // SAFETY: `block_status` is the 4-aligned word at offset 8 of a page-aligned block
        // inside the mapping; the kernel updates it concurrently, so it is only touched
        // atomically.
        unsafe { AtomicU32::from_ptr(block.add(8) as *mut u32) }
    }

    /// Give the current block back to the kernel and move to the next.
    #[inline]
    fn release_block(&self) {
        let b = self.cur.get();
        self.status(self.block(b))
            .store(TP_STATUS_KERNEL, Ordering::Release);
        self.left.set(0);
        self.cur.set((b + 1) % self.blocks);
    }

    /// Hand the next received frame to `f`; `None` (and `f` not called) when the kernel has
    /// not handed over a block with frames yet. The block goes back to the kernel once its last
    /// frame was read. No system call.
    #[inline]
    pub fn rx_next<R>(&self, f: impl FnOnce(RxFrame<'_>) -> R) -> Option<R> {
        let block = self.block(self.cur.get());
        if self.left.get() == 0 {
            if self.status(block).load(Ordering::Acquire) & TP_STATUS_USER == 0 {
                return None;
            }
            // Offsets 12 and 16 lie inside the block header.
            let num = self.u32_at(block.wrapping_add(12));
            let first = self.u32_at(block.wrapping_add(16)) as usize;
            if num == 0 {
                self.release_block();
                return None;
            }
            self.left.set(num);
            self.next.set(first);
        }
        let off = self.next.get();
        if off + SLL_PKTTYPE_OFFSET + 1 > RING_BLOCK {
            // A header the kernel never writes: drop the rest of the block rather than read
            // outside it.
            self.release_block();
            return None;
        }
        // The frame header (to `sll_pkttype`) lies inside the block (checked above).
        let frame = block.wrapping_add(off);
        let next_off = self.u32_at(frame) as usize;
        let stamp_ns = u64::from(self.u32_at(frame.wrapping_add(4))) * 1_000_000_000
            + u64::from(self.u32_at(frame.wrapping_add(8)));
        let snaplen = self.u32_at(frame.wrapping_add(12)) as usize;
        let wire_len = self.u32_at(frame.wrapping_add(16)) as usize;
        let st = self.u32_at(frame.wrapping_add(20));
        // SAFETY: `tp_mac` (offset 24), `hv1.tp_vlan_tci` (32), `hv1.tp_vlan_tpid` (36) and
        // `sll_pkttype` lie inside the header checked above; plain integers the kernel wrote
        // before it released the block.
        let (mac, tci, tpid, pkttype) = unsafe {
            (
                std::ptr::read_unaligned(frame.add(24) as *const u16) as usize,
                std::ptr::read_unaligned(frame.add(32) as *const u32) as u16,
                std::ptr::read_unaligned(frame.add(36) as *const u16),
                std::ptr::read(frame.add(SLL_PKTTYPE_OFFSET)),
            )
        };
        let start = (off + mac).min(RING_BLOCK);
        let len = snaplen.min(RING_BLOCK - start);
        // SAFETY: `start..start+len` lies inside this block, which stays ours until it is
        // released below; the slice does not outlive `f`.
        let data = unsafe { std::slice::from_raw_parts(block.add(start), len) };
        let r = f(RxFrame {
            data,
            wire_len,
            outgoing: pkttype == libc::PACKET_OUTGOING,
            vlan: VlanTag::from_status(st, tci, tpid),
            stamp_ns,
        });
        let left = self.left.get() - 1;
        if left == 0 {
            self.release_block();
        } else {
            self.left.set(left);
            self.next.set(off + next_off);
        }
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_v3_ring_maps_whole_blocks_and_has_nothing_before_a_frame_arrives() {
        let Ok(fd) = PacketFd::open() else {
            eprintln!("SKIP a_v3_ring_maps_whole_blocks: no CAP_NET_RAW");
            return;
        };
        assert!(RingV3::setup(&fd, 8).is_err(), "below the bound");
        let ring = RingV3::setup(&fd, 65).unwrap();
        assert_eq!(ring.rx_frames(), 72);
        assert_eq!(ring.bytes(), 72 * RING_FRAME);
        assert!(ring.rx_next(|_| ()).is_none());
    }
}

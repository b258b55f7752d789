//! `TPACKET_V2` rings of an `AF_PACKET` socket (packet(7); kernel
//! Documentation/networking/packet_mmap.rst): [`Ring`] sets up a `PACKET_RX_RING` and,
//! optionally, a `PACKET_TX_RING` on one socket, maps both with one `mmap(2)` and walks them
//! frame by frame. Every pointer into the mapping is made and bounds-checked here; the port
//! built on it is [`crate::ring_port`].
//!
//! Layout (packet_mmap.rst, "How to use mmap() to improve transmission/reception"): blocks of
//! [`RING_BLOCK`] bytes, each holding [`RING_FRAME`]-byte frames back to back, RX ring first and
//! TX ring right after it in the mapping. A frame opens with a `struct tpacket2_hdr`
//! (`include/uapi/linux/if_packet.h`: `tp_status` u32 at 0, `tp_len` u32 at 4, `tp_snaplen` u32
//! at 8, `tp_mac` u16 at 12, `tp_sec` and `tp_nsec` u32 at 16 and 20). Ownership passes through `tp_status`: on RX the kernel sets
//! `TP_STATUS_USER` when the frame is filled and we hand it back with `TP_STATUS_KERNEL`; on TX
//! we set `TP_STATUS_SEND_REQUEST` and the kernel returns it as `TP_STATUS_AVAILABLE` once the
//! frame's buffer is freed (or `TP_STATUS_WRONG_FORMAT`). Status words are read with acquire
//! and written with release ordering, so frame contents are seen complete on both sides.
//!
//! Cost: the kernel copies each received frame into the ring in softirq (no socket queue, no
//! `recvmmsg`); reading a frame is one status load and the caller's copy. Memory:
//! `(rx_frames + tx_frames) × RING_FRAME` bytes, mapped once, unmapped on drop.

use crate::packet::PacketFd;
use crate::socket::setsockopt;
use crate::vlan::VlanTag;
use std::cell::Cell;
use std::io;
use std::sync::atomic::{AtomicU32, Ordering};

/// `include/uapi/linux/if_packet.h`.
pub(crate) const PACKET_RX_RING: i32 = 5;
/// `include/uapi/linux/if_packet.h`.
pub(crate) const PACKET_VERSION: i32 = 10;
/// `include/uapi/linux/if_packet.h`.
const PACKET_TX_RING: i32 = 13;
/// `include/uapi/linux/if_packet.h` (`enum tpacket_versions`).
const TPACKET_V2: i32 = 1;
/// `include/uapi/linux/if_packet.h`.
pub(crate) const TP_STATUS_KERNEL: u32 = 0;
/// `include/uapi/linux/if_packet.h`.
pub(crate) const TP_STATUS_USER: u32 = 1;
/// `include/uapi/linux/if_packet.h` (TX: frame waiting for the kernel).
const TP_STATUS_SEND_REQUEST: u32 = 1;
/// `include/uapi/linux/if_packet.h` (TX: frame free).
const TP_STATUS_AVAILABLE: u32 = 0;
/// `include/uapi/linux/if_packet.h` (TX: the kernel refused the frame).
const TP_STATUS_WRONG_FORMAT: u32 = 4;
/// `sizeof(struct tpacket2_hdr)`, aligned to `TPACKET_ALIGNMENT` (16): where a TX frame's data
/// starts (net/packet/af_packet.c, `tpacket_fill_skb`: `tp_hdrlen - sizeof(sockaddr_ll)`).
const TX_DATA_OFFSET: usize = 32;
/// RX: the `struct sockaddr_ll` follows the aligned header (packet_mmap.rst, frame layout);
/// `sll_pkttype` is its byte 10.
const SLL_PKTTYPE_OFFSET: usize = 32 + 10;

/// Bytes per ring frame: header, then up to [`RING_FRAME`] − 66 bytes of frame on RX (the
/// kernel places the MAC header at `TPACKET_ALIGN(52 + 16) − 14`), − 32 on TX.
pub const RING_FRAME: usize = 2048;
/// Bytes per ring block (4 pages: an order-2 allocation the kernel finds easily).
pub const RING_BLOCK: usize = 16 * 1024;
pub(crate) const FRAMES_PER_BLOCK: usize = RING_BLOCK / RING_FRAME;
/// Fewest frames of a ring.
pub const MIN_RING_FRAMES: usize = 64;
/// Most frames of a ring (128 MiB at [`RING_FRAME`]).
pub const MAX_RING_FRAMES: usize = 65536;

/// `struct tpacket_req` (`include/uapi/linux/if_packet.h`).
#[repr(C)]
struct TpacketReq {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
}

/// One received frame, read in place (see [`Ring::rx_next`]).
#[derive(Debug, Clone, Copy)]
pub struct RxFrame<'a> {
    /// The bytes captured (at most the frame's room).
    pub data: &'a [u8],
    /// The frame's length on the wire (`tp_len`); larger than `data` means it was cut.
    pub wire_len: usize,
    /// `sll_pkttype == PACKET_OUTGOING`: our own transmission seen again (older kernels).
    pub outgoing: bool,
    /// The outer VLAN tag the kernel took out of the frame ([`crate::vlan`]).
    pub vlan: Option<VlanTag>,
    /// When the kernel wrote the frame into the ring (`tp_sec`, `tp_nsec`: `CLOCK_REALTIME`
    /// unless the socket asks for another clock; packet_mmap.rst), in nanoseconds.
    pub stamp_ns: u64,
}

/// A shared mapping of a socket's rings, unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mapping {
    pub(crate) base: *mut u8,
    pub(crate) len: usize,
}

// SAFETY: the mapping is plain shared memory; `Ring` hands out access through `&`/`&mut self`.
unsafe impl Send for Mapping {}

impl Mapping {
    /// Map `len` bytes of `fd`'s packet rings, shared with the kernel; `what` names the rings
    /// in the error.
    pub(crate) fn of_rings(fd: &PacketFd, len: usize, what: &str) -> io::Result<Self> {
        // SAFETY: a fresh shared mapping of the socket's rings, of the length the kernel
        // allocated for them (packet_mmap.rst: RX ring then TX ring, one mmap call).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.raw(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("mmap of {what}: {e}")));
        }
        Ok(Self {
            base: p as *mut u8,
            len,
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly what `mmap` returned; nothing borrows the mapping
        // any more (every borrow is tied to the `Ring` that owns this `Mapping`).
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

/// The RX ring (and optional TX ring) of one `AF_PACKET` socket, `TPACKET_V2`.
#[derive(Debug)]
pub struct Ring {
    map: Mapping,
    rx_frames: usize,
    tx_frames: usize,
    /// Next RX frame to look at.
    rx_head: Cell<usize>,
    /// Next TX frame to fill.
    tx_head: Cell<usize>,
    /// TX frames the kernel refused (`TP_STATUS_WRONG_FORMAT`), seen when their ring frame
    /// came round again.
    tx_rejected: Cell<u64>,
}

/// Round a requested frame count to whole blocks within the bounds; `Err` names the bound.
pub fn ring_frames(requested: usize, what: &str) -> io::Result<usize> {
    if !(MIN_RING_FRAMES..=MAX_RING_FRAMES).contains(&requested) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{what} {requested}: must be between {MIN_RING_FRAMES} and {MAX_RING_FRAMES} frames"
            ),
        ));
    }
    Ok(requested.div_ceil(FRAMES_PER_BLOCK) * FRAMES_PER_BLOCK)
}

impl Ring {
    /// Switch `fd` to `TPACKET_V2`, give it an RX ring of `rx_frames` and a TX ring of
    /// `tx_frames` (0: none, sends go through `sendmmsg`), and map them. Call before `bind`,
    /// so no frame arrives before the ring exists. Counts outside the bounds are refused.
    pub fn setup(fd: &PacketFd, rx_frames: usize, tx_frames: usize) -> io::Result<Self> {
        let rx_frames = ring_frames(rx_frames, "rx ring")?;
        let tx_frames = if tx_frames == 0 {
            0
        } else {
            ring_frames(tx_frames, "tx ring")?
        };
        fd.set_int(libc::SOL_PACKET, PACKET_VERSION, TPACKET_V2)
            .map_err(|e| io::Error::new(e.kind(), format!("PACKET_VERSION TPACKET_V2: {e}")))?;
        let req = |frames: usize| TpacketReq {
            block_size: RING_BLOCK as u32,
            block_nr: (frames / FRAMES_PER_BLOCK) as u32,
            frame_size: RING_FRAME as u32,
            frame_nr: frames as u32,
        };
        setsockopt(fd, libc::SOL_PACKET, PACKET_RX_RING, &req(rx_frames))
            .map_err(|e| io::Error::new(e.kind(), format!("PACKET_RX_RING: {e}")))?;
        if tx_frames > 0 {
            setsockopt(fd, libc::SOL_PACKET, PACKET_TX_RING, &req(tx_frames))
                .map_err(|e| io::Error::new(e.kind(), format!("PACKET_TX_RING: {e}")))?;
        }
        let len = (rx_frames + tx_frames) * RING_FRAME;
        Ok(Self {
            map: Mapping::of_rings(fd, len, "the rings")?,
            rx_frames,
            tx_frames,
            rx_head: Cell::new(0),
            tx_head: Cell::new(0),
            tx_rejected: Cell::new(0),
        })
    }

    /// Bytes mapped (both rings).
    pub fn bytes(&self) -> usize {
        self.map.len
    }
    pub fn rx_frames(&self) -> usize {
        self.rx_frames
    }
    pub fn tx_frames(&self) -> usize {
        self.tx_frames
    }
    /// TX frames the kernel refused so far (counted when their ring frame is reused).
    pub fn tx_rejected(&self) -> u64 {
        self.tx_rejected.get()
    }

    /// Offset of frame `i` of the ring starting at frame `first` of the mapping.
    #[inline]
    fn frame_at(&self, first: usize, i: usize) -> *mut u8 {
        debug_assert!((first + i + 1) * RING_FRAME <= self.map.len);
        // SAFETY: callers pass `i` below their ring's frame count, so the frame lies inside
        // the mapping (frames are back to back: RING_BLOCK is a multiple of RING_FRAME).
        unsafe { self.map.base.add((first + i) * RING_FRAME) }
    }

    #[inline]
    fn status(&self, frame: *mut u8) -> &AtomicU32 {
        // SAFETY: `frame` is a frame start inside the mapping, which lives as long as `self`
        // (page-aligned blocks, 2048-byte frames: 4-byte aligned); the kernel updates this
        // word concurrently, so it is only ever touched atomically.
        unsafe { AtomicU32::from_ptr(frame as *mut u32) }
    }

    /// Hand the next filled RX frame to `f`, then give it back to the kernel; `None` (and `f`
    /// not called) when the kernel has not filled it yet. No system call.
    #[inline]
    pub fn rx_next<R>(&self, f: impl FnOnce(RxFrame<'_>) -> R) -> Option<R> {
        let head = self.rx_head.get();
        let frame = self.frame_at(0, head);
        let status = self.status(frame);
        let st = status.load(Ordering::Acquire);
        if st & TP_STATUS_USER == 0 {
            return None;
        }
        // SAFETY: the frame is ours (TP_STATUS_USER, acquired above); its header fields are
        // plain integers the kernel wrote before releasing it.
        let (wire_len, snaplen, mac, sec, nsec, tci, tpid, pkttype) = unsafe {
            (
                std::ptr::read(frame.add(4) as *const u32) as usize,
                std::ptr::read(frame.add(8) as *const u32) as usize,
                std::ptr::read(frame.add(12) as *const u16) as usize,
                std::ptr::read(frame.add(16) as *const u32),
                std::ptr::read(frame.add(20) as *const u32),
                std::ptr::read(frame.add(24) as *const u16),
                std::ptr::read(frame.add(26) as *const u16),
                std::ptr::read(frame.add(SLL_PKTTYPE_OFFSET)),
            )
        };
        // The kernel never places data outside the frame; clamp so a bad header cannot send
        // a read out of it either.
        let start = mac.min(RING_FRAME);
        let len = snaplen.min(RING_FRAME - start);
        // SAFETY: `start..start+len` lies inside this frame, which stays ours until the
        // status store below; the slice does not outlive `f`.
        let data = unsafe { std::slice::from_raw_parts(frame.add(start), len) };
        let r = f(RxFrame {
            data,
            wire_len,
            outgoing: pkttype == libc::PACKET_OUTGOING,
            vlan: VlanTag::from_status(st, tci, tpid),
            stamp_ns: u64::from(sec) * 1_000_000_000 + u64::from(nsec),
        });
        status.store(TP_STATUS_KERNEL, Ordering::Release);
        self.rx_head.set((head + 1) % self.rx_frames);
        Some(r)
    }

    /// Copy `frame` into the next free TX frame and mark it for sending; `false` when the
    /// ring is full (the kernel still holds the next frame) or the frame does not fit. The
    /// kernel sends marked frames at the next `send(2)` on the socket.
    #[inline]
    pub fn tx_put(&self, frame: &[u8]) -> bool {
        if self.tx_frames == 0 || frame.len() > RING_FRAME - TX_DATA_OFFSET {
            return false;
        }
        let head = self.tx_head.get();
        let f = self.frame_at(self.rx_frames, head);
        let status = self.status(f);
        let st = status.load(Ordering::Acquire);
        if st == TP_STATUS_WRONG_FORMAT {
            self.tx_rejected.set(self.tx_rejected.get() + 1);
        } else if st != TP_STATUS_AVAILABLE {
            return false;
        }
        // SAFETY: the frame is ours (available, acquired above); the data fits its room
        // (checked above); `frame` cannot overlap the TX ring (never handed out as a slice).
        unsafe {
            std::ptr::copy_nonoverlapping(frame.as_ptr(), f.add(TX_DATA_OFFSET), frame.len());
            std::ptr::write(f.add(4) as *mut u32, frame.len() as u32);
        }
        status.store(TP_STATUS_SEND_REQUEST, Ordering::Release);
        self.tx_head.set((head + 1) % self.tx_frames);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_sizes_are_bounded_and_rounded_to_whole_blocks() {
        assert_eq!(ring_frames(64, "rx").unwrap(), 64);
        assert_eq!(ring_frames(65, "rx").unwrap(), 72);
        assert_eq!(ring_frames(MAX_RING_FRAMES, "rx").unwrap(), MAX_RING_FRAMES);
        let e = ring_frames(63, "rx ring").unwrap_err().to_string();
        assert!(
            e.contains("rx ring 63") && e.contains("between 64 and 65536"),
            "{e}"
        );
        assert!(ring_frames(MAX_RING_FRAMES + 1, "tx ring").is_err());
    }

    #[test]
    fn a_ring_walks_its_frames_and_reports_full_without_a_kick() {
        // Rings need CAP_NET_RAW; an unbound socket receives nothing and sends nothing.
        let Ok(fd) = PacketFd::open() else {
            eprintln!("SKIP a_ring_walks_its_frames: no CAP_NET_RAW");
            return;
        };
        assert!(Ring::setup(&fd, 8, 0).is_err(), "below the bound");
        let ring = Ring::setup(&fd, 64, 70).unwrap();
        assert_eq!((ring.rx_frames(), ring.tx_frames()), (64, 72));
        assert_eq!(ring.bytes(), (64 + 72) * RING_FRAME);
        assert!(
            ring.rx_next(|_| ()).is_none(),
            "nothing received on an unbound socket"
        );
        // Without a kick the kernel takes none: every TX frame is filled once, then the ring
        // is full. A frame longer than a ring frame's room is refused outright.
        assert!(!ring.tx_put(&[0u8; RING_FRAME]));
        let filled = (0..100).take_while(|_| ring.tx_put(&[7u8; 60])).count();
        assert_eq!(filled, 72);
        assert!(!ring.tx_put(&[7u8; 60]));
    }
}

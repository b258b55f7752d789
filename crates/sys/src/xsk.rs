//! An AF_XDP socket with its own UMEM (kernel Documentation/networking/af_xdp.rst): the UMEM
//! (one anonymous mapping of `rx_frames + tx_frames` chunks of [`CHUNK`] bytes, registered with
//! `XDP_UMEM_REG`), its fill and completion rings, the socket's RX and TX rings, each mapped
//! at the page offset the UAPI names (`include/uapi/linux/if_xdp.h`), and the socket bound to
//! one queue of one interface in copy mode (`XDP_COPY`: veth has no zero-copy support).
//!
//! Rings are single-producer single-consumer arrays of a power-of-two size with a producer
//! and a consumer index the two sides share (af_xdp.rst, "Rings"): the producer writes
//! descriptors, then publishes its index with release ordering; the consumer reads the
//! producer's index with acquire ordering, reads the descriptors, then publishes its own
//! index with release. [`Xsk`] owns the chunks: chunks `0..rx_frames` circulate between the
//! fill ring, the kernel and the RX ring; chunks after them are the TX chunks, free until sent
//! and free again when the completion ring returns them.
//!
//! Cost per frame: on receive one descriptor read, the caller's copy and one fill entry; on
//! send one copy, one descriptor and a completion; one `sendto(2)` kick per batch (copy mode
//! transmits from the kick). Memory: [`Xsk::bytes`].

use crate::socket::{self, getsockopt_into, setsockopt};
use std::cell::Cell;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

/// `include/linux/socket.h`.
const AF_XDP: i32 = 44;
/// `include/linux/socket.h`.
const SOL_XDP: i32 = 283;
// `include/uapi/linux/if_xdp.h`.
const XDP_MMAP_OFFSETS: i32 = 1;
const XDP_RX_RING: i32 = 2;
const XDP_TX_RING: i32 = 3;
const XDP_UMEM_REG: i32 = 4;
const XDP_UMEM_FILL_RING: i32 = 5;
const XDP_UMEM_COMPLETION_RING: i32 = 6;
const XDP_STATISTICS: i32 = 7;
const XDP_COPY: u16 = 1 << 1;
const XDP_PGOFF_RX_RING: i64 = 0;
const XDP_PGOFF_TX_RING: i64 = 0x8000_0000;
const XDP_UMEM_PGOFF_FILL_RING: i64 = 0x1_0000_0000;
const XDP_UMEM_PGOFF_COMPLETION_RING: i64 = 0x1_8000_0000;
/// Binds tried, 10 ms apart, while the queue is still held by a socket closed just before.
const BIND_TRIES: u32 = 200;
/// Bytes per RX/TX descriptor (`struct xdp_desc`: u64 addr, u32 len, u32 options).
const DESC: usize = 16;

/// Bytes per UMEM chunk. In copy mode the kernel writes a received frame after
/// `XDP_PACKET_HEADROOM` (256) bytes, so a chunk holds frames up to 1792 bytes.
pub const CHUNK: usize = 2048;
/// Fewest frames of a ring (each of RX and TX).
pub const MIN_FRAMES: usize = 64;
/// Most frames of a ring (64 MiB of UMEM each at [`CHUNK`]).
pub const MAX_FRAMES: usize = 32768;

/// The kernel's drop and error counters of one socket (`XDP_STATISTICS`, if_xdp.h;
/// af_xdp.rst, "XDP_STATISTICS getsockopt"), since the socket was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct XdpStats {
    /// Frames dropped for reasons other than an invalid descriptor (e.g. too long for a chunk,
    /// or no fill entry to take).
    pub rx_dropped: u64,
    /// Invalid descriptors on the RX path.
    pub rx_invalid_descs: u64,
    /// Invalid descriptors on the TX ring (refused, not sent).
    pub tx_invalid_descs: u64,
    /// Frames dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// Times the fill ring was found empty.
    pub rx_fill_ring_empty_descs: u64,
    /// Times the kernel found the TX ring empty (each `poll` of an idle copy-mode socket and
    /// each kick with nothing queued counts one).
    pub tx_ring_empty_descs: u64,
}

impl XdpStats {
    /// Field-wise sum.
    pub fn add(&mut self, o: &XdpStats) {
        self.rx_dropped += o.rx_dropped;
        self.rx_invalid_descs += o.rx_invalid_descs;
        self.tx_invalid_descs += o.tx_invalid_descs;
        self.rx_ring_full += o.rx_ring_full;
        self.rx_fill_ring_empty_descs += o.rx_fill_ring_empty_descs;
        self.tx_ring_empty_descs += o.tx_ring_empty_descs;
    }
    /// Frames lost on receive: dropped plus those that found the RX ring full.
    pub fn rx_lost(&self) -> u64 {
        self.rx_dropped + self.rx_ring_full
    }
    /// `(reason, count)` of the four counters of frames or descriptors lost.
    pub fn drops(&self) -> [(&'static str, u64); 4] {
        [
            ("rx_dropped", self.rx_dropped),
            ("rx_invalid_descs", self.rx_invalid_descs),
            ("tx_invalid_descs", self.tx_invalid_descs),
            ("rx_ring_full", self.rx_ring_full),
        ]
    }
    /// `(ring, count)` of the two "found empty" counters: events, not losses (the kernel
    /// counts an empty TX ring at every `poll` of an idle socket in copy mode, and an empty
    /// fill ring at each frame it then had no chunk for, also counted in `rx_dropped`).
    pub fn empty(&self) -> [(&'static str, u64); 2] {
        [
            ("fill", self.rx_fill_ring_empty_descs),
            ("tx", self.tx_ring_empty_descs),
        ]
    }
}

/// `struct xdp_ring_offset`.
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct RingOffset {
    producer: u64,
    consumer: u64,
    desc: u64,
    flags: u64,
}

/// `struct xdp_mmap_offsets`.
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct MmapOffsets {
    rx: RingOffset,
    tx: RingOffset,
    fr: RingOffset,
    cr: RingOffset,
}

/// `struct xdp_umem_reg`.
#[repr(C)]
struct UmemReg {
    addr: u64,
    len: u64,
    chunk_size: u32,
    headroom: u32,
    flags: u32,
    tx_metadata_len: u32,
}

/// `struct sockaddr_xdp`.
#[repr(C)]
struct SockaddrXdp {
    family: u16,
    flags: u16,
    ifindex: u32,
    queue_id: u32,
    shared_umem_fd: u32,
}

/// A shared or anonymous mapping, unmapped on drop.
#[derive(Debug)]
struct Mapping {
    base: *mut u8,
    len: usize,
}

// SAFETY: plain memory; `Xsk` hands out access only through `&self` methods of one thread.
unsafe impl Send for Mapping {}

impl Mapping {
    fn new(len: usize, fd: RawFd, offset: i64, what: &str) -> io::Result<Self> {
        let (flags, fd) = if fd < 0 {
            (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1)
        } else {
            (libc::MAP_SHARED | libc::MAP_POPULATE, fd)
        };
        // SAFETY: a fresh mapping of `len` bytes (anonymous, or of the socket's ring at the
        // page offset af_xdp.rst gives for it); nothing else refers to it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                offset,
            )
        };
        if p == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("mmap of the {what}: {e}")));
        }
        Ok(Self {
            base: p as *mut u8,
            len,
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: exactly what `mmap` returned; no borrow outlives the owning `Xsk`.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

/// One mapped ring: shared producer and consumer indexes, `size` entries of `entry` bytes.
#[derive(Debug)]
struct XRing {
    map: Mapping,
    producer: usize,
    consumer: usize,
    desc: usize,
    size: u32,
    entry: usize,
    /// Our copy of the index we publish.
    local: Cell<u32>,
}

impl XRing {
    fn new(
        fd: RawFd,
        off: RingOffset,
        size: usize,
        entry: usize,
        pgoff: i64,
        what: &str,
    ) -> io::Result<Self> {
        let len = off.desc as usize + size * entry;
        let map = Mapping::new(len, fd, pgoff, what)?;
        if off.producer as usize + 4 > len || off.consumer as usize + 4 > len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{what}: offsets outside the mapping"),
            ));
        }
        Ok(Self {
            map,
            producer: off.producer as usize,
            consumer: off.consumer as usize,
            desc: off.desc as usize,
            size: size as u32,
            entry,
            local: Cell::new(0),
        })
    }
    #[inline]
    fn index(&self, at: usize) -> &AtomicU32 {
        // SAFETY: `at` is the producer or consumer offset the kernel gave, checked to lie
        // inside the mapping at `new`; the kernel places them 4-byte aligned and updates them
        // concurrently, so they are only touched atomically.
        unsafe { AtomicU32::from_ptr(self.map.base.add(at) as *mut u32) }
    }
    #[inline]
    fn entry(&self, i: u32) -> *mut u8 {
        // SAFETY: `i & (size - 1)` < size, and the mapping holds `size` entries after `desc`.
        unsafe {
            self.map
                .base
                .add(self.desc + (i & (self.size - 1)) as usize * self.entry)
        }
    }
}

/// An AF_XDP socket bound to one queue, with its UMEM and four rings.
#[derive(Debug)]
pub struct Xsk {
    // Rings before the UMEM and the socket: they unmap first.
    fill: XRing,
    comp: XRing,
    rx: XRing,
    tx: XRing,
    umem: Mapping,
    fd: OwnedFd,
    rx_frames: usize,
    tx_frames: usize,
    /// Free TX chunk addresses.
    tx_free: std::cell::RefCell<Vec<u64>>,
    ring_bytes: usize,
    /// Frames read from the RX ring since open.
    rx_total: Cell<u64>,
}

/// A frame count within [`MIN_FRAMES`]..=[`MAX_FRAMES`], rounded up to a power of two.
pub fn xdp_frames(requested: usize, what: &str) -> io::Result<usize> {
    if !(MIN_FRAMES..=MAX_FRAMES).contains(&requested) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} {requested}: must be between {MIN_FRAMES} and {MAX_FRAMES} frames"),
        ));
    }
    Ok(requested.next_power_of_two())
}

fn ctx(what: &'static str) -> impl Fn(io::Error) -> io::Error {
    move |e| io::Error::new(e.kind(), format!("{what}: {e}"))
}

impl Xsk {
    /// Open a socket on queue `queue` of interface `ifindex` with `rx_frames` receive and
    /// `tx_frames` transmit chunks (each rounded up to a power of two within the bounds).
    pub fn open(ifindex: u32, queue: u32, rx_frames: usize, tx_frames: usize) -> io::Result<Self> {
        let rx_frames = xdp_frames(rx_frames, "rx frames")?;
        let tx_frames = xdp_frames(tx_frames, "tx frames")?;
        let fd = socket::socket(AF_XDP, libc::SOCK_RAW, 0).map_err(ctx("socket(AF_XDP)"))?;
        let umem = Mapping::new((rx_frames + tx_frames) * CHUNK, -1, 0, "UMEM")?;
        let reg = UmemReg {
            addr: umem.base as u64,
            len: umem.len as u64,
            chunk_size: CHUNK as u32,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        setsockopt(&fd, SOL_XDP, XDP_UMEM_REG, &reg).map_err(ctx("XDP_UMEM_REG"))?;
        let n = |v: usize| v as libc::c_int;
        setsockopt(&fd, SOL_XDP, XDP_UMEM_FILL_RING, &n(rx_frames)).map_err(ctx("fill ring"))?;
        setsockopt(&fd, SOL_XDP, XDP_UMEM_COMPLETION_RING, &n(tx_frames))
            .map_err(ctx("completion ring"))?;
        setsockopt(&fd, SOL_XDP, XDP_RX_RING, &n(rx_frames)).map_err(ctx("RX ring"))?;
        setsockopt(&fd, SOL_XDP, XDP_TX_RING, &n(tx_frames)).map_err(ctx("TX ring"))?;
        let mut off = MmapOffsets::default();
        getsockopt_into(&fd, SOL_XDP, XDP_MMAP_OFFSETS, &mut off)
            .map_err(ctx("XDP_MMAP_OFFSETS"))?;
        let raw = fd.as_raw_fd();
        let fill = XRing::new(
            raw,
            off.fr,
            rx_frames,
            8,
            XDP_UMEM_PGOFF_FILL_RING,
            "fill ring",
        )?;
        let comp = XRing::new(
            raw,
            off.cr,
            tx_frames,
            8,
            XDP_UMEM_PGOFF_COMPLETION_RING,
            "completion ring",
        )?;
        let rx = XRing::new(raw, off.rx, rx_frames, DESC, XDP_PGOFF_RX_RING, "RX ring")?;
        let tx = XRing::new(raw, off.tx, tx_frames, DESC, XDP_PGOFF_TX_RING, "TX ring")?;
        let ring_bytes = umem.len
            + [&fill, &comp, &rx, &tx]
                .iter()
                .map(|r| r.map.len)
                .sum::<usize>();
        let xsk = Self {
            fill,
            comp,
            rx,
            tx,
            umem,
            fd,
            rx_frames,
            tx_frames,
            tx_free: std::cell::RefCell::new(
                (rx_frames..rx_frames + tx_frames)
                    .rev()
                    .map(|i| (i * CHUNK) as u64)
                    .collect(),
            ),
            ring_bytes,
            rx_total: Cell::new(0),
        };
        // Every receive chunk goes to the fill ring before the socket is bound.
        for i in 0..rx_frames as u32 {
            xsk.fill_put(i, (i as usize * CHUNK) as u64);
        }
        xsk.fill
            .index(xsk.fill.producer)
            .store(rx_frames as u32, Ordering::Release);
        xsk.fill.local.set(rx_frames as u32);
        let sa = SockaddrXdp {
            family: AF_XDP as u16,
            flags: XDP_COPY,
            ifindex,
            queue_id: queue,
            shared_umem_fd: 0,
        };
        // A socket closed on this queue just before releases its hold on the queue from a
        // kernel work item (net/xdp/xsk_buff_pool.c, `xp_release_deferred`), so a bind right
        // after a stop can find the queue still taken (EBUSY): retry for a bounded time.
        let mut tries = 0;
        loop {
            // SAFETY: `sa` is a live `sockaddr_xdp` of the size passed.
            let r = unsafe {
                libc::bind(
                    raw,
                    &sa as *const SockaddrXdp as *const libc::sockaddr,
                    std::mem::size_of::<SockaddrXdp>() as libc::socklen_t,
                )
            };
            if r == 0 {
                return Ok(xsk);
            }
            let e = io::Error::last_os_error();
            tries += 1;
            if e.raw_os_error() != Some(libc::EBUSY) || tries >= BIND_TRIES {
                return Err(ctx("bind(AF_XDP, copy mode)")(e));
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// Write chunk address `addr` at fill position `i` (not yet published).
    #[inline]
    fn fill_put(&self, i: u32, addr: u64) {
        // SAFETY: a fill entry is a u64 inside the mapping, written only by us while the
        // producer index has not yet published it.
        unsafe { std::ptr::write(self.fill.entry(i) as *mut u64, addr) };
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
    /// Bytes of UMEM and ring memory mapped.
    pub fn bytes(&self) -> usize {
        self.ring_bytes
    }
    pub fn rx_frames(&self) -> usize {
        self.rx_frames
    }
    pub fn tx_frames(&self) -> usize {
        self.tx_frames
    }
    /// Frames read from the RX ring since open.
    pub fn rx_total(&self) -> u64 {
        self.rx_total.get()
    }

    /// Hand up to `max` received frames to `f` in order, each read in place and its chunk
    /// given back to the fill ring after `f` returns; returns how many. No system call.
    #[inline]
    pub fn rx_batch(&self, max: usize, mut f: impl FnMut(&[u8])) -> usize {
        let cons = self.rx.local.get();
        let prod = self.rx.index(self.rx.producer).load(Ordering::Acquire);
        let n = (prod.wrapping_sub(cons) as usize).min(max);
        if n == 0 {
            return 0;
        }
        let fill_at = self.fill.local.get();
        for k in 0..n as u32 {
            let d = self.rx.entry(cons.wrapping_add(k));
            // SAFETY: descriptors `cons..prod` are published to us (acquired above); they are
            // plain integers.
            let (addr, len) = unsafe {
                (
                    std::ptr::read(d as *const u64),
                    std::ptr::read(d.add(8) as *const u32),
                )
            };
            let umem_len = self.umem.len as u64;
            let start = addr.min(umem_len) as usize;
            let len = (len as usize).min(self.umem.len - start);
            // SAFETY: `start..start+len` is clamped inside the UMEM; the chunk is ours until
            // it goes back on the fill ring below.
            let data = unsafe { std::slice::from_raw_parts(self.umem.base.add(start), len) };
            f(data);
            // The chunk's base: copy mode offsets data inside the chunk by the headroom.
            self.fill_put(fill_at.wrapping_add(k), addr & !(CHUNK as u64 - 1));
        }
        self.rx_total.set(self.rx_total.get() + n as u64);
        self.rx.local.set(cons.wrapping_add(n as u32));
        self.rx
            .index(self.rx.consumer)
            .store(cons.wrapping_add(n as u32), Ordering::Release);
        // The fill ring holds every receive chunk, so it always has room for these.
        self.fill.local.set(fill_at.wrapping_add(n as u32));
        self.fill
            .index(self.fill.producer)
            .store(fill_at.wrapping_add(n as u32), Ordering::Release);
        n
    }

    /// Take back the TX chunks the kernel completed.
    #[inline]
    fn reclaim(&self, free: &mut Vec<u64>) {
        let cons = self.comp.local.get();
        let prod = self.comp.index(self.comp.producer).load(Ordering::Acquire);
        let n = prod.wrapping_sub(cons);
        for k in 0..n {
            // SAFETY: completion entries `cons..prod` are published to us (acquired above).
            free.push(unsafe {
                std::ptr::read(self.comp.entry(cons.wrapping_add(k)) as *const u64)
            });
        }
        if n > 0 {
            self.comp.local.set(prod);
            self.comp
                .index(self.comp.consumer)
                .store(prod, Ordering::Release);
        }
    }

    /// Copy each frame into a free TX chunk and queue it; stops at the first frame with no
    /// chunk or no room (longer than a chunk). Returns how many were queued; they leave at the
    /// next [`Xsk::kick`].
    #[inline]
    pub fn tx_put<'a>(&self, frames: impl Iterator<Item = &'a [u8]>) -> usize {
        let mut free = self.tx_free.borrow_mut();
        self.reclaim(&mut free);
        let prod = self.tx.local.get();
        let mut put = 0u32;
        for frame in frames {
            if frame.len() > CHUNK {
                break;
            }
            let Some(addr) = free.pop() else { break };
            // SAFETY: the chunk at `addr` is a free TX chunk (ours until completed), inside
            // the UMEM, and `frame` fits it; the descriptor slot is ours until published
            // (the TX ring has as many slots as there are TX chunks, so a free chunk means a
            // free slot).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    frame.as_ptr(),
                    self.umem.base.add(addr as usize),
                    frame.len(),
                );
                let d = self.tx.entry(prod.wrapping_add(put));
                std::ptr::write(d as *mut u64, addr);
                std::ptr::write(d.add(8) as *mut u32, frame.len() as u32);
                std::ptr::write(d.add(12) as *mut u32, 0);
            }
            put += 1;
        }
        if put > 0 {
            self.tx.local.set(prod.wrapping_add(put));
            self.tx
                .index(self.tx.producer)
                .store(prod.wrapping_add(put), Ordering::Release);
        }
        put as usize
    }

    /// Ask the kernel to transmit what the TX ring holds (`sendto` with no data, af_xdp.rst
    /// "XDP_USE_NEED_WAKEUP": in copy mode every transmission starts from such a call).
    #[inline]
    pub fn kick(&self) -> io::Result<()> {
        // SAFETY: no buffer, no address: a wake-up of the socket's TX path.
        let r = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null(),
                0,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The socket's drop and error counters since it was opened.
    pub fn stats(&self) -> io::Result<XdpStats> {
        let mut s = [0u64; 6];
        getsockopt_into(&self.fd, SOL_XDP, XDP_STATISTICS, &mut s)?;
        Ok(XdpStats {
            rx_dropped: s[0],
            rx_invalid_descs: s[1],
            tx_invalid_descs: s[2],
            rx_ring_full: s[3],
            rx_fill_ring_empty_descs: s[4],
            tx_ring_empty_descs: s[5],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_counts_are_bounded_and_rounded_to_powers_of_two() {
        assert_eq!(xdp_frames(64, "rx").unwrap(), 64);
        assert_eq!(xdp_frames(100, "rx").unwrap(), 128);
        let e = xdp_frames(10, "--ring-frames").unwrap_err().to_string();
        assert!(
            e.contains("--ring-frames 10") && e.contains("between 64 and 32768"),
            "{e}"
        );
        assert!(xdp_frames(MAX_FRAMES + 1, "tx").is_err());
    }
}

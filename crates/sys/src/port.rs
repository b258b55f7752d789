//! Frame ports: one interface, read and written as whole Ethernet frames in batches, straight
//! into and out of a fixed [`FramePool`]. Nothing here knows about links, disciplines or
//! directions — the link engine uses two ports, the host switch N. [`Port`] is the
//! `AF_PACKET` socket port; [`FramePort`] is what a forwarding loop needs of any port, so that
//! a ring-based port ([`crate::ring_port::RingPort`]; AF_XDP) sits next to it.
//!
//! - **socket** (packet(7)): protocol 0 at creation so nothing arrives before `bind`
//!   (then `ETH_P_ALL` on the interface), promiscuous membership (frames for other MACs are
//!   ours to forward), `PACKET_IGNORE_OUTGOING` (our own transmissions do not come back; on
//!   older kernels `sll_pkttype == PACKET_OUTGOING` is checked too), `PACKET_QDISC_BYPASS` on
//!   send, 4 MiB socket buffers;
//! - **batches**: `recvmmsg`/`sendmmsg` of up to [`BATCH`] frames, no per-frame allocation
//!   (the `packet` backend; the `tpacket` backend, an mmap'ed receive ring, is
//!   [`crate::ring_port::RingPort`], and [`crate::any_port::AnyPort`] is either);
//! - **offloads**: a frame longer than a slot (GRO/TSO super-frames) is reported as
//!   [`Rx::Oversize`] and its slot reused; [`Port::offloads`] says which offloads are on, and
//!   [`Port::warn_if_offloads`] is the one warning every CLI prints that they should be off
//!   (`ethtool -K IF gro off gso off tso off`).
//!
//! - **VLAN tags**: the outer tag the kernel took out of a received frame is put back
//!   ([`crate::vlan`]), so a frame is read and forwarded as it was on the wire;
//!
//! Cost per frame: two syscalls amortised over a batch, O(1) slot handling.

use crate::packet::{PacketFd, RxMeta, PACKET_IGNORE_OUTGOING, PACKET_QDISC_BYPASS};
use crate::socket::{self, Offload};
use crate::vlan;
use std::io;
use std::os::fd::RawFd;

/// Frames per `recvmmsg`/`sendmmsg`.
pub const BATCH: usize = 32;

pub use crate::frame_pool::{FramePool, Lent, PoolReader, SLOT};

/// One event of [`Port::recv`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rx {
    /// A frame now in `slot` (the caller owns the slot until it releases it).
    Frame { slot: u32, len: u32 },
    /// A frame longer than [`SLOT`] (offloads on): not kept, its slot already released.
    Oversize { len: usize },
}

/// Which offloads are on (they make frames longer than the wire's MTU).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Offloads {
    pub gro: bool,
    pub gso: bool,
    pub tso: bool,
}

impl Offloads {
    pub fn any(&self) -> bool {
        self.gro || self.gso || self.tso
    }

    /// The warning `tool` prints for interface `dev` when any offload is on (`None` when all
    /// are off): which are on, what happens to the long frames, and the command that fixes it.
    pub fn warning(&self, tool: &str, dev: &str) -> Option<String> {
        self.any().then(|| {
            let on: Vec<&str> = [("gro", self.gro), ("gso", self.gso), ("tso", self.tso)]
                .iter()
                .filter(|(_, on)| *on)
                .map(|(name, _)| *name)
                .collect();
            format!(
                "{tool}: warning: offloads on {dev} ({} on): frames over {} KiB are dropped \
                 as oversize; turn them off: ethtool -K {dev} gro off gso off tso off",
                on.join(", "),
                SLOT / 1024
            )
        })
    }
}

/// A packet socket for interface `dev` (in the calling thread's network namespace) and the
/// interface's index: protocol 0 (nothing arrives before [`attach`]), our own transmissions
/// ignored, the qdisc bypassed on send, a 4 MiB send buffer (and receive buffer when
/// `rcvbuf`: a ring port receives through its ring). Errors name the interface.
pub(crate) fn open_socket(dev: &str, rcvbuf: bool) -> io::Result<(PacketFd, u32)> {
    let Some(ifindex) = socket::ifindex(dev) else {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("interface `{dev}` does not exist (in this network namespace)"),
        ));
    };
    let fd = PacketFd::open().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("socket(AF_PACKET) for {dev}: {e} (needs root / CAP_NET_RAW)"),
        )
    })?;
    // Best effort: each only improves behaviour; their absence is not an error.
    let _ = fd.set_int(libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1);
    let _ = fd.set_int(libc::SOL_PACKET, PACKET_QDISC_BYPASS, 1);
    if rcvbuf {
        let _ = fd.set_int(libc::SOL_SOCKET, libc::SO_RCVBUF, 4 << 20);
    }
    let _ = fd.set_int(libc::SOL_SOCKET, libc::SO_SNDBUF, 4 << 20);
    Ok((fd, ifindex))
}

/// Bind `fd` to interface `ifindex` (named `dev` in errors) for every protocol, join it
/// promiscuously, and read which offloads are on.
pub(crate) fn attach(fd: &PacketFd, ifindex: u32, dev: &str) -> io::Result<Offloads> {
    fd.bind_all(ifindex)
        .map_err(|e| io::Error::new(e.kind(), format!("bind AF_PACKET to {dev}: {e}")))?;
    fd.add_promisc(ifindex)
        .map_err(|e| io::Error::new(e.kind(), format!("promiscuous mode on {dev}: {e}")))?;
    let on = |o| socket::offload_enabled(dev, o).unwrap_or(false);
    Ok(Offloads {
        gro: on(Offload::Gro),
        gso: on(Offload::Gso),
        tso: on(Offload::Tso),
    })
}

/// An open port on one interface.
#[derive(Debug)]
pub struct Port {
    fd: PacketFd,
    name: String,
    offloads: Offloads,
}

impl Port {
    /// Open interface `dev` in the calling thread's network namespace.
    pub fn open(dev: &str) -> io::Result<Self> {
        let (fd, ifindex) = open_socket(dev, true)?;
        fd.enable_auxdata().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("PACKET_AUXDATA on {dev} (VLAN tags would be lost): {e}"),
            )
        })?;
        let offloads = attach(&fd, ifindex, dev)?;
        Ok(Self {
            fd,
            name: dev.to_string(),
            offloads,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn offloads(&self) -> Offloads {
        self.offloads
    }
    /// Print [`Offloads::warning`] to stderr when offloads are on (for a CLI named `tool`).
    pub fn warn_if_offloads(&self, tool: &str) {
        if let Some(w) = self.offloads.warning(tool, &self.name) {
            eprintln!("{w}");
        }
    }
    /// For `poll`/`epoll`.
    #[inline]
    pub fn raw_fd(&self) -> RawFd {
        self.fd.raw()
    }
    /// Frames the kernel dropped since the last call (socket queue full).
    pub fn take_kernel_drops(&self) -> u64 {
        self.fd.take_drops()
    }

    /// Receive up to `out.len()` (≤ [`BATCH`]) frames into free slots of `pool` without
    /// blocking; `out[..events]` describes them. Returns `(read, events)`: frames read from
    /// the socket (echoes of our own sends included) and events written.
    #[inline]
    pub fn recv(&self, pool: &mut FramePool, out: &mut [Rx]) -> (usize, usize) {
        let mut slots = [0u32; BATCH];
        let mut want = 0;
        while want < out.len().min(BATCH) {
            match pool.alloc() {
                Some(s) => {
                    slots[want] = s;
                    want += 1;
                }
                None => break,
            }
        }
        if want == 0 {
            return (0, 0);
        }
        let mut meta = [RxMeta::default(); BATCH];
        let (base, buf_len) = pool.raw();
        // SAFETY: `slots[..want]` were just allocated from `pool` (free, so neither lent nor
        // held by anyone); the kernel writes only those slots of the buffer.
        let n = unsafe {
            self.fd
                .recv_batch(base, buf_len, SLOT, &slots[..want], &mut meta[..want])
        };
        for &slot in &slots[n..want] {
            pool.release(slot);
        }
        let mut k = 0;
        for i in 0..n {
            let (slot, m) = (slots[i], meta[i]);
            if m.outgoing {
                pool.release(slot);
                continue;
            }
            let len = match m.vlan {
                None if m.len <= SLOT => Some(m.len),
                None => None,
                Some(tag) => vlan::insert_in_place(pool.slot_mut(slot), m.len, tag),
            };
            out[k] = match len {
                Some(len) => Rx::Frame {
                    slot,
                    len: len as u32,
                },
                None => {
                    pool.release(slot);
                    Rx::Oversize {
                        len: m.len + m.vlan.map_or(0, |_| vlan::TAG_LEN),
                    }
                }
            };
            k += 1;
        }
        (n, k)
    }

    /// Send `(slot, len)` frames of `pool` with one `sendmmsg` (at most [`BATCH`]); returns how
    /// many the kernel took. The caller keeps ownership of all slots.
    #[inline]
    pub fn send(&self, pool: &FramePool, frames: &[(u32, u32)]) -> io::Result<usize> {
        let (base, buf_len) = pool.raw_const();
        // SAFETY: the kernel only reads the listed slots; nobody writes them during the call
        // (writes need `&mut pool`).
        unsafe {
            self.fd
                .send_batch(base, buf_len, SLOT, &frames[..frames.len().min(BATCH)])
        }
    }

    /// Send one frame from outside any pool (`send(2)`); returns the bytes the kernel took.
    pub fn send_frame(&self, frame: &[u8]) -> io::Result<usize> {
        self.fd.send(frame)
    }
}

/// What a forwarding loop needs of a port: batched receive into and send from a
/// [`FramePool`], a descriptor to wait on, and its counters. [`Port`] (`AF_PACKET` sockets,
/// `recvmmsg`/`sendmmsg`) implements it; the ring port ([`crate::ring_port::RingPort`], an
/// mmap'ed `TPACKET_V2` receive ring) implements the same contract by copying each ring frame
/// into a pool slot and handing the ring frame straight back, with `raw_fd` the socket whose
/// readability announces a filled ring frame.
pub trait FramePort {
    /// The interface's name.
    fn name(&self) -> &str;
    /// The descriptor an [`crate::epoll::Epoll`] waits on for input.
    fn raw_fd(&self) -> RawFd;
    /// See [`Port::recv`]: up to `out.len()` (≤ [`BATCH`]) frames into free slots of `pool`,
    /// without blocking; returns `(read, events)`.
    fn recv(&self, pool: &mut FramePool, out: &mut [Rx]) -> (usize, usize);
    /// See [`Port::send`]: `(slot, len)` frames of `pool`; returns how many were taken. The
    /// caller keeps ownership of every slot.
    fn send(&self, pool: &FramePool, frames: &[(u32, u32)]) -> io::Result<usize>;
    /// Frames the kernel dropped since the last call.
    fn take_kernel_drops(&self) -> u64;
    /// When the kernel received event `event` of the last [`FramePort::recv`]
    /// (`CLOCK_REALTIME` ns), where the backend says (the ring backends); `None` elsewhere.
    /// For latency accounting ([`crate::clock::realtime_ns`] is the same clock).
    fn rx_stamp(&self, _event: usize) -> Option<u64> {
        None
    }
    /// Which offloads are on (frames longer than a slot are reported as [`Rx::Oversize`]).
    fn offloads(&self) -> Offloads;
}

impl FramePort for Port {
    fn name(&self) -> &str {
        Port::name(self)
    }
    fn raw_fd(&self) -> RawFd {
        Port::raw_fd(self)
    }
    #[inline]
    fn recv(&self, pool: &mut FramePool, out: &mut [Rx]) -> (usize, usize) {
        Port::recv(self, pool, out)
    }
    #[inline]
    fn send(&self, pool: &FramePool, frames: &[(u32, u32)]) -> io::Result<usize> {
        Port::send(self, pool, frames)
    }
    fn take_kernel_drops(&self) -> u64 {
        Port::take_kernel_drops(self)
    }
    fn offloads(&self) -> Offloads {
        Port::offloads(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offload_warning_names_the_tool_the_port_and_the_fix_only_when_one_is_on() {
        assert_eq!(Offloads::default().warning("netsched link", "eth0"), None);
        let gro = Offloads {
            gro: true,
            ..Offloads::default()
        };
        assert_eq!(
            gro.warning("netsched vswitch", "veth1").as_deref(),
            Some(
                "netsched vswitch: warning: offloads on veth1 (gro on): frames over 2 KiB are \
                 dropped as oversize; turn them off: ethtool -K veth1 gro off gso off tso off"
            )
        );
        for o in [
            Offloads {
                gso: true,
                ..Offloads::default()
            },
            Offloads {
                tso: true,
                ..Offloads::default()
            },
        ] {
            assert!(o.warning("t", "d").is_some(), "{o:?}");
        }
    }

    #[test]
    fn open_refuses_an_unknown_interface() {
        // No privilege needed to learn that the interface does not exist.
        let e = Port::open("nsx-no-such0").err().unwrap().to_string();
        assert!(e.contains("does not exist"), "{e}");
    }
}

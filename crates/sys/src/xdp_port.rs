//! The `xdp` port: one interface read and written through an AF_XDP socket ([`crate::xsk`]),
//! fed by a small XDP program (crates/sys/bpf/redirect.c, built by build.rs with Debian's
//! `clang -target bpf -O2`) that redirects every frame of the interface's queue to the socket
//! through an XSKMAP. The program is loaded and attached with raw `bpf(2)` calls
//! ([`crate::bpf`]) in native (driver) mode through a BPF link, which detaches it when the
//! port is dropped or the process ends (Ctrl-C included). It implements [`FramePort`] like the
//! ring port: each frame is copied out of the UMEM into a [`FramePool`] slot and its chunk
//! handed straight back to the fill ring; a sent frame is copied into a TX chunk.
//!
//! **Queues**: one socket per receive queue (`ethtool -l`), each in the XSKMAP at its queue's
//! index, since the program redirects a frame by the queue it arrived on
//! (`ctx->rx_queue_index`) and a queue without a socket would pass its frames to the kernel's
//! stack unseen. Each socket has a UMEM of its own rather than one shared with
//! `XDP_SHARED_UMEM`: sockets on different queues that share a UMEM still need a fill and a
//! completion ring each (af_xdp.rst, "XDP_SHARED_UMEM bind flag"), so sharing would only save
//! memory, at the price of splitting one chunk pool between rings the kernel fills in
//! parallel; with a UMEM each every socket keeps the simple invariant that its fill ring holds
//! all its receive chunks. Queue 0's socket transmits; the others get the fewest TX chunks
//! ([`crate::xsk::MIN_FRAMES`]). Memory for `q` queues: `q × rx_frames + tx_frames + (q − 1) ×
//! 64` chunks of 2 KiB plus the rings ([`XdpPort::ring_bytes`], printed at start); at most
//! [`MAX_QUEUES`] queues. With more than one socket the port's descriptor is an epoll set of
//! them (readable when any RX ring has frames), and `recv` reads the sockets in turn, starting
//! one further each call, so a busy queue does not starve the others.
//!
//! **Zero-copy**: none on veth. A zero-copy bind needs the driver to provide `ndo_xsk_wakeup`
//! and to take an `XDP_SETUP_XSK_POOL` command in its `ndo_bpf` (net/xdp/xsk_buff_pool.c,
//! `xp_assign_dev`, which fails with `EOPNOTSUPP` otherwise); drivers/net/veth.c's
//! `veth_netdev_ops` has no `ndo_xsk_wakeup` and its `veth_xdp` handles only `XDP_SETUP_PROG`.
//! So the sockets bind in copy mode (`XDP_COPY`).
//!
//! **veth**: native XDP on a veth runs the program in the veth's NAPI poll of frames its peer
//! transmitted (drivers/net/veth.c), so only the engine's own end needs the program. The
//! documented caveat that the peer must run an XDP program (or have GRO on) concerns frames
//! *redirected into* a veth with `ndo_xdp_xmit` (kernel commit "veth: take into account peer
//! device for NETDEV_XDP_ACT_NDO_XMIT xdp_features flag", 2023); this port never does that: in
//! copy mode an AF_XDP transmission is an skb handed to the device's transmit path
//! (Documentation/networking/af_xdp.rst, "XDP_COPY"), which the peer receives as any frame.
//!
//! Drops: `XDP_STATISTICS` ([`XdpStats`]); [`XdpPort::take_kernel_drops`] counts the frames
//! lost on receive (dropped, or the RX ring full). Memory: [`XdpPort::ring_bytes`] (UMEM
//! plus the four rings), mapped at open.

use crate::bpf::{self, BpfFd};
use crate::bpf_object;
use crate::epoll::Epoll;
use crate::port::{FramePool, FramePort, Offloads, Rx, BATCH, SLOT};
use crate::ring_port::RingConfig;
use crate::socket::{self, Offload};
use crate::xsk::{XdpStats, Xsk};
use std::cell::Cell;
use std::io;
use std::os::fd::RawFd;

/// The XDP program object build.rs made (empty when it could not).
static OBJECT: &[u8] = include_bytes!(env!("NETSCHED_XDP_OBJ"));
/// Why build.rs could not make it (empty when it did).
const UNAVAILABLE: &str = env!("NETSCHED_XDP_UNAVAILABLE");
/// TX chunks when the configuration asks for no TX ring (`tx_frames = 0`).
pub const DEFAULT_TX_FRAMES: usize = 1024;
/// Most receive queues one port serves (a socket and a UMEM each).
pub const MAX_QUEUES: u32 = 64;

/// Why this build cannot run the `xdp` backend, if it cannot.
pub fn unavailable() -> Option<&'static str> {
    (OBJECT.is_empty()).then_some(if UNAVAILABLE.is_empty() {
        "the XDP program was not built"
    } else {
        UNAVAILABLE
    })
}

/// An open AF_XDP port on every receive queue of one interface.
#[derive(Debug)]
pub struct XdpPort {
    // The link first: dropping it detaches the program before the sockets close.
    _link: BpfFd,
    _prog: BpfFd,
    _map: BpfFd,
    /// With more than one queue: the sockets in one epoll set, whose descriptor the engine
    /// waits on.
    wait: Option<Epoll>,
    /// One socket per receive queue, at the queue's index; socket 0 also transmits.
    xsks: Vec<Xsk>,
    /// The socket `recv` reads first (turns by one each call).
    next: Cell<usize>,
    name: String,
    offloads: Offloads,
    /// Kicks that failed other than with "busy, try again" (frames stay queued).
    kick_errors: Cell<u64>,
    /// Receive losses already reported by `take_kernel_drops`.
    rx_lost_seen: Cell<u64>,
}

fn unsupported(dev: &str, why: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, format!("xdp on {dev}: {why}"))
}

impl XdpPort {
    /// Open interface `dev` (in the calling thread's network namespace): `cfg.rx_frames`
    /// receive chunks, `cfg.tx_frames` transmit chunks ([`DEFAULT_TX_FRAMES`] for 0), each
    /// rounded up to a power of two. A refusal says why, with [`io::ErrorKind::Unsupported`]
    /// when the interface or this build cannot do it (the `auto` backend then falls back).
    pub fn open(dev: &str, cfg: RingConfig) -> io::Result<Self> {
        let Some(ifindex) = socket::ifindex(dev) else {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("interface `{dev}` does not exist (in this network namespace)"),
            ));
        };
        if let Some(why) = unavailable() {
            return Err(unsupported(dev, format_args!("unavailable: {why}")));
        }
        let queues = match socket::rx_queues(dev) {
            Ok(n) if n <= MAX_QUEUES => n,
            Ok(n) => {
                return Err(unsupported(
                    dev,
                    format_args!(
                        "{n} receive queues; at most {MAX_QUEUES} (a socket and a UMEM each)"
                    ),
                ))
            }
            Err(e) => {
                return Err(unsupported(
                    dev,
                    format_args!("its queue count is unknown ({e})"),
                ))
            }
        };
        let prog = bpf_object::read_program(OBJECT, "xdp", "xsks")?;
        let map = bpf::create_xskmap(queues).map_err(|e| unsupported(dev, e))?;
        let loaded = bpf::load_xdp(&prog, &map).map_err(|e| unsupported(dev, e))?;
        let tx = if cfg.tx_frames == 0 {
            DEFAULT_TX_FRAMES
        } else {
            cfg.tx_frames
        };
        let mut xsks = Vec::with_capacity(queues as usize);
        for q in 0..queues {
            let tx = if q == 0 { tx } else { crate::xsk::MIN_FRAMES };
            let xsk = Xsk::open(ifindex, q, cfg.rx_frames, tx).map_err(|e| {
                let kind = if e.kind() == io::ErrorKind::InvalidInput {
                    e.kind()
                } else {
                    io::ErrorKind::Unsupported
                };
                io::Error::new(kind, format!("xdp on {dev} queue {q}: {e}"))
            })?;
            bpf::map_update(&map, q, xsk.raw_fd() as u32)
                .map_err(|e| unsupported(dev, format_args!("XSKMAP entry {q}: {e}")))?;
            xsks.push(xsk);
        }
        let wait = if queues > 1 {
            let ep = Epoll::new().map_err(|e| unsupported(dev, format_args!("epoll: {e}")))?;
            for (q, x) in xsks.iter().enumerate() {
                ep.add(x.raw_fd(), q as u64)
                    .map_err(|e| unsupported(dev, format_args!("epoll of queue {q}: {e}")))?;
            }
            Some(ep)
        } else {
            None
        };
        let link = bpf::attach_xdp(&loaded, ifindex, bpf::XDP_FLAGS_DRV_MODE).map_err(|e| {
            unsupported(
                dev,
                format_args!("attaching the XDP program in native mode: {e}"),
            )
        })?;
        let on = |o| socket::offload_enabled(dev, o).unwrap_or(false);
        let offloads = Offloads {
            gro: on(Offload::Gro),
            gso: on(Offload::Gso),
            tso: on(Offload::Tso),
        };
        Ok(Self {
            _link: link,
            _prog: loaded,
            _map: map,
            wait,
            xsks,
            next: Cell::new(0),
            name: dev.to_string(),
            offloads,
            kick_errors: Cell::new(0),
            rx_lost_seen: Cell::new(0),
        })
    }

    /// Bytes of UMEM and ring memory mapped for this port (all its sockets).
    pub fn ring_bytes(&self) -> usize {
        self.xsks.iter().map(Xsk::bytes).sum()
    }
    /// The chunk counts in use (after rounding): receive chunks per queue, transmit chunks.
    pub fn ring_config(&self) -> RingConfig {
        RingConfig {
            rx_frames: self.xsks[0].rx_frames(),
            tx_frames: self.xsks[0].tx_frames(),
        }
    }
    /// Receive queues served (one socket each).
    pub fn queues(&self) -> usize {
        self.xsks.len()
    }
    /// Frames read from each queue's socket since open, by queue.
    pub fn rx_per_queue(&self) -> Vec<u64> {
        self.xsks.iter().map(Xsk::rx_total).collect()
    }
    /// Kicks that failed so far (other than "busy, try again").
    pub fn kick_errors(&self) -> u64 {
        self.kick_errors.get()
    }
    /// The sockets' `XDP_STATISTICS` since open, summed (zeros where the kernel does not
    /// answer).
    pub fn stats(&self) -> XdpStats {
        let mut sum = XdpStats::default();
        for x in &self.xsks {
            sum.add(&x.stats().unwrap_or_default());
        }
        sum
    }

    /// Copy up to `out.len()` (≤ [`BATCH`]) received frames into free slots of `pool`, from
    /// the queues' sockets in turn; see [`crate::port::Port::recv`].
    #[inline]
    pub fn recv(&self, pool: &mut FramePool, out: &mut [Rx]) -> (usize, usize) {
        let want = out.len().min(BATCH).min(pool.free_slots());
        let n = self.xsks.len();
        let first = self.next.get();
        let mut k = 0;
        for i in 0..n {
            if k == want {
                break;
            }
            self.xsks[(first + i) % n].rx_batch(want - k, |data| {
                out[k] = if data.len() > SLOT {
                    Rx::Oversize { len: data.len() }
                } else {
                    // `want` ≤ free slots: there is one.
                    let slot = pool.alloc().unwrap_or(0);
                    pool.slot_mut(slot)[..data.len()].copy_from_slice(data);
                    Rx::Frame {
                        slot,
                        len: data.len() as u32,
                    }
                };
                k += 1;
            });
        }
        if n > 1 {
            self.next.set((first + 1) % n);
        }
        (k, k)
    }

    /// Queue `(slot, len)` frames of `pool` (at most [`BATCH`]) on the TX ring and kick it;
    /// returns how many found a TX chunk.
    #[inline]
    pub fn send(&self, pool: &FramePool, frames: &[(u32, u32)]) -> io::Result<usize> {
        let frames = &frames[..frames.len().min(BATCH)];
        let put = self.xsks[0].tx_put(frames.iter().map(|&(slot, len)| pool.data(slot, len)));
        if let Err(e) = self.xsks[0].kick() {
            let busy = matches!(
                e.raw_os_error(),
                Some(libc::EAGAIN) | Some(libc::EBUSY) | Some(libc::ENOBUFS)
            );
            if !busy {
                self.kick_errors.set(self.kick_errors.get() + 1);
            }
        }
        Ok(put)
    }

    /// Frames lost on receive since the last call (`rx_dropped + rx_ring_full`, all queues).
    pub fn take_kernel_drops(&self) -> u64 {
        let lost = self.stats().rx_lost();
        let new = lost.saturating_sub(self.rx_lost_seen.get());
        self.rx_lost_seen.set(lost.max(self.rx_lost_seen.get()));
        new
    }
}

impl FramePort for XdpPort {
    fn name(&self) -> &str {
        &self.name
    }
    fn raw_fd(&self) -> RawFd {
        match &self.wait {
            Some(ep) => ep.raw_fd(),
            None => self.xsks[0].raw_fd(),
        }
    }
    #[inline]
    fn recv(&self, pool: &mut FramePool, out: &mut [Rx]) -> (usize, usize) {
        XdpPort::recv(self, pool, out)
    }
    #[inline]
    fn send(&self, pool: &FramePool, frames: &[(u32, u32)]) -> io::Result<usize> {
        XdpPort::send(self, pool, frames)
    }
    fn take_kernel_drops(&self) -> u64 {
        XdpPort::take_kernel_drops(self)
    }
    fn offloads(&self) -> Offloads {
        self.offloads
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_program_is_one_redirect_through_the_xskmap() {
        if let Some(why) = unavailable() {
            eprintln!("SKIP the_built_program: {why}");
            return;
        }
        let p = bpf_object::read_program(OBJECT, "xdp", "xsks").unwrap();
        assert_eq!(p.insns.len() % 8, 0);
        assert_eq!(p.map_loads.len(), 1, "{p:?}");
        assert_eq!(p.license, "Dual MIT/GPL");
        // The call is kernel function 51, bpf_redirect_map (`call` = opcode 0x85, function id in imm).
        assert!(
            p.insns
                .chunks(8)
                .any(|i| i[0] == 0x85 && i[4..8] == 51u32.to_le_bytes()),
            "{p:?}"
        );
        let e = bpf_object::read_program(OBJECT, "xdp", "other").unwrap_err();
        assert!(e.to_string().contains("unknown symbol `xsks`"), "{e}");
    }

    #[test]
    fn loopback_is_refused_as_unsupported_with_the_reason() {
        // Before any socket or program: a build without the program says so; with it,
        // loopback has no channel count (and no native XDP), so the refusal comes first.
        let e = XdpPort::open("lo", RingConfig::default()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{e}");
        let want = match unavailable() {
            Some(_) => "xdp on lo: unavailable: ",
            None => "xdp on lo: ",
        };
        assert!(e.to_string().starts_with(want), "{e}");
    }

    #[test]
    fn an_unknown_interface_is_named() {
        let e = XdpPort::open("nsx-no-such0", RingConfig::default()).unwrap_err();
        assert!(
            e.to_string().contains("`nsx-no-such0` does not exist"),
            "{e}"
        );
    }
}

//! `AF_PACKET` raw sockets (packet(7)): [`PacketFd`] opens, binds and configures one, reads
//! `PACKET_STATISTICS`, and moves frames in batches with `recvmmsg(2)`/`sendmmsg(2)` between
//! the socket and caller-owned slots of one buffer, every slot bounds-checked here. The port
//! built on it is [`crate::port`].
//!
//! Constants not in the `libc` crate are copied by value from the kernel's UAPI headers named
//! next to them.

use crate::socket::{setsockopt, socket};
use crate::vlan::VlanTag;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// `include/uapi/linux/if_packet.h`.
pub const PACKET_IGNORE_OUTGOING: i32 = 23;
/// `include/uapi/linux/if_packet.h`.
pub const PACKET_QDISC_BYPASS: i32 = 20;

/// Most frames one [`PacketFd::recv_batch`] / [`PacketFd::send_batch`] call moves.
pub const MAX_BATCH: usize = crate::mmsg::MAX_BATCH;

/// What [`PacketFd::recv_batch`] learned of one received frame.
#[derive(Debug, Clone, Copy, Default)]
pub struct RxMeta {
    /// The frame's length on the wire; larger than the slot means it was truncated.
    pub len: usize,
    /// `sll_pkttype == PACKET_OUTGOING`: our own transmission seen again (older kernels).
    pub outgoing: bool,
    /// The outer VLAN tag the kernel took out of the frame (`PACKET_AUXDATA`; see
    /// [`crate::vlan`]), when [`PacketFd::enable_auxdata`] was called.
    pub vlan: Option<VlanTag>,
}

/// Room for one `PACKET_AUXDATA` control message (`CMSG_SPACE(sizeof(tpacket_auxdata))`).
const AUX_SPACE: usize = 64;

/// One frame's control-message buffer, aligned as `cmsghdr` needs.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct AuxBuf([u8; AUX_SPACE]);

/// An `AF_PACKET` raw socket (packet(7)), closed on drop.
#[derive(Debug)]
pub struct PacketFd {
    fd: OwnedFd,
}

impl AsRawFd for PacketFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl PacketFd {
    /// A non-blocking raw socket with protocol 0: it receives nothing until bound.
    pub fn open() -> io::Result<Self> {
        Ok(Self {
            fd: socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_NONBLOCK, 0)?,
        })
    }

    /// A blocking raw socket with protocol 0, for a sender that never receives (see
    /// [`PacketFd::bind_send_only`]).
    pub fn open_blocking() -> io::Result<Self> {
        Ok(Self {
            fd: socket(libc::AF_PACKET, libc::SOCK_RAW, 0)?,
        })
    }

    #[inline]
    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// An integer socket option.
    pub fn set_int(&self, level: i32, opt: i32, val: i32) -> io::Result<()> {
        setsockopt(self, level, opt, &val)
    }

    fn bind_proto(&self, ifindex: u32, protocol: u16) -> io::Result<()> {
        // SAFETY: a zeroed sockaddr_ll is valid; fields are set below.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = protocol.to_be();
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: pointer and size of a sockaddr_ll that lives for the call.
        let r = unsafe {
            libc::bind(
                self.raw(),
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Bind to interface `ifindex`, receiving every protocol (`ETH_P_ALL`).
    pub fn bind_all(&self, ifindex: u32) -> io::Result<()> {
        self.bind_proto(ifindex, libc::ETH_P_ALL as u16)
    }

    /// Bind to interface `ifindex` with protocol 0: frames sent go out of it, none is received
    /// (packet(7): a socket with protocol 0 gets no packets), so a sender's queue never fills.
    pub fn bind_send_only(&self, ifindex: u32) -> io::Result<()> {
        self.bind_proto(ifindex, 0)
    }

    /// Receive frames addressed to any MAC address on `ifindex` (`PACKET_MR_PROMISC`).
    pub fn add_promisc(&self, ifindex: u32) -> io::Result<()> {
        // SAFETY: a zeroed packet_mreq is valid.
        let mut mr: libc::packet_mreq = unsafe { std::mem::zeroed() };
        mr.mr_ifindex = ifindex as i32;
        mr.mr_type = libc::PACKET_MR_PROMISC as u16;
        setsockopt(self, libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &mr)
    }

    /// Ask for each received frame's `struct tpacket_auxdata` (packet(7), `PACKET_AUXDATA`),
    /// so [`PacketFd::recv_batch`] reports the VLAN tag the kernel took out of the frame.
    pub fn enable_auxdata(&self) -> io::Result<()> {
        self.set_int(libc::SOL_PACKET, libc::PACKET_AUXDATA, 1)
    }

    /// Frames the kernel dropped since the last call (`PACKET_STATISTICS` resets on read);
    /// 0 if the counters cannot be read.
    pub fn take_drops(&self) -> u64 {
        // SAFETY: a zeroed tpacket_stats is valid.
        let mut st: libc::tpacket_stats = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: pointer to a live tpacket_stats and its length.
        let r = unsafe {
            libc::getsockopt(
                self.raw(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                &mut st as *mut libc::tpacket_stats as *mut libc::c_void,
                &mut len,
            )
        };
        if r < 0 {
            0
        } else {
            st.tp_drops as u64
        }
    }

    /// Send one frame (`send(2)`, blocking unless the socket is non-blocking); returns the
    /// bytes the kernel took.
    pub fn send(&self, frame: &[u8]) -> io::Result<usize> {
        // SAFETY: `frame` is valid for `frame.len()` bytes for the call; the kernel only reads.
        let r = unsafe { libc::send(self.raw(), frame.as_ptr() as *const _, frame.len(), 0) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r as usize)
        }
    }

    /// Ask the kernel to send the frames marked in the socket's TX ring (`send(2)` with no
    /// data, `MSG_DONTWAIT`: returns once they are queued to the device, packet_mmap.rst).
    pub fn kick_tx(&self) -> io::Result<()> {
        // SAFETY: a null buffer of length 0: with a TX ring the kernel reads the ring, never
        // the buffer.
        let r = unsafe { libc::send(self.raw(), std::ptr::null(), 0, libc::MSG_DONTWAIT) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Receive up to `slots.len()` (≤ [`MAX_BATCH`]) frames without blocking, frame i into
    /// the `slot_size` bytes at `base + slots[i]*slot_size`; `meta[i]` describes it. Returns
    /// how many arrived (0 when none is waiting or on error). Out-of-range slots are refused.
    ///
    /// # Safety
    /// `base..base + buf_len` is one live allocation, and nobody else reads or writes the
    /// listed slots during the call.
    #[inline]
    pub(crate) unsafe fn recv_batch(
        &self,
        base: *mut u8,
        buf_len: usize,
        slot_size: usize,
        slots: &[u32],
        meta: &mut [RxMeta],
    ) -> usize {
        let n = slots.len().min(meta.len()).min(MAX_BATCH);
        if n == 0
            || slot_size == 0
            || slots[..n]
                .iter()
                .any(|&s| (s as usize + 1).saturating_mul(slot_size) > buf_len)
        {
            return 0;
        }
        // SAFETY: zeroed iovec/mmsghdr/sockaddr_ll are valid initial values.
        let mut iov: [libc::iovec; MAX_BATCH] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut addrs: [libc::sockaddr_ll; MAX_BATCH] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; MAX_BATCH] = unsafe { std::mem::zeroed() };
        let mut aux = [AuxBuf([0; AUX_SPACE]); MAX_BATCH];
        for i in 0..n {
            // SAFETY: the slot lies inside the buffer (checked above).
            iov[i].iov_base = unsafe { base.add(slots[i] as usize * slot_size) } as *mut _;
            iov[i].iov_len = slot_size;
            msgs[i].msg_hdr.msg_iov = &mut iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
            msgs[i].msg_hdr.msg_name = &mut addrs[i] as *mut libc::sockaddr_ll as *mut _;
            msgs[i].msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as u32;
            msgs[i].msg_hdr.msg_control = aux[i].0.as_mut_ptr() as *mut _;
            msgs[i].msg_hdr.msg_controllen = AUX_SPACE;
        }
        // SAFETY: `n` initialised headers whose buffers are slots of the buffer, which the
        // caller leaves to this call alone.
        let r = unsafe {
            libc::recvmmsg(
                self.raw(),
                msgs.as_mut_ptr(),
                n as u32,
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                std::ptr::null_mut(),
            )
        };
        let got = r.max(0) as usize;
        for i in 0..got {
            meta[i] = RxMeta {
                len: msgs[i].msg_len as usize,
                outgoing: addrs[i].sll_pkttype == libc::PACKET_OUTGOING,
                vlan: vlan_of(&msgs[i].msg_hdr),
            };
        }
        got
    }

    /// Send frames `(slot, len)` from the buffer at `base` (frame i is the `len` bytes at
    /// `base + slot*slot_size`) with one `sendmmsg`; at most [`MAX_BATCH`]. Returns how many
    /// the kernel took. A frame outside the buffer or longer than its slot is an
    /// `InvalidInput` error and nothing is sent.
    ///
    /// # Safety
    /// `base..base + buf_len` is one live allocation, and nobody writes the listed frames
    /// during the call.
    #[inline]
    pub(crate) unsafe fn send_batch(
        &self,
        base: *const u8,
        buf_len: usize,
        slot_size: usize,
        frames: &[(u32, u32)],
    ) -> io::Result<usize> {
        let n = frames.len().min(MAX_BATCH);
        if frames[..n].iter().any(|&(s, l)| {
            l as usize > slot_size || (s as usize + 1).saturating_mul(slot_size) > buf_len
        }) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "frame outside the buffer",
            ));
        }
        if n == 0 {
            return Ok(0);
        }
        // SAFETY: zeroed iovec/mmsghdr are valid initial values.
        let mut iov: [libc::iovec; MAX_BATCH] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; MAX_BATCH] = unsafe { std::mem::zeroed() };
        for i in 0..n {
            let (slot, len) = frames[i];
            // SAFETY: inside the buffer (checked above); the kernel only reads it.
            iov[i].iov_base = unsafe { base.add(slot as usize * slot_size) } as *mut _;
            iov[i].iov_len = len as usize;
            msgs[i].msg_hdr.msg_iov = &mut iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: `n` initialised headers pointing into the buffer, unchanged during the call.
        let r = unsafe { libc::sendmmsg(self.raw(), msgs.as_mut_ptr(), n as u32, 0) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r as usize)
        }
    }
}

/// The VLAN tag in `msg`'s `PACKET_AUXDATA` control message, if it has one.
fn vlan_of(msg: &libc::msghdr) -> Option<VlanTag> {
    // SAFETY: CMSG_LEN is arithmetic on its argument.
    let need = unsafe { libc::CMSG_LEN(std::mem::size_of::<libc::tpacket_auxdata>() as u32) };
    // SAFETY: `msg` is a header the kernel filled by `recvmmsg`; its control pointer and the
    // length the kernel set describe our `AuxBuf`, and the CMSG_* macros stay inside it.
    let mut c = unsafe { libc::CMSG_FIRSTHDR(msg) };
    while !c.is_null() {
        // SAFETY: `c` is a control message header inside the buffer (CMSG_FIRSTHDR/NXTHDR).
        let h = unsafe { &*c };
        if h.cmsg_level == libc::SOL_PACKET
            && h.cmsg_type == libc::PACKET_AUXDATA
            && h.cmsg_len as usize >= need as usize
        {
            // SAFETY: the message holds a whole tpacket_auxdata (length checked above); it
            // may be unaligned for the struct, so it is read unaligned.
            let a = unsafe {
                std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::tpacket_auxdata)
            };
            return VlanTag::from_status(a.tp_status, a.tp_vlan_tci, a.tp_vlan_tpid);
        }
        // SAFETY: as above.
        c = unsafe { libc::CMSG_NXTHDR(msg, c) };
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_refuse_slots_outside_the_buffer_before_any_system_call() {
        // Opening needs CAP_NET_RAW; without it there is nothing to check here.
        let Ok(fd) = PacketFd::open() else {
            eprintln!("SKIP batches_refuse_slots_outside_the_buffer: no CAP_NET_RAW");
            return;
        };
        let mut buf = vec![0u8; 4 * 64];
        let (base, len) = (buf.as_mut_ptr(), buf.len());
        let mut meta = [RxMeta::default(); 2];
        // SAFETY (all four calls): `buf` is live and only these calls touch it.
        unsafe {
            assert_eq!(fd.recv_batch(base, len, 64, &[0, 4], &mut meta), 0);
            let e = fd.send_batch(base, len, 64, &[(3, 65)]).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
            let e = fd.send_batch(base, len, 64, &[(4, 10)]).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
            assert_eq!(fd.send_batch(base, len, 64, &[]).unwrap(), 0);
        }
    }
}

//! The crate's system calls, each behind a safe function (smoltcp's `phy::sys` style): every
//! `unsafe` block of `netsched-link` outside `experiment.rs`/`bench.rs` lives in this file.
//!
//! - clocks: [`now_ns`] (`CLOCK_MONOTONIC`), [`thread_cpu_ns`], [`set_timer_slack`];
//! - interfaces: [`ifindex`], [`offload_enabled`] (`SIOCETHTOOL`);
//! - namespaces: [`netns_cookie`] (`SO_NETNS_COOKIE`, never reused while the system runs);
//! - `AF_PACKET`: [`PacketFd`] (open, bind, options, `PACKET_STATISTICS`, batched
//!   `recvmmsg`/`sendmmsg` into caller-owned slots, bounds checked here) and [`poll_in`];
//! - [`Epoll`]: a level-triggered read-interest set waited on with `epoll_pwait2`
//!   (nanosecond timeout, Linux ≥ 5.11).
//!
//! Constants not in the `libc` crate are copied by value from the kernel's UAPI headers named
//! next to them.

use netsched_core::{Nanos, SEC};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// `include/uapi/linux/if_packet.h`.
pub const PACKET_IGNORE_OUTGOING: i32 = 23;
/// `include/uapi/linux/if_packet.h`.
pub const PACKET_QDISC_BYPASS: i32 = 20;
/// `include/uapi/asm-generic/socket.h` (Linux ≥ 5.14).
const SO_NETNS_COOKIE: i32 = 71;
/// `include/uapi/linux/sockios.h`.
const SIOCETHTOOL: libc::c_ulong = 0x8946;

/// Most frames one [`PacketFd::recv_batch`] / [`PacketFd::send_batch`] call moves.
pub const MAX_BATCH: usize = 64;

fn clock(id: libc::clockid_t) -> Nanos {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid pointer to a timespec that lives for the call.
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec as u64 * SEC + ts.tv_nsec as u64
}

/// `CLOCK_MONOTONIC` in nanoseconds.
pub fn now_ns() -> Nanos {
    clock(libc::CLOCK_MONOTONIC)
}

/// CPU time of the calling thread (`CLOCK_THREAD_CPUTIME_ID`) in nanoseconds.
pub fn thread_cpu_ns() -> Nanos {
    clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Timer slack of the calling thread (`PR_SET_TIMERSLACK`, prctl(2)): how late the kernel may
/// fire its timeouts to batch wake-ups (50 µs by default).
pub fn set_timer_slack(ns: u64) -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    let r = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns, 0u64, 0u64, 0u64) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Index of interface `dev` in the calling thread's network namespace, `None` if absent.
pub fn ifindex(dev: &str) -> Option<u32> {
    let name = std::ffi::CString::new(dev).ok()?;
    // SAFETY: a NUL-terminated string valid for the call.
    let i = unsafe { libc::if_nametoindex(name.as_ptr()) };
    (i != 0).then_some(i)
}

fn socket(domain: i32, ty: i32, proto: i32) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; a non-negative result is a descriptor we now own.
    let fd = unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, proto) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The cookie of the calling thread's network namespace (`SO_NETNS_COOKIE`, socket(7)): a
/// 64-bit id the kernel never hands out twice while it runs — unlike the namespace's inode
/// number, which is reused once the namespace is gone.
pub fn netns_cookie() -> io::Result<u64> {
    let fd = socket(libc::AF_UNIX, libc::SOCK_DGRAM, 0)?;
    let mut v: u64 = 0;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: pointer to a live u64 and its length.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_NETNS_COOKIE,
            &mut v as *mut u64 as *mut libc::c_void,
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(v)
}

/// Segmentation/receive offloads an `ethtool -k` shows, for [`offload_enabled`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offload {
    /// `ETHTOOL_GTSO` (include/uapi/linux/ethtool.h).
    Tso = 0x1e,
    /// `ETHTOOL_GGSO`.
    Gso = 0x23,
    /// `ETHTOOL_GGRO`.
    Gro = 0x2b,
}

#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// Whether `offload` is on for `dev` (legacy `ETHTOOL_G*` get commands through
/// `SIOCETHTOOL`, netdevice(7)).
pub fn offload_enabled(dev: &str, offload: Offload) -> io::Result<bool> {
    if dev.is_empty() || dev.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "interface name too long",
        ));
    }
    let fd = socket(libc::AF_INET, libc::SOCK_DGRAM, 0)?;
    let mut val = EthtoolValue {
        cmd: offload as u32,
        data: 0,
    };
    // SAFETY: a zeroed ifreq is valid; the name fits (checked above, NUL stays).
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(dev.bytes()) {
        *d = s as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = &mut val as *mut EthtoolValue as *mut libc::c_char;
    // SAFETY: ifreq points at `val`, which lives for the call.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), SIOCETHTOOL as _, &mut ifr) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(val.data != 0)
}

/// What [`PacketFd::recv_batch`] learned of one received frame.
#[derive(Debug, Clone, Copy, Default)]
pub struct RxMeta {
    /// The frame's length on the wire; larger than the slot means it was truncated.
    pub len: usize,
    /// `sll_pkttype == PACKET_OUTGOING`: our own transmission seen again (older kernels).
    pub outgoing: bool,
}

/// An `AF_PACKET` raw socket (packet(7)), closed on drop.
#[derive(Debug)]
pub struct PacketFd {
    fd: OwnedFd,
}

impl PacketFd {
    /// A non-blocking raw socket with protocol 0: it receives nothing until bound.
    pub fn open() -> io::Result<Self> {
        Ok(Self {
            fd: socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_NONBLOCK, 0)?,
        })
    }

    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    fn setsockopt<T>(&self, level: i32, opt: i32, val: &T) -> io::Result<()> {
        // SAFETY: pointer to a live T and its size.
        let r = unsafe {
            libc::setsockopt(
                self.raw(),
                level,
                opt,
                val as *const T as *const libc::c_void,
                std::mem::size_of::<T>() as libc::socklen_t,
            )
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// An integer socket option.
    pub fn set_int(&self, level: i32, opt: i32, val: i32) -> io::Result<()> {
        self.setsockopt(level, opt, &val)
    }

    /// Bind to interface `ifindex`, receiving every protocol (`ETH_P_ALL`).
    pub fn bind_all(&self, ifindex: u32) -> io::Result<()> {
        // SAFETY: a zeroed sockaddr_ll is valid; fields are set below.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
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

    /// Receive frames addressed to any MAC address on `ifindex` (`PACKET_MR_PROMISC`).
    pub fn add_promisc(&self, ifindex: u32) -> io::Result<()> {
        // SAFETY: a zeroed packet_mreq is valid.
        let mut mr: libc::packet_mreq = unsafe { std::mem::zeroed() };
        mr.mr_ifindex = ifindex as i32;
        mr.mr_type = libc::PACKET_MR_PROMISC as u16;
        self.setsockopt(libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &mr)
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

    /// Receive up to `slots.len()` (≤ [`MAX_BATCH`]) frames without blocking, frame i into
    /// `buf[slots[i]*slot_size ..][..slot_size]`; `meta[i]` describes it. Returns how many
    /// arrived (0 when none is waiting or on error). Out-of-range slots are refused.
    pub fn recv_batch(
        &self,
        buf: &mut [u8],
        slot_size: usize,
        slots: &[u32],
        meta: &mut [RxMeta],
    ) -> usize {
        let n = slots.len().min(meta.len()).min(MAX_BATCH);
        if n == 0
            || slot_size == 0
            || slots[..n]
                .iter()
                .any(|&s| (s as usize + 1).saturating_mul(slot_size) > buf.len())
        {
            return 0;
        }
        // SAFETY: zeroed iovec/mmsghdr/sockaddr_ll are valid initial values.
        let mut iov: [libc::iovec; MAX_BATCH] = unsafe { std::mem::zeroed() };
        let mut addrs: [libc::sockaddr_ll; MAX_BATCH] = unsafe { std::mem::zeroed() };
        let mut msgs: [libc::mmsghdr; MAX_BATCH] = unsafe { std::mem::zeroed() };
        let base = buf.as_mut_ptr();
        for i in 0..n {
            // SAFETY: the slot lies inside `buf` (checked above).
            iov[i].iov_base = unsafe { base.add(slots[i] as usize * slot_size) } as *mut _;
            iov[i].iov_len = slot_size;
            msgs[i].msg_hdr.msg_iov = &mut iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
            msgs[i].msg_hdr.msg_name = &mut addrs[i] as *mut libc::sockaddr_ll as *mut _;
            msgs[i].msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as u32;
        }
        // SAFETY: `n` initialised headers whose buffers are slots of `buf`, borrowed
        // mutably for the call.
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
            };
        }
        got
    }

    /// Send frames `(slot, len)` from `buf` (frame i is `buf[slot*slot_size..][..len]`) with
    /// one `sendmmsg`; at most [`MAX_BATCH`]. Returns how many the kernel took. A frame outside
    /// `buf` or longer than its slot is an `InvalidInput` error and nothing is sent.
    pub fn send_batch(
        &self,
        buf: &[u8],
        slot_size: usize,
        frames: &[(u32, u32)],
    ) -> io::Result<usize> {
        let n = frames.len().min(MAX_BATCH);
        if frames[..n].iter().any(|&(s, l)| {
            l as usize > slot_size || (s as usize + 1).saturating_mul(slot_size) > buf.len()
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
        let mut msgs: [libc::mmsghdr; MAX_BATCH] = unsafe { std::mem::zeroed() };
        for i in 0..n {
            let (slot, len) = frames[i];
            // SAFETY: inside `buf` (checked above); the kernel only reads it.
            iov[i].iov_base = unsafe { buf.as_ptr().add(slot as usize * slot_size) } as *mut _;
            iov[i].iov_len = len as usize;
            msgs[i].msg_hdr.msg_iov = &mut iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: `n` initialised headers pointing into `buf`, borrowed for the call.
        let r = unsafe { libc::sendmmsg(self.raw(), msgs.as_mut_ptr(), n as u32, 0) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r as usize)
        }
    }
}

/// Wait until one of `fds` (descriptor, whether to wait for input on it) is readable or
/// `timeout` nanoseconds passed (`ppoll`, no signal mask change). `Ok(false)` on `EINTR`.
pub fn poll_in(fds: &[(RawFd, bool)], timeout: Nanos) -> io::Result<bool> {
    let mut p = [libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; 4];
    let n = fds.len().min(p.len());
    for (slot, &(fd, want)) in p.iter_mut().zip(fds) {
        slot.fd = fd;
        slot.events = if want { libc::POLLIN } else { 0 };
    }
    let ts = timespec(timeout);
    // SAFETY: `n` valid pollfds, a valid timespec, no signal mask.
    let r = unsafe { libc::ppoll(p.as_mut_ptr(), n as libc::nfds_t, &ts, std::ptr::null()) };
    Ok(count_or_eintr(r)? > 0)
}

/// A level-triggered epoll set with read interest (epoll(7)), closed on drop. Each descriptor
/// carries a caller's token, handed back by [`Epoll::wait`]. Unlike `ppoll` over N sockets,
/// a wait neither registers on nor re-polls every socket: a wake-up costs the same whatever
/// the number of idle ports.
#[derive(Debug)]
pub struct Epoll {
    fd: OwnedFd,
}

impl Epoll {
    pub fn new() -> io::Result<Self> {
        // SAFETY: plain syscall; the result is checked before it is owned.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor nobody else owns.
        Ok(Self {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Watch `fd` for input; [`Epoll::wait`] reports it with `token`.
    pub fn add(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: a valid event for the call; the kernel checks `fd`.
        let r = unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Stop watching `fd` (before closing it).
    pub fn remove(&self, fd: RawFd) -> io::Result<()> {
        // SAFETY: the kernel checks `fd`; the event argument may be null for DEL (≥ 2.6.9).
        let r = unsafe {
            libc::epoll_ctl(
                self.fd.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Wait up to `timeout` ns for input on any watched descriptor; fills `events` and returns
    /// how many (`Ok(0)` on timeout or `EINTR`).
    pub fn wait(&self, events: &mut [libc::epoll_event], timeout: Nanos) -> io::Result<usize> {
        let ts = timespec(timeout);
        let max = events.len().min(i32::MAX as usize) as libc::c_int;
        // SAFETY: `max` writable events borrowed for the call, a valid timespec, no mask.
        let r = unsafe {
            libc::epoll_pwait2(
                self.fd.as_raw_fd(),
                events.as_mut_ptr(),
                max,
                &ts,
                std::ptr::null(),
            )
        };
        count_or_eintr(r)
    }
}

/// `timeout` nanoseconds as a `timespec`.
fn timespec(timeout: Nanos) -> libc::timespec {
    libc::timespec {
        tv_sec: (timeout / SEC) as libc::time_t,
        tv_nsec: (timeout % SEC) as libc::c_long,
    }
}

/// A wait's result (`ppoll`, `epoll_pwait2`): how many descriptors are ready, `Ok(0)` when a
/// signal interrupted it (`EINTR`), else the error.
fn count_or_eintr(r: libc::c_int) -> io::Result<usize> {
    if r >= 0 {
        return Ok(r as usize);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EINTR) {
        return Ok(0);
    }
    Err(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoll_reports_readable_descriptors_by_token_until_removed() {
        use std::os::unix::net::UnixDatagram;
        let (a, b) = UnixDatagram::pair().unwrap();
        let (c, d) = UnixDatagram::pair().unwrap();
        let ep = Epoll::new().unwrap();
        ep.add(b.as_raw_fd(), 7).unwrap();
        ep.add(d.as_raw_fd(), 9).unwrap();
        let mut ev = [libc::epoll_event { events: 0, u64: 0 }; 4];
        let t = now_ns();
        assert_eq!(ep.wait(&mut ev, 2_000_000).unwrap(), 0);
        assert!(now_ns() - t >= 1_000_000, "waited its timeout");
        c.send(b"x").unwrap();
        assert_eq!(ep.wait(&mut ev, 0).unwrap(), 1);
        assert_eq!({ ev[0].u64 }, 9);
        // Level-triggered: still readable until read.
        a.send(b"y").unwrap();
        let n = ep.wait(&mut ev, 0).unwrap();
        let mut tokens: Vec<u64> = ev[..n].iter().map(|e| e.u64).collect();
        tokens.sort();
        assert_eq!(tokens, vec![7, 9]);
        ep.remove(d.as_raw_fd()).unwrap();
        assert_eq!(ep.wait(&mut ev, 0).unwrap(), 1);
        assert!(ep.add(-1, 1).is_err());
    }

    #[test]
    fn clocks_move_forward() {
        let a = now_ns();
        let b = now_ns();
        assert!(b >= a && a > 0);
    }

    #[test]
    fn netns_cookie_is_stable_within_a_namespace() {
        let a = netns_cookie().unwrap();
        assert_eq!(a, netns_cookie().unwrap());
        assert_ne!(a, 0);
    }

    #[test]
    fn unknown_interface_has_no_index() {
        assert_eq!(ifindex("nsx-no-such0"), None);
        assert_eq!(ifindex("bad\0name"), None);
        assert!(ifindex("lo").is_some());
    }
}

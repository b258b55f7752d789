//! Socket options and interface look-ups: opening a socket as an owned descriptor,
//! `if_nametoindex(3)`, the network namespace's cookie (`SO_NETNS_COOKIE`, socket(7)),
//! offload state (`SIOCETHTOOL`, netdevice(7)), `TCP_NODELAY` (tcp(7)), `shutdown(2)`, a peek
//! at what a socket holds unread (`MSG_PEEK`, recv(2)) and the peer credentials of a Unix socket (`SO_PEERCRED`, unix(7)).
//!
//! Constants not in the `libc` crate are copied by value from the kernel's UAPI headers named
//! next to them.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `include/uapi/asm-generic/socket.h` (Linux ≥ 5.14).
const SO_NETNS_COOKIE: i32 = 71;
/// `include/uapi/linux/sockios.h`.
const SIOCETHTOOL: libc::c_ulong = 0x8946;

/// `socket(2)` with `SOCK_CLOEXEC` added, as an owned descriptor.
pub(crate) fn socket(domain: i32, ty: i32, proto: i32) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; a non-negative result is a descriptor we now own.
    let fd = unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, proto) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `setsockopt(2)` of a plain value `val`.
pub(crate) fn setsockopt<T>(fd: &impl AsRawFd, level: i32, opt: i32, val: &T) -> io::Result<()> {
    // SAFETY: pointer to a live T and its size; the descriptor is borrowed for the call.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
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

/// `getsockopt(2)` of an integer option.
pub(crate) fn getsockopt_int(fd: &impl AsRawFd, level: i32, opt: i32) -> io::Result<i32> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: pointer to a live c_int and its length; the descriptor is borrowed for the call.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            &mut v as *mut libc::c_int as *mut libc::c_void,
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(v)
}

/// `getsockopt(2)` into a plain value `val`; a shorter answer leaves the rest of `val` as it
/// was (an older kernel's smaller struct).
pub(crate) fn getsockopt_into<T>(
    fd: &impl AsRawFd,
    level: i32,
    opt: i32,
    val: &mut T,
) -> io::Result<()> {
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: pointer to a live T and its size; the kernel writes at most `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            val as *mut T as *mut libc::c_void,
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Index of interface `dev` in the calling thread's network namespace, `None` if absent.
pub fn ifindex(dev: &str) -> Option<u32> {
    let name = std::ffi::CString::new(dev).ok()?;
    // SAFETY: a NUL-terminated string valid for the call.
    let i = unsafe { libc::if_nametoindex(name.as_ptr()) };
    (i != 0).then_some(i)
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

/// `TCP_NODELAY` on a listening socket. Linux copies it to every connection the socket
/// accepts (the accepted socket is a clone of the listener's), which saves a `setsockopt` per
/// connection.
pub fn set_nodelay(fd: &impl AsRawFd) -> io::Result<()> {
    let one: libc::c_int = 1;
    setsockopt(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, &one)
}

/// `TCP_QUICKACK` on: an acknowledgement the kernel was delaying goes out now, and the next
/// few are not delayed (tcp(7); the kernel leaves quick-ack mode again on its own). Cost: one
/// system call.
pub fn quickack(fd: &impl AsRawFd) -> io::Result<()> {
    let one: libc::c_int = 1;
    setsockopt(fd, libc::IPPROTO_TCP, libc::TCP_QUICKACK, &one)
}

/// Whether `TCP_NODELAY` is on.
pub fn nodelay(fd: &impl AsRawFd) -> io::Result<bool> {
    Ok(getsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY)? != 0)
}

/// `shutdown(SHUT_WR)`: send our FIN, keep reading.
pub fn shutdown_write(fd: &impl AsRawFd) -> io::Result<()> {
    // SAFETY: shutdown on a borrowed, open socket descriptor.
    if unsafe { libc::shutdown(fd.as_raw_fd(), libc::SHUT_WR) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether a connected stream socket has anything unread, asked of the kernel itself (one
/// `recv(2)` of one byte with `MSG_PEEK | MSG_DONTWAIT`: nothing is taken, nothing waited
/// for): `Ok(1)` bytes are there, `Ok(0)` the peer closed, `Err(WouldBlock)` nothing yet.
/// Unlike a reactor's cached readiness it sees bytes that arrived an instant ago. Cost: one
/// system call.
pub fn peek_pending(fd: &impl AsRawFd) -> io::Result<usize> {
    let mut b = 0u8;
    // SAFETY: one byte into a live local; the descriptor is borrowed for the call.
    let n = unsafe {
        libc::recv(
            fd.as_raw_fd(),
            (&mut b as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Credentials of the process at the other end of a connected Unix socket, as the kernel
/// recorded them when it connected (`SO_PEERCRED`, unix(7)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCred {
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
}

/// `SO_PEERCRED` of a connected Unix stream socket (std's or tokio's `UnixStream`, anything
/// with a raw fd). A socket that is not a connected Unix socket is the kernel's error.
pub fn peer_cred(socket: &impl AsRawFd) -> io::Result<PeerCred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: u32::MAX,
        gid: u32::MAX,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: the pointer and length describe a live, writable ucred; the fd is borrowed from
    // an open socket for the duration of the call.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(PeerCred {
        pid: cred.pid,
        uid: cred.uid,
        gid: cred.gid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// The balancer's listeners rely on it: no per-connection `setsockopt` for the client side.
    #[test]
    fn accepted_sockets_inherit_nodelay_from_the_listener() {
        for on in [true, false] {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            if on {
                set_nodelay(&l).unwrap();
            }
            let _c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let (a, _) = l.accept().unwrap();
            assert_eq!(nodelay(&a).unwrap(), on);
        }
    }

    #[test]
    fn peer_cred_of_a_socket_pair_is_this_process() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let c = peer_cred(&a).unwrap();
        assert_eq!(c.pid as u32, std::process::id());
        assert_eq!(c.uid, crate::process::euid());
    }

    #[test]
    fn peer_cred_of_a_non_socket_is_an_error() {
        let f = std::fs::File::open("/proc/self/status").unwrap();
        assert!(peer_cred(&f).is_err());
    }
}

/// `ETHTOOL_GCHANNELS` (include/uapi/linux/ethtool.h).
const ETHTOOL_GCHANNELS: u32 = 0x3c;

/// `struct ethtool_channels`.
#[repr(C)]
#[derive(Default)]
struct EthtoolChannels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

/// How many receive queues `dev` has (`ethtool -l`: RX plus combined channels, at least 1).
pub fn rx_queues(dev: &str) -> io::Result<u32> {
    if dev.is_empty() || dev.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "interface name too long",
        ));
    }
    let fd = socket(libc::AF_INET, libc::SOCK_DGRAM, 0)?;
    let mut ch = EthtoolChannels {
        cmd: ETHTOOL_GCHANNELS,
        ..EthtoolChannels::default()
    };
    // SAFETY: a zeroed ifreq is valid; the name fits (checked above, NUL stays).
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(dev.bytes()) {
        *d = s as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = &mut ch as *mut EthtoolChannels as *mut libc::c_char;
    // SAFETY: ifreq points at `ch`, which lives for the call.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), SIOCETHTOOL as _, &mut ifr) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((ch.rx_count + ch.combined_count).max(1))
}

//! Raw netlink sockets (netlink(7)): [`NetlinkSocket`] opens one for a protocol (e.g.
//! `NETLINK_NETFILTER`), bound to an address the kernel picks, and sends to and receives from
//! the kernel, one datagram or a batch at a time. Message formats are the caller's: the
//! nfnetlink_queue client is `netsched_nfq::netlink`.

use crate::socket::{getsockopt_int, setsockopt, socket};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// A bound raw netlink socket, closed on drop.
#[derive(Debug)]
pub struct NetlinkSocket {
    fd: OwnedFd,
}

impl AsRawFd for NetlinkSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

fn kernel_address() -> libc::sockaddr_nl {
    // SAFETY: sockaddr_nl zeroed is a valid address: the kernel (pid 0), no groups.
    let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    addr.nl_family = libc::AF_NETLINK as u16;
    addr
}

impl NetlinkSocket {
    /// `socket(AF_NETLINK, SOCK_RAW, protocol)` bound with port id 0 (the kernel assigns one).
    /// The error of each step is returned as is, so the caller can say which one failed:
    /// the first element of the pair is `"socket"` or `"bind"`.
    pub fn open(protocol: i32) -> Result<Self, (&'static str, io::Error)> {
        let fd = socket(libc::AF_NETLINK, libc::SOCK_RAW, protocol).map_err(|e| ("socket", e))?;
        let addr = kernel_address();
        // SAFETY: pointer and size of a sockaddr_nl that lives for the call.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &addr as *const libc::sockaddr_nl as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_nl>() as u32,
            )
        };
        if rc < 0 {
            return Err(("bind", io::Error::last_os_error()));
        }
        Ok(Self { fd })
    }

    #[inline]
    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// An integer socket option.
    pub fn set_int(&self, level: i32, opt: i32, val: i32) -> io::Result<()> {
        setsockopt(self, level, opt, &val)
    }

    /// An integer socket option's value.
    pub fn get_int(&self, level: i32, opt: i32) -> io::Result<i32> {
        getsockopt_int(self, level, opt)
    }

    /// Send one datagram to the kernel.
    pub fn send_to_kernel(&self, buf: &[u8]) -> io::Result<()> {
        let addr = kernel_address();
        // SAFETY: `buf` is a live slice the kernel only reads; the address lives for the call.
        let rc = unsafe {
            libc::sendto(
                self.raw(),
                buf.as_ptr() as *const libc::c_void,
                buf.len(),
                0,
                &addr as *const libc::sockaddr_nl as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_nl>() as u32,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Receive one datagram (blocking) into `buf`; returns its length (truncated to `buf`).
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is a live, writable buffer of the given length.
        let n = unsafe {
            libc::recv(
                self.raw(),
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
                0,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    /// Receive up to `lens.len()` datagrams without blocking into slots of `buf`
    /// ([`crate::mmsg::recv_datagrams`]).
    #[inline]
    pub fn recv_batch(
        &self,
        buf: &mut [u8],
        slot_size: usize,
        lens: &mut [usize],
    ) -> io::Result<usize> {
        crate::mmsg::recv_datagrams(self, buf, slot_size, lens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_socket_answers_a_dump_request() {
        // NETLINK_ROUTE needs no privilege. RTM_GETLINK with NLM_F_REQUEST | NLM_F_DUMP:
        // struct nlmsghdr (16 bytes) + struct ifinfomsg (16 bytes), rtnetlink(7).
        let s = NetlinkSocket::open(libc::NETLINK_ROUTE).unwrap();
        let mut msg = Vec::new();
        msg.extend_from_slice(&32u32.to_ne_bytes());
        msg.extend_from_slice(&(libc::RTM_GETLINK).to_ne_bytes());
        msg.extend_from_slice(&((libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16).to_ne_bytes());
        msg.extend_from_slice(&1u32.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(&[0u8; 16]);
        s.send_to_kernel(&msg).unwrap();
        let mut buf = vec![0u8; 32 * 1024];
        let n = s.recv(&mut buf).unwrap();
        assert!(n >= 16);
        let typ = u16::from_ne_bytes([buf[4], buf[5]]);
        assert_eq!(
            typ,
            libc::RTM_NEWLINK,
            "the dump starts with a link (lo at least)"
        );
        assert!(s.get_int(libc::SOL_SOCKET, libc::SO_RCVBUF).unwrap() > 0);
        s.set_int(libc::SOL_SOCKET, libc::SO_RCVBUF, 1 << 16)
            .unwrap();
        assert!(NetlinkSocket::open(-1).is_err());
    }
}

//! Every libc call this crate makes, behind safe wrappers: the splice relay's pipes,
//! `shutdown(SHUT_WR)`, `TCP_NODELAY` on a listener, the open-file limit. (`SO_PEERCRED` lives in `netsched_testbed`.)

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A non-blocking pipe; both ends close on drop. The splice relay moves a socket's bytes into
/// it and out to the other socket without copying them into user space (splice(2)).
pub struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
}

impl Pipe {
    /// `pipe2(O_NONBLOCK | O_CLOEXEC)`; fails with EMFILE/ENFILE when out of descriptors.
    pub fn new() -> std::io::Result<Pipe> {
        let mut fds: [libc::c_int; 2] = [-1, -1];
        // SAFETY: `fds` is two writable c_ints, which pipe2 fills on success.
        let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) };
        if rc < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        Ok(Pipe { read, write })
    }

    /// Move up to `len` bytes from the socket `from` into the pipe. `Ok(0)` is end of stream;
    /// `WouldBlock` means the socket has nothing to read (or the pipe is full).
    pub fn fill_from(&self, from: &impl AsRawFd, len: usize) -> std::io::Result<usize> {
        splice(from.as_raw_fd(), self.write.as_raw_fd(), len)
    }

    /// Move up to `len` bytes from the pipe into the socket `to`. `WouldBlock` means the
    /// socket's send buffer is full (or the pipe is empty).
    pub fn drain_to(&self, to: &impl AsRawFd, len: usize) -> std::io::Result<usize> {
        splice(self.read.as_raw_fd(), to.as_raw_fd(), len)
    }
}

fn splice(from: RawFd, to: RawFd, len: usize) -> std::io::Result<usize> {
    // SAFETY: null offsets are required for pipes and sockets; both descriptors are borrowed
    // from live owners for the duration of the call; the kernel reads no user memory.
    let n = unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
        )
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// `shutdown(SHUT_WR)`: send our FIN, keep reading.
pub fn shutdown_write(fd: &impl AsRawFd) -> std::io::Result<()> {
    // SAFETY: shutdown on a borrowed, open socket descriptor.
    if unsafe { libc::shutdown(fd.as_raw_fd(), libc::SHUT_WR) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `TCP_NODELAY` on a listening socket. Linux copies it to every connection the socket
/// accepts (the accepted socket is a clone of the listener's), which saves a `setsockopt` per
/// connection.
pub fn set_nodelay(fd: &impl AsRawFd) -> std::io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: setsockopt on a borrowed, open socket; the option value is a live c_int of the
    // size passed.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether TCP_NODELAY is on (for the test of the inheritance above).
#[cfg(test)]
fn nodelay(fd: &impl AsRawFd) -> std::io::Result<bool> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt on a borrowed, open socket into a live c_int of the size passed.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(v != 0)
}

/// Raise the soft open-file limit to the hard one (a balancer holds two sockets per connection,
/// and up to two pipes while bytes are in flight). Returns the soft limit now in force.
pub fn raise_nofile_limit() -> std::io::Result<u64> {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `l` is a writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if l.rlim_cur < l.rlim_max {
        let want = libc::rlimit {
            rlim_cur: l.rlim_max,
            rlim_max: l.rlim_max,
        };
        // SAFETY: `want` is a valid rlimit that does not exceed the hard limit.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } == 0 {
            return Ok(want.rlim_cur);
        }
    }
    Ok(l.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The listeners rely on it: no per-connection `setsockopt` for the client side.
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
}

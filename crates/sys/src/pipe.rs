//! Pipes for zero-copy relaying: [`Pipe`] (`pipe2(2)`) and `splice(2)` between a socket and the
//! pipe, as the balancer's layer-4 relay uses them.

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

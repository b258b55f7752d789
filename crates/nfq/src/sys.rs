//! The daemon's small system calls behind safe functions: an eventfd to wake the packet loop
//! from the control thread, and `poll` with a timeout. (Netlink has its own in
//! [`crate::netlink`].)

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// A non-blocking eventfd: `wake` makes it readable, `drain` resets it.
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    pub fn new() -> std::io::Result<Self> {
        // SAFETY: eventfd has no memory preconditions; a non-negative result is a new fd we own.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor owned by nobody else.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// A second handle on the same eventfd (for the other thread).
    pub fn try_clone(&self) -> std::io::Result<Self> {
        Ok(EventFd(self.0.try_clone()?))
    }

    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Make the fd readable (never blocks: a saturated counter is already readable).
    pub fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our fd.
        let _ = unsafe {
            libc::write(
                self.fd(),
                &one as *const u64 as *const libc::c_void,
                std::mem::size_of::<u64>(),
            )
        };
    }

    /// Reset the counter (non-blocking; nothing to read is fine).
    pub fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads at most 8 bytes into a live u64 from our fd.
        let _ = unsafe {
            libc::read(
                self.fd(),
                &mut v as *mut u64 as *mut libc::c_void,
                std::mem::size_of::<u64>(),
            )
        };
    }
}

/// `poll(2)` on `fds` for at most `timeout` (rounded up to whole ms; `Duration::ZERO` does not
/// wait). Returns the number of ready fds; an interrupted call (EINTR) counts as 0.
pub fn poll(fds: &mut [libc::pollfd], timeout: Duration) -> std::io::Result<usize> {
    let ms = timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as libc::c_int;
    // SAFETY: fds is a live slice of pollfd of the given length.
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if rc < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EINTR) {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(rc as usize)
}

/// Lower the calling thread's scheduling priority to nice `n` (0..=19). The control thread
/// calls it so that, sharing a CPU with the packet loop (`--cpu` pins both), it yields to it.
pub fn nice_this_thread(n: i32) -> std::io::Result<()> {
    // SAFETY: gettid has no preconditions; setpriority on our own thread id with a plain int.
    let rc = unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, n.clamp(0, 19))
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

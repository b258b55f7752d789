//! Readiness waits: an [`Epoll`] set (epoll(7), waited on with `epoll_pwait2` for a
//! nanosecond timeout, Linux ≥ 5.11), [`poll_in`] (`ppoll(2)` over up to four descriptors),
//! [`poll`] (`poll(2)` with a millisecond timeout) and the [`EventFd`] (eventfd(2)) one thread
//! uses to wake another's wait.

use crate::Nanos;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Wait until one of `fds` (descriptor, whether to wait for input on it) is readable or
/// `timeout` nanoseconds passed (`ppoll`, no signal mask change). `Ok(false)` on `EINTR`.
#[inline]
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
    let ts = crate::clock::timespec(timeout);
    // SAFETY: `n` valid pollfds, a valid timespec, no signal mask.
    let r = unsafe { libc::ppoll(p.as_mut_ptr(), n as libc::nfds_t, &ts, std::ptr::null()) };
    Ok(count_or_eintr(r)? > 0)
}

/// `poll(2)` on `fds` for at most `timeout` (rounded up to whole ms; `Duration::ZERO` does not
/// wait). Returns the number of ready fds; an interrupted call (EINTR) counts as 0.
pub fn poll(fds: &mut [libc::pollfd], timeout: Duration) -> io::Result<usize> {
    let ms = timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as libc::c_int;
    // SAFETY: fds is a live slice of pollfd of the given length.
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    count_or_eintr(rc)
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

    /// The epoll descriptor itself: readable while any watched descriptor has input, so one
    /// `poll` on it waits for all of them.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
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
    #[inline]
    pub fn wait(&self, events: &mut [libc::epoll_event], timeout: Nanos) -> io::Result<usize> {
        let ts = crate::clock::timespec(timeout);
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

/// A non-blocking eventfd: `wake` makes it readable, `drain` resets it.
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    pub fn new() -> io::Result<Self> {
        // SAFETY: eventfd has no memory preconditions; a non-negative result is a new fd we own.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor owned by nobody else.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// A second handle on the same eventfd (for the other thread).
    pub fn try_clone(&self) -> io::Result<Self> {
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

/// A wait's result (`poll`, `ppoll`, `epoll_pwait2`): how many descriptors are ready, `Ok(0)`
/// when a signal interrupted it (`EINTR`), else the error.
#[inline]
pub(crate) fn count_or_eintr(r: libc::c_int) -> io::Result<usize> {
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
    use crate::clock::now_ns;

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
    fn an_eventfd_is_readable_after_wake_until_drained() {
        let e = EventFd::new().unwrap();
        let other = e.try_clone().unwrap();
        let mut fds = [libc::pollfd {
            fd: e.fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        assert_eq!(poll(&mut fds, Duration::ZERO).unwrap(), 0);
        other.wake();
        assert_eq!(poll(&mut fds, Duration::ZERO).unwrap(), 1);
        assert!(poll_in(&[(e.fd(), true)], 0).unwrap());
        e.drain();
        assert_eq!(poll(&mut fds, Duration::ZERO).unwrap(), 0);
    }
}

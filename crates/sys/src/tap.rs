//! TAP devices (tuntap(4): `/dev/net/tun` + `TUNSETIFF`): the interface a VM monitor such as
//! QEMU (`-netdev tap`) hands the host switch. The switch's tests play the VM's side with it.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// `TUNSETIFF` = `_IOW('T', 202, int)` (linux/if_tun.h).
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;

/// An open TAP device: frames written to the fd come out of the interface, and frames sent to
/// the interface are read from the fd. The interface lives while the fd is open.
#[derive(Debug)]
pub struct Tap {
    fd: OwnedFd,
    name: String,
}

impl Tap {
    /// Create (or attach to) TAP interface `name` in the calling thread's namespace.
    pub fn open(name: &str) -> io::Result<Self> {
        if name.is_empty() || name.len() > 15 || name.contains('\0') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("TAP name {name:?}: 1..15 bytes, no NUL"),
            ));
        }
        let path = c"/dev/net/tun";
        // SAFETY: a NUL-terminated path; a non-negative result is a descriptor we now own.
        let raw = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is fresh and owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: ifreq is plain data; zeroed is valid.
        let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, s) in ifr.ifr_name.iter_mut().zip(name.bytes()) {
            *d = s as libc::c_char;
        }
        ifr.ifr_ifru.ifru_flags = IFF_TAP | IFF_NO_PI;
        // SAFETY: TUNSETIFF reads and writes one ifreq we own for the call.
        let r = unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF as _, &mut ifr) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            fd,
            name: name.to_string(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Read one frame (blocking unless the fd was made non-blocking); returns its length.
    pub fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for `buf.len()` bytes for the call.
        let r = unsafe { libc::read(self.raw_fd(), buf.as_mut_ptr() as *mut _, buf.len()) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r as usize)
        }
    }

    /// Write one frame.
    pub fn write(&self, frame: &[u8]) -> io::Result<usize> {
        // SAFETY: `frame` is valid for `frame.len()` bytes for the call.
        let r = unsafe { libc::write(self.raw_fd(), frame.as_ptr() as *const _, frame.len()) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r as usize)
        }
    }

    /// Wait up to `timeout_ms` for a frame to read; `Ok(false)` on timeout.
    pub fn wait_readable(&self, timeout_ms: i32) -> io::Result<bool> {
        let mut p = libc::pollfd {
            fd: self.raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the call.
        let r = unsafe { libc::poll(&mut p, 1, timeout_ms) };
        match r {
            r if r < 0 => {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    Ok(false)
                } else {
                    Err(e)
                }
            }
            0 => Ok(false),
            _ => Ok(true),
        }
    }
}

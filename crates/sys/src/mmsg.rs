//! Batched datagram calls on any socket: `sendmmsg(2)` of one payload many times (load
//! generators) and `recvmmsg(2)` into consecutive slots of one buffer (the netlink queue).
//! `AF_PACKET`'s slot-addressed batches, which also read the sender's address, are
//! [`crate::packet::PacketFd::recv_batch`] / [`send_batch`](crate::packet::PacketFd::send_batch).

use std::io;
use std::os::fd::AsRawFd;

/// Most messages one call of this module (or of [`crate::packet`]) moves.
pub const MAX_BATCH: usize = 64;

/// Send `payload` `count` times (at most [`MAX_BATCH`]) with one `sendmmsg` on the connected
/// (or bound `AF_PACKET`) socket `fd`. Returns how many the kernel took.
#[inline]
pub fn send_repeated(fd: &impl AsRawFd, payload: &[u8], count: usize) -> io::Result<usize> {
    let n = count.min(MAX_BATCH);
    if n == 0 {
        return Ok(0);
    }
    // SAFETY: zeroed iovec/mmsghdr are valid initial values.
    let mut iov: [libc::iovec; MAX_BATCH] = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut msgs: [libc::mmsghdr; MAX_BATCH] = unsafe { std::mem::zeroed() };
    for i in 0..n {
        iov[i].iov_base = payload.as_ptr() as *mut libc::c_void;
        iov[i].iov_len = payload.len();
        msgs[i].msg_hdr.msg_iov = &mut iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: `n` initialised headers, each pointing at `payload`, which the kernel only reads
    // and which is borrowed for the call; the descriptor is borrowed too.
    let r = unsafe { libc::sendmmsg(fd.as_raw_fd(), msgs.as_mut_ptr(), n as u32, 0) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// Receive up to `lens.len()` (≤ [`MAX_BATCH`]) datagrams without blocking, datagram i into
/// `buf[i*slot_size..][..slot_size]` (truncated to the slot), its length into `lens[i]`.
/// Returns how many arrived; the error (`EAGAIN` when none is waiting, `ENOBUFS`, ...) is the
/// caller's to sort. Slots past the end of `buf` are not used.
#[inline]
pub fn recv_datagrams(
    fd: &impl AsRawFd,
    buf: &mut [u8],
    slot_size: usize,
    lens: &mut [usize],
) -> io::Result<usize> {
    let n = lens
        .len()
        .min(MAX_BATCH)
        .min(buf.len().checked_div(slot_size).unwrap_or(0));
    if n == 0 {
        return Ok(0);
    }
    // SAFETY: zeroed iovec/mmsghdr are valid initial values.
    let mut iov: [libc::iovec; MAX_BATCH] = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut msgs: [libc::mmsghdr; MAX_BATCH] = unsafe { std::mem::zeroed() };
    for (i, slot) in buf.chunks_exact_mut(slot_size).take(n).enumerate() {
        iov[i].iov_base = slot.as_mut_ptr() as *mut libc::c_void;
        iov[i].iov_len = slot_size;
        msgs[i].msg_hdr.msg_iov = &mut iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: `n` initialised headers, each pointing at a distinct slot of `buf` (borrowed
    // mutably for the call) of `slot_size` bytes.
    let r = unsafe {
        libc::recvmmsg(
            fd.as_raw_fd(),
            msgs.as_mut_ptr(),
            n as u32,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let got = r as usize;
    for i in 0..got {
        lens[i] = msgs[i].msg_len as usize;
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixDatagram;

    #[test]
    fn a_repeated_send_arrives_as_separate_datagrams_in_separate_slots() {
        let (a, b) = UnixDatagram::pair().unwrap();
        assert_eq!(send_repeated(&a, b"abc", 5).unwrap(), 5);
        a.send(b"a longer one").unwrap();
        let mut buf = vec![0u8; 8 * 4];
        let mut lens = [0usize; 8];
        // Six datagrams waiting, room for four of 8 bytes each (the buffer bounds the batch).
        assert_eq!(recv_datagrams(&b, &mut buf, 8, &mut lens).unwrap(), 4);
        assert_eq!(&lens[..4], &[3, 3, 3, 3]);
        assert_eq!(&buf[8..11], b"abc");
        let got = recv_datagrams(&b, &mut buf, 8, &mut lens).unwrap();
        assert_eq!(got, 2);
        assert_eq!(lens[1], 8, "truncated to its slot");
        assert_eq!(&buf[8..16], b"a longer");
        let e = recv_datagrams(&b, &mut buf, 8, &mut lens).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert_eq!(send_repeated(&a, b"x", 0).unwrap(), 0);
        assert_eq!(recv_datagrams(&b, &mut buf, 0, &mut lens).unwrap(), 0);
    }
}

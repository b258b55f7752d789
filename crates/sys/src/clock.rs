//! Clocks and time conversions: `clock_gettime(2)` for `CLOCK_MONOTONIC` and the calling
//! thread's CPU time (and `CLOCK_REALTIME` for latency accounting), `sysconf(_SC_CLK_TCK)` for `/proc` tick counts, and the `timespec` a
//! nanosecond timeout becomes for `ppoll`/`epoll_pwait2`.

use crate::{Nanos, SEC};

#[inline]
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
#[inline]
pub fn now_ns() -> Nanos {
    clock(libc::CLOCK_MONOTONIC)
}

/// `CLOCK_REALTIME` in nanoseconds: the clock of the kernel's packet receive stamps
/// ([`crate::port::FramePort::rx_stamp`]); for latency accounting only, never for scheduling
/// (it can step).
#[inline]
pub fn realtime_ns() -> Nanos {
    clock(libc::CLOCK_REALTIME)
}

/// CPU time of the calling thread (`CLOCK_THREAD_CPUTIME_ID`) in nanoseconds.
#[inline]
pub fn thread_cpu_ns() -> Nanos {
    clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time of the whole process, every thread, user and system (`CLOCK_PROCESS_CPUTIME_ID`),
/// in nanoseconds.
#[inline]
pub fn process_cpu_ns() -> Nanos {
    clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// Clock ticks per second of the `utime`/`stime` fields of `/proc/*/stat` (proc(5),
/// `sysconf(_SC_CLK_TCK)`).
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as u64
    } else {
        100
    }
}

/// `timeout` nanoseconds as a `timespec`.
#[inline]
pub(crate) fn timespec(timeout: Nanos) -> libc::timespec {
    libc::timespec {
        tv_sec: (timeout / SEC) as libc::time_t,
        tv_nsec: (timeout % SEC) as libc::c_long,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_move_forward() {
        let a = now_ns();
        let b = now_ns();
        assert!(b >= a && a > 0);
        assert!(clock_ticks_per_second() > 0);
    }
}

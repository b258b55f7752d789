//! The calling thread: entering a network namespace (`setns(2)`), its CPU affinity
//! (`sched_getaffinity(2)`/`sched_setaffinity(2)`), its timer slack (`PR_SET_TIMERSLACK`,
//! prctl(2)), its nice value (`setpriority(2)`) and its kernel thread id (`gettid(2)`).

use std::fmt;
use std::io;
use std::os::fd::AsRawFd;

/// Why the calling thread could not enter a network namespace; each names it.
#[derive(Debug)]
pub enum NetnsError {
    /// Empty, longer than 255 bytes, or holding a `/`: not an `ip netns` name.
    BadName(String),
    /// `/run/netns/NAME` could not be opened (no such namespace, …).
    Open { name: String, source: io::Error },
    /// `setns(2)` refused it.
    Setns { name: String, source: io::Error },
}

impl fmt::Display for NetnsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetnsError::BadName(name) => write!(
                f,
                "network namespace name {name:?}: must be a plain `ip netns` name"
            ),
            NetnsError::Open { name, source } => write!(
                f,
                "network namespace `{name}`: cannot open /run/netns/{name}: {source}"
            ),
            NetnsError::Setns { name, source } => write!(f, "setns(/run/netns/{name}): {source}"),
        }
    }
}

// No `source()`: the text holds the inner error's (a `{:#}` chain would repeat it).
impl std::error::Error for NetnsError {}

/// Why the calling thread could not be pinned to a CPU.
#[derive(Debug)]
pub enum PinError {
    /// The CPU is outside this process's affinity mask (or beyond `CPU_SETSIZE`).
    Unavailable { cpu: usize, allowed: Vec<usize> },
    /// `sched_setaffinity(2)` refused it.
    Setaffinity { cpu: usize, source: io::Error },
}

impl fmt::Display for PinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PinError::Unavailable { cpu, allowed } => write!(
                f,
                "CPU {cpu} is not available to this process (allowed: {})",
                fmt_cpus(allowed)
            ),
            PinError::Setaffinity { cpu, source } => write!(f, "pinning to CPU {cpu}: {source}"),
        }
    }
}

impl std::error::Error for PinError {}

/// Move the calling **thread** into network namespace `name` (an `ip netns` name, found under
/// `/run/netns`). Only this thread changes namespace; sockets it opens afterwards live there.
pub fn enter_netns(name: &str) -> Result<(), NetnsError> {
    if name.is_empty() || name.contains('/') || name.len() > 255 {
        return Err(NetnsError::BadName(name.to_string()));
    }
    let path = format!("/run/netns/{name}");
    let f = std::fs::File::open(&path).map_err(|source| NetnsError::Open {
        name: name.to_string(),
        source,
    })?;
    // SAFETY: setns on a namespace fd we just opened and keep open for the call; it affects
    // only the calling thread.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(NetnsError::Setns {
            name: name.to_string(),
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// The CPUs this process may run on (its affinity mask), in ascending order.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity writes at most
    // `size_of::<cpu_set_t>()` bytes into it; CPU_ISSET reads within it for i < CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&i| libc::CPU_ISSET(i, &set))
            .collect()
    }
}

/// Pin the calling thread to `cpu`. A CPU outside this process's affinity mask (or beyond
/// `CPU_SETSIZE`) is an error naming the CPUs that exist, never a panic.
pub fn pin_to_cpu(cpu: usize) -> Result<(), PinError> {
    let allowed = allowed_cpus();
    if cpu >= libc::CPU_SETSIZE as usize || !allowed.contains(&cpu) {
        return Err(PinError::Unavailable { cpu, allowed });
    }
    // SAFETY: cpu < CPU_SETSIZE was checked, so CPU_SET writes inside the zeroed set.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(PinError::Setaffinity {
                cpu,
                source: io::Error::last_os_error(),
            });
        }
    }
    Ok(())
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

/// Lower the calling thread's scheduling priority to nice `n` (0..=19), e.g. for a control
/// thread that shares a CPU with a packet loop and should yield to it.
pub fn nice_this_thread(n: i32) -> io::Result<()> {
    // SAFETY: gettid has no preconditions; setpriority on our own thread id with a plain int.
    let rc = unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, n.clamp(0, 19))
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The calling thread's kernel id (`gettid(2)`), as `/proc/self/task/TID` names it.
pub fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

fn fmt_cpus(cpus: &[usize]) -> String {
    if cpus.is_empty() {
        return "none".into();
    }
    let v: Vec<String> = cpus.iter().map(|c| c.to_string()).collect();
    v.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinning_to_a_cpu_that_does_not_exist_is_an_error_not_a_panic() {
        let e = pin_to_cpu(100_000).unwrap_err().to_string();
        assert!(e.contains("CPU 100000") && e.contains("allowed"), "{e}");
        assert!(pin_to_cpu(usize::MAX).is_err());
    }

    #[test]
    fn entering_a_missing_namespace_names_it() {
        let e = enter_netns("no-such-ns-netsched").unwrap_err().to_string();
        assert!(e.contains("no-such-ns-netsched"), "{e}");
        assert!(enter_netns("../etc").is_err());
    }

    #[test]
    fn this_thread_has_its_own_id_and_may_lower_its_priority() {
        let main = gettid();
        let other = std::thread::spawn(|| {
            nice_this_thread(5).unwrap();
            set_timer_slack(1000).unwrap();
            gettid()
        })
        .join()
        .unwrap();
        assert_ne!(main, other);
        assert!(std::path::Path::new(&format!("/proc/self/task/{other}")).exists() || other > 0);
        assert!(!allowed_cpus().is_empty());
    }
}

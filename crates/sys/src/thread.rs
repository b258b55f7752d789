//! The calling thread: entering a network namespace (`setns(2)`), its CPU affinity
//! (`sched_getaffinity(2)`/`sched_setaffinity(2)`), its timer slack (`PR_SET_TIMERSLACK`,
//! prctl(2)), its nice value (`setpriority(2)`) and its kernel thread id (`gettid(2)`).

use anyhow::{bail, Context, Result};
use std::io;
use std::os::fd::AsRawFd;

/// Move the calling **thread** into network namespace `name` (an `ip netns` name, found under
/// `/run/netns`). Only this thread changes namespace; sockets it opens afterwards live there.
pub fn enter_netns(name: &str) -> Result<()> {
    if name.is_empty() || name.contains('/') || name.len() > 255 {
        bail!("network namespace name {name:?}: must be a plain `ip netns` name");
    }
    let path = format!("/run/netns/{name}");
    let f = std::fs::File::open(&path)
        .with_context(|| format!("network namespace `{name}`: cannot open {path}"))?;
    // SAFETY: setns on a namespace fd we just opened and keep open for the call; it affects
    // only the calling thread.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        bail!("setns({path}): {}", std::io::Error::last_os_error());
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
pub fn pin_to_cpu(cpu: usize) -> Result<()> {
    let allowed = allowed_cpus();
    if cpu >= libc::CPU_SETSIZE as usize || !allowed.contains(&cpu) {
        bail!(
            "CPU {cpu} is not available to this process (allowed: {})",
            fmt_cpus(&allowed)
        );
    }
    // SAFETY: cpu < CPU_SETSIZE was checked, so CPU_SET writes inside the zeroed set.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            bail!("pinning to CPU {cpu}: {}", std::io::Error::last_os_error());
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

//! The testbed's system calls, each behind a safe function: entering a network namespace,
//! pinning a thread to a CPU, signalling a process group, `mkdtemp`, signal handlers, the
//! peer credentials of a Unix socket. Every `unsafe` block of the crate lives here.

use anyhow::{bail, Context, Result};
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

/// True when running as root (needed for namespaces, tc, iptables).
pub fn is_root() -> bool {
    euid() == 0
}

/// The effective uid of this process.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// Credentials of the process at the other end of a connected Unix socket, as the kernel
/// recorded them when it connected (`SO_PEERCRED`, unix(7)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCred {
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
}

/// `SO_PEERCRED` of a connected Unix stream socket (std's or tokio's `UnixStream`, anything
/// with a raw fd). A socket that is not a connected Unix socket is the kernel's error.
pub fn peer_cred(socket: &impl AsRawFd) -> std::io::Result<PeerCred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: u32::MAX,
        gid: u32::MAX,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: the pointer and length describe a live, writable ucred; the fd is borrowed from
    // an open socket for the duration of the call.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(PeerCred {
        pid: cred.pid,
        uid: cred.uid,
        gid: cred.gid,
    })
}

/// Send `sig` to every process of process group `pgid` (a group this run created by starting
/// a child as its leader). Returns false when the group no longer exists.
pub(crate) fn signal_group(pgid: u32, sig: i32) -> bool {
    if pgid <= 1 || pgid > i32::MAX as u32 {
        return false; // never the whole system (−1) or our own group (0)
    }
    // SAFETY: kill(2) with a negative id signals one process group; no memory is passed.
    unsafe { libc::kill(-(pgid as i32), sig) == 0 }
}

/// Send `sig` to one process (our own unreaped child, so its id is not reused).
pub(crate) fn signal_pid(pid: u32, sig: i32) -> bool {
    if pid <= 1 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: kill(2) on one process id; no memory is passed.
    unsafe { libc::kill(pid as i32, sig) == 0 }
}

/// `mkdtemp(3)`: create a new folder from `template` (ending in `XXXXXX`), mode 0700, failing
/// if anything exists under the chosen name. Returns the created path.
pub(crate) fn mkdtemp(template: &std::path::Path) -> Result<std::path::PathBuf> {
    let mut bytes = template
        .to_str()
        .context("temporary folder path is not UTF-8")?
        .as_bytes()
        .to_vec();
    if bytes.contains(&0) || !bytes.ends_with(b"XXXXXX") {
        bail!(
            "temporary folder template {}: must end in XXXXXX and contain no NUL",
            template.display()
        );
    }
    bytes.push(0);
    // SAFETY: `bytes` is a NUL-terminated, writable template ending in XXXXXX; mkdtemp
    // replaces the Xs in place and creates the folder with mode 0700, failing if it exists.
    let r = unsafe { libc::mkdtemp(bytes.as_mut_ptr() as *mut libc::c_char) };
    if r.is_null() {
        bail!(
            "cannot create a temporary folder from {}: {}",
            template.display(),
            std::io::Error::last_os_error()
        );
    }
    bytes.pop();
    Ok(std::path::PathBuf::from(
        String::from_utf8(bytes).context("mkdtemp returned non-UTF-8")?,
    ))
}

/// Register `handler` for signal `sig`. The handler must be async-signal-safe.
pub(crate) fn register_signal(sig: i32, handler: fn()) -> Result<signal_hook::SigId> {
    // SAFETY: the caller passes a handler that is async-signal-safe (stores to atomics only).
    unsafe { signal_hook::low_level::register(sig, handler) }.context("installing a signal handler")
}

/// The uid and gid of the unprivileged account `nobody` (for servers a run starts that need no
/// privilege), looked up with `id`.
pub fn nobody() -> Result<(u32, u32)> {
    let id = |flag: &str| -> Result<u32> {
        let out = crate::run("id", &[flag, "nobody"])?;
        out.trim()
            .parse()
            .with_context(|| format!("`id {flag} nobody` printed {:?}", out.trim()))
    };
    Ok((id("-u")?, id("-g")?))
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
    fn peer_cred_of_a_socket_pair_is_this_process() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let c = peer_cred(&a).unwrap();
        assert_eq!(c.pid as u32, std::process::id());
        assert_eq!(c.uid, euid());
    }

    #[test]
    fn peer_cred_of_a_non_socket_is_an_error() {
        let f = std::fs::File::open("/proc/self/status").unwrap();
        assert!(peer_cred(&f).is_err());
    }

    #[test]
    fn entering_a_missing_namespace_names_it() {
        let e = enter_netns("no-such-ns-netsched").unwrap_err().to_string();
        assert!(e.contains("no-such-ns-netsched"), "{e}");
        assert!(enter_netns("../etc").is_err());
    }
}

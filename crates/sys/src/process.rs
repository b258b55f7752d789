//! The process: its effective uid (`geteuid(2)`), signals to a process or process group
//! (`kill(2)`), signal handlers (`signal-hook`'s low-level registration), its open-file
//! limit (`getrlimit(2)`/`setrlimit(2)`), the limits a child is started with, and the
//! thread a daemon's SIGHUP (reload) is handled on ([`HangupThread`]).

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

/// A signal handler or the thread that serves it could not be set up: what was being done and
/// the system's error.
#[derive(Debug)]
pub struct SignalError {
    /// "installing a signal handler", "installing a SIGHUP handler", "starting the SIGHUP thread".
    pub doing: &'static str,
    pub source: std::io::Error,
}

impl fmt::Display for SignalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.doing, self.source)
    }
}

// No `source()`: the text holds the inner error's (a `{:#}` chain would repeat it).
impl std::error::Error for SignalError {}

fn signal_error(doing: &'static str) -> impl FnOnce(std::io::Error) -> SignalError {
    move |source| SignalError { doing, source }
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

/// Send `sig` to every process of process group `pgid` (a group this run created by starting
/// a child as its leader). Returns false when the group no longer exists.
pub fn signal_group(pgid: u32, sig: i32) -> bool {
    if pgid <= 1 || pgid > i32::MAX as u32 {
        return false; // never the whole system (−1) or our own group (0)
    }
    // SAFETY: kill(2) with a negative id signals one process group; no memory is passed.
    unsafe { libc::kill(-(pgid as i32), sig) == 0 }
}

/// Send `sig` to one process (the caller's own unreaped child, so its id is not reused).
pub fn signal_pid(pid: u32, sig: i32) -> bool {
    if pid <= 1 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: kill(2) on one process id; no memory is passed.
    unsafe { libc::kill(pid as i32, sig) == 0 }
}

/// On signal `sig`, store `true` into `flag` (the handler does nothing else, so it is
/// async-signal-safe, signal-safety(7)). Unregister with `signal_hook::low_level::unregister`.
pub fn set_flag_on_signal(
    sig: i32,
    flag: &'static AtomicBool,
) -> Result<signal_hook::SigId, SignalError> {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe; it captures a
    // `'static` reference, so it stays valid however long the registration lives.
    unsafe { signal_hook::low_level::register(sig, move || flag.store(true, Ordering::Relaxed)) }
        .map_err(signal_error("installing a signal handler"))
}

/// A thread that runs a daemon's reload once per SIGHUP, away from its packet path: the
/// signal handler only wakes it (`signal-hook`'s self-pipe), so SIGHUP never takes its default
/// action (ending the process) while the thread lives. Dropping it stops and joins the thread;
/// a SIGHUP after that is caught and ignored.
pub struct HangupThread {
    handle: signal_hook::iterator::Handle,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HangupThread {
    /// Catch SIGHUP from now on and call `on_hangup` on a thread named `name` for each one
    /// (several arriving during one call are handled by one more call).
    pub fn spawn(
        name: &str,
        mut on_hangup: impl FnMut() + Send + 'static,
    ) -> Result<Self, SignalError> {
        let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGHUP])
            .map_err(signal_error("installing a SIGHUP handler"))?;
        let handle = signals.handle();
        let thread = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                for _ in signals.forever() {
                    on_hangup();
                }
            })
            .map_err(signal_error("starting the SIGHUP thread"))?;
        Ok(HangupThread {
            handle,
            thread: Some(thread),
        })
    }
}

impl Drop for HangupThread {
    fn drop(&mut self) {
        self.handle.close();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
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

/// Raise the open-file limit to at least `want` descriptors where this process may: the soft
/// limit up to the hard one, and with CAP_SYS_RESOURCE (root) the hard one too, up to
/// `/proc/sys/fs/nr_open`. Children inherit it. Returns the soft limit now in force, which
/// is below `want` when the process may not raise it that far.
pub fn raise_nofile_limit_to(want: u64) -> std::io::Result<u64> {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `l` is a writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if l.rlim_cur >= want {
        return Ok(l.rlim_cur);
    }
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok())
        .unwrap_or(l.rlim_max);
    let raised = libc::rlimit {
        rlim_cur: want.min(nr_open),
        rlim_max: l.rlim_max.max(want.min(nr_open)),
    };
    // SAFETY: `raised` is a valid rlimit; the kernel refuses a hard limit above the current
    // one without CAP_SYS_RESOURCE, leaving the limits as they were.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
        return Ok(raised.rlim_cur);
    }
    raise_nofile_limit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_sets_its_flag() {
        static FLAG: AtomicBool = AtomicBool::new(false);
        // SIGWINCH: ignored by default, so a test binary's other threads do not care.
        let id = set_flag_on_signal(libc::SIGWINCH, &FLAG).unwrap();
        assert!(signal_pid(std::process::id(), libc::SIGWINCH));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !FLAG.load(Ordering::Relaxed) {
            assert!(
                std::time::Instant::now() < deadline,
                "the handler never ran"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        signal_hook::low_level::unregister(id);
        assert!(!signal_pid(0, libc::SIGWINCH) && !signal_group(1, libc::SIGWINCH));
        assert!(raise_nofile_limit().unwrap() > 0);
    }

    /// SIGHUP runs the closure on the thread (the process, which SIGHUP would otherwise end,
    /// goes on), once per signal; dropping the thread joins it.
    #[test]
    fn a_hangup_runs_the_reload_on_its_thread_and_never_ends_the_process() {
        static HUPS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let t = HangupThread::spawn("test-sighup", || {
            assert_eq!(std::thread::current().name(), Some("test-sighup"));
            HUPS.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
        for want in 1..=2 {
            assert!(signal_pid(std::process::id(), libc::SIGHUP));
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while HUPS.load(Ordering::SeqCst) < want {
                assert!(std::time::Instant::now() < deadline, "no reload {want}");
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        drop(t);
        assert!(raise_nofile_limit().unwrap() > 0);
    }
}

/// A resource limit a child process may be started with ([`limit_child`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildLimit {
    /// `RLIMIT_NOFILE`: open files.
    OpenFiles,
    /// `RLIMIT_AS`: address space, bytes.
    AddressSpace,
}

/// Make the child `cmd` spawns start with the soft and hard `limit` at `value`
/// (`setrlimit(2)` between fork and exec); a child the limit cannot be set in fails to spawn.
pub fn limit_child(cmd: &mut std::process::Command, limit: ChildLimit, value: u64) {
    use std::os::unix::process::CommandExt;
    let resource = match limit {
        ChildLimit::OpenFiles => libc::RLIMIT_NOFILE,
        ChildLimit::AddressSpace => libc::RLIMIT_AS,
    };
    // SAFETY: the closure runs in the forked child before exec; it only calls setrlimit(2),
    // which is async-signal-safe, on a value on its own stack, and touches no shared state.
    unsafe {
        cmd.pre_exec(move || {
            let l = libc::rlimit {
                rlim_cur: value,
                rlim_max: value,
            };
            if libc::setrlimit(resource, &l) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

//! CPU accounting from procfs: per-thread and per-process CPU time (`schedstat`, ns), the
//! machine's busy fraction (`/proc/stat`), and whether a process still runs. Used to show,
//! per cell, that the emulated hosts and not this (shared) machine limit the rate.

/// True while process `pid` runs (not exited, not a zombie awaiting its reaper).
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// This thread's kernel id (from `/proc/thread-self`).
pub fn thread_id() -> Option<u32> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    link.file_name()?.to_str()?.parse().ok()
}

fn schedstat_ns(path: &str) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// CPU time of one thread of this process, ns (0 if it is gone).
pub fn thread_cpu_ns(tid: u32) -> u64 {
    schedstat_ns(&format!("/proc/self/task/{tid}/schedstat"))
}

/// CPU time of the calling thread, ns.
pub fn this_thread_cpu_ns() -> u64 {
    schedstat_ns("/proc/thread-self/schedstat")
}

/// CPU time of all threads of process `pid`, ns (bounded: the first 1024 threads).
pub fn process_cpu_ns(pid: u32) -> u64 {
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    rd.filter_map(|e| e.ok())
        .take(1024)
        .map(|e| schedstat_ns(&format!("{}/schedstat", e.path().display())))
        .sum()
}

/// The machine's (busy, total) CPU jiffies from `/proc/stat`: how loaded the shared machine
/// was during a window.
pub fn machine_jiffies() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = text.lines().find(|l| l.starts_with("cpu ")) else {
        return (0, 0);
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum();
    // idle + iowait
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total.saturating_sub(idle), total)
}

//! Child processes a run owns: each started as the leader of its own process group, so that
//! stopping it stops everything it forked too (nginx's workers, a shell's children), and
//! stopped by id — never by name. A [`Process`] is killed and reaped when dropped; while it
//! runs, [`Process::finish`] waits for it with a time limit and returns early when the run is
//! interrupted (SIGINT/SIGTERM, [`crate::signal`]).

use crate::sys::{signal_group, signal_pid};
use anyhow::{bail, Context, Result};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a stopped process gets between SIGTERM and SIGKILL when dropped.
pub const DEFAULT_GRACE: Duration = Duration::from_millis(500);

/// A child process (and its process group), stopped and reaped when dropped.
#[derive(Debug)]
pub struct Process {
    child: Option<Child>,
    label: String,
}

impl Process {
    /// Start `cmd` as the leader of a new process group. `label` names it in errors.
    pub fn start(mut cmd: Command, label: &str) -> Result<Self> {
        cmd.process_group(0);
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {label} (`{:?}`)", cmd.get_program()))?;
        Ok(Self {
            child: Some(child),
            label: label.to_string(),
        })
    }

    /// Start `args` inside network namespace `ns` (`ip netns exec`, which execs in place, so
    /// the id is the command's own), stdin closed, stdout and stderr as given.
    pub fn start_in(
        ns: &str,
        args: &[&str],
        label: &str,
        stdout: Stdio,
        stderr: Stdio,
    ) -> Result<Self> {
        if args.is_empty() {
            bail!("{label}: no command to start");
        }
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns])
            .args(args)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr);
        Self::start(cmd, label).with_context(|| format!("in namespace {ns}"))
    }

    /// The process id (= its process group id).
    pub fn id(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    /// True while the process has not exited.
    pub fn running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// Wait up to `limit` for the process to end (stdout and stderr must have been piped);
    /// stop it after that, or at once when the run is interrupted. Returns its stdout. A
    /// process that had to be stopped and printed nothing is an error naming it; an
    /// interrupted run is an error too.
    pub fn finish(mut self, limit: Duration) -> Result<String> {
        let mut child = self.child.take().context("process already finished")?;
        // Read output on threads so a full pipe never blocks the child.
        let so = child.stdout.take();
        let se = child.stderr.take();
        let reader = |p: Option<Box<dyn std::io::Read + Send>>| {
            std::thread::spawn(move || {
                let mut s = String::new();
                if let Some(mut p) = p {
                    let _ = p.read_to_string(&mut s);
                }
                s
            })
        };
        let t_out = reader(so.map(|p| Box::new(p) as Box<dyn std::io::Read + Send>));
        let t_err = reader(se.map(|p| Box::new(p) as Box<dyn std::io::Read + Send>));
        let until = Instant::now() + limit;
        let mut stopped = false;
        loop {
            if child.try_wait()?.is_some() {
                // The leader is gone; anything it forked goes with its group.
                signal_group(child.id(), libc::SIGKILL);
                break;
            }
            if crate::interrupted() || Instant::now() >= until {
                stopped = true;
                stop_child(&mut child, Duration::from_millis(100));
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = t_out.join().unwrap_or_default();
        let err = t_err.join().unwrap_or_default();
        crate::check_interrupted()?;
        if stopped && out.trim().is_empty() {
            bail!(
                "{} did not finish within {:?}: {}",
                self.label,
                limit,
                err.trim()
            );
        }
        Ok(out)
    }

    /// SIGTERM to the group, up to `grace` for the leader to exit, then SIGKILL to the group;
    /// reaped.
    pub fn stop(mut self, grace: Duration) {
        if let Some(mut c) = self.child.take() {
            stop_child(&mut c, grace);
        }
    }
}

fn stop_child(child: &mut Child, grace: Duration) {
    let id = child.id();
    if let Ok(None) = child.try_wait() {
        // Group first (the child leads it), the pid too in case it left the group.
        signal_group(id, libc::SIGTERM);
        signal_pid(id, libc::SIGTERM);
        let until = Instant::now() + grace;
        while Instant::now() < until {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    // Whatever the leader forked and left behind in its group.
    signal_group(id, libc::SIGKILL);
    let _ = child.kill();
    let _ = child.wait();
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            stop_child(&mut c, DEFAULT_GRACE);
        }
    }
}

/// Ids of live processes whose command line contains `needle` (for leak checks in tests:
/// pass a run's unique tag or temp folder). Reads `/proc`; at most 100 000 entries.
pub fn processes_with(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten().take(100_000) {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let text =
            String::from_utf8_lossy(&cmdline[..cmdline.len().min(64 * 1024)]).replace('\0', " ");
        if text.contains(needle) {
            out.push(pid);
        }
    }
    out
}

/// Ids of the live processes whose parent is `pid` (at most 100 000 `/proc` entries read).
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten().take(100_000) {
        let Some(q) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: the command name may hold spaces, so split after ')'.
        let ppid = stat
            .rsplit_once(") ")
            .and_then(|(_, r)| r.split_whitespace().nth(1))
            .and_then(|x| x.parse::<u32>().ok());
        if ppid == Some(pid) {
            out.push(q);
        }
    }
    out
}

/// The `ip netns` names of the network namespaces that any thread of `pid`, or of its direct
/// children, is in (a run's load threads `setns` into its namespaces; its servers run there).
/// For tests that must find what a run in another process created.
pub fn netns_of_tree(pid: u32) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let named: Vec<(u64, String)> = std::fs::read_dir("/run/netns")
        .map(|d| {
            d.flatten()
                .take(100_000)
                .filter_map(|e| {
                    let ino = std::fs::metadata(e.path()).ok()?.ino();
                    Some((ino, e.file_name().to_string_lossy().into_owned()))
                })
                .collect()
        })
        .unwrap_or_default();
    let mut out = Vec::new();
    let mut pids = vec![pid];
    pids.extend(children_of(pid));
    for p in pids {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten().take(10_000) {
            let Ok(link) = std::fs::read_link(t.path().join("ns/net")) else {
                continue;
            };
            // "net:[4026532301]"
            let ino = link
                .to_string_lossy()
                .trim_start_matches("net:[")
                .trim_end_matches(']')
                .parse::<u64>();
            if let Ok(ino) = ino {
                for (i, name) in &named {
                    if *i == ino && !out.contains(name) {
                        out.push(name.clone());
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropping_a_process_kills_its_whole_group() {
        // A shell that forks a grandchild and waits: both carry a unique marker.
        let marker = format!("netsched-proc-test-{}", std::process::id());
        let mut cmd = Command::new("sh");
        cmd.args(["-c", &format!("sleep 30 & exec sleep 31 # {marker}")]);
        cmd.stdin(Stdio::null());
        let p = Process::start(cmd, "sleeper").unwrap();
        let pid = p.id();
        assert!(pid > 1);
        std::thread::sleep(Duration::from_millis(200));
        // The background `sleep 30` left the shell's command line behind: find it via its group.
        let pgid_of = |pid: u32| -> Option<u32> {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let rest = stat.rsplit_once(") ")?.1;
            rest.split_whitespace().nth(2)?.parse().ok()
        };
        let members: Vec<u32> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&q| pgid_of(q) == Some(pid))
            .collect();
        assert!(members.len() >= 2, "group {pid}: {members:?}");
        drop(p);
        let until = Instant::now() + Duration::from_secs(5);
        let alive = |q: u32| {
            std::fs::read_to_string(format!("/proc/{q}/stat"))
                .map(|s| !s.contains(") Z "))
                .unwrap_or(false)
        };
        while members.iter().any(|&q| alive(q)) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            !members.iter().any(|&q| alive(q)),
            "left alive: {members:?}"
        );
    }

    #[test]
    fn finish_returns_output_and_names_a_process_that_hangs() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo hello"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let out = Process::start(cmd, "echo")
            .unwrap()
            .finish(Duration::from_secs(10))
            .unwrap();
        assert_eq!(out.trim(), "hello");
        let mut cmd = Command::new("sleep");
        cmd.arg("30")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let t0 = Instant::now();
        let e = Process::start(cmd, "the sleeper")
            .unwrap()
            .finish(Duration::from_millis(200))
            .unwrap_err()
            .to_string();
        assert!(e.contains("the sleeper"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(5));
        assert!(Process::start(Command::new("/no/such/binary"), "nothing").is_err());
    }
}

//! # netsched-testbed — namespaces that clean up after themselves
//!
//! A [`Testbed`] creates network namespaces and veth pairs with names unique to this process
//! (so parallel runs never collide), runs commands inside them, and starts processes whose ids
//! it keeps. Dropping it (normal end, error, or panic unwinding) kills exactly the processes it
//! started, by id, and deletes its namespaces — which removes their veths, qdiscs and iptables
//! rules with them. Traffic stays inside these namespaces.
//!
//! The crate also owns what every real run needs around its namespaces: entering one from a
//! thread and pinning to a CPU ([`sys`]), a function run inside a namespace from outside it
//! ([`netns_call`]), a loop on its own thread inside a namespace with a stop flag
//! ([`netns_thread`]), Ctrl-C/SIGTERM handling ([`signal`]), child
//! processes stopped with their whole process group ([`process`]), private temporary
//! folders ([`tempdir`]), a small tmpfs for a disk that fills ([`tmpfs`]), what a
//! daemon's `--check` asks of the host ([`check`]), Debian's headless Chromium for the status
//! pages' tests ([`chromium`]) and the procedure those tests share: wait until still, load,
//! compare with `/metrics` ([`status_page`]). Data planes
//! and experiments call these; none keeps a copy. The system calls themselves are
//! `netsched_sys`'s; this crate has no `unsafe`.

#![forbid(unsafe_code)]

pub mod check;
pub mod chromium;
pub mod frames;
pub mod netns_call;
pub mod netns_thread;
pub mod process;
pub mod signal;
pub mod status_page;
pub mod sys;
pub mod tempdir;
pub mod tmpfs;

pub use netns_call::{in_netns, netns_entry};
pub use netns_thread::NetnsThread;
pub use process::{children_of, netns_of_tree, processes_with, Process};
pub use signal::{check_interrupted, interrupted, sleep_unless_interrupted, SignalGuard};
pub use sys::{allowed_cpus, enter_netns, euid, is_root, nobody, peer_cred, pin_to_cpu, PeerCred};
pub use tempdir::TempDir;
pub use tmpfs::Tmpfs;

use anyhow::{anyhow, bail, Context, Result};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

static COUNTER: AtomicU32 = AtomicU32::new(0);
/// The tags of the testbeds this process made (at most [`MAX_TAGS_KEPT`], the latest kept), so
/// a leak check can look at its own namespaces only while other processes run their own.
static TAGS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
const MAX_TAGS_KEPT: usize = 4096;

/// Namespaces of every testbed this process made that still exist (a leak check that does
/// not see other processes' runs; call it when no testbed of this process should be alive —
/// tests that run at the same time in one process see each other's).
pub fn namespaces_left_by_this_process() -> Vec<String> {
    let tags = TAGS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let list = run("ip", &["netns", "list"]).unwrap_or_default();
    list.lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| tags.iter().any(|t| n.starts_with(&format!("ns{t}-"))))
        .map(str::to_string)
        .collect()
}

/// The variable that selects the quick tier: `NETSCHED_TEST_TIER=quick` (`scripts/test
/// --quick`).
pub const TIER_VAR: &str = "NETSCHED_TEST_TIER";

/// True in the quick tier: the edit-test loop (`scripts/test --quick`), which runs no
/// privileged test, makes no namespace and starts no long real run. CI runs the full tier.
pub fn quick_tier() -> bool {
    std::env::var(TIER_VAR).is_ok_and(|v| v == "quick")
}

/// For tests the quick tier leaves out (long real runs that need no root, e.g. a local
/// cluster of daemons): `true` if the test may run; in the quick tier it prints why it skips.
pub fn full_tier_test_allowed(test: &str) -> bool {
    if quick_tier() {
        eprintln!("SKIP {test}: not in the quick tier ({TIER_VAR}=quick); scripts/test runs it");
        return false;
    }
    true
}

/// For privileged tests: `true` if the test may run. Without root it prints why it skips —
/// unless `CI=true`, where a privileged test must run, so it panics instead. The quick tier
/// ([`quick_tier`]) skips every privileged test, root or not.
pub fn privileged_test_allowed(test: &str) -> bool {
    if !full_tier_test_allowed(test) {
        return false;
    }
    if is_root() {
        return true;
    }
    if std::env::var("CI").map(|v| v == "true").unwrap_or(false) {
        panic!("{test}: needs root, and CI=true requires privileged tests to run");
    }
    eprintln!("SKIP {test}: needs root (namespaces, tc, iptables); run as root to include it");
    false
}

/// For privileged tests of the `xdp` port backend: [`privileged_test_allowed`], and a build
/// with the XDP program and a kernel that takes it; otherwise it prints why it skips.
pub fn xdp_test_allowed(test: &str) -> bool {
    if !privileged_test_allowed(test) {
        return false;
    }
    if let Some(why) = netsched_sys::xdp_port::unavailable() {
        eprintln!("SKIP {test}: {why}");
        return false;
    }
    true
}

/// Run a command to completion; `Err` carries the command line and its stderr.
pub fn run(cmd: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(cmd)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot start `{cmd}` (is it installed?)"))?;
    if !out.status.success() {
        bail!(
            "`{} {}` failed ({}): {}",
            cmd,
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A set of namespaces and processes owned by this run.
pub struct Testbed {
    tag: String,
    namespaces: Vec<String>,
    children: Vec<Process>,
}

impl Testbed {
    /// A new, empty testbed. `label` is a short word for humans (≤ 6 chars are kept).
    pub fn new(label: &str) -> Result<Self> {
        if !is_root() {
            bail!(
                "building a namespace testbed needs root (run as root, or use the simulated lab)"
            );
        }
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let h = (std::process::id() as u64)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(((n as u64) << 32) ^ nanos as u64);
        let label: String = label
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .take(6)
            .collect();
        let tag = format!("{label}{:05x}", h & 0xf_ffff);
        {
            let mut tags = TAGS.lock().unwrap_or_else(|e| e.into_inner());
            if tags.len() == MAX_TAGS_KEPT {
                tags.remove(0);
            }
            tags.push(tag.clone());
        }
        Ok(Self {
            tag,
            namespaces: Vec::new(),
            children: Vec::new(),
        })
    }

    /// This testbed's unique tag (part of every name it creates).
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// Create namespace `<tag>-<name>` with loopback up; returns its full name.
    pub fn add_ns(&mut self, name: &str) -> Result<String> {
        let full = format!("ns{}-{}", self.tag, name);
        run("ip", &["netns", "add", &full])?;
        self.namespaces.push(full.clone());
        self.exec(&full, "ip", &["link", "set", "lo", "up"])?;
        Ok(full)
    }

    /// An interface name unique to this testbed, at most 15 bytes (IFNAMSIZ - 1).
    pub fn ifname(&self, short: &str) -> String {
        let mut s = format!("{}{}", &self.tag[self.tag.len() - 5..], short);
        s.truncate(15);
        s
    }

    /// A veth pair between two namespaces, both ends up, with the given IPv4 addresses
    /// (`"10.x.y.z/24"`). Segmentation offloads are turned off on both ends, so that qdiscs
    /// and AF_PACKET engines see wire-sized packets.
    pub fn veth(
        &mut self,
        (ns_a, if_a, addr_a): (&str, &str, &str),
        (ns_b, if_b, addr_b): (&str, &str, &str),
    ) -> Result<()> {
        run(
            "ip",
            &[
                "link", "add", if_a, "netns", ns_a, "type", "veth", "peer", "name", if_b, "netns",
                ns_b,
            ],
        )?;
        for (ns, ifn, addr) in [(ns_a, if_a, addr_a), (ns_b, if_b, addr_b)] {
            if !addr.is_empty() {
                self.exec(ns, "ip", &["addr", "add", addr, "dev", ifn])?;
            }
            self.exec(ns, "ip", &["link", "set", ifn, "up"])?;
            // Offloads off: TSO/GSO/GRO would hand qdiscs 64 KB super-packets.
            let _ = self.exec(
                ns,
                "ethtool",
                &[
                    "-K", ifn, "tso", "off", "gso", "off", "gro", "off", "tx", "off", "rx", "off",
                ],
            );
        }
        Ok(())
    }

    /// Run a command inside namespace `ns` to completion.
    pub fn exec(&self, ns: &str, cmd: &str, args: &[&str]) -> Result<String> {
        let mut full = vec!["netns", "exec", ns, cmd];
        full.extend_from_slice(args);
        run("ip", &full)
    }

    /// Set a sysctl inside `ns` (e.g. `net.ipv4.ip_forward=1`).
    pub fn sysctl(&self, ns: &str, kv: &str) -> Result<()> {
        self.exec(ns, "sysctl", &["-q", "-w", kv]).map(|_| ())
    }

    /// Start a process inside `ns`; the testbed kills it (by id) when dropped. Returns its id.
    pub fn spawn(&mut self, ns: &str, cmd: &str, args: &[&str], label: &str) -> Result<u32> {
        self.spawn_with(ns, cmd, args, label, Stdio::null(), Stdio::null())
    }

    /// Like [`Testbed::spawn`], with the given stdout/stderr. The process leads its own
    /// process group; stopping it stops whatever it forked.
    pub fn spawn_with(
        &mut self,
        ns: &str,
        cmd: &str,
        args: &[&str],
        label: &str,
        stdout: Stdio,
        stderr: Stdio,
    ) -> Result<u32> {
        let mut argv = vec![cmd];
        argv.extend_from_slice(args);
        let p = Process::start_in(ns, &argv, label, stdout, stderr)?;
        let id = p.id();
        self.children.push(p);
        Ok(id)
    }

    /// Take ownership of a process started elsewhere, so it is stopped with the testbed.
    pub fn adopt(&mut self, p: Process) {
        self.children.push(p);
    }

    /// Stop one process this testbed started: SIGTERM to its group, wait up to `grace`, then
    /// SIGKILL to the group.
    pub fn stop(&mut self, pid: u32, grace: std::time::Duration) -> Result<()> {
        let idx = self
            .children
            .iter()
            .position(|c| c.id() == pid)
            .ok_or_else(|| anyhow!("process {pid} was not started by this testbed"))?;
        self.children.remove(idx).stop(grace);
        Ok(())
    }

    /// The namespaces created so far.
    pub fn namespaces(&self) -> &[String] {
        &self.namespaces
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        while let Some(p) = self.children.pop() {
            p.stop(process::DEFAULT_GRACE);
        }
        for ns in self.namespaces.iter().rev() {
            if let Err(e) = run("ip", &["netns", "del", ns]) {
                eprintln!("testbed cleanup: {e}");
            }
        }
    }
}

/// Names of namespaces that currently exist whose name contains `tag` (for leak checks).
pub fn namespaces_with(tag: &str) -> Vec<String> {
    run("ip", &["netns", "list"])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.contains(tag))
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn testbed_creates_and_removes_namespaces() {
        if !privileged_test_allowed("testbed_creates_and_removes_namespaces") {
            return;
        }
        let tag;
        {
            let mut tb = Testbed::new("tbt").unwrap();
            tag = tb.tag().to_string();
            let a = tb.add_ns("a").unwrap();
            let b = tb.add_ns("b").unwrap();
            let (ia, ib) = (tb.ifname("a"), tb.ifname("b"));
            tb.veth((&a, &ia, "10.231.0.1/24"), (&b, &ib, "10.231.0.2/24"))
                .unwrap();
            tb.exec(&a, "ping", &["-c", "1", "-W", "2", "10.231.0.2"])
                .unwrap();
            let pid = tb.spawn(&a, "sleep", &["30"], "sleeper").unwrap();
            assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
            // The sleeper is our child, in namespace a: the leak checks can find it.
            assert!(children_of(std::process::id()).contains(&pid));
            // `spawn` runs `ip netns exec`: the child enters the namespace a moment after the
            // fork, so a loaded machine can show it still outside. Wait for it (bounded).
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while !netns_of_tree(std::process::id()).contains(&a) {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the sleeper never showed up in namespace {a}"
                );
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            assert_eq!(namespaces_with(&tag).len(), 2);
        }
        assert!(namespaces_with(&tag).is_empty(), "namespaces leaked");
    }
}

//! What netsched shape installed, remembered between runs in
//! `/run/netsched/shape/net<COOKIE>-<DEV>.json`.
//!
//! The file is keyed by the network namespace's cookie (`SO_NETNS_COOKIE`, never reused while
//! the system runs), not its inode number (reused as soon as the namespace is gone): a record
//! left by a namespace that no longer exists can never be taken for one of a new namespace.
//! It also holds the device's ifindex and the exact configuration apply left (per part, as
//! [`Part`]); only a part still equal to that record is treated as ours.
//!
//! Records of namespaces that no longer exist are removed whenever a record is read or written
//! ([`prune_dead`]): a record whose namespace inode no process, thread or `ip netns` mount
//! holds belongs to a dead namespace. Only files of our own name pattern are ever removed.

use super::error::StateError;
use super::snapshot::Part;
use super::tc::Target;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// Where the records live (`/run` is shared between network namespaces).
pub const STATE_DIR: &str = "/run/netsched/shape";
/// Most bytes of one record read.
const MAX_RECORD: u64 = 4 << 20;
/// Most entries of [`STATE_DIR`] examined by one prune.
const MAX_ENTRIES: usize = 4096;

/// The IFB device of download shaping.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IfbRecord {
    pub dev: String,
    pub ifindex: u32,
    /// `apply` created it (so `clear` deletes it).
    pub created: bool,
    /// It was up before `apply` (so a restore brings it down again if it was not).
    pub was_up: bool,
}

/// One record: what `apply` installed on a device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Installed {
    pub netns_cookie: u64,
    pub netns_inode: u64,
    pub dev: String,
    pub ifindex: u32,
    /// The `tc -batch` lines that built it (re-run to restore it).
    pub lines: Vec<String>,
    /// The device's egress part right after apply.
    pub dev_egress: Part,
    /// The device's ingress part, when apply installed the redirect to an IFB.
    pub dev_ingress: Option<Part>,
    pub ifb: Option<IfbRecord>,
    pub ifb_egress: Option<Part>,
    /// A configuration that `--replace` discarded (clear cannot bring it back).
    pub replaced: Option<String>,
}

fn path_for(cookie: u64, dev: &str) -> PathBuf {
    Path::new(STATE_DIR).join(format!("net{cookie}-{dev}.json"))
}

fn is_ours(name: &str) -> bool {
    name.starts_with("net") && name.ends_with(".json") && name[3..].contains('-')
}

fn read_record(p: &Path) -> Result<Option<Installed>, StateError> {
    use std::io::Read;
    let read = |source| StateError::Read {
        path: p.to_path_buf(),
        source,
    };
    let f = match std::fs::File::open(p) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(read(e)),
    };
    let mut text = String::new();
    f.take(MAX_RECORD + 1)
        .read_to_string(&mut text)
        .map_err(read)?;
    if text.len() as u64 > MAX_RECORD {
        return Err(StateError::TooLarge {
            path: p.to_path_buf(),
            max: MAX_RECORD,
        });
    }
    let r = serde_json::from_str(&text).map_err(|source| StateError::Parse {
        path: p.to_path_buf(),
        source,
    })?;
    Ok(Some(r))
}

/// The record for `t.dev` in `t`'s namespace, if it is still that device (same ifindex).
/// A record for an interface that was deleted and re-created under the same name is removed.
pub fn load(t: &Target, cookie: u64, ifindex: u32) -> Result<Option<Installed>, StateError> {
    prune_dead();
    let p = path_for(cookie, &t.dev);
    match read_record(&p)? {
        Some(r) if r.netns_cookie == cookie && r.ifindex == ifindex => Ok(Some(r)),
        Some(_) => {
            let _ = std::fs::remove_file(&p);
            Ok(None)
        }
        None => Ok(None),
    }
}

/// Write the record (atomically: a temporary file renamed over the old one).
pub fn store(r: &Installed) -> Result<(), StateError> {
    let write = |doing: String| move |source| StateError::Write { doing, source };
    prune_dead();
    std::fs::create_dir_all(STATE_DIR).map_err(write(format!("creating {STATE_DIR}")))?;
    let p = path_for(r.netns_cookie, &r.dev);
    let tmp = p.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, serde_json::to_vec(r).map_err(StateError::Encode)?)
        .map_err(write(format!("writing {}", tmp.display())))?;
    std::fs::rename(&tmp, &p).map_err(write(format!("renaming to {}", p.display())))?;
    Ok(())
}

/// Remove the record of `dev` in namespace `cookie`.
pub fn remove(cookie: u64, dev: &str) {
    let _ = std::fs::remove_file(path_for(cookie, dev));
}

/// nsfs inode numbers of every network namespace something still holds: a process's or
/// thread's namespace, or an `ip netns` bind mount.
fn live_netns_inodes() -> HashSet<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut live = HashSet::new();
    for dir in ["/run/netns", "/var/run/netns"] {
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten().take(MAX_ENTRIES) {
                if let Ok(m) = std::fs::metadata(e.path()) {
                    live.insert(m.ino());
                }
            }
        }
    }
    if let Ok(procs) = std::fs::read_dir("/proc") {
        for p in procs.flatten() {
            if !p
                .file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
            {
                continue;
            }
            let Ok(tasks) = std::fs::read_dir(p.path().join("task")) else {
                continue;
            };
            for task in tasks.flatten() {
                if let Ok(m) = std::fs::metadata(task.path().join("ns/net")) {
                    live.insert(m.ino());
                }
            }
        }
    }
    live
}

/// A record of the previous format (`net<INODE>-<DEV>.json` holding `{"lines", "ifb",
/// "ifb_created"}`, keyed by the namespace's inode number): its inode, so it is pruned too.
fn legacy_inode(p: &Path) -> Option<u64> {
    let name = p.file_name()?.to_str()?;
    let digits = name.strip_prefix("net")?.split('-').next()?;
    let inode: u64 = digits.parse().ok()?;
    let text = std::fs::read_to_string(p).ok()?;
    if text.len() as u64 > MAX_RECORD {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    (v.get("lines").is_some() && v.get("ifb_created").is_some() && v.get("netns_cookie").is_none())
        .then_some(inode)
}

/// Remove records whose namespace no longer exists. Returns how many were removed.
pub fn prune_dead() -> usize {
    let Ok(rd) = std::fs::read_dir(STATE_DIR) else {
        return 0;
    };
    let candidates: Vec<(PathBuf, u64)> = rd
        .flatten()
        .take(MAX_ENTRIES)
        .filter(|e| is_ours(&e.file_name().to_string_lossy()))
        .filter_map(|e| {
            let inode = match read_record(&e.path()) {
                Ok(Some(r)) => r.netns_inode,
                _ => legacy_inode(&e.path())?,
            };
            Some((e.path(), inode))
        })
        .collect();
    if candidates.is_empty() {
        return 0;
    }
    let live = live_netns_inodes();
    let mut n = 0;
    for (p, ino) in candidates {
        if !live.contains(&ino) && std::fs::remove_file(&p).is_ok() {
            n += 1;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_names() {
        assert!(is_ours("net4096-eth0.json"));
        assert!(!is_ours("4026532-eth0.json"));
        assert!(!is_ours("net4096-eth0.json.tmp12"));
        assert_eq!(
            path_for(7, "eth1"),
            Path::new("/run/netsched/shape/net7-eth1.json")
        );
    }

    #[test]
    fn records_of_the_previous_format_are_recognised_by_their_inode() {
        let dir = netsched_testbed::TempDir::new("shape-state").unwrap();
        let old = dir
            .create_file(
                "net4026532123-eth1.json",
                br#"{"lines":["qdisc add dev eth1 root handle 1: htb"],"ifb":null,"ifb_created":false}"#,
            )
            .unwrap();
        assert_eq!(legacy_inode(&old), Some(4026532123));
        let other = dir
            .create_file("net4026532124-eth1.json", br#"{"something":"else"}"#)
            .unwrap();
        assert_eq!(legacy_inode(&other), None, "not ours: never pruned");
    }

    #[test]
    fn our_own_namespace_is_live() {
        use std::os::unix::fs::MetadataExt;
        let me = std::fs::metadata("/proc/self/ns/net").unwrap().ino();
        assert!(live_netns_inodes().contains(&me));
    }
}

//! Who may use a daemon's local control socket. One rule for every daemon (`netsched nfq`,
//! `netsched balance`, `netsched vswitch`): the peer (its `SO_PEERCRED`, see
//! [`netsched_sys::socket::peer_cred`]) is root, the daemon's own user, or a member — primary
//! or supplementary — of the one configured control group. The socket file itself is mode
//! 0660 with that group ([`crate::socket_file`]); this check is the second gate, per
//! connection ([`crate::server`] applies it before reading a byte).
//!
//! Cost: one `getsockopt` per connection; `/proc/<pid>/status` (at most
//! [`MAX_STATUS_FILE`] bytes) only when a group is configured and the cheaper tests fail;
//! `/etc/group` (at most [`MAX_GROUP_FILE`]) once, when the daemon starts.

use netsched_sys::process::euid;
use netsched_sys::socket::{peer_cred, PeerCred};
use std::io::Read;
use std::os::fd::AsRawFd;

/// At most this many bytes of `/etc/group` are read (a group file is a few KiB).
pub const MAX_GROUP_FILE: u64 = 1 << 20;
/// At most this many bytes of `/proc/<pid>/status` are read (it is a few KiB).
pub const MAX_STATUS_FILE: u64 = 64 * 1024;

/// The access rule itself, pure: is `cred` root, `own_uid`, or in `group`? `peer_groups`
/// gives the peer's supplementary groups and is asked only when the cheaper tests fail.
pub fn peer_allowed(
    cred: &PeerCred,
    own_uid: u32,
    group: Option<u32>,
    peer_groups: impl FnOnce(i32) -> Vec<u32>,
) -> bool {
    if cred.uid == 0 || cred.uid == own_uid {
        return true;
    }
    match group {
        Some(g) => cred.gid == g || peer_groups(cred.pid).contains(&g),
        None => false,
    }
}

/// Why a control-socket peer was turned away.
#[derive(Debug)]
pub enum AccessError {
    /// The kernel would not tell who the peer is.
    PeerCred(std::io::Error),
    /// The peer is neither root, nor our user, nor in the control group (`group`).
    Denied { uid: u32, group: Option<u32> },
}

impl std::fmt::Display for AccessError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AccessError::PeerCred(e) => write!(f, "SO_PEERCRED: {e}"),
            AccessError::Denied { uid, group } => write!(
                f,
                "uid {uid} is neither root nor in the control group{}",
                if group.is_none() {
                    " (none configured)"
                } else {
                    ""
                }
            ),
        }
    }
}

impl std::error::Error for AccessError {}

/// Apply the rule to the peer of a connected Unix `socket`: its credentials when allowed.
pub fn check_peer(socket: &impl AsRawFd, group: Option<u32>) -> Result<PeerCred, AccessError> {
    let cred = peer_cred(socket).map_err(AccessError::PeerCred)?;
    if peer_allowed(&cred, euid(), group, supplementary_groups) {
        Ok(cred)
    } else {
        Err(AccessError::Denied {
            uid: cred.uid,
            group,
        })
    }
}

/// The supplementary groups of process `pid` (the `Groups:` line of `/proc/<pid>/status`);
/// empty when the process is gone or the line is missing.
pub fn supplementary_groups(pid: i32) -> Vec<u32> {
    let Ok(f) = std::fs::File::open(format!("/proc/{pid}/status")) else {
        return Vec::new();
    };
    let mut text = String::new();
    let _ = f.take(MAX_STATUS_FILE).read_to_string(&mut text);
    parse_groups_line(&text)
}

fn parse_groups_line(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| {
            g.split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Why a configured control group could not be resolved.
#[derive(Debug)]
pub enum GroupError {
    /// `/etc/group` could not be read.
    Read(std::io::Error),
    /// `/etc/group` is larger than [`MAX_GROUP_FILE`].
    TooLarge,
    /// No line of `/etc/group` names this group.
    NoSuchGroup(String),
}

impl std::fmt::Display for GroupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GroupError::Read(e) => write!(f, "reading /etc/group: {e}"),
            GroupError::TooLarge => {
                write!(f, "reading /etc/group: larger than {MAX_GROUP_FILE} bytes")
            }
            GroupError::NoSuchGroup(name) => {
                write!(f, "control_group {name:?}: no such group in /etc/group")
            }
        }
    }
}

impl std::error::Error for GroupError {}

/// The gid of the control group `name`: a number is taken as a gid, a name is looked up in
/// `/etc/group` (read up to [`MAX_GROUP_FILE`]).
pub fn group_gid(name: &str) -> Result<u32, GroupError> {
    if let Ok(g) = name.parse::<u32>() {
        return Ok(g);
    }
    let f = std::fs::File::open("/etc/group").map_err(GroupError::Read)?;
    let mut text = String::new();
    f.take(MAX_GROUP_FILE + 1)
        .read_to_string(&mut text)
        .map_err(GroupError::Read)?;
    if text.len() as u64 > MAX_GROUP_FILE {
        return Err(GroupError::TooLarge);
    }
    gid_in_group_file(&text, name).ok_or_else(|| GroupError::NoSuchGroup(name.to_string()))
}

/// The gid of group `name` in the text of a group(5) file (`name:password:gid:members`).
fn gid_in_group_file(text: &str, name: &str) -> Option<u32> {
    text.lines().find_map(|l| {
        let mut it = l.split(':');
        if it.next() != Some(name) {
            return None;
        }
        it.nth(1).and_then(|g| g.parse().ok())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: u32 = 1000;

    fn cred(uid: u32, gid: u32) -> PeerCred {
        PeerCred { pid: 42, uid, gid }
    }

    fn no_groups(_: i32) -> Vec<u32> {
        Vec::new()
    }

    #[test]
    fn root_and_our_own_user_are_always_allowed() {
        assert!(peer_allowed(&cred(0, 5), ME, None, no_groups));
        assert!(peer_allowed(&cred(ME, 5), ME, None, no_groups));
        assert!(peer_allowed(&cred(ME, 5), ME, Some(7), no_groups));
    }

    #[test]
    fn a_stranger_is_refused_without_a_group() {
        let asked = std::cell::Cell::new(false);
        let groups = |_| {
            asked.set(true);
            vec![7]
        };
        assert!(!peer_allowed(&cred(2000, 7), ME, None, groups));
        assert!(
            !asked.get(),
            "no group configured: the peer's groups are not read"
        );
    }

    #[test]
    fn the_control_group_is_allowed_as_primary_or_supplementary_group() {
        assert!(peer_allowed(&cred(2000, 7), ME, Some(7), no_groups));
        assert!(peer_allowed(&cred(2000, 5), ME, Some(7), |pid| {
            assert_eq!(pid, 42);
            vec![3, 7]
        }));
        assert!(!peer_allowed(&cred(2000, 5), ME, Some(7), |_| vec![3, 8]));
    }

    #[test]
    fn denial_messages_name_the_uid_and_say_when_no_group_is_configured() {
        let none = AccessError::Denied {
            uid: 2000,
            group: None,
        }
        .to_string();
        assert_eq!(
            none,
            "uid 2000 is neither root nor in the control group (none configured)"
        );
        let some = AccessError::Denied {
            uid: 2000,
            group: Some(7),
        }
        .to_string();
        assert_eq!(some, "uid 2000 is neither root nor in the control group");
    }

    #[test]
    fn our_own_socket_pair_passes_the_check() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let c = check_peer(&a, None).unwrap();
        assert_eq!(c.pid as u32, std::process::id());
    }

    #[test]
    fn groups_are_found_by_name_or_number() {
        let file = "root:x:0:\nwheel:x:10:alice,bob\nbroken:x\nnetsched:x:1234:\n";
        assert_eq!(gid_in_group_file(file, "wheel"), Some(10));
        assert_eq!(gid_in_group_file(file, "netsched"), Some(1234));
        assert_eq!(gid_in_group_file(file, "broken"), None);
        assert_eq!(gid_in_group_file(file, "whee"), None);
        assert_eq!(group_gid("4321").unwrap(), 4321);
        let e = group_gid("no-such-group-netsched").unwrap_err().to_string();
        assert!(e.contains("\"no-such-group-netsched\""), "{e}");
    }

    #[test]
    fn the_groups_line_of_a_status_file_is_parsed() {
        let status = "Name:\tx\nUid:\t1\t1\t1\t1\nGroups:\t4 24 27 \nNgid:\t0\n";
        assert_eq!(parse_groups_line(status), vec![4, 24, 27]);
        assert_eq!(parse_groups_line("Groups:\n"), Vec::<u32>::new());
        assert_eq!(parse_groups_line("Name: x\n"), Vec::<u32>::new());
        assert!(supplementary_groups(-1).is_empty());
    }
}

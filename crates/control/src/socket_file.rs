//! The control socket's file: bound under a temporary name beside the path, given its mode
//! (0660) and group, then renamed over the path (rename(2) replaces atomically), so the path
//! never shows a socket with the wrong mode and a client never finds it missing; removed on
//! drop only while it is still the file this process made (same device and inode).
//!
//! Two ways to meet a socket already at the path ([`BindMode`]): `netsched nfq` and
//! `netsched vswitch` refuse a live one and replace a stale one (what a killed daemon leaves);
//! `netsched balance` takes a live one over (its hitless restart: the old balancer keeps its
//! listener, unreachable by name, and on exit leaves the path alone because the inode is no
//! longer its own). A path that is not a socket is never touched in either mode.
//!
//! A file deleted while its daemon runs (by hand, or by a cleaner of `/run`) is made again
//! ([`SocketFile::bind_again_if_gone`], looked at once a second by the accept thread in
//! [`BindMode::Exclusive`]), so `ctl` finds the daemon again.
//!
//! Cost: a handful of system calls when a daemon starts and stops; one `lstat` a second.

use crate::access::{group_gid, GroupError};
use std::fmt;
use std::io::ErrorKind;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

/// What to do with a live socket (one that accepts a connection) already at the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindMode {
    /// Refuse it: another daemon is running there. A stale socket is replaced.
    Exclusive,
    /// Take the path over (the running daemon keeps its listener until it stops).
    TakeOver,
}

/// Why the control socket could not be made.
#[derive(Debug)]
pub enum BindError {
    /// Something that is not a socket is at the path (`kind`: "a regular file", …).
    NotASocket { path: PathBuf, kind: &'static str },
    /// A live socket is at the path and the mode is [`BindMode::Exclusive`].
    InUse { path: PathBuf, daemon: &'static str },
    /// The path could not be inspected, or whether its socket is stale could not be told.
    Inspect {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A system call on the socket file failed (`what`: "bind", "chmod 0660", …).
    Io {
        path: PathBuf,
        what: String,
        source: std::io::Error,
    },
    /// The control group could not be resolved.
    Group(GroupError),
}

impl fmt::Display for BindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BindError::NotASocket { path, kind } => write!(
                f,
                "control socket {}: is {kind}, not a socket; refusing to remove it (choose \
                 another path, or remove it yourself)",
                path.display()
            ),
            BindError::InUse { path, daemon } => write!(
                f,
                "control socket {} is in use: is another {daemon} running?",
                path.display()
            ),
            BindError::Inspect { path, source } => write!(
                f,
                "control socket {}: cannot tell whether it is stale ({source}); left alone",
                path.display()
            ),
            BindError::Io { path, what, source } => {
                write!(f, "control socket {}: {what}: {source}", path.display())
            }
            BindError::Group(e) => write!(f, "control group: {e}"),
        }
    }
}

impl std::error::Error for BindError {}

/// What kind of file `meta` is, in words, when it is not a socket.
fn not_a_socket(meta: &std::fs::Metadata) -> Option<&'static str> {
    let ft = meta.file_type();
    if ft.is_socket() {
        None
    } else if ft.is_symlink() {
        Some("a symbolic link")
    } else if ft.is_dir() {
        Some("a directory")
    } else if ft.is_file() {
        Some("a regular file")
    } else {
        Some("a special file")
    }
}

/// What is at a path where a control socket should go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    Nothing,
    /// A socket nobody listens on.
    Stale,
    /// A socket something accepts connections on.
    Live,
}

/// Look at `path` without changing anything: nothing, a stale socket or a live one. Anything
/// that is not a socket (a symbolic link even to a socket) is an error naming it.
pub fn inspect(path: &Path) -> Result<Found, BindError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Found::Nothing),
        Err(source) => {
            return Err(BindError::Inspect {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    if let Some(kind) = not_a_socket(&meta) {
        return Err(BindError::NotASocket {
            path: path.to_path_buf(),
            kind,
        });
    }
    match UnixStream::connect(path) {
        Ok(_) => Ok(Found::Live),
        Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => Ok(Found::Stale),
        Err(source) => Err(BindError::Inspect {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Remove `path` only if it is a Unix socket nobody listens on (what a killed daemon leaves).
/// `Ok(false)`: nothing there. A live socket is [`BindError::InUse`] (`daemon` names who
/// should be running); anything else is an error naming it, and is left alone.
pub fn remove_stale_socket(path: &Path, daemon: &'static str) -> Result<bool, BindError> {
    match inspect(path)? {
        Found::Nothing => Ok(false),
        Found::Live => Err(BindError::InUse {
            path: path.to_path_buf(),
            daemon,
        }),
        Found::Stale => {
            std::fs::remove_file(path).map_err(|source| BindError::Io {
                path: path.to_path_buf(),
                what: "removing the stale socket".into(),
                source,
            })?;
            Ok(true)
        }
    }
}

/// A bound control socket and the identity of its file.
#[derive(Debug)]
pub struct SocketFile {
    pub listener: UnixListener,
    path: PathBuf,
    ino: (u64, u64),
    /// A live daemon answered at the path and was taken over ([`BindMode::TakeOver`]).
    pub replaced: bool,
    /// The control group's gid, when one is configured.
    pub gid: Option<u32>,
}

impl SocketFile {
    /// Bind `path` (mode 0660, group `group` when given; its folder created if missing).
    /// `daemon` names the daemon in the "in use" error.
    pub fn bind(
        path: &Path,
        group: Option<&str>,
        mode: BindMode,
        daemon: &'static str,
    ) -> Result<Self, BindError> {
        let found = inspect(path)?;
        if found == Found::Live && mode == BindMode::Exclusive {
            return Err(BindError::InUse {
                path: path.to_path_buf(),
                daemon,
            });
        }
        let gid = group.map(group_gid).transpose().map_err(BindError::Group)?;
        let mut made = make(path, gid)?;
        made.replaced = found == Found::Live;
        Ok(made)
    }

    /// The file made again when the path has nothing at all (it was deleted while the daemon
    /// ran, by hand or by a cleaner of `/run`): a new socket with the same mode and group,
    /// which the caller serves instead. `None` while anything is at the path — this file, a
    /// daemon's that took it over, or something else, never touched.
    ///
    /// The folder is not made again: a folder removed is a deliberate clean-up (a test's
    /// temporary folder, a package purged), and the file stays gone with it.
    pub fn bind_again_if_gone(&self) -> Option<Result<SocketFile, BindError>> {
        let folder = self.path.parent().filter(|d| !d.as_os_str().is_empty());
        if folder.is_some_and(|d| !d.is_dir()) {
            return None;
        }
        match std::fs::symlink_metadata(&self.path) {
            Err(e) if e.kind() == ErrorKind::NotFound => Some(make(&self.path, self.gid)),
            _ => None,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Is the file at the path still the one this process made?
    pub fn still_ours(&self) -> bool {
        std::fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.ino)
    }
}

/// Bind a socket under a temporary name beside `path`, give it its mode and group, and rename
/// it over `path` (see the module header).
fn make(path: &Path, gid: Option<u32>) -> Result<SocketFile, BindError> {
    let io = |what: &str, source| BindError::Io {
        path: path.to_path_buf(),
        what: what.to_string(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| io(&format!("creating {}", dir.display()), e))?;
    }
    let mut temp = path.as_os_str().to_owned();
    temp.push(format!(".{}.new", std::process::id()));
    let temp = PathBuf::from(temp);
    // Left over by a process of ours with the same pid that died here: not a live one.
    let _ = std::fs::remove_file(&temp);
    let made = (|| {
        let listener =
            UnixListener::bind(&temp).map_err(|e| io(&format!("bind {}", temp.display()), e))?;
        std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o660))
            .map_err(|e| io("chmod 0660", e))?;
        if let Some(g) = gid {
            std::os::unix::fs::chown(&temp, None, Some(g))
                .map_err(|e| io(&format!("chown to group {g}"), e))?;
        }
        let m = std::fs::symlink_metadata(&temp).map_err(|e| io("stat", e))?;
        std::fs::rename(&temp, path)
            .map_err(|e| io(&format!("rename from {}", temp.display()), e))?;
        Ok::<_, BindError>((listener, m))
    })();
    let (listener, m) = made.inspect_err(|_| {
        let _ = std::fs::remove_file(&temp);
    })?;
    Ok(SocketFile {
        listener,
        path: path.to_path_buf(),
        ino: (m.dev(), m.ino()),
        replaced: false,
        gid,
    })
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        if self.still_ours() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("netsched-control-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn the_file_is_0660_and_removed_on_drop_only_while_ours() {
        let d = scratch("file");
        let p = d.join("ctl.sock");
        let f = SocketFile::bind(&p, None, BindMode::Exclusive, "test daemon").unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o660);
        assert!(!f.replaced);
        let e = SocketFile::bind(&p, None, BindMode::Exclusive, "test daemon").unwrap_err();
        assert!(e.to_string().contains("in use") && e.to_string().contains("test daemon"));
        // Taken over: the first one's drop leaves the new file alone.
        let g = SocketFile::bind(&p, None, BindMode::TakeOver, "test daemon").unwrap();
        assert!(g.replaced);
        drop(f);
        assert!(p.exists(), "the old owner removed its successor's socket");
        drop(g);
        assert!(!p.exists());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn only_a_stale_socket_is_replaced_and_nothing_else_is_touched() {
        let d = scratch("stale");
        let stale = d.join("stale.sock");
        drop(UnixListener::bind(&stale).unwrap());
        assert_eq!(inspect(&stale).unwrap(), Found::Stale);
        let file = d.join("f");
        std::fs::write(&file, "keep").unwrap();
        let link = d.join("link");
        std::os::unix::fs::symlink(&stale, &link).unwrap();
        for (p, kind) in [
            (&file, "regular file"),
            (&d, "directory"),
            (&link, "symbolic link"),
        ] {
            for mode in [BindMode::Exclusive, BindMode::TakeOver] {
                let e = SocketFile::bind(p, None, mode, "x")
                    .unwrap_err()
                    .to_string();
                assert!(e.contains(kind) && e.contains("not a socket"), "{e}");
            }
        }
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep");
        let f = SocketFile::bind(&stale, None, BindMode::Exclusive, "x").unwrap();
        assert!(!f.replaced);
        drop(f);
        assert!(!remove_stale_socket(&stale, "x").unwrap());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn an_unknown_group_is_named() {
        let d = scratch("group");
        let e = SocketFile::bind(
            &d.join("s"),
            Some("no-such-group-netsched"),
            BindMode::Exclusive,
            "x",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("no-such-group-netsched"), "{e}");
        assert!(!d.join("s").exists());
        let _ = std::fs::remove_dir_all(&d);
    }
}

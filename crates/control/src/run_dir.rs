//! Where the control sockets live, and how `ctl` finds one without being told.
//!
//! Every daemon's socket is under [`RUN_DIR`] (`/run/netsched`, the units'
//! `RuntimeDirectory=`): `<daemon>.sock` for a daemon started by hand with no path given,
//! `<daemon>-<instance>.sock` for the packaged units (`netsched-balance@web.service` binds
//! `/run/netsched/balance-web.sock`). The same layout as Debian's haproxy
//! (`/run/haproxy/admin.sock`) or systemd's instance units, so the path follows from the
//! daemon's name and the instance's, and `ctl` needs no flag when one daemon of its kind runs:
//!
//! - `--control-socket PATH` names the socket outright;
//! - `--instance NAME` means `/run/netsched/<daemon>-NAME.sock`;
//! - neither: the one socket of that daemon under [`RUN_DIR`]; none or several is an error
//!   that lists what was found and how to choose.
//!
//! Cost: one `readdir` of [`RUN_DIR`] (at most [`MAX_ENTRIES`] entries read) per `ctl` call
//! without a path; nothing in the daemons.

use std::fmt;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

/// The daemons' run-time folder, as the units create it (`RuntimeDirectory=netsched`).
pub const RUN_DIR: &str = "/run/netsched";
/// Entries of [`RUN_DIR`] read when looking for a socket; more are not looked at.
pub const MAX_ENTRIES: usize = 4096;

/// The socket a daemon binds when no path is given: `/run/netsched/<daemon>.sock`.
pub fn default_socket(daemon: &str) -> PathBuf {
    Path::new(RUN_DIR).join(format!("{daemon}.sock"))
}

/// The socket of the packaged instance `instance`: `/run/netsched/<daemon>-<instance>.sock`.
pub fn instance_socket(daemon: &str, instance: &str) -> PathBuf {
    Path::new(RUN_DIR).join(format!("{daemon}-{instance}.sock"))
}

/// The two flags of every `ctl` that choose the socket (`#[command(flatten)]`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct CtlSocket {
    /// The daemon's control socket [default: the only DAEMON.sock or DAEMON-NAME.sock in
    /// /run/netsched].
    #[arg(
        long = "control-socket",
        alias = "socket",
        global = true,
        value_name = "PATH"
    )]
    pub path: Option<PathBuf>,
    /// The packaged instance to talk to: /run/netsched/DAEMON-NAME.sock, the socket of the
    /// unit netsched-DAEMON@NAME.
    #[arg(long, short = 'i', global = true, value_name = "NAME")]
    pub instance: Option<String>,
}

impl CtlSocket {
    /// The socket to talk to ([`locate`]).
    pub fn locate(&self, daemon: &str) -> Result<PathBuf, LocateError> {
        locate(daemon, self.path.as_deref(), self.instance.as_deref())
    }
}

/// Why no socket could be chosen.
#[derive(Debug)]
pub enum LocateError {
    /// `--instance` is empty or holds a `/`.
    BadInstance(String),
    /// No socket of that daemon under the folder.
    NoneFound { daemon: String, dir: PathBuf },
    /// Several; the operator must choose (instance names, sorted).
    Several {
        daemon: String,
        dir: PathBuf,
        instances: Vec<String>,
    },
}

impl fmt::Display for LocateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LocateError::BadInstance(i) => write!(
                f,
                "--instance {i:?}: an instance is a unit's name after the @ (no / and not empty)"
            ),
            LocateError::NoneFound { daemon, dir } => write!(
                f,
                "no running netsched {daemon} found: no {daemon}.sock or {daemon}-NAME.sock in {} \
                 (start one, or give --control-socket PATH)",
                dir.display()
            ),
            LocateError::Several {
                daemon,
                dir,
                instances,
            } => write!(
                f,
                "{} netsched {daemon} sockets in {}: choose one with --instance NAME ({})",
                instances.len(),
                dir.display(),
                instances.join(", ")
            ),
        }
    }
}

impl std::error::Error for LocateError {}

/// The socket `ctl` talks to: `explicit` if given, else `instance`'s, else the only socket
/// of `daemon` under [`RUN_DIR`].
pub fn locate(
    daemon: &str,
    explicit: Option<&Path>,
    instance: Option<&str>,
) -> Result<PathBuf, LocateError> {
    locate_in(Path::new(RUN_DIR), daemon, explicit, instance)
}

/// [`locate`] with another folder (tests).
pub fn locate_in(
    dir: &Path,
    daemon: &str,
    explicit: Option<&Path>,
    instance: Option<&str>,
) -> Result<PathBuf, LocateError> {
    if let Some(p) = explicit {
        return Ok(p.to_path_buf());
    }
    if let Some(i) = instance {
        if i.is_empty() || i.contains('/') {
            return Err(LocateError::BadInstance(i.to_string()));
        }
        return Ok(dir.join(format!("{daemon}-{i}.sock")));
    }
    let mut found = sockets_of(dir, daemon);
    match found.len() {
        1 => Ok(found.remove(0).1),
        0 => Err(LocateError::NoneFound {
            daemon: daemon.to_string(),
            dir: dir.to_path_buf(),
        }),
        _ => Err(LocateError::Several {
            daemon: daemon.to_string(),
            dir: dir.to_path_buf(),
            instances: found.into_iter().map(|(name, _)| name).collect(),
        }),
    }
}

/// The sockets of `daemon` in `dir`, as (instance name or `(default)`, path), sorted.
fn sockets_of(dir: &Path, daemon: &str) -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(String, PathBuf)> = entries
        .take(MAX_ENTRIES)
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let stem = name.strip_suffix(".sock")?;
            let instance = if stem == daemon {
                "(default)".to_string()
            } else {
                stem.strip_prefix(daemon)?.strip_prefix('-')?.to_string()
            };
            let is_socket = e.file_type().is_ok_and(|t| t.is_socket());
            (is_socket && !instance.is_empty()).then(|| (instance, e.path()))
        })
        .collect();
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    fn dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "netsched-run-dir-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn the_only_socket_of_the_daemon_is_found() {
        let d = dir();
        let _a = UnixListener::bind(d.join("balance-web.sock")).unwrap();
        let _b = UnixListener::bind(d.join("nfq-web.sock")).unwrap();
        // Not sockets, or not this daemon's: never chosen.
        std::fs::write(d.join("balance-file.sock"), b"").unwrap();
        let _c = UnixListener::bind(d.join("balancer-x.sock")).unwrap();
        let got = locate_in(&d, "balance", None, None).unwrap();
        assert_eq!(got, d.join("balance-web.sock"));
        let got = locate_in(&d, "nfq", None, None).unwrap();
        assert_eq!(got, d.join("nfq-web.sock"));
        let e = locate_in(&d, "vswitch", None, None).unwrap_err();
        assert!(matches!(e, LocateError::NoneFound { .. }), "{e}");
        assert!(e.to_string().contains("--control-socket"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn several_sockets_ask_for_an_instance() {
        let d = dir();
        let _a = UnixListener::bind(d.join("balance-web.sock")).unwrap();
        let _b = UnixListener::bind(d.join("balance.sock")).unwrap();
        let e = locate_in(&d, "balance", None, None).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "2 netsched balance sockets in {}: choose one with --instance NAME ((default), web)",
                d.display()
            )
        );
        let got = locate_in(&d, "balance", None, Some("web")).unwrap();
        assert_eq!(got, d.join("balance-web.sock"));
        let explicit = Path::new("/elsewhere/x.sock");
        assert_eq!(
            locate_in(&d, "balance", Some(explicit), Some("web")).unwrap(),
            explicit
        );
        assert!(matches!(
            locate_in(&d, "balance", None, Some("../etc")),
            Err(LocateError::BadInstance(_))
        ));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn default_paths_are_the_units_layout() {
        assert_eq!(default_socket("nfq"), Path::new("/run/netsched/nfq.sock"));
        assert_eq!(
            instance_socket("balance", "web"),
            Path::new("/run/netsched/balance-web.sock")
        );
    }
}

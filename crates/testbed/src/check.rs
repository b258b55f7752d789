//! What every `--check` asks of the host besides a valid configuration, in the manner of
//! `haproxy -c`: the interfaces a daemon opens exist, the addresses it listens on can be
//! bound now, its control socket path can be taken, the group it hands the socket to exists,
//! the programs it runs are installed. Each answer is a message naming the key or flag and
//! the value, so `netsched X --check` prints one line a user can act on.
//!
//! Exit codes of every `--check` (and of every command): 0 valid, 1 invalid (or failed),
//! 2 usage (clap's code for an unknown flag or a missing argument).

use std::fmt;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// What a check found wrong: the key or flag, the value as the user wrote it, and why.
#[derive(Debug)]
pub struct HostCheckError {
    pub key: String,
    /// The value as shown in the message (quoted where it may hold spaces).
    pub value: String,
    pub why: HostFault,
}

/// Why a value does not work on this host.
#[derive(Debug)]
pub enum HostFault {
    /// Not a name the kernel takes for an interface.
    BadInterfaceName,
    /// No such interface in this network namespace.
    NoSuchInterface,
    /// The address cannot be bound now; `low_port`: its port is below 1024.
    Bind {
        source: std::io::Error,
        low_port: bool,
    },
    /// A file that is not a socket is at the control socket path.
    NotASocket,
    /// The control socket's folder does not exist.
    NoDirectory(PathBuf),
    /// The path could not be examined.
    Stat(std::io::Error),
    /// The group does not exist (or `/etc/group` could not be read).
    Group(netsched_control::access::GroupError),
    /// The program is not installed.
    ProgramNotFound,
}

impl fmt::Display for HostCheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} = {}: ", self.key, self.value)?;
        match &self.why {
            HostFault::BadInterfaceName => f.write_str("not a valid interface name"),
            HostFault::NoSuchInterface => {
                f.write_str("no such interface in this network namespace")
            }
            HostFault::Bind {
                source: e,
                low_port,
            } => match e.kind() {
                ErrorKind::AddrInUse => {
                    f.write_str("address already in use (another socket listens there)")
                }
                ErrorKind::PermissionDenied if *low_port => {
                    write!(
                        f,
                        "{e} (a port below 1024 needs root or CAP_NET_BIND_SERVICE)"
                    )
                }
                ErrorKind::AddrNotAvailable => write!(f, "{e} (not an address of this host)"),
                _ => write!(f, "{e}"),
            },
            HostFault::NotASocket => f.write_str("exists and is not a socket"),
            HostFault::NoDirectory(d) => write!(f, "directory {} does not exist", d.display()),
            HostFault::Stat(e) => write!(f, "{e}"),
            HostFault::Group(e) => write!(f, "{e}"),
            HostFault::ProgramNotFound => f.write_str("program not found"),
        }
    }
}

impl std::error::Error for HostCheckError {}

fn fault(key: &str, value: String, why: HostFault) -> HostCheckError {
    HostCheckError {
        key: key.to_string(),
        value,
        why,
    }
}

/// Interface names the kernel accepts: 1-15 bytes, no '/', no whitespace, not "." or "..".
pub fn interface(key: &str, name: &str) -> Result<(), HostCheckError> {
    let valid = !name.is_empty()
        && name.len() < 16
        && name != "."
        && name != ".."
        && !name
            .bytes()
            .any(|b| b == b'/' || b == b':' || b.is_ascii_whitespace());
    if !valid {
        return Err(fault(key, format!("{name:?}"), HostFault::BadInterfaceName));
    }
    // if_nametoindex(3) asks this thread's network namespace (/sys/class/net shows the
    // namespace sysfs was mounted in).
    if netsched_sys::socket::ifindex(name).is_none() {
        return Err(fault(key, name.to_string(), HostFault::NoSuchInterface));
    }
    Ok(())
}

/// A TCP address can be bound now (no `SO_REUSEPORT`: a socket already there is an error).
/// Nothing listens afterwards: the socket is closed before this returns.
pub fn tcp_address(key: &str, addr: SocketAddr) -> Result<(), HostCheckError> {
    match std::net::TcpListener::bind(addr) {
        Ok(_) => Ok(()),
        Err(source) => Err(fault(
            key,
            addr.to_string(),
            HostFault::Bind {
                source,
                low_port: addr.port() < 1024,
            },
        )),
    }
}

/// What is at a control socket's path that can be taken ([`socket_path`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketPath {
    /// Nothing, or a stale socket (nobody answers; a start replaces it).
    Free,
    /// A daemon answers there: the one this check is for when a reload runs it (a unit's
    /// `ExecReload=` runs `--check` before its SIGHUP). What that daemon holds, such as its
    /// metrics address, is not bound again by the check; a second daemon started at the same
    /// path is refused when it binds.
    Running,
}

/// A control socket path can be taken: absent with an existing folder, a stale socket, or
/// the socket of the running daemon ([`SocketPath`]). A file that is not a socket, or a
/// missing folder, is an error.
pub fn socket_path(key: &str, path: &Path) -> Result<SocketPath, HostCheckError> {
    let shown = || path.display().to_string();
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_socket() => Err(fault(key, shown(), HostFault::NotASocket)),
        Ok(_) => match UnixStream::connect(path) {
            Ok(_) => Ok(SocketPath::Running),
            Err(_) => Ok(SocketPath::Free),
        },
        Err(e) if e.kind() == ErrorKind::NotFound => {
            // The daemons' run-time folder is made at start when missing (socket_file).
            let run_dir = Path::new(netsched_control::run_dir::RUN_DIR);
            match path.parent().filter(|d| !d.as_os_str().is_empty()) {
                Some(d) if !d.is_dir() && d != run_dir => {
                    Err(fault(key, shown(), HostFault::NoDirectory(d.to_path_buf())))
                }
                _ => Ok(SocketPath::Free),
            }
        }
        Err(e) => Err(fault(key, shown(), HostFault::Stat(e))),
    }
}

/// A group named by the configuration exists (name or numeric gid).
pub fn group(key: &str, name: &str) -> Result<(), HostCheckError> {
    if name.parse::<u32>().is_ok() {
        return Ok(());
    }
    netsched_control::access::group_gid(name)
        .map(|_| ())
        .map_err(|e| fault(key, format!("{name:?}"), HostFault::Group(e)))
}

/// A program the daemon runs is installed: a path that exists, or a name found in `PATH`.
pub fn program(key: &str, name: &str) -> Result<(), HostCheckError> {
    let found = if name.contains('/') {
        Path::new(name).is_file()
    } else {
        std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
            .unwrap_or(false)
    };
    if found {
        Ok(())
    } else {
        Err(fault(key, name.to_string(), HostFault::ProgramNotFound))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_check_accepts_what_works_and_names_what_does_not() {
        interface("dev", "lo").unwrap();
        let e = interface("--dev", "nosuch-7f3a").unwrap_err().to_string();
        assert!(
            e.contains("--dev") && e.contains("no such interface"),
            "{e}"
        );
        assert!(interface("dev", "a/b")
            .unwrap_err()
            .to_string()
            .contains("not a valid"));

        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let busy = held.local_addr().unwrap();
        let e = tcp_address("metrics", busy).unwrap_err().to_string();
        assert!(e.contains("metrics") && e.contains("in use"), "{e}");
        drop(held);
        tcp_address("metrics", busy).unwrap();

        let dir = crate::TempDir::new("check-socket").unwrap();
        let p = dir.path().join("ctl.sock");
        socket_path("socket", &p).unwrap();
        let live = std::os::unix::net::UnixListener::bind(&p).unwrap();
        assert_eq!(socket_path("socket", &p).unwrap(), SocketPath::Running);
        drop(live); // the file stays: a stale socket, which a start replaces
        assert_eq!(socket_path("socket", &p).unwrap(), SocketPath::Free);
        let e = socket_path("socket", &dir.path().join("missing/ctl.sock"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not exist"), "{e}");
        let f = dir.path().join("file");
        std::fs::write(&f, "x").unwrap();
        assert!(socket_path("socket", &f)
            .unwrap_err()
            .to_string()
            .contains("not a socket"));

        group("group", "root").unwrap();
        assert!(group("group", "no-such-group-7f3a").is_err());
        program("iptables", "sh").unwrap();
        assert!(program("iptables", "no-such-program-7f3a").is_err());
    }
}

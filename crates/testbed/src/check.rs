//! What every `--check` asks of the host besides a valid configuration, in the manner of
//! `haproxy -c`: the interfaces a daemon opens exist, the addresses it listens on can be
//! bound now, its control socket path can be taken, the group it hands the socket to exists,
//! the programs it runs are installed. Each answer is a message naming the key or flag and
//! the value, so `netsched X --check` prints one line a user can act on.
//!
//! Exit codes of every `--check` (and of every command): 0 valid, 1 invalid (or failed),
//! 2 usage (clap's code for an unknown flag or a missing argument).

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::Path;

/// Interface names the kernel accepts: 1-15 bytes, no '/', no whitespace, not "." or "..".
pub fn interface(key: &str, name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() < 16
        && name != "."
        && name != ".."
        && !name
            .bytes()
            .any(|b| b == b'/' || b == b':' || b.is_ascii_whitespace());
    if !valid {
        return Err(format!("{key} = {name:?}: not a valid interface name"));
    }
    // if_nametoindex(3) asks this thread's network namespace (/sys/class/net shows the
    // namespace sysfs was mounted in).
    if netsched_sys::socket::ifindex(name).is_none() {
        return Err(format!(
            "{key} = {name}: no such interface in this network namespace"
        ));
    }
    Ok(())
}

/// A TCP address can be bound now (no `SO_REUSEPORT`: a socket already there is an error).
/// Nothing listens afterwards: the socket is closed before this returns.
pub fn tcp_address(key: &str, addr: SocketAddr) -> Result<(), String> {
    match std::net::TcpListener::bind(addr) {
        Ok(_) => Ok(()),
        Err(e) => {
            let why = match e.kind() {
                ErrorKind::AddrInUse => {
                    "address already in use (another socket listens there)".to_string()
                }
                ErrorKind::PermissionDenied if addr.port() < 1024 => {
                    format!("{e} (a port below 1024 needs root or CAP_NET_BIND_SERVICE)")
                }
                ErrorKind::AddrNotAvailable => format!("{e} (not an address of this host)"),
                _ => e.to_string(),
            };
            Err(format!("{key} = {addr}: {why}"))
        }
    }
}

/// A control socket path can be taken: absent with an existing folder, or a stale socket
/// (nothing answers; a start replaces it). A live socket (another daemon answers), or a
/// file that is not a socket, is an error.
pub fn socket_path(key: &str, path: &Path) -> Result<(), String> {
    let shown = path.display();
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_socket() => {
            Err(format!("{key} = {shown}: exists and is not a socket"))
        }
        Ok(_) => match UnixStream::connect(path) {
            Ok(_) => Err(format!(
                "{key} = {shown}: in use (a running daemon answers there)"
            )),
            Err(_) => Ok(()),
        },
        Err(e) if e.kind() == ErrorKind::NotFound => {
            match path.parent().filter(|d| !d.as_os_str().is_empty()) {
                Some(d) if !d.is_dir() => Err(format!(
                    "{key} = {shown}: directory {} does not exist",
                    d.display()
                )),
                _ => Ok(()),
            }
        }
        Err(e) => Err(format!("{key} = {shown}: {e}")),
    }
}

/// A group named by the configuration exists (name or numeric gid).
pub fn group(key: &str, name: &str) -> Result<(), String> {
    if name.parse::<u32>().is_ok() {
        return Ok(());
    }
    netsched_control::access::group_gid(name)
        .map(|_| ())
        .map_err(|e| format!("{key} = {name:?}: {e}"))
}

/// A program the daemon runs is installed: a path that exists, or a name found in `PATH`.
pub fn program(key: &str, name: &str) -> Result<(), String> {
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
        Err(format!("{key} = {name}: program not found"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_check_accepts_what_works_and_names_what_does_not() {
        interface("dev", "lo").unwrap();
        let e = interface("--dev", "nosuch-7f3a").unwrap_err();
        assert!(
            e.contains("--dev") && e.contains("no such interface"),
            "{e}"
        );
        assert!(interface("dev", "a/b").unwrap_err().contains("not a valid"));

        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let busy = held.local_addr().unwrap();
        let e = tcp_address("metrics", busy).unwrap_err();
        assert!(e.contains("metrics") && e.contains("in use"), "{e}");
        drop(held);
        tcp_address("metrics", busy).unwrap();

        let dir = crate::TempDir::new("check-socket").unwrap();
        let p = dir.path().join("ctl.sock");
        socket_path("socket", &p).unwrap();
        let live = std::os::unix::net::UnixListener::bind(&p).unwrap();
        assert!(socket_path("socket", &p).unwrap_err().contains("in use"));
        drop(live); // the file stays: a stale socket, which a start replaces
        socket_path("socket", &p).unwrap();
        let e = socket_path("socket", &dir.path().join("missing/ctl.sock")).unwrap_err();
        assert!(e.contains("does not exist"), "{e}");
        let f = dir.path().join("file");
        std::fs::write(&f, "x").unwrap();
        assert!(socket_path("socket", &f)
            .unwrap_err()
            .contains("not a socket"));

        group("group", "root").unwrap();
        assert!(group("group", "no-such-group-7f3a").is_err());
        program("iptables", "sh").unwrap();
        assert!(program("iptables", "no-such-program-7f3a").is_err());
    }
}

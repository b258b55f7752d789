//! The service manager's readiness protocol, sd_notify(3): a daemon started with
//! `NOTIFY_SOCKET` in its environment sends newline-separated `KEY=VALUE` assignments as one
//! datagram to that `AF_UNIX` socket — `READY=1` once it serves (its sockets are bound),
//! `RELOADING=1` while it re-reads its configuration (then `READY=1` again), `STOPPING=1` when
//! it begins to stop. systemd.service(5), `Type=notify`, waits for `READY=1`.
//!
//! `NOTIFY_SOCKET` is a path (`/run/systemd/notify`) or, with a leading `@`, a name in the
//! abstract namespace (unix(7)). Without the variable (not started by a service manager)
//! every call does nothing. A failed send is reported, never fatal: the daemon works the
//! same, only its manager does not hear of it.

use std::os::unix::net::{SocketAddr, UnixDatagram};

/// What a send could not do.
#[derive(Debug)]
pub struct NotifyError {
    /// The `NOTIFY_SOCKET` value.
    pub socket: String,
    pub source: std::io::Error,
}

impl std::fmt::Display for NotifyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NOTIFY_SOCKET={}: {}", self.socket, self.source)
    }
}

impl std::error::Error for NotifyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// The address `NOTIFY_SOCKET` names: a path, or `@name` in the abstract namespace.
fn address(value: &str) -> std::io::Result<SocketAddr> {
    match value.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(name.as_bytes())
        }
        None => SocketAddr::from_pathname(value),
    }
}

/// Send `state` (e.g. `"READY=1"`, `"STOPPING=1"`) to the socket `NOTIFY_SOCKET` names.
/// `Ok(false)` without the variable, `Ok(true)` once sent.
pub fn notify(state: &str) -> Result<bool, NotifyError> {
    let Some(value) = std::env::var_os("NOTIFY_SOCKET") else {
        return Ok(false);
    };
    let value = value.to_string_lossy().into_owned();
    send_to(&value, state)
        .map(|()| true)
        .map_err(|source| NotifyError {
            socket: value,
            source,
        })
}

/// Send `state` to the socket `value` names (a path or `@abstract`).
pub fn send_to(value: &str, state: &str) -> std::io::Result<()> {
    if value.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "empty socket name",
        ));
    }
    let sock = UnixDatagram::unbound()?;
    let n = sock.send_to_addr(state.as_bytes(), &address(value)?)?;
    if n != state.len() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::WriteZero,
            "datagram truncated",
        ));
    }
    Ok(())
}

/// [`notify`] for a daemon: a failure is printed on stderr with the daemon's `name`, and the
/// daemon goes on.
pub fn notify_or_warn(name: &str, state: &str) {
    if let Err(e) = notify(state) {
        eprintln!("{name}: warning: could not tell the service manager {state}: {e}");
    }
}

/// `READY=1` plus a `STATUS=` line the manager shows in `systemctl status`.
pub fn ready(name: &str, status: &str) {
    notify_or_warn(name, &format!("READY=1\nSTATUS={status}"));
}

/// `RELOADING=1`: the daemon re-reads its configuration; `READY=1` must follow once the
/// reload is done (ended well or not).
pub fn reloading(name: &str) {
    notify_or_warn(name, "RELOADING=1");
}

/// `STOPPING=1`: the daemon has begun to stop.
pub fn stopping(name: &str) {
    notify_or_warn(name, "STOPPING=1");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_one_datagram_to_a_path_and_to_an_abstract_name() {
        let dir = std::env::temp_dir().join(format!("netsched-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let rx = UnixDatagram::bind(&path).unwrap();
        send_to(path.to_str().unwrap(), "READY=1\nSTATUS=x").unwrap();
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\nSTATUS=x");
        std::fs::remove_dir_all(&dir).unwrap();

        use std::os::linux::net::SocketAddrExt;
        let name = format!("netsched-notify-test-{}", std::process::id());
        let rx = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(&name).unwrap()).unwrap();
        send_to(&format!("@{name}"), "STOPPING=1").unwrap();
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1");
    }

    #[test]
    fn a_missing_socket_is_an_error_naming_it() {
        let e = send_to("/nonexistent-netsched/notify", "READY=1").unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        assert!(send_to("", "READY=1").is_err());
    }
}

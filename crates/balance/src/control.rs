//! Runtime control over a local Unix socket (HAProxy's runtime API `set weight`,
//! `set server state ready|drain|maint`, `add server`, `del server`; management guide §9.3).
//!
//! Protocol: the client sends one line of words (at most [`MAX_REQUEST`] bytes) and reads the
//! answer until EOF; the answer's first line is `ok` or `error: <what>`. Each connection is
//! its own task with a [`DEADLINE`], so a slow or stuck client never blocks the data path.
//!
//! Access, as `netsched ctl` for nfq: the socket file is mode 0660 (group = `control_group`
//! when set); each connection's `SO_PEERCRED` must be root, our own uid, or a member of the
//! group (the one rule of `netsched_testbed::access`).

use crate::config::ServerConf;
use crate::service::{Admin, Service};
use clap::{Args, Subcommand};
use netsched_testbed::access;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

pub const MAX_REQUEST: u64 = 4096;
pub const DEADLINE: Duration = Duration::from_secs(2);

/// The bound socket; removes its file on drop, only if the file is still the one we made.
pub struct ControlSocket {
    pub listener: UnixListener,
    path: PathBuf,
    ino: (u64, u64),
    gid: Option<u32>,
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        if let Ok(m) = std::fs::symlink_metadata(&self.path) {
            if (m.dev(), m.ino()) == self.ino {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

impl ControlSocket {
    /// Bind `path`. A stale socket (nobody answers) is replaced; a live one is an error; a
    /// path that is not a socket is never removed.
    pub fn bind(path: &Path, group: Option<&str>) -> Result<Self, String> {
        let shown = path.display();
        if let Ok(m) = std::fs::symlink_metadata(path) {
            use std::os::unix::fs::FileTypeExt;
            if !m.file_type().is_socket() {
                return Err(format!(
                    "control_socket {shown}: exists and is not a socket"
                ));
            }
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(format!(
                    "control_socket {shown}: in use (is another netsched balance running?)"
                ));
            }
            std::fs::remove_file(path).map_err(|e| format!("removing stale {shown}: {e}"))?;
        }
        let gid = group
            .map(access::group_gid)
            .transpose()
            .map_err(|e| e.to_string())?;
        let listener =
            UnixListener::bind(path).map_err(|e| format!("control_socket {shown}: {e}"))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
            .map_err(|e| format!("chmod {shown}: {e}"))?;
        if let Some(g) = gid {
            std::os::unix::fs::chown(path, None, Some(g))
                .map_err(|e| format!("chown {shown}: {e}"))?;
        }
        let m = std::fs::symlink_metadata(path).map_err(|e| format!("stat {shown}: {e}"))?;
        Ok(ControlSocket {
            listener,
            path: path.to_path_buf(),
            ino: (m.dev(), m.ino()),
            gid,
        })
    }
}

pub async fn serve(sock: Arc<ControlSocket>, svc: Arc<Service>) {
    loop {
        let Ok((stream, _)) = sock.listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let svc = svc.clone();
        let gid = sock.gid;
        tokio::spawn(async move {
            let _ = tokio::time::timeout(DEADLINE, one(stream, gid, &svc)).await;
        });
    }
}

async fn one(mut stream: UnixStream, gid: Option<u32>, svc: &Service) -> std::io::Result<()> {
    let answer = match access::check_peer(&stream, gid) {
        Err(e) => format!("error: permission denied: {e}\n"),
        Ok(_) => {
            let mut line = String::new();
            let mut r = BufReader::new((&mut stream).take(MAX_REQUEST));
            r.read_line(&mut line).await?;
            if !line.ends_with('\n') && line.len() as u64 >= MAX_REQUEST {
                format!("error: request longer than {MAX_REQUEST} bytes\n")
            } else {
                match execute(line.trim(), svc) {
                    Ok(text) => format!("ok\n{text}"),
                    Err(e) => format!("error: {e}\n"),
                }
            }
        }
    };
    stream.write_all(answer.as_bytes()).await?;
    stream.shutdown().await
}

/// Run one command line against the service.
pub fn execute(line: &str, svc: &Service) -> Result<String, String> {
    let w: Vec<&str> = line.split_whitespace().collect();
    let name = |i: usize| {
        w.get(i)
            .copied()
            .ok_or_else(|| format!("{}: missing server name", w[0]))
    };
    match w.first().copied() {
        None => Err("empty request".into()),
        Some("show-servers") => {
            let rows = svc.show();
            if w.get(1) == Some(&"--json") {
                serde_json::to_string_pretty(&rows)
                    .map(|s| s + "\n")
                    .map_err(|e| e.to_string())
            } else {
                let mut out = format!(
                    "{:<16} {:<22} {:>6} {:>9} {:>7} {:<6} {:<5} {:>7} {:>8}\n",
                    "name", "addr", "weight", "effective", "maxconn", "admin", "health", "active", "inactive"
                );
                for r in rows {
                    out += &format!(
                        "{:<16} {:<22} {:>6} {:>9} {:>7} {:<6} {:<5} {:>7} {:>8}\n",
                        r.name,
                        r.addr,
                        r.weight,
                        r.effective_weight,
                        r.maxconn,
                        format!("{:?}", r.admin).to_lowercase(),
                        r.health,
                        r.active,
                        r.inactive
                    );
                }
                Ok(out)
            }
        }
        Some("set-weight") => {
            let n = name(1)?;
            let text = w.get(2).ok_or("set-weight: missing weight")?;
            let v: u32 = text
                .parse()
                .map_err(|_| format!("set-weight: weight {text:?} is not a whole number"))?;
            svc.set_weight(n, v)?;
            Ok(format!("{n} weight {v}\n"))
        }
        Some(cmd @ ("drain" | "maint" | "ready")) => {
            let n = name(1)?;
            let a = match cmd {
                "drain" => Admin::Drain,
                "maint" => Admin::Maint,
                _ => Admin::Ready,
            };
            svc.set_admin(n, a)?;
            Ok(format!("{n} {cmd}\n"))
        }
        Some("add-server") => {
            let n = name(1)?;
            let a = w.get(2).ok_or("add-server: missing ADDR:PORT")?;
            let addr = a
                .parse()
                .map_err(|_| format!("add-server: {a:?} is not ADDR:PORT"))?;
            let mut weight = 1;
            let mut maxconn = None;
            let mut i = 3;
            while i < w.len() {
                let v = w.get(i + 1).ok_or_else(|| format!("add-server: {} needs a value", w[i]))?;
                let num: u32 = v
                    .parse()
                    .map_err(|_| format!("add-server: {} {v:?} is not a whole number", w[i]))?;
                match w[i] {
                    "--weight" => weight = num,
                    "--maxconn" => maxconn = Some(num),
                    o => return Err(format!("add-server: unknown option {o:?}")),
                }
                i += 2;
            }
            if weight > crate::config::MAX_WEIGHT {
                return Err(format!("add-server: weight {weight} too large"));
            }
            svc.add_server(
                &ServerConf {
                    name: n.to_string(),
                    addr,
                    weight,
                    maxconn,
                },
                true,
            )?;
            Ok(format!("{n} added\n"))
        }
        Some("del-server") => {
            let n = name(1)?;
            svc.del_server(n)?;
            Ok(format!("{n} removed (its established connections go on)\n"))
        }
        Some(other) => Err(format!(
            "unknown command {other:?} (show-servers [--json] | set-weight NAME W | drain NAME | maint NAME | ready NAME | add-server NAME ADDR:PORT [--weight W] [--maxconn N] | del-server NAME)"
        )),
    }
}

/// `netsched balance ctl`.
#[derive(Args, Debug, Clone)]
pub struct CtlArgs {
    /// Control socket of the running balancer.
    #[arg(long, default_value = "/run/netsched-balance.sock")]
    pub socket: PathBuf,
    #[command(subcommand)]
    pub op: CtlOp,
}

#[derive(Subcommand, Debug, Clone)]
pub enum CtlOp {
    /// Servers with weight, state, health and connection counts.
    ShowServers {
        #[arg(long)]
        json: bool,
    },
    /// Change a server's weight (0 drains); takes effect for the next pick.
    SetWeight { name: String, weight: u32 },
    /// No new work; established connections finish.
    Drain { name: String },
    /// Out of rotation and not health-checked; established connections finish.
    Maint { name: String },
    /// Back in rotation (slow start applies).
    Ready { name: String },
    /// Add a server.
    AddServer {
        name: String,
        addr: std::net::SocketAddr,
        #[arg(long, default_value_t = 1)]
        weight: u32,
        #[arg(long)]
        maxconn: Option<u32>,
    },
    /// Remove a server; its established connections go on.
    DelServer { name: String },
}

impl CtlOp {
    pub fn line(&self) -> String {
        match self {
            CtlOp::ShowServers { json } => {
                format!("show-servers{}", if *json { " --json" } else { "" })
            }
            CtlOp::SetWeight { name, weight } => format!("set-weight {name} {weight}"),
            CtlOp::Drain { name } => format!("drain {name}"),
            CtlOp::Maint { name } => format!("maint {name}"),
            CtlOp::Ready { name } => format!("ready {name}"),
            CtlOp::AddServer {
                name,
                addr,
                weight,
                maxconn,
            } => {
                let mut l = format!("add-server {name} {addr} --weight {weight}");
                if let Some(m) = maxconn {
                    l += &format!(" --maxconn {m}");
                }
                l
            }
            CtlOp::DelServer { name } => format!("del-server {name}"),
        }
    }
}

/// Send one request line; return the answer (without the `ok` line) or the error (the
/// daemons' one client: [`netsched_testbed::access::request_line`]).
pub fn request(socket: &Path, line: &str) -> Result<String, String> {
    access::request_line(socket, line, Duration::from_secs(5), "netsched balance")
        .map_err(|e| e.to_string())
}

pub fn run_ctl(a: &CtlArgs) -> anyhow::Result<()> {
    let out = request(&a.socket, &a.op.line()).map_err(|e| anyhow::anyhow!(e))?;
    print!("{out}");
    Ok(())
}

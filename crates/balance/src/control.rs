//! Runtime control over a local Unix socket (HAProxy's runtime API `set weight`,
//! `set server state ready|drain|maint`, `add server`, `del server`; management guide §9.3).
//!
//! Protocol: the client sends one line of words (at most [`MAX_REQUEST`] bytes) and reads the
//! answer until EOF; the answer's first line is `ok` or `error: <what>`. Each connection is
//! its own task with a [`DEADLINE`] to send its line and another to take the answer, so a slow
//! or stuck client never blocks the data path.
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
use tokio::sync::Notify;

pub const MAX_REQUEST: u64 = 4096;
pub const DEADLINE: Duration = Duration::from_secs(2);
/// Most bytes read and dropped after the request line, so the answer is not lost.
const MAX_DRAIN: u64 = 64 * 1024;

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
    /// Bind `path`. The socket is made under a temporary name beside it, then renamed over
    /// `path` (rename(2) replaces atomically): so a new balancer takes the path over from a
    /// running one (a restart: the old one keeps its socket open, unreachable by name, and
    /// on exit removes the path only if it is still its own), and a client never finds the
    /// path missing. `replaced` says whether a live balancer answered there. A path that is
    /// not a socket is never touched.
    pub fn bind(path: &Path, group: Option<&str>) -> Result<Self, String> {
        let shown = path.display();
        let mut replaced = false;
        if let Ok(m) = std::fs::symlink_metadata(path) {
            use std::os::unix::fs::FileTypeExt;
            if !m.file_type().is_socket() {
                return Err(format!(
                    "control_socket {shown}: exists and is not a socket"
                ));
            }
            replaced = std::os::unix::net::UnixStream::connect(path).is_ok();
        }
        let gid = group
            .map(access::group_gid)
            .transpose()
            .map_err(|e| e.to_string())?;
        let mut temp = path.as_os_str().to_owned();
        temp.push(format!(".{}.new", std::process::id()));
        let temp = PathBuf::from(temp);
        let tshown = temp.display();
        // Left over by a process of ours with the same pid that died here: not a live one.
        let _ = std::fs::remove_file(&temp);
        let made = (|| {
            let listener =
                UnixListener::bind(&temp).map_err(|e| format!("control_socket {tshown}: {e}"))?;
            std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o660))
                .map_err(|e| format!("chmod {tshown}: {e}"))?;
            if let Some(g) = gid {
                std::os::unix::fs::chown(&temp, None, Some(g))
                    .map_err(|e| format!("chown {tshown}: {e}"))?;
            }
            let m = std::fs::symlink_metadata(&temp).map_err(|e| format!("stat {tshown}: {e}"))?;
            std::fs::rename(&temp, path)
                .map_err(|e| format!("control_socket {shown}: rename from {tshown}: {e}"))?;
            Ok::<_, String>((listener, m))
        })();
        let (listener, m) = made.inspect_err(|_| {
            let _ = std::fs::remove_file(&temp);
        })?;
        if replaced {
            eprintln!(
                "netsched balance: control socket {shown} taken over from a running balancer \
                 (it keeps serving its connections until it is stopped)"
            );
        }
        Ok(ControlSocket {
            listener,
            path: path.to_path_buf(),
            ino: (m.dev(), m.ino()),
            gid,
        })
    }
}

pub async fn serve(sock: Arc<ControlSocket>, svc: Arc<Service>, soft_stop: Arc<Notify>) {
    loop {
        let Ok((stream, _)) = sock.listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let svc = svc.clone();
        let gid = sock.gid;
        let soft_stop = soft_stop.clone();
        tokio::spawn(async move {
            // Each phase of `one` is bounded by DEADLINE: at most twice that in all.
            let _ = one(stream, gid, &svc, &soft_stop).await;
        });
    }
}

async fn one(
    mut stream: UnixStream,
    gid: Option<u32>,
    svc: &Service,
    soft_stop: &Notify,
) -> std::io::Result<()> {
    let answer = match access::check_peer(&stream, gid) {
        Err(e) => format!("error: permission denied: {e}\n"),
        Ok(_) => {
            let mut raw = Vec::new();
            let read = {
                let mut r = BufReader::new((&mut stream).take(MAX_REQUEST));
                // Cancel-safe: what arrived before the deadline is in `raw`.
                tokio::time::timeout(DEADLINE, r.read_until(b'\n', &mut raw)).await
            };
            let text = match read {
                // Connected and silent: closed without a word, as before any request.
                Err(_) if raw.is_empty() => return Ok(()),
                Err(_) => Err(format!(
                    "no complete request line within {DEADLINE:?}: {} bytes without a newline",
                    raw.len()
                )),
                Ok(r) => r
                    .map_err(|e| format!("reading the request: {e}"))
                    .and_then(|_| request_text(&raw)),
            };
            match text {
                Err(e) => format!("error: {e}\n"),
                // The daemon's loop starts the stop (it owns the listeners); the request is
                // kept if it is not waiting yet.
                Ok(line) if line.trim() == "soft-stop" => {
                    soft_stop.notify_one();
                    "ok\nsoft stop: no new connections; the balancer exits when the last one ends\n"
                        .to_string()
                }
                Ok(line) => match execute(line.trim(), svc) {
                    Ok(text) => format!("ok\n{text}"),
                    Err(e) => format!("error: {e}\n"),
                },
            }
        }
    };
    let finish = async {
        stream.write_all(answer.as_bytes()).await?;
        stream.shutdown().await?;
        // Closing a Unix socket with unread bytes resets the peer, which then loses the
        // answer (a request over the limit, or bytes after the line): read on until the
        // client closes, at most MAX_DRAIN bytes.
        let mut rest = (&mut stream).take(MAX_DRAIN);
        tokio::io::copy(&mut rest, &mut tokio::io::sink()).await?;
        Ok(())
    };
    tokio::time::timeout(DEADLINE, finish)
        .await
        .unwrap_or(Ok(()))
}

/// The request line read (at most [`MAX_REQUEST`] bytes): one line of UTF-8 ending in `\n`.
/// Anything else is refused with what is wrong, so the client always gets an answer.
fn request_text(raw: &[u8]) -> Result<&str, String> {
    let Some(body) = raw.strip_suffix(b"\n") else {
        return Err(if raw.len() as u64 >= MAX_REQUEST {
            format!("request longer than {MAX_REQUEST} bytes")
        } else if raw.is_empty() {
            "no request: the connection ended before a line was sent".to_string()
        } else {
            format!(
                "request of {} bytes ends without a newline: send one line ending in \\n",
                raw.len()
            )
        });
    };
    std::str::from_utf8(body).map_err(|e| {
        format!(
            "request is not UTF-8: invalid byte 0x{:02x} at offset {}",
            body[e.valid_up_to()],
            e.valid_up_to()
        )
    })
}

/// Run one command line against the service.
pub fn execute(line: &str, svc: &Service) -> Result<String, String> {
    let w: Vec<&str> = line.split_whitespace().collect();
    let name = |i: usize| {
        w.get(i)
            .copied()
            .ok_or_else(|| format!("{}: missing server name", w[0]))
    };
    // Commands of a fixed arity refuse what follows instead of ignoring it.
    let at_most = |n: usize| {
        if w.len() > n {
            Err(format!(
                "{}: unexpected argument {:?} (usage: {})",
                w[0],
                w[n],
                usage(w[0])
            ))
        } else {
            Ok(())
        }
    };
    match w.first().copied() {
        None => Err("empty request".into()),
        Some("show-servers") => {
            if w.get(1).is_some_and(|o| *o != "--json") {
                return Err(format!(
                    "show-servers: unknown option {:?} (usage: {})",
                    w[1],
                    usage(w[0])
                ));
            }
            at_most(2)?;
            let rows = svc.show();
            if w.get(1) == Some(&"--json") {
                serde_json::to_string_pretty(&rows)
                    .map(|s| s + "\n")
                    .map_err(|e| e.to_string())
            } else {
                let mut out = format!(
                    "{:<16} {:<22} {:>6} {:>9} {:>7} {:<6} {:<5} {:>7} {:>8}\n",
                    "name",
                    "addr",
                    "weight",
                    "effective",
                    "maxconn",
                    "admin",
                    "health",
                    "active",
                    "inactive"
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
            at_most(3)?;
            let v: u32 = text
                .parse()
                .map_err(|_| format!("set-weight: weight {text:?} is not a whole number"))?;
            svc.set_weight(n, v)?;
            Ok(format!("{n} weight {v}\n"))
        }
        Some(cmd @ ("drain" | "maint" | "ready")) => {
            name(1)?;
            let names = &w[1..];
            let a = match cmd {
                "drain" => Admin::Drain,
                "maint" => Admin::Maint,
                _ => Admin::Ready,
            };
            // All or nothing: an unknown name refuses the whole line.
            svc.set_admin_all(names, a)
                .map_err(|e| format!("{cmd}: {e}; no server changed"))?;
            Ok(names.iter().map(|n| format!("{n} {cmd}\n")).collect())
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
                let v = w
                    .get(i + 1)
                    .ok_or_else(|| format!("add-server: {} needs a value", w[i]))?;
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
            at_most(2)?;
            svc.del_server(n)?;
            Ok(format!("{n} removed (its established connections go on)\n"))
        }
        Some(other) => Err(format!("unknown command {other:?} ({})", usage(""))),
    }
}

/// The usage of one command, or of all of them.
fn usage(cmd: &str) -> &'static str {
    match cmd {
        "show-servers" => "show-servers [--json]",
        "set-weight" => "set-weight NAME W",
        "drain" => "drain NAME...",
        "maint" => "maint NAME...",
        "ready" => "ready NAME...",
        "add-server" => "add-server NAME ADDR:PORT [--weight W] [--maxconn N]",
        "del-server" => "del-server NAME",
        "soft-stop" => "soft-stop",
        _ => "show-servers [--json] | set-weight NAME W | drain NAME... | maint NAME... | ready NAME... | add-server NAME ADDR:PORT [--weight W] [--maxconn N] | del-server NAME | soft-stop",
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
    /// No new work; established connections finish. Several names: all or none.
    Drain {
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Out of rotation and not health-checked; established connections finish. Several
    /// names: all or none.
    Maint {
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Back in rotation (slow start applies). Several names: all or none.
    Ready {
        #[arg(required = true)]
        names: Vec<String>,
    },
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
    /// Stop accepting and exit once every connection has ended, without a deadline (as
    /// SIGUSR1; SIGTERM afterwards cuts what is left after `timeouts.hard_stop_after`).
    SoftStop,
}

impl CtlOp {
    pub fn line(&self) -> String {
        match self {
            CtlOp::ShowServers { json } => {
                format!("show-servers{}", if *json { " --json" } else { "" })
            }
            CtlOp::SetWeight { name, weight } => format!("set-weight {name} {weight}"),
            CtlOp::Drain { names } => format!("drain {}", names.join(" ")),
            CtlOp::Maint { names } => format!("maint {}", names.join(" ")),
            CtlOp::Ready { names } => format!("ready {}", names.join(" ")),
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
            CtlOp::SoftStop => "soft-stop".to_string(),
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

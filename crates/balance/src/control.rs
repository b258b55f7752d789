//! Runtime control over a local Unix socket (HAProxy's runtime API `set weight`,
//! `set server state ready|drain|maint`, `add server`, `del server`; management guide §9.3).
//!
//! Protocol: the client sends one line of words (at most [`MAX_REQUEST`] bytes) and reads the
//! answer until EOF; the answer's first line is `ok` or `error: <what>`. The socket is served
//! by the one control server of every daemon (`netsched_control`), on its own threads, not on
//! the tokio runtime: each connection has a [`DEADLINE`] to send its line and another to take
//! the answer, at most [`MAX_CONNECTIONS`] at once, so a slow or stuck client never blocks
//! the data path.
//!
//! Access, as `netsched ctl` for nfq: the socket file is mode 0660 (group = `control_group`
//! when set); each connection's `SO_PEERCRED` must be root, our own uid, or a member of the
//! group (the one rule of `netsched_control::access`).
//!
//! Cost: a thread per open control connection (bounded); a command is one call on the
//! service under its locks, as short as a pick.

use crate::config::ServerConf;
use crate::server_error::ServerError;
use crate::service::{Admin, Service};
use clap::{Args, Subcommand};
use netsched_control::{
    BindError, BindMode, ClientError, Handler, Limits, LineEnd, Refusal, Request, Server,
    ServerConfig, WhenFull,
};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// Longest request line, bytes.
pub const MAX_REQUEST: usize = 4096;
/// A request line must arrive within this of the connect, and its answer be written within
/// as long again.
pub const DEADLINE: Duration = Duration::from_secs(2);
/// Control connections served at once; one more takes the place of the oldest one still
/// without its line (`netsched_control::server`), or, with none such, is answered "busy".
pub const MAX_CONNECTIONS: usize = 128;

/// The socket's bounds and ways (the one server of every daemon: [`netsched_control`]).
pub const SERVER: ServerConfig = ServerConfig {
    daemon: "netsched balance",
    thread_name: "balance-control",
    limits: Limits {
        max_connections: MAX_CONNECTIONS,
        max_line: MAX_REQUEST,
        request_within: DEADLINE,
        answer_within: DEADLINE,
    },
    when_full: WhenFull::Refuse,
    line_end: LineEnd::Newline,
    // A new balancer takes the path over from a running one (hitless restart).
    bind: BindMode::TakeOver,
    nice: None,
};

/// The balancer's side of the server: runs on the server's connection thread, off the tokio
/// runtime; every command is a short synchronous call on the [`Service`] (no waiting).
struct BalanceHandler {
    svc: Arc<Service>,
    soft_stop: Arc<Notify>,
    reloader: Arc<crate::reload::Reloader>,
}

impl Handler for BalanceHandler {
    fn answer(&self, r: &Request<'_>) -> String {
        match r.line.trim() {
            // The daemon's loop starts the stop (it owns the listeners); the request is kept
            // if it is not waiting yet.
            "soft-stop" => {
                tracing::info!(
                    uid = r.peer.uid,
                    pid = r.peer.pid,
                    "ctl soft-stop by uid {}",
                    r.peer.uid
                );
                self.soft_stop.notify_one();
                "ok\nsoft stop: no new connections; the balancer exits when the last one ends\n"
                    .to_string()
            }
            // The file read again and applied, as SIGHUP does (reload.rs): file reads and
            // checks on this control thread, nothing waited for on the runtime.
            "reload" => {
                let path = self.reloader.path().display().to_string();
                match self.reloader.reload() {
                    Ok(notes) => {
                        tracing::info!(
                            by = "ctl",
                            uid = r.peer.uid,
                            "reloaded {path}: {}",
                            notes.join("; ")
                        );
                        let mut out = format!("ok\nreloaded {path}\n");
                        for n in notes {
                            out += &format!("{n}\n");
                        }
                        out
                    }
                    Err(e) => {
                        tracing::error!(
                            by = "ctl",
                            uid = r.peer.uid,
                            "reload failed, keeping the old configuration: {e}"
                        );
                        format!("error: reload failed, keeping the old configuration: {e}\n")
                    }
                }
            }
            line => {
                let done = execute(line, &self.svc);
                log_change(line, r, &done);
                match done {
                    Ok(text) => format!("ok\n{text}"),
                    Err(e) => format!("error: {e}\n"),
                }
            }
        }
    }

    fn refusal(&self, why: &Refusal) -> Option<String> {
        match why {
            // Connected and silent: closed without a word, as before any request.
            Refusal::Incomplete { bytes: 0, .. } => None,
            other => Some(format!("error: {other}\n")),
        }
    }
}

/// One log line per command that changes state (everything but `show-servers`/`show`): what was
/// asked, by whom (`SO_PEERCRED` uid and pid), and what came of it.
fn log_change(line: &str, r: &Request<'_>, done: &Result<String, ControlError>) {
    if matches!(
        line.split_whitespace().next(),
        Some("show-servers" | "show")
    ) {
        return;
    }
    // Escaped, bounded and (when refused) rate-limited as every daemon's audit line.
    let text = match done {
        Ok(text) => text.trim_end().replace('\n', "; "),
        Err(e) => e.to_string(),
    };
    let outcome = match done {
        Ok(_) => Ok(text.as_str()),
        Err(_) => Err(text.as_str()),
    };
    netsched_control::audit::log_outcome(r, outcome);
}

/// The control socket of a running balancer. Bound under a temporary name beside the path
/// and renamed over it, so a new balancer takes the path over from a running one (a restart:
/// the old one keeps its socket open, unreachable by name, and on exit removes the path only
/// if it is still its own), and a client never finds the path missing. A path that is not a
/// socket is never touched. Dropping it stops accepting and removes the file (if ours).
pub struct ControlServer {
    server: Server,
}

impl ControlServer {
    /// Bind `path` (mode 0660, group `group`) and serve it from the control threads.
    pub fn start(
        path: &Path,
        group: Option<&str>,
        svc: Arc<Service>,
        soft_stop: Arc<Notify>,
        reloader: Arc<crate::reload::Reloader>,
    ) -> Result<Self, BindError> {
        let handler = Arc::new(BalanceHandler {
            svc,
            soft_stop,
            reloader,
        });
        let server = Server::start(path, group, SERVER, handler)?;
        if server.replaced() {
            tracing::info!(
                "control socket {} taken over from a running balancer (it keeps serving its \
                 connections until it is stopped)",
                path.display()
            );
        }
        Ok(ControlServer { server })
    }

    pub fn path(&self) -> &Path {
        self.server.path()
    }
}

/// Why a control command was not carried out.
#[derive(Debug)]
pub enum ControlError {
    /// The line is wrong: the message names the command and the word, with the usage.
    Request(String),
    /// The service refused the change.
    Server(ServerError),
    /// A command on several servers changed none of them (`source`: the first refusal).
    NoneChanged {
        command: String,
        source: ServerError,
    },
    /// The server list could not be written as JSON.
    Encode(serde_json::Error),
}

impl std::fmt::Display for ControlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ControlError::Request(what) => f.write_str(what),
            ControlError::Server(e) => e.fmt(f),
            ControlError::NoneChanged { command, source } => {
                write!(f, "{command}: {source}; no server changed")
            }
            ControlError::Encode(e) => write!(f, "writing the servers as JSON: {e}"),
        }
    }
}

impl std::error::Error for ControlError {}

impl From<String> for ControlError {
    fn from(what: String) -> Self {
        ControlError::Request(what)
    }
}

impl From<&str> for ControlError {
    fn from(what: &str) -> Self {
        ControlError::Request(what.to_string())
    }
}

impl From<ServerError> for ControlError {
    fn from(e: ServerError) -> Self {
        ControlError::Server(e)
    }
}

/// Run one command line against the service.
pub fn execute(line: &str, svc: &Service) -> Result<String, ControlError> {
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
        None => Err(ControlError::Request("empty request".into())),
        // `show` is the CLI's verb; `show-servers` the wire's first one (both kept: see
        // docs/cli.md, "Control socket verbs").
        Some("show-servers" | "show") => {
            if w.get(1).is_some_and(|o| *o != "--json") {
                return Err(ControlError::Request(format!(
                    "{}: unknown option {:?} (usage: {})",
                    w[0],
                    w[1],
                    usage(w[0])
                )));
            }
            at_most(2)?;
            let rows = svc.show();
            if w.get(1) == Some(&"--json") {
                serde_json::to_string_pretty(&rows)
                    .map(|s| s + "\n")
                    .map_err(ControlError::Encode)
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
        Some("show-classes" | "set-class") => {
            crate::class_view::command(&w, svc).map_err(ControlError::Request)
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
                .map_err(|source| ControlError::NoneChanged {
                    command: cmd.to_string(),
                    source,
                })?;
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
            let mut sni = Vec::new();
            let mut i = 3;
            while i < w.len() {
                let v = w
                    .get(i + 1)
                    .ok_or_else(|| format!("add-server: {} needs a value", w[i]))?;
                if w[i] == "--sni" {
                    sni = v.split(',').map(str::to_string).collect();
                    i += 2;
                    continue;
                }
                let num: u32 = v
                    .parse()
                    .map_err(|_| format!("add-server: {} {v:?} is not a whole number", w[i]))?;
                match w[i] {
                    "--weight" => weight = num,
                    "--maxconn" => maxconn = Some(num),
                    o => return Err(format!("add-server: unknown option {o:?}").into()),
                }
                i += 2;
            }
            if weight > crate::config::MAX_WEIGHT {
                return Err(format!("add-server: weight {weight} too large").into());
            }
            svc.add_server(
                &ServerConf {
                    name: n.to_string(),
                    addr,
                    weight,
                    maxconn,
                    send_proxy: None,
                    sni,
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
        Some(other) => Err(format!("unknown command {other:?} ({})", usage("")).into()),
    }
}

/// The usage of one command, or of all of them.
fn usage(cmd: &str) -> &'static str {
    match cmd {
        "show-servers" => "show-servers [--json]",
        "show" => "show [--json]",
        "show-classes" => "show-classes [--json]",
        "set-class" => "set-class NAME percentile P|deadline auto|DURATION",
        "set-weight" => "set-weight NAME W",
        "drain" => "drain NAME...",
        "maint" => "maint NAME...",
        "ready" => "ready NAME...",
        "add-server" => "add-server NAME ADDR:PORT [--weight W] [--maxconn N] [--sni NAME,...]",
        "del-server" => "del-server NAME",
        "soft-stop" => "soft-stop",
        _ => "show [--json] | show-servers [--json] | show-classes [--json] | set-class NAME percentile P|deadline auto|DURATION | set-weight NAME W | drain NAME... | maint NAME... | ready NAME... | add-server NAME ADDR:PORT [--weight W] [--maxconn N] [--sni NAME,...] | del-server NAME | soft-stop",
    }
}

/// `netsched balance ctl`.
#[derive(Args, Debug, Clone)]
pub struct CtlArgs {
    #[command(flatten)]
    pub socket: netsched_control::CtlSocket,
    #[command(subcommand)]
    pub op: CtlOp,
}

#[derive(Subcommand, Debug, Clone)]
pub enum CtlOp {
    /// Servers with weight, state, health and connection counts.
    #[command(alias = "show-servers")]
    Show {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Service classes: target, deadline, N, S, attainment, queue, refusals.
    ShowClasses {
        /// Print the classes as JSON (targets, deadlines, N, S, failures, queue) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Change a class's percentile target (1..=100) or deadline ("auto" or a duration up
    /// to its queue timeout); applied at the next decision.
    SetClass {
        /// The class's name (`name` of its `[[class]]` table).
        name: String,
        /// `percentile` or `deadline`.
        field: String,
        /// The new value: a percentile 1..=100, or a deadline ("auto" or a duration such as "200ms").
        value: String,
    },
    /// Change a server's weight (0 drains); takes effect for the next pick.
    SetWeight {
        /// The server's name.
        name: String,
        /// The new weight (0 drains).
        weight: u32,
    },
    /// No new work; established connections finish. Several names: all or none.
    Drain {
        /// The servers' names.
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Out of rotation and not health-checked; established connections finish. Several
    /// names: all or none.
    Maint {
        /// The servers' names.
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Back in rotation (slow start applies). Several names: all or none.
    Ready {
        /// The servers' names.
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Add a server.
    AddServer {
        /// A new server name.
        name: String,
        /// Its address, IP:PORT.
        addr: std::net::SocketAddr,
        /// Its weight.
        #[arg(long, default_value_t = 1)]
        weight: u32,
        /// Most connections open to it at once (default: `defaults.maxconn`).
        #[arg(long)]
        maxconn: Option<u32>,
        /// With `route = "sni"`: the TLS server names it serves, comma-separated (it joins
        /// the route of that list, or makes one); none: the default route.
        #[arg(long, value_delimiter = ',')]
        sni: Vec<String>,
    },
    /// Remove a server; its established connections go on.
    DelServer {
        /// The server's name.
        name: String,
    },
    /// Stop accepting and exit once every connection has ended, without a deadline (as
    /// SIGUSR1; SIGTERM afterwards cuts what is left after `timeouts.hard_stop_after`).
    SoftStop,
    /// Read the configuration file again and apply it, as SIGHUP does (servers, algorithm,
    /// timeouts, classes, TLS certificates); a bad file changes nothing and says why.
    Reload,
}

impl CtlOp {
    pub fn line(&self) -> String {
        match self {
            CtlOp::Show { json } => {
                format!("show-servers{}", if *json { " --json" } else { "" })
            }
            CtlOp::ShowClasses { json } => {
                format!("show-classes{}", if *json { " --json" } else { "" })
            }
            CtlOp::SetClass { name, field, value } => format!("set-class {name} {field} {value}"),
            CtlOp::SetWeight { name, weight } => format!("set-weight {name} {weight}"),
            CtlOp::Drain { names } => format!("drain {}", names.join(" ")),
            CtlOp::Maint { names } => format!("maint {}", names.join(" ")),
            CtlOp::Ready { names } => format!("ready {}", names.join(" ")),
            CtlOp::AddServer {
                name,
                addr,
                weight,
                maxconn,
                sni,
            } => {
                let mut l = format!("add-server {name} {addr} --weight {weight}");
                if let Some(m) = maxconn {
                    l += &format!(" --maxconn {m}");
                }
                if !sni.is_empty() {
                    l += &format!(" --sni {}", sni.join(","));
                }
                l
            }
            CtlOp::DelServer { name } => format!("del-server {name}"),
            CtlOp::SoftStop => "soft-stop".to_string(),
            CtlOp::Reload => "reload".to_string(),
        }
    }
}

/// Send one request line; return the answer (without the `ok` line) or the error (the
/// daemons' one client: [`netsched_control::request_line`]).
pub fn request(socket: &Path, line: &str) -> Result<String, ClientError> {
    netsched_control::request_line(socket, line, Duration::from_secs(5), "netsched balance")
}

pub fn run_ctl(a: &CtlArgs) -> anyhow::Result<()> {
    let out = request(&a.socket.locate("balance")?, &a.op.line())?;
    print!("{out}");
    Ok(())
}

//! The control protocol: the thesis's ioctl API (P0 §3.2.5, Table 9: `perStart`, `perStop`,
//! `perReset`, `perGetStatus`, `perSetPvalue`, `perSetNvalue`, `perAddIP`, `perDeleteIP`)
//! carried as one JSON line per request over a Unix stream socket.
//!
//! Request: `{"cmd":"set_percentile","class":"c0","p":90}\n`; answer:
//! `{"ok":true,"message":"..."}` or `{"ok":false,"error":"..."}`, with `"status"` for
//! `status`. One request per connection.
//!
//! Access: the socket file is mode 0660, owned by root and by the configured group; on each
//! connection the peer's credentials (`SO_PEERCRED`) are checked again: root, the daemon's own
//! user, or a member (primary or supplementary) of the group — the one rule of
//! `netsched_control::access`, shared by every daemon.
//!
//! ## Off the packet path
//! The daemon serves the socket from control threads (the one server of every daemon,
//! `netsched_control`, started by [`ControlServer::serve`]): at most [`MAX_CONNECTIONS`]
//! connections at once (the rest wait in the kernel's listen backlog), each with
//! [`REQUEST_DEADLINE`] for its line — however the bytes trickle in — and as long again to
//! take its answer, and at most [`MAX_REQUEST_BYTES`] for its line. A control thread parses
//! and validates the request, runs the slow parts (iptables counters, /proc, formatting)
//! itself, one request at a time, and hands the packet loop only a small validated
//! [`Command`](crate::engine::Command) over a bounded channel; the packet loop applies it
//! between two packet batches and answers with a copy ([`Applied`]). Nothing a client does
//! can make the packet loop wait for it.

pub use crate::command_error::CommandError;
use crate::config::{parse_cidr, parse_deadline, resolve_class, Cidr, ClassSpec, Config};
use crate::engine::{Applied, Command, Status};
use anyhow::{anyhow, bail, Context, Result};
use netsched_control::socket_file::SocketFile;
use netsched_control::{
    handoff, BindError, BindMode, HandOffError, Handler, Limits, LineEnd, Refusal, Server,
    ServerConfig, WhenFull,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Control connections served at once; further clients wait in the listen backlog.
pub const MAX_CONNECTIONS: usize = 32;
/// A request line longer than this is refused (requests are < 200 bytes).
pub const MAX_REQUEST_BYTES: usize = 4096;
/// The whole request (connect → answer written) must fit in this; a slower client is cut off.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(1);
/// How long the control thread waits for the packet loop to apply a command.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(1);
/// Commands waiting for the packet loop (the control thread waits for each answer, so one
/// is in flight; the rest of the room absorbs answers that came after a timeout).
pub const COMMAND_QUEUE: usize = 4;
/// How long `netsched ctl` waits for the daemon's answer.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// One control request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    Start,
    Stop,
    Reset,
    /// `{"cmd":"status"}`, also `{"cmd":"show"}` (the CLI's verb; docs/cli.md, "Control
    /// socket verbs").
    #[serde(alias = "show")]
    Status,
    SetPercentile {
        class: String,
        p: i64,
    },
    /// A duration ("4ms") or "auto".
    SetDeadline {
        deadline: String,
    },
    /// A number ≥ 1, or "off".
    SetBudget {
        budget: String,
    },
    AddIp {
        cidr: String,
        class: String,
    },
    DelIp {
        cidr: String,
    },
    /// Read the configuration again and apply it whole, as SIGHUP does ([`crate::reload`]);
    /// served by the control thread itself.
    Reload,
}

impl Request {
    /// True for requests that change nothing (not logged: a dashboard polls them).
    pub fn is_read_only(&self) -> bool {
        matches!(self, Request::Status)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Box<Status>>,
}

impl Response {
    pub fn ok(msg: impl Into<String>) -> Self {
        Response {
            ok: true,
            message: Some(msg.into()),
            error: None,
            status: None,
        }
    }
    pub fn err(msg: impl Into<String>) -> Self {
        Response {
            ok: false,
            message: None,
            error: Some(msg.into()),
            status: None,
        }
    }
}

pub fn parse_budget(s: &str) -> Result<Option<usize>> {
    match s.trim() {
        "off" | "none" => Ok(None),
        t => {
            let n: usize = t
                .parse()
                .map_err(|_| anyhow!("budget {s:?}: expected a number ≥ 1 or \"off\""))?;
            if n == 0 {
                bail!("budget 0: must be at least 1 (use \"off\" for no budget)");
            }
            Ok(Some(n))
        }
    }
}

/// Parse and validate a request against the daemon's classes: everything that can be
/// wrong with it is found here, in the control thread.
pub fn to_command(req: &Request, classes: &[ClassSpec]) -> Result<Command> {
    Ok(match req {
        Request::Start => Command::Start,
        Request::Stop => Command::Stop,
        Request::Reset => Command::Reset,
        Request::Status => Command::Snapshot,
        Request::SetPercentile { class, p } => Command::SetPercentile {
            class: resolve_class(classes, class)?,
            p: crate::config::validate_percentile(*p)?,
        },
        Request::SetDeadline { deadline } => Command::SetDeadline(parse_deadline(deadline)?),
        Request::SetBudget { budget } => Command::SetBudget(parse_budget(budget)?),
        Request::AddIp { cidr, class } => Command::AddIp {
            cidr: parse_cidr(cidr)?,
            class: resolve_class(classes, class)?,
        },
        Request::DelIp { cidr } => Command::DelIp(parse_cidr(cidr)?),
        Request::Reload => {
            bail!("reload is not a packet-loop command (the control thread serves it)")
        }
    })
}

/// What the control thread knows without asking the packet loop: the classes (fixed for the
/// daemon's life) and a mirror of the address table (only control commands change it, and
/// every one of them passes here), so a `status` never makes the packet loop copy the table.
#[derive(Debug, Clone)]
pub struct ControlState {
    classes: Vec<ClassSpec>,
    table: BTreeMap<Cidr, usize>,
}

impl ControlState {
    pub fn new(cfg: &Config) -> Self {
        ControlState {
            classes: cfg.classes.clone(),
            table: cfg.table.iter().copied().collect(),
        }
    }

    /// Serve one request: validate it, have `exec` apply the command (the daemon: send it
    /// to the packet loop and wait; tests: call the engine), and build the answer. `kernel`
    /// adds the socket-level counters to a status answer.
    pub fn serve(
        &mut self,
        req: &Request,
        exec: impl FnOnce(Command) -> Result<Applied, CommandError>,
        kernel: &mut dyn FnMut(&mut Status),
    ) -> Response {
        let cmd = match to_command(req, &self.classes) {
            Ok(c) => c,
            Err(e) => return Response::err(format!("{e:#}")),
        };
        let applied = match self.apply(cmd, exec) {
            Ok(a) => a,
            Err(e) => return Response::err(e.to_string()),
        };
        answer(cmd, applied, &self.classes, &self.table, kernel)
    }

    /// Have `exec` apply a validated command and keep the table's mirror in step.
    pub fn apply(
        &mut self,
        cmd: Command,
        exec: impl FnOnce(Command) -> Result<Applied, CommandError>,
    ) -> Result<Applied, CommandError> {
        let applied = exec(cmd)?;
        match cmd {
            Command::AddIp { cidr, class } => {
                self.table.insert(cidr, class);
            }
            Command::DelIp(cidr) => {
                self.table.remove(&cidr);
            }
            Command::Reset => self.table.clear(),
            _ => {}
        }
        Ok(applied)
    }

    /// The address table as the packet loop has it.
    pub fn table(&self) -> &BTreeMap<Cidr, usize> {
        &self.table
    }
}

fn answer(
    cmd: Command,
    applied: Applied,
    classes: &[ClassSpec],
    table: &BTreeMap<Cidr, usize>,
    kernel: &mut dyn FnMut(&mut Status),
) -> Response {
    let name = |k: usize| classes[k].name.clone();
    match (cmd, applied) {
        (_, Applied::Snapshot(mut snap)) => {
            let names: Vec<String> = classes.iter().map(|c| c.name.clone()).collect();
            snap.table = table.iter().map(|(c, k)| (*c, *k)).collect();
            let mut st = snap.to_status(&names);
            kernel(&mut st);
            Response {
                status: Some(Box::new(st)),
                ..Response::ok("status")
            }
            .without_message()
        }
        (Command::Start, _) => Response::ok("started: requests are scheduled"),
        (Command::Stop, a) => Response::ok(format!(
            "stopped: {} held packets released in arrival order; everything now passes",
            released(&a)
        )),
        (Command::Reset, _) => Response::ok("address table and counters cleared"),
        (Command::SetPercentile { class, p }, _) => {
            Response::ok(format!("class {} percentile = {p}", name(class)))
        }
        (Command::SetDeadline(d), _) => Response::ok(format!("deadline = {}", d.describe())),
        (Command::SetBudget(Some(n)), _) => {
            Response::ok(format!("budget = {n} requests inside the server"))
        }
        (Command::SetBudget(None), _) => Response::ok("budget off: nothing is held"),
        (Command::AddIp { cidr, class }, _) => Response::ok(format!("{cidr} -> {}", name(class))),
        (Command::DelIp(cidr), _) => Response::ok(format!("{cidr} removed")),
        (Command::Snapshot, _) => Response::err("internal: status without a snapshot"),
    }
}

fn released(a: &Applied) -> usize {
    match a {
        Applied::Released(n) => *n,
        _ => 0,
    }
}

impl Response {
    fn without_message(mut self) -> Self {
        self.message = None;
        self
    }
}

/// What the packet loop answers a command with.
type Reply = Result<Applied, CommandError>;

/// The packet loop's end of the command channel (the daemons' one hand-off,
/// [`netsched_control::handoff`], and an eventfd to poll).
pub struct CommandInbox {
    inbox: handoff::Inbox<Command, Reply>,
    waker: netsched_sys::EventFd,
}

impl CommandInbox {
    /// The fd to poll: readable when commands wait.
    pub fn fd(&self) -> std::os::fd::RawFd {
        self.waker.fd()
    }

    /// Apply every waiting command (at most [`COMMAND_QUEUE`] per call) with `apply` and send
    /// each answer back. Never blocks. Returns how many were applied.
    pub fn serve(&self, mut apply: impl FnMut(Command) -> Result<Applied, CommandError>) -> usize {
        self.waker.drain();
        let mut n = 0;
        while n < COMMAND_QUEUE {
            let Some(env) = self.inbox.take() else { break };
            let answer = apply(env.command);
            // The control thread may have given up (timeout): the answer is dropped.
            env.answer(answer);
            n += 1;
        }
        if n == COMMAND_QUEUE {
            // More may wait: look again on the next turn of the loop.
            self.waker.wake();
        }
        n
    }
}

/// The control thread's end of the command channel.
#[derive(Clone)]
pub struct CommandOutbox {
    commands: handoff::Outbox<Command, Reply>,
    waker: std::sync::Arc<netsched_sys::EventFd>,
}

/// A bounded command channel between the control thread and the packet loop.
pub fn command_channel() -> Result<(CommandOutbox, CommandInbox)> {
    let (commands, inbox) = handoff::channel(COMMAND_QUEUE);
    let waker = netsched_sys::EventFd::new().context("eventfd for the command channel")?;
    let dup = waker
        .try_clone()
        .context("eventfd for the command channel")?;
    Ok((
        CommandOutbox {
            commands,
            waker: std::sync::Arc::new(dup),
        },
        CommandInbox { inbox, waker },
    ))
}

impl CommandOutbox {
    /// Send `cmd` to the packet loop and wait (at most `timeout`) for its answer.
    pub fn execute(&self, cmd: Command, timeout: Duration) -> Result<Applied, CommandError> {
        let pending = self.commands.send(cmd).map_err(|e| match e {
            HandOffError::Busy { waiting } => CommandError::Busy { waiting },
            HandOffError::Stopped | HandOffError::NoAnswer | HandOffError::Dropped => {
                CommandError::ShuttingDown
            }
        })?;
        self.waker.wake();
        // No answer in time, or the packet loop dropped the command: not applied (yet).
        pending
            .wait(std::time::Instant::now() + timeout)
            .unwrap_or(Err(CommandError::NotApplied { within: timeout }))
    }
}

/// The socket's bounds and ways (the one server of every daemon: [`netsched_control`]).
pub const SERVER: ServerConfig = ServerConfig {
    daemon: "netsched nfq",
    thread_name: "nfq-control",
    limits: Limits {
        max_connections: MAX_CONNECTIONS,
        max_line: MAX_REQUEST_BYTES,
        request_within: REQUEST_DEADLINE,
        answer_within: REQUEST_DEADLINE,
    },
    // Further clients wait in the listen backlog.
    when_full: WhenFull::Wait,
    line_end: LineEnd::Newline,
    bind: BindMode::Exclusive,
    // Below the packet loop when they share a CPU; best effort.
    nice: Some(CONTROL_NICE),
};

/// Nice level of the control threads (the packet loop keeps the process's).
pub const CONTROL_NICE: i32 = 10;

/// Remove `path` only if it is a Unix socket nobody listens on (what a killed daemon leaves).
/// `Ok(false)`: nothing there. A regular file, a directory, a symlink (even to a socket), or
/// a socket something answers on is an error naming it, and is left alone.
pub fn remove_stale_socket(path: &Path) -> Result<bool, BindError> {
    netsched_control::remove_stale_socket(path, SERVER.daemon)
}

/// The daemon's side of the server: a JSON line in, a JSON line out. `serve` runs on the
/// server's connection threads, one request at a time (it may wait for the packet loop, at
/// most [`COMMAND_TIMEOUT`]; it never runs in the packet loop).
struct JsonHandler<F> {
    serve: Mutex<F>,
}

impl<F: FnMut(&Request) -> Response + Send + 'static> Handler for JsonHandler<F> {
    fn answer(&self, r: &netsched_control::Request<'_>) -> String {
        let text = r.line.trim();
        let (resp, read_only) = match serde_json::from_str::<Request>(text) {
            Ok(req) => (
                (self.serve.lock().unwrap_or_else(|p| p.into_inner()))(&req),
                req.is_read_only(),
            ),
            Err(e) => (Response::err(format!("bad request {text:?}: {e}")), false),
        };
        let answer = answer_line(&resp);
        netsched_control::audit::log_request(r, read_only, &answer);
        answer
    }

    fn refusal(&self, why: &Refusal) -> Option<String> {
        let msg = match why {
            // Closed before a full line: nobody to answer.
            Refusal::Ended { .. } => return None,
            Refusal::Incomplete { within, .. } => {
                format!("request not complete within {} ms", within.as_millis())
            }
            Refusal::TooLong { max_line } => {
                format!("request longer than {max_line} bytes without a newline")
            }
            Refusal::NotUtf8 { .. } => format!("bad request: {why}"),
            other => other.to_string(),
        };
        Some(answer_line(&Response::err(msg)))
    }
}

/// The control socket, bound ([`ControlServer::bind`]) but not yet answering.
pub struct ControlServer {
    file: SocketFile,
}

/// The control socket being served; dropping it stops accepting and removes the socket file.
pub struct ServingControl {
    _server: Server,
}

impl ControlServer {
    /// Bind `path` (a stale socket from a killed daemon is replaced — see
    /// [`remove_stale_socket`]; anything else there is an error), mode 0660, group `group`.
    pub fn bind(path: &Path, group: Option<&str>) -> Result<Self, BindError> {
        Ok(ControlServer {
            file: SocketFile::bind(path, group, SERVER.bind, SERVER.daemon)?,
        })
    }

    /// Start answering: at most [`MAX_CONNECTIONS`] at once, each request line within
    /// [`REQUEST_DEADLINE`] and [`MAX_REQUEST_BYTES`], answered with `serve` (which may
    /// block: it runs on a control thread, never in the packet loop), the answer written
    /// within the same deadline. The threads are started here, in the caller's namespace.
    pub fn serve(
        self,
        serve: impl FnMut(&Request) -> Response + Send + 'static,
    ) -> Result<ServingControl, BindError> {
        let handler = Arc::new(JsonHandler {
            serve: Mutex::new(serve),
        });
        Ok(ServingControl {
            _server: Server::serve(self.file, SERVER, handler)?,
        })
    }
}

fn answer_line(r: &Response) -> String {
    let mut text = serde_json::to_string(r).unwrap_or_else(|e| {
        format!("{{\"ok\":false,\"error\":\"cannot encode the answer: {e}\"}}")
    });
    text.push('\n');
    text
}

/// Client side: send one request, wait (at most `timeout` for each read and write) for the
/// answer (the daemons' one client: [`netsched_control::exchange`]).
pub fn request_with_timeout(path: &Path, req: &Request, timeout: Duration) -> Result<Response> {
    let line = serde_json::to_string(req)?;
    let text = netsched_control::exchange(path, &line, timeout, "netsched nfq")?;
    let line = text.lines().next().unwrap_or("").trim();
    serde_json::from_str(line).map_err(|e| anyhow!("bad answer from the daemon {line:?}: {e}"))
}

/// Client side with the default timeout ([`CLIENT_TIMEOUT`]).
pub fn request(path: &Path, req: &Request) -> Result<Response> {
    request_with_timeout(path, req, CLIENT_TIMEOUT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Deadline, DisciplineKind};
    use crate::engine::Engine;
    use crate::netlink::{NF_INET_LOCAL_IN, NF_INET_LOCAL_OUT};
    use crate::packet::build_ipv4_tcp;
    use std::io::{Read, Write};
    use std::net::Ipv4Addr;
    use std::os::unix::net::{UnixListener, UnixStream};
    use std::sync::atomic::{AtomicBool, Ordering};

    fn engine(budget: Option<usize>) -> Engine {
        let mut c = Config {
            discipline: DisciplineKind::Percentile,
            budget,
            deadline: Deadline::Fixed(4_000_000),
            ..Config::default()
        };
        for (i, p) in [90u32, 80, 50].iter().enumerate() {
            c.classes.push(ClassSpec {
                name: format!("c{i}"),
                percentile: *p,
            });
        }
        c.default_class = 2;
        Engine::new(c).unwrap()
    }

    fn call(e: &mut Engine, json: &str) -> (Response, Vec<u32>) {
        let req: Request = serde_json::from_str(json).expect(json);
        let mut acc = Vec::new();
        // The engine's table as a daemon's control thread would have mirrored it.
        let mut state = ControlState {
            classes: e.cfg.classes.clone(),
            table: e.snapshot().table.into_iter().collect(),
        };
        let r = state.serve(&req, |c| e.apply(c, 0, &mut acc), &mut |_| {});
        (r, acc)
    }

    fn req_pkt(last: u8, port: u16) -> Vec<u8> {
        build_ipv4_tcp(
            Ipv4Addr::new(10, 0, 0, last),
            Ipv4Addr::new(10, 9, 0, 1),
            port,
            80,
            0x18,
            50,
        )
    }

    #[test]
    fn control_status_reports_every_class_and_the_table() {
        let mut e = engine(Some(2));
        let (r, _) = call(
            &mut e,
            r#"{"cmd":"add_ip","cidr":"10.0.0.0/24","class":"c0"}"#,
        );
        assert!(r.ok, "{r:?}");
        let (r, _) = call(&mut e, r#"{"cmd":"status"}"#);
        let st = r.status.unwrap();
        assert_eq!(st.classes.len(), 3);
        assert_eq!(st.budget, Some(2));
        assert_eq!(st.deadline_ns, 4_000_000);
        assert_eq!(
            st.table,
            vec![("10.0.0.0/24".to_string(), "c0".to_string())]
        );
        // `ctl show --json` prints this: every number named with its unit.
        let v = serde_json::to_value(&*st).unwrap();
        let bad = netsched_util::json_units::violations(&v);
        assert!(bad.is_empty(), "{bad:?}\n{v}");
        // `show` is the same request on the wire.
        let show: Request = serde_json::from_str(r#"{"cmd":"show"}"#).unwrap();
        assert!(show == Request::Status && show.is_read_only());
        let (r, _) = call(&mut e, r#"{"cmd":"show"}"#);
        assert!(r.ok, "{r:?}");
        assert_eq!(r.status.unwrap().classes.len(), 3);
        // JSON round trip of the whole answer.
        let back: Response = serde_json::from_str(
            &serde_json::to_string(&Response {
                status: Some(st.clone()),
                ..Response::ok("x")
            })
            .unwrap(),
        )
        .unwrap();
        assert_eq!(*back.status.unwrap(), *st);
    }

    #[test]
    fn control_set_percentile_deadline_budget_take_effect() {
        let mut e = engine(Some(1));
        assert!(
            call(&mut e, r#"{"cmd":"set_percentile","class":"c1","p":70}"#)
                .0
                .ok
        );
        assert_eq!(e.status().classes[1].percentile, 70);
        assert!(
            call(&mut e, r#"{"cmd":"set_percentile","class":"2","p":60}"#)
                .0
                .ok
        );
        assert_eq!(e.status().classes[2].percentile, 60);
        assert!(
            call(&mut e, r#"{"cmd":"set_deadline","deadline":"7ms"}"#)
                .0
                .ok
        );
        assert_eq!(e.deadline(), 7_000_000);
        assert!(
            call(&mut e, r#"{"cmd":"set_deadline","deadline":"auto"}"#)
                .0
                .ok
        );
        assert!(e.status().deadline_auto);
        assert_eq!(e.status().deadline_mode, "auto");
        assert!(
            call(
                &mut e,
                r#"{"cmd":"set_deadline","deadline":"auto_quantile"}"#
            )
            .0
            .ok
        );
        let st = e.status();
        assert_eq!(st.deadline_mode, "auto_quantile");
        assert!(st.deadline_quantile.is_some());
        // Budget 1: the second request waits; raising the budget releases it at once.
        let mut acc = Vec::new();
        e.on_packet(1, NF_INET_LOCAL_IN, &req_pkt(1, 1000), 0, &mut acc);
        e.on_packet(2, NF_INET_LOCAL_IN, &req_pkt(2, 1000), 0, &mut acc);
        assert_eq!(acc, vec![1]);
        let (r, rel) = call(&mut e, r#"{"cmd":"set_budget","budget":"2"}"#);
        assert!(r.ok);
        assert_eq!(rel, vec![2]);
        let (r, _) = call(&mut e, r#"{"cmd":"set_budget","budget":"off"}"#);
        assert!(r.ok);
        assert_eq!(e.status().budget, None);
    }

    #[test]
    fn control_bad_arguments_give_clear_errors() {
        let mut e = engine(None);
        let cases = [
            (r#"{"cmd":"set_percentile","class":"c9","p":70}"#, "c9"),
            (r#"{"cmd":"set_percentile","class":"c0","p":170}"#, "170"),
            (r#"{"cmd":"set_deadline","deadline":"soon"}"#, "soon"),
            (
                r#"{"cmd":"set_deadline","deadline":"auto-q"}"#,
                "auto_quantile",
            ),
            (r#"{"cmd":"set_budget","budget":"0"}"#, "budget 0"),
            (r#"{"cmd":"set_budget","budget":"x"}"#, "\"x\""),
            (
                r#"{"cmd":"add_ip","cidr":"10.0.0.0/33","class":"c0"}"#,
                "33",
            ),
            (
                r#"{"cmd":"add_ip","cidr":"10.0.0.0/8","class":"gold"}"#,
                "gold",
            ),
            (
                r#"{"cmd":"del_ip","cidr":"10.0.0.0/8"}"#,
                "not in the address table",
            ),
        ];
        for (json, needle) in cases {
            let (r, _) = call(&mut e, json);
            assert!(!r.ok, "{json}");
            let msg = r.error.unwrap();
            assert!(msg.contains(needle), "{json}: {msg}");
        }
    }

    #[test]
    fn control_stop_start_reset() {
        let mut e = engine(Some(1));
        let mut acc = Vec::new();
        call(&mut e, r#"{"cmd":"add_ip","cidr":"10.0.0.1","class":"c0"}"#);
        e.on_packet(1, NF_INET_LOCAL_IN, &req_pkt(1, 1000), 0, &mut acc);
        e.on_packet(2, NF_INET_LOCAL_IN, &req_pkt(2, 1000), 0, &mut acc);
        e.on_packet(3, NF_INET_LOCAL_IN, &req_pkt(3, 1000), 0, &mut acc);
        let (r, rel) = call(&mut e, r#"{"cmd":"stop"}"#);
        assert!(r.ok && !e.is_running());
        assert_eq!(rel, vec![2, 3]);
        assert!(call(&mut e, r#"{"cmd":"start"}"#).0.ok);
        assert!(e.is_running());
        let st = e.status();
        assert_eq!(st.classes[0].n, 1);
        assert!(call(&mut e, r#"{"cmd":"reset"}"#).0.ok);
        let st = e.status();
        assert_eq!(st.classes[0].n, 0);
        assert!(st.table.is_empty());
        // A response after reset must not panic or underflow.
        e.on_packet(
            4,
            NF_INET_LOCAL_OUT,
            &build_ipv4_tcp(
                Ipv4Addr::new(10, 9, 0, 1),
                Ipv4Addr::new(10, 0, 0, 1),
                80,
                1000,
                0x18,
                10,
            ),
            1,
            &mut acc,
        );
    }

    /// The control thread against a packet loop stand-in: round trip, unknown command,
    /// and the bounds (oversized line, a client that never finishes its line).
    #[test]
    fn control_socket_round_trip_bounds_and_unknown_command() {
        let dir = netsched_testbed::TempDir::new("nfqctl").unwrap();
        let path = dir.path().join("ctl.sock");
        let server = ControlServer::bind(&path, None).unwrap();
        // A second daemon on the same socket is refused.
        let e2 = format!("{:#}", ControlServer::bind(&path, None).err().unwrap());
        assert!(e2.contains("in use"), "{e2}");
        let (outbox, inbox) = command_channel().unwrap();
        let quit = std::sync::Arc::new(AtomicBool::new(false));
        let e = engine(None);
        let mut state = ControlState::new(&e.cfg);
        let control = server
            .serve(move |req| state.serve(req, |c| outbox.execute(c, COMMAND_TIMEOUT), &mut |_| {}))
            .unwrap();
        // The "packet loop": applies commands when woken.
        let q3 = std::sync::Arc::clone(&quit);
        let packet_loop = std::thread::spawn(move || {
            let mut e = e;
            let mut acc = Vec::new();
            while !q3.load(Ordering::Relaxed) {
                let mut fds = [libc::pollfd {
                    fd: inbox.fd(),
                    events: libc::POLLIN,
                    revents: 0,
                }];
                let _ = netsched_sys::poll(&mut fds, Duration::from_millis(10));
                inbox.serve(|c| e.apply(c, 0, &mut acc));
            }
        });
        let a = request(&path, &Request::Status).unwrap();
        assert!(a.ok && a.status.is_some(), "{a:?}");
        let a = request(
            &path,
            &Request::SetDeadline {
                deadline: "7ms".into(),
            },
        )
        .unwrap();
        assert_eq!(a.message.as_deref(), Some("deadline = 7ms"));
        // The control thread's mirror of the address table follows add / del / reset.
        let table = || {
            request(&path, &Request::Status)
                .unwrap()
                .status
                .unwrap()
                .table
        };
        let add = |cidr: &str| Request::AddIp {
            cidr: cidr.into(),
            class: "c1".into(),
        };
        assert!(request(&path, &add("10.1.0.0/16")).unwrap().ok);
        assert!(request(&path, &add("10.2.0.0/16")).unwrap().ok);
        assert!(
            request(
                &path,
                &Request::DelIp {
                    cidr: "10.1.0.0/16".into()
                }
            )
            .unwrap()
            .ok
        );
        assert_eq!(table(), vec![("10.2.0.0/16".to_string(), "c1".to_string())]);
        assert!(request(&path, &Request::Reset).unwrap().ok);
        assert!(table().is_empty());
        let line = |bytes: &[u8]| {
            let mut s = UnixStream::connect(&path).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let _ = s.write_all(bytes);
            let mut text = String::new();
            let _ = s.read_to_string(&mut text);
            text
        };
        let t = line(b"{\"cmd\":\"explode\"}\n");
        assert!(t.contains("\"ok\":false") && t.contains("explode"), "{t}");
        let t = line(&vec![b' '; MAX_REQUEST_BYTES + 10]);
        assert!(t.contains("longer than 4096 bytes"), "{t}");
        // A client that sends half a line and waits is cut off at the deadline.
        let t0 = std::time::Instant::now();
        let t = line(b"{\"cmd\":");
        let took = t0.elapsed();
        assert!(t.contains("not complete within"), "{t}");
        assert!(took >= REQUEST_DEADLINE, "{took:?}");
        assert!(took < REQUEST_DEADLINE * 4, "{took:?}");
        quit.store(true, Ordering::Relaxed);
        drop(control);
        packet_loop.join().unwrap();
        assert!(
            !path.exists(),
            "socket file removed when the server is dropped"
        );
    }

    /// Issue #10.6: a daemon that accepts but never answers: the client's error names the
    /// socket and the timeout (it said "Resource temporarily unavailable").
    #[test]
    fn client_timeout_names_socket_and_timeout() {
        let dir = netsched_testbed::TempDir::new("nfqto").unwrap();
        let path = dir.path().join("mute.sock");
        let _listener = UnixListener::bind(&path).unwrap();
        let e = format!(
            "{:#}",
            request_with_timeout(&path, &Request::Status, Duration::from_millis(200)).unwrap_err()
        );
        assert!(
            e.contains(&path.display().to_string()) && e.contains("within 200 ms"),
            "{e}"
        );
        assert!(!e.contains("temporarily unavailable"), "{e}");
    }

    #[test]
    fn only_a_stale_socket_is_removed() {
        let dir = netsched_testbed::TempDir::new("nfqsock").unwrap();
        // Nothing there: nothing to do.
        assert!(!remove_stale_socket(&dir.path().join("none")).unwrap());
        // A regular file, a directory, a symlink (to a file or to a stale socket): refused and
        // left as they were.
        let file = dir.create_file("f", b"data\n").unwrap();
        let sub = dir.path().join("d");
        std::fs::create_dir(&sub).unwrap();
        let stale = dir.path().join("stale.sock");
        drop(UnixListener::bind(&stale).unwrap());
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&stale, &link).unwrap();
        for (p, what) in [
            (&file, "regular file"),
            (&sub, "directory"),
            (&link, "symbolic link"),
        ] {
            let e = format!("{:#}", remove_stale_socket(p).unwrap_err());
            assert!(e.contains(what) && e.contains("refusing"), "{e}");
            assert!(
                std::fs::symlink_metadata(p).is_ok(),
                "{} left alone",
                p.display()
            );
            // Binding the daemon there fails the same way.
            assert!(ControlServer::bind(p, None).is_err());
        }
        assert_eq!(std::fs::read(&file).unwrap(), b"data\n");
        // A live socket: refused, left.
        let live = dir.path().join("live.sock");
        let listener = UnixListener::bind(&live).unwrap();
        let e = format!("{:#}", remove_stale_socket(&live).unwrap_err());
        assert!(e.contains("in use"), "{e}");
        drop(listener);
        // The stale one (nobody listens): removed.
        assert!(remove_stale_socket(&stale).unwrap());
        assert!(std::fs::symlink_metadata(&stale).is_err());
        let _ = std::fs::remove_file(&live);
    }
}

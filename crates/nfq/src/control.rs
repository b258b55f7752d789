//! The control protocol: the thesis's ioctl API (P0 §3.2.5, Table 9: `perStart`, `perStop`,
//! `perReset`, `perGetStatus`, `perSetPvalue`, `perSetNvalue`, `perAddIP`, `perDeleteIP`)
//! carried as one text line per request over a Unix stream socket, the dialect of every
//! daemon's control socket (`netsched_control::line_handler`).
//!
//! Request: the verb line `netsched nfq ctl` takes, e.g. `set-percentile gold 90\n` or
//! `show --json\n`; the daemon parses it with the client's own definition of the verbs
//! ([`CtlCmd`], through clap), so the verbs and their arguments are declared once. Answer:
//! `ok\n` and text (`show`: the status table `ctl show` prints; `show --json`: the status
//! object), or one line `error: <why>` naming the unknown verb or the bad argument. One
//! request per connection.
//!
//! Deprecated, for one release: a line starting with `{` is read as a request of the
//! JSON dialect ([`Request`], `{"cmd":"set_percentile","class":"c0","p":90}`) and answered
//! in its form ([`Response`]: `{"ok":true,"message":"..."}`, `{"ok":false,"error":"..."}`,
//! `"status"` for `status`), with a warning in the log for each such connection. Both
//! dialects end in the same [`CtlCmd`] and the same validation.
//!
//! Access: the socket file is mode 0660, owned by root and by the configured group; on each
//! connection the peer's credentials (`SO_PEERCRED`) are checked again: root, the daemon's own
//! user, or a member (primary or supplementary) of the group — the one rule of
//! `netsched_control::access`, shared by every daemon.
//!
//! ## Off the packet path
//! The daemon serves the socket from control threads (the one server of every daemon,
//! `netsched_control`, started by [`ControlServer::serve`]): at most [`MAX_CONNECTIONS`]
//! connections at once (the oldest still silent closed for a newcomer, else the rest wait in
//! the kernel's listen backlog), each with
//! [`REQUEST_DEADLINE`] for its line — however the bytes trickle in — and as long again to
//! take its answer, and at most [`MAX_REQUEST_BYTES`] for its line. A control thread parses
//! and validates the request, runs the slow parts (iptables counters, /proc, formatting)
//! itself, one request at a time, and hands the packet loop only a small validated
//! [`Command`](crate::engine::Command) over a bounded channel; the packet loop applies it
//! between two packet batches and answers with a copy ([`Applied`]). Nothing a client does
//! can make the packet loop wait for it.
//!
//! Cost per request, on a control thread: a clap parse of a few words (tens of µs), the
//! validation, one command through the channel and the answer's formatting.

pub use crate::command_error::CommandError;
use crate::config::{parse_cidr, parse_deadline, resolve_class, Cidr, ClassSpec, Config};
use crate::config_error::ConfigError;
use crate::engine::{Applied, Command, Status};
use crate::verbs::format_status;
pub use crate::verbs::CtlCmd;
use clap::{CommandFactory, Parser};
use netsched_control::socket_file::SocketFile;
use netsched_control::{
    handoff, BindError, BindMode, ClientError, HandOffError, Handler, Limits, LineEnd, OkOrError,
    Refusal, Server, ServerConfig, WhenFull,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Control connections served at once; one more takes the place of the oldest one still
/// without its line (`netsched_control::server`), or, with none such, waits in the listen
/// backlog.
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

/// The warning logged for each connection that speaks the JSON dialect.
pub const JSON_DEPRECATED: &str =
    "the JSON control dialect is deprecated; send `VERB ARGS` lines, docs/nfq.md";

/// A request line: `netsched nfq ctl`'s verbs and arguments, without the program name.
#[derive(Debug, Parser)]
#[command(
    name = "netsched nfq ctl",
    no_binary_name = true,
    disable_help_subcommand = true,
    color = clap::ColorChoice::Never
)]
struct CtlLine {
    #[command(subcommand)]
    cmd: CtlCmd,
}

/// Parse a request line (split on whitespace) as `netsched nfq ctl` parses its arguments.
/// A line clap refuses is [`ControlError::Usage`] with clap's words (the verb or argument
/// it could not take).
pub fn parse_line(line: &str) -> Result<CtlCmd, ControlError> {
    let words: Vec<&str> = line.split_whitespace().collect();
    if words.is_empty() {
        let verbs: Vec<String> = CtlLine::command()
            .get_subcommands()
            .map(|c| c.get_name().to_string())
            .collect();
        return Err(ControlError::Usage(format!(
            "empty request: send one of {}",
            verbs.join(", ")
        )));
    }
    CtlLine::try_parse_from(words)
        .map(|l| l.cmd)
        .map_err(|e| ControlError::Usage(clap_message(&e)))
}

/// Clap's message for `e` on one line: its first paragraph, without the `error: ` prefix
/// (the answer adds its own) and without the usage and tips below.
fn clap_message(e: &clap::Error) -> String {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        return "help is not served on the control socket: see `netsched nfq ctl --help`".into();
    }
    let text = e.to_string();
    let first = text.split("\n\n").next().unwrap_or("");
    let words: Vec<&str> = first
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let joined = words.join(" ");
    joined
        .strip_prefix("error: ")
        .unwrap_or(&joined)
        .to_string()
}

/// True for a verb (or alias) that only reads: `show` (not logged: a dashboard polls it).
fn read_only(verb: &str) -> bool {
    CtlLine::command()
        .find_subcommand(verb)
        .is_some_and(|c| c.get_name() == "show")
}

/// Why a request was not done; the text is the answer's `error: …` (or the JSON `"error"`).
#[derive(Debug)]
pub enum ControlError {
    /// The line is not a verb of `netsched nfq ctl` with its arguments (clap's words).
    Usage(String),
    /// An argument is well formed but wrong here: the class, percentile, prefix, duration.
    Invalid(ConfigError),
    /// `reload` reached the packet loop's hand-off, or a status came back without its
    /// snapshot: a request this side serves in the wrong place (the text says which).
    Internal(&'static str),
    /// The packet loop did not apply the command.
    Command(CommandError),
    /// The configuration was not reloaded.
    Reload(String),
    /// The status could not be written as JSON.
    Encode(serde_json::Error),
}

impl fmt::Display for ControlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ControlError::Usage(m) | ControlError::Reload(m) => f.write_str(m),
            ControlError::Invalid(e) => write!(f, "{e}"),
            ControlError::Internal(what) => write!(f, "internal: {what}"),
            ControlError::Command(e) => write!(f, "{e}"),
            ControlError::Encode(e) => write!(f, "cannot encode the answer: {e}"),
        }
    }
}

impl std::error::Error for ControlError {}

impl From<CommandError> for ControlError {
    fn from(e: CommandError) -> Self {
        ControlError::Command(e)
    }
}

/// What a request came to: a sentence, or the status (worded by the dialect).
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    Done(String),
    Status(Box<Status>),
}

/// The outcome of one request.
pub type Served = Result<Answer, ControlError>;

/// The text dialect's answer to `cmd` (after `ok\n`): a sentence, the status table, or the
/// status as JSON for `show --json`.
pub fn answer_text(cmd: &CtlCmd, served: Served) -> Result<String, ControlError> {
    match served? {
        Answer::Done(msg) => Ok(msg + "\n"),
        Answer::Status(st) if matches!(cmd, CtlCmd::Show { json: true }) => {
            serde_json::to_string_pretty(&st)
                .map(|t| t + "\n")
                .map_err(ControlError::Encode)
        }
        Answer::Status(st) => Ok(format_status(&st)),
    }
}

/// One request of the deprecated JSON dialect (read when a line starts with `{`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    Start,
    Stop,
    Reset,
    /// `{"cmd":"status"}`, also `{"cmd":"show"}`.
    #[serde(alias = "show")]
    Status,
    SetPercentile {
        class: String,
        p: i64,
    },
    SetDeadline {
        deadline: String,
    },
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
    Reload,
}

impl Request {
    /// The verb it stands for (its answer is the JSON [`Response`]).
    pub fn to_ctl(&self) -> CtlCmd {
        match self.clone() {
            Request::Start => CtlCmd::Start,
            Request::Stop => CtlCmd::Stop,
            Request::Reset => CtlCmd::Reset,
            Request::Status => CtlCmd::Show { json: true },
            Request::SetPercentile { class, p } => CtlCmd::SetPercentile { class, p },
            Request::SetDeadline { deadline } => CtlCmd::SetDeadline { deadline },
            Request::SetBudget { budget } => CtlCmd::SetBudget { budget },
            Request::AddIp { cidr, class } => CtlCmd::AddIp { cidr, class },
            Request::DelIp { cidr } => CtlCmd::DelIp { cidr },
            Request::Reload => CtlCmd::Reload,
        }
    }
}

/// The deprecated JSON dialect's answer.
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
    pub fn err(msg: impl Into<String>) -> Self {
        Response {
            ok: false,
            message: None,
            error: Some(msg.into()),
            status: None,
        }
    }
}

impl From<Served> for Response {
    fn from(served: Served) -> Self {
        let ok = |message, status| Response {
            ok: true,
            message,
            error: None,
            status,
        };
        match served {
            Ok(Answer::Done(m)) => ok(Some(m), None),
            Ok(Answer::Status(st)) => ok(None, Some(st)),
            Err(e) => Response::err(e.to_string()),
        }
    }
}

pub fn parse_budget(s: &str) -> Result<Option<usize>, ConfigError> {
    match s.trim() {
        "off" | "none" => Ok(None),
        t => {
            let n: usize = t
                .parse()
                .map_err(|_| ConfigError::BadBudget(s.to_string()))?;
            if n == 0 {
                return Err(ConfigError::ZeroBudget);
            }
            Ok(Some(n))
        }
    }
}

/// Validate a verb against the daemon's classes: everything that can be wrong with it is
/// found here, in the control thread. `reload` is no packet-loop command.
pub fn to_command(cmd: &CtlCmd, classes: &[ClassSpec]) -> Result<Command, ControlError> {
    to_packet_command(cmd, classes)
        .map_err(ControlError::Invalid)?
        .ok_or(ControlError::Internal(
            "reload is not a packet-loop command (the control thread serves it)",
        ))
}

/// [`to_command`]'s checks; `None` for `reload`.
fn to_packet_command(cmd: &CtlCmd, classes: &[ClassSpec]) -> Result<Option<Command>, ConfigError> {
    Ok(Some(match cmd {
        CtlCmd::Start => Command::Start,
        CtlCmd::Stop => Command::Stop,
        CtlCmd::Reset => Command::Reset,
        CtlCmd::Show { .. } => Command::Snapshot,
        CtlCmd::SetPercentile { class, p } => Command::SetPercentile {
            class: resolve_class(classes, class)?,
            p: crate::config::validate_percentile(*p)?,
        },
        CtlCmd::SetDeadline { deadline } => Command::SetDeadline(parse_deadline(deadline)?),
        CtlCmd::SetBudget { budget } => Command::SetBudget(parse_budget(budget)?),
        CtlCmd::AddIp { cidr, class } => Command::AddIp {
            cidr: parse_cidr(cidr)?,
            class: resolve_class(classes, class)?,
        },
        CtlCmd::DelIp { cidr } => Command::DelIp(parse_cidr(cidr)?),
        CtlCmd::Reload => return Ok(None),
    }))
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
        cmd: &CtlCmd,
        exec: impl FnOnce(Command) -> Result<Applied, CommandError>,
        kernel: &mut dyn FnMut(&mut Status),
    ) -> Served {
        let cmd = to_command(cmd, &self.classes)?;
        let applied = self.apply(cmd, exec)?;
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
) -> Served {
    let name = |k: usize| classes[k].name.clone();
    let done = |m: String| Ok(Answer::Done(m));
    match (cmd, applied) {
        (_, Applied::Snapshot(mut snap)) => {
            let names: Vec<String> = classes.iter().map(|c| c.name.clone()).collect();
            snap.table = table.iter().map(|(c, k)| (*c, *k)).collect();
            let mut st = snap.to_status(&names);
            kernel(&mut st);
            Ok(Answer::Status(Box::new(st)))
        }
        (Command::Start, _) => done("started: requests are scheduled".into()),
        (Command::Stop, a) => done(format!(
            "stopped: {} held packets released in arrival order; everything now passes",
            released(&a)
        )),
        (Command::Reset, _) => done("address table and counters cleared".into()),
        (Command::SetPercentile { class, p }, _) => {
            done(format!("class {} percentile = {p}", name(class)))
        }
        (Command::SetDeadline(d), _) => done(format!("deadline = {}", d.describe())),
        (Command::SetBudget(Some(n)), _) => {
            done(format!("budget = {n} requests inside the server"))
        }
        (Command::SetBudget(None), _) => done("budget off: nothing is held".into()),
        (Command::AddIp { cidr, class }, _) => done(format!("{cidr} -> {}", name(class))),
        (Command::DelIp(cidr), _) => done(format!("{cidr} removed")),
        (Command::Snapshot, _) => Err(ControlError::Internal("status without a snapshot")),
    }
}

fn released(a: &Applied) -> usize {
    match a {
        Applied::Released(n) => *n,
        _ => 0,
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
pub fn command_channel() -> std::io::Result<(CommandOutbox, CommandInbox)> {
    let (commands, inbox) = handoff::channel(COMMAND_QUEUE);
    let named = |e: std::io::Error| {
        std::io::Error::new(e.kind(), format!("eventfd for the command channel: {e}"))
    };
    let waker = netsched_sys::EventFd::new().map_err(named)?;
    let dup = waker.try_clone().map_err(named)?;
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

/// The daemon's function that serves a verb (on a control thread, one request at a time; it
/// may wait for the packet loop, at most [`COMMAND_TIMEOUT`]; it never runs in the packet
/// loop).
type ServeFn = Mutex<Box<ServeVerb>>;

/// Serves one verb: the daemon's function given to [`ControlServer::serve`].
type ServeVerb = dyn FnMut(&CtlCmd) -> Served + Send;

/// The text dialect's function for the shared line handler: parse, serve, word.
type LineFn = Box<dyn Fn(&str, Instant) -> Result<String, ControlError> + Send + Sync>;

/// The daemon's side of the server: a verb line answered through the shared line handler
/// ([`OkOrError`]: `ok\n…` / `error: …`, the audit log), or a JSON line (deprecated)
/// answered in JSON. Refusals (line too long, incomplete, not UTF-8) are `error: …` lines.
struct Dialects {
    lines: OkOrError<LineFn>,
    serve: Arc<ServeFn>,
}

impl Dialects {
    fn new(serve: impl FnMut(&CtlCmd) -> Served + Send + 'static) -> Self {
        let serve: Arc<ServeFn> = Arc::new(Mutex::new(Box::new(serve)));
        let for_lines = Arc::clone(&serve);
        let line: LineFn = Box::new(move |line: &str, _deadline| {
            let cmd = parse_line(line)?;
            let served = (lock(&for_lines))(&cmd);
            answer_text(&cmd, served)
        });
        Dialects {
            lines: OkOrError(line, read_only),
            serve,
        }
    }

    /// The deprecated JSON dialect: one `{"cmd":…}` line, one JSON answer, and the warning
    /// (one request per connection, so once per connection).
    fn answer_json(&self, r: &netsched_control::Request<'_>) -> String {
        let (uid, pid) = (r.peer.uid, r.peer.pid);
        tracing::warn!(uid, pid, "{JSON_DEPRECATED}");
        let text = r.line.trim();
        let (resp, read_only) = match serde_json::from_str::<Request>(text) {
            Ok(req) => {
                let cmd = req.to_ctl();
                let served = (lock(&self.serve))(&cmd);
                (Response::from(served), req == Request::Status)
            }
            Err(e) => (Response::err(format!("bad request {text:?}: {e}")), false),
        };
        let mut answer = serde_json::to_string(&resp).unwrap_or_else(|e| {
            format!("{{\"ok\":false,\"error\":\"cannot encode the answer: {e}\"}}")
        });
        answer.push('\n');
        netsched_control::audit::log_request(r, read_only, &answer);
        answer
    }
}

fn lock(serve: &ServeFn) -> std::sync::MutexGuard<'_, Box<ServeVerb>> {
    serve.lock().unwrap_or_else(|p| p.into_inner())
}

impl Handler for Dialects {
    fn answer(&self, r: &netsched_control::Request<'_>) -> String {
        if r.line.trim_start().starts_with('{') {
            self.answer_json(r)
        } else {
            self.lines.answer(r)
        }
    }

    fn refusal(&self, why: &Refusal) -> Option<String> {
        match why {
            // Closed before a full line: nobody to answer.
            Refusal::Ended { .. } => None,
            other => self.lines.refusal(other),
        }
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
    /// [`REQUEST_DEADLINE`] and [`MAX_REQUEST_BYTES`], its verb served with `serve` (which
    /// may block: it runs on a control thread, never in the packet loop), the answer written
    /// within the same deadline. The threads are started here, in the caller's namespace.
    pub fn serve(
        self,
        serve: impl FnMut(&CtlCmd) -> Served + Send + 'static,
    ) -> Result<ServingControl, BindError> {
        Ok(ServingControl {
            _server: Server::serve(self.file, SERVER, Arc::new(Dialects::new(serve)))?,
        })
    }
}

/// Client side: send one verb line (`show --json`), wait (at most `timeout` for each read
/// and write) for the answer; the text after `ok`, or the daemon's error (the daemons' one
/// client: [`netsched_control::request_line`]).
pub fn request_with_timeout(
    path: &Path,
    line: &str,
    timeout: Duration,
) -> Result<String, ClientError> {
    netsched_control::request_line(path, line, timeout, "netsched nfq")
}

/// Client side with the default timeout ([`CLIENT_TIMEOUT`]).
pub fn request(path: &Path, line: &str) -> Result<String, ClientError> {
    request_with_timeout(path, line, CLIENT_TIMEOUT)
}

/// Why [`status`] has no status: the request failed, or its answer is not the status
/// document.
#[derive(Debug)]
pub enum StatusError {
    Request(ClientError),
    Decode {
        text: String,
        source: serde_json::Error,
    },
}

impl fmt::Display for StatusError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StatusError::Request(e) => write!(f, "{e}"),
            StatusError::Decode { text, source } => {
                write!(f, "bad status from the daemon: {text:?}: {source}")
            }
        }
    }
}

impl std::error::Error for StatusError {}

/// The daemon's status (`show --json`), as a client reads it.
pub fn status(path: &Path) -> Result<Status, StatusError> {
    let text = request(path, "show --json").map_err(StatusError::Request)?;
    serde_json::from_str(&text).map_err(|source| StatusError::Decode { text, source })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Deadline, DisciplineKind};
    use crate::engine::Engine;
    use crate::netlink::{NF_INET_LOCAL_IN, NF_INET_LOCAL_OUT};
    use crate::packet::build_ipv4_tcp;
    use netsched_control::LogCapture;
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

    /// One request line against `e`, as a control thread serves it: its `ok` text or its
    /// error, and the packets it released.
    fn call(e: &mut Engine, line: &str) -> (Result<String, ControlError>, Vec<u32>) {
        let mut acc = Vec::new();
        // The engine's table as a daemon's control thread would have mirrored it.
        let mut state = ControlState {
            classes: e.cfg.classes.clone(),
            table: e.snapshot().table.into_iter().collect(),
        };
        let r = parse_line(line).and_then(|cmd| {
            let served = state.serve(&cmd, |c| e.apply(c, 0, &mut acc), &mut |_| {});
            answer_text(&cmd, served)
        });
        (r, acc)
    }

    fn ok(e: &mut Engine, line: &str) -> String {
        call(e, line)
            .0
            .unwrap_or_else(|err| panic!("{line}: {err}"))
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
        assert_eq!(ok(&mut e, "add-ip 10.0.0.0/24 c0"), "10.0.0.0/24 -> c0\n");
        let st: Status = serde_json::from_str(&ok(&mut e, "show --json")).unwrap();
        assert_eq!(st.classes.len(), 3);
        assert_eq!(st.budget, Some(2));
        assert_eq!(st.deadline_ns, 4_000_000);
        assert_eq!(
            st.table,
            vec![("10.0.0.0/24".to_string(), "c0".to_string())]
        );
        // `ctl show --json` prints this: every number named with its unit.
        let v = serde_json::to_value(&st).unwrap();
        let bad = netsched_util::json_units::violations(&v);
        assert!(bad.is_empty(), "{bad:?}\n{v}");
        // `show` is the table `ctl show` prints; `status` is its alias; neither is logged.
        let table = ok(&mut e, "show");
        assert!(table.starts_with("state: running"), "{table}");
        assert!(
            table.contains("10.0.0.0/24") && table.contains("c0"),
            "{table}"
        );
        assert_eq!(ok(&mut e, "status"), table);
        assert!(read_only("show") && read_only("status") && !read_only("reset"));
        // The deprecated JSON answer carries the same status.
        let cmd = Request::Status.to_ctl();
        let mut state = ControlState::new(&e.cfg);
        let resp =
            Response::from(state.serve(&cmd, |c| e.apply(c, 0, &mut Vec::new()), &mut |_| {}));
        assert!(resp.ok && resp.message.is_none());
        assert_eq!(resp.status.unwrap().classes.len(), 3);
    }

    #[test]
    fn control_set_percentile_deadline_budget_take_effect() {
        let mut e = engine(Some(1));
        assert_eq!(
            ok(&mut e, "set-percentile c1 70"),
            "class c1 percentile = 70\n"
        );
        assert_eq!(e.status().classes[1].percentile, 70);
        ok(&mut e, "set-percentile 2 60");
        assert_eq!(e.status().classes[2].percentile, 60);
        assert_eq!(ok(&mut e, "set-deadline 7ms"), "deadline = 7ms\n");
        assert_eq!(e.deadline(), 7_000_000);
        ok(&mut e, "  set-deadline\tauto  ");
        assert!(e.status().deadline_auto);
        assert_eq!(e.status().deadline_mode, "auto");
        ok(&mut e, "set-deadline auto_quantile");
        let st = e.status();
        assert_eq!(st.deadline_mode, "auto_quantile");
        assert!(st.deadline_quantile.is_some());
        // Budget 1: the second request waits; raising the budget releases it at once.
        let mut acc = Vec::new();
        e.on_packet(1, NF_INET_LOCAL_IN, &req_pkt(1, 1000), 0, &mut acc);
        e.on_packet(2, NF_INET_LOCAL_IN, &req_pkt(2, 1000), 0, &mut acc);
        assert_eq!(acc, vec![1]);
        let (r, rel) = call(&mut e, "set-budget 2");
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(rel, vec![2]);
        ok(&mut e, "set-budget off");
        assert_eq!(e.status().budget, None);
    }

    #[test]
    fn control_bad_arguments_give_clear_errors() {
        let mut e = engine(None);
        let cases = [
            // Refused by the verbs' one definition (clap): the verb or argument named.
            ("explode", "unrecognized subcommand 'explode'"),
            ("set-percentile c0 x", "invalid value 'x' for '<P>'"),
            ("set-percentile c0", "<P>"),
            ("show --yaml", "unexpected argument '--yaml'"),
            ("start now", "unexpected argument 'now'"),
            ("   ", "empty request: send one of start, stop, reset, show"),
            ("show --help", "help is not served"),
            // Refused by the daemon's validation.
            ("set-percentile c9 70", "c9"),
            ("set-percentile c0 170", "170"),
            ("set-deadline soon", "soon"),
            ("set-deadline auto-q", "auto_quantile"),
            ("set-budget 0", "budget = 0"),
            ("set-budget x", "\"x\""),
            ("add-ip 10.0.0.0/33 c0", "33"),
            ("add-ip 10.0.0.0/8 gold", "gold"),
            ("del-ip 10.0.0.0/8", "not in the address table"),
        ];
        for (line, needle) in cases {
            let msg = match call(&mut e, line).0 {
                Ok(t) => panic!("{line:?} answered ok: {t}"),
                Err(err) => err.to_string(),
            };
            assert!(msg.contains(needle), "{line:?}: {msg}");
            assert!(
                !msg.contains('\n') && !msg.starts_with("error"),
                "{line:?}: {msg}"
            );
        }
    }

    #[test]
    fn control_stop_start_reset() {
        let mut e = engine(Some(1));
        let mut acc = Vec::new();
        ok(&mut e, "add-ip 10.0.0.1 c0");
        e.on_packet(1, NF_INET_LOCAL_IN, &req_pkt(1, 1000), 0, &mut acc);
        e.on_packet(2, NF_INET_LOCAL_IN, &req_pkt(2, 1000), 0, &mut acc);
        e.on_packet(3, NF_INET_LOCAL_IN, &req_pkt(3, 1000), 0, &mut acc);
        let (r, rel) = call(&mut e, "stop");
        assert!(r.unwrap().starts_with("stopped: 2 held packets released"));
        assert!(!e.is_running());
        assert_eq!(rel, vec![2, 3]);
        ok(&mut e, "start");
        assert!(e.is_running());
        let st = e.status();
        assert_eq!(st.classes[0].n, 1);
        ok(&mut e, "reset");
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

    /// A daemon's control socket against a packet loop stand-in; `quit` stops the loop.
    fn serve_engine(path: &Path) -> (ServingControl, Arc<AtomicBool>, std::thread::JoinHandle<()>) {
        let server = ControlServer::bind(path, None).unwrap();
        // A second daemon on the same socket is refused.
        let e2 = format!("{:#}", ControlServer::bind(path, None).err().unwrap());
        assert!(e2.contains("in use"), "{e2}");
        let (outbox, inbox) = command_channel().unwrap();
        let quit = Arc::new(AtomicBool::new(false));
        let e = engine(None);
        let mut state = ControlState::new(&e.cfg);
        let control = server
            .serve(move |cmd| state.serve(cmd, |c| outbox.execute(c, COMMAND_TIMEOUT), &mut |_| {}))
            .unwrap();
        // The "packet loop": applies commands when woken.
        let q3 = Arc::clone(&quit);
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
        (control, quit, packet_loop)
    }

    /// Send raw bytes, read the whole answer.
    fn raw(path: &Path, bytes: &[u8]) -> String {
        let mut s = UnixStream::connect(path).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = s.write_all(bytes);
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        text
    }

    /// The control thread against a packet loop stand-in: round trip, unknown verb, a bad
    /// argument, and the bounds (oversized line, a client that never finishes its line).
    #[test]
    fn control_socket_round_trip_bounds_and_unknown_command() {
        let dir = netsched_testbed::TempDir::new("nfqctl").unwrap();
        let path = dir.path().join("ctl.sock");
        let (control, quit, packet_loop) = serve_engine(&path);
        let st = status(&path).unwrap();
        assert_eq!(st.classes.len(), 3);
        assert!(request(&path, "show")
            .unwrap()
            .starts_with("state: running"));
        assert_eq!(
            request(&path, "set-deadline 7ms").unwrap(),
            "deadline = 7ms\n"
        );
        // The control thread's mirror of the address table follows add / del / reset.
        let table = || status(&path).unwrap().table;
        assert!(request(&path, "add-ip 10.1.0.0/16 c1").is_ok());
        assert!(request(&path, "add-ip 10.2.0.0/16 c1").is_ok());
        assert!(request(&path, "del-ip 10.1.0.0/16").is_ok());
        assert_eq!(table(), vec![("10.2.0.0/16".to_string(), "c1".to_string())]);
        assert!(request(&path, "reset").is_ok());
        assert!(table().is_empty());
        // Errors: one `error:` line naming the verb or the argument.
        let t = raw(&path, b"explode 3\n");
        assert_eq!(t, "error: unrecognized subcommand 'explode'\n");
        let e = request(&path, "set-percentile c0 ninety")
            .unwrap_err()
            .to_string();
        // As docs/nfq.md shows it.
        assert_eq!(
            e,
            "invalid value 'ninety' for '<P>': invalid digit found in string"
        );
        let e = request(&path, "set-percentile gold 90")
            .unwrap_err()
            .to_string();
        assert!(e.contains("gold"), "{e}");
        // The bounds.
        let t = raw(&path, &vec![b's'; MAX_REQUEST_BYTES + 10]);
        assert_eq!(t, "error: request longer than 4096 bytes\n");
        // A client that sends half a line and waits is cut off at the deadline.
        let t0 = std::time::Instant::now();
        let t = raw(&path, b"set-perc");
        let took = t0.elapsed();
        assert!(
            t.starts_with("error: no complete request line within"),
            "{t}"
        );
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

    /// Deprecated for one release: a JSON line is still answered in JSON, and logged with the
    /// deprecation warning.
    #[test]
    fn control_json_dialect_still_answers_deprecated() {
        let dir = netsched_testbed::TempDir::new("nfqjson").unwrap();
        let path = dir.path().join("ctl.sock");
        let (control, quit, packet_loop) = serve_engine(&path);
        let t = raw(&path, b"{\"cmd\":\"set_deadline\",\"deadline\":\"7ms\"}\n");
        assert_eq!(t, "{\"ok\":true,\"message\":\"deadline = 7ms\"}\n");
        let t = raw(&path, b"{\"cmd\":\"status\"}\n");
        let r: Response = serde_json::from_str(t.trim()).unwrap();
        assert!(r.ok && r.message.is_none(), "{t}");
        assert_eq!(r.status.unwrap().deadline_ns, 7_000_000);
        let t = raw(&path, b"{\"cmd\":\"explode\"}\n");
        assert!(
            t.starts_with("{\"ok\":false,\"error\":\"bad request") && t.contains("explode"),
            "{t}"
        );
        let t = raw(
            &path,
            b"{\"cmd\":\"set_percentile\",\"class\":\"c9\",\"p\":70}\n",
        );
        assert!(t.starts_with("{\"ok\":false") && t.contains("c9"), "{t}");
        quit.store(true, Ordering::Relaxed);
        drop(control);
        packet_loop.join().unwrap();

        // The warning, from the handler itself (the server's threads log elsewhere).
        let out = LogCapture::default();
        let sink = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || sink.clone())
            .with_ansi(false)
            .finish();
        let handler = Dialects::new(|_: &CtlCmd| Ok(Answer::Done("started".into())));
        let request = |line| netsched_control::Request {
            line,
            peer: netsched_sys::PeerCred {
                pid: 42,
                uid: 7,
                gid: 7,
            },
            deadline: Instant::now(),
        };
        let (json, text) = tracing::subscriber::with_default(subscriber, || {
            (
                handler.answer(&request("{\"cmd\":\"start\"}")),
                handler.answer(&request("start")),
            )
        });
        assert_eq!(json, "{\"ok\":true,\"message\":\"started\"}\n");
        assert_eq!(text, "ok\nstarted\n");
        let log = out.text();
        assert_eq!(log.matches(JSON_DEPRECATED).count(), 1, "{log}");
        assert!(log.contains("uid=7"), "{log}");
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
            request_with_timeout(&path, "show", Duration::from_millis(200)).unwrap_err()
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

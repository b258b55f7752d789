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
//! `netsched_testbed::access`, shared by every daemon.
//!
//! ## Off the packet path
//! The daemon serves the socket from its own control thread ([`ControlServer::run`]): it
//! accepts at most [`MAX_CONNECTIONS`] connections at once (the rest wait in the kernel's
//! listen backlog), gives each [`REQUEST_DEADLINE`] for the whole request — connect to
//! answer written, however the bytes trickle in — and at most [`MAX_REQUEST_BYTES`] for its
//! line. It parses and validates the request, runs the slow parts (iptables counters, /proc,
//! formatting) itself, and hands the packet loop only a small validated
//! [`Command`](crate::engine::Command) over a bounded channel; the packet loop applies it
//! between two packet batches and answers with a copy ([`Applied`]). Nothing a client does
//! can make the packet loop wait for it.

use crate::config::{parse_cidr, parse_deadline, resolve_class, Cidr, ClassSpec, Config};
use crate::engine::{Applied, Command, Status};
use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::time::{Duration, Instant};

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
    fn ok(msg: impl Into<String>) -> Self {
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
        exec: impl FnOnce(Command) -> Result<Applied, String>,
        kernel: &mut dyn FnMut(&mut Status),
    ) -> Response {
        let cmd = match to_command(req, &self.classes) {
            Ok(c) => c,
            Err(e) => return Response::err(format!("{e:#}")),
        };
        let applied = match exec(cmd) {
            Ok(a) => a,
            Err(e) => return Response::err(e),
        };
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
        answer(cmd, applied, &self.classes, &self.table, kernel)
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

/// A command on its way to the packet loop, with the channel its answer goes back on.
pub struct Envelope {
    pub cmd: Command,
    pub reply: SyncSender<Result<Applied, String>>,
}

/// The packet loop's end of the command channel.
pub struct CommandInbox {
    rx: Receiver<Envelope>,
    waker: netsched_sys::EventFd,
}

impl CommandInbox {
    /// The fd to poll: readable when commands wait.
    pub fn fd(&self) -> std::os::fd::RawFd {
        self.waker.fd()
    }

    /// Apply every waiting command (at most [`COMMAND_QUEUE`] per call) with `apply` and send
    /// each answer back. Never blocks. Returns how many were applied.
    pub fn serve(&self, mut apply: impl FnMut(Command) -> Result<Applied, String>) -> usize {
        self.waker.drain();
        let mut n = 0;
        while n < COMMAND_QUEUE {
            let Ok(env) = self.rx.try_recv() else { break };
            let answer = apply(env.cmd);
            // The control thread may have given up (timeout): the answer is dropped.
            let _ = env.reply.try_send(answer);
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
    tx: SyncSender<Envelope>,
    waker: std::sync::Arc<netsched_sys::EventFd>,
}

/// A bounded command channel between the control thread and the packet loop.
pub fn command_channel() -> Result<(CommandOutbox, CommandInbox)> {
    let (tx, rx) = std::sync::mpsc::sync_channel(COMMAND_QUEUE);
    let waker = netsched_sys::EventFd::new().context("eventfd for the command channel")?;
    let dup = waker
        .try_clone()
        .context("eventfd for the command channel")?;
    Ok((
        CommandOutbox {
            tx,
            waker: std::sync::Arc::new(dup),
        },
        CommandInbox { rx, waker },
    ))
}

impl CommandOutbox {
    /// Send `cmd` to the packet loop and wait (at most `timeout`) for its answer.
    pub fn execute(&self, cmd: Command, timeout: Duration) -> Result<Applied, String> {
        let (reply, answer) = std::sync::mpsc::sync_channel(1);
        match self.tx.try_send(Envelope { cmd, reply }) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                return Err(format!(
                    "busy: {COMMAND_QUEUE} commands already wait for the packet loop"
                ))
            }
            Err(TrySendError::Disconnected(_)) => return Err("the daemon is shutting down".into()),
        }
        self.waker.wake();
        answer.recv_timeout(timeout).unwrap_or_else(|_| {
            Err(format!(
                "the packet loop did not apply the command within {} ms",
                timeout.as_millis()
            ))
        })
    }
}

/// The listening side, owned by the daemon's control thread.
pub struct ControlServer {
    listener: UnixListener,
    path: PathBuf,
    group_gid: Option<u32>,
}

/// Remove `path` only if it is a Unix socket nobody listens on (what a killed daemon leaves).
/// `Ok(false)`: nothing there. A regular file, a directory, a symlink (even to a socket), or
/// a socket something answers on is an error naming it, and is left alone.
pub fn remove_stale_socket(path: &Path) -> Result<bool> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(false),
        Err(e) => bail!("control socket {}: cannot inspect it: {e}", path.display()),
    };
    let ft = meta.file_type();
    if !ft.is_socket() {
        let what = if ft.is_symlink() {
            "a symbolic link"
        } else if ft.is_dir() {
            "a directory"
        } else if ft.is_file() {
            "a regular file"
        } else {
            "not a socket"
        };
        bail!(
            "control socket {}: is {what}, not a socket; refusing to remove it (choose another \
             path with --socket, or remove it yourself)",
            path.display()
        );
    }
    match UnixStream::connect(path) {
        Ok(_) => bail!(
            "control socket {} is in use: is another netsched nfq running?",
            path.display()
        ),
        Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {}
        Err(e) => bail!(
            "control socket {}: cannot tell whether it is stale ({e}); left alone",
            path.display()
        ),
    }
    std::fs::remove_file(path)
        .with_context(|| format!("removing stale socket {}", path.display()))?;
    Ok(true)
}

impl ControlServer {
    /// Bind `path` (a stale socket from a killed daemon is replaced — see
    /// [`remove_stale_socket`]; anything else there is an error), mode 0660, group `group`.
    pub fn bind(path: &Path, group: Option<&str>) -> Result<Self> {
        remove_stale_socket(path)?;
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
            }
        }
        let listener = UnixListener::bind(path)
            .with_context(|| format!("binding control socket {}", path.display()))?;
        listener.set_nonblocking(true)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))?;
        let gid = match group {
            Some(g) => {
                let gid = netsched_testbed::access::group_gid(g)?;
                std::os::unix::fs::chown(path, None, Some(gid))
                    .with_context(|| format!("chown {} to group {g}", path.display()))?;
                Some(gid)
            }
            None => None,
        };
        Ok(ControlServer {
            listener,
            path: path.to_path_buf(),
            group_gid: gid,
        })
    }

    /// The control thread's loop, until `quit` is set (checked every 50 ms): accept up to
    /// [`MAX_CONNECTIONS`], read each request line within [`REQUEST_DEADLINE`] and
    /// [`MAX_REQUEST_BYTES`], answer it with `serve` (which may block: it runs here, never in
    /// the packet loop), write the answer within the same deadline.
    pub fn run(&self, quit: &AtomicBool, mut serve: impl FnMut(&Request) -> Response) {
        use std::os::fd::AsRawFd;
        let mut conns: Vec<Conn> = Vec::with_capacity(MAX_CONNECTIONS);
        let mut fds: Vec<libc::pollfd> = Vec::with_capacity(MAX_CONNECTIONS + 1);
        while !quit.load(Ordering::Relaxed) {
            let now = Instant::now();
            let mut wait = Duration::from_millis(50);
            fds.clear();
            fds.push(libc::pollfd {
                fd: self.listener.as_raw_fd(),
                // At the bound, leave new clients in the backlog.
                events: if conns.len() < MAX_CONNECTIONS {
                    libc::POLLIN
                } else {
                    0
                },
                revents: 0,
            });
            for c in &conns {
                wait = wait.min(c.deadline.saturating_duration_since(now));
                fds.push(libc::pollfd {
                    fd: c.stream.as_raw_fd(),
                    events: if c.out.is_some() {
                        libc::POLLOUT
                    } else {
                        libc::POLLIN
                    },
                    revents: 0,
                });
            }
            let _ = netsched_sys::poll(&mut fds, wait);
            let now = Instant::now();
            for (i, c) in conns.iter_mut().enumerate() {
                if fds[i + 1].revents != 0 {
                    c.progress(&mut serve);
                }
            }
            conns.retain_mut(|c| {
                if c.done {
                    return false;
                }
                if now >= c.deadline {
                    // Best effort, never blocking: tell a reader why it is cut off.
                    if c.out.is_none() {
                        let msg = format!(
                            "request not complete within {} ms",
                            REQUEST_DEADLINE.as_millis()
                        );
                        let _ = c.stream.write(answer_line(&Response::err(msg)).as_bytes());
                    }
                    return false;
                }
                true
            });
            while conns.len() < MAX_CONNECTIONS {
                let Ok((stream, _)) = self.listener.accept() else {
                    break;
                };
                if stream.set_nonblocking(true).is_err() {
                    continue;
                }
                let mut c = Conn {
                    stream,
                    deadline: now + REQUEST_DEADLINE,
                    line: Vec::new(),
                    out: None,
                    done: false,
                };
                if let Err(e) = self.allowed(&c.stream) {
                    c.answer(&Response::err(format!("permission denied: {e}")));
                }
                conns.push(c);
            }
        }
    }

    fn allowed(&self, stream: &UnixStream) -> Result<()> {
        netsched_testbed::access::check_peer(stream, self.group_gid)?;
        Ok(())
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        // Only our own socket: still a socket, not replaced by something else meanwhile.
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.file_type().is_socket()) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn answer_line(r: &Response) -> String {
    let mut text = serde_json::to_string(r).unwrap_or_else(|e| {
        format!("{{\"ok\":false,\"error\":\"cannot encode the answer: {e}\"}}")
    });
    text.push('\n');
    text
}

/// One control connection in the control thread: reading its line, then writing its answer.
struct Conn {
    stream: UnixStream,
    deadline: Instant,
    line: Vec<u8>,
    /// The answer and how much of it is written.
    out: Option<(Vec<u8>, usize)>,
    done: bool,
}

impl Conn {
    fn answer(&mut self, r: &Response) {
        self.out = Some((answer_line(r).into_bytes(), 0));
        self.write_some();
    }

    fn write_some(&mut self) {
        let Some((buf, pos)) = &mut self.out else {
            return;
        };
        while *pos < buf.len() {
            match self.stream.write(&buf[*pos..]) {
                Ok(0) => break,
                Ok(n) => *pos += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        self.done = true;
    }

    fn progress(&mut self, serve: &mut impl FnMut(&Request) -> Response) {
        if self.out.is_some() {
            self.write_some();
            return;
        }
        let mut buf = [0u8; 1024];
        loop {
            match self.stream.read(&mut buf) {
                Ok(0) => {
                    // Closed before a full line: nobody to answer.
                    self.done = true;
                    return;
                }
                Ok(n) => {
                    self.line.extend_from_slice(&buf[..n]);
                    if let Some(end) = self.line.iter().position(|&b| b == b'\n') {
                        let text = String::from_utf8_lossy(&self.line[..end]).into_owned();
                        let r = match serde_json::from_str::<Request>(text.trim()) {
                            Ok(req) => serve(&req),
                            Err(e) => Response::err(format!("bad request {:?}: {e}", text.trim())),
                        };
                        self.answer(&r);
                        return;
                    }
                    if self.line.len() > MAX_REQUEST_BYTES {
                        self.answer(&Response::err(format!(
                            "request longer than {MAX_REQUEST_BYTES} bytes without a newline"
                        )));
                        return;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.done = true;
                    return;
                }
            }
        }
    }
}

/// Client side: send one request, wait (at most `timeout`) for the answer.
pub fn request_with_timeout(path: &Path, req: &Request, timeout: Duration) -> Result<Response> {
    let mut s = UnixStream::connect(path).with_context(|| {
        format!(
            "cannot connect to {} (is `netsched nfq` running? root or the control group?)",
            path.display()
        )
    })?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    let timed_out = |e: &std::io::Error| {
        matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut).then(|| {
            anyhow!(
                "no answer from the daemon on {} within {} ms (is it stuck, or is something \
                 else listening there?)",
                path.display(),
                timeout.as_millis()
            )
        })
    };
    let mut text = serde_json::to_string(req)?;
    text.push('\n');
    if let Err(e) = s.write_all(text.as_bytes()) {
        return Err(timed_out(&e).unwrap_or_else(|| anyhow!("sending to {}: {e}", path.display())));
    }
    let mut line = String::new();
    if let Err(e) = BufReader::new((&s).take(16 << 20)).read_line(&mut line) {
        return Err(timed_out(&e)
            .unwrap_or_else(|| anyhow!("reading the answer from {}: {e}", path.display())));
    }
    if line.is_empty() {
        bail!(
            "the daemon on {} closed the connection without answering",
            path.display()
        );
    }
    serde_json::from_str(line.trim())
        .map_err(|e| anyhow!("bad answer from the daemon {:?}: {e}", line.trim()))
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
    use std::net::Ipv4Addr;

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
                r#"{"cmd":"set_deadline","deadline":"auto-quantile"}"#
            )
            .0
            .ok
        );
        let st = e.status();
        assert_eq!(st.deadline_mode, "auto-quantile");
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
                "auto-quantile",
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
        let q2 = std::sync::Arc::clone(&quit);
        let control = std::thread::spawn(move || {
            server.run(&q2, |req| {
                state.serve(req, |c| outbox.execute(c, COMMAND_TIMEOUT), &mut |_| {})
            })
        });
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
        control.join().unwrap();
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

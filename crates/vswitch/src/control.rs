//! Runtime control of a running switch over a local Unix socket (`--control PATH`) and its
//! client, `netsched vswitch ctl`.
//!
//! Protocol (as `netsched balance ctl`): the client sends one line of words, at most
//! [`MAX_REQUEST`] bytes, and reads the answer until EOF; the answer's first line is `ok` or
//! `error: <what>`. Commands:
//!
//! | command | effect |
//! |---|---|
//! | `show-ports [--json]` | per port: tier, weight, the accounting, the pass-over measure |
//! | `set-tier PORT TIER` | the port's tier (strict priority, delay-constrained, wall-clock) |
//! | `set-weight PORT W` | the port's weight (DRR quantum `W × 1514` B, WF2Q+ weight) |
//!
//! **The packet path never waits for control.** The control thread parses and checks a
//! request, then hands a [`Command`] to the packet thread through a bounded channel
//! ([`COMMAND_QUEUE`] places; a full channel answers "busy" at once) and waits for the
//! answer with the request's deadline. The packet thread takes at most [`COMMAND_QUEUE`]
//! commands per loop turn with `try_recv` (never blocks), answers on a one-place channel
//! (never blocks), and applies a change at the next round start. A request has
//! [`DEADLINE`] in all (reading, waiting, writing); each connection is served by its own
//! thread, at most [`MAX_CONNECTIONS`] at a time (more are answered "busy" and closed), so a
//! stuck client stalls neither the switch nor the other clients.
//!
//! Access, the one rule of every netsched daemon (`netsched_testbed::access`): the socket is
//! mode 0660 (group `--control-group` when given); each connection's `SO_PEERCRED` must be
//! root, our own uid, or a member of that group.

use crate::stats::SwitchStats;
use netsched_testbed::access;
use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest request line, bytes.
pub const MAX_REQUEST: usize = 4096;
/// Everything of one request (read, wait for the packet thread, write) within this.
pub const DEADLINE: Duration = Duration::from_secs(2);
/// Commands waiting for the packet thread; one more is answered "busy".
pub const COMMAND_QUEUE: usize = 8;
/// Connections served at once; one more is answered "busy" and closed.
pub const MAX_CONNECTIONS: usize = 16;
/// The default socket path.
pub const DEFAULT_SOCKET: &str = "/run/netsched-vswitch.sock";
/// Unread request bytes discarded after answering, at most.
const DRAIN_BYTES: u64 = 64 * 1024;
/// How often the accept loop looks at its stop flag.
const ACCEPT_POLL: Duration = Duration::from_millis(50);

/// A request the packet thread carries out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// A snapshot of the counters.
    Show,
    SetTier {
        port: String,
        tier: u32,
    },
    SetWeight {
        port: String,
        weight: u32,
    },
}

/// The packet thread's answer.
#[derive(Debug, Clone)]
pub enum Answer {
    Stats(Box<SwitchStats>),
    Done(String),
    Refused(String),
}

/// A command and where its answer goes.
pub struct Envelope {
    pub command: Command,
    reply: SyncSender<Answer>,
}

impl Envelope {
    /// Answer the command; never blocks (the reply channel has one place, used once).
    pub fn answer(self, a: Answer) {
        let _ = self.reply.try_send(a);
    }
}

/// The packet thread's end: [`Inbox::take`] never blocks.
pub struct Inbox {
    rx: Receiver<Envelope>,
}

impl Inbox {
    /// The next waiting command, if any.
    pub fn take(&self) -> Option<Envelope> {
        self.rx.try_recv().ok()
    }
}

/// The control thread's end.
#[derive(Clone)]
pub struct Outbox {
    tx: SyncSender<Envelope>,
}

/// A bounded command channel: the control side and the packet thread's side.
pub fn channel() -> (Outbox, Inbox) {
    let (tx, rx) = sync_channel(COMMAND_QUEUE);
    (Outbox { tx }, Inbox { rx })
}

impl Outbox {
    /// Hand `command` to the packet thread and wait for its answer until `deadline`.
    pub fn execute(&self, command: Command, deadline: Instant) -> Result<Answer, String> {
        let (reply, answer) = sync_channel(1);
        match self.tx.try_send(Envelope { command, reply }) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                return Err(format!(
                    "busy: {COMMAND_QUEUE} commands already wait for the switch; try again"
                ))
            }
            Err(TrySendError::Disconnected(_)) => return Err("the switch has stopped".into()),
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match answer.recv_timeout(left) {
            Ok(a) => Ok(a),
            Err(RecvTimeoutError::Timeout) => Err(format!(
                "the switch did not answer within {DEADLINE:?} (the command may still apply \
                 at the next round start)"
            )),
            Err(RecvTimeoutError::Disconnected) => Err("the switch has stopped".into()),
        }
    }
}

/// Parse one request line. Errors name the word that is wrong.
pub fn parse(line: &str) -> Result<(Command, bool), String> {
    let w: Vec<&str> = line.split_whitespace().collect();
    let number = |i: usize, what: &str| -> Result<u32, String> {
        let v = w
            .get(i)
            .ok_or_else(|| format!("{}: missing {what}", w[0]))?;
        v.parse::<u32>()
            .map_err(|_| format!("{} {}: {what} {v:?} is not a whole number", w[0], w[1]))
    };
    let port = |i: usize| -> Result<String, String> {
        w.get(i)
            .map(|s| s.to_string())
            .ok_or_else(|| format!("{}: missing PORT (a guest port's device name)", w[0]))
    };
    let arity = |n: usize| -> Result<(), String> {
        if w.len() > n {
            Err(format!("{}: unexpected {:?}", w[0], w[n]))
        } else {
            Ok(())
        }
    };
    match w.first().copied() {
        None => Err("empty request (try show-ports, set-tier, set-weight)".into()),
        Some("show-ports") => match w.get(1).copied() {
            None => Ok((Command::Show, false)),
            Some("--json") => arity(2).map(|()| (Command::Show, true)),
            Some(other) => Err(format!(
                "show-ports: unknown option {other:?} (only --json)"
            )),
        },
        Some("set-tier") => {
            let port = port(1)?;
            let tier = number(2, "TIER")?;
            arity(3)?;
            Ok((Command::SetTier { port, tier }, false))
        }
        Some("set-weight") => {
            let port = port(1)?;
            let weight = number(2, "W")?;
            arity(3)?;
            Ok((Command::SetWeight { port, weight }, false))
        }
        Some(other) => Err(format!(
            "unknown command {other:?} (show-ports [--json], set-tier PORT TIER, set-weight PORT W)"
        )),
    }
}

/// `show-ports` as a table.
pub fn ports_table(s: &SwitchStats) -> String {
    let mut out = format!(
        "discipline {}  rounds {}  uplink {}\n{:<16} {:>4} {:>6} {:>10} {:>10} {:>10} {:>6} {:>7} {:>5}\n",
        s.discipline,
        s.rounds,
        s.uplink.dev,
        "port",
        "tier",
        "weight",
        "received",
        "forwarded",
        "dropped",
        "queued",
        "passed",
        "bound"
    );
    for p in &s.ports {
        out += &format!(
            "{:<16} {:>4} {:>6} {:>10} {:>10} {:>10} {:>6} {:>7} {:>5}{}\n",
            p.dev,
            p.tier,
            p.weight,
            p.received,
            p.forwarded,
            p.dropped(),
            p.queued,
            p.max_rounds_passed,
            p.bound_rounds,
            if p.removed { "  (removed)" } else { "" }
        );
    }
    out
}

/// The answer text of a request line (without the `ok`/`error` status line).
fn execute_line(line: &str, out: &Outbox, deadline: Instant) -> Result<String, String> {
    let (cmd, json) = parse(line)?;
    match out.execute(cmd, deadline)? {
        Answer::Stats(s) if json => serde_json::to_string(&s)
            .map(|t| t + "\n")
            .map_err(|e| e.to_string()),
        Answer::Stats(s) => Ok(ports_table(&s)),
        Answer::Done(msg) => Ok(msg + "\n"),
        Answer::Refused(msg) => Err(msg),
    }
}

/// The listening socket and its thread; dropping it stops the thread and removes the socket
/// file (only if it is still the one we created).
pub struct ControlServer {
    path: PathBuf,
    ino: (u64, u64),
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ControlServer {
    /// Bind `path` (mode 0660, group `group` when given) and serve requests through `out`.
    /// A stale socket (nobody answers) is replaced; a live one is an error; a path that is
    /// not a socket is never removed.
    pub fn start(path: &Path, group: Option<&str>, out: Outbox) -> anyhow::Result<Self> {
        let shown = path.display();
        if let Ok(m) = std::fs::symlink_metadata(path) {
            if !m.file_type().is_socket() {
                anyhow::bail!("--control {shown}: exists and is not a socket; not touching it");
            }
            if UnixStream::connect(path).is_ok() {
                anyhow::bail!("--control {shown}: in use (is another netsched vswitch running?)");
            }
            std::fs::remove_file(path).map_err(|e| {
                anyhow::anyhow!("--control {shown}: removing the stale socket: {e}")
            })?;
        }
        let gid = group
            .map(access::group_gid)
            .transpose()
            .map_err(|e| anyhow::anyhow!("--control-group: {e}"))?;
        let listener =
            UnixListener::bind(path).map_err(|e| anyhow::anyhow!("--control {shown}: {e}"))?;
        let m = std::fs::symlink_metadata(path)
            .map_err(|e| anyhow::anyhow!("--control {shown}: {e}"))?;
        let server_ino = (m.dev(), m.ino());
        // From here on the file is ours: a failure removes it (Drop of the half-built server).
        let mut server = ControlServer {
            path: path.to_path_buf(),
            ino: server_ino,
            stop: Arc::new(AtomicBool::new(false)),
            thread: None,
        };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
            .map_err(|e| anyhow::anyhow!("--control {shown}: chmod 0660: {e}"))?;
        if let Some(g) = gid {
            std::os::unix::fs::chown(path, None, Some(g))
                .map_err(|e| anyhow::anyhow!("--control {shown}: chown to group {g}: {e}"))?;
        }
        listener
            .set_nonblocking(true)
            .map_err(|e| anyhow::anyhow!("--control {shown}: {e}"))?;
        let stop = Arc::clone(&server.stop);
        server.thread = Some(
            std::thread::Builder::new()
                .name("vswitch-control".into())
                .spawn(move || accept_loop(listener, gid, out, &stop))
                .map_err(|e| anyhow::anyhow!("starting the control thread: {e}"))?,
        );
        Ok(server)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Ok(m) = std::fs::symlink_metadata(&self.path) {
            if (m.dev(), m.ino()) == self.ino {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

fn accept_loop(listener: UnixListener, gid: Option<u32>, out: Outbox, stop: &AtomicBool) {
    let active = Arc::new(AtomicUsize::new(0));
    while !stop.load(Ordering::Relaxed) {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(_) => {
                std::thread::sleep(ACCEPT_POLL);
                continue;
            }
        };
        let deadline = Instant::now() + DEADLINE;
        if stream.set_nonblocking(false).is_err() {
            continue;
        }
        if active.load(Ordering::Relaxed) >= MAX_CONNECTIONS {
            let mut s = stream;
            let _ = s.set_write_timeout(Some(Duration::from_millis(100)));
            let _ = s.write_all(
                format!("error: busy: {MAX_CONNECTIONS} control connections open; try again\n")
                    .as_bytes(),
            );
            continue;
        }
        active.fetch_add(1, Ordering::Relaxed);
        let (active2, out2) = (Arc::clone(&active), out.clone());
        let spawned = std::thread::Builder::new()
            .name("vswitch-ctl-conn".into())
            .spawn(move || {
                let _ = one(stream, gid, &out2, deadline);
                active2.fetch_sub(1, Ordering::Relaxed);
            });
        if spawned.is_err() {
            active.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Serve one connection within `deadline`.
fn one(
    mut stream: UnixStream,
    gid: Option<u32>,
    out: &Outbox,
    deadline: Instant,
) -> std::io::Result<()> {
    let answer = match access::check_peer(&stream, gid) {
        Err(e) => format!("error: permission denied: {e}\n"),
        Ok(_) => match read_line(&mut stream, deadline) {
            Err(msg) => format!("error: {msg}\n"),
            Ok(line) => match execute_line(&line, out, deadline) {
                Ok(text) => format!("ok\n{text}"),
                Err(e) => format!("error: {e}\n"),
            },
        },
    };
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(100));
    stream.set_write_timeout(Some(left))?;
    stream.write_all(answer.as_bytes())?;
    stream.shutdown(std::net::Shutdown::Write)?;
    // Closing with unread input would reset the connection and lose the answer (an
    // oversized request): read what is left, bounded in bytes and time.
    stream.set_read_timeout(Some(Duration::from_millis(200)))?;
    let _ = std::io::copy(&mut (&mut stream).take(DRAIN_BYTES), &mut std::io::sink());
    Ok(())
}

/// One request line, at most [`MAX_REQUEST`] bytes, read before `deadline`.
fn read_line(stream: &mut UnixStream, deadline: Instant) -> Result<String, String> {
    let mut buf = vec![0u8; MAX_REQUEST + 1];
    let mut len = 0;
    loop {
        if let Some(end) = buf[..len].iter().position(|&b| b == b'\n') {
            return String::from_utf8(buf[..end].to_vec())
                .map_err(|_| "request is not UTF-8 text".to_string());
        }
        if len > MAX_REQUEST {
            return Err(format!("request longer than {MAX_REQUEST} bytes"));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("no complete request line within {DEADLINE:?}"));
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|e| e.to_string())?;
        match stream.read(&mut buf[len..]) {
            Ok(0) if len == 0 => return Err("empty request".into()),
            // EOF without a newline: the line is what was sent.
            Ok(0) => {
                return String::from_utf8(buf[..len].to_vec())
                    .map_err(|_| "request is not UTF-8 text".to_string())
            }
            Ok(n) => len += n,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return Err(format!("no complete request line within {DEADLINE:?}"))
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("reading the request: {e}")),
        }
    }
}

/// Send one request line to `socket`; the answer without its `ok` line, or the error text
/// (the daemons' one client: [`netsched_testbed::access::request_line`]).
pub fn request(socket: &Path, line: &str) -> Result<String, String> {
    let hint = format!("netsched vswitch --control {}", socket.display());
    netsched_testbed::access::request_line(socket, line, DEADLINE + Duration::from_secs(3), &hint)
        .map_err(|e| e.to_string())
}

/// `netsched vswitch ctl`: talk to a running switch.
#[derive(Debug, Clone, clap::Args)]
pub struct CtlArgs {
    /// The switch's control socket (`--control` of `netsched vswitch`).
    #[arg(long, default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
    #[command(subcommand)]
    pub op: CtlOp,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum CtlOp {
    /// Per port: tier, weight, received/forwarded/dropped/queued, pass-over measure.
    ShowPorts {
        /// The whole snapshot as one JSON object (the `--stats` line's form).
        #[arg(long)]
        json: bool,
    },
    /// Move a port to another tier (1 = most important); applies at the next round start.
    SetTier { port: String, tier: u32 },
    /// Change a port's weight (DRR, WF2Q+); applies at the next round start.
    SetWeight { port: String, weight: u32 },
}

impl CtlOp {
    pub fn line(&self) -> String {
        match self {
            CtlOp::ShowPorts { json } => {
                format!("show-ports{}", if *json { " --json" } else { "" })
            }
            CtlOp::SetTier { port, tier } => format!("set-tier {port} {tier}"),
            CtlOp::SetWeight { port, weight } => format!("set-weight {port} {weight}"),
        }
    }
}

pub fn run_ctl(a: &CtlArgs) -> anyhow::Result<()> {
    let out = request(&a.socket, &a.op.line()).map_err(|e| anyhow::anyhow!(e))?;
    print!("{out}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_and_errors_name_the_wrong_word() {
        assert_eq!(parse("show-ports").unwrap(), (Command::Show, false));
        assert_eq!(
            parse(" show-ports  --json ").unwrap(),
            (Command::Show, true)
        );
        assert_eq!(
            parse("set-tier vg1 2").unwrap().0,
            Command::SetTier {
                port: "vg1".into(),
                tier: 2
            }
        );
        assert_eq!(
            parse("set-weight vg1 7").unwrap().0,
            Command::SetWeight {
                port: "vg1".into(),
                weight: 7
            }
        );
        for (bad, want) in [
            ("", "empty request"),
            ("reboot", "unknown command \"reboot\""),
            ("show-ports --yaml", "\"--yaml\""),
            ("set-tier", "missing PORT"),
            ("set-tier vg1", "missing TIER"),
            ("set-tier vg1 high", "TIER \"high\" is not a whole number"),
            ("set-weight vg1 -3", "W \"-3\""),
            ("set-tier vg1 2 3", "unexpected \"3\""),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(want), "{bad:?}: want {want:?} in {e:?}");
        }
    }

    #[test]
    fn a_full_command_queue_answers_busy_at_once_and_a_silent_switch_times_out() {
        let (out, inbox) = channel();
        let soon = Instant::now() + Duration::from_millis(50);
        // Nobody takes the commands: the first COMMAND_QUEUE wait and time out ...
        let e = out.execute(Command::Show, soon).unwrap_err();
        assert!(e.contains("did not answer"), "{e}");
        for _ in 1..COMMAND_QUEUE {
            let _ = out.execute(Command::Show, Instant::now());
        }
        // ... one more is refused without waiting.
        let t = Instant::now();
        let e = out
            .execute(Command::Show, Instant::now() + Duration::from_secs(5))
            .unwrap_err();
        assert!(e.starts_with("busy"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(1));
        drop(inbox);
        let e = out.execute(Command::Show, Instant::now()).unwrap_err();
        assert!(e.contains("stopped"), "{e}");
    }

    #[test]
    fn the_socket_answers_refuses_long_lines_and_is_removed_on_drop() {
        let dir = netsched_testbed::TempDir::new("vswctl").unwrap();
        let path = dir.path().join("ctl.sock");
        let (out, inbox) = channel();
        let server = ControlServer::start(&path, None, out).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o660);
        // A packet thread stand-in answering every command.
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = Arc::clone(&stop);
        let pt = std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                match inbox.take() {
                    Some(e) => {
                        let a = match &e.command {
                            Command::Show => Answer::Stats(Box::default()),
                            Command::SetTier { port, .. } => {
                                Answer::Refused(format!("no port {port:?}"))
                            }
                            Command::SetWeight { .. } => Answer::Done("weight set".into()),
                        };
                        e.answer(a);
                    }
                    None => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        let json = request(&path, "show-ports --json").unwrap();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert!(v["ports"].is_array(), "{json}");
        assert_eq!(request(&path, "set-weight x 2").unwrap(), "weight set\n");
        let e = request(&path, "set-tier nope 2").unwrap_err();
        assert_eq!(e, "no port \"nope\"");
        let e = request(&path, &"x".repeat(MAX_REQUEST + 10)).unwrap_err();
        assert!(e.contains("longer than 4096"), "{e}");
        // A client that sends nothing gets the deadline error, not a hang.
        let t = Instant::now();
        let mut s = UnixStream::connect(&path).unwrap();
        let mut answer = String::new();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.read_to_string(&mut answer).unwrap();
        assert!(
            answer.starts_with("error: no complete request line"),
            "{answer}"
        );
        assert!(t.elapsed() < DEADLINE + Duration::from_secs(2));
        // A second server on the live socket is refused by name.
        let (out2, _in2) = channel();
        let e = ControlServer::start(&path, None, out2)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("in use"), "{e}");
        drop(server);
        assert!(!path.exists(), "socket file removed on drop");
        stop.store(true, Ordering::Relaxed);
        pt.join().unwrap();
    }

    #[test]
    fn a_path_that_is_not_a_socket_is_never_removed() {
        let dir = netsched_testbed::TempDir::new("vswctl").unwrap();
        let path = dir.path().join("plain");
        std::fs::write(&path, "keep me").unwrap();
        let (out, _inbox) = channel();
        let e = ControlServer::start(&path, None, out)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("not a socket"), "{e}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "keep me");
    }
}

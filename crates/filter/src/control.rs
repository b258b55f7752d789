//! Runtime control of a running filter over a local Unix socket (`--control PATH`) and its
//! client, `netsched filter ctl`.
//!
//! Protocol (as the other daemons'): one request line of words, at most [`MAX_REQUEST`]
//! bytes; the answer's first line is `ok` or `error: <what>`. Commands:
//!
//! | command | effect |
//! |---|---|
//! | `show [--json]` | the counters (the `--stats` line) |
//! | `reload` | re-read the rule file (and signature file) given at start, swap them in whole |
//! | `set-dispatch MODE` | dispatch policy from the next packet on |
//!
//! **The packet path never waits for control, and never sees a half-built rule set.** The
//! control thread reads and compiles the files itself; only a finished `Arc` of the tables
//! goes to the packet thread through a bounded channel ([`COMMAND_QUEUE`] places, full =
//! "busy"), which swaps it between batches with `try_recv`. Packets received before the swap
//! finish against the tables they started with (each holds its own `Arc`); nothing is dropped
//! for a swap. A bad file is refused with its error and the running tables stay.
//!
//! Access, the one rule of every netsched daemon (`netsched_testbed::access`): the socket is
//! mode 0660 (group `--control-group` when given); each connection's `SO_PEERCRED` must be
//! root, our own uid, or a member of that group. One thread per connection, at most
//! [`MAX_CONNECTIONS`], each request within [`DEADLINE`].

use crate::pipeline::DispatchMode;
use crate::stats::FilterStats;
use crate::work::Tables;
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
/// Everything of one request (read, compile, wait for the packet thread, write) within this.
pub const DEADLINE: Duration = Duration::from_secs(10);
/// Commands waiting for the packet thread; one more is answered "busy".
pub const COMMAND_QUEUE: usize = 8;
/// Connections served at once; one more is answered "busy" and closed.
pub const MAX_CONNECTIONS: usize = 16;
/// The default socket path.
pub const DEFAULT_SOCKET: &str = "/run/netsched-filter.sock";
const DRAIN_BYTES: u64 = 64 * 1024;
const ACCEPT_POLL: Duration = Duration::from_millis(50);

/// A request the packet thread carries out.
#[derive(Debug, Clone)]
pub enum Command {
    Show,
    /// Tables compiled by the control thread, to be used from the next packet on.
    SwapTables(Arc<Tables>),
    SetDispatch(DispatchMode),
}

/// The packet thread's answer.
#[derive(Debug, Clone)]
pub enum Answer {
    Stats(Box<FilterStats>),
    Done(String),
}

/// A command and where its answer goes.
pub struct Envelope {
    pub command: Command,
    reply: SyncSender<Answer>,
}

impl Envelope {
    /// Answer the command; never blocks.
    pub fn answer(self, a: Answer) {
        let _ = self.reply.try_send(a);
    }
}

/// The packet thread's end: [`Inbox::take`] never blocks.
pub struct Inbox {
    rx: Receiver<Envelope>,
}

impl Inbox {
    pub fn take(&self) -> Option<Envelope> {
        self.rx.try_recv().ok()
    }
}

/// Builds fresh tables (the `reload` command); runs on the control thread.
pub type Loader = Arc<dyn Fn() -> Result<Arc<Tables>, String> + Send + Sync>;

/// The control thread's end.
#[derive(Clone)]
pub struct Outbox {
    tx: SyncSender<Envelope>,
    loader: Loader,
}

/// A bounded command channel; `loader` compiles the tables for `reload`.
pub fn channel(loader: Loader) -> (Outbox, Inbox) {
    let (tx, rx) = sync_channel(COMMAND_QUEUE);
    (Outbox { tx, loader }, Inbox { rx })
}

impl Outbox {
    /// Hand `command` to the packet thread and wait for its answer until `deadline`.
    pub fn execute(&self, command: Command, deadline: Instant) -> Result<Answer, String> {
        let (reply, answer) = sync_channel(1);
        match self.tx.try_send(Envelope { command, reply }) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                return Err(format!(
                    "busy: {COMMAND_QUEUE} commands already wait for the filter; try again"
                ))
            }
            Err(TrySendError::Disconnected(_)) => return Err("the filter has stopped".into()),
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match answer.recv_timeout(left) {
            Ok(a) => Ok(a),
            Err(RecvTimeoutError::Timeout) => Err(format!(
                "the filter did not answer within {DEADLINE:?} (the command may still apply)"
            )),
            Err(RecvTimeoutError::Disconnected) => Err("the filter has stopped".into()),
        }
    }
}

/// A parsed request: `Reload` is compiled by the control thread before it becomes a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Show { json: bool },
    Reload,
    SetDispatch(DispatchMode),
}

/// Parse one request line. Errors name the word that is wrong.
pub fn parse(line: &str) -> Result<Request, String> {
    let w: Vec<&str> = line.split_whitespace().collect();
    let arity = |n: usize| -> Result<(), String> {
        match w.get(n) {
            Some(extra) => Err(format!("{}: unexpected {extra:?}", w[0])),
            None => Ok(()),
        }
    };
    match w.first().copied() {
        None => Err("empty request (try show, reload, set-dispatch MODE)".into()),
        Some("show") => match w.get(1).copied() {
            None => Ok(Request::Show { json: false }),
            Some("--json") => arity(2).map(|()| Request::Show { json: true }),
            Some(o) => Err(format!("show: unknown option {o:?} (only --json)")),
        },
        Some("reload") => arity(1).map(|()| Request::Reload),
        Some("set-dispatch") => {
            let m = w.get(1).ok_or_else(|| {
                format!(
                    "set-dispatch: missing MODE ({})",
                    DispatchMode::NAMES.join(", ")
                )
            })?;
            let mode = DispatchMode::parse(m).map_err(|e| format!("set-dispatch: {e}"))?;
            arity(2).map(|()| Request::SetDispatch(mode))
        }
        Some(other) => Err(format!(
            "unknown command {other:?} (show [--json], reload, set-dispatch MODE)"
        )),
    }
}

/// `show` as text.
pub fn summary(s: &FilterStats) -> String {
    let mut out = format!(
        "dispatch {}  rules generation {}\nreceived {}  forwarded {}  dropped {}  queued {}  identity {}\n",
        s.pipeline.dispatch,
        s.pipeline.rules_generation,
        s.received,
        s.forwarded,
        s.dropped,
        s.queued,
        if s.identity_holds { "holds" } else { "BROKEN" }
    );
    for (r, n) in &s.drops {
        out += &format!("  dropped {}: {n}\n", r.name());
    }
    let o = &s.pipeline.order;
    out += &format!(
        "order: violations before window {}  after {}  held {}  timeouts {}\n",
        o.violations_before, o.violations_after, o.held, o.released_by_timeout
    );
    for (i, w) in s.pipeline.workers.iter().enumerate() {
        out += &format!(
            "worker {i}: busy {} ms  idle {} ms  blocks {}  hand-off waits {}  panics {}\n",
            w.busy_ns / 1_000_000,
            w.idle_ns / 1_000_000,
            w.blocks,
            w.handoff_waits,
            w.panics
        );
    }
    out
}

fn execute_line(line: &str, out: &Outbox, deadline: Instant) -> Result<String, String> {
    let (cmd, json) = match parse(line)? {
        Request::Show { json } => (Command::Show, json),
        Request::Reload => (Command::SwapTables((out.loader)()?), false),
        Request::SetDispatch(m) => (Command::SetDispatch(m), false),
    };
    match out.execute(cmd, deadline)? {
        Answer::Stats(s) if json => serde_json::to_string(&s)
            .map(|t| t + "\n")
            .map_err(|e| e.to_string()),
        Answer::Stats(s) => Ok(summary(&s)),
        Answer::Done(msg) => Ok(msg + "\n"),
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
                anyhow::bail!("--control {shown}: in use (is another netsched filter running?)");
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
                .name("filter-control".into())
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
            .name("filter-ctl-conn".into())
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

/// Send one request line to `socket`; the answer without its `ok` line, or the error text.
pub fn request(socket: &Path, line: &str) -> Result<String, String> {
    let hint = format!("netsched filter --control {}", socket.display());
    netsched_testbed::access::request_line(socket, line, DEADLINE + Duration::from_secs(3), &hint)
        .map_err(|e| e.to_string())
}

/// `netsched filter ctl`: talk to a running filter.
#[derive(Debug, Clone, clap::Args)]
pub struct CtlArgs {
    /// The filter's control socket (`--control` of `netsched filter`).
    #[arg(long, default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
    #[command(subcommand)]
    pub op: CtlOp,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum CtlOp {
    /// The counters.
    Show {
        /// The whole snapshot as one JSON object (the `--stats` line's form).
        #[arg(long)]
        json: bool,
    },
    /// Re-read the rule and signature files and swap them in whole.
    Reload,
    /// Change the dispatch policy.
    SetDispatch { mode: String },
}

impl CtlOp {
    pub fn line(&self) -> String {
        match self {
            CtlOp::Show { json } => format!("show{}", if *json { " --json" } else { "" }),
            CtlOp::Reload => "reload".into(),
            CtlOp::SetDispatch { mode } => format!("set-dispatch {mode}"),
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
        assert_eq!(parse("show").unwrap(), Request::Show { json: false });
        assert_eq!(parse("show --json").unwrap(), Request::Show { json: true });
        assert_eq!(parse(" reload ").unwrap(), Request::Reload);
        assert_eq!(
            parse("set-dispatch fcfs").unwrap(),
            Request::SetDispatch(DispatchMode::parse("fcfs").unwrap())
        );
        for (line, word) in [
            ("", "empty"),
            ("shw", "\"shw\""),
            ("show --yaml", "--yaml"),
            ("reload now", "\"now\""),
            ("set-dispatch", "missing MODE"),
            ("set-dispatch lottery", "lottery"),
        ] {
            let e = parse(line).unwrap_err();
            assert!(e.contains(word), "{line:?}: {e}");
        }
    }

    #[test]
    fn a_failed_reload_answers_the_error_and_a_full_queue_answers_busy() {
        let loader: Loader = Arc::new(|| Err("rules.toml:3: field `src` = \"x\": bad".to_string()));
        let (out, _inbox) = channel(loader);
        let e = execute_line("reload", &out, Instant::now() + DEADLINE).unwrap_err();
        assert!(e.contains("rules.toml:3"), "{e}");
        for _ in 0..COMMAND_QUEUE {
            let (reply, _a) = sync_channel(1);
            out.tx
                .try_send(Envelope {
                    command: Command::Show,
                    reply,
                })
                .unwrap();
        }
        let e = execute_line("show", &out, Instant::now() + DEADLINE).unwrap_err();
        assert!(e.starts_with("busy"), "{e}");
    }
}

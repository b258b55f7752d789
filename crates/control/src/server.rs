//! The one control-socket server of the daemons (`netsched nfq`, `netsched vswitch`,
//! `netsched balance`): a Unix stream socket, one request line per connection, one answer,
//! then the server closes.
//!
//! Threads: an accept thread, and one thread per connection, at most
//! [`Limits::max_connections`] at a time. When they are all taken and a client connects, the
//! oldest connection still waiting for its request line with nothing unread in its socket is
//! dropped ([`Refusal::Dropped`]) and its place given to the newcomer: a client that sends a
//! line at once (as `ctl` does) is served however many silent connections are held, and a
//! silent connection keeps a place only while no one else needs it. Only when every place is
//! taken by a connection whose line has arrived is a further client answered "busy" at once,
//! or left in the kernel's listen backlog ([`WhenFull`]). None of them is a packet thread:
//! the daemon's [`Handler`] runs on the connection's thread and reaches the packet path only
//! through its own bounded hand-off, so nothing a client does makes a packet wait for it.
//! [`Server::dropped_silent`] counts the connections dropped so.
//!
//! Bounds per connection: the access rule first ([`crate::access::check_peer`], before a byte
//! is read); the request line within [`Limits::request_within`] of the accept and at most
//! [`Limits::max_line`] bytes; the answer written within [`Limits::answer_within`]; unread
//! bytes after the line (at most [`DRAIN_BYTES`]) read and dropped before closing, because
//! closing a Unix socket with unread input resets the peer and loses the answer. The
//! handler gets the request's deadline and bounds its own waits.
//!
//! The wire format of the answers is the daemon's: the server says *what* went wrong
//! ([`Refusal`]) and the handler words it in its protocol (`error: …` lines, JSON).
//!
//! Cost: a thread start (~20 µs) and a few system calls per request; when full, one `poll`
//! over the waiting connections (at most [`Limits::max_connections`]) per newcomer; memory: a
//! [`Limits::max_line`] buffer per open connection. A dropped connection's thread ends within
//! [`Limits::answer_within`] (its read side is shut, so it reads nothing more); until then it
//! is a thread beyond the bound, but holds no place. One dropped in the instant between its
//! thread reading a complete line and marking it read is still answered: that request runs
//! beyond the bound, so a client that sent its line is never turned away by the dropping.

use crate::access::{check_peer, AccessError};
use crate::socket_file::{BindError, BindMode, SocketFile};
use netsched_sys::PeerCred;
use std::fmt;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Unread request bytes discarded after answering, at most.
pub const DRAIN_BYTES: u64 = 64 * 1024;
/// How long the drain waits for the client to close.
const DRAIN_WAIT: Duration = Duration::from_millis(200);
/// How often the accept thread looks at its stop flag.
const ACCEPT_POLL: Duration = Duration::from_millis(50);
/// How often the accept thread looks whether its socket file is still there.
const REBIND_LOOK: Duration = Duration::from_secs(1);

/// The bounds of one daemon's control socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once.
    pub max_connections: usize,
    /// Longest request line, bytes, without its newline.
    pub max_line: usize,
    /// From the accept to a complete request line.
    pub request_within: Duration,
    /// From the answer being ready to it being written (and the drain done).
    pub answer_within: Duration,
}

/// What happens to a client when [`Limits::max_connections`] are open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenFull {
    /// Accept it, answer [`Refusal::Busy`] without waiting, close.
    Refuse,
    /// Leave it in the kernel's listen backlog until a connection ends.
    Wait,
}

/// Where a request line ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineEnd {
    /// At a newline; a client that half-closes before one is refused ([`Refusal::Ended`]).
    Newline,
    /// At a newline, or at the client's half-close after some bytes.
    NewlineOrEnd,
}

/// How a daemon uses the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerConfig {
    /// The daemon, for messages ("netsched vswitch").
    pub daemon: &'static str,
    /// The accept thread's name (the connections' threads add `-conn`; at most 15 bytes).
    pub thread_name: &'static str,
    pub limits: Limits,
    pub when_full: WhenFull,
    pub line_end: LineEnd,
    pub bind: BindMode,
    /// The accept thread's nice value (its connections' threads inherit it); best effort.
    pub nice: Option<i32>,
}

/// Why the server answered a connection itself, without the handler.
#[derive(Debug)]
pub enum Refusal {
    /// The peer failed the access rule.
    Denied(AccessError),
    /// `max_connections` connections are open ([`WhenFull::Refuse`]).
    Busy { max_connections: usize },
    /// More than `max_line` bytes without a newline.
    TooLong { max_line: usize },
    /// No complete line `within` the request deadline; `bytes` had arrived (0: silent).
    Incomplete { within: Duration, bytes: usize },
    /// The client closed its side after `bytes` bytes without a newline (0: nothing sent).
    Ended { bytes: usize },
    /// The line is not UTF-8: `byte` at `offset` is invalid.
    NotUtf8 { offset: usize, byte: u8 },
    /// Reading the request failed.
    Read(std::io::Error),
    /// Every place was taken and this connection, the oldest still without a complete line
    /// (`bytes` had arrived), was dropped to make room for a newer one.
    Dropped { bytes: usize },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Denied(e) => write!(f, "permission denied: {e}"),
            Refusal::Busy { max_connections } => write!(
                f,
                "busy: {max_connections} control connections open; try again"
            ),
            Refusal::TooLong { max_line } => write!(f, "request longer than {max_line} bytes"),
            Refusal::Incomplete { within, bytes } => write!(
                f,
                "no complete request line within {within:?}: {bytes} bytes without a newline"
            ),
            Refusal::Ended { bytes: 0 } => {
                f.write_str("no request: the connection ended before a line was sent")
            }
            Refusal::Ended { bytes } => write!(
                f,
                "request of {bytes} bytes ends without a newline: send one line ending in \\n"
            ),
            Refusal::NotUtf8 { offset, byte } => write!(
                f,
                "request is not UTF-8: invalid byte 0x{byte:02x} at offset {offset}"
            ),
            Refusal::Read(e) => write!(f, "reading the request: {e}"),
            Refusal::Dropped { bytes } => write!(
                f,
                "dropped: every control connection was taken and this one had sent no \
                 complete line ({bytes} bytes) when another client came"
            ),
        }
    }
}

/// One request as the handler sees it.
pub struct Request<'a> {
    /// The line, without its newline.
    pub line: &'a str,
    /// Who sent it (already allowed by the access rule).
    pub peer: PeerCred,
    /// The request's deadline: the handler's waits end by then.
    pub deadline: Instant,
}

/// The daemon's side: runs on a connection's thread, never on a packet thread.
pub trait Handler: Send + Sync + 'static {
    /// The whole answer to one request (the bytes written before the server closes).
    fn answer(&self, request: &Request<'_>) -> String;
    /// The answer to a client the server refused itself; `None` closes without a word.
    fn refusal(&self, why: &Refusal) -> Option<String>;
}

/// The connections holding a place, oldest first (their number is the count of open
/// connections), and a way to wait for one to end.
#[derive(Default)]
struct OpenCount {
    places: Mutex<Vec<Arc<Place>>>,
    ended: Condvar,
    dropped: AtomicU64,
}

/// One connection's place: a clone of its socket (to shut its read side when it is dropped)
/// and its state, which its thread and a dropping newcomer each try to move first.
struct Place {
    stream: UnixStream,
    state: AtomicU8,
}

const READING: u8 = 0;
const SERVING: u8 = 1;
const DROPPED: u8 = 2;

impl OpenCount {
    fn places(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Place>>> {
        self.places.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn get(&self) -> usize {
        self.places().len()
    }
    fn take(&self, place: &Arc<Place>) {
        self.places().push(Arc::clone(place));
    }
    fn give_back(&self, place: &Arc<Place>) {
        self.places().retain(|p| !Arc::ptr_eq(p, place));
        self.ended.notify_all();
    }
    /// Wait (at most `wait`) until fewer than `max` are open.
    fn wait_below(&self, max: usize, wait: Duration) -> bool {
        let n = self.places();
        let (n, _) = self
            .ended
            .wait_timeout_while(n, wait, |n| n.len() >= max)
            .unwrap_or_else(|p| p.into_inner());
        n.len() < max
    }
    /// Drop the oldest connection still reading its line with nothing unread; its place is
    /// free when this returns `true`.
    fn drop_oldest_silent(&self) -> bool {
        let mut places = self.places();
        let reading: Vec<usize> = (0..places.len())
            .filter(|&i| places[i].state.load(Ordering::Acquire) == READING)
            .collect();
        let mut fds: Vec<libc::pollfd> = reading
            .iter()
            .map(|&i| libc::pollfd {
                fd: places[i].stream.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        if netsched_sys::poll(&mut fds, Duration::ZERO).is_err() {
            return false;
        }
        for (&i, fd) in reading.iter().zip(&fds) {
            let p = &places[i];
            if fd.revents == 0
                && p.state
                    .compare_exchange(READING, DROPPED, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                let _ = p.stream.shutdown(std::net::Shutdown::Read);
                places.remove(i);
                self.dropped.fetch_add(1, Ordering::Relaxed);
                return true;
            }
        }
        false
    }
}

/// A running control server; dropping it stops accepting and removes the socket file (only
/// while it is still the one this server made). Connections already open finish within
/// their bounds.
pub struct Server {
    file: Arc<SocketFile>,
    stop: Arc<AtomicBool>,
    open: Arc<OpenCount>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Bind `path` (see [`SocketFile::bind`]) and serve it with `handler` from an accept
    /// thread started here (it inherits the calling thread's network namespace).
    pub fn start(
        path: &Path,
        group: Option<&str>,
        config: ServerConfig,
        handler: Arc<dyn Handler>,
    ) -> Result<Self, BindError> {
        let file = SocketFile::bind(path, group, config.bind, config.daemon)?;
        Self::serve(file, config, handler)
    }

    /// Serve a socket bound earlier (a daemon that binds before its other setup, so a path
    /// in use fails before anything else changes, and answers only once it is ready).
    pub fn serve(
        file: SocketFile,
        config: ServerConfig,
        handler: Arc<dyn Handler>,
    ) -> Result<Self, BindError> {
        let path = file.path().to_path_buf();
        let io = |what: &str, source| BindError::Io {
            path: path.clone(),
            what: what.to_string(),
            source,
        };
        file.listener
            .set_nonblocking(true)
            .map_err(|e| io("non-blocking", e))?;
        let file = Arc::new(file);
        let stop = Arc::new(AtomicBool::new(false));
        let open = Arc::new(OpenCount::default());
        let thread = {
            let (file, stop, open) = (Arc::clone(&file), Arc::clone(&stop), Arc::clone(&open));
            std::thread::Builder::new()
                .name(config.thread_name.into())
                .spawn(move || {
                    if let Some(n) = config.nice {
                        let _ = netsched_sys::thread::nice_this_thread(n);
                    }
                    accept_loop(&file, &config, &handler, &stop, &open)
                })
                .map_err(|e| io("starting the control thread", e))?
        };
        Ok(Server {
            file,
            stop,
            open,
            thread: Some(thread),
        })
    }

    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// A live daemon answered at the path and was taken over ([`BindMode::TakeOver`]).
    pub fn replaced(&self) -> bool {
        self.file.replaced
    }

    /// Connections being served now.
    pub fn open_connections(&self) -> usize {
        self.open.get()
    }

    /// Connections dropped, still without a complete line, to make room for a newer one.
    pub fn dropped_silent(&self) -> u64 {
        self.open.dropped.load(Ordering::Relaxed)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // The SocketFile goes with the last Arc: the accept thread's is gone; connection
        // threads hold none.
    }
}

fn accept_loop(
    first: &SocketFile,
    config: &ServerConfig,
    handler: &Arc<dyn Handler>,
    stop: &AtomicBool,
    open: &Arc<OpenCount>,
) {
    let max = config.limits.max_connections;
    // The file made again after the first was deleted ([`bind_again`]).
    let mut again: Option<SocketFile> = None;
    let mut looked = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if looked.elapsed() >= REBIND_LOOK && config.bind == BindMode::Exclusive {
            looked = Instant::now();
            if let Some(f) = bind_again(again.as_ref().unwrap_or(first)) {
                again = Some(f);
            }
        }
        let file = again.as_ref().unwrap_or(first);
        let mut fds = [libc::pollfd {
            fd: file.listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        if !matches!(netsched_sys::poll(&mut fds, ACCEPT_POLL), Ok(n) if n > 0) {
            continue;
        }
        // A place: a free one, or a silent connection's.
        let placed = open.get() < max || open.drop_oldest_silent();
        if !placed && config.when_full == WhenFull::Wait {
            open.wait_below(max, ACCEPT_POLL);
            continue;
        }
        let Ok((stream, _)) = file.listener.accept() else {
            continue;
        };
        let accepted = Instant::now();
        if !placed {
            refuse_busy(stream, handler.as_ref(), max);
            continue;
        }
        spawn_one(stream, accepted, config, handler, open, file.gid);
    }
}

/// A socket file deleted while the daemon runs is made again (`ctl` would find nothing), with
/// a warning; `None` while the file is there, or when making it failed (warned, tried again
/// at the next look). Only in [`BindMode::Exclusive`]: under `TakeOver` a path gone may be
/// a successor's, removed as it stopped, and the path is left alone.
fn bind_again(file: &SocketFile) -> Option<SocketFile> {
    let path = file.path().display();
    match file.bind_again_if_gone()? {
        Ok(f) if f.listener.set_nonblocking(true).is_ok() => {
            tracing::warn!("control socket {path} was deleted; made it again");
            Some(f)
        }
        Ok(_) => None,
        Err(e) => {
            tracing::warn!("control socket {path} was deleted and cannot be made again: {e}");
            None
        }
    }
}

/// Serve `stream` on a thread of its own, which holds one of the counted places.
fn spawn_one(
    stream: UnixStream,
    accepted: Instant,
    config: &ServerConfig,
    handler: &Arc<dyn Handler>,
    open: &Arc<OpenCount>,
    group: Option<u32>,
) {
    let Ok(clone) = stream.try_clone() else {
        return refuse_busy(stream, handler.as_ref(), config.limits.max_connections);
    };
    let place = Arc::new(Place {
        stream: clone,
        state: AtomicU8::new(READING),
    });
    open.take(&place);
    let (open2, place2, handler2, limits, line_end) = (
        Arc::clone(open),
        Arc::clone(&place),
        Arc::clone(handler),
        config.limits,
        config.line_end,
    );
    let spawned = std::thread::Builder::new()
        .name(format!("{}-conn", config.thread_name))
        .spawn(move || {
            let conn = Conn {
                group,
                limits: &limits,
                line_end,
                accepted,
                place: &place2,
            };
            serve_one(stream, handler2.as_ref(), &conn);
            open2.give_back(&place2);
        });
    if spawned.is_err() {
        open.give_back(&place);
    }
}

/// Answer "busy" without waiting for anything: the accept thread must not stall.
fn refuse_busy(mut stream: UnixStream, handler: &dyn Handler, max_connections: usize) {
    let _ = stream.set_nonblocking(true);
    if let Some(text) = handler.refusal(&Refusal::Busy { max_connections }) {
        let _ = stream.write(text.as_bytes());
    }
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut sink = [0u8; 4096];
    while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
}

/// What a connection's thread knows of its connection.
struct Conn<'a> {
    group: Option<u32>,
    limits: &'a Limits,
    line_end: LineEnd,
    accepted: Instant,
    place: &'a Place,
}

impl Conn<'_> {
    /// The line is read (or refused): the connection can no longer be dropped. `false` when
    /// it was dropped first.
    fn stop_waiting(&self) -> bool {
        self.place
            .state
            .compare_exchange(READING, SERVING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

/// One connection: the access rule, the line, the answer, the drain.
fn serve_one(mut stream: UnixStream, handler: &dyn Handler, conn: &Conn<'_>) {
    if stream.set_nonblocking(false).is_err() {
        conn.stop_waiting();
        return;
    }
    let limits = conn.limits;
    let deadline = conn.accepted + limits.request_within;
    let read = check_peer(&stream, conn.group)
        .map_err(Refusal::Denied)
        .and_then(|peer| {
            Ok((
                peer,
                read_line(&mut stream, limits, conn.line_end, deadline)?,
            ))
        });
    let read = match read {
        // Dropped just as its line arrived: answered all the same (its place is gone, so
        // for that short while one more request is served than the bound).
        Ok(x) => {
            conn.stop_waiting();
            Ok(x)
        }
        Err(why) if conn.stop_waiting() => Err(why),
        Err(Refusal::Ended { bytes } | Refusal::Incomplete { bytes, .. }) => {
            Err(Refusal::Dropped { bytes })
        }
        Err(_) => Err(Refusal::Dropped { bytes: 0 }),
    };
    let answer = match read {
        Err(why) => handler.refusal(&why),
        Ok((peer, line)) => Some(handler.answer(&Request {
            line: &line,
            peer,
            deadline,
        })),
    };
    let until = Instant::now() + limits.answer_within;
    let _ = finish(&mut stream, answer.as_deref(), until);
}

/// Write `answer` (if any) by `until`, half-close, and read what the client still sends: at
/// most [`DRAIN_BYTES`], each read waiting at most [`DRAIN_WAIT`], all of it by `until` (a
/// client trickling bytes cannot hold the connection longer).
fn finish(stream: &mut UnixStream, answer: Option<&str>, until: Instant) -> std::io::Result<()> {
    let left = || until.saturating_duration_since(Instant::now());
    if let Some(text) = answer {
        stream.set_write_timeout(Some(left().max(Duration::from_millis(1))))?;
        stream.write_all(text.as_bytes())?;
    }
    stream.shutdown(std::net::Shutdown::Write)?;
    let mut sink = [0u8; 4096];
    let mut drained = 0u64;
    while drained < DRAIN_BYTES {
        let wait = left().min(DRAIN_WAIT);
        if wait.is_zero() {
            break;
        }
        stream.set_read_timeout(Some(wait))?;
        match stream.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n as u64,
        }
    }
    Ok(())
}

/// The request line: at most `max_line` bytes before its newline, complete by `deadline`.
/// Public for the fuzz targets (crates/fuzz).
#[doc(hidden)]
pub fn read_line(
    stream: &mut UnixStream,
    limits: &Limits,
    line_end: LineEnd,
    deadline: Instant,
) -> Result<String, Refusal> {
    let mut buf = vec![0u8; limits.max_line + 1];
    let mut len = 0;
    loop {
        if let Some(end) = buf[..len].iter().position(|&b| b == b'\n') {
            return utf8(&buf[..end]);
        }
        if len > limits.max_line {
            return Err(Refusal::TooLong {
                max_line: limits.max_line,
            });
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let incomplete = Refusal::Incomplete {
            within: limits.request_within,
            bytes: len,
        };
        if left.is_zero() {
            return Err(incomplete);
        }
        stream.set_read_timeout(Some(left)).map_err(Refusal::Read)?;
        match stream.read(&mut buf[len..]) {
            Ok(0) if len > 0 && line_end == LineEnd::NewlineOrEnd => return utf8(&buf[..len]),
            Ok(0) => return Err(Refusal::Ended { bytes: len }),
            Ok(n) => len += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(incomplete)
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(Refusal::Read(e)),
        }
    }
}

fn utf8(bytes: &[u8]) -> Result<String, Refusal> {
    String::from_utf8(bytes.to_vec()).map_err(|e| {
        let offset = e.utf8_error().valid_up_to();
        Refusal::NotUtf8 {
            offset,
            byte: bytes[offset],
        }
    })
}

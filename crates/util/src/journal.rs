//! The journald sink: a `tracing` layer that never waits for journald.
//!
//! Each event is encoded on the thread that logs it ([`crate::journal_entry`], journald's native
//! protocol) and offered to a bounded queue of [`JournalConfig::queue`] entries and
//! [`JournalConfig::queue_bytes`] bytes with `try_send`: when the queue is full the entry is
//! dropped and counted, never waited for. One thread,
//! `netsched-journal`, takes entries from the queue and sends each as one datagram to the
//! journal's socket (`/run/systemd/journal/socket`, systemd's "Native Journal Protocol"
//! document). Its socket is non-blocking: while journald does not read (the socket's queue is
//! full) it retries for at most [`JournalConfig::send_timeout`], then drops the entry and
//! counts it, so a stalled journald costs lines, not a daemon's progress.
//!
//! Drops are counted by reason ([`JournalDrops`]); their sum is part of
//! `netsched_log_dropped_lines_total`.

use crate::journal_entry;
use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::Context;

/// journald's socket for the native protocol.
pub const JOURNAL_SOCKET: &str = "/run/systemd/journal/socket";

/// Where and how the journald sink sends.
#[derive(Debug, Clone)]
pub struct JournalConfig {
    /// The journal's datagram socket.
    pub socket: PathBuf,
    /// `SYSLOG_IDENTIFIER` of every entry.
    pub identifier: String,
    /// Entries waiting for the socket at most; more are dropped.
    pub queue: usize,
    /// Bytes of entries waiting at most (an entry is at most 48 KiB, so the count alone
    /// would allow a large queue); more are dropped.
    pub queue_bytes: usize,
    /// How long one entry may wait for a socket journald does not read before it is dropped.
    pub send_timeout: Duration,
    /// How long dropping the guard waits for queued entries to be sent.
    pub flush: Duration,
}

impl JournalConfig {
    /// The journal's own socket, a queue of `queue` entries and 8 MiB, 1 s per entry and 1 s
    /// at exit.
    pub fn new(identifier: &str, queue: usize) -> Self {
        Self {
            socket: PathBuf::from(JOURNAL_SOCKET),
            identifier: identifier.to_string(),
            queue,
            queue_bytes: 8 << 20,
            send_timeout: Duration::from_secs(1),
            flush: Duration::from_secs(1),
        }
    }
}

/// Entries dropped, by reason.
#[derive(Debug, Default)]
pub struct JournalDrops {
    /// The queue was full (in entries or in bytes) when the event was logged.
    pub queue_full: AtomicU64,
    /// The socket refused the entry, or did not take it within `send_timeout`.
    pub send_failed: AtomicU64,
    /// Still queued when the guard's `flush` time ran out at exit, or logged after it.
    pub at_exit: AtomicU64,
}

impl JournalDrops {
    /// Every entry dropped, whatever the reason.
    pub fn total(&self) -> u64 {
        self.queue_full.load(Ordering::Relaxed)
            + self.send_failed.load(Ordering::Relaxed)
            + self.at_exit.load(Ordering::Relaxed)
    }
}

/// What the layer and the writer thread share.
struct Shared {
    drops: JournalDrops,
    sent: AtomicU64,
    stopping: AtomicBool,
    /// Bytes of the entries in the queue.
    queued_bytes: AtomicUsize,
}

/// The `tracing` layer: encodes and queues.
pub struct JournalLayer {
    tx: SyncSender<Vec<u8>>,
    shared: Arc<Shared>,
    identifier: String,
    queue_bytes: usize,
}

/// Keeps the writer thread; dropping it sends what is queued (for at most `flush`), counts
/// the rest as dropped, and ends the thread.
pub struct JournalGuard {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// The counters of a running sink, readable while it runs and after.
#[derive(Clone)]
pub struct JournalStats(Arc<Shared>);

impl JournalStats {
    /// Drops by reason.
    pub fn drops(&self) -> &JournalDrops {
        &self.0.drops
    }
    /// Entries the socket accepted.
    pub fn sent(&self) -> u64 {
        self.0.sent.load(Ordering::Relaxed)
    }
}

/// Start the writer thread and return the layer to install, its guard and its counters.
pub fn start(cfg: JournalConfig) -> io::Result<(JournalLayer, JournalGuard, JournalStats)> {
    let socket = UnixDatagram::unbound()?;
    socket.set_nonblocking(true)?;
    let shared = Arc::new(Shared {
        drops: JournalDrops::default(),
        sent: AtomicU64::new(0),
        stopping: AtomicBool::new(false),
        queued_bytes: AtomicUsize::new(0),
    });
    let (tx, rx) = std::sync::mpsc::sync_channel(cfg.queue.max(1));
    let writer = Writer {
        socket,
        rx,
        shared: shared.clone(),
        cfg: cfg.clone(),
    };
    let thread = std::thread::Builder::new()
        .name("netsched-journal".into())
        .spawn(move || writer.run())?;
    let layer = JournalLayer {
        tx,
        shared: shared.clone(),
        identifier: cfg.identifier,
        queue_bytes: cfg.queue_bytes,
    };
    let guard = JournalGuard {
        shared: shared.clone(),
        thread: Some(thread),
    };
    Ok((layer, guard, JournalStats(shared)))
}

impl<S: Subscriber> tracing_subscriber::Layer<S> for JournalLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let drops = &self.shared.drops;
        if self.shared.stopping.load(Ordering::Relaxed) {
            drops.at_exit.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let entry = journal_entry::encode(event, &self.identifier);
        let len = entry.len();
        let bytes = &self.shared.queued_bytes;
        if bytes.fetch_add(len, Ordering::Relaxed) + len > self.queue_bytes {
            bytes.fetch_sub(len, Ordering::Relaxed);
            drops.queue_full.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let dropped = match self.tx.try_send(entry) {
            Ok(()) => return,
            Err(TrySendError::Full(_)) => &drops.queue_full,
            Err(TrySendError::Disconnected(_)) => &drops.at_exit,
        };
        bytes.fetch_sub(len, Ordering::Relaxed);
        dropped.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for JournalGuard {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The writer thread's state.
struct Writer {
    socket: UnixDatagram,
    rx: Receiver<Vec<u8>>,
    shared: Arc<Shared>,
    cfg: JournalConfig,
}

/// How long the writer sleeps between tries while the socket is full.
const RETRY: Duration = Duration::from_millis(2);
/// How often an idle writer looks at the stop flag.
const IDLE: Duration = Duration::from_millis(50);

impl Writer {
    fn run(self) {
        let mut deadline: Option<Instant> = None;
        loop {
            let entry = match self.rx.recv_timeout(IDLE) {
                Ok(e) => {
                    self.shared
                        .queued_bytes
                        .fetch_sub(e.len(), Ordering::Relaxed);
                    e
                }
                Err(RecvTimeoutError::Timeout) => {
                    if self.shared.stopping.load(Ordering::Relaxed) {
                        // An event that passed the layer's check just before the flag was set.
                        while let Ok(e) = self.rx.try_recv() {
                            self.shared
                                .queued_bytes
                                .fetch_sub(e.len(), Ordering::Relaxed);
                            self.shared.drops.at_exit.fetch_add(1, Ordering::Relaxed);
                        }
                        return;
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => return,
            };
            if self.exit_deadline(&mut deadline) <= Instant::now() {
                self.shared.drops.at_exit.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            self.send(&entry, &mut deadline);
        }
    }

    /// When the writer must stop sending: `flush` after it first saw the guard dropped, or
    /// far away while the guard lives.
    fn exit_deadline(&self, deadline: &mut Option<Instant>) -> Instant {
        if deadline.is_none() && self.shared.stopping.load(Ordering::Relaxed) {
            *deadline = Some(Instant::now() + self.cfg.flush);
        }
        deadline.unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400))
    }

    /// Send one entry, retrying while the socket is full for at most `send_timeout` (and not
    /// past the exit deadline, also when the guard is dropped during the retries); count it as
    /// sent or dropped.
    fn send(&self, entry: &[u8], deadline: &mut Option<Instant>) {
        let give_up = Instant::now() + self.cfg.send_timeout;
        loop {
            match self.socket.send_to(entry, &self.cfg.socket) {
                Ok(_) => {
                    self.shared.sent.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        && Instant::now() < give_up.min(self.exit_deadline(deadline)) =>
                {
                    std::thread::sleep(RETRY);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.shared
                        .drops
                        .send_failed
                        .fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    /// A directory of its own under the system's temp dir, removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> Self {
            static N: AtomicUsize = AtomicUsize::new(0);
            let dir = std::env::temp_dir().join(format!(
                "netsched-journal-{name}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn config(socket: PathBuf, queue: usize) -> JournalConfig {
        JournalConfig {
            socket,
            identifier: "netsched-test".into(),
            queue,
            queue_bytes: 1 << 20,
            send_timeout: Duration::from_millis(500),
            flush: Duration::from_millis(200),
        }
    }

    fn field<'a>(entry: &'a [(String, Vec<u8>)], name: &str) -> &'a [u8] {
        match entry.iter().find(|(n, _)| n == name) {
            Some((_, v)) => v,
            None => panic!("no {name} in {entry:?}"),
        }
    }

    #[test]
    fn an_event_reaches_the_journal_socket_with_its_fields() {
        let dir = TempDir::new("fields");
        let path = dir.0.join("socket");
        let journal = UnixDatagram::bind(&path).unwrap();
        journal
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let (layer, guard, stats) = start(config(path, 16)).unwrap();
        let subscriber = tracing_subscriber::registry().with(layer);
        let line = tracing::subscriber::with_default(subscriber, || {
            let line = line!() + 1;
            tracing::warn!(
                server = "s1",
                checks = 3u64,
                detail = "two\nlines",
                "server {} is down",
                "s1"
            );
            line
        });
        let mut buf = vec![0u8; 65536];
        let n = journal.recv(&mut buf).unwrap();
        let entry = journal_entry::decode(&buf[..n]).unwrap();
        assert_eq!(field(&entry, "MESSAGE"), b"server s1 is down");
        assert_eq!(field(&entry, "PRIORITY"), b"4");
        assert_eq!(field(&entry, "SYSLOG_IDENTIFIER"), b"netsched-test");
        assert_eq!(field(&entry, "TARGET"), module_path!().as_bytes());
        assert!(field(&entry, "CODE_FILE").ends_with(b"journal.rs"));
        assert_eq!(field(&entry, "CODE_LINE"), line.to_string().as_bytes());
        assert_eq!(field(&entry, "SERVER"), b"s1");
        assert_eq!(field(&entry, "CHECKS"), b"3");
        assert_eq!(field(&entry, "DETAIL"), b"two\nlines");
        // The binary-safe form was used on the wire for the value with a newline.
        assert!(buf[..n].windows(7).any(|w| w == b"DETAIL\n"));
        drop(guard);
        assert_eq!(stats.sent(), 1);
        assert_eq!(stats.drops().total(), 0);
    }

    /// Log `n` events carrying `pad` through a sink whose journal socket is bound and never
    /// read (once its queue is full every send would wait); check that every call returned,
    /// that the sink's queue overflowed, and that each event was either received or counted
    /// as dropped. Returns the drops for reason queue full.
    fn log_to_a_journal_that_never_reads(
        cfg: impl Fn(PathBuf) -> JournalConfig,
        n: u64,
        pad: usize,
    ) -> u64 {
        let dir = TempDir::new("stalled");
        let path = dir.0.join("socket");
        let journal = UnixDatagram::bind(&path).unwrap();
        let (layer, guard, stats) = start(cfg(path)).unwrap();
        let done = Arc::new(AtomicU64::new(0));
        let (finished_tx, finished) = std::sync::mpsc::channel();
        let counter = done.clone();
        let logger = std::thread::spawn(move || {
            let subscriber = tracing_subscriber::registry().with(layer);
            let pad = "x".repeat(pad);
            tracing::subscriber::with_default(subscriber, || {
                for i in 0..n {
                    tracing::info!(seq = i, pad = pad.as_str(), "event {i}");
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            });
            let _ = finished_tx.send(());
        });
        // Only turns a hang into a failure; the verdict is the count below.
        let _ = finished.recv_timeout(Duration::from_secs(300));
        assert_eq!(
            done.load(Ordering::Relaxed),
            n,
            "log calls waited for the journal"
        );
        logger.join().unwrap();
        let queue_full = stats.drops().queue_full.load(Ordering::Relaxed);
        assert!(queue_full > 0, "the queue never filled");
        drop(guard);
        journal.set_nonblocking(true).unwrap();
        let mut received = 0u64;
        let mut buf = vec![0u8; 65536];
        while journal.recv(&mut buf).is_ok() {
            received += 1;
        }
        assert_eq!(received, stats.sent());
        assert_eq!(stats.sent() + stats.drops().total(), n);
        queue_full
    }

    #[test]
    fn a_journal_that_never_reads_costs_lines_not_log_calls() {
        const N: u64 = 5000;
        const QUEUE: usize = 64;
        let queue_full = log_to_a_journal_that_never_reads(|p| config(p, QUEUE), N, 0);
        // At most the queue, plus one entry in the writer's hands, plus what the socket took
        // (far fewer than N: it is never read), escaped the overflow.
        assert!(queue_full >= N / 2, "{queue_full}");
    }

    #[test]
    fn the_queue_is_bounded_in_bytes_too() {
        const N: u64 = 1000;
        // 1,000 entries would fit by count; 16 KiB holds about 15 of these 1 KiB entries.
        let cfg = |p| JournalConfig {
            queue_bytes: 16 * 1024,
            ..config(p, 10_000)
        };
        let queue_full = log_to_a_journal_that_never_reads(cfg, N, 1024);
        assert!(queue_full >= N / 2, "{queue_full}");
    }

    #[test]
    fn no_journal_socket_counts_send_failures() {
        let dir = TempDir::new("absent");
        let (layer, guard, stats) = start(config(dir.0.join("missing"), 16)).unwrap();
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            for _ in 0..3 {
                tracing::error!("nobody listens");
            }
        });
        drop(guard);
        assert_eq!(stats.sent(), 0);
        assert_eq!(stats.drops().send_failed.load(Ordering::Relaxed), 3);
        assert_eq!(stats.drops().total(), 3);
    }
}

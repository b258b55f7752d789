//! The bounded hand-off of a daemon's commands from its control threads to its packet thread,
//! and of each answer back: the control side never blocks on a full queue (it is told
//! [`HandOffError::Busy`] at once) and waits for an answer only until a deadline; the packet
//! side takes a command with `try_recv` and answers on a one-place channel, so it never waits
//! for a control thread either. What the commands and answers are, and when the packet thread
//! looks, stays in each daemon (the filter, the switch, the NFQUEUE daemon).
//!
//! Cost: one `sync_channel(1)` per command; nothing on the packet thread but `try_recv` and
//! `try_send`.

use std::fmt;
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::time::{Duration, Instant};

/// A command and where its answer goes.
pub struct Envelope<C, A> {
    pub command: C,
    reply: SyncSender<A>,
}

impl<C, A> Envelope<C, A> {
    /// Answer the command; never blocks (the reply channel has one place, used once). An
    /// answer the control thread no longer waits for is dropped.
    pub fn answer(self, a: A) {
        let _ = self.reply.try_send(a);
    }
}

/// The packet thread's end: [`Inbox::take`] never blocks.
pub struct Inbox<C, A> {
    rx: Receiver<Envelope<C, A>>,
}

impl<C, A> Inbox<C, A> {
    /// The next waiting command, if any.
    pub fn take(&self) -> Option<Envelope<C, A>> {
        self.rx.try_recv().ok()
    }
}

/// The control threads' end.
pub struct Outbox<C, A> {
    tx: SyncSender<Envelope<C, A>>,
    places: usize,
}

impl<C, A> Clone for Outbox<C, A> {
    fn clone(&self) -> Self {
        Outbox {
            tx: self.tx.clone(),
            places: self.places,
        }
    }
}

/// A command channel with room for `places` waiting commands: the control side and the
/// packet thread's side.
pub fn channel<C, A>(places: usize) -> (Outbox<C, A>, Inbox<C, A>) {
    let (tx, rx) = sync_channel(places);
    (Outbox { tx, places }, Inbox { rx })
}

/// Why a command got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandOffError {
    /// `waiting` commands already wait: the queue is full.
    Busy { waiting: usize },
    /// The packet thread's end of the channel is gone.
    Stopped,
    /// No answer before the deadline (the command may still be carried out).
    NoAnswer,
    /// The packet thread dropped the command without answering it.
    Dropped,
}

impl fmt::Display for HandOffError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandOffError::Busy { waiting } => write!(f, "busy: {waiting} commands already wait"),
            HandOffError::Stopped => f.write_str("the packet thread has stopped"),
            HandOffError::NoAnswer => f.write_str("no answer before the deadline"),
            HandOffError::Dropped => f.write_str("the command was dropped unanswered"),
        }
    }
}

impl std::error::Error for HandOffError {}

/// A command handed over, its answer still to come.
pub struct Pending<A> {
    answer: Receiver<A>,
}

impl<A> Pending<A> {
    /// Wait for the answer until `deadline`.
    pub fn wait(self, deadline: Instant) -> Result<A, HandOffError> {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.answer.recv_timeout(left) {
            Ok(a) => Ok(a),
            Err(RecvTimeoutError::Timeout) => Err(HandOffError::NoAnswer),
            Err(RecvTimeoutError::Disconnected) => Err(HandOffError::Dropped),
        }
    }

    /// Wait for the answer until `deadline`, asking `give_up` every `every`: `NoAnswer` as
    /// soon as it says so (the packet side is known not to answer: a watchdog found it stalled).
    pub fn wait_or(
        self,
        deadline: Instant,
        every: Duration,
        give_up: impl Fn() -> bool,
    ) -> Result<A, HandOffError> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.answer.recv_timeout(left.min(every)) {
                Ok(a) => return Ok(a),
                Err(RecvTimeoutError::Disconnected) => return Err(HandOffError::Dropped),
                Err(RecvTimeoutError::Timeout) => {
                    if left <= every || give_up() {
                        return Err(HandOffError::NoAnswer);
                    }
                }
            }
        }
    }
}

impl<C, A> Outbox<C, A> {
    /// Queue `command` without waiting: [`HandOffError::Busy`] when the queue is full,
    /// [`HandOffError::Stopped`] when the packet thread is gone.
    pub fn send(&self, command: C) -> Result<Pending<A>, HandOffError> {
        let (reply, answer) = sync_channel(1);
        match self.tx.try_send(Envelope { command, reply }) {
            Ok(()) => Ok(Pending { answer }),
            Err(TrySendError::Full(_)) => Err(HandOffError::Busy {
                waiting: self.places,
            }),
            Err(TrySendError::Disconnected(_)) => Err(HandOffError::Stopped),
        }
    }

    /// Hand `command` to the packet thread and wait for its answer until `deadline`.
    pub fn execute(&self, command: C, deadline: Instant) -> Result<A, HandOffError> {
        self.send(command)?.wait(deadline)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_is_busy_at_once_a_silent_side_times_out_and_a_gone_one_is_stopped() {
        let (out, inbox) = channel::<u32, u32>(2);
        let soon = Instant::now() + Duration::from_millis(20);
        assert_eq!(out.execute(1, soon), Err(HandOffError::NoAnswer));
        let _pending = out.send(2).unwrap();
        let t = Instant::now();
        let far = Instant::now() + Duration::from_secs(5);
        assert_eq!(out.execute(3, far), Err(HandOffError::Busy { waiting: 2 }));
        assert!(t.elapsed() < Duration::from_secs(1));
        // Taken without an answer: the waiting side learns at once.
        let pending = {
            let _ = inbox.take().unwrap();
            let _ = inbox.take().unwrap();
            out.send(4).unwrap()
        };
        drop(inbox.take().unwrap());
        assert_eq!(pending.wait(far), Err(HandOffError::Dropped));
        drop(inbox);
        assert_eq!(out.send(5).err(), Some(HandOffError::Stopped));
    }

    #[test]
    fn a_wait_gives_up_when_told_and_ends_at_the_deadline_otherwise() {
        let (out, _inbox) = channel::<u32, u32>(2);
        let give_up = std::sync::atomic::AtomicBool::new(true);
        let t = Instant::now();
        let far = t + Duration::from_secs(10);
        let every = Duration::from_millis(10);
        let r = out.send(1).unwrap().wait_or(far, every, || {
            give_up.load(std::sync::atomic::Ordering::Relaxed)
        });
        assert_eq!(r, Err(HandOffError::NoAnswer));
        assert!(t.elapsed() < Duration::from_secs(5));
        let soon = Instant::now() + Duration::from_millis(30);
        let r = out.send(2).unwrap().wait_or(soon, every, || false);
        assert_eq!(r, Err(HandOffError::NoAnswer));
        assert!(Instant::now() >= soon);
    }

    #[test]
    fn the_packet_side_answers_what_it_takes() {
        let (out, inbox) = channel::<u32, u32>(4);
        let t = std::thread::spawn(move || loop {
            if let Some(e) = inbox.take() {
                let n = e.command;
                e.answer(n * 2);
                if n == 0 {
                    return;
                }
            } else {
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        let far = Instant::now() + Duration::from_secs(10);
        assert_eq!(out.execute(21, far), Ok(42));
        assert_eq!(out.clone().execute(0, far), Ok(0));
        t.join().unwrap();
    }
}

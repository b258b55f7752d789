//! The bytes one response put on its client connection, head included, for the access log's
//! `bytes` field. It is HAProxy's `bytes_read`, which counts everything sent to the client by
//! the time the line is logged, HTTP headers included (HAProxy Configuration Manual 2.6,
//! §8.2.3 "HTTP log format"; the same field in §8.2.4 "HTTPS log format").
//!
//! hyper writes the head, so the head's size is not known to the code that forwards the
//! body. It is counted where the bytes leave instead: the client connection's writer
//! ([`crate::client_io::WriteIdleLimit`]) adds every byte the socket accepted to
//! [`SentBytes::wrote`]. A response's bytes are those written between the end of the previous
//! response on the connection and its own end. Its end is the first flush after its body
//! ended: hyper flushes its write buffer to the socket before it flushes the socket, so by
//! then the response's last byte (chunk trailer included) has been accepted. The entry of a
//! response whose body has ended waits here for that flush ([`SentBytes::ended`]); a response
//! cut short (the client left) is logged at once with what was written ([`SentBytes::cut`]),
//! and one still waiting when the connection ends is logged then, with what was written.
//!
//! On a connection whose client pipelines requests, hyper may put the next response's head
//! in the buffer before that flush: its bytes then count towards the earlier response.
//!
//! Cost: with the access log on, one relaxed atomic add per socket write and one atomic load
//! per flush; the lock is taken once per response. With the log off nothing is counted.

use crate::access_log::Pending;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// Responses waiting for their flush at most (one at a time without pipelining); past it the
/// oldest is logged at once.
const MAX_WAITING: usize = 16;

/// One client connection's written bytes and the access log entries waiting for them.
#[derive(Default)]
pub struct SentBytes {
    written: AtomicU64,
    /// Some entry waits for the next flush (checked without the lock).
    waiting: AtomicBool,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// `written` at the end of the previous response.
    base: u64,
    ended: Vec<(Pending, [u8; 2])>,
}

impl SentBytes {
    /// The socket accepted `n` more bytes.
    pub fn wrote(&self, n: usize) {
        self.written.fetch_add(n as u64, Ordering::Relaxed);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// This response's bytes: written since the previous one ended.
    fn take(&self, inner: &mut Inner) -> u64 {
        let now = self.written.load(Ordering::Relaxed);
        let bytes = now.saturating_sub(inner.base);
        inner.base = now;
        bytes
    }

    /// A response's body has ended (`state` as it ended): its entry is sent at the next
    /// flush, with its bytes.
    pub fn ended(&self, pending: Pending, state: [u8; 2]) {
        let mut inner = self.lock();
        if inner.ended.len() >= MAX_WAITING {
            let (p, s) = inner.ended.remove(0);
            let bytes = self.take(&mut inner);
            p.finish(bytes, s);
        }
        inner.ended.push((pending, state));
        self.waiting.store(true, Ordering::Release);
    }

    /// A response cut short (`state`): its entry is sent now, with the bytes written so far.
    pub fn cut(&self, pending: Pending, state: [u8; 2]) {
        let mut inner = self.lock();
        // Responses that ended before it are done with everything written before it.
        self.send_waiting(&mut inner);
        let bytes = self.take(&mut inner);
        pending.finish(bytes, state);
    }

    /// The connection's writes are flushed: every ended response's bytes are on the socket.
    pub fn flushed(&self) {
        if self.waiting.swap(false, Ordering::AcqRel) {
            let mut inner = self.lock();
            self.send_waiting(&mut inner);
        }
    }

    fn send_waiting(&self, inner: &mut Inner) {
        let ended = std::mem::take(&mut inner.ended);
        for (p, s) in ended {
            let bytes = self.take(inner);
            p.finish(bytes, s);
        }
    }
}

impl Drop for SentBytes {
    /// The connection is gone: entries still waiting are sent with what was written.
    fn drop(&mut self) {
        let mut inner = std::mem::take(self.inner.get_mut().unwrap_or_else(|p| p.into_inner()));
        self.send_waiting(&mut inner);
    }
}

//! The client side of an L7 connection, with an inactivity limit on writes.
//!
//! hyper's server has a limit for reading a request head (`header_read_timeout`) but none for
//! writing a response: a client that stops reading (its receive window shut) would hold its
//! connection, the backend connection and the server's `maxconn` slot for as long as it
//! liked. [`WriteIdleLimit`] fails a write (or flush) that has made no progress for
//! `timeouts.client` (HAProxy's `timeout client` applies the same way to either direction), so
//! hyper ends the connection and the lease is released.
//!
//! Cost: nothing while writes complete; the timer is allocated on the first write that has
//! to wait and re-armed (not reallocated) after each stall. Reads pass through untouched: the
//! request head has hyper's limit and the request body `h1::Conn::send_request`'s.
//!
//! With the access log on it also counts the bytes the socket accepted and reports each
//! completed flush to the connection's [`SentBytes`] (one relaxed atomic add per write).
//!
//! [`ClientStream`] passes vectored writes through: hyper's HTTP/2 server (the `h2` crate)
//! writes a DATA frame's head and its payload as two slices, which TLS (`tokio-rustls`) then
//! seals into one record and one `writev(2)`; without vectored writes each slice is a record
//! and a system call of its own (two per response of 1 KiB).

use crate::sent_bytes::SentBytes;
use hyper::rt::{Read, ReadBufCursor, Write};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// Marks the error a stalled write ends with, so the connection's end is counted as the
/// client's timeout.
#[derive(Debug)]
pub struct ClientWriteTimeout;

impl std::fmt::Display for ClientWriteTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the client read nothing within the client timeout")
    }
}

impl std::error::Error for ClientWriteTimeout {}

/// An I/O object whose writes fail after `limit` without progress.
pub struct WriteIdleLimit<T> {
    inner: T,
    limit: Duration,
    timer: Option<Pin<Box<Sleep>>>,
    /// The timer runs for the current stall (armed at its first `Pending`).
    armed: bool,
    /// Where written bytes and flushes are reported (the access log is on).
    sent: Option<Arc<SentBytes>>,
}

impl<T> WriteIdleLimit<T> {
    pub fn new(inner: T, limit: Duration) -> Self {
        WriteIdleLimit {
            inner,
            limit,
            timer: None,
            armed: false,
            sent: None,
        }
    }

    /// Report every byte the socket accepts, and every completed flush, to `sent`.
    pub fn counting(mut self, sent: Option<Arc<SentBytes>>) -> Self {
        self.sent = sent;
        self
    }

    fn wrote(&self, r: &Poll<io::Result<usize>>) {
        if let (Some(s), Poll::Ready(Ok(n))) = (&self.sent, r) {
            s.wrote(*n);
        }
    }

    /// A write had to wait: start (or go on with) the stall's timer; an error once it ran out.
    fn stalled<R>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<R>> {
        if !self.armed {
            let deadline = Instant::now() + self.limit;
            match &mut self.timer {
                Some(t) => t.as_mut().reset(deadline),
                None => self.timer = Some(Box::pin(tokio::time::sleep_until(deadline))),
            }
            self.armed = true;
        }
        match self.timer.as_mut().map(|t| t.as_mut().poll(cx)) {
            Some(Poll::Ready(())) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                ClientWriteTimeout,
            ))),
            _ => Poll::Pending,
        }
    }

    fn progressed<R>(
        &mut self,
        r: Poll<io::Result<R>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<R>> {
        match r {
            Poll::Pending => self.stalled(cx),
            ready => {
                self.armed = false;
                ready
            }
        }
    }
}

impl<T: Read + Unpin> Read for WriteIdleLimit<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<T: Write + Unpin> Write for WriteIdleLimit<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.wrote(&r);
        this.progressed(r, cx)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_flush(cx);
        if let (Some(s), Poll::Ready(Ok(()))) = (&this.sent, &r) {
            s.flushed();
        }
        this.progressed(r, cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.wrote(&r);
        this.progressed(r, cx)
    }
}

/// A client connection as the L7 server reads it: plain TCP, or TLS terminated here
/// (`tls.rs`). One type, so the server's code path is the same for both.
pub enum ClientStream {
    Plain(tokio::net::TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<tokio::net::TcpStream>>),
}

impl tokio::io::AsyncRead for ClientStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            ClientStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for ClientStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            ClientStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            ClientStream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }
    fn is_write_vectored(&self) -> bool {
        match self {
            ClientStream::Plain(s) => s.is_write_vectored(),
            ClientStream::Tls(s) => s.is_write_vectored(),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_flush(cx),
            ClientStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            ClientStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

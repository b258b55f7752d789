//! The cheap response reader of the load generators: a fixed buffer that responses stream
//! through, the head parsed by [`parse_response_head`] into a field array on the stack (no
//! header map, no allocation per response) and the body decoded by [`BodyDecoder`] and only
//! counted. Several responses may follow one another on a keep-alive connection; the bytes
//! after one stay for the next.
//!
//! Source: the framing of [`super::head`] and [`super::body`] (RFC 9112 §6.3, §7.1).
//! Memory: the buffer given to [`ResponseReader::new`] (at least [`MAX_RESPONSE_HEAD`]); a
//! head, chunk-size line or trailer section must fit in it, body data never has to.
//! Cost: one copy of the bytes left at the front when the buffer is compacted.

use super::body::{BodyDecoder, BodyError, Step};
use super::head::{parse_response_head, HeadError, Parsed};
use super::{Framing, MAX_RESPONSE_HEAD, MAX_RESPONSE_HEADERS};

/// A response as far as a load generator cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    pub status: u16,
    pub http11: bool,
    pub framing: Framing,
    /// The server keeps the connection open after this response (never after a
    /// close-delimited body).
    pub keep_alive: bool,
}

/// What [`ResponseReader::advance`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Nothing more can be decided without more bytes.
    NeedMore,
    /// An interim 1xx response was read (and dropped).
    Interim(u16),
    /// A final head was read; its body follows.
    Head(Summary),
    /// The response's body ended; the reader waits for the next head.
    Done(Summary),
}

/// Why a response could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadError {
    Head(HeadError),
    Body(BodyError),
    /// A chunk-size line or trailer section did not fit in the buffer.
    LineTooLong,
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Head(e) => e.fmt(f),
            ReadError::Body(e) => e.fmt(f),
            ReadError::LineTooLong => f.write_str("chunk-size line or trailers over the buffer"),
        }
    }
}

impl std::error::Error for ReadError {}

/// Where the reader is in the current response.
#[derive(Debug, Clone, Copy)]
enum Phase {
    Head,
    Body(Summary, BodyDecoder),
}

/// Responses read from a connection's bytes, head by head.
#[derive(Debug)]
pub struct ResponseReader {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    phase: Phase,
    /// Body bytes of the current response so far.
    body_bytes: u64,
    head_request: bool,
}

impl ResponseReader {
    /// A reader with a buffer of `capacity` bytes (raised to [`MAX_RESPONSE_HEAD`]).
    pub fn new(capacity: usize) -> Self {
        ResponseReader {
            buf: vec![0; capacity.max(MAX_RESPONSE_HEAD)],
            start: 0,
            end: 0,
            phase: Phase::Head,
            body_bytes: 0,
            head_request: false,
        }
    }

    /// The next response answers a HEAD request (it has no body).
    pub fn expect_head_response(&mut self, head_request: bool) {
        self.head_request = head_request;
    }

    /// Body bytes of the current (or just ended) response.
    pub fn body_bytes(&self) -> u64 {
        self.body_bytes
    }

    /// Bytes received and not yet consumed (after a `Done`: the start of another response).
    pub fn buffered(&self) -> usize {
        self.end - self.start
    }

    /// Forget everything buffered and any response in progress (a new connection).
    pub fn reset(&mut self) {
        (self.start, self.end, self.phase, self.body_bytes) = (0, 0, Phase::Head, 0);
    }

    /// Room to read into, compacting the buffer first; an error when what is buffered of a
    /// head or line already fills it.
    pub fn space(&mut self) -> Result<&mut [u8], ReadError> {
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        } else if self.end == self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if self.end == self.buf.len() {
                return Err(match self.phase {
                    Phase::Head => ReadError::Head(HeadError::TooLarge),
                    Phase::Body(..) => ReadError::LineTooLong,
                });
            }
        }
        Ok(&mut self.buf[self.end..])
    }

    /// `n` bytes were read into the room [`ResponseReader::space`] gave.
    pub fn filled(&mut self, n: usize) {
        self.end = (self.end + n).min(self.buf.len());
    }

    /// Copy `bytes` in (for callers that read elsewhere, and tests); an error when they do
    /// not fit beside what is buffered.
    pub fn push(&mut self, bytes: &[u8]) -> Result<(), ReadError> {
        let room = self.space()?;
        if room.len() < bytes.len() {
            return Err(ReadError::LineTooLong);
        }
        room[..bytes.len()].copy_from_slice(bytes);
        self.filled(bytes.len());
        Ok(())
    }

    /// Decode what is buffered, up to the next event.
    pub fn advance(&mut self) -> Result<Event, ReadError> {
        loop {
            let at = &self.buf[self.start..self.end];
            match self.phase {
                Phase::Head => {
                    if at.is_empty() {
                        return Ok(Event::NeedMore);
                    }
                    let mut fields = [httparse::EMPTY_HEADER; MAX_RESPONSE_HEADERS];
                    let parsed = parse_response_head(at, self.head_request, &mut fields)
                        .map_err(ReadError::Head)?;
                    match parsed {
                        Parsed::Partial => return Ok(Event::NeedMore),
                        Parsed::Interim { used, status } => {
                            self.start += used;
                            return Ok(Event::Interim(status));
                        }
                        Parsed::Final(h) => {
                            self.start += h.used;
                            let s = Summary {
                                status: h.status,
                                http11: h.http11,
                                framing: h.framing,
                                keep_alive: h.keep_alive && h.framing != Framing::Close,
                            };
                            self.body_bytes = 0;
                            self.phase = Phase::Body(s, BodyDecoder::new(h.framing));
                            return Ok(Event::Head(s));
                        }
                    }
                }
                Phase::Body(s, ref mut dec) => match dec.step(at).map_err(ReadError::Body)? {
                    Step::Data(n) => {
                        self.start += n;
                        self.body_bytes += n as u64;
                    }
                    Step::Skip(n) => self.start += n,
                    Step::End(n) => {
                        self.start += n;
                        self.phase = Phase::Head;
                        return Ok(Event::Done(s));
                    }
                    Step::NeedMore => return Ok(Event::NeedMore),
                },
            }
        }
    }

    /// The connection ended: the current response's end if its body was close-delimited
    /// (`Ok(Some)`), nothing if no response was under way (`Ok(None)`), else an error.
    pub fn at_eof(&mut self) -> Result<Option<Summary>, ReadError> {
        match self.phase {
            Phase::Head if self.start == self.end => Ok(None),
            Phase::Head => Err(ReadError::Body(BodyError::Truncated)),
            Phase::Body(s, ref mut dec) => {
                dec.at_eof().map_err(ReadError::Body)?;
                self.phase = Phase::Head;
                Ok(Some(s))
            }
        }
    }

    /// Read one whole response from `r` (blocking, or with the socket's own timeouts): its
    /// summary once its body has ended or the connection closed a close-delimited body.
    /// Interim responses are skipped.
    pub fn read_from(&mut self, r: &mut impl std::io::Read) -> Result<Summary, ReadFailure> {
        loop {
            match self.advance()? {
                Event::Done(s) => return Ok(s),
                Event::Interim(_) | Event::Head(_) => continue,
                Event::NeedMore => {}
            }
            let n = loop {
                match r.read(self.space()?) {
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    other => break other?,
                }
            };
            if n == 0 {
                return match self.at_eof()? {
                    Some(s) => Ok(s),
                    None => Err(ReadFailure::Closed),
                };
            }
            self.filled(n);
        }
    }
}

/// Why [`ResponseReader::read_from`] returned no response.
#[derive(Debug)]
pub enum ReadFailure {
    /// The response broke HTTP/1 framing.
    Http(ReadError),
    /// The connection closed before any byte of a response.
    Closed,
    Io(std::io::Error),
}

impl From<ReadError> for ReadFailure {
    fn from(e: ReadError) -> Self {
        ReadFailure::Http(e)
    }
}

impl From<std::io::Error> for ReadFailure {
    fn from(e: std::io::Error) -> Self {
        ReadFailure::Io(e)
    }
}

impl std::fmt::Display for ReadFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadFailure::Http(e) => e.fmt(f),
            ReadFailure::Closed => f.write_str("connection closed before the response"),
            ReadFailure::Io(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ReadFailure {}

//! An HTTP/1.x response body's framing, decoded without I/O: told the bytes at hand, it says
//! how many at their front are body data, how many are framing to drop, or that more are
//! needed. The caller owns the buffer, so a proxy can hand data on without a copy and a load
//! generator can just count it.
//!
//! Source: RFC 9112 §6.3 (length), §7.1 (chunked coding: chunk-size line with extensions,
//! data, CRLF, last chunk, trailer section); chunk-size lines by `httparse::parse_chunk_size`.
//! Cost: O(1) per data piece, one scan per chunk-size line or trailer section; no memory of
//! its own. Bounds: a chunk-size line over [`MAX_CHUNK_LINE`] or a trailer section over
//! [`MAX_TRAILERS`] bytes is an error, so a caller's buffer never has to grow past them.

use super::{Framing, MAX_CHUNK_LINE, MAX_TRAILERS};

/// Where the body stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// This many bytes left (Content-Length).
    Length(u64),
    /// A chunk-size line is next.
    ChunkSize,
    /// This many bytes left in the current chunk.
    ChunkData(u64),
    /// The CRLF after a chunk's data.
    ChunkEnd,
    /// The trailer section after the last chunk.
    Trailers,
    /// Everything until the server closes.
    Close,
    /// Read to its end.
    Done,
}

/// What the front of the buffer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// This many bytes of body data (at least one).
    Data(usize),
    /// This many bytes of framing (a chunk-size line, a chunk's CRLF), to drop.
    Skip(usize),
    /// The body ended after this many bytes of framing (0 for a length-delimited body).
    End(usize),
    /// Nothing can be decided without more bytes.
    NeedMore,
}

/// A body that breaks its framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyError {
    /// A bad chunk-size line, chunk end or trailer section, or one over its bound.
    BadChunk,
    /// The connection ended before the body did.
    Truncated,
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BodyError::BadChunk => "malformed chunked encoding",
            BodyError::Truncated => "connection closed before the body's end",
        })
    }
}

impl std::error::Error for BodyError {}

/// The decoder of one response body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyDecoder {
    state: State,
}

impl BodyDecoder {
    pub fn new(framing: Framing) -> Self {
        let state = match framing {
            Framing::Length(0) => State::Done,
            Framing::Length(n) => State::Length(n),
            Framing::Chunked => State::ChunkSize,
            Framing::Close => State::Close,
        };
        BodyDecoder { state }
    }

    /// The body has been read to its end.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Body bytes still to come, when known (a length-delimited body, or an ended one).
    pub fn remaining(&self) -> Option<u64> {
        match self.state {
            State::Done => Some(0),
            State::Length(n) => Some(n),
            _ => None,
        }
    }

    /// Decode the front of `buf` (the bytes at hand, none consumed yet). The caller removes
    /// what a `Data`, `Skip` or `End` covers before the next call.
    pub fn step(&mut self, buf: &[u8]) -> Result<Step, BodyError> {
        match self.state {
            State::Done => Ok(Step::End(0)),
            State::Length(left) | State::ChunkData(left) if !buf.is_empty() => {
                let n = (buf.len() as u64).min(left);
                let left = left - n;
                self.state = match self.state {
                    State::Length(_) if left == 0 => State::Done,
                    State::Length(_) => State::Length(left),
                    _ if left == 0 => State::ChunkEnd,
                    _ => State::ChunkData(left),
                };
                Ok(Step::Data(n as usize))
            }
            State::Close if !buf.is_empty() => Ok(Step::Data(buf.len())),
            State::ChunkSize if !buf.is_empty() => match httparse::parse_chunk_size(buf) {
                Ok(httparse::Status::Complete((used, size))) => {
                    self.state = if size == 0 {
                        State::Trailers
                    } else {
                        State::ChunkData(size)
                    };
                    Ok(Step::Skip(used))
                }
                Ok(httparse::Status::Partial) if buf.len() <= MAX_CHUNK_LINE => Ok(Step::NeedMore),
                _ => Err(BodyError::BadChunk),
            },
            State::ChunkEnd if buf.len() >= 2 => {
                if &buf[..2] != b"\r\n" {
                    return Err(BodyError::BadChunk);
                }
                self.state = State::ChunkSize;
                Ok(Step::Skip(2))
            }
            State::Trailers if buf.len() >= 2 => {
                // No trailer fields (CRLF), or fields up to an empty line: dropped.
                let end = if buf.starts_with(b"\r\n") {
                    Some(2)
                } else {
                    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
                };
                match end {
                    Some(n) => {
                        self.state = State::Done;
                        Ok(Step::End(n))
                    }
                    None if buf.len() > MAX_TRAILERS => Err(BodyError::BadChunk),
                    None => Ok(Step::NeedMore),
                }
            }
            _ => Ok(Step::NeedMore),
        }
    }

    /// The connection ended (EOF): the end of a close-delimited body, else a truncated one.
    pub fn at_eof(&mut self) -> Result<(), BodyError> {
        match self.state {
            State::Close | State::Done => {
                self.state = State::Done;
                Ok(())
            }
            _ => Err(BodyError::Truncated),
        }
    }
}

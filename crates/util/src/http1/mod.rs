//! The one HTTP/1.x response reader of the workspace: the balancer's backend client
//! (`netsched-balance`'s `h1.rs`, which builds a header map from the fields and hands body
//! data on without a copy) and the load generators (`netsched balance load`, the lab's
//! percentile-web and lvs-cluster clients, which only need the status, the persistence and
//! the body's end) frame responses with the same code.
//!
//! Source: RFC 9112 (HTTP/1.1) §6.3 message body length, §7.1 chunked coding, §9.3
//! persistence; RFC 9110 §15.2 interim responses; heads and chunk-size lines parsed by
//! `httparse`.
//! - [`head`]: [`parse_response_head`], the status, framing and persistence of a head;
//! - [`body`]: [`BodyDecoder`], content-length, chunked (extensions, trailers) and
//!   close-delimited bodies without I/O;
//! - [`reader`]: [`ResponseReader`], both over a fixed buffer, for callers that count rather
//!   than forward (no header map).
//!
//! Bounds: a head of at most [`MAX_RESPONSE_HEAD`] bytes and [`MAX_RESPONSE_HEADERS`]
//! fields, a chunk-size line of [`MAX_CHUNK_LINE`], a trailer section of [`MAX_TRAILERS`].
//! A leaf module: `httparse` is its only dependency, so data planes, the lab and the CLI can
//! all use it without depending on one another.

pub mod body;
pub mod head;
pub mod reader;

pub use body::{BodyDecoder, BodyError, Step};
pub use head::{connection_tokens, parse_response_head, ConnectionTokens, Head, HeadError, Parsed};
pub use httparse::{Header, EMPTY_HEADER};
pub use reader::{Event, ReadError, ReadFailure, ResponseReader, Summary};

/// Largest response head (status line + header fields) accepted.
pub const MAX_RESPONSE_HEAD: usize = 16 * 1024;
/// Most header fields in a response head (hyper's default too).
pub const MAX_RESPONSE_HEADERS: usize = 100;
/// Longest chunk-size line (size and extensions).
pub const MAX_CHUNK_LINE: usize = 4096;
/// Longest trailer section of a chunked body (read and dropped).
pub const MAX_TRAILERS: usize = 16 * 1024;

/// How a response body ends (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// After this many bytes (Content-Length; 0 for HEAD, 1xx, 204, 304).
    Length(u64),
    /// Chunked coding, decoded.
    Chunked,
    /// When the server closes the connection.
    Close,
}

#[cfg(test)]
mod tests;

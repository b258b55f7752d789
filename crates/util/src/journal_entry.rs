//! One `tracing` event as one journal entry in journald's native protocol, as bytes ready to be
//! sent as one datagram.
//!
//! The format follows systemd's "Native Journal Protocol" document
//! (<https://systemd.io/JOURNAL_NATIVE_PROTOCOL/>): an entry is a sequence of fields, each
//! either `NAME=value\n` or, when the value contains a newline, the binary-safe form `NAME\n`,
//! the value's length as a 64-bit little-endian integer, the value's bytes, then `\n`. Field
//! names are upper-case letters, digits and `_`, do not start with a digit or with `_` (those
//! are the journal's own trusted fields) and are at most 64 characters.
//!
//! Fields written: `MESSAGE`, `PRIORITY` (syslog's numbers: error 3, warn 4, info 5, debug 6,
//! trace 7), `SYSLOG_IDENTIFIER`, `TARGET` (the crate and module), `CODE_FILE`, `CODE_LINE`,
//! then every other field of the event under its name upper-cased (`server` → `SERVER`); a
//! name that would clash with one of those or is not a valid journal name after upper-casing
//! is written as `F_` + the cleaned name.
//!
//! Bounds: a value is cut at [`MAX_VALUE_BYTES`] (on a character boundary, `…` appended), and
//! an entry never exceeds [`MAX_ENTRY_BYTES`]: fields that would pass it are left out, and
//! `MESSAGE` and `PRIORITY` come first so they are always kept. journald accepts far larger
//! datagrams; the bound keeps one event from needing the protocol's memfd path and a large
//! socket buffer.

use std::fmt;
use tracing::field::{Field, Visit};
use tracing::{Event, Level};

/// Longest value written; longer ones are cut.
pub const MAX_VALUE_BYTES: usize = 8 * 1024;
/// Largest entry (one datagram); fields beyond it are left out.
pub const MAX_ENTRY_BYTES: usize = 48 * 1024;
/// Longest field name the journal accepts.
const MAX_NAME: usize = 64;
/// Names this encoder writes itself; an event field of the same name gets the `F_` prefix.
const OWN_FIELDS: [&str; 6] = [
    "MESSAGE",
    "PRIORITY",
    "SYSLOG_IDENTIFIER",
    "TARGET",
    "CODE_FILE",
    "CODE_LINE",
];

/// The syslog priority journald stores for a `tracing` level.
pub fn priority(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 5,
        Level::DEBUG => 6,
        Level::TRACE => 7,
    }
}

/// The journal field name for an event field: upper-cased, every character outside `A-Z`,
/// `0-9`, `_` replaced by `_`, prefixed with `F_` when it would clash with the encoder's own
/// fields or start with a digit or `_`, and cut to 64 characters.
pub fn field_name(name: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| match c.to_ascii_uppercase() {
            u @ ('A'..='Z' | '0'..='9' | '_') => u,
            _ => '_',
        })
        .collect();
    let needs_prefix = clean.is_empty()
        || clean.starts_with(|c: char| c == '_' || c.is_ascii_digit())
        || OWN_FIELDS.contains(&clean.as_str());
    let mut out = if needs_prefix {
        format!("F_{clean}")
    } else {
        clean
    };
    out.truncate(MAX_NAME);
    out
}

/// Append one field in the protocol's form; false (and nothing appended) when it would take
/// the entry past [`MAX_ENTRY_BYTES`].
fn put(buf: &mut Vec<u8>, name: &str, value: &str) -> bool {
    let value = cut(value);
    let binary = value.contains('\n');
    let need = name.len() + value.len() + if binary { 10 } else { 2 };
    if buf.len() + need > MAX_ENTRY_BYTES {
        return false;
    }
    buf.extend_from_slice(name.as_bytes());
    if binary {
        buf.push(b'\n');
        buf.extend_from_slice(&(value.len() as u64).to_le_bytes());
    } else {
        buf.push(b'=');
    }
    buf.extend_from_slice(value.as_bytes());
    buf.push(b'\n');
    true
}

/// `value` cut to [`MAX_VALUE_BYTES`] on a character boundary, with `…` when cut.
fn cut(value: &str) -> std::borrow::Cow<'_, str> {
    if value.len() <= MAX_VALUE_BYTES {
        return value.into();
    }
    let mut end = MAX_VALUE_BYTES - '…'.len_utf8();
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &value[..end]).into()
}

/// Collects an event's fields: the message apart, the others in order.
#[derive(Default)]
struct Fields {
    message: String,
    others: Vec<(&'static str, String)>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_string();
        } else {
            self.others.push((field.name(), value.to_string()));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.others.push((field.name(), format!("{value:?}")));
        }
    }
}

/// The entry for `event`, sent under `identifier` (`SYSLOG_IDENTIFIER`).
pub fn encode(event: &Event<'_>, identifier: &str) -> Vec<u8> {
    let meta = event.metadata();
    let mut fields = Fields::default();
    event.record(&mut fields);
    let mut buf = Vec::with_capacity(256);
    put(&mut buf, "MESSAGE", &fields.message);
    put(&mut buf, "PRIORITY", &priority(meta.level()).to_string());
    put(&mut buf, "SYSLOG_IDENTIFIER", identifier);
    put(&mut buf, "TARGET", meta.target());
    if let Some(file) = meta.file() {
        put(&mut buf, "CODE_FILE", file);
    }
    if let Some(line) = meta.line() {
        put(&mut buf, "CODE_LINE", &line.to_string());
    }
    for (name, value) in &fields.others {
        put(&mut buf, &field_name(name), value);
    }
    buf
}

/// Parse an entry back into `(name, value)` pairs (both forms); `None` when it is malformed.
/// The inverse of [`encode`], used by the tests to read what a fake journal received.
pub fn decode(mut bytes: &[u8]) -> Option<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let nl = bytes.iter().position(|&b| b == b'\n')?;
        let line = &bytes[..nl];
        if let Some(eq) = line.iter().position(|&b| b == b'=') {
            let name = String::from_utf8(line[..eq].to_vec()).ok()?;
            out.push((name, line[eq + 1..].to_vec()));
            bytes = &bytes[nl + 1..];
        } else {
            let name = String::from_utf8(line.to_vec()).ok()?;
            let rest = &bytes[nl + 1..];
            let len = u64::from_le_bytes(rest.get(..8)?.try_into().ok()?) as usize;
            let value = rest.get(8..8usize.checked_add(len)?)?;
            if rest.get(8 + len) != Some(&b'\n') {
                return None;
            }
            out.push((name, value.to_vec()));
            bytes = &rest[8 + len + 1..];
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_upper_cased_and_cleaned() {
        assert_eq!(field_name("server"), "SERVER");
        assert_eq!(field_name("peer.addr"), "PEER_ADDR");
        assert_eq!(field_name("message"), "F_MESSAGE");
        assert_eq!(field_name("priority"), "F_PRIORITY");
        assert_eq!(field_name("_boot"), "F__BOOT");
        assert_eq!(field_name("1st"), "F_1ST");
        assert_eq!(field_name(&"x".repeat(100)).len(), 64);
    }

    #[test]
    fn a_value_with_a_newline_takes_the_binary_safe_form() {
        let mut buf = Vec::new();
        assert!(put(&mut buf, "A", "one"));
        assert!(put(&mut buf, "B", "two\nlines"));
        let mut want = b"A=one\nB\n".to_vec();
        want.extend_from_slice(&9u64.to_le_bytes());
        want.extend_from_slice(b"two\nlines\n");
        assert_eq!(buf, want);
        let back = decode(&buf).unwrap();
        assert_eq!(back[1], ("B".to_string(), b"two\nlines".to_vec()));
    }

    #[test]
    fn long_values_are_cut_and_entries_bounded() {
        let long = "é".repeat(MAX_VALUE_BYTES);
        let mut buf = Vec::new();
        assert!(put(&mut buf, "M", &long));
        let v = &decode(&buf).unwrap()[0].1;
        assert!(
            v.len() <= MAX_VALUE_BYTES && v.ends_with("…".as_bytes()),
            "{}",
            v.len()
        );
        while put(&mut buf, "M", &long) {}
        assert!(buf.len() <= MAX_ENTRY_BYTES);
        assert!(decode(&buf).unwrap().len() >= MAX_ENTRY_BYTES / MAX_VALUE_BYTES - 1);
    }

    #[test]
    fn a_truncated_binary_field_does_not_decode() {
        let mut buf = Vec::new();
        put(&mut buf, "B", "a\nb");
        assert!(decode(&buf[..buf.len() - 2]).is_none());
    }
}

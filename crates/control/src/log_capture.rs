//! The lines a `tracing` subscriber writes, kept in memory: how the tests of this crate and of
//! every daemon read what a control request logged ([`crate::audit`]). A clone shares the
//! buffer, so one clone goes to the subscriber's writer (`with_writer(move || c.clone())`)
//! and the test reads [`LogCapture::text`] from another.
//!
//! Cost: one lock and one copy per write; nothing is dropped, so only for tests.

use std::io::Write;
use std::sync::{Arc, Mutex};

/// An in-memory writer whose clones share one buffer.
#[derive(Clone, Default)]
pub struct LogCapture(Arc<Mutex<Vec<u8>>>);

impl Write for LogCapture {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogCapture {
    /// Everything written so far (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_what_is_written() {
        let c = LogCapture::default();
        let mut w = c.clone();
        write!(w, "a ").unwrap();
        write!(c.clone(), "b").unwrap();
        assert_eq!(c.text(), "a b");
    }
}

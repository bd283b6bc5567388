//! A log writer that redacts each formatted event before it reaches its sink:
//! the backstop for logs whose fields carry content (a server error echoing a key).

use std::io::{self, Write};
use std::sync::Arc;

use tracing_subscriber::fmt::MakeWriter;

use crate::redactor::Redactor;

/// Wraps a [`MakeWriter`] (stderr, a file) so every event is redacted.
#[derive(Debug, Clone)]
pub struct RedactingMakeWriter<M> {
    inner: M,
    redactor: Arc<Redactor>,
}

impl<M> RedactingMakeWriter<M> {
    /// Redacts with `redactor` what `inner`'s writers would receive.
    pub fn new(inner: M, redactor: Arc<Redactor>) -> Self {
        RedactingMakeWriter { inner, redactor }
    }
}

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for RedactingMakeWriter<M> {
    type Writer = RedactingWriter<'a, M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        RedactingWriter::new(self.inner.make_writer(), &self.redactor)
    }
}

/// Buffers one event and writes it redacted on `flush` or drop, so a secret
/// split across several `write` calls of one event is still seen whole.
pub struct RedactingWriter<'a, W: Write> {
    inner: W,
    redactor: &'a Redactor,
    buf: Vec<u8>,
}

impl<'a, W: Write> RedactingWriter<'a, W> {
    /// A writer that redacts with `redactor` before writing to `inner`.
    pub fn new(inner: W, redactor: &'a Redactor) -> Self {
        RedactingWriter {
            inner,
            redactor,
            buf: Vec::new(),
        }
    }

    fn emit(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&self.buf);
        let redacted = self.redactor.redact_str(&text);
        self.inner.write_all(redacted.as_bytes())?;
        self.buf.clear();
        self.inner.flush()
    }
}

impl<W: Write> Write for RedactingWriter<'_, W> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.emit()
    }
}

impl<W: Write> Drop for RedactingWriter<'_, W> {
    fn drop(&mut self) {
        // Nowhere to report a failed log write from a drop; the line is lost either way.
        let _ = self.emit();
    }
}

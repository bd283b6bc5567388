//! A stdio server's output on its way to rmcp, with its oversized messages
//! turned into errors of the calls they answer.
//!
//! rmcp reads one JSON-RPC message per line and drops a line longer than
//! [`MAX_LINE`] (16 MiB) with nothing but a log line: the call it answered
//! would wait out its timeout, be retried, and end `ETIMEDOUT` without its
//! cause. [`ReplyGuard`] sits between the server's stdout and rmcp. It passes
//! every line through while scanning it for its top-level `id` (and whether
//! it has a `method`: a request of the server's, not a reply). A line that
//! grows past the limit is cut: rmcp is handed a line end (the truncated JSON
//! is ignored as unparsable), the rest is read and dropped, and for a reply
//! rmcp is handed in its place an error reply to the same id
//! ([`REPLY_TOO_LARGE`]), which the call reports at once.
//!
//! Memory stays what rmcp uses for a line, plus the id (at most
//! [`MAX_ID_BYTES`]).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use serde_json::{Value, json};
use tokio::io::{AsyncRead, ReadBuf};

/// The most bytes rmcp takes for one message, its line end included.
pub(crate) const MAX_LINE: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;

/// The JSON-RPC error code of the reply put in place of an oversized one
/// (the range -32000..-32099 is the implementation's own), with
/// `data.agentry` = [`REPLY_TOO_LARGE`].
const REPLY_TOO_LARGE_CODE: i32 = -32_050;

/// `data.agentry` of that reply.
const REPLY_TOO_LARGE: &str = "reply_too_large";

/// Longest id kept: a real one is a number or a short string.
const MAX_ID_BYTES: usize = 256;

/// Whether `data` is the error a [`ReplyGuard`] put in place of a reply
/// over [`MAX_LINE`].
pub(crate) fn too_large(data: &rmcp::model::ErrorData) -> bool {
    data.code.0 == REPLY_TOO_LARGE_CODE
        && data
            .data
            .as_ref()
            .and_then(|d| d.get("agentry"))
            .and_then(Value::as_str)
            == Some(REPLY_TOO_LARGE)
}

/// The server's stdout, guarded; see the module docs.
pub(crate) struct ReplyGuard<R> {
    inner: R,
    server: Arc<str>,
    scan: Scan,
    /// Content bytes of the current line passed on so far.
    passed: usize,
    /// The current line went past the limit: its bytes are dropped.
    dropping: bool,
    /// Bytes to hand rmcp before anything more is read.
    pending: Vec<u8>,
    /// Read from `inner`, not yet looked at.
    chunk: Box<[u8]>,
}

impl<R> ReplyGuard<R> {
    pub(crate) fn new(inner: R, server: Arc<str>) -> Self {
        ReplyGuard {
            inner,
            server,
            scan: Scan::default(),
            passed: 0,
            dropping: false,
            pending: Vec::new(),
            chunk: vec![0; 64 * 1024].into_boxed_slice(),
        }
    }

    /// Looks at `bytes` (read from the server) and returns how many of them
    /// go to rmcp as they are; sets `pending` when a line is cut or ends
    /// after being cut. Stops after the first byte that sets `pending`.
    fn look(&mut self, bytes: &[u8]) -> Looked {
        for (i, &b) in bytes.iter().enumerate() {
            if b == b'\n' {
                let dropped = std::mem::replace(&mut self.dropping, false);
                let scan = std::mem::take(&mut self.scan);
                self.passed = 0;
                if dropped {
                    self.pending = self.in_place_of(scan);
                    return Looked::Dropped { upto: i + 1 };
                }
                continue;
            }
            self.scan.byte(b);
            if self.dropping {
                continue;
            }
            self.passed += 1;
            // With the line end this line would be past what rmcp takes.
            if self.passed + 1 > MAX_LINE {
                self.dropping = true;
                // What rmcp holds of it ends here: unparsable, ignored.
                self.pending = b"\n".to_vec();
                return Looked::Cut { pass: i };
            }
        }
        if self.dropping {
            Looked::Dropped { upto: bytes.len() }
        } else {
            Looked::Pass
        }
    }

    /// What rmcp gets for a dropped line: an error reply to its id, or
    /// nothing (a notification or a request of the server's, logged).
    fn in_place_of(&self, scan: Scan) -> Vec<u8> {
        let server = &*self.server;
        match scan.reply_id() {
            Some(id) => {
                tracing::warn!(
                    server,
                    "MCP server {server} sent a reply over {} MiB; the call gets an error",
                    MAX_LINE >> 20
                );
                let mut line = json!({
                    "jsonrpc": "2.0",
                    "id": id,
                    "error": {
                        "code": REPLY_TOO_LARGE_CODE,
                        "message": format!("the server's reply is over {} MiB, more than an MCP client takes in one message", MAX_LINE >> 20),
                        "data": {"agentry": REPLY_TOO_LARGE},
                    },
                })
                .to_string()
                .into_bytes();
                line.push(b'\n');
                line
            }
            None => {
                tracing::warn!(
                    server,
                    "MCP server {server} sent a message over {} MiB that answers no call; it is dropped",
                    MAX_LINE >> 20
                );
                Vec::new()
            }
        }
    }
}

/// What [`ReplyGuard::look`] found in a chunk.
enum Looked {
    /// All of it goes to rmcp.
    Pass,
    /// The first `pass` bytes go to rmcp, then `pending` (a line end); the
    /// line is dropped from there.
    Cut { pass: usize },
    /// The first `upto` bytes belong to a dropped line; `pending` is set if
    /// the line ended there.
    Dropped { upto: usize },
}

impl<R: AsyncRead + Unpin> AsyncRead for ReplyGuard<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        loop {
            if !this.pending.is_empty() {
                let n = this.pending.len().min(buf.remaining());
                buf.put_slice(&this.pending[..n]);
                this.pending.drain(..n);
                return Poll::Ready(Ok(()));
            }
            // Read at most what rmcp can take now, so what is passed never
            // has to wait here.
            let mut chunk = std::mem::take(&mut this.chunk);
            let want = buf.remaining().min(chunk.len());
            let mut read = ReadBuf::new(&mut chunk[..want]);
            let polled = Pin::new(&mut this.inner).poll_read(cx, &mut read);
            let n = read.filled().len();
            let bytes = &chunk[..n];
            match polled {
                Poll::Ready(Ok(())) if n > 0 => {}
                // End of file, an error, or nothing yet.
                other @ (Poll::Ready(_) | Poll::Pending) => {
                    this.chunk = chunk;
                    return other;
                }
            }
            let mut at = 0;
            while at < n {
                match this.look(&bytes[at..]) {
                    Looked::Pass => {
                        buf.put_slice(&bytes[at..]);
                        at = n;
                    }
                    Looked::Cut { pass } => {
                        buf.put_slice(&bytes[at..at + pass]);
                        // The cut's line end goes first, then the rest is
                        // looked at (and dropped) on the next reads.
                        this.look_later(&bytes[at + pass..]);
                        at = n;
                    }
                    Looked::Dropped { upto } => {
                        at += upto;
                        if !this.pending.is_empty() {
                            // The reply in place, then what followed the line.
                            this.look_later(&bytes[at..]);
                            at = n;
                        }
                    }
                }
            }
            this.chunk = chunk;
            // Nothing handed on yet (all dropped, or only `pending` set):
            // go round, so an empty read never reads as the end of file.
            if buf.filled().len() > before {
                return Poll::Ready(Ok(()));
            }
        }
    }
}

impl<R> ReplyGuard<R> {
    /// Bytes read but to be looked at after `pending` is handed on.
    fn look_later(&mut self, rest: &[u8]) {
        let mut pending = std::mem::take(&mut self.pending);
        let mut at = 0;
        while at < rest.len() {
            match self.look(&rest[at..]) {
                Looked::Pass => {
                    pending.extend_from_slice(&rest[at..]);
                    at = rest.len();
                }
                Looked::Cut { pass } => {
                    pending.extend_from_slice(&rest[at..at + pass]);
                    pending.append(&mut self.pending);
                    at += pass;
                }
                Looked::Dropped { upto } => {
                    pending.append(&mut self.pending);
                    at += upto;
                }
            }
        }
        self.pending = pending;
    }
}

/// Where a scan is in the top-level object of one line.
#[derive(Default)]
struct Scan {
    /// Nesting: 1 inside the top-level object.
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// At depth 1, the next string is a key.
    expect_key: bool,
    /// The key being read or last read at depth 1 (only short ones kept).
    key: Vec<u8>,
    /// The value being read is the top-level `id`.
    in_id: bool,
    /// Its raw JSON text so far; `None` once it could not be kept.
    id: Option<Vec<u8>>,
    /// The top-level `id`, complete.
    id_done: Option<Vec<u8>>,
    has_method: bool,
}

impl Scan {
    fn byte(&mut self, b: u8) {
        if self.in_string {
            self.string_byte(b);
            return;
        }
        match b {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && self.expect_key {
                    self.key.clear();
                } else {
                    self.id_byte(b);
                }
            }
            b'{' | b'[' => {
                if self.in_id {
                    self.in_id = false; // an id is never an object or array
                }
                self.depth += 1;
                self.expect_key = self.depth == 1 && b == b'{';
            }
            b'}' | b']' => {
                self.end_id();
                self.depth = self.depth.saturating_sub(1);
            }
            b':' if self.depth == 1 => {
                self.expect_key = false;
                match self.key.as_slice() {
                    b"id" => {
                        self.in_id = true;
                        self.id = Some(Vec::new());
                    }
                    b"method" => self.has_method = true,
                    _ => {}
                }
            }
            b',' if self.depth == 1 => {
                self.end_id();
                self.expect_key = true;
            }
            // Whitespace ends a number, not a value still to come.
            b' ' | b'\t' | b'\r' => {
                if self.id.as_ref().is_some_and(|id| !id.is_empty()) {
                    self.end_id();
                }
            }
            _ => self.id_byte(b),
        }
    }

    fn string_byte(&mut self, b: u8) {
        let key = self.depth == 1 && self.expect_key;
        if self.escaped {
            self.escaped = false;
        } else if b == b'\\' {
            self.escaped = true;
        } else if b == b'"' {
            self.in_string = false;
            if !key {
                self.id_byte(b);
                self.end_id();
            }
            return;
        }
        if key {
            if self.key.len() < 8 {
                self.key.push(b);
            } else {
                self.key.clear();
                self.key.extend_from_slice(b"(long)");
            }
        } else {
            self.id_byte(b);
        }
    }

    /// A byte of the `id`'s value, if one is being read.
    fn id_byte(&mut self, b: u8) {
        if !self.in_id {
            return;
        }
        if let Some(id) = &mut self.id {
            if id.len() < MAX_ID_BYTES {
                id.push(b);
            } else {
                self.id = None;
            }
        }
    }

    fn end_id(&mut self) {
        if std::mem::take(&mut self.in_id) {
            self.id_done = self.id.take().filter(|id| !id.is_empty());
        }
    }

    /// The `id` of a reply (a line without a top-level `method`), when it
    /// was a number or a string.
    fn reply_id(mut self) -> Option<Value> {
        self.end_id();
        if self.has_method {
            return None;
        }
        let id: Value = serde_json::from_slice(&self.id_done?).ok()?;
        match id {
            Value::Number(_) | Value::String(_) => Some(id),
            Value::Null | Value::Bool(_) | Value::Array(_) | Value::Object(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(line: &str) -> Option<Value> {
        let mut scan = Scan::default();
        for &b in line.as_bytes() {
            scan.byte(b);
        }
        scan.reply_id()
    }

    #[test]
    fn the_top_level_id_of_a_reply_is_found_wherever_it_is() {
        assert_eq!(
            scan(r#"{"jsonrpc":"2.0","id":7,"result":{"x":1}}"#),
            Some(json!(7))
        );
        // The TypeScript SDK writes the id last.
        assert_eq!(
            scan(r#"{"result":{"id":3,"content":[{"id":"no"}]},"jsonrpc":"2.0","id":"req-9"}"#),
            Some(json!("req-9"))
        );
        assert_eq!(scan(r#"{ "id" : 12 , "error" : {} }"#), Some(json!(12)));
        assert_eq!(
            scan(r#"{"result":{"text":"a \"id\": 5, \\"},"id":4}"#),
            Some(json!(4))
        );
        assert_eq!(scan(r#"{"id":"a\"b","result":1}"#), Some(json!("a\"b")));
    }

    /// A pipe's reads: each line as its own read (so a dropped line's end
    /// is the end of a read), a long one in pieces.
    struct Lines(std::collections::VecDeque<Vec<u8>>);

    impl AsyncRead for Lines {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            if let Some(mut piece) = self.0.pop_front() {
                let n = piece.len().min(buf.remaining());
                buf.put_slice(&piece[..n]);
                if n < piece.len() {
                    self.0.push_front(piece.split_off(n));
                }
            }
            Poll::Ready(Ok(()))
        }
    }

    /// The lines rmcp is handed for `input`, as (length, head) pairs.
    async fn lines_through(input: Vec<u8>) -> Vec<(usize, String)> {
        use tokio::io::AsyncBufReadExt;
        let pieces = input
            .split_inclusive(|b| *b == b'\n')
            .map(<[u8]>::to_vec)
            .collect();
        let guard = ReplyGuard::new(Lines(pieces), Arc::from("srv"));
        let mut reader = tokio::io::BufReader::new(guard);
        let mut out = Vec::new();
        let mut line = Vec::new();
        while reader.read_until(b'\n', &mut line).await.unwrap() > 0 {
            let head = String::from_utf8_lossy(&line[..line.len().min(400)]).into_owned();
            out.push((line.len(), head));
            line.clear();
        }
        out
    }

    #[tokio::test]
    async fn an_oversized_reply_becomes_an_error_reply_to_its_id() {
        let big = format!(
            "{{\"jsonrpc\":\"2.0\",\"result\":{{\"text\":\"{}\"}},\"id\":42}}\n",
            "x".repeat(MAX_LINE)
        );
        let small = "{\"jsonrpc\":\"2.0\",\"id\":43,\"result\":{}}\n";
        let fits = format!("{}\n", "y".repeat(MAX_LINE - 1));
        let input = [small, &big, small, &fits, small].concat().into_bytes();
        let lines = lines_through(input).await;
        let lens: Vec<usize> = lines.iter().map(|(n, _)| *n).collect();
        assert_eq!(lines.len(), 6, "{lens:?}");
        assert_eq!(lines[0].1, small);
        // What rmcp held of the big line, ended: unparsable, ignored.
        assert_eq!(lines[1].0, MAX_LINE);
        assert!(
            lines[2].1.contains("\"id\":42") && lines[2].1.contains("-32050"),
            "{}",
            lines[2].1
        );
        assert_eq!(lines[3].1, small);
        // A line of exactly the limit, its end included, passes whole.
        assert_eq!(lines[4].0, MAX_LINE);
        assert!(lines[4].1.starts_with("yyy"));
        assert_eq!(lines[5].1, small);
    }

    #[test]
    fn requests_notifications_and_odd_ids_answer_no_call() {
        assert_eq!(
            scan(r#"{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage"}"#),
            None
        );
        assert_eq!(
            scan(r#"{"jsonrpc":"2.0","method":"notifications/progress"}"#),
            None
        );
        assert_eq!(scan(r#"{"id":null,"result":1}"#), None);
        assert_eq!(scan(r#"{"id":{"a":1},"result":1}"#), None);
        assert_eq!(scan(r#"{"result":1"#), None);
    }
}

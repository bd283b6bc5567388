//! [`EventStream`]: the answer of `SendStreamingMessage` and
//! `SubscribeToTask`, server-sent events whose every `data:` is a whole
//! JSON-RPC response holding a `StreamResponse` (`{"task"}`,
//! `{"message"}`, `{"statusUpdate"}` or `{"artifactUpdate"}`). The agent
//! closes the stream after the task ends or is interrupted. An error before
//! the stream starts comes as a plain JSON-RPC body, which is read the same
//! way (one event, or the error).

use std::collections::VecDeque;

use serde::Deserialize;

use crate::error::A2aError;
use crate::rpc::{Capped, MAX_BODY, capped_error, read_capped, rpc_result};
use crate::types::{Artifact, Message, Task, TaskStatus};

/// One event of a task's stream.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StreamEvent {
    /// The task as it is (the first event of a stream).
    Task(Task),
    /// A direct reply: the agent made no task.
    Message(Message),
    /// The task's new status.
    StatusUpdate(StatusUpdate),
    /// An artifact the task produced (or a chunk of one).
    ArtifactUpdate(ArtifactUpdate),
}

/// `TaskStatusUpdateEvent`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusUpdate {
    /// The task.
    pub task_id: String,
    /// Its new status.
    pub status: TaskStatus,
}

/// `TaskArtifactUpdateEvent`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArtifactUpdate {
    /// The task.
    pub task_id: String,
    /// The artifact (or the chunk).
    pub artifact: Artifact,
}

/// The events of one stream, read as they come.
pub struct EventStream {
    response: Option<reqwest::Response>,
    url: String,
    method: &'static str,
    /// Bytes of a line not yet ended.
    line: Vec<u8>,
    /// The `data:` lines of the event being read.
    data: Vec<u8>,
    /// Events read and not yet taken.
    ready: VecDeque<Result<StreamEvent, A2aError>>,
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream")
            .field("url", &self.url)
            .field("method", &self.method)
            .finish_non_exhaustive()
    }
}

impl EventStream {
    pub(crate) fn new(response: reqwest::Response, url: String, method: &'static str) -> Self {
        EventStream {
            response: Some(response),
            url,
            method,
            line: Vec::new(),
            data: Vec::new(),
            ready: VecDeque::new(),
        }
    }

    /// The next event; `None` once the agent closed the stream.
    pub async fn next(&mut self) -> Option<Result<StreamEvent, A2aError>> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Some(event);
            }
            let mut response = self.response.take()?;
            let is_sse = response
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("text/event-stream"));
            if !is_sse {
                // An up-front answer (an error, mostly): one body, one result.
                let read = read_capped(response, MAX_BODY).await;
                return Some(
                    read.map_err(|e| capped_error(e, &self.url, self.method))
                        .and_then(|body| rpc_result(&self.url, self.method, &body)),
                );
            }
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    if let Err(e) = self.feed(&chunk) {
                        return Some(Err(e));
                    }
                    self.response = Some(response);
                }
                Ok(None) => {
                    // A last event without its blank line still counts.
                    self.feed_line();
                    self.end_event();
                    return self.ready.pop_front();
                }
                Err(e) => return Some(Err(capped_error(Capped::Http(e), &self.url, self.method))),
            }
        }
    }

    /// Splits bytes into lines (LF or CRLF) and lines into events.
    fn feed(&mut self, chunk: &[u8]) -> Result<(), A2aError> {
        for &byte in chunk {
            if byte == b'\n' {
                self.feed_line();
            } else {
                self.line.push(byte);
            }
        }
        if self.line.len() + self.data.len() > MAX_BODY {
            return Err(capped_error(Capped::TooLarge, &self.url, self.method));
        }
        Ok(())
    }

    /// One line: a `data:` field kept, a blank line ends the event; other
    /// fields (`event:`, `id:`, comments) are not needed: an error event's
    /// data is a JSON-RPC error, which the data says by itself.
    fn feed_line(&mut self) {
        let mut line = std::mem::take(&mut self.line);
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        if line.is_empty() {
            self.end_event();
        } else if let Some(value) = line.strip_prefix(b"data:") {
            let value = value.strip_prefix(b" ").unwrap_or(value);
            if !self.data.is_empty() {
                self.data.push(b'\n');
            }
            self.data.extend_from_slice(value);
        }
    }

    fn end_event(&mut self) {
        if self.data.is_empty() {
            return;
        }
        let data = std::mem::take(&mut self.data);
        self.ready
            .push_back(rpc_result(&self.url, self.method, &data));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::TaskState;

    fn stream() -> EventStream {
        EventStream {
            response: None,
            url: "http://127.0.0.1:1/".into(),
            method: "SendStreamingMessage",
            line: Vec::new(),
            data: Vec::new(),
            ready: VecDeque::new(),
        }
    }

    #[test]
    fn crlf_and_lf_events_split_anywhere_parse_in_order() {
        let mut s = stream();
        let body = "data: {\"jsonrpc\":\"2.0\",\"id\":\"1\",\"result\":{\"task\":{\"id\":\"t\",\"contextId\":\"c\",\"status\":{\"state\":\"TASK_STATE_SUBMITTED\"}}}}\r\n\r\n\
                    : a comment\n\
                    data: {\"jsonrpc\":\"2.0\",\"id\":\"1\",\"result\":{\"statusUpdate\":{\"taskId\":\"t\",\"contextId\":\"c\",\"status\":{\"state\":\"TASK_STATE_WORKING\"}}}}\n\n\
                    event: error\n\
                    data: {\"jsonrpc\":\"2.0\",\"id\":\"1\",\"error\":{\"code\":-32001,\"message\":\"gone\"}}\n\n";
        for piece in body.as_bytes().chunks(7) {
            s.feed(piece).unwrap();
        }
        let first = s.ready.pop_front().unwrap().unwrap();
        assert!(
            matches!(first, StreamEvent::Task(ref t) if t.id == "t"),
            "{first:?}"
        );
        let second = s.ready.pop_front().unwrap().unwrap();
        assert!(
            matches!(second, StreamEvent::StatusUpdate(ref u) if u.status.state == TaskState::Working),
            "{second:?}"
        );
        let third = s.ready.pop_front().unwrap();
        assert!(
            matches!(third, Err(A2aError::Rpc { code: -32001, .. })),
            "{third:?}"
        );
        assert!(s.ready.is_empty());
    }
}

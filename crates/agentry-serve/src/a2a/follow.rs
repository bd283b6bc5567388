//! Following a task as its run goes on: the StreamResponses a client (a
//! stream, a push receiver, a waiting SendMessage) is told — a `task`
//! first, then an `artifactUpdate` when the answer changes and a
//! `statusUpdate` when the state or its message does. Woken by the run's
//! event log (`events.rs`; on a cluster, the events the nodes keep), and
//! every 250 ms besides (a sleeping run says nothing when it falls asleep).
//! The same events say when an event-driven run has answered the message
//! sent to it ([`Turn`]): its status stays `sleeping` while the step that
//! message woke runs, so until then the task is WORKING, not the last
//! answer again.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use agentry::protocol::event::EventRecord;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use futures::FutureExt;

use super::super::events::{EventFeed, FedEvent, Feed};
use super::super::streams::StreamSlot;
use super::super::table::App;
use super::super::tenants::Tenant;
use super::super::turn::Turn;
use super::look::observe;
use super::task::{Files, Observed, State, TaskRef};
use super::wire::envelope;

/// How often the task is looked at when no event came.
const POLL: Duration = Duration::from_millis(250);

/// When following ends (always at a terminal state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Until {
    /// Also at INPUT_REQUIRED (a stream, a SendMessage); not for pushes.
    pub(super) input_required: bool,
    /// A message was sent: an event-driven run asleep before it applied
    /// this many inputs has not seen it yet, and is WORKING.
    pub(super) min_inputs: u64,
}

/// One task followed.
pub(super) struct Follower {
    app: App,
    tenant: Tenant,
    agent: String,
    id: String,
    until: Until,
    last: Option<Observed>,
    feed: Option<Feed>,
    /// The run's turn, from the events read so far.
    turn: Turn,
    /// The log said it holds no more events.
    closed: bool,
    done: bool,
    /// Its place among the open streams (an SSE client's).
    slot: Option<StreamSlot>,
}

impl Follower {
    pub(super) fn new(task: TaskRef<'_>, until: Until) -> Follower {
        Follower {
            app: task.app.clone(),
            tenant: task.tenant.clone(),
            agent: task.agent.to_string(),
            id: task.id.to_string(),
            until,
            last: None,
            feed: None,
            turn: Turn::default(),
            closed: false,
            done: false,
            slot: None,
        }
    }

    fn task(&self) -> TaskRef<'_> {
        TaskRef {
            app: &self.app,
            tenant: &self.tenant,
            agent: &self.agent,
            id: &self.id,
        }
    }

    /// Counted among the open streams (`streams.rs`): ended to make room.
    pub(super) fn with_slot(mut self) -> Follower {
        self.slot = Some(self.app.streams.admit(&self.id));
        self
    }

    /// The next StreamResponses to tell; `None` once following ended.
    pub(super) async fn next(&mut self) -> Option<Vec<Value>> {
        loop {
            let ended = self.slot.as_ref().is_some_and(|s| s.signals.is_ended());
            if self.done || ended {
                return None;
            }
            self.open_feed();
            self.read_ready();
            let Ok(mut now) = observe(self.task(), Files::Read).await else {
                self.done = true;
                return None;
            };
            // Without events (a run only the store holds), the inputs it
            // applied are all there is to go by.
            let answered = match self.feed {
                Some(_) => self.turn.answered(),
                None => now.inputs,
            };
            if now.asleep && answered < self.until.min_inputs {
                now.state = State::Working;
                now.parts.clear();
            }
            let told = self.changes(&now);
            let interrupted = self.until.input_required && now.state == State::InputRequired;
            self.done = now.state.terminal() || interrupted;
            self.last = Some(now);
            if !told.is_empty() {
                return Some(told);
            }
            if self.done {
                return None;
            }
            self.wait().await;
        }
    }

    /// Follows to the end; the last state seen.
    pub(super) async fn finish(mut self) -> Option<Observed> {
        while self.next().await.is_some() {}
        self.last
    }

    fn changes(&self, now: &Observed) -> Vec<Value> {
        let Some(last) = &self.last else {
            return vec![json!({"task": now.task(true)})];
        };
        let mut told = Vec::new();
        let update = |artifact: &Value| {
            json!({"artifactUpdate": {
                "taskId": self.id, "contextId": self.id,
                "artifact": artifact, "lastChunk": true,
            }})
        };
        if now.answer != last.answer
            && let Some(artifact) = now.artifact()
        {
            told.push(update(&artifact));
        }
        // The declared files, once the task completed: before its status.
        if now.files != last.files {
            told.extend(now.files.iter().map(update));
        }
        if now.state != last.state || now.parts != last.parts {
            told.push(json!({"statusUpdate": {
                "taskId": self.id, "contextId": self.id, "status": now.status(),
            }}));
        }
        told
    }

    /// The run's events, from the first: its log here, or the events a
    /// cluster's nodes keep. Opened when needed: a queued run's log is the
    /// one it keeps.
    fn open_feed(&mut self) {
        if self.feed.is_some() || self.closed {
            return;
        }
        self.feed = match self.app.entry(&self.id) {
            Some(entry) => Some(Feed::Here(EventFeed::new(Arc::clone(&entry.log)))),
            None => (self.app.cluster.get())
                .map(|cluster| Feed::Kept(cluster.events(self.id.clone(), 0))),
        };
    }

    /// Takes the events that came, without waiting for more.
    fn read_ready(&mut self) {
        while let Some(feed) = self.feed.as_mut() {
            match feed.next_batch().now_or_never() {
                Some(Some(batch)) => self.take(&batch),
                Some(None) => self.close(),
                None => return,
            }
        }
    }

    fn take(&mut self, batch: &[FedEvent]) {
        for fed in batch.iter().filter(|fed| Turn::reads(&fed.kind)) {
            if let Ok(record) = serde_json::from_str::<EventRecord>(&fed.data) {
                self.turn.see(&record.event);
            }
        }
    }

    /// The log holds no more events (the run stopped).
    fn close(&mut self) {
        self.feed = None;
        self.closed = true;
    }

    async fn wait(&mut self) {
        let pause = tokio::time::sleep(POLL);
        let ended = async {
            match &self.slot {
                Some(slot) => slot.signals.ended().await,
                None => std::future::pending().await,
            }
        };
        match self.feed.as_mut() {
            Some(feed) => {
                tokio::select! {
                    batch = feed.next_batch() => match batch {
                        Some(batch) => self.take(&batch),
                        None => self.close(),
                    },
                    () = pause => {}
                    () = ended => {}
                }
            }
            None => {
                tokio::select! {
                    () = pause => {}
                    () = ended => {}
                }
            }
        }
    }
}

/// A followed task as SSE: each event one `data:` line holding a JSON-RPC
/// response (the call's `id`) whose result is a StreamResponse; the stream
/// ends after a terminal or INPUT_REQUIRED state.
pub(super) fn sse(follower: Follower, rpc_id: Value) -> Response {
    let events = futures::stream::unfold(
        (follower, std::collections::VecDeque::new()),
        move |(mut follower, mut queue)| {
            let rpc_id = rpc_id.clone();
            async move {
                loop {
                    if let Some(value) = queue.pop_front() {
                        let data = envelope(&rpc_id, Ok(value)).to_string();
                        let event: Result<Event, Infallible> = Ok(Event::default().data(data));
                        return Some((event, (follower, queue)));
                    }
                    queue.extend(follower.next().await?);
                }
            }
        },
    );
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

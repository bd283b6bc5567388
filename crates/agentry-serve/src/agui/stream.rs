//! One AG-UI stream: a segment of a run, read from its event log (the one
//! the native stream reads, `events.rs`, or on a cluster the events the
//! nodes keep, `source.rs`), mapped by a [`Translator`], and ended when the
//! run stops, parks a call for a human, or sleeps.
//!
//! A run says nothing when it falls asleep or parks, so the stream asks the
//! run's state when its log has been quiet for a moment (from 50 ms, backing
//! off to 1 s): a quiet log whose run waits for a human, or waits for an
//! event with its turn over, ends the segment. An event-driven run's status
//! stays `sleeping` while a step it woke for runs, so the turn is read from
//! the events ([`Turn`]). A segment that sent the run a message waits until
//! the run has taken it. The events of a run another node holds come a
//! moment after its state changes: a call it parked is told once its
//! `awaiting_*` event came (or after a few looks, should none come).

use std::collections::{HashSet, VecDeque};
use std::convert::Infallible;
use std::time::Duration;

use agentry::RunStatus;
use agentry::protocol::event::{EventRecord, RunEvent};
use agentry::protocol::state::PendingApproval;
use agentry::protocol::stop::StopReason;
use agentry::protocol::trace::RunInput;
use axum::response::sse::Event;
use futures::Stream;

use super::source::{Feed, Source};
use super::translate::{DECISION_REQUIRED, End, Parked, Translator};
use super::wire::{APPROVAL_REQUIRED, AgUiEvent, RUN_EVENT, sse};
use crate::events::FedEvent;
use crate::streams::StreamSlot;
use crate::turn::Turn;

/// The quiet that makes a stream look at the run's state, first and at most.
const QUIET_FIRST: Duration = Duration::from_millis(50);
const QUIET_MOST: Duration = Duration::from_secs(1);
/// Looks that find calls parked before their events came, before the
/// segment ends without them.
const EARLY_LOOKS: u32 = 3;

/// What a segment is.
#[derive(Debug, Clone)]
pub(crate) struct Segment {
    /// AG-UI's `threadId` and `runId` for RUN_STARTED / RUN_FINISHED.
    pub thread_id: String,
    pub run_id: String,
    /// The agentry run.
    pub agentry_run: String,
    /// Events up to this one came before the segment: folded into the state,
    /// not sent.
    pub after: u64,
    /// A message was sent: a sleeping run is done only once it took one.
    pub awaits_input: bool,
}

/// The run's events as AG-UI SSE events, for `segment`.
pub(crate) fn stream(
    source: Source,
    segment: Segment,
    (goal, status): (Option<String>, Option<RunStatus>),
    slot: StreamSlot,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let driver = Driver {
        feed: source.feed(),
        source,
        translator: Translator::new(goal),
        segment,
        slot,
        out: VecDeque::new(),
        status,
        started: false,
        done: false,
        input_taken: false,
        turn: Turn::default(),
        quiet: QUIET_FIRST,
        told_parked: HashSet::new(),
        early_looks: 0,
    };
    futures::stream::unfold(driver, |mut driver| async move {
        let event = driver.next().await?;
        Some((Ok(sse(&event)), driver))
    })
}

struct Driver {
    source: Source,
    feed: Feed,
    translator: Translator,
    segment: Segment,
    slot: StreamSlot,
    out: VecDeque<AgUiEvent>,
    /// The run's status when the segment was asked for.
    status: Option<RunStatus>,
    started: bool,
    done: bool,
    input_taken: bool,
    turn: Turn,
    quiet: Duration,
    /// Calls whose `awaiting_approval` or `awaiting_decision` came.
    told_parked: HashSet<String>,
    /// Looks that found calls parked before their events.
    early_looks: u32,
}

impl Driver {
    async fn next(&mut self) -> Option<AgUiEvent> {
        loop {
            if let Some(event) = self.out.pop_front() {
                return Some(event);
            }
            if self.done {
                return None;
            }
            self.advance().await;
        }
    }

    /// RUN_STARTED, the run's id and the state, once.
    fn start(&mut self) {
        if self.started {
            return;
        }
        self.started = true;
        if let Some(status) = self.status.filter(|_| self.segment.after > 0) {
            self.translator.set_status(status);
        }
        self.out.push_back(AgUiEvent::RunStarted {
            thread_id: self.segment.thread_id.clone(),
            run_id: self.segment.run_id.clone(),
        });
        self.out.push_back(AgUiEvent::Custom {
            name: RUN_EVENT.into(),
            value: serde_json::json!({ "run_id": self.segment.agentry_run }),
        });
        let snapshot = self.translator.snapshot();
        self.out.push_back(snapshot);
    }

    fn end(&mut self, end: &End) {
        self.start();
        let events = self
            .translator
            .finish(end, &self.segment.thread_id, &self.segment.run_id);
        self.out.extend(events);
        self.done = true;
    }

    async fn advance(&mut self) {
        let got = tokio::select! {
            batch = self.feed.next_batch() => Some(batch),
            () = tokio::time::sleep(self.quiet) => None,
            // Ended to make room for a newer stream: the client reconnects.
            () = self.slot.signals.ended() => {
                self.done = true;
                return;
            }
        };
        match got {
            Some(Some(batch)) => {
                self.quiet = QUIET_FIRST;
                for fed in batch {
                    if let Some(reason) = self.take(&fed) {
                        let detail = self.source.detail().await;
                        self.end(&End::Stopped { reason, detail });
                    }
                    if self.done {
                        return;
                    }
                }
            }
            Some(None) => self.end(&End::Closed),
            None => {
                self.start();
                self.quiet = (self.quiet * 2).min(QUIET_MOST);
                if let Some(end) = self.parked_or_asleep().await {
                    self.end(&end);
                }
            }
        }
    }

    /// Takes one event of the run; its stop reason if it is `run_stopped`
    /// (the caller ends the segment with the outcome's detail).
    fn take(&mut self, fed: &FedEvent) -> Option<StopReason> {
        let Ok(record) = serde_json::from_str::<EventRecord>(&fed.data) else {
            tracing::warn!(seq = fed.seq, kind = %fed.kind, "an event AG-UI cannot read");
            return None;
        };
        self.turn.see(&record.event);
        if let RunEvent::AwaitingApproval { call, .. } = &record.event {
            self.told_parked.insert(call.id.clone());
        }
        if let RunEvent::AwaitingDecision { call, .. } = &record.event {
            self.told_parked.insert(call.id.clone());
        }
        if fed.seq <= self.segment.after {
            self.translator.fold(fed.seq, &record.event);
            return None;
        }
        self.start();
        if let RunEvent::InputApplied {
            input: RunInput::Message { .. } | RunInput::Event { .. },
            ..
        } = &record.event
        {
            self.input_taken = true;
        }
        let mut out = Vec::new();
        self.translator.apply(fed.seq, &record.event, &mut out);
        self.out.extend(out);
        if let RunEvent::RunStopped { stop_reason } = record.event {
            return Some(stop_reason);
        }
        None
    }

    /// How the segment ends if the run, its log quiet, waits for a human or
    /// for its next event.
    async fn parked_or_asleep(&mut self) -> Option<End> {
        // None: its `run_stopped` is in the log, or comes; a queued run starts.
        let look = self.source.look().await?;
        match look.status {
            RunStatus::AwaitingApproval => self.parked(&look.approvals, APPROVAL_REQUIRED),
            RunStatus::AwaitingDecision => self.parked(&look.decisions, DECISION_REQUIRED),
            RunStatus::Sleeping
                if self.turn.is_over() && (!self.segment.awaits_input || self.input_taken) =>
            {
                Some(End::Sleeping)
            }
            RunStatus::Sleeping | RunStatus::Running | RunStatus::Paused | RunStatus::Stopped => {
                None
            }
        }
    }

    /// The segment's end at `pending`, parked calls, once their events came.
    fn parked(&mut self, pending: &[PendingApproval], reason: &'static str) -> Option<End> {
        let calls = Parked::approvals(pending, reason);
        // An interrupt names at least one call; none yet is a moment early.
        if calls.is_empty() {
            return None;
        }
        let told = calls.iter().all(|c| self.told_parked.contains(&c.call_id));
        if !told && self.early_looks < EARLY_LOOKS {
            self.early_looks += 1;
            return None;
        }
        Some(End::Parked(calls))
    }
}

//! The run's event stream, shared by the conductor and the executor.
//!
//! Events are numbered per run. Numbering and sending happen under one small
//! lock so subscribers always see sequence numbers in increasing order, whichever
//! actor emitted them. A durable run's checkpoints record the last number
//! given, and a run resumed from one numbers on past it (see
//! [`Progress::resumed_numbering`](crate::durable::Progress::resumed_numbering)),
//! so a client that names the last event it saw still gets what follows,
//! across a restart as across a hibernation.
//!
//! The channel itself is created on the first `subscribe`, so
//! a run nobody watches allocates no 1,024-slot buffer. With `events_from_start`
//! the events emitted before that are kept in a backlog (only as many as were
//! emitted, in a compact form) and handed to the first subscriber.
//! A backlog that fills the channel's capacity before anyone subscribes is
//! dropped and no longer kept: nobody is coming for the run's start, and a run
//! nobody watches then builds no events at all (a subscriber that comes later
//! sees events from then on).
//!
//! Every event passes the run's redactor before a subscriber gets it, so a
//! subscriber (and the service's SSE stream fed by it) never sees a secret: a
//! live event as it is built, a backlog's events when they are handed to the
//! first subscriber (by the redactor as it is then, which holds every field
//! value registered so far: never less than it held when the event was built).
//! A run nobody watches redacts nothing, and builds nothing unless it keeps a
//! backlog.

use std::sync::{Arc, Mutex, PoisonError};

use agentry_protocol::event::{EventRecord, RunEvent};
use tokio::sync::broadcast;

use crate::redaction::RunRedaction;

mod backlog;

use backlog::Backlog;

/// Events buffered per subscriber before the slowest one starts missing some.
const EVENT_BUFFER: usize = 1024;

#[derive(Debug, Default)]
struct SinkInner {
    seq: u64,
    tx: Option<broadcast::Sender<EventRecord>>,
    /// Events kept for the first subscriber (`events_from_start`), until it
    /// comes. Boxed: most runs have one, or had one, and a hibernated run's
    /// sink stays allocated.
    backlog: Option<Box<Backlog>>,
}

/// A tool's progress report becomes a `tool_progress` event.
impl agentry_tools::ProgressSink for EventSink {
    fn progress(&self, call_id: &str, update: agentry_tools::ToolProgress) {
        self.emit(|| RunEvent::ToolProgress {
            tool_call_id: call_id.to_string(),
            progress: update.progress,
            total: update.total,
            message: update.message,
        });
    }
}

/// Publishes a run's events.
#[derive(Debug, Clone)]
pub struct EventSink {
    run_id: Arc<str>,
    inner: Arc<Mutex<SinkInner>>,
    redaction: Arc<RunRedaction>,
}

impl EventSink {
    /// A sink for run `run_id`; with `from_start`, events are kept for the first
    /// subscriber.
    pub(crate) fn new(run_id: Arc<str>, from_start: bool, redaction: Arc<RunRedaction>) -> Self {
        let backlog = from_start.then(Box::default);
        EventSink {
            run_id,
            inner: Arc::new(Mutex::new(SinkInner {
                seq: 0,
                tx: None,
                backlog,
            })),
            redaction,
        }
    }

    /// The same sink numbering its events after `last` (a resumed run's:
    /// after what its store recorded, see
    /// [`Progress::resumed_numbering`](crate::durable::Progress::resumed_numbering)).
    pub(crate) fn numbered_after(self, last: u64) -> Self {
        if let Ok(mut inner) = self.inner.lock() {
            inner.seq = last;
        }
        self
    }

    /// The number of the last event numbered, for the checkpoint being
    /// written (once per state update, never on `emit`'s path).
    pub(crate) fn last_numbered(&self) -> u64 {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .seq
    }

    /// The run's redactor (shared by its actors: field values are registered
    /// through it).
    pub(crate) fn redactor(&self) -> &Arc<agentry_redact::Redactor> {
        &self.redaction.redactor
    }

    /// The run's redaction (a child's builds on it).
    pub(crate) fn redaction(&self) -> &Arc<RunRedaction> {
        &self.redaction
    }

    /// `event` with every secret replaced (rebuilt only on a hit); `None` when
    /// it cannot be redacted (then it is not published at all).
    fn redacted(&self, mut event: RunEvent) -> Option<RunEvent> {
        match self.redaction.redactor.redact_value(&mut event) {
            Ok(_) => Some(event),
            Err(e) => {
                tracing::warn!(run_id = %self.run_id, error = %e, "an event could not be redacted; not published");
                None
            }
        }
    }

    /// A receiver of every event from now on; the first one also gets the
    /// backlog kept since the start (creating the channel if needed).
    pub fn subscribe(&self) -> Option<broadcast::Receiver<EventRecord>> {
        let mut inner = self.inner.lock().ok()?;
        let tx = inner
            .tx
            .get_or_insert_with(|| broadcast::channel(EVENT_BUFFER).0)
            .clone();
        let rx = tx.subscribe();
        // Under the lock, so nothing is emitted between the backlog and the live
        // events: the receiver sees one ordered stream (with a gap only where
        // an event could not be redacted, as a live one).
        let backlog = inner.backlog.take().map(|kept| *kept).unwrap_or_default();
        // While kept, the backlog holds every event numbered since the sink
        // was made (a resumed run's numbering starts past its store's).
        let after = inner.seq.saturating_sub(backlog.len() as u64);
        for record in backlog.into_records(&self.run_id, after) {
            if let Some(event) = self.redacted(record.event) {
                let _ = tx.send(EventRecord { event, ..record });
            }
        }
        Some(rx)
    }

    /// Lets the channel's buffer go while nobody is subscribed (a hibernated
    /// run keeps none); the numbering goes on, and a later subscriber gets a
    /// new channel.
    pub(crate) fn shed(&self) {
        if let Ok(mut inner) = self.inner.lock()
            && inner.tx.as_ref().is_some_and(|tx| tx.receiver_count() == 0)
        {
            inner.tx = None;
        }
    }

    /// Whether an event emitted now would be seen (a live subscriber, or the
    /// backlog kept for the first one).
    pub fn listening(&self) -> bool {
        self.inner.lock().is_ok_and(|inner| {
            inner.backlog.is_some() || inner.tx.as_ref().is_some_and(|tx| tx.receiver_count() > 0)
        })
    }

    /// Publishes an event. The event is only built when someone listens: building
    /// one costs a clone of the decision or envelope.
    pub fn emit(&self, event: impl FnOnce() -> RunEvent) {
        let Ok(mut guard) = self.inner.lock() else {
            return;
        };
        let inner = &mut *guard;
        let live = inner.tx.as_ref().is_some_and(|tx| tx.receiver_count() > 0);
        if !live && inner.backlog.is_none() {
            return;
        }
        inner.seq += 1;
        if live {
            let Some(event) = self.redacted(event()) else {
                // Numbered all the same: a subscriber sees the gap.
                return;
            };
            let record = EventRecord {
                run_id: Arc::clone(&self.run_id),
                seq: inner.seq,
                event,
            };
            if let Some(tx) = &inner.tx {
                let _ = tx.send(record);
            }
            return;
        }
        let full = match inner.backlog.as_mut() {
            Some(backlog) if backlog.len() < EVENT_BUFFER => {
                // Redacted when handed to the first subscriber: a run nobody
                // comes for pays nothing for it.
                backlog.push(event());
                false
            }
            Some(_) => true,
            None => false,
        };
        if full {
            // Full and still nobody: stop keeping (and building) events.
            inner.backlog = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentry_protocol::budget::{BudgetLimits, BudgetSnapshot, Usage};
    use agentry_protocol::decision::Decision;
    use agentry_protocol::envelope::ResultEnvelope;
    use agentry_protocol::stop::StopReason;
    use agentry_protocol::trace::RunInput;

    fn test_redaction() -> Arc<RunRedaction> {
        RunRedaction::for_tests()
    }

    fn result(id: &str) -> Arc<ResultEnvelope> {
        Arc::new(ResultEnvelope::success(
            id,
            "add",
            serde_json::json!(2),
            Vec::new(),
        ))
    }

    /// Every kind of event, the budget snapshots among them consistent with the
    /// run's limits, tampered with, and under other limits; then those past
    /// what the backlog packs small.
    fn events() -> Vec<RunEvent> {
        let limits = BudgetLimits {
            max_steps: Some(10),
            ..BudgetLimits::default()
        };
        let spent = Usage::step();
        let mut tampered = BudgetSnapshot::new(limits, spent, 3);
        tampered.remaining.steps_left = Some(999);
        let other_limits = BudgetLimits {
            max_steps: Some(20),
            ..limits
        };
        let mut all = vec![
            RunEvent::StepStarted { step: 1 },
            RunEvent::DecisionMade {
                step: 1,
                decision: Arc::new(Decision::Final {
                    answer: "42".into(),
                }),
            },
            RunEvent::ToolCallStarted {
                step: 1,
                tool_call_id: "c1".into(),
                tool: "add".into(),
                attempt: 1,
            },
            RunEvent::ToolCallFinished {
                step: 1,
                result: result("c1"),
            },
            RunEvent::StateUpdated { version: 1 },
            RunEvent::BudgetSpent {
                budget: Box::new(BudgetSnapshot::new(limits, spent, 2)),
            },
            RunEvent::BudgetSpent {
                budget: Box::new(BudgetSnapshot::new(limits, spent.plus(&spent), 5)),
            },
            RunEvent::BudgetSpent {
                budget: Box::new(tampered),
            },
            RunEvent::BudgetSpent {
                budget: Box::new(BudgetSnapshot::new(other_limits, spent, 7)),
            },
        ];
        all.extend(past_packing(limits));
        all.extend([
            RunEvent::TokenDelta {
                step: 2,
                text: "he".into(),
            },
            RunEvent::InputApplied {
                seq: 1,
                input: RunInput::Message { text: "hi".into() },
            },
            RunEvent::RunStopped {
                stop_reason: StopReason::Done,
            },
        ]);
        all
    }

    /// Spends past `u32`, a step past it (the backlog keeps steps as `u32`),
    /// a long non-ASCII call id and an empty tool name.
    fn past_packing(limits: BudgetLimits) -> Vec<RunEvent> {
        let huge = Usage {
            steps: u64::MAX,
            tool_calls: 1 << 35,
            tokens_in: 300,
            tokens_out: 127,
            cost_micros: 128,
            retries: 2,
            ticks: 3,
            cache_read_tokens: u64::MAX - 1,
            cache_write_tokens: 9,
        };
        let late = u64::from(u32::MAX) + 1;
        vec![
            RunEvent::BudgetSpent {
                budget: Box::new(BudgetSnapshot::new(limits, huge, u64::MAX)),
            },
            RunEvent::ToolCallStarted {
                step: late,
                tool_call_id: "c-ünï-☃".repeat(40),
                tool: String::new(),
                attempt: u32::MAX,
            },
            RunEvent::DecisionMade {
                step: late,
                decision: Arc::new(Decision::Final {
                    answer: "late".into(),
                }),
            },
            RunEvent::ToolCallFinished {
                step: late,
                result: result("c-late"),
            },
        ]
    }

    fn drain(rx: &mut broadcast::Receiver<EventRecord>) -> Vec<EventRecord> {
        let mut got = Vec::new();
        while let Ok(r) = rx.try_recv() {
            got.push(r);
        }
        got
    }

    #[test]
    fn the_backlog_replays_exactly_what_a_live_subscriber_sees() {
        let run_id: Arc<str> = Arc::from("run-1");
        let live = EventSink::new(Arc::clone(&run_id), false, test_redaction());
        let mut live_rx = live.subscribe().unwrap();
        let kept = EventSink::new(Arc::clone(&run_id), true, test_redaction());
        // One list, cloned: two calls to `events()` could stamp their envelopes
        // a millisecond apart.
        for event in events() {
            live.emit(|| event.clone());
            kept.emit(|| event);
        }
        let want = drain(&mut live_rx);
        assert_eq!(want.len(), events().len());
        let mut late_rx = kept.subscribe().unwrap();
        assert_eq!(drain(&mut late_rx), want);
        // Only the first subscriber gets the backlog; after it, events are live.
        kept.emit(|| RunEvent::StepStarted { step: 9 });
        let next = drain(&mut late_rx);
        assert_eq!(next.len(), 1);
        assert_eq!(next[0].seq, want.len() as u64 + 1);
    }

    #[test]
    fn the_backlog_is_redacted_when_handed_over_with_every_value_registered_by_then() {
        let redaction = test_redaction();
        let sink = EventSink::new(Arc::from("run-3"), true, Arc::clone(&redaction));
        let field = || agentry_redact::LiteralKind::Field("password".into());
        let key = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx12";
        redaction
            .redactor
            .add_literal("open-sesame-1", field())
            .unwrap();
        sink.emit(|| RunEvent::DecisionMade {
            step: 1,
            decision: Arc::new(Decision::Final {
                answer: format!("open-sesame-1 open-sesame-2 {key}"),
            }),
        });
        // Registered after the event was kept, before anyone subscribed.
        redaction
            .redactor
            .add_literal("open-sesame-2", field())
            .unwrap();
        let mut rx = sink.subscribe().unwrap();
        let got = drain(&mut rx);
        assert_eq!(got.len(), 1);
        let RunEvent::DecisionMade { decision, .. } = &got[0].event else {
            panic!("{got:?}");
        };
        let Decision::Final { answer } = decision.as_ref() else {
            panic!("{decision:?}");
        };
        assert_eq!(
            answer,
            "[redacted:field:password] [redacted:field:password] sk-…[redacted:openai_key]"
        );
    }

    #[test]
    fn a_sink_numbered_after_a_point_numbers_its_backlog_and_live_events_on_from_it() {
        let sink = EventSink::new(Arc::from("run-4"), true, test_redaction()).numbered_after(40);
        assert_eq!(sink.last_numbered(), 40);
        sink.emit(|| RunEvent::StepStarted { step: 1 });
        sink.emit(|| RunEvent::StateUpdated { version: 1 });
        let mut rx = sink.subscribe().unwrap();
        sink.emit(|| RunEvent::StepStarted { step: 2 });
        let seqs: Vec<u64> = drain(&mut rx).iter().map(|r| r.seq).collect();
        assert_eq!(seqs, [41, 42, 43]);
        assert_eq!(sink.last_numbered(), 43);
    }

    #[test]
    fn a_backlog_that_fills_is_dropped_and_no_longer_built() {
        let sink = EventSink::new(Arc::from("run-2"), true, test_redaction());
        for step in 0..EVENT_BUFFER as u64 + 1 {
            sink.emit(|| RunEvent::StepStarted { step });
        }
        assert!(!sink.listening());
        let mut rx = sink.subscribe().unwrap();
        assert!(drain(&mut rx).is_empty());
        sink.emit(|| RunEvent::StepStarted { step: 0 });
        assert_eq!(drain(&mut rx)[0].seq, EVENT_BUFFER as u64 + 2);
    }
}

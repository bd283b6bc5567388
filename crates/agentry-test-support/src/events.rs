//! Waiting for run events instead of sleeping and polling.

use std::time::Duration;

use agentry::protocol::envelope::ResultEnvelope;
use agentry::protocol::event::{EventRecord, RunEvent};
use agentry::{Policy, RunConfig, RunOutcome, Runtime};
use tokio::sync::broadcast::{self, error::RecvError};

/// How long [`collect_until_stopped`] waits for a run to stop.
pub const COLLECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why no matching event was returned.
#[derive(Debug, Clone, PartialEq)]
pub enum EventWaitError {
    /// No matching event arrived in time. Holds the events seen meanwhile.
    Timeout(Vec<EventRecord>),
    /// The run ended (the channel closed) before a matching event. Holds the events seen.
    Closed(Vec<EventRecord>),
    /// The receiver fell behind and this many events were lost.
    Lagged(u64),
}

impl std::fmt::Display for EventWaitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = |seen: &[EventRecord]| {
            seen.iter()
                .map(|e| format!("#{} {}", e.seq, event_name(&e.event)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            EventWaitError::Timeout(seen) => {
                write!(f, "no matching event in time; saw [{}]", names(seen))
            }
            EventWaitError::Closed(seen) => write!(
                f,
                "event stream closed before a matching event; saw [{}]",
                names(seen)
            ),
            EventWaitError::Lagged(n) => write!(f, "the receiver lagged and lost {n} events"),
        }
    }
}

impl std::error::Error for EventWaitError {}

/// The serialized tag of an event (`step_started`, `run_stopped`, ...).
pub fn event_name(event: &RunEvent) -> String {
    serde_json::to_value(event)
        .ok()
        .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_string))
        .unwrap_or_else(|| "?".to_string())
}

/// Receives events until one matches `pred`, and returns it. Events before it are
/// consumed. Fails on timeout, on a closed stream, or when the receiver lagged.
pub async fn wait_for_event<F>(
    rx: &mut broadcast::Receiver<EventRecord>,
    mut pred: F,
    timeout: Duration,
) -> Result<EventRecord, EventWaitError>
where
    F: FnMut(&EventRecord) -> bool,
{
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Err(_) => return Err(EventWaitError::Timeout(seen)),
            Ok(Err(RecvError::Closed)) => return Err(EventWaitError::Closed(seen)),
            Ok(Err(RecvError::Lagged(n))) => return Err(EventWaitError::Lagged(n)),
            Ok(Ok(record)) if pred(&record) => return Ok(record),
            Ok(Ok(record)) => seen.push(record),
        }
    }
}

/// The first event `pick` takes (maps to a value), within `timeout`.
pub async fn next_event<T>(
    rx: &mut broadcast::Receiver<EventRecord>,
    timeout: Duration,
    mut pick: impl FnMut(&RunEvent) -> Option<T>,
) -> Result<T, EventWaitError> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Err(_) => return Err(EventWaitError::Timeout(seen)),
            Ok(Err(RecvError::Closed)) => return Err(EventWaitError::Closed(seen)),
            Ok(Err(RecvError::Lagged(n))) => return Err(EventWaitError::Lagged(n)),
            Ok(Ok(record)) => match pick(&record.event) {
                Some(found) => return Ok(found),
                None => seen.push(record),
            },
        }
    }
}

/// Collects every event up to and including `RunStopped` (or until the stream
/// closes), waiting at most [`COLLECT_TIMEOUT`].
pub async fn collect_until_stopped(
    rx: broadcast::Receiver<EventRecord>,
) -> Result<Vec<EventRecord>, EventWaitError> {
    collect_until_stopped_within(rx, COLLECT_TIMEOUT).await
}

/// [`collect_until_stopped`] with an explicit timeout.
pub async fn collect_until_stopped_within(
    mut rx: broadcast::Receiver<EventRecord>,
    timeout: Duration,
) -> Result<Vec<EventRecord>, EventWaitError> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Err(_) => return Err(EventWaitError::Timeout(seen)),
            Ok(Err(RecvError::Closed)) => return Ok(seen),
            Ok(Err(RecvError::Lagged(n))) => return Err(EventWaitError::Lagged(n)),
            Ok(Ok(record)) => {
                let stopped = matches!(record.event, RunEvent::RunStopped { .. });
                seen.push(record);
                if stopped {
                    return Ok(seen);
                }
            }
        }
    }
}

/// The envelopes of every `ToolCallFinished` event, in event order, with their step.
pub fn tool_results(events: &[EventRecord]) -> Vec<(u64, ResultEnvelope)> {
    events
        .iter()
        .filter_map(|e| {
            if let RunEvent::ToolCallFinished { step, result } = &e.event {
                Some((*step, (**result).clone()))
            } else {
                None
            }
        })
        .collect()
}

/// Starts a run, collects its events until it stops, and returns the outcome and
/// the events.
pub async fn run_with_events(
    runtime: &Runtime,
    config: RunConfig,
    policy: impl Policy,
) -> Result<(RunOutcome, Vec<EventRecord>), crate::TestError> {
    let handle = runtime.start(config, policy).await?;
    let events = collect_until_stopped(handle.subscribe()).await?;
    let outcome = handle.wait().await?;
    Ok((outcome, events))
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentry::StopReason;

    fn record(seq: u64, event: RunEvent) -> EventRecord {
        EventRecord {
            run_id: "r".into(),
            seq,
            event,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn waits_past_non_matching_events_and_times_out() {
        let (tx, mut rx) = broadcast::channel(8);
        let _ = tx.send(record(1, RunEvent::StepStarted { step: 1 }));
        let _ = tx.send(record(
            2,
            RunEvent::RunStopped {
                stop_reason: StopReason::Done,
            },
        ));
        let got = wait_for_event(
            &mut rx,
            |e| matches!(e.event, RunEvent::RunStopped { .. }),
            Duration::from_secs(1),
        )
        .await;
        assert_eq!(got.map(|e| e.seq), Ok(2));
        let none = wait_for_event(&mut rx, |_| true, Duration::from_millis(10)).await;
        assert_eq!(none, Err(EventWaitError::Timeout(Vec::new())));
    }

    #[tokio::test(start_paused = true)]
    async fn collect_stops_at_run_stopped() {
        let (tx, rx) = broadcast::channel(8);
        let _ = tx.send(record(1, RunEvent::StepStarted { step: 1 }));
        let _ = tx.send(record(
            2,
            RunEvent::RunStopped {
                stop_reason: StopReason::Done,
            },
        ));
        let _ = tx.send(record(3, RunEvent::StepStarted { step: 2 }));
        let got = collect_until_stopped(rx).await.map(|v| v.len());
        assert_eq!(got, Ok(2));
    }
}

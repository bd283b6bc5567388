//! A named model's shared limits ([`ModelGate`]), measured at the strict mock
//! server: runs sharing a gate never have more requests in flight than its
//! `max_concurrent`, and a provider's 429 with `Retry-After` to one run holds
//! back the next request of every run on the model.

use std::sync::Arc;
use std::time::Duration;

use agentry_models::{GateLimits, ModelGate, OpenAiPolicy};
use agentry_protocol::Decision;
use tokio::sync::Notify;

use super::server::{MockServer, Reply, TestError};
use super::sse::{config, decide, text_turn};

const RUNS: usize = 5;

/// `RUNS` runs, each a policy of its own on the same gate, each taking one turn.
async fn turns_at_once(server: &MockServer, gate: Option<Arc<ModelGate>>) -> Vec<Decision> {
    let turns = (0..RUNS).map(|_| {
        let mut model = config(&server.base_url);
        model.gate = gate.clone();
        async move {
            match OpenAiPolicy::new(model) {
                Ok(mut policy) => decide(&mut policy, &[]).await.decision,
                Err(error) => Decision::Failed {
                    message: error.to_string(),
                    fatal: true,
                },
            }
        }
    });
    futures::future::join_all(turns).await
}

/// Replies that hold after their first chunk until `go` is notified: every
/// request let through is in flight at the same time.
fn held_replies(go: &Arc<Notify>) -> Vec<Reply> {
    (0..RUNS)
        .map(|_| Reply::sse(text_turn("done")).hold_after(1, Arc::clone(go)))
        .collect()
}

async fn wait_for_in_flight(server: &MockServer, count: usize) -> Result<(), TestError> {
    tokio::time::timeout(Duration::from_secs(20), async {
        while server.in_flight() < count {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .map_err(|_| format!("never {count} requests in flight").into())
}

/// Releases the held replies until every turn has its answer.
async fn release_until_done(
    go: Arc<Notify>,
    turns: tokio::task::JoinHandle<Vec<Decision>>,
) -> Result<Vec<Decision>, TestError> {
    let releasing = tokio::spawn(async move {
        loop {
            go.notify_waiters();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let decisions = tokio::time::timeout(Duration::from_secs(30), turns).await??;
    releasing.abort();
    Ok(decisions)
}

#[tokio::test]
async fn runs_on_one_gate_never_have_more_requests_in_flight_than_max_concurrent()
-> Result<(), TestError> {
    let go = Arc::new(Notify::new());
    let server = Arc::new(MockServer::start(held_replies(&go)).await?);
    let gate = ModelGate::new(GateLimits {
        max_concurrent: Some(2),
        ..GateLimits::default()
    });
    let turns = tokio::spawn({
        let server = Arc::clone(&server);
        let gate = Arc::clone(&gate);
        async move { turns_at_once(&server, Some(gate)).await }
    });
    wait_for_in_flight(&server, 2).await?;
    // The others wait at the gate, not at the server.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(server.received().len(), 2);
    assert_eq!(gate.usage().waiting, RUNS - 2);
    let decisions = release_until_done(go, turns).await?;
    assert!(
        decisions
            .iter()
            .all(|d| matches!(d, Decision::Final { .. })),
        "{decisions:?}"
    );
    assert_eq!(server.received().len(), RUNS);
    assert_eq!(server.most_in_flight(), 2);
    Ok(())
}

/// The control: without a gate the same runs are all in flight at once, so
/// the measurement above measures the gate.
#[tokio::test]
async fn without_a_gate_every_run_is_in_flight_at_once() -> Result<(), TestError> {
    let go = Arc::new(Notify::new());
    let server = Arc::new(MockServer::start(held_replies(&go)).await?);
    let turns = tokio::spawn({
        let server = Arc::clone(&server);
        async move { turns_at_once(&server, None).await }
    });
    wait_for_in_flight(&server, RUNS).await?;
    release_until_done(go, turns).await?;
    assert_eq!(server.most_in_flight(), RUNS);
    Ok(())
}

#[tokio::test]
async fn a_429_to_one_run_holds_back_the_next_request_of_every_run_on_the_model()
-> Result<(), TestError> {
    let server = MockServer::start(vec![
        Reply::status(429, "{\"error\":\"slow down\"}").header("retry-after", "1"),
        Reply::sse(text_turn("first")),
        Reply::sse(text_turn("second")),
    ])
    .await?;
    let gate = ModelGate::new(GateLimits::default());
    let mut first = config(&server.base_url);
    first.gate = Some(Arc::clone(&gate));
    let mut second = first.clone();
    second.model = "test-model".into();
    let mut first = OpenAiPolicy::new(first)?;
    let mut second = OpenAiPolicy::new(second)?;
    // The first run gets the 429 (retried after 1 s); the second run starts
    // while the first waits, and must wait for the hold too.
    let one = async { decide(&mut first, &[]).await };
    let two = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        decide(&mut second, &[]).await
    };
    let (one, two) = tokio::join!(one, two);
    assert!(matches!(one.decision, Decision::Final { .. }), "{one:?}");
    assert!(matches!(two.decision, Decision::Final { .. }), "{two:?}");
    let received = server.received();
    assert_eq!(received.len(), 3);
    let held_from = received[0].at + Duration::from_secs(1);
    assert!(
        received[1].at >= held_from && received[2].at >= held_from,
        "a request started before the provider's Retry-After passed"
    );
    Ok(())
}

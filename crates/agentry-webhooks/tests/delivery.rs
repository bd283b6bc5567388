//! Webhooks delivered to a real HTTP receiver on 127.0.0.1: signed per the
//! specification (checked here with HMAC-SHA256 computed from its text),
//! retried after a 500 with the same `webhook-id`, and delivered by a new
//! deliverer after a restart from what the outbox's file kept.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentry_webhooks::{Deliverer, Outbox, Schedule, Secret, State, Webhook};
use axum::body::Bytes;
use axum::extract::State as Shared;
use axum::http::{HeaderMap, StatusCode};
use base64::Engine;

type TestError = Box<dyn std::error::Error + Send + Sync>;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// One POST the receiver got.
#[derive(Clone)]
struct Got {
    headers: HeaderMap,
    body: Bytes,
}

/// What the receiver got, and the statuses it answers with, in order (then 200).
#[derive(Clone, Default)]
struct Receiver {
    got: Arc<Mutex<Vec<Got>>>,
    statuses: Arc<Mutex<Vec<u16>>>,
}

async fn receive(
    Shared(receiver): Shared<Receiver>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    receiver
        .got
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Got { headers, body });
    let mut statuses = receiver.statuses.lock().unwrap_or_else(|e| e.into_inner());
    let status = if statuses.is_empty() {
        200
    } else {
        statuses.remove(0)
    };
    StatusCode::from_u16(status).unwrap_or(StatusCode::OK)
}

async fn start_receiver(statuses: Vec<u16>) -> Result<(String, Receiver), TestError> {
    let receiver = Receiver {
        statuses: Arc::new(Mutex::new(statuses)),
        ..Receiver::default()
    };
    let app = axum::Router::new()
        .route("/hook", axum::routing::post(receive))
        .with_state(receiver.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((url, receiver))
}

/// The specification's check, written from its text: base64 of
/// HMAC-SHA256(secret bytes, "{id}.{timestamp}.{body}"), after "v1,".
fn verifies(headers: &HeaderMap, body: &[u8]) -> bool {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    };
    let engine = base64::engine::general_purpose::STANDARD;
    let Ok(key) = engine.decode(SECRET.trim_start_matches("whsec_")) else {
        return false;
    };
    let signed = [
        header("webhook-id").as_bytes(),
        b".",
        header("webhook-timestamp").as_bytes(),
        b".",
        body,
    ]
    .concat();
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &key);
    let expected = format!(
        "v1,{}",
        engine.encode(ring::hmac::sign(&key, &signed).as_ref())
    );
    header("webhook-signature")
        .split(' ')
        .any(|s| s == expected)
}

fn quick() -> Schedule {
    Schedule {
        delays: vec![Duration::from_millis(50); 3],
        give_up_after: Duration::from_secs(60),
    }
}

fn webhook(url: &str) -> Webhook {
    Webhook {
        id: "msg_run-1".into(),
        url: url.into(),
        body: r#"{"type":"run.stopped","data":{"run_id":"run-1","stop_reason":"done"}}"#.into(),
    }
}

async fn deliver_until_settled(
    deliverer: &Deliverer,
    outbox: &Outbox,
    id: &str,
) -> Result<State, TestError> {
    for _ in 0..200 {
        deliverer.deliver_due().await?;
        match outbox.status(id)?.map(|s| s.state) {
            Some(State::Pending) | None => tokio::time::sleep(Duration::from_millis(20)).await,
            Some(settled) => return Ok(settled),
        }
    }
    Err("never settled".into())
}

#[tokio::test]
async fn a_500_is_retried_with_the_same_id_and_every_attempt_is_signed() -> Result<(), TestError> {
    let dir = tempfile::tempdir()?;
    let (url, receiver) = start_receiver(vec![500]).await?;
    let outbox = Arc::new(Outbox::open(&dir.path().join("store.db"))?);
    let deliverer = Deliverer::new(Arc::clone(&outbox), Secret::parse(SECRET)?, quick())?;
    deliverer.enqueue(&webhook(&url))?;
    assert_eq!(
        deliver_until_settled(&deliverer, &outbox, "msg_run-1").await?,
        State::Delivered
    );
    let got = receiver
        .got
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    assert_eq!(got.len(), 2, "one 500, one 200");
    for Got { headers, body } in &got {
        assert_eq!(headers["webhook-id"], "msg_run-1");
        assert!(
            verifies(headers, body),
            "a signature the specification's check refuses"
        );
        assert_eq!(body.as_ref(), webhook(&url).body.as_bytes());
    }
    assert_eq!(outbox.status("msg_run-1")?.map(|s| s.attempts), Some(2));
    Ok(())
}

#[tokio::test]
async fn a_webhook_not_delivered_before_a_restart_is_delivered_after_it() -> Result<(), TestError> {
    let dir = tempfile::tempdir()?;
    let store = dir.path().join("store.db");
    let (url, receiver) = start_receiver(vec![503]).await?;
    {
        let outbox = Arc::new(Outbox::open(&store)?);
        let deliverer = Deliverer::new(Arc::clone(&outbox), Secret::parse(SECRET)?, quick())?;
        deliverer.enqueue(&webhook(&url))?;
        deliverer.deliver_due().await?;
        assert_eq!(
            outbox.status("msg_run-1")?.map(|s| s.state),
            Some(State::Pending)
        );
        // Enqueued again (a second stop report): still one webhook.
        deliverer.enqueue(&webhook(&url))?;
    }
    let outbox = Arc::new(Outbox::open(&store)?);
    let deliverer = Deliverer::new(Arc::clone(&outbox), Secret::parse(SECRET)?, quick())?;
    let stop = Arc::new(tokio::sync::Notify::new());
    let running = tokio::spawn({
        let stop = Arc::clone(&stop);
        deliverer.clone().run(async move { stop.notified().await })
    });
    let settled = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if outbox.status("msg_run-1").ok().flatten().map(|s| s.state) == Some(State::Delivered)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    stop.notify_one();
    running.await?;
    settled.map_err(|_| "not delivered after the restart")?;
    let got = receiver
        .got
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].headers["webhook-id"], got[1].headers["webhook-id"]);
    Ok(())
}

#[tokio::test]
async fn a_receiver_that_never_answers_2xx_is_given_up_when_the_schedule_ends()
-> Result<(), TestError> {
    let dir = tempfile::tempdir()?;
    let (url, receiver) = start_receiver(vec![500; 10]).await?;
    let outbox = Arc::new(Outbox::open(&dir.path().join("store.db"))?);
    let deliverer = Deliverer::new(Arc::clone(&outbox), Secret::parse(SECRET)?, quick())?;
    deliverer.enqueue(&webhook(&url))?;
    assert_eq!(
        deliver_until_settled(&deliverer, &outbox, "msg_run-1").await?,
        State::GaveUp
    );
    assert_eq!(
        receiver.got.lock().unwrap_or_else(|e| e.into_inner()).len(),
        4,
        "1 + 3 retries"
    );
    Ok(())
}

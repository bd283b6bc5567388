//! Operating the service: its health (`GET /healthz` reports the store) and
//! its drain when it is told to stop.
//!
//! A drain, in order: every request but `GET /healthz` is answered 503 with
//! `Retry-After` (a load balancer sends it elsewhere); each live run finishes
//! the step in progress and starts no other (`RunHandle::drain`), within the
//! drain's time; the store is flushed; then the runtime lets go of every run
//! as a crash would (`Runtime::abandon`), its event streams ended first
//! (without a `run_stopped`: the run is not over): a run that finished its step
//! resumes in the next process at its next step, one still in its step
//! resumes by the resume rules (a call with no recorded outcome runs again
//! when its contract says that is safe, else waits for a human).

use std::time::Duration;

use agentry::{RunHandle, RunStatus};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::error::{ApiError, error_body};
use super::guard::HEALTH_PATH;
use super::status::StoreProblem;
use super::table::{App, LiveRun};

/// What a 503 of a draining service asks a client to wait, in seconds: by
/// then another instance (or this one, restarted) takes the request.
pub const DRAIN_RETRY_AFTER_SECONDS: u64 = 5;

/// How long `/healthz` waits for the store to answer before it says it does not.
const STORE_ANSWER: Duration = Duration::from_secs(2);

/// How often a drain looks whether a run's step waits on a human.
const HUMAN_POLL: Duration = Duration::from_millis(50);

/// An id no run has: `/healthz` reads it, a point query that touches the
/// store's file and finds nothing.
const PROBE_RUN_ID: &str = "agentry-healthz-probe";

/// What a drain did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drained {
    /// Runs whose step in progress finished (or that were between steps,
    /// or waiting on a human): they resume at their next step.
    pub parked: usize,
    /// Runs still in a step when time ran out (or a second signal came):
    /// stopped as a crash would stop them, resumed by the resume rules.
    pub cut: usize,
}

impl App {
    /// From now on every request but `GET /healthz` is answered 503 with
    /// `Retry-After`, and `/healthz` says the service is draining.
    pub fn stop_taking_work(&self) {
        self.ops.set_draining();
    }

    /// Whether [`App::stop_taking_work`] was called.
    pub fn is_draining(&self) -> bool {
        self.ops.draining()
    }

    /// Drains the service (see the module docs): stops taking work, lets
    /// each live run finish its step for up to `timeout` or until `now`
    /// completes (a second signal), flushes the store, and lets go of every
    /// run. The runtime is unusable afterwards: the process exits next.
    pub async fn drain(&self, timeout: Duration, now: impl Future<Output = ()>) -> Drained {
        self.stop_taking_work();
        let live = self.live_runs();
        let total = live.len();
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        let mut steps = tokio::task::JoinSet::new();
        let mut logs = Vec::with_capacity(total);
        for LiveRun { handle, log } in live {
            logs.push(log);
            let done = done_tx.clone();
            steps.spawn(async move {
                tokio::select! {
                    () = handle.drain() => {}
                    () = waits_on_human(&handle) => {}
                }
                let _ = done.send(());
            });
        }
        drop(done_tx);
        let mut parked = 0;
        let counted = async {
            while done_rx.recv().await.is_some() {
                parked += 1;
            }
        };
        tokio::select! {
            () = counted => {}
            () = tokio::time::sleep(timeout) => {}
            () = now => {}
        }
        steps.abort_all();
        // The streams end here, without a `run_stopped`: the runs go on in
        // the next process, where a client follows them again.
        for log in logs {
            log.close();
        }
        if self.runtime.store().is_some()
            && let Err(e) = self.runtime.flush().await
        {
            tracing::error!(error = %e, "the store could not be flushed");
        }
        self.runtime.abandon().await;
        Drained {
            parked,
            cut: total.saturating_sub(parked),
        }
    }

    /// The store's state: `Ok` when its writer takes writes and a read of
    /// its file (a Postgres store: a trivial query of its database) answers,
    /// in time; else what is wrong.
    async fn store_state(&self) -> Result<(), StoreProblem> {
        let Some(store) = self.runtime.store().cloned() else {
            return Ok(());
        };
        self.ops.check_store_file()?;
        let flushed = tokio::time::timeout(STORE_ANSWER, self.runtime.flush()).await;
        let silent = |what| StoreProblem::Silent {
            what,
            within: STORE_ANSWER,
        };
        flushed
            .map_err(|_| silent("a flush"))?
            .map_err(StoreProblem::NoWrites)?;
        #[cfg(feature = "postgres")]
        {
            let place = self.admission.slots().limits().queue_file.clone();
            if let Some(super::limits::QueuePlace::Database(database)) = place {
                return self.ops.probe_database(database, STORE_ANSWER).await;
            }
        }
        let read = tokio::task::spawn_blocking(move || store.load(PROBE_RUN_ID).map(|_| ()));
        tokio::time::timeout(STORE_ANSWER, read)
            .await
            .map_err(|_| silent("a read"))?
            .map_err(StoreProblem::ReadFailed)?
            .map_err(StoreProblem::Unreadable)
    }
}

/// Returns once the run waits on a human (an approval, a decision): its step
/// does not end by itself, and what it waits for is on disk already.
async fn waits_on_human(handle: &RunHandle) {
    loop {
        let status = handle.snapshot().await.map(|s| s.status);
        match status {
            Some(RunStatus::AwaitingApproval | RunStatus::AwaitingDecision) | None => return,
            Some(
                RunStatus::Running | RunStatus::Sleeping | RunStatus::Paused | RunStatus::Stopped,
            ) => {}
        }
        tokio::time::sleep(HUMAN_POLL).await;
    }
}

/// `GET /healthz`: 200 `{"status": "ok", "store": "ok"}` when the store
/// answers; 503 when it does not, or when the service drains (with the
/// error body every error has, so a client that only reads `error` reads it).
pub(super) async fn health(State(app): State<App>) -> Response {
    let store = app.store_state().await;
    let draining = app.is_draining();
    let (status, message) = match (&store, draining) {
        (Ok(()), false) => {
            return axum::Json(json!({ "status": "ok", "store": "ok" })).into_response();
        }
        (_, true) => (
            "draining",
            "the service is stopping; send new work elsewhere".to_string(),
        ),
        (Err(problem), false) => ("unavailable", problem.to_string()),
    };
    let mut body = error_body(StatusCode::SERVICE_UNAVAILABLE, &message, None);
    body["status"] = json!(status);
    body["store"] = json!(if store.is_ok() { "ok" } else { "unavailable" });
    if let Err(problem) = &store {
        tracing::warn!(%problem, "health: the store does not answer");
    }
    let mut response = (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response();
    if draining {
        response.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(DRAIN_RETRY_AFTER_SECONDS),
        );
    }
    response
}

/// While the service drains, every request but `GET /healthz` is 503 with
/// `Retry-After`, before anything of it is read.
pub(super) async fn refuse_while_draining(
    State(app): State<App>,
    request: Request,
    next: Next,
) -> Response {
    if !app.is_draining() || request.uri().path() == HEALTH_PATH {
        return next.run(request).await;
    }
    let mut response = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "the service is stopping and takes no new requests; retry against another instance or after its restart",
    )
    .into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::RETRY_AFTER,
        HeaderValue::from(DRAIN_RETRY_AFTER_SECONDS),
    );
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

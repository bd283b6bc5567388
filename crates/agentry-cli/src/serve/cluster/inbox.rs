//! Requests for runs another node holds, through `agentry.cluster_inbox`.
//!
//! The node a request reaches writes it as a row and `NOTIFY`s
//! `agentry_inbox` with the run id, in one transaction, then waits for the
//! row's answer (`NOTIFY agentry_answer` with the row id wakes it; it looks
//! every [`ANSWER_POLL`] as well, since a notification can be missed). The
//! node holding the run takes the run's rows one at a time, oldest first
//! (`taken_by`), applies each through its own routes and writes the answer.
//! A row taken by a node that is gone is taken again by the next holder (the
//! request may then be applied twice if its node died between applying and
//! answering). A request no node answers within [`FORWARD_WAIT`] (the run's
//! node died and no node took it over yet) stays in the inbox for the node
//! that takes the run over: an input is answered 202 `{"routed": "waiting"}`,
//! a `GET` 503 with `Retry-After`.
//!
//! A hibernated run rests owned by no node: the node an input for it
//! reaches takes its lease and wakes it (`takeover::take_over`), then
//! applies the input through the inbox like any other, after those that
//! came before. An input that reached a run's node as it was letting its
//! lease go is answered `let_go` there, and asked again here until the run
//! rests (and is woken) or another node holds it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agentry::store::{Database, Listener, Notice, StoreError};
use agentry_serve::{Answer, App, Forward};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

use super::super::resume::{AtRest, Resumer};
use super::applier::Applier;
use super::channels::{ANSWER_CHANNEL, INBOX_CHANNEL, TARGET_PREFIX, Wake};
use super::node::{Node, blocking, now_ms};
use super::takeover::{TakeOver, take_over};

/// How long a request waits for the run's node to answer.
pub(super) const FORWARD_WAIT: Duration = Duration::from_secs(10);
/// How often a request that reached a run letting its lease go is asked
/// again, and how long apart (the lease is released in one commit).
const LET_GO_TRIES: u32 = 40;
const LET_GO_PAUSE: Duration = Duration::from_millis(50);
/// How often a waiting request looks at its row besides being woken.
const ANSWER_POLL: Duration = Duration::from_millis(250);

/// This node's side of the routing: forwarding requests, applying others'.
pub(super) struct Routes {
    pub(super) node: Arc<Node>,
    pub(super) app: App,
    /// A connection of its own: forwarding and applying do not queue behind
    /// the node's heartbeat and take-over scans.
    pub(super) db: Arc<Database>,
    pub(super) waiters: Arc<Waiters>,
    pub(super) events: Arc<super::events::Events>,
    /// How this node resumes a run it takes (a resting one it wakes).
    resumer: Arc<Resumer>,
    _listeners: [Listener; 2],
}

impl std::fmt::Debug for Routes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Routes")
            .field("node", &self.node.id)
            .finish_non_exhaustive()
    }
}

/// Requests of this node waiting for their answer, by row id.
#[derive(Debug, Default)]
pub(super) struct Waiters(Mutex<HashMap<i64, oneshot::Sender<()>>>);

impl Waiters {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, oneshot::Sender<()>>> {
        // Plain inserts and removes: a poisoned map is still whole.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wake(&self, id: i64) {
        if let Some(waiter) = self.lock().remove(&id) {
            let _ = waiter.send(());
        }
    }

    fn wake_all(&self) {
        for (_, waiter) in self.lock().drain() {
            let _ = waiter.send(());
        }
    }
}

impl Routes {
    /// One request's share of the routes (it outlives the call that made it).
    pub(super) fn request(&self) -> Request {
        Request {
            node: Arc::clone(&self.node),
            app: self.app.clone(),
            db: Arc::clone(&self.db),
            waiters: Arc::clone(&self.waiters),
            resumer: Arc::clone(&self.resumer),
        }
    }

    /// Listens for rows and answers, and starts applying the rows of the
    /// runs this node holds.
    pub(super) fn start(
        node: Arc<Node>,
        app: App,
        resumer: Arc<Resumer>,
    ) -> Result<Routes, StoreError> {
        let db = Arc::new(Database::connect(&node.url)?);
        let (wake, woken) = mpsc::unbounded_channel();
        let inbox = db.listen(INBOX_CHANNEL, move |notice| {
            let _ = wake.send(match notice {
                Notice::Payload(run_id) => Wake::Run(run_id),
                Notice::Reconnected => Wake::All,
            });
        })?;
        let waiters = Arc::new(Waiters::default());
        let woken_waiters = Arc::clone(&waiters);
        let answers = db.listen(ANSWER_CHANNEL, move |notice| match notice {
            Notice::Payload(id) => {
                if let Ok(id) = id.parse() {
                    woken_waiters.wake(id);
                }
            }
            Notice::Reconnected => woken_waiters.wake_all(),
        })?;
        let applier = Applier {
            node: Arc::clone(&node),
            app: app.clone(),
            db: Arc::clone(&db),
        };
        tokio::spawn(applier.run(woken));
        let events = Arc::new(super::events::Events::start(&node, app.clone())?);
        Ok(Routes {
            node,
            app,
            db,
            waiters,
            events,
            resumer,
            _listeners: [inbox, answers],
        })
    }
}

/// One request for a run another node holds.
pub(super) struct Request {
    pub(super) node: Arc<Node>,
    pub(super) app: App,
    pub(super) db: Arc<Database>,
    pub(super) waiters: Arc<Waiters>,
    pub(super) resumer: Arc<Resumer>,
}

impl Request {
    pub(super) async fn answer(self, forward: Forward) -> Response {
        let mut tries = 0;
        loop {
            match self.answer_once(forward.clone()).await {
                // The run was letting its lease go: soon it rests (and this
                // node wakes it) or another node holds it.
                Ok(answer) if answer.is_let_go() && tries < LET_GO_TRIES => {
                    tries += 1;
                    tokio::time::sleep(LET_GO_PAUSE).await;
                }
                Ok(answer) => return answer.into_response(),
                Err(response) => return response,
            }
        }
    }

    /// The answer of the run's node (or of the store), or the response
    /// this node gives itself.
    async fn answer_once(&self, forward: Forward) -> Result<Answer, Response> {
        // The store answers for runs that are not, or no longer, running
        // (and for other tenants' runs: the 404 of a run that does not exist).
        if let Some(answer) = self.app.answer_from_store(&forward, false).await {
            return Ok(answer);
        }
        let holder = self.holder(&forward.run_id).await.map_err(|e| failed(&e))?;
        let get = forward.method == "GET";
        let wait = match holder {
            Holder::None(note) if get => return Err(self.stored_view(&forward, note).await),
            Holder::Resting if get => {
                let note = format!(
                    "run {} is hibernated and owned by no node: its next input wakes it on the node that input reaches",
                    forward.run_id
                );
                return Err(self.stored_view(&forward, Some(note)).await);
            }
            Holder::Node => FORWARD_WAIT,
            // Written for the node that takes the run over.
            Holder::None(_) => Duration::ZERO,
            Holder::Resting => {
                let (node, app) = (&self.node, &self.app);
                match take_over(node, app, &self.resumer, &forward.run_id, AtRest::Wake).await {
                    TakeOver::Here | TakeOver::Elsewhere => FORWARD_WAIT,
                    // Written for a node that can (the take-over scan wakes
                    // a resting run an input waits for).
                    TakeOver::Not | TakeOver::Failed => Duration::ZERO,
                }
            }
        };
        match self.forward(forward.clone(), wait, None).await {
            Ok(Sent::Answered(answer)) => Ok(answer),
            Ok(Sent::Waiting | Sent::Withdrawn) => Err(unanswered(&forward)),
            Err(e) => Err(failed(&e)),
        }
    }

    /// Which live node holds the run; else why none does, if a node said.
    async fn holder(&self, run_id: &str) -> Result<Holder, StoreError> {
        let run_id = run_id.to_string();
        let fresh = now_ms() - self.node.lease_ms();
        blocking(&self.db, move |tx| {
            let held = tx.query_opt(
                "SELECT 1 FROM agentry.owners o
                 JOIN agentry.cluster_nodes n ON n.owner_key = o.machine || '#' || o.pid
                 WHERE o.run_id = $1 AND n.heartbeat_ms >= $2",
                &[&run_id, &fresh],
            )?;
            if held.is_some() {
                return Ok(Holder::Node);
            }
            let resting = tx.query_opt(
                "SELECT 1 FROM agentry.runs r
                 WHERE r.run_id = $1 AND r.status = 'sleeping'
                   AND NOT EXISTS (SELECT 1 FROM agentry.owners o WHERE o.run_id = r.run_id)",
                &[&run_id],
            )?;
            if resting.is_some() {
                return Ok(Holder::Resting);
            }
            let note = tx.query_opt(
                "SELECT note FROM agentry.cluster_notes WHERE run_id = $1",
                &[&run_id],
            )?;
            Ok(Holder::None(note.map(|row| row.get(0))))
        })
        .await
    }

    /// The run's last checkpoint, and why no node runs it now.
    async fn stored_view(&self, forward: &Forward, note: Option<String>) -> Response {
        let Some(answer) = self.app.answer_from_store(forward, true).await else {
            return unanswered(forward);
        };
        let Ok(mut view) = serde_json::from_slice::<serde_json::Value>(&answer.body) else {
            return answer.into_response();
        };
        if answer.status == StatusCode::OK.as_u16() {
            view["note"] = json!(note.unwrap_or_else(|| format!(
                "no node holds run {} now: its node is gone, and a node takes it over once its lease expires",
                forward.run_id
            )));
        }
        (
            StatusCode::from_u16(answer.status).unwrap_or(StatusCode::OK),
            axum::Json(view),
        )
            .into_response()
    }

    /// Writes the request as a row (for the node holding its run, or for
    /// node `target`) and waits up to `wait` for its answer. A look, or a
    /// request for a target, that no node took by then is withdrawn.
    pub(super) async fn forward(
        &self,
        forward: Forward,
        wait: Duration,
        target: Option<String>,
    ) -> Result<Sent, StoreError> {
        let withdraw = forward.method == "GET" || target.is_some();
        let from = self.node.id.clone();
        let id: i64 = blocking(&self.db, move |tx| {
            let id: i64 = tx
                .query_one(
                    "INSERT INTO agentry.cluster_inbox
                         (run_id, tenant, method, path, body, from_node, created_ms, target_node)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
                    &[
                        &forward.run_id,
                        &forward.tenant,
                        &forward.method,
                        &forward.path,
                        &forward.body,
                        &from,
                        &now_ms(),
                        &target,
                    ],
                )?
                .get(0);
            let wake = match &target {
                Some(node) => format!("{TARGET_PREFIX}{node}"),
                None => forward.run_id.clone(),
            };
            tx.execute("SELECT pg_notify($1, $2)", &[&INBOX_CHANNEL, &wake])?;
            Ok(id)
        })
        .await?;
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let (tx, rx) = oneshot::channel();
            self.waiters.lock().insert(id, tx);
            if let Some(answer) = self.answered(id).await? {
                self.waiters.lock().remove(&id);
                return Ok(Sent::Answered(answer));
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                self.waiters.lock().remove(&id);
                break;
            }
            let _ = tokio::time::timeout(ANSWER_POLL.min(deadline - now), rx).await;
        }
        if !withdraw {
            return Ok(Sent::Waiting);
        }
        let withdrawn = blocking(&self.db, move |tx| {
            tx.execute(
                "DELETE FROM agentry.cluster_inbox WHERE id = $1 AND taken_by IS NULL",
                &[&id],
            )
        })
        .await?;
        Ok(match withdrawn {
            0 => Sent::Waiting,
            _ => Sent::Withdrawn,
        })
    }

    async fn answered(&self, id: i64) -> Result<Option<Answer>, StoreError> {
        blocking(&self.db, move |tx| {
            let row = tx.query_opt(
                "SELECT status, answer FROM agentry.cluster_inbox
                 WHERE id = $1 AND status IS NOT NULL",
                &[&id],
            )?;
            Ok(row.map(|row| Answer {
                status: u16::try_from(row.get::<_, i32>(0)).unwrap_or(502),
                body: row.get::<_, Option<Vec<u8>>>(1).unwrap_or_default(),
            }))
        })
        .await
    }
}

/// No node answered in time: the run's node is gone and not yet replaced.
fn unanswered(forward: &Forward) -> Response {
    let waiting = format!(
        "run {}'s node does not answer: it is gone, and another node takes the run over once its lease expires",
        forward.run_id
    );
    if forward.method == "GET" {
        let retry = FORWARD_WAIT.as_secs().to_string();
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, retry)],
            axum::Json(json!({"error": {"code": "unavailable", "message": waiting}})),
        )
            .into_response();
    }
    (
        StatusCode::ACCEPTED,
        axum::Json(json!({
            "run_id": forward.run_id,
            "accepted": true,
            "routed": "waiting",
            "message": format!("{waiting}; the input waits for that node"),
        })),
    )
        .into_response()
}

fn failed(e: &StoreError) -> Response {
    agentry_serve::ApiError::internal(format!("routing the request to the run's node: {e}"))
        .into_response()
}

/// What became of a forwarded request.
pub(super) enum Sent {
    /// The node that took it answered.
    Answered(Answer),
    /// Not answered yet: it stays for a node to take (or one took it and
    /// has not answered).
    Waiting,
    /// No node took it in time, and it was taken back.
    Withdrawn,
}

/// Who holds a run, as the cluster's tables say.
enum Holder {
    /// A live node.
    Node,
    /// None: it hibernated and let its lease go, for the next node an
    /// input for it reaches.
    Resting,
    /// No live node; a node's note on why, if one left it.
    None(Option<String>),
}

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

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agentry::store::{Database, Listener, Notice, StoreError};
use agentry_serve::{Answer, App, Forward};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

use super::node::{Node, blocking, now_ms};

/// How long a request waits for the run's node to answer.
pub(super) const FORWARD_WAIT: Duration = Duration::from_secs(10);
/// How often a waiting request looks at its row besides being woken.
const ANSWER_POLL: Duration = Duration::from_millis(250);
/// How often the holder looks for rows whose notification it missed.
const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// Answered rows are kept this long (for a look at what went where), then removed.
const KEEP_ANSWERED_MS: i64 = 10 * 60 * 1000;

const INBOX_CHANNEL: &str = "agentry_inbox";
/// A wake-up for the rows sent to one node (a new run placed there), not
/// for one run's: `node:NODE_ID`.
const TARGET_PREFIX: &str = "node:";
const ANSWER_CHANNEL: &str = "agentry_answer";

/// What wakes the holder's applier.
#[derive(Debug)]
enum Wake {
    /// A row for this run was written.
    Run(String),
    /// Look at every run with rows waiting (a sweep, or a listener that
    /// reconnected and may have missed some).
    All,
}

/// This node's side of the routing: forwarding requests, applying others'.
pub(super) struct Routes {
    pub(super) node: Arc<Node>,
    pub(super) app: App,
    /// A connection of its own: forwarding and applying do not queue behind
    /// the node's heartbeat and take-over scans.
    pub(super) db: Arc<Database>,
    pub(super) waiters: Arc<Waiters>,
    pub(super) events: Arc<super::events::Events>,
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
        }
    }

    /// Listens for rows and answers, and starts applying the rows of the
    /// runs this node holds.
    pub(super) fn start(node: Arc<Node>, app: App) -> Result<Routes, StoreError> {
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
}

impl Request {
    pub(super) async fn answer(self, forward: Forward) -> Response {
        // The store answers for runs that are not, or no longer, running
        // (and for other tenants' runs: the 404 of a run that does not exist).
        if let Some(answer) = self.app.answer_from_store(&forward, false).await {
            return answer.into_response();
        }
        let holder = match self.holder(&forward.run_id).await {
            Ok(holder) => holder,
            Err(e) => return failed(&e),
        };
        let wait = match holder {
            Holder::None(note) if forward.method == "GET" => {
                return self.stored_view(&forward, note).await;
            }
            Holder::Node => FORWARD_WAIT,
            // Written for the node that takes the run over.
            Holder::None(_) => Duration::ZERO,
        };
        match self.forward(forward.clone(), wait, None).await {
            Ok(Sent::Answered(answer)) => answer.into_response(),
            Ok(Sent::Waiting | Sent::Withdrawn) => unanswered(&forward),
            Err(e) => failed(&e),
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

/// Applies the rows of the runs this node holds.
struct Applier {
    node: Arc<Node>,
    app: App,
    db: Arc<Database>,
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
    /// No live node; a node's note on why, if one left it.
    None(Option<String>),
}

/// A row taken to apply.
struct Taken {
    id: i64,
    forward: Forward,
}

impl Applier {
    async fn run(self, mut woken: mpsc::UnboundedReceiver<Wake>) {
        let mut sweep = tokio::time::interval(SWEEP_EVERY);
        let mut swept = 0u64;
        loop {
            let wake = tokio::select! {
                wake = woken.recv() => match wake {
                    Some(wake) => wake,
                    None => return,
                },
                _ = sweep.tick() => Wake::All,
            };
            let mine = format!("{TARGET_PREFIX}{}", self.node.id);
            let runs = match wake {
                Wake::Run(target) if target == mine => {
                    self.apply_placed().await;
                    continue;
                }
                // New runs placed on another node.
                Wake::Run(target) if target.starts_with(TARGET_PREFIX) => continue,
                Wake::Run(run_id) => vec![run_id],
                Wake::All => {
                    swept += 1;
                    if swept.is_multiple_of(60) {
                        self.forget_answered().await;
                    }
                    self.apply_placed().await;
                    self.waiting_runs().await
                }
            };
            for run_id in runs.into_iter().filter(|id| self.app.holds(id)) {
                self.apply_all(&run_id).await;
            }
        }
    }

    async fn waiting_runs(&self) -> Vec<String> {
        blocking(&self.db, |tx| {
            tx.query(
                "SELECT DISTINCT run_id FROM agentry.cluster_inbox
                 WHERE status IS NULL AND target_node IS NULL",
                &[],
            )
            .map(|rows| rows.iter().map(|r| r.get(0)).collect())
        })
        .await
        .unwrap_or_default()
    }

    async fn forget_answered(&self) {
        let before = now_ms() - KEEP_ANSWERED_MS;
        let _ = blocking(&self.db, move |tx| {
            tx.execute(
                "DELETE FROM agentry.cluster_inbox WHERE status IS NOT NULL AND answered_ms < $1",
                &[&before],
            )
            .map(|_| ())
        })
        .await;
    }

    /// Applies run `run_id`'s waiting rows in order, until none is left or
    /// the oldest is another live node's to apply.
    async fn apply_all(&self, run_id: &str) {
        loop {
            let taken = match self.take(run_id).await {
                Ok(Some(taken)) => taken,
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(run_id, error = %e, "cannot take the run's routed requests");
                    return;
                }
            };
            if let Err(e) = self.apply(taken).await {
                tracing::warn!(run_id, error = %e, "a routed request's answer was not written");
                return;
            }
        }
    }

    /// Starts the new runs placed on this node, oldest first.
    async fn apply_placed(&self) {
        loop {
            let me = self.node.id.clone();
            let taken = blocking(&self.db, move |tx| {
                let Some(row) = tx.query_opt(
                    "UPDATE agentry.cluster_inbox SET taken_by = $1
                     WHERE id = (SELECT id FROM agentry.cluster_inbox
                                 WHERE target_node = $1 AND status IS NULL AND taken_by IS NULL
                                 ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
                     RETURNING id, tenant, method, path, body",
                    &[&me],
                )?
                else {
                    return Ok(None);
                };
                Ok(Some(Taken {
                    id: row.get(0),
                    forward: Forward {
                        run_id: String::new(),
                        tenant: row.get(1),
                        method: row.get(2),
                        path: row.get(3),
                        body: row.get(4),
                    },
                }))
            })
            .await;
            let taken = match taken {
                Ok(Some(taken)) => taken,
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot take the runs placed on this node");
                    return;
                }
            };
            if let Err(e) = self.apply(taken).await {
                tracing::warn!(error = %e, "a placed run's answer was not written");
                return;
            }
        }
    }

    /// Applies a taken row through this node's routes and writes its answer.
    async fn apply(&self, taken: Taken) -> Result<(), StoreError> {
        let answer = self.app.apply_forwarded(taken.forward).await;
        let id = taken.id;
        blocking(&self.db, move |tx| {
            tx.execute(
                "UPDATE agentry.cluster_inbox SET status = $2, answer = $3, answered_ms = $4
                 WHERE id = $1",
                &[&id, &i32::from(answer.status), &answer.body, &now_ms()],
            )?;
            tx.execute(
                "SELECT pg_notify($1, $2)",
                &[&ANSWER_CHANNEL, &id.to_string()],
            )
            .map(|_| ())
        })
        .await
    }

    /// The run's oldest waiting row, marked as this node's, unless it is
    /// another live node's.
    async fn take(&self, run_id: &str) -> Result<Option<Taken>, StoreError> {
        let (run, me) = (run_id.to_string(), self.node.id.clone());
        let fresh = now_ms() - self.node.lease_ms();
        blocking(&self.db, move |tx| {
            let Some(row) = tx.query_opt(
                "SELECT i.id, i.tenant, i.method, i.path, i.body,
                        i.taken_by IS NULL OR i.taken_by = $2 OR n.node_id IS NULL
                 FROM agentry.cluster_inbox i
                 LEFT JOIN agentry.cluster_nodes n
                        ON n.node_id = i.taken_by AND n.heartbeat_ms >= $3
                 WHERE i.run_id = $1 AND i.status IS NULL AND i.target_node IS NULL
                 ORDER BY i.id LIMIT 1 FOR UPDATE OF i",
                &[&run, &me, &fresh],
            )?
            else {
                return Ok(None);
            };
            if !row.get::<_, bool>(5) {
                return Ok(None);
            }
            let id: i64 = row.get(0);
            tx.execute(
                "UPDATE agentry.cluster_inbox SET taken_by = $2 WHERE id = $1",
                &[&id, &me],
            )?;
            Ok(Some(Taken {
                id,
                forward: Forward {
                    run_id: run.clone(),
                    tenant: row.get(1),
                    method: row.get(2),
                    path: row.get(3),
                    body: row.get(4),
                },
            }))
        })
        .await
    }
}

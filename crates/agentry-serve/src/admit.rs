//! `POST /runs` through the limits (`limits.rs`): a run starts at once when
//! a slot is free, else it waits in the queue with its id given (201,
//! `"status": "queued"`), else the answer is 429 with `Retry-After`. A
//! tenant past its money for the UTC day is 429 until midnight UTC, and a
//! run's `max_cost` is capped at what is left of the tenant's day.
//!
//! A queued run takes no input: a message, event, decision or interrupt is
//! 409 until it starts, except `{"action": "abort"}`, which takes it out of
//! the queue (it stops `user_abort` without having run). Its event stream
//! waits for its first event. The queue is kept beside the store's tables
//! (`queue.rs`) and restored, in order, when the service starts again; in a
//! Postgres database shared by several services, see `queue_held.rs`.

use std::sync::Arc;
use std::time::SystemTime;

use agentry::protocol::event::RunEvent;
use agentry::protocol::state::RunSnapshot;
use agentry::protocol::stop::StopReason;
use agentry::protocol::stored_policy::StoredPolicy;
use agentry::{RunConfig, RunHandle, RunOutcome, RunStatus};
use axum::body::Bytes;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tokio::sync::broadcast;

use super::admission::{Pending, Request};
use super::agents::RunMeta;
use super::create::{self, NewRun};
use super::error::{ApiError, ServeError};
use super::limits::{Admit, QUEUE_FULL_RETRY_SECONDS, UtcDay, Waiting};
use super::queue::{QueuedRow, RunSpend, SpendRow};
use super::queue_place::Queue;
use super::table::App;
use super::tenants::Tenant;

/// Runs `work` on the table off the async workers; a failure is logged.
pub(super) async fn keep<T: Default + Send + 'static>(
    table: Option<Arc<Queue>>,
    work: impl FnOnce(&Queue) -> Result<T, ServeError> + Send + 'static,
) -> Result<T, ServeError> {
    let Some(table) = table else {
        return Ok(T::default());
    };
    tokio::task::spawn_blocking(move || work(&table))
        .await
        .unwrap_or_else(|e| {
            Err(ServeError::Queue {
                path: std::path::PathBuf::new(),
                message: e.to_string(),
            })
        })
}

/// 429 with `Retry-After`.
fn too_many(message: String, retry_after: u64) -> ApiError {
    ApiError::new(StatusCode::TOO_MANY_REQUESTS, message).retry_after(retry_after)
}

/// 201 for a queued run: its id, at once.
fn queued(run_id: &str, position: usize) -> Response {
    (
        StatusCode::CREATED,
        [(header::LOCATION, format!("/runs/{run_id}"))],
        axum::Json(json!({ "run_id": run_id, "status": "queued", "position": position })),
    )
        .into_response()
}

impl App {
    /// A checked `POST /runs`: started, queued or refused (see the module docs).
    pub(super) async fn admit(
        &self,
        tenant: Tenant,
        request: Request,
        body: Bytes,
    ) -> Result<Response, ApiError> {
        self.refresh_spend(&tenant).await;
        self.refuse_past_cost(&tenant)?;
        let run_id = uuid::Uuid::now_v7().to_string();
        let traceparent = request.traceparent.clone();
        let admitted = {
            let mut slots = self.admission.slots();
            let meta = request.meta.clone();
            let admitted = slots.admit(&run_id, &tenant, request);
            if let Admit::Queued(_) = admitted {
                // Entered under the lock: a dispatch that starts it at once
                // then finds the entry it replaces.
                self.enter_queued(&run_id, meta);
            }
            admitted
        };
        let admitted = match admitted {
            Admit::Start(request) if !self.take_shared_slot(&run_id, &tenant).await => {
                self.queue_instead(&run_id, &tenant, request)
            }
            other @ (Admit::Start(_) | Admit::Queued(_) | Admit::Full(_)) => other,
        };
        match admitted {
            Admit::Start(request) => match self.start(&run_id, &tenant, request).await {
                Ok(handle) => Ok(super::views::created(&run_id, &handle.traceparent())),
                Err(e) => {
                    self.admission.slots().release(&run_id);
                    self.release_shared_slot(&run_id);
                    self.dispatch();
                    Err(e)
                }
            },
            Admit::Queued(position) => {
                let row = QueuedRow {
                    run_id: run_id.clone(),
                    tenant: tenant.name().map(str::to_string),
                    traceparent,
                    body: body.to_vec(),
                };
                if let Err(e) = keep(self.admission.table(), move |t| t.push(&row)).await {
                    // A queued run is a promise that outlives a restart:
                    // one that cannot be kept is not queued.
                    tracing::error!(run_id, error = %e, "a queued run cannot be kept");
                    if let Some(waiting) = self.admission.slots().cancel(&run_id) {
                        tokio::task::spawn_blocking(move || drop(waiting));
                        self.end_unstarted(
                            &run_id,
                            StopReason::UnrecoverableError,
                            format!("could not be queued: {e}"),
                        );
                        return Err(ApiError::internal(format!(
                            "the run could not be queued: {e}"
                        )));
                    }
                }
                tracing::info!(run_id, position, "run queued");
                // It may have queued behind runs a freed slot is about to take.
                self.dispatch();
                Ok(queued(&run_id, position))
            }
            Admit::Full(request) => {
                // An inline task's directory goes with it, off the workers.
                tokio::task::spawn_blocking(move || drop(request));
                let max_queued = self.admission.slots().limits().max_queued;
                Err(too_many(
                    format!(
                        "the queue is full: {max_queued} runs already wait for a slot ([serve] max_queued); try again later"
                    ),
                    QUEUE_FULL_RETRY_SECONDS,
                ))
            }
        }
    }

    /// 429 until the next UTC midnight for a tenant whose runs spent its day.
    fn refuse_past_cost(&self, tenant: &Tenant) -> Result<(), ApiError> {
        let now = SystemTime::now();
        let Some(cost) = self.admission.slots().cost_left(tenant, now) else {
            return Ok(());
        };
        if cost.left > 0 {
            return Ok(());
        }
        let name = tenant.name().unwrap_or_default();
        Err(too_many(
            format!(
                "tenant {name:?} has spent {} of its {} for today ([tenants.{name}] max_cost_per_day); it resets at 00:00 UTC",
                money(cost.spent),
                money(cost.max),
            ),
            UtcDay::seconds_left(now),
        ))
    }

    /// Starts a run that holds a slot: on its id, with its cost capped at
    /// what is left of its tenant's day.
    async fn start(
        &self,
        run_id: &str,
        tenant: &Tenant,
        request: Request,
    ) -> Result<RunHandle, ApiError> {
        let cap = self
            .admission
            .slots()
            .cost_left(tenant, SystemTime::now())
            .map(|c| c.left);
        if cap == Some(0) {
            // Queued before its tenant's day ran out.
            return Err(too_many(
                "its tenant has spent its max_cost_per_day for today".to_string(),
                UtcDay::seconds_left(SystemTime::now()),
            ));
        }
        match request.pending {
            Pending::Inline(run) => {
                let mut run = *run;
                run.config.run_id = Some(run_id.to_string());
                run.config.traceparent = request.traceparent;
                cap_cost(&mut run.config, cap);
                self.start_inline(run, request.meta).await
            }
            Pending::Agent(run) => {
                let Some(agents) = self.config.agents.clone() else {
                    return Err(ApiError::internal("no agents are configured"));
                };
                let mut run = *run;
                run.run_id = Some(run_id.to_string());
                run.cost_cap_micros = cap;
                let launched = agents.launch(run).await?;
                let handle = launched.handle.clone();
                self.adopt(launched);
                Ok(handle)
            }
        }
    }

    /// Starts an inline task's run and follows it.
    async fn start_inline(&self, run: NewRun, meta: RunMeta) -> Result<RunHandle, ApiError> {
        // The webhook was checked into `meta` when the request was.
        let NewRun {
            mut config,
            script,
            workdir,
            webhook: _,
        } = run;
        if let Some(StoredPolicy::Root(root)) = &mut config.policy_spec {
            meta.store_in(root);
        }
        config.inbox_capacity = self.config.limits.inbox_capacity;
        let handle = match self.runtime.start(config, script.into_policy()).await {
            Ok(handle) => handle,
            Err(e) => {
                tokio::task::spawn_blocking(move || drop(workdir));
                return Err(ApiError::internal(e.to_string()));
            }
        };
        tracing::info!(run_id = handle.run_id(), traceparent = handle.traceparent(), workdir = %workdir.path().display(), "run started");
        // A durable run's directory must survive the process: it is kept.
        let workdir = match self.runtime.store() {
            Some(_) => {
                let _ = workdir.keep();
                None
            }
            None => Some(workdir),
        };
        self.follow(handle.clone(), workdir, meta);
        Ok(handle)
    }

    /// Starts queued runs while slots are free, in queue order, on a task of
    /// its own.
    pub(super) fn dispatch(&self) {
        let app = self.clone();
        tokio::spawn(async move {
            loop {
                // A draining service starts nothing: the queue waits in the
                // store for the next start.
                if app.ops.draining() {
                    break;
                }
                let next = app.admission.slots().next();
                let Some(Waiting {
                    run_id,
                    tenant,
                    request,
                }) = next
                else {
                    break;
                };
                if !app.still_held(&run_id).await {
                    // Another service took it (this one was presumed gone).
                    app.admission.slots().release(&run_id);
                    tokio::task::spawn_blocking(move || drop(request));
                    continue;
                }
                if !app.take_shared_slot(&run_id, &tenant).await {
                    // The services sharing the queue are full: it waits
                    // for a freed slot (`queue_held.rs`).
                    app.admission.slots().put_back(Waiting {
                        run_id,
                        tenant,
                        request,
                    });
                    break;
                }
                let started = app.start(&run_id, &tenant, request).await;
                let id = run_id.clone();
                if let Err(e) = keep(app.admission.table(), move |t| t.remove(&id)).await {
                    tracing::warn!(run_id, error = %e, "a started run stays in the queue's table; the next start skips it");
                }
                match started {
                    Ok(_) => tracing::info!(run_id, "queued run started"),
                    Err(e) => {
                        tracing::warn!(run_id, error = %e.message(), "a queued run could not start");
                        app.admission.slots().release(&run_id);
                        app.release_shared_slot(&run_id);
                        app.end_unstarted(
                            &run_id,
                            StopReason::UnrecoverableError,
                            format!("the run could not start: {}", e.message()),
                        );
                    }
                }
            }
        });
    }

    /// Aborts `run_id` if it is queued: it leaves the queue and stops
    /// `user_abort` without having run. `false` when it is not queued.
    pub(super) async fn cancel_queued(&self, run_id: &str) -> bool {
        let Some(waiting) = self.admission.slots().cancel(run_id) else {
            return false;
        };
        tokio::task::spawn_blocking(move || drop(waiting));
        let id = run_id.to_string();
        if let Err(e) = keep(self.admission.table(), move |t| t.remove(&id)).await {
            tracing::warn!(run_id, error = %e, "an aborted queued run stays in the queue's table");
        }
        self.end_unstarted(
            run_id,
            StopReason::UserAbort,
            "aborted while queued; it never ran".into(),
        );
        true
    }

    /// A queued run that will not run: stopped with `reason`, as a run is.
    fn end_unstarted(&self, run_id: &str, reason: StopReason, detail: String) {
        let state = RunSnapshot {
            status: RunStatus::Stopped,
            ..RunSnapshot::default()
        };
        let outcome = RunOutcome {
            run_id: run_id.to_string(),
            task_id: create::TASK_ID.to_string(),
            stop_reason: reason,
            detail,
            answer: None,
            steps: 0,
            tool_calls: 0,
            budget: Default::default(),
            checks: Vec::new(),
            state,
            workdir: std::path::PathBuf::new(),
            trace: None,
            trace_error: None,
        };
        self.retire(run_id, Arc::new(outcome));
    }

    /// A followed run holds its slot; its spend is counted for a tenant with
    /// a daily quota (from zero for a run the service started, from what it
    /// had spent for one resumed or adopted).
    pub(super) fn track(&self, handle: &RunHandle, meta: &RunMeta) {
        let tenant = meta.tenant();
        let id = handle.run_id();
        let (fresh, counts_cost) = {
            let mut slots = self.admission.slots();
            slots.hold(id, &tenant);
            (slots.take_fresh(id), slots.counts_cost(&tenant))
        };
        self.hold_shared_slot(id, &tenant);
        if counts_cost {
            let events = handle.subscribe();
            tokio::spawn(
                self.clone()
                    .count_spend(handle.clone(), tenant, fresh, events),
            );
        }
    }

    async fn count_spend(
        self,
        handle: RunHandle,
        tenant: Tenant,
        fresh: bool,
        mut events: broadcast::Receiver<agentry::protocol::event::EventRecord>,
    ) {
        let id = handle.run_id().to_string();
        if !fresh && let Some(snapshot) = handle.snapshot().await {
            self.admission
                .slots()
                .baseline(&id, snapshot.control.spent.cost_micros);
        }
        loop {
            match events.recv().await {
                // `RunEvent` is non_exhaustive: only these two matter here.
                Ok(record) => {
                    if let RunEvent::BudgetSpent { budget } = &record.event {
                        self.spent(&id, &tenant, budget.spent.cost_micros);
                    } else if matches!(record.event, RunEvent::RunStopped { .. }) {
                        break;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => break,
            }
        }
    }

    /// `run_id` has spent `total` in all: what is new counts to its
    /// tenant's day, and is kept.
    fn spent(&self, run_id: &str, tenant: &Tenant, total: u64) {
        let (changed, from) = {
            let mut slots = self.admission.slots();
            let from = slots.counted(run_id);
            (slots.spent(run_id, tenant, total, SystemTime::now()), from)
        };
        let (Some((day, micros)), Some(name)) = (changed, tenant.name()) else {
            return;
        };
        let row = SpendRow {
            tenant: name.to_string(),
            day,
            micros,
        };
        let run = RunSpend {
            run_id: run_id.to_string(),
            from,
            to: from.max(total),
        };
        let app = self.clone();
        let tenant = tenant.clone();
        tokio::spawn(async move {
            let table = app.admission.table();
            if let Err(e) = keep(table, move |t| t.keep_spend(&row, &run)).await {
                tracing::warn!(error = %e, "a tenant's spend of the day is not kept");
            }
            app.refresh_spend(&tenant).await;
        });
    }

    /// The run stopped: its last spend counts, its slot goes to the next.
    pub(super) fn finished(&self, outcome: &RunOutcome, tenant: &Tenant) {
        self.spent(&outcome.run_id, tenant, outcome.budget.spent.cost_micros);
        self.admission.slots().release(&outcome.run_id);
        self.release_shared_slot(&outcome.run_id);
        self.dispatch();
    }

    /// Opens the queue's table where `RunLimits::queue_file` says (beside
    /// the store's tables), reads back today's spend and the runs queued before a
    /// restart, in order, and starts what may start. A queued run whose run
    /// is already in the store (it started just before the restart) is
    /// skipped. Returns how many runs were queued again.
    pub async fn restore_queue(&self) -> Result<usize, ServeError> {
        let Some(place) = self.admission.slots().limits().queue_file.clone() else {
            return Ok(0);
        };
        let now = SystemTime::now();
        let (table, spend, rows) = tokio::task::spawn_blocking(move || {
            let table = Queue::open(&place)?;
            let spend = table.spend_of(UtcDay::of(now))?;
            let rows = table.queued()?;
            Ok::<_, ServeError>((table, spend, rows))
        })
        .await
        .map_err(|e| ServeError::Queue {
            path: std::path::PathBuf::new(),
            message: e.to_string(),
        })??;
        let table = Arc::new(table);
        let _ = self.admission.table.set(Arc::clone(&table));
        for row in spend {
            self.admission
                .slots()
                .restore_spend(&row.tenant, row.day, row.micros, now);
        }
        let mut restored = 0;
        for row in rows {
            restored += usize::from(self.restore_one(row).await);
        }
        if table.shared() {
            tokio::spawn(self.clone().hold_queue(table));
        }
        self.dispatch();
        Ok(restored)
    }

    /// One queued request read back: queued again, or (its body no longer
    /// valid) stopped without having run.
    pub(super) async fn restore_one(&self, row: QueuedRow) -> bool {
        let run_id = row.run_id.clone();
        if self.runtime.stored_config(&run_id).await.is_ok() {
            let id = run_id.clone();
            let _ = keep(self.admission.table(), move |t| t.remove(&id)).await;
            return false;
        }
        let tenant = row
            .tenant
            .as_deref()
            .map_or_else(Tenant::anyone, Tenant::named);
        let body = Bytes::from(row.body);
        let request = match self.request_of(&tenant, body, row.traceparent).await {
            Ok(request) => request,
            Err(e) => {
                let id = run_id.clone();
                let _ = keep(self.admission.table(), move |t| t.remove(&id)).await;
                self.end_unstarted(
                    &run_id,
                    StopReason::UnrecoverableError,
                    format!("queued before a restart, no longer valid: {}", e.message()),
                );
                return false;
            }
        };
        let mut slots = self.admission.slots();
        let meta = request.meta.clone();
        slots.enqueue(&run_id, &tenant, request);
        self.enter_queued(&run_id, meta);
        true
    }

    /// A `POST /runs` body as a checked request of `tenant`: an inline task
    /// (its working directory made, on the blocking pool) or a named agent's
    /// run (its budget and grants checked against the agent's).
    pub(super) async fn request_of(
        &self,
        tenant: &Tenant,
        body: Bytes,
        traceparent: Option<String>,
    ) -> Result<Request, ApiError> {
        let root = self.config.workdir_root.clone();
        let prepared = tokio::task::spawn_blocking(move || create::prepare(&body, root.as_deref()))
            .await
            .map_err(|e| ApiError::internal(format!("preparing the run failed: {e}")))??;
        let (pending, meta) = match prepared {
            create::Prepared::Inline(mut run) => {
                let webhook = match self.check_webhook(run.webhook.take()) {
                    Ok(url) => url,
                    Err(e) => {
                        // Its working directory is removed on the blocking pool.
                        tokio::task::spawn_blocking(move || drop(run));
                        return Err(e);
                    }
                };
                let meta = RunMeta {
                    webhook,
                    ..RunMeta::of_tenant(tenant)
                };
                (Pending::Inline(run), meta)
            }
            create::Prepared::Agent(mut run) => {
                run.webhook = self.check_webhook(run.webhook.take())?;
                let Some(agents) = self.config.agents.as_ref().filter(|a| a.has(&run.agent)) else {
                    return Err(ApiError::bad_field(
                        "agent",
                        format!("no agent named {:?} is configured", run.agent),
                    ));
                };
                run.tenant = tenant.clone();
                run.traceparent = traceparent.clone();
                run.inbox_capacity = self.config.limits.inbox_capacity;
                let meta = agents.check(&run)?;
                (Pending::Agent(run), meta)
            }
        };
        Ok(Request {
            pending,
            meta,
            traceparent,
        })
    }
}

/// Caps a run's money at `cap` (what is left of its tenant's day), keeping
/// a lower limit of its own.
pub fn cap_cost(config: &mut RunConfig, cap: Option<u64>) {
    if let Some(cap) = cap {
        let own = config.limits.max_cost_micros.unwrap_or(u64::MAX);
        config.limits.max_cost_micros = Some(own.min(cap));
    }
}

/// Millionths as money, as budgets are written (`2.5`).
fn money(micros: u64) -> String {
    let whole = micros / 1_000_000;
    let part = micros % 1_000_000;
    if part == 0 {
        return whole.to_string();
    }
    format!("{whole}.{part:06}")
        .trim_end_matches('0')
        .to_string()
}

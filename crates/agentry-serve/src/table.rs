//! The table of runs: every run the service started, live or stopped, with its
//! event log; a stopped run keeps only its outcome and a bounded history.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use agentry::protocol::event::EventRecord;
use agentry::protocol::stored_policy::{RootSpec, StoredPolicy};
use agentry::{RunHandle, RunOutcome, Runtime, RuntimeError};
use axum::http::StatusCode;
use tempfile::TempDir;
use tokio::sync::broadcast;

use super::admission::Admission;
use super::agents::{Launched, RunMeta};
use super::config::ServiceConfig;
use super::error::ApiError;
use super::events::{self, EventLog};
use super::status::Ops;
use super::streams::Streams;
use super::tenants::Tenant;

/// The service's state: one runtime, and every run it started. Cheap to clone.
#[derive(Debug, Clone)]
pub struct App {
    pub(super) runtime: Runtime,
    pub(super) config: Arc<ServiceConfig>,
    runs: Arc<RwLock<HashMap<String, Arc<RunEntry>>>>,
    /// Ids of stopped runs, in the order they stopped (see `Limits::keep_stopped`).
    stopped: Arc<Mutex<VecDeque<String>>>,
    /// The open event streams (see `Limits::streams`).
    pub(super) streams: Arc<Streams>,
    /// Slots, the queue and each tenant's day (`admit.rs`).
    pub(super) admission: Arc<Admission>,
    /// What `GET /metrics` encodes: agentry's families and the service's
    /// gauges; `None` without [`ServiceConfig::metrics`].
    pub(super) metrics: Option<Arc<prometheus_client::registry::Registry>>,
    /// Draining, and what `/healthz` checks (`ops.rs`).
    pub(super) ops: Arc<Ops>,
    /// The nodes this one shares its store with, once it joined them (`cluster.rs`).
    pub(super) cluster: Arc<std::sync::OnceLock<Arc<dyn super::node::Cluster>>>,
    /// AG-UI threads and the runs they map to (`agui/`).
    pub(super) agui: Arc<super::agui::threads::Threads>,
}

/// One run: its handle while it runs, its event log, and the working directory
/// it runs in.
#[derive(Debug)]
pub(super) struct RunEntry {
    run: Mutex<Run>,
    pub(super) log: Arc<EventLog>,
    /// Bytes of messages and events taken in (see `Limits::run_input_bytes`).
    input_bytes: AtomicU64,
    /// The run's W3C traceparent (its trace id joins the request's
    /// `traceparent` header when that was valid), shown by `GET /runs/{id}`.
    pub(super) traceparent: String,
    /// Whose run it is, of which agent, on which model.
    pub(super) meta: RunMeta,
    /// When it entered the table (Unix ms): its place in `GET /runs` when
    /// the store does not hold it.
    pub(super) created_ms: u64,
    /// When it stopped (Unix ms), 0 while it runs: its age for retention.
    pub(super) stopped_ms: AtomicU64,
    /// The store holds it (`GET /runs` lists it from there).
    pub(super) stored: bool,
    /// Held only so the directory outlives the run (dropping it deletes it).
    /// `None` for a durable run: its directory must outlive the process too.
    _workdir: Option<TempDir>,
}

/// A run as the table holds it.
#[derive(Debug, Clone)]
pub(super) enum Run {
    /// Running: its handle takes input and answers snapshots.
    Live(Box<RunHandle>),
    /// Stopped: only the outcome is kept. The handle went, and with it the
    /// run's event channel and everything the runtime kept for it.
    Stopped(Arc<RunOutcome>),
    /// Waiting for a slot (`admit.rs`): nothing of it runs yet.
    Queued,
}

impl RunEntry {
    pub(super) fn current(&self) -> Run {
        // Replaced whole: a poisoned lock still holds a valid value.
        self.run
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Gives back `bytes` taken for an input the run then refused (a busy
    /// run's): only what it took in counts against its limit.
    pub(super) fn give_back_input(&self, bytes: usize) {
        let _ = self
            .input_bytes
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |taken| {
                Some(taken.saturating_sub(bytes as u64))
            });
    }

    /// Counts `bytes` of input against the run's limit, or refuses them (413).
    pub(super) fn take_input(&self, id: &str, bytes: usize, limit: u64) -> Result<(), ApiError> {
        let bytes = bytes as u64;
        self.input_bytes
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |taken| {
                taken.checked_add(bytes).filter(|total| *total <= limit)
            })
            .map(|_| ())
            .map_err(|taken| {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!(
                        "run {id} has taken {taken} bytes of messages, events and redirects; {bytes} more would pass its limit of {limit} (max_run_input_bytes, --max-run-input-bytes)"
                    ),
                )
            })
    }
}

/// What [`App::resume_inline`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resumed {
    /// The inline task's run goes on, in the table.
    Inline,
    /// Not an inline task's run (a named agent's, or one stored without its
    /// script): left as it is.
    NotInline,
}

/// The run's handle, or 409 once it has stopped.
pub(super) fn live(id: &str, run: Run) -> Result<RunHandle, ApiError> {
    match run {
        Run::Live(handle) if handle.outcome().is_none() => Ok(*handle),
        Run::Live(_) | Run::Stopped(_) => Err(ApiError::from_runtime(RuntimeError::Stopped {
            run_id: id.to_string(),
        })),
        Run::Queued => Err(ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "run {id} is queued: it takes input once it starts (abort it with {{\"action\": \"abort\"}})"
            ),
        )),
    }
}

impl App {
    /// A service starting runs on `runtime`, with the default [`ServiceConfig`].
    pub fn new(runtime: Runtime) -> Self {
        App::with_config(runtime, ServiceConfig::default())
    }

    /// The runtime inline tasks run on (on the service's store, if it has one).
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// A service starting runs on `runtime`, taking what `config` allows.
    pub fn with_config(runtime: Runtime, config: ServiceConfig) -> Self {
        let admission = Arc::new(Admission::new(
            config.run_limits.clone(),
            config
                .tokens
                .as_ref()
                .map(super::tenants::Tokens::tenant_names)
                .unwrap_or_default(),
        ));
        let metrics = config
            .metrics
            .as_ref()
            .map(|metrics| super::gauges::registry(metrics, &admission, config.agents.clone()));
        App {
            runtime,
            streams: Streams::new(config.limits.streams),
            ops: Arc::new(Ops::new(config.store_file.as_deref())),
            config: Arc::new(config),
            runs: Arc::default(),
            stopped: Arc::default(),
            admission,
            metrics,
            cluster: Arc::default(),
            agui: Arc::default(),
        }
    }

    /// A service with a store: resumes every unfinished run of it that was
    /// an inline task (its policy is the script it was created with).
    /// Returns the resumed ids; runs of named agents are left to the
    /// embedder (`agentry serve` resumes them as `agentry resume` does).
    pub async fn resume_unfinished(&self) -> Result<Vec<String>, agentry::RuntimeError> {
        let mut resumed = Vec::new();
        for run in self.runtime.unfinished_runs().await? {
            match self.resume_inline(&run.run_id).await {
                Ok(Resumed::Inline) => resumed.push(run.run_id),
                Ok(Resumed::NotInline) => {}
                Err(e) => tracing::warn!(run_id = %run.run_id, error = %e, "not resumed"),
            }
        }
        Ok(resumed)
    }

    /// Resumes stored run `run_id` if it is an inline task's (its policy is
    /// the script it was created with) and enters it in the table; a named
    /// agent's run is left to the embedder.
    pub async fn resume_inline(&self, run_id: &str) -> Result<Resumed, agentry::RuntimeError> {
        let config = self.runtime.stored_config(run_id).await?;
        let meta = RunMeta::stored(&config);
        if meta.agent.is_some() {
            return Ok(Resumed::NotInline);
        }
        let script = match &config.policy_spec {
            Some(StoredPolicy::Root(RootSpec {
                script: Some(script),
                ..
            })) => agentry::Script::from_value(script).ok(),
            Some(StoredPolicy::Root(_) | StoredPolicy::Child(_) | StoredPolicy::Text(_)) | None => {
                None
            }
        };
        let Some(script) = script else {
            tracing::warn!(run_id, "not resumed: no script stored with it");
            return Ok(Resumed::NotInline);
        };
        let handle = self.runtime.resume(run_id, script.into_policy()).await?;
        tracing::info!(run_id, "run resumed");
        self.follow(handle, None, meta);
        Ok(Resumed::Inline)
    }

    /// Enters a run the embedder started or resumed (a named agent's) in the
    /// table, as its own runs are: shown, streamed and taking input for the
    /// tenant in its meta only.
    pub fn adopt(&self, launched: Launched) {
        self.follow(launched.handle, None, launched.meta);
    }

    /// Enters a just-started run in the table and copies its events into its log
    /// until it stops; then only its outcome is kept.
    pub(super) fn follow(&self, handle: RunHandle, workdir: Option<TempDir>, meta: RunMeta) {
        // The first subscription sees every event from the start of the run.
        let events = handle.subscribe();
        let id = handle.run_id().to_string();
        // A queued run's clients may already follow its (empty) log.
        let log = self
            .entry(&id)
            .filter(|entry| matches!(entry.current(), Run::Queued))
            .map_or_else(
                || EventLog::new(self.config.limits.replay),
                |entry| Arc::clone(&entry.log),
            );
        self.track(&handle, &meta);
        let entry = RunEntry {
            run: Mutex::new(Run::Live(Box::new(handle.clone()))),
            log: Arc::clone(&log),
            input_bytes: AtomicU64::new(0),
            traceparent: handle.traceparent(),
            meta,
            created_ms: agentry::protocol::now_millis(),
            stopped_ms: AtomicU64::new(0),
            stored: self.runtime.store().is_some(),
            _workdir: workdir,
        };
        self.runs
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, Arc::new(entry));
        if let Some(cluster) = self.cluster.get() {
            let id = handle.run_id().to_string();
            cluster.keep_events(id, events::EventFeed::new(Arc::clone(&log)));
        }
        tokio::spawn(self.clone().copy_events(handle, events, log));
    }

    async fn copy_events(
        self,
        handle: RunHandle,
        events: broadcast::Receiver<EventRecord>,
        log: Arc<EventLog>,
    ) {
        let id = handle.run_id().to_string();
        let meta = self.entry(&id).map(|entry| entry.meta.clone());
        if let Some(meta) = meta.clone().filter(|m| m.webhook.is_some()) {
            let (app, id) = (self.clone(), id.clone());
            let _ = tokio::task::spawn_blocking(move || app.reserve_webhook(&id, &meta)).await;
        }
        events::forward(&handle, events, &log).await;
        match handle.wait().await {
            Ok(outcome) => {
                let outcome = Arc::new(outcome);
                self.retire(&id, Arc::clone(&outcome));
                if let Some(meta) = meta.filter(|m| m.webhook.is_some()) {
                    let app = self.clone();
                    let _ = tokio::task::spawn_blocking(move || {
                        app.webhook_ready(&super::webhooks::Stopped::of_outcome(&meta, &outcome));
                    })
                    .await;
                }
            }
            Err(e @ (RuntimeError::TakenOver { .. } | RuntimeError::LetGo { .. })) => {
                // Another node runs it now, or the next to take it will:
                // requests for it go through the cluster.
                if matches!(e, RuntimeError::LetGo { .. }) {
                    tracing::debug!(run_id = %id, "hibernated run let its lease go; it leaves this node");
                } else {
                    tracing::warn!(run_id = %id, "run taken over by another node; it leaves this one");
                }
                // Only this handle's entry: the run may be back here
                // already, resumed for its next input.
                self.forget_activation(&id, &handle);
                self.admission.slots().release(&id);
                self.dispatch();
            }
            Err(e) => {
                tracing::warn!(run_id = handle.run_id(), error = %e, "run lost; its handle is kept")
            }
        }
    }

    /// A queued run's entry: shown and aborted like a run, taking no input.
    pub(super) fn enter_queued(&self, id: &str, meta: RunMeta) {
        let entry = RunEntry {
            run: Mutex::new(Run::Queued),
            log: EventLog::new(self.config.limits.replay),
            input_bytes: AtomicU64::new(0),
            traceparent: String::new(),
            meta,
            created_ms: agentry::protocol::now_millis(),
            stopped_ms: AtomicU64::new(0),
            stored: false,
            _workdir: None,
        };
        self.runs
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id.to_string(), Arc::new(entry));
    }

    /// The run stopped: keep its outcome, drop its handle; forget the oldest
    /// stopped runs past `keep_stopped`; its slot goes to the next.
    pub(super) fn retire(&self, id: &str, outcome: Arc<RunOutcome>) {
        let Some(entry) = self.entry(id) else {
            return;
        };
        self.finished(&outcome, &entry.meta.tenant());
        entry.log.close();
        *entry.run.lock().unwrap_or_else(PoisonError::into_inner) = Run::Stopped(outcome);
        entry
            .stopped_ms
            .store(agentry::protocol::now_millis().max(1), Ordering::SeqCst);
        drop(entry);
        let forgotten: Vec<String> = {
            let mut stopped = self.stopped.lock().unwrap_or_else(PoisonError::into_inner);
            stopped.push_back(id.to_string());
            let excess = stopped
                .len()
                .saturating_sub(self.config.limits.keep_stopped);
            stopped.drain(..excess).collect()
        };
        for id in forgotten {
            let removed = self
                .runs
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id);
            // Removing a working directory blocks: not on an async worker.
            tokio::task::spawn_blocking(move || drop(removed));
        }
    }

    /// Whether run `id` is in the table and has not stopped.
    pub(super) fn is_live(&self, id: &str) -> bool {
        self.entry(id)
            .is_some_and(|entry| entry.stopped_ms.load(Ordering::SeqCst) == 0)
    }

    /// Takes run `id` out of the table (retention); its working directory,
    /// if the entry holds it, goes with it.
    pub(super) fn forget(&self, id: &str) -> Option<Arc<RunEntry>> {
        self.runs
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id)
    }

    /// Takes run `id` out of the table if its entry holds `handle` (not a
    /// later resume's).
    fn forget_activation(&self, id: &str, handle: &RunHandle) {
        let mut runs = self.runs.write().unwrap_or_else(PoisonError::into_inner);
        let same = runs.get(id).is_some_and(|entry| match entry.current() {
            Run::Live(held) => held.is_clone_of(handle),
            Run::Stopped(_) | Run::Queued => false,
        });
        if same {
            runs.remove(id);
        }
    }

    /// Stopped runs of the table that stopped before `before_ms`.
    pub(super) fn stopped_before(&self, before_ms: u64) -> Vec<String> {
        let runs = self.runs.read().unwrap_or_else(PoisonError::into_inner);
        runs.iter()
            .filter(|(_, entry)| {
                let at = entry.stopped_ms.load(Ordering::SeqCst);
                at != 0 && at < before_ms
            })
            .map(|(id, _)| id.clone())
            .collect()
    }

    pub(super) fn entry(&self, id: &str) -> Option<Arc<RunEntry>> {
        // Entries are only ever inserted whole, so a poisoned table is still consistent.
        let runs = self.runs.read().unwrap_or_else(PoisonError::into_inner);
        runs.get(id).cloned()
    }

    /// The run `id` of `tenant`; another tenant's run is the same 404 as a
    /// run that does not exist (same body, and found the same way).
    pub(super) fn run(&self, tenant: &Tenant, id: &str) -> Result<Arc<RunEntry>, ApiError> {
        self.entry(id)
            .filter(|entry| entry.meta.tenant() == *tenant)
            .ok_or_else(|| ApiError::no_such_run(id))
    }

    /// The runs of `tenant`, by id.
    pub(super) fn runs_of(&self, tenant: &Tenant) -> Vec<(String, Arc<RunEntry>)> {
        let runs = self.runs.read().unwrap_or_else(PoisonError::into_inner);
        let mut mine: Vec<(String, Arc<RunEntry>)> = runs
            .iter()
            .filter(|(_, entry)| entry.meta.tenant() == *tenant)
            .map(|(id, entry)| (id.clone(), Arc::clone(entry)))
            .collect();
        mine.sort_by(|a, b| a.0.cmp(&b.0));
        mine
    }

    /// How many runs of the table have not stopped.
    pub(super) fn unfinished_runs(&self) -> usize {
        let runs = self.runs.read().unwrap_or_else(PoisonError::into_inner);
        runs.values()
            .filter(|entry| entry.stopped_ms.load(Ordering::SeqCst) == 0)
            .count()
    }

    /// Every run still running: its handle and its event log.
    pub(super) fn live_runs(&self) -> Vec<LiveRun> {
        let runs = self.runs.read().unwrap_or_else(PoisonError::into_inner);
        runs.values()
            .filter_map(|entry| match entry.current() {
                Run::Live(handle) if handle.outcome().is_none() => Some(LiveRun {
                    handle: *handle,
                    log: Arc::clone(&entry.log),
                }),
                // A queued run is in the store's queue table: the next start
                // restores it.
                Run::Live(_) | Run::Stopped(_) | Run::Queued => None,
            })
            .collect()
    }
}

/// A run still running, as a drain sees it.
pub(super) struct LiveRun {
    pub(super) handle: RunHandle,
    pub(super) log: Arc<EventLog>,
}

//! The runs an `agentry mcp` server started: started the way `agentry run`
//! starts them (the same task loading, policy, store and working directory),
//! kept by run id so `get_run` and `cancel_run` find them, and aborted when
//! the server stops.
//!
//! At most `--max-runs` run at once: each holds open files (its store
//! connection, its tools' pipes, its MCP servers), and past the process's
//! open-file limit every part of the server would fail with "Too many open
//! files". A run holds its [`RunSlot`] from before its task is loaded until
//! its ending is done (MCP servers shut down, inline task directory removed).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentry::{RunHandle, RunOutcome, RunTree, TaskSpec};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::args::{DurabilityArg, McpArgs, PolicyArg, RunArgs, parse_policy};
use crate::drive::{Finished, drive};
use crate::error::RunError;
use crate::run::{Prepared, prepare};
use crate::store::{existing, store_or_default};

use super::inline::discard;

/// How long a stopping server waits for each aborted run to record its stop.
const ABORT_GRACE: Duration = Duration::from_secs(30);

/// How long a stopping server waits for an ended run's MCP servers to shut
/// down and its inline task directory to go.
const ENDING_GRACE: Duration = Duration::from_secs(5);

/// What `run_task` asks for, its arguments checked.
pub(crate) struct StartRequest {
    /// The task directory (an inline task's was just written).
    pub(crate) task_dir: PathBuf,
    /// `--policy`'s value, if given.
    pub(crate) policy: Option<String>,
    /// Overrides of the task's budget, as `--max-steps` and `--deadline`.
    pub(crate) max_steps: Option<u64>,
    /// As `--deadline`.
    pub(crate) deadline: Option<Duration>,
    /// The caller's W3C trace context (`_meta.traceparent`): the run joins
    /// that trace.
    pub(crate) traceparent: Option<String>,
    /// `task_dir` was written for this run (an inline task): it is removed
    /// when the run ends.
    pub(crate) inline: bool,
}

/// Why a run did not start. Each says what is wrong in the caller's terms.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StartError {
    /// `policy` does not parse.
    #[error("policy: {value:?}: {why}")]
    Policy {
        /// As given.
        value: String,
        /// Why not (`parse_policy`'s words).
        why: String,
    },
    /// An inline task names where this server's keys would go
    /// (`policy.base_url`, `tools.mcp[0].url`, ...) and the operator did not
    /// allow it.
    #[error("{0} (the server's operator allows it with `agentry mcp --allow-client-endpoints`)")]
    ClientEndpoint(agentry::TaskError),
    /// An inline task loosens the kernel sandbox (no opt-in: only the
    /// operator's own tasks widen it).
    #[error("{0}")]
    ClientSandbox(agentry::TaskError),
    /// The task, its script or model, the store or the working directory is unusable.
    #[error("{0}")]
    Run(String),
    /// `--max-runs` runs are going.
    #[error(
        "{max} runs already running, the most this server allows (--max-runs {max}); wait for one to end, or cancel_run one"
    )]
    Busy {
        /// `--max-runs`.
        max: usize,
    },
}

/// The runs of this server and the store it commits them to.
pub(crate) struct ServerRuns {
    store: Option<PathBuf>,
    no_store: bool,
    durability: DurabilityArg,
    /// At most this many runs at once (`--max-runs`).
    max_runs: usize,
    /// The runs holding a slot: started and not yet ended.
    running: Arc<AtomicUsize>,
    /// `--allow-client-endpoints`: inline tasks may name model and MCP
    /// servers by URL.
    allow_client_endpoints: bool,
    live: Mutex<HashMap<String, RunHandle>>,
    /// Each run's ending (its MCP servers shut down, its inline task
    /// directory removed), awaited before the server exits.
    endings: Mutex<Vec<JoinHandle<()>>>,
}

impl ServerRuns {
    /// No runs yet; each will go to the store `args` name.
    pub(crate) fn new(args: &McpArgs) -> Self {
        ServerRuns {
            store: args.store.clone(),
            no_store: args.no_store,
            durability: args.durability,
            max_runs: args.max_runs.map_or_else(default_max_runs, |n| n as usize),
            running: Arc::default(),
            allow_client_endpoints: args.allow_client_endpoints,
            live: Mutex::new(HashMap::new()),
            endings: Mutex::new(Vec::new()),
        }
    }

    /// Loads the task and starts its run, as `agentry run` does (minus the
    /// terminal: no ctrl-c prompt, stdin is not the user's here).
    pub(crate) async fn start(&self, request: StartRequest) -> Result<RunHandle, StartError> {
        // Taken before anything is opened; given back if the start fails.
        let slot = self.reserve()?;
        let policy = match request.policy {
            Some(value) => Some(parse_policy(&value).map_err(|why| StartError::Policy {
                value: value.clone(),
                why,
            })?),
            None => None,
        };
        if request.inline || client_written(&request.task_dir) {
            refuse_client_choices(&request.task_dir, self.allow_client_endpoints)?;
        }
        let inline = request.inline.then(|| request.task_dir.clone());
        let args = self.run_args(
            request.task_dir,
            policy,
            request.max_steps,
            request.deadline,
        );
        let Prepared {
            runtime,
            mut config,
            policy,
            store,
            mcp,
        } = prepare(&args)
            .await
            .map_err(|e| StartError::Run(describe(&e)))?;
        config.traceparent = request.traceparent;
        let handle = runtime
            .start_boxed(config, policy)
            .await
            .map_err(|e| StartError::Run(e.to_string()))?;
        // The task's MCP servers, and an inline task's directory, live as
        // long as its run: the run's record is in the store, its files in its
        // working directory. (A server killed before its run ended leaves the
        // directory for `agentry resume`.)
        let ended = handle.clone();
        let ending = tokio::spawn(async move {
            let _ = ended.wait().await;
            mcp.shutdown().await;
            if let Some(dir) = inline {
                let _ = tokio::task::spawn_blocking(move || discard(&dir)).await;
            }
            // Its files are closed: another run may start.
            drop(slot);
        });
        let mut endings = self
            .endings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // A long-lived server keeps only the endings still to come.
        endings.retain(|e| !e.is_finished());
        endings.push(ending);
        drop(endings);
        if let Some(path) = store {
            eprintln!(
                "agentry: mcp: run {} is stored in {}",
                handle.run_id(),
                path.display()
            );
        }
        self.lock()
            .insert(handle.run_id().to_string(), handle.clone());
        Ok(handle)
    }

    /// A slot for one more run, unless `--max-runs` are going.
    fn reserve(&self) -> Result<RunSlot, StartError> {
        self.running
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max_runs).then_some(n + 1)
            })
            .map_err(|_| StartError::Busy { max: self.max_runs })?;
        Ok(RunSlot(self.running.clone()))
    }

    /// `agentry run TASK_DIR` with this server's store flags.
    fn run_args(
        &self,
        task_dir: PathBuf,
        policy: Option<PolicyArg>,
        max_steps: Option<u64>,
        deadline: Option<Duration>,
    ) -> RunArgs {
        RunArgs {
            policy,
            max_steps,
            deadline,
            store: self.store.clone(),
            no_store: self.no_store,
            durability: self.durability,
            ..RunArgs::served(task_dir)
        }
    }

    /// A run this server started, running or ended.
    pub(crate) fn get(&self, run_id: &str) -> Option<RunHandle> {
        self.lock().get(run_id).cloned()
    }

    /// The runs this server started, by id.
    pub(crate) fn all(&self) -> Vec<RunHandle> {
        let mut runs: Vec<RunHandle> = self.lock().values().cloned().collect();
        runs.sort_by(|a, b| a.run_id().cmp(b.run_id()));
        runs
    }

    /// The store's file, if runs are stored (`--store`, else the default).
    pub(crate) fn store_path(&self) -> Option<PathBuf> {
        if self.no_store {
            return None;
        }
        store_or_default(self.store.as_ref())
            .ok()
            .and_then(|p| existing(p).ok())
    }

    /// Aborts every run still going and waits (bounded) for each to stop,
    /// then for their endings (MCP servers shut down, inline task
    /// directories removed).
    pub(crate) async fn abort_all(&self) {
        let going: Vec<RunHandle> = self
            .all()
            .into_iter()
            .filter(|h| h.outcome().is_none())
            .collect();
        for handle in &going {
            handle.abort();
        }
        for handle in &going {
            if tokio::time::timeout(ABORT_GRACE, handle.wait())
                .await
                .is_err()
            {
                eprintln!(
                    "agentry: mcp: run {} did not stop within {ABORT_GRACE:?} of its abort",
                    handle.run_id()
                );
            }
        }
        let endings = std::mem::take(
            &mut *self
                .endings
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for ending in endings {
            // A run that did not stop has not ended: its ending is dropped.
            if tokio::time::timeout(ENDING_GRACE, ending).await.is_err() {
                tracing::debug!("a run's ending did not finish before the server exits");
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, RunHandle>> {
        // A panic while holding the map leaves it usable: it is only inserts.
        self.live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One of the `--max-runs` slots, given back when dropped.
struct RunSlot(Arc<AtomicUsize>);

impl Drop for RunSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Open files the server keeps for itself: its listener, store, logs and
/// client connections.
const RESERVED_FILES: u64 = 64;

/// Open files one run may hold: its store connection (database, journal),
/// its working directory, its tools' pipes and its MCP servers' pipes.
const FILES_PER_RUN: u64 = 16;

/// The most runs the default allows, however high the open-file limit.
const MAX_DEFAULT_RUNS: u64 = 256;

/// `--max-runs`' default: (the soft open-file limit − [`RESERVED_FILES`]) /
/// [`FILES_PER_RUN`], between 1 and [`MAX_DEFAULT_RUNS`].
fn default_max_runs() -> usize {
    #[cfg(unix)]
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    #[cfg(not(unix))]
    let limit = u64::MAX;
    let runs = limit.saturating_sub(RESERVED_FILES) / FILES_PER_RUN;
    usize::try_from(runs.clamp(1, MAX_DEFAULT_RUNS)).unwrap_or(1)
}

/// Whether `task_dir` lies in agentry's temp directory, where this server
/// writes what clients send: inline tasks, and runs' working directories
/// (which an inline task's `files` fill, and whose path its result names).
/// A task directory there is the client's, as an inline task is.
fn client_written(task_dir: &std::path::Path) -> bool {
    let Ok(temp) = agentry::runtime::tempdir::private_temp_dir() else {
        return false;
    };
    match (std::fs::canonicalize(temp), std::fs::canonicalize(task_dir)) {
        (Ok(temp), Ok(dir)) => dir.starts_with(temp),
        // A directory that does not resolve does not load either.
        (Ok(_) | Err(_), Err(_)) | (Err(_), Ok(_)) => false,
    }
}

/// An inline task is the client's: it may not choose where this server's
/// keys and headers go (unless the operator allowed client endpoints), nor
/// loosen the kernel sandbox (no opt-in). Checked before anything is built
/// from the task, so no request reaches the client's server. A task that
/// does not load is left to `prepare`, which says why.
fn refuse_client_choices(
    task_dir: &std::path::Path,
    allow_endpoints: bool,
) -> Result<(), StartError> {
    let Ok(task) = TaskSpec::load(task_dir) else {
        return Ok(());
    };
    if !allow_endpoints {
        task.check_client_supplied()
            .map_err(StartError::ClientEndpoint)?;
    }
    task.check_client_sandbox()
        .map_err(StartError::ClientSandbox)
}

/// Waits for the run's outcome (and its tree, if it started children) and
/// returns the `agentry run --json` report.
pub(crate) async fn finish(handle: &RunHandle) -> Result<Value, StartError> {
    match drive(handle, &[], None).await {
        Ok(Finished::Outcome(outcome, tree)) => Ok(report(&outcome, tree.as_deref())),
        // Without a store nothing parks: a run that is lost is the only error.
        Ok(Finished::Parked(parked)) => Err(StartError::Run(format!(
            "run {} parked awaiting a decision",
            parked.run_id
        ))),
        Err(e) => Err(StartError::Run(describe(&e))),
    }
}

/// The `agentry run --json` report of an outcome.
pub(crate) fn report(outcome: &RunOutcome, tree: Option<&RunTree>) -> Value {
    crate::report::to_json(outcome, tree)
}

/// A run's status while it is live: `running`, `paused`, `awaiting_approval`...
pub(crate) async fn live_status(handle: &RunHandle) -> Value {
    match handle.snapshot().await {
        Some(snapshot) => json!({
            "status": snapshot.status,
            "steps": snapshot.control.spent.steps,
            "spent": snapshot.control.spent,
            "limits": snapshot.control.limits,
        }),
        None => json!({"status": "running"}),
    }
}

/// A `RunError` in the words `agentry run` prints on stderr.
pub(crate) fn describe(e: &RunError) -> String {
    match e {
        RunError::BadInput(e) => e.to_string(),
        RunError::Model(e) => e.to_string(),
        RunError::Lost(e) => e.to_string(),
    }
}

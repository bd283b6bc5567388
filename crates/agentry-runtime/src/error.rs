//! Errors of the runtime's embedding API (not tool failures: those are envelopes).

use std::path::PathBuf;

use agentry_policy::ScriptError;

use crate::ask::AskError;
use crate::budget::ReserveRefused;

/// An error an embedder or the CLI sees. Tool and policy failures never end up
/// here: they become observations in the run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// A task directory, task.toml or script is missing or invalid.
    #[error("{file}: {message}")]
    InvalidTask {
        /// The file at fault.
        file: PathBuf,
        /// What is wrong, naming the field.
        message: String,
    },
    /// A tool could not be registered.
    #[error("tool {name}: {message}")]
    InvalidTool {
        /// Tool name.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// Preparing the working directory failed.
    #[error("working directory {path}: {source}")]
    Workdir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The run's redactor could not be built: a `[redact] patterns` entry is
    /// not a valid regex (the message names it), or the patterns are too large.
    #[error("redaction: {0}")]
    Redaction(#[from] agentry_redact::RedactError),
    /// The trace file could not be opened.
    #[error("trace file {path}: {source}")]
    Trace {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// An actor could not be spawned.
    #[error("run {run_id}: could not start actor {actor}: {message}")]
    Spawn {
        /// Run id.
        run_id: String,
        /// Which actor.
        actor: &'static str,
        /// The spawn error.
        message: String,
    },
    /// The run has stopped; it takes no more input.
    #[error("run {run_id} has stopped; it takes no more input")]
    Stopped {
        /// Run id.
        run_id: String,
    },
    /// The run's inbox holds as many inputs as its capacity: the input was not
    /// taken (nothing of it is queued or stored); send it again once the run
    /// has taken some (see [`RunConfig::inbox_capacity`](crate::RunConfig::inbox_capacity)).
    #[error(
        "run {run_id} is busy: its inbox holds {capacity} inputs no decision has taken yet (its inbox_capacity); try again later"
    )]
    InboxFull {
        /// Run id.
        run_id: String,
        /// The run's inbox capacity.
        capacity: usize,
    },
    /// An approval named a call that is not waiting for one.
    #[error("run {run_id}: {message}")]
    NoPendingApproval {
        /// Run id.
        run_id: String,
        /// What is wrong, naming the call.
        message: String,
    },
    /// A child run was not started (budget, grants, depth or fan-out).
    #[error("run {parent}: child refused: {reason}")]
    ChildRefused {
        /// The parent run.
        parent: String,
        /// Why, naming the dimension, grant or limit.
        reason: ChildRefusal,
    },
    /// The store failed (corrupt, full, newer schema, unreadable).
    #[error(transparent)]
    Store(#[from] agentry_store::StoreError),
    /// The runtime has no store, so it cannot resume or list runs.
    #[error("this runtime has no store: start it with Runtime::with_store to resume or list runs")]
    NoStore,
    /// The store holds no run with this id.
    #[error("the store {store} holds no run {run_id:?}")]
    NoSuchRun {
        /// Run id.
        run_id: String,
        /// The store's location.
        store: String,
    },
    /// The run already stopped; there is nothing to resume.
    #[error("run {run_id} already stopped ({reason}); there is nothing to resume")]
    AlreadyStopped {
        /// Run id.
        run_id: String,
        /// Why it stopped.
        reason: String,
    },
    /// The stored run cannot be rebuilt (its configuration does not parse, its
    /// working directory is gone).
    #[error("run {run_id} cannot be resumed: {message}")]
    NotResumable {
        /// Run id.
        run_id: String,
        /// Why.
        message: String,
    },
    /// Processes an earlier attempt of the run's calls left behind outlived
    /// SIGKILL: the run is not resumed while they may still act.
    #[error(transparent)]
    ProcessesAlive(#[from] agentry_tools::proc::FenceError),
    /// A settlement named a call that is not waiting for one.
    #[error("run {run_id}: {message}")]
    NoPendingDecision {
        /// Run id.
        run_id: String,
        /// What is wrong, naming the call.
        message: String,
    },
    /// Another live process runs this run; it is not taken over.
    #[error(
        "run {run_id} is being run by {owner}; stop that process first, or wait until it exits (an owner on another machine is taken over once its heartbeat is 30 s old; in lease mode, any owner once its heartbeat is older than the lease)"
    )]
    Owned {
        /// Run id.
        run_id: String,
        /// Which process, on which host, since when.
        owner: String,
    },
    /// A path in the shared temp directory is not safe to use (a symbolic
    /// link, someone else's directory or file).
    #[error("refusing {path}: {message}")]
    UnsafePath {
        /// The path.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The run's sandbox cannot be prepared: the kernel cannot enforce what
    /// `[sandbox]` (or a tool's override, `tool`) asks, naming what is
    /// missing, or a setting or place is unusable.
    #[error("{}{source}", tool.as_ref().map(|t| format!("tool {t}: ")).unwrap_or_default())]
    Sandbox {
        /// The tool whose override it is; `None`: the run's own spec.
        tool: Option<String>,
        /// Why.
        source: agentry_sandbox::SandboxError,
    },
    /// A run id given by the caller is unusable.
    #[error(
        "run id {run_id:?} is not usable: {message}; pick a short id without whitespace, '/' or '\\'"
    )]
    InvalidRunId {
        /// The id as given.
        run_id: String,
        /// What is wrong with it.
        message: String,
    },
    /// The run ended without reporting an outcome (its conductor died).
    #[error("run {run_id}: conductor ended without an outcome")]
    Lost {
        /// Run id.
        run_id: String,
    },
    /// Another process took the run over (this one's lease expired, e.g. it
    /// was paused or cut off): the store refused this process's next write
    /// or heartbeat, so it stopped the run's actors and tools here and wrote
    /// nothing more. The run goes on under its new owner; it did not stop.
    #[error(
        "run {run_id} was taken over by {} (epoch {epoch}); this process stopped working on it and wrote nothing more",
        owner.as_deref().unwrap_or("another process")
    )]
    TakenOver {
        /// Run id.
        run_id: String,
        /// The run's fencing epoch the store reported (its new owner's).
        epoch: u64,
        /// Who owns it now ("process PID on host HOST"), if anyone.
        owner: Option<String>,
    },
    /// The run hibernated in lease mode and let its lease go: it rests in
    /// the store, owned by no process, and has left this one (no outcome
    /// here). The process that resumes it next holds it: in a cluster of
    /// `agentry serve` nodes, the node its next input reaches.
    #[error(
        "run {run_id} hibernated and let its lease go: it rests in the store, owned by no process, until one resumes it"
    )]
    LetGo {
        /// Run id.
        run_id: String,
    },
}

impl RuntimeError {
    /// Shorthand for [`RuntimeError::InvalidTask`].
    pub fn task(file: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        RuntimeError::InvalidTask {
            file: file.into(),
            message: message.into(),
        }
    }
}

/// A script the runtime was handed is a bad task input: the same
/// [`RuntimeError::InvalidTask`] text the CLI has always printed (exit 2).
/// A script from text or a value has no file; it is named `inline`.
/// Why a child run was not started ([`RuntimeError::ChildRefused`]).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ChildRefusal {
    /// The parent has stopped.
    #[error("the parent has stopped")]
    ParentStopped,
    /// The child would pass the tree's depth limit.
    #[error("a child at depth {depth} would pass the tree's max_depth of {max_depth}")]
    Depth {
        /// The child's depth.
        depth: u32,
        /// The tree's limit.
        max_depth: u32,
    },
    /// The parent already runs as many children as the tree allows.
    #[error("the parent already runs {live} children, its max_children")]
    FanOut {
        /// Children running.
        live: usize,
    },
    /// The child asks for a grant the parent does not hold.
    #[error("grant {grant:?} is more than the parent holds ({held:?})")]
    Grants {
        /// The grant asked for.
        grant: String,
        /// The parent's grants.
        held: Vec<String>,
    },
    /// The parent's budget supervisor did not answer.
    #[error("{0}")]
    ParentGone(AskError),
    /// The parent's budget cannot cover the child's.
    #[error("the parent cannot cover the child's budget: {0}")]
    Budget(ReserveRefused),
}

impl ChildRefusal {
    /// Whether the refusal is about the budget (`EBUDGET` for the model) rather
    /// than a permission or limit of the tree (`EPERM`).
    pub fn is_budget(&self) -> bool {
        match self {
            ChildRefusal::Budget(_) => true,
            ChildRefusal::ParentStopped
            | ChildRefusal::Depth { .. }
            | ChildRefusal::FanOut { .. }
            | ChildRefusal::Grants { .. }
            | ChildRefusal::ParentGone(_) => false,
        }
    }
}

impl From<ScriptError> for RuntimeError {
    fn from(e: ScriptError) -> Self {
        match e {
            ScriptError::Invalid { message } => RuntimeError::task("inline", message),
            ScriptError::Unreadable { path, source } => {
                RuntimeError::task(path, format!("cannot read script: {source}"))
            }
            ScriptError::InvalidFile { path, message } => RuntimeError::task(path, message),
        }
    }
}

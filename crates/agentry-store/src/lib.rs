//! Durable run state: what a run needs to continue after its process dies.
//!
//! A [`Store`] holds, per run: the [`RunRecord`] written once at start (how to
//! rebuild the run), the latest [`Checkpoint`] (key fields of the state after
//! the last committed update), the session (append-only), the call ledger
//! ([`LedgerEntry`], one row per tool call, keyed by run and call id) and the
//! run's one-shot timers. Writes come in batches ([`Write`]) that a store
//! applies atomically and durably: all of a batch or none of it, on disk before
//! `commit` returns.
//!
//! With the `sqlite` feature (on by default), `SqliteStore` is the embedded
//! default: one SQLite file in WAL mode with
//! `synchronous = FULL` (an fsync per commit), no server. Large tool outputs
//! (an envelope's `data` above [`INLINE_LIMIT`] bytes of JSON) are stored once
//! by content hash in a blob table and referenced from the session and ledger
//! rows, not copied into every row.
//!
//! A run is owned by one process at a time: [`RunOwner`] (schema version 3),
//! claimed with [`Write::Claim`] (a compare-and-set on the previous owner's
//! token), kept fresh with [`Write::Heartbeat`] and dropped with
//! [`Write::Release`]. Whether an owner is still alive is the runtime's call;
//! the store only makes the claim atomic.
//!
//! Fencing (schema version 5): every claim raises the run's epoch
//! ([`RunOwner::epoch`]), and an owner's batches open with a [`Write::Fence`]
//! naming its token: once another process has taken the run over, the old
//! owner's writes and heartbeats fail with [`StoreError::Fenced`] and write
//! nothing.
//!
//! For a service (schema version 4): [`Store::list`] pages through the root
//! runs of one tenant newest first ([`RunQuery`]), [`Store::stopped_before`]
//! finds the runs a retention period has passed, and [`Store::delete_run`]
//! removes a run and its children, every table's rows, in one transaction.
//!
//! # Layout
//! - `lib.rs`: the [`Store`] trait and its data: [`RunRecord`],
//!   [`Checkpoint`], [`LedgerEntry`] and [`LedgerState`], [`RunOwner`],
//!   [`TimerRecord`], the [`Write`]s of a batch, what is read back
//!   ([`StoredRun`], [`RunSummary`]) and [`StoreError`], the crate's one error.
//! - `query.rs`: what [`Store::list`] takes and gives ([`RunQuery`], [`ListedRun`]).
//! - `sqlite.rs` (feature `sqlite`): `SqliteStore`, opening a file carefully;
//!   beneath it `sqlite/schema.rs` (the schema and its migrations),
//!   `sqlite/write.rs` (applying a batch in one transaction), `sqlite/read.rs`
//!   (loading runs back), `sqlite/error.rs` (SQLite failures as
//!   [`StoreError`]).

use agentry_protocol::envelope::ResultEnvelope;
use agentry_protocol::state::{RunSnapshot, SessionEntry};
use agentry_protocol::tool::ToolCall;
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[cfg(feature = "postgres")]
mod postgres;
mod query;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod rows;
#[cfg(feature = "sqlite")]
mod sqlite;
#[cfg(test)]
mod suite;

pub use query::{
    ListedRun, RunKey, RunQuery, RunSummary, SERVE_META_KEY, StatusFilter, TenantFilter,
};

#[cfg(feature = "sqlite")]
pub use sqlite::{SqliteOptions, SqliteStore, SyncMode};

/// The PostgreSQL client [`Database::transaction`] hands its work (rows,
/// statements, errors).
#[cfg(feature = "postgres")]
pub use ::postgres as pg;
#[cfg(feature = "postgres")]
pub use postgres::{
    Database, Listener, Notice, POSTGRES_SCHEMA_VERSION, PostgresStore, is_postgres_url,
};

/// The schema version this build reads and writes. A store file with a higher
/// version is refused ([`StoreError::NewerSchema`]), never modified.
pub const SCHEMA_VERSION: u32 = 5;

/// An envelope's `data` larger than this (serialized JSON bytes) is stored by
/// reference (sha256 of the bytes) instead of inline.
pub const INLINE_LIMIT: usize = 4096;

/// Written once when a run starts: everything needed to rebuild it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// Run id.
    pub run_id: String,
    /// Task id.
    pub task_id: String,
    /// Parent run, for a child agent.
    pub parent_id: Option<String>,
    /// When the run was created (Unix ms).
    pub created_at_ms: u64,
    /// The absolute wall-clock deadline (Unix ms), if any. A restart never moves it.
    pub deadline_at_ms: Option<u64>,
    /// The run's configuration, as the runtime serialized it (opaque here).
    pub config: Value,
    /// How to rebuild the policy, as the embedder described it (e.g.
    /// `script:/abs/path/script.json`); opaque here, may be empty.
    pub policy: String,
}

/// Key fields of the run state after one committed update. Each commit replaces
/// the previous checkpoint of its run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The state keeper's key fields (version, world, task, control, status, ...).
    pub snapshot: RunSnapshot,
    /// What the conductor needs to continue (step counter, fingerprints, a
    /// decided step not yet applied), as the runtime serialized it (opaque here).
    pub progress: Value,
}

/// Where one tool call is in its life. Rows only move forward:
/// `awaiting_approval → approved | denied`, `approved → intent`, `intent →
/// outcome | awaiting_decision`, `awaiting_decision → intent | outcome`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LedgerState {
    /// Parked until a human approves or denies it.
    AwaitingApproval,
    /// A human approved it; it has not started yet.
    Approved,
    /// A human denied it; `outcome` holds the `EPERM` envelope.
    Denied,
    /// About to execute (committed before the tool starts).
    Intent,
    /// Finished; `outcome` holds the envelope.
    Outcome,
    /// Found with an intent and no outcome after a restart, for a tool that must
    /// not silently run again: waits for a human (happened / retry / skip).
    AwaitingDecision,
}

impl LedgerState {
    /// The name stored in the database and shown to users.
    pub fn as_str(self) -> &'static str {
        match self {
            LedgerState::AwaitingApproval => "awaiting_approval",
            LedgerState::Approved => "approved",
            LedgerState::Denied => "denied",
            LedgerState::Intent => "intent",
            LedgerState::Outcome => "outcome",
            LedgerState::AwaitingDecision => "awaiting_decision",
        }
    }

    /// Parses a stored name.
    pub fn parse(s: &str) -> Option<LedgerState> {
        Some(match s {
            "awaiting_approval" => LedgerState::AwaitingApproval,
            "approved" => LedgerState::Approved,
            "denied" => LedgerState::Denied,
            "intent" => LedgerState::Intent,
            "outcome" => LedgerState::Outcome,
            "awaiting_decision" => LedgerState::AwaitingDecision,
            _ => return None,
        })
    }
}

/// One row of the call ledger, keyed by (run id, call id).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LedgerEntry {
    /// The model's call id.
    pub call_id: String,
    /// Step the call belongs to.
    pub step: u64,
    /// Position of the call in its step's request order.
    pub position: u32,
    /// The call as the model proposed it.
    pub call: ToolCall,
    /// Digest of tool name + normalized arguments (same id, different call →
    /// conflict), hex.
    pub digest: String,
    /// hash(tool, normalized arguments, host-issued operation scope), hex: the
    /// same action under a fresh call id has the same key.
    pub intent_key: String,
    /// The host-issued operation id handed to the tool.
    pub operation_id: String,
    /// Where the call is.
    pub state: LedgerState,
    /// The envelope, once there is one (`outcome`, `denied`).
    pub outcome: Option<ResultEnvelope>,
    /// Last change (Unix ms).
    pub updated_at_ms: u64,
    /// The process groups the call started (process tools), recorded while
    /// it runs: a resume kills those still alive before it settles the call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<agentry_protocol::ProcessGroupRecord>,
    /// The task the call started on another system (a remote agent's),
    /// recorded while it runs: a resume follows it instead of parking the
    /// call for a human. Boxed: every call's row carries the field, few
    /// hold one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<Box<agentry_protocol::RemoteRef>>,
}

// Every call's row (and every `Write` of one) is as large as this, and a run
// keeps its rows: a rare field goes behind a `Box` (as `remote`).
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<LedgerEntry>() <= 520);

/// The process that runs a run right now, as it claimed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunOwner {
    /// Fresh for every claim: a takeover names the token it replaces.
    pub token: String,
    /// The owner's host name, for messages.
    pub host: String,
    /// Which pid space the pid belongs to (boot id and pid namespace): only an
    /// owner with this process's value can be checked by pid.
    pub machine: String,
    /// The owner's process id.
    pub pid: u32,
    /// When that process started (clock ticks since boot), so a reused pid is
    /// not taken for the owner; `None` where the platform does not say.
    pub pid_start: Option<u64>,
    /// When it claimed the run (Unix ms).
    pub since_ms: u64,
    /// Its last sign of life (Unix ms).
    pub heartbeat_ms: u64,
    /// The run's fencing token at this claim: a per-run counter the store
    /// raises by one on every successful [`Write::Claim`] and keeps across
    /// [`Write::Release`] (it is the run's, not the owner row's), so a later
    /// owner always holds a higher epoch than every earlier one. Ignored in a
    /// claim (the store assigns it); [`Store::load`] returns the stored value
    /// (0: never claimed, or a record from before epochs).
    #[serde(default)]
    pub epoch: u64,
}

/// A one-shot timer of a run (`RunHandle::after`), kept until it fires.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimerRecord {
    /// Timer id, unique within the run.
    pub timer_id: String,
    /// When it is due (Unix ms).
    pub due_at_ms: u64,
    /// Event name.
    pub name: String,
    /// Event payload.
    pub payload: Value,
}

/// An input a run accepted but has not applied yet: one entry of its inbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InboxRecord {
    /// Position in the run's inbox, increasing.
    pub seq: u64,
    /// The input, as the runtime serialized it (opaque here).
    pub input: Value,
}

/// One write of a batch.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// A new run. Fails with [`StoreError::Conflict`] if the id exists.
    CreateRun(RunRecord),
    /// Replace the run's checkpoint.
    Checkpoint {
        /// Run id.
        run_id: String,
        /// The checkpoint.
        checkpoint: Checkpoint,
    },
    /// Session entries `first`, `first + 1`, ... (an index that already exists
    /// is overwritten with the same entry, so re-applying a batch is harmless).
    AppendSession {
        /// Run id.
        run_id: String,
        /// Index of the first entry.
        first: u64,
        /// The entries.
        entries: Vec<SessionEntry>,
    },
    /// Insert or replace the ledger row (run id, `entry.call_id`).
    Ledger {
        /// Run id.
        run_id: String,
        /// The row.
        entry: LedgerEntry,
    },
    /// Adds a process group to ledger row (run id, `call_id`) as the call
    /// runs; nothing if the row is not there (it was replaced in the same
    /// batch, or the call already has an outcome written over it).
    LedgerProcess {
        /// Run id.
        run_id: String,
        /// The call.
        call_id: String,
        /// The group it started.
        group: agentry_protocol::ProcessGroupRecord,
    },
    /// Sets the remote task of ledger row (run id, `call_id`) as the call
    /// runs; nothing if the row is not there (as [`Write::LedgerProcess`]).
    LedgerRemote {
        /// Run id.
        run_id: String,
        /// The call.
        call_id: String,
        /// The task it started.
        remote: agentry_protocol::RemoteRef,
    },
    /// Insert or replace a timer.
    SetTimer {
        /// Run id.
        run_id: String,
        /// The timer.
        timer: TimerRecord,
    },
    /// Remove a timer (fired or cancelled); a missing timer is not an error.
    ClearTimer {
        /// Run id.
        run_id: String,
        /// Timer id.
        timer_id: String,
    },
    /// An input a run accepted but has not applied yet (the run's inbox).
    Enqueue {
        /// Run id.
        run_id: String,
        /// Position in the run's inbox, increasing.
        seq: u64,
        /// The input, as the runtime serialized it (opaque here).
        input: Value,
    },
    /// Remove an applied input from the inbox; a missing one is not an error.
    Dequeue {
        /// Run id.
        run_id: String,
        /// Its position.
        seq: u64,
    },
    /// Make `owner` the run's owner, if its owner is still the one the claimer
    /// saw: `replaces` is that owner's token (`None`: the run had none). Fails
    /// the batch with [`StoreError::Claimed`] otherwise, so of two processes
    /// taking over the same run only one succeeds.
    Claim {
        /// Run id.
        run_id: String,
        /// The new owner.
        owner: RunOwner,
        /// The token of the owner being replaced, if any.
        replaces: Option<String>,
    },
    /// The owner holding `token` is alive at `at_ms`. Fails the batch with
    /// [`StoreError::Fenced`] when the run exists and `token` no longer owns
    /// it (taken over, or released), so an owner presumed dead learns it at
    /// its next heartbeat; nothing for a run the store does not hold.
    Heartbeat {
        /// Run id.
        run_id: String,
        /// The owner's token.
        token: String,
        /// Now (Unix ms).
        at_ms: u64,
    },
    /// The owner holding `token` lets the run go (it stopped); nothing if it no
    /// longer owns it (a stale token is not an error here). The run's epoch
    /// is kept.
    Release {
        /// Run id.
        run_id: String,
        /// The owner's token.
        token: String,
    },
    /// A check, not a change: the batch goes on only if the run's owner right
    /// now (as of this write's place in the batch) holds `token`. Otherwise
    /// the whole batch fails with [`StoreError::Fenced`] (another owner took
    /// the run over, or nobody holds it) and nothing of it is written; a run
    /// the store does not hold is [`StoreError::NoRun`]. A runtime puts one at
    /// the head of every batch of a run it owns, so a process presumed dead
    /// (paused, partitioned) never writes over its successor.
    Fence {
        /// Run id.
        run_id: String,
        /// The token the writer's claim holds.
        token: String,
    },
}

impl Write {
    /// Whether the write can fail for a reason that is its sender's alone (a
    /// duplicate run, a lost claim): the runtime commits such batches on their
    /// own, so the failure never sinks other runs' writes.
    pub fn is_conditional(&self) -> bool {
        matches!(self, Write::CreateRun(_) | Write::Claim { .. })
    }
}

/// Everything stored about one run.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredRun {
    /// How to rebuild it.
    pub record: RunRecord,
    /// The last committed checkpoint (`None` if none was committed yet).
    pub checkpoint: Option<Checkpoint>,
    /// The session, in order, large outputs inlined again.
    pub session: Vec<SessionEntry>,
    /// The ledger, ordered by step then position.
    pub ledger: Vec<LedgerEntry>,
    /// Timers not yet fired, ordered by due time.
    pub timers: Vec<TimerRecord>,
    /// Inputs accepted but not applied, in order.
    pub inbox: Vec<InboxRecord>,
    /// The process that claimed the run last, unless it released it.
    pub owner: Option<RunOwner>,
}

/// Why a store operation failed. Every variant names the store (its path) and
/// says what is wrong in words a user can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The file could not be opened or created.
    #[error("cannot open the store {path}: {message}")]
    Open {
        /// Store path.
        path: String,
        /// Why.
        message: String,
    },
    /// The file is not a SQLite database, or its pages are damaged.
    #[error("the store {path} is corrupt or not an agentry store: {message}")]
    Corrupt {
        /// Store path.
        path: String,
        /// What SQLite reported.
        message: String,
    },
    /// The file was written by a newer agentry; it is left untouched.
    #[error(
        "the store {path} has schema version {found}, newer than this build supports ({supported}); use a newer agentry (the file was not modified)"
    )]
    NewerSchema {
        /// Store path.
        path: String,
        /// Version found in the file.
        found: u32,
        /// Highest version this build knows.
        supported: u32,
    },
    /// The disk (or the store's size limit) is full; the batch was not written,
    /// the last committed state is intact.
    #[error(
        "the store {path} is full (disk full or size limit reached); nothing of this write was committed"
    )]
    Full {
        /// Store path.
        path: String,
    },
    /// A run id that already exists was created again.
    #[error("the store {path} already holds a run {run_id:?}")]
    Conflict {
        /// Store path.
        path: String,
        /// Run id.
        run_id: String,
    },
    /// A claim lost a race: the run's owner changed since the claimer looked.
    #[error("the store {path}: run {run_id:?} was claimed by another process meanwhile")]
    Claimed {
        /// Store path.
        path: String,
        /// Run id.
        run_id: String,
    },
    /// A write named a run the store does not hold.
    #[error("the store {path} holds no run {run_id:?}")]
    NoRun {
        /// Store path.
        path: String,
        /// Run id.
        run_id: String,
    },
    /// Any other failure of the database or the file system.
    #[error("store {path}: {message}")]
    Io {
        /// Store path.
        path: String,
        /// What failed.
        message: String,
    },
    /// A write of a run whose owner is no longer the writer ([`Write::Fence`],
    /// [`Write::Heartbeat`]): another process took it over (its lease
    /// expired) or it was released. Nothing of the batch was written.
    #[error(
        "the store {path}: run {run_id:?} is no longer this process's: {} (epoch {epoch}); nothing of this write was committed",
        owner.as_deref().map_or_else(|| "nobody owns it now".to_string(), |o| format!("it is now owned by {o}"))
    )]
    Fenced {
        /// Store path.
        path: String,
        /// Run id.
        run_id: String,
        /// The run's epoch now (that of the owner which took it over).
        epoch: u64,
        /// Who owns it now ("process PID on host HOST"), `None` when nobody does.
        owner: Option<String>,
    },
}

/// Durable run state. Implementations must make [`Store::commit`] atomic (all of
/// the batch or none) and durable (on stable storage before it returns), and
/// may be called from several threads.
pub trait Store: Send + Sync + 'static {
    /// Applies a batch of writes atomically and durably.
    fn commit(&self, writes: &[Write]) -> Result<(), StoreError>;

    /// Everything stored about one run, or `None` if the store does not hold it.
    fn load(&self, run_id: &str) -> Result<Option<StoredRun>, StoreError>;

    /// Every run the store holds, newest first.
    fn runs(&self) -> Result<Vec<RunSummary>, StoreError>;

    /// Where the store lives, for messages (a path, a URL).
    fn location(&self) -> String;

    /// One page of root runs ([`RunQuery`]). The default reads every run;
    /// `SqliteStore` answers from an index.
    fn list(&self, query: &RunQuery) -> Result<Vec<ListedRun>, StoreError> {
        let mut page = Vec::new();
        for summary in self.runs()? {
            if summary.parent_id.is_some() {
                continue;
            }
            let Some(run) = self.load(&summary.run_id)? else {
                continue;
            };
            if query.admits(&summary, &run.record.policy) {
                page.push(ListedRun {
                    summary,
                    policy: run.record.policy,
                });
            }
        }
        page.sort_by_key(|run| std::cmp::Reverse(run.key()));
        if let Some(after) = &query.after {
            page.retain(|run| run.key() < *after);
        }
        page.truncate(query.limit);
        Ok(page)
    }

    /// Root runs that stopped (their last commit) before `before_ms`, oldest
    /// first, at most `limit`: what a retention period removes.
    fn stopped_before(&self, before_ms: u64, limit: usize) -> Result<Vec<RunSummary>, StoreError> {
        let mut runs: Vec<RunSummary> = self
            .runs()?
            .into_iter()
            .filter(|r| r.parent_id.is_none() && !r.unfinished() && r.updated_at_ms < before_ms)
            .collect();
        runs.sort_by_key(|r| r.updated_at_ms);
        runs.truncate(limit);
        Ok(runs)
    }

    /// Removes `run_id` and its children (their children too), every row of
    /// every table, atomically: all of it or nothing. Returns the records
    /// removed (the run's first), empty when there was no such run. The
    /// default refuses: a store must say how it deletes.
    fn delete_run(&self, run_id: &str) -> Result<Vec<RunRecord>, StoreError> {
        Err(StoreError::Io {
            path: self.location(),
            message: format!("this store cannot delete runs (run {run_id:?} is kept)"),
        })
    }
}

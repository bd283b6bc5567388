//! What a run needs to start.

use std::path::PathBuf;
use std::time::Duration;

use agentry_protocol::accept::AcceptCheck;
use agentry_protocol::budget::BudgetLimits;
use agentry_protocol::stored_policy::StoredPolicy;
use serde::{Deserialize, Serialize};

use crate::registry::Grants;

pub use crate::tree_limits::{ChildShare, ParentReserve, TreeLimits};

/// Default step limit when none is given: runs always stop.
pub const DEFAULT_MAX_STEPS: u64 = 50;
/// Default no-progress window.
pub const DEFAULT_PROGRESS_WINDOW: usize = 3;
/// Default number of permission denials in a row that stop a run.
pub const DEFAULT_MAX_DENIED: usize = 3;

fn default_max_denied() -> usize {
    DEFAULT_MAX_DENIED
}

fn default_inbox_capacity() -> usize {
    crate::inbox::DEFAULT_INBOX_CAPACITY
}

fn default_result_cap() -> usize {
    agentry_protocol::envelope::DEFAULT_RESULT_CAP
}

/// Default bound on concurrently running calls of one step.
pub const DEFAULT_MAX_PARALLEL: usize = 8;

/// Backoff between automatic retries: `base · 2^(attempt-1)`, capped, with jitter
/// drawn from the upper half so retries of parallel calls do not line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Backoff before the first retry.
    pub base: Duration,
    /// Upper bound of any backoff.
    pub max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            base: Duration::from_millis(50),
            max: Duration::from_secs(2),
        }
    }
}

impl RetryPolicy {
    /// The backoff after failed attempt `attempt` (from 1).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let exp = self
            .base
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
        let full = exp.min(self.max);
        let half = full / 2;
        half + Duration::from_micros(fastrand::u64(0..=half.as_micros() as u64))
    }
}

/// The longest run id accepted, in bytes.
pub const MAX_RUN_ID_BYTES: usize = 128;

/// Checks a run id chosen by a caller: non-empty, at most
/// [`MAX_RUN_ID_BYTES`], no whitespace or control characters (ids are typed
/// back in commands such as `agentry resume ID`), no `/` or `\\` and not `.`
/// or `..` (an id must never read as a path).
pub fn check_run_id(id: &str) -> Result<(), crate::RuntimeError> {
    let why = if id.is_empty() {
        Some("it is empty")
    } else if id.len() > MAX_RUN_ID_BYTES {
        Some("it is longer than 128 bytes")
    } else if id.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some("it contains whitespace or a control character")
    } else if id.contains(['/', '\\']) || id == "." || id == ".." {
        Some("it contains a path separator or is a path component (. or ..)")
    } else {
        None
    };
    match why {
        Some(why) => Err(crate::RuntimeError::InvalidRunId {
            run_id: id.to_string(),
            message: why.to_string(),
        }),
        None => Ok(()),
    }
}

/// Which calls need a human decision before they run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalConfig {
    /// Tools (by name, scope, `prefix.*`, `*`) whose calls wait for approval.
    pub require: Grants,
    /// Every `irreversible_external` tool needs approval too (default true).
    pub irreversible: bool,
    /// How long a call waits before it is refused (`EPERM`); `None` waits until
    /// the run's deadline.
    pub timeout: Option<Duration>,
    /// Tools the operator approved up front (CLI `--approve`): their calls run
    /// without parking, even when `require` or `irreversible` would park them.
    #[serde(default)]
    pub pre_approved: Grants,
}

impl Default for ApprovalConfig {
    fn default() -> Self {
        ApprovalConfig {
            require: Grants::new(Vec::<String>::new()),
            irreversible: true,
            timeout: Some(Duration::from_secs(300)),
            pre_approved: Grants::new(Vec::<String>::new()),
        }
    }
}

impl ApprovalConfig {
    /// Whether a call of this tool must wait for a human.
    pub fn required_for(&self, contract: &agentry_protocol::ToolContract) -> bool {
        contract.name != agentry_tools::FINISH_TOOL
            && !self.pre_approved.matches(contract)
            && (self.require.matches(contract)
                || (self.irreversible
                    && contract.effect == agentry_protocol::Effect::IrreversibleExternal))
    }
}

/// How a run decides when to take its next step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Driver {
    /// Step after step until the run stops (the default).
    #[default]
    Pull,
    /// Sleep on the mailbox; each user message, custom event or timer tick wakes
    /// the agent for a turn: a step, and after a step that called tools another
    /// at once (the model sees the results), until the model answers with text.
    /// A final text answer is a reply: the agent sleeps again; only
    /// `task.finish` (or a budget, an abort, the deadline) ends the run.
    Events,
}

/// Everything a run needs besides its policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    /// Run id; a fresh UUIDv7 when `None`.
    pub run_id: Option<String>,
    /// Task id, for the trace.
    pub task_id: String,
    /// The goal, the first session entry.
    pub goal: String,
    /// Acceptance checks; none means "done when the model finishes".
    pub accept: Vec<AcceptCheck>,
    /// Budget limits.
    pub limits: BudgetLimits,
    /// Tools this run may call (`task.finish` is always allowed).
    pub grants: Grants,
    /// No-progress window: that many identical step fingerprints in a row stop the
    /// run with `no_progress`. 0 (or 1, which would stop every run) disables it.
    pub progress_window: usize,
    /// That many `EPERM` results in a row stop the run with
    /// `permission_denied`, naming the denied calls: a model does not get to try
    /// variations of a forbidden call until its budget runs out. 0 disables it.
    #[serde(default = "default_max_denied")]
    pub max_denied: usize,
    /// The working directory file tools are confined to. Must exist.
    pub workdir: PathBuf,
    /// Where to write the JSONL trace, if anywhere.
    pub trace: Option<PathBuf>,
    /// Where tools keep large artifacts (full process output); default
    /// `<workdir>/.agentry`, readable by the model through `fs.read`.
    pub artifacts: Option<PathBuf>,
    /// A result whose `data` is longer than this as JSON (bytes) is saved
    /// whole in the artifact directory (`results/<sha256>.json`, referenced by
    /// the envelope's `saved`), for the model to read back in parts with
    /// `result.read`; the envelope keeps only its head (`cut`), so the run's
    /// memory, its store and its trace do not grow with what tools return
    /// (an error message past it is cut too). Default
    /// [`DEFAULT_RESULT_CAP`](agentry_protocol::envelope::DEFAULT_RESULT_CAP).
    #[serde(default = "default_result_cap")]
    pub result_cap: usize,
    /// Bound on concurrently running parallel-safe calls of one step.
    pub max_parallel: usize,
    /// Backoff between automatic retries.
    pub retry: RetryPolicy,
    /// Keep the run's events from its very start for the first
    /// [`RunHandle::subscribe`](crate::RunHandle::subscribe) call (default). When
    /// false, subscribers see events from the moment they subscribe, and a run
    /// nobody listens to builds no events at all.
    pub events_from_start: bool,
    /// Which calls wait for a human decision.
    pub approval: ApprovalConfig,
    /// When the run steps.
    pub driver: Driver,
    /// Periodic ticks (`every`): each wakes one step of an event-driven agent and
    /// spends one tick of the budget; a tick due while the previous one still runs
    /// is skipped and counted, never stacked.
    pub tick_every: Option<Duration>,
    /// Depth and fan-out limits of the agent tree this run roots (ignored for a
    /// child, which inherits its root's).
    pub tree: TreeLimits,
    /// How to rebuild this run's policy when it is resumed from a store: the
    /// CLI's description ([`StoredPolicy::Root`]), an embedder's own text
    /// (e.g. `script:/abs/path/script.json`), or, for a child, what the
    /// runtime stores itself; kept with the run, read by whoever resumes it.
    /// Stored as the same text it always was.
    #[serde(default)]
    pub policy_spec: Option<StoredPolicy>,
    /// How many messages, custom events and fired timers the run holds that no
    /// decision has taken yet (a paused run holds all it is sent): past it
    /// `send_message`, `inject` and `interrupt` with a message are refused with
    /// [`RuntimeError::InboxFull`](crate::RuntimeError::InboxFull), and a fired
    /// timer waits for a slot. Pause, resume and abort are never refused.
    /// Default [`DEFAULT_INBOX_CAPACITY`](crate::DEFAULT_INBOX_CAPACITY).
    #[serde(default = "default_inbox_capacity")]
    pub inbox_capacity: usize,
    /// A parent W3C `traceparent` (`00-<trace id>-<span id>-<flags>`): a root
    /// run joins that trace (its spans and its trace file's ids); kept with a
    /// durable run, so a resume rejoins it. Ignored for a child (it joins its
    /// parent's). An invalid value is ignored.
    #[serde(default)]
    pub traceparent: Option<String>,
    /// What the run writes about itself: trace sampling, content in spans, and
    /// redaction.
    #[serde(default)]
    pub observe: ObserveConfig,
    /// Where the run came from (task directory, working directory, tools
    /// approved up front), written on the trace's stop line for `agentry
    /// replay`. Not used by the runtime itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<agentry_protocol::trace::TraceOrigin>,
    /// The kernel sandbox every process the run starts runs under (task.toml
    /// `[sandbox]`). Default: workspace-write, no network — on unless set to
    /// `mode = "off"`; a kernel that cannot enforce it fails the start
    /// ([`RuntimeError::Sandbox`](crate::RuntimeError::Sandbox)). A child
    /// inherits its parent's.
    #[serde(default)]
    pub sandbox: agentry_sandbox::SandboxSpec,
    /// What the host hides from sandboxed processes besides the defaults
    /// (its store's and state directories; the home directory whose
    /// secrets are hidden).
    #[serde(default)]
    pub sandbox_host: crate::sandbox::SandboxHost,
    /// An event-driven root run that has slept this long hibernates: its
    /// actors go, its handles keep a compact entry, and the next input
    /// (message, event, timer, interrupt, approval, settlement, abort) or its
    /// deadline wakes it from the store, transparently. Needs a runtime with
    /// a store and a wake policy
    /// ([`Runtime::with_wake_policy`](crate::Runtime::with_wake_policy));
    /// without them the run never hibernates. Off (`None`) by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hibernate_after: Option<Duration>,
}

/// What a run writes about itself, and what it keeps out of what it writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObserveConfig {
    /// Share of runs (0.0..=1.0, by trace id, so a tree is all in or all out)
    /// whose JSONL trace keeps every step record; the others keep their inputs
    /// and final record only, unless they did not stop `done` (then every step
    /// is kept). Default 1.0.
    #[serde(default = "default_sample")]
    pub sample: f64,
    /// Message contents and tool arguments/results as span attributes
    /// (redacted). Off by default.
    #[serde(default)]
    pub content: bool,
    /// Regular expressions whose matches are redacted from everything the run
    /// writes (task.toml `[redact] patterns`), besides the built-in detectors.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redact_patterns: Vec<String>,
}

impl Default for ObserveConfig {
    fn default() -> Self {
        ObserveConfig {
            sample: default_sample(),
            content: false,
            redact_patterns: Vec::new(),
        }
    }
}

fn default_sample() -> f64 {
    1.0
}

impl RunConfig {
    /// A run with default limits (50 steps), read-only built-in grants, and the
    /// default no-progress window.
    pub fn new(goal: impl Into<String>, workdir: impl Into<PathBuf>) -> Self {
        RunConfig {
            run_id: None,
            task_id: "task".to_string(),
            goal: goal.into(),
            accept: Vec::new(),
            limits: BudgetLimits {
                max_steps: Some(DEFAULT_MAX_STEPS),
                ..BudgetLimits::default()
            },
            grants: Grants::new(["fs.read"]),
            progress_window: DEFAULT_PROGRESS_WINDOW,
            max_denied: DEFAULT_MAX_DENIED,
            workdir: workdir.into(),
            trace: None,
            artifacts: None,
            result_cap: default_result_cap(),
            max_parallel: DEFAULT_MAX_PARALLEL,
            retry: RetryPolicy::default(),
            events_from_start: true,
            approval: ApprovalConfig::default(),
            driver: Driver::Pull,
            tick_every: None,
            tree: TreeLimits::default(),
            policy_spec: None,
            inbox_capacity: default_inbox_capacity(),
            traceparent: None,
            observe: ObserveConfig::default(),
            origin: None,
            sandbox: agentry_sandbox::SandboxSpec::default(),
            sandbox_host: crate::sandbox::SandboxHost::default(),
            hibernate_after: None,
        }
    }
}

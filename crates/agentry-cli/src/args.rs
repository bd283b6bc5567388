//! The command line: clap's types, the value parsers of its flags, and what a
//! flag's path means (relative to the current directory).
//!
//! The parsers return `String` errors: that is clap's value-parser contract,
//! and clap prints them after the flag's name.
// Size: every subcommand's flags in one self-contained file (the docs test compiles it alone to check the book's commands).

use std::path::{Path, PathBuf};
use std::time::Duration;

use agentry::Settlement;
use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "agentry",
    version,
    about = "Run LLM agent tasks on the agentry actor runtime."
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a task directory (task.toml, script.json, workspace/) in a fresh working directory.
    Run(RunArgs),
    /// Continue an unfinished run of a store from its last committed state.
    Resume(ResumeArgs),
    /// List the runs of a store (unfinished ones unless --all).
    Runs(RunsArgs),
    /// List every tool a run of the task would have (built-ins, command tools,
    /// MCP servers' tools, which it starts) with effect, idempotency, approval
    /// and whether the task grants it.
    Tools(ToolsArgs),
    /// Serve agents over HTTP: the operator's agents of serve.toml and inline
    /// scripted tasks, runs durable in the store, every route but /healthz
    /// behind a bearer token (see docs/src/service.md).
    Serve(ServeArgs),
    /// Serve agentry as an MCP server (tools run_task, get_run, list_runs,
    /// cancel_run) over stdio, or streamable HTTP with --http.
    Mcp(McpArgs),
    /// Statistics of finished runs, from a store or trace files: per task (or
    /// model, or tool) runs, success rate, steps, tool errors by tool and
    /// code, tokens and cost per run, wall time, retries, each split by stop reason.
    Stats(StatsArgs),
    /// Run a recorded run again (its JSONL trace, or a store's run) in a fresh
    /// working directory, its recorded decisions as the policy and the real
    /// tools, and report drift step by step. Exit 0: no drift; 1: drift.
    Replay(ReplayArgs),
    /// Write one self-contained HTML page (no network: open it from disk) that
    /// shows a JSONL trace as a timeline you can click through.
    View(ViewArgs),
    /// Print what this kernel can enforce of the sandbox around the processes
    /// a model drives (Landlock ABI, seccomp, user/PID/mount namespaces).
    ///
    /// Exit codes: 0 when the default sandbox (`mode = "workspace-write"`,
    /// `network = false`) can be enforced here; 1 when it cannot (what is
    /// missing is printed; runs must then say `[sandbox] mode = "off"`);
    /// 2 for bad flags.
    SandboxCheck(SandboxCheckArgs),
}

#[derive(Debug, Args)]
pub(crate) struct SandboxCheckArgs {
    /// One JSON object on stdout: `{"enforceable": bool, "missing": [...],
    /// "kernel": {...}}`.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct StatsArgs {
    /// The SQLite store to read. Default: $AGENTRY_STORE, else
    /// $XDG_STATE_HOME/agentry/runs.db (~/.local/state/agentry/runs.db), where
    /// `agentry run` stores runs by default.
    #[arg(long, value_name = "FILE", conflicts_with = "trace")]
    pub(crate) store: Option<PathBuf>,
    /// Read these JSONL trace files (`agentry run --trace`) instead of a
    /// store; a run's lines may span several. Repeatable.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub(crate) trace: Vec<PathBuf>,
    /// Group the runs by task, by model, or by each tool they called.
    #[arg(long, value_enum, default_value_t = StatsBy::Task)]
    pub(crate) by: StatsBy,
    /// Only runs that stopped within this long before now ("30m", "24h", "7d").
    #[arg(long, value_name = "DURATION", value_parser = parse_since)]
    pub(crate) since: Option<Duration>,
    /// Print exactly one JSON object on stdout instead of the tables.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `stats --by`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum StatsBy {
    /// Per task id.
    Task,
    /// Per model.
    Model,
    /// Per tool called.
    Tool,
}

impl From<StatsBy> for agentry::insight::stats::GroupBy {
    fn from(by: StatsBy) -> Self {
        match by {
            StatsBy::Task => agentry::insight::stats::GroupBy::Task,
            StatsBy::Model => agentry::insight::stats::GroupBy::Model,
            StatsBy::Tool => agentry::insight::stats::GroupBy::Tool,
        }
    }
}

/// `stats --since`: a humantime duration.
pub(crate) fn parse_since(value: &str) -> Result<Duration, String> {
    humantime::parse_duration(value)
        .map_err(|e| format!("expected a duration such as 30m, 24h or 7d ({e})"))
}

#[derive(Debug, Args)]
pub(crate) struct ReplayArgs {
    /// The recorded run's JSONL trace (`agentry run --trace FILE`): its root
    /// run, or the run --run-id names.
    #[arg(required_unless_present = "store")]
    pub(crate) trace: Option<PathBuf>,
    /// A SQLite store holding the recorded run (with --run-id): without a
    /// trace, the run's decisions and results come from its session; with
    /// one, the store only says which task the run came from. Only read.
    #[arg(long, value_name = "FILE", requires = "run_id")]
    pub(crate) store: Option<PathBuf>,
    /// The recorded run to replay (default: the trace's root run).
    #[arg(long, value_name = "ID")]
    pub(crate) run_id: Option<String>,
    /// The task directory to replay against (default: the one the recording
    /// names).
    #[arg(long, value_name = "DIR")]
    pub(crate) task: Option<PathBuf>,
    /// Stop after this step; drift is judged up to it (the stop is not).
    #[arg(long, value_name = "STEP", value_parser = clap::value_parser!(u64).range(1..), conflicts_with = "fork_at")]
    pub(crate) until: Option<u64>,
    /// Replay the recorded decisions of the steps before STEP, then let
    /// --policy decide from STEP on (a script's first turn is played at
    /// STEP). Drift is judged for the steps before STEP.
    #[arg(long, value_name = "STEP", value_parser = clap::value_parser!(u64).range(1..), requires = "policy")]
    pub(crate) fork_at: Option<u64>,
    /// The policy after the fork, as for `run`.
    #[arg(long, value_name = "KIND:VALUE", value_parser = parse_policy, requires = "fork_at")]
    pub(crate) policy: Option<PolicyArg>,
    /// The model server of a forked model policy, as for `run`.
    #[arg(long, value_name = "URL", requires = "policy")]
    pub(crate) base_url: Option<String>,
    /// Keep the replay's own JSONL trace in FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) out: Option<PathBuf>,
    /// The replay's working directory; must not exist or be empty. Default:
    /// a new directory under the system temp dir.
    #[arg(long, value_name = "DIR")]
    pub(crate) workdir: Option<PathBuf>,
    /// Run the listed calls: a replay that would run anything but read-only
    /// calls (or acceptance commands, or MCP servers) asks first at a
    /// terminal, and exits 2 without running anything elsewhere.
    #[arg(long, conflicts_with = "dry_run")]
    pub(crate) yes: bool,
    /// Only list the task directory and the calls the replay would run,
    /// with their effects; run nothing (exit 0).
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Replay a trace whose records contradict each other (a result that
    /// answers another call, an approval its step shows was not given):
    /// approvals then still come from its step records alone.
    #[arg(long)]
    pub(crate) force: bool,
    /// Print exactly one JSON object on stdout instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ViewArgs {
    /// The JSONL trace (`agentry run --trace FILE`). A tree's children write no
    /// trace of their own: they are drawn from the parent's agent.spawn and
    /// agent.wait results. An embedder's per-run traces of one tree can be given
    /// together, the root's first.
    #[arg(required = true, value_name = "TRACE")]
    pub(crate) traces: Vec<PathBuf>,
    /// Where to write the page. Default: the first TRACE with `.html` instead of
    /// its extension (run.jsonl -> run.html). Written whole or not at all.
    #[arg(short, long, value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// serve.toml: `[serve] addr` and limits, `[auth] tokens_file`,
    /// `[agents.NAME]`, `[models.NAME]`, `[tenants.NAME]`. Without it:
    /// inline scripted tasks only.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// The address to listen on. Default: serve.toml's `[serve] addr`, else
    /// 127.0.0.1:8080. Port 0 picks a free port; the bound address is printed.
    #[arg(long, value_name = "ADDR")]
    pub(crate) addr: Option<std::net::SocketAddr>,
    /// Commit every run to this SQLite store (created if missing); on start,
    /// the runs it holds unfinished resume. Default: $AGENTRY_STORE, else
    /// $XDG_STATE_HOME/agentry/runs.db (~/.local/state/agentry/runs.db).
    #[arg(long, value_name = "FILE")]
    pub(crate) store: Option<PathBuf>,
    /// Serve without tokens (when neither `[auth] tokens_file` nor
    /// $AGENTRY_TOKEN gives one): every caller is trusted, so only a
    /// loopback address is taken.
    #[arg(long)]
    pub(crate) no_auth: bool,
    /// The log's format on stderr: `text`, or `json` (one JSON object a
    /// line, for a log collector). `RUST_LOG` filters it (default: warnings,
    /// and the service's own run starts and stops).
    #[arg(long, value_enum, default_value_t = LogFormat::Text, value_name = "FORMAT")]
    pub(crate) log_format: LogFormat,
    /// With a `postgres://` store this process is one node of a cluster:
    /// its runs are leased for DURATION (renewed every third of it), and
    /// when a node stops beating for that long the others take its runs
    /// over. Give every node the same lease. Default: 10s with a Postgres
    /// store; with a SQLite store it only puts this process's runs in lease
    /// mode (off unless given).
    #[arg(long, value_name = "DURATION", value_parser = parse_lease)]
    pub(crate) lease: Option<Duration>,
}

/// The log's line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object a line (timestamp, level, fields, spans).
    Json,
}

#[derive(Debug, Args)]
pub(crate) struct McpArgs {
    /// Serve streamable HTTP at ADDR (path /mcp) instead of stdio. Loopback
    /// addresses only, e.g. 127.0.0.1:8080; port 0 picks a free port. The
    /// bound address is printed on stderr. Every request must carry
    /// `Authorization: Bearer TOKEN` (--token-file or $AGENTRY_TOKEN): loopback
    /// is open to every user of the machine.
    #[arg(long, value_name = "ADDR")]
    pub(crate) http: Option<std::net::SocketAddr>,
    /// With --http: the bearer token clients must send, read from this file
    /// (one line; a trailing newline is dropped; readable by its owner only).
    /// Default: $AGENTRY_TOKEN.
    #[arg(
        long,
        value_name = "PATH",
        requires = "http",
        conflicts_with = "no_auth"
    )]
    pub(crate) token_file: Option<PathBuf>,
    /// With --http: serve without a token. Any local user can then run tasks,
    /// and their commands, as you: only where every user of the machine is
    /// trusted.
    #[arg(long, requires = "http")]
    pub(crate) no_auth: bool,
    /// With --http: close a session after this long without a request in
    /// flight; its client must initialize again.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_deadline, requires = "http")]
    pub(crate) session_idle_timeout: Duration,
    /// At most N runs at once; past it run_task is refused (a tool error)
    /// until one ends. Default: from the soft open-file limit (`ulimit -n`),
    /// 64 files kept for the server and 16 per run: (limit - 64) / 16, at
    /// least 1, at most 256 (60 runs under the usual 1024).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_runs: Option<u32>,
    /// Commit the runs to this SQLite store (created if missing). Default:
    /// $AGENTRY_STORE, else $XDG_STATE_HOME/agentry/runs.db
    /// (~/.local/state/agentry/runs.db).
    #[arg(long, value_name = "FILE", conflicts_with = "no_store")]
    pub(crate) store: Option<PathBuf>,
    /// Keep the runs in memory only: they cannot be resumed.
    #[arg(long)]
    pub(crate) no_store: bool,
    /// When a step counts as done, as for `run`.
    #[arg(long, value_enum, default_value_t = DurabilityArg::Strict)]
    pub(crate) durability: DurabilityArg,
    /// Let an inline task (run_task's `task`) name its own model server,
    /// fallback or child model servers, CA certificate and MCP servers by URL
    /// (with their headers). Off by default: those decide where this
    /// server's API keys and header secrets are sent, and an inline task is
    /// written by the client, so without this flag such a task is refused
    /// naming the field, as is a task_dir inside agentry's temp directory
    /// (where the files clients send land). Other task directories are the
    /// operator's and never refused.
    #[arg(long)]
    pub(crate) allow_client_endpoints: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ResumeArgs {
    /// The run to continue.
    pub(crate) run_id: String,
    /// The SQLite store the run was started with. Default: $AGENTRY_STORE, else
    /// $XDG_STATE_HOME/agentry/runs.db (~/.local/state/agentry/runs.db), where
    /// `agentry run` stores runs by default.
    #[arg(long, value_name = "FILE")]
    pub(crate) store: Option<PathBuf>,
    /// Settle a call the crash interrupted (the run parks `awaiting_decision` on
    /// it otherwise): `happened` (it took effect; do not run it), `retry` (run it
    /// again) or `skip` (do not run it; tell the model). Repeatable.
    #[arg(long, value_name = "CALL_ID=DECISION", value_parser = parse_decision)]
    pub(crate) decide: Vec<SettleArg>,
    /// The policy, as for `run`. Default: the one the run was started with.
    #[arg(long, value_name = "KIND:VALUE", value_parser = parse_policy)]
    pub(crate) policy: Option<PolicyArg>,
    /// The model server, as for `run`. Default: the one the run was started with.
    #[arg(long, value_name = "URL")]
    pub(crate) base_url: Option<String>,
    /// Fallback models, as for `run`; given, they replace the ones the run was
    /// started with. Repeatable.
    #[arg(long, value_name = "PROVIDER:MODEL[=URL]", value_parser = parse_fallback)]
    pub(crate) fallback: Vec<FallbackArg>,
    /// Export the run's OpenTelemetry spans (GenAI conventions) over OTLP/HTTP
    /// to URL (e.g. http://127.0.0.1:4318/v1/traces); without URL, to
    /// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT, else
    /// the OTLP default. On when either variable is set, too. OTEL_SERVICE_NAME
    /// and OTEL_TRACES_SAMPLER are honoured.
    #[arg(long, value_name = "URL", num_args = 0..=1, default_missing_value = "")]
    pub(crate) otlp: Option<String>,
    /// Print exactly one JSON object on stdout instead of the summary.
    #[arg(long)]
    pub(crate) json: bool,
    /// When a step counts as done: `strict` (on disk first) or `grouped`.
    #[arg(long, value_enum, default_value_t = DurabilityArg::Strict)]
    pub(crate) durability: DurabilityArg,
    /// Lease mode, for several processes sharing the store (nodes of a
    /// cluster, which may share a machine): a run's owner counts as alive
    /// only while its heartbeat is younger than DURATION (e.g. 3s), whatever
    /// its pid says, and this process renews its own every third of it. A
    /// run whose owner's lease expired is taken over; that owner's next write
    /// is refused and it stops the run (exit 1, "taken over"). Give every
    /// process on the store the same lease. Default: off (a local owner is
    /// alive while its process is).
    #[arg(long, value_name = "DURATION", value_parser = parse_lease)]
    pub(crate) lease: Option<Duration>,
}

/// `--durability`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum DurabilityArg {
    /// Every step's update is on disk before the run goes on (an fsync per step).
    Strict,
    /// Steps that only did re-runnable work are committed in groups; a crash may
    /// repeat them (never a call that must not run twice).
    Grouped,
}

impl From<DurabilityArg> for agentry::Durability {
    fn from(d: DurabilityArg) -> Self {
        match d {
            DurabilityArg::Strict => agentry::Durability::Strict,
            DurabilityArg::Grouped => agentry::Durability::Grouped,
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct ToolsArgs {
    /// The task directory.
    pub(crate) task_dir: PathBuf,
    /// One JSON array on stdout: `{name, source, effect, idempotency,
    /// approval, granted, sandbox, description}` per tool.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct RunsArgs {
    /// The SQLite store. Default: $AGENTRY_STORE, else
    /// $XDG_STATE_HOME/agentry/runs.db (~/.local/state/agentry/runs.db).
    #[arg(long, value_name = "FILE")]
    pub(crate) store: Option<PathBuf>,
    /// List finished runs too.
    #[arg(long)]
    pub(crate) all: bool,
    /// Print one run's agent tree instead: each node's goal, model, stop reason,
    /// budget limits and spend.
    #[arg(long, value_name = "RUN_ID", conflicts_with = "all")]
    pub(crate) tree: Option<String>,
    /// One JSON array on stdout.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The task directory: holds task.toml, and usually script.json and workspace/.
    pub(crate) task_dir: PathBuf,
    /// The policy: `script:FILE` (a scripted policy; FILE relative to the current
    /// directory), `openai:MODEL` (an OpenAI-compatible server; key from
    /// OPENAI_API_KEY) or `anthropic:MODEL` (key from ANTHROPIC_API_KEY).
    /// Default: task.toml's `[policy] script`, else TASK_DIR/script.json.
    #[arg(long, value_name = "KIND:VALUE", value_parser = parse_policy)]
    pub(crate) policy: Option<PolicyArg>,
    /// The model server for `openai:` / `anthropic:` policies: https:// (the
    /// system's CAs, plus SSL_CERT_FILE's and `[policy] ca_cert`'s) or http://
    /// (e.g. http://127.0.0.1:8080/v1 for llama.cpp's server). Default: the
    /// provider's hosted API. HTTPS_PROXY / NO_PROXY are honoured.
    #[arg(long, value_name = "URL")]
    pub(crate) base_url: Option<String>,
    /// A model that takes the turn when the models before it are unavailable
    /// after their retries (connection refused, 5xx, 429): `openai:MODEL` or
    /// `anthropic:MODEL`, its server after `=` (default: the provider's hosted
    /// API), its key from the provider's variable. Repeatable, tried in order;
    /// replaces task.toml's `[policy] fallback`.
    #[arg(long, value_name = "PROVIDER:MODEL[=URL]", value_parser = parse_fallback)]
    pub(crate) fallback: Vec<FallbackArg>,
    /// Write the JSONL trace (one record per step, then a stop record) to FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) trace: Option<PathBuf>,
    /// Export the run's OpenTelemetry spans (GenAI conventions) over OTLP/HTTP
    /// to URL (e.g. http://127.0.0.1:4318/v1/traces); without URL, to
    /// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT, else
    /// the OTLP default. On when either variable is set, too. OTEL_SERVICE_NAME
    /// and OTEL_TRACES_SAMPLER are honoured.
    #[arg(long, value_name = "URL", num_args = 0..=1, default_missing_value = "")]
    pub(crate) otlp: Option<String>,
    /// Print exactly one JSON object on stdout instead of the summary.
    #[arg(long)]
    pub(crate) json: bool,
    /// The model's context window in tokens, its output included: every request
    /// is fitted to it. Overrides task.toml's `[policy] context_tokens`; default:
    /// the window of the model's family in agentry's table, else 32768.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=agentry::task::MAX_COUNT))]
    pub(crate) context_tokens: Option<u64>,
    /// Override the task's step budget.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=agentry::task::MAX_COUNT))]
    pub(crate) max_steps: Option<u64>,
    /// Override the task's wall-clock deadline ("500ms", "30s", "2m").
    #[arg(long, value_name = "DURATION", value_parser = parse_deadline)]
    pub(crate) deadline: Option<Duration>,
    /// The working directory for this run; must not exist or be empty. Default: a
    /// new directory under the system temp dir (agentry/runs/TASK-UUID).
    #[arg(long, value_name = "DIR")]
    pub(crate) workdir: Option<PathBuf>,
    /// Commit the run to this SQLite store (created if missing) so that
    /// `agentry resume` can continue it after a crash. Default: $AGENTRY_STORE,
    /// else $XDG_STATE_HOME/agentry/runs.db (~/.local/state/agentry/runs.db).
    #[arg(long, value_name = "FILE", conflicts_with = "no_store")]
    pub(crate) store: Option<PathBuf>,
    /// Keep the run in memory only: it cannot be resumed.
    #[arg(long)]
    pub(crate) no_store: bool,
    /// When a step counts as done: `strict` (on disk first; the default) or
    /// `grouped` (steps that only did re-runnable work are committed in groups:
    /// faster, and a crash may repeat them, never a call that must not run twice).
    #[arg(long, value_enum, default_value_t = DurabilityArg::Strict)]
    pub(crate) durability: DurabilityArg,
    /// The run id (default: a fresh UUIDv7). With --store, a run id already in the
    /// store is refused.
    #[arg(long, value_name = "ID", value_parser = parse_run_id)]
    pub(crate) run_id: Option<String>,
    /// Approve calls of these tools up front (name, scope or `prefix.*`), so they
    /// do not park `awaiting_approval` (irreversible tools do by default).
    /// Repeatable.
    #[arg(long, value_name = "TOOL")]
    pub(crate) approve: Vec<String>,
    /// Lease mode, for several processes sharing the store (nodes of a
    /// cluster, which may share a machine): a run's owner counts as alive
    /// only while its heartbeat is younger than DURATION (e.g. 3s), whatever
    /// its pid says, and this process renews its own every third of it. A
    /// run whose owner's lease expired is taken over; that owner's next write
    /// is refused and it stops the run (exit 1, "taken over"). Give every
    /// process on the store the same lease. Default: off (a local owner is
    /// alive while its process is).
    #[arg(long, value_name = "DURATION", value_parser = parse_lease)]
    #[arg(conflicts_with = "no_store")]
    pub(crate) lease: Option<Duration>,
}

impl RunArgs {
    /// `agentry run TASK_DIR --json` as a server runs a task for a client
    /// (`agentry mcp`, `agentry serve`): no trace, flags or overrides; the
    /// caller sets what it decides (store, policy, limits).
    pub(crate) fn served(task_dir: PathBuf) -> RunArgs {
        RunArgs {
            task_dir,
            policy: None,
            base_url: None,
            fallback: Vec::new(),
            trace: None,
            otlp: None,
            json: true,
            context_tokens: None,
            max_steps: None,
            deadline: None,
            workdir: None,
            store: None,
            no_store: false,
            durability: DurabilityArg::Strict,
            run_id: None,
            approve: Vec::new(),
            lease: None,
        }
    }
}

/// The parsed `--policy` flag.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum PolicyArg {
    /// A script file, relative to the current directory.
    Script(PathBuf),
    /// A model behind a provider's API.
    Model {
        /// Which wire protocol.
        provider: agentry_models::Provider,
        /// The model name sent to the server.
        model: String,
    },
}

/// One fallback model: `--fallback`, or an entry of task.toml's `[policy] fallback`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FallbackArg {
    /// Which wire protocol.
    pub(crate) provider: agentry_models::Provider,
    /// The model name sent to the server.
    pub(crate) model: String,
    /// Its server; `None`: the provider's hosted API.
    pub(crate) base_url: Option<String>,
}

/// `--decide CALL_ID=DECISION`: how to settle one call a crash interrupted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SettleArg {
    /// The interrupted call.
    pub(crate) call_id: String,
    /// What to do about it.
    pub(crate) settlement: Settlement,
}

/// `--policy KIND:VALUE`, and a task's `[policy] model`.
pub(crate) fn parse_policy(value: &str) -> Result<PolicyArg, String> {
    match value.split_once(':') {
        Some(("script", file)) if !file.is_empty() => Ok(PolicyArg::Script(file.into())),
        Some(("script", _)) => Err("script: needs a file, e.g. script:plan.json".into()),
        _ => match agentry_models::Provider::parse_spec(value) {
            Some(Ok((provider, model))) => Ok(PolicyArg::Model { provider, model }),
            Some(Err(e)) => Err(e.to_string()),
            None => Err("expected script:FILE, openai:MODEL or anthropic:MODEL".into()),
        },
    }
}

/// `--fallback PROVIDER:MODEL[=URL]`: the model, and after the first `=` its
/// server (model names have no `=`; URLs may).
pub(crate) fn parse_fallback(value: &str) -> Result<FallbackArg, String> {
    let (spec, base_url) = match value.split_once('=') {
        Some((spec, url)) if url.starts_with("http://") || url.starts_with("https://") => {
            (spec, Some(url.to_string()))
        }
        Some((_, url)) => {
            return Err(format!(
                "the server after '=' must be an http:// URL, found {url:?}"
            ));
        }
        None => (value, None),
    };
    fallback_model(spec, base_url)
}

/// A fallback's `provider:MODEL` and server.
pub(crate) fn fallback_model(spec: &str, base_url: Option<String>) -> Result<FallbackArg, String> {
    match agentry_models::Provider::parse_spec(spec) {
        Some(Ok((provider, model))) => Ok(FallbackArg {
            provider,
            model,
            base_url,
        }),
        Some(Err(e)) => Err(e.to_string()),
        None => Err("expected openai:MODEL or anthropic:MODEL, optionally =URL".into()),
    }
}

/// `--run-id`: the runtime's own check.
fn parse_run_id(value: &str) -> Result<String, agentry::RuntimeError> {
    agentry::runtime::config::check_run_id(value).map(|()| value.to_string())
}

/// `--decide CALL_ID=DECISION`.
fn parse_decision(value: &str) -> Result<SettleArg, String> {
    let (id, decision) = value
        .split_once('=')
        .ok_or("expected CALL_ID=happened|retry|skip")?;
    if id.is_empty() {
        return Err("the call id before '=' is empty".into());
    }
    Ok(SettleArg {
        call_id: id.to_string(),
        settlement: decision.parse()?,
    })
}

/// `--deadline`: a humantime duration, longer than zero, at most 365 days.
pub(crate) fn parse_deadline(value: &str) -> Result<Duration, String> {
    match humantime::parse_duration(value) {
        Ok(d) if d > agentry::task::MAX_DURATION => Err("at most 365 days (365d)".into()),
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err("must be longer than zero".into()),
        Err(e) => Err(format!(
            "expected a duration such as 500ms, 30s or 2m ({e})"
        )),
    }
}

/// `--lease`: a humantime duration of at least 30 ms (its heartbeats go
/// every third of it), at most a day.
pub(crate) fn parse_lease(value: &str) -> Result<Duration, String> {
    match humantime::parse_duration(value) {
        Ok(d) if d < Duration::from_millis(30) => Err("at least 30ms".into()),
        Ok(d) if d > Duration::from_secs(86_400) => Err("at most a day (24h)".into()),
        Ok(d) => Ok(d),
        Err(e) => Err(format!("expected a duration such as 3s or 500ms ({e})")),
    }
}

/// Makes a path absolute against the current directory, without resolving links
/// (the file may not exist yet).
pub(crate) fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn policy_flag_accepts_scripts_and_models() {
        assert_eq!(
            parse_policy("script:a/b.json"),
            Ok(PolicyArg::Script("a/b.json".into()))
        );
        assert!(parse_policy("script:").is_err());
        assert_eq!(
            parse_policy("openai:gpt-4o"),
            Ok(PolicyArg::Model {
                provider: agentry_models::Provider::OpenAi,
                model: "gpt-4o".into()
            })
        );
        assert_eq!(
            parse_policy("anthropic:claude-x"),
            Ok(PolicyArg::Model {
                provider: agentry_models::Provider::Anthropic,
                model: "claude-x".into()
            })
        );
        let err = parse_policy("openai:").unwrap_err();
        assert!(err.contains("no model name"), "{err}");
        let err = parse_policy("gemini:x").unwrap_err();
        assert!(err.contains("openai:MODEL"), "{err}");
        assert!(parse_policy("plan.json").is_err());
    }

    #[test]
    fn fallback_flag_names_a_model_and_optionally_its_server() {
        use agentry_models::Provider;
        assert_eq!(
            parse_fallback("anthropic:claude-x"),
            Ok(FallbackArg {
                provider: Provider::Anthropic,
                model: "claude-x".into(),
                base_url: None
            })
        );
        assert_eq!(
            parse_fallback("openai:m=http://127.0.0.1:9/v1?a=b"),
            Ok(FallbackArg {
                provider: Provider::OpenAi,
                model: "m".into(),
                base_url: Some("http://127.0.0.1:9/v1?a=b".into())
            })
        );
        assert!(
            parse_fallback("openai:m=127.0.0.1:9")
                .unwrap_err()
                .contains("http://")
        );
        assert!(
            parse_fallback("gemini:x")
                .unwrap_err()
                .contains("openai:MODEL")
        );
        assert!(parse_fallback("script:a.json").is_err());
        assert!(parse_fallback("openai:").is_err());
    }

    #[test]
    fn decide_flag_names_call_and_decision() {
        assert_eq!(
            parse_decision("c1=happened"),
            Ok(SettleArg {
                call_id: "c1".into(),
                settlement: Settlement::Happened
            })
        );
        assert_eq!(
            parse_decision("a=b=retry"),
            Err("unknown decision \"b=retry\": expected happened, retry or skip".into())
        );
        assert!(parse_decision("c1").is_err());
        assert!(parse_decision("=skip").is_err());
    }

    #[test]
    fn lease_flag_is_a_duration_between_30ms_and_a_day() {
        assert_eq!(parse_lease("3s"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_lease("500ms"), Ok(Duration::from_millis(500)));
        assert!(parse_lease("10ms").unwrap_err().contains("at least 30ms"));
        assert!(parse_lease("2d").unwrap_err().contains("at most a day"));
        assert!(parse_lease("soon").unwrap_err().contains("such as 3s"));
    }

    #[test]
    fn deadline_flag_parses_humantime() {
        assert_eq!(parse_deadline("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_deadline("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_deadline("0s").is_err());
        assert!(parse_deadline("9999999999999999999s").is_err());
        assert!(parse_deadline("soon").is_err());
    }

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}

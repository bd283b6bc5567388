//! Command-line arguments and dispatch.

use std::path::PathBuf;

use clap::{Parser, ValueEnum};

use crate::harness::{BenchResult, Options};
use crate::report::Report;
use crate::workloads;

/// Which benchmark to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// Per-step overhead of one agent (M = 10,000), with its floor ratio.
    W1,
    /// N agents × M steps started at once (1,000 × 20).
    W2,
    /// S parallel steps of K `sleep_echo` calls (5 × 8).
    W3,
    /// Cancellation of a subprocess tool at a 200 ms run deadline.
    W4,
    /// W1's step on bare tokio channels, no runtime.
    Floor,
    /// W1's step in agentry's actor shape (a conductor and four actors, three
    /// round trips and a cast per step) on bare ractor actors.
    #[value(name = "actor-floor")]
    ActorFloor,
    /// N agents × M steps of the actor floor at once (1,000 × 20): time and
    /// memory per agent of the shape alone.
    #[value(name = "actor-floor-w2")]
    ActorFloorW2,
    /// Deadline → whole process group gone, over R runs (issue 3).
    Cancel,
    /// One step of K calls sleeping 50 ms each, over R runs (issue 3).
    Parallel,
    /// W1 (M = 2,000) in memory, on a SQLite store with `Strict` and with
    /// `Grouped` durability, in one process.
    Durable,
    /// N agents × M steps at once (100 × 20), the same three ways.
    #[value(name = "durable-w2")]
    DurableW2,
    /// Spawn-to-exit of `true` with the sandbox off and on (issue 34), over R runs (200).
    Sandbox,
    /// Hibernation (issue 35): N event-driven agents (2,000) hibernated, RSS
    /// per hibernated and per awake sleeping agent, M messages (1,000) to
    /// random hibernated agents with their wake-and-answer latency.
    Idle,
}

impl Workload {
    /// The name on the command line and in the report (`w1`, `durable-w2`, ...).
    pub fn name(self) -> String {
        self.to_possible_value().map_or_else(
            || format!("{self:?}").to_lowercase(),
            |v| v.get_name().to_string(),
        )
    }
}

/// `agentry-bench <workload> [options]`: prints exactly one JSON line.
#[derive(Debug, Parser)]
#[command(name = "agentry-bench", version, about)]
pub struct Args {
    /// The workload.
    #[arg(value_enum)]
    pub workload: Workload,
    /// Steps per agent (W1: 10000, W2: 20, floor: 10000, durable: 2000,
    /// durable-w2: 20); idle: messages (1000).
    #[arg(long)]
    pub m: Option<u64>,
    /// Agents (W2: 1000, durable-w2: 100, idle: 2000).
    #[arg(long)]
    pub n: Option<u64>,
    /// Calls per parallel step (W3, parallel: 8).
    #[arg(long)]
    pub k: Option<u64>,
    /// Parallel steps (W3: 5).
    #[arg(long)]
    pub steps: Option<u64>,
    /// Repetitions (cancel: 100, parallel: 10, sandbox: 200).
    #[arg(long)]
    pub runs: Option<u64>,
    /// Write W1's JSONL trace to this file.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// W4 through agentry's process tools: `sh -c 'sleep 10 & sleep 10 & wait'`.
    #[arg(long)]
    pub grandchildren: bool,
    /// W4: the tool also kills its child when the call's cancel token fires.
    #[arg(long)]
    pub watch_cancel: bool,
    /// Run deadline in ms (W4: 200, cancel: 100).
    #[arg(long)]
    pub deadline_ms: Option<u64>,
    /// W1/W2: run with `events_from_start = false` (no subscriber, so no
    /// event is built or buffered); the default is the embedder's default.
    #[arg(long)]
    pub events_off: bool,
    /// Tokio worker threads.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// W2: abort once the process's RSS passes this many MiB.
    #[arg(long, default_value_t = 8_192.0)]
    pub max_rss_mib: f64,
    /// W2: abort after this many seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout_s: u64,
    /// durable, durable-w2: create the stores' temporary directory here
    /// (default: the current directory, so its file system is measured).
    #[arg(long)]
    pub store_dir: Option<PathBuf>,
    /// durable, durable-w2: commit to this Postgres database
    /// (`postgres://user:password@host:port/db`) instead of a SQLite file.
    #[arg(long)]
    pub store_url: Option<String>,
    /// durable, durable-w2: keep the store files (their directory is named in
    /// the notes) instead of deleting them at the end.
    #[arg(long)]
    pub keep_store: bool,
    /// durable, durable-w2: measure only this mode (for profiling; no ratios).
    #[arg(long, value_enum)]
    pub only: Option<crate::workloads::Mode>,
    /// idle: the store's `synchronous` (`full`, the default: every commit
    /// fsynced; `normal`: WAL fsynced at checkpoints, a commit survives the
    /// process's crash but not the machine's).
    #[arg(long, value_enum, default_value_t = StoreSync::Full)]
    pub sync: StoreSync,
    /// W3: the tool and its floor sleep precisely (tokio's timer, then a
    /// nanosleep for the last 2 ms) instead of on tokio's 1 ms timer alone.
    #[arg(long)]
    pub precise_sleep: bool,
    /// W1: after the usual run (no subscriber), run W1 again with its
    /// OpenTelemetry spans exported over OTLP/HTTP to a local receiver, and
    /// report its time per step and the ratio to the first.
    #[arg(long)]
    pub otlp: bool,
}

impl Args {
    /// The options, with each workload's defaults filled in.
    pub fn options(&self) -> Options {
        let m_default = match self.workload {
            Workload::W2 | Workload::DurableW2 | Workload::ActorFloorW2 => 20,
            Workload::Durable => 2_000,
            Workload::Idle => 1_000,
            Workload::W1
            | Workload::W3
            | Workload::W4
            | Workload::Floor
            | Workload::ActorFloor
            | Workload::Cancel
            | Workload::Parallel
            | Workload::Sandbox => 10_000,
        };
        let n_default = match self.workload {
            Workload::DurableW2 => 100,
            Workload::Idle => 2_000,
            Workload::W1
            | Workload::W2
            | Workload::W3
            | Workload::W4
            | Workload::Floor
            | Workload::ActorFloor
            | Workload::ActorFloorW2
            | Workload::Cancel
            | Workload::Parallel
            | Workload::Durable
            | Workload::Sandbox => 1_000,
        };
        let cancel = self.workload == Workload::Cancel;
        let runs_default = match self.workload {
            Workload::Cancel => 100,
            Workload::Sandbox => 200,
            Workload::W1
            | Workload::W2
            | Workload::W3
            | Workload::W4
            | Workload::Floor
            | Workload::ActorFloor
            | Workload::ActorFloorW2
            | Workload::Parallel
            | Workload::Durable
            | Workload::DurableW2
            | Workload::Idle => 10,
        };
        let deadline_default = if cancel { 100 } else { 200 };
        Options {
            m: self.m.unwrap_or(m_default).max(1),
            n: self.n.unwrap_or(n_default).max(1),
            k: self.k.unwrap_or(8).max(1),
            steps: self.steps.unwrap_or(5).max(1),
            runs: self.runs.unwrap_or(runs_default).max(1),
            trace: self.trace.clone(),
            grandchildren: self.grandchildren,
            watch_cancel: self.watch_cancel,
            deadline_ms: self.deadline_ms.unwrap_or(deadline_default),
            max_rss_mib: self.max_rss_mib,
            timeout_s: self.timeout_s,
            threads: self.threads.max(1),
            events_off: self.events_off,
            store_dir: self.store_dir.clone(),
            store_url: self.store_url.clone(),
            keep_store: self.keep_store,
            only: self.only,
            sync: match self.sync {
                StoreSync::Full => agentry::store::SyncMode::Full,
                StoreSync::Normal => agentry::store::SyncMode::Normal,
            },
            precise_sleep: self.precise_sleep,
            otlp: self.otlp,
        }
    }
}

/// Runs `workload` inside a tokio runtime (multi-thread, `opts.threads` workers).
pub fn run(workload: Workload, opts: &Options) -> BenchResult<Report> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(opts.threads)
        .enable_all()
        .build()?;
    rt.block_on(async {
        match workload {
            Workload::W1 => workloads::w1(opts).await,
            Workload::W2 => workloads::w2(opts).await,
            Workload::W3 => workloads::w3(opts).await,
            Workload::W4 => workloads::w4(opts).await,
            Workload::Floor => workloads::floor(opts).await,
            Workload::ActorFloor => workloads::actor_floor(opts).await,
            Workload::ActorFloorW2 => workloads::actor_floor_w2(opts).await,
            Workload::Cancel => workloads::cancel(opts).await,
            Workload::Parallel => workloads::parallel(opts).await,
            Workload::Durable => workloads::durable(opts).await,
            Workload::DurableW2 => workloads::durable_w2(opts).await,
            Workload::Sandbox => workloads::sandbox(opts).await,
            Workload::Idle => workloads::idle(opts).await,
        }
    })
}

/// `--sync`: the store's `synchronous` ([`agentry::store::SyncMode`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StoreSync {
    /// Every commit fsynced.
    Full,
    /// The WAL fsynced at its checkpoints.
    Normal,
}

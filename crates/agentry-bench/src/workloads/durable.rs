//! Durable runs: W1 (`durable`) and W2-style N agents (`durable-w2`) measured
//! three ways in one process — in memory (no store), on a fresh SQLite store
//! with [`Durability::Strict`], and on another fresh one with
//! [`Durability::Grouped`] — so the cost of durability is a ratio to the
//! in-memory figure of the same process.
//!
//! The stores live in a temporary directory under `--store-dir` (default: the
//! current directory), so they are on the working directory's file system, not
//! on a RAM disk; the report names that file system. Each store is wrapped in a
//! [`CountingStore`] that counts commits (SQLite transactions, one WAL fsync
//! each with `synchronous = FULL`) and the time the writer thread spends in
//! them. After the timed region every stored run is read back and checked.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use agentry::store::{LedgerState, RunSummary, StoreError, StoredRun, Write};
use agentry::{
    Effect, RunHandle, RunOutcome, RunStatus, Runtime, SqliteStore, StopReason, Store, Tool,
};

use crate::harness::{BenchResult, Mode, Options, check_add, config, warm_up, workdir};
use crate::model::AddModel;
use crate::procfs::{cpu_time, mount_of, peak_rss_mib};
use crate::report::Report;
use crate::tools::{self, AddTool};

/// The in-memory figure over the durable one must stay under this for
/// `Grouped` (BENCHMARKS.md's target).
const GROUPED_TARGET_SLOWDOWN: f64 = 5.0;

/// A [`Store`] that counts what passes through it: commits, writes, and the
/// time spent inside [`Store::commit`] (on the runtime's writer thread).
pub struct CountingStore {
    inner: Box<dyn Store>,
    commits: AtomicU64,
    writes: AtomicU64,
    commit_ns: AtomicU64,
}

impl std::fmt::Debug for CountingStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountingStore")
            .field("inner", &self.inner.location())
            .field("counts", &self.counts())
            .finish()
    }
}

/// What a [`CountingStore`] counted so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Non-empty commits (transactions).
    pub commits: u64,
    /// Writes in them.
    pub writes: u64,
    /// Nanoseconds spent in them.
    pub commit_ns: u64,
}

impl Counts {
    /// What was counted between `earlier` and `self`.
    pub fn since(self, earlier: Counts) -> Counts {
        Counts {
            commits: self.commits.saturating_sub(earlier.commits),
            writes: self.writes.saturating_sub(earlier.writes),
            commit_ns: self.commit_ns.saturating_sub(earlier.commit_ns),
        }
    }
}

impl CountingStore {
    /// Wraps `inner`.
    pub fn new(inner: impl Store) -> Self {
        CountingStore {
            inner: Box::new(inner),
            commits: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            commit_ns: AtomicU64::new(0),
        }
    }

    /// The counts so far.
    pub fn counts(&self) -> Counts {
        Counts {
            commits: self.commits.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            commit_ns: self.commit_ns.load(Ordering::Relaxed),
        }
    }
}

impl Store for CountingStore {
    fn commit(&self, writes: &[Write]) -> Result<(), StoreError> {
        if writes.is_empty() {
            // A flush: SqliteStore does nothing for it either.
            return self.inner.commit(writes);
        }
        let t0 = Instant::now();
        let result = self.inner.commit(writes);
        let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.commit_ns.fetch_add(ns, Ordering::Relaxed);
        self.commits.fetch_add(1, Ordering::Relaxed);
        self.writes
            .fetch_add(writes.len() as u64, Ordering::Relaxed);
        result
    }

    fn load(&self, run_id: &str) -> Result<Option<StoredRun>, StoreError> {
        self.inner.load(run_id)
    }

    fn runs(&self) -> Result<Vec<RunSummary>, StoreError> {
        self.inner.runs()
    }

    fn location(&self) -> String {
        self.inner.location()
    }
}

/// One mode's figures.
#[derive(Debug, Clone, Default)]
struct Measured {
    wall_s: f64,
    cpu_s: f64,
    start_s: f64,
    steps: u64,
    counts: Counts,
    store_mib: f64,
}

impl Measured {
    fn steps_per_s(&self) -> f64 {
        self.steps as f64 / self.wall_s
    }
}

/// A runtime for `mode`, warmed up (untimed), with its store if it has one.
async fn set_up(
    mode: Mode,
    store_dir: &Path,
    store_url: Option<&str>,
    run_dir: &Path,
) -> BenchResult<(Runtime, Option<Arc<CountingStore>>)> {
    let runtime = Runtime::new(tools::registry(None)?);
    let (runtime, store) = match mode.durability() {
        None => (runtime, None),
        Some(durability) => {
            let path = store_dir.join(format!("{}.sqlite", mode.name()));
            let store = Arc::new(match store_url {
                Some(url) => CountingStore::new(agentry::PostgresStore::connect(url)?),
                None => CountingStore::new(SqliteStore::open(&path)?),
            });
            let dyn_store: Arc<dyn Store> = Arc::clone(&store) as Arc<dyn Store>;
            (runtime.with_store(dyn_store, durability)?, Some(store))
        }
    };
    warm_up(&runtime, run_dir).await?;
    if store.is_some() {
        // Everything the warm-up queued lands before the timed region.
        runtime.runs().await?;
    }
    Ok((runtime, store))
}

/// Bytes of the store file and its `-wal` companion, in MiB.
fn store_mib(store_dir: &Path, mode: Mode) -> f64 {
    let base = store_dir.join(format!("{}.sqlite", mode.name()));
    let mut wal = base.clone().into_os_string();
    wal.push("-wal");
    let len = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
    (len(&base) + len(Path::new(&wal))) as f64 / (1024.0 * 1024.0)
}

/// The stored copy of a finished M-step `add` run: stopped `done`, the whole
/// session (2M entries) and one ledger row per call (M − 1), each with its
/// outcome.
fn check_stored(stored: Option<StoredRun>, m: u64) -> Result<(), String> {
    let Some(run) = stored else {
        return Err("the run is not in the store".into());
    };
    let mut wrong = Vec::new();
    match &run.checkpoint {
        Some(cp)
            if cp.snapshot.status == RunStatus::Stopped
                && cp.snapshot.control.stop_reason == Some(StopReason::Done) => {}
        Some(cp) => wrong.push(format!(
            "stored status {:?}, stop reason {:?}",
            cp.snapshot.status, cp.snapshot.control.stop_reason
        )),
        None => wrong.push("no checkpoint stored".into()),
    }
    if run.session.len() as u64 != 2 * m {
        wrong.push(format!("{} session entries stored", run.session.len()));
    }
    let outcomes = run
        .ledger
        .iter()
        .filter(|e| e.state == LedgerState::Outcome && e.outcome.is_some())
        .count() as u64;
    if run.ledger.len() as u64 != m - 1 || outcomes != m - 1 {
        wrong.push(format!(
            "{} ledger rows stored, {outcomes} with an outcome",
            run.ledger.len()
        ));
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!("run {}: {}", run.record.run_id, wrong.join(", ")))
    }
}

/// Runs `n` agents of `m` steps on a fresh runtime for `mode` and checks every
/// outcome, and every stored run. Failed checks go to `report`.
async fn measure(
    mode: Mode,
    n: usize,
    m: u64,
    opts: &Options,
    store_dir: &Path,
    report: &mut Report,
) -> BenchResult<Measured> {
    let dir = workdir()?;
    let (runtime, store) = set_up(mode, store_dir, opts.store_url.as_deref(), dir.path()).await?;
    let mut cfg = config(dir.path(), m);
    cfg.events_from_start = !opts.events_off;
    let (probes, models) = AddModel::many(n, m);
    let counts0 = store.as_ref().map(|s| s.counts()).unwrap_or_default();

    let cpu0 = cpu_time();
    let t0 = Instant::now();
    let mut outcomes: Vec<RunOutcome> = Vec::with_capacity(n);
    let start_s;
    if n == 1 {
        for model in models {
            outcomes.push(runtime.run(cfg.clone(), model).await?);
        }
        start_s = 0.0;
    } else {
        let mut handles: Vec<RunHandle> = Vec::with_capacity(n);
        for model in models {
            handles.push(runtime.start(cfg.clone(), model).await?);
        }
        start_s = t0.elapsed().as_secs_f64();
        for h in &handles {
            outcomes.push(h.wait().await?);
        }
    }
    let wall_s = t0.elapsed().as_secs_f64();
    let cpu_s = cpu_time().saturating_sub(cpu0).as_secs_f64();
    let counts = store
        .as_ref()
        .map(|s| s.counts().since(counts0))
        .unwrap_or_default();

    let mut failed = 0;
    let mut first = None;
    for (outcome, probe) in outcomes.iter().zip(&probes) {
        if let Err(e) = check_add(outcome, probe, m) {
            failed += 1;
            first.get_or_insert(e);
        }
    }
    if let Some(store) = &store {
        // Whatever is still queued lands, then every run is read back.
        runtime.runs().await?;
        for outcome in &outcomes {
            if let Err(e) = check_stored(store.load(&outcome.run_id)?, m) {
                failed += 1;
                first.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first {
        report.fail(format!(
            "{}: {failed} check(s) failed; first: {e}",
            mode.name()
        ));
    }
    drop(runtime);
    Ok(Measured {
        wall_s,
        cpu_s,
        start_s,
        steps: n as u64 * m,
        counts,
        // A database's size is the server's to say.
        store_mib: match opts.store_url {
            Some(_) => 0.0,
            None => store.map_or(0.0, |_| store_mib(store_dir, mode)),
        },
    })
}

/// `durable`: W1 (one agent, M steps; M = 2,000 by default) in memory, with
/// `Strict` and with `Grouped` durability, in that order, in this process.
pub async fn durable(opts: &Options) -> BenchResult<Report> {
    three_ways("durable", 1, opts).await
}

/// `durable-w2`: N agents × M steps started at once (100 × 20 by default),
/// the same three ways: what concurrent runs gain from sharing fsyncs.
pub async fn durable_w2(opts: &Options) -> BenchResult<Report> {
    three_ways("durable-w2", opts.n as usize, opts).await
}

/// What one mode measured.
struct Way {
    mode: Mode,
    measured: Measured,
}

/// Measures every mode asked for, one after the other in this process, on
/// stores in one temporary directory, and reports each and their ratios.
async fn three_ways(workload: &str, n: usize, opts: &Options) -> BenchResult<Report> {
    let m = opts.m;
    let parent = match &opts.store_dir {
        Some(dir) => dir.clone(),
        None => std::env::current_dir()?,
    };
    let store_tmp = tempfile::Builder::new()
        .prefix(".agentry-bench-store")
        .tempdir_in(&parent)?;
    let store_dir = store_tmp.path();

    let mut report = Report::new(workload);
    describe(&mut report, n, opts, &parent, store_dir);
    let modes = opts
        .only
        .map_or_else(|| Mode::ALL.to_vec(), |mode| vec![mode]);
    if opts.only.is_some() {
        report.note("one mode only (--only): no ratios");
    }
    let mut ways = Vec::with_capacity(modes.len());
    for mode in modes {
        let measured = measure(mode, n, m, opts, store_dir, &mut report).await?;
        ways.push(Way { mode, measured });
    }

    report_ratios(&mut report, &ways);
    for way in &ways {
        report_way(&mut report, way, n);
    }
    report.metric_f("peak_rss_mib", peak_rss_mib(), 1);
    if opts.keep_store {
        let kept = store_tmp.keep();
        report.note(format!("stores kept in {}", kept.display()));
    }
    Ok(report)
}

/// The parameters, where the stores are (and a note when that is a RAM file
/// system), and the check that W1's `add` is still read-only.
fn describe(report: &mut Report, n: usize, opts: &Options, parent: &Path, store_dir: &Path) {
    let mount = mount_of(store_dir);
    if n > 1 {
        report.param("n", n as u64);
    }
    report.param("m", opts.m).param("threads", opts.threads);
    if opts.events_off {
        report.param("events_from_start", false);
    }
    report
        .param(
            "store_fs",
            mount
                .as_ref()
                .map_or_else(|| "unknown".to_string(), ToString::to_string),
        )
        .param("store_dir", parent.display().to_string())
        .param(
            "store",
            if opts.store_url.is_some() {
                "postgres"
            } else {
                "sqlite"
            },
        );
    if mount
        .as_ref()
        .is_some_and(|mt| matches!(mt.fstype.as_str(), "tmpfs" | "ramfs"))
    {
        report.note("the store is on a RAM file system: fsync costs nothing there");
    }
    // W1's `add` must stay read-only: it is what lets Grouped skip the wait.
    let add = AddTool.contract();
    if add.effect != Effect::ReadOnly {
        report.fail(format!("the add tool is {:?}, not read_only", add.effect));
    }
}

/// Steps per second of every mode, then each durable mode's over the in-memory one.
fn report_ratios(report: &mut Report, ways: &[Way]) {
    let steps_per_s = |want: Mode| {
        ways.iter()
            .find(|way| way.mode == want)
            .map(|way| way.measured.steps_per_s())
    };
    for way in ways {
        let name = way.mode.name();
        report.metric_f(
            &format!("steps_per_s_{name}"),
            way.measured.steps_per_s(),
            0,
        );
    }
    if let Some(memory) = steps_per_s(Mode::Memory) {
        for mode in [Mode::Strict, Mode::Grouped] {
            if let Some(durable) = steps_per_s(mode) {
                report.metric_f(&format!("ratio_{}", mode.name()), durable / memory, 4);
            }
        }
        if let Some(grouped) = steps_per_s(Mode::Grouped) {
            report.metric(
                "grouped_within_5x",
                memory / grouped <= GROUPED_TARGET_SLOWDOWN,
            );
        }
    }
}

/// One mode's time figures, and for a store its commits and size.
fn report_way(report: &mut Report, way: &Way, n: usize) {
    let (name, f) = (way.mode.name(), &way.measured);
    let steps = f.steps as f64;
    report
        .metric_f(&format!("wall_s_{name}"), f.wall_s, 6)
        .metric_f(&format!("us_per_step_{name}"), f.wall_s * 1e6 / steps, 3)
        .metric_f(&format!("cpu_us_per_step_{name}"), f.cpu_s * 1e6 / steps, 3);
    if n > 1 {
        report.metric_f(&format!("start_s_{name}"), f.start_s, 6);
    }
    if way.mode == Mode::Memory {
        return;
    }
    let c = f.counts;
    let commits = c.commits.max(1) as f64;
    report
        .metric(&format!("commits_{name}"), c.commits)
        .metric_f(&format!("steps_per_commit_{name}"), steps / commits, 2)
        .metric_f(
            &format!("writes_per_commit_{name}"),
            c.writes as f64 / commits,
            2,
        )
        .metric_f(
            &format!("us_per_commit_{name}"),
            c.commit_ns as f64 / 1e3 / commits,
            1,
        )
        .metric_f(
            &format!("commit_busy_pct_{name}"),
            c.commit_ns as f64 / 1e9 / f.wall_s * 100.0,
            1,
        )
        .metric_f(&format!("store_mib_{name}"), f.store_mib, 2);
}

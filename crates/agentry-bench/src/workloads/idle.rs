//! `idle` (issue 35, hibernation): N event-driven agents on a SQLite store
//! created and put to sleep until they hibernate; the RSS each hibernated
//! agent holds; then M messages, each to a random hibernated agent, each
//! answered (woken from the store, one step, asleep again) with its latency;
//! beside it the RSS of an agent that sleeps awake (no hibernation).

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentry::protocol::event::RunEvent;
use agentry::{
    Decision, Driver, Policy, PolicyContext, PolicyOutput, RunConfig, RunHandle, Runtime,
    SqliteStore, Store,
};

use crate::harness::{BenchResult, Mode, Options, config, ms, workdir};
use crate::procfs::rss_mib;
use crate::report::{Report, quantile};

/// How long an agent sleeps awake before it hibernates.
const HIBERNATE_AFTER: Duration = Duration::from_millis(20);
/// Agents started at once (their records share group commits).
const BATCH: usize = 500;
/// Awake sleeping agents measured for the comparison (at most N).
const AWAKE: u64 = 1_000;

/// Answers every message with a short text (one step, then asleep).
#[derive(Debug, Default)]
struct Answer;

#[agentry::async_trait]
impl Policy for Answer {
    fn name(&self) -> String {
        "answer".into()
    }

    async fn decide(&mut self, _ctx: PolicyContext<'_>) -> PolicyOutput {
        PolicyOutput::new(
            Decision::Final {
                answer: "ok".into(),
            },
            "",
        )
    }
}

fn agent(workdir: &std::path::Path, hibernate: bool) -> RunConfig {
    let mut c = config(workdir, u64::MAX);
    c.driver = Driver::Events;
    c.events_from_start = false;
    c.hibernate_after = hibernate.then_some(HIBERNATE_AFTER);
    c
}

/// Starts `n` agents, `BATCH` at a time; with `hibernate`, each batch is
/// hibernated before the next starts (so few are ever awake at once).
async fn start_agents(
    runtime: &Runtime,
    workdir: &std::path::Path,
    n: u64,
    hibernate: bool,
    until: Instant,
) -> BenchResult<Vec<RunHandle>> {
    let mut all = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
    let mut left = n;
    while left > 0 {
        let take = left.min(BATCH as u64);
        left -= take;
        let starts = (0..take).map(|_| {
            let runtime = runtime.clone();
            let config = agent(workdir, hibernate);
            async move { runtime.start(config, Answer).await }
        });
        let batch = futures_join(starts).await?;
        if hibernate {
            for h in &batch {
                while !h.hibernated() {
                    if Instant::now() > until {
                        return Err("agents did not hibernate in time".into());
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
        }
        all.extend(batch);
    }
    Ok(all)
}

async fn futures_join<F>(starts: impl Iterator<Item = F>) -> BenchResult<Vec<RunHandle>>
where
    F: std::future::Future<Output = Result<RunHandle, agentry::RuntimeError>> + Send + 'static,
{
    let tasks: Vec<_> = starts.map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await??);
    }
    Ok(out)
}

/// The process's RSS once the allocator has returned its free memory
/// (glibc's `malloc_trim`; the default allocator of this binary).
fn settled_rss_mib() -> f64 {
    #[cfg(all(target_os = "linux", target_env = "gnu", not(feature = "mimalloc")))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
    rss_mib()
}

/// Heap bytes live now (with the counting allocator only).
fn live_bytes() -> Option<u64> {
    crate::alloc_count::counts().map(|c| c.live)
}

fn per_agent(before: Option<u64>, after: Option<u64>, n: u64) -> Option<f64> {
    Some(after?.saturating_sub(before?) as f64 / n.max(1) as f64)
}

/// A small xorshift: which agent the next message goes to.
fn next_index(state: &mut u64, n: usize) -> usize {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    usize::try_from(*state % n as u64).unwrap_or(0)
}

/// Sends one message to `h` (hibernated) and waits until its step is
/// applied (woken, decided, recorded); the latency.
async fn answer_one(h: &RunHandle, until: Instant) -> BenchResult<Duration> {
    let mut events = h.subscribe();
    let t0 = Instant::now();
    h.send_message("ping")?;
    // The step's budget spend is its last event: decided, recorded, spent.
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let record = tokio::time::timeout(left, events.recv()).await??;
        if let RunEvent::BudgetSpent { .. } = record.event {
            return Ok(t0.elapsed());
        }
    }
}

/// The `idle` workload.
pub async fn idle(opts: &Options) -> BenchResult<Report> {
    // Size: one measured sequence (awake agents, hibernated agents, messages) reported in order.
    let mut report = Report::new("idle");
    let mode = opts.only.unwrap_or(Mode::Strict);
    let durability = mode
        .durability()
        .ok_or("idle needs a store: --only strict or --only grouped")?;
    let until = Instant::now() + Duration::from_secs(opts.timeout_s);
    let dir = match &opts.store_dir {
        Some(d) => tempfile::Builder::new()
            .prefix("agentry-idle-")
            .tempdir_in(d)?,
        None => tempfile::Builder::new()
            .prefix("agentry-idle-")
            .tempdir_in(".")?,
    };
    let work = workdir()?;
    let options = agentry::store::SqliteOptions {
        sync: opts.sync,
        ..agentry::store::SqliteOptions::default()
    };
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open_with(dir.path().join("idle.db"), options)?);
    let runtime = Runtime::with_builtins()?
        .with_store(store, durability)?
        .with_wake_policy(|_: &RunConfig| Ok(Box::new(Answer)));
    report
        .param("n", opts.n)
        .param("m", opts.m)
        .param(
            "store",
            format!(
                "SQLite WAL, synchronous={}, {}",
                match opts.sync {
                    agentry::store::SyncMode::Full => "FULL",
                    agentry::store::SyncMode::Normal => "NORMAL",
                },
                mode.name()
            ),
        )
        .param("hibernate_after_ms", ms(HIBERNATE_AFTER));

    // Hibernated agents first, in a fresh process; each figure is the RSS
    // it adds once the allocator has given back what it holds free.
    let before = settled_rss_mib();
    let live_before = live_bytes();
    let t0 = Instant::now();
    let agents = start_agents(&runtime, work.path(), opts.n, true, until).await?;
    let created = t0.elapsed();
    let hibernated_kib = (settled_rss_mib() - before) * 1024.0 / opts.n as f64;
    let hibernated_live = per_agent(live_before, live_bytes(), opts.n);

    let awake_n = opts.n.min(AWAKE);
    let before = settled_rss_mib();
    let live_before = live_bytes();
    let awake = start_agents(&runtime, work.path(), awake_n, false, until).await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let awake_kib = (settled_rss_mib() - before) * 1024.0 / awake_n as f64;
    let awake_live = per_agent(live_before, live_bytes(), awake_n);
    if let (Some(h), Some(a)) = (hibernated_live, awake_live) {
        // The counting allocator's figures: heap bytes each agent holds,
        // without the allocator's free pages and fragmentation.
        report
            .metric_f("hibernated_live_bytes_per_agent", h, 0)
            .metric_f("awake_sleeping_live_bytes_per_agent", a, 0);
    }
    report
        .metric_f("awake_sleeping_kib_per_agent", awake_kib, 2)
        .metric_f("hibernated_kib_per_agent", hibernated_kib, 3)
        .metric_f("create_and_hibernate_s", created.as_secs_f64(), 2)
        .metric_f(
            "memory_ratio_awake_over_hibernated",
            awake_kib / hibernated_kib.max(1e-9),
            1,
        );

    // The floor: the same message answered by an agent that sleeps awake.
    let mut seed = 0x2545_F491_4F6C_DD1D_u64;
    let mut floor = Vec::new();
    for _ in 0..opts.m.min(AWAKE) {
        let h = &awake[next_index(&mut seed, awake.len())];
        floor.push(ms(answer_one(h, until).await?));
    }
    floor.sort_by(f64::total_cmp);
    report
        .metric_f("awake_answer_p50_ms", quantile(&floor, 0.5), 3)
        .metric_f("awake_answer_p99_ms", quantile(&floor, 0.99), 3);
    for h in &awake {
        h.abort();
    }
    drop(awake);

    let mut seed = 0x9E37_79B9_7F4A_7C15_u64;
    let mut lat = Vec::with_capacity(usize::try_from(opts.m).unwrap_or(0));
    for _ in 0..opts.m {
        let h = loop {
            let h = &agents[next_index(&mut seed, agents.len())];
            if h.hibernated() {
                break h;
            }
            if Instant::now() > until {
                return Err("no hibernated agent to message".into());
            }
        };
        lat.push(ms(answer_one(h, until).await?));
    }
    lat.sort_by(f64::total_cmp);
    let p50 = quantile(&lat, 0.5);
    let p99 = quantile(&lat, 0.99);
    report
        .metric_f("wake_answer_p50_ms", p50, 3)
        .metric_f("wake_answer_p99_ms", p99, 3)
        .metric_f("hibernated_kib_target", 2.0, 1);
    if hibernated_kib >= 2.0 {
        report.note(format!(
            "RSS per hibernated agent {hibernated_kib:.2} KiB is over the 2 KiB target"
        ));
    }
    if p50 >= 1.0 || p99 >= 5.0 {
        report.note(format!(
            "wake latency p50 {p50:.3} ms / p99 {p99:.3} ms is over the 1 ms / 5 ms target"
        ));
    }
    drop(agents);
    Ok(report)
}

//! Durable runs on the command line: `--store` on `run`, `agentry resume`,
//! `agentry runs`, and driving a run until it stops or parks.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentry::protocol::event::RunEvent;
use agentry::protocol::state::PendingApproval;
use agentry::{
    RunHandle, RunOutcome, Runtime, RuntimeError, Script, Settlement, SqliteStore, Store,
};

use crate::run::{Interrupts, RunError, absolute, model_policy, shutdown_on_interrupt};
use crate::{PolicyArg, ResumeArgs, RunsArgs, parse_policy};

/// How `run` or `resume` ended.
#[derive(Debug)]
pub(crate) enum Finished {
    /// The run stopped.
    Outcome(Box<RunOutcome>),
    /// A durable run parked on calls a crash interrupted; it stays in the store.
    Parked(Parked),
}

/// A durable run waiting for `agentry resume --decide`.
#[derive(Debug)]
pub(crate) struct Parked {
    pub(crate) run_id: String,
    pub(crate) store: PathBuf,
    pub(crate) pending: Vec<PendingApproval>,
}

/// Opens (or creates) the SQLite store at `path`.
pub(crate) fn open_sqlite(path: &Path) -> Result<Arc<dyn Store>, RuntimeError> {
    Ok(Arc::new(SqliteStore::open(path)?))
}

/// `path`, if a store file is there: `resume` and `runs` never create one.
fn existing(path: PathBuf) -> Result<PathBuf, RuntimeError> {
    let why = match std::fs::metadata(&path) {
        Ok(meta) if meta.is_file() => return Ok(path),
        Ok(meta) if meta.is_dir() => {
            "it is a directory, not a store file (pass the store's file, e.g. DIR/runs.db)".into()
        }
        Ok(_) => "it is not a regular file".into(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "no such file".into(),
        Err(e) => e.to_string(),
    };
    Err(agentry::store::StoreError::Open {
        path: path.display().to_string(),
        message: why,
    }
    .into())
}

/// Waits for the run's outcome. A durable run that parks `awaiting_decision` on
/// a call settled in `decisions` is settled; on any other call the command
/// returns [`Finished::Parked`], leaving the run parked in the store (the park is
/// committed before the event that reports it).
pub(crate) async fn drive(
    handle: &RunHandle,
    decisions: &[(String, Settlement)],
    store: Option<&Path>,
) -> Result<Finished, RunError> {
    let Some(store) = store else {
        return handle
            .wait()
            .await
            .map(|o| Finished::Outcome(Box::new(o)))
            .map_err(RunError::Lost);
    };
    let mut events = handle.subscribe();
    let wait = handle.wait();
    tokio::pin!(wait);
    loop {
        tokio::select! {
            outcome = &mut wait => {
                return outcome.map(|o| Finished::Outcome(Box::new(o))).map_err(RunError::Lost);
            }
            event = events.recv() => {
                let call = match event {
                    Ok(record) => match record.event {
                        RunEvent::AwaitingDecision { call, .. } => call,
                        _ => continue,
                    },
                    // Lagged: check the state itself below.
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        match handle.pending_decisions().await.into_iter().next() {
                            Some(p) => p.call,
                            None => continue,
                        }
                    }
                    Err(_) => {
                        return wait.await.map(|o| Finished::Outcome(Box::new(o))).map_err(RunError::Lost);
                    }
                };
                match decisions.iter().find(|(id, _)| *id == call.id) {
                    Some((id, settlement)) => {
                        handle.settle(id, *settlement).await.map_err(RunError::Lost)?;
                    }
                    None => {
                        return Ok(Finished::Parked(Parked {
                            run_id: handle.run_id().to_string(),
                            store: store.to_path_buf(),
                            pending: handle.pending_decisions().await,
                        }));
                    }
                }
            }
        }
    }
}

/// `agentry resume RUN_ID --store FILE`.
pub(crate) async fn resume(args: ResumeArgs) -> Result<Finished, RunError> {
    let path = crate::store_or_default(args.store.as_ref())
        .and_then(existing)
        .map_err(RunError::BadInput)?;
    let store = open_sqlite(&path).map_err(RunError::BadInput)?;
    let config =
        agentry::RunConfig::from_store(&*store, &args.run_id).map_err(RunError::BadInput)?;
    // The task's own command tools are part of the stored configuration's world:
    // rebuild the registry from the task directory the run was started from.
    let runtime = match stored_task_dir(&config) {
        Some(dir) => agentry::TaskSpec::load(&dir)
            .and_then(|task| task.runtime())
            .map_err(RuntimeError::from),
        None => Runtime::with_builtins(),
    }
    .and_then(|r| r.with_store(store, args.durability.into()))
    .map_err(RunError::BadInput)?;
    let (policy_arg, base_url) = match &args.policy {
        Some(p) => (p.clone(), args.base_url.clone()),
        None => stored_policy(config.policy_spec.as_deref(), &args.run_id)?,
    };
    let base_url = args.base_url.clone().or(base_url);
    let (policy, children) = match &policy_arg {
        PolicyArg::Script(file) => {
            let script = Script::load(&absolute(file)).map_err(|e| RunError::BadInput(e.into()))?;
            let policy: Box<dyn agentry::Policy> = Box::new(script.into_policy());
            (policy, None)
        }
        PolicyArg::Model { provider, model } => {
            model_policy(*provider, model, base_url.as_deref()).await?
        }
    };
    let runtime = match children {
        Some(factory) => runtime.with_child_policy(factory),
        None => runtime,
    };
    let interrupt = Interrupts::listen()
        .ok()
        .map(|signals| tokio::spawn(shutdown_on_interrupt(runtime.clone(), signals)));
    let handle = runtime
        .resume_boxed(&args.run_id, policy)
        .await
        .map_err(RunError::BadInput)?;
    let finished = drive(&handle, &args.decide, Some(&path)).await;
    if let Some(task) = interrupt {
        task.abort();
    }
    finished
}

/// The task directory a stored run came from, if the CLI started it.
fn stored_task_dir(config: &agentry::RunConfig) -> Option<PathBuf> {
    config
        .policy_spec
        .as_deref()
        .and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok())
        .and_then(|v| v.get("task_dir")?.as_str().map(PathBuf::from))
        .filter(|d| d.join("task.toml").is_file())
}

/// The policy a stored run was started with (`run` records it as JSON).
fn stored_policy(
    spec: Option<&str>,
    run_id: &str,
) -> Result<(PolicyArg, Option<String>), RunError> {
    let missing = || {
        RunError::BadInput(RuntimeError::NotResumable {
            run_id: run_id.to_string(),
            message: "the store does not say which policy it ran with; pass --policy".into(),
        })
    };
    let value: serde_json::Value = spec
        .and_then(|s| serde_json::from_str(s).ok())
        .ok_or_else(missing)?;
    let policy = value
        .get("policy")
        .and_then(|p| p.as_str())
        .filter(|p| !p.is_empty())
        .ok_or_else(missing)?;
    let policy = parse_policy(policy).map_err(|m| {
        RunError::BadInput(RuntimeError::NotResumable {
            run_id: run_id.to_string(),
            message: format!("its stored policy {policy:?} is unusable ({m}); pass --policy"),
        })
    })?;
    let base_url = value
        .get("base_url")
        .and_then(|b| b.as_str())
        .map(str::to_string);
    Ok((policy, base_url))
}

/// `agentry runs --store FILE`.
pub(crate) fn list(args: &RunsArgs) -> Result<(), RuntimeError> {
    let path = existing(crate::store_or_default(args.store.as_ref())?)?;
    let store = SqliteStore::open(&path)?;
    let runs: Vec<_> = store
        .runs()?
        .into_iter()
        .filter(|r| args.all || r.unfinished())
        .collect();
    if args.json {
        println!("{}", serde_json::to_string(&runs).unwrap_or_default());
        return Ok(());
    }
    for r in &runs {
        let status = serde_json::to_value(r.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let reason = r.stop_reason.map(|s| s.to_string()).unwrap_or_default();
        println!("{}  {:<18} {:<22} {}", r.run_id, status, reason, r.task_id);
    }
    Ok(())
}

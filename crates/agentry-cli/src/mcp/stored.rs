//! `get_run` and `list_runs` over the server's store: runs another process
//! started, or this server before a restart. SQLite is blocking, so each
//! look-up runs on the blocking pool.

use std::path::PathBuf;

use agentry::RunHandle;
use serde_json::{Value, json};

use super::error::ArgError;

/// A stored run's status and what its last checkpoint says of its end.
pub(crate) async fn get(store: Option<PathBuf>, run_id: &str) -> Result<Value, ArgError> {
    let id = run_id.to_string();
    let missing = |store: Option<PathBuf>| ArgError::NoSuchRun {
        run_id: run_id.to_string(),
        store,
    };
    let Some(path) = store else {
        return Err(missing(None));
    };
    let at = path.clone();
    let loaded = tokio::task::spawn_blocking(move || {
        let store = crate::store::open_store(&at)?;
        store.load(&id).map_err(agentry::RuntimeError::from)
    })
    .await
    .map_err(|e| ArgError::Store(format!("reading the store failed: {e}")))?
    .map_err(|e| ArgError::Store(e.to_string()))?;
    let Some(stored) = loaded else {
        return Err(missing(Some(path)));
    };
    let checkpoint = stored.checkpoint.as_ref().map(|c| &c.snapshot);
    Ok(json!({
        "run_id": run_id,
        "task_id": stored.record.task_id,
        "status": checkpoint.map(|s| s.status).unwrap_or_default(),
        "stop_reason": checkpoint.and_then(|s| s.control.stop_reason),
        "answer": checkpoint.and_then(|s| s.task.answer.clone()),
        "steps": checkpoint.map_or(0, |s| s.control.spent.steps),
        "started_here": false,
        // The store keeps the last checkpoint, not the report: its spend.
        "outcome": null,
        "spent": checkpoint.map(|s| s.control.spent),
        "store": path,
    }))
}

/// The store's runs (unfinished ones unless `all`) as `agentry runs --json`
/// lists them, plus this server's runs that no store holds (`--no-store`).
pub(crate) async fn list(
    store: Option<PathBuf>,
    ours: &[RunHandle],
    all: bool,
) -> Result<Value, ArgError> {
    let at = store.clone();
    let stored = tokio::task::spawn_blocking(move || match at {
        Some(path) => crate::store::open_store(&path)
            .and_then(|s| s.runs().map_err(agentry::RuntimeError::from)),
        None => Ok(Vec::new()),
    })
    .await
    .map_err(|e| ArgError::Store(format!("reading the store failed: {e}")))?
    .map_err(|e| ArgError::Store(e.to_string()))?;
    let mut runs: Vec<Value> = stored
        .iter()
        .filter(|r| all || r.unfinished())
        .map(|r| serde_json::to_value(r).unwrap_or_default())
        .collect();
    for handle in ours {
        if stored.iter().any(|r| r.run_id == handle.run_id()) {
            continue;
        }
        let outcome = handle.outcome();
        if outcome.is_some() && !all {
            continue;
        }
        runs.push(json!({
            "run_id": handle.run_id(),
            "task_id": outcome.as_ref().map(|o| o.task_id.clone()),
            "status": if outcome.is_some() { "stopped" } else { "running" },
            "stop_reason": outcome.as_ref().map(|o| o.stop_reason),
        }));
    }
    Ok(json!({"runs": runs, "store": store}))
}

//! ListTasks: the caller's tasks of this agent, newest first — the runs the
//! store lists for the tenant and the agent (those of earlier starts, and
//! other nodes' on a cluster) and those only the table holds. `pageToken` is
//! the last id of the page before (one that is not a task of the listing is
//! `-32602`); `status` is an A2A state, so with it every listed run is looked
//! at, without it only the page's.

use std::sync::Arc;

use agentry::store::{RunKey, RunQuery, TenantFilter};
use serde_json::{Value, json};

use super::call::Call;
use super::look::observe;
use super::task::{Files, Observed, State};
use super::wire::{Failure, RpcError};

/// Tasks a page holds by default, and at most.
const PAGE: usize = 50;
const MAX_PAGE: usize = 100;
/// The newest runs of the agent a listing looks at.
pub(super) const MAX_LISTED: usize = 500;

/// ListTasks.
pub(super) async fn list(call: &Call) -> Result<Value, Failure> {
    let p = &call.params;
    let text = |field: &str| {
        p.get(field)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let size = match p.get("pageSize").and_then(Value::as_u64) {
        Some(0) | None => PAGE,
        Some(n) => usize::try_from(n).unwrap_or(MAX_PAGE).min(MAX_PAGE),
    };
    let artifacts = p.get("includeArtifacts").and_then(Value::as_bool) == Some(true);
    let ids: Vec<String> = listed(call)
        .await?
        .into_iter()
        .filter(|id| text("contextId").is_none_or(|c| c == id))
        .collect();
    // The ids up to and including the token's: the pages before.
    let before = match text("pageToken") {
        Some(token) => match ids.iter().position(|id| id == token) {
            Some(at) => at + 1,
            None => {
                return Err(RpcError::invalid_params(format!(
                    "pageToken: {token:?} is not a task of this listing (use a nextPageToken as given)"
                ))
                .into());
            }
        },
        None => 0,
    };
    // With a state to match, every run is looked at; else only the page's.
    let (total, start, mut page) = match text("status") {
        Some(state) => {
            let mut tasks = Vec::new();
            for id in &ids {
                if let Ok(now) = observe(call.task(id), Files::Skip).await
                    && now.state.name() == state
                {
                    tasks.push(now);
                }
            }
            let shown_before = &ids[..before];
            let start = tasks
                .iter()
                .take_while(|t| shown_before.contains(&t.id))
                .count();
            let page: Vec<Observed> = tasks.iter().skip(start).take(size).cloned().collect();
            (tasks.len(), start, page)
        }
        None => {
            let start = before;
            let mut page = Vec::new();
            for id in ids.iter().skip(start).take(size) {
                if let Ok(now) = observe(call.task(id), Files::Skip).await {
                    page.push(now);
                }
            }
            (ids.len(), start, page)
        }
    };
    if artifacts {
        for task in page.iter_mut().filter(|t| t.state == State::Completed) {
            if let Ok(now) = observe(call.task(&task.id), Files::Read).await {
                *task = now;
            }
        }
    }
    let shown = (start + size).min(total);
    let next = match page.last() {
        Some(last) if shown < total => last.id.clone(),
        Some(_) | None => String::new(),
    };
    Ok(json!({
        "tasks": page.iter().map(|t| t.task(artifacts)).collect::<Vec<_>>(),
        "nextPageToken": next,
        "pageSize": size,
        "totalSize": total,
    }))
}

/// The ids of the caller's runs of this agent, newest first: the store's
/// newest [`MAX_LISTED`] and what only the table holds.
async fn listed(call: &Call) -> Result<Vec<String>, Failure> {
    let mut keys: Vec<RunKey> = Vec::new();
    if let Some(store) = call.app.runtime().store().map(Arc::clone) {
        let query = RunQuery {
            tenant: TenantFilter::Of(call.tenant.name().map(str::to_string)),
            agent: Some(call.agent.clone()),
            status: None,
            after: None,
            limit: MAX_LISTED,
        };
        let page = tokio::task::spawn_blocking(move || store.list(&query))
            .await
            .map_err(|e| RpcError::internal(format!("listing the tasks failed: {e}")))?
            .map_err(|e| RpcError::internal(format!("listing the tasks failed: {e}")))?;
        keys.extend(page.iter().map(agentry::store::ListedRun::key));
    }
    for (id, entry) in call.app.runs_of(&call.tenant) {
        if entry.meta.agent.as_deref() == Some(call.agent.as_str())
            && !keys.iter().any(|k| k.run_id == id)
        {
            keys.push(RunKey {
                created_at_ms: entry.created_ms,
                run_id: id,
            });
        }
    }
    keys.sort_by(|a, b| b.cmp(a));
    keys.truncate(MAX_LISTED);
    Ok(keys.into_iter().map(|k| k.run_id).collect())
}

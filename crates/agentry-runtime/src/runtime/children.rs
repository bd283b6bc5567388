//! The runtime's [`AgentDesk`]: what `agent.spawn` and `agent.wait` call to start
//! children under a run and wait for them.
//!
//! One per run. It knows its run's handle (set right after the run starts)
//! and the handles of the children it started; it holds no run state.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use agentry_protocol::envelope::{ErrorCode, ToolError};
use agentry_tools::agents::{AgentDesk, ChildRequest};
use async_trait::async_trait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::Runtime;
use super::handle::RunHandle;
use crate::error::RuntimeError;
use crate::policy::{Policy, Script};
use crate::registry::Grants;

/// Starts and waits for the children of one run.
pub(crate) struct RunChildren {
    runtime: Runtime,
    workdir: std::path::PathBuf,
    /// The run's own handle; set right after the run starts, which can be after
    /// its first step has begun.
    parent: tokio::sync::watch::Sender<Option<RunHandle>>,
    children: Mutex<HashMap<String, RunHandle>>,
}

impl RunChildren {
    pub(crate) fn new(runtime: Runtime, workdir: std::path::PathBuf) -> Self {
        RunChildren {
            runtime,
            workdir,
            parent: tokio::sync::watch::channel(None).0,
            children: Mutex::new(HashMap::new()),
        }
    }

    /// Called once the run's handle exists.
    pub(crate) fn set_parent(&self, handle: RunHandle) {
        self.parent.send_replace(Some(handle));
    }
}

/// A child not started, for the model: `EBUDGET` when the parent's budget
/// cannot cover it, else `EPERM` (a tree limit, a grant, a stopped parent).
fn refused(e: RuntimeError) -> ToolError {
    let budget = if let RuntimeError::ChildRefused { reason, .. } = &e {
        reason.is_budget()
    } else {
        false
    };
    let code = if budget {
        ErrorCode::Ebudget
    } else {
        ErrorCode::Eperm
    };
    ToolError::new(code, e.to_string()).with_action("ask for less, or do it yourself")
}

#[async_trait]
impl AgentDesk for RunChildren {
    async fn spawn(&self, request: ChildRequest) -> Result<String, ToolError> {
        let mut rx = self.parent.subscribe();
        let parent = rx
            .wait_for(Option::is_some)
            .await
            .ok()
            .and_then(|p| p.clone())
            .ok_or_else(|| ToolError::new(ErrorCode::Eunavail, "the run is stopping"))?;
        let parent = &parent;
        let policy: Box<dyn Policy> = match (&request.script, self.runtime.child_policy()) {
            (Some(script), _) => Box::new(
                Script::from_value(script)
                    .map_err(|m| ToolError::new(ErrorCode::Einval, format!("script: {m}")))?
                    .into_policy(),
            ),
            (None, Some(factory)) => factory(&request)
                .ok_or_else(|| ToolError::new(ErrorCode::Einval, "no policy for this child"))?,
            (None, None) => {
                return Err(ToolError::new(
                    ErrorCode::Einval,
                    "this runtime has no model for children: pass a script",
                ));
            }
        };
        if let Some(name) = &request.name
            && self.children.lock().is_ok_and(|c| c.contains_key(name))
        {
            return Err(ToolError::new(
                ErrorCode::Einval,
                format!("a child named {name:?} already exists"),
            )
            .with_action("pick another name"));
        }
        let mut config = crate::RunConfig::new(request.goal.clone(), self.workdir.clone());
        config.task_id = request
            .name
            .clone()
            .unwrap_or_else(|| format!("{}/child", parent.run_id()));
        config.limits = request.limits;
        // Children share the parent's world (its working directory); traces are per
        // run and linked by parent id, so a child writes none of its own here.
        config.grants = match &request.grants {
            Some(g) => Grants::new(g.iter().cloned()),
            None => parent.grants().clone(),
        };
        let child = self
            .runtime
            .start_child_boxed(parent, config, policy)
            .await
            .map_err(refused)?;
        let id = child.run_id().to_string();
        if let Ok(mut children) = self.children.lock() {
            if let Some(name) = &request.name {
                children.insert(name.clone(), child.clone());
            }
            children.insert(id.clone(), child);
        }
        Ok(id)
    }

    async fn wait(
        &self,
        child_id: &str,
        timeout: Option<Duration>,
        cancel: &CancellationToken,
    ) -> Result<Value, ToolError> {
        let child = self
            .children
            .lock()
            .ok()
            .and_then(|c| c.get(child_id).cloned())
            .ok_or_else(|| {
                ToolError::new(
                    ErrorCode::Einval,
                    format!("no child {child_id:?} of this run"),
                )
                .with_action("use a child_id that agent.spawn returned")
            })?;
        let limit = timeout.unwrap_or(Duration::MAX);
        let outcome = tokio::select! {
            _ = cancel.cancelled() => return Err(ToolError::new(ErrorCode::Ecanceled, "stopped waiting: the run is stopping")),
            _ = tokio::time::sleep(limit) => {
                return Err(ToolError::new(ErrorCode::Etimedout, format!("child {child_id} still running"))
                    .with_action("wait again later"));
            }
            o = child.wait() => o.map_err(|e| ToolError::new(ErrorCode::Einternal, e.to_string()))?,
        };
        Ok(json!({
            "child_id": outcome.run_id,
            "name": outcome.task_id,
            "stop_reason": outcome.stop_reason,
            "answer": outcome.answer,
            "detail": outcome.detail,
            "steps": outcome.steps,
            "tool_calls": outcome.tool_calls,
            "spent": outcome.budget.spent,
        }))
    }
}

//! [`RunTree`]: a run and the children it started, for people (the CLI's
//! summary, `agentry runs --tree`) and for services.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use agentry_protocol::budget::{BudgetLimits, Usage};
use agentry_protocol::stop::StopReason;
use serde::{Deserialize, Serialize};

use super::handle::RunHandle;

/// One node of an agent tree and everything below it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunTree {
    /// Run id.
    pub run_id: String,
    /// Task id (a child's name, when its parent gave one).
    pub name: String,
    /// What it was asked to do.
    pub goal: String,
    /// Its policy (`script`, `openai:gpt-4.1`, ...).
    pub model: String,
    /// Why it stopped; `None` while it runs.
    pub stop_reason: Option<StopReason>,
    /// Its budget limits.
    pub limits: BudgetLimits,
    /// What it and its subtree spent.
    pub spent: Usage,
    /// The children it started, in spawn order.
    pub children: Vec<RunTree>,
}

impl RunTree {
    /// The tree as indented lines: each node's name, model, stop reason,
    /// limits and spend.
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.render_into(&mut out, "", "");
        out
    }

    fn render_into(&self, out: &mut String, lead: &str, rest: &str) {
        let reason = self
            .stop_reason
            .map_or_else(|| "running".to_string(), |r| r.to_string());
        let limit = |l: Option<u64>| l.map_or_else(|| "-".to_string(), |l| l.to_string());
        out.push_str(&format!(
            "{lead}{}  [{}]  {reason}  steps {}/{}  tool calls {}/{}  tokens {}/{}  goal {:?}\n",
            self.name,
            self.model,
            self.spent.steps,
            limit(self.limits.max_steps),
            self.spent.tool_calls,
            limit(self.limits.max_tool_calls),
            self.spent.tokens(),
            limit(self.limits.max_tokens),
            self.goal,
        ));
        for (i, child) in self.children.iter().enumerate() {
            let last = i + 1 == self.children.len();
            let (branch, next) = if last {
                ("└─ ", "   ")
            } else {
                ("├─ ", "│  ")
            };
            child.render_into(out, &format!("{rest}{branch}"), &format!("{rest}{next}"));
        }
    }
}

impl RunHandle {
    /// The run's tree as it stands: this run and every child it started,
    /// recursively, each with its stop reason (`None` while it runs), limits
    /// and spend.
    pub fn tree(&self) -> Pin<Box<dyn Future<Output = RunTree> + Send + '_>> {
        Box::pin(async move {
            let mut children = Vec::new();
            for entry in self.children.entries() {
                children.push(entry.handle.tree().await);
            }
            let (stop_reason, budget) = match self.outcome() {
                Some(o) => (Some(o.stop_reason), Some(o.budget)),
                None => (None, self.budget().await),
            };
            let budget = budget.unwrap_or_default();
            RunTree {
                run_id: self.run_id.to_string(),
                name: self.about.name.clone(),
                goal: self.about.goal.clone(),
                model: self.about.model.clone(),
                stop_reason,
                limits: budget.limits,
                spent: budget.spent,
                children,
            }
        })
    }

    /// Waits, at most `limit`, until every run below this one has stopped and
    /// its end is recorded; `false` if some had not by then. A stopped run's
    /// children are cancelled with it, so after its outcome this is quick.
    pub async fn wait_children(&self, limit: Duration) -> bool {
        tokio::time::timeout(limit, self.descendants_ended())
            .await
            .is_ok()
    }

    fn descendants_ended(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            for mut entry in self.children.entries() {
                entry.handle.descendants_ended().await;
                let _ = entry.handle.wait().await;
                let _ = entry.recorded.wait_for(|done| *done).await;
            }
        })
    }

    /// Whether this run started any child.
    pub fn has_children(&self) -> bool {
        !self.children.is_empty()
    }
}

//! The raw shapes of task.toml's tables: serde checks only the keys
//! (`deny_unknown_fields`, one table at a time so an unknown key is reported
//! with its table). Values stay `toml::Value` so that type errors are reported
//! by `validate` with the field's full path.

use serde::Deserialize;
use toml::Value;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTask {
    pub(crate) goal: Option<Value>,
    pub(crate) artifacts: Option<Value>,
    pub(crate) budget: Option<Value>,
    pub(crate) tools: Option<Value>,
    pub(crate) accept: Option<Value>,
    pub(crate) policy: Option<Value>,
    pub(crate) progress: Option<Value>,
    pub(crate) driver: Option<Value>,
    pub(crate) tree: Option<Value>,
    pub(crate) redact: Option<Value>,
    pub(crate) trace: Option<Value>,
    pub(crate) sandbox: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRedact {
    pub(crate) patterns: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTrace {
    pub(crate) sample: Option<Value>,
    pub(crate) content: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTree {
    pub(crate) max_depth: Option<Value>,
    pub(crate) max_children: Option<Value>,
    pub(crate) parent_reserve: Option<Value>,
    pub(crate) child_share: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawReserve {
    pub(crate) steps: Option<Value>,
    pub(crate) tool_calls: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDriver {
    pub(crate) mode: Option<Value>,
    pub(crate) every: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBudget {
    pub(crate) max_steps: Option<Value>,
    pub(crate) max_tool_calls: Option<Value>,
    pub(crate) max_tokens: Option<Value>,
    pub(crate) max_cost: Option<Value>,
    pub(crate) deadline: Option<Value>,
    pub(crate) max_retries: Option<Value>,
    pub(crate) max_ticks: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTools {
    pub(crate) grant: Option<Value>,
    pub(crate) approve: Option<Value>,
    pub(crate) approval_timeout: Option<Value>,
    pub(crate) command: Option<Value>,
    pub(crate) mcp: Option<Value>,
    pub(crate) a2a: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAccept {
    pub(crate) file: Option<Value>,
    pub(crate) equals: Option<Value>,
    pub(crate) contains: Option<Value>,
    pub(crate) command: Option<Value>,
    pub(crate) timeout: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPolicy {
    pub(crate) script: Option<Value>,
    pub(crate) model: Option<Value>,
    pub(crate) base_url: Option<Value>,
    pub(crate) context_tokens: Option<Value>,
    pub(crate) result_cap: Option<Value>,
    pub(crate) compaction: Option<Value>,
    pub(crate) ca_cert: Option<Value>,
    pub(crate) fallback: Option<Value>,
    pub(crate) prompt_cache: Option<Value>,
    pub(crate) models: Option<Value>,
}

/// One `[policy.models.NAME]` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawChildModel {
    pub(crate) model: Option<Value>,
    pub(crate) base_url: Option<Value>,
    pub(crate) script: Option<Value>,
}

/// One `[policy] fallback` entry written as an inline table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFallback {
    pub(crate) model: Option<Value>,
    pub(crate) base_url: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawProgress {
    pub(crate) window: Option<Value>,
    pub(crate) max_denied: Option<Value>,
}

/// `[[tools.command]]`, one table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCommandTool {
    pub(crate) name: Option<Value>,
    pub(crate) description: Option<Value>,
    pub(crate) argv: Option<Value>,
    pub(crate) input_schema: Option<Value>,
    pub(crate) effect: Option<Value>,
    pub(crate) idempotency: Option<Value>,
    pub(crate) timeout: Option<Value>,
    pub(crate) stdin: Option<Value>,
    pub(crate) env: Option<Value>,
    pub(crate) auth_scope: Option<Value>,
    pub(crate) max_retries: Option<Value>,
    pub(crate) parallel_safe: Option<Value>,
    pub(crate) version: Option<Value>,
    pub(crate) redact: Option<Value>,
    pub(crate) volatile: Option<Value>,
    pub(crate) sandbox: Option<Value>,
}

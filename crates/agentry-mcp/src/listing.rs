//! The tools a server offers: its listing with the declaration's allow-list
//! applied, and what a later listing (after `tools/list_changed`, or from a
//! restarted server) changes in it.
//!
//! At start an allow-list entry or override naming a tool the server does not
//! list is an error (a typo in the task). Later the server may drop tools or
//! add some: a dropped one is no longer offered, a new one is offered only if
//! the allow-list (when there is one) names it. A tool whose contract (input
//! schema, effect, idempotency) differs from the one offered before is logged
//! (a warning naming it) and offered with the new one.
//!
//! Whenever it lists, a tool whose name is not 1–128 of `A-Z a-z 0-9 _ - .`
//! (the MCP specification's tool-name rule) is skipped with a warning naming
//! the server and the name escaped: such a name could carry terminal controls
//! or bidi overrides to every place a tool name is shown. The server's other
//! tools are offered.

use std::collections::{BTreeSet, HashMap};

use agentry_protocol::terminal::escape_line;
use rmcp::model::Tool as McpTool;

use crate::config::McpServerConfig;
use crate::contract::contract_for;
use crate::error::McpError;

/// Longest tool name MCP allows.
const MAX_NAME_CHARS: usize = 128;

/// Whether `name` follows MCP's tool-name rule: 1–128 characters of ASCII
/// letters, digits, `_`, `-` and `.`.
pub(crate) fn sane_name(name: &str) -> bool {
    (1..=MAX_NAME_CHARS).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// The listed tools with a sane name; each other one is skipped with a
/// warning naming the server and the name, escaped.
fn sane(server: &str, listed: Vec<McpTool>) -> Vec<McpTool> {
    listed
        .into_iter()
        .filter(|tool| {
            let ok = sane_name(&tool.name);
            if !ok {
                let shown = escape_line(&tool.name);
                tracing::warn!(
                    server,
                    tool = %shown,
                    "MCP server {server} lists a tool named \"{shown}\", which is not 1-128 of A-Z a-z 0-9 _ - . (MCP's rule for tool names); it is skipped"
                );
            }
            ok
        })
        .collect()
}

/// The listed tools the declaration offers at start; an allow-list entry or
/// override naming a tool not offered is an error naming it and what is.
pub(crate) fn offered_at_start(
    config: &McpServerConfig,
    listed: Vec<McpTool>,
) -> Result<Vec<McpTool>, McpError> {
    let listed = sane(&config.name, listed);
    let names: BTreeSet<&str> = listed.iter().map(|t| t.name.as_ref()).collect();
    if let Some(missing) = config
        .tools
        .iter()
        .flatten()
        .find(|a| !names.contains(a.as_str()))
    {
        return Err(McpError::UnknownTool {
            server: config.name.clone(),
            tool: missing.clone(),
            listed: listed.iter().map(|t| t.name.to_string()).collect(),
        });
    }
    let offered = allowed(config, listed);
    let offered_names: BTreeSet<&str> = offered.iter().map(|t| t.name.as_ref()).collect();
    if let Some(tool) = config
        .overrides
        .keys()
        .find(|k| !offered_names.contains(k.as_str()))
    {
        return Err(McpError::UnknownOverride {
            server: config.name.clone(),
            tool: tool.clone(),
            listed: offered.iter().map(|t| t.name.to_string()).collect(),
        });
    }
    Ok(offered)
}

/// What a later listing offers: the tools with a sane name that the
/// allow-list lets through.
pub(crate) fn offered_later(config: &McpServerConfig, listed: Vec<McpTool>) -> Vec<McpTool> {
    allowed(config, sane(&config.name, listed))
}

/// The listed tools the allow-list lets through (all without one).
pub(crate) fn allowed(config: &McpServerConfig, listed: Vec<McpTool>) -> Vec<McpTool> {
    match &config.tools {
        None => listed,
        Some(allowed) => {
            let allowed: BTreeSet<&str> = allowed.iter().map(String::as_str).collect();
            listed
                .into_iter()
                .filter(|t| allowed.contains(t.name.as_ref()))
                .collect()
        }
    }
}

/// Each tool's position by its name.
fn by_name(tools: &[McpTool]) -> HashMap<&str, usize> {
    tools
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.as_ref(), i))
        .collect()
}

/// Why the tools were listed again.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Relisted {
    /// The server sent `notifications/tools/list_changed`.
    ListChanged,
    /// The server was restarted (it had died).
    Restarted,
}

impl Relisted {
    fn as_str(self) -> &'static str {
        match self {
            Relisted::ListChanged => "it sent tools/list_changed",
            Relisted::Restarted => "it was restarted",
        }
    }
}

/// What a new offered set changes, by the server's tool names.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Changes {
    pub(crate) added: Vec<String>,
    pub(crate) removed: Vec<String>,
    /// Offered before and now, with another contract (schema, effect or
    /// idempotency).
    pub(crate) changed: Vec<String>,
}

impl Changes {
    /// `new` against `old`, both offered by `config`'s server.
    /// Linear in the two listings (a server may list thousands of tools).
    pub(crate) fn between(config: &McpServerConfig, old: &[McpTool], new: &[McpTool]) -> Changes {
        let (old_index, new_index) = (by_name(old), by_name(new));
        let mut changes = Changes::default();
        for tool in new {
            match old_index.get(tool.name.as_ref()) {
                None => changes.added.push(tool.name.to_string()),
                Some(&i) => {
                    let (before, now) = (contract_for(config, &old[i]), contract_for(config, tool));
                    if before.input_schema != now.input_schema
                        || before.effect != now.effect
                        || before.idempotency != now.idempotency
                    {
                        changes.changed.push(tool.name.to_string());
                    }
                }
            }
        }
        changes.removed = old
            .iter()
            .filter(|t| !new_index.contains_key(t.name.as_ref()))
            .map(|t| t.name.to_string())
            .collect();
        changes
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }

    /// A warning per tool whose contract changed (its calls are checked
    /// against the new schema from now on), one line for the rest.
    pub(crate) fn log(&self, server: &str, why: Relisted) {
        let why = why.as_str();
        for tool in &self.changed {
            tracing::warn!(
                server,
                tool = tool.as_str(),
                "MCP server {server}: tool {tool} changed its input schema or annotations ({why}); its calls now use the new ones"
            );
        }
        if !self.added.is_empty() || !self.removed.is_empty() {
            tracing::info!(
                server,
                added = ?self.added,
                removed = ?self.removed,
                "MCP server {server}'s tools changed ({why})"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::config::McpTransport;

    fn tool(value: Value) -> McpTool {
        serde_json::from_value(value).unwrap()
    }

    fn server(tools: Option<&[&str]>) -> McpServerConfig {
        let mut config = McpServerConfig::new(
            "srv",
            McpTransport::Stdio {
                command: vec!["true".into()],
                env: Default::default(),
            },
        );
        config.tools = tools.map(|t| t.iter().map(|s| s.to_string()).collect());
        config
    }

    #[test]
    fn a_new_listing_is_compared_by_name_and_contract() {
        let config = server(None);
        let old = [
            tool(json!({"name": "a", "inputSchema": {"type": "object"}})),
            tool(json!({"name": "b", "inputSchema": {"type": "object"}})),
            tool(
                json!({"name": "c", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}}),
            ),
        ];
        let new = [
            // Same contract, new description: not a change.
            tool(
                json!({"name": "a", "description": "now described", "inputSchema": {"type": "object"}}),
            ),
            tool(json!({"name": "c", "inputSchema": {"type": "object"}})),
            tool(json!({"name": "d", "inputSchema": {"type": "object", "required": ["x"]}})),
        ];
        assert_eq!(
            Changes::between(&config, &old, &new),
            Changes {
                added: vec!["d".into()],
                removed: vec!["b".into()],
                changed: vec!["c".into()],
            }
        );
        assert!(Changes::between(&config, &old, &old).is_empty());
    }

    #[test]
    fn later_listings_go_through_the_allow_list_without_errors() {
        let config = server(Some(&["a", "gone"]));
        let listed = vec![
            tool(json!({"name": "a", "inputSchema": {"type": "object"}})),
            tool(json!({"name": "new", "inputSchema": {"type": "object"}})),
        ];
        let names: Vec<String> = allowed(&config, listed.clone())
            .iter()
            .map(|t| t.name.to_string())
            .collect();
        assert_eq!(names, ["a"]);
        // At start a named tool the server lacks is a typo to report.
        let err = offered_at_start(&config, listed).unwrap_err().to_string();
        assert!(err.contains("gone"), "{err}");
    }
}

//! A listed MCP tool as an agentry contract: what its annotations say, then
//! the task's overrides.
//!
//! | annotation                              | contract                          |
//! |-----------------------------------------|-----------------------------------|
//! | `readOnlyHint: true`                    | `effect = read_only`              |
//! | `destructiveHint: false` (not read-only)| `effect = reversible`             |
//! | anything else, or none                  | `effect = irreversible_external`  |
//! | `idempotentHint: true`                  | `idempotency = idempotent`        |
//! | otherwise                               | `idempotency = none`              |
//!
//! Unannotated is `irreversible_external` because MCP's defaults are
//! `destructiveHint: true` and `openWorldHint: true`: such a call waits for
//! approval unless the task says otherwise. The override's `effect` and
//! `idempotency` replace these, its `redact` becomes the contract's; its
//! `approve` is the run's approval config's business, not the contract's.

use agentry_protocol::tool::{Effect, Idempotency, ToolContract};
use rmcp::model::{Tool as McpTool, ToolAnnotations};
use serde_json::Value;

use crate::config::McpServerConfig;

/// The contract of `tool` as offered by `config`'s server.
pub(crate) fn contract_for(config: &McpServerConfig, tool: &McpTool) -> ToolContract {
    let (mut effect, mut idempotency) = from_annotations(tool.annotations.as_ref());
    let mut redact: &[String] = &[];
    if let Some(over) = config.overrides.get(tool.name.as_ref()) {
        effect = over.effect.unwrap_or(effect);
        idempotency = over.idempotency.unwrap_or(idempotency);
        redact = &over.redact;
    }
    let description = tool
        .description
        .as_deref()
        .map(str::to_string)
        .or_else(|| tool.title.clone())
        .unwrap_or_else(|| format!("Tool {} of MCP server {}.", tool.name, config.name));
    ToolContract::new(
        config.tool_name(&tool.name),
        description,
        Value::Object((*tool.input_schema).clone()),
    )
    .effect(effect)
    .idempotency(idempotency)
    // A run grants a whole server by its name, or tools by `<server>.<tool>`.
    .scope(config.name.clone())
    .timeout_ms(u64::try_from(config.timeout.as_millis()).unwrap_or(u64::MAX))
    .version("mcp")
    .redact_fields(redact.iter().cloned())
}

/// Effect and idempotency from MCP tool annotations (see the module docs).
pub(crate) fn from_annotations(annotations: Option<&ToolAnnotations>) -> (Effect, Idempotency) {
    let Some(a) = annotations else {
        return (Effect::IrreversibleExternal, Idempotency::None);
    };
    let effect = if a.read_only_hint == Some(true) {
        Effect::ReadOnly
    } else if a.destructive_hint == Some(false) {
        Effect::Reversible
    } else {
        Effect::IrreversibleExternal
    };
    let idempotency = if a.idempotent_hint == Some(true) {
        Idempotency::Idempotent
    } else {
        Idempotency::None
    };
    (effect, idempotency)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::config::{ContractOverride, McpTransport};

    fn tool(value: Value) -> McpTool {
        serde_json::from_value(value).unwrap()
    }

    fn server() -> McpServerConfig {
        let mut config = McpServerConfig::new(
            "srv",
            McpTransport::Stdio {
                command: vec!["true".into()],
                env: Default::default(),
            },
        );
        config.timeout = Duration::from_millis(1234);
        config
    }

    #[test]
    fn unannotated_is_irreversible_external() {
        let t = tool(json!({"name": "send", "inputSchema": {"type": "object"}}));
        let c = contract_for(&server(), &t);
        assert_eq!(c.name, "srv.send");
        assert_eq!(c.effect, Effect::IrreversibleExternal);
        assert_eq!(c.idempotency, Idempotency::None);
        assert_eq!(c.timeout_ms, 1234);
        assert_eq!(c.auth_scope, "srv");
        assert_eq!(c.input_schema, json!({"type": "object"}));
        // Empty annotations say nothing either.
        let t = tool(json!({"name": "x", "inputSchema": {"type": "object"}, "annotations": {}}));
        assert_eq!(
            contract_for(&server(), &t).effect,
            Effect::IrreversibleExternal
        );
    }

    #[test]
    fn annotations_map_to_effect_and_idempotency() {
        let cases = [
            (
                json!({"readOnlyHint": true}),
                Effect::ReadOnly,
                Idempotency::None,
            ),
            (
                json!({"readOnlyHint": true, "idempotentHint": true}),
                Effect::ReadOnly,
                Idempotency::Idempotent,
            ),
            (
                json!({"destructiveHint": false}),
                Effect::Reversible,
                Idempotency::None,
            ),
            (
                json!({"destructiveHint": false, "idempotentHint": true}),
                Effect::Reversible,
                Idempotency::Idempotent,
            ),
            (
                json!({"destructiveHint": true, "idempotentHint": true}),
                Effect::IrreversibleExternal,
                Idempotency::Idempotent,
            ),
            (
                json!({"readOnlyHint": false, "openWorldHint": false}),
                Effect::IrreversibleExternal,
                Idempotency::None,
            ),
        ];
        for (annotations, effect, idempotency) in cases {
            let t = tool(
                json!({"name": "t", "inputSchema": {"type": "object"}, "annotations": annotations}),
            );
            let c = contract_for(&server(), &t);
            assert_eq!(
                (c.effect, c.idempotency),
                (effect, idempotency),
                "{annotations}"
            );
        }
    }

    #[test]
    fn overrides_replace_annotation_values() {
        let mut config = server();
        config.overrides.insert(
            "send".into(),
            ContractOverride {
                effect: Some(Effect::Reversible),
                idempotency: Some(Idempotency::RequiredKey),
                approve: Some(false),
                redact: vec!["password".into()],
            },
        );
        config.overrides.insert(
            "read".into(),
            ContractOverride {
                effect: None,
                idempotency: Some(Idempotency::Idempotent),
                approve: None,
                redact: Vec::new(),
            },
        );
        let send = contract_for(
            &config,
            &tool(json!({"name": "send", "inputSchema": {"type": "object"}})),
        );
        assert_eq!(send.effect, Effect::Reversible);
        assert_eq!(send.idempotency, Idempotency::RequiredKey);
        assert_eq!(send.redact, ["password"]);
        let read = contract_for(
            &config,
            &tool(
                json!({"name": "read", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}}),
            ),
        );
        assert_eq!(
            read.effect,
            Effect::ReadOnly,
            "an override without effect keeps the annotation's"
        );
        assert_eq!(read.idempotency, Idempotency::Idempotent);
        assert!(read.redact.is_empty());
    }

    #[test]
    fn description_falls_back_to_title_then_a_sentence() {
        let t = McpTool::new("t", "does t", Arc::new(serde_json::Map::new()));
        assert_eq!(contract_for(&server(), &t).description, "does t");
        let t = tool(json!({"name": "t", "title": "The T", "inputSchema": {"type": "object"}}));
        assert_eq!(contract_for(&server(), &t).description, "The T");
        let t = tool(json!({"name": "t", "inputSchema": {"type": "object"}}));
        assert_eq!(
            contract_for(&server(), &t).description,
            "Tool t of MCP server srv."
        );
    }
}

//! Strict checkers of each provider's conversation rules, as the real APIs
//! enforce them, run by the mock server on every request: an invalid request is
//! answered with HTTP 400 in the provider's error shape, so no adapter test can
//! pass on a request the real API would refuse.
//!
//! OpenAI Chat Completions: each `tool` message answers a still-open call of
//! the assistant `tool_calls` message right before it (only `tool` messages in
//! between); every call is answered before any other message; `tool_calls` is
//! never empty; an assistant message without calls has text content.
//!
//! Anthropic Messages: the first message is the user's; roles alternate; no
//! message and no text block is empty; `tool_use` blocks (assistant only) are
//! answered by `tool_result` blocks at the start of the very next (user)
//! message, and every `tool_result` answers a `tool_use` of the message before.
//! `system` is a string or a non-empty list of non-empty text blocks; each tool
//! has a name and an object `input_schema`; a `cache_control` mark is
//! `{"type": "ephemeral"}` (with an optional `ttl`), at most 4 per request.

use std::collections::HashSet;

use serde_json::{Value, json};

/// A rule a request broke: where, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// The offending field, e.g. `messages.[3].role`.
    pub param: String,
    pub message: String,
}

fn invalid(param: impl Into<String>, message: impl Into<String>) -> Invalid {
    Invalid {
        param: param.into(),
        message: message.into(),
    }
}

/// The 400 body OpenAI answers an invalid request with.
pub fn openai_error(e: &Invalid) -> Value {
    json!({"error": {"message": e.message, "type": "invalid_request_error",
        "param": e.param, "code": null}})
}

/// The 400 body Anthropic answers an invalid request with.
pub fn anthropic_error(e: &Invalid) -> Value {
    json!({"type": "error", "error": {"type": "invalid_request_error",
        "message": format!("{}: {}", e.param, e.message)}})
}

fn messages(body: &Value) -> Result<&Vec<Value>, Invalid> {
    match body["messages"].as_array() {
        Some(m) if !m.is_empty() => Ok(m),
        Some(_) => Err(invalid("messages", "messages must not be empty")),
        None => Err(invalid("messages", "messages must be an array")),
    }
}

fn is_text(v: &Value) -> bool {
    v.as_str().is_some_and(|s| !s.trim().is_empty())
}

/// Checks an OpenAI Chat Completions request body.
pub fn check_openai(body: &Value) -> Result<(), Invalid> {
    let messages = messages(body)?;
    // Calls of the last assistant `tool_calls` message not yet answered.
    let mut open: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let at = |field: &str| format!("messages.[{i}].{field}");
        let role = m["role"].as_str().unwrap_or_default();
        if role == "tool" {
            let id = m["tool_call_id"].as_str().unwrap_or_default();
            let Some(k) = open.iter().position(|o| o == id) else {
                return Err(invalid(
                    at("tool_call_id"),
                    format!(
                        "Invalid parameter: messages with role 'tool' must be a response to a preceding message with 'tool_calls' (no open call {id:?})"
                    ),
                ));
            };
            open.remove(k);
            if !m["content"].is_string() {
                return Err(invalid(at("content"), "tool content must be a string"));
            }
            continue;
        }
        if !open.is_empty() {
            return Err(unanswered_openai(i, &open));
        }
        match role {
            "system" | "developer" | "user" if m["content"].is_string() => {}
            "system" | "developer" | "user" => {
                return Err(invalid(at("content"), "content must be a string"));
            }
            "assistant" => open = openai_calls(m, &at)?,
            other => {
                return Err(invalid(at("role"), format!("unknown role {other:?}")));
            }
        }
    }
    if !open.is_empty() {
        return Err(unanswered_openai(messages.len(), &open));
    }
    Ok(())
}

fn unanswered_openai(i: usize, open: &[String]) -> Invalid {
    invalid(
        format!("messages.[{i}]"),
        format!(
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}",
            open.join(", ")
        ),
    )
}

/// The call ids of an assistant message (none without `tool_calls`).
fn openai_calls(m: &Value, at: &dyn Fn(&str) -> String) -> Result<Vec<String>, Invalid> {
    let Some(calls) = m.get("tool_calls").filter(|c| !c.is_null()) else {
        if !m["content"].is_string() {
            return Err(invalid(
                at("content"),
                "Invalid value for 'content': expected a string, got null.",
            ));
        }
        return Ok(Vec::new());
    };
    let calls = match calls.as_array() {
        Some(c) if !c.is_empty() => c,
        Some(_) => return Err(invalid(at("tool_calls"), "[] is too short")),
        None => return Err(invalid(at("tool_calls"), "tool_calls must be an array")),
    };
    let mut ids = Vec::new();
    for (k, c) in calls.iter().enumerate() {
        let id = c["id"].as_str().unwrap_or_default();
        if id.is_empty() || ids.iter().any(|i| i == id) {
            return Err(invalid(
                at(&format!("tool_calls.[{k}].id")),
                "each call needs a unique, non-empty id",
            ));
        }
        if c["type"] != "function"
            || !is_text(&c["function"]["name"])
            || !c["function"]["arguments"].is_string()
        {
            return Err(invalid(
                at(&format!("tool_calls.[{k}]")),
                "a call is {type: function, function: {name, arguments: string}}",
            ));
        }
        ids.push(id.to_string());
    }
    Ok(ids)
}

/// Checks an Anthropic Messages request body.
pub fn check_anthropic(body: &Value) -> Result<(), Invalid> {
    let mut marks = anthropic_system(&body["system"])?;
    marks += anthropic_tools(&body["tools"])?;
    let messages = messages(body)?;
    for (i, m) in messages.iter().enumerate() {
        for (k, b) in m["content"].as_array().into_iter().flatten().enumerate() {
            marks += cache_mark(b, &format!("messages.{i}.content.{k}"))?;
        }
    }
    if marks > 4 {
        return Err(invalid(
            "cache_control",
            format!("A maximum of 4 blocks with cache_control may be provided. Found {marks}."),
        ));
    }
    // `tool_use` ids of the previous (assistant) message.
    let mut asked: Vec<String> = Vec::new();
    let mut last_role = "";
    for (i, m) in messages.iter().enumerate() {
        let at = |field: &str| format!("messages.{i}{field}");
        let role = m["role"].as_str().unwrap_or_default();
        match (i, role) {
            (0, "user") => {}
            (0, _) => return Err(invalid(at(""), "first message must use the \"user\" role")),
            (_, "user" | "assistant") if role == last_role => {
                return Err(invalid(
                    at(""),
                    format!(
                        "roles must alternate between \"user\" and \"assistant\", but found multiple \"{role}\" roles in a row"
                    ),
                ));
            }
            (_, "user" | "assistant") => {}
            (_, other) => return Err(invalid(at(".role"), format!("unknown role {other:?}"))),
        }
        last_role = role;
        let blocks = anthropic_blocks(m, &at)?;
        let answered = tool_results(&blocks, &asked, &at)?;
        if let Some(missing) = asked.iter().find(|id| !answered.contains(id.as_str())) {
            return Err(invalid(
                at(""),
                format!(
                    "`tool_use` ids were found without `tool_result` blocks immediately after: {missing}. Each `tool_use` block must have a corresponding `tool_result` block in the next message."
                ),
            ));
        }
        asked = tool_uses(&blocks, role, &at)?;
    }
    if let Some(missing) = asked.first() {
        return Err(invalid(
            format!("messages.{}", messages.len() - 1),
            format!(
                "`tool_use` ids were found without `tool_result` blocks immediately after: {missing}"
            ),
        ));
    }
    Ok(())
}

/// Whether a block carries a valid `cache_control` mark (1) or none (0).
fn cache_mark(block: &Value, at: &str) -> Result<usize, Invalid> {
    match block.get("cache_control") {
        None => Ok(0),
        Some(c)
            if c["type"] == "ephemeral"
                && c.as_object().is_some_and(|o| {
                    o.keys().all(|k| k == "type" || k == "ttl")
                        && o.get("ttl").is_none_or(|t| t == "5m" || t == "1h")
                }) =>
        {
            Ok(1)
        }
        Some(_) => Err(invalid(
            format!("{at}.cache_control"),
            "cache_control must be {\"type\": \"ephemeral\"} with an optional ttl of \"5m\" or \"1h\"",
        )),
    }
}

/// `system`: absent, a string, or a non-empty array of non-empty text blocks.
/// Returns its cache marks.
fn anthropic_system(system: &Value) -> Result<usize, Invalid> {
    let blocks = match system {
        Value::Null | Value::String(_) => return Ok(0),
        Value::Array(b) if !b.is_empty() => b,
        Value::Array(_) | Value::Bool(_) | Value::Number(_) | Value::Object(_) => {
            return Err(invalid(
                "system",
                "system must be a string or a non-empty array of text blocks",
            ));
        }
    };
    let mut marks = 0;
    for (k, b) in blocks.iter().enumerate() {
        if b["type"] != "text" || !is_text(&b["text"]) {
            return Err(invalid(
                format!("system.{k}"),
                "system blocks must be text blocks with non-whitespace text",
            ));
        }
        marks += cache_mark(b, &format!("system.{k}"))?;
    }
    Ok(marks)
}

/// `tools`: absent or an array of `{name, input_schema: object}`. Returns its
/// cache marks.
fn anthropic_tools(tools: &Value) -> Result<usize, Invalid> {
    let tools = match tools {
        Value::Null => return Ok(0),
        Value::Array(t) => t,
        Value::Bool(_) | Value::Number(_) | Value::String(_) | Value::Object(_) => {
            return Err(invalid("tools", "tools must be an array"));
        }
    };
    let mut marks = 0;
    for (k, t) in tools.iter().enumerate() {
        if !is_text(&t["name"]) || !t["input_schema"].is_object() {
            return Err(invalid(
                format!("tools.{k}"),
                "a tool needs a name and an object input_schema",
            ));
        }
        marks += cache_mark(t, &format!("tools.{k}"))?;
    }
    Ok(marks)
}

/// A message's content as blocks; a string is one text block. Nothing empty.
fn anthropic_blocks(m: &Value, at: &dyn Fn(&str) -> String) -> Result<Vec<Value>, Invalid> {
    let empty = || {
        invalid(
            at(""),
            "all messages must have non-empty content except for the optional final assistant message",
        )
    };
    let blocks = match &m["content"] {
        Value::String(s) if s.trim().is_empty() => return Err(empty()),
        Value::String(s) => vec![json!({"type": "text", "text": s})],
        Value::Array(b) if b.is_empty() => return Err(empty()),
        Value::Array(b) => b.clone(),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::Object(_) => {
            return Err(invalid(
                at(".content"),
                "content must be a string or an array",
            ));
        }
    };
    for (k, b) in blocks.iter().enumerate() {
        if b["type"] == "text" && !is_text(&b["text"]) {
            return Err(invalid(
                at(&format!(".content.{k}.text")),
                "text content blocks must contain non-whitespace text",
            ));
        }
    }
    Ok(blocks)
}

/// The `tool_use_id`s of a message's `tool_result` blocks, which must come
/// first and each answer a `tool_use` of the previous message.
fn tool_results<'b>(
    blocks: &'b [Value],
    asked: &[String],
    at: &dyn Fn(&str) -> String,
) -> Result<HashSet<&'b str>, Invalid> {
    let mut answered = HashSet::new();
    let mut seen_other = false;
    for (k, b) in blocks.iter().enumerate() {
        if b["type"] != "tool_result" {
            seen_other = true;
            continue;
        }
        let id = b["tool_use_id"].as_str().unwrap_or_default();
        if !asked.iter().any(|a| a == id) || !answered.insert(id) {
            return Err(invalid(
                at(&format!(".content.{k}")),
                format!(
                    "unexpected `tool_use_id` found in `tool_result` blocks: {id:?}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                ),
            ));
        }
        if seen_other {
            return Err(invalid(
                at(&format!(".content.{k}")),
                "`tool_result` blocks must come first in the message, before any other content",
            ));
        }
    }
    Ok(answered)
}

/// The ids of a message's `tool_use` blocks (assistant only, unique, with an
/// object input).
fn tool_uses(
    blocks: &[Value],
    role: &str,
    at: &dyn Fn(&str) -> String,
) -> Result<Vec<String>, Invalid> {
    let mut ids: Vec<String> = Vec::new();
    for (k, b) in blocks
        .iter()
        .filter(|b| b["type"] == "tool_use")
        .enumerate()
    {
        let id = b["id"].as_str().unwrap_or_default();
        if role != "assistant" || id.is_empty() || ids.iter().any(|i| i == id) {
            return Err(invalid(
                at(&format!(".content.{k}")),
                "tool_use blocks belong to assistant messages and need unique, non-empty ids",
            ));
        }
        if !b["input"].is_object() || !is_text(&b["name"]) {
            return Err(invalid(
                at(&format!(".content.{k}.input")),
                "a tool_use block needs a name and an object input",
            ));
        }
        ids.push(id.to_string());
    }
    Ok(ids)
}

/// Which checker applies to a request path, if any.
pub fn check_path(path: &str, body: &Value) -> Option<(Invalid, Value)> {
    if path.ends_with("/chat/completions") {
        check_openai(body).err().map(|e| {
            let shape = openai_error(&e);
            (e, shape)
        })
    } else if path.ends_with("/v1/messages") {
        check_anthropic(body).err().map(|e| {
            let shape = anthropic_error(&e);
            (e, shape)
        })
    } else {
        None
    }
}

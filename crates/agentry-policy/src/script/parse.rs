//! Script JSON → [`Script`]. Every error names the field and what is wrong.

use std::collections::HashSet;
use std::path::Path;

use agentry_protocol::tool::{ToolArguments, ToolCall};
use serde_json::Value;

use super::format::{Script, ScriptEnd, ScriptTurn};
use crate::error::ScriptError;

impl Script {
    /// Loads and validates a script file. Errors name the file and the field.
    pub fn load(path: &Path) -> Result<Script, ScriptError> {
        // Whoever names the file (a flag, an `agentry mcp` client) may name a
        // FIFO or /dev/zero: read as every named file is, capped.
        let text =
            agentry_files::read_to_string(path, agentry_files::FileKind::SCRIPT).map_err(|e| {
                ScriptError::Unreadable {
                    path: path.to_path_buf(),
                    source: e.problem,
                }
            })?;
        Script::parse(&text).map_err(|e| ScriptError::InvalidFile {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
    }

    /// Parses script JSON. The error names the field and what is wrong.
    pub fn parse(text: &str) -> Result<Script, ScriptError> {
        let v: Value = serde_json::from_str(text)
            .map_err(|e| ScriptError::invalid(format!("not valid JSON: {e}")))?;
        Script::from_value(&v)
    }

    /// Builds a script from a JSON value (e.g. an inline script in a request body).
    pub fn from_value(v: &Value) -> Result<Script, ScriptError> {
        let obj = v.as_object().ok_or_else(|| {
            ScriptError::invalid("the script must be a JSON object with \"turns\"")
        })?;
        for key in obj.keys() {
            if key != "turns" && key != "then" {
                return Err(ScriptError::invalid(format!(
                    "unknown field \"{key}\" (expected \"turns\" and \"then\")"
                )));
            }
        }
        let then = match obj.get("then") {
            None => ScriptEnd::Stop,
            Some(Value::String(s)) if s == "stop" => ScriptEnd::Stop,
            Some(Value::String(s)) if s == "repeat_last" => ScriptEnd::RepeatLast,
            Some(other) => {
                return Err(ScriptError::invalid(format!(
                    "then: expected \"repeat_last\" or \"stop\", found {other}"
                )));
            }
        };
        let turns = obj
            .get("turns")
            .ok_or_else(|| ScriptError::invalid("missing field \"turns\""))?
            .as_array()
            .ok_or_else(|| ScriptError::invalid("turns: expected an array"))?;
        let turns = turns
            .iter()
            .enumerate()
            .map(|(i, t)| parse_turn(i, t))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Script { turns, then })
    }
}

fn parse_turn(i: usize, t: &Value) -> Result<ScriptTurn, ScriptError> {
    let at = format!("turns[{i}]");
    let obj = t
        .as_object()
        .ok_or_else(|| ScriptError::invalid(format!("{at}: expected an object")))?;
    match (obj.get("tool_calls"), obj.get("final")) {
        (Some(calls), None) => {
            let calls = calls.as_array().ok_or_else(|| {
                ScriptError::invalid(format!("{at}.tool_calls: expected an array"))
            })?;
            if calls.is_empty() {
                return Err(ScriptError::invalid(format!(
                    "{at}.tool_calls: must hold at least one call"
                )));
            }
            let mut calls = calls
                .iter()
                .enumerate()
                .map(|(j, c)| parse_call(&format!("{at}.tool_calls[{j}]"), c))
                .collect::<Result<Vec<_>, _>>()?;
            default_ids(&mut calls, i + 1);
            Ok(ScriptTurn::ToolCalls(calls))
        }
        (None, Some(Value::String(text))) => Ok(ScriptTurn::Final(text.clone())),
        (None, Some(_)) => Err(ScriptError::invalid(format!(
            "{at}.final: expected a string"
        ))),
        (Some(_), Some(_)) => Err(ScriptError::invalid(format!(
            "{at}: has both \"tool_calls\" and \"final\"; pick one"
        ))),
        (None, None) => Err(ScriptError::invalid(format!(
            "{at}: expected \"tool_calls\" or \"final\""
        ))),
    }
}

/// Gives each call written without an id `call_<turn>_<j>` (`j` its place in
/// the turn), with a suffix while another call of the turn has that id: a
/// default never turns into a duplicate the script did not write.
fn default_ids(calls: &mut [ToolCall], turn: usize) {
    let mut taken: HashSet<String> = calls.iter().map(|c| c.id.clone()).collect();
    agentry_protocol::tool::assign_blank_ids(calls, turn as u64, &mut taken);
}

/// One call; its id is left empty when the script gives none (see
/// [`default_ids`]).
fn parse_call(at: &str, c: &Value) -> Result<ToolCall, ScriptError> {
    let obj = c
        .as_object()
        .ok_or_else(|| ScriptError::invalid(format!("{at}: expected an object")))?;
    let name = match obj.get("name") {
        Some(Value::String(n)) if !n.is_empty() => n.clone(),
        _ => {
            return Err(ScriptError::invalid(format!(
                "{at}.name: expected a non-empty string"
            )));
        }
    };
    let id = match obj.get("id") {
        None => String::new(),
        // A blank id is no id the host could key a result on.
        Some(Value::String(id)) if !id.trim().is_empty() => id.clone(),
        Some(_) => {
            return Err(ScriptError::invalid(format!(
                "{at}.id: expected a non-empty string (not blank)"
            )));
        }
    };
    let arguments = match obj.get("arguments") {
        None => ToolArguments::Parsed(Value::Object(Default::default())),
        Some(Value::String(raw)) => ToolArguments::Raw(raw.clone()),
        Some(v) => ToolArguments::Parsed(v.clone()),
    };
    Ok(ToolCall {
        id,
        name,
        arguments,
    })
}

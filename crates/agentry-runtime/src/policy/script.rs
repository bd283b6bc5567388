//! The scripted policy: the built-in default, no network needed.
//!
//! `script.json`:
//! `{"turns": [ {"tool_calls": [{"id": "...", "name": "...", "arguments": {...}}]} | {"final": "text"} ], "then": "repeat_last" | "stop"}`.
//! `arguments` may be a raw string, to simulate a model emitting broken JSON.

use std::path::Path;

use agentry_protocol::decision::{Decision, PolicyOutput};
use agentry_protocol::tool::{ToolArguments, ToolCall};
use async_trait::async_trait;
use serde_json::Value;

use super::{Policy, PolicyContext};
use crate::error::RuntimeError;

/// One scripted model turn.
#[derive(Debug, Clone, PartialEq)]
pub enum ScriptTurn {
    /// Propose these calls.
    ToolCalls(Vec<ToolCall>),
    /// Answer with this text.
    Final(String),
}

/// What happens after the last turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ScriptEnd {
    /// Repeat the last turn forever (a model stuck in a loop).
    RepeatLast,
    /// Stop: the policy has nothing more to say; the run ends `unrecoverable_error`.
    #[default]
    Stop,
}

/// A parsed script.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Script {
    /// Turns, in order.
    pub turns: Vec<ScriptTurn>,
    /// After the last turn.
    pub then: ScriptEnd,
}

impl Script {
    /// Loads and validates a script file. Errors name the file and the field.
    pub fn load(path: &Path) -> Result<Script, RuntimeError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| RuntimeError::task(path, format!("cannot read script: {e}")))?;
        Script::parse(&text).map_err(|m| RuntimeError::task(path, m))
    }

    /// Parses script JSON. The error names the field and what is wrong.
    pub fn parse(text: &str) -> Result<Script, String> {
        let v: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
        Script::from_value(&v)
    }

    /// Builds a script from a JSON value (e.g. an inline script in a request body).
    pub fn from_value(v: &Value) -> Result<Script, String> {
        let obj = v
            .as_object()
            .ok_or("the script must be a JSON object with \"turns\"")?;
        for key in obj.keys() {
            if key != "turns" && key != "then" {
                return Err(format!(
                    "unknown field \"{key}\" (expected \"turns\" and \"then\")"
                ));
            }
        }
        let then = match obj.get("then") {
            None => ScriptEnd::Stop,
            Some(Value::String(s)) if s == "stop" => ScriptEnd::Stop,
            Some(Value::String(s)) if s == "repeat_last" => ScriptEnd::RepeatLast,
            Some(other) => {
                return Err(format!(
                    "then: expected \"repeat_last\" or \"stop\", found {other}"
                ));
            }
        };
        let turns = obj
            .get("turns")
            .ok_or("missing field \"turns\"")?
            .as_array()
            .ok_or("turns: expected an array")?;
        let turns = turns
            .iter()
            .enumerate()
            .map(|(i, t)| parse_turn(i, t))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Script { turns, then })
    }

    /// The script as a policy.
    pub fn into_policy(self) -> ScriptedPolicy {
        ScriptedPolicy::new(self)
    }
}

fn parse_turn(i: usize, t: &Value) -> Result<ScriptTurn, String> {
    let at = format!("turns[{i}]");
    let obj = t.as_object().ok_or(format!("{at}: expected an object"))?;
    match (obj.get("tool_calls"), obj.get("final")) {
        (Some(calls), None) => {
            let calls = calls
                .as_array()
                .ok_or(format!("{at}.tool_calls: expected an array"))?;
            if calls.is_empty() {
                return Err(format!("{at}.tool_calls: must hold at least one call"));
            }
            calls
                .iter()
                .enumerate()
                .map(|(j, c)| parse_call(&format!("{at}.tool_calls[{j}]"), i + 1, j, c))
                .collect::<Result<Vec<_>, _>>()
                .map(ScriptTurn::ToolCalls)
        }
        (None, Some(Value::String(text))) => Ok(ScriptTurn::Final(text.clone())),
        (None, Some(_)) => Err(format!("{at}.final: expected a string")),
        (Some(_), Some(_)) => Err(format!(
            "{at}: has both \"tool_calls\" and \"final\"; pick one"
        )),
        (None, None) => Err(format!("{at}: expected \"tool_calls\" or \"final\"")),
    }
}

fn parse_call(at: &str, turn: usize, j: usize, c: &Value) -> Result<ToolCall, String> {
    let obj = c.as_object().ok_or(format!("{at}: expected an object"))?;
    let name = match obj.get("name") {
        Some(Value::String(n)) if !n.is_empty() => n.clone(),
        _ => return Err(format!("{at}.name: expected a non-empty string")),
    };
    let id = match obj.get("id") {
        None => format!("call_{turn}_{j}"),
        Some(Value::String(id)) if !id.is_empty() => id.clone(),
        Some(_) => return Err(format!("{at}.id: expected a non-empty string")),
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

/// Plays a [`Script`]: turn `i` at step `i` (so a resumed run goes on where it
/// stopped, like a model reading the session would).
#[derive(Debug, Clone)]
pub struct ScriptedPolicy {
    script: Script,
}

impl ScriptedPolicy {
    /// A policy that plays `script`.
    pub fn new(script: Script) -> Self {
        ScriptedPolicy { script }
    }

    fn turn(&self, step: u64) -> Option<&ScriptTurn> {
        let i = usize::try_from(step.saturating_sub(1)).unwrap_or(usize::MAX);
        match self.script.turns.get(i) {
            Some(t) => Some(t),
            None if self.script.then == ScriptEnd::RepeatLast => self.script.turns.last(),
            None => None,
        }
    }
}

#[async_trait]
impl Policy for ScriptedPolicy {
    fn name(&self) -> String {
        "script".to_string()
    }

    async fn decide(&mut self, ctx: PolicyContext<'_>) -> PolicyOutput {
        let played = self.script.turns.len();
        let decision = match self.turn(ctx.step) {
            Some(ScriptTurn::ToolCalls(calls)) => Decision::ToolCalls {
                calls: calls.clone(),
            },
            Some(ScriptTurn::Final(answer)) => Decision::Final {
                answer: answer.clone(),
            },
            None => Decision::Failed {
                message: format!("script exhausted after {played} turns (then = \"stop\")"),
                fatal: true,
            },
        };
        PolicyOutput::new(decision, "script")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_the_documented_format() {
        let s = Script::parse(
            r#"{"turns":[{"tool_calls":[{"id":"c1","name":"fs.read","arguments":{"path":"a"}}]},
                         {"tool_calls":[{"name":"x","arguments":"{broken"}]},
                         {"final":"ok"}],"then":"repeat_last"}"#,
        )
        .unwrap();
        assert_eq!(s.then, ScriptEnd::RepeatLast);
        assert_eq!(
            s.turns[0],
            ScriptTurn::ToolCalls(vec![ToolCall::new("c1", "fs.read", json!({"path":"a"}))])
        );
        match &s.turns[1] {
            ScriptTurn::ToolCalls(c) => {
                assert_eq!(c[0].id, "call_2_0");
                assert_eq!(c[0].arguments, ToolArguments::Raw("{broken".into()));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(s.turns[2], ScriptTurn::Final("ok".into()));
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (r#"{"turns":[{"final":3}]}"#, "turns[0].final"),
            (
                r#"{"turns":[{"tool_calls":[{"id":"a"}]}]}"#,
                "turns[0].tool_calls[0].name",
            ),
            (r#"{"turns":[], "then":"loop"}"#, "then"),
            (r#"{"turn":[]}"#, "unknown field \"turn\""),
            (r#"{"turns":[{}]}"#, "turns[0]"),
            ("[", "not valid JSON"),
        ];
        for (text, want) in cases {
            let err = Script::parse(text).unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
        }
    }
}

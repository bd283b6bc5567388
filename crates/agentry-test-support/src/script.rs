//! A compact builder for scripted policies.
//!
//! [`ScriptBuilder`] writes the same [`Script`] a `script.json` file describes,
//! without the JSON: one method per model turn.

use agentry::policy::{ScriptEnd, ScriptTurn};
use agentry::protocol::tool::ToolArguments;
use agentry::{Script, ScriptedPolicy, ToolCall};
use serde_json::Value;

/// A tool call with parsed arguments: `call("c1", "fs.read", json!({"path": "a"}))`.
pub fn call(id: &str, name: &str, arguments: Value) -> ToolCall {
    ToolCall::new(id, name, arguments)
}

/// A tool call whose arguments are raw model output, possibly broken JSON.
pub fn raw_call(id: &str, name: &str, raw: &str) -> ToolCall {
    ToolCall {
        id: id.to_string(),
        name: name.to_string(),
        arguments: ToolArguments::Raw(raw.to_string()),
    }
}

/// Builds a [`Script`] turn by turn.
///
/// ```
/// use agentry_test_support::ScriptBuilder;
/// use serde_json::json;
/// let script = ScriptBuilder::new()
///     .call("c1", "fs.read", json!({"path": "numbers.txt"}))
///     .raw_call("c2", "fs.write", "{broken")
///     .finish("sum=23")
///     .final_text("done")
///     .repeat_last()
///     .build();
/// assert_eq!(script.turns.len(), 4);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ScriptBuilder {
    turns: Vec<ScriptTurn>,
    then: ScriptEnd,
    finishes: usize,
}

impl ScriptBuilder {
    /// An empty script that stops (the run ends `unrecoverable_error`) after its last turn.
    pub fn new() -> Self {
        ScriptBuilder::default()
    }

    /// A turn with one call.
    pub fn call(self, id: &str, name: &str, arguments: Value) -> Self {
        self.calls(vec![call(id, name, arguments)])
    }

    /// A turn with one call whose arguments are the raw string `raw` (e.g. broken JSON).
    pub fn raw_call(self, id: &str, name: &str, raw: &str) -> Self {
        self.calls(vec![raw_call(id, name, raw)])
    }

    /// Adds a call to the previous turn, so both are proposed together (parallel
    /// calls). Starts a new turn when the previous one is not a tool-call turn.
    pub fn and_call(mut self, id: &str, name: &str, arguments: Value) -> Self {
        match self.turns.last_mut() {
            Some(ScriptTurn::ToolCalls(calls)) => {
                calls.push(call(id, name, arguments));
                self
            }
            Some(ScriptTurn::Final(_)) | None => self.call(id, name, arguments),
        }
    }

    /// A turn proposing these calls together, in this order.
    pub fn calls(mut self, calls: Vec<ToolCall>) -> Self {
        self.turns.push(ScriptTurn::ToolCalls(calls));
        self
    }

    /// A turn calling `task.finish {answer}` (call id `finish-N`).
    pub fn finish(mut self, answer: &str) -> Self {
        self.finishes += 1;
        let id = format!("finish-{}", self.finishes);
        self.call(
            &id,
            agentry::tools::FINISH_TOOL,
            serde_json::json!({ "answer": answer }),
        )
    }

    /// A turn answering with final text.
    pub fn final_text(mut self, text: &str) -> Self {
        self.turns.push(ScriptTurn::Final(text.to_string()));
        self
    }

    /// After the last turn, repeat it forever (a model stuck in a loop).
    pub fn repeat_last(mut self) -> Self {
        self.then = ScriptEnd::RepeatLast;
        self
    }

    /// After the last turn, stop (the default).
    pub fn stop(mut self) -> Self {
        self.then = ScriptEnd::Stop;
        self
    }

    /// The script.
    pub fn build(self) -> Script {
        Script {
            turns: self.turns,
            then: self.then,
        }
    }

    /// The script as a policy.
    pub fn policy(self) -> ScriptedPolicy {
        self.build().into_policy()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn and_call_joins_the_previous_turn() {
        let script = ScriptBuilder::new()
            .call("a", "fs.read", json!({"path": "x"}))
            .and_call("b", "fs.read", json!({"path": "y"}))
            .final_text("ok")
            .and_call("c", "fs.list", json!({}))
            .build();
        assert_eq!(
            script.turns,
            vec![
                ScriptTurn::ToolCalls(vec![
                    call("a", "fs.read", json!({"path": "x"})),
                    call("b", "fs.read", json!({"path": "y"})),
                ]),
                ScriptTurn::Final("ok".into()),
                ScriptTurn::ToolCalls(vec![call("c", "fs.list", json!({}))]),
            ]
        );
        assert_eq!(script.then, ScriptEnd::Stop);
    }

    #[test]
    fn finish_ids_are_fresh() {
        let script = ScriptBuilder::new().finish("a").finish("b").build();
        let ids: Vec<String> = script
            .turns
            .iter()
            .filter_map(|t| match t {
                ScriptTurn::ToolCalls(c) => c.first().map(|c| c.id.clone()),
                ScriptTurn::Final(_) => None,
            })
            .collect();
        assert_eq!(ids, vec!["finish-1", "finish-2"]);
    }
}

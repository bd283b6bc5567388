//! The default system prompt both providers send.

use crate::names::ToolNameMap;

/// The default system prompt: the goal, and how to finish.
pub(crate) fn system_prompt(goal: &str, names: &ToolNameMap) -> String {
    let finish = names.wire("task.finish");
    format!(
        "You are an agent that reaches a goal by calling tools.\n\
         Goal: {goal}\n\
         Call tools to make progress; each tool result comes back as JSON. When the \
         goal is met, call `{finish}` with your answer and evidence, or reply with the \
         answer as plain text."
    )
}

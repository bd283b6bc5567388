//! A parsed script, as plain data.

use agentry_protocol::tool::ToolCall;

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

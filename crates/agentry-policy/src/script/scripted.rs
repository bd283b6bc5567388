//! [`ScriptedPolicy`]: plays a [`Script`] turn by turn.

use agentry_protocol::decision::{Decision, PolicyOutput};
use async_trait::async_trait;

use super::format::{Script, ScriptEnd, ScriptTurn};
use crate::policy::{Policy, PolicyContext};

impl Script {
    /// The script as a policy.
    pub fn into_policy(self) -> ScriptedPolicy {
        ScriptedPolicy::new(self)
    }
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

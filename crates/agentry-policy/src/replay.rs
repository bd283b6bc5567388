//! [`ReplayPolicy`]: a recorded run's decisions, returned step by step, for
//! `agentry replay`; optionally another policy from a fork step on.

use std::collections::BTreeMap;

use agentry_protocol::decision::{Decision, PolicyOutput};
use async_trait::async_trait;

use crate::policy::{Policy, PolicyContext};

/// Returns the decision recorded for each step (with its recorded usage and
/// model name, so token budgets drain as they did). A step it has no record
/// for ends the run (a fatal failure saying so): the replay ran longer than
/// the recording. With [`ReplayPolicy::fork_at`], steps from the fork on are
/// decided by another policy; with [`ReplayPolicy::until`], the step after the
/// last one wanted ends the run.
pub struct ReplayPolicy {
    recorded: BTreeMap<u64, PolicyOutput>,
    fork: Option<Fork>,
    until: Option<u64>,
}

/// The policy that takes over at a step.
struct Fork {
    at: u64,
    policy: Box<dyn Policy>,
}

impl std::fmt::Debug for ReplayPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayPolicy")
            .field("recorded", &self.recorded.len())
            .field("fork_at", &self.fork.as_ref().map(|k| k.at))
            .field("until", &self.until)
            .finish()
    }
}

/// The message of the fatal failure that ends a replay stopped by
/// [`ReplayPolicy::until`] (a reader of the replay's trace recognizes it).
pub const UNTIL_MESSAGE: &str = "replay stopped: --until reached";

/// The message of the fatal failure for a step the recording has no decision for.
pub const UNRECORDED_MESSAGE: &str = "replay: the recorded run made no decision at this step";

impl ReplayPolicy {
    /// Plays `recorded` (step number, what the policy returned then).
    pub fn new(recorded: impl IntoIterator<Item = (u64, PolicyOutput)>) -> Self {
        ReplayPolicy {
            recorded: recorded.into_iter().collect(),
            fork: None,
            until: None,
        }
    }

    /// From step `at` on, `policy` decides instead. It is shown step numbers
    /// counted from the fork (`at` is its step 1), so a script's first turn
    /// is played at `at`.
    pub fn fork_at(mut self, at: u64, policy: Box<dyn Policy>) -> Self {
        self.fork = Some(Fork { at, policy });
        self
    }

    /// Ends the run at the step after `last` (a fatal failure, [`UNTIL_MESSAGE`]).
    pub fn until(mut self, last: u64) -> Self {
        self.until = Some(last);
        self
    }
}

#[async_trait]
impl Policy for ReplayPolicy {
    fn name(&self) -> String {
        "replay".to_string()
    }

    async fn decide(&mut self, ctx: PolicyContext<'_>) -> PolicyOutput {
        if self.until.is_some_and(|last| ctx.step > last) {
            return failed(UNTIL_MESSAGE);
        }
        if let Some(fork) = self.fork.as_mut()
            && ctx.step >= fork.at
        {
            let shown = PolicyContext {
                step: ctx.step - fork.at + 1,
                ..ctx
            };
            return fork.policy.decide(shown).await;
        }
        match self.recorded.get(&ctx.step) {
            Some(output) => output.clone(),
            None => failed(UNRECORDED_MESSAGE),
        }
    }
}

fn failed(message: &str) -> PolicyOutput {
    PolicyOutput::new(
        Decision::Failed {
            message: message.to_string(),
            fatal: true,
        },
        "replay",
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use agentry_protocol::BudgetSnapshot;
    use agentry_protocol::decision::TokenUsage;

    use super::*;
    use crate::Script;

    fn decide(policy: &mut dyn Policy, step: u64) -> PolicyOutput {
        let budget = BudgetSnapshot::default();
        let ctx = PolicyContext {
            run_id: "r",
            step,
            goal: "g",
            tools: &[],
            session: &[],
            budget: &budget,
            deltas: None,
            traceparent: None,
            content: None,
        };
        let mut fut = pin!(policy.decide(ctx));
        match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(out) => out,
            Poll::Pending => panic!("a replay never waits"),
        }
    }

    fn answer(text: &str) -> PolicyOutput {
        let mut out = PolicyOutput::new(
            Decision::Final {
                answer: text.into(),
            },
            "openai:m",
        );
        out.usage = TokenUsage {
            tokens_in: 7,
            tokens_out: 2,
            ..TokenUsage::default()
        };
        out
    }

    fn fatal(out: &PolicyOutput) -> &str {
        let Decision::Failed {
            message,
            fatal: true,
        } = &out.decision
        else {
            panic!("expected a fatal failure, got {:?}", out.decision)
        };
        message
    }

    #[test]
    fn plays_the_recording_then_ends_the_run() {
        let mut p = ReplayPolicy::new([(1, answer("a")), (2, answer("b"))]);
        assert_eq!(decide(&mut p, 1), answer("a"));
        assert_eq!(decide(&mut p, 2), answer("b"));
        assert_eq!(fatal(&decide(&mut p, 3)), UNRECORDED_MESSAGE);
    }

    #[test]
    fn until_ends_after_the_last_wanted_step() {
        let mut p = ReplayPolicy::new([(1, answer("a")), (2, answer("b"))]).until(1);
        assert_eq!(decide(&mut p, 1), answer("a"));
        assert_eq!(fatal(&decide(&mut p, 2)), UNTIL_MESSAGE);
    }

    #[test]
    fn a_fork_decides_from_its_step_counting_from_one() {
        let script = Script::parse(r#"{"turns":[{"final":"forked"}]}"#).unwrap();
        let mut p = ReplayPolicy::new([(1, answer("a")), (2, answer("b"))])
            .fork_at(2, Box::new(script.into_policy()));
        assert_eq!(decide(&mut p, 1), answer("a"));
        let out = decide(&mut p, 2);
        assert_eq!(
            out.decision,
            Decision::Final {
                answer: "forked".into()
            }
        );
        assert_eq!(out.model, "script");
    }
}

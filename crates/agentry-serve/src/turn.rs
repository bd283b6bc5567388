//! Whether an event-driven run has answered its inputs, read from its
//! events. Its status stays `sleeping` while a step an input woke runs, so
//! the status alone cannot say; the events can (AG-UI ends a segment on it,
//! an A2A task is INPUT_REQUIRED again only once its message is answered).

use agentry::protocol::decision::Decision;
use agentry::protocol::event::RunEvent;
use agentry::protocol::trace::RunInput;

/// Whether the run's turn is over, from its events: a step's record
/// (`state_updated`) ends it unless the step called tools (the model sees
/// their results in a next step) or an input came after its decision (a
/// next step takes it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Turn {
    over: bool,
    calls: bool,
    input_pending: bool,
    /// The number of the last input applied (`input_applied`'s `seq`).
    applied: u64,
    /// `applied` when a turn last ended: the inputs the run has answered.
    answered: u64,
}

impl Default for Turn {
    /// A run that has done nothing yet waits for its first input.
    fn default() -> Turn {
        Turn {
            over: true,
            calls: false,
            input_pending: false,
            applied: 0,
            answered: 0,
        }
    }
}

impl Turn {
    /// Whether the turn is over: the run waits for its next input.
    pub(crate) fn is_over(&self) -> bool {
        self.over
    }

    /// How many inputs the run had applied when its turn last ended: an
    /// input numbered up to this has been answered.
    pub(crate) fn answered(&self) -> u64 {
        self.answered
    }

    /// Whether an event of type `kind` can move the turn (the others need
    /// not be read).
    pub(crate) fn reads(kind: &str) -> bool {
        matches!(
            kind,
            "input_applied" | "step_started" | "decision_made" | "state_updated"
        )
    }

    pub(crate) fn see(&mut self, event: &RunEvent) {
        match event {
            RunEvent::InputApplied {
                seq,
                input: RunInput::Message { .. } | RunInput::Event { .. } | RunInput::Tick { .. },
            } => {
                self.applied = self.applied.max(*seq);
                self.input_pending = true;
                self.over = false;
            }
            RunEvent::StepStarted { .. } => self.over = false,
            RunEvent::DecisionMade { decision, .. } => {
                self.over = false;
                self.input_pending = false;
                self.calls =
                    matches!(&**decision, Decision::ToolCalls { calls } if !calls.is_empty());
            }
            RunEvent::StateUpdated { .. } => {
                self.over = !self.calls && !self.input_pending;
                if self.over {
                    self.answered = self.applied;
                }
            }
            RunEvent::InputApplied { seq, .. } => self.applied = self.applied.max(*seq),
            RunEvent::TokenDelta { .. }
            | RunEvent::ToolCallStarted { .. }
            | RunEvent::ToolProgress { .. }
            | RunEvent::ToolCallFinished { .. }
            | RunEvent::BudgetSpent { .. }
            | RunEvent::AwaitingApproval { .. }
            | RunEvent::AwaitingDecision { .. }
            | RunEvent::StepInterrupted { .. }
            | RunEvent::TickSkipped { .. }
            | RunEvent::RunStopped { .. }
            | _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentry::protocol::tool::ToolCall;
    use std::sync::Arc;

    /// A decision of `calls` calls, or a final answer for none.
    fn decided(calls: usize) -> RunEvent {
        let decision = match calls {
            0 => Decision::Final {
                answer: "ok".into(),
            },
            n => Decision::ToolCalls {
                calls: (0..n)
                    .map(|i| ToolCall::new(format!("c{i}"), "fs.read", serde_json::json!({})))
                    .collect(),
            },
        };
        RunEvent::DecisionMade {
            step: 1,
            decision: Arc::new(decision),
        }
    }

    #[test]
    fn a_turn_is_over_after_a_step_without_calls_and_with_no_input_after_it() {
        let message = RunEvent::InputApplied {
            seq: 1,
            input: RunInput::Message { text: "hi".into() },
        };
        let record = RunEvent::StateUpdated { version: 2 };
        let mut turn = Turn::default();
        assert!(turn.over, "a run that did nothing waits");
        for event in [
            message.clone(),
            RunEvent::StepStarted { step: 1 },
            decided(1),
            record.clone(),
        ] {
            turn.see(&event);
            assert!(!turn.over, "{event:?}");
        }
        // The calls' results go to a next step, which answers.
        for event in [
            RunEvent::StepStarted { step: 2 },
            decided(0),
            record.clone(),
        ] {
            turn.see(&event);
        }
        assert!(turn.over);
        // A message taken after the decision: a next step answers it.
        for event in [
            RunEvent::StepStarted { step: 3 },
            decided(0),
            message,
            record,
        ] {
            turn.see(&event);
        }
        assert!(!turn.over);
    }

    /// An input counts as answered once the turn it opened is over: not
    /// while its step runs, nor when a step taken before it ends.
    #[test]
    fn an_input_is_answered_once_the_turn_it_opened_ends() {
        let message = |seq| RunEvent::InputApplied {
            seq,
            input: RunInput::Message { text: "hi".into() },
        };
        let record = RunEvent::StateUpdated { version: 2 };
        let mut turn = Turn::default();
        for event in [message(1), RunEvent::StepStarted { step: 1 }, decided(0)] {
            turn.see(&event);
            assert_eq!(turn.answered(), 0, "{event:?}");
        }
        turn.see(&record);
        assert_eq!(turn.answered(), 1);
        // An approval is numbered too: the next message is input 3.
        turn.see(&RunEvent::InputApplied {
            seq: 2,
            input: RunInput::Resume,
        });
        for event in [RunEvent::StepStarted { step: 2 }, decided(0), message(3)] {
            turn.see(&event);
        }
        turn.see(&record);
        assert_eq!(turn.answered(), 1, "input 3 came after the decision");
        for event in [RunEvent::StepStarted { step: 3 }, decided(0), record] {
            turn.see(&event);
        }
        assert_eq!(turn.answered(), 3);
    }
}

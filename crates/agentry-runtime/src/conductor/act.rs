//! Acting on a decision (step 3): run the proposed calls, taking them from the
//! run's tool-call allowance first; or take the model's final answer; or
//! record the policy's failure, which the model sees as a host note (and, if
//! fatal, stop).

use std::sync::Arc;

use agentry_protocol::decision::Decision;
use agentry_protocol::envelope::{ErrorCode, ResultEnvelope, ToolError};
use agentry_protocol::event::RunEvent;
use agentry_protocol::stop::StopReason;
use agentry_protocol::tool::ToolCall;
use agentry_protocol::trace::StepInterrupt;
use tokio::time::Duration;

use super::state::ConductorState;
use super::step_result::{Acted, Answer, StepResult, Stop};
use crate::ask::ask;
use crate::executor::{Executed, ExecutorMsg};
use crate::interrupt::is_cut;
use crate::policy::is_interrupted_turn;

/// How long a cancelled step waits for the executor's own cancelled envelopes
/// (the executor itself gives each tool `executor::CANCEL_GRACE` to clean up)
/// before it writes them itself.
const CANCEL_GRACE: Duration = Duration::from_millis(150);

impl ConductorState {
    /// Registers the values of the decision's secret argument fields with the
    /// run's redactor, before the decision is recorded or published anywhere
    /// (right after the policy answers).
    pub(super) fn register_secret_arguments(&self, decision: &Decision) {
        self.wiring.events.redaction().register_arguments(decision);
    }

    /// Step 3, act: publish the decision, act on it (fills `r.acted`), publish
    /// each result and trace the approvals the calls waited for.
    pub(super) async fn act(&mut self, r: &mut StepResult) {
        let step = r.step;
        self.turn_open = matches!(&*r.decision, Decision::ToolCalls { calls } if !calls.is_empty());
        self.emit(|| RunEvent::DecisionMade {
            step,
            decision: Arc::clone(&r.decision),
        });
        r.acted = match &*r.decision {
            Decision::ToolCalls { calls } if !calls.is_empty() => {
                self.run_calls(step, &r.decision, calls, r.again).await
            }
            Decision::ToolCalls { .. } | Decision::Final { .. } | Decision::Failed { .. } => {
                without_calls(&r.decision)
            }
        };
        self.note_interrupt(r);
        self.count_denials(&r.acted.results);
        for result in &r.acted.results {
            self.emit(|| RunEvent::ToolCallFinished {
                step,
                result: Arc::clone(result),
            });
        }
        // Approval decisions were applied (and numbered) by the state keeper while
        // the step ran; their trace lines go before the step's.
        for approval in &r.acted.approvals {
            self.trace_input(approval.at, &approval.input);
        }
    }

    /// Whether a user's interrupt cut this step short, and what it cut (the
    /// model's turn, calls): kept for the trace and published.
    fn note_interrupt(&self, r: &mut StepResult) {
        let mut cut = r.acted.interrupted.take().unwrap_or_default();
        if !is_cut(&self.step_cut, &self.wiring.run_token) {
            return;
        }
        // The user spoke before the run ended: an answer of this step does
        // not end it; the next turn sees the message and answers again.
        if r.acted
            .answer
            .as_ref()
            .is_some_and(|a| a.ends_run(self.wiring.config.driver))
        {
            r.acted.answer = None;
        }
        cut.decision = is_interrupted_turn(&r.decision);
        if !cut.decision && cut.calls.is_empty() && cut.unsettled.is_empty() {
            // The interrupt came as the step was ending: nothing was cut.
            return;
        }
        let step = r.step;
        let interrupted = cut.clone();
        self.emit(|| RunEvent::StepInterrupted { step, interrupted });
        r.acted.interrupted = Some(cut);
    }

    /// Keeps the run of `EPERM` results going or breaks it (any other result).
    fn count_denials(&mut self, results: &[Arc<ResultEnvelope>]) {
        // Off: nothing reads the row, so it is not kept (it would only grow).
        if self.wiring.config.max_denied == 0 {
            return;
        }
        for result in results {
            if result.error_code() == Some(ErrorCode::Eperm) {
                self.denied
                    .push(format!("{} ({})", result.tool, result.tool_call_id));
            } else {
                self.denied.clear();
            }
        }
    }

    /// Takes the calls from the tool-call allowance and runs those granted. A
    /// refused call, or a cancellation while they ran, ends the run
    /// (`Acted::stop`).
    async fn run_calls(
        &mut self,
        step: u64,
        decision: &Arc<Decision>,
        calls: &[ToolCall],
        again: bool,
    ) -> Acted {
        let n = calls.len() as u64;
        // Taken from what is left in one atomic step shared with the supervisor,
        // which books them (this conductor is the only spender of its run's own
        // tool calls): check-before-spend without a round trip.
        let granted = if self.wiring.run_token.is_cancelled() {
            0
        } else {
            self.allowance.take_up_to(n)
        };
        let run = ask(&self.children.executor, |reply| ExecutorMsg::Execute {
            step,
            decision: Arc::clone(decision),
            granted: granted as usize,
            redrive: again,
            cut: self.step_cut.clone(),
            reply,
        });
        let token = self.wiring.run_token.clone();
        let executed = tokio::select! {
            // An executor that died mid-call cannot say what happened: the calls
            // are reported as lost (its supervisor, this conductor, restarts it).
            r = run => r.unwrap_or_else(|e| {
                self.phase.executor_lost();
                lost_calls(calls, &e.to_string())
            }),
            // The executor answers cancelled calls itself; if it cannot within the
            // grace period, the conductor records them as cancelled.
            _ = async { token.cancelled().await; tokio::time::sleep(CANCEL_GRACE).await } => {
                cancelled_results(calls)
            }
        };
        let stop = if self.wiring.run_token.is_cancelled() {
            Some(self.cancelled_stop("tools were running").await)
        } else {
            refused(step, n, granted)
        };
        Acted {
            answer: finish_answer(&executed.results).map(Answer::Finished),
            results: executed.results,
            attempts: executed.attempts,
            approvals: executed.approvals,
            tool_calls: granted,
            side_effects: executed.side_effects,
            stop,
            interrupted: Some(StepInterrupt {
                decision: false,
                calls: executed.interrupted,
                unsettled: executed.unsettled,
            }),
        }
    }
}

/// The stop when some of a step's `n` calls were refused for the budget.
fn refused(step: u64, n: u64, granted: u64) -> Option<Stop> {
    (granted < n).then(|| {
        Stop::new(
            StopReason::MaxToolCalls,
            format!(
                "tool-call budget exhausted: {} of {n} calls at step {step} were refused",
                n - granted
            ),
        )
    })
}

/// A decision with no calls to run. An empty call list or a policy failure is
/// recorded as the step's decision alone (adapters show it to the model as a
/// host note): no result envelope, since there is no call for one to answer and
/// providers reject a tool result without its call. A fatal failure is also a
/// stop; a final answer is the model's answer.
fn without_calls(decision: &Decision) -> Acted {
    match decision {
        Decision::ToolCalls { .. } => Acted::default(),
        Decision::Final { answer } => Acted {
            answer: Some(Answer::Final(answer.clone())),
            ..Acted::default()
        },
        Decision::Failed { message, fatal } => Acted {
            stop: fatal.then(|| {
                Stop::new(
                    StopReason::UnrecoverableError,
                    format!("policy failed: {message}"),
                )
            }),
            ..Acted::default()
        },
    }
}

/// The answer of a successful, freshly executed `task.finish` call in this step.
fn finish_answer(results: &[Arc<ResultEnvelope>]) -> Option<String> {
    results
        .iter()
        .find(|r| r.ok && r.tool == agentry_tools::FINISH_TOOL)
        .and_then(|r| r.data.as_ref())
        .and_then(|d| d.get("answer"))
        .and_then(|a| a.as_str())
        .map(str::to_string)
}

/// The executor stopped during the calls: each is reported as lost.
fn lost_calls(calls: &[ToolCall], why: &str) -> Executed {
    Executed {
        results: calls.iter().map(|c| Arc::new(lost_call(c, why))).collect(),
        ..Executed::default()
    }
}

fn lost_call(call: &ToolCall, why: &str) -> ResultEnvelope {
    ResultEnvelope::failure(
        &call.id,
        &call.name,
        ToolError::new(
            ErrorCode::Einternal,
            format!(
                "the tool executor stopped during this call, so its outcome is unknown \
                 ({why}); the executor was restarted"
            ),
        )
        .with_action("check whether the action took effect before repeating it"),
    )
}

/// The executor did not answer a cancelled step in time: each call is recorded
/// as cancelled.
fn cancelled_results(calls: &[ToolCall]) -> Executed {
    Executed {
        results: calls
            .iter()
            .map(|c| {
                Arc::new(ResultEnvelope::failure(
                    &c.id,
                    &c.name,
                    ToolError::new(
                        ErrorCode::Ecanceled,
                        "cancelled: the executor did not answer in time",
                    ),
                ))
            })
            .collect(),
        ..Executed::default()
    }
}

//! agentry's run events → AG-UI events, and the state a UI is shown.
//!
//! The state (`STATE_SNAPSHOT`, then `STATE_DELTA`s as RFC 6902 patches) is
//! the run's state as its events tell it: the state keeper's `version`, the
//! run's `status`, its `step`, the inputs applied and calls finished, the
//! world layer's references (path → sha256 and size) from the calls' results,
//! the calls parked for approval, the answer and the stop reason. Being a
//! fold of the run's events, it is the same for every client that reads the
//! same events, live or replayed.

use agentry::protocol::decision::Decision;
use agentry::protocol::envelope::ResultEnvelope;
use agentry::protocol::event::RunEvent;
use agentry::protocol::state::{PendingApproval, RunStatus, question_of};
use agentry::protocol::stop::StopReason;
use agentry::protocol::trace::RunInput;
use serde_json::{Value, json};

use super::wire::{APPROVAL_EVENT, AgUiEvent, Interrupt, Outcome, Role, ToolRole};

/// Why a segment ends.
#[derive(Debug, Clone)]
pub(crate) enum End {
    /// The run stopped, and why in words (its outcome's detail) if known.
    Stopped {
        reason: StopReason,
        detail: Option<String>,
    },
    /// Calls wait for a human: approvals, or settlements after a crash.
    Parked(Vec<Parked>),
    /// An event-driven run waits for its next event.
    Sleeping,
    /// The run's events ended without its stop (the service let go of it).
    Closed,
}

/// A parked call as an interrupt names it.
#[derive(Debug, Clone)]
pub(crate) struct Parked {
    pub call_id: String,
    pub tool: String,
    /// `approval_required`, or `decision_required` for a call a crash cut.
    pub reason: &'static str,
    /// A remote agent's question the call waits on (answered with
    /// `payload.answer`).
    pub question: Option<String>,
}

/// Why an interrupt is raised for a call a crash cut: it waits for a
/// human's `happened`, `retry` or `skip`.
pub(crate) const DECISION_REQUIRED: &str = "decision_required";

impl Parked {
    pub(crate) fn approvals(pending: &[PendingApproval], reason: &'static str) -> Vec<Parked> {
        pending
            .iter()
            .map(|p| Parked {
                call_id: p.call.id.clone(),
                tool: p.call.name.clone(),
                reason,
                question: p.question().map(str::to_string),
            })
            .collect()
    }
}

/// One AG-UI stream's view of a run: what it has opened and the state it sent.
#[derive(Debug)]
pub(crate) struct Translator {
    state: Value,
    /// The state as last sent (the base of the next delta).
    sent: Value,
    open_text: Option<String>,
    open_step: Option<String>,
    /// The answer given in this segment (its `RUN_FINISHED.result`).
    answered: Option<String>,
}

impl Translator {
    /// A run of `goal` (when known) before any event.
    pub(crate) fn new(goal: Option<String>) -> Translator {
        let mut state = json!({
            "status": RunStatus::Running.as_str(),
            "version": 0,
            "step": 0,
            "inputs": 0,
            "tool_calls": 0,
            "world": {},
            "pending_approvals": [],
        });
        if let Some(goal) = goal {
            state["goal"] = json!(goal);
        }
        Translator {
            sent: state.clone(),
            state,
            open_text: None,
            open_step: None,
            answered: None,
        }
    }

    /// Folds events in without sending them (what came before a segment):
    /// nothing is open in the stream afterwards.
    pub(crate) fn fold(&mut self, seq: u64, event: &RunEvent) {
        self.apply(seq, event, &mut Vec::new());
        self.open_text = None;
        self.open_step = None;
        self.answered = None;
        self.sent = self.state.clone();
    }

    /// Where the run is when a segment starts after earlier ones: its events
    /// do not say that it fell asleep.
    pub(crate) fn set_status(&mut self, status: RunStatus) {
        self.state["status"] = json!(status.as_str());
    }

    /// The whole state, and the base of the deltas that follow.
    pub(crate) fn snapshot(&mut self) -> AgUiEvent {
        self.sent = self.state.clone();
        AgUiEvent::StateSnapshot {
            snapshot: self.state.clone(),
        }
    }

    /// The answer the model gave in this segment, if any.
    fn answer(&self) -> Option<Value> {
        self.answered.clone().map(Value::String)
    }

    /// Maps one event into `out`, then the state's change as a delta.
    pub(crate) fn apply(&mut self, seq: u64, event: &RunEvent, out: &mut Vec<AgUiEvent>) {
        match event {
            RunEvent::StepStarted { step } => {
                self.close(out);
                let name = format!("step {step}");
                out.push(AgUiEvent::StepStarted {
                    step_name: name.clone(),
                });
                self.open_step = Some(name);
                self.state["step"] = json!(step);
                self.set_status(RunStatus::Running);
            }
            RunEvent::TokenDelta { text, .. } => {
                let id = self.text(seq, out);
                if !text.is_empty() {
                    out.push(AgUiEvent::TextMessageContent {
                        message_id: id,
                        delta: text.clone(),
                    });
                }
            }
            RunEvent::DecisionMade { decision, .. } => self.decided(seq, decision, out),
            RunEvent::ToolCallFinished { result, .. } => self.finished(seq, result, out),
            RunEvent::StateUpdated { version } => self.state["version"] = json!(version),
            RunEvent::InputApplied { seq, input } => self.input(*seq, input),
            RunEvent::AwaitingApproval {
                call,
                effect,
                preview,
                step,
            } => {
                self.park(&call.id, &call.name, *step, RunStatus::AwaitingApproval);
                let mut value = json!({
                    "tool_call_id": call.id,
                    "tool": call.name,
                    "arguments": call.arguments.to_value().unwrap_or(Value::Null),
                    "step": step,
                });
                if let Some(effect) = effect {
                    value["effect"] = json!(effect);
                }
                if let Some(preview) = preview {
                    value["preview"] = json!(preview);
                }
                // A remote agent's question: resume answers it with text.
                if let Some(question) = question_of(preview.as_deref()) {
                    value["question"] = json!(question);
                }
                out.push(AgUiEvent::Custom {
                    name: APPROVAL_EVENT.into(),
                    value,
                });
            }
            RunEvent::AwaitingDecision { step, call } => {
                self.park(&call.id, &call.name, *step, RunStatus::AwaitingDecision);
            }
            // The model's turn was cut: what it wrote so far is all there is.
            RunEvent::StepInterrupted { .. } => self.end_text(out),
            RunEvent::RunStopped { stop_reason } => {
                self.set_status(RunStatus::Stopped);
                self.state["stop_reason"] = json!(stop_reason);
            }
            // Not in the state a UI is shown: spending has its own routes
            // (GET /runs/{id}, /metrics), and a started or progressing call
            // is told by its result. (`RunEvent` is non-exhaustive: an event
            // newer than this mapping is not sent.)
            RunEvent::ToolCallStarted { .. }
            | RunEvent::ToolProgress { .. }
            | RunEvent::BudgetSpent { .. }
            | RunEvent::TickSkipped { .. }
            | _ => {}
        }
        self.delta(out);
    }

    /// Closes what is open and ends the segment (`RUN_FINISHED` or `RUN_ERROR`).
    pub(crate) fn finish(&mut self, end: &End, thread_id: &str, run_id: &str) -> Vec<AgUiEvent> {
        let mut out = Vec::new();
        self.close(&mut out);
        if matches!(end, End::Sleeping) {
            self.set_status(RunStatus::Sleeping);
            self.delta(&mut out);
        }
        let finished = |outcome, result| AgUiEvent::RunFinished {
            thread_id: thread_id.to_string(),
            run_id: run_id.to_string(),
            result,
            outcome: Some(outcome),
        };
        out.push(match end {
            End::Stopped {
                reason: StopReason::Done,
                ..
            }
            | End::Sleeping => finished(Outcome::Success, self.answer()),
            End::Stopped {
                reason: StopReason::UserAbort,
                ..
            } => finished(Outcome::Cancelled, None),
            End::Stopped { reason, detail } => AgUiEvent::RunError {
                message: match detail.as_deref().filter(|d| !d.is_empty()) {
                    Some(detail) => format!("the run stopped: {reason}: {detail}"),
                    None => format!("the run stopped: {reason}"),
                },
                code: Some(reason.as_str().to_string()),
            },
            End::Parked(calls) => {
                let interrupts = calls
                    .iter()
                    .map(|p| Interrupt {
                        id: p.call_id.clone(),
                        reason: p.reason.to_string(),
                        tool_call_id: p.call_id.clone(),
                        message: Some(match &p.question {
                            Some(q) => format!(
                                "the call to {} waits for a human's answer to the remote agent's question {q:?} (resume with payload {{\"answer\": TEXT}})",
                                p.tool
                            ),
                            None => format!("the call to {} waits for a human", p.tool),
                        }),
                    })
                    .collect();
                finished(Outcome::Interrupt { interrupts }, None)
            }
            End::Closed => AgUiEvent::RunError {
                message: "the run's events ended before it stopped (the service let go of it)"
                    .into(),
                code: Some("closed".into()),
            },
        });
        out
    }

    fn decided(&mut self, seq: u64, decision: &Decision, out: &mut Vec<AgUiEvent>) {
        match decision {
            Decision::Final { answer } => {
                if self.open_text.is_none() {
                    let id = self.text(seq, out);
                    out.push(AgUiEvent::TextMessageContent {
                        message_id: id,
                        delta: answer.clone(),
                    });
                }
                self.end_text(out);
                self.state["answer"] = json!(answer);
                self.answered = Some(answer.clone());
            }
            Decision::ToolCalls { calls } => {
                let parent = self.open_text.clone();
                self.end_text(out);
                for call in calls {
                    let args = call.arguments.to_value().unwrap_or(Value::Null);
                    out.push(AgUiEvent::ToolCallStart {
                        tool_call_id: call.id.clone(),
                        tool_call_name: call.name.clone(),
                        parent_message_id: parent.clone(),
                    });
                    out.push(AgUiEvent::ToolCallArgs {
                        tool_call_id: call.id.clone(),
                        delta: args.to_string(),
                    });
                    out.push(AgUiEvent::ToolCallEnd {
                        tool_call_id: call.id.clone(),
                    });
                }
            }
            // A failed turn is the host's note to the model, not its words.
            Decision::Failed { .. } => self.end_text(out),
        }
    }

    fn finished(&mut self, seq: u64, result: &ResultEnvelope, out: &mut Vec<AgUiEvent>) {
        let content = if result.ok {
            match (&result.data, &result.cut) {
                (Some(data), _) => data.to_string(),
                (None, Some(cut)) => cut.head.clone(),
                (None, None) => "null".to_string(),
            }
        } else {
            json!({ "error": result.error }).to_string()
        };
        out.push(AgUiEvent::ToolCallResult {
            message_id: format!("result-{seq}"),
            tool_call_id: result.tool_call_id.clone(),
            content,
            role: ToolRole::Tool,
        });
        let calls = self.state["tool_calls"].as_u64().unwrap_or(0);
        self.state["tool_calls"] = json!(calls + 1);
        for r in &result.refs {
            self.state["world"][&r.path] = json!({ "sha256": r.sha256, "bytes": r.bytes });
        }
        self.unpark(&result.tool_call_id);
    }

    fn input(&mut self, seq: u64, input: &RunInput) {
        self.state["inputs"] = json!(seq);
        match input {
            RunInput::Approval { tool_call_id, .. } => self.unpark(tool_call_id),
            RunInput::Settlement { tool_call_id, .. } => self.unpark(tool_call_id),
            RunInput::Pause => self.set_status(RunStatus::Paused),
            RunInput::Resume
            | RunInput::Message { .. }
            | RunInput::Interrupt { .. }
            | RunInput::Event { .. }
            | RunInput::Tick { .. } => self.set_status(RunStatus::Running),
        }
    }

    fn park(&mut self, call_id: &str, tool: &str, step: u64, status: RunStatus) {
        if let Some(pending) = self.state["pending_approvals"].as_array_mut() {
            pending.push(json!({ "tool_call_id": call_id, "tool": tool, "step": step }));
        }
        self.set_status(status);
    }

    fn unpark(&mut self, call_id: &str) {
        let Some(pending) = self.state["pending_approvals"].as_array_mut() else {
            return;
        };
        let before = pending.len();
        pending.retain(|p| p["tool_call_id"] != call_id);
        if pending.is_empty() && before > 0 {
            self.set_status(RunStatus::Running);
        }
    }

    /// The open text message's id, opening one (`msg-<seq>`) if none is.
    fn text(&mut self, seq: u64, out: &mut Vec<AgUiEvent>) -> String {
        if let Some(id) = &self.open_text {
            return id.clone();
        }
        let id = format!("msg-{seq}");
        out.push(AgUiEvent::TextMessageStart {
            message_id: id.clone(),
            role: Role::Assistant,
        });
        self.open_text = Some(id.clone());
        id
    }

    fn end_text(&mut self, out: &mut Vec<AgUiEvent>) {
        if let Some(id) = self.open_text.take() {
            out.push(AgUiEvent::TextMessageEnd { message_id: id });
        }
    }

    /// Ends the open text message and step (AG-UI's `RUN_FINISHED` needs
    /// nothing open).
    fn close(&mut self, out: &mut Vec<AgUiEvent>) {
        self.end_text(out);
        if let Some(name) = self.open_step.take() {
            out.push(AgUiEvent::StepFinished { step_name: name });
        }
    }

    /// The change since the state last sent, as a `STATE_DELTA`, if any.
    fn delta(&mut self, out: &mut Vec<AgUiEvent>) {
        let patch = json_patch::diff(&self.sent, &self.state);
        if patch.0.is_empty() {
            return;
        }
        out.push(AgUiEvent::StateDelta {
            delta: serde_json::to_value(&patch).unwrap_or(Value::Array(Vec::new())),
        });
        self.sent = self.state.clone();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentry::protocol::tool::ToolCall;
    use std::sync::Arc;

    fn types(events: &[AgUiEvent]) -> Vec<String> {
        let names = events
            .iter()
            .map(|e| serde_json::to_value(e).unwrap()["type"].clone());
        names.map(|t| t.as_str().unwrap().to_string()).collect()
    }

    #[test]
    fn a_step_with_streamed_text_and_a_call_closes_everything_before_it_finishes() {
        let mut t = Translator::new(Some("g".into()));
        let mut out = vec![t.snapshot()];
        t.apply(1, &RunEvent::StepStarted { step: 1 }, &mut out);
        let delta = |text: &str| RunEvent::TokenDelta {
            step: 1,
            text: text.into(),
        };
        t.apply(2, &delta("let me "), &mut out);
        t.apply(3, &delta("look"), &mut out);
        let call = ToolCall::new("c1", "fs.read", json!({"path": "a"}));
        let decision = Arc::new(Decision::ToolCalls { calls: vec![call] });
        t.apply(4, &RunEvent::DecisionMade { step: 1, decision }, &mut out);
        t.apply(5, &RunEvent::StateUpdated { version: 3 }, &mut out);
        out.extend(t.finish(&End::Sleeping, "th", "r1"));
        assert_eq!(
            types(&out),
            [
                "STATE_SNAPSHOT",
                "STEP_STARTED",
                "STATE_DELTA",
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_END",
                "TOOL_CALL_START",
                "TOOL_CALL_ARGS",
                "TOOL_CALL_END",
                "STATE_DELTA",
                "STEP_FINISHED",
                "STATE_DELTA",
                "RUN_FINISHED",
            ]
        );
        let start = serde_json::to_value(&out[7]).unwrap();
        assert_eq!(start["parentMessageId"], "msg-2");
        let args = serde_json::to_value(&out[8]).unwrap();
        assert_eq!(args["delta"], r#"{"path":"a"}"#);
        let version = serde_json::to_value(&out[10]).unwrap();
        assert_eq!(
            version["delta"],
            json!([{"op": "replace", "path": "/version", "value": 3}])
        );
    }

    #[test]
    fn a_stop_other_than_done_or_abort_is_a_run_error_with_its_reason_and_detail() {
        let mut t = Translator::new(None);
        let out = t.finish(
            &End::Stopped {
                reason: StopReason::MaxSteps,
                detail: Some("8 steps".into()),
            },
            "th",
            "r",
        );
        let error = serde_json::to_value(&out[0]).unwrap();
        assert_eq!(error["type"], "RUN_ERROR");
        assert_eq!(error["code"], "max_steps");
        assert_eq!(error["message"], "the run stopped: max_steps: 8 steps");
        let out = t.finish(
            &End::Stopped {
                reason: StopReason::UserAbort,
                detail: None,
            },
            "th",
            "r",
        );
        let finished = serde_json::to_value(&out[0]).unwrap();
        assert_eq!(finished["outcome"], json!({"type": "cancelled"}));
    }
}

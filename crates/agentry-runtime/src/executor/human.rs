//! [`RunHumans`]: a running call's questions to a human (a remote agent's
//! INPUT_REQUIRED), put through the run's approval path: the call is parked
//! in the state keeper as waiting for approval, the question as its
//! preview, and the human's decision is the answer (approved with a text:
//! the answer; approved without one, or no decision within the approval
//! timeout: passed back; denied: refused). Nothing is written to the
//! ledger: the call keeps its `intent` row (and its remote task), so after
//! a crash the resumed call follows its task and asks again.

use std::sync::atomic::{AtomicU64, Ordering};

use agentry_protocol::envelope::{ErrorCode, ToolError};
use agentry_protocol::event::RunEvent;
use agentry_protocol::now_millis;
use agentry_protocol::state::{PendingApproval, QUESTION_PREVIEW};
use agentry_protocol::tool::{Effect, ToolCall};
use agentry_protocol::trace::RunInput;
use agentry_tools::{HumanAnswer, HumanDesk};
use async_trait::async_trait;
use ractor::ActorRef;
use tokio::sync::oneshot;
use tokio::time::Duration;
use tokio_util::sync::CancellationToken;

use crate::events::EventSink;
use crate::state::{ApprovalDecision, StateMsg};

/// The run's side of its calls' questions (see the module's docs); one per
/// executor, shared by its calls' contexts.
pub(super) struct RunHumans {
    pub(super) state: ActorRef<StateMsg>,
    pub(super) events: EventSink,
    pub(super) timeout: Option<Duration>,
    /// The step the executor is acting on (one at a time).
    pub(super) step: AtomicU64,
}

impl RunHumans {
    pub(super) fn at_step(&self, step: u64) {
        self.step.store(step, Ordering::Relaxed);
    }
}

#[async_trait]
impl HumanDesk for RunHumans {
    async fn ask(
        &self,
        call: &ToolCall,
        effect: Effect,
        question: &str,
        cancel: &CancellationToken,
    ) -> Result<HumanAnswer, ToolError> {
        let step = self.step.load(Ordering::Relaxed);
        let (tx, rx) = oneshot::channel::<ApprovalDecision>();
        let preview = Some(format!("{QUESTION_PREVIEW}{question}"));
        let pending = PendingApproval {
            step,
            call: call.clone(),
            requested_at: now_millis(),
            effect: Some(effect),
            preview: preview.clone(),
        };
        self.state
            .cast(StateMsg::AwaitApproval(pending, tx.into()))
            .map_err(|e| ToolError::new(ErrorCode::Einternal, format!("state keeper gone: {e}")))?;
        self.events.emit(|| RunEvent::AwaitingApproval {
            step,
            call: Box::new(call.clone()),
            effect: Some(effect),
            preview,
        });
        let withdraw = || {
            let _ = self.state.cast(StateMsg::Withdraw(call.id.clone()));
        };
        let timeout = self.timeout.unwrap_or(Duration::MAX);
        let decision = tokio::select! {
            decision = rx => decision.map_err(|_| {
                ToolError::new(ErrorCode::Ecanceled, "the run stopped while a human was asked")
            })?,
            _ = cancel.cancelled() => {
                withdraw();
                return Err(ToolError::new(
                    ErrorCode::Ecanceled,
                    "cancelled while a human was asked the remote agent's question",
                ));
            }
            _ = tokio::time::sleep(timeout) => {
                withdraw();
                return Ok(HumanAnswer::Pass);
            }
        };
        let input = RunInput::Approval {
            tool_call_id: call.id.clone(),
            approved: decision.approved,
            reason: decision.reason.clone(),
        };
        let seq = decision.applied.input_seq;
        self.events.emit(|| RunEvent::InputApplied { seq, input });
        Ok(match (decision.approved, decision.reason) {
            (true, Some(text)) if !text.trim().is_empty() => HumanAnswer::Text(text),
            (true, _) => HumanAnswer::Pass,
            (false, reason) => HumanAnswer::Refused(reason),
        })
    }
}

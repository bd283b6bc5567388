//! The policy actor: hosts one [`Policy`] per run.
//!
//! The seam itself ([`Policy`], [`PolicyContext`], [`DeltaSink`]) and the
//! scripted policy live in `agentry-policy`; they are re-exported here so
//! `crate::policy::…` paths keep working. The `PolicyActor` keeps a read-only
//! mirror of the session, fed in order by the conductor with the entries the
//! state keeper applied since the last decision, so a decision costs O(new
//! entries), not O(history).

use std::sync::{Arc, Mutex};

use agentry_protocol::budget::BudgetSnapshot;
use agentry_protocol::decision::{Decision, PolicyOutput};
use agentry_protocol::event::RunEvent;
use agentry_protocol::state::SessionEntry;

use crate::budget::OnStepGranted;
use crate::events::EventSink;
use crate::registry::VisibleTools;
use agentry_redact::StreamHoldback;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio_util::sync::CancellationToken;

pub use agentry_policy::script;
pub use agentry_policy::{
    DeltaSink, Policy, PolicyContext, Script, ScriptEnd, ScriptError, ScriptTurn, ScriptedPolicy,
};

/// The runtime's [`DeltaSink`]: publishes the streamed text of one model turn
/// as `token_delta` run events of its step, redacted. The end of the text that
/// could be the start of a secret is held back until the next delta shows
/// whether it is one, so a key split across two deltas never reaches a
/// subscriber whole or in part; [`StepDeltas::flush`] publishes the rest once
/// the turn is decided.
#[derive(Debug)]
pub(crate) struct StepDeltas {
    events: EventSink,
    step: u64,
    holdback: Mutex<StreamHoldback>,
}

impl StepDeltas {
    fn new(events: EventSink, step: u64) -> Self {
        StepDeltas {
            events,
            step,
            holdback: Mutex::new(StreamHoldback::default()),
        }
    }

    fn publish(&self, text: String) {
        let step = self.step;
        self.events.emit(|| RunEvent::TokenDelta { step, text });
    }

    /// Publishes the text held back, at the end of the turn.
    pub(crate) fn flush(&self) {
        let rest = match self.holdback.lock() {
            Ok(mut h) => h.flush(self.events.redactor()),
            Err(_) => None,
        };
        if let Some(text) = rest.filter(|t| !t.is_empty()) {
            self.publish(text);
        }
    }
}

impl DeltaSink for StepDeltas {
    /// Publishes a piece of streamed text, redacted, once nothing after it can
    /// turn it into part of a secret. An empty piece (a stream's opening chunk
    /// often carries `""`) is no event; nobody listening, nothing is held.
    fn emit(&self, text: &str) {
        if text.is_empty() || !self.events.listening() {
            return;
        }
        let ready = match self.holdback.lock() {
            Ok(mut h) => h.push(self.events.redactor(), text),
            Err(_) => None,
        };
        if let Some(text) = ready.filter(|t| !t.is_empty()) {
            self.publish(text);
        }
    }
}

/// The failure a turn a user's interrupt cut off is recorded as: the model is
/// shown it as a host note, followed by the user's message.
const INTERRUPTED_TURN: &str =
    "the user interrupted this turn before the model finished it; the user's message follows";

/// The decision of a turn an interrupt cut off: non-fatal, the run goes on.
/// What the dropped stream used is not known, so none is charged.
fn interrupted_turn(model: String) -> PolicyOutput {
    PolicyOutput::new(
        Decision::Failed {
            message: INTERRUPTED_TURN.to_string(),
            fatal: false,
        },
        model,
    )
}

/// Whether `decision` is a turn an interrupt cut off.
pub(crate) fn is_interrupted_turn(decision: &Decision) -> bool {
    matches!(decision, Decision::Failed { message, fatal: false } if message == INTERRUPTED_TURN)
}

/// Messages the policy actor accepts.
pub(crate) enum PolicyMsg {
    /// Decide step `step`. `new_entries` are the session entries applied since the
    /// previous decision, in state-keeper order.
    Decide {
        /// Step number.
        step: u64,
        /// New session entries.
        new_entries: Vec<SessionEntry>,
        /// Budget at the start of the step. Boxed: the actor's handler future
        /// holds the message for the run's life (see `PolicyActor::handle`).
        budget: Box<BudgetSnapshot>,
        /// The step's token: when it fires the turn is dropped (a streaming
        /// model request with it) and the decision says the user interrupted.
        cut: CancellationToken,
        /// Where the decision goes.
        reply: RpcReplyPort<PolicyOutput>,
    },
}

/// A step's decision request, handed on by the budget supervisor once it
/// granted the step: publishes `StepStarted` (so before any of the step's token
/// deltas), then asks the policy, whose decision goes straight to the conductor.
pub(crate) struct DecideRelay {
    /// The step asked for.
    pub(crate) step: u64,
    /// Session entries applied since the previous decision (for the policy).
    pub(crate) new_entries: Vec<SessionEntry>,
    /// The run's policy actor.
    pub(crate) policy: ActorRef<PolicyMsg>,
    /// The run's events.
    pub(crate) events: EventSink,
    /// The step's token: a user's interrupt drops the model's turn.
    pub(crate) cut: CancellationToken,
    /// The policy's decision; dropped unanswered when the step is refused.
    pub(crate) decided: RpcReplyPort<PolicyOutput>,
}

impl OnStepGranted for DecideRelay {
    #[inline]
    fn granted(self: Box<Self>, before: BudgetSnapshot) {
        let DecideRelay {
            step,
            new_entries,
            policy,
            events,
            cut,
            decided,
        } = *self;
        events.emit(|| RunEvent::StepStarted { step });
        // A policy that is gone drops the message and with it the reply port:
        // the conductor hears that it did not answer.
        let _ = policy.cast(PolicyMsg::Decide {
            step,
            new_entries,
            budget: Box::new(before),
            cut,
            reply: decided,
        });
    }
}

/// The run's redactor as the policy seam sees it: message contents pass it
/// before a model adapter records them on its span.
#[derive(Debug)]
pub(crate) struct SpanContent(pub(crate) Arc<agentry_redact::Redactor>);

impl agentry_policy::Redact for SpanContent {
    fn redact<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        self.0.redact_str(text)
    }
}

/// Start-up arguments of the policy actor.
pub(crate) struct PolicyArgs {
    /// The policy.
    pub policy: Box<dyn Policy>,
    /// Run id.
    pub run_id: Arc<str>,
    /// Goal.
    pub goal: String,
    /// Tools visible to the model, as the live registry has them at each step.
    pub tools: VisibleTools,
    /// The run's events (for streamed token deltas).
    pub events: EventSink,
    /// The run's W3C traceparent, handed to the policy with each decision.
    pub traceparent: Arc<str>,
    /// The run's `invoke_agent` span: each decision runs inside it.
    pub span: tracing::Span,
    /// With span content on: the run's redactor, for the adapter to record
    /// message contents on its request span.
    pub content: Option<SpanContent>,
}

/// Policy actor state: the policy and its session mirror.
pub(crate) struct PolicyState {
    args: PolicyArgs,
    transcript: Vec<SessionEntry>,
}

/// The policy actor.
#[derive(Debug, Default)]
pub(crate) struct PolicyActor;

impl Actor for PolicyActor {
    type Msg = PolicyMsg;
    type State = PolicyState;
    type Arguments = PolicyArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<PolicyMsg>,
        args: PolicyArgs,
    ) -> Result<PolicyState, ActorProcessingErr> {
        Ok(PolicyState {
            args,
            transcript: Vec::new(),
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<PolicyMsg>,
        message: PolicyMsg,
        state: &mut PolicyState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            PolicyMsg::Decide {
                step,
                new_entries,
                budget,
                cut,
                reply,
            } => {
                state.transcript.extend(new_entries);
                let tools = state.args.tools.current();
                let deltas = StepDeltas::new(state.args.events.clone(), step);
                let ctx = PolicyContext {
                    deltas: Some(&deltas),
                    run_id: &state.args.run_id,
                    step,
                    goal: &state.args.goal,
                    tools: &tools,
                    session: &state.transcript,
                    budget: &budget,
                    traceparent: Some(&state.args.traceparent),
                    content: state
                        .args
                        .content
                        .as_ref()
                        .map(|c| c as &dyn agentry_policy::Redact),
                };
                let out = tokio::select! {
                    biased;
                    // Inside the run's span: a model adapter's `chat` span nests under it.
                    out = agentry_telemetry::in_span(
                        state.args.policy.decide(ctx),
                        &state.args.span,
                    ) => Some(out),
                    _ = cut.cancelled() => None,
                };
                let out = out.unwrap_or_else(|| interrupted_turn(state.args.policy.name()));
                // Before the decision goes back: its deltas precede it.
                deltas.flush();
                let _ = reply.send(out);
            }
        }
        Ok(())
    }
}

//! Taking a step: spend and decide in one message, record the decision (durable
//! runs), then act, record and check. A pull-driven run takes
//! several steps per handler while nothing else waits in its mailbox.

use agentry_protocol::budget::{BudgetSnapshot, Usage};
use agentry_protocol::decision::PolicyOutput;
use agentry_protocol::event::RunEvent;
use agentry_protocol::stop::StopReason;
use tokio::time::{Duration, Instant};

use super::state::ConductorState;
use super::step_result::{Decided, Flow, StepResult, Stop};
use crate::ask::{AskError, ask};
use crate::budget::{BudgetMsg, SpendReply};
use crate::config::Driver;
use crate::durable::{Ending, InFlight};
use crate::interrupt::is_cut;
use crate::policy::DecideRelay;
use crate::state::StateUpdate;

/// Steps a pull-driven run takes in one handler at most, and for how long, before
/// it lets its mailbox's other ports (supervision, stop) in.
const STEP_BATCH: u32 = 64;
const STEP_BATCH_TIME: Duration = Duration::from_millis(2);

impl ConductorState {
    /// Runs steps while the run is pull-driven, continues, and nothing else is
    /// waiting in the mailbox; bounded in count and time (see
    /// [`Posted`](super::msg::Posted)).
    pub(super) async fn run_steps(&mut self) -> Flow {
        let began = Instant::now();
        let mut taken = 0;
        loop {
            let flow = self.run_step().await;
            taken += 1;
            let more = matches!(flow, Flow::Continue)
                && self.wiring.config.driver == Driver::Pull
                && self.phase.is_running()
                && self.wiring.posted.count() == self.handled
                && self.children.all_running()
                && taken < STEP_BATCH
                && began.elapsed() < STEP_BATCH_TIME;
            if !more {
                return flow;
            }
        }
    }

    /// One step: decide, record the decision (durable runs), act on it, record
    /// the step, check whether the run ends.
    pub(super) async fn run_step(&mut self) -> Flow {
        self.step_cut = self.wiring.cut.token();
        // Cut before it began: the interrupt's input is still in the mailbox
        // (see `StepCut`) and goes first; the step is taken after it.
        if is_cut(&self.step_cut, &self.wiring.run_token) {
            return Flow::Continue;
        }
        let decided = match self.decide().await {
            Ok(decided) => decided,
            Err(stop) => return Flow::Stop(stop),
        };
        self.register_secret_arguments(&decided.output.decision);
        if self.wiring.durable
            && let Err(stop) = self.record_decision(&decided).await
        {
            return Flow::Stop(stop);
        }
        let mut r = StepResult::new(decided);
        self.act(&mut r).await;
        if let Err(stop) = self.record(&mut r).await {
            return Flow::Stop(stop);
        }
        self.check_end(&mut r).await
    }

    /// A resumed run's first step: the step it decided but did not apply, or
    /// the ending it recorded but did not finish (else an ordinary step).
    pub(super) async fn resumed_step(&mut self) -> Flow {
        match (self.ending.take(), self.in_flight.take()) {
            (Some(Ending::Verify { answer }), _) => self.verify(answer).await,
            (Some(Ending::Stop { reason, detail }), _) => Flow::stop(reason, detail),
            (None, Some(in_flight)) => self.act_again(*in_flight).await,
            (None, None) => self.run_steps().await,
        }
    }

    /// Acts on a resumed run's decided step again, without asking the policy.
    /// The checkpoint the run resumed from predates the step, so the step, its
    /// tokens and its tool calls are spent again here, exactly once.
    pub(super) async fn act_again(&mut self, in_flight: InFlight) -> Flow {
        let InFlight { step, output, .. } = in_flight;
        self.step_cut = self.wiring.cut.token();
        let before = match self.spend_step(step, "when the run resumed").await {
            Ok(before) => before,
            Err(stop) => return Flow::Stop(stop),
        };
        self.steps = step;
        self.emit(|| RunEvent::StepStarted { step });
        self.charge_tokens(&output);
        let mut r = StepResult::new(Decided {
            step,
            before,
            output,
            again: true,
        });
        self.act(&mut r).await;
        if let Err(stop) = self.record(&mut r).await {
            return Flow::Stop(stop);
        }
        self.check_end(&mut r).await
    }

    /// Steps 1–2, check-before-spend and decide, in one message. The budget
    /// supervisor answers `granted` (step max+1 is refused there, never run) and,
    /// if it granted the step, publishes `StepStarted` and hands the request on to
    /// the policy, whose decision comes straight back here.
    async fn decide(&mut self) -> Result<Decided, Stop> {
        let step = self.steps + 1;
        let (granted_tx, granted_rx) = tokio::sync::oneshot::channel();
        let (decided_tx, decided_rx) = tokio::sync::oneshot::channel();
        let relay = DecideRelay {
            step,
            new_entries: self.take_pending(),
            policy: self.children.policy.clone(),
            events: self.wiring.events.clone(),
            cut: self.step_cut.clone(),
            decided: decided_tx.into(),
        };
        let spend = BudgetMsg::SpendStep {
            granted: granted_tx.into(),
            then: Box::new(relay),
        };
        if let Err(e) = self.children.budget.cast(spend) {
            return Err(Stop::new(
                StopReason::UnrecoverableError,
                format!("the budget supervisor is gone: {e}"),
            ));
        }
        let decided = tokio::select! {
            biased;
            _ = self.wiring.run_token.cancelled() => None,
            r = decided_rx => Some(r),
        };
        // The supervisor answers `granted` before it asks the policy, and never
        // waits on anything: this is at hand.
        let reply = granted_rx.await.map_err(|_| AskError::NoAnswer {
            actor: self.children.budget.get_id(),
        });
        let before = self.step_granted(step, "before it ran", reply)?;
        self.steps = step;
        let output: PolicyOutput = match decided {
            None => return Err(self.cancelled_stop("the policy was deciding").await),
            Some(Ok(output)) => output,
            Some(Err(_)) => {
                return Err(Stop::new(
                    StopReason::UnrecoverableError,
                    format!("actor {} did not answer", self.children.policy.get_id()),
                ));
            }
        };
        self.charge_tokens(&output);
        Ok(Decided {
            step,
            before,
            output,
            again: false,
        })
    }

    /// Recorded before acting, so a resumed run acts on this decision again (the
    /// ledger says which calls already ran) instead of asking anew. The reply
    /// means the state keeper has queued it at the store writer, so it lands
    /// before any intent the executor commits for this step (both go through the
    /// one writer, in order); nobody waits for the disk here.
    async fn record_decision(&mut self, decided: &Decided) -> Result<(), Stop> {
        let step = decided.step;
        let update = StateUpdate::Decided(Box::new(InFlight {
            step,
            output: decided.output.clone(),
            before: decided.before,
        }));
        match self.apply_state(update).await {
            Ok(_) => Ok(()),
            Err(e) => Err(e.stop(format_args!("step {step}'s decision"))),
        }
    }

    /// Spends one step, checked first. The error is the stop when the step is
    /// refused.
    async fn spend_step(&mut self, step: u64, when: &str) -> Result<BudgetSnapshot, Stop> {
        let reply = ask(&self.children.budget, |r| {
            BudgetMsg::Spend(Usage::step(), r)
        })
        .await;
        self.step_granted(step, when, reply)
    }

    /// The budget's answer to step `step`'s spend: the snapshot before it, or
    /// the stop.
    fn step_granted(
        &mut self,
        step: u64,
        when: &str,
        reply: Result<SpendReply, AskError>,
    ) -> Result<BudgetSnapshot, Stop> {
        match reply {
            Ok(SpendReply::Granted { before, delegated }) => {
                self.delegated = delegated;
                Ok(before)
            }
            Ok(SpendReply::Refused(reason)) => Err(Stop::new(
                reason,
                format!("{reason}: step {step} was refused {when}"),
            )),
            Err(e) => Err(Stop::new(StopReason::UnrecoverableError, e.to_string())),
        }
    }

    /// A model turn's tokens and money, charged without a check: the next spend
    /// sees them.
    fn charge_tokens(&self, out: &PolicyOutput) {
        if !out.usage.is_empty() || out.cost_micros > 0 {
            // tokens_in already holds the cached prompt tokens (see
            // TokenUsage): the cache counts only say how they were served.
            let _ = self.children.budget.cast(BudgetMsg::Charge(Usage {
                tokens_in: out.usage.tokens_in,
                tokens_out: out.usage.tokens_out,
                cache_read_tokens: out.usage.cache_read_tokens,
                cache_write_tokens: out.usage.cache_write_tokens,
                cost_micros: out.cost_micros,
                ..Usage::default()
            }));
        }
    }
}

//! Recording a step (steps 4–5): the budget after it, its fingerprint, the
//! session entries for the policy, and one state update that carries the
//! step's trace record to the state keeper.

use std::sync::Arc;

use agentry_protocol::budget::{BudgetSnapshot, Usage};
use agentry_protocol::event::RunEvent;
use agentry_protocol::state::{RunSnapshot, SessionEntry};
use agentry_protocol::stop::StopReason;
use agentry_protocol::trace::TraceStep;
use agentry_store::StoreError;

use super::progress::step_fingerprint;
use super::state::ConductorState;
use super::step_result::{Acted, StepResult, Stop};
use crate::ask::{AskError, ask};
use crate::durable::Ending;
use crate::state::{Applied, AppliedPort, StateMsg, StateUpdate, StepUpdate};

/// Why the state keeper did not apply an update.
#[derive(Debug)]
pub(super) enum ApplyError {
    /// A durable run's update could not be committed.
    Store(StoreError),
    /// The state keeper did not answer.
    Actor(AskError),
}

impl ApplyError {
    /// The run's stop: `what` could not be stored, or the state keeper's absence.
    pub(super) fn stop(self, what: std::fmt::Arguments<'_>) -> Stop {
        match self {
            ApplyError::Store(e) => Stop::new(
                StopReason::UnrecoverableError,
                format!("{what} could not be stored: {e}"),
            ),
            ApplyError::Actor(e) => Stop::new(StopReason::UnrecoverableError, e.to_string()),
        }
    }
}

impl ConductorState {
    /// Steps 4–5, update and record: one state update per step, applied by the
    /// state keeper; fills the result's `after` and `fingerprint`. The
    /// fingerprint uses the world as the action found it; what the action did to
    /// it is in the observation (refs).
    pub(super) async fn record(&mut self, r: &mut StepResult) -> Result<(), Stop> {
        r.after = self.after_snapshot(r);
        r.fingerprint = step_fingerprint(
            &r.decision,
            &r.acted.results,
            &self.world_digest,
            self.inputs_applied,
        );
        self.pending.push(SessionEntry::Assistant {
            step: r.step,
            decision: Arc::clone(&r.decision),
        });
        self.pending.extend(
            r.acted
                .results
                .iter()
                .cloned()
                .map(|result| SessionEntry::Tool { result }),
        );
        // The step's trace record, but for the state after the update: the state
        // keeper completes it and queues it as it applies the update, so the
        // trace needs no round trip (every other trace line is written after one,
        // so lines stay in order).
        let traced = self
            .wiring
            .trace
            .as_ref()
            .map(|t| (t.sender(), self.trace_record(r)));
        let world_may_change = r.acted.results.iter().any(|res| !res.refs.is_empty());
        let update = self.step_update(r);
        // Nobody needs the reply when the store is off, the trace is off, nobody
        // listens and no result carries a ref (so the world cannot change): the
        // update is handed over without a round trip. The state keeper applies it
        // before anything sent after it, so every later read sees it.
        let apply = move |reply| match traced {
            Some((trace, record)) => StateMsg::ApplyTraced {
                update,
                record,
                trace,
                reply,
            },
            None => StateMsg::Apply(update, reply),
        };
        if !(self.wiring.durable || self.wiring.events.listening() || world_may_change) {
            let _ = self.children.state.cast(apply(None));
            return Ok(());
        }
        let step = r.step;
        let applied = match self.ask_state(|reply| apply(Some(reply))).await {
            Ok(applied) => applied,
            Err(e) => return Err(e.stop(format_args!("step {step}"))),
        };
        self.emit(|| RunEvent::StateUpdated {
            version: applied.at.state_version,
        });
        self.emit(|| RunEvent::BudgetSpent {
            budget: Box::new(r.after),
        });
        self.world_digest = applied.world_digest;
        Ok(())
    }

    /// Applies one update through the state keeper and waits until it is
    /// applied (for a durable run that must wait, committed).
    pub(super) async fn apply_state(&self, update: StateUpdate) -> Result<Applied, ApplyError> {
        self.ask_state(|reply| StateMsg::Apply(update, Some(reply)))
            .await
    }

    /// Sends the state keeper an apply message built around the reply port and
    /// waits for the outcome.
    async fn ask_state(
        &self,
        msg: impl FnOnce(AppliedPort) -> StateMsg,
    ) -> Result<Applied, ApplyError> {
        match ask(&self.children.state, msg).await {
            Ok(Ok(applied)) => Ok(applied),
            Ok(Err(e)) => Err(ApplyError::Store(e)),
            Err(e) => Err(ApplyError::Actor(e)),
        }
    }

    /// The budget after the step, from the supervisor's last answer plus what was
    /// spent since (a model turn's tokens, retries), without another round trip.
    fn after_snapshot(&self, r: &StepResult) -> BudgetSnapshot {
        let retries = r.acted.attempts.iter().filter(|a| a.attempt > 1).count() as u64;
        let spent = r.before.spent.plus(&Usage {
            steps: 1,
            tool_calls: r.acted.tool_calls,
            tokens_in: r.turn.usage.tokens_in,
            tokens_out: r.turn.usage.tokens_out,
            cache_read_tokens: r.turn.usage.cache_read_tokens,
            cache_write_tokens: r.turn.usage.cache_write_tokens,
            cost_micros: r.turn.cost_micros,
            retries,
            ..Usage::default()
        });
        BudgetSnapshot::new(self.wiring.config.limits, spent, self.clock.elapsed_ms())
    }

    /// The step's trace record, but for the state's version and key fields (the
    /// state keeper fills those in). Takes the attempts, model and prompt hash
    /// out of the result: nothing after the trace reads them.
    fn trace_record(&self, r: &mut StepResult) -> Box<TraceStep> {
        Box::new(TraceStep {
            run_id: Arc::clone(&self.wiring.run_id),
            task_id: Arc::clone(&self.task_id),
            parent_id: self.wiring.parent_id.clone(),
            traceparent: Arc::clone(&self.wiring.traceparent),
            step: r.step,
            attempt: 1,
            model: if r.turn.model.is_empty() {
                Arc::clone(&self.model)
            } else {
                std::mem::take(&mut r.turn.model).into()
            },
            prompt_hash: r.turn.prompt_hash.take(),
            usage: r.turn.usage,
            compaction: r.turn.compaction.take(),
            decision: Arc::clone(&r.decision),
            sandboxes: self.call_sandboxes(&r.acted.results),
            results: r.acted.results.clone(),
            attempts: std::mem::take(&mut r.acted.attempts),
            interrupted: r.acted.interrupted.take(),
            budget_before: r.before,
            budget_after: r.after,
            state_version: 0,
            fingerprint: format!("{:016x}", r.fingerprint),
            state: RunSnapshot::default(),
            at: agentry_protocol::now_millis(),
        })
    }

    /// The sandbox each process tool's call ran under, for the step's record.
    fn call_sandboxes(
        &self,
        results: &[Arc<agentry_protocol::envelope::ResultEnvelope>],
    ) -> Vec<agentry_protocol::trace::CallSandbox> {
        let args = &self.children.executor_args;
        let registry = args.registry.current();
        results
            .iter()
            .filter_map(|result| {
                let over = registry.get(&result.tool)?.tool.sandbox()?;
                Some(agentry_protocol::trace::CallSandbox {
                    tool_call_id: result.tool_call_id.clone(),
                    sandbox: serde_json::to_value(args.sandbox.summary(&over)).ok()?,
                })
            })
            .collect()
    }

    /// The step's state update. Its results move into it: the session and the
    /// trace record already hold their own references.
    fn step_update(&self, r: &mut StepResult) -> StateUpdate {
        StateUpdate::Step(Box::new(StepUpdate {
            step: r.step,
            decision: Arc::clone(&r.decision),
            results: std::mem::take(&mut r.acted.results),
            spent: r.after.spent,
            delegated: self.delegated,
            answer: r.acted.answer.as_ref().map(|a| a.text().to_string()),
            tool_calls: self.allowance.own_calls(),
            fingerprint: r.fingerprint,
            side_effects: r.acted.side_effects,
            ending: self.ending_of(&r.acted),
        }))
    }

    /// What ends the run, should the process die before the stop is on disk
    /// (durable runs only).
    fn ending_of(&self, acted: &Acted) -> Option<Ending> {
        if !self.wiring.durable {
            return None;
        }
        match (&acted.stop, &acted.answer) {
            (Some(stop), _) => Some(Ending::Stop {
                reason: stop.reason,
                detail: stop.detail.clone(),
            }),
            (None, Some(answer)) if answer.ends_run(self.wiring.config.driver) => {
                Some(Ending::Verify {
                    answer: answer.text().to_string(),
                })
            }
            (None, Some(_) | None) => None,
        }
    }
}

//! Hibernation, the conductor's side: an event-driven run that has slept for
//! its `hibernate_after` hands what outlives an activation (its outcome's
//! sender, its claim) to its handles' slot and stops its actors without
//! recording a stop; the runtime wakes it from the store
//! (`runtime/hibernate.rs`).

use ractor::ActorRef;

use super::msg::ConductorMsg;
use super::outcome::Dormant;
use super::state::ConductorState;
use crate::ask::ask;
use crate::budget::BudgetMsg;

impl ConductorState {
    /// The run has gone to sleep: it hibernates after `hibernate_after`
    /// unless something wakes it first (a later sleep makes this one stale).
    pub(super) fn plan_hibernation(&mut self, myself: &ActorRef<ConductorMsg>) {
        let Some(after) = self.wiring.config.hibernate_after else {
            return;
        };
        if self.released.is_none() {
            return;
        }
        self.sleeps += 1;
        let sleep = self.sleeps;
        drop(myself.send_after(after, move || ConductorMsg::Hibernate(sleep)));
    }

    /// Whether the run still sleeps as it did when it planned to hibernate:
    /// no step wanted or open, not paused, no input that no decision saw
    /// (`pending` may hold the session a resumed run's policy is shown
    /// first: a wake rebuilds it from the store the same way).
    fn still_asleep(&self) -> bool {
        !self.wake_pending
            && !self.turn_open
            && !self.phase.is_paused()
            && !self.phase.is_stopped()
            && self.unseen == 0
            && self.wiring.gauge.held() == 0
            && self.in_flight.is_none()
            && self.ending.is_none()
    }

    /// Sleep `sleep` lasted `hibernate_after`: hibernate if nothing came.
    pub(super) async fn on_hibernate(&mut self, myself: &ActorRef<ConductorMsg>, sleep: u64) {
        if sleep != self.sleeps || !self.still_asleep() {
            return;
        }
        // A parent stays awake while a child of it lives (its books hold
        // the child's reservation).
        if !matches!(
            ask(&self.children.budget, BudgetMsg::LiveChildren).await,
            Ok(0)
        ) {
            return;
        }
        let claim = self.wiring.claim.take();
        if let Some(c) = &claim {
            c.set_dormant(true);
        }
        let (placeholder, _) = super::outcome::outcome_channel(&super::LiveActors::default());
        let dormant = Dormant {
            outcome: std::mem::replace(&mut self.wiring.outcome, placeholder),
            claim,
            deadline: self.clock.deadline_at,
        };
        match self
            .wiring
            .live
            .hibernate(&self.wiring.posted, self.handled, dormant)
        {
            Ok(()) => self.release(myself).await,
            Err(back) => {
                // Something was posted meanwhile: the run stays awake for it.
                let Dormant { outcome, claim, .. } = back;
                if let Some(c) = &claim {
                    c.set_dormant(false);
                }
                self.wiring.outcome = outcome;
                self.wiring.claim = claim;
            }
        }
    }

    /// Lets the actors go without a stop: the run stays unfinished in the
    /// store, and nothing of this activation outlives it.
    async fn release(&mut self, myself: &ActorRef<ConductorMsg>) {
        self.phase.stop();
        if let Some(released) = self.released.take() {
            released.cancel();
        }
        if let Some(trace) = self.wiring.trace.take()
            && let Err(e) = trace.finish().await
        {
            tracing::error!(run_id = %self.wiring.run_id, error = %e, "trace could not be written completely");
        }
        drop(std::mem::replace(
            &mut self.wiring.span,
            tracing::Span::none(),
        ));
        self.children.executor_args.span = tracing::Span::none();
        self.wiring.events.shed();
        self.wiring.cut.shed();
        tracing::debug!(run_id = %self.wiring.run_id, steps = self.steps, "run hibernated");
        self.stop_children(myself);
    }
}

/// Puts a resumed run straight into hibernation (`ResumeOptions::dormant`):
/// its slot gets what its conductor would hand it on hibernating, its
/// deadline goes to the alarms, and no actor is spawned. The run may
/// hibernate (its slot knows how to wake it).
pub(crate) async fn rest(args: Box<super::ConductorArgs>) {
    let super::ConductorArgs {
        run_id,
        config,
        lineage,
        restore,
        outcome,
        claim,
        trace,
        live,
        ..
    } = *args;
    let clock = crate::clock::RunClock::start(
        restore.as_ref().map(|r| r.elapsed),
        config.limits.deadline_ms,
        lineage.deadline_at,
    );
    if let Some(trace) = trace
        && let Err(e) = trace.finish().await
    {
        tracing::error!(run_id = %run_id, error = %e, "trace could not be written completely");
    }
    if let Some(c) = &claim {
        c.set_dormant(true);
    }
    tracing::debug!(run_id = %run_id, "run resumed hibernated");
    live.rest(Dormant {
        outcome,
        claim,
        deadline: clock.deadline_at,
    });
}

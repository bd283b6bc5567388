//! The conductor: one per run. It wires the four actors and drives the loop purely
//! by messages.
//!
//! Each step is one [`ConductorMsg::Step`] the conductor sends itself, so anything
//! else in its mailbox (an abort, a user message) is handled between steps, at a
//! safe point. Within a step it asks the budget supervisor and the state keeper
//! (which never block) and the policy and executor (which may), always selecting
//! against the run's cancellation token so a deadline interrupts a stuck policy or
//! tool at once.
//!
//! A step is data passed from stage to stage: `decide` (spend and decide, one
//! message) yields a decided step; `act` runs it into a step result; `record`
//! hands the step's update and trace record to the state keeper; `check_end`
//! says whether the run goes on. Files, each importing only from those before
//! it: `msg`, `lineage`, `span`, `outcome`, `args`, `step_result`, `ticker`, `phase`, `state`,
//! then the stages and handlers, each adding methods to the conductor's state:
//! `start`, `step`, `act`, `progress`, `record`, `finish`, `hibernate`, `children`,
//! `inputs`.

mod act;
mod args;
mod children;
mod finish;
mod hibernate;
mod inputs;
mod lineage;
mod msg;
mod outcome;
mod phase;
mod progress;
mod record;
mod span;
mod start;
mod state;
mod step;
mod step_result;
mod ticker;

pub use args::{ConductorArgs, Restore};
pub(crate) use hibernate::rest;
pub use lineage::{Lineage, ParentRun};
pub use msg::{ConductorMsg, Posted};
pub(crate) use outcome::{Dormant, LiveActors, OutcomeRx, Posting, Rouse, outcome_channel};
pub use outcome::{RunActors, RunOutcome};
pub(crate) use span::run_span;
pub use state::ConductorState;

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};

/// The conductor actor.
#[derive(Debug, Default)]
pub struct Conductor;

impl Actor for Conductor {
    type Msg = ConductorMsg;
    // Both boxed: ractor moves its arguments and state through every level of
    // its spawn and into the actor's task; a pointer is cheap to move.
    type State = Box<ConductorState>;
    type Arguments = Box<ConductorArgs>;

    async fn pre_start(
        &self,
        myself: ActorRef<ConductorMsg>,
        args: Box<ConductorArgs>,
    ) -> Result<Box<ConductorState>, ActorProcessingErr> {
        let st = start::start(myself.clone(), args).await?;
        // A resumed run's decided step is taken first, ahead of the stored
        // inputs the handle delivers as it is made: they came during that
        // step (a message, an interrupt), so they follow it as they would have.
        if st.resumes_a_step() {
            myself.cast(ConductorMsg::Step)?;
        }
        Ok(st)
    }

    async fn post_start(
        &self,
        myself: ActorRef<ConductorMsg>,
        st: &mut Box<ConductorState>,
    ) -> Result<(), ActorProcessingErr> {
        st.arm(&myself).await
    }

    async fn handle(
        &self,
        myself: ActorRef<ConductorMsg>,
        message: ConductorMsg,
        st: &mut Box<ConductorState>,
    ) -> Result<(), ActorProcessingErr> {
        if st.phase.is_stopped() {
            return Ok(());
        }
        // A drained run takes nothing in: what it would have applied stays
        // in the store (a durable run's inbox and timers) for its next process.
        if st.phase.is_drained()
            && !matches!(
                message,
                ConductorMsg::Abort(_) | ConductorMsg::TokenCancelled
            )
        {
            return Ok(());
        }
        // Every await below is on a boxed future or a small one: ractor keeps
        // this handler's future inline in the actor's task (twice over) for as
        // long as the run lives, so its size is paid per run whether or not a
        // message ever takes the path.
        match message {
            ConductorMsg::Step => {
                st.wake_pending = false;
                if !st.phase.take_step() {
                    return Ok(());
                }
                // Checked before taken: a resumed run's leftovers are large, and
                // taking them moves them on every Step.
                let flow = if st.ending.is_none() && st.in_flight.is_none() {
                    Box::pin(st.run_steps()).await
                } else {
                    Box::pin(st.resumed_step()).await
                };
                st.after_step(&myself, flow).await;
            }
            ConductorMsg::Input(input) => {
                st.handled += 1;
                Box::pin(st.on_input(&myself, input, None)).await
            }
            ConductorMsg::StoredInput { source, input } => {
                st.handled += 1;
                Box::pin(st.on_input(&myself, input, Some(source))).await
            }
            // Not counted: ticks drive event-driven runs, which never batch steps.
            ConductorMsg::Tick(n) => Box::pin(st.on_tick(&myself, n)).await,
            ConductorMsg::TokenCancelled => {
                st.handled += 1;
                Box::pin(st.on_token_cancelled(&myself)).await;
            }
            ConductorMsg::Abort(reason) => {
                st.handled += 1;
                Box::pin(st.abort(&myself, reason)).await;
            }
            ConductorMsg::Drain(drained) => {
                st.handled += 1;
                st.phase.drain();
                let _ = drained.send(());
            }
            // Not counted: the conductor sends it to itself.
            ConductorMsg::Hibernate(sleep) => Box::pin(st.on_hibernate(&myself, sleep)).await,
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<ConductorMsg>,
        event: SupervisionEvent,
        st: &mut Box<ConductorState>,
    ) -> Result<(), ActorProcessingErr> {
        Box::pin(st.on_child_exit(&myself, event)).await;
        Ok(())
    }
}

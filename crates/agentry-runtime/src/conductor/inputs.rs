//! Inputs from outside and the run's schedule: user messages, custom events,
//! pause/resume, timer ticks, and what happens after a step (next step, sleep,
//! stop).
//!
//! Every input is applied through the state keeper, which numbers them: inputs
//! that arrive together are applied one at a time, in one order, and each gets a
//! trace line and an event carrying that sequence number.

use agentry_protocol::budget::Usage;
use agentry_protocol::event::RunEvent;
use agentry_protocol::state::{RunStatus, SessionEntry};
use agentry_protocol::stop::StopReason;
use agentry_protocol::trace::{RunInput, TraceInput, TraceLine};
use ractor::ActorRef;

use super::msg::ConductorMsg;
use super::record::ApplyError;
use super::state::ConductorState;
use super::step_result::{Flow, Stop};
use super::ticker::schedule;
use crate::ask::ask;
use crate::budget::{BudgetMsg, SpendReply};
use crate::config::Driver;
use crate::state::{AppliedAt, InputSource, StateUpdate};

impl ConductorState {
    /// After a step: stop, take the next step, or sleep until an event.
    pub(super) async fn after_step(&mut self, myself: &ActorRef<ConductorMsg>, flow: Flow) {
        match flow {
            Flow::Stop(Stop {
                reason,
                detail,
                checks,
            }) => self.finish(myself, reason, detail, checks).await,
            Flow::Continue => match self.wiring.config.driver {
                Driver::Pull => {
                    let _ = myself.cast(ConductorMsg::Step);
                }
                // The model called tools: it sees their results now, not at
                // the next event (each such step spends the step budget).
                Driver::Events if self.turn_open => self.wake(myself),
                // Boxed: see `Conductor::handle`, whose future holds this one.
                Driver::Events if !self.wake_pending => {
                    Box::pin(self.set_status(RunStatus::Sleeping)).await;
                    self.plan_hibernation(myself);
                }
                Driver::Events => {}
            },
        }
    }

    /// Applies an input from outside, at a safe point (no step is running).
    pub(super) async fn on_input(
        &mut self,
        myself: &ActorRef<ConductorMsg>,
        input: RunInput,
        source: Option<InputSource>,
    ) {
        match input {
            RunInput::Pause => {
                if self.phase.pause() {
                    self.record_input_from(RunInput::Pause, source).await;
                } else {
                    self.discard(source).await;
                }
            }
            RunInput::Resume => match self.phase.resume() {
                Some(step_due) => {
                    self.record_input_from(RunInput::Resume, source).await;
                    if step_due {
                        self.wake(myself);
                    }
                }
                None => self.discard(source).await,
            },
            RunInput::Interrupt { text } => self.on_interrupt(myself, text, source).await,
            RunInput::Message { .. } | RunInput::Event { .. } => {
                self.record_input_from(input, source).await;
                if self.wiring.config.driver == Driver::Events {
                    self.want_step(myself);
                }
            }
            // Ticks come from the run's own timer and approvals from the state
            // keeper; neither is accepted from outside.
            RunInput::Tick { .. } | RunInput::Approval { .. } | RunInput::Settlement { .. } => {
                self.discard(source).await;
            }
        }
    }

    /// An interrupt's input, applied after the step it cut (or between steps):
    /// steps run under a fresh token again once every cut's input is applied.
    /// With a message it is a message; without one the run pauses until the
    /// user resumes it. The cut counts as applied last, once the input is
    /// recorded and the run paused: a front end waiting on it (a prompt) finds
    /// the run as the interrupt left it.
    async fn on_interrupt(
        &mut self,
        myself: &ActorRef<ConductorMsg>,
        text: Option<String>,
        source: Option<InputSource>,
    ) {
        let hold = text.is_none();
        if hold && self.phase.is_paused() {
            self.discard(source).await;
        } else {
            self.record_input_from(RunInput::Interrupt { text }, source)
                .await;
            if hold {
                self.phase.pause();
            } else if self.wiring.config.driver == Driver::Events {
                self.want_step(myself);
            }
        }
        self.wiring.cut.applied();
    }

    /// Timer tick `n` is due: spend a tick, wake one step, schedule the next tick.
    pub(super) async fn on_tick(&mut self, myself: &ActorRef<ConductorMsg>, n: u64) {
        let Some(ticker) = self.ticks.as_mut() else {
            return;
        };
        if self.phase.is_paused() {
            ticker.carry += 1;
            self.skip_ticks(n, n + 1).await;
            self.schedule_tick(myself, n + 1);
            return;
        }
        if let Err(stop) = self.spend_tick(n).await {
            return self
                .finish(myself, stop.reason, stop.detail, stop.checks)
                .await;
        }
        let skipped = self
            .ticks
            .as_mut()
            .map_or(0, |t| std::mem::take(&mut t.carry));
        self.record_input(RunInput::Tick { n, skipped }).await;
        self.wake_pending = false;
        let flow = Box::pin(self.run_step()).await;
        // A tick wakes one decision, tool calls or not: a time-driven agent
        // that checks something every tick must not loop on its own calls.
        self.turn_open = false;
        let next = self.catch_up_ticks(n).await;
        if let Flow::Continue = flow {
            self.schedule_tick(myself, next);
        }
        self.after_step(myself, flow).await;
    }

    /// Spends tick `n`, checked first; the error is the stop when it is refused.
    async fn spend_tick(&mut self, n: u64) -> Result<(), Stop> {
        let charge = Usage {
            ticks: 1,
            ..Usage::default()
        };
        match ask(&self.children.budget, |r| BudgetMsg::Spend(charge, r)).await {
            Ok(SpendReply::Granted { .. }) => Ok(()),
            Ok(SpendReply::Refused(reason)) => Err(Stop::new(
                reason,
                format!("{reason}: tick {n} was refused before it ran"),
            )),
            Err(e) => Err(Stop::new(StopReason::UnrecoverableError, e.to_string())),
        }
    }

    /// The tick to schedule after tick `n`'s step: ticks whose time passed while
    /// it ran are skipped, never stacked.
    async fn catch_up_ticks(&mut self, n: u64) -> u64 {
        let next = self.ticks.as_ref().map_or(n + 1, |t| t.next_after(n));
        if next > n + 1 {
            if let Some(t) = self.ticks.as_mut() {
                t.carry += next - n - 1;
            }
            self.skip_ticks(n + 1, next).await;
        }
        next
    }

    fn schedule_tick(&mut self, myself: &ActorRef<ConductorMsg>, n: u64) {
        if let Some(t) = self.ticks.as_mut() {
            t.timer = schedule(myself, t.at(n), n);
        }
    }

    async fn skip_ticks(&mut self, from: u64, to: u64) {
        let count = to.saturating_sub(from);
        if count == 0 {
            return;
        }
        let _ = self.apply_state(StateUpdate::TicksSkipped(count)).await;
        for n in from..to {
            self.emit(|| RunEvent::TickSkipped { n });
        }
    }

    /// An input wants a step: queued now, or taken once the run is no
    /// longer held (paused, or waiting for its executor's restart).
    fn want_step(&mut self, myself: &ActorRef<ConductorMsg>) {
        if self.phase.take_step() {
            self.wake(myself);
        }
    }

    /// Queues one wake-up step unless one is already queued.
    fn wake(&mut self, myself: &ActorRef<ConductorMsg>) {
        if !self.wake_pending {
            self.wake_pending = true;
            let _ = myself.cast(ConductorMsg::Step);
        }
    }

    /// Records a status change in the state keeper.
    pub(super) async fn set_status(&mut self, status: RunStatus) {
        let _ = self.apply_state(StateUpdate::Status(status)).await;
    }

    /// Applies an input through the state keeper (which numbers it), hands the
    /// session entry to the policy's mirror, and records it in the trace and the
    /// event stream.
    pub(super) async fn record_input(&mut self, input: RunInput) {
        self.record_input_from(input, None).await;
    }

    /// A stored input that changed nothing leaves the store all the same.
    async fn discard(&mut self, source: Option<InputSource>) {
        if let Some(InputSource::Inbox(seq)) = source {
            let _ = self.apply_state(StateUpdate::Discard(seq)).await;
        }
    }

    /// The entries the next decision is shown; their inbox slots are free again.
    pub(super) fn take_pending(&mut self) -> Vec<SessionEntry> {
        self.wiring.gauge.release(std::mem::take(&mut self.unseen));
        std::mem::take(&mut self.pending)
    }

    /// [`Self::record_input`] for an input the store kept (a timer, the inbox).
    /// An input holding an inbox slot keeps it until a decision takes it, or
    /// gives it back at once if it could not be applied.
    async fn record_input_from(&mut self, input: RunInput, source: Option<InputSource>) {
        let slot = crate::inbox::takes_slot(&input);
        let update = match source {
            Some(source) => StateUpdate::StoredInput {
                source,
                input: input.clone(),
            },
            None => StateUpdate::Input(input.clone()),
        };
        let applied = match self.apply_state(update).await {
            Ok(applied) => applied,
            Err(ApplyError::Store(e)) => {
                tracing::error!(run_id = %self.wiring.run_id, error = %e, "an input could not be stored");
                self.wiring.gauge.release(usize::from(slot));
                return;
            }
            Err(ApplyError::Actor(_)) => {
                self.wiring.gauge.release(usize::from(slot));
                return;
            }
        };
        if let Some(entry) = session_entry(&input) {
            self.pending.push(entry);
        }
        self.inputs_applied += 1;
        self.unseen += usize::from(slot);
        self.trace_input(applied.at, &input);
        let seq = applied.at.input_seq;
        self.emit(|| RunEvent::InputApplied { seq, input });
    }

    /// Writes an input's trace line.
    pub(super) fn trace_input(&self, at: AppliedAt, input: &RunInput) {
        if let Some(t) = &self.wiring.trace {
            t.write(TraceLine::Input(Box::new(TraceInput {
                run_id: self.wiring.run_id.to_string(),
                seq: at.input_seq,
                state_version: at.state_version,
                input: input.clone(),
                at: agentry_protocol::now_millis(),
            })));
        }
    }
}

/// What the policy is shown of an applied input, if anything.
fn session_entry(input: &RunInput) -> Option<SessionEntry> {
    match input {
        RunInput::Message { text }
        | RunInput::Interrupt {
            text: Some(text), ..
        } => Some(SessionEntry::User { text: text.clone() }),
        RunInput::Event { name, payload } => Some(SessionEntry::Event {
            name: name.clone(),
            payload: payload.clone(),
        }),
        RunInput::Tick { n, skipped } => Some(SessionEntry::Event {
            name: "tick".to_string(),
            payload: serde_json::json!({ "n": n, "skipped": skipped }),
        }),
        RunInput::Interrupt { text: None }
        | RunInput::Pause
        | RunInput::Resume
        | RunInput::Approval { .. }
        | RunInput::Settlement { .. } => None,
    }
}

//! A child actor ended: the executor is restarted, anything else stops the run.

use agentry_protocol::stop::StopReason;
use ractor::{Actor, ActorCell, ActorRef, SupervisionEvent};

use super::msg::ConductorMsg;
use super::state::ConductorState;
use super::step_result::Stop;
use crate::executor::ToolExecutor;

/// A child that failed or ended, and the sentence saying so.
struct ChildExit {
    who: ActorCell,
    detail: String,
}

impl ChildExit {
    /// `None` for supervision events that are not an exit.
    fn of(event: SupervisionEvent) -> Option<ChildExit> {
        match event {
            SupervisionEvent::ActorFailed(who, err) => {
                let detail = format!("actor {} failed: {err}", who.get_id());
                Some(ChildExit { who, detail })
            }
            SupervisionEvent::ActorTerminated(who, _, reason) => {
                let detail = format!(
                    "actor {} ended unexpectedly: {}",
                    who.get_id(),
                    reason.unwrap_or_default()
                );
                Some(ChildExit { who, detail })
            }
            SupervisionEvent::ActorStarted(_) | SupervisionEvent::ProcessGroupChanged(_) => None,
        }
    }
}

impl ConductorState {
    /// A child actor failed or ended: restart the executor, stop the run otherwise.
    pub(super) async fn on_child_exit(
        &mut self,
        myself: &ActorRef<ConductorMsg>,
        event: SupervisionEvent,
    ) {
        if self.phase.is_stopped() {
            return;
        }
        let Some(ChildExit { who, detail }) = ChildExit::of(event) else {
            return;
        };
        let stop = if who.get_id() == self.children.executor.get_id() {
            match self.restart_executor(myself, detail).await {
                Ok(()) => return,
                Err(stop) => stop,
            }
        } else {
            Stop::new(StopReason::UnrecoverableError, detail)
        };
        self.wiring.run_token.cancel();
        self.finish(myself, stop.reason, stop.detail, stop.checks)
            .await;
    }

    /// The executor holds no run state the run cannot do without: restart it.
    /// Calls it had in flight were already reported as lost to the step that
    /// sent them (their reply port closed). The error is the run's stop.
    async fn restart_executor(
        &mut self,
        myself: &ActorRef<ConductorMsg>,
        detail: String,
    ) -> Result<(), Stop> {
        tracing::warn!(run_id = %self.wiring.run_id, %detail, "restarting the tool executor");
        let args = self.children.executor_args.clone();
        match Actor::spawn_linked(None, ToolExecutor, args, myself.get_cell()).await {
            Ok((executor, _)) => {
                self.wiring.live.replace_executor(&executor);
                self.children.executor = executor;
                if self.phase.executor_restarted() {
                    let _ = myself.cast(ConductorMsg::Step);
                }
                Ok(())
            }
            Err(e) => Err(Stop::new(
                StopReason::UnrecoverableError,
                format!("{detail}; restarting it failed: {e}"),
            )),
        }
    }
}

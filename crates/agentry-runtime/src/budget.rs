//! The budget supervisor: holds the budget vector, answers spends check-before-spend,
//! and owns the run's wall-clock deadline.
//!
//! It never waits on anything: every handler is a few comparisons. The deadline is a
//! timer task that, when it fires, first tells the supervisor (so the cause is on
//! record before anyone can observe the cancellation) and then cancels the run's
//! token, which every in-flight tool call is selected against.

use agentry_protocol::budget::{BudgetLimits, BudgetSnapshot, Usage};
use agentry_protocol::stop::StopReason;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use ractor_cluster_derive::RactorMessage;
use tokio::task::JoinHandle;
use tokio::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The answer to a spend request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
// Both snapshots are needed by the trace; the reply is moved once per step, so
// boxing would only add an allocation.
#[allow(clippy::large_enum_variant)]
pub enum SpendReply {
    /// Granted; budget before and after the spend.
    Granted {
        /// Before.
        before: BudgetSnapshot,
        /// After.
        after: BudgetSnapshot,
    },
    /// Refused: this dimension is exhausted. Nothing was spent.
    Refused(StopReason),
}

/// Messages the budget supervisor accepts.
#[derive(RactorMessage)]
pub enum BudgetMsg {
    /// Check, then spend, all-or-nothing.
    Spend(Usage, RpcReplyPort<SpendReply>),
    /// Spend up to `n` tool calls; replies with how many were granted (the rest are
    /// refused with `EBUDGET`) and the snapshot after.
    SpendToolCalls(u64, RpcReplyPort<(u64, BudgetSnapshot)>),
    /// Check, then spend, one automatic retry; `false` when the run's retry budget
    /// is exhausted (or the run is stopping).
    SpendRetry(RpcReplyPort<bool>),
    /// Record usage already incurred (a model turn's tokens). No check: the next
    /// spend request sees it.
    Charge(Usage),
    /// Current snapshot.
    Snapshot(RpcReplyPort<BudgetSnapshot>),
    /// Why the run's token was cancelled, if it was.
    StopCause(RpcReplyPort<Option<StopReason>>),
    /// Cancel every in-flight call for this reason (user abort, shutdown).
    CancelAll(StopReason),
    /// Sent by the deadline timer.
    DeadlineReached,
}

/// Start-up arguments.
#[derive(Debug, Clone)]
pub struct BudgetArgs {
    /// Limits.
    pub limits: BudgetLimits,
    /// The run's cancellation token; cancelled at the deadline.
    pub run_token: CancellationToken,
    /// When the run started (the deadline counts from here).
    pub started: Instant,
}

/// Supervisor state.
#[derive(Debug)]
pub struct BudgetState {
    limits: BudgetLimits,
    spent: Usage,
    started: Instant,
    run_token: CancellationToken,
    cause: Option<StopReason>,
    timer: Option<JoinHandle<()>>,
}

impl BudgetState {
    fn snapshot(&self) -> BudgetSnapshot {
        BudgetSnapshot::new(self.limits, self.spent, self.elapsed_ms())
    }

    fn elapsed_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn deadline_passed(&self) -> bool {
        self.limits
            .deadline_ms
            .is_some_and(|d| self.elapsed_ms() >= d)
    }

    fn cancel(&mut self, reason: StopReason) {
        if self.cause.is_none() {
            self.cause = Some(reason);
        }
        self.run_token.cancel();
    }
}

/// The budget supervisor actor.
#[derive(Debug, Default)]
pub struct BudgetSupervisor;

impl Actor for BudgetSupervisor {
    type Msg = BudgetMsg;
    type State = BudgetState;
    type Arguments = BudgetArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<BudgetMsg>,
        args: BudgetArgs,
    ) -> Result<BudgetState, ActorProcessingErr> {
        let timer = args.limits.deadline_ms.map(|ms| {
            let at = args.started + Duration::from_millis(ms);
            let token = args.run_token.clone();
            tokio::spawn(async move {
                tokio::time::sleep_until(at).await;
                // Record the cause first, then cancel: whoever sees the token
                // cancelled and asks for the cause finds it.
                let _ = myself.cast(BudgetMsg::DeadlineReached);
                token.cancel();
            })
        });
        Ok(BudgetState {
            limits: args.limits,
            spent: Usage::default(),
            started: args.started,
            run_token: args.run_token,
            cause: None,
            timer,
        })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<BudgetMsg>,
        state: &mut BudgetState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(t) = state.timer.take() {
            t.abort();
        }
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<BudgetMsg>,
        message: BudgetMsg,
        state: &mut BudgetState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            BudgetMsg::Spend(charge, reply) => {
                let answer = if state.deadline_passed() {
                    state.cancel(StopReason::Deadline);
                    SpendReply::Refused(StopReason::Deadline)
                } else if let Some(cause) = state.cause {
                    SpendReply::Refused(cause)
                } else {
                    match state.limits.check(&state.spent, &charge) {
                        Ok(()) => {
                            let before = state.snapshot();
                            state.spent = state.spent.plus(&charge);
                            SpendReply::Granted {
                                before,
                                after: state.snapshot(),
                            }
                        }
                        Err(reason) => SpendReply::Refused(reason),
                    }
                };
                let _ = reply.send(answer);
            }
            BudgetMsg::SpendToolCalls(n, reply) => {
                let left = state
                    .limits
                    .max_tool_calls
                    .map_or(n, |max| max.saturating_sub(state.spent.tool_calls));
                let granted = if state.cause.is_some() {
                    0
                } else {
                    n.min(left)
                };
                state.spent = state.spent.plus(&Usage::tool_calls(granted));
                let _ = reply.send((granted, state.snapshot()));
            }
            BudgetMsg::SpendRetry(reply) => {
                let ok = state.cause.is_none()
                    && !state.deadline_passed()
                    && state.limits.allows_retry(&state.spent);
                if ok {
                    state.spent.retries += 1;
                }
                let _ = reply.send(ok);
            }
            BudgetMsg::Charge(usage) => state.spent = state.spent.plus(&usage),
            BudgetMsg::Snapshot(reply) => {
                let _ = reply.send(state.snapshot());
            }
            BudgetMsg::StopCause(reply) => {
                let cause = state
                    .cause
                    .or_else(|| state.deadline_passed().then_some(StopReason::Deadline));
                let _ = reply.send(cause);
            }
            BudgetMsg::CancelAll(reason) => state.cancel(reason),
            BudgetMsg::DeadlineReached => state.cancel(StopReason::Deadline),
        }
        Ok(())
    }
}

//! A stand-in for a run's conductor in front of a real budget supervisor.
//!
//! [`StandInRun`] sends the supervisor exactly what a run sends it — a step's
//! `SpendStep` with the runtime's [`DecideRelay`], the model turn's `Charge`, the
//! step's tool calls through the [`ToolCallAllowance`], a tick's `Spend`, the executor's `SpendRetry`, a child's
//! `Reserve`, and at the end the conductor's `Snapshot` then `Release` to the
//! parent — so property tests can drive the budget algebra of a whole tree of
//! real supervisors without running models or tools. The supervisor itself sends
//! `ChildSpent` up the tree, as in a run.

use std::fmt;

use agentry_protocol::budget::{BudgetLimits, BudgetSnapshot, Usage};
use agentry_protocol::decision::{Decision, PolicyOutput};
use agentry_protocol::stop::StopReason;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::ask::{AskError, ask};
use crate::budget::{
    BudgetArgs, BudgetMsg, BudgetSupervisor, ParentLink, SpendReply, ToolCallAllowance,
};
use crate::clock::RunClock;
use crate::events::EventSink;
use crate::policy::{DecideRelay, PolicyMsg};

/// What went wrong driving a supervisor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StandInError {
    /// An actor did not answer or is gone.
    Actor(String),
    /// An actor could not be spawned.
    Spawn(String),
    /// The supervisor granted step `step` but never handed it to the policy.
    GrantedNotDecided {
        /// The step.
        step: u64,
    },
    /// The supervisor refused step `step` yet asked the policy to decide it.
    RefusedButDecided {
        /// The step.
        step: u64,
    },
}

impl fmt::Display for StandInError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StandInError::Actor(e) => write!(f, "{e}"),
            StandInError::Spawn(e) => write!(f, "could not spawn an actor: {e}"),
            StandInError::GrantedNotDecided { step } => {
                write!(f, "step {step} was granted but the policy was never asked")
            }
            StandInError::RefusedButDecided { step } => {
                write!(f, "step {step} was refused yet the policy was asked")
            }
        }
    }
}

impl std::error::Error for StandInError {}

impl From<AskError> for StandInError {
    fn from(e: AskError) -> Self {
        StandInError::Actor(e.to_string())
    }
}

/// What a model turn cost (charged after the decision, as the conductor does).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TurnCost {
    /// Prompt tokens.
    pub tokens_in: u64,
    /// Completion tokens.
    pub tokens_out: u64,
    /// Money, in micro-units.
    pub cost_micros: u64,
}

impl TurnCost {
    /// As a usage vector.
    pub fn usage(&self) -> Usage {
        Usage {
            tokens_in: self.tokens_in,
            tokens_out: self.tokens_out,
            cost_micros: self.cost_micros,
            ..Usage::default()
        }
    }
}

/// The supervisor's answer to a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepOutcome {
    /// Granted and decided; the turn's cost has been charged.
    Granted {
        /// The budget before the step, as the policy was shown it.
        before: BudgetSnapshot,
    },
    /// Granted, but the run was cancelled while the policy decided: as the
    /// conductor, nothing more is charged and the run stops.
    Cancelled {
        /// The budget before the step.
        before: BudgetSnapshot,
    },
    /// Refused before it ran; the policy was not asked.
    Refused(StopReason),
}

/// A policy that answers every decision at once with an empty final answer.
struct AnswerAtOnce;

impl Actor for AnswerAtOnce {
    type Msg = PolicyMsg;
    type State = ();
    type Arguments = ();

    async fn pre_start(
        &self,
        _myself: ActorRef<PolicyMsg>,
        _args: (),
    ) -> Result<(), ActorProcessingErr> {
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<PolicyMsg>,
        message: PolicyMsg,
        _state: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        match message {
            PolicyMsg::Decide { reply, .. } => {
                let answer = Decision::Final {
                    answer: String::new(),
                };
                let _ = reply.send(PolicyOutput::new(answer, "stand-in"));
            }
        }
        Ok(())
    }
}

/// Carves a child's budget at the supervisor `budget`, as `Runtime::start_child`
/// does: the child's limits, or why the request does not fit.
pub async fn reserve(
    budget: &ActorRef<BudgetMsg>,
    child_id: &str,
    request: BudgetLimits,
) -> Result<Result<BudgetLimits, String>, StandInError> {
    let answer = ask(budget, |reply| BudgetMsg::Reserve {
        child_id: child_id.to_string(),
        request,
        reply,
    })
    .await?;
    Ok(answer
        .map(|grant| grant.limits)
        .map_err(|refused| refused.to_string()))
}

/// One run's conductor, reduced to what it says to its budget supervisor.
pub struct StandInRun {
    budget: ActorRef<BudgetMsg>,
    budget_task: JoinHandle<()>,
    policy: ActorRef<PolicyMsg>,
    policy_task: JoinHandle<()>,
    events: EventSink,
    allowance: ToolCallAllowance,
    parent: Option<ParentLink>,
    run_token: CancellationToken,
    steps: u64,
}

impl StandInRun {
    /// Spawns a supervisor with these limits and what was already spent (a
    /// resumed run), under `parent` if it is a child, and a policy for it.
    pub async fn start(
        limits: BudgetLimits,
        spent: Usage,
        parent: Option<ParentLink>,
        run_token: CancellationToken,
    ) -> Result<Self, StandInError> {
        let allowance = ToolCallAllowance::new(0);
        let args = BudgetArgs {
            limits,
            spent,
            run_token: run_token.clone(),
            clock: RunClock {
                started: Instant::now(),
                deadline_at: None,
            },
            parent: parent.clone(),
            allowance: allowance.clone(),
            tree: crate::config::TreeLimits::default(),
            delegated: Usage::default(),
            children: Vec::new(),
        };
        let (budget, budget_task) = Actor::spawn(None, BudgetSupervisor, args)
            .await
            .map_err(|e| StandInError::Spawn(e.to_string()))?;
        let (policy, policy_task) = Actor::spawn(None, AnswerAtOnce, ())
            .await
            .map_err(|e| StandInError::Spawn(e.to_string()))?;
        Ok(StandInRun {
            budget,
            budget_task,
            policy,
            policy_task,
            events: EventSink::new(
                "stand-in".into(),
                false,
                crate::redaction::RunRedaction::for_tests(),
            ),
            allowance,
            parent,
            run_token,
            steps: 0,
        })
    }

    /// The supervisor.
    pub fn budget(&self) -> &ActorRef<BudgetMsg> {
        &self.budget
    }

    /// The run's cancellation token.
    pub fn token(&self) -> &CancellationToken {
        &self.run_token
    }

    /// The next step, as the conductor takes it: one `SpendStep`, the
    /// decision awaited, then the turn's tokens and money charged. Checks that a
    /// granted step reached the policy and a refused one did not.
    pub async fn step(&mut self, turn: TurnCost) -> Result<StepOutcome, StandInError> {
        let step = self.steps + 1;
        let (granted_tx, granted_rx) = tokio::sync::oneshot::channel();
        let (decided_tx, decided_rx) = tokio::sync::oneshot::channel();
        let relay = DecideRelay {
            step,
            new_entries: Vec::new(),
            policy: self.policy.clone(),
            events: self.events.clone(),
            cut: self.run_token.child_token(),
            decided: decided_tx.into(),
        };
        let spend = BudgetMsg::SpendStep {
            granted: granted_tx.into(),
            then: Box::new(relay),
        };
        self.budget
            .cast(spend)
            .map_err(|e| StandInError::Actor(format!("the supervisor is gone: {e}")))?;
        // As the conductor: the decision first (the grant is answered before
        // it); a cancellation seen by then wins over the decision.
        let decided = decided_rx.await.is_ok();
        let cancelled = self.run_token.is_cancelled();
        let granted = granted_rx
            .await
            .map_err(|_| StandInError::Actor(format!("step {step}'s spend was not answered")))?;
        match granted {
            SpendReply::Granted { before, .. } => {
                if !decided {
                    return Err(StandInError::GrantedNotDecided { step });
                }
                self.steps = step;
                if cancelled {
                    return Ok(StepOutcome::Cancelled { before });
                }
                let usage = turn.usage();
                if usage.tokens() + usage.cost_micros > 0 {
                    self.budget
                        .cast(BudgetMsg::Charge(usage))
                        .map_err(|e| StandInError::Actor(e.to_string()))?;
                }
                Ok(StepOutcome::Granted { before })
            }
            SpendReply::Refused(_) if decided => Err(StandInError::RefusedButDecided { step }),
            SpendReply::Refused(reason) => Ok(StepOutcome::Refused(reason)),
        }
    }

    /// The step's `n` tool calls, as the conductor grants them: taken from the
    /// allowance it shares with the supervisor (none once the run is cancelled).
    /// Returns how many were granted.
    pub fn tool_calls(&self, n: u64) -> u64 {
        if self.run_token.is_cancelled() {
            0
        } else {
            self.allowance.take_up_to(n)
        }
    }

    /// A timer tick's spend (before its step), as the conductor sends it.
    pub async fn tick(&self) -> Result<SpendReply, StandInError> {
        let charge = Usage {
            ticks: 1,
            ..Usage::default()
        };
        Ok(ask(&self.budget, |r| BudgetMsg::Spend(charge, r)).await?)
    }

    /// One automatic retry, as the executor asks for it.
    pub async fn retry(&self) -> Result<bool, StandInError> {
        Ok(ask(&self.budget, BudgetMsg::SpendRetry).await?)
    }

    /// The budget now.
    pub async fn snapshot(&self) -> Result<BudgetSnapshot, StandInError> {
        Ok(ask(&self.budget, BudgetMsg::Snapshot).await?)
    }

    /// Children still holding a reservation here.
    pub async fn live_children(&self) -> Result<usize, StandInError> {
        Ok(ask(&self.budget, BudgetMsg::LiveChildren).await?)
    }

    /// Carves a child's budget here (see [`reserve`]).
    pub async fn reserve(
        &self,
        child_id: &str,
        request: BudgetLimits,
    ) -> Result<Result<BudgetLimits, String>, StandInError> {
        reserve(&self.budget, child_id, request).await
    }

    /// The link a child carved here holds to this supervisor.
    pub fn link(&self, child_id: &str) -> ParentLink {
        ParentLink {
            budget: self.budget.clone(),
            child_id: child_id.to_string(),
        }
    }

    /// Ends the run as the conductor does: cancels its token, reads the final
    /// budget, releases the unused allowance to the parent, then stops the
    /// actors (the supervisor releases once more as it stops) and waits for them.
    pub async fn finish(self) -> Result<BudgetSnapshot, StandInError> {
        self.run_token.cancel();
        let last = self.snapshot().await?;
        if let Some(parent) = &self.parent {
            let _ = parent.budget.cast(BudgetMsg::Release {
                child_id: parent.child_id.clone(),
            });
        }
        self.policy.stop(None);
        self.budget.stop(None);
        for task in [self.policy_task, self.budget_task] {
            task.await
                .map_err(|e| StandInError::Actor(format!("an actor's task failed: {e}")))?;
        }
        Ok(last)
    }
}

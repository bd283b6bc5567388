//! The budget supervisor: holds the budget vector, answers spends check-before-spend,
//! and owns the run's wall-clock deadline.
//!
//! It never waits on anything: every handler is a few comparisons. The deadline is a
//! timer task that, when it fires, first tells the supervisor (so the cause is on
//! record before anyone can observe the cancellation) and then cancels the run's
//! token, which every in-flight tool call is selected against.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};

use agentry_protocol::budget::{BudgetLimits, BudgetSnapshot, Usage};
use agentry_protocol::decision::PolicyOutput;
use agentry_protocol::event::RunEvent;
use agentry_protocol::state::SessionEntry;
use agentry_protocol::stop::StopReason;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::task::JoinHandle;
use tokio::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

use crate::events::EventSink;
use crate::policy::PolicyMsg;

/// The answer to a spend request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
// The snapshot is handed to the policy; the reply is moved once per step, so
// boxing would only add an allocation.
#[allow(clippy::large_enum_variant)]
pub enum SpendReply {
    /// Granted; the budget before the spend (what the policy is shown). The
    /// conductor works out the snapshot after the step itself, once the step's
    /// tokens and tool calls are known; it takes the step's tool calls from the
    /// [`ToolCallTally`].
    Granted {
        /// Before.
        before: BudgetSnapshot,
    },
    /// Refused: this dimension is exhausted. Nothing was spent.
    Refused(StopReason),
}

/// A step's decision request, handed to the policy by the budget supervisor
/// once the step is granted: the conductor sends one message where it sent a
/// spend request, waited for the grant and then asked the policy (one mailbox
/// hop and one wake-up of the conductor less per step).
pub struct DecideAfterSpend {
    /// The step asked for.
    pub step: u64,
    /// Session entries applied since the previous decision (for the policy).
    pub new_entries: Vec<SessionEntry>,
    /// The run's policy actor.
    pub policy: ActorRef<PolicyMsg>,
    /// The run's events: `StepStarted` is published on the grant, before the
    /// policy is asked (so before any of the step's token deltas).
    pub events: EventSink,
    /// Always answered, first: the grant (with the snapshot the policy is
    /// shown) or the refusal.
    pub granted: RpcReplyPort<SpendReply>,
    /// The policy's decision; dropped unanswered when the step is refused.
    pub decided: RpcReplyPort<PolicyOutput>,
}

/// Messages the budget supervisor accepts.
pub enum BudgetMsg {
    /// Check, then spend, all-or-nothing.
    Spend(Usage, RpcReplyPort<SpendReply>),
    /// Check, then spend one step; if granted, ask the policy to decide it
    /// (see [`DecideAfterSpend`]).
    SpendAndDecide(Box<DecideAfterSpend>),
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
    /// Carve a child's budget out of what is left here: a requested limit must fit
    /// (spent + reserved + request within this node's limit, on every dimension),
    /// an unset one on a dimension limited here gets all that is left, and the
    /// deadline is clamped to this node's. Replies with the child's limits, or why
    /// the request does not fit.
    Reserve {
        /// The child's run id.
        child_id: String,
        /// The limits the child asks for.
        request: BudgetLimits,
        /// The child's limits and this node's absolute deadline (which bounds the
        /// child's), or why not.
        reply: RpcReplyPort<Result<(BudgetLimits, Option<Instant>), String>>,
    },
    /// A child (or a descendant through it) spent this: charge it here and up.
    ChildSpent {
        /// The child on the path.
        child_id: String,
        /// What was spent.
        usage: Usage,
    },
    /// A child ended: what it did not use of its reservation returns.
    Release {
        /// The child.
        child_id: String,
    },
    /// Every child ever carved from this node, in spawn order.
    Children(RpcReplyPort<Vec<String>>),
    /// How many children are still running (for the fan-out limit).
    LiveChildren(RpcReplyPort<usize>),
}

/// Start-up arguments.
#[derive(Debug, Clone)]
pub struct BudgetArgs {
    /// Limits.
    pub limits: BudgetLimits,
    /// Already spent (a resumed run's spend before the restart).
    pub spent: Usage,
    /// The run's cancellation token; cancelled at the deadline.
    pub run_token: CancellationToken,
    /// When the run started (the deadline counts from here).
    pub started: Instant,
    /// For a child run: the parent's supervisor and this run's id there. Every
    /// spend is charged up to it; the unused allowance is released to it at stop.
    pub parent: Option<ParentLink>,
    /// For a child: the parent's absolute deadline, which bounds this run's.
    pub parent_deadline: Option<Instant>,
    /// Tool calls the run's conductor granted itself and has not reported yet.
    pub tool_calls: ToolCallTally,
}

/// A run's own tool calls, shared by its conductor and its budget supervisor
/// without a message per step. The conductor is the only spender of its run's
/// own tool calls (children spend from what was reserved for them): it takes
/// them out of what is left — the limit minus everything spent, reserved for
/// children or already taken — in one atomic step, and adds them to the taken
/// count, which the supervisor moves into its books before it handles any
/// message, so everything it answers counts them. The supervisor carves a
/// child's tool calls out of the same figure, atomically too, so a reservation
/// made while a step is being decided and that step's own calls never both get
/// the last calls (they once did: the conductor granted against the figure its
/// step's spend had reported). A message would wake the supervisor's task as
/// well as the executor's in the same poll, and the second wake-up hands a task
/// to another worker thread.
#[derive(Debug, Clone, Default)]
pub struct ToolCallTally(Arc<Tally>);

#[derive(Debug, Default)]
struct Tally {
    /// Taken by the conductor, not yet in the supervisor's books.
    taken: AtomicU64,
    /// What may still be taken, [`UNLIMITED`] without a limit; below zero when
    /// a child's charge-up passed what was reserved for it.
    left: AtomicI64,
}

/// [`Tally::left`] of a run without a tool-call limit.
const UNLIMITED: i64 = i64::MAX;

/// A count of tool calls as a change of [`Tally::left`].
fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(UNLIMITED - 1)
}

impl ToolCallTally {
    /// Takes up to `n` calls for the run's own step and returns how many were
    /// granted (the rest are refused with `EBUDGET`).
    pub fn take_up_to(&self, n: u64) -> u64 {
        let mut granted = 0;
        let _ = self
            .0
            .left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                if left == UNLIMITED {
                    granted = n;
                    return None;
                }
                granted = n.min(u64::try_from(left).unwrap_or(0));
                (granted > 0).then(|| left - granted as i64)
            });
        if granted > 0 {
            self.0.taken.fetch_add(granted, Ordering::Release);
        }
        granted
    }

    /// Sets what is left from the limit and what is committed (at start).
    fn start(&self, limit: Option<u64>, committed: u64) {
        let left = limit.map_or(UNLIMITED, |l| signed(l) - signed(committed));
        self.0.left.store(left, Ordering::Release);
    }

    /// What is left moves by `delta` (a release, a charge-up past a reservation).
    fn shift(&self, delta: i64) {
        let _ = self
            .0
            .left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                (left != UNLIMITED).then(|| left.saturating_add(delta).min(UNLIMITED - 1))
            });
    }

    /// Carves calls for a child: exactly `wanted`, or all that is left when
    /// `None`; or, when that does not fit, what is left.
    fn carve(&self, wanted: Option<u64>) -> Result<u64, u64> {
        let mut carved = 0;
        self.0
            .left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                let have = u64::try_from(left).ok()?;
                carved = wanted.unwrap_or(have);
                (carved <= have).then(|| left - carved as i64)
            })
            .map(|_| carved)
            .map_err(|left| u64::try_from(left).unwrap_or(0))
    }

    fn take_booked(&self) -> u64 {
        self.0.taken.swap(0, Ordering::Acquire)
    }
}

/// A child's link to its parent's budget supervisor.
#[derive(Debug, Clone)]
pub struct ParentLink {
    /// The parent's budget supervisor.
    pub budget: ActorRef<BudgetMsg>,
    /// This run's id, as the parent knows it.
    pub child_id: String,
}

/// Supervisor state.
#[derive(Debug)]
pub struct BudgetState {
    limits: BudgetLimits,
    spent: Usage,
    started: Instant,
    run_token: CancellationToken,
    cause: Option<StopReason>,
    timer: Option<DeadlineTimer>,
    parent: Option<ParentLink>,
    /// Allowances reserved for live children, minus what they have spent.
    reserved: Usage,
    /// The absolute deadline, if any.
    deadline_at: Option<Instant>,
    /// Per live child: what is still reserved for it.
    children: HashMap<String, Usage>,
    /// Every child carved from this node, in order.
    spawned: Vec<String>,
    tool_calls: ToolCallTally,
}

impl BudgetState {
    fn snapshot(&self) -> BudgetSnapshot {
        BudgetSnapshot::new(self.limits, self.spent, self.elapsed_ms())
    }

    /// A child's limits and the allowance to reserve for them (see
    /// [`BudgetMsg::Reserve`]). Tool calls limited here are taken from the
    /// tally, last, once everything else fits.
    fn carve(&self, request: &BudgetLimits) -> Result<(BudgetLimits, Usage), String> {
        let mine = &self.limits;
        let left = mine.left(&self.committed());
        // A dimension limited here is always limited for the child: by its request,
        // or by everything that is left.
        let pick = |req: Option<u64>, limit: Option<u64>, left: u64| match (req, limit) {
            (Some(r), _) => Some(r),
            (None, Some(_)) => Some(left),
            (None, None) => None,
        };
        let wall_left = mine
            .deadline_ms
            .map(|d| d.saturating_sub(self.elapsed_ms()));
        let deadline_ms = match (request.deadline_ms, wall_left) {
            (Some(r), Some(w)) => Some(r.min(w)),
            (r, w) => r.or(w),
        };
        let mut limits = BudgetLimits {
            max_steps: pick(request.max_steps, mine.max_steps, left.steps),
            // Set from the tally below when limited here.
            max_tool_calls: request.max_tool_calls,
            max_tokens: pick(request.max_tokens, mine.max_tokens, left.tokens_in),
            max_cost_micros: pick(
                request.max_cost_micros,
                mine.max_cost_micros,
                left.cost_micros,
            ),
            deadline_ms,
            max_retries: pick(request.max_retries, mine.max_retries, left.retries),
            max_ticks: pick(request.max_ticks, mine.max_ticks, left.ticks),
        };
        // Only what is limited here needs setting aside.
        let reserve = |child: Option<u64>, limit: Option<u64>| {
            if limit.is_some() {
                child.unwrap_or(0)
            } else {
                0
            }
        };
        let mut allowance = Usage {
            steps: reserve(limits.max_steps, mine.max_steps),
            tool_calls: 0,
            tokens_in: reserve(limits.max_tokens, mine.max_tokens),
            tokens_out: 0,
            cost_micros: reserve(limits.max_cost_micros, mine.max_cost_micros),
            retries: reserve(limits.max_retries, mine.max_retries),
            ticks: reserve(limits.max_ticks, mine.max_ticks),
        };
        mine.covers(&self.committed(), &allowance)?;
        if let Some(max) = mine.max_tool_calls {
            let calls = self
                .tool_calls
                .carve(request.max_tool_calls)
                .map_err(|left| {
                    format!(
                        "tool_calls: the child asked for {} but only {left} of {max} are left",
                        request.max_tool_calls.unwrap_or(left)
                    )
                })?;
            limits.max_tool_calls = Some(calls);
            allowance.tool_calls = calls;
        }
        Ok((limits, allowance))
    }

    /// Check-before-spend of `charge`: refused past the deadline, once the run
    /// is stopping, or when a limit would be passed; otherwise spent.
    fn spend(&mut self, charge: Usage) -> SpendReply {
        if self.deadline_passed() {
            self.cancel(StopReason::Deadline);
            return SpendReply::Refused(StopReason::Deadline);
        }
        if let Some(cause) = self.cause {
            return SpendReply::Refused(cause);
        }
        if let Err(reason) = self.limits.check(&self.committed(), &charge) {
            return SpendReply::Refused(reason);
        }
        // Tool calls in a spend come out of what the conductor takes from too.
        if charge.tool_calls > 0
            && self.limits.max_tool_calls.is_some()
            && self.tool_calls.carve(Some(charge.tool_calls)).is_err()
        {
            return SpendReply::Refused(StopReason::MaxToolCalls);
        }
        let before = self.snapshot();
        self.record(charge);
        SpendReply::Granted { before }
    }

    /// Spent plus reserved for children: what this node's own checks count.
    fn committed(&self) -> Usage {
        self.spent.plus(&self.reserved)
    }

    /// Records a spend and charges it to every ancestor (accounting only: the
    /// spend already fits this node's allowance, which the ancestors reserved).
    fn record(&mut self, usage: Usage) {
        self.spent = self.spent.plus(&usage);
        if let Some(p) = &self.parent {
            let _ = p.budget.cast(BudgetMsg::ChildSpent {
                child_id: p.child_id.clone(),
                usage,
            });
        }
    }

    /// Books the tool calls the conductor granted since the last message.
    fn book_tool_calls(&mut self) {
        let n = self.tool_calls.take_booked();
        if n > 0 {
            self.record(Usage::tool_calls(n));
        }
    }

    fn elapsed_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn deadline_passed(&self) -> bool {
        self.deadline_at.is_some_and(|at| Instant::now() >= at)
    }

    fn cancel(&mut self, reason: StopReason) {
        if self.cause.is_none() {
            self.cause = Some(reason);
        }
        self.run_token.cancel();
    }
}

/// How long before the deadline tokio's timer hands over to a precise sleep.
const DEADLINE_LEAD: Duration = Duration::from_millis(2);

/// At most this many deadline alarms wait on blocking-pool threads at once;
/// the others fire on tokio's timer alone (0–2 ms late). Many runs started
/// together with the same deadline would otherwise each take a thread for the
/// last 2 ms.
const MAX_PRECISE_ALARMS: usize = 16;

/// Blocking-pool threads taken by deadline alarms right now (all runtimes).
static PRECISE_ALARMS: AtomicUsize = AtomicUsize::new(0);

/// One of the [`MAX_PRECISE_ALARMS`] places; given back on drop.
#[derive(Debug)]
struct PreciseSlot(());

impl PreciseSlot {
    fn take() -> Option<PreciseSlot> {
        PRECISE_ALARMS
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_PRECISE_ALARMS).then_some(n + 1)
            })
            .ok()
            .map(|_| PreciseSlot(()))
    }
}

impl Drop for PreciseSlot {
    fn drop(&mut self) {
        PRECISE_ALARMS.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The alarm that stops a run at its deadline.
///
/// tokio's timer wheel has 1 ms ticks and its driver parks for whole
/// milliseconds, so a `sleep_until` wakes 0–2 ms after its instant (W3's floor
/// shows ~1.3 ms on the reference machine). The alarm therefore sleeps on
/// tokio's timer until [`DEADLINE_LEAD`] before the deadline, then waits the rest
/// on a blocking-pool thread (`nanosleep`, ~0.1 ms late) and fires from there;
/// tokio's own timer for the deadline still races it, so a paused test clock or
/// a blocking pool that is full fires no later than before, and never early. At
/// most [`MAX_PRECISE_ALARMS`] alarms hold a thread at once.
#[derive(Debug)]
struct DeadlineTimer {
    task: JoinHandle<()>,
    /// Set when the run ends first: a precise sleep already under way then
    /// fires nothing.
    disarmed: Arc<std::sync::atomic::AtomicBool>,
}

impl DeadlineTimer {
    /// Stops the run: the cause first, then the token, so whoever sees the token
    /// cancelled and asks for the cause finds it.
    fn arm(at: Instant, supervisor: ActorRef<BudgetMsg>, token: CancellationToken) -> Self {
        Self::arm_with(at, DEADLINE_LEAD, move || {
            let _ = supervisor.cast(BudgetMsg::DeadlineReached);
            token.cancel();
        })
    }

    /// Runs `fire` once, at `at` on the runtime's clock, unless disarmed first.
    fn arm_with(at: Instant, lead: Duration, fire: impl Fn() + Clone + Send + 'static) -> Self {
        let disarmed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let fire = {
            let disarmed = Arc::clone(&disarmed);
            move || {
                // Swapped, so of the two racing waits only the first fires.
                if !disarmed.swap(true, Ordering::AcqRel) {
                    fire();
                }
            }
        };
        let task = tokio::spawn(async move {
            tokio::time::sleep_until(at.checked_sub(lead).unwrap_or(at)).await;
            let rest = at.saturating_duration_since(Instant::now());
            if let Some(slot) = PreciseSlot::take().filter(|_| !rest.is_zero()) {
                let precise = fire.clone();
                // Not awaited: it fires from its thread.
                drop(tokio::task::spawn_blocking(move || {
                    // Released when this closure ends or is dropped unrun.
                    let _slot = slot;
                    std::thread::sleep(rest);
                    // The deadline is on the runtime's clock: a paused test clock
                    // has not moved while this thread slept, and tokio's timer
                    // below fires then instead.
                    if Instant::now() >= at {
                        precise();
                    }
                }));
            }
            // The backstop (no slot, a paused clock, a busy blocking pool): on
            // tokio's timer, 0–2 ms late; a no-op once the precise sleep fired.
            tokio::time::sleep_until(at).await;
            fire();
        });
        DeadlineTimer { task, disarmed }
    }

    fn disarm(self) {
        self.disarmed.store(true, Ordering::Release);
        self.task.abort();
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
        // A child's deadline is never later than its parent's: the earlier of its
        // own and the parent's absolute instant, so when an ancestor's deadline
        // fires, every descendant's has passed too (and says `deadline`).
        let own = args
            .limits
            .deadline_ms
            .map(|ms| crate::clock::later(args.started, Duration::from_millis(ms)));
        let deadline_at = match (own, args.parent_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let timer = deadline_at.map(|at| DeadlineTimer::arm(at, myself, args.run_token.clone()));
        args.tool_calls
            .start(args.limits.max_tool_calls, args.spent.tool_calls);
        Ok(BudgetState {
            deadline_at,
            parent: args.parent,
            reserved: Usage::default(),
            children: HashMap::new(),
            spawned: Vec::new(),
            limits: args.limits,
            spent: args.spent,
            started: args.started,
            run_token: args.run_token,
            cause: None,
            timer,
            tool_calls: args.tool_calls,
        })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<BudgetMsg>,
        state: &mut BudgetState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(t) = state.timer.take() {
            t.disarm();
        }
        state.book_tool_calls();
        // What this run did not use returns to its parent.
        if let Some(p) = &state.parent {
            let _ = p.budget.cast(BudgetMsg::Release {
                child_id: p.child_id.clone(),
            });
        }
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<BudgetMsg>,
        message: BudgetMsg,
        state: &mut BudgetState,
    ) -> Result<(), ActorProcessingErr> {
        state.book_tool_calls();
        match message {
            BudgetMsg::Spend(charge, reply) => {
                let _ = reply.send(state.spend(charge));
            }
            BudgetMsg::SpendAndDecide(ask) => {
                let DecideAfterSpend {
                    step,
                    new_entries,
                    policy,
                    events,
                    granted,
                    decided,
                } = *ask;
                let answer = state.spend(Usage::step());
                let _ = granted.send(answer);
                if let SpendReply::Granted { before, .. } = answer {
                    events.emit(|| RunEvent::StepStarted { step });
                    // A policy that is gone drops the message and with it the
                    // reply port: the conductor hears that it did not answer.
                    let _ = policy.cast(PolicyMsg::Decide {
                        step,
                        new_entries,
                        budget: before,
                        reply: decided,
                    });
                }
            }
            BudgetMsg::SpendToolCalls(n, reply) => {
                let granted = if state.cause.is_some() {
                    0
                } else {
                    state.tool_calls.take_up_to(n)
                };
                state.book_tool_calls();
                let _ = reply.send((granted, state.snapshot()));
            }
            BudgetMsg::SpendRetry(reply) => {
                let ok = state.cause.is_none()
                    && !state.deadline_passed()
                    && state.limits.allows_retry(&state.committed());
                if ok {
                    state.record(Usage {
                        retries: 1,
                        ..Usage::default()
                    });
                }
                let _ = reply.send(ok);
            }
            BudgetMsg::Charge(usage) => {
                state.tool_calls.shift(-signed(usage.tool_calls));
                state.record(usage);
            }
            BudgetMsg::Reserve {
                child_id,
                request,
                reply,
            } => {
                let answer = match state.cause {
                    Some(cause) => Err(format!("the parent is stopping ({cause})")),
                    None => state.carve(&request),
                };
                let deadline_at = state.deadline_at;
                let answer = answer.map(|(limits, allowance)| {
                    state.spawned.push(child_id.clone());
                    state.reserved = state.reserved.plus(&allowance);
                    let entry = state.children.entry(child_id).or_default();
                    *entry = entry.plus(&allowance);
                    (limits, deadline_at)
                });
                let _ = reply.send(answer);
            }
            BudgetMsg::ChildSpent { child_id, usage } => {
                // The child's reservation shrinks by what it spent; what it spent
                // beyond it (tokens known only after a model turn) is spent here too.
                let covered = if let Some(outstanding) = state.children.get_mut(&child_id) {
                    let mut covered = outstanding.min(&usage);
                    // Tokens are reserved as one figure (in tokens_in).
                    covered.tokens_in = outstanding.tokens_in.min(usage.tokens());
                    covered.tokens_out = 0;
                    *outstanding = outstanding.minus(&covered);
                    state.reserved = state.reserved.minus(&covered);
                    covered
                } else {
                    Usage::default()
                };
                // Calls beyond the reservation are not left here any more.
                let beyond = usage.tool_calls - covered.tool_calls;
                state.tool_calls.shift(-signed(beyond));
                state.record(usage);
            }
            BudgetMsg::Release { child_id } => {
                if let Some(outstanding) = state.children.remove(&child_id) {
                    state.reserved = state.reserved.minus(&outstanding);
                    state.tool_calls.shift(signed(outstanding.tool_calls));
                }
            }
            BudgetMsg::Children(reply) => {
                let _ = reply.send(state.spawned.clone());
            }
            BudgetMsg::LiveChildren(reply) => {
                let _ = reply.send(state.children.len());
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A recorder of when an alarm fired (on the runtime's clock).
    fn recorder() -> (Arc<Mutex<Vec<Instant>>>, impl Fn() + Clone + Send + 'static) {
        let fired = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&fired);
        (fired, move || {
            if let Ok(mut v) = log.lock() {
                v.push(Instant::now());
            }
        })
    }

    /// Alarm tests count the process-wide precise slots: one at a time.
    static SLOTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

    /// Generous: a loaded machine may be slow, never this slow.
    const PATIENCE: Duration = Duration::from_secs(5);

    /// Polls until `done` holds; false if it never did within [`PATIENCE`].
    async fn eventually(done: impl Fn() -> bool) -> bool {
        let until = Instant::now() + PATIENCE;
        while !done() {
            if Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        true
    }

    fn fired_at(fired: &Arc<Mutex<Vec<Instant>>>) -> Vec<Instant> {
        fired.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// Every precise sleep has ended (its thread fired or not, and let go of
    /// its slot).
    async fn precise_sleeps_ended() -> bool {
        eventually(|| PRECISE_ALARMS.load(Ordering::Acquire) == 0).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_alarm_fires_once_and_never_early() {
        let _one_at_a_time = SLOTS.lock().await;
        // A lead longer than the wait: the whole wait is the precise one.
        let at = Instant::now() + Duration::from_millis(30);
        let (fired, fire) = recorder();
        let timer = DeadlineTimer::arm_with(at, Duration::from_secs(1), fire);
        assert!(
            eventually(|| !fired_at(&fired).is_empty()).await,
            "never fired"
        );
        // Both waits are over: the backstop's task and the precise thread.
        let disarmed = Arc::clone(&timer.disarmed);
        assert!(tokio::time::timeout(PATIENCE, timer.task).await.is_ok());
        assert!(precise_sleeps_ended().await);
        let fired = fired_at(&fired);
        assert_eq!(fired.len(), 1, "{fired:?}");
        assert!(fired[0] >= at);
        assert!(disarmed.load(Ordering::Acquire), "fired, so spent");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_disarmed_alarm_fires_nothing_even_mid_sleep() {
        let _one_at_a_time = SLOTS.lock().await;
        let at = Instant::now() + Duration::from_millis(300);
        let (fired, fire) = recorder();
        // A lead longer than the wait: the precise sleep starts at once.
        let timer = DeadlineTimer::arm_with(at, Duration::from_secs(1), fire);
        assert!(
            eventually(|| PRECISE_ALARMS.load(Ordering::Acquire) == 1).await,
            "the precise sleep never started"
        );
        timer.disarm();
        // The precise thread wakes at the deadline and ends without firing.
        assert!(precise_sleeps_ended().await);
        assert!(Instant::now() >= at);
        assert_eq!(fired_at(&fired), Vec::<Instant>::new());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn more_alarms_than_precise_slots_all_fire_once_never_early() {
        let _one_at_a_time = SLOTS.lock().await;
        // Four times the slots: most of these wait on tokio's timer alone.
        let n = 4 * MAX_PRECISE_ALARMS;
        let at = Instant::now() + Duration::from_millis(50);
        let (fired, fire) = recorder();
        let timers: Vec<_> = (0..n)
            .map(|_| DeadlineTimer::arm_with(at, Duration::from_secs(1), fire.clone()))
            .collect();
        assert!(eventually(|| fired_at(&fired).len() >= n).await);
        for timer in timers {
            assert!(tokio::time::timeout(PATIENCE, timer.task).await.is_ok());
        }
        assert!(precise_sleeps_ended().await);
        let fired = fired_at(&fired);
        assert_eq!(fired.len(), n);
        assert!(fired.iter().all(|t| *t >= at));
    }

    #[tokio::test(start_paused = true)]
    async fn on_a_paused_clock_the_alarm_fires_at_its_instant() {
        let _one_at_a_time = SLOTS.lock().await;
        // The blocking thread's real sleep does not move the paused clock: tokio's
        // timer fires instead, at the instant.
        let at = Instant::now() + Duration::from_millis(200);
        let (fired, fire) = recorder();
        let _timer = DeadlineTimer::arm_with(at, DEADLINE_LEAD, fire);
        tokio::time::sleep_until(at + Duration::from_millis(50)).await;
        let fired = fired.lock().map(|v| v.clone()).unwrap_or_default();
        assert_eq!(fired.len(), 1, "{fired:?}");
        assert!(fired[0] >= at && fired[0] < at + Duration::from_millis(10));
    }
}

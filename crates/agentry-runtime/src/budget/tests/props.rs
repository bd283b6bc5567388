//! Property tests for the budget's check-before-spend, on every dimension
//! (steps, tool calls, tokens, money, retries, ticks): in the pure check, and in
//! the budget supervisor driven as a run drives it — a step's spend and
//! decision, the model turn's charge, the step's tool calls through the allowance, a
//! tick before its step, the executor's retries, a resumed run's earlier spend.
//! The oracle is the independent model of `model.rs`, written from the
//! documented rules, never `BudgetLimits::check` or the supervisor's code.

use agentry_protocol::budget::{BudgetLimits, BudgetSnapshot, Usage};
use agentry_protocol::stop::StopReason;
use proptest::prelude::*;
use tokio_util::sync::CancellationToken;

use super::model::{Amounts, Dim, Model, justified, limits_of, within};
use super::standin::{StandInRun, StepOutcome, TurnCost};
use crate::budget::SpendReply;

fn limit(max: u64) -> impl Strategy<Value = Option<u64>> {
    prop_oneof![Just(None), (0..max).prop_map(Some)]
}

fn limits() -> impl Strategy<Value = BudgetLimits> {
    (
        limit(20),
        limit(20),
        limit(40),
        limit(20),
        limit(6),
        limit(8),
    )
        .prop_map(|(s, t, k, c, r, i)| limits_of([s, t, k, c, r, i]))
}

fn charge() -> impl Strategy<Value = Usage> {
    (
        0u64..3,
        0u64..4,
        0u64..8,
        0u64..8,
        0u64..6,
        0u64..3,
        0u64..3,
    )
        .prop_map(|(s, t, i, o, c, r, k)| Usage {
            steps: s,
            tool_calls: t,
            tokens_in: i,
            tokens_out: o,
            cost_micros: c,
            retries: r,
            ticks: k,
            ..Usage::default()
        })
}

proptest! {
    /// The pure check grants a charge exactly when the model does, and a
    /// refusal names a dimension the model finds exhausted (retries have their
    /// own check and are left out).
    #[test]
    fn check_grants_exactly_what_the_model_grants(limits in limits(), charges in prop::collection::vec(charge(), 0..60)) {
        let mut model = Model::root(&limits, Usage::default());
        for c in &charges {
            let spent = model.spent(0);
            let want: Vec<Dim> = model.refusals_of(0, c);
            match limits.check(&spent, c) {
                Ok(()) => {
                    prop_assert!(want.is_empty(), "{c:?} granted at {spent:?} under {limits:?}; the model refuses on {want:?}");
                    model.spend(0, c);
                }
                Err(reason) => prop_assert!(justified(reason, &want),
                    "{reason} refused {c:?} at {spent:?} under {limits:?}; the model: {want:?}"),
            }
            // Retries have their own check; nothing crosses a limit here.
            let checked = BudgetLimits { max_retries: None, ..limits };
            let held = within(&checked, &Amounts::of(&model.spent(0)), &Amounts::default());
            prop_assert!(held.is_ok(), "{:?}", held);
        }
    }

    #[test]
    fn the_step_limit_admits_exactly_max_steps(max in 0u64..30) {
        let limits = BudgetLimits { max_steps: Some(max), ..BudgetLimits::default() };
        let mut spent = Usage::default();
        let mut granted = 0;
        while limits.check(&spent, &Usage::step()).is_ok() {
            spent = spent.plus(&Usage::step());
            granted += 1;
            prop_assert!(granted <= max);
        }
        prop_assert_eq!(granted, max);
        prop_assert_eq!(limits.check(&spent, &Usage::step()), Err(StopReason::MaxSteps));
    }

    #[test]
    fn snapshot_remaining_is_limit_minus_spent(limits in limits(), spent in charge()) {
        let snap = BudgetSnapshot::new(limits, spent, 0);
        let left = |l: Option<u64>, v: u64| l.map(|l| l.saturating_sub(v));
        prop_assert_eq!(snap.remaining.steps_left, left(limits.max_steps, spent.steps));
        prop_assert_eq!(snap.remaining.tool_calls_left, left(limits.max_tool_calls, spent.tool_calls));
        prop_assert_eq!(snap.remaining.tokens_left, left(limits.max_tokens, spent.tokens()));
        prop_assert_eq!(snap.remaining.cost_micros_left, left(limits.max_cost_micros, spent.cost_micros));
    }
}

/// What a run asks of its budget supervisor.
#[derive(Debug, Clone, Copy)]
enum Op {
    /// A step: spend and decide, the turn's charge, then `calls` tool calls.
    Step { turn: TurnCost, calls: u64 },
    /// A timer tick's spend, then the step it wakes.
    Tick { turn: TurnCost, calls: u64 },
    /// An automatic retry.
    Retry,
}

fn turn() -> impl Strategy<Value = TurnCost> {
    (0u64..6, 0u64..6, 0u64..5).prop_map(|(i, o, c)| TurnCost {
        tokens_in: i,
        tokens_out: o,
        cost_micros: c,
    })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (turn(), 0u64..5).prop_map(|(turn, calls)| Op::Step { turn, calls }),
        2 => (turn(), 0u64..5).prop_map(|(turn, calls)| Op::Tick { turn, calls }),
        2 => Just(Op::Retry),
    ]
}

/// Limits, and what a resumed run had spent under them: within them on the
/// dimensions checked before spending, anything on tokens and money (a turn
/// may have crossed those).
fn resumed() -> impl Strategy<Value = (BudgetLimits, Usage)> {
    (limits(), charge(), any::<bool>()).prop_map(|(limits, spent, fresh)| {
        let cap = |l: Option<u64>, v: u64| l.map_or(v, |l| v.min(l));
        let spent = Usage {
            steps: cap(limits.max_steps, spent.steps),
            tool_calls: cap(limits.max_tool_calls, spent.tool_calls),
            retries: cap(limits.max_retries, spent.retries),
            ticks: cap(limits.max_ticks, spent.ticks),
            ..spent
        };
        (limits, if fresh { Usage::default() } else { spent })
    })
}

/// A step at the supervisor: granted exactly when the model has the
/// allowance (the policy asked only then, which the stand-in checks), then the
/// turn charged and the tool calls granted as far as the model has them left.
async fn step(
    run: &mut StandInRun,
    model: &mut Model,
    turn: TurnCost,
    calls: u64,
) -> Result<(), String> {
    let want = model.step_refusals(0);
    match run.step(turn).await.map_err(|e| e.to_string())? {
        StepOutcome::Granted { before } if want.is_empty() => {
            if before.spent != model.spent(0) {
                return Err(format!(
                    "the policy was shown {:?}, the model has {:?}",
                    before.spent,
                    model.spent(0)
                ));
            }
            model.spend(0, &Usage::step());
            model.spend(0, &turn.usage());
            let left = model.tool_calls_left(0);
            let granted = run.tool_calls(calls);
            if granted != left.map_or(calls, |l| l.min(calls)) {
                return Err(format!(
                    "{granted} of {calls} calls granted, the model has {left:?} left"
                ));
            }
            model.spend(0, &Usage::tool_calls(granted));
            Ok(())
        }
        StepOutcome::Refused(reason) if justified(reason, &want) => Ok(()),
        got @ (StepOutcome::Granted { .. }
        | StepOutcome::Cancelled { .. }
        | StepOutcome::Refused(_)) => Err(format!(
            "step answered {got:?}; the model refuses on {want:?}"
        )),
    }
}

async fn apply(run: &mut StandInRun, model: &mut Model, op: Op) -> Result<(), String> {
    match op {
        Op::Step { turn, calls } => step(run, model, turn, calls).await,
        Op::Tick { turn, calls } => {
            let want = model.tick_refusals(0);
            match run.tick().await.map_err(|e| e.to_string())? {
                SpendReply::Granted { .. } if want.is_empty() => {
                    model.spend(
                        0,
                        &Usage {
                            ticks: 1,
                            ..Usage::default()
                        },
                    );
                    step(run, model, turn, calls).await
                }
                SpendReply::Refused(reason) if justified(reason, &want) => Ok(()),
                got @ (SpendReply::Granted { .. } | SpendReply::Refused(_)) => Err(format!(
                    "tick answered {got:?}; the model refuses on {want:?}"
                )),
            }
        }
        Op::Retry => {
            let want = model.retry_allowed(0);
            let got = run.retry().await.map_err(|e| e.to_string())?;
            if got != want {
                return Err(format!("retry answered {got}, the model {want}"));
            }
            if got {
                model.spend(
                    0,
                    &Usage {
                        retries: 1,
                        ..Usage::default()
                    },
                );
            }
            Ok(())
        }
    }
}

/// Runs `ops` against a real supervisor and against the model; the first
/// divergence is the error. A run would stop at its first refused step or tick;
/// the supervisor is asked on regardless, so a refusal is seen to spend
/// nothing and to stay a refusal.
async fn supervisor_matches_model(
    limits: BudgetLimits,
    spent: Usage,
    ops: Vec<Op>,
) -> Result<(), String> {
    let mut run = StandInRun::start(limits, spent, None, CancellationToken::new())
        .await
        .map_err(|e| e.to_string())?;
    let mut model = Model::root(&limits, spent);
    // Tokens and money may pass their limit by one turn's, plus what a resumed
    // run brought along.
    let mut slack = Amounts::of(&spent);
    for op in &ops {
        if let Op::Step { turn, .. } | Op::Tick { turn, .. } = op {
            slack = slack.max(&Amounts::of(&spent).plus(&Amounts::of(&turn.usage())));
        }
    }
    for (n, op) in ops.into_iter().enumerate() {
        apply(&mut run, &mut model, op)
            .await
            .map_err(|e| format!("op {n} ({op:?}) at {:?}: {e}", model.spent(0)))?;
        let snap = run.snapshot().await.map_err(|e| e.to_string())?;
        if snap.spent != model.spent(0) {
            return Err(format!(
                "after op {n} ({op:?}): spent {:?}, the model {:?}",
                snap.spent,
                model.spent(0)
            ));
        }
        within(&limits, &Amounts::of(&snap.spent), &slack)?;
    }
    run.finish().await.map_err(|e| e.to_string())?;
    Ok(())
}

proptest! {
    // 256 cases unless PROPTEST_CASES says otherwise.
    #![proptest_config(ProptestConfig::default())]

    #[test]
    fn the_supervisor_grants_exactly_what_the_model_grants((limits, spent) in resumed(), ops in prop::collection::vec(op(), 0..40)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let result = rt.block_on(supervisor_matches_model(limits, spent, ops));
        prop_assert!(result.is_ok(), "{}", result.err().unwrap_or_default());
    }
}

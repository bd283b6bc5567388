//! Property tests for budget invariants: spending never exceeds a limit on any
//! dimension, and a refusal spends nothing (in the pure check and in the budget
//! supervisor actor that applies it).

use agentry::StopReason;
use agentry::protocol::budget::{BudgetLimits, BudgetSnapshot, Usage};
use agentry::runtime::budget::{BudgetArgs, BudgetMsg, BudgetSupervisor, SpendReply};
use agentry_test_support::ask_actor as ask;
use proptest::prelude::*;
use ractor::Actor;
use tokio_util::sync::CancellationToken;

fn limit() -> impl Strategy<Value = Option<u64>> {
    prop_oneof![Just(None), (0u64..20).prop_map(Some)]
}

fn limits() -> impl Strategy<Value = BudgetLimits> {
    (limit(), limit(), limit(), limit()).prop_map(|(s, t, k, c)| BudgetLimits {
        max_steps: s,
        max_tool_calls: t,
        max_tokens: k,
        max_cost_micros: c,
        deadline_ms: None,
        max_retries: None,
        max_ticks: None,
    })
}

fn charge() -> impl Strategy<Value = Usage> {
    (0u64..3, 0u64..4, 0u64..8, 0u64..8, 0u64..6).prop_map(|(s, t, i, o, c)| Usage {
        steps: s,
        tool_calls: t,
        tokens_in: i,
        tokens_out: o,
        cost_micros: c,
        retries: 0,
        ticks: 0,
    })
}

fn within(limits: &BudgetLimits, spent: &Usage) -> bool {
    let ok = |l: Option<u64>, v: u64| l.is_none_or(|l| v <= l);
    ok(limits.max_steps, spent.steps)
        && ok(limits.max_tool_calls, spent.tool_calls)
        && ok(limits.max_tokens, spent.tokens())
        && ok(limits.max_cost_micros, spent.cost_micros)
}

/// The refusal names a dimension that really is exhausted by this charge.
fn refusal_is_justified(
    l: &BudgetLimits,
    spent: &Usage,
    charge: &Usage,
    reason: StopReason,
) -> bool {
    let after = spent.plus(charge);
    let over = |limit: Option<u64>, v: u64| limit.is_some_and(|l| v > l);
    let at = |limit: Option<u64>, v: u64| limit.is_some_and(|l| v >= l);
    match reason {
        StopReason::MaxSteps => charge.steps > 0 && over(l.max_steps, after.steps),
        StopReason::MaxToolCalls => {
            charge.tool_calls > 0 && over(l.max_tool_calls, after.tool_calls)
        }
        StopReason::MaxTokens => {
            (charge.steps > 0 && at(l.max_tokens, spent.tokens()))
                || over(l.max_tokens, after.tokens())
        }
        StopReason::MaxCost => {
            (charge.steps > 0 && at(l.max_cost_micros, spent.cost_micros))
                || over(l.max_cost_micros, after.cost_micros)
        }
        _ => false,
    }
}

proptest! {
    #[test]
    fn check_never_lets_spent_exceed_a_limit(limits in limits(), charges in prop::collection::vec(charge(), 0..60)) {
        let mut spent = Usage::default();
        for c in &charges {
            let before = spent;
            match limits.check(&spent, c) {
                Ok(()) => spent = spent.plus(c),
                Err(reason) => {
                    prop_assert!(refusal_is_justified(&limits, &before, c, reason),
                        "{reason} refused {c:?} at {before:?} under {limits:?}");
                }
            }
            prop_assert!(within(&limits, &spent), "{spent:?} exceeds {limits:?}");
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
    }
}

/// An operation on the budget supervisor.
#[derive(Debug, Clone)]
enum Op {
    Spend(Usage),
    SpendToolCalls(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        charge().prop_map(Op::Spend),
        (0u64..5).prop_map(Op::SpendToolCalls)
    ]
}

/// Runs `ops` against a real supervisor and against the pure model; returns the
/// first divergence.
async fn supervisor_matches_model(limits: BudgetLimits, ops: Vec<Op>) -> Result<(), String> {
    let args = BudgetArgs {
        limits,
        spent: Default::default(),
        run_token: CancellationToken::new(),
        started: tokio::time::Instant::now(),
        parent: None,
        parent_deadline: None,
        tool_calls: Default::default(),
    };
    let (actor, task) = Actor::spawn(None, BudgetSupervisor, args)
        .await
        .map_err(|e| e.to_string())?;
    let mut model = Usage::default();
    for op in ops {
        let before: BudgetSnapshot = ask(&actor, BudgetMsg::Snapshot).await?;
        if before.spent != model {
            return Err(format!("spent {:?}, model {model:?}", before.spent));
        }
        match op {
            Op::Spend(charge) => {
                let reply = ask(&actor, |r| BudgetMsg::Spend(charge, r)).await?;
                match (reply, limits.check(&model, &charge)) {
                    (SpendReply::Granted { before, .. }, Ok(())) => {
                        // What the spend left is read back by the next op's snapshot.
                        if before.spent != model {
                            return Err(format!("granted {charge:?} but before was {before:?}"));
                        }
                        model = model.plus(&charge);
                    }
                    (SpendReply::Refused(got), Err(want)) if got == want => {}
                    (reply, want) => {
                        return Err(format!(
                            "{charge:?} at {model:?}: {reply:?}, model {want:?}"
                        ));
                    }
                }
            }
            Op::SpendToolCalls(n) => {
                let (granted, after) = ask(&actor, |r| BudgetMsg::SpendToolCalls(n, r)).await?;
                let left = limits
                    .max_tool_calls
                    .map_or(n, |m| m.saturating_sub(model.tool_calls));
                if granted != n.min(left) {
                    return Err(format!("{n} tool calls at {model:?}: granted {granted}"));
                }
                model = model.plus(&Usage::tool_calls(granted));
                if after.spent != model {
                    return Err(format!("after {:?}, model {model:?}", after.spent));
                }
            }
        }
        if !within(&limits, &model) {
            return Err(format!("{model:?} exceeds {limits:?}"));
        }
    }
    let last: BudgetSnapshot = ask(&actor, BudgetMsg::Snapshot).await?;
    if last.spent != model {
        return Err(format!("finally spent {:?}, model {model:?}", last.spent));
    }
    actor.stop(None);
    task.await.map_err(|e| e.to_string())?;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn the_supervisor_spends_exactly_what_it_grants(limits in limits(), ops in prop::collection::vec(op(), 0..40)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let result = rt.block_on(supervisor_matches_model(limits, ops));
        prop_assert!(result.is_ok(), "{}", result.err().unwrap_or_default());
    }
}

#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentry_protocol::envelope::ErrorCode;
use agentry_protocol::stop::StopReason;
use proptest::prelude::*;

use super::tests::run;
use super::*;

const REASONS: [StopReason; 12] = [
    StopReason::Done,
    StopReason::VerificationMissing,
    StopReason::MaxSteps,
    StopReason::MaxToolCalls,
    StopReason::MaxTokens,
    StopReason::MaxCost,
    StopReason::MaxTicks,
    StopReason::Deadline,
    StopReason::NoProgress,
    StopReason::UnrecoverableError,
    StopReason::PermissionDenied,
    StopReason::UserAbort,
];

const TOOLS: [&str; 3] = ["fs.read", "fs.write", "proc.run"];

fn facts() -> impl Strategy<Value = RunFacts> {
    (
        0..3usize,
        0..REASONS.len(),
        0..60u64,
        0..5_000u64,
        prop::collection::vec((0..TOOLS.len(), prop::option::of(0..2usize)), 0..6),
    )
        .prop_map(|(task, reason, steps, wall, calls)| {
            let mut facts = run(&format!("t{task}"), REASONS[reason], steps, 1_000);
            facts.wall_ms = wall;
            facts.calls = calls
                .into_iter()
                .map(|(tool, error)| CallFact {
                    tool: TOOLS[tool].to_string(),
                    error: error.map(|e| [ErrorCode::Eperm, ErrorCode::Einval][e]),
                })
                .collect();
            facts
        })
}

fn check_distribution(d: &Distribution) -> Result<(), TestCaseError> {
    prop_assert!(d.p50 <= d.p95, "{d:?}");
    prop_assert!(d.p95 <= d.max, "{d:?}");
    prop_assert!(d.mean <= d.max as f64, "{d:?}");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Every run is counted exactly once across its group's stop reasons, and
    /// p50 ≤ p95 ≤ max everywhere.
    #[test]
    fn every_run_counts_once_across_stop_reasons(runs in prop::collection::vec(facts(), 0..40)) {
        let n = runs.len() as u64;
        let report = aggregate(&Runs { finished: runs, unfinished: 0 }, &StatsOptions {
            by: GroupBy::Task,
            since: None,
            now_ms: 1_000,
        });
        prop_assert_eq!(report.runs, n);
        let mut total = 0;
        for group in &report.groups {
            let split: u64 = group.by_stop_reason.values().map(|f| f.runs).sum();
            prop_assert_eq!(split, group.all.runs);
            let calls: u64 = group.by_stop_reason.values().map(|f| f.tool_calls.calls).sum();
            prop_assert_eq!(calls, group.all.tool_calls.calls);
            let done = group.by_stop_reason.get("done").map_or(0, |f| f.runs);
            prop_assert_eq!(done, group.all.done);
            check_distribution(&group.all.steps)?;
            check_distribution(&group.all.wall_ms)?;
            for figures in group.by_stop_reason.values() {
                prop_assert!(figures.runs > 0);
                check_distribution(&figures.steps)?;
                check_distribution(&figures.wall_ms)?;
            }
            total += group.all.runs;
        }
        prop_assert_eq!(total, n);
    }

    /// Grouped by tool, a group's calls are exactly that tool's calls.
    #[test]
    fn by_tool_counts_each_call_in_its_tools_group(runs in prop::collection::vec(facts(), 0..40)) {
        let calls: usize = runs.iter().map(|r| r.calls.len()).sum();
        let report = aggregate(&Runs { finished: runs, unfinished: 0 }, &StatsOptions {
            by: GroupBy::Tool,
            since: None,
            now_ms: 1_000,
        });
        let counted: u64 = report.groups.iter().map(|g| g.all.tool_calls.calls).sum();
        prop_assert_eq!(counted, calls as u64);
    }
}

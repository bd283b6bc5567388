#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use agentry_protocol::envelope::ErrorCode;
use agentry_protocol::stop::StopReason;

use super::*;

/// A finished run of `task` with `steps` steps, stopped at `finished_at_ms`.
pub(super) fn run(task: &str, reason: StopReason, steps: u64, finished_at_ms: u64) -> RunFacts {
    RunFacts {
        run_id: format!("{task}-{steps}-{finished_at_ms}"),
        task_id: task.to_string(),
        parent_id: None,
        model: "script".to_string(),
        stop_reason: reason,
        steps,
        calls: Vec::new(),
        tokens_in: 0,
        tokens_out: 0,
        tokens_cached: 0,
        cost_micros: 0,
        retries: 0,
        started_at_ms: finished_at_ms.saturating_sub(10 * steps),
        finished_at_ms,
        wall_ms: 10 * steps,
    }
}

fn call(tool: &str, error: Option<ErrorCode>) -> CallFact {
    CallFact {
        tool: tool.to_string(),
        error,
    }
}

fn options(by: GroupBy) -> StatsOptions {
    StatsOptions {
        by,
        since: None,
        now_ms: 1_000_000,
    }
}

#[test]
fn nearest_rank_takes_the_value_at_rank_ceil_p_n() {
    let v: Vec<u64> = (1..=10).collect();
    assert_eq!(nearest_rank(&v, 50), Some(5)); // ceil(5.0) = 5
    assert_eq!(nearest_rank(&v, 95), Some(10)); // ceil(9.5) = 10
    assert_eq!(nearest_rank(&v, 0), Some(1), "rank is at least 1");
    assert_eq!(nearest_rank(&v, 100), Some(10));
    assert_eq!(nearest_rank(&[7], 50), Some(7));
    assert_eq!(nearest_rank(&[1, 2], 50), Some(1)); // ceil(1.0) = 1
    assert_eq!(nearest_rank(&[1, 2, 3], 50), Some(2)); // ceil(1.5) = 2
    let twenty: Vec<u64> = (1..=20).collect();
    assert_eq!(nearest_rank(&twenty, 95), Some(19)); // ceil(19.0) = 19
    assert_eq!(nearest_rank(&[], 50), None);
}

#[test]
fn distribution_has_mean_percentiles_and_max() {
    let d = Distribution::of(vec![4, 1, 3, 2]);
    assert_eq!(d.mean, 2.5);
    assert_eq!((d.p50, d.p95, d.max), (2, 4, 4));
    assert_eq!(Distribution::of(Vec::new()), Distribution::default());
}

#[test]
fn groups_by_task_and_splits_every_figure_by_stop_reason() {
    let mut a = run("sum", StopReason::Done, 3, 100);
    a.calls = vec![call("fs.read", None), call("fs.write", None)];
    a.tokens_in = 100;
    a.cost_micros = 2_000;
    let mut b = run("sum", StopReason::MaxSteps, 1, 200);
    b.calls = vec![call("fs.read", Some(ErrorCode::Eperm))];
    b.retries = 2;
    let c = run("sum", StopReason::Done, 5, 300);
    let other = run("stuck", StopReason::NoProgress, 4, 400);
    let runs = Runs {
        finished: vec![a, b, c, other],
        unfinished: 1,
    };
    let report = aggregate(&runs, &options(GroupBy::Task));
    assert_eq!(report.runs, 4);
    assert_eq!(report.unfinished, 1);
    let keys: Vec<&str> = report.groups.iter().map(|g| g.key.as_str()).collect();
    assert_eq!(keys, ["stuck", "sum"]);
    let sum = &report.groups[1];
    assert_eq!(sum.all.runs, 3);
    assert_eq!(sum.all.done, 2);
    assert!((sum.all.success_rate - 2.0 / 3.0).abs() < 1e-9);
    assert_eq!(sum.all.steps.mean, 3.0);
    assert_eq!((sum.all.steps.p50, sum.all.steps.p95), (3, 5));
    assert_eq!(sum.all.tool_calls.calls, 3);
    assert_eq!(sum.all.tool_calls.errors, 1);
    let read = &sum.all.tool_calls.by_tool["fs.read"];
    assert_eq!((read.calls, read.errors, read.error_rate), (2, 1, 0.5));
    assert_eq!(read.by_code["EPERM"], 1);
    assert_eq!(sum.all.cost.per_run_micros, 2_000.0 / 3.0);
    assert_eq!(sum.all.retries.total, 2);

    let done = &sum.by_stop_reason["done"];
    assert_eq!((done.runs, done.success_rate), (2, 1.0));
    assert_eq!(done.steps.mean, 4.0);
    assert_eq!(done.tool_calls.errors, 0);
    assert_eq!(done.tokens.input_per_run, 50.0);
    assert_eq!(done.cost.per_run, 0.001);
    let max_steps = &sum.by_stop_reason["max_steps"];
    assert_eq!((max_steps.runs, max_steps.success_rate), (1, 0.0));
    assert_eq!(max_steps.tool_calls.error_rate, 1.0);
    assert_eq!(max_steps.retries.per_run, 2.0);
    assert_eq!(sum.by_stop_reason.len(), 2);
}

#[test]
fn groups_by_model_and_by_tool() {
    let mut a = run("t", StopReason::Done, 2, 100);
    a.model = "m1".into();
    a.calls = vec![
        call("fs.read", None),
        call("fs.read", None),
        call("fs.write", Some(ErrorCode::Einval)),
    ];
    let mut b = run("t", StopReason::Deadline, 1, 200);
    b.model = "m2".into();
    b.calls = vec![call("fs.write", None)];
    let mut c = run("u", StopReason::UnrecoverableError, 1, 300);
    c.model = "m1".into();
    let runs = Runs {
        finished: vec![a, b, c],
        unfinished: 0,
    };
    let by_model = aggregate(&runs, &options(GroupBy::Model));
    let keys: Vec<(&str, u64)> = by_model
        .groups
        .iter()
        .map(|g| (g.key.as_str(), g.all.runs))
        .collect();
    assert_eq!(keys, [("m1", 2), ("m2", 1)]);

    let by_tool = aggregate(&runs, &options(GroupBy::Tool));
    let keys: Vec<(&str, u64)> = by_tool
        .groups
        .iter()
        .map(|g| (g.key.as_str(), g.all.runs))
        .collect();
    assert_eq!(keys, [(NO_TOOL, 1), ("fs.read", 1), ("fs.write", 2)]);
    let write = &by_tool.groups[2];
    // Only fs.write's calls count in its group.
    assert_eq!(write.all.tool_calls.calls, 2);
    assert_eq!(write.all.tool_calls.by_tool.len(), 1);
    assert_eq!(write.all.tool_calls.errors, 1);
    assert_eq!(write.by_stop_reason["deadline"].tool_calls.errors, 0);
    assert_eq!(
        write.by_stop_reason["done"].tool_calls.by_tool["fs.write"].by_code["EINVAL"],
        1
    );
    assert_eq!(by_tool.groups[1].all.tool_calls.calls, 2);
}

#[test]
fn since_keeps_runs_that_stopped_within_it() {
    let runs = Runs {
        finished: vec![
            run("t", StopReason::Done, 1, 1_000_000 - 5_000),
            run("t", StopReason::Done, 2, 1_000_000 - 60_000),
            run("t", StopReason::MaxSteps, 3, 1_000_000 - 10_000),
        ],
        unfinished: 0,
    };
    let opts = options(GroupBy::Task).since(Duration::from_secs(10));
    let report = aggregate(&runs, &opts);
    assert_eq!(report.since_ms, Some(990_000));
    assert_eq!((report.runs, report.excluded), (2, 1));
    assert_eq!(
        report.groups[0].all.steps.max, 3,
        "the boundary is inclusive"
    );
    assert_eq!(report.groups[0].by_stop_reason["done"].runs, 1);
    // A since longer than the epoch keeps everything.
    let report = aggregate(&runs, &options(GroupBy::Task).since(Duration::MAX));
    assert_eq!(report.runs, 3);
    // None stopped within 1 ms: no groups at all.
    let report = aggregate(
        &runs,
        &options(GroupBy::Task).since(Duration::from_millis(1)),
    );
    assert_eq!((report.runs, report.groups.len()), (0, 0));
}

#[test]
fn a_failed_result_without_an_error_body_is_einternal() {
    let mut result = agentry_protocol::envelope::ResultEnvelope::success(
        "c1",
        "fs.read",
        serde_json::json!("x"),
        Vec::new(),
    );
    assert_eq!(CallFact::of(&result).error, None);
    result.ok = false;
    assert_eq!(CallFact::of(&result).error, Some(ErrorCode::Einternal));
}

#[test]
fn a_bad_trace_line_names_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    std::fs::write(&path, "\n{\"kind\":\"stop\"}\n").unwrap();
    let err = runs_from_traces(&[&path]).unwrap_err();
    assert!(
        matches!(err, StatsError::TraceLine { line: 2, .. }),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("{}:2: not an agentry trace line", path.display())),
        "{text}"
    );

    let missing = dir.path().join("missing.jsonl");
    let err = runs_from_traces(&[&missing]).unwrap_err();
    assert!(matches!(err, StatsError::TraceRead { .. }), "{err:?}");
    assert!(err.to_string().contains("missing.jsonl"), "{err}");
}

#[test]
fn report_serializes_with_reason_keys() {
    let runs = Runs {
        finished: vec![run("t", StopReason::PermissionDenied, 2, 10)],
        unfinished: 0,
    };
    let value = serde_json::to_value(aggregate(&runs, &options(GroupBy::Task))).unwrap();
    assert_eq!(value["by"], "task");
    assert!(value.get("since_ms").is_none());
    assert_eq!(
        value["groups"][0]["by_stop_reason"]["permission_denied"]["runs"],
        1
    );
    assert_eq!(value["groups"][0]["all"]["steps"]["p95"], 2);
}

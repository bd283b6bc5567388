//! Judging a replay against its recording, step by step: the same results
//! (timings, the working directory's path and the fields a tool marks
//! volatile aside), a call now refused, a different stop, a run that ended
//! early or went on longer.

use std::collections::BTreeMap;

use agentry::StopReason;
use serde::Serialize;
use serde_json::Value;

use super::normalize::{Placeholder, normalize, placeholders};
use super::recorded::{Recorded, RecordedStep, refused_by_approval};

/// What is compared and what is not.
#[derive(Debug, Default)]
pub(crate) struct Rules {
    /// Volatile result fields, by tool name ([`agentry::ToolContract::volatile`]).
    pub(crate) volatile: BTreeMap<String, Vec<String>>,
    /// The last step judged (`--until`, or the step before `--fork-at`);
    /// `None`: every step, and the stop.
    pub(crate) last: Option<u64>,
}

/// How one step compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum StepStatus {
    /// Same results.
    Same,
    /// Different results, or a call refused.
    Drifted,
    /// Recorded, but the replay stopped before it.
    Missing,
    /// Taken by the replay, but the recording stopped before it.
    Extra,
}

/// One difference in one call's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Diff {
    pub(crate) call_id: String,
    pub(crate) tool: String,
    /// Where in the result envelope, e.g. `data.content` (`""`: the whole result).
    pub(crate) path: String,
    /// `null` when the recording has nothing there.
    pub(crate) recorded: Value,
    /// `null` when the replay has nothing there.
    pub(crate) replayed: Value,
}

/// A call the recording ran (or saw fail otherwise) that the replay refused.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Refusal {
    pub(crate) call_id: String,
    pub(crate) tool: String,
    /// `EPERM` (a grant or an approval), `EINVAL` (the schema), `ENOTOOL`.
    pub(crate) code: String,
    pub(crate) message: String,
}

/// One step's verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct StepVerdict {
    pub(crate) step: u64,
    pub(crate) status: StepStatus,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) diffs: Vec<Diff>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) refused: Vec<Refusal>,
}

/// The stops compared.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct StopVerdict {
    pub(crate) recorded: Option<StopReason>,
    pub(crate) replayed: Option<StopReason>,
    /// Whether the stops were judged (not with `--until` or `--fork-at`).
    pub(crate) judged: bool,
    pub(crate) same: bool,
}

/// The whole verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Verdict {
    pub(crate) drifted: bool,
    pub(crate) steps: Vec<StepVerdict>,
    pub(crate) stop: StopVerdict,
}

/// Judges `replayed` against `recorded` under `rules`.
pub(crate) fn judge(recorded: &Recorded, replayed: &Recorded, rules: &Rules) -> Verdict {
    let in_scope = |step: u64| rules.last.is_none_or(|last| step <= last);
    let workdirs = Workdirs {
        recorded: placeholders(recorded),
        replayed: placeholders(replayed),
    };
    let by_step: BTreeMap<u64, &RecordedStep> =
        replayed.steps.iter().map(|s| (s.step, s)).collect();
    let mut steps = Vec::new();
    for rec in recorded.steps.iter().filter(|s| in_scope(s.step)) {
        steps.push(match by_step.get(&rec.step) {
            Some(rep) => step_verdict(rec, rep, rules, &workdirs),
            None => StepVerdict {
                step: rec.step,
                status: StepStatus::Missing,
                diffs: Vec::new(),
                refused: Vec::new(),
            },
        });
    }
    let recorded_last = recorded.steps.last().map_or(0, |s| s.step);
    if rules.last.is_none() {
        // A replay that went on past the recording (its policy had no decision
        // for the step after: the step is in its trace as that failure).
        for rep in replayed.steps.iter().filter(|s| s.step > recorded_last) {
            steps.push(StepVerdict {
                step: rep.step,
                status: StepStatus::Extra,
                diffs: Vec::new(),
                refused: Vec::new(),
            });
        }
    }
    let recorded_stop = recorded.stop.as_ref().map(|s| s.reason);
    let replayed_stop = replayed.stop.as_ref().map(|s| s.reason);
    let judged = rules.last.is_none() && recorded_stop.is_some();
    let stop = StopVerdict {
        recorded: recorded_stop,
        replayed: replayed_stop,
        judged,
        same: recorded_stop == replayed_stop,
    };
    let drifted = steps.iter().any(|s| s.status != StepStatus::Same) || (judged && !stop.same);
    Verdict {
        drifted,
        steps,
        stop,
    }
}

/// What each run's results name that differs by nature: its working
/// directory, its own run id, its children's (in spawn order), each replaced
/// by the same placeholder on both sides.
struct Workdirs {
    recorded: Vec<Placeholder>,
    replayed: Vec<Placeholder>,
}

fn step_verdict(
    rec: &RecordedStep,
    rep: &RecordedStep,
    rules: &Rules,
    workdirs: &Workdirs,
) -> StepVerdict {
    let mut diffs = Vec::new();
    let mut refused = Vec::new();
    for i in 0..rec.results.len().max(rep.results.len()) {
        let (a, b) = (rec.results.get(i), rep.results.get(i));
        let call_id = field(a.or(b), "tool_call_id");
        let tool = field(a.or(b), "tool");
        if let Some(r) = b.and_then(|b| refusal(a, b)) {
            refused.push(r);
            continue;
        }
        // Refused for want of approval then and now: the replay's denial
        // words it differently from nobody answering in time.
        if a.zip(b)
            .is_some_and(|(a, b)| refused_by_approval(a) && refused_by_approval(b))
        {
            continue;
        }
        let volatile = rules.volatile.get(&tool).map_or(&[][..], Vec::as_slice);
        let a = a.map(|v| normalize(v, volatile, &workdirs.recorded));
        let b = b.map(|v| normalize(v, volatile, &workdirs.replayed));
        let mut found = Vec::new();
        diff_values("", a.as_ref(), b.as_ref(), &mut found);
        diffs.extend(found.into_iter().map(|leaf| Diff {
            call_id: call_id.clone(),
            tool: tool.clone(),
            path: leaf.path,
            recorded: leaf.recorded,
            replayed: leaf.replayed,
        }));
    }
    let status = if diffs.is_empty() && refused.is_empty() {
        StepStatus::Same
    } else {
        StepStatus::Drifted
    };
    StepVerdict {
        step: rec.step,
        status,
        diffs,
        refused,
    }
}

fn field(v: Option<&Value>, name: &str) -> String {
    v.and_then(|v| v.get(name))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Error codes of a call refused before it ran: a grant or an approval, the
/// schema, an unknown tool.
const REFUSALS: [&str; 3] = ["EPERM", "EINVAL", "ENOTOOL"];

/// The replay refused the call where the recording did not (it ran it, or
/// it failed otherwise).
fn refusal(recorded: Option<&Value>, replayed: &Value) -> Option<Refusal> {
    let code = replayed.pointer("/error/code").and_then(Value::as_str)?;
    if replayed.get("ok") == Some(&Value::Bool(true)) || !REFUSALS.contains(&code) {
        return None;
    }
    let before = recorded.and_then(|r| r.pointer("/error/code").and_then(Value::as_str));
    if before == Some(code) {
        return None;
    }
    Some(Refusal {
        call_id: field(Some(replayed), "tool_call_id"),
        tool: field(Some(replayed), "tool"),
        code: code.to_string(),
        message: replayed
            .pointer("/error/message")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
    })
}

/// A leaf where two values differ, `null` standing for absent.
struct LeafDiff {
    path: String,
    recorded: Value,
    replayed: Value,
}

/// Every leaf where `a` (recorded) and `b` (replayed) differ.
fn diff_values(path: &str, a: Option<&Value>, b: Option<&Value>, out: &mut Vec<LeafDiff>) {
    match (a, b) {
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                diff_values(&join(path, k), x.get(k), y.get(k), out);
            }
        }
        (Some(Value::Array(x)), Some(Value::Array(y))) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                diff_values(&format!("{path}[{i}]"), Some(p), Some(q), out);
            }
        }
        (a, b) if a != b => out.push(LeafDiff {
            path: path.to_string(),
            recorded: a.cloned().unwrap_or(Value::Null),
            replayed: b.cloned().unwrap_or(Value::Null),
        }),
        (_, _) => {}
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use agentry::protocol::decision::{Decision, PolicyOutput};
    use agentry::protocol::trace::TraceOrigin;
    use serde_json::json;

    use super::*;
    use crate::replay::recorded::RecordedStop;

    fn envelope(id: &str, tool: &str, data: Value, at: u64, latency: u64) -> Value {
        json!({"tool_call_id": id, "tool": tool, "ok": true, "data": data,
               "cost": {"latency_ms": latency, "money_micros": 0, "tokens": 0},
               "observed_at": at, "attempt": 1})
    }

    fn run(workdir: &str, steps: Vec<Vec<Value>>, stop: StopReason) -> Recorded {
        let n = steps.len() as u64;
        Recorded {
            run_id: format!("run-{workdir}"),
            steps: steps
                .into_iter()
                .enumerate()
                .map(|(i, results)| RecordedStep {
                    step: i as u64 + 1,
                    output: PolicyOutput::new(Decision::Final { answer: "x".into() }, "m"),
                    results,
                })
                .collect(),
            stop: Some(RecordedStop {
                reason: stop,
                detail: String::new(),
                steps: n,
                answer: None,
            }),
            origin: Some(TraceOrigin {
                workdir: Some(workdir.into()),
                ..TraceOrigin::default()
            }),
            ..Recorded::default()
        }
    }

    /// Timings, the working directory's path and volatile fields (a name at
    /// any depth, a dotted path from the root) are not drift.
    #[test]
    fn timings_workdirs_and_volatile_fields_are_ignored() {
        let a = envelope(
            "c1",
            "clock",
            json!({"out": "/w/a/x", "at": 1, "meta": {"pid": 7, "at": 2}, "n": 1}),
            10,
            5,
        );
        let b = envelope(
            "c1",
            "clock",
            json!({"out": "/w/b/x", "at": 9, "meta": {"pid": 8, "at": 3}, "n": 1}),
            99,
            50,
        );
        let rules = Rules {
            volatile: BTreeMap::from([("clock".to_string(), vec!["at".into(), "meta.pid".into()])]),
            last: None,
        };
        let verdict = judge(
            &run("/w/a", vec![vec![a.clone()]], StopReason::Done),
            &run("/w/b", vec![vec![b.clone()]], StopReason::Done),
            &rules,
        );
        assert!(!verdict.drifted, "{verdict:?}");
        assert_eq!(verdict.steps[0].status, StepStatus::Same);

        // Without the volatile list, the same results drift at those paths.
        let verdict = judge(
            &run("/w/a", vec![vec![a]], StopReason::Done),
            &run("/w/b", vec![vec![b]], StopReason::Done),
            &Rules::default(),
        );
        assert!(verdict.drifted);
        let paths: Vec<&str> = verdict.steps[0]
            .diffs
            .iter()
            .map(|d| d.path.as_str())
            .collect();
        assert_eq!(paths, ["data.at", "data.meta.at", "data.meta.pid"]);
        assert_eq!(verdict.steps[0].diffs[0].recorded, json!(1));
        assert_eq!(verdict.steps[0].diffs[0].replayed, json!(9));
    }

    /// A command tool's stdout that is JSON is compared as JSON: volatile
    /// names reach into it, and a difference is named inside it.
    #[test]
    fn json_stdout_is_compared_as_json() {
        let out = |at: u64, n: u64| json!({"stdout": format!("{{\"at\": {at}, \"n\": {n}}}"), "exit_code": 0});
        let rules = Rules {
            volatile: BTreeMap::from([("clock".to_string(), vec!["at".into()])]),
            last: None,
        };
        let verdict = judge(
            &run(
                "/a",
                vec![vec![envelope("c", "clock", out(1, 1), 1, 1)]],
                StopReason::Done,
            ),
            &run(
                "/b",
                vec![vec![envelope("c", "clock", out(2, 1), 1, 1)]],
                StopReason::Done,
            ),
            &rules,
        );
        assert!(!verdict.drifted, "{verdict:?}");
        let verdict = judge(
            &run(
                "/a",
                vec![vec![envelope("c", "clock", out(1, 1), 1, 1)]],
                StopReason::Done,
            ),
            &run(
                "/b",
                vec![vec![envelope("c", "clock", out(2, 5), 1, 1)]],
                StopReason::Done,
            ),
            &rules,
        );
        let d = &verdict.steps[0].diffs;
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].path, "data.stdout.n");
    }

    /// Run ids (its own, its children's by spawn order) are not drift.
    #[test]
    fn run_ids_are_ignored_by_spawn_order() {
        let spawn = |id: &str| {
            envelope(
                "s",
                "agent.spawn",
                json!({"child_id": id, "note": format!("{id} started")}),
                1,
                1,
            )
        };
        let mut a = run(
            "/a",
            vec![vec![spawn("c-1")], vec![spawn("c-2")]],
            StopReason::Done,
        );
        let mut b = run(
            "/b",
            vec![vec![spawn("x-1")], vec![spawn("x-2")]],
            StopReason::Done,
        );
        a.children = vec!["c-1".into(), "c-2".into()];
        b.children = vec!["x-1".into(), "x-2".into()];
        assert!(!judge(&a, &b, &Rules::default()).drifted);
        // Spawned in another order: drift.
        b.children = vec!["x-2".into(), "x-1".into()];
        assert!(judge(&a, &b, &Rules::default()).drifted);
    }

    #[test]
    fn a_changed_result_names_the_step_and_the_path() {
        let same = envelope("r", "fs.read", json!({"content": "1"}), 1, 1);
        let a = envelope(
            "w",
            "fs.read",
            json!({"content": "2 3", "lines": [1, 2]}),
            1,
            1,
        );
        let b = envelope(
            "w",
            "fs.read",
            json!({"content": "2 4", "lines": [1, 2]}),
            1,
            1,
        );
        let verdict = judge(
            &run("/a", vec![vec![same.clone()], vec![a]], StopReason::Done),
            &run("/b", vec![vec![same], vec![b]], StopReason::Done),
            &Rules::default(),
        );
        assert!(verdict.drifted);
        assert_eq!(verdict.steps[0].status, StepStatus::Same);
        assert_eq!(verdict.steps[1].status, StepStatus::Drifted);
        let d = &verdict.steps[1].diffs;
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(
            (d[0].call_id.as_str(), d[0].path.as_str()),
            ("w", "data.content")
        );
        assert_eq!(
            (d[0].recorded.clone(), d[0].replayed.clone()),
            (json!("2 3"), json!("2 4"))
        );
    }

    #[test]
    fn refusals_stops_and_lengths_drift() {
        let ran = envelope("w", "fs.write", json!({"bytes": 2}), 1, 1);
        let refused = json!({"tool_call_id": "w", "tool": "fs.write", "ok": false,
            "error": {"code": "EPERM", "message": "not granted", "retryable": false},
            "cost": {"latency_ms": 0}, "observed_at": 1});
        let recorded = run(
            "/a",
            vec![vec![ran.clone()], vec![ran.clone()]],
            StopReason::Done,
        );
        let replayed = run("/b", vec![vec![refused]], StopReason::PermissionDenied);
        let verdict = judge(&recorded, &replayed, &Rules::default());
        assert!(verdict.drifted);
        assert_eq!(verdict.steps[0].refused[0].code, "EPERM");
        assert_eq!(verdict.steps[1].status, StepStatus::Missing);
        assert!(verdict.stop.judged && !verdict.stop.same);

        // Up to step 1 only, the stop is not judged; a longer replay is.
        let until = Rules {
            last: Some(1),
            ..Rules::default()
        };
        let same = run(
            "/b",
            vec![vec![ran.clone()], vec![ran.clone()], vec![]],
            StopReason::UnrecoverableError,
        );
        let verdict = judge(&recorded, &same, &until);
        assert!(!verdict.drifted, "{verdict:?}");
        assert_eq!(verdict.steps.len(), 1);
        let verdict = judge(&recorded, &same, &Rules::default());
        assert_eq!(verdict.steps[2].status, StepStatus::Extra);
        assert!(verdict.drifted);
    }
}

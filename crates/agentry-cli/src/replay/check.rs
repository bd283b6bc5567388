//! Whether a recording agrees with itself before it is replayed: each step's
//! results answer its decision's calls one for one, in order, tool for tool;
//! a recorded human approval agrees with the result its step shows. A trace
//! is only text: these are the contradictions an edit leaves that the
//! recording itself can show. A call's arguments are not repeated in its
//! result, so an edited argument is not one of them: the listing
//! (`preview.rs`) is what shows it.

use agentry::protocol::decision::Decision;
use serde_json::Value;

use super::error::Contradiction;
use super::recorded::{Recorded, RecordedStep, refused_by_approval};

/// Every contradiction in `recorded`, in step order.
pub(crate) fn contradictions(recorded: &Recorded) -> Vec<Contradiction> {
    let mut found = Vec::new();
    for step in &recorded.steps {
        results_answer_the_decision(step, &mut found);
    }
    approvals_agree_with_results(recorded, &mut found);
    found.sort_by_key(|c| c.step);
    found
}

/// One result per call of a `tool_calls` decision, in request order, under
/// the call's id and tool; none for a final answer or a failed turn.
fn results_answer_the_decision(step: &RecordedStep, found: &mut Vec<Contradiction>) {
    let mut add = |call_id: Option<&str>, problem: String| {
        found.push(Contradiction {
            step: step.step,
            call_id: call_id.map(str::to_string),
            problem,
        });
    };
    let calls = match &step.output.decision {
        Decision::ToolCalls { calls } => calls.as_slice(),
        Decision::Final { .. } | Decision::Failed { .. } => &[],
    };
    if calls.len() != step.results.len() {
        add(
            None,
            format!(
                "the decision makes {} calls but the step records {} results",
                calls.len(),
                step.results.len()
            ),
        );
    }
    for (call, result) in calls.iter().zip(&step.results) {
        let answers = text(result, "tool_call_id");
        if answers != call.id {
            add(
                Some(&call.id),
                format!("its result answers call {answers:?} instead"),
            );
        } else if text(result, "tool") != call.name {
            add(
                Some(&call.id),
                format!(
                    "the decision calls {:?} but its result is of tool {:?}",
                    call.name,
                    text(result, "tool")
                ),
            );
        }
    }
}

/// A human's recorded approval of a call its step shows refused by approval,
/// or a recorded denial of a call its step shows ran.
fn approvals_agree_with_results(recorded: &Recorded, found: &mut Vec<Contradiction>) {
    for (call_id, human) in &recorded.approvals {
        let Some((step, result)) = recorded.steps.iter().find_map(|s| {
            s.results
                .iter()
                .find(|r| text(r, "tool_call_id") == call_id)
                .map(|r| (s.step, r))
        }) else {
            continue;
        };
        let problem = if human.approved && refused_by_approval(result) {
            "an approval is recorded for it, but its result shows it refused for want of one"
        } else if !human.approved && result.get("ok") == Some(&Value::Bool(true)) {
            "a denial is recorded for it, but its result shows it ran"
        } else {
            continue;
        };
        found.push(Contradiction {
            step,
            call_id: Some(call_id.clone()),
            problem: problem.to_string(),
        });
    }
}

fn text<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get(field).and_then(Value::as_str).unwrap_or_default()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use agentry::protocol::decision::PolicyOutput;
    use agentry::protocol::tool::ToolCall;
    use serde_json::json;

    use super::*;
    use crate::replay::recorded::RecordedApproval;

    fn step(n: u64, calls: &[(&str, &str)], results: Vec<Value>) -> RecordedStep {
        let calls = calls
            .iter()
            .map(|(id, tool)| ToolCall::new(*id, *tool, json!({})))
            .collect();
        RecordedStep {
            step: n,
            output: PolicyOutput::new(Decision::ToolCalls { calls }, "m"),
            results,
        }
    }

    fn ok(id: &str, tool: &str) -> Value {
        json!({"tool_call_id": id, "tool": tool, "ok": true, "data": {}})
    }

    fn refused(id: &str, tool: &str) -> Value {
        json!({"tool_call_id": id, "tool": tool, "ok": false,
               "error": {"code": "EPERM", "message": "no human approved this call within 5 ms"}})
    }

    fn named(found: &[Contradiction]) -> Vec<String> {
        found.iter().map(ToString::to_string).collect()
    }

    /// Results that line up with their decisions, and approvals that agree
    /// with them, are no contradiction.
    #[test]
    fn a_consistent_recording_has_none() {
        let mut recorded = Recorded {
            steps: vec![
                step(
                    1,
                    &[("a", "fs.read"), ("b", "proc.run")],
                    vec![ok("a", "fs.read"), ok("b", "proc.run")],
                ),
                step(2, &[("c", "proc.run")], vec![refused("c", "proc.run")]),
            ],
            ..Recorded::default()
        };
        let answer = |approved| RecordedApproval {
            approved,
            reason: None,
        };
        recorded.approvals.insert("b".into(), answer(true));
        recorded.approvals.insert("c".into(), answer(false));
        assert_eq!(named(&contradictions(&recorded)), Vec::<String>::new());
    }

    /// A missing result, a result under another id or of another tool, an
    /// approval its result contradicts: each named by step and call.
    #[test]
    fn each_contradiction_is_named_by_step_and_call() {
        let mut recorded = Recorded {
            steps: vec![
                step(
                    1,
                    &[("a", "fs.read"), ("b", "fs.read")],
                    vec![ok("a", "fs.read")],
                ),
                step(2, &[("c", "proc.run")], vec![ok("x", "proc.run")]),
                step(3, &[("d", "proc.run")], vec![ok("d", "fs.write")]),
                step(4, &[("e", "proc.run")], vec![refused("e", "proc.run")]),
                step(5, &[("f", "proc.run")], vec![ok("f", "proc.run")]),
            ],
            ..Recorded::default()
        };
        let answer = |approved| RecordedApproval {
            approved,
            reason: None,
        };
        recorded.approvals.insert("e".into(), answer(true));
        recorded.approvals.insert("f".into(), answer(false));
        assert_eq!(
            named(&contradictions(&recorded)),
            [
                "step 1: the decision makes 2 calls but the step records 1 results",
                "step 2, call \"c\": its result answers call \"x\" instead",
                "step 3, call \"d\": the decision calls \"proc.run\" but its result is of tool \"fs.write\"",
                "step 4, call \"e\": an approval is recorded for it, but its result shows it refused for want of one",
                "step 5, call \"f\": a denial is recorded for it, but its result shows it ran",
            ]
        );
    }
}

//! Command tools a task declares in task.toml (`[[tools.command]]`): loaded from
//! a task directory, registered by `TaskSpec::runtime`, granted only when the
//! task's `[tools] grant` names them, run as real processes with the host's ids.

use std::path::Path;

use agentry::{ErrorCode, ResultEnvelope, StopReason, TaskSpec};
use agentry_test_support::{ScriptBuilder, TestError, run_with_events, tool_results};
use serde_json::json;

/// Appends `line` to ledger.txt and records the host's ids in ids.txt.
/// `reversible`, so the call runs without waiting for a human approval.
const APPEND_TOOL: &str = r#"
[[tools.command]]
name = "ledger.append"
description = "Append a line to ledger.txt"
argv = ["sh", "-c", "printf '%s\n' \"$1\" >> ledger.txt && printf '%s %s %s\n' \"$AGENTRY_RUN_ID\" \"$AGENTRY_CALL_ID\" \"$AGENTRY_OPERATION_ID\" > ids.txt", "sh", "{line}"]
input_schema = { type = "object", properties = { line = { type = "string" } }, required = ["line"] }
effect = "reversible"
idempotency = "none"
timeout = "10s"
"#;

/// A task directory with `grant` and the append tool, and a workspace holding
/// ledger.txt.
fn task_dir(root: &Path, grant: &str) -> Result<std::path::PathBuf, TestError> {
    let dir = root.join("ledger");
    std::fs::create_dir_all(dir.join("workspace"))?;
    std::fs::write(dir.join("workspace/ledger.txt"), "opening\n")?;
    std::fs::write(
        dir.join("task.toml"),
        format!(
            "goal = \"record the payment\"\n\
             [tools]\ngrant = {grant}\n\
             {APPEND_TOOL}\n\
             [[accept]]\nfile = \"ledger.txt\"\ncontains = \"paid 10\"\n"
        ),
    )?;
    Ok(dir)
}

fn only_result<'a>(
    results: &'a [(u64, ResultEnvelope)],
    id: &str,
) -> Result<&'a ResultEnvelope, TestError> {
    let found: Vec<&ResultEnvelope> = results
        .iter()
        .map(|(_, r)| r)
        .filter(|r| r.tool_call_id == id)
        .collect();
    match found.as_slice() {
        [one] => Ok(one),
        other => Err(format!("{} results for call {id}", other.len()).into()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_declared_tool_runs_and_sees_the_host_ids() -> Result<(), TestError> {
    let tmp = tempfile::tempdir()?;
    let task = TaskSpec::load(&task_dir(tmp.path(), r#"["fs.*", "ledger.append"]"#)?)?;
    let workdir = task.prepare_workdir(Some(&tmp.path().join("run")))?;
    let runtime = task.runtime()?;
    assert!(runtime.registry().get("ledger.append").is_some());
    let policy = ScriptBuilder::new()
        .call("pay", "ledger.append", json!({"line": "paid 10"}))
        .finish("recorded")
        .policy();

    let (outcome, events) = run_with_events(&runtime, task.run_config(workdir), policy).await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let results = tool_results(&events);
    let pay = only_result(&results, "pay")?;
    assert!(pay.ok, "{pay:?}");
    let data = pay.data.as_ref().ok_or("no data")?;
    assert_eq!(data["exit_code"], json!(0), "{data}");
    assert_eq!(
        std::fs::read_to_string(outcome.workdir.join("ledger.txt"))?,
        "opening\npaid 10\n"
    );
    assert!(
        outcome.checks.iter().all(|c| c.passed),
        "{:?}",
        outcome.checks
    );
    // The child saw the run id, the model's call id and a non-empty operation id.
    let ids = std::fs::read_to_string(outcome.workdir.join("ids.txt"))?;
    let ids: Vec<&str> = ids.split_whitespace().collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    assert_eq!(ids[0], outcome.run_id);
    assert_eq!(ids[1], "pay");
    assert!(!ids[2].is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ungranted_declared_tool_is_eperm_and_does_not_run() -> Result<(), TestError> {
    let tmp = tempfile::tempdir()?;
    let task = TaskSpec::load(&task_dir(tmp.path(), r#"["fs.*"]"#)?)?;
    let workdir = task.prepare_workdir(Some(&tmp.path().join("run")))?;
    let runtime = task.runtime()?;
    let policy = ScriptBuilder::new()
        .call("pay", "ledger.append", json!({"line": "paid 10"}))
        .finish("tried")
        .policy();

    let (outcome, events) = run_with_events(&runtime, task.run_config(workdir), policy).await?;

    let results = tool_results(&events);
    let pay = only_result(&results, "pay")?;
    assert!(!pay.ok);
    assert_eq!(pay.error_code(), Some(ErrorCode::Eperm), "{pay:?}");
    assert_eq!(
        std::fs::read_to_string(outcome.workdir.join("ledger.txt"))?,
        "opening\n"
    );
    assert!(!outcome.workdir.join("ids.txt").exists());
    // The acceptance check sees the ledger unchanged.
    assert_eq!(outcome.stop_reason, StopReason::VerificationMissing);
    Ok(())
}

#[test]
fn a_declared_tool_named_like_a_builtin_is_refused_naming_both() -> Result<(), TestError> {
    let tmp = tempfile::tempdir()?;
    std::fs::write(
        tmp.path().join("task.toml"),
        "goal = \"g\"\n[[tools.command]]\nname = \"fs_write\"\ndescription = \"d\"\nargv = [\"true\"]\n",
    )?;
    let err = TaskSpec::load(tmp.path())
        .err()
        .ok_or("a colliding name was accepted")?
        .to_string();
    assert!(
        err.contains("task.toml: tools.command[0].name:")
            && err.contains("\"fs_write\"")
            && err.contains("\"fs.write\""),
        "{err}"
    );
    Ok(())
}

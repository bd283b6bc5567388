//! Path escapes are refused `EPERM` through the real file tools, in a run.

use agentry::{ErrorCode, Runtime, StopReason};
use agentry_test_support::{
    ScriptBuilder, TestError, TestTask, call, run_with_events, tool_results,
};
use serde_json::json;

const SECRET: &str = "top-secret-outside-the-workdir";

#[cfg(unix)]
#[tokio::test]
async fn escapes_by_dotdot_absolute_path_and_symlink_are_eperm() -> Result<(), TestError> {
    // Every escape is tried: the run must not stop at the third denial.
    let task = TestTask::new("try to escape", &[("inside.txt", "fine")])?
        .grant(&["fs.*"])
        .max_denied(0)
        .trace();
    let secret = task.outside().join("secret.txt");
    std::fs::write(&secret, SECRET)?;
    std::os::unix::fs::symlink(&secret, task.workdir().join("link.txt"))?;
    std::os::unix::fs::symlink(task.outside(), task.workdir().join("out"))?;
    let absolute = secret.to_string_lossy().to_string();

    let policy = ScriptBuilder::new()
        .calls(vec![
            call(
                "dotdot",
                "fs.read",
                json!({"path": "../outside/secret.txt"}),
            ),
            call("absolute", "fs.read", json!({"path": absolute})),
            call("symlink", "fs.read", json!({"path": "link.txt"})),
            call("list-out", "fs.list", json!({"path": "out"})),
            call("inside", "fs.read", json!({"path": "inside.txt"})),
        ])
        .calls(vec![
            call(
                "write-dotdot",
                "fs.write",
                json!({"path": "../escape.txt", "content": "x"}),
            ),
            call(
                "write-symdir",
                "fs.write",
                json!({"path": "out/evil.txt", "content": "x"}),
            ),
            call(
                "write-symfile",
                "fs.write",
                json!({"path": "link.txt", "content": "x"}),
            ),
        ])
        .finish("could not escape")
        .policy();

    let (outcome, events) =
        run_with_events(&Runtime::with_builtins()?, task.config(), policy).await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let codes: Vec<(String, Option<ErrorCode>)> = tool_results(&events)
        .iter()
        .filter(|(step, _)| *step <= 2)
        .map(|(_, r)| (r.tool_call_id.clone(), r.error_code()))
        .collect();
    let eperm = Some(ErrorCode::Eperm);
    assert_eq!(
        codes,
        vec![
            ("dotdot".to_string(), eperm),
            ("absolute".to_string(), eperm),
            ("symlink".to_string(), eperm),
            ("list-out".to_string(), eperm),
            ("inside".to_string(), None),
            ("write-dotdot".to_string(), eperm),
            ("write-symdir".to_string(), eperm),
            ("write-symfile".to_string(), eperm),
        ]
    );
    // Nothing was written outside, and the secret never reached the model or the trace.
    assert!(!task.root().join("escape.txt").exists());
    assert!(!task.outside().join("evil.txt").exists());
    assert_eq!(std::fs::read_to_string(&secret)?, SECRET);
    let trace = std::fs::read_to_string(task.trace_path())?;
    assert!(!trace.contains(SECRET));
    for event in &events {
        assert!(!serde_json::to_string(event)?.contains(SECRET));
    }
    Ok(())
}

//! An MCP server whose tools change during a run, through the runtime as the
//! CLI builds it (`TaskSpec::runtime_with`: the task's registry kept in step
//! with the servers' tools). The server is agentry-mcp's test server (a real
//! rmcp server on stdio): its `retool` changes the tools it lists and sends
//! `tools/list_changed`.

use std::time::Duration;

use agentry::protocol::ErrorCode;
use agentry::runtime::PolicyContext;
use agentry::{Policy, PolicyOutput, StopReason, TaskSpec, async_trait};
use agentry_test_support::{
    ContextLog, Recording, ScriptBuilder, TestError, collect_until_stopped, tool_results,
};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::{task_dir, test_server};

/// Before deciding step `step`, waits (bounded) for the server's tools to
/// have changed: the change a tool call of the step before caused.
struct HoldUntilChanged<P> {
    inner: P,
    step: u64,
    changes: watch::Receiver<u64>,
}

#[async_trait]
impl<P: Policy> Policy for HoldUntilChanged<P> {
    fn name(&self) -> String {
        self.inner.name()
    }

    async fn decide(&mut self, ctx: PolicyContext<'_>) -> PolicyOutput {
        if ctx.step == self.step {
            // A timeout is a failure the results show (the calls below fail).
            let _ = tokio::time::timeout(Duration::from_secs(20), self.changes.changed()).await;
        }
        self.inner.decide(ctx).await
    }
}

fn shown(log: &ContextLog, step: u64) -> Result<Vec<String>, TestError> {
    let seen = log
        .step(step)
        .ok_or_else(|| format!("step {step} was not decided"))?;
    Ok(seen.tools.iter().map(|t| t.name.clone()).collect())
}

fn result<'a>(
    results: &'a [(u64, agentry::ResultEnvelope)],
    id: &str,
) -> Result<&'a agentry::ResultEnvelope, TestError> {
    results
        .iter()
        .map(|(_, r)| r)
        .find(|r| r.tool_call_id == id)
        .ok_or_else(|| format!("no result for {id}").into())
}

/// Step 1's call makes the server drop `undoable` and add `fresh` and
/// `secret`. The next call of `undoable` is an `ENOTOOL` naming it; `fresh`
/// (granted) is shown to the model from then on and answers; `secret` (not
/// granted) is never shown and its call is refused `EPERM`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_tool_list_reaches_the_next_steps_through_the_grants() -> Result<(), TestError> {
    let tmp = tempfile::tempdir()?;
    let toml = format!(
        "goal = \"use the server\"\n[budget]\nmax_steps = 10\n[tools]\n\
         grant = [\"srv.read\", \"srv.undoable\", \"srv.retool\", \"srv.fresh\"]\n\
         [[tools.mcp]]\nname = \"srv\"\ncommand = [{:?}]\n",
        test_server()?.display().to_string()
    );
    let task = TaskSpec::load(&task_dir(tmp.path(), &toml)?)?;
    let workdir = task.prepare_workdir(Some(&tmp.path().join("run")))?;
    let mcp = super::start_mcp(&task, &workdir).await?;
    let runtime = task.runtime_with(&mcp)?;
    let changes = mcp.iter().next().ok_or("no server")?.tools_changed();
    let script = ScriptBuilder::new()
        .call(
            "retool",
            "srv.retool",
            json!({"remove": ["undoable"], "add": ["fresh", "secret"]}),
        )
        .call("gone", "srv.undoable", json!({"text": "x"}))
        .call("new", "srv.fresh", json!({"text": "hi"}))
        .call("hidden", "srv.secret", json!({"text": "no"}))
        .finish("adapted")
        .policy();
    let (policy, log) = Recording::new(HoldUntilChanged {
        inner: script,
        step: 2,
        changes,
    });
    let handle = runtime.start(task.run_config(workdir), policy).await?;
    let events = collect_until_stopped(handle.subscribe()).await?;
    let outcome = handle.wait().await?;
    mcp.shutdown().await;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let first = shown(&log, 1)?;
    assert!(first.contains(&"srv.undoable".to_string()), "{first:?}");
    assert!(!first.contains(&"srv.fresh".to_string()), "{first:?}");
    let later = shown(&log, 3)?;
    assert!(later.contains(&"srv.fresh".to_string()), "{later:?}");
    for absent in ["srv.undoable", "srv.secret"] {
        assert!(!later.contains(&absent.to_string()), "{absent}: {later:?}");
    }

    let results = tool_results(&events);
    let gone = result(&results, "gone")?;
    let error = gone.error.as_ref().ok_or("srv.undoable answered")?;
    assert_eq!(error.code, ErrorCode::Enotool, "{gone:?}");
    assert!(error.message.contains("srv.undoable"), "{error:?}");
    let new = result(&results, "new")?;
    assert!(new.ok, "{new:?}");
    assert_eq!(new.data, Some(Value::from("fresh: hi")));
    let hidden = result(&results, "hidden")?;
    let refused = hidden.error.as_ref().ok_or("srv.secret answered")?;
    assert_eq!(refused.code, ErrorCode::Eperm, "{hidden:?}");
    Ok(())
}

/// The server is killed and the one started in its place lists `read` with
/// `text` required: from the next step the model is shown the new schema
/// and a call without `text` is refused by it (`EINVAL` naming the field).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_servers_new_schema_checks_the_next_calls() -> Result<(), TestError> {
    let tmp = tempfile::tempdir()?;
    let workdir = tmp.path().join("run");
    let marker = workdir.join("new-schema");
    let toml = format!(
        "goal = \"use the server\"\n[budget]\nmax_steps = 10\n[tools]\n\
         grant = [\"srv.read\", \"server.kill\"]\n\
         [[tools.command]]\nname = \"server.kill\"\ndescription = \"d\"\neffect = \"reversible\"\n\
         argv = [\"sh\", \"-c\", \"touch new-schema; kill -9 -$(cat server.pid)\"]\n\
         sandbox = {{ mode = \"off\" }}\n\
         [[tools.mcp]]\nname = \"srv\"\ncommand = [{:?}]\nenv = {{ TEST_SCHEMA_FILE = {:?} }}\n",
        test_server()?.display().to_string(),
        marker.display().to_string()
    );
    let task = TaskSpec::load(&task_dir(tmp.path(), &toml)?)?;
    let workdir = task.prepare_workdir(Some(&workdir))?;
    let mcp = super::start_mcp(&task, &workdir).await?;
    let pid = mcp.iter().find_map(|s| s.pid()).ok_or("no server pid")?;
    std::fs::write(workdir.join("server.pid"), pid.to_string())?;
    let runtime = task.runtime_with(&mcp)?;
    let script = ScriptBuilder::new()
        .call("before", "srv.read", json!({}))
        .call("kill", "server.kill", json!({}))
        .call("restart", "srv.read", json!({"text": "after"}))
        .call("checked", "srv.read", json!({}))
        .finish("checked")
        .policy();
    let (policy, log) = Recording::new(script);
    let handle = runtime.start(task.run_config(workdir), policy).await?;
    let events = collect_until_stopped(handle.subscribe()).await?;
    let outcome = handle.wait().await?;
    mcp.shutdown().await;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let schema = |step: u64| -> Result<Value, TestError> {
        let seen = log.step(step).ok_or("not decided")?;
        let read = seen
            .tools
            .iter()
            .find(|t| t.name == "srv.read")
            .ok_or("no srv.read")?;
        Ok(read.input_schema.clone())
    };
    assert_eq!(schema(1)?.get("required"), None);
    assert_eq!(schema(4)?["required"], json!(["text"]));
    let results = tool_results(&events);
    for id in ["before", "kill", "restart"] {
        assert!(
            result(&results, id)?.ok,
            "{id}: {:?}",
            result(&results, id)?
        );
    }
    let checked = result(&results, "checked")?;
    let error = checked
        .error
        .as_ref()
        .ok_or("a call without text went through")?;
    assert_eq!(error.code, ErrorCode::Einval, "{checked:?}");
    assert!(error.message.contains("text"), "{error:?}");
    Ok(())
}

//! A durable run that survives its process being killed: the parent process
//! starts this same binary as a child (`--child`), which runs an agent on a
//! SQLite store; the parent SIGKILLs it mid-run, then opens a runtime on the same
//! store as a restarted service would, lists the unfinished run, resumes it, and
//! settles the interrupted call if the run parks on one. Every line of the
//! journal ends up in the file exactly once.
//!
//! `cargo run --example durable`

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agentry::protocol::event::RunEvent;
use agentry::{
    Durability, Effect, Grants, RunConfig, Runtime, Script, ScriptError, Settlement, SqliteStore,
    StopReason, Tool, ToolContext, ToolContract, ToolError, ToolOutput, ToolRegistry, async_trait,
};
use serde_json::{Value, json};

/// An irreversible side effect: appends a line to journal.txt (slowly, so the
/// kill has something to interrupt). Running it twice would write the line twice.
struct Journal;

#[async_trait]
impl Tool for Journal {
    fn contract(&self) -> ToolContract {
        ToolContract::new(
            "journal.append",
            "Append a line to journal.txt.",
            json!({
                "type": "object",
                "properties": {"line": {"type": "string"}},
                "required": ["line"],
                "additionalProperties": false
            }),
        )
        .effect(Effect::IrreversibleExternal)
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        use std::io::Write;
        tokio::time::sleep(Duration::from_millis(60)).await;
        let line = args["line"].as_str().unwrap_or_default();
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(ctx.run.workdir.join("journal.txt"))
            .map_err(|e| ToolError::new(agentry::ErrorCode::Eunavail, e.to_string()))?;
        writeln!(file, "{line}")
            .map_err(|e| ToolError::new(agentry::ErrorCode::Eunavail, e.to_string()))?;
        tokio::time::sleep(Duration::from_millis(60)).await;
        Ok(ToolOutput::data(json!({ "appended": line })))
    }
}

fn runtime(store: &Path) -> Result<Runtime, Box<dyn std::error::Error>> {
    let mut registry = ToolRegistry::with_builtins()?;
    registry.register(Arc::new(Journal))?;
    let store = Arc::new(SqliteStore::open(store)?);
    Ok(Runtime::new(registry).with_store(store, Durability::Strict)?)
}

fn script() -> Result<Script, ScriptError> {
    let turns: Vec<Value> = (1..=4)
        .map(|k| json!({"tool_calls": [{"id": format!("j{k}"), "name": "journal.append", "arguments": {"line": format!("entry {k}")}}]}))
        .chain([json!({"tool_calls": [{"id": "fin", "name": "task.finish", "arguments": {"answer": "journal written"}}]})])
        .collect();
    Script::from_value(&json!({ "turns": turns }))
}

/// The child: run the agent until it is killed (or finishes).
async fn child(store: PathBuf, workdir: PathBuf) -> Result<(), Box<dyn std::error::Error>> {
    let mut config = RunConfig::new("write four journal entries", &workdir);
    config.run_id = Some("journal-1".into());
    config.grants = Grants::new(["journal.append"]);
    // The operator approved the journal up front (irreversible tools park for
    // approval otherwise).
    config.approval.pre_approved = Grants::new(["journal.append"]);
    runtime(&store)?
        .run(config, script()?.into_policy())
        .await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        return child(PathBuf::from(&args[2]), PathBuf::from(&args[3])).await;
    }
    let dir = tempfile::tempdir()?;
    let store = dir.path().join("runs.db");
    let workdir = dir.path().join("work");
    std::fs::create_dir(&workdir)?;

    // 1. The service runs the agent... and dies mid-run.
    let mut proc = std::process::Command::new(std::env::current_exe()?)
        .arg("--child")
        .arg(&store)
        .arg(&workdir)
        .spawn()?;
    std::thread::sleep(Duration::from_millis(400));
    proc.kill()?; // SIGKILL: no clean-up code of the child runs
    proc.wait()?;
    tokio::time::sleep(Duration::from_millis(150)).await; // a straggling write lands
    let journal = || std::fs::read_to_string(workdir.join("journal.txt")).unwrap_or_default();
    println!("killed the service; journal so far: {:?}", journal());

    // 2. The restarted service finds the unfinished run and resumes it.
    let runtime = runtime(&store)?;
    let unfinished = runtime.unfinished_runs().await?;
    println!(
        "unfinished runs: {:?}",
        unfinished.iter().map(|r| &r.run_id).collect::<Vec<_>>()
    );
    let Some(run) = unfinished.first() else {
        println!("the run had already finished before the kill");
        return Ok(());
    };
    let handle = runtime.resume(&run.run_id, script()?.into_policy()).await?;
    let mut events = handle.subscribe();
    let outcome = loop {
        tokio::select! {
            outcome = handle.wait() => break outcome?,
            Ok(record) = events.recv() => {
                if let RunEvent::AwaitingDecision { call, .. } = record.event {
                    // 3. The call the kill interrupted is irreversible: a human
                    // (here: this code) checks whether it took effect.
                    let line = call.arguments.to_value()?["line"].as_str().unwrap_or_default().to_string();
                    let happened = journal().lines().any(|l| l == line);
                    let settlement = if happened { Settlement::Happened } else { Settlement::Retry };
                    println!("interrupted call {} ({line:?}): {settlement:?}", call.id);
                    handle.settle(&call.id, settlement).await?;
                }
            }
        }
    };
    println!(
        "resumed run {}: {} after {} steps; journal: {:?}",
        outcome.run_id,
        outcome.stop_reason,
        outcome.steps,
        journal()
    );
    let lines: Vec<String> = journal().lines().map(str::to_string).collect();
    let want: Vec<String> = (1..=4).map(|k| format!("entry {k}")).collect();
    if outcome.stop_reason != StopReason::Done || lines != want {
        return Err(format!("expected done with each entry once, got {lines:?}").into());
    }
    Ok(())
}

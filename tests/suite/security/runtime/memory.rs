//! Tool output of any size against a live run's memory (issue 33, item 6): a
//! run whose tools return 1 MiB each, two hundred times, with a trace and a
//! durable store, must not hold those results. Each is saved whole as a file;
//! the session, the store and the trace keep its head and the ref.
//!
//! The run happens in a re-executed copy of this test binary, so that the
//! resident memory measured is this run's alone, not the other tests'.

use std::io::Write as _;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use agentry::protocol::decision::Decision;
use agentry::{
    Durability, ErrorCode, SqliteStore, StopReason, Store, Tool, ToolCall, ToolContext,
    ToolContract, ToolError, ToolOutput, async_trait,
};
use agentry_protocol::fingerprint::sha256_hex;
use agentry_test_support::{
    FnPolicy, ScriptBuilder, TestError, TestTask, run_with_events, runtime_with, tool_results,
};
use serde_json::{Value, json};

/// Set in the child process that does the measured run.
const CHILD: &str = "AGENTRY_RESULTS_MEMORY_CHILD";
const CALLS: u64 = 200;
const MIB: u64 = 1 << 20;
/// The most a live run may grow by while two hundred MiB pass through it.
const BOUND: u64 = CALLS * MIB / 4;
/// The run's result cap (the default).
const CAP: usize = agentry::protocol::envelope::DEFAULT_RESULT_CAP;

/// 1 MiB of text lines that need no escaping in JSON but their newlines.
fn big_text() -> String {
    let line = format!("{}\n", "abcdefghijklmnopqrstuvwxyz0123456789".repeat(2));
    let mut text = line.repeat((MIB as usize).div_ceil(line.len()));
    text.truncate(MIB as usize);
    text
}

/// A `kB` field of `/proc/self/status` (`VmRSS`, `VmHWM`), in bytes.
fn status_bytes(field: &str) -> Result<u64, TestError> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .ok_or(format!("no {field} in /proc/self/status"))?;
    Ok(kib * 1024)
}

/// Reads 1 MiB (less `step` bytes, so no two steps look alike) per step;
/// after the last read, notes the resident memory while the run is live
/// (its session whole), then finishes.
fn policy(live_rss: Arc<Mutex<Option<u64>>>) -> FnPolicy {
    FnPolicy::new(move |ctx| {
        if ctx.step <= CALLS {
            return Decision::ToolCalls {
                calls: vec![ToolCall::new(
                    format!("r{}", ctx.step),
                    "fs.read",
                    json!({"path": "big.txt", "limit": MIB - ctx.step}),
                )],
            };
        }
        if let (Ok(rss), Ok(mut live)) = (status_bytes("VmRSS"), live_rss.lock()) {
            *live = Some(rss);
        }
        Decision::ToolCalls {
            calls: vec![ToolCall::new(
                "fin",
                "task.finish",
                json!({"answer": "read"}),
            )],
        }
    })
}

/// Every `fs.read` result of the trace is its head and a ref to a saved file
/// holding the whole data.
fn assert_traced_as_heads(task: &TestTask) -> Result<(), TestError> {
    let mut reads = 0;
    for line in task.read_trace()? {
        for r in line["results"].as_array().into_iter().flatten() {
            if r["tool"] != "fs.read" {
                continue;
            }
            reads += 1;
            assert_eq!(r.get("data"), None, "kept whole: {}", r["tool_call_id"]);
            let head = r["cut"]["head"].as_str().ok_or("no head")?;
            assert!(
                head.len() <= CAP && head.len() + 256 >= CAP,
                "{}",
                head.len()
            );
            // Every file's hash; the whole data of the first and the last.
            let parse = reads == 1 || reads == CALLS;
            assert_saved(task.workdir(), &r["saved"], head, parse)?;
        }
    }
    assert_eq!(reads, CALLS);
    Ok(())
}

/// The saved file `saved` names holds the whole data (its hash, its length),
/// starting with `head`; with `parse`, its content is all that was read.
fn assert_saved(workdir: &Path, saved: &Value, head: &str, parse: bool) -> Result<(), TestError> {
    let path = workdir.join(saved["path"].as_str().ok_or("no saved path")?);
    let bytes = std::fs::read(&path)?;
    assert_eq!(saved["bytes"], bytes.len() as u64);
    assert_eq!(saved["sha256"], sha256_hex(&bytes));
    assert!(bytes.starts_with(head.as_bytes()));
    if parse {
        let whole: Value = serde_json::from_slice(&bytes)?;
        let content = whole["content"].as_str().ok_or("no content")?;
        assert!(content.len() as u64 >= MIB - CALLS, "{}", content.len());
    }
    Ok(())
}

/// The durable store's session holds no result's whole data either.
fn assert_stored_as_heads(store: &SqliteStore, run_id: &str, db: &Path) -> Result<(), TestError> {
    let run = store.load(run_id)?.ok_or("the run is not stored")?;
    let session = serde_json::to_string(&run.session)?;
    let ledger = serde_json::to_string(&run.ledger)?;
    assert!(
        ((session.len() + ledger.len()) as u64) < BOUND,
        "the stored session is {} bytes, the ledger {}",
        session.len(),
        ledger.len()
    );
    assert!(
        std::fs::metadata(db)?.len() < BOUND,
        "the store file holds the data"
    );
    Ok(())
}

/// The run, measured: resident memory before it, at its last decision and
/// at its peak.
async fn measured_run() -> Result<(), TestError> {
    let task = TestTask::new("read big.txt again and again", &[("big.txt", &big_text())])?
        .grant(&["fs.read"])
        .max_steps(CALLS + 5)
        .max_tool_calls(CALLS + 5)
        .trace();
    let db = task.root().join("runs.db");
    let store = Arc::new(SqliteStore::open(&db)?);
    let runtime = runtime_with(Vec::new())?
        .with_store(Arc::clone(&store) as Arc<dyn Store>, Durability::Strict)?;
    let live = Arc::new(Mutex::new(None));
    let before = status_bytes("VmRSS")?;

    let outcome = runtime
        .run(task.config(), policy(Arc::clone(&live)))
        .await?;

    let peak = status_bytes("VmHWM")?;
    let live = live
        .lock()
        .map_err(|_| "poisoned")?
        .ok_or("never measured")?;
    println!(
        "rss before {} MiB, at the last decision {} MiB, peak {} MiB",
        before / MIB,
        live / MIB,
        peak / MIB
    );
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(outcome.steps, CALLS + 1);
    // A trace cut short (e.g. the disk filled up) is said here, not later as
    // a line that does not parse.
    assert_eq!(outcome.trace_error, None, "the trace was not written whole");
    assert!(
        live.saturating_sub(before) < BOUND,
        "the live run grew by {} MiB for {CALLS} MiB of results",
        (live - before) / MIB
    );
    assert!(
        peak.saturating_sub(before) < BOUND,
        "the run's peak was {} MiB above its start",
        (peak - before) / MIB
    );
    assert_traced_as_heads(&task)?;
    assert_stored_as_heads(&store, &outcome.run_id, &db)?;
    Ok(())
}

/// The invariant ARCHITECTURE.md cites: results past the cap stay on disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_mib_of_results_leave_a_live_run_small() -> Result<(), TestError> {
    if std::env::var_os(CHILD).is_some() {
        return measured_run().await;
    }
    let out = Command::new(std::env::current_exe()?)
        .args([
            "--exact",
            "suite::security::runtime::memory::two_hundred_mib_of_results_leave_a_live_run_small",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .output()?;
    std::io::stderr().write_all(&out.stdout)?;
    std::io::stderr().write_all(&out.stderr)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the run in the child process failed");
    // The child really ran the test (a filter matching nothing also succeeds).
    assert!(stdout.contains("1 passed"), "{stdout}");
    Ok(())
}

/// Fails with a 1 MiB message.
#[derive(Debug)]
struct LoudFailure;

#[async_trait]
impl Tool for LoudFailure {
    fn contract(&self) -> ToolContract {
        ToolContract::new("loud", "Fails at length.", json!({"type": "object"}))
    }

    async fn call(&self, _args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        Err(ToolError::new(ErrorCode::Eunavail, "no ".repeat(350_000)).retryable(false))
    }
}

/// A tool's error message is cut to the cap too, saying how long it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_message_past_the_cap_is_cut() -> Result<(), TestError> {
    let task = TestTask::new("fail loudly", &[])?.grant(&["loud"]);
    let policy = ScriptBuilder::new()
        .call("l1", "loud", json!({}))
        .finish("failed")
        .policy();
    let runtime = runtime_with(vec![Arc::new(LoudFailure)])?;

    let (outcome, events) = run_with_events(&runtime, task.config(), policy).await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let (_, loud) = tool_results(&events)
        .into_iter()
        .next()
        .ok_or("no result")?;
    let message = &loud.error.as_ref().ok_or("no error")?.message;
    assert!(message.len() < CAP + 64, "{}", message.len());
    assert!(message.starts_with("no no "), "{message:.20}");
    assert!(
        message.ends_with("(cut: the message is 1050000 bytes)"),
        "{}",
        &message[message.len() - 60..]
    );
    Ok(())
}

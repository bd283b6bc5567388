//! Context that fits: a 200-step run whose session grows to about ten times the
//! model's window, through the real runtime and the OpenAI adapter, against the
//! strict mock server. Every request the server receives must fit the window
//! less the reserved output (measured independently of the adapter's own
//! estimate: the body's bytes / 4), keep the system prompt and the goal, and
//! the run must end `done`. On the way, one large result is read back through
//! the ref its cut form names (`result.read`, which the run was not granted:
//! every run may read back its own results).

use agentry::{Runtime, StopReason};
use agentry_models::OpenAiPolicy;
use agentry_test_support::TestTask;
use serde_json::{Value, json};

use super::server::{MockServer, Received, Reply, TestError, split_events};
use super::sse::{call_args, call_start, config, finish, usage};

/// The model's window, in tokens.
const WINDOW: u64 = 20_000;
/// Output tokens each request reserves (the adapter's default).
const RESERVED: u64 = 1024;
/// Calls reading the file, one part each.
const STEPS: u64 = 200;
/// Bytes of the file each call reads.
const PART: u64 = 4_000;
/// Results longer than this (bytes of JSON) are shown cut and saved whole.
const CAP: usize = 2_048;
/// The step whose reply reads back the rest of the previous, cut result.
const READ_BACK: u64 = 100;

const GOAL: &str = "read big.txt part by part, then write its line count to count.txt";

/// A text of `STEPS * PART` bytes, lines of 100 bytes that differ.
fn big_text() -> String {
    (0..STEPS * PART / 100)
        .map(|i| {
            format!(
                "{i:08} {}\n",
                "abcdefghij".repeat(9).get(..90).unwrap_or("")
            )
        })
        .collect()
}

/// A streamed turn with one call, in one piece (two hundred turns of many small
/// pieces would spend most of the test in the server's pauses).
fn one_call(id: &str, name: &str, args: &str) -> Vec<String> {
    let events = [
        call_start(0, id, name),
        call_args(0, args),
        finish("tool_calls"),
        usage(10, 5),
        "[DONE]".into(),
    ];
    split_events(&events, usize::MAX)
}

/// The call reading part `i`.
fn read_part(i: u64) -> Reply {
    let args = json!({"path": "big.txt", "offset": i * PART, "limit": PART}).to_string();
    Reply::sse(one_call(&format!("r{i}"), "fs_read", &args))
}

/// The last tool message of a request, parsed.
fn last_result(body: &Value) -> Value {
    body["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "tool"))
        .and_then(|m| m["content"].as_str())
        .and_then(|c| serde_json::from_str(c).ok())
        .unwrap_or(Value::Null)
}

/// Reads the rest of the last (cut) result back through the ref it names.
fn read_back() -> Reply {
    Reply::from_request(|body| {
        let rest = &last_result(body)["rest"];
        let args = json!({"ref": rest["ref"], "offset": rest["offset"], "limit": rest["limit"]})
            .to_string();
        Reply::sse(one_call("back", "result_read", &args))
    })
}

fn script() -> Vec<Reply> {
    let mut replies: Vec<Reply> = (0..STEPS)
        .flat_map(|i| {
            let back = (i == READ_BACK).then(read_back);
            back.into_iter().chain([read_part(i)])
        })
        .collect();
    let lines = (STEPS * PART / 100).to_string();
    let write = json!({"path": "count.txt", "content": lines}).to_string();
    replies.push(Reply::sse(one_call("write", "fs_write", &write)));
    replies.push(Reply::sse(one_call(
        "fin",
        "task_finish",
        r#"{"answer":"counted"}"#,
    )));
    replies
}

/// Every request fits the window less the reserved output by bytes / 4, and
/// keeps the system prompt and the goal.
fn assert_every_request_fits(sent: &[Received]) -> Result<(), TestError> {
    for (i, r) in sent.iter().enumerate() {
        let bytes = serde_json::to_vec(&r.body)?.len() as u64;
        assert!(
            bytes / 4 <= WINDOW - RESERVED,
            "request {i}: {bytes} bytes, over {} tokens",
            WINDOW - RESERVED
        );
        let messages = r.body["messages"].as_array().ok_or("messages")?;
        assert_eq!(messages[0]["role"], "system", "request {i}");
        assert_eq!(messages[1]["content"], GOAL, "request {i}");
    }
    Ok(())
}

/// The read-back call got the bytes right after the head it was shown.
fn assert_read_back(task: &TestTask, sent: &[Received]) -> Result<(), TestError> {
    // Request READ_BACK shows the last part read, cut; the next, what was read back.
    let index = usize::try_from(READ_BACK)?;
    let shown = last_result(&sent[index].body);
    let back = last_result(&sent[index + 1].body);
    assert_eq!(back["tool"], "result.read", "{back}");
    assert_eq!(back["ok"], true, "{back}");
    let offset = shown["rest"]["offset"].as_u64().ok_or("offset")?;
    assert_eq!(back["data"]["offset"], offset);
    let saved = task
        .workdir()
        .join(".agentry/results")
        .join(shown["rest"]["ref"].as_str().ok_or("ref")?);
    let whole = std::fs::read_to_string(saved)?;
    let content = back["data"]["content"].as_str().ok_or("content")?;
    assert!(whole[usize::try_from(offset)?..].starts_with(content));
    assert!(!content.is_empty());
    Ok(())
}

/// Bytes of every decision and result the run recorded, from its trace, a
/// cut result counted whole; each part read is recorded as its head and the
/// ref to the saved file holding it whole (only that file has it all).
fn raw_session_bytes(task: &TestTask, trace: &str) -> Result<u64, TestError> {
    let mut bytes = 0u64;
    for line in trace.lines() {
        let line: Value = serde_json::from_str(line)?;
        if let Some(v) = line.get("decision") {
            bytes += serde_json::to_vec(v)?.len() as u64;
        }
        for r in line["results"].as_array().into_iter().flatten() {
            bytes += serde_json::to_vec(r)?.len() as u64;
            if let Some(whole) = r["cut"]["bytes"].as_u64() {
                bytes += whole;
            }
        }
        let results = line["results"].as_array().into_iter().flatten();
        for r in results.filter(|r| r["tool"] == "fs.read") {
            assert_eq!(r.get("data"), None, "{r}");
            let head = r["cut"]["head"].as_str().ok_or("no head")?;
            assert!(head.len() <= CAP, "{}", head.len());
            let saved = task
                .workdir()
                .join(r["saved"]["path"].as_str().ok_or("no saved path")?);
            let whole: Value = serde_json::from_slice(&std::fs::read(saved)?)?;
            let content = whole["content"].as_str().ok_or("content")?;
            assert_eq!(content.len() as u64, PART);
            assert_eq!(r["cut"]["bytes"], serde_json::to_vec(&whole)?.len());
        }
    }
    Ok(bytes)
}

#[tokio::test]
async fn a_200_step_run_ten_times_its_window_fits_every_request_and_ends_done()
-> Result<(), TestError> {
    let task = TestTask::new(GOAL, &[("big.txt", &big_text())])?
        .grant(&["fs.read", "fs.write"])
        .max_steps(STEPS + 10)
        .max_tool_calls(STEPS + 10)
        .accept_file_equals("count.txt", &(STEPS * PART / 100).to_string())
        .trace();
    let mut run = task.config();
    run.result_cap = CAP;
    let server = MockServer::start(script()).await?;
    let model = config(&server.base_url)
        .context_tokens(WINDOW)
        .result_cap(CAP);

    let outcome = Runtime::with_builtins()?
        .run(run, OpenAiPolicy::new(model)?)
        .await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(
        outcome.steps,
        STEPS + 3,
        "the reads, one read-back, write, finish"
    );
    assert_eq!(server.rejected(), [], "every request met OpenAI's rules");
    let sent = server.received();
    assert_eq!(sent.len() as u64, STEPS + 3);
    assert_every_request_fits(&sent)?;
    assert_read_back(&task, &sent)?;
    // The session the run stands for: ~10 times what any request carried.
    let raw = raw_session_bytes(&task, &std::fs::read_to_string(task.trace_path())?)?;
    assert!(raw / 4 >= 9 * WINDOW, "raw session {} tokens", raw / 4);
    assert_eq!(outcome.state.session_len, 1 + 2 * (STEPS + 3));
    // Later requests elided the old turns, with one note saying so.
    let last = sent.last().ok_or("no request")?;
    let notes = last.body["messages"]
        .as_array()
        .ok_or("messages")?
        .iter()
        .filter(|m| {
            m["content"]
                .as_str()
                .is_some_and(|c| c.contains("earlier session entries were elided"))
        })
        .count();
    assert_eq!(notes, 1);
    Ok(())
}

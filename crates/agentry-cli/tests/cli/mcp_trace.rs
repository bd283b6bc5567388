//! `agentry mcp`'s `run_task` joins the caller's trace: a request's
//! `_meta.traceparent` (MCP's SEP-414 key) becomes the run's parent, so the
//! run's processes get a `TRACEPARENT` in that trace. The real binary over
//! stdio, driven by rmcp's client.

use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, RequestMetaObject};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use serde_json::json;

use crate::*;

/// Bound on the session's start and on the one call.
const BOUND: Duration = Duration::from_secs(60);

async fn client(tmp: &Path) -> RunningService<RoleClient, ()> {
    let transport = super::mcp::mcp_over_stdio(tmp, &["--no-store".as_ref()]);
    tokio::time::timeout(BOUND, ().serve(transport))
        .await
        .expect("initialize within the bound")
        .unwrap()
}

/// Runs an inline task whose acceptance check saves `TRACEPARENT` in
/// `tp.txt`, with `_meta.traceparent` set to `traceparent`; returns the saved value.
async fn saved_traceparent(
    client: &RunningService<RoleClient, ()>,
    traceparent: Option<&str>,
) -> String {
    let arguments = json!({
        "task": {
            "goal": "save the trace context",
            "budget": {"max_steps": 3, "deadline": "30s"},
            "accept": [{"command": "printf %s \"$TRACEPARENT\" > tp.txt"}],
        },
        "script": {"turns": [
            {"tool_calls": [{"id": "f", "name": "task.finish", "arguments": {"answer": "saved"}}]},
        ]},
    });
    let Value::Object(arguments) = arguments else {
        unreachable!()
    };
    let mut params = CallToolRequestParams::new("run_task").with_arguments(arguments);
    if let Some(tp) = traceparent {
        let mut meta = RequestMetaObject::new();
        meta.0.set_traceparent(tp);
        params.meta = Some(meta);
    }
    let result: CallToolResult = tokio::time::timeout(BOUND, client.call_tool(params))
        .await
        .expect("run_task answers within the bound")
        .unwrap();
    assert_eq!(result.is_error, Some(false), "{result:?}");
    let report = result.structured_content.expect("structured content");
    assert_eq!(report["stop_reason"], "done", "{report}");
    let workdir = PathBuf::from(report["workdir"].as_str().expect("workdir"));
    std::fs::read_to_string(workdir.join("tp.txt")).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_task_joins_the_callers_trace_from_meta() {
    let tmp = tempfile::tempdir().unwrap();
    let client = client(tmp.path()).await;
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let joined = saved_traceparent(&client, Some(&format!("00-{trace}-00f067aa0ba902b7-01"))).await;
    assert!(joined.starts_with(&format!("00-{trace}-")), "{joined:?}");
    // Without one (or with an invalid one) the run starts its own trace.
    for tp in [None, Some("00-not-a-traceparent")] {
        let own = saved_traceparent(&client, tp).await;
        assert!(
            own.starts_with("00-") && !own.contains(trace),
            "{tp:?}: {own:?}"
        );
    }
    client.cancel().await.unwrap();
}

//! `agentry serve` as an A2A server across a restart: a task of an earlier
//! start is listed (ListTasks reads the store) and got, with its answer and
//! its declared files, for its tenant only.

use serde_json::json;

use super::serve_a2a::{ACME, GLOBEX, place, rpc, serve};

/// A task of an earlier start of the service, listed and got.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_of_an_earlier_start_is_listed_and_got_from_the_store() {
    let dir = place();
    let served = serve(dir.path());
    let send = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "report"}]}}});
    let (_, body) = rpc(&served.base, "/a2a/report", ACME, true, send).await;
    let task = &body["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{body}");
    let id = task["id"].clone();
    served.kill();

    let served = serve(dir.path());
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "ListTasks",
        "params": {"includeArtifacts": true}});
    let (_, body) = rpc(&served.base, "/a2a/report", ACME, true, list).await;
    let listed = &body["result"];
    assert_eq!(listed["totalSize"], 1, "{body}");
    assert_eq!(listed["tasks"][0]["id"], id, "{body}");
    assert_eq!(
        listed["tasks"][0]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    let get = json!({"jsonrpc": "2.0", "id": 3, "method": "GetTask", "params": {"id": id}});
    let (_, body) = rpc(&served.base, "/a2a/report", ACME, true, get.clone()).await;
    let artifacts = &body["result"]["artifacts"];
    assert_eq!(artifacts[0]["parts"][0]["text"], "reported", "{body}");
    assert_eq!(artifacts[1]["name"], "out/report.md", "{body}");
    assert_eq!(artifacts[1]["parts"][0]["text"], "# Report\nall good\n");
    let filtered = json!({"jsonrpc": "2.0", "id": 4, "method": "ListTasks",
        "params": {"status": "TASK_STATE_FAILED"}});
    let (_, body) = rpc(&served.base, "/a2a/report", ACME, true, filtered).await;
    assert_eq!(body["result"]["totalSize"], 0, "{body}");
    // Another tenant neither lists nor gets it.
    let (_, body) = rpc(&served.base, "/a2a/report", GLOBEX, true, get).await;
    assert_eq!(body["error"]["code"], -32001, "{body}");
    let list = json!({"jsonrpc": "2.0", "id": 5, "method": "ListTasks", "params": {}});
    let (_, body) = rpc(&served.base, "/a2a/report", GLOBEX, true, list).await;
    assert_eq!(body["result"]["totalSize"], 0, "{body}");
}

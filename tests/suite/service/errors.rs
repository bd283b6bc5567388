//! Bad requests: each gets a 4xx and `{"error": {"code", "message"}}` naming the problem.

use super::*;

/// One bad request and what the service must answer.
struct BadRequest {
    method: &'static str,
    path: String,
    body: Option<String>,
    status: u16,
    /// A piece of the `error` text.
    want: &'static str,
}

/// The bad requests, against the live run `live`.
fn bad_requests(live: &str) -> Vec<BadRequest> {
    // Size: a table of 22 cases, one per rule of the request contract it pins.
    let script = json!({"turns": [{"final": "ok"}]});
    let cases: Vec<(&str, String, Option<String>, u16, &str)> = vec![
        (
            "POST",
            "/runs".into(),
            Some("{\"goal\": ".into()),
            400,
            "invalid JSON",
        ),
        (
            "POST",
            "/runs".into(),
            Some("[1, 2]".into()),
            400,
            "must be a JSON object",
        ),
        (
            "POST",
            "/runs".into(),
            Some(
                json!({"goal": "g", "budget": {"max_steps": "ten"}, "script": script}).to_string(),
            ),
            400,
            "budget.max_steps: expected a positive integer, found \"ten\"",
        ),
        (
            "POST",
            "/runs".into(),
            Some(json!({"goal": "g", "budget": {"max_steps": null}, "script": script}).to_string()),
            400,
            "budget.max_steps: null is not allowed",
        ),
        (
            "POST",
            "/runs".into(),
            Some(json!({"goal": "g", "budgte": {}, "script": script}).to_string()),
            400,
            "unknown field `budgte`",
        ),
        (
            "POST",
            "/runs".into(),
            Some(json!({"goal": "g"}).to_string()),
            400,
            "script: missing",
        ),
        (
            "POST",
            "/runs".into(),
            Some(json!({"goal": "g", "script": {"turns": [{}]}}).to_string()),
            400,
            "script: turns[0]",
        ),
        (
            "POST",
            "/runs".into(),
            Some(
                json!({"goal": "g", "policy": {"script": "s.json"}, "script": script}).to_string(),
            ),
            400,
            "policy:",
        ),
        (
            "POST",
            "/runs".into(),
            Some(
                json!({"goal": "g", "script": script, "files": {"../escape.txt": "x"}}).to_string(),
            ),
            400,
            "files[\"../escape.txt\"]: expected a relative path",
        ),
        (
            "POST",
            "/runs".into(),
            Some(json!({"goal": "g", "script": script, "files": {"/etc/x": "x"}}).to_string()),
            400,
            "files[\"/etc/x\"]",
        ),
        (
            "POST",
            "/runs".into(),
            Some(json!({"goal": "g", "script": script, "files": {"a.txt": 3}}).to_string()),
            400,
            "files[\"a.txt\"]: expected the file content as a string",
        ),
        ("GET", "/runs/no-such-run".into(), None, 404, "no-such-run"),
        (
            "GET",
            "/runs/no-such-run/events".into(),
            None,
            404,
            "no-such-run",
        ),
        (
            "POST",
            "/runs/no-such-run/messages".into(),
            Some(json!({"text": "hi"}).to_string()),
            404,
            "no-such-run",
        ),
        (
            "POST",
            format!("/runs/{live}/interrupt"),
            Some(json!({"action": "stop"}).to_string()),
            400,
            "action: expected \"pause\", \"resume\", \"abort\" or \"redirect\", found \"stop\"",
        ),
        (
            "POST",
            format!("/runs/{live}/interrupt"),
            Some("{}".into()),
            400,
            "action: missing",
        ),
        (
            "POST",
            format!("/runs/{live}/messages"),
            Some(json!({"text": 3}).to_string()),
            400,
            "text: expected",
        ),
        (
            "POST",
            format!("/runs/{live}/messages"),
            Some(json!({"text": "hi", "urgent": true}).to_string()),
            400,
            "unknown field \"urgent\"",
        ),
        (
            "POST",
            format!("/runs/{live}/events"),
            Some(json!({"payload": {}}).to_string()),
            400,
            "name: missing",
        ),
        (
            "POST",
            format!("/runs/{live}/approvals/c1"),
            Some(json!({"decision": "maybe"}).to_string()),
            400,
            "decision: expected \"approve\" or \"deny\"",
        ),
        ("GET", "/nowhere".into(), None, 404, "no such route"),
        ("DELETE", "/runs".into(), None, 405, "method not allowed"),
    ];
    cases
        .into_iter()
        .map(|(method, path, body, status, want)| BadRequest {
            method,
            path,
            body,
            status,
            want,
        })
        .collect()
}

/// Bad requests get a 4xx and `{"error": ...}` naming the problem.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_json_errors_naming_the_problem() -> Result<(), TestError> {
    let service = Service::start().await?;
    let live = service.create(listener_task()).await?;
    for case in bad_requests(&live) {
        let BadRequest {
            method,
            path,
            body,
            status,
            want,
        } = case;
        let reply = service.send(method, &path, body.clone()).await?;
        let error = reply.body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            reply.body["error"]["code"].is_string(),
            "{method} {path}: {:?}",
            reply.body
        );
        assert_eq!(
            reply.status, status,
            "{method} {path} {body:?}: {:?}",
            reply.body
        );
        assert!(
            error.contains(want),
            "{method} {path} {body:?}: got {error:?}, want {want:?}"
        );
    }
    // None of that disturbed the live run: it is (or soon is) asleep, no step taken.
    let mut status = Value::Null;
    for _ in 0..200 {
        let run = service.get(&format!("/runs/{live}")).await?;
        assert_eq!(run.body["steps"], 0, "{:?}", run.body);
        status = run.body["status"].clone();
        if status == "sleeping" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(status, "sleeping");
    Ok(())
}

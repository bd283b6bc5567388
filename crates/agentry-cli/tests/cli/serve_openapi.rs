//! `agentry serve`'s OpenAPI document: the one it serves is the one checked
//! into `docs/openapi.json`, it is OpenAPI 3.1, every route it names answers on
//! the real server, and the real server's answers — successes and errors —
//! are among the statuses it documents and validate against its schemas.

use serde_json::json;

use super::serve::{Served, listener_task, tokens_file};
use crate::*;

const TOKEN: &str = "openapi-token-3b7d";

/// `docs/openapi.json`, which `AGENTRY_WRITE_OPENAPI=1` rewrites from the code.
fn checked_in() -> PathBuf {
    root().join("docs/openapi.json")
}

#[test]
fn the_checked_in_document_is_the_one_the_code_generates() {
    let generated = agentry_serve::openapi::document_json();
    if std::env::var_os("AGENTRY_WRITE_OPENAPI").is_some() {
        std::fs::write(checked_in(), &generated).unwrap();
    }
    let file = std::fs::read_to_string(checked_in()).unwrap_or_default();
    assert!(
        file == generated,
        "docs/openapi.json is not the document the routes generate: rerun with AGENTRY_WRITE_OPENAPI=1 and commit it"
    );
    let doc: Value = serde_json::from_str(&generated).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    // Every schema a path or a schema names is in the document's components
    // (utoipa registers a body's types, not a parameter's).
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    for name in generated.split("\"#/components/schemas/").skip(1) {
        let name = name.split('"').next().unwrap();
        assert!(
            schemas.contains_key(name),
            "{name} is named but not defined"
        );
    }
}

/// The operation of `method path` in `doc`, its path template matched
/// segment by segment (`{id}` takes any one segment).
fn operation<'a>(doc: &'a Value, method: &str, path: &str) -> &'a Value {
    let path = path.split('?').next().unwrap_or(path);
    let segments: Vec<&str> = path.split('/').collect();
    let (_, item) = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .find(|(template, _)| {
            let parts: Vec<&str> = template.split('/').collect();
            parts.len() == segments.len()
                && parts
                    .iter()
                    .zip(&segments)
                    .all(|(t, s)| t.starts_with('{') || t == s)
        })
        .unwrap_or_else(|| panic!("{path} is not in the document"));
    let op = &item[method.to_ascii_lowercase()];
    assert!(op.is_object(), "{method} {path} is not in the document");
    op
}

/// Checks a real answer against the document: its status is documented for
/// the operation, and a JSON body validates against that status's schema.
fn conforms(doc: &Value, method: &str, path: &str, status: u16, body: &Value) {
    let op = operation(doc, method, path);
    let response = &op["responses"][status.to_string()];
    assert!(
        response.is_object(),
        "{method} {path} answered {status}, which the document does not list: {body}"
    );
    let Some(schema) = response["content"]["application/json"]["schema"].as_object() else {
        return;
    };
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "components": doc["components"],
        "allOf": [schema],
    });
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(body)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{method} {path} {status}: the answer does not match the document: {errors:?}\n{body}"
    );
}

/// One request of a session: method, path, token, body.
type Call = (&'static str, String, Option<&'static str>, Option<Value>);

/// A session of a client with the live run at `run` (and a few mistakes),
/// ending with the run aborted.
fn session(run: &str) -> Vec<Call> {
    // Size: one line per request, a table more than a procedure.
    vec![
        ("GET", "/healthz".into(), None, None),
        ("GET", "/openapi.json".into(), None, None),
        ("POST", "/runs".into(), Some(TOKEN), Some(listener_task())),
        (
            "POST",
            "/runs".into(),
            Some(TOKEN),
            Some(json!({"goal": 3})),
        ),
        (
            "POST",
            "/runs".into(),
            Some(TOKEN),
            Some(json!({"agent": "none", "input": "x"})),
        ),
        ("POST", "/runs".into(), None, Some(listener_task())),
        ("GET", "/runs".into(), Some(TOKEN), None),
        ("GET", run.to_string(), Some(TOKEN), None),
        ("GET", "/runs/no-such-run".into(), Some(TOKEN), None),
        (
            "POST",
            format!("{run}/messages"),
            Some(TOKEN),
            Some(json!({"text": "hi"})),
        ),
        (
            "POST",
            format!("{run}/messages"),
            Some(TOKEN),
            Some(json!({"txt": "hi"})),
        ),
        (
            "POST",
            format!("{run}/events"),
            Some(TOKEN),
            Some(json!({"name": "tick", "payload": {"n": 1}})),
        ),
        (
            "POST",
            format!("{run}/interrupt"),
            Some(TOKEN),
            Some(json!({"action": "pause"})),
        ),
        (
            "POST",
            format!("{run}/interrupt"),
            Some(TOKEN),
            Some(json!({"action": "resume"})),
        ),
        (
            "POST",
            format!("{run}/interrupt"),
            Some(TOKEN),
            Some(json!({"action": "jump"})),
        ),
        (
            "POST",
            format!("{run}/approvals/no-call"),
            Some(TOKEN),
            Some(json!({"decision": "approve"})),
        ),
        (
            "POST",
            format!("{run}/approvals/no-call"),
            Some(TOKEN),
            Some(json!({"decision": "maybe"})),
        ),
        (
            "POST",
            format!("{run}/decisions/no-call"),
            Some(TOKEN),
            Some(json!({"decision": "retry"})),
        ),
        ("GET", "/metrics".into(), Some(TOKEN), None),
        ("GET", "/agents".into(), Some(TOKEN), None),
        ("GET", "/agents".into(), None, None),
        ("GET", "/runs/no-such-run/events".into(), Some(TOKEN), None),
        (
            "POST",
            format!("{run}/interrupt"),
            Some(TOKEN),
            Some(json!({"action": "abort"})),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_route_answers_as_the_document_says() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.db");
    tokens_file(dir.path(), &[("ops", TOKEN)]);
    let config = dir.path().join("serve.toml");
    std::fs::write(&config, "[auth]\ntokens_file = \"tokens\"\n").unwrap();
    let served = Served::start(
        &["--config", path_str(&config), "--store", path_str(&store)],
        &[],
    );
    let reply = served.send("GET", "/openapi.json", Some(TOKEN), None).await;
    assert_eq!(reply.status, 200);
    let doc = reply.body;
    let generated: Value = serde_json::from_str(&agentry_serve::openapi::document_json()).unwrap();
    assert!(
        doc == generated,
        "GET /openapi.json is not the generated document"
    );

    let id = served.create(TOKEN, &listener_task()).await;
    served.wait_status(TOKEN, &id, "sleeping").await;
    let run = format!("/runs/{id}");
    let calls = session(&run);
    for (method, path, token, body) in &calls {
        let reply = served.send(method, path, *token, body.as_ref()).await;
        conforms(&doc, method, path, reply.status, &reply.body);
    }
    // A stopped run's answers, and its inputs refused.
    served.wait_status(TOKEN, &id, "stopped").await;
    for (method, path, body) in [
        ("GET", run.clone(), None),
        (
            "POST",
            format!("{run}/messages"),
            Some(json!({"text": "late"})),
        ),
    ] {
        let reply = served.send(method, &path, Some(TOKEN), body.as_ref()).await;
        conforms(&doc, method, &path, reply.status, &reply.body);
    }
    every_route_of_the_document_is_served(&served, &doc, &id).await;
}

/// Every path and method of the document is a route of the server (the
/// router's fallback answers "no such route" or "method not allowed").
async fn every_route_of_the_document_is_served(served: &Served, doc: &Value, id: &str) {
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            // (A stream of a real run would not end: its route is asked of no run.)
            let run_id = if method == "get" && path.ends_with("/events") {
                "no-such-run"
            } else {
                id
            };
            let concrete = path.replace("{id}", run_id).replace("{call_id}", "c1");
            let body = (method == "post").then(|| json!({}));
            let reply = served
                .send(
                    &method.to_ascii_uppercase(),
                    &concrete,
                    Some(TOKEN),
                    body.as_ref(),
                )
                .await;
            let message = reply.body["error"]["message"].as_str().unwrap_or("");
            assert!(
                message != "no such route" && reply.status != 405,
                "{method} {path}: the server has no such route ({})",
                reply.status
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_runs_and_a_full_queue_answer_as_the_document_says() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.db");
    tokens_file(dir.path(), &[("ops", TOKEN)]);
    let config = dir.path().join("serve.toml");
    std::fs::write(
        &config,
        "[serve]\nmax_running = 1\nmax_queued = 1\n\n[auth]\ntokens_file = \"tokens\"\n",
    )
    .unwrap();
    let served = Served::start(
        &["--config", path_str(&config), "--store", path_str(&store)],
        &[],
    );
    let doc = served
        .send("GET", "/openapi.json", Some(TOKEN), None)
        .await
        .body;
    let first = served.create(TOKEN, &listener_task()).await;
    served.wait_status(TOKEN, &first, "sleeping").await;
    let queued = served
        .send("POST", "/runs", Some(TOKEN), Some(&listener_task()))
        .await;
    assert_eq!(queued.body["status"], "queued", "{:?}", queued.body);
    conforms(&doc, "POST", "/runs", queued.status, &queued.body);
    let full = served
        .send("POST", "/runs", Some(TOKEN), Some(&listener_task()))
        .await;
    assert_eq!(full.status, 429, "{:?}", full.body);
    conforms(&doc, "POST", "/runs", full.status, &full.body);
    let id = queued.body["run_id"].as_str().unwrap();
    for (method, path, body) in [
        ("GET", format!("/runs/{id}"), None),
        ("GET", "/runs".to_string(), None),
        ("GET", "/runs?status=running&limit=1".to_string(), None),
        (
            "POST",
            format!("/runs/{id}/messages"),
            Some(json!({"text": "early"})),
        ),
        (
            "POST",
            format!("/runs/{id}/interrupt"),
            Some(json!({"action": "abort"})),
        ),
        ("GET", format!("/runs/{id}"), None),
    ] {
        let reply = served.send(method, &path, Some(TOKEN), body.as_ref()).await;
        conforms(&doc, method, &path, reply.status, &reply.body);
    }
}

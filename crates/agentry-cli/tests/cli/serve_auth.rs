//! `agentry serve`'s tokens and tenants: no token, no service; a missing or
//! wrong token is 401 on every route but /healthz, and nothing of the refused
//! request reaches the log or the store; a run is its tenant's alone (every
//! other tenant gets the 404 of a run that does not exist, on every route,
//! also after a restart).

use serde_json::json;

use super::serve::{Served, listener_task, refused, tokens_file};
use crate::*;

const ACME: &str = "acme-token-5f1c";
const GLOBEX: &str = "globex-token-9d2e";

/// A serve.toml naming a tokens file of acme and globex, in `dir`.
fn tenants_config(dir: &Path) -> PathBuf {
    tokens_file(dir, &[("acme", ACME), ("globex", GLOBEX)]);
    let config = dir.join("serve.toml");
    std::fs::write(&config, "[auth]\ntokens_file = \"tokens\"\n").unwrap();
    config
}

#[test]
fn serve_without_a_token_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.db");
    let out = refused(&["--store", path_str(&store)], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("--no-auth") && err.contains("[auth]"), "{err}");
    // --no-auth takes loopback only.
    let mut command = agentry_command();
    let out = command
        .args([
            "serve",
            "--no-auth",
            "--addr",
            "0.0.0.0:0",
            "--store",
            path_str(&store),
        ])
        .env_remove("AGENTRY_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("loopback"), "{}", stderr(&out));
}

/// `--no-auth` on loopback serves every caller, with no token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_auth_serves_loopback_to_anyone() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.db");
    let served = Served::start(&["--no-auth", "--store", path_str(&store)], &[]);
    let reply = served
        .send("POST", "/runs", None, Some(&listener_task()))
        .await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    let id = reply.body["run_id"].as_str().unwrap();
    let listed = served.send("GET", "/runs", None, None).await;
    assert_eq!(listed.body["runs"][0]["run_id"], id, "{:?}", listed.body);
}

/// Every route, with a body where it takes one.
fn routes(id: &str) -> Vec<(&'static str, String, Option<Value>)> {
    vec![
        ("POST", "/runs".into(), Some(listener_task())),
        ("GET", "/runs".into(), None),
        ("GET", format!("/runs/{id}"), None),
        ("GET", format!("/runs/{id}/events"), None),
        (
            "POST",
            format!("/runs/{id}/messages"),
            Some(json!({"text": "hi"})),
        ),
        (
            "POST",
            format!("/runs/{id}/events"),
            Some(json!({"name": "n", "payload": 1})),
        ),
        (
            "POST",
            format!("/runs/{id}/interrupt"),
            Some(json!({"action": "pause"})),
        ),
        (
            "POST",
            format!("/runs/{id}/approvals/c1"),
            Some(json!({"decision": "approve"})),
        ),
        (
            "POST",
            format!("/runs/{id}/decisions/c1"),
            Some(json!({"decision": "skip"})),
        ),
        ("GET", "/metrics".into(), None),
        ("GET", "/openapi.json".into(), None),
        ("GET", "/agents".into(), None),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_but_healthz_needs_a_valid_token() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.db");
    let config = tenants_config(dir.path());
    let served = Served::start(
        &["--config", path_str(&config), "--store", path_str(&store)],
        &[],
    );
    let id = served.create(ACME, &listener_task()).await;
    let health = served.send("GET", "/healthz", None, None).await;
    assert_eq!((health.status, &health.body["status"]), (200, &json!("ok")));
    // A marker in every refused body: none of it may reach the log or the store.
    let marker = "refused-body-marker-7c41";
    for (method, path, body) in routes(&id) {
        let body = body.map(|mut b| {
            b["goal"] = json!(marker);
            b
        });
        for token in [None, Some("wrong-token"), Some(&format!("{ACME}x")[..])] {
            let reply = served.send(method, &path, token, body.as_ref()).await;
            assert_eq!(
                reply.status, 401,
                "{method} {path} {token:?}: {:?}",
                reply.body
            );
            assert_eq!(
                reply.body["error"]["code"], "unauthorized",
                "{:?}",
                reply.body
            );
        }
    }
    // The run is untouched: still asleep, no input taken.
    let run = served.wait_status(ACME, &id, "sleeping").await;
    assert_eq!(run["inputs"], 0, "{run:?}");
    let log = served.log.lock().unwrap().clone();
    assert!(
        !log.contains(marker),
        "a refused body reached the log: {log}"
    );
    served.kill();
    let stored = std::fs::read(&store).unwrap();
    let wal = std::fs::read(dir.path().join("runs.db-wal")).unwrap_or_default();
    for bytes in [&stored, &wal] {
        assert!(
            !bytes.windows(marker.len()).any(|w| w == marker.as_bytes()),
            "a refused body reached the store"
        );
    }
}

/// The answer for another tenant's run is the answer for no run at all.
fn same_as_missing(theirs: &Value, missing: &Value, id: &str) {
    let theirs = theirs.to_string().replace(id, "ID");
    let missing = missing
        .to_string()
        .replace("00000000-0000-0000-0000-000000000000", "ID");
    assert_eq!(theirs, missing);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_cannot_see_stream_message_approve_or_list_anothers_runs() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.db");
    let config = tenants_config(dir.path());
    let args = ["--config", path_str(&config), "--store", path_str(&store)];
    let served = Served::start(&args, &[]);
    let id = served.create(ACME, &listener_task()).await;
    served.wait_status(ACME, &id, "sleeping").await;
    only_acme_sees(&served, &id, "live").await;
    served.kill();
    // The tenant is kept with the run: the next start resumes it as acme's.
    let again = Served::start(&args, &[]);
    again.wait_status(ACME, &id, "sleeping").await;
    only_acme_sees(&again, &id, "after a restart").await;
    let message = again
        .send(
            "POST",
            &format!("/runs/{id}/messages"),
            Some(ACME),
            Some(&json!({"text": "hi"})),
        )
        .await;
    assert_eq!(message.status, 202, "{:?}", message.body);
}

/// Globex gets, on every route of acme's run `id`, what it gets for a run
/// that does not exist; its list is empty; acme's lists the run, untouched.
async fn only_acme_sees(served: &Served, id: &str, round: &str) {
    let nobody = "00000000-0000-0000-0000-000000000000";
    // Every route that names a run.
    for (method, path, body) in routes(id).into_iter().skip(2).take(7) {
        let theirs = served
            .send(method, &path, Some(GLOBEX), body.as_ref())
            .await;
        let missing_path = path.replace(id, nobody);
        let missing = served
            .send(method, &missing_path, Some(GLOBEX), body.as_ref())
            .await;
        assert_eq!(
            theirs.status, 404,
            "{round}: {method} {path}: {:?}",
            theirs.body
        );
        assert_eq!(missing.status, 404, "{round}: {method} {missing_path}");
        same_as_missing(&theirs.body, &missing.body, id);
    }
    let listed = served.send("GET", "/runs", Some(GLOBEX), None).await;
    assert_eq!(listed.body, json!({"runs": []}), "{round}");
    let mine = served.send("GET", "/runs", Some(ACME), None).await;
    assert_eq!(
        mine.body["runs"][0]["run_id"], id,
        "{round}: {:?}",
        mine.body
    );
    // Nothing globex sent reached the run.
    let run = served
        .send("GET", &format!("/runs/{id}"), Some(ACME), None)
        .await;
    assert_eq!(run.body["inputs"], 0, "{round}: {:?}", run.body);
}

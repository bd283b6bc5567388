//! `agentry serve`'s `GET /runs?status=&agent=&limit=&cursor=`: a tenant's
//! runs newest first, filtered, in pages joined by an opaque cursor bound to
//! the tenant (another tenant's cursor, or one crafted from its run ids,
//! leaks nothing), the same after a restart (read from the store); and
//! `[serve] retention`: a stopped run older than it is removed, its records,
//! working directory and delivered webhook, while a live run stays.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::json;

use super::receiver::Receiver;
use super::serve::{Served, WAIT, listener_task, tokens_file};
use super::serve_webhooks::{SECRET, SECRET_ENV, TOKEN, hooks_section, quick_agent, quick_task};
use crate::*;

const ACME: &str = "acme-list-token-11";
const GLOBEX: &str = "globex-list-token-22";

/// Every page of `GET /runs?QUERY&limit=LIMIT` as `token`, following
/// `next_cursor`; the run ids, page by page.
async fn pages(served: &Served, token: &str, query: &str, limit: usize) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..50 {
        let mut path = format!("/runs?limit={limit}&{query}");
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let reply = served.send("GET", &path, Some(token), None).await;
        assert_eq!(reply.status, 200, "{path}: {:?}", reply.body);
        let ids: Vec<String> = reply.body["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["run_id"].as_str().unwrap().to_string())
            .collect();
        assert!(ids.len() <= limit, "{:?}", reply.body);
        out.push(ids);
        match reply.body["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => return out,
        }
    }
    panic!("more than 50 pages");
}

async fn field_of_400(served: &Served, token: &str, path: &str) -> Value {
    let reply = served.send("GET", path, Some(token), None).await;
    assert_eq!(reply.status, 400, "{path}: {:?}", reply.body);
    assert_eq!(reply.body["error"]["code"], "bad_request");
    reply.body["error"]["field"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_runs_are_listed_newest_first_in_pages_filtered_and_after_a_restart() {
    // Size: one server and one set of runs for every listing check, then the same after a restart.
    let dir = tempfile::tempdir().unwrap();
    quick_agent(dir.path());
    let tokens = tokens_file(dir.path(), &[("acme", ACME), ("globex", GLOBEX)]);
    let config = dir.path().join("serve.toml");
    std::fs::write(
        &config,
        format!(
            "[auth]\ntokens_file = \"{}\"\n[agents.quick]\ntask = \"tasks/quick\"\n",
            tokens.display()
        ),
    )
    .unwrap();
    let store = dir.path().join("runs.db");
    let args = ["--config", path_str(&config), "--store", path_str(&store)];
    let served = Served::start(&args, &[]);

    // Acme: three quick runs, a sleeping one, an agent's; globex: two.
    let mut acme = Vec::new();
    let mut globex = Vec::new();
    for i in 0..7 {
        let (token, body) = match i {
            0 | 2 | 5 => (ACME, quick_task("a")),
            3 => (ACME, listener_task()),
            4 => (ACME, json!({"agent": "quick", "input": "go"})),
            _ => (GLOBEX, quick_task("g")),
        };
        let id = served.create(token, &body).await;
        if token == ACME {
            acme.push(id)
        } else {
            globex.push(id)
        }
        // Distinct creation times: the expected order is the creation order.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for id in &acme {
        if *id != acme[2] {
            served.wait_status(ACME, id, "stopped").await;
        }
    }
    served.wait_status(ACME, &acme[2], "sleeping").await;
    let newest_first: Vec<String> = acme.iter().rev().cloned().collect();

    let all = served.send("GET", "/runs", Some(ACME), None).await;
    let rows = all.body["runs"].as_array().unwrap().clone();
    let ids: Vec<&str> = rows.iter().map(|r| r["run_id"].as_str().unwrap()).collect();
    assert_eq!(ids, newest_first, "{:?}", all.body);
    assert!(
        all.body.get("next_cursor").is_none(),
        "one page: {:?}",
        all.body
    );
    assert!(rows.iter().all(|r| r["created_at_ms"].as_u64().is_some()));
    assert_eq!(rows[1]["agent"], "quick", "{:?}", rows[1]);
    assert_eq!(rows[0]["stop_reason"], "done", "{:?}", rows[0]);

    let paged = pages(&served, ACME, "", 2).await;
    assert_eq!(paged.len(), 3, "{paged:?}");
    assert_eq!(paged.concat(), newest_first);
    assert_eq!(
        pages(&served, ACME, "status=running", 2).await.concat(),
        [acme[2].clone()]
    );
    let stopped: Vec<String> = newest_first
        .iter()
        .filter(|id| **id != acme[2])
        .cloned()
        .collect();
    assert_eq!(
        pages(&served, ACME, "status=stopped", 3).await.concat(),
        stopped
    );
    assert_eq!(
        pages(&served, ACME, "agent=quick", 2).await.concat(),
        [acme[3].clone()]
    );
    assert_eq!(
        pages(&served, GLOBEX, "", 1).await.concat(),
        globex.iter().rev().cloned().collect::<Vec<_>>()
    );

    // Bad values name their parameter.
    for (path, field) in [
        ("/runs?status=asleep", "status"),
        ("/runs?limit=0", "limit"),
        ("/runs?limit=501", "limit"),
        ("/runs?limit=ten", "limit"),
        ("/runs?cursor=not-a-cursor", "cursor"),
        ("/runs?owner=globex", "owner"),
    ] {
        assert_eq!(field_of_400(&served, ACME, path).await, field, "{path}");
    }
    // Globex's cursor is not acme's.
    let theirs = served
        .send("GET", "/runs?limit=1", Some(GLOBEX), None)
        .await;
    let their_cursor = theirs.body["next_cursor"].as_str().unwrap();
    let path = format!("/runs?cursor={their_cursor}");
    assert_eq!(field_of_400(&served, ACME, &path).await, "cursor");
    // A cursor of acme's own, rewritten to stand at globex's newest run,
    // only positions acme's listing: none of globex's runs shows.
    let first = served.send("GET", "/runs?limit=1", Some(ACME), None).await;
    let mine = first.body["next_cursor"].as_str().unwrap();
    let mut cursor: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(mine).unwrap()).unwrap();
    cursor["r"] = json!(globex[1]);
    cursor["c"] = json!(u64::MAX / 2);
    let crafted = URL_SAFE_NO_PAD.encode(cursor.to_string());
    let reply = served
        .send("GET", &format!("/runs?cursor={crafted}"), Some(ACME), None)
        .await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    let text = reply.body.to_string();
    assert!(
        globex.iter().all(|id| !text.contains(id.as_str())),
        "{text}"
    );
    assert_eq!(reply.body["runs"].as_array().unwrap().len(), acme.len());

    // After a restart, the same list: the stopped runs from the store, the
    // sleeping one resumed.
    served.kill();
    let again = Served::start(&args, &[]);
    again.wait_status(ACME, &acme[2], "sleeping").await;
    assert_eq!(pages(&again, ACME, "", 2).await.concat(), newest_first);
    assert_eq!(
        pages(&again, ACME, "status=running", 10).await.concat(),
        [acme[2].clone()]
    );
    assert_eq!(pages(&again, GLOBEX, "", 10).await.concat().len(), 2);
}

/// Rows of run `id` in each table of the store (and its webhook's row).
fn stored_rows(store: &Path, id: &str) -> Value {
    let script = "import json, sqlite3, sys\n\
        c = sqlite3.connect(sys.argv[1])\n\
        tables = ['runs', 'session', 'ledger', 'timers', 'inbox', 'owners']\n\
        out = {t: c.execute(f'SELECT count(*) FROM {t} WHERE run_id = ?', (sys.argv[2],)).fetchone()[0] for t in tables}\n\
        out['webhook'] = c.execute('SELECT count(*) FROM agentry_webhooks WHERE id = ?', ('msg_' + sys.argv[2],)).fetchone()[0]\n\
        print(json.dumps(out))\n";
    let out = std::process::Command::new("python3")
        .args(["-c", script, path_str(store), id])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The run directories the service made under `tmp`.
fn service_dirs(tmp: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(tmp.join("agentry/service"))
        .map(|dirs| dirs.flatten().map(|d| d.path()).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_removes_old_stopped_runs_records_workdirs_and_webhooks_only() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let receiver = Receiver::start(&[200]).await;
    let config = format!("{}retention = \"2s\"\n", hooks_section());
    let path = dir.path().join("serve.toml");
    std::fs::write(&path, config).unwrap();
    let store = dir.path().join("runs.db");
    let served = Served::start(
        &["--config", path_str(&path), "--store", path_str(&store)],
        &[
            ("AGENTRY_TOKEN", TOKEN),
            (SECRET_ENV, SECRET),
            ("TMPDIR", path_str(&tmp)),
        ],
    );
    let sleeping = served.create(TOKEN, &listener_task()).await;
    let mut quick = quick_task("bye");
    quick["webhook"] = json!(receiver.url);
    quick["files"] = json!({"notes/a.txt": "kept until retention"});
    let old = served.create(TOKEN, &quick).await;
    served.wait_status(TOKEN, &old, "stopped").await;
    receiver.delivered(&format!("msg_{old}")).await;
    assert_eq!(service_dirs(&tmp).len(), 2, "{:?}", service_dirs(&tmp));
    let before = stored_rows(&store, &old);
    assert_eq!(before["runs"], 1, "{before}");
    assert!(before["session"].as_u64().unwrap() > 0, "{before}");
    assert_eq!(before["webhook"], 1, "{before}");

    // Gone within the retention and a sweep or two.
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let reply = served
            .send("GET", &format!("/runs/{old}"), Some(TOKEN), None)
            .await;
        if reply.status == 404 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{:?}", reply.body);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let after = stored_rows(&store, &old);
    assert!(
        after.as_object().unwrap().values().all(|n| *n == 0),
        "every row of the run is gone: {after}"
    );
    let dirs = service_dirs(&tmp);
    assert_eq!(
        dirs.len(),
        1,
        "only the live run's directory stays: {dirs:?}"
    );
    let listed = served.send("GET", "/runs", Some(TOKEN), None).await;
    let ids: Vec<&str> = listed.body["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [sleeping.as_str()]);
    // The live run is untouched, however old.
    tokio::time::sleep(Duration::from_secs(3)).await;
    served.wait_status(TOKEN, &sleeping, "sleeping").await;
    assert_eq!(stored_rows(&store, &sleeping)["runs"], 1);
}

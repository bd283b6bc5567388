//! A model run over TLS, killed mid-turn, resumed with no flags: the run's
//! stored policy keeps the task's `ca_cert`, so the resumed process trusts the
//! same server and the run ends `done`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentry_models::Provider;

use super::hosted::{CLEARED, base, hosted_task, key, run, spec};
use crate::server::{MockServer, Reply};
use crate::sse::one_call;
use crate::tls_server::{TestCa, TlsServer};
use crate::*;

/// Generous: the first process needs two model turns over TLS.
const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_model_run_still_trusts_the_tasks_ca_cert() {
    let openai = Provider::OpenAi;
    let tmp = tempfile::tempdir().unwrap();
    let ca = TestCa::new("agentry resume test CA").unwrap();
    let tls = TlsServer::new(ca.server_config().unwrap());
    // The second turn is held (never released): the first process is killed in it.
    let held = Arc::new(tokio::sync::Notify::new());
    let write = || {
        Reply::sse(one_call(
            "write",
            "fs_write",
            r#"{"path":"sum.txt","content":"23"}"#,
        ))
    };
    let turns = vec![
        Reply::sse(one_call("read", "fs_read", r#"{"path":"numbers.txt"}"#)),
        write().hold_after(0, held),
        write(),
        Reply::sse(one_call("fin", "task_finish", r#"{"answer":"sum=23"}"#)),
    ];
    let server = MockServer::start_tls(turns, &tls).await.unwrap();
    let task = hosted_task(tmp.path(), spec(openai), &base(openai, &server), "ca.pem");
    ca.write_pem(&task, "ca.pem").unwrap();
    let store = tmp.path().join("runs.db");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentry"));
    for var in CLEARED {
        cmd.env_remove(var);
    }
    let mut first = cmd
        .args([
            "run",
            path_str(&task),
            "--store",
            path_str(&store),
            "--run-id",
            "tls-1",
        ])
        .args(["--workdir", path_str(&tmp.path().join("run")), "--json"])
        .env(key(openai).0, key(openai).1)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + WAIT;
    while server.received().len() < 2 {
        assert!(
            Instant::now() < deadline,
            "the first process never sent its second turn"
        );
        assert!(
            first.try_wait().unwrap().is_none(),
            "the first process ended early"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.kill().unwrap();
    first.wait().unwrap();

    let args = ["resume", "tls-1", "--store", path_str(&store), "--json"];
    let out = run(args, &[key(openai)]).await;

    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout} {}", stderr(&out));
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["stop_reason"], "done");
    assert_eq!(server.received().len(), 4);
    assert_eq!(tls.failed_handshakes(), 0);
}

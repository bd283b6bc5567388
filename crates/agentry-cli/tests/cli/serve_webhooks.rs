//! `agentry serve`'s completion webhooks: a run created with `"webhook"`
//! gets one POST when it stops, signed per Standard Webhooks and verified
//! here by an independent implementation (the `standardwebhooks` package
//! from PyPI, installed once into `target/pydeps`), retried after a 500 with
//! the same `webhook-id`, and delivered after a kill and a restart; a URL to
//! a host serve.toml does not allow is 400 naming the field; without its
//! secret the server does not start. Receivers bind 127.0.0.1.

use std::sync::Mutex;
use std::time::Duration;

use serde_json::json;

use super::receiver::{Post, Receiver};
use super::serve::{Served, refused};
use crate::*;

pub(super) const TOKEN: &str = "hooks-token-7c1e";
/// The specification's example secret.
pub(super) const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
pub(super) const SECRET_ENV: &str = "SERVE_TEST_WEBHOOK_SECRET";

/// `[serve]` sending webhooks to 127.0.0.1 signed with [`SECRET`].
pub(super) fn hooks_section() -> String {
    format!("[serve]\nwebhook_hosts = [\"127.0.0.1\"]\nwebhook_secret_env = \"{SECRET_ENV}\"\n")
}

/// `agentry serve` with `config` and the store `dir/runs.db`.
pub(super) fn start(dir: &Path, config: &str, env: &[(&str, &str)]) -> Served {
    let path = dir.join("serve.toml");
    std::fs::write(&path, config).unwrap();
    let store = dir.join("runs.db");
    let mut env = env.to_vec();
    env.push(("AGENTRY_TOKEN", TOKEN));
    env.push((SECRET_ENV, SECRET));
    Served::start(
        &["--config", path_str(&path), "--store", path_str(&store)],
        &env,
    )
}

/// An inline task that answers at once and stops `done`.
pub(super) fn quick_task(answer: &str) -> Value {
    json!({
        "goal": "answer",
        "budget": {"max_steps": 3},
        "script": {"turns": [{"final": answer}]}
    })
}

/// `dir/tasks/quick`: an event-driven agent that, at its first message,
/// finishes with the answer "agent done".
pub(super) fn quick_agent(dir: &Path) {
    let task = dir.join("tasks/quick");
    std::fs::create_dir_all(&task).unwrap();
    std::fs::write(
        task.join("task.toml"),
        "goal = \"answer\"\n[budget]\nmax_steps = 3\n[driver]\nmode = \"events\"\n",
    )
    .unwrap();
    let finish = json!({"id": "fin", "name": "task.finish", "arguments": {"answer": "agent done"}});
    std::fs::write(
        task.join("script.json"),
        json!({"turns": [{"tool_calls": [finish]}]}).to_string(),
    )
    .unwrap();
}

/// The `standardwebhooks` package from PyPI, in `target/pydeps` (installed
/// there once, by `.ci/run` or the first test that needs it).
fn standardwebhooks() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("../pydeps");
    static INSTALL: Mutex<()> = Mutex::new(());
    let _once = INSTALL.lock().unwrap();
    if !dir.join("standardwebhooks").is_dir() {
        let out = std::process::Command::new("python3")
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(["--target", path_str(&dir), "standardwebhooks==1.1.0"])
            .output()
            .expect("python3 runs");
        assert!(
            out.status.success(),
            "the standardwebhooks package (the independent verifier) could not be installed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    dir
}

/// Verifies every delivery with `standardwebhooks` (`Webhook(secret).verify`,
/// which also checks the timestamp is recent); the payloads it returns.
pub(super) fn verify_independently(deliveries: &[Post]) -> Vec<Value> {
    let cases: Vec<Value> = deliveries
        .iter()
        .map(|d| {
            json!({"body": d.body, "headers": {
                "webhook-id": d.header("webhook-id"),
                "webhook-timestamp": d.header("webhook-timestamp"),
                "webhook-signature": d.header("webhook-signature"),
            }})
        })
        .collect();
    let script = "import json, sys\n\
        from standardwebhooks.webhooks import Webhook\n\
        hook = Webhook(sys.argv[1])\n\
        print(json.dumps([hook.verify(c['body'], c['headers']) for c in json.load(sys.stdin)]))\n";
    let mut child = std::process::Command::new("python3")
        .args(["-c", script, SECRET])
        .env("PYTHONPATH", standardwebhooks())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(Value::Array(cases).to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "standardwebhooks refused a delivery: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_is_signed_verifiably_retried_after_a_500_and_delivered_once() {
    let dir = tempfile::tempdir().unwrap();
    quick_agent(dir.path());
    // The first attempt of each webhook gets a 500, every later one a 200.
    let receiver = Receiver::start(&[500, 500, 200]).await;
    let config = format!(
        "{}[agents.quick]\ntask = \"tasks/quick\"\n",
        hooks_section()
    );
    let served = start(dir.path(), &config, &[]);

    // A URL serve.toml does not allow, or no URL at all, is 400 naming it.
    for url in [
        json!("http://10.0.0.1/hook"),
        json!("file:///etc/passwd"),
        json!(3),
    ] {
        let mut body = quick_task("x");
        body["webhook"] = url.clone();
        let reply = served.send("POST", "/runs", Some(TOKEN), Some(&body)).await;
        assert_eq!(reply.status, 400, "{url}: {:?}", reply.body);
        assert_eq!(reply.body["error"]["field"], "webhook", "{:?}", reply.body);
    }

    let mut inline = quick_task("forty-two");
    inline["webhook"] = json!(receiver.url);
    let first = served.create(TOKEN, &inline).await;
    let second = served
        .create(
            TOKEN,
            &json!({"agent": "quick", "input": "go", "webhook": receiver.url}),
        )
        .await;
    let shown = served.wait_status(TOKEN, &first, "stopped").await;

    let one = receiver.delivered(&format!("msg_{first}")).await;
    let two = receiver.delivered(&format!("msg_{second}")).await;
    // No attempt after the 200.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for (run, tries) in [(&first, &one), (&second, &two)] {
        let all: Vec<Post> = receiver
            .posts()
            .into_iter()
            .filter(|d| d.header("webhook-id") == format!("msg_{run}"))
            .collect();
        assert_eq!(all.len(), tries.len(), "{all:?}");
        let answers: Vec<u16> = all.iter().map(|d| d.answered).collect();
        assert_eq!(
            answers.iter().filter(|a| **a < 300).count(),
            1,
            "{answers:?}"
        );
        assert_eq!(answers.last(), Some(&200), "{answers:?}");
        assert!(answers.len() >= 2, "retried after the 500: {answers:?}");
        // Every attempt, the failed one too, verifies independently.
        let payloads = verify_independently(&all);
        for payload in &payloads {
            assert_eq!(payload["type"], "run.stopped", "{payload}");
            assert_eq!(payload["data"]["run_id"], json!(run), "{payload}");
            assert_eq!(payload["data"]["status"], "stopped", "{payload}");
            assert_eq!(payload["data"]["stop_reason"], "done", "{payload}");
        }
    }
    let inline_payload = serde_json::from_str::<Value>(&one[0].body).unwrap();
    assert_eq!(inline_payload["data"]["answer"], "forty-two");
    assert_eq!(inline_payload["data"]["answer"], shown["outcome"]["answer"]);
    assert_eq!(inline_payload["data"]["steps"], shown["outcome"]["steps"]);
    let agent_payload = serde_json::from_str::<Value>(&two[0].body).unwrap();
    assert_eq!(agent_payload["data"]["agent"], "quick");
    assert_eq!(agent_payload["data"]["answer"], "agent done");

    // A signature under another secret is refused by the same verifier.
    let mut forged = one[0].clone();
    forged.headers.insert(
        "webhook-signature".into(),
        "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=".into(),
    );
    let caught = std::panic::catch_unwind(|| verify_independently(&[forged]));
    assert!(caught.is_err(), "the verifier accepted a forged signature");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_not_delivered_before_a_kill_is_delivered_after_the_restart_with_the_same_id() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start(&[503]).await;
    let config = hooks_section();
    let served = start(dir.path(), &config, &[]);
    // Stops at once; its receiver is down (503).
    let mut stops = quick_task("early");
    stops["webhook"] = json!(receiver.url);
    let early = served.create(TOKEN, &stops).await;
    // Sleeps until told: it stops after the restart.
    let mut sleeps = super::serve::listener_task();
    sleeps["webhook"] = json!(receiver.url);
    let late = served.create(TOKEN, &sleeps).await;
    served.wait_status(TOKEN, &late, "sleeping").await;
    let of_early = |d: &Post| d.header("webhook-id") == format!("msg_{early}");
    receiver
        .until("never attempted", |posts| posts.iter().any(of_early))
        .await;
    served.kill();
    let before: Vec<Post> = receiver.posts();
    assert!(before.iter().all(|d| d.answered == 503), "{before:?}");
    assert!(
        !before
            .iter()
            .any(|d| d.header("webhook-id") == format!("msg_{late}")),
        "a sleeping run has no webhook yet"
    );

    receiver.answer(200);
    let served = start(dir.path(), &config, &[]);
    let after = receiver.delivered(&format!("msg_{early}")).await;
    assert!(after.len() >= 2, "{after:?}");
    assert!(
        after.iter().all(|d| d.body == after[0].body),
        "one webhook, one body"
    );
    verify_independently(&after);

    // The run resumed after the restart keeps its webhook when it stops.
    let reply = served
        .send(
            "POST",
            &format!("/runs/{late}/interrupt"),
            Some(TOKEN),
            Some(&json!({"action": "abort"})),
        )
        .await;
    assert_eq!(reply.status, 202, "{:?}", reply.body);
    let late_hooks = receiver.delivered(&format!("msg_{late}")).await;
    assert_eq!(late_hooks.len(), 1, "{late_hooks:?}");
    let payload = &verify_independently(&late_hooks)[0];
    assert_eq!(payload["data"]["stop_reason"], "user_abort", "{payload}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let total = receiver.posts().iter().filter(|d| d.answered < 300).count();
    assert_eq!(total, 2, "one delivery per run: {:?}", receiver.posts());
}

#[test]
fn serve_refuses_to_start_without_a_usable_webhook_secret() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("serve.toml");
    std::fs::write(&path, hooks_section()).unwrap();
    let store = dir.path().join("runs.db");
    let args = ["--config", path_str(&path), "--store", path_str(&store)];
    for env in [
        vec![("AGENTRY_TOKEN", TOKEN)],
        vec![("AGENTRY_TOKEN", TOKEN), (SECRET_ENV, "whsec_not base64!")],
        vec![("AGENTRY_TOKEN", TOKEN), (SECRET_ENV, "whsec_c2hvcnQ=")],
    ] {
        let out = refused(&args, &env);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{env:?}: {err}");
        assert!(err.contains("serve.webhook_secret_env"), "{err}");
        assert!(!err.contains("c2hvcnQ"), "the secret is never shown: {err}");
    }
}

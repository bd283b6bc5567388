//! The adapters against the maintained mock server `@copilotkit/aimock` (a real
//! third-party implementation of both wire protocols), on the sum task through
//! the runtime. Ignored by default (the peer is an npm package): `.ci/run`
//! installs it, sets `AIMOCK_DIR` and runs these with `--ignored`. Run
//! with `AIMOCK_DIR` unset or unusable, they fail saying so.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agentry::{Runtime, StopReason};
use agentry_models::{AnthropicPolicy, ModelConfig, OpenAiPolicy, Policy};
use agentry_test_support::TestTask;
use serde_json::{Value, json};

use super::server::TestError;

/// Kills the mock server when the test ends, however it ends.
struct Llmock {
    child: Child,
    addr: SocketAddr,
    _fixtures: tempfile::TempDir,
}

impl Drop for Llmock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The mock server's binary under `AIMOCK_DIR`: an error when the variable is
/// unset or names a folder without it (a missing peer fails, never passes).
fn llmock_bin() -> Result<PathBuf, TestError> {
    let dir = std::env::var_os("AIMOCK_DIR").ok_or(
        "AIMOCK_DIR is not set: point it at a folder where `npm install @copilotkit/aimock@1.43.0` ran (.ci/run does)",
    )?;
    let bin = PathBuf::from(dir).join("node_modules/.bin/llmock");
    if !bin.is_file() {
        return Err(format!(
            "AIMOCK_DIR is set but {} does not exist: run `npm install --prefix $AIMOCK_DIR @copilotkit/aimock@1.43.0`",
            bin.display()
        )
        .into());
    }
    Ok(bin)
}

/// Three turns keyed by conversation depth (assistant messages so far), so the
/// same fixtures serve both providers.
fn fixtures() -> Value {
    let turn = |n: u64, id: &str, name: &str, args: Value| {
        json!({"match": {"turnIndex": n}, "response": {"toolCalls": [
            {"id": id, "name": name, "arguments": args.to_string()}]}})
    };
    json!({"fixtures": [
        turn(0, "call_read", "fs_read", json!({"path": "numbers.txt"})),
        turn(1, "call_write", "fs_write", json!({"path": "sum.txt", "content": "23"})),
        turn(2, "call_finish", "task_finish", json!({"answer": "sum=23"})),
    ]})
}

async fn start(extra: &[&str]) -> Result<Llmock, TestError> {
    let bin = llmock_bin()?;
    let fixtures = tempfile::tempdir()?;
    std::fs::write(fixtures.path().join("sum.json"), fixtures_text()?)?;
    // Pick a free port, then hand it over (a tiny race another process could win;
    // the readiness wait below would then fail loudly).
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let child = Command::new(bin)
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-c",
            "5",
            "--log-level",
            "warn",
            "-f",
        ])
        .arg(fixtures.path())
        .args(extra)
        .stdout(Stdio::null())
        .spawn()?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let server = Llmock {
        child,
        addr,
        _fixtures: fixtures,
    };
    let started = Instant::now();
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if started.elapsed() > Duration::from_secs(20) {
            return Err("llmock did not start listening within 20 s".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(server)
}

fn fixtures_text() -> Result<String, TestError> {
    Ok(serde_json::to_string_pretty(&fixtures())?)
}

async fn run_sum(policy: impl Policy) -> Result<(), TestError> {
    let task = TestTask::sum()?;
    let outcome = Runtime::with_builtins()?.run(task.config(), policy).await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(outcome.answer.as_deref(), Some("sum=23"));
    assert_eq!(task.read_file("sum.txt")?, "23");
    Ok(())
}

async fn journal(addr: SocketAddr) -> Result<Vec<Value>, TestError> {
    agentry_models::install_crypto_provider();
    let client = reqwest::Client::new();
    let v: Value = client
        .get(format!("http://{addr}/__aimock/journal"))
        .send()
        .await?
        .json()
        .await?;
    Ok(v.as_array().cloned().unwrap_or_default())
}

#[tokio::test]
#[ignore = "needs AIMOCK_DIR (see .ci/run)"]
async fn openai_adapter_finishes_the_sum_task_against_aimock() -> Result<(), TestError> {
    let server = start(&[]).await?;
    let config = ModelConfig::new("gpt-test", format!("http://{}/v1", server.addr)).api_key("k");
    run_sum(OpenAiPolicy::new(config)?).await?;
    let journal = journal(server.addr).await?;
    assert_eq!(journal.len(), 3, "{journal:#?}");
    // The last request carries the write's result under the model's call id.
    let text = journal[2].to_string();
    assert!(
        text.contains("call_write") && text.contains("\"tool\""),
        "{text}"
    );
    Ok(())
}

#[tokio::test]
#[ignore = "needs AIMOCK_DIR (see .ci/run)"]
async fn anthropic_adapter_finishes_the_sum_task_against_aimock() -> Result<(), TestError> {
    let server = start(&[]).await?;
    let config = ModelConfig::new("claude-test", format!("http://{}", server.addr)).api_key("k");
    run_sum(AnthropicPolicy::new(config)?).await?;
    let journal = journal(server.addr).await?;
    assert_eq!(journal.len(), 3, "{journal:#?}");
    // aimock journals requests in its normalized (chat) shape; the Anthropic wire
    // shape itself is asserted against the scripted server in `anthropic.rs`.
    assert_eq!(journal[2]["path"], "/v1/messages");
    let text = journal[2].to_string();
    assert!(text.contains("call_write"), "{text}");
    Ok(())
}

/// aimock's chaos mode answers every request 429 with `Retry-After: 1`: the
/// adapter waits as told, retries within its budget, then fails (non-fatally).
#[tokio::test]
#[ignore = "needs AIMOCK_DIR (see .ci/run)"]
async fn rate_limits_from_aimock_are_retried_after_retry_after_then_given_up()
-> Result<(), TestError> {
    let server = start(&["--chaos-ratelimit", "1"]).await?;
    let config = ModelConfig::new("gpt-test", format!("http://{}/v1", server.addr))
        .api_key("k")
        .retry(agentry_models::RetryConfig {
            max_retries: 1,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_secs(5),
        });
    let mut policy = OpenAiPolicy::new(config)?;
    let started = Instant::now();
    let out = super::sse::decide(&mut policy, &[]).await;
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "Retry-After was not honoured"
    );
    match out.decision {
        agentry::Decision::Failed { message, fatal } => {
            assert!(!fatal);
            assert!(
                message.contains("429") && message.contains("gave up after 2 attempts"),
                "{message}"
            );
        }
        other @ (agentry::Decision::ToolCalls { .. } | agentry::Decision::Final { .. }) => {
            return Err(format!("expected Failed, got {other:?}").into());
        }
    }
    Ok(())
}

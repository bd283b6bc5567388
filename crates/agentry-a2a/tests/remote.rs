//! `agentry-a2a` against a real A2A 1.0 agent: tests/peers/echo_agent.py on
//! the official Python SDK (a2a-sdk), started per test on 127.0.0.1 with the
//! interpreter `A2A_PYTHON` names (.ci/run makes its venv and sets it).

// Test code: a failed unwrap is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentry_a2a::{A2aClient, A2aError, A2aOptions, A2aTool, RpcErrorKind, TaskState, discover};
use agentry_protocol::ErrorCode;
use agentry_protocol::tool::Effect;
use agentry_tools::fs::WorkRoot;
use agentry_tools::{Tool, ToolContext};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "s3cret-for-tests";

/// The test agent, killed when dropped.
struct Agent {
    _child: tokio::process::Child,
    base: String,
    record: PathBuf,
    dir: tempfile::TempDir,
}

impl Agent {
    async fn start() -> Agent {
        let python = std::env::var("A2A_PYTHON").unwrap_or_else(|_| {
            panic!(
                "A2A_PYTHON is unset: it must name a Python with `a2a-sdk[http-server]==1.3.0` and uvicorn \
                 (.ci/run makes .ci/a2a-venv and sets it)"
            )
        });
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/echo_agent.py");
        let dir = tempfile::tempdir().unwrap();
        let record = dir.path().join("record.txt");
        let stderr = dir.path().join("stderr.txt");
        let mut child = tokio::process::Command::new(&python)
            .arg(&script)
            .arg(TOKEN)
            .arg(&record)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("A2A_PYTHON={python} does not start: {e}"));
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = tokio::time::timeout(Duration::from_secs(60), lines.next_line()).await;
        let port = match first {
            Ok(Ok(Some(line))) if line.starts_with("PORT ") => line[5..].trim().to_string(),
            other => panic!(
                "the A2A test agent did not start with A2A_PYTHON={python} ({other:?}); its stderr:\n{}",
                std::fs::read_to_string(&stderr).unwrap_or_default()
            ),
        };
        Agent {
            _child: child,
            base: format!("http://127.0.0.1:{port}"),
            record,
            dir,
        }
    }

    fn options(&self) -> A2aOptions {
        A2aOptions::default().bearer(TOKEN)
    }

    async fn tool(&self) -> A2aTool {
        A2aTool::discover("echo", &self.base, &self.options())
            .await
            .unwrap()
            .poll_interval(Duration::from_millis(50))
    }

    async fn client(&self) -> A2aClient {
        discover(&self.base, &self.options()).await.unwrap().client
    }

    /// The task ids the agent saw a cancel for.
    fn cancels(&self) -> Vec<String> {
        std::fs::read_to_string(&self.record)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.strip_prefix("cancel ").map(str::to_string))
            .collect()
    }

    fn ctx(&self, cancel: CancellationToken) -> ToolContext {
        let workdir: Arc<Path> = Arc::from(self.dir.path());
        ToolContext {
            run_id: Arc::from("run-1"),
            call_id: "call-1".to_string(),
            root: Arc::new(WorkRoot::open(&workdir).unwrap()),
            artifacts: Arc::from(workdir.join(".agentry").as_path()),
            workdir,
            cancel,
            attempt: 1,
            operation_id: Arc::from("op-1"),
            agents: None,
            processes: None,
            progress: None,
            traceparent: None,
            sandbox: None,
        }
    }
}

fn str_of<'a>(data: &'a Value, key: &str) -> &'a str {
    data[key]
        .as_str()
        .unwrap_or_else(|| panic!("no {key} in {data}"))
}

async fn eventually(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < limit, "not within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
#[ignore = "needs the a2a-sdk Python package (.ci/run installs it); .ci/run runs it"]
async fn a_discovered_agent_is_a_tool_whose_call_completes_with_its_text() {
    let agent = Agent::start().await;
    // The base URL and the card's own URL find the same agent.
    let by_card = discover(
        &format!("{}/.well-known/agent-card.json", agent.base),
        &agent.options(),
    )
    .await
    .unwrap();
    assert_eq!(by_card.card.name, "echo");
    assert_eq!(by_card.client.url(), format!("{}/", agent.base));

    let tool = agent.tool().await;
    let contract = tool.contract();
    assert_eq!(contract.name, "echo.ask");
    assert_eq!(contract.effect, Effect::IrreversibleExternal);
    assert!(
        contract.description.contains("echoes"),
        "{}",
        contract.description
    );
    let out = tool
        .call(
            json!({"message": "hello"}),
            &agent.ctx(CancellationToken::new()),
        )
        .await
        .unwrap();
    assert_eq!(str_of(&out.data, "text"), "echo: hello", "{}", out.data);
    assert_eq!(str_of(&out.data, "state"), "TASK_STATE_COMPLETED");
    let task = agent
        .client()
        .await
        .get_task(str_of(&out.data, "task_id"))
        .await
        .unwrap();
    assert_eq!(task.status.state, TaskState::Completed);
    assert_eq!(task.artifact_text(), "echo: hello");

    // An overridden effect is the contract's.
    let read_only = agent.tool().await.effect(Effect::ReadOnly);
    assert_eq!(read_only.contract().effect, Effect::ReadOnly);
}

#[tokio::test]
#[ignore = "needs the a2a-sdk Python package (.ci/run installs it); .ci/run runs it"]
async fn a_wrong_bearer_token_is_a_typed_401() {
    let agent = Agent::start().await;
    let wrong = A2aOptions::default().bearer("not-the-token");
    // The card is public; the RPC is not.
    let found = discover(&agent.base, &wrong).await.unwrap();
    let err = found
        .client
        .get_task("any")
        .await
        .expect_err("a wrong token must be refused");
    assert!(
        matches!(err, A2aError::HttpStatus { status: 401, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("401"), "{err}");
    let tool = A2aTool::discover("echo", &agent.base, &wrong)
        .await
        .unwrap();
    let err = tool
        .call(
            json!({"message": "hello"}),
            &agent.ctx(CancellationToken::new()),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Eperm, "{err}");
    assert!(err.message.contains("401"), "{err}");
    // No credentials at all: the same.
    let none = discover(&agent.base, &A2aOptions::default()).await.unwrap();
    let err = none.client.get_task("any").await.unwrap_err();
    assert!(
        matches!(err, A2aError::HttpStatus { status: 401, .. }),
        "{err:?}"
    );
}

#[tokio::test]
#[ignore = "needs the a2a-sdk Python package (.ci/run installs it); .ci/run runs it"]
async fn a_question_is_a_result_and_the_answer_continues_the_same_task() {
    let agent = Agent::start().await;
    let tool = agent.tool().await;
    let ctx = agent.ctx(CancellationToken::new());
    let asked = tool.call(json!({"message": "ask"}), &ctx).await.unwrap();
    assert_eq!(str_of(&asked.data, "state"), "TASK_STATE_INPUT_REQUIRED");
    assert_eq!(asked.data["input_required"], json!(true));
    assert_eq!(str_of(&asked.data, "text"), "which one?");
    let task_id = str_of(&asked.data, "task_id").to_string();
    assert!(str_of(&asked.data, "next").contains(&task_id));

    let answered = tool
        .call(json!({"message": "the red one", "task_id": task_id}), &ctx)
        .await
        .unwrap();
    assert_eq!(str_of(&answered.data, "state"), "TASK_STATE_COMPLETED");
    assert_eq!(str_of(&answered.data, "task_id"), task_id);
    assert_eq!(str_of(&answered.data, "text"), "echo: the red one");

    // An unknown task is the model's mistake, named.
    let err = tool
        .call(json!({"message": "x", "task_id": "no-such-task"}), &ctx)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Einval, "{err}");
    let err = agent
        .client()
        .await
        .get_task("no-such-task")
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            A2aError::Rpc {
                kind: RpcErrorKind::TaskNotFound,
                code: -32001,
                ..
            }
        ),
        "{err:?}"
    );
    // A completed task cannot be cancelled.
    let err = agent
        .client()
        .await
        .cancel_task(&task_id)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            A2aError::Rpc {
                kind: RpcErrorKind::TaskNotCancelable,
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
#[ignore = "needs the a2a-sdk Python package (.ci/run installs it); .ci/run runs it"]
async fn a_cancelled_call_cancels_its_remote_task() {
    let agent = Agent::start().await;
    let tool = agent.tool().await;
    let client = agent.client().await;

    // Cancelled by its token (the executor at a deadline or an abort).
    let token = CancellationToken::new();
    let ctx = agent.ctx(token.clone());
    let call = tool.call(json!({"message": "slow"}), &ctx);
    let cancel = async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        token.cancel();
    };
    let (out, ()) = tokio::join!(call, cancel);
    let err = out.unwrap_err();
    assert_eq!(err.code, ErrorCode::Ecanceled, "{err}");
    let cancels = agent.cancels();
    assert_eq!(cancels.len(), 1, "the agent saw {cancels:?}");
    assert!(err.message.contains(&cancels[0]), "{err}");
    let task = client.get_task(&cancels[0]).await.unwrap();
    assert_eq!(task.status.state, TaskState::Canceled);

    // Dropped (the executor drops a call past its grace).
    let dropped = tokio::time::timeout(
        Duration::from_millis(1500),
        tool.call(
            json!({"message": "slow"}),
            &agent.ctx(CancellationToken::new()),
        ),
    )
    .await;
    assert!(dropped.is_err(), "the slow call ended: {dropped:?}");
    eventually(Duration::from_secs(10), "a second CancelTask", || {
        agent.cancels().len() == 2
    })
    .await;
    let second = agent.cancels()[1].clone();
    assert_eq!(until_terminal(&client, &second).await, TaskState::Canceled);
}

/// The task's state once terminal (polled for up to 10 s).
async fn until_terminal(client: &A2aClient, id: &str) -> TaskState {
    let start = Instant::now();
    loop {
        let state = client.get_task(id).await.unwrap().status.state;
        if state.is_terminal() || start.elapsed() > Duration::from_secs(10) {
            return state;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
#[ignore = "needs the a2a-sdk Python package (.ci/run installs it); .ci/run runs it"]
async fn a_card_without_a_1_0_jsonrpc_interface_is_a_typed_error() {
    let agent = Agent::start().await;
    let err = discover(&format!("{}/old", agent.base), &agent.options())
        .await
        .unwrap_err();
    assert!(matches!(err, A2aError::NoJsonRpc10 { .. }), "{err:?}");
    assert!(err.to_string().contains("JSONRPC 0.3.0"), "{err}");
    let err = discover(&format!("{}/nothing", agent.base), &agent.options())
        .await
        .unwrap_err();
    assert!(
        matches!(err, A2aError::CardStatus { status: 404, .. }),
        "{err:?}"
    );
}

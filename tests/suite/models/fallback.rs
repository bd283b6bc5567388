//! The fallback chain through the real runtime, against two strict mock
//! servers: a primary that is down, or answers 503 (and a 429 whose
//! `Retry-After` is over the limit), passes every turn to the second model,
//! and the trace names the model that decided each step; a primary that
//! answers 400 keeps its turn (it fails as it would without a chain).

use agentry::{Runtime, StopReason};
use agentry_models::{ChainModel, FallbackPolicy, ModelConfig, Provider};
use agentry_test_support::TestTask;
use serde_json::Value;

use super::server::{MockServer, Reply, TestError};
use super::sse::{anthropic_call, config, one_call};

/// A URL nothing answers: a port held by a socket bound but never listening,
/// so a connection is refused and no other test's server can take the port
/// while the returned socket lives (a port bound and closed again could be
/// handed to another server, which would then answer for the "down" model).
fn refused_url() -> Result<(String, tokio::net::TcpSocket), TestError> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))?;
    let addr = socket.local_addr()?;
    Ok((format!("http://{addr}"), socket))
}

fn named(base: &str, model: &str) -> ModelConfig {
    let mut c = config(base);
    c.model = model.to_string();
    c
}

/// The sum task's three turns: read, write, finish.
fn sum_turns(call: fn(&str, &str, &str) -> Vec<String>) -> Vec<Reply> {
    vec![
        Reply::sse(call("read", "fs_read", r#"{"path":"numbers.txt"}"#)),
        Reply::sse(call(
            "write",
            "fs_write",
            r#"{"path":"sum.txt","content":"23"}"#,
        )),
        Reply::sse(call("fin", "task_finish", r#"{"answer":"sum=23"}"#)),
    ]
}

/// The model of each step record of the trace, in step order.
fn step_models(task: &TestTask) -> Result<Vec<String>, TestError> {
    Ok(task
        .read_trace()?
        .iter()
        .filter(|r| r.get("decision").is_some())
        .map(|r| r["model"].as_str().unwrap_or_default().to_string())
        .collect())
}

async fn run_chain(task: &TestTask, chain: Vec<ChainModel>) -> Result<(), TestError> {
    let policy = FallbackPolicy::new(chain)?;
    let outcome = Runtime::with_builtins()?.run(task.config(), policy).await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(outcome.answer.as_deref(), Some("sum=23"));
    assert_eq!(task.read_file("sum.txt")?, "23");
    Ok(())
}

#[tokio::test]
async fn a_down_primary_passes_every_turn_to_the_second_model() -> Result<(), TestError> {
    let (down, _held) = refused_url()?;
    let second = MockServer::start(sum_turns(anthropic_call)).await?;
    let task = TestTask::sum()?.trace();
    run_chain(
        &task,
        vec![
            ChainModel::new(Provider::OpenAi, named(&down, "primary")),
            ChainModel::new(Provider::Anthropic, named(&second.base_url, "second")),
        ],
    )
    .await?;
    assert_eq!(step_models(&task)?, ["anthropic:second"; 3]);
    assert_eq!(second.received().len(), 3);
    assert_eq!(second.rejected(), []);
    Ok(())
}

#[tokio::test]
async fn a_primary_answering_503_or_a_long_retry_after_passes_its_turns_on() -> Result<(), TestError>
{
    let busy = || {
        Reply::status(
            503,
            r#"{"type":"error","error":{"type":"overloaded_error"}}"#,
        )
    };
    // config() allows 2 retries: a turn takes three 503s, or one 429 asking
    // for an hour (over the 5 s limit).
    let primary = MockServer::start(vec![
        busy(),
        busy(),
        busy(),
        Reply::status(
            429,
            r#"{"type":"error","error":{"type":"rate_limit_error"}}"#,
        )
        .header("retry-after", "3600"),
        busy(),
        busy(),
        busy(),
    ])
    .await?;
    let second = MockServer::start(sum_turns(one_call)).await?;
    let task = TestTask::sum()?.trace();
    run_chain(
        &task,
        vec![
            ChainModel::new(Provider::Anthropic, named(&primary.base_url, "primary")),
            ChainModel::new(Provider::OpenAi, named(&second.base_url, "second")),
        ],
    )
    .await?;
    assert_eq!(step_models(&task)?, ["openai:second"; 3]);
    assert_eq!(
        primary.received().len(),
        7,
        "every turn went to the primary first"
    );
    assert_eq!(primary.rejected(), []);
    assert_eq!(second.rejected(), []);
    Ok(())
}

/// A 400 is this request's problem: the turn fails at the primary (the model
/// sees the failure next turn), the second model is never asked.
#[tokio::test]
async fn a_primary_answering_400_keeps_its_turn() -> Result<(), TestError> {
    let mut replies = vec![Reply::status(
        400,
        r#"{"error":{"message":"prompt too long","type":"invalid_request_error"}}"#,
    )];
    replies.extend(sum_turns(one_call));
    let primary = MockServer::start(replies).await?;
    let second = MockServer::start(sum_turns(anthropic_call)).await?;
    let task = TestTask::sum()?.trace();
    run_chain(
        &task,
        vec![
            ChainModel::new(Provider::OpenAi, named(&primary.base_url, "primary")),
            ChainModel::new(Provider::Anthropic, named(&second.base_url, "second")),
        ],
    )
    .await?;
    assert_eq!(step_models(&task)?, ["openai:primary"; 4]);
    let trace = task.read_trace()?;
    let first: &Value = trace.first().ok_or("empty trace")?;
    assert_eq!(first["decision"]["type"], "failed");
    assert!(
        first["decision"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("HTTP 400"),
        "{first}"
    );
    assert!(second.received().is_empty(), "the second model was asked");
    assert_eq!(primary.rejected(), []);
    Ok(())
}

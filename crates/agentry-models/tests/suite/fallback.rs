//! The fallback chain, one turn at a time, against the strict mock servers: an
//! unavailable model passes the turn on; a refused request or refused
//! credentials do not; start-up probes warn about a down model unless none
//! answers.

use agentry_models::{ChainModel, FallbackPolicy, ModelError, Provider};
use agentry_protocol::Decision;

use super::server::{MockServer, Reply, TestError};
use super::sse::{config, decide, text_turn};

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

fn chain(models: &[(Provider, &str, &str)]) -> Result<FallbackPolicy, ModelError> {
    FallbackPolicy::new(
        models
            .iter()
            .map(|(provider, model, url)| {
                let mut c = config(url);
                c.model = (*model).to_string();
                ChainModel::new(*provider, c)
            })
            .collect(),
    )
}

#[tokio::test]
async fn a_refused_connection_or_503s_pass_the_turn_to_the_next_model() -> Result<(), TestError> {
    let (down, _held) = refused_url()?;
    // config() allows 2 retries: three 503s spend them all.
    let busy = MockServer::start(vec![
        Reply::status(503, "{\"error\":\"busy\"}"),
        Reply::status(503, "{\"error\":\"busy\"}"),
        Reply::status(503, "{\"error\":\"busy\"}"),
    ])
    .await?;
    let up = MockServer::start(vec![Reply::sse(text_turn("from c"))]).await?;
    let mut policy = chain(&[
        (Provider::OpenAi, "a", &down),
        (Provider::OpenAi, "b", &busy.base_url),
        (Provider::OpenAi, "c", &up.base_url),
    ])?;
    let out = decide(&mut policy, &[]).await;
    assert_eq!(
        out.decision,
        Decision::Final {
            answer: "from c".into()
        }
    );
    assert_eq!(out.model, "openai:c");
    assert_eq!((out.usage.tokens_in, out.usage.tokens_out), (3, 2));
    assert_eq!(busy.received().len(), 3);
    assert!(busy.rejected().is_empty() && up.rejected().is_empty());
    Ok(())
}

/// A 400 (a request this model refuses) and a 401 (credentials refused) end
/// the turn at the model that answered them; the next model is never asked.
#[tokio::test]
async fn a_400_or_a_401_does_not_fall_through() -> Result<(), TestError> {
    let primary = MockServer::start(vec![
        Reply::status(400, r#"{"error":{"message":"prompt too long"}}"#),
        Reply::status(401, r#"{"error":{"message":"bad key"}}"#),
    ])
    .await?;
    let fallback = MockServer::start(vec![Reply::sse(text_turn("never"))]).await?;
    let mut policy = chain(&[
        (Provider::OpenAi, "a", &primary.base_url),
        (Provider::OpenAi, "b", &fallback.base_url),
    ])?;
    for fatal in [false, true] {
        let out = decide(&mut policy, &[]).await;
        assert_eq!(out.model, "openai:a");
        match out.decision {
            Decision::Failed { fatal: f, message } => {
                assert_eq!(f, fatal, "{message}");
                assert!(!message.contains("fallback chain"), "{message}");
            }
            other @ (Decision::ToolCalls { .. } | Decision::Final { .. }) => {
                return Err(format!("expected a failed turn, got {other:?}").into());
            }
        }
    }
    assert!(fallback.received().is_empty());
    Ok(())
}

/// When every model is unavailable, the turn fails as the last one failed
/// (non-fatal), naming the models tried.
#[tokio::test]
async fn when_every_model_is_unavailable_the_last_failure_is_the_turns() -> Result<(), TestError> {
    let ((a, _held_a), (b, _held_b)) = (refused_url()?, refused_url()?);
    let mut policy = chain(&[(Provider::Anthropic, "a", &a), (Provider::OpenAi, "b", &b)])?;
    let out = decide(&mut policy, &[]).await;
    assert_eq!(out.model, "openai:b");
    match out.decision {
        Decision::Failed { fatal, message } => {
            assert!(!fatal);
            assert!(message.starts_with("openai: request failed"), "{message}");
            assert!(
                message.contains(
                    "no model of the fallback chain was available; tried: anthropic:a, openai:b"
                ),
                "{message}"
            );
        }
        other @ (Decision::ToolCalls { .. } | Decision::Final { .. }) => {
            return Err(format!("expected a failed turn, got {other:?}").into());
        }
    }
    Ok(())
}

/// At start, a down model of a chain is reported, not an error, while another
/// answers; a chain where none answers, or a single down model, is an error.
#[tokio::test]
async fn connecting_a_chain_reports_down_models_and_fails_only_when_none_answers()
-> Result<(), TestError> {
    let (down, _held) = refused_url()?;
    let up = MockServer::start(Vec::new()).await?;
    let models = |urls: &[&str]| -> Vec<ChainModel> {
        urls.iter()
            .map(|u| ChainModel::new(Provider::OpenAi, config(u)))
            .collect()
    };
    let connected = agentry_models::connect_chain(models(&[&down, &up.base_url])).await?;
    assert_eq!(
        connected.policy.name(),
        "openai:test-model > openai:test-model"
    );
    match connected.unreachable.as_slice() {
        [ModelError::Unreachable { url, .. }] => assert!(url.starts_with(&down), "{url}"),
        other => return Err(format!("{other:?}").into()),
    }
    match agentry_models::connect_chain(models(&[&down, &down])).await {
        Err(e @ ModelError::NoneReachable { .. }) => {
            assert!(e.to_string().contains(&down), "{e}")
        }
        Err(e) => return Err(e.into()),
        Ok(_) => return Err("a chain with no server up connected".into()),
    }
    assert!(matches!(
        agentry_models::connect_chain(models(&[&down])).await,
        Err(ModelError::Unreachable { .. })
    ));
    // A chain of one is the adapter itself.
    let single = agentry_models::connect_chain(models(&[&up.base_url])).await?;
    assert_eq!(single.policy.name(), "openai:test-model");
    Ok(())
}

/// Children get the same chain, in the same order.
#[test]
fn the_child_factory_builds_the_same_chain() -> Result<(), TestError> {
    let factory = agentry_models::chain_policy_factory(vec![
        ChainModel::new(Provider::OpenAi, config("http://127.0.0.1:1/v1")),
        ChainModel::new(Provider::Anthropic, config("http://127.0.0.1:2")),
    ])?;
    let request = agentry_protocol::child::ChildRequest {
        goal: "g".into(),
        limits: Default::default(),
        grants: None,
        script: None,
        name: None,
        model: None,
    };
    let child = factory(&request).ok_or("no child policy")?;
    assert_eq!(child.name(), "openai:test-model > anthropic:test-model");
    Ok(())
}

/// A stream that stalls on every attempt is unavailability too.
#[tokio::test]
async fn a_stalling_model_passes_the_turn_on() -> Result<(), TestError> {
    let stall = || Reply::sse(text_turn("never")).stall_after(0);
    // stalling() gives up on a silent stream at 400 ms; 2 retries.
    let stuck = MockServer::start(vec![stall(), stall(), stall()]).await?;
    let up = MockServer::start(vec![Reply::sse(text_turn("from b"))]).await?;
    let mut a = super::sse::stalling(&stuck.base_url);
    a.model = "a".into();
    let mut b = config(&up.base_url);
    b.model = "b".into();
    let mut policy = FallbackPolicy::new(vec![
        ChainModel::new(Provider::OpenAi, a),
        ChainModel::new(Provider::OpenAi, b),
    ])?;
    let out = decide(&mut policy, &[]).await;
    assert_eq!(out.model, "openai:b");
    assert_eq!(
        out.decision,
        Decision::Final {
            answer: "from b".into()
        }
    );
    assert_eq!(stuck.received().len(), 3);
    Ok(())
}

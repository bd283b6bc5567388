//! Both adapters over real TLS: a CA the test makes, a server it signs, the
//! strict checker behind it. A certificate that does not verify is an error at
//! connect naming the host and rustls' reason, or a fatal turn mid-run, never
//! retried; a CA file that is missing or not PEM is an error naming its field.

use agentry_models::{
    AnthropicPolicy, ModelConfig, ModelError, OpenAiPolicy, Policy, Provider, connect,
};
use agentry_protocol::Decision;

use super::server::{MockServer, Reply, TestError};
use super::sse::{anthropic_text, config, decide, text_turn};
use super::tls_server::{TestCa, TlsServer};

/// The CA's certificate, written where a test can name it as `ca_cert`.
fn ca_file(ca: &TestCa) -> Result<(tempfile::TempDir, std::path::PathBuf), TestError> {
    let dir = tempfile::tempdir()?;
    let path = ca.write_pem(dir.path(), "ca.pem")?;
    Ok((dir, path))
}

fn reply(provider: Provider, text: &str) -> Reply {
    match provider {
        Provider::OpenAi => Reply::sse(text_turn(text)),
        Provider::Anthropic => Reply::sse(anthropic_text(text)),
    }
}

/// The adapter alone, built without connect's probe.
fn adapter(provider: Provider, config: ModelConfig) -> Result<Box<dyn Policy>, ModelError> {
    Ok(match provider {
        Provider::OpenAi => Box::new(OpenAiPolicy::new(config)?),
        Provider::Anthropic => Box::new(AnthropicPolicy::new(config)?),
    })
}

/// The CA given as `ca_cert`: connect's probe and a streamed turn go through.
#[tokio::test]
async fn both_adapters_stream_a_turn_over_tls_from_a_ca_given_as_ca_cert() -> Result<(), TestError>
{
    for provider in [Provider::OpenAi, Provider::Anthropic] {
        let ca = TestCa::new("agentry test CA")?;
        let tls = TlsServer::new(ca.server_config()?);
        let server = MockServer::start_tls(vec![reply(provider, "over tls")], &tls).await?;
        let (_dir, pem) = ca_file(&ca)?;
        let mut policy = connect(provider, config(&server.base_url).ca_cert(pem)).await?;

        let out = decide(&mut *policy, &[]).await;

        assert!(
            matches!(&out.decision, Decision::Final { answer } if answer == "over tls"),
            "{provider:?}: {:?}",
            out.decision
        );
        assert_eq!(server.received().len(), 1, "{provider:?}");
        assert_eq!(tls.failed_handshakes(), 0, "{provider:?}");
    }
    Ok(())
}

/// A server whose CA nobody trusts: connect fails naming 127.0.0.1:PORT and the
/// reason, after one handshake; the server never sees a request.
#[tokio::test]
async fn an_unknown_ca_fails_at_connect_naming_host_and_reason() -> Result<(), TestError> {
    for provider in [Provider::OpenAi, Provider::Anthropic] {
        let ca = TestCa::new("a CA nobody trusts")?;
        let tls = TlsServer::new(ca.server_config()?);
        let server = MockServer::start_tls(vec![reply(provider, "never")], &tls).await?;
        let host = server.base_url.trim_start_matches("https://").to_string();

        let err = match connect(provider, config(&server.base_url)).await {
            Err(e) => e,
            Ok(_) => return Err(format!("{provider:?}: connected to an untrusted server").into()),
        };

        let text = err.to_string();
        assert!(
            matches!(&err, ModelError::Tls { host: h, reason, .. }
                if *h == host && reason.contains("invalid peer certificate: UnknownIssuer")),
            "{provider:?}: {text}"
        );
        assert!(
            text.starts_with(&host) && text.contains("SSL_CERT_FILE"),
            "{text}"
        );
        assert!(server.received().is_empty(), "{provider:?}");
        assert_eq!(
            tls.connections(),
            1,
            "{provider:?}: one handshake, no retry"
        );
    }
    Ok(())
}

/// The server's certificate changes to one from an unknown CA between two
/// turns: the second turn is a fatal failure naming the reason, after one
/// handshake (no retry), where a retried transport error would have made three.
#[tokio::test]
async fn a_certificate_that_stops_verifying_mid_run_is_fatal_and_not_retried()
-> Result<(), TestError> {
    for provider in [Provider::OpenAi, Provider::Anthropic] {
        let ca = TestCa::new("agentry test CA")?;
        let tls = TlsServer::new(ca.server_config()?);
        // Each response closes its connection, so the next turn shakes hands anew.
        let first = reply(provider, "first").header("connection", "close");
        let server = MockServer::start_tls(vec![first, reply(provider, "second")], &tls).await?;
        let (_dir, pem) = ca_file(&ca)?;
        // No probe: its connection could linger in the pool and skip the handshake.
        let mut policy = adapter(provider, config(&server.base_url).ca_cert(pem))?;
        let out = decide(&mut *policy, &[]).await;
        assert!(
            matches!(out.decision, Decision::Final { .. }),
            "{:?}",
            out.decision
        );
        let before = tls.connections();

        tls.present(TestCa::new("an impostor CA")?.server_config()?);
        let out = decide(&mut *policy, &[]).await;

        match &out.decision {
            Decision::Failed { message, fatal } => {
                assert!(*fatal, "{provider:?}: {message}");
                assert!(
                    message.contains("UnknownIssuer") && message.contains("127.0.0.1"),
                    "{message}"
                );
            }
            other @ (Decision::ToolCalls { .. } | Decision::Final { .. }) => {
                return Err(format!("{provider:?}: {other:?}").into());
            }
        }
        assert_eq!(tls.connections(), before + 1, "{provider:?}: retried");
        assert_eq!(server.received().len(), 1, "{provider:?}");
    }
    Ok(())
}

/// `ca_cert` missing, empty of certificates, or broken PEM: an error naming
/// `policy.ca_cert` and the path when the adapter is built; nothing is sent.
#[tokio::test]
async fn a_ca_cert_that_is_missing_or_not_pem_is_refused_naming_the_field() -> Result<(), TestError>
{
    let dir = tempfile::tempdir()?;
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "just some text\n")?;
    let broken = dir.path().join("broken.pem");
    std::fs::write(&broken, "-----BEGIN CERTIFICATE-----\nAAAA\n")?;
    let key_only = dir.path().join("key.pem");
    std::fs::write(&key_only, rcgen::KeyPair::generate()?.serialize_pem())?;
    let missing = dir.path().join("absent.pem");
    for (path, why) in [
        (&missing, "cannot read it"),
        (&text, "no -----BEGIN CERTIFICATE----- block"),
        (&key_only, "no -----BEGIN CERTIFICATE----- block"),
        (&broken, "not a PEM file"),
    ] {
        for provider in [Provider::OpenAi, Provider::Anthropic] {
            let config = ModelConfig::new("m", "https://127.0.0.1:9").ca_cert(path);
            let err = match connect(provider, config).await {
                Err(e) => e,
                Ok(_) => return Err(format!("{path:?} accepted").into()),
            };
            let text = err.to_string();
            assert!(
                matches!(
                    err,
                    ModelError::CaCert {
                        field: "policy.ca_cert",
                        ..
                    }
                ),
                "{text}"
            );
            assert!(
                text.contains("policy.ca_cert") && text.contains(&*path.to_string_lossy()),
                "{text}"
            );
            assert!(text.contains(why), "{why}: {text}");
        }
    }
    Ok(())
}

//! Both adapters over real TLS through the real runtime: a local HTTPS server
//! whose CA the test makes (rcgen), the strict checker behind it, the CA given
//! to the adapter as `ca_cert`. The whole sum task streams over TLS to `done`.

use agentry::{Runtime, StopReason};
use agentry_models::{Provider, connect};
use agentry_test_support::TestTask;

use super::server::{MockServer, Reply, TestError};
use super::sse::{anthropic_call, config, one_call};
use super::tls_server::{TestCa, TlsServer};

fn call(provider: Provider, id: &str, name: &str, args: &str) -> Reply {
    Reply::sse(match provider {
        Provider::OpenAi => one_call(id, name, args),
        Provider::Anthropic => anthropic_call(id, name, args),
    })
}

#[tokio::test]
async fn both_adapters_run_the_sum_task_to_done_over_tls() -> Result<(), TestError> {
    for provider in [Provider::OpenAi, Provider::Anthropic] {
        let ca = TestCa::new("agentry test CA")?;
        let tls = TlsServer::new(ca.server_config()?);
        let server = MockServer::start_tls(
            vec![
                call(provider, "read", "fs_read", r#"{"path":"numbers.txt"}"#),
                call(
                    provider,
                    "write",
                    "fs_write",
                    r#"{"path":"sum.txt","content":"23"}"#,
                ),
                call(provider, "fin", "task_finish", r#"{"answer":"sum=23"}"#),
            ],
            &tls,
        )
        .await?;
        assert!(server.base_url.starts_with("https://127.0.0.1:"));
        let certs = tempfile::tempdir()?;
        let pem = ca.write_pem(certs.path(), "ca.pem")?;
        let task = TestTask::sum()?;
        let policy = connect(provider, config(&server.base_url).ca_cert(pem)).await?;

        let handle = Runtime::with_builtins()?
            .start_boxed(task.config(), policy)
            .await?;
        let outcome = handle.wait().await?;

        assert_eq!(
            outcome.stop_reason,
            StopReason::Done,
            "{provider:?}: {}",
            outcome.detail
        );
        assert_eq!(outcome.answer.as_deref(), Some("sum=23"));
        assert_eq!(task.read_file("sum.txt")?, "23");
        assert_eq!(server.received().len(), 3, "{provider:?}");
        assert!(server.rejected().is_empty(), "{:?}", server.rejected());
        assert_eq!(tls.failed_handshakes(), 0);
    }
    Ok(())
}

//! A task's MCP server over real TLS, through the binary: a whole `agentry
//! run` calls a streamable-HTTP MCP server whose certificate a CA made for the
//! test signs, trusted through `SSL_CERT_FILE` or the server's `ca_cert`
//! (as the model adapters trust theirs), and refused without either: exit 2,
//! an error naming the server and how to trust its CA. (The OS roots of
//! rustls-platform-verifier honour `SSL_CERT_FILE` too; agentry reads the
//! file itself as well, as for the models, so a broken one is named.)

use std::process::Output;

use crate::tls_server::TestCa;
use crate::*;

#[path = "../../../agentry-mcp/tests/support/https.rs"]
mod https;

/// A task whose one MCP server, `secure`, is at `url`; `extra` goes in its
/// table. The script calls `secure.echo`, then finishes.
fn secure_task(url: &str, extra: &str) -> tempfile::TempDir {
    let toml = format!(
        "goal = \"echo over tls\"\n[tools]\ngrant = [\"secure.*\"]\n\
         [[tools.mcp]]\nname = \"secure\"\nurl = {url:?}\n{extra}"
    );
    let script = r#"{"turns":[
        {"tool_calls":[{"id":"e","name":"secure.echo","arguments":{"text":"over tls"}}]},
        {"tool_calls":[{"id":"f","name":"task.finish","arguments":{"answer":"echoed"}}]}]}"#;
    task_dir(&toml, script)
}

/// `agentry run TASK --no-store --json` with `SSL_CERT_FILE` set to
/// `cert_file` (or unset), off the async workers.
async fn run(task: &Path, cert_file: Option<&Path>) -> Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_agentry"));
    command
        .args(["run", path_str(task), "--no-store", "--json"])
        .current_dir(root())
        .env_remove("RUST_LOG")
        .env_remove("SSL_CERT_FILE");
    if let Some(file) = cert_file {
        command.env("SSL_CERT_FILE", file);
    }
    tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap()
}

fn report(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(out)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_mcp_server_is_trusted_through_ssl_cert_file_or_ca_cert() {
    let ca = TestCa::new("agentry MCP CLI test CA").unwrap();
    let server = https::HttpsMcp::start(&ca).await.unwrap();
    let certs = tempfile::tempdir().unwrap();
    let pem = ca.write_pem(certs.path(), "ca.pem").unwrap();

    // SSL_CERT_FILE names the CA: the run calls the server and is done.
    let task = secure_task(&server.url, "");
    let out = run(task.path(), Some(&pem)).await;
    let done = report(&out);
    assert_eq!(out.status.code(), Some(0), "{done} {}", stderr(&out));
    assert_eq!(done["stop_reason"], "done", "{done}");
    assert_eq!(done["answer"], "echoed");

    // The server's ca_cert (relative to the task directory) does it too.
    let trusting = secure_task(&server.url, "ca_cert = \"ca.pem\"\n");
    ca.write_pem(trusting.path(), "ca.pem").unwrap();
    let out = run(trusting.path(), None).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(report(&out)["stop_reason"], "done");
    assert_eq!(server.tls.failed_handshakes(), 0);

    // Neither: the start fails (exit 2) saying why and how to trust the CA.
    let out = run(task.path(), None).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    for part in [
        "MCP server secure",
        "TLS failed",
        "invalid peer certificate",
        "SSL_CERT_FILE",
        "ca_cert",
    ] {
        assert!(err.contains(part), "{part:?} missing from: {err}");
    }
    // Counted by the server's accept task, which may finish after the client.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while server.tls.failed_handshakes() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no refused handshake seen"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }

    // An SSL_CERT_FILE that is not PEM is named before anything is sent (as
    // for the models), not skipped.
    let junk = certs.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate").unwrap();
    let out = run(task.path(), Some(&junk)).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("SSL_CERT_FILE")
            && err.contains("junk.pem")
            && err.contains("MCP server secure"),
        "{err}"
    );
}

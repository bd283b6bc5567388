//! `agentry mcp --http 127.0.0.1:0`: the real binary serving streamable HTTP,
//! driven by rmcp's HTTP client over real TCP, with a bearer token.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;

use crate::*;

/// The token the servers of these tests require.
pub(super) const TOKEN: &str = "t0ken-for-the-tests";

/// Kills the server when the test ends, passed or not.
pub(super) struct Server {
    child: Child,
    /// Everything it printed on stderr so far.
    pub(super) log: Arc<Mutex<String>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A token file holding `token` and a newline, readable by its owner only.
pub(super) fn token_file(dir: &Path, token: &str) -> PathBuf {
    let path = dir.join("token");
    std::fs::write(&path, format!("{token}\n")).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    path
}

/// Starts `agentry mcp --http 127.0.0.1:0 --store STORE --token-file ...`
/// (the token [`TOKEN`]) and reads the URL it prints on stderr (bounded: 60 s).
fn start_http(store: &Path) -> (Server, String) {
    let tokens = token_file(store.parent().unwrap(), TOKEN);
    start_http_with(
        &[
            "--store",
            path_str(store),
            "--token-file",
            path_str(&tokens),
        ],
        &[],
    )
}

/// Starts `agentry mcp --http 127.0.0.1:0 ARGS` with `ENV` (and no
/// `AGENTRY_TOKEN` unless `env` sets it) and reads the URL it prints on
/// stderr (bounded: 60 s).
pub(super) fn start_http_with(args: &[&str], env: &[(&str, &str)]) -> (Server, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentry"))
        .args(["mcp", "--http", "127.0.0.1:0"])
        .args(args)
        .env_remove("AGENTRY_TOKEN")
        .envs(env.iter().copied())
        .current_dir(root())
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let server = Server {
        child,
        log: Arc::default(),
    };
    let log = server.log.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    // The rest of stderr is drained (and shown) so the server never blocks on it.
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("server: {line}");
            log.lock().unwrap().push_str(&format!("{line}\n"));
            if let Some(url) = line.strip_prefix("agentry: mcp: listening on ") {
                let _ = tx.send(url.to_string());
            }
        }
    });
    let url = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the server prints the address it listens on");
    (server, url)
}

/// rmcp's HTTP client for `url`, sending `token`.
pub(super) fn transport(url: &str, token: &str) -> StreamableHttpClientTransport<reqwest::Client> {
    StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url).auth_header(token),
    )
}

/// run_task on examples/sum end to end over streamable HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_over_streamable_http_runs_the_sum_example() {
    agentry_models::install_crypto_provider();
    let tmp = tempfile::tempdir().unwrap();
    let (_server, url) = start_http(&tmp.path().join("runs.db"));
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let bound = Duration::from_secs(60);
    let client = tokio::time::timeout(bound, ().serve(transport(&url, TOKEN)))
        .await
        .expect("initialize within the bound")
        .unwrap();
    let tools = client.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 4, "{tools:?}");
    let params = CallToolRequestParams::new("run_task").with_arguments(
        json!({"task_dir": "examples/sum"})
            .as_object()
            .unwrap()
            .clone(),
    );
    let result = tokio::time::timeout(bound, client.call_tool(params))
        .await
        .expect("the run ends within the bound")
        .unwrap();
    let report = result.structured_content.expect("structured content");
    assert_eq!(report["stop_reason"], "done", "{report}");
    assert_eq!(report["answer"], "sum=23");
    // A run started over HTTP is followed through another request.
    let run_id = report["run_id"].as_str().unwrap();
    let got = client
        .call_tool(
            CallToolRequestParams::new("get_run")
                .with_arguments(json!({"run_id": run_id}).as_object().unwrap().clone()),
        )
        .await
        .unwrap();
    assert_eq!(got.structured_content.unwrap()["started_here"], true);
    client.cancel().await.unwrap();
}

/// Only loopback addresses are served: the tools run tasks as this user.
#[test]
fn mcp_http_refuses_a_non_loopback_address() {
    let out = agentry(&["mcp", "--http", "0.0.0.0:0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("only a loopback address"),
        "{}",
        stderr(&out)
    );
    assert!(out.stdout.is_empty());
}

/// A web page in the user's browser must not drive the server: a request
/// carrying a browser `Origin`, or a `Host` that is not a loopback name (DNS
/// rebinding), is refused before any tool runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_http_refuses_a_cross_site_origin_and_a_rebound_host() {
    agentry_models::install_crypto_provider();
    let tmp = tempfile::tempdir().unwrap();
    let (_server, url) = start_http(&tmp.path().join("runs.db"));
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "page", "version": "1"}}});
    let client = reqwest::Client::new();
    let post = |extra: (&'static str, &'static str)| {
        client
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .bearer_auth(TOKEN)
            .header(extra.0, extra.1)
            .body(initialize.to_string())
            .send()
    };
    let page = post(("origin", "http://evil.example")).await.unwrap();
    assert!(
        page.status().is_client_error(),
        "a cross-site Origin: {}",
        page.status()
    );
    let rebound = post(("host", "evil.example")).await.unwrap();
    assert!(
        rebound.status().is_client_error(),
        "a rebound Host: {}",
        rebound.status()
    );
    // The same request from a local client is served.
    let local = post(("user-agent", "agentry-test")).await.unwrap();
    assert!(local.status().is_success(), "{}", local.status());
}

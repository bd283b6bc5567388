//! Who may call `agentry mcp --http`: whoever holds its bearer token. Loopback
//! is open to every user of the machine, and the tools run tasks (and their
//! commands) as the server's user. The real binary over real TCP.

use std::time::Duration;

use rmcp::ServiceExt;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::mcp_http::{TOKEN, start_http_with, token_file, transport};
use crate::*;

/// Bound on each request and on the server's start.
const BOUND: Duration = Duration::from_secs(60);

/// A POST of `body` to `url` with `authorization` (if any), as a client would
/// send it; the status and the `WWW-Authenticate` header.
async fn post(url: &str, authorization: Option<&str>, body: &str) -> (u16, Option<String>) {
    let client = reqwest::Client::new();
    let mut request = client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string());
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    let response = tokio::time::timeout(BOUND, request.send())
        .await
        .expect("answered within the bound")
        .unwrap();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_string());
    (response.status().as_u16(), challenge)
}

fn initialize() -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}})
    .to_string()
}

/// Without the token a request is answered 401 with `WWW-Authenticate:
/// Bearer` from its headers alone: a garbage body is still 401 (not rmcp's
/// 400), and a request announcing a gigabyte it never sends is answered at
/// once. With the token the same garbage reaches rmcp, and a client works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_http_answers_401_without_the_token_before_reading_the_request() {
    agentry_models::install_crypto_provider();
    let tmp = tempfile::tempdir().unwrap();
    let tokens = token_file(tmp.path(), TOKEN);
    let (server, url) = start_http_with(&["--no-store", "--token-file", path_str(&tokens)], &[]);
    let garbage = "{\"jsonrpc\": not json at all";
    let right = format!("Bearer {TOKEN}");
    let wrong = format!("Bearer {TOKEN}x");
    let basic = "Basic dXNlcjpwYXNz";
    for (authorization, error) in [
        (None, false),
        (Some(wrong.as_str()), true),
        (Some("Bearer"), true),
        (Some(basic), true),
        (Some(TOKEN), true),
    ] {
        for body in [garbage.to_string(), initialize()] {
            let (status, challenge) = post(&url, authorization, &body).await;
            assert_eq!(status, 401, "{authorization:?} {body}");
            let challenge = challenge.expect("WWW-Authenticate");
            assert!(challenge.starts_with("Bearer "), "{challenge}");
            assert_eq!(challenge.contains("invalid_token"), error, "{challenge}");
        }
    }
    // GET (the standalone stream) and DELETE (end a session) too.
    let client = reqwest::Client::new();
    for request in [client.get(&url), client.delete(&url)] {
        let response = request.send().await.unwrap();
        assert_eq!(response.status().as_u16(), 401);
    }
    assert_eq!(unread_gigabyte(&url).await, 401);

    // The token's holder: the garbage reaches rmcp (a 4xx of its own) and
    // a real client is served.
    let (status, _) = post(&url, Some(&right), garbage).await;
    assert!((400..500).contains(&status) && status != 401, "{status}");
    let (status, _) = post(&url, Some(&right), &initialize()).await;
    assert_eq!(status, 200);
    let client = tokio::time::timeout(BOUND, ().serve(transport(&url, TOKEN)))
        .await
        .expect("initialize within the bound")
        .unwrap();
    assert_eq!(client.list_all_tools().await.unwrap().len(), 4);
    client.cancel().await.unwrap();
    // The token is never printed.
    let log = server.log.lock().unwrap().clone();
    assert!(!log.contains(TOKEN), "{log}");
}

/// A POST announcing a 1 GB body and sending none: the status line of the
/// answer (the server must answer without waiting for the body).
async fn unread_gigabyte(url: &str) -> u16 {
    let authority = url
        .strip_prefix("http://")
        .and_then(|rest| rest.split('/').next())
        .unwrap();
    let mut stream = tokio::net::TcpStream::connect(authority).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 1000000000\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = vec![0u8; 64];
    let n = tokio::time::timeout(BOUND, stream.read(&mut answer))
        .await
        .expect("answered without the body")
        .unwrap();
    let line = String::from_utf8_lossy(&answer[..n]).into_owned();
    line.split(' ').nth(1).unwrap().parse().unwrap()
}

/// `AGENTRY_TOKEN` is the token when no --token-file is given; --no-auth
/// serves without one (and says what that means).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_http_takes_agentry_token_and_no_auth_serves_anyone() {
    agentry_models::install_crypto_provider();
    let (_server, url) = start_http_with(&["--no-store"], &[("AGENTRY_TOKEN", "from-the-env")]);
    assert_eq!(post(&url, None, &initialize()).await.0, 401);
    assert_eq!(
        post(&url, Some(&format!("Bearer {TOKEN}")), &initialize())
            .await
            .0,
        401
    );
    let client = tokio::time::timeout(BOUND, ().serve(transport(&url, "from-the-env")))
        .await
        .expect("initialize within the bound")
        .unwrap();
    assert_eq!(client.list_all_tools().await.unwrap().len(), 4);
    client.cancel().await.unwrap();

    let (server, url) = start_http_with(&["--no-store", "--no-auth"], &[]);
    assert_eq!(post(&url, None, &initialize()).await.0, 200);
    let log = server.log.lock().unwrap().clone();
    assert!(
        log.contains("--no-auth: any local user can run tasks"),
        "{log}"
    );
}

/// `agentry mcp --http 127.0.0.1:0 --no-store ARGS`, with `AGENTRY_TOKEN`
/// set to `token` (unset if `None`): its exit code and stderr. Bounded: a
/// server that started anyway is killed (and the caller's assertion fails).
fn start_refused(args: &[&str], token: Option<&str>) -> (Option<i32>, String) {
    let mut command = agentry_command();
    command
        .args(["mcp", "--http", "127.0.0.1:0", "--no-store"])
        .args(args)
        .current_dir(root())
        .env_remove("RUST_LOG")
        .env_remove("AGENTRY_TOKEN")
        .stdin(std::process::Stdio::null());
    if let Some(token) = token {
        command.env("AGENTRY_TOKEN", token);
    }
    let mut child = command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + BOUND;
    while child.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    (out.status.code(), stderr(&out))
}

/// A file `name` in `dir` with `content` and permissions `mode`.
fn file(dir: &Path, name: &str, content: &str, mode: u32) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, content).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    path
}

/// `agentry mcp --http` does not start without a usable token unless
/// --no-auth is given: exit 2, the flags named, the token never printed.
#[test]
fn mcp_http_refuses_to_start_without_a_usable_token() {
    let tmp = tempfile::tempdir().unwrap();
    let start = start_refused;
    let file = |name: &str, content: &str, mode: u32| file(tmp.path(), name, content, mode);
    let (code, err) = start(&[], None);
    assert_eq!(code, Some(2), "{err}");
    for flag in ["--token-file", "AGENTRY_TOKEN", "--no-auth"] {
        assert!(err.contains(flag), "{flag}: {err}");
    }

    let secret = "se cret-with-a-space";
    let cases = [
        (file("empty", "", 0o600), "the token is empty"),
        (file("newline", "\n", 0o600), "the token is empty"),
        (file("spaced", secret, 0o600), "one line of visible ASCII"),
        (file("shared", "s3cret", 0o644), "chmod 600"),
        (tmp.path().join("missing"), "No such file"),
        (tmp.path().to_path_buf(), "not a regular file"),
    ];
    for (path, expected) in &cases {
        let (code, err) = start(&["--token-file", path_str(path)], None);
        assert_eq!(code, Some(2), "{path:?}: {err}");
        assert!(err.contains("--token-file"), "{err}");
        assert!(err.contains(expected), "{path:?}: {err}");
        assert!(!err.contains(secret), "{err}");
    }
    #[cfg(unix)]
    {
        // A FIFO is refused, not waited on.
        let fifo = tmp.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .args(["-m", "600"])
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let (code, err) = start(&["--token-file", path_str(&fifo)], None);
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains("not a regular file"), "{err}");
    }
    let (code, err) = start(&[], Some(""));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("AGENTRY_TOKEN: the token is empty"), "{err}");
    let (code, err) = start(&[], Some(secret));
    assert_eq!(code, Some(2), "{err}");
    assert!(!err.contains(secret), "{err}");
    // The flags that make no sense together, or without --http.
    let token = file("token", "s3cret\n", 0o600);
    let (code, err) = start(&["--token-file", path_str(&token), "--no-auth"], None);
    assert_eq!(code, Some(2), "{err}");
    let out = agentry(&["mcp", "--token-file", path_str(&token)]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--http"), "{}", stderr(&out));
}

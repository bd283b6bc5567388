//! What the service answers: JSON errors, a refused command tool.

use super::*;

/// Every error the service answers is `{"error": {"code", "message"}}` as JSON: axum's own
/// rejections (bad UTF-8 in the path), bare statuses (404, 405), and the
/// guard's (413, 414, 415), as well as the routes' own 400s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_answer_is_json() -> Result<(), TestError> {
    let service = Service::start(&["--max-message-bytes", "1024"])?;
    let id = service.create(&listener_task()).await?;
    let host = service.addr.to_string();
    let json = "Content-Type: application/json\r\n";
    let long_path = format!("/runs/{}", "a".repeat(9 * 1024));
    let big_message = json!({"text": "x".repeat(2000)}).to_string();
    let messages = format!("/runs/{id}/messages");
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (get("/nowhere", &host, ""), 404, "no such route"),
        (
            format!("DELETE /runs HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
                .into_bytes(),
            405,
            "method not allowed",
        ),
        (get("/runs/%FF", &host, ""), 400, "UTF-8"),
        (
            get(&format!("/runs/{id}/approvals"), &host, ""),
            404,
            "no such route",
        ),
        (get(&long_path, &host, ""), 414, "URI"),
        (
            post(&messages, &host, json, &big_message),
            413,
            "--max-message-bytes",
        ),
        (
            post(&messages, &host, "Content-Type: text/plain\r\n", "{}"),
            415,
            "application/json",
        ),
        (
            post(&messages, &host, json, "{\"text\": "),
            400,
            "invalid JSON",
        ),
        (post(&messages, &host, json, "[1]"), 400, "JSON object"),
    ];
    for (request, status, want) in cases {
        let raw = service.raw(&request).await?;
        let line = String::from_utf8_lossy(&request[..request.len().min(60)]).to_string();
        assert_eq!(raw.status, status, "{line}: {raw:?}");
        let error = raw.error()?;
        assert!(error.contains(want), "{line}: {error:?} lacks {want:?}");
    }
    // Bytes that are not UTF-8 in a JSON body.
    let mut request = format!(
        "POST {messages} HTTP/1.1\r\nHost: {host}\r\n{json}Content-Length: 13\r\nConnection: close\r\n\r\n"
    )
    .into_bytes();
    request.extend_from_slice(b"{\"text\": \"\xff\"}");
    let raw = service.raw(&request).await?;
    assert_eq!(raw.status, 400, "{raw:?}");
    assert!(raw.error()?.contains("invalid JSON"), "{raw:?}");
    Ok(())
}

/// The service runs only built-in tools; a posted `tools.command` used to be
/// dropped without a word (the run then "worked" without it). It is refused,
/// naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_posted_command_tool_is_refused() -> Result<(), TestError> {
    let service = Service::start(&[])?;
    let task = json!({
        "goal": "g",
        "tools": {
            "grant": ["sh"],
            "command": [{"name": "sh", "description": "any command", "argv": ["sh", "-c", "{cmd}"]}]
        },
        "script": {"turns": [finish("ok")]}
    });
    let (status, body) = service.post("/runs", &task).await?;
    assert_eq!(status, 400, "{body}");
    let error = body["error"]["message"].as_str().unwrap_or_default();
    assert!(error.starts_with("tools.command:"), "{error}");
    Ok(())
}

/// A posted `tools.mcp` used to be dropped without a word (the run started,
/// and its calls got `ENOTOOL`); a server by URL names where the service's
/// header secrets would go. Both kinds are refused naming the field, as is a
/// `policy` naming its own model server, and the client's server (a real
/// listener here) is never contacted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_posted_mcp_server_or_model_server_is_refused() -> Result<(), TestError> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let url = format!("http://{}", listener.local_addr()?);
    let service = Service::launch(Launch {
        env: vec![("OPENAI_API_KEY", "sk-service-key-93b1".into())],
        ..Launch::default()
    })?;
    let with = |key: &str, value: Value| {
        let mut task = json!({"goal": "g", "script": {"turns": [finish("ok")]}});
        task[key] = value;
        task
    };
    let cases = [
        (
            with(
                "tools",
                json!({"mcp": [{"name": "remote", "url": format!("{url}/mcp"),
                    "headers": {"Authorization": "Bearer ${OPENAI_API_KEY}"}}]}),
            ),
            "tools.mcp:",
        ),
        (
            with(
                "tools",
                json!({"grant": ["local.*"], "mcp": [{"name": "local", "command": ["true"]}]}),
            ),
            "tools.mcp:",
        ),
        (
            with("policy", json!({"model": "openai:x", "base_url": url})),
            "policy:",
        ),
        // A client's task may narrow the kernel sandbox, never loosen it.
        (with("sandbox", json!({"mode": "off"})), "sandbox.mode"),
        (
            with("sandbox", json!({"network": true, "write": ["/"]})),
            "sandbox.network, sandbox.write",
        ),
        (
            with("sandbox", json!({"processes": 100000})),
            "sandbox.processes",
        ),
    ];
    for (task, field) in cases {
        let (status, body) = service.post("/runs", &task).await?;
        assert_eq!(status, 400, "{task}: {body}");
        let error = body["error"]["message"].as_str().unwrap_or_default();
        assert!(error.starts_with(field), "{task}: {error}");
    }
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
        other => Err(format!("the client's server was reached: {other:?}").into()),
    }
}

//! Model policies: a missing key, an unreachable server, and a run against a
//! local OpenAI-style server (https:// servers: `hosted.rs`, `proxy.rs`).

use crate::*;

pub(crate) fn agentry_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = agentry_command();
    cmd.args(args)
        .current_dir(root())
        .env_remove("RUST_LOG")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

#[test]
fn a_model_policy_without_its_key_exits_2_naming_the_variable() {
    for (policy, var) in [
        ("openai:m", "OPENAI_API_KEY"),
        ("anthropic:m", "ANTHROPIC_API_KEY"),
    ] {
        let out = agentry_env(
            &[
                "run",
                "examples/sum",
                "--policy",
                policy,
                "--base-url",
                "http://127.0.0.1:9",
            ],
            &[],
        );
        assert_eq!(out.status.code(), Some(2), "{policy}");
        let err = stderr(&out);
        assert!(err.contains(var), "{err}");
    }
}

#[test]
fn an_unreachable_model_server_exits_2_before_running() {
    // Port 9 (discard) on loopback: nothing listens there in CI.
    let out = agentry_env(
        &[
            "run",
            "examples/sum",
            "--policy",
            "openai:m",
            "--base-url",
            "http://127.0.0.1:9/v1",
        ],
        &[("OPENAI_API_KEY", "k")],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("unreachable") && err.contains("127.0.0.1:9"),
        "{err}"
    );

    let out = agentry_env(
        &["run", "examples/sum", "--base-url", "http://127.0.0.1:9"],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--base-url"), "{}", stderr(&out));
}

/// A one-thread HTTP/1.1 server on 127.0.0.1: GETs answer `{}`, each POST gets the
/// next SSE body and its JSON request body is recorded.
pub(crate) fn sse_server(
    bodies: Vec<String>,
) -> (String, std::sync::Arc<std::sync::Mutex<Vec<Value>>>) {
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        let mut bodies = bodies.into_iter();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let (first, _, body) = crate::cli::fallback::read_request(&mut stream);
            let (kind, payload) = if first.starts_with("POST") {
                log.lock()
                    .unwrap()
                    .push(serde_json::from_slice(&body).unwrap());
                ("text/event-stream", bodies.next().unwrap_or_default())
            } else {
                ("application/json", "{}".to_string())
            };
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{payload}",
                payload.len()
            );
        }
    });
    (url, seen)
}

fn openai_call(id: &str, name: &str, args: &str) -> String {
    let call = serde_json::json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": id,
        "type": "function", "function": {"name": name, "arguments": args}}]}, "finish_reason": "tool_calls"}]});
    let usage =
        serde_json::json!({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}});
    format!("data: {call}\n\ndata: {usage}\n\ndata: [DONE]\n\n")
}

#[test]
fn an_openai_policy_runs_the_sum_task_against_a_local_server() {
    let (url, seen) = sse_server(vec![
        openai_call("read", "fs_read", r#"{"path":"numbers.txt"}"#),
        openai_call("write", "fs_write", r#"{"path":"sum.txt","content":"23"}"#),
        openai_call("fin", "task_finish", r#"{"answer":"sum=23"}"#),
    ]);
    let tmp = tempfile::tempdir().unwrap();
    let out = agentry_env(
        &[
            "run",
            "examples/sum",
            "--policy",
            "openai:tiny",
            "--base-url",
            &url,
            "--workdir",
            path_str(&tmp.path().join("run")),
            "--json",
        ],
        &[("OPENAI_API_KEY", "k")],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout} {}", stderr(&out));
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["stop_reason"], "done");
    // The window goes to stderr: stdout is the one JSON object.
    assert!(
        stderr(&out).contains("context window: 32768 tokens (default"),
        "{}",
        stderr(&out)
    );
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[0]["model"], "tiny");
}

/// `agentry run` with a model on a server that is not there: the window is
/// settled and printed before the server is probed.
fn window_run(task: &Path, policy: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "run",
        path_str(task),
        "--policy",
        policy,
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--no-store",
    ];
    args.extend_from_slice(extra);
    agentry_env(&args, &[("OPENAI_API_KEY", "k")])
}

#[test]
fn the_cli_prints_which_context_window_it_uses_and_why() {
    let sum = root().join("examples/sum");
    let set = task_dir(
        "goal = \"g\"\n[policy]\ncontext_tokens = 8000\n",
        r#"{"turns":[]}"#,
    );
    for (task, policy, extra, line) in [
        (
            sum.as_path(),
            "openai:gpt-4o-mini",
            &[][..],
            "context window: 128000 tokens (model table: gpt-4o)",
        ),
        (
            sum.as_path(),
            "anthropic:claude-sonnet-4-5",
            &[][..],
            "context window: 200000 tokens (model table: claude-)",
        ),
        (
            set.path(),
            "openai:gpt-4o",
            &[][..],
            "context window: 8000 tokens (policy.context_tokens)",
        ),
        (
            set.path(),
            "openai:gpt-4o",
            &["--context-tokens", "9000"][..],
            "context window: 9000 tokens (--context-tokens)",
        ),
    ] {
        let out = agentry_env(
            &[
                &["run", path_str(task), "--policy", policy][..],
                &["--base-url", "http://127.0.0.1:9/v1", "--no-store"][..],
                extra,
            ]
            .concat(),
            &[("OPENAI_API_KEY", "k"), ("ANTHROPIC_API_KEY", "k")],
        );
        let err = stderr(&out);
        assert!(err.contains(line), "{policy} {extra:?}: {err}");
        assert!(out.stdout.is_empty(), "{policy}: nothing on stdout");
    }
}

#[test]
fn a_context_window_not_above_the_reserved_output_exits_2_naming_the_field() {
    let small = task_dir(
        "goal = \"g\"\n[policy]\ncontext_tokens = 1000\n",
        r#"{"turns":[]}"#,
    );
    let out = window_run(small.path(), "openai:gpt-4o", &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("policy.context_tokens") && err.contains("1024 output tokens"),
        "{err}"
    );
    let out = window_run(small.path(), "openai:gpt-4o", &["--context-tokens", "1024"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("--context-tokens"), "{err}");
    assert!(
        !err.contains("unreachable"),
        "checked before the server: {err}"
    );
}

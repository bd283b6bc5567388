//! Fallback models and prompt caching through the real binary, against real
//! HTTP servers on 127.0.0.1 with the providers' strict request checkers in
//! front (an invalid request gets the provider's HTTP 400).

use std::io::{BufRead, BufReader, Read, Write};
use std::sync::{Arc, Mutex};

use crate::strict::check_path;
use crate::*;

/// What a strict server saw: each POST body, and how many it refused.
#[derive(Default)]
pub(crate) struct Seen {
    pub(crate) posts: Vec<Value>,
    pub(crate) refused: usize,
}

/// A one-thread HTTP/1.1 server on 127.0.0.1. GETs (start-up probes) answer
/// `{}`; each POST is checked against its provider's rules (400 in the
/// provider's shape if it breaks one), else answered with the next scripted
/// (status, body): SSE for 200, JSON otherwise. Base URL without a path.
pub(crate) fn strict_server(replies: Vec<(u16, String)>) -> (String, Arc<Mutex<Seen>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Seen::default()));
    let log = seen.clone();
    std::thread::spawn(move || {
        let mut replies = replies.into_iter();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let (first, path, body) = read_request(&mut stream);
            let (status, payload) = if first.starts_with("POST") {
                let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let mut seen = log.lock().unwrap();
                seen.posts.push(body.clone());
                match check_path(&path, &body) {
                    Some((_, shape)) => {
                        seen.refused += 1;
                        (400, shape.to_string())
                    }
                    None => replies
                        .next()
                        .unwrap_or((400, "{\"error\":\"script exhausted\"}".into())),
                }
            } else {
                (200, "{}".to_string())
            };
            let kind = if status == 200 && first.starts_with("POST") {
                "text/event-stream"
            } else {
                "application/json"
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status} X\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{payload}",
                payload.len()
            );
        }
    });
    (url, seen)
}

/// The request line, path and body of one HTTP/1.1 request.
pub(crate) fn read_request(stream: &mut std::net::TcpStream) -> (String, String, Vec<u8>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut first = String::new();
    reader.read_line(&mut first).unwrap();
    let path = first.split(' ').nth(1).unwrap_or_default().to_string();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            length = v.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    (first, path, body)
}

/// An address nothing answers: a port held by a socket bound but never
/// listening, so a connection is refused and no other test's server can take
/// the port while the returned socket lives (a port bound and closed again
/// could be handed to another server, which would answer for the "down" model).
fn refused_url() -> (String, tokio::net::TcpSocket) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
        .unwrap();
    let addr = socket.local_addr().unwrap();
    (format!("http://{addr}"), socket)
}

pub(crate) fn openai_call(id: &str, name: &str, args: &str) -> (u16, String) {
    let call = serde_json::json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": id,
        "type": "function", "function": {"name": name, "arguments": args}}]}, "finish_reason": "tool_calls"}]});
    let usage =
        serde_json::json!({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}});
    (
        200,
        format!("data: {call}\n\ndata: {usage}\n\ndata: [DONE]\n\n"),
    )
}

/// An Anthropic `tool_use` turn reporting `usage` in `message_start`.
fn anthropic_call(id: &str, name: &str, args: &str, usage: Value) -> (u16, String) {
    let events = [
        serde_json::json!({"type": "message_start", "message": {"usage": usage}}),
        serde_json::json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
        serde_json::json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": args}}),
        serde_json::json!({"type": "content_block_stop", "index": 0}),
        serde_json::json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"},
            "usage": {"output_tokens": 3}}),
        serde_json::json!({"type": "message_stop"}),
    ];
    let body = events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect();
    (200, body)
}

/// The sum task's three turns in one provider's shape.
fn sum_turns(call: impl Fn(&str, &str, &str) -> (u16, String)) -> Vec<(u16, String)> {
    vec![
        call("read", "fs_read", r#"{"path":"numbers.txt"}"#),
        call("write", "fs_write", r#"{"path":"sum.txt","content":"23"}"#),
        call("fin", "task_finish", r#"{"answer":"sum=23"}"#),
    ]
}

fn plain_usage() -> Value {
    serde_json::json!({"input_tokens": 7, "output_tokens": 1})
}

pub(crate) const KEYS: [(&str, &str); 2] = [("OPENAI_API_KEY", "k1"), ("ANTHROPIC_API_KEY", "k2")];

/// The model of each step record of a trace file.
fn trace_models(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r.get("decision").is_some())
        .map(|r| r["model"].as_str().unwrap().to_string())
        .collect()
}

/// A copy of examples/sum whose task.toml has this `[policy]` table.
fn sum_task(policy: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let toml = std::fs::read_to_string(root().join("examples/sum/task.toml")).unwrap();
    std::fs::write(dir.path().join("task.toml"), format!("{toml}\n{policy}\n")).unwrap();
    std::fs::create_dir(dir.path().join("workspace")).unwrap();
    std::fs::copy(
        root().join("examples/sum/workspace/numbers.txt"),
        dir.path().join("workspace/numbers.txt"),
    )
    .unwrap();
    dir
}

/// Runs with the keys set, `--json` and `--trace`; returns the exit code,
/// the report, stderr and the trace's step models.
fn run_traced(args: &[&str], tmp: &Path) -> (Option<i32>, Value, String, Vec<String>) {
    let trace = tmp.join("trace.jsonl");
    let workdir = tmp.join("run");
    let mut all = args.to_vec();
    all.extend([
        "--json",
        "--no-store",
        "--trace",
        path_str(&trace),
        "--workdir",
        path_str(&workdir),
    ]);
    let out = crate::cli::model::agentry_env(&all, &KEYS);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let report = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{e}: {stdout:?}; stderr: {}", stderr(&out)));
    let models = if trace.exists() {
        trace_models(&trace)
    } else {
        Vec::new()
    };
    (out.status.code(), report, stderr(&out), models)
}

#[test]
fn a_down_primary_hands_every_turn_to_the_fallback_flag() {
    let (down, _held) = refused_url();
    let (url, seen) = strict_server(sum_turns(|i, n, a| anthropic_call(i, n, a, plain_usage())));
    let tmp = tempfile::tempdir().unwrap();
    let fallback = format!("anthropic:second={url}");
    let (code, report, err, models) = run_traced(
        &[
            "run",
            "examples/sum",
            "--policy",
            "openai:primary",
            "--base-url",
            &format!("{down}/v1"),
            "--fallback",
            &fallback,
        ],
        tmp.path(),
    );
    assert_eq!(code, Some(0), "{report} {err}");
    assert_eq!(report["stop_reason"], "done");
    // The down primary is reported at start, not refused.
    assert!(
        err.contains("warning") && err.contains("unreachable") && err.contains(&down),
        "{err}"
    );
    assert_eq!(models, ["anthropic:second"; 3]);
    let seen = seen.lock().unwrap();
    assert_eq!((seen.posts.len(), seen.refused), (3, 0));
    assert_eq!(seen.posts[0]["model"], "second");
}

#[test]
fn a_primary_answering_503_hands_its_turns_to_a_task_toml_fallback() {
    // Four attempts per turn (three retries), three turns.
    let (primary, primary_seen) = strict_server(vec![(503, "{\"error\":\"busy\"}".into()); 12]);
    let (second, second_seen) = strict_server(sum_turns(openai_call));
    let task = sum_task(&format!(
        "[policy]\nmodel = \"anthropic:primary\"\nbase_url = \"{primary}\"\n\
         fallback = [{{ model = \"openai:second\", base_url = \"{second}/v1\" }}]"
    ));
    let tmp = tempfile::tempdir().unwrap();
    let (code, report, err, models) = run_traced(&["run", path_str(task.path())], tmp.path());
    assert_eq!(code, Some(0), "{report} {err}");
    assert_eq!(report["stop_reason"], "done");
    assert_eq!(models, ["openai:second"; 3]);
    assert_eq!(primary_seen.lock().unwrap().posts.len(), 12);
    assert_eq!(primary_seen.lock().unwrap().refused, 0);
    assert_eq!(second_seen.lock().unwrap().refused, 0);
}

/// A 400 is the request's problem, not the server's: the turn fails at the
/// primary and the run goes on there; the fallback is never asked.
#[test]
fn a_400_from_the_primary_does_not_reach_the_fallback() {
    let mut replies = vec![(
        400,
        r#"{"error":{"message":"prompt too long","type":"invalid_request_error"}}"#.to_string(),
    )];
    replies.extend(sum_turns(openai_call));
    let (primary, primary_seen) = strict_server(replies);
    let (second, second_seen) = strict_server(sum_turns(openai_call));
    let tmp = tempfile::tempdir().unwrap();
    let fallback = format!("openai:second={second}/v1");
    let (code, report, err, models) = run_traced(
        &[
            "run",
            "examples/sum",
            "--policy",
            "openai:primary",
            "--base-url",
            &format!("{primary}/v1"),
            "--fallback",
            &fallback,
        ],
        tmp.path(),
    );
    assert_eq!(code, Some(0), "{report} {err}");
    assert_eq!(
        report["steps"], 4,
        "a failed turn, then read, write, finish"
    );
    assert_eq!(models, ["openai:primary"; 4]);
    assert_eq!(primary_seen.lock().unwrap().refused, 0);
    assert!(second_seen.lock().unwrap().posts.is_empty());
}

#[test]
fn bad_fallbacks_exit_2_naming_the_field_or_the_variable() {
    let (url, _seen) = strict_server(Vec::new());
    let base = format!("{url}/v1");
    let fallback = format!("anthropic:m={url}");
    // A fallback's key comes from its provider's variable.
    let out = crate::cli::model::agentry_env(
        &[
            "run",
            "examples/sum",
            "--policy",
            "openai:m",
            "--base-url",
            &base,
            "--fallback",
            &fallback,
        ],
        &[("OPENAI_API_KEY", "k")],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("ANTHROPIC_API_KEY"),
        "{}",
        stderr(&out)
    );

    let out =
        crate::cli::model::agentry_env(&["run", "examples/sum", "--fallback", "gemini:x"], &KEYS);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--fallback"), "{}", stderr(&out));

    // --fallback belongs to a model policy.
    let out =
        crate::cli::model::agentry_env(&["run", "examples/sum", "--fallback", &fallback], &KEYS);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--fallback"), "{}", stderr(&out));

    let task = sum_task(&format!(
        "[policy]\nmodel = \"openai:m\"\nbase_url = \"{base}\"\nfallback = [\"gemini:x\"]"
    ));
    let out = crate::cli::model::agentry_env(&["run", path_str(task.path())], &KEYS);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("policy.fallback"), "{}", stderr(&out));
}

/// Prompt caching is on by default: the Anthropic requests mark the system
/// prompt and the tool list, and the summary shows what the cache served.
/// `[policy] prompt_cache = false` sends no mark.
#[test]
fn anthropic_requests_are_cache_marked_unless_the_task_turns_it_off() {
    let cached = serde_json::json!({"input_tokens": 7, "output_tokens": 1,
        "cache_read_input_tokens": 900, "cache_creation_input_tokens": 100});
    for prompt_cache in [true, false] {
        let (url, seen) =
            strict_server(sum_turns(|i, n, a| anthropic_call(i, n, a, cached.clone())));
        let task = sum_task(&format!(
            "[policy]\nmodel = \"anthropic:m\"\nbase_url = \"{url}\"\nprompt_cache = {prompt_cache}"
        ));
        let tmp = tempfile::tempdir().unwrap();
        let out = crate::cli::model::agentry_env(
            &[
                "run",
                path_str(task.path()),
                "--no-store",
                "--workdir",
                path_str(&tmp.path().join("run")),
            ],
            &KEYS,
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{stdout} {}", stderr(&out));
        // Three turns of 7 + 900 + 100 prompt tokens and 3 output tokens.
        assert!(
            stdout.contains(
                "tokens       3021 in (2700 read from the prompt cache, 300 written to it), 9 out"
            ),
            "{stdout}"
        );
        let seen = seen.lock().unwrap();
        assert_eq!((seen.posts.len(), seen.refused), (3, 0));
        let marks = seen.posts[0].to_string().matches("cache_control").count();
        assert_eq!(marks, if prompt_cache { 2 } else { 0 }, "{}", seen.posts[0]);
    }
}

//! Tests with real subprocesses. Each kill test reads the group id from the
//! process itself (`echo $$` in the `sh` leader) and scans `/proc` for it.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentry_protocol::ErrorCode;
use agentry_protocol::fingerprint::sha256_hex;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::capture::{Artifact, Capture, head_text};
use super::*;

fn ctx(workdir: &Path) -> ToolContext {
    ToolContext {
        run_id: Arc::from("run-1"),
        call_id: "call-1".to_string(),
        workdir: Arc::from(workdir),
        root: Arc::new(crate::fs::WorkRoot::open(workdir).unwrap()),
        artifacts: Arc::from(workdir.join(".agentry").as_path()),
        cancel: CancellationToken::new(),
        attempt: 1,
        operation_id: Arc::from("op-test"),
        agents: None,
    }
}

async fn run_ok(args: Value, c: &ToolContext) -> ToolOutput {
    ProcTool::default().call(args, c).await.unwrap()
}

/// `(pid, state)` of every process whose process group is `pgid`.
fn group_members(pgid: i32) -> Vec<(i32, char)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue; // exited meanwhile
        };
        // "pid (comm) state ppid pgrp ...": comm may hold spaces and parens.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(2).and_then(|f| f.parse::<i32>().ok()) == Some(pgid) {
            found.push((pid, fields[0].chars().next().unwrap_or('?')));
        }
    }
    found
}

/// Polls until no process (alive or zombie) has group `pgid`, up to `limit`.
async fn wait_group_gone(pgid: i32, limit: Duration) -> Vec<(i32, char)> {
    let start = Instant::now();
    loop {
        let members = group_members(pgid);
        if members.is_empty() || start.elapsed() > limit {
            return members;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Polls until group `pgid` has `n` live members, up to 5 s; returns them.
async fn wait_group_size(pgid: i32, n: usize) -> Vec<(i32, char)> {
    let start = Instant::now();
    loop {
        let members = group_members(pgid);
        let live = members.iter().filter(|(_, state)| *state != 'Z').count();
        if live == n || start.elapsed() > Duration::from_secs(5) {
            return members;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits (up to 5 s) for the leader to write its pid (= pgid) to `file`.
async fn read_pgid(file: &Path) -> i32 {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        if let Ok(text) = std::fs::read_to_string(file)
            && let Ok(pid) = text.trim().parse()
        {
            return pid;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the leader never wrote its pid to {}", file.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_ok(json!({"argv": ["echo", "hello", "a b"]}), &ctx(dir.path())).await;
    assert_eq!(
        out.data,
        json!({
            "exit_code": 0, "signal": null,
            "stdout": "hello a b\n", "stderr": "",
            "stdout_truncated": false, "stderr_truncated": false,
            "stdout_bytes": 10, "stderr_bytes": 0,
        })
    );
    assert!(out.refs.is_empty());
    assert!(
        !dir.path().join(".agentry").exists(),
        "no artifact for small output"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nonzero_exit_is_ok_with_the_code_and_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_ok(
        json!({"argv": ["sh", "-c", "echo oops >&2; exit 3"]}),
        &ctx(dir.path()),
    )
    .await;
    assert_eq!(out.data["exit_code"], 3);
    assert_eq!(out.data["signal"], Value::Null);
    assert_eq!(out.data["stderr"], "oops\n");

    let out = run_ok(
        json!({"argv": ["sh", "-c", "kill -9 $$"]}),
        &ctx(dir.path()),
    )
    .await;
    assert_eq!(out.data["exit_code"], Value::Null);
    assert_eq!(out.data["signal"], 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_is_fed_then_closed() {
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path());
    let out = run_ok(json!({"argv": ["cat"], "stdin": "line 1\nline 2\n"}), &c).await;
    assert_eq!(out.data["stdout"], "line 1\nline 2\n");
    // Without stdin, it is empty rather than inherited: cat ends at once.
    let out = run_ok(json!({"argv": ["cat"]}), &c).await;
    assert_eq!(out.data["stdout"], "");
    // A process that does not read its (large) stdin is not an error.
    let big = "x".repeat(1 << 20);
    let out = run_ok(json!({"argv": ["true"], "stdin": big}), &c).await;
    assert_eq!(out.data["exit_code"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cwd_is_inside_the_workdir() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let c = ctx(dir.path());
    let out = run_ok(json!({"argv": ["pwd"], "cwd": "sub"}), &c).await;
    let real = std::fs::canonicalize(dir.path().join("sub")).unwrap();
    assert_eq!(out.data["stdout"], format!("{}\n", real.display()));
    let out = run_ok(json!({"argv": ["pwd"]}), &c).await;
    assert_eq!(
        out.data["stdout"],
        format!("{}\n", dir.path().display()),
        "default cwd is the workdir"
    );

    for escape in ["..", "/tmp", "sub/../.."] {
        let err = ProcTool::default()
            .call(json!({"argv": ["pwd"], "cwd": escape}), &c)
            .await
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::Eperm, "{escape}: {err}");
    }
    let err = ProcTool::default()
        .call(json!({"argv": ["pwd"], "cwd": "missing"}), &c)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Einval, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_outside_the_allowlist_is_eperm_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let err = ProcTool::default()
        .call(
            json!({"argv": ["env"], "env": {"LD_PRELOAD": "/x.so", "TZ": "UTC"}}),
            &ctx(dir.path()),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Eperm);
    assert!(!err.retryable);
    assert!(err.message.contains("LD_PRELOAD"), "{}", err.message);
    assert!(!err.message.starts_with("TZ"), "{}", err.message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_allowlisted_env_reaches_the_child() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_ok(
        json!({"argv": ["env"], "env": {"TZ": "Europe/Paris", "LANG": "C.UTF-8"}}),
        &ctx(dir.path()),
    )
    .await;
    let stdout = out.data["stdout"].as_str().unwrap();
    let names: Vec<&str> = stdout.lines().filter_map(|l| l.split('=').next()).collect();
    assert!(stdout.lines().any(|l| l == "TZ=Europe/Paris"), "{stdout}");
    assert!(stdout.lines().any(|l| l == "LANG=C.UTF-8"), "{stdout}");
    for name in names {
        assert!(
            DEFAULT_ENV_ALLOWLIST.contains(&name) || HOST_ENV.contains(&name),
            "{name} leaked: {stdout}"
        );
    }
    // The host's PATH (cargo sets it) is passed; its own variables are not.
    assert!(stdout.lines().any(|l| l.starts_with("PATH=")), "{stdout}");
    assert!(!stdout.contains("CARGO"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_program_is_einval_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path());
    let err = ProcTool::default()
        .call(json!({"argv": ["no-such-program-xyz", "-v"]}), &c)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Einval);
    assert!(
        err.message.contains("no-such-program-xyz"),
        "{}",
        err.message
    );
    assert!(err.message.contains("no such program"), "{}", err.message);

    let err = ProcTool::default()
        .call(json!({"argv": []}), &c)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Einval);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_output_is_truncated_and_stored_in_full() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = ctx(dir.path());
    c.call_id = "call/../1".to_string();
    c.attempt = 2;
    let out = run_ok(
        json!({"argv": ["sh", "-c", "head -c 1000000 /dev/zero | tr '\\0' a; echo done >&2"]}),
        &c,
    )
    .await;
    let stdout = out.data["stdout"].as_str().unwrap();
    assert_eq!(stdout.len(), DEFAULT_MAX_INLINE);
    assert!(stdout.bytes().all(|b| b == b'a'));
    assert_eq!(out.data["stdout_truncated"], true);
    assert_eq!(out.data["stdout_bytes"], 1_000_000);
    assert_eq!(out.data["stderr"], "done\n");
    assert_eq!(out.data["stderr_truncated"], false);

    let expected = sha256_hex(&vec![b'a'; 1_000_000]);
    assert_eq!(out.refs.len(), 1, "only the truncated stream has a ref");
    let reference = &out.refs[0];
    assert_eq!(reference.path, ".agentry/out/call____1.2.stdout");
    assert_eq!(reference.bytes, 1_000_000);
    assert_eq!(reference.sha256, expected);
    let stored = std::fs::read(dir.path().join(&reference.path)).unwrap();
    assert_eq!(stored.len(), 1_000_000);
    assert_eq!(sha256_hex(&stored), expected);
    assert!(!dir.path().join(".agentry/out/call____1.2.stderr").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capture_memory_stays_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out/big");
    let cap = 1000;
    let artifact = Artifact {
        root: Arc::new(crate::fs::WorkRoot::open(dir.path()).unwrap()),
        dir: dir.path().join("out"),
        name: "big".into(),
    };
    let mut capture = Capture::new(cap, artifact);
    // 16 MiB through the capture; only the head stays in memory.
    let len = 16u64 << 20;
    capture
        .pump(tokio::io::AsyncReadExt::take(tokio::io::repeat(b'z'), len))
        .await;
    assert!(
        capture.head_capacity() <= cap,
        "{}",
        capture.head_capacity()
    );
    let captured = capture.finish(dir.path()).await;
    assert_eq!(captured.text.len(), cap);
    assert_eq!(captured.bytes, len);
    let reference = captured.reference.unwrap();
    assert_eq!(reference.path, "out/big");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), len);
}

#[test]
fn head_text_cuts_at_a_character_boundary() {
    let text = "héé".as_bytes(); // h, then two 2-byte characters
    assert_eq!(head_text(&text[..4], true, 4), "hé");
    assert_eq!(head_text(&text[..3], true, 4), "hé");
    assert_eq!(head_text(&text[..2], true, 4), "h");
    // A stream that really ended mid-character shows the replacement character.
    assert_eq!(head_text(&text[..2], false, 4), "h\u{fffd}");
    // Replacements never push the text past the cap.
    assert_eq!(head_text(&[0xff, 0xff], false, 4), "\u{fffd}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_kills_and_reaps_the_whole_group() {
    reap_orphans_here().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path());
    let cancel = c.cancel.clone();
    let pid_file = dir.path().join("pid");
    let call = tokio::spawn(async move {
        let started = Instant::now();
        let result = ProcTool::default()
            .call(
                json!({"argv": ["sh", "-c", "echo $$ > pid; sleep 60 & sleep 60 & wait"]}),
                &c,
            )
            .await;
        (result, started.elapsed())
    });
    let pgid = read_pgid(&pid_file).await;
    assert_eq!(
        wait_group_size(pgid, 3).await.len(),
        3,
        "sh and two sleeps run"
    );
    let cancelled_at = Instant::now();
    cancel.cancel();
    let (result, _) = call.await.unwrap();
    let took = cancelled_at.elapsed();
    let err = result.unwrap_err();
    assert_eq!(err.code, ErrorCode::Ecanceled);
    assert!(err.message.contains("process group"), "{}", err.message);
    eprintln!("cancel path took {took:?}");
    // Far below the 60 s the group would live unkilled; ~5 ms unloaded.
    assert!(took < Duration::from_secs(5), "cancel took {took:?}");
    // Right after the call returned: nothing of the group, alive or zombie.
    assert_eq!(group_members(pgid), vec![]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_term_ignoring_group_is_killed_after_the_grace() {
    reap_orphans_here().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path());
    let cancel = c.cancel.clone();
    let call = tokio::spawn(async move {
        ProcTool::default()
            .call(
                json!({"argv": ["sh", "-c",
                    "trap '' TERM; echo $$ > pid; sh -c \"trap '' TERM; sleep 60\" & wait"]}),
                &c,
            )
            .await
    });
    let pgid = read_pgid(&dir.path().join("pid")).await;
    // Both shells ignore TERM once the inner one has started its sleep.
    assert_eq!(
        wait_group_size(pgid, 3).await.len(),
        3,
        "sh, sh and sleep run"
    );
    let cancelled_at = Instant::now();
    cancel.cancel();
    let err = call.await.unwrap().unwrap_err();
    assert_eq!(err.code, ErrorCode::Ecanceled);
    // SIGTERM is ignored, so the group dies only from the SIGKILL sent after the
    // grace. The upper bound only says it did not wait for the 60 s sleep
    // (unloaded, the whole path is ~45 ms).
    let took = cancelled_at.elapsed();
    eprintln!("cancel path with SIGKILL took {took:?}");
    assert!(took >= DEFAULT_TERM_GRACE, "cancel took {took:?}");
    assert!(took < Duration::from_secs(5), "cancel took {took:?}");
    assert_eq!(wait_group_gone(pgid, Duration::from_secs(1)).await, vec![]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_call_kills_the_group() {
    reap_orphans_here().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path());
    let tool = ProcTool::default();
    let call = tool.call(
        json!({"argv": ["sh", "-c", "echo $$ > pid; sleep 60 & sleep 60 & wait"]}),
        &c,
    );
    // The future is dropped at the timeout, without its cancel path running.
    let pid_file = dir.path().join("pid");
    let (timed_out, pgid) = tokio::join!(
        tokio::time::timeout(Duration::from_millis(300), call),
        read_pgid(&pid_file)
    );
    assert!(timed_out.is_err());
    assert_eq!(wait_group_gone(pgid, Duration::from_secs(1)).await, vec![]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leftovers_die_when_the_leader_exits() {
    reap_orphans_here().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    // The background sleep also holds stdout open: without the group kill,
    // reading to EOF would take 60 s.
    let out = run_ok(
        json!({"argv": ["sh", "-c", "echo $$; sleep 60 &"]}),
        &ctx(dir.path()),
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(out.data["exit_code"], 0);
    let pgid: i32 = out.data["stdout"].as_str().unwrap().trim().parse().unwrap();
    assert_eq!(group_members(pgid), vec![]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_tool_expands_placeholders() {
    let dir = tempfile::tempdir().unwrap();
    let tool = CommandTool::new(
        ToolContract::new(
            "show",
            "print arguments one per line",
            json!({"type": "object", "properties": {
                "count": {"type": "integer"}, "args": {"type": "array"}, "text": {"type": "string"}
            }}),
        ),
        ["printf", "%s\\n", "n={count}", "{count}", "{args...}"],
    )
    .unwrap();
    let out = tool
        .call(
            json!({"count": 7, "args": ["a b", "$HOME", "-x"]}),
            &ctx(dir.path()),
        )
        .await
        .unwrap();
    // `n={count}` is literal; no shell expands `$HOME`; `a b` stays one element.
    assert_eq!(out.data["stdout"], "n={count}\n7\na b\n$HOME\n-x\n");

    let cat = CommandTool::new(
        ToolContract::new(
            "cat",
            "echo stdin",
            json!({"type": "object", "properties": {"text": {"type": "string"}}}),
        ),
        ["cat"],
    )
    .unwrap()
    .with_stdin_field("text")
    .unwrap()
    .with_env("AGENTRY_TEST", "1");
    let out = cat
        .call(json!({"text": "from stdin"}), &ctx(dir.path()))
        .await
        .unwrap();
    assert_eq!(out.data["stdout"], "from stdin");
}

#[test]
fn contract_is_reversible_not_idempotent_scope_proc() {
    let contract = ProcTool::default().contract();
    assert_eq!(contract.name, "proc.run");
    assert_eq!(contract.effect, Effect::Reversible);
    assert_eq!(contract.idempotency, Idempotency::None);
    assert_eq!(contract.auth_scope, "proc");
    assert_eq!(contract.timeout_ms, 60_000);
    assert_eq!(contract.version, "1");
    assert_eq!(contract.input_schema["additionalProperties"], json!(false));
    assert_eq!(contract.input_schema["required"], json!(["argv"]));
    assert_eq!(
        contract.input_schema["properties"]["argv"]["minItems"],
        json!(1)
    );
}

#[test]
fn call_ids_become_safe_file_names() {
    assert_eq!(sanitize("call_1-a"), "call_1-a");
    assert_eq!(sanitize("../x/y"), "___x_y");
    assert_eq!(sanitize(""), "call");
    assert_eq!(sanitize(&"x".repeat(500)).len(), 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_already_cancelled_call_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path());
    c.cancel.cancel();
    let err = ProcTool::default()
        .call(json!({"argv": ["touch", "made"]}), &c)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Ecanceled);
    assert!(!dir.path().join("made").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_held_open_by_an_escaped_process_is_cut_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    // `setsid` leaves the group and `env -i` drops the marks the stray sweep
    // goes by: nothing can find it for us, and it keeps stdout open.
    let out = run_ok(
        json!({"argv": ["sh", "-c", "echo before; env -i setsid sleep 3 & sleep 0.2"]}),
        &ctx(dir.path()),
    )
    .await;
    let took = started.elapsed();
    assert!(took < Duration::from_millis(2500), "{took:?}");
    assert_eq!(out.data["stdout"], "before\n");
    let problems = out.data["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].as_str().unwrap().contains("still open"),
        "{problems:?}"
    );
}

/// The `NAME=value` lines of `env` output for the host's id variables, sorted.
fn host_ids(stdout: &str) -> Vec<&str> {
    let mut ids: Vec<&str> = stdout
        .lines()
        .filter(|l| HOST_ENV.iter().any(|n| l.starts_with(&format!("{n}="))))
        .collect();
    ids.sort_unstable();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_ids_reach_every_child_and_cannot_be_forged() {
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path());
    let want = [
        "AGENTRY_CALL_ID=call-1",
        "AGENTRY_OPERATION_ID=op-test",
        "AGENTRY_RUN_ID=run-1",
    ];

    // proc.run, even with the name allowlisted and set by the model.
    let mut config = ProcConfig::default();
    config.env_allowlist.push(ENV_OPERATION_ID.to_string());
    let out = ProcTool::new(config)
        .call(
            json!({"argv": ["env"], "env": {"AGENTRY_OPERATION_ID": "forged"}}),
            &c,
        )
        .await
        .unwrap();
    assert_eq!(host_ids(out.data["stdout"].as_str().unwrap()), want);

    // A command tool, even with a fixed variable of that name.
    let tool = CommandTool::new(
        ToolContract::new("env", "print the environment", json!({"type": "object"})),
        ["env"],
    )
    .unwrap()
    .with_env(ENV_OPERATION_ID, "forged");
    let out = tool.call(json!({}), &c).await.unwrap();
    assert_eq!(host_ids(out.data["stdout"].as_str().unwrap()), want);
}

/// The point of the operation id: a `required_key` command that records the ids
/// it has done appends once per action, however often the action is run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_required_key_command_dedupes_on_the_operation_id() {
    let dir = tempfile::tempdir().unwrap();
    let append = CommandTool::new(
        ToolContract::new(
            "ledger.append",
            "append a line once per operation",
            json!({"type": "object", "properties": {"line": {"type": "string"}}}),
        )
        .idempotency(Idempotency::RequiredKey),
        [
            "sh",
            "-c",
            "grep -qxF \"$AGENTRY_OPERATION_ID\" done.txt 2>/dev/null && exit 0; \
             printf '%s\\n' \"$1\" >> ledger.txt && \
             printf '%s\\n' \"$AGENTRY_OPERATION_ID\" >> done.txt",
            "sh",
            "{line}",
        ],
    )
    .unwrap();
    let run = |op: &str, call: &str, attempt: u32| {
        let mut c = ctx(dir.path());
        c.operation_id = Arc::from(op);
        c.call_id = call.to_string();
        c.attempt = attempt;
        c
    };
    // First attempt; its retry; the same action re-proposed under a new call id;
    // then a different action.
    for (op, call, attempt, line) in [
        ("op-a", "c1", 1, "pay 10"),
        ("op-a", "c1", 2, "pay 10"),
        ("op-a", "c2", 1, "pay 10"),
        ("op-b", "c3", 1, "pay 20"),
    ] {
        let out = append
            .call(json!({"line": line}), &run(op, call, attempt))
            .await
            .unwrap();
        assert_eq!(out.data["exit_code"], 0, "{op} {call}: {}", out.data);
    }
    assert_eq!(
        std::fs::read_to_string(dir.path().join("ledger.txt")).unwrap(),
        "pay 10\npay 20\n"
    );
}

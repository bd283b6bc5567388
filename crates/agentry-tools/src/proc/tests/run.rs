//! `proc.run` itself: arguments, environment, working directory, output caps.

use super::super::capture::{Artifact, Capture, head_text};
use super::super::run::sanitize;
use super::*;

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

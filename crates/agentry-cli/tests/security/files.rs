//! Security tests against the real binary: see `tests/security.rs`. This
//! module: files agentry reads because someone names them (issue 33, item 1)
//! — a script, a task file, a CA file, a trace, a store — given as `/dev/zero`, a FIFO
//! nobody writes, or a 2 GiB sparse file. Each entry point runs under a 1 GiB
//! address-space limit (`prlimit --as`): before, it read until the limit (or
//! the OOM killer) stopped it, or waited on the FIFO forever; now it exits at
//! once with an error naming the file and what is wrong, and nothing else.

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The address-space limit every run here gets: a whole 2 GiB read cannot fit.
const ADDRESS_SPACE: &str = "--as=1073741824";

/// A run still going after this is killed and fails its test (the FIFO bug).
const KILL_AFTER: Duration = Duration::from_secs(30);

/// How soon the error must come. It comes within a second; the margin is for
/// a debug binary on a loaded CI machine.
const PROMPTLY: Duration = Duration::from_secs(5);

/// What a name can point at besides a file.
#[derive(Debug, Clone, Copy)]
enum Hostile {
    /// `/dev/zero` (planted as a link to it where the name is fixed).
    DevZero,
    /// A FIFO nobody writes.
    Fifo,
    /// A 2 GiB sparse file (zeros, no newline).
    Sparse,
}

const ALL: [Hostile; 3] = [Hostile::DevZero, Hostile::Fifo, Hostile::Sparse];

impl Hostile {
    /// Makes this thing at `at`.
    fn plant(self, at: &Path) {
        match self {
            Hostile::DevZero => std::os::unix::fs::symlink("/dev/zero", at).unwrap(),
            Hostile::Fifo => {
                let made = Command::new("mkfifo").arg(at).status().unwrap();
                assert!(made.success(), "mkfifo {}", at.display());
            }
            Hostile::Sparse => std::fs::File::create(at).unwrap().set_len(2 << 30).unwrap(),
        }
    }

    /// A path naming this thing: `/dev/zero` itself, or one planted in `dir`.
    fn named(self, dir: &Path, name: &str) -> PathBuf {
        match self {
            Hostile::DevZero => PathBuf::from("/dev/zero"),
            Hostile::Fifo | Hostile::Sparse => {
                let at = dir.join(name);
                self.plant(&at);
                at
            }
        }
    }

    /// What the error says is wrong; `too_large` for the sparse file.
    fn problem(self, too_large: &str) -> String {
        match self {
            Hostile::DevZero => "not a regular file (a character device)".into(),
            Hostile::Fifo => "not a regular file (a FIFO)".into(),
            Hostile::Sparse => too_large.into(),
        }
    }
}

/// A sparse file's problem for a kind read whole.
fn too_large(kind: &str, cap: u64) -> String {
    format!("too large for a {kind}: 2147483648 bytes, at most {cap} are read")
}

/// A sparse trace's problem: its first line never ends.
const LONG_LINE: &str = "line 1 is longer than 67108864 bytes, the most a trace line may hold";

/// What a limited run gave.
#[derive(Debug)]
struct Exited {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
}

/// Kills `child` and fails if it has not exited within [`KILL_AFTER`] of `started`.
fn wait_bounded(child: &mut Child, started: Instant, what: &str) {
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > KILL_AFTER {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("{what} did not exit within {KILL_AFTER:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `prlimit --as=1GiB -- agentry ARGS` with `env` added, in `cwd`.
fn agentry(args: &[&OsStr], env: &[(&str, &OsStr)], cwd: &Path) -> Command {
    let mut cmd = Command::new("prlimit");
    cmd.args([ADDRESS_SPACE, "--"])
        .arg(env!("CARGO_BIN_EXE_agentry"))
        .args(args)
        .current_dir(cwd)
        .env("TMPDIR", cwd)
        .env_remove("RUST_LOG")
        .env_remove("SSL_CERT_FILE");
    for (name, value) in env {
        cmd.env(name, value);
    }
    cmd
}

/// Runs `agentry ARGS` limited, stdin closed, and what it gave.
fn run_limited(args: &[&OsStr], env: &[(&str, &OsStr)], cwd: &Path) -> Exited {
    let mut child = agentry(args, env, cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    wait_bounded(&mut child, started, &format!("agentry {args:?}"));
    let took = started.elapsed();
    let out = child.wait_with_output().unwrap();
    Exited {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        took,
    }
}

/// The run failed promptly as bad input (exit 2) with `message` as its last
/// line on stderr and nothing on stdout.
fn assert_refused(ran: &Exited, message: &str) {
    assert_eq!(ran.code, Some(2), "{ran:?}");
    assert_eq!(ran.stdout, "", "{ran:?}");
    assert_eq!(
        ran.stderr.lines().last(),
        Some(format!("agentry: {message}").as_str()),
        "{ran:?}"
    );
    assert!(ran.took < PROMPTLY, "took {:?}: {ran:?}", ran.took);
}

/// A task directory: a goal, nothing granted, a script that finishes.
fn task_dir(parent: &Path, toml_extra: &str) -> PathBuf {
    let dir = parent.join("task");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(
        dir.join("task.toml"),
        format!("goal = \"finish\"\n{toml_extra}"),
    )
    .unwrap();
    std::fs::write(
        dir.join("script.json"),
        r#"{"turns": [{"tool_calls": [{"id": "f", "name": "task.finish", "arguments": {"answer": "ok"}}]}]}"#,
    )
    .unwrap();
    dir
}

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

fn policy_script(path: &Path) -> OsString {
    let mut arg = OsString::from("script:");
    arg.push(path);
    arg
}

/// `agentry run TASK --policy script:FILE`.
#[test]
fn run_refuses_a_hostile_script_file_at_once() {
    for hostile in ALL {
        let tmp = tempfile::tempdir().unwrap();
        let task = task_dir(tmp.path(), "");
        let script = hostile.named(tmp.path(), "script.json");

        let ran = run_limited(
            &[
                os("run"),
                task.as_os_str(),
                os("--no-store"),
                os("--policy"),
                &policy_script(&script),
            ],
            &[],
            tmp.path(),
        );

        assert_refused(
            &ran,
            &format!(
                "{}: cannot read script: {}",
                script.display(),
                hostile.problem(&too_large("script", 16 << 20))
            ),
        );
    }
}

/// A task directory whose `task.toml` is a link to `/dev/zero`, a FIFO or a
/// sparse file.
#[test]
fn run_refuses_a_hostile_task_file_at_once() {
    for hostile in ALL {
        let tmp = tempfile::tempdir().unwrap();
        let task = task_dir(tmp.path(), "");
        let toml = task.join("task.toml");
        std::fs::remove_file(&toml).unwrap();
        hostile.plant(&toml);

        let ran = run_limited(
            &[os("run"), task.as_os_str(), os("--no-store")],
            &[],
            tmp.path(),
        );

        assert_refused(
            &ran,
            &format!(
                "{}: cannot read task file: {}",
                toml.display(),
                hostile.problem(&too_large("task file", 4 << 20))
            ),
        );
    }
}

/// `SSL_CERT_FILE` naming a hostile file: read when the model's client is
/// built, before any request.
#[test]
fn ssl_cert_file_naming_a_hostile_file_is_refused_at_once() {
    for hostile in ALL {
        let tmp = tempfile::tempdir().unwrap();
        let task = task_dir(tmp.path(), "");
        let bundle = hostile.named(tmp.path(), "bundle.pem");

        let ran = run_limited(
            &[
                os("run"),
                task.as_os_str(),
                os("--no-store"),
                os("--policy"),
                os("openai:gpt-test"),
                os("--base-url"),
                os("http://127.0.0.1:9/v1"),
            ],
            &[
                ("SSL_CERT_FILE", bundle.as_os_str()),
                ("OPENAI_API_KEY", os("sk-test")),
            ],
            tmp.path(),
        );

        assert_refused(
            &ran,
            &format!(
                "SSL_CERT_FILE = {}: cannot read it: {}; it must be a PEM file of CA certificates",
                bundle.display(),
                hostile.problem(&too_large("CA file", 4 << 20))
            ),
        );
    }
}

/// `[policy] ca_cert` naming a hostile file: what is not a file is refused
/// when the task loads, a huge file when the client is built.
#[test]
fn a_ca_cert_naming_a_hostile_file_is_refused_at_once() {
    for hostile in ALL {
        let tmp = tempfile::tempdir().unwrap();
        let task = task_dir(
            tmp.path(),
            "[policy]\nmodel = \"openai:gpt-test\"\nbase_url = \"http://127.0.0.1:9/v1\"\nca_cert = \"ca.pem\"\n",
        );
        let ca = task.join("ca.pem");
        hostile.plant(&ca);

        let ran = run_limited(
            &[os("run"), task.as_os_str(), os("--no-store")],
            &[("OPENAI_API_KEY", os("sk-test"))],
            tmp.path(),
        );

        let message = match hostile {
            Hostile::DevZero | Hostile::Fifo => format!(
                "{}: policy.ca_cert: {} does not exist or is not a file (a relative path is taken from the task directory)",
                task.join("task.toml").display(),
                ca.display()
            ),
            Hostile::Sparse => format!(
                "policy.ca_cert = {}: cannot read it: {}; it must be a PEM file of CA certificates",
                ca.display(),
                too_large("CA file", 4 << 20)
            ),
        };
        assert_refused(&ran, &message);
    }
}

/// `agentry run --store FILE` naming a hostile file (a FIFO was waited on
/// forever): SQLite opens the store by name, so it is judged by `stat` first;
/// a sparse file's first page is all SQLite reads.
#[test]
fn run_refuses_a_hostile_store_at_once() {
    for hostile in ALL {
        let tmp = tempfile::tempdir().unwrap();
        let task = task_dir(tmp.path(), "");
        let store = hostile.named(tmp.path(), "runs.db");

        let ran = run_limited(
            &[
                os("run"),
                task.as_os_str(),
                os("--store"),
                store.as_os_str(),
            ],
            &[],
            tmp.path(),
        );

        let message = match hostile {
            Hostile::DevZero | Hostile::Fifo => format!(
                "cannot open the store {}: it is not a regular file",
                store.display()
            ),
            Hostile::Sparse => format!(
                "the store {} is corrupt or not an agentry store: file is not a database",
                store.display()
            ),
        };
        assert_refused(&ran, &message);
    }
}

/// `agentry stats --trace`, `agentry view` and `agentry replay` on a hostile
/// trace: the line is capped, not the file.
#[test]
fn trace_readers_refuse_a_hostile_trace_at_once() {
    for hostile in ALL {
        let tmp = tempfile::tempdir().unwrap();
        let trace = hostile.named(tmp.path(), "trace.jsonl");
        let page = tmp.path().join("page.html");
        let message = format!(
            "cannot read the trace {}: {}",
            trace.display(),
            hostile.problem(LONG_LINE)
        );

        for args in [
            vec![os("stats"), os("--trace"), trace.as_os_str()],
            vec![os("view"), trace.as_os_str(), os("-o"), page.as_os_str()],
            vec![os("replay"), trace.as_os_str()],
        ] {
            let ran = run_limited(&args, &[], tmp.path());
            assert_refused(&ran, &message);
        }
        assert!(!page.exists());
    }
}

/// `agentry mcp` (stdio, limited) asked `tools/call` with `call` after the
/// handshake; the text of its `isError` result, which must come within
/// [`PROMPTLY`].
fn mcp_tool_error(cwd: &Path, call: serde_json::Value) -> String {
    let mut child = agentry(&[os("mcp"), os("--no-store")], &[], cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let messages = [
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "files-test", "version": "1"}}}),
        serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}),
    ];
    let mut stdin = child.stdin.take().unwrap();
    for message in messages {
        writeln!(stdin, "{message}").unwrap();
    }
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let answer = loop {
        let left = PROMPTLY.saturating_sub(started.elapsed());
        match rx.recv_timeout(left) {
            Ok(line) => {
                let value: serde_json::Value = serde_json::from_str(&line).unwrap();
                if value["id"] == 2 {
                    break value;
                }
            }
            Err(e) => {
                child.kill().unwrap();
                child.wait().unwrap();
                panic!("no answer to run_task within {PROMPTLY:?} ({e})");
            }
        }
    };
    // The server ends when its input does.
    drop(stdin);
    wait_bounded(&mut child, started, "agentry mcp");
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string()
}

/// `agentry mcp`'s `run_task` with `"policy": "script:FILE"` (it read
/// `/dev/zero` until the OOM killer stopped it) and with a `task_dir` whose
/// task.toml is hostile: a tool error at once.
#[test]
fn mcp_run_task_refuses_hostile_script_and_task_files_at_once() {
    for hostile in ALL {
        let tmp = tempfile::tempdir().unwrap();
        let script = hostile.named(tmp.path(), "script.json");

        let text = mcp_tool_error(
            tmp.path(),
            serde_json::json!({"name": "run_task", "arguments": {
                "task": {"goal": "x"},
                "policy": format!("script:{}", script.display())}}),
        );
        assert_eq!(
            text,
            format!(
                "{}: cannot read script: {}",
                script.display(),
                hostile.problem(&too_large("script", 16 << 20))
            )
        );

        let task = task_dir(tmp.path(), "");
        let toml = task.join("task.toml");
        std::fs::remove_file(&toml).unwrap();
        hostile.plant(&toml);
        let text = mcp_tool_error(
            tmp.path(),
            serde_json::json!({"name": "run_task", "arguments": {"task_dir": task}}),
        );
        assert!(
            text.ends_with(&format!(
                "cannot read task file: {}",
                hostile.problem(&too_large("task file", 4 << 20))
            )),
            "{text}"
        );
    }
}

/// `agentry run --trace FIFO` with nobody reading the FIFO: refused at once,
/// naming the file, rather than hanging before the run starts.
#[test]
fn run_refuses_a_trace_fifo_nobody_reads_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let task = task_dir(tmp.path(), "");
    let trace = Hostile::Fifo.named(tmp.path(), "trace.jsonl");

    let ran = run_limited(
        &[
            os("run"),
            task.as_os_str(),
            os("--no-store"),
            os("--trace"),
            trace.as_os_str(),
        ],
        &[],
        tmp.path(),
    );

    assert_eq!(ran.code, Some(2), "{ran:?}");
    let last = ran.stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains(&trace.display().to_string()) && last.contains("nobody is reading"),
        "{ran:?}"
    );
    assert!(ran.took < PROMPTLY, "took {:?}: {ran:?}", ran.took);
}

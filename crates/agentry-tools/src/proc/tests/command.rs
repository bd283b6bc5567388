//! [`CommandTool`]: placeholders, the host's ids, and the operation id a
//! `required_key` command dedupes on.

use super::*;

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

/// The `NAME=value` lines of `env` output for the host's id variables, sorted,
/// the spawn id's value (unique to each spawn) checked and replaced by `*`.
fn host_ids(stdout: &str) -> Vec<String> {
    let mut ids: Vec<String> = stdout
        .lines()
        .filter(|l| HOST_ENV.iter().any(|n| l.starts_with(&format!("{n}="))))
        .map(|l| match l.strip_prefix(&format!("{ENV_SPAWN_ID}=")) {
            Some(id) => {
                // The host's pid and start time: a later host given the
                // same pid (after this one died) has other spawn ids.
                let pid = std::process::id();
                let start = super::super::warden::start_time(pid as i32).unwrap();
                let host = format!("{pid}-{start}-");
                assert!(id.starts_with(&host), "spawn id {id} is not this host's");
                assert!(id[host.len()..].parse::<u64>().is_ok(), "spawn id {id}");
                format!("{ENV_SPAWN_ID}=*")
            }
            None => l.to_string(),
        })
        .collect();
    ids.sort_unstable();
    ids
}

/// The spawn id of `env` output.
fn spawn_id(stdout: &str) -> String {
    let prefix = format!("{ENV_SPAWN_ID}=");
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .expect("a spawn id")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_ids_reach_every_child_and_cannot_be_forged() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = ctx(dir.path());
    Arc::make_mut(&mut c.run).run_id = Arc::from("run-1"); // the only test with this run id
    let want = [
        "AGENTRY_CALL_ID=call-1",
        "AGENTRY_OPERATION_ID=op-test",
        "AGENTRY_RUN_ID=run-1",
        "AGENTRY_SPAWN_ID=*",
    ];

    // proc.run, even with the name allowlisted and set by the model.
    let mut config = ProcConfig::default();
    config.env_allowlist.push(ENV_OPERATION_ID.to_string());
    config.env_allowlist.push(ENV_SPAWN_ID.to_string());
    let tool = ProcTool::new(config);
    let forge = json!({"argv": ["env"], "env": {"AGENTRY_OPERATION_ID": "forged", "AGENTRY_SPAWN_ID": "forged"}});
    let out = tool.call(forge.clone(), &c).await.unwrap();
    let first = out.data["stdout"].as_str().unwrap().to_string();
    assert_eq!(host_ids(&first), want);
    // The same call again (as a retry would be) is a different spawn.
    let out = tool.call(forge, &c).await.unwrap();
    let second = out.data["stdout"].as_str().unwrap().to_string();
    assert_eq!(host_ids(&second), want);
    assert_ne!(spawn_id(&first), spawn_id(&second));

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

/// The `TRACEPARENT` lines of `env` output.
fn traceparents(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .filter(|l| l.starts_with(&format!("{ENV_TRACEPARENT}=")))
        .collect()
}

/// The call's trace context reaches `proc.run`, a command tool and a host
/// command (an acceptance check) as `TRACEPARENT`; the host's value wins over
/// an allowlisted, model-given or fixed one, and without a context none is set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trace_context_reaches_every_child_and_cannot_be_forged() {
    let dir = tempfile::tempdir().unwrap();
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let want = format!("{ENV_TRACEPARENT}={tp}");
    let mut c = ctx(dir.path());
    c.traceparent = Some(Arc::from(tp));
    let mut config = ProcConfig::default();
    config.env_allowlist.push(ENV_TRACEPARENT.to_string());
    let proc_run = ProcTool::new(config.clone());
    let forge = json!({"argv": ["env"], "env": {"TRACEPARENT": "00-forged"}});
    let out = proc_run.call(forge.clone(), &c).await.unwrap();
    assert_eq!(traceparents(out.data["stdout"].as_str().unwrap()), [&*want]);

    let command = CommandTool::new(
        ToolContract::new("env", "print the environment", json!({"type": "object"})),
        ["env"],
    )
    .unwrap()
    .with_env(ENV_TRACEPARENT, "00-forged");
    let out = command.call(json!({}), &c).await.unwrap();
    assert_eq!(traceparents(out.data["stdout"].as_str().unwrap()), [&*want]);

    let out = run_command(vec!["env".into()], &config, &c).await.unwrap();
    assert_eq!(traceparents(out.data["stdout"].as_str().unwrap()), [&*want]);

    // No context: nothing, and still not the forged value.
    c.traceparent = None;
    let out = proc_run.call(forge, &c).await.unwrap();
    assert!(traceparents(out.data["stdout"].as_str().unwrap()).is_empty());
    let out = command.call(json!({}), &c).await.unwrap();
    assert!(traceparents(out.data["stdout"].as_str().unwrap()).is_empty());
}

/// Records nothing; carries a run's fence mark.
struct Marked;

impl crate::ProcessLog for Marked {
    fn started(&self, _group: agentry_protocol::ProcessGroupRecord) {}

    fn run_mark(&self) -> Option<&str> {
        Some("mark-of-the-run")
    }
}

/// The `AGENTRY_RUN_MARK` lines of `env` output.
fn run_marks(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .filter(|l| l.starts_with(&format!("{ENV_RUN_MARK}=")))
        .collect()
}

/// The run's fence mark (from the context's process log) reaches `proc.run`
/// and a command tool; an allowlisted, model-given or fixed value never does
/// (it would let a tool make another run's resume kill it, or hide from its
/// own), and without a mark none is set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_mark_reaches_every_child_and_cannot_be_forged() {
    let dir = tempfile::tempdir().unwrap();
    let want = format!("{ENV_RUN_MARK}=mark-of-the-run");
    let mut c = ctx(dir.path());
    c.processes = Some(Arc::new(Marked));
    let mut config = ProcConfig::default();
    config.env_allowlist.push(ENV_RUN_MARK.to_string());
    let proc_run = ProcTool::new(config);
    let forge = json!({"argv": ["env"], "env": {"AGENTRY_RUN_MARK": "forged"}});
    let out = proc_run.call(forge.clone(), &c).await.unwrap();
    assert_eq!(run_marks(out.data["stdout"].as_str().unwrap()), [&*want]);

    let command = CommandTool::new(
        ToolContract::new("env", "print the environment", json!({"type": "object"})),
        ["env"],
    )
    .unwrap()
    .with_env(ENV_RUN_MARK, "forged");
    let out = command.call(json!({}), &c).await.unwrap();
    assert_eq!(run_marks(out.data["stdout"].as_str().unwrap()), [&*want]);

    c.processes = None;
    let out = proc_run.call(forge, &c).await.unwrap();
    assert!(run_marks(out.data["stdout"].as_str().unwrap()).is_empty());
    let out = command.call(json!({}), &c).await.unwrap();
    assert!(run_marks(out.data["stdout"].as_str().unwrap()).is_empty());
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

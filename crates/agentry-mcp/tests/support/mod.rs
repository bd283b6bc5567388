//! Shared by the MCP tests: the test server binary, a tool context with
//! recording sinks, polling with a deadline, process checks.

// Test code: a failed unwrap is the failure report; not every test file uses every helper.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentry_mcp::{McpServer, McpServerConfig, McpTransport};
use agentry_protocol::ProcessGroupRecord;
use agentry_tools::{ProcessLog, ProgressSink, RunScope, Tool, ToolContext, ToolProgress};
use tokio_util::sync::CancellationToken;

pub type TestError = Box<dyn std::error::Error + Send + Sync>;

/// The test server as `cargo test` builds it: target/<profile>/examples/test_server.
pub fn test_server() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(Path::parent).unwrap();
    let binary = profile.join("examples").join("test_server");
    assert!(
        binary.exists(),
        "{} is missing: build it with `cargo build -p agentry-mcp --example test_server` (`cargo test` does)",
        binary.display()
    );
    binary
}

/// A stdio declaration of the test server named `name`.
pub fn config(name: &str, args: &[&str]) -> McpServerConfig {
    let mut command = vec![test_server().display().to_string()];
    command.extend(args.iter().map(|a| a.to_string()));
    McpServerConfig::new(
        name,
        McpTransport::Stdio {
            command,
            env: Default::default(),
        },
    )
}

/// Sets `name=value` in a stdio declaration's env.
pub fn with_env(mut config: McpServerConfig, name: &str, value: &str) -> McpServerConfig {
    if let McpTransport::Stdio { env, .. } = &mut config.transport {
        env.insert(name.to_string(), value.to_string());
    }
    config
}

#[derive(Default)]
pub struct Progress(pub Mutex<Vec<(String, ToolProgress)>>);

impl ProgressSink for Progress {
    fn progress(&self, call_id: &str, update: ToolProgress) {
        self.0.lock().unwrap().push((call_id.to_string(), update));
    }
}

#[derive(Default)]
pub struct Groups(pub Mutex<Vec<ProcessGroupRecord>>);

impl ProcessLog for Groups {
    fn started(&self, group: ProcessGroupRecord) {
        self.0.lock().unwrap().push(group);
    }
}

/// A run's working directory and what its calls report.
pub struct Run {
    pub dir: tempfile::TempDir,
    pub progress: Arc<Progress>,
    pub groups: Arc<Groups>,
}

impl Run {
    pub fn new() -> Run {
        Run {
            dir: tempfile::tempdir().unwrap(),
            progress: Arc::default(),
            groups: Arc::default(),
        }
    }

    pub fn workdir(&self) -> &Path {
        self.dir.path()
    }

    /// A context for call `call_id`, cancelled by `cancel`.
    pub fn ctx(&self, call_id: &str, cancel: CancellationToken) -> ToolContext {
        let run = RunScope {
            progress: Some(self.progress.clone() as Arc<dyn ProgressSink>),
            ..RunScope::new("run-1", self.dir.path()).unwrap()
        };
        ToolContext {
            run: Arc::new(run),
            call_id: call_id.to_string(),
            cancel,
            attempt: 1,
            operation_id: Arc::from("op-1"),
            processes: Some(self.groups.clone() as Arc<dyn ProcessLog>),
            remote: None,
            deadlines: Default::default(),
            traceparent: None,
        }
    }
}

/// The server's tool `name` (`<server>.<name>`).
pub fn tool(server: &Arc<McpServer>, name: &str) -> Arc<dyn Tool> {
    let full = server.config().tool_name(name);
    server
        .tools()
        .into_iter()
        .find(|t| t.contract().name == full)
        .unwrap_or_else(|| panic!("no tool {full}"))
}

/// Polls `check` until it holds or `limit` passes.
pub async fn eventually(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Whether `pid` is a live (not zombie) process.
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

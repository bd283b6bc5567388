//! The test agent (tests/peers/echo_agent.py on the official Python SDK),
//! a tool context, and polling with a limit.

// Test code: a failed unwrap is the failure report; not every test file uses every helper.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentry_a2a::{A2aClient, A2aOptions, A2aTool, TaskState, discover};
use agentry_protocol::RemoteRef;
use agentry_tools::{ProgressSink, RemoteLog, RunScope, ToolContext, ToolProgress};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_util::sync::CancellationToken;

pub const TOKEN: &str = "s3cret-for-tests";

/// The test agent, killed when dropped.
pub struct Agent {
    _child: tokio::process::Child,
    pub base: String,
    record: PathBuf,
    dir: tempfile::TempDir,
}

impl Agent {
    pub async fn start() -> Agent {
        let python = std::env::var("A2A_PYTHON").unwrap_or_else(|_| {
            panic!(
                "A2A_PYTHON is unset: it must name a Python with `a2a-sdk[http-server]==1.3.0` and uvicorn \
                 (.ci/run makes .ci/a2a-venv and sets it)"
            )
        });
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/echo_agent.py");
        let dir = tempfile::tempdir().unwrap();
        let record = dir.path().join("record.txt");
        let stderr = dir.path().join("stderr.txt");
        let mut child = tokio::process::Command::new(&python)
            .arg(&script)
            .arg(TOKEN)
            .arg(&record)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("A2A_PYTHON={python} does not start: {e}"));
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = tokio::time::timeout(Duration::from_secs(60), lines.next_line()).await;
        let port = match first {
            Ok(Ok(Some(line))) if line.starts_with("PORT ") => line[5..].trim().to_string(),
            other => panic!(
                "the A2A test agent did not start with A2A_PYTHON={python} ({other:?}); its stderr:\n{}",
                std::fs::read_to_string(&stderr).unwrap_or_default()
            ),
        };
        Agent {
            _child: child,
            base: format!("http://127.0.0.1:{port}"),
            record,
            dir,
        }
    }

    pub fn options(&self) -> A2aOptions {
        A2aOptions::default().bearer(TOKEN)
    }

    pub async fn tool(&self) -> A2aTool {
        A2aTool::discover("echo", &self.base, &self.options())
            .await
            .unwrap()
            .poll_interval(Duration::from_millis(50))
    }

    pub async fn client(&self) -> A2aClient {
        discover(&self.base, &self.options()).await.unwrap().client
    }

    /// The task ids the agent saw a cancel for.
    pub fn cancels(&self) -> Vec<String> {
        self.seen("cancel ")
    }

    /// What the agent's record holds after `what` ("task ", "message ",
    /// "cancel "), one entry a line.
    pub fn seen(&self, what: &str) -> Vec<String> {
        std::fs::read_to_string(&self.record)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.strip_prefix(what).map(str::to_string))
            .collect()
    }

    pub fn ctx(&self, cancel: CancellationToken) -> ToolContext {
        self.ctx_with(cancel, None)
    }

    /// A context whose progress reports go to `progress`.
    pub fn ctx_with(
        &self,
        cancel: CancellationToken,
        progress: Option<Arc<Progress>>,
    ) -> ToolContext {
        let run = RunScope {
            progress: progress.map(|p| p as Arc<dyn ProgressSink>),
            ..RunScope::new("run-1", self.dir.path()).unwrap()
        };
        ToolContext {
            run: Arc::new(run),
            call_id: "call-1".to_string(),
            cancel,
            attempt: 1,
            operation_id: Arc::from("op-1"),
            processes: None,
            remote: None,
            deadlines: Default::default(),
            traceparent: None,
        }
    }
}

/// A remote log in memory: what a call recorded, and what it is to follow.
#[derive(Default)]
pub struct Remotes {
    pub started: Mutex<Vec<RemoteRef>>,
    pub follow: Option<RemoteRef>,
}

impl RemoteLog for Remotes {
    fn started(&self, task: RemoteRef) {
        self.started.lock().unwrap().push(task);
    }

    fn follow(&self) -> Option<RemoteRef> {
        self.follow.clone()
    }
}

pub fn str_of<'a>(data: &'a Value, key: &str) -> &'a str {
    data[key]
        .as_str()
        .unwrap_or_else(|| panic!("no {key} in {data}"))
}

pub async fn eventually(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < limit, "not within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The task's state once terminal (polled for up to 10 s).
pub async fn until_terminal(client: &A2aClient, id: &str) -> TaskState {
    let start = Instant::now();
    loop {
        let state = client.get_task(id).await.unwrap().status.state;
        if state.is_terminal() || start.elapsed() > Duration::from_secs(10) {
            return state;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The progress messages a call reported.
#[derive(Default)]
pub struct Progress(Mutex<Vec<String>>);

impl Progress {
    pub fn messages(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

impl ProgressSink for Progress {
    fn progress(&self, _call_id: &str, update: ToolProgress) {
        self.0
            .lock()
            .unwrap()
            .push(update.message.unwrap_or_default());
    }
}

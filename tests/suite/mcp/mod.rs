//! MCP servers' tools through the runtime, declared in task.toml
//! (`[[tools.mcp]]`), started by `TaskSpec::start_mcp` and registered by
//! `TaskSpec::registry_with`, as an embedding service or the CLI does.
//!
//! `everything`: the MCP reference server `@modelcontextprotocol/server-everything`
//! (an npm package) over stdio and streamable HTTP. Ignored by default:
//! `.ci/run` installs it, sets `MCP_EVERYTHING_DIR` and runs these with
//! `--ignored`; with the variable unset or unusable they fail saying so.
//! `lifecycle`: start failures, restarts and approvals, with servers that
//! need nothing installed. `changes`: a server whose tools change during a
//! run (`tools/list_changed`, a restart listing another schema).

mod changes;
mod everything;
mod lifecycle;
mod runs;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agentry_test_support::TestError;

/// The reference server's entry point (see `agentry_test_support::peers`).
pub(crate) fn everything_bin() -> Result<PathBuf, TestError> {
    agentry_test_support::peers::mcp_everything_bin()
}

/// A Node preload that makes a server listening on a bare port bind
/// 127.0.0.1 only (server-everything listens on every interface).
pub(crate) fn loopback_preload() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/loopback.cjs")
}

/// The reference server over streamable HTTP on 127.0.0.1, killed on drop.
pub(crate) struct EverythingHttp {
    child: Child,
    pub(crate) addr: SocketAddr,
}

impl EverythingHttp {
    pub(crate) fn start() -> Result<EverythingHttp, TestError> {
        let bin = everything_bin()?;
        // A free port, handed over (another process could take it first; the
        // readiness wait then fails loudly).
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = Command::new("node")
            .arg(bin)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .env(
                "NODE_OPTIONS",
                format!("--require {}", loopback_preload().display()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let server = EverythingHttp {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(server.addr).is_err() {
            if Instant::now() > deadline {
                return Err(format!("server-everything did not listen on {}", server.addr).into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(server)
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }
}

impl Drop for EverythingHttp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// agentry-mcp's test server, beside this test binary's profile directory.
pub(crate) fn test_server() -> Result<PathBuf, TestError> {
    let exe = std::env::current_exe()?;
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("no target directory")?;
    agentry_test_support::peers::mcp_test_server(profile)
}

/// Starts the task's MCP servers for a run in `workdir` under the task's
/// sandbox (the default unless its `[sandbox]` says otherwise), as the CLI does.
pub(crate) async fn start_mcp(
    task: &agentry::TaskSpec,
    workdir: &Path,
) -> Result<agentry::mcp::McpServers, agentry::TaskError> {
    let host = agentry::runtime::sandbox::SandboxHost::default();
    let sandboxes = task.sandboxes(workdir, &host)?;
    task.start_mcp(workdir, &sandboxes).await
}

/// Writes a task directory: `task.toml` from `toml`, with an empty workspace.
pub(crate) fn task_dir(root: &Path, toml: &str) -> Result<PathBuf, TestError> {
    let dir = root.join("task");
    std::fs::create_dir_all(dir.join("workspace"))?;
    std::fs::write(dir.join("task.toml"), toml)?;
    Ok(dir)
}

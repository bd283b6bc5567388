//! Process tools: the built-in `proc.run`, and [`CommandTool`] for embedders.
//!
//! Both run a program directly from an argv (never through a shell, unless the
//! argv itself runs one) with the same machinery:
//!
//! - **Environment.** The child's environment is cleared; only variables named in
//!   [`ProcConfig::env_allowlist`] are passed, with the host's values. `proc.run`
//!   may set allowlisted variables through its `env` argument; naming any other
//!   variable is `EPERM`. On top of that the host always sets [`ENV_RUN_ID`],
//!   [`ENV_CALL_ID`] and [`ENV_OPERATION_ID`] (`AGENTRY_RUN_ID`,
//!   `AGENTRY_CALL_ID`, `AGENTRY_OPERATION_ID`) from the [`ToolContext`], and
//!   [`ENV_SPAWN_ID`] (`AGENTRY_SPAWN_ID`, unique to the spawn), and, when the
//!   call's process log has one, the run's fence mark [`ENV_RUN_MARK`]
//!   (`AGENTRY_RUN_MARK`, see [`fence`]), overriding any value of the same name: the operation id is the same for every attempt of
//!   an action, so a command can drop a duplicate
//!   (`grep -qx "$AGENTRY_OPERATION_ID" done.txt || ...`). When the call has a
//!   trace context ([`ToolContext::traceparent`], set for every call of a run)
//!   the host also sets [`ENV_TRACEPARENT`] (`TRACEPARENT`, the W3C
//!   `00-<trace id>-<span id>-<flags>`), so a traced program's spans join the
//!   run's trace; like the ids, a host, fixed or model-given `TRACEPARENT` is
//!   dropped (the host's value wins, and without a context none is set).
//! - **Working directory.** The run's working directory, or for `proc.run` a
//!   relative `cwd` inside it (checked by [`resolve_in_workdir`]: absolute paths,
//!   `..` and symlinks leading out are `EPERM`).
//! - **Output caps.** Each of stdout and stderr keeps at most
//!   [`ProcConfig::max_inline`] bytes inline (the head, as lossy UTF-8 cut at a
//!   character boundary). A longer stream is streamed in full to
//!   `<artifacts>/out/<call id>.<attempt>.stdout` (or `.stderr`), the data says
//!   `stdout_truncated: true`, and the envelope's `refs` carry the file's path
//!   (relative to the working directory when inside it), the sha256 of the full
//!   stream and its length. Memory stays bounded whatever the output size.
//! - **Process groups.** Each call runs in its own process group. When the call's
//!   [`ToolContext::cancel`] fires (its timeout, the run's deadline, a user abort,
//!   shutdown) the whole group gets SIGTERM, then SIGKILL after
//!   [`ProcConfig::term_grace`], and is reaped; the call returns `ECANCELED`. If
//!   the future is dropped before that finished, a drop guard SIGKILLs the group
//!   synchronously. When the leader exits on its own, whatever it left running in
//!   its group is SIGKILLed too: a call's processes end with the call.
//! - **Orphans.** Group members whose parent died are re-parented to init, which
//!   this process cannot reap for them. Call [`reap_orphans_here`] once at startup
//!   (the CLI and the tests do) to make this process their subreaper, so the
//!   kill path reaps them and no zombie is left.
//!
//! # `proc.run`
//!
//! Arguments ([`RunArgs`]): `argv` (non-empty array of strings), optional `stdin`
//! (text fed to the process, then closed; without it stdin is `/dev/null`),
//! `cwd`, `env`. Data:
//!
//! ```json
//! {"exit_code": 0, "signal": null,
//!  "stdout": "...", "stderr": "", "stdout_truncated": false, "stderr_truncated": false,
//!  "stdout_bytes": 12, "stderr_bytes": 0}
//! ```
//!
//! A non-zero exit status is still a successful call (`ok: true`): the model reads
//! `exit_code` (`null` when the process was killed by a signal, which is then in
//! `signal`). A program that cannot be started (not found, not executable) is
//! `EINVAL` naming it. A `problems` array appears only when output could not be
//! fully captured (artifact not writable, output still open after the process
//! group was killed).
//!
//! `proc.run` is registered by [`crate::builtins`] but not granted by default: a
//! run grants it explicitly (`"proc.run"` or the scope `"proc"`).
//!
//! # Command-backed tools
//!
//! [`CommandTool`] wraps a fixed argv template behind a full [`ToolContract`], so
//! an embedder exposes `git.status` or `grep` to a model without exposing a
//! general `proc.run`:
//!
//! ```
//! use agentry_protocol::tool::{Effect, Idempotency, ToolContract};
//! use agentry_tools::Tool;
//! use agentry_tools::proc::CommandTool;
//! use serde_json::json;
//!
//! let status = CommandTool::new(
//!     ToolContract::new(
//!         "git.status",
//!         "Show the working tree status in porcelain format.",
//!         json!({"type": "object", "properties": {}, "additionalProperties": false}),
//!     )
//!     .effect(Effect::ReadOnly)
//!     .idempotency(Idempotency::Idempotent)
//!     .scope("git.read"),
//!     ["git", "status", "--porcelain"],
//! )?;
//!
//! // `{pattern}` and `{path}` are each replaced by one argv element. `-e` and `--`
//! // keep a pattern or path starting with `-` from being read as an option.
//! let grep = CommandTool::new(
//!     ToolContract::new(
//!         "grep",
//!         "Search a file for a regular expression; prints matching lines with numbers.",
//!         json!({
//!             "type": "object",
//!             "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}},
//!             "required": ["pattern", "path"],
//!             "additionalProperties": false
//!         }),
//!     )
//!     .effect(Effect::ReadOnly)
//!     .scope("search"),
//!     ["grep", "-n", "-e", "{pattern}", "--", "{path}"],
//! )?;
//! assert_eq!(status.contract().name, "git.status");
//! assert_eq!(grep.contract().timeout_ms, 30_000);
//! # Ok::<(), agentry_tools::proc::CommandToolError>(())
//! ```
//!
//! # Layout
//! - this file: [`ProcTool`] (`proc.run`) and its [`RunArgs`];
//! - `config.rs`: [`ProcConfig`] and its defaults;
//! - `env.rs`: the child's environment and the host's ids ([`HOST_ENV`]);
//! - `run.rs`: the shared runner ([`run_command`]), [`reap_orphans_here`];
//! - `command.rs`: [`CommandTool`] and its argv template;
//! - `server.rs`: [`ServerProcess`], a long-lived child (an MCP server) in its own group;
//! - `group.rs`: the process group (spawn, terminate, reap, drop guard);
//! - `warden.rs`: the process that kills what the host started when the host dies;
//! - `strays.rs`: processes that left the group, found by their marks;
//! - `exits.rs`: the wake-up on a child's exit both of those wait on;
//! - `capture.rs`: bounded capture of one output stream.

use std::collections::BTreeMap;

use agentry_protocol::ErrorCode;
use agentry_protocol::envelope::ToolError;
use agentry_protocol::tool::{Effect, Idempotency, ToolContract};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::fs::resolve_in_workdir;
use crate::tool::{Tool, ToolContext, ToolOutput, parse_args, schema_for};

mod capture;
mod command;
mod config;
mod env;
mod exits;
mod fence;
mod group;
mod refusal;
mod run;
mod sandbox;
mod server;
mod strays;
#[cfg(test)]
mod tests;
mod warden;

pub use command::{CommandTool, CommandToolError};
pub use config::{DEFAULT_ENV_ALLOWLIST, DEFAULT_MAX_INLINE, DEFAULT_TERM_GRACE, ProcConfig};
pub use env::{
    ENV_CALL_ID, ENV_OPERATION_ID, ENV_RUN_ID, ENV_RUN_MARK, ENV_SPAWN_ID, ENV_TRACEPARENT,
    HOST_ENV,
};
pub use fence::{FenceError, Fenced, fence};
pub use run::{reap_orphans_here, run_command, survive_file_size_limit};
pub use sandbox::RunSandboxes;
pub use server::ServerProcess;
pub use warden::{WARDEN_NAME, warden_pid};

use env::model_env;
use run::{Invocation, run};

/// Name of the run tool.
pub const RUN_TOOL: &str = "proc.run";

/// Auth scope of `proc.run`.
pub const PROC_SCOPE: &str = "proc";

/// Per-call timeout of `proc.run`, in milliseconds.
pub const RUN_TIMEOUT_MS: u64 = 60_000;

/// Arguments of `proc.run`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunArgs {
    /// The program and its arguments, e.g. `["ls", "-la"]`. Run directly, not by a
    /// shell: use `["sh", "-c", "..."]` for pipes or globs.
    #[schemars(length(min = 1))]
    pub argv: Vec<String>,
    /// Text written to the program's standard input, which is then closed.
    /// Without it, standard input is empty.
    #[serde(default)]
    pub stdin: Option<String>,
    /// Directory to run in, relative to the working directory (default: the
    /// working directory).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Environment variables to set. Only allowlisted names are accepted.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// The `proc.run` tool: runs a program in its own process group.
#[derive(Debug, Clone, Default)]
pub struct ProcTool {
    config: ProcConfig,
}

impl ProcTool {
    /// A `proc.run` tool with this configuration.
    pub fn new(config: ProcConfig) -> Self {
        ProcTool { config }
    }

    /// The configuration.
    pub fn config(&self) -> &ProcConfig {
        &self.config
    }
}

#[async_trait]
impl Tool for ProcTool {
    /// The group gets SIGTERM, then SIGKILL after `term_grace`, then is reaped:
    /// that needs the grace plus a little for the reaping.
    fn cancel_grace(&self) -> std::time::Duration {
        self.config.term_grace + std::time::Duration::from_millis(25)
    }

    fn sandbox(&self) -> Option<agentry_sandbox::SandboxOverride> {
        Some(agentry_sandbox::SandboxOverride::default())
    }

    fn contract(&self) -> ToolContract {
        ToolContract::new(
            RUN_TOOL,
            format!(
                "Run a program (argv[0]) with arguments, without a shell, in the working \
                 directory. Returns exit_code, signal, stdout and stderr. A non-zero \
                 exit_code is still a successful call: read it. Each stream shows at most \
                 {} bytes; longer output is marked *_truncated and saved to a file named \
                 in refs (read it with fs.read). Only these environment variables may be \
                 set: {}.",
                self.config.max_inline,
                self.config.env_allowlist.join(", ")
            ),
            schema_for::<RunArgs>(),
        )
        .effect(Effect::Reversible)
        .idempotency(Idempotency::None)
        .scope(PROC_SCOPE)
        .timeout_ms(RUN_TIMEOUT_MS)
        .version("1")
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: RunArgs = parse_args(args)?;
        let cwd = match args.cwd.as_deref() {
            Some(rel) => {
                let dir = resolve_in_workdir(&ctx.run.workdir, rel, false)?;
                if !dir.is_dir() {
                    return Err(ToolError::new(
                        ErrorCode::Einval,
                        format!("cwd is not a directory: {rel}"),
                    )
                    .with_action("call fs.list to see what exists"));
                }
                dir
            }
            None => ctx.run.workdir.to_path_buf(),
        };
        let env = model_env(&self.config.env_allowlist, &args.env)?;
        let invocation = Invocation {
            argv: args.argv,
            stdin: args.stdin,
            cwd,
            env,
            sandbox: agentry_sandbox::SandboxOverride::default(),
        };
        run(invocation, &self.config, ctx).await
    }
}

//! The one error of this crate, and how it becomes the runtime's.

use std::path::{Path, PathBuf};

use agentry_runtime::RuntimeError;

/// Why a task directory could not be loaded, or a run prepared from it. Every
/// message is the one the CLI prints (exit 2).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TaskError {
    /// A task directory, task.toml, declared tool or workspace entry is missing
    /// or invalid.
    #[error("{file}: {message}", file = file.display())]
    Invalid {
        /// The file at fault.
        file: PathBuf,
        /// What is wrong, naming the field.
        message: String,
    },
    /// Preparing the working directory failed.
    #[error("working directory {path}: {source}", path = path.display())]
    Workdir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The runtime refused something the task needs: the built-in tools did
    /// not register, or agentry's temp directory is unsafe to use.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// An MCP server the task declares did not start (or did not list its
    /// tools) within its `startup_timeout`; the error names the server and
    /// what it printed on stderr.
    #[error("{file}: {source}", file = file.display())]
    Mcp {
        /// The task file that declares the server.
        file: PathBuf,
        /// What went wrong.
        #[source]
        source: Box<agentry_mcp::McpError>,
    },
    /// A task a client sent names where this host's keys, headers or trust
    /// go ([`TaskSpec::check_client_supplied`](crate::TaskSpec::check_client_supplied)).
    #[error("{file}: {}", client_endpoint_message(fields), file = file.display())]
    ClientEndpoint {
        /// The task file the client's task was written as.
        file: PathBuf,
        /// Every such field, in file order (`policy.base_url`, `tools.mcp[0].url`).
        fields: Vec<String>,
    },
    /// A task a client sent loosens the kernel sandbox (see
    /// [`TaskSpec::check_client_sandbox`](crate::TaskSpec::check_client_sandbox)).
    #[error("{}: {}", file.display(), client_sandbox_message(fields))]
    ClientSandbox {
        /// The task file the client's task was written as.
        file: PathBuf,
        /// Every such field, in file order (`sandbox.mode`, `tools.command[0].sandbox.network`).
        fields: Vec<String>,
    },
}

impl TaskError {
    /// Shorthand for [`TaskError::Invalid`].
    pub(crate) fn invalid(file: impl AsRef<Path>, message: impl Into<String>) -> Self {
        TaskError::Invalid {
            file: file.as_ref().to_path_buf(),
            message: message.into(),
        }
    }
}

/// A task error, as an embedder of the runtime sees it: the same text as
/// before the task crate existed ([`RuntimeError::InvalidTask`],
/// [`RuntimeError::Workdir`]).
impl From<TaskError> for RuntimeError {
    fn from(e: TaskError) -> Self {
        match e {
            TaskError::Invalid { file, message } => RuntimeError::InvalidTask { file, message },
            TaskError::Workdir { path, source } => RuntimeError::Workdir { path, source },
            TaskError::Runtime(e) => e,
            TaskError::Mcp { file, source } => RuntimeError::InvalidTask {
                file,
                message: source.to_string(),
            },
            TaskError::ClientEndpoint { file, fields } => RuntimeError::InvalidTask {
                file,
                message: client_endpoint_message(&fields),
            },
            TaskError::ClientSandbox { file, fields } => RuntimeError::InvalidTask {
                file,
                message: client_sandbox_message(&fields),
            },
        }
    }
}

/// What [`TaskError::ClientSandbox`] says after the file.
fn client_sandbox_message(fields: &[String]) -> String {
    format!(
        "{}: not taken from a task a client sends: it would loosen the kernel sandbox its processes run under (mode off, network, extra writable roots, limits above the defaults); a client's task may only narrow it, and only the operator widens it",
        fields.join(", ")
    )
}

/// What [`TaskError::ClientEndpoint`] says after the file.
fn client_endpoint_message(fields: &[String]) -> String {
    format!(
        "{}: not taken from a task a client sends: it would choose where this host's API keys and header secrets are sent (model and MCP server URLs, CA certificates); only the operator configures those",
        fields.join(", ")
    )
}

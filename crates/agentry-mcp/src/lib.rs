//! MCP tools for agentry: any Model Context Protocol server's tools under
//! agentry's contracts, deadlines and ledger.
//!
//! Depends on the tool seam (agentry-tools), not on the runtime: a started
//! server's tools are [`agentry_tools::Tool`]s, registered like any other.
//!
//! # Layout
//! - `config.rs`: [`McpServerConfig`], what a task declares about a server
//!   ([`McpTransport`], allow-list, timeouts, [`ContractOverride`]s).
//! - `options.rs`: [`StartOptions`], how servers are started (the environment
//!   allowlist, the stderr cap, the handlers); a leaf read by the others.
//! - `session.rs`: one connection: a stdio child in its own process group with
//!   its captured stderr, or a streamable-HTTP session.
//! - `framing.rs`: a stdio server's output on its way to rmcp; a reply over
//!   16 MiB becomes an error of the call it answers.
//! - `handler.rs`: the client side of a session: the server's sampling and
//!   elicitation requests ([`SamplingHandler`], [`ElicitationHandler`]) and
//!   its progress notifications.
//! - `contract.rs`: a listed tool as an agentry contract (annotations, then
//!   the overrides).
//! - `content.rs`: a `tools/call` result as an envelope's data; files saved
//!   under [`MCP_ARTIFACTS_DIR`].
//! - `server.rs`: [`McpServer`] (a started server, its tools, restart,
//!   shutdown) and [`McpServers`] (several, started together).
//! - `error.rs`: [`McpError`], the crate's one error.
//!
//! # Servers
//!
//! [`McpServer::start`] reaches a declared server ([`McpServerConfig`]) on the
//! official Rust SDK (rmcp): a **stdio** server is a child process agentry
//! spawns itself, in its own process group, with a cleared environment (the
//! [`StartOptions::env_allowlist`] with the host's values, then the
//! declaration's `env`; no run id: a resumed run's fence must not kill the
//! new server), in the run's working directory, its stderr kept (the last
//! [`StartOptions::stderr_cap`] bytes) for error messages. A **streamable
//! HTTP** server is reached at its URL, `${VAR}` in header values read from
//! the environment at start; `https` through rustls with ring, trusting the
//! system's CAs plus those of `SSL_CERT_FILE` and the declaration's `ca_cert`
//! (the model adapters' rules), a failed handshake an [`McpError::Tls`]
//! saying how to trust the server's CA.
//!
//! Start runs `initialize` (protocol 2025-11-25), every page of `tools/list`
//! and the checks of what it lists within the declaration's
//! `startup_timeout`, or fails with an [`McpError`] naming the server and what
//! it printed on stderr. A server listing more than the declaration's
//! `max_tools` ([`DEFAULT_MAX_TOOLS`]) fails the start naming the cap (the
//! listing stops at the first page past it). A tool whose name breaks MCP's
//! rule (1–128 of `A-Z a-z 0-9 _ - .`) is skipped with a warning naming it
//! escaped. An allow-list (`tools`) or override naming a tool the server does
//! not offer is a start error naming it and what is offered.
//!
//! # Tools and contracts
//!
//! Each offered tool becomes `<server>.<tool>`, auth scope `<server>`, timeout
//! the declaration's `timeout`, input schema the server's. Effect and
//! idempotency come from the annotations (`readOnlyHint` → `read_only`,
//! `destructiveHint: false` → `reversible`, otherwise `irreversible_external`,
//! which the runtime parks for approval; `idempotentHint` → `idempotent`),
//! replaced by the declaration's overrides.
//!
//! A result's `structuredContent` is the envelope's data; otherwise one text
//! block is the data (a string), several blocks a list. Images, audio and
//! embedded resources are saved as `<artifacts>/mcp/<sha256>.<ext>` and
//! referenced (path, sha256, length in the envelope's refs), never inlined.
//! `isError: true` is an `EINVAL` error carrying the server's text.
//!
//! # Lifecycle
//!
//! - **Cancellation.** When a call's [`agentry_tools::ToolContext::cancel`]
//!   fires (deadline, abort, timeout) the call stops waiting, sends
//!   `notifications/cancelled` for its request (awaited, within the tool's
//!   `cancel_grace`) and returns `ECANCELED`.
//! - **Progress.** Each request carries a progress token; the server's
//!   progress notifications become the context's `tool_progress` reports.
//! - **Death.** A stdio server's group is listed with the warden (it dies with
//!   the host process) and recorded through the context's `processes` log with
//!   each call (a resume's fence kills a survivor). A server found dead when a
//!   call starts is restarted once for that call; if that fails the call gets
//!   a retryable `EUNAVAIL`. A server dying during a call fails that call with
//!   a retryable `EUNAVAIL` (never re-sent: it may have taken effect; the
//!   executor retries per contract).
//! - **Shutdown.** [`McpServer::shutdown`] closes the session and ends the
//!   group (SIGTERM, SIGKILL after [`SHUTDOWN_GRACE`]); dropping the server
//!   SIGKILLs it.
//! - **Server requests.** Sampling and elicitation are refused with an error
//!   naming the server unless [`StartOptions`] carries a [`SamplingHandler`]
//!   or [`ElicitationHandler`].
//! - **Changing tools.** On `notifications/tools/list_changed` the server's
//!   tools are listed again; a restarted server's listing is compared too. A
//!   tool the server dropped is no longer offered (a call through an earlier
//!   handle answers `ENOTOOL` naming it), a new one is offered if the
//!   allow-list lets it through, and a tool whose schema or annotations
//!   changed is logged (a warning naming it) and offered with the new ones.
//!   [`McpServers::on_tools_changed`] lets the embedder put a registry with
//!   the new tools in place (agentry-task does, for the runtime's
//!   `LiveRegistry`); the run's grants still decide what its model sees.

mod config;
mod content;
mod contract;
mod error;
mod framing;
mod handler;
mod listing;
mod options;
mod server;
mod servers;
mod session;
mod tls;

pub use config::{
    ContractOverride, DEFAULT_MAX_TOOLS, DEFAULT_STARTUP_TIMEOUT, DEFAULT_TIMEOUT, McpServerConfig,
    McpTransport,
};
pub use content::MCP_ARTIFACTS_DIR;
pub use error::McpError;
pub use handler::{ElicitationHandler, HandlerRefusal, SamplingHandler};
pub use options::{DEFAULT_STDERR_CAP, StartOptions};
pub use server::{McpServer, SHUTDOWN_GRACE};
pub use servers::McpServers;

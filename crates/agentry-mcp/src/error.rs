//! [`McpError`]: why a server could not be started. Every message names the
//! server; those of a stdio server that started include what it printed on
//! stderr (the last bytes, capped).

/// Why an MCP server could not be started (or restarted).
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The declaration is unusable as written.
    #[error("MCP server {server}: {reason}")]
    Config {
        /// The server's name.
        server: String,
        /// What is wrong.
        reason: String,
    },
    /// Two declarations share a name (their tools would collide).
    #[error("MCP server {server} is declared twice")]
    Duplicate {
        /// The server's name.
        server: String,
    },
    /// The server's command could not be started.
    #[error("MCP server {server}: cannot run {program}: {source}")]
    Spawn {
        /// The server's name.
        server: String,
        /// The program (the command's first element).
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// The server's sandbox could not be prepared (a kernel that cannot
    /// enforce its spec names what is missing).
    #[error("MCP server {server}: {source}")]
    Sandbox {
        /// The server's name.
        server: String,
        /// Why.
        source: agentry_sandbox::SandboxError,
    },
    /// The start (`initialize`, `tools/list`'s pages, checking what it
    /// lists) did not finish in time.
    #[error(
        "MCP server {server} did not finish its start (initialize, tools/list, checking its tools) within {timeout_ms} ms (startup_timeout){}",
        stderr_note(stderr)
    )]
    StartupTimeout {
        /// The server's name.
        server: String,
        /// The startup timeout.
        timeout_ms: u64,
        /// What it printed on stderr (the last bytes).
        stderr: String,
    },
    /// The MCP handshake or `tools/list` failed (the server exited, spoke
    /// something else, or refused).
    #[error("MCP server {server}: {stage} failed: {reason}{}", stderr_note(stderr))]
    Handshake {
        /// The server's name.
        server: String,
        /// `initialize` or `tools/list`.
        stage: &'static str,
        /// Why.
        reason: String,
        /// What it printed on stderr (the last bytes).
        stderr: String,
    },
    /// The server lists more tools than the declaration's `max_tools`.
    #[error(
        "MCP server {server} lists more than {cap} tools (at least {listed}; max_tools is {cap}); if that many are meant, raise max_tools in its [[tools.mcp]] declaration"
    )]
    TooManyTools {
        /// The server's name.
        server: String,
        /// How many it had listed when the listing was stopped.
        listed: usize,
        /// The declaration's `max_tools`.
        cap: usize,
    },
    /// The declaration's `tools` names a tool the server does not list.
    #[error("MCP server {server} does not list tool {tool} (named in `tools`); it lists: {}", listed.join(", "))]
    UnknownTool {
        /// The server's name.
        server: String,
        /// The tool asked for.
        tool: String,
        /// What the server lists.
        listed: Vec<String>,
    },
    /// An override names a tool the server does not list (or one left out by
    /// `tools`).
    #[error("MCP server {server}: override for tool {tool}, which is not offered; offered: {}", listed.join(", "))]
    UnknownOverride {
        /// The server's name.
        server: String,
        /// The tool the override names.
        tool: String,
        /// What is offered (after `tools`).
        listed: Vec<String>,
    },
    /// A header value names an environment variable that is not set.
    #[error(
        "MCP server {server}: header {header} needs environment variable {var}, which is not set"
    )]
    MissingHeaderVar {
        /// The server's name.
        server: String,
        /// The header.
        header: String,
        /// The variable.
        var: String,
    },
    /// A CA file (`SSL_CERT_FILE`, or the declaration's `ca_cert`) is
    /// missing, not PEM, or holds an unusable certificate.
    #[error("MCP server {server}: the CA file {} ({field}) is unusable: {reason}", path.display())]
    CaCert {
        /// The server's name.
        server: String,
        /// Where the path came from: `SSL_CERT_FILE` or `ca_cert`.
        field: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The HTTPS handshake failed (most often: the server's certificate is
    /// not signed by a trusted CA), or the HTTPS client could not be set up.
    #[error(
        "MCP server {server}: TLS failed at {url}: {reason}; if the server's certificate comes from a private or corporate CA, trust that CA with SSL_CERT_FILE or the server's ca_cert (a PEM file)"
    )]
    Tls {
        /// The server's name.
        server: String,
        /// Its URL.
        url: String,
        /// The TLS library's words (e.g. "invalid peer certificate: UnknownIssuer").
        reason: String,
    },
    /// A header name or value is not valid HTTP.
    #[error("MCP server {server}: header {header} is not valid: {reason}")]
    BadHeader {
        /// The server's name.
        server: String,
        /// The header.
        header: String,
        /// Why.
        reason: String,
    },
}

fn stderr_note(stderr: &str) -> String {
    let text = stderr.trim();
    if text.is_empty() {
        "; it printed nothing on stderr".to_string()
    } else {
        format!("; its stderr: {text}")
    }
}

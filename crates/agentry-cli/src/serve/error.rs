//! Why `agentry serve` does not serve.

use std::net::SocketAddr;
use std::path::PathBuf;

use agentry::RuntimeError;
use agentry_serve::ServeError;

/// Why `agentry serve` does not serve (exit 2).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ServeCliError {
    /// serve.toml, the tokens file or `AGENTRY_TOKEN` is unusable.
    #[error(transparent)]
    Setup(#[from] ServeError),
    /// No token and no `--no-auth`.
    #[error(
        "no bearer token is configured: set [auth] tokens_file in serve.toml (TENANT SHA256-HEX per line) or AGENTRY_TOKEN, or pass --no-auth to serve every caller of a loopback address"
    )]
    NoToken,
    /// `--no-auth` on an address other machines reach.
    #[error("--no-auth serves a loopback address only, not {0}")]
    NotLoopback(SocketAddr),
    /// An agent of serve.toml cannot run.
    #[error("{}: {key}: {message}", .config.display())]
    Agent {
        /// serve.toml.
        config: PathBuf,
        /// The key at fault (`agents.NAME.task`).
        key: String,
        /// Why.
        message: String,
    },
    /// Webhooks are configured but cannot be sent (the secret's variable
    /// is missing or unusable, the outbox cannot be opened).
    #[error("{}: {key}: {message}", .config.display())]
    Webhooks {
        /// serve.toml.
        config: PathBuf,
        /// The key at fault (`serve.webhook_secret_env`).
        key: String,
        /// Why.
        message: String,
    },
    /// The store cannot be used.
    #[error("{0}")]
    Store(RuntimeError),
    /// The address cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

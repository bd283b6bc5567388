//! Errors of building or connecting a model adapter. Failures during a run are
//! not errors: they become [`Decision::Failed`](agentry_protocol::Decision::Failed).

/// Why a model adapter cannot be used. Raised before a run starts.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The provider's API key variable is unset or empty.
    #[error(
        "{provider}: the API key is missing: set {var} (any non-empty value for a local server that does not check keys)"
    )]
    MissingKey {
        /// Provider name.
        provider: &'static str,
        /// The environment variable that must hold the key.
        var: &'static str,
    },
    /// The base URL is `https://`, but this build has no TLS backend.
    #[error(
        "{url}: this build speaks plain HTTP only (no TLS backend compiled in); use an http:// base URL (a local server, or a TLS-terminating proxy)"
    )]
    TlsUnavailable {
        /// The refused URL.
        url: String,
    },
    /// The base URL does not parse or is not HTTP.
    #[error("{url}: not a usable base URL: {reason}")]
    BadUrl {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// Nothing answered at the base URL.
    #[error("{url}: the model server is unreachable: {reason}")]
    Unreachable {
        /// The probed URL.
        url: String,
        /// The transport error.
        reason: String,
    },
    /// Two tool names map to the same wire name.
    #[error("tools {first:?} and {second:?} both map to the wire name {wire:?}; rename one")]
    NameCollision {
        /// First canonical name.
        first: String,
        /// Second canonical name.
        second: String,
        /// The shared wire name.
        wire: String,
    },
    /// A tool name cannot be expressed as a wire name (empty or over 64 characters).
    #[error(
        "tool {name:?} cannot be sent to the model: wire names are 1-64 characters of [a-zA-Z0-9_-]"
    )]
    BadToolName {
        /// The canonical name.
        name: String,
    },
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Client(#[from] reqwest::Error),
    /// The context window leaves no room for a prompt.
    #[error(
        "{field}: a context window of {tokens} tokens does not exceed the {reserved} output tokens each request reserves; give more than {reserved}"
    )]
    WindowTooSmall {
        /// What set the window (`policy.context_tokens`, `--context-tokens`).
        field: String,
        /// The window given.
        tokens: u64,
        /// The output tokens a request reserves.
        reserved: u64,
    },
    /// The policy spec (`openai:MODEL`) is malformed.
    #[error("{spec:?}: {reason}")]
    BadSpec {
        /// The spec as given.
        spec: String,
        /// Why it is refused.
        reason: String,
    },
}

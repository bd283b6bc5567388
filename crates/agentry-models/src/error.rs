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
    /// A CA file (`SSL_CERT_FILE`, or `[policy] ca_cert`) is missing or not PEM.
    #[error("{field} = {path}: {reason}; it must be a PEM file of CA certificates")]
    CaCert {
        /// Where the path came from: `SSL_CERT_FILE` or `policy.ca_cert`.
        field: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The TLS handshake with the model server failed: most often a certificate
    /// that does not verify against the trusted roots.
    #[error(
        "{host}: TLS failed: {reason} (at {url}); if the server's certificate comes from a private or corporate CA, trust that CA with SSL_CERT_FILE or [policy] ca_cert (a PEM file)"
    )]
    Tls {
        /// `host:port` of the server.
        host: String,
        /// The URL that was tried.
        url: String,
        /// What rustls said (e.g. "invalid peer certificate: UnknownIssuer").
        reason: String,
    },
    /// TLS cannot be set up for an `https://` server: most often, no CA
    /// certificate could be loaded from the system.
    #[error(
        "{url}: cannot set up TLS: {reason}; install the system's CA certificates (the ca-certificates package) or name a PEM bundle of CAs with SSL_CERT_FILE"
    )]
    TlsSetup {
        /// The base URL.
        url: String,
        /// Why (the client builder's error and its causes).
        reason: String,
    },
    /// The base URL does not parse or is not HTTP(S).
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
    #[error("cannot build the HTTP client: {}", chain(.0))]
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
    /// A fallback chain was built with no model.
    #[error("a fallback chain needs at least one model")]
    EmptyChain,
    /// No model of a fallback chain answered at start.
    #[error("no model server of the fallback chain is reachable: {reasons}")]
    NoneReachable {
        /// Each model's reason, in chain order.
        reasons: String,
    },
    /// A named model's shared count of requests in flight (a cluster's
    /// `max_concurrent`) cannot be read or written.
    #[error("models.{model}: the shared max_concurrent is not available: {reason}")]
    SharedGate {
        /// The named model.
        model: String,
        /// Why (the store's error).
        reason: String,
    },
}

/// An error and its sources, joined with ": " (reqwest's own text says only
/// "builder error" or "error sending request"; the cause is further down).
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
    agentry_tls::error_chain(error)
}

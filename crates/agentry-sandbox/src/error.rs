//! The crate's one error type.

use std::io;
use std::path::PathBuf;

/// Why a sandbox could not be prepared or a call could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The kernel cannot enforce what the spec asks (never a silent downgrade).
    #[error(
        "this kernel cannot enforce the sandbox: {what} is missing (set `[sandbox] mode = \"off\"` to run without it)"
    )]
    Unsupported {
        /// What is missing, e.g. "Landlock ABI 4 (TCP rules) — kernel has ABI 3".
        what: String,
    },
    /// A setting in the spec is malformed.
    #[error("sandbox setting `{key}` = {value:?}: {reason}")]
    InvalidSetting {
        /// The key in `[sandbox]`.
        key: &'static str,
        /// The value as written.
        value: String,
        /// What is wrong.
        reason: String,
    },
    /// A `host:port` grant did not resolve at prepare.
    #[error("sandbox network grant {grant:?} does not resolve: {source}")]
    Resolve {
        /// The grant as written.
        grant: String,
        /// The resolver's error.
        source: io::Error,
    },
    /// A path the sandbox needs could not be read or made.
    #[error("sandbox path {path}: {source}")]
    Path {
        /// The path.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// Building the Landlock ruleset failed.
    #[error("sandbox Landlock ruleset: {detail}")]
    Landlock {
        /// The crate's error, as text (its type is not ours to expose).
        detail: String,
    },
    /// Building the seccomp filter failed.
    #[error("sandbox seccomp filter: {detail}")]
    Seccomp {
        /// The compiler's error, as text.
        detail: String,
    },
}

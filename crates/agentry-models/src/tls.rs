//! TLS for hosted models: the HTTP client both adapters share, built by
//! `agentry-tls` (the OS roots plus the CAs of `SSL_CERT_FILE` and
//! `ModelConfig::ca_cert`, rustls with ring), its errors as [`ModelError`]s.

use std::path::Path;
use std::time::Duration;

use agentry_tls::{CaFile, ClientOptions, TlsError};

use crate::error::ModelError;

/// The field a CA file named in a task comes from, as errors name it.
const CA_CERT_FIELD: &str = "policy.ca_cert";

/// What the client for one base URL needs.
pub(crate) struct ClientSpec<'a> {
    /// The base URL, for errors.
    pub(crate) base_url: &'a str,
    /// Whether it is `https://`.
    pub(crate) https: bool,
    /// The extra CA file (`ModelConfig::ca_cert`).
    pub(crate) ca_cert: Option<&'a Path>,
    /// The connection timeout.
    pub(crate) connect_timeout: Duration,
}

/// Builds the client (`agentry_tls::client`: the OS roots plus the extra CAs).
pub(crate) fn client(spec: ClientSpec<'_>) -> Result<reqwest::Client, ModelError> {
    agentry_tls::client(ClientOptions {
        https: spec.https,
        ca_cert: spec.ca_cert.map(|path| CaFile {
            field: CA_CERT_FIELD,
            path,
        }),
        connect_timeout: Some(spec.connect_timeout),
    })
    .map_err(|e| match e {
        TlsError::CaCert {
            field,
            path,
            reason,
        } => ModelError::CaCert {
            field,
            path,
            reason,
        },
        TlsError::Setup { reason } => ModelError::TlsSetup {
            url: spec.base_url.to_string(),
            reason,
        },
    })
}

/// The TLS failure behind a transport error, if that is what it is: the
/// rustls error's text (e.g. "invalid peer certificate: UnknownIssuer").
pub(crate) fn tls_failure(error: &reqwest::Error) -> Option<String> {
    agentry_tls::tls_failure(error)
}

/// `host:port` of a URL, for messages about the connection to it.
pub(crate) fn host_of(url: &str) -> String {
    reqwest::Url::parse(url)
        .ok()
        .and_then(|u| {
            let host = u.host_str()?.to_string();
            Some(match u.port_or_known_default() {
                Some(port) => format!("{host}:{port}"),
                None => host,
            })
        })
        .unwrap_or_else(|| url.to_string())
}

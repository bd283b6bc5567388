//! TLS for streamable-HTTP servers, by the model adapters' rules
//! (`agentry-tls`: rustls with ring; the operating system's roots plus the CAs
//! of `SSL_CERT_FILE` and of the declaration's `ca_cert`), its errors as
//! [`McpError`]s naming the server. A handshake the server's certificate
//! fails is a start error saying how to trust its CA.

use std::path::Path;

use agentry_tls::{CaFile, ClientOptions, TlsError};

use crate::error::McpError;

/// The declaration's field, as errors name it.
const CA_CERT_FIELD: &str = "ca_cert";

/// The client for `server` at `url`.
pub(crate) fn http_client(
    server: &str,
    url: &str,
    ca_cert: Option<&Path>,
) -> Result<reqwest::Client, McpError> {
    agentry_tls::client(ClientOptions {
        https: url.starts_with("https://"),
        ca_cert: ca_cert.map(|path| CaFile {
            field: CA_CERT_FIELD,
            path,
        }),
        connect_timeout: None,
    })
    .map_err(|e| match e {
        TlsError::CaCert {
            field,
            path,
            reason,
        } => McpError::CaCert {
            server: server.to_string(),
            field,
            path,
            reason,
        },
        setup @ TlsError::Setup { .. } => McpError::Tls {
            server: server.to_string(),
            url: url.to_string(),
            reason: setup.to_string(),
        },
    })
}

/// The TLS failure behind an error, if that is what it is: the rustls
/// error's text (e.g. "invalid peer certificate: UnknownIssuer"). rmcp's
/// streamable-HTTP error keeps the HTTP client's error without naming it as
/// its source: that link is looked through too.
pub(crate) fn tls_failure(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    agentry_tls::tls_failure_through(error, &rmcp_client_error)
}

fn rmcp_client_error<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a (dyn std::error::Error + 'static)> {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    match e.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
        Some(StreamableHttpError::Client(inner)) => Some(inner),
        #[allow(clippy::wildcard_enum_match_arm)]
        // rmcp's enum, non-exhaustive: only Client holds the HTTP error
        Some(_) | None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_file_that_is_not_pem_is_named_with_its_server() {
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("ca.txt");
        std::fs::write(&text, "not a certificate").unwrap();
        let err = http_client("srv", "https://127.0.0.1:1/mcp", Some(&text))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("srv") && err.contains("ca_cert") && err.contains("ca.txt"),
            "{err}"
        );
        assert!(err.contains("no -----BEGIN CERTIFICATE-----"), "{err}");
    }
}

//! TLS for streamable-HTTP servers, by the model adapters' rules (this crate
//! does not depend on agentry-models): rustls with ring; trusted roots are the
//! operating system's plus the CAs of the PEM files named by `SSL_CERT_FILE`
//! and by the declaration's `ca_cert`. A CA file that cannot be read, holds no
//! certificate or an unusable one is a start error naming it; a handshake the
//! server's certificate fails is a start error saying how to trust its CA.

use std::path::{Path, PathBuf};

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crate::error::McpError;

/// The environment variable naming a CA bundle (the convention of OpenSSL,
/// curl and Python, and of agentry's model adapters).
pub(crate) const CERT_FILE_VAR: &str = "SSL_CERT_FILE";

/// The declaration's field, as errors name it.
const CA_CERT_FIELD: &str = "ca_cert";

/// ring as rustls' provider, unless one is installed already (an embedder's,
/// or agentry-models' own: the same provider).
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another installer is fine: a provider is in place.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// The client for `server` at `url`: the OS roots plus the extra CAs. For a
/// plain `http://` server nothing needs the OS roots, so a machine without
/// any (a slim container) still reaches a local server.
pub(crate) fn http_client(
    server: &str,
    url: &str,
    ca_cert: Option<&Path>,
) -> Result<reqwest::Client, McpError> {
    install_crypto_provider();
    let cas = extra_cas(server, ca_cert)?;
    let failed = |e: reqwest::Error| McpError::Tls {
        server: server.to_string(),
        url: url.to_string(),
        reason: format!("cannot set up the HTTPS client: {}", chain(&e)),
    };
    match reqwest::Client::builder()
        .tls_certs_merge(cas.clone())
        .build()
    {
        Ok(client) => Ok(client),
        Err(e) if url.starts_with("https://") => Err(failed(e)),
        Err(e) => {
            tracing::debug!(server, error = %chain(&e), "no system CA roots; plain HTTP needs none");
            reqwest::Client::builder()
                .tls_certs_only(cas)
                .build()
                .map_err(failed)
        }
    }
}

/// The CAs of `SSL_CERT_FILE` (if set) and of `ca_cert` (if given), each
/// file checked: readable, PEM, at least one certificate, each usable as a
/// root.
fn extra_cas(server: &str, ca_cert: Option<&Path>) -> Result<Vec<reqwest::Certificate>, McpError> {
    let mut cas = Vec::new();
    if let Some(path) = std::env::var_os(CERT_FILE_VAR).filter(|p| !p.is_empty()) {
        cas.extend(read_cas(server, CERT_FILE_VAR, Path::new(&path))?);
    }
    if let Some(path) = ca_cert {
        cas.extend(read_cas(server, CA_CERT_FIELD, path)?);
    }
    Ok(cas)
}

/// The certificates of one PEM file; errors name the server, `field` and
/// the path.
fn read_cas(
    server: &str,
    field: &'static str,
    path: &Path,
) -> Result<Vec<reqwest::Certificate>, McpError> {
    let bad = |reason: String| McpError::CaCert {
        server: server.to_string(),
        field,
        path: PathBuf::from(path),
        reason,
    };
    let pem = std::fs::read(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
    let ders = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("not a PEM file: {e}")))?;
    if ders.is_empty() {
        return Err(bad(
            "not a PEM certificate file: no -----BEGIN CERTIFICATE----- block in it".into(),
        ));
    }
    // Parsed now, so a broken certificate is named here, not at the handshake.
    let mut roots = rustls::RootCertStore::empty();
    ders.into_iter()
        .enumerate()
        .map(|(i, der)| {
            roots
                .add(der.clone())
                .map_err(|e| bad(format!("certificate {} is unusable: {e}", i + 1)))?;
            reqwest::Certificate::from_der(&der)
                .map_err(|e| bad(format!("certificate {} is unusable: {e}", i + 1)))
        })
        .collect()
}

/// The TLS failure behind an error, if that is what it is: the rustls
/// error's text (e.g. "invalid peer certificate: UnknownIssuer").
///
/// Walks the sources, and through the two links that hide theirs: rmcp's
/// streamable-HTTP error keeps the HTTP client's error without naming it as
/// its source, and an `io::Error`'s `source` skips the error it wraps.
pub(crate) fn tls_failure(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls.to_string());
        }
        if let Some(found) = hidden_inner(e).and_then(tls_failure) {
            return Some(found);
        }
        next = e.source();
    }
    None
}

/// The error a link holds without returning it from `source`.
fn hidden_inner<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a (dyn std::error::Error + 'static)> {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    if let Some(StreamableHttpError::Client(inner)) =
        e.downcast_ref::<StreamableHttpError<reqwest::Error>>()
    {
        return Some(inner);
    }
    let io = e.downcast_ref::<std::io::Error>()?.get_ref()?;
    Some(io)
}

/// An error and its sources on one line.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        text.push_str(": ");
        text.push_str(&s.to_string());
        next = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_file_that_is_not_pem_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("ca.txt");
        std::fs::write(&text, "not a certificate").unwrap();
        let err = read_cas("srv", CA_CERT_FIELD, &text)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("srv") && err.contains("ca_cert") && err.contains("ca.txt"),
            "{err}"
        );
        assert!(err.contains("no -----BEGIN CERTIFICATE-----"), "{err}");
        let absent = dir.path().join("absent.pem");
        let err = read_cas("srv", CERT_FILE_VAR, &absent)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("SSL_CERT_FILE") && err.contains("cannot read it"),
            "{err}"
        );
    }
}

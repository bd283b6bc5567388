//! The HTTP client agentry's model adapters and its MCP client share, and how
//! a TLS failure is told apart from any other transport error.
//!
//! rustls through reqwest, with ring as the crypto provider. Trusted roots:
//! the operating system's (rustls-platform-verifier), plus the CAs of the PEM
//! files named by `SSL_CERT_FILE` and by the caller's `ca_cert` (a model's
//! `[policy] ca_cert`, an MCP server's `[[tools.mcp]] ca_cert`), each read as
//! every named file is (`agentry_files`: no blocking open, regular files only,
//! at most the CA file cap). A CA file that cannot be read, holds no
//! certificate or an unusable one is a [`TlsError::CaCert`] naming the file and
//! where its path came from. Proxies
//! come from `HTTPS_PROXY` / `HTTP_PROXY` / `ALL_PROXY` / `NO_PROXY` (reqwest
//! reads them when the client is built).
//!
//! # Layout
//! - [`client`] and [`ClientOptions`]: the client for one server.
//! - [`install_crypto_provider`]: ring as the process's rustls provider.
//! - [`tls_failure`], [`tls_failure_through`]: the rustls error behind a
//!   transport error, if any.
//! - [`error_chain`]: an error and its sources on one line.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// The environment variable naming a CA bundle (the convention of OpenSSL,
/// curl and Python).
pub const CERT_FILE_VAR: &str = "SSL_CERT_FILE";

/// What went wrong building a client.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A CA file (`SSL_CERT_FILE`, or the caller's `ca_cert`) is unusable.
    #[error("{field} {}: {reason}", path.display())]
    CaCert {
        /// Where the path came from: `SSL_CERT_FILE` or the caller's field.
        field: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The HTTP client could not be set up (e.g. no usable roots for HTTPS).
    #[error("cannot set up the HTTPS client: {reason}")]
    Setup {
        /// The client's error and its sources.
        reason: String,
    },
}

/// Installs ring as the process's default rustls crypto provider, unless one
/// is installed already (an embedder's choice wins).
///
/// reqwest is compiled without a provider of its own, and every reqwest client
/// in the process needs one when it is built: a program that builds its own
/// reqwest clients before using an adapter calls this first.
pub fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another installer is fine: a provider is in place.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// What the client for one server needs.
#[derive(Debug, Clone, Copy)]
pub struct ClientOptions<'a> {
    /// Whether the server is `https://` (a plain `http://` one needs no roots).
    pub https: bool,
    /// An extra CA file and the field its path came from, as errors name it.
    pub ca_cert: Option<CaFile<'a>>,
    /// The connection timeout, if any.
    pub connect_timeout: Option<Duration>,
}

/// A CA file named by a declaration.
#[derive(Debug, Clone, Copy)]
pub struct CaFile<'a> {
    /// The field it came from (`policy.ca_cert`, `ca_cert`).
    pub field: &'static str,
    /// The file.
    pub path: &'a Path,
}

/// Builds the client: the OS roots plus the extra CAs. For a plain `http://`
/// server nothing needs the OS roots, so a machine without any (a slim
/// container) still reaches a local server.
pub fn client(options: ClientOptions<'_>) -> Result<reqwest::Client, TlsError> {
    install_crypto_provider();
    let cas = extra_cas(options.ca_cert)?;
    let builder = || {
        let b = reqwest::Client::builder();
        match options.connect_timeout {
            Some(t) => b.connect_timeout(t),
            None => b,
        }
    };
    let setup = |e: reqwest::Error| TlsError::Setup {
        reason: error_chain(&e),
    };
    match builder().tls_certs_merge(cas.clone()).build() {
        Ok(client) => Ok(client),
        Err(e) if options.https => Err(setup(e)),
        Err(e) => {
            tracing::debug!(error = %error_chain(&e), "no system CA roots; plain HTTP needs none");
            builder().tls_certs_only(cas).build().map_err(setup)
        }
    }
}

/// The CAs of `SSL_CERT_FILE` (if set) and of `ca_cert` (if given), each file
/// checked: readable, PEM, at least one certificate, every one of them usable
/// as a root.
fn extra_cas(ca_cert: Option<CaFile<'_>>) -> Result<Vec<reqwest::Certificate>, TlsError> {
    let mut cas = Vec::new();
    if let Some(path) = std::env::var_os(CERT_FILE_VAR).filter(|p| !p.is_empty()) {
        cas.extend(read_cas(CaFile {
            field: CERT_FILE_VAR,
            path: Path::new(&path),
        })?);
    }
    if let Some(file) = ca_cert {
        cas.extend(read_cas(file)?);
    }
    Ok(cas)
}

/// The certificates of one PEM file; errors name its field and path.
fn read_cas(file: CaFile<'_>) -> Result<Vec<reqwest::Certificate>, TlsError> {
    let bad = |reason: String| TlsError::CaCert {
        field: file.field,
        path: PathBuf::from(file.path),
        reason,
    };
    // Read as every named file is: a FIFO there is refused at once (it hung
    // the start), a bundle past the cap before it is read.
    let pem = agentry_files::read(file.path, agentry_files::FileKind::CA_FILE)
        .map_err(|e| bad(format!("cannot read it: {}", e.problem)))?;
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
            let unusable =
                |e: &dyn std::fmt::Display| bad(format!("certificate {} is unusable: {e}", i + 1));
            roots.add(der.clone()).map_err(|e| unusable(&e))?;
            reqwest::Certificate::from_der(&der).map_err(|e| unusable(&e))
        })
        .collect()
}

/// The TLS failure behind an error, if that is what it is: the rustls error's
/// text (e.g. "invalid peer certificate: UnknownIssuer").
///
/// Walks the sources, and through `io::Error`s: an `io::Error`'s `source`
/// skips the error it wraps (the connector wraps tokio-rustls' own), so
/// walking sources alone would miss it.
pub fn tls_failure(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    tls_failure_through(error, &|_| None)
}

/// An error a link holds without returning it from `source`.
pub type HiddenInner = dyn for<'a> Fn(
    &'a (dyn std::error::Error + 'static),
) -> Option<&'a (dyn std::error::Error + 'static)>;

/// [`tls_failure`], also looking through the links `hidden` knows of (e.g.
/// rmcp's streamable-HTTP error, which keeps the HTTP client's error without
/// naming it as its source), at every level of the chain.
pub fn tls_failure_through(
    error: &(dyn std::error::Error + 'static),
    hidden: &HiddenInner,
) -> Option<String> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls.to_string());
        }
        let wrapped = e
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            .map(|inner| inner as &(dyn std::error::Error + 'static))
            .or_else(|| hidden(e));
        if let Some(found) = wrapped.and_then(|inner| tls_failure_through(inner, hidden)) {
            return Some(found);
        }
        next = e.source();
    }
    None
}

/// An error and its sources on one line (a source whose text the line holds
/// already is left out: many errors repeat their source's).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        next = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_file_that_is_not_pem_or_absent_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("ca.txt");
        std::fs::write(&text, "not a certificate").unwrap();
        let err = read_cas(CaFile {
            field: "ca_cert",
            path: &text,
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("ca_cert") && err.contains("ca.txt"), "{err}");
        assert!(err.contains("no -----BEGIN CERTIFICATE-----"), "{err}");
        let absent = dir.path().join("absent.pem");
        let err = read_cas(CaFile {
            field: CERT_FILE_VAR,
            path: &absent,
        })
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("SSL_CERT_FILE") && err.contains("cannot read it"),
            "{err}"
        );
    }

    #[test]
    fn a_rustls_error_is_found_inside_an_io_error() {
        let tls = rustls::Error::General("bad certificate".into());
        let io = std::io::Error::other(tls);
        let outer = std::io::Error::other(io);
        assert_eq!(
            tls_failure(&outer).as_deref(),
            Some("unexpected error: bad certificate")
        );
        let plain = std::io::Error::other("refused");
        assert_eq!(tls_failure(&plain), None);
    }
}

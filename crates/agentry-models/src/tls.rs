//! TLS for hosted models: the HTTP client both adapters share, and how a TLS
//! failure is told apart from any other transport error.
//!
//! rustls through reqwest, with ring as the crypto provider. Trusted roots: the
//! operating system's (rustls-platform-verifier), plus the CAs of the PEM files
//! named by `SSL_CERT_FILE` and by `ModelConfig::ca_cert`. Proxies come from
//! `HTTPS_PROXY` / `HTTP_PROXY` / `ALL_PROXY` / `NO_PROXY` (reqwest reads them
//! when the client is built).

use std::path::{Path, PathBuf};
use std::time::Duration;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crate::error::ModelError;

/// The environment variable naming a CA bundle (the convention of OpenSSL,
/// curl and Python).
const CERT_FILE_VAR: &str = "SSL_CERT_FILE";

/// The field a CA file named in a task comes from, as errors name it.
const CA_CERT_FIELD: &str = "policy.ca_cert";

/// Installs ring as the process's default rustls crypto provider, unless one
/// is installed already (an embedder's choice wins).
///
/// reqwest is compiled without a provider of its own, and every reqwest client
/// in the process (not only this crate's) needs one when it is built: a program
/// that builds its own reqwest clients before using an adapter calls this first.
pub fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another installer is fine: a provider is in place.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

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

/// Builds the client: the OS roots plus the extra CAs. For a plain `http://`
/// server nothing needs the OS roots, so a machine without any (a slim
/// container) still reaches a local server.
pub(crate) fn client(spec: ClientSpec<'_>) -> Result<reqwest::Client, ModelError> {
    install_crypto_provider();
    let cas = extra_cas(spec.ca_cert)?;
    let builder = || reqwest::Client::builder().connect_timeout(spec.connect_timeout);
    match builder().tls_certs_merge(cas.clone()).build() {
        Ok(client) => Ok(client),
        Err(e) if spec.https => Err(ModelError::TlsSetup {
            url: spec.base_url.to_string(),
            reason: crate::error::chain(&e),
        }),
        Err(e) => {
            tracing::debug!(error = %crate::error::chain(&e), "no system CA roots; plain HTTP needs none");
            Ok(builder().tls_certs_only(cas).build()?)
        }
    }
}

/// The CAs of `SSL_CERT_FILE` (if set) and of `ca_cert` (if given), each file
/// checked: readable, PEM, at least one certificate, every one of them usable
/// as a root.
fn extra_cas(ca_cert: Option<&Path>) -> Result<Vec<reqwest::Certificate>, ModelError> {
    let mut cas = Vec::new();
    if let Some(path) = std::env::var_os(CERT_FILE_VAR).filter(|p| !p.is_empty()) {
        cas.extend(read_cas(CERT_FILE_VAR, Path::new(&path))?);
    }
    if let Some(path) = ca_cert {
        cas.extend(read_cas(CA_CERT_FIELD, path)?);
    }
    Ok(cas)
}

/// The certificates of one PEM file; errors name `field` and the path.
fn read_cas(field: &'static str, path: &Path) -> Result<Vec<reqwest::Certificate>, ModelError> {
    let bad = |reason: String| ModelError::CaCert {
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
    // Parsed now, so a broken certificate is named here, not as a client error.
    let mut roots = rustls::RootCertStore::empty();
    ders.into_iter()
        .enumerate()
        .map(|(i, der)| {
            roots
                .add(der.clone())
                .map_err(|e| bad(format!("certificate {} is unusable: {e}", i + 1)))?;
            reqwest::Certificate::from_der(&der).map_err(ModelError::Client)
        })
        .collect()
}

/// The TLS failure behind a transport error, if that is what it is: the
/// rustls error's text (e.g. "invalid peer certificate: UnknownIssuer").
pub(crate) fn tls_failure(error: &reqwest::Error) -> Option<String> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = next {
        if let Some(tls) = rustls_error(e) {
            return Some(tls.to_string());
        }
        next = e.source();
    }
    None
}

/// `e` as a rustls error, looking through io::Errors wrapped in io::Errors
/// (the connector wraps tokio-rustls' own): `io::Error::source` skips the
/// error it wraps, so walking sources alone would miss it.
fn rustls_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    if let Some(tls) = e.downcast_ref::<rustls::Error>() {
        return Some(tls);
    }
    let inner = e.downcast_ref::<std::io::Error>()?.get_ref()?;
    rustls_error(inner)
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

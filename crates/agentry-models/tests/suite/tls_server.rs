//! Real TLS for the scripted server: a CA made per test (rcgen), a server
//! certificate it signs for 127.0.0.1, and a listener that does the TLS
//! handshake (tokio-rustls) before handing the connection to axum. Shared by
//! path with the workspace suite and the CLI tests, like `server.rs`.

// Test-only helper outside #[test] functions: a poisoned lock is a bug in the
// test itself, and panicking says so loudest.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::server::TlsStream;

use super::server::TestError;

/// A certificate authority that exists only in this test.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl TestCa {
    /// A fresh CA; `name` is its common name (it shows up in nothing but the
    /// certificate, which helps when reading a failure).
    pub fn new(name: &str) -> Result<Self, TestError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate()?)?;
        Ok(TestCa { issuer })
    }

    /// The CA certificate, PEM.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// Writes the CA certificate to `dir/name` and returns the path.
    pub fn write_pem(&self, dir: &Path, name: &str) -> Result<PathBuf, TestError> {
        let path = dir.join(name);
        std::fs::write(&path, self.pem())?;
        Ok(path)
    }

    /// A server configuration whose certificate, for 127.0.0.1 and
    /// localhost, this CA signs.
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, TestError> {
        let key = KeyPair::generate()?;
        let params = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".into()])?;
        let leaf = params.signed_by(&key, &self.issuer)?;
        let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(
                vec![
                    leaf.der().clone(),
                    CertificateDer::from(self.issuer.der().to_vec()),
                ],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )?;
        Ok(Arc::new(config))
    }
}

/// What a TLS server presents, and what it saw at the TLS level.
#[derive(Clone)]
pub struct TlsServer {
    config: Arc<Mutex<Arc<ServerConfig>>>,
    connections: Arc<AtomicUsize>,
    failed: Arc<AtomicUsize>,
}

impl TlsServer {
    pub fn new(config: Arc<ServerConfig>) -> Self {
        TlsServer {
            config: Arc::new(Mutex::new(config)),
            connections: Arc::default(),
            failed: Arc::default(),
        }
    }

    /// Connections from now on present this configuration's certificate.
    pub fn present(&self, config: Arc<ServerConfig>) {
        *self.config.lock().unwrap() = config;
    }

    /// TCP connections accepted so far (counted before their handshake, so a
    /// client that saw the certificate has been counted).
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// Handshakes that failed so far (the client refused the certificate).
    pub fn failed_handshakes(&self) -> usize {
        self.failed.load(Ordering::SeqCst)
    }
}

/// An axum listener that hands over connections once their handshake is done.
/// Handshakes run in their own tasks, so a client that stalls or fails one
/// holds up nobody else.
pub struct TlsListener {
    addr: SocketAddr,
    ready: tokio::sync::mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
}

impl TlsListener {
    /// Binds 127.0.0.1:0; the accept loop ends with the runtime.
    pub async fn bind(server: TlsServer) -> Result<Self, TestError> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (tx, ready) = tokio::sync::mpsc::channel(16);
        tokio::spawn(async move {
            while let Ok((tcp, peer)) = listener.accept().await {
                server.connections.fetch_add(1, Ordering::SeqCst);
                let acceptor =
                    tokio_rustls::TlsAcceptor::from(Arc::clone(&server.config.lock().unwrap()));
                let (tx, failed) = (tx.clone(), Arc::clone(&server.failed));
                tokio::spawn(async move {
                    // Bounded: a client that never finishes its handshake is dropped.
                    match tokio::time::timeout(Duration::from_secs(20), acceptor.accept(tcp)).await
                    {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(_)) | Err(_) => {
                            failed.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                });
            }
        });
        Ok(TlsListener { addr, ready })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(connection) => connection,
            // The accept loop is gone (the runtime is shutting down): serve nothing more.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.addr)
    }
}

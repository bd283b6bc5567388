//! HTTPS_PROXY and NO_PROXY through the real binary, with a CONNECT proxy
//! written here, and the hosted APIs as the default servers: with only a key
//! set, the run tunnels to api.openai.com:443 / api.anthropic.com:443 (the
//! proxy refuses any host but 127.0.0.1, so no network is needed) and exits 2
//! with a connection error at start.

use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentry_models::Provider;

use super::hosted::{assert_done, base, key, run, sum_args, tls_server};
use crate::*;

/// Connections one proxy serves, and how long a tunnel may sit idle: bounds,
/// so a test that goes wrong fails instead of leaving threads behind.
const MAX_CONNECTIONS: usize = 16;
const IDLE: Duration = Duration::from_secs(30);

/// A CONNECT proxy on 127.0.0.1: records each request line, tunnels to
/// 127.0.0.1 only, refuses anything else with 403.
struct Proxy {
    url: String,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Proxy {
    fn start() -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        std::thread::spawn(move || {
            for client in listener.incoming().take(MAX_CONNECTIONS) {
                let Ok(client) = client else { return };
                let log = Arc::clone(&log);
                std::thread::spawn(move || tunnel(client, &log));
            }
        });
        Proxy { url, seen }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

/// Serves one proxy connection: reads the request head, then tunnels or refuses.
fn tunnel(client: TcpStream, log: &Mutex<Vec<String>>) {
    let _ = client.set_read_timeout(Some(IDLE));
    let mut reader = BufReader::new(client.try_clone().unwrap());
    let mut head = Vec::new();
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) if line.trim().is_empty() => break,
            Ok(_) => head.push(line.trim().to_string()),
        }
    }
    let Some(request) = head.first().cloned() else {
        return;
    };
    log.lock().unwrap().push(request.clone());
    let target = request
        .strip_prefix("CONNECT ")
        .and_then(|rest| rest.split_whitespace().next())
        .filter(|t| t.starts_with("127.0.0.1:"));
    let mut client_w = client;
    let Some(upstream) = target.and_then(|t| TcpStream::connect(t).ok()) else {
        let _ = client_w
            .write_all(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        return;
    };
    let _ = client_w.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
    let _ = upstream.set_read_timeout(Some(IDLE));
    let mut upstream_r = upstream.try_clone().unwrap();
    let down = std::thread::spawn(move || {
        let _ = std::io::copy(&mut upstream_r, &mut client_w);
        let _ = client_w.shutdown(Shutdown::Write);
    });
    let mut upstream_w = upstream;
    // The reader first hands over anything it buffered past the head.
    let _ = std::io::copy(&mut reader, &mut upstream_w);
    let _ = upstream_w.shutdown(Shutdown::Write);
    let _ = down.join();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_proxy_tunnels_the_run_and_no_proxy_bypasses_it() {
    let openai = Provider::OpenAi;
    let tmp = tempfile::tempdir().unwrap();
    let proxy = Proxy::start();
    let (server, _tls, pem) = tls_server(openai, tmp.path()).await;
    let authority = server.base_url.trim_start_matches("https://").to_string();
    let args = sum_args(openai, &base(openai, &server), &tmp.path().join("a"));
    let env = [
        key(openai),
        ("SSL_CERT_FILE", path_str(&pem)),
        ("HTTPS_PROXY", proxy.url.as_str()),
    ];
    let out = run(&args, &env).await;
    assert_done(&out, "through the proxy");
    let seen = proxy.seen();
    assert!(!seen.is_empty(), "the proxy saw nothing");
    let connect = format!("CONNECT {authority} HTTP/1.1");
    assert!(seen.iter().all(|line| *line == connect), "{seen:?}");
    assert_eq!(server.received().len(), 3);

    let (direct, _tls, pem) = tls_server(openai, &tmp.path().join("a")).await;
    let args = sum_args(openai, &base(openai, &direct), &tmp.path().join("b"));
    let env = [
        key(openai),
        ("SSL_CERT_FILE", path_str(&pem)),
        ("HTTPS_PROXY", proxy.url.as_str()),
        ("NO_PROXY", "127.0.0.1"),
    ];
    let out = run(&args, &env).await;
    assert_done(&out, "NO_PROXY");
    assert_eq!(
        proxy.seen(),
        seen,
        "NO_PROXY names the host: the proxy is bypassed"
    );
    assert_eq!(direct.received().len(), 3);
}

/// `--policy openai:MODEL` with only OPENAI_API_KEY set goes to
/// api.openai.com over TLS (and anthropic: to api.anthropic.com); with no way
/// out, that is a connection error at start, exit 2, not a refusal of TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hosted_apis_are_the_default_servers_over_tls() {
    for (provider, host, probe) in [
        (
            Provider::OpenAi,
            "api.openai.com:443",
            "https://api.openai.com/v1/models",
        ),
        (
            Provider::Anthropic,
            "api.anthropic.com:443",
            "https://api.anthropic.com/v1/models",
        ),
    ] {
        let proxy = Proxy::start();
        let spec = format!("{}:m", provider.name());
        let env = [key(provider), ("HTTPS_PROXY", proxy.url.as_str())];
        let out = run(["run", "examples/sum", "--policy", &spec], &env).await;
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert_eq!(proxy.seen(), [format!("CONNECT {host} HTTP/1.1")]);
        assert!(err.contains(probe) && err.contains("unreachable"), "{err}");
        assert!(!err.contains("TLS"), "{err}");
    }
}

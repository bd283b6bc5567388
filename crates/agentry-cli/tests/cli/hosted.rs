//! Hosted models, through the real binary: runs over real TLS against the
//! strict scripted server with a CA the test makes, trusted through
//! SSL_CERT_FILE or `[policy] ca_cert`; an untrusted certificate, a bad CA
//! file, an unknown model prefix: exit 2 naming what is wrong; HTTPS_PROXY
//! and NO_PROXY (in `proxy.rs`, with the hosted APIs as the default servers).
//!
//! Proxy variables are set only in the child's environment, never in this
//! process (tests run in parallel).

use agentry_models::Provider;

use crate::server::{MockServer, Reply};
use crate::sse::{anthropic_call, one_call};
use crate::tls_server::{TestCa, TlsServer};
use crate::*;

/// Variables of the test's own environment that would change what the child
/// does; each test sets the ones it means.
pub(crate) const CLEARED: &[&str] = &[
    "RUST_LOG",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
];

/// Runs the binary off the async runtime (the scripted server runs on it).
pub(crate) async fn run<A: AsRef<std::ffi::OsStr>>(
    args: impl IntoIterator<Item = A>,
    env: &[(&str, &str)],
) -> Output {
    let mut cmd = agentry_command();
    cmd.args(args).current_dir(root());
    for var in CLEARED {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

pub(crate) fn spec(provider: Provider) -> &'static str {
    match provider {
        Provider::OpenAi => "openai:tiny",
        Provider::Anthropic => "anthropic:tiny",
    }
}

pub(crate) fn key(provider: Provider) -> (&'static str, &'static str) {
    (provider.key_var(), "sk-test")
}

/// The base URL the CLI is given: OpenAI-compatible servers live under /v1.
pub(crate) fn base(provider: Provider, server: &MockServer) -> String {
    match provider {
        Provider::OpenAi => format!("{}/v1", server.base_url),
        Provider::Anthropic => server.base_url.clone(),
    }
}

/// The sum task's three turns, in the provider's stream format.
pub(crate) fn sum_turns(provider: Provider) -> Vec<Reply> {
    let turn = |id: &str, name: &str, args: &str| {
        Reply::sse(match provider {
            Provider::OpenAi => one_call(id, name, args),
            Provider::Anthropic => anthropic_call(id, name, args),
        })
    };
    vec![
        turn("read", "fs_read", r#"{"path":"numbers.txt"}"#),
        turn("write", "fs_write", r#"{"path":"sum.txt","content":"23"}"#),
        turn("fin", "task_finish", r#"{"answer":"sum=23"}"#),
    ]
}

/// A TLS scripted server for the sum task, its CA's PEM file in `dir`.
pub(crate) async fn tls_server(provider: Provider, dir: &Path) -> (MockServer, TlsServer, PathBuf) {
    let ca = TestCa::new("agentry CLI test CA").unwrap();
    let tls = TlsServer::new(ca.server_config().unwrap());
    let server = MockServer::start_tls(sum_turns(provider), &tls)
        .await
        .unwrap();
    let pem = ca.write_pem(dir, "ca.pem").unwrap();
    (server, tls, pem)
}

/// `run examples/sum` with a model policy at `url`, in `workdir`, no store, JSON.
pub(crate) fn sum_args(provider: Provider, url: &str, workdir: &Path) -> Vec<String> {
    [
        "run",
        "examples/sum",
        "--policy",
        spec(provider),
        "--base-url",
        url,
        "--workdir",
        path_str(workdir),
        "--no-store",
        "--json",
    ]
    .map(str::to_string)
    .to_vec()
}

/// The run's JSON report, after checking it ended `done` with exit 0.
pub(crate) fn assert_done(out: &Output, what: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{what}: {stdout} {}",
        stderr(out)
    );
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["stop_reason"], "done", "{what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_adapters_run_to_done_over_tls_trusting_ssl_cert_file() {
    for provider in [Provider::OpenAi, Provider::Anthropic] {
        let tmp = tempfile::tempdir().unwrap();
        let (server, tls, pem) = tls_server(provider, tmp.path()).await;
        let args = sum_args(provider, &base(provider, &server), &tmp.path().join("run"));
        let out = run(&args, &[key(provider), ("SSL_CERT_FILE", path_str(&pem))]).await;
        assert_done(&out, &format!("{provider:?}"));
        assert_eq!(server.received().len(), 3, "{provider:?}");
        assert!(server.rejected().is_empty(), "{:?}", server.rejected());
        assert_eq!(tls.failed_handshakes(), 0);
    }
}

/// A copy of examples/sum whose task.toml names the model, its server and
/// `ca_cert` (a path relative to the task directory).
pub(crate) fn hosted_task(dir: &Path, model: &str, base_url: &str, ca_cert: &str) -> PathBuf {
    let task = dir.join("task");
    std::fs::create_dir_all(task.join("workspace")).unwrap();
    let sum = root().join("examples/sum");
    std::fs::copy(
        sum.join("workspace/numbers.txt"),
        task.join("workspace/numbers.txt"),
    )
    .unwrap();
    let toml = std::fs::read_to_string(sum.join("task.toml")).unwrap();
    let policy =
        format!("\n[policy]\nmodel = {model:?}\nbase_url = {base_url:?}\nca_cert = {ca_cert:?}\n");
    std::fs::write(task.join("task.toml"), toml + &policy).unwrap();
    task
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_ca_cert_relative_to_the_task_dir_trusts_the_server() {
    for provider in [Provider::OpenAi, Provider::Anthropic] {
        let tmp = tempfile::tempdir().unwrap();
        let (server, _tls, pem) = tls_server(provider, tmp.path()).await;
        let task = hosted_task(
            tmp.path(),
            spec(provider),
            &base(provider, &server),
            "certs/ca.pem",
        );
        std::fs::create_dir(task.join("certs")).unwrap();
        std::fs::rename(&pem, task.join("certs/ca.pem")).unwrap();
        let workdir = tmp.path().join("run");
        let args = [
            "run",
            path_str(&task),
            "--workdir",
            path_str(&workdir),
            "--no-store",
            "--json",
        ];
        let out = run(args, &[key(provider)]).await;
        assert_done(&out, &format!("{provider:?}"));
        assert_eq!(server.received().len(), 3, "{provider:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_certificate_exits_2_at_start_naming_host_and_reason() {
    for provider in [Provider::OpenAi, Provider::Anthropic] {
        let tmp = tempfile::tempdir().unwrap();
        let (server, tls, _pem) = tls_server(provider, tmp.path()).await;
        let host = server.base_url.trim_start_matches("https://").to_string();
        let workdir = tmp.path().join("run");
        let out = run(
            sum_args(provider, &base(provider, &server), &workdir),
            &[key(provider)],
        )
        .await;
        assert_eq!(out.status.code(), Some(2), "{provider:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains(&format!(
                "agentry: {host}: TLS failed: invalid peer certificate: UnknownIssuer"
            )),
            "{err}"
        );
        assert!(
            err.contains("SSL_CERT_FILE") && err.contains("ca_cert"),
            "{err}"
        );
        // Refused at the start: one handshake, no model request, no run.
        assert!(server.received().is_empty(), "{provider:?}");
        assert_eq!(tls.connections(), 1, "{provider:?}");
        assert!(!workdir.exists());
    }
}

/// One bad input: the command line, the child's environment, and what the
/// error must name.
struct BadInput<'a> {
    args: Vec<&'a str>,
    env: Vec<(&'a str, &'a str)>,
    names: &'a str,
}

/// Each bad input exits 2 before anything runs, naming the flag, field or
/// variable: an unknown model prefix (flag and task), a missing key, a
/// `ca_cert` or SSL_CERT_FILE that does not exist or is not PEM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_model_input_exits_2_naming_the_field() {
    let tmp = tempfile::tempdir().unwrap();
    let url = "https://127.0.0.1:9";
    let not_pem = tmp.path().join("notes.txt");
    std::fs::write(&not_pem, "not a certificate\n").unwrap();
    let missing = tmp.path().join("absent.pem");
    let with_ca = |name: &str, ca: &str| {
        let task = hosted_task(&tmp.path().join(name), "openai:m", url, ca);
        path_str(&task).to_string()
    };
    let (absent_ca, text_ca) = (with_ca("a", "absent.pem"), with_ca("b", path_str(&not_pem)));
    let unknown = tmp.path().join("unknown");
    std::fs::create_dir(&unknown).unwrap();
    let toml = "goal = \"g\"\n[policy]\nmodel = \"gemini:x\"\n";
    std::fs::write(unknown.join("task.toml"), toml).unwrap();
    let k = ("OPENAI_API_KEY", "k");
    let flags = |more: &[&'static str]| {
        let mut args = vec!["run", "examples/sum", "--policy"];
        args.extend(more);
        args
    };
    let case = |args, env, names| BadInput { args, env, names };
    let cases = [
        case(flags(&["gemini:x"]), vec![k], "--policy"),
        case(vec!["run", path_str(&unknown)], vec![k], "policy.model"),
        case(flags(&["openai:m"]), vec![], "OPENAI_API_KEY"),
        case(vec!["run", &absent_ca], vec![k], "policy.ca_cert"),
        case(vec!["run", &text_ca], vec![k], "policy.ca_cert"),
        case(
            vec!["run", &text_ca],
            vec![k],
            "no -----BEGIN CERTIFICATE----- block",
        ),
        case(
            flags(&["openai:m", "--base-url", url]),
            vec![k, ("SSL_CERT_FILE", path_str(&missing))],
            "SSL_CERT_FILE",
        ),
        case(
            flags(&["openai:m", "--base-url", url]),
            vec![k, ("SSL_CERT_FILE", path_str(&not_pem))],
            "SSL_CERT_FILE",
        ),
    ];
    for BadInput { args, env, names } in cases {
        let out = run(&args, &env).await;
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(names), "{args:?} should name {names}: {err}");
    }
}

/// Without any system CA (an empty SSL_CERT_DIR stands in for a slim
/// container), an https:// server is refused at start, but a plain http://
/// local server is still reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_system_cas_https_exits_2_and_plain_http_still_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().join("no-cas");
    std::fs::create_dir(&empty).unwrap();
    let no_cas = ("SSL_CERT_DIR", path_str(&empty));
    let (tls_server, _tls, _pem) = tls_server(Provider::OpenAi, tmp.path()).await;
    let openai = Provider::OpenAi;
    let args = sum_args(openai, &base(openai, &tls_server), &tmp.path().join("a"));
    let out = run(args, &[key(openai), no_cas]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("cannot set up TLS")
            && err.contains("No CA certificates")
            && err.contains("SSL_CERT_FILE"),
        "{err}"
    );

    let plain = MockServer::start(sum_turns(openai)).await.unwrap();
    let args = sum_args(openai, &base(openai, &plain), &tmp.path().join("b"));
    let out = run(args, &[key(openai), no_cas]).await;
    assert_done(&out, "plain http without system CAs");
}

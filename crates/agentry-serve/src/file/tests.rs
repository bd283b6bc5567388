//! serve.toml's parser and checks, on good and bad files.

#![allow(clippy::unwrap_used)]

use super::*;

const GOOD: &str = r#"
[serve]
addr = "127.0.0.1:9000"
max_running = 3
max_queued = 10
drain_timeout = "5s"
[tenants."acme.eu"]
max_running = 1
max_cost_per_day = 2.5
[auth]
tokens_file = "tokens"
[agents.support]
task = "tasks/support"
model = "local"
[agents.sum]
task = "/abs/sum"
[models.local]
provider = "openai"
model = "m"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "LOCAL_KEY"
context_tokens = 8192
fallback = ["other"]
max_concurrent = 2
requests_per_minute = 60
tokens_per_minute = 10000
input_price = 0.15
output_price = 0.6
[models.other]
provider = "anthropic"
model = "n"
[telemetry]
otlp = "http://127.0.0.1:4318/v1/traces"
metrics = true
"#;

#[test]
fn a_good_file_parses_with_paths_relative_to_it() {
    let file = ServeFile::parse(GOOD, Path::new("/etc/agentry")).unwrap();
    assert_eq!(file.serve.addr, Some("127.0.0.1:9000".parse().unwrap()));
    assert_eq!(
        file.auth.tokens_file,
        Some(PathBuf::from("/etc/agentry/tokens"))
    );
    assert_eq!(
        file.agents["support"].task,
        PathBuf::from("/etc/agentry/tasks/support")
    );
    assert_eq!(file.agents["sum"].task, PathBuf::from("/abs/sum"));
    assert_eq!(file.models["local"].fallback, ["other"]);
    assert_eq!(file.models["local"].max_concurrent, Some(2));
    assert_eq!(file.serve.max_running, Some(3));
    assert_eq!(file.serve.max_queued, Some(10));
    assert_eq!(file.tenants["acme.eu"].max_cost_per_day, Some(2.5));
    assert_eq!(micros_of(2.5), Some(2_500_000));
    assert_eq!(file.serve.drain_timeout, Some(Duration::from_secs(5)));
    assert_eq!(
        file.telemetry.otlp.as_deref(),
        Some("http://127.0.0.1:4318/v1/traces")
    );
    assert!(file.telemetry.metrics);
}

#[test]
fn hibernate_after_is_30s_by_default_a_duration_or_off() {
    let parse = |text: &str| {
        ServeFile::parse(text, Path::new("/d"))
            .unwrap()
            .serve
            .hibernate_after()
    };
    assert_eq!(parse(""), Some(DEFAULT_HIBERNATE_AFTER));
    assert_eq!(
        parse("[serve]\nhibernate_after = \"5m\"\n"),
        Some(std::time::Duration::from_secs(300))
    );
    assert_eq!(parse("[serve]\nhibernate_after = \"off\"\n"), None);
}

#[test]
fn every_error_names_its_key() {
    // Size: one line per bad file, a table more than a procedure.
    for (text, key) in [
        ("[serve]\nport = 1\n", "serve.port"),
        ("[serve]\naddr = \"nowhere\"\n", "serve.addr"),
        ("[listen]\n", "listen"),
        ("[agents.x]\nmodel = \"m\"\n", "agents.x.task"),
        ("[agents.x]\ntask = \"t\"\ntools = []\n", "agents.x.tools"),
        (
            "[agents.x]\ntask = \"t\"\nmodel = \"m\"\n",
            "agents.x.model",
        ),
        ("[agents.x]\ntask = 3\n", "agents.x.task"),
        (
            "[models.m]\nprovider = \"acme\"\nmodel = \"a\"\n",
            "models.m.provider",
        ),
        (
            "[models.m]\nprovider = \"openai\"\nmodel = \"a\"\nfallback = [\"m\"]\n",
            "models.m.fallback",
        ),
        (
            "[models.m]\nprovider = \"openai\"\nmodel = \"a\"\napi_key = \"sk-1\"\n",
            "models.m.api_key",
        ),
        (
            "[models.m]\nprovider = \"openai\"\nmodel = \"a\"\ncontext_tokens = 0\n",
            "models.m.context_tokens",
        ),
        ("[serve]\nmax_running = 0\n", "serve.max_running"),
        ("[serve]\nmax_queued = -1\n", "serve.max_queued"),
        ("[serve]\nmax_queue = 1\n", "serve.max_queue"),
        (
            "[tenants.acme]\nmax_running = 0\n",
            "tenants.acme.max_running",
        ),
        (
            "[tenants.acme]\nmax_cost_per_day = 0\n",
            "tenants.acme.max_cost_per_day",
        ),
        ("[tenants.acme]\nmax_runs = 1\n", "tenants.acme.max_runs"),
        ("[tenants.\"a b\"]\nmax_running = 1\n", "tenants.a b"),
        (
            "[models.m]\nprovider = \"openai\"\nmodel = \"a\"\nmax_concurrent = 0\n",
            "models.m.max_concurrent",
        ),
        (
            "[models.m]\nprovider = \"openai\"\nmodel = \"a\"\ntokens_per_minute = 0\n",
            "models.m.tokens_per_minute",
        ),
        (
            "[models.m]\nprovider = \"openai\"\nmodel = \"a\"\nrequests_per_minute = \"5\"\n",
            "models.m.requests_per_minute",
        ),
        (
            "[models.m]\nprovider = \"openai\"\nmodel = \"a\"\ninput_price = -1.0\n",
            "models.m.input_price",
        ),
        (
            "[serve]\nhibernate_after = \"soon\"\n",
            "serve.hibernate_after",
        ),
        (
            "[serve]\nhibernate_after = \"0s\"\n",
            "serve.hibernate_after",
        ),
        ("[serve\n", "(file)"),
        ("[serve]\nretention = \"soon\"\n", "serve.retention"),
        ("[serve]\nretention = \"0s\"\n", "serve.retention"),
        (
            "[serve]\nwebhook_hosts = [\"127.0.0.1\"]\n",
            "serve.webhook_secret_env",
        ),
        (
            "[serve]\nwebhook_hosts = [\"http://x/\"]\nwebhook_secret_env = \"S\"\n",
            "serve.webhook_hosts",
        ),
        ("[serve]\ndrain_timeout = \"soon\"\n", "serve.drain_timeout"),
        ("[telemetry]\notel = \"x\"\n", "telemetry.otel"),
    ] {
        let bad = ServeFile::parse(text, Path::new("/d")).unwrap_err();
        assert_eq!(bad.key, key, "{text}: {}", bad.message);
    }
}

#[test]
fn every_guard_limit_key_is_parsed_into_the_limits() {
    let text = r#"
[serve]
max_message_bytes = 1024
max_create_bytes = 2048
max_run_input_bytes = 4096
inbox_capacity = 7
header_timeout = "3s"
body_timeout = "4s"
max_connections = 40
max_streams = 30
max_streams_per_run = 5
replay_bytes = 8192
stopped_replay_bytes = 512
keep_stopped = 0
"#;
    let file = ServeFile::parse(text, Path::new("/d")).unwrap();
    let limits = file.serve.limit_settings().limits().unwrap();
    assert_eq!(limits.message_bytes, 1024);
    assert_eq!(limits.create_bytes, 2048);
    assert_eq!(limits.run_input_bytes, 4096);
    assert_eq!(limits.inbox_capacity, 7);
    assert_eq!(limits.header_timeout, Duration::from_secs(3));
    assert_eq!(limits.body_timeout, Duration::from_secs(4));
    assert_eq!(limits.max_connections, 40);
    assert_eq!(limits.streams.total, 30);
    assert_eq!(limits.streams.per_run, 5);
    assert_eq!(limits.replay.live_bytes, 8192);
    assert_eq!(limits.replay.stopped_bytes, 512);
    assert_eq!(limits.keep_stopped, 0);
}

#[test]
fn unset_guard_limits_are_the_defaults() {
    let file = ServeFile::parse("[serve]\n", Path::new("/d")).unwrap();
    let limits = file.serve.limit_settings().limits().unwrap();
    assert_eq!(limits, crate::Limits::default());
    // Streams default to a share of the connections given.
    let file = ServeFile::parse("[serve]\nmax_connections = 40\n", Path::new("/d")).unwrap();
    let limits = file.serve.limit_settings().limits().unwrap();
    assert_eq!(limits.streams, crate::StreamLimits::for_connections(40));
}

#[test]
fn a_bad_guard_limit_is_an_error_naming_its_key() {
    let counts = [
        "max_message_bytes",
        "max_create_bytes",
        "max_run_input_bytes",
        "inbox_capacity",
        "max_connections",
        "max_streams",
        "max_streams_per_run",
        "replay_bytes",
        "stopped_replay_bytes",
    ];
    for key in counts {
        for value in ["0", "-1", "\"5\""] {
            let text = format!("[serve]\n{key} = {value}\n");
            let bad = ServeFile::parse(&text, Path::new("/d")).unwrap_err();
            assert_eq!(bad.key, format!("serve.{key}"), "{text}: {}", bad.message);
        }
    }
    for value in ["-1", "\"5\""] {
        let text = format!("[serve]\nkeep_stopped = {value}\n");
        let bad = ServeFile::parse(&text, Path::new("/d")).unwrap_err();
        assert_eq!(bad.key, "serve.keep_stopped", "{text}: {}", bad.message);
    }
    for key in ["header_timeout", "body_timeout"] {
        for value in ["\"0s\"", "\"soon\"", "10"] {
            let text = format!("[serve]\n{key} = {value}\n");
            let bad = ServeFile::parse(&text, Path::new("/d")).unwrap_err();
            assert_eq!(bad.key, format!("serve.{key}"), "{text}: {}", bad.message);
        }
    }
}

#[test]
fn max_streams_at_or_above_max_connections_is_refused() {
    for streams in [8, 9] {
        let text = format!("[serve]\nmax_connections = 8\nmax_streams = {streams}\n");
        let bad = ServeFile::parse(&text, Path::new("/d")).unwrap_err();
        assert_eq!(bad.key, "serve.max_streams", "{text}: {}", bad.message);
        assert!(
            bad.message.contains("max_connections (8)"),
            "{}",
            bad.message
        );
    }
    let text = "[serve]\nmax_connections = 8\nmax_streams = 7\n";
    let file = ServeFile::parse(text, Path::new("/d")).unwrap();
    assert_eq!(
        file.serve.limit_settings().limits().unwrap().streams.total,
        7
    );
}

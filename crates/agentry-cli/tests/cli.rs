//! The `agentry` binary, run for real: exit codes, `--json`, `--trace`, and the
//! example task directories.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

mod cli {
    mod a2a_questions;
    mod a2a_resume;
    mod a2a_tools;
    mod child_models;
    mod cluster;
    mod cluster_a2a;
    mod cluster_a2a_questions;
    mod cluster_agui;
    mod cluster_edges;
    mod docs;
    mod errors;
    mod fallback;
    #[cfg(target_os = "linux")]
    mod fencing;
    #[cfg(unix)]
    mod full_disk;
    mod hosted;
    #[cfg(unix)]
    mod interrupt;
    #[cfg(target_os = "linux")]
    mod lease;
    mod mcp;
    mod mcp_auth;
    mod mcp_endpoints;
    mod mcp_http;
    mod mcp_limits;
    #[cfg(target_os = "linux")]
    mod mcp_resume;
    #[cfg(unix)]
    mod mcp_stop;
    mod mcp_tls;
    mod mcp_trace;
    mod model;
    mod proxy;
    mod receiver;
    mod replay;
    mod replay_trust;
    mod run;
    mod runs;
    #[cfg(target_os = "linux")]
    mod sandbox;
    mod serve;
    mod serve_a2a;
    mod serve_a2a_store;
    mod serve_a2a_turns;
    mod serve_agents;
    mod serve_agui;
    mod serve_auth;
    mod serve_console;
    mod serve_console_page;
    mod serve_events;
    mod serve_hibernation;
    mod serve_limits;
    mod serve_list;
    mod serve_model_slots;
    mod serve_openapi;
    mod serve_ops;
    mod serve_postgres;
    mod serve_webhooks;
    mod stats;
    mod store_postgres;
    mod tls_resume;
    mod tools_cmd;
    mod tree;
    mod view;
    mod workspace;
}

// The models crate's scripted server (strict checker in front), its SSE
// pieces and its TLS helpers, shared by path; each test file uses part of them.
#[allow(dead_code, reason = "the models crate's own tests use the rest")]
#[path = "../../agentry-models/tests/suite/server.rs"]
mod server;
#[allow(dead_code, reason = "the models crate's own tests use the rest")]
#[path = "../../agentry-models/tests/suite/sse.rs"]
mod sse;
#[allow(dead_code, reason = "the models crate's own tests use the rest")]
#[path = "../../agentry-models/tests/suite/strict.rs"]
mod strict;
#[allow(dead_code, reason = "the models crate's own tests use the rest")]
#[path = "../../agentry-models/tests/suite/tls_server.rs"]
mod tls_server;

/// The workspace root: commands run from there, as the README shows them.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Where the binary keeps its default store in these tests
/// (`XDG_STATE_HOME`): under `target/`, never the real home's state directory.
fn state_home() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("state")
}

/// The binary, with its default store under [`state_home`].
fn agentry_command() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentry"));
    command.env("XDG_STATE_HOME", state_home());
    command
}

fn agentry(args: &[&str]) -> Output {
    agentry_command()
        .args(args)
        .current_dir(root())
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

/// Runs with `--json` and returns (exit code, the one JSON object on stdout).
fn agentry_json(args: &[&str]) -> (i32, Value) {
    let mut all = args.to_vec();
    all.push("--json");
    let out = agentry(&all);
    let stdout = String::from_utf8(out.stdout).unwrap();
    let value: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON object ({e}): {stdout:?}; stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap(), value)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A task directory with this task.toml and script.json.
fn task_dir(toml: &str, script: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("task.toml"), toml).unwrap();
    std::fs::write(dir.path().join("script.json"), script).unwrap();
    dir
}

/// Polls until some `sleep secs` process is alive (`alive`) or none is, for
/// 10 s at most.
#[cfg(unix)]
fn wait_for_sleepers(secs: &str, alive: bool) {
    let wait = std::time::Duration::from_secs(10);
    let deadline = std::time::Instant::now() + wait;
    while agentry_test_support::procs::alive_with_cmdline(&["sleep", secs]).is_empty() == alive {
        assert!(
            std::time::Instant::now() < deadline,
            "sleep {secs}: alive should be {alive} within {wait:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

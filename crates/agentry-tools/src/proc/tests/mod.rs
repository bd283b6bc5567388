//! Tests with real subprocesses. Each kill test reads the group id from the
//! process itself (`echo $$` in the `sh` leader) and scans `/proc` for it.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agentry_protocol::ErrorCode;
use agentry_protocol::fingerprint::sha256_hex;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::*;
use crate::tool::RunScope;

mod command;
mod fence;
mod group;
mod run;
mod warden;

/// A context with a run id no other test of this process uses: after each call
/// the stray sweep kills this process's children carrying the call's run and
/// call ids, so tests running at once must not share both.
fn ctx(workdir: &Path) -> ToolContext {
    static NEXT_RUN: AtomicU64 = AtomicU64::new(1);
    let run = NEXT_RUN.fetch_add(1, Ordering::Relaxed);
    ToolContext {
        run: Arc::new(RunScope::new(&format!("run-t{run}"), workdir).unwrap()),
        call_id: "call-1".to_string(),
        cancel: CancellationToken::new(),
        attempt: 1,
        operation_id: Arc::from("op-test"),
        processes: None,
        remote: None,
        deadlines: Default::default(),
        traceparent: None,
    }
}

async fn run_ok(args: Value, c: &ToolContext) -> ToolOutput {
    ProcTool::default().call(args, c).await.unwrap()
}

/// `(pid, state)` of every process whose process group is `pgid`.
fn group_members(pgid: i32) -> Vec<(i32, char)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue; // exited meanwhile
        };
        // "pid (comm) state ppid pgrp ...": comm may hold spaces and parens.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(2).and_then(|f| f.parse::<i32>().ok()) == Some(pgid) {
            found.push((pid, fields[0].chars().next().unwrap_or('?')));
        }
    }
    found
}

/// Polls until no process (alive or zombie) has group `pgid`, up to `limit`.
async fn wait_group_gone(pgid: i32, limit: Duration) -> Vec<(i32, char)> {
    let start = Instant::now();
    loop {
        let members = group_members(pgid);
        if members.is_empty() || start.elapsed() > limit {
            return members;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Polls until group `pgid` has `n` live members, up to 5 s; returns them.
async fn wait_group_size(pgid: i32, n: usize) -> Vec<(i32, char)> {
    let start = Instant::now();
    loop {
        let members = group_members(pgid);
        let live = members.iter().filter(|(_, state)| *state != 'Z').count();
        if live == n || start.elapsed() > Duration::from_secs(5) {
            return members;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits (up to 5 s) for the leader to write its pid (= pgid) to `file`.
async fn read_pgid(file: &Path) -> i32 {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        if let Ok(text) = std::fs::read_to_string(file)
            && let Ok(pid) = text.trim().parse()
        {
            return pid;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the leader never wrote its pid to {}", file.display());
}

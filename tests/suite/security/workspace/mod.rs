//! Security tests: see `mod.rs`. This module: the workspace — file tools under a
//! model racing them, agentry's own artifact writes, acceptance checks against
//! hostile files, acceptance commands' environment, and processes that try to
//! outlive their call.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agentry::protocol::accept::AcceptCheck;
use agentry::tools::proc::{CommandTool, reap_orphans_here};
use agentry::{Decision, Effect, ErrorCode, Runtime, StopReason, ToolCall, ToolContract};
use agentry_test_support::{
    FnPolicy, ScriptBuilder, TestError, TestTask, run_with_events, runtime_with, tool_results,
};
use serde_json::json;

mod acceptance;
mod artifacts;
mod processes;
mod races;

//! `POST /runs`: a JSON request body into a validated task, a script and a fresh
//! working directory.
//!
//! The task fields are the ones of task.toml. Rather than validate them a second
//! way, the service turns them back into task.toml text and hands that to
//! `TaskSpec::parse`, so a request gets exactly the CLI's checks and messages
//! (`budget.max_steps: expected a positive integer, found "ten"`).
//!
//! A W3C `traceparent` header puts the run in the caller's trace
//! ([`traceparent`]); an invalid one is ignored, as W3C Trace Context asks, and
//! the run starts a trace of its own.
//!
//! Everything here blocks (parsing a body of up to `--max-create-bytes`, creating
//! the directory, writing the files), so the service calls [`prepare`] on the
//! blocking pool, never on the async workers that serve every other request.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Component, Path};

use agentry::protocol::stored_policy::{RootSpec, StoredPolicy};
use agentry::{RunConfig, Script, TaskError, TaskSpec};
use axum::http::HeaderMap;
use serde_json::Value;
use tempfile::TempDir;

use super::agents::AgentRun;
use super::error::ApiError;

/// Task id of every run the service starts (task.toml takes it from the task
/// directory's name; a request has none).
pub const TASK_ID: &str = "service";

/// A run ready to start.
#[derive(Debug)]
pub struct NewRun {
    /// The run configuration, its working directory set.
    pub config: RunConfig,
    /// The scripted policy's script.
    pub script: Script,
    /// The working directory; removed when dropped, so it lives as long as the run's entry.
    pub workdir: TempDir,
    /// The completion webhook's URL, not yet checked against the allowed hosts.
    pub webhook: Option<String>,
}

/// What a `POST /runs` body asks for.
#[derive(Debug)]
pub enum Prepared {
    /// An inline task with its script.
    Inline(Box<NewRun>),
    /// A run of a named agent (the tenant, traceparent and inbox capacity
    /// are the route's to fill in).
    Agent(Box<AgentRun>),
}

/// The fields of a named agent's request.
const AGENT_FIELDS: &[&str] = &["agent", "input", "files", "budget", "tools", "webhook"];

/// A named agent's request, checked for its shape.
fn agent_request(mut fields: serde_json::Map<String, Value>) -> Result<AgentRun, ApiError> {
    if let Some(unknown) = fields.keys().find(|k| !AGENT_FIELDS.contains(&k.as_str())) {
        return Err(ApiError::bad_field(
            unknown.clone(),
            format!(
                "not a field of an agent's run; expected one of {} (the task is the operator's)",
                AGENT_FIELDS.join(", ")
            ),
        ));
    }
    let agent = super::body::string_field(&fields, "agent", true)?.unwrap_or_default();
    let input = super::body::string_field(&fields, "input", false)?;
    let webhook = super::webhooks::field(&fields)?;
    let object = |fields: &mut serde_json::Map<String, Value>, name: &str| match fields.remove(name)
    {
        None => Ok(None),
        Some(Value::Object(map)) => Ok(Some(map)),
        Some(other) => Err(ApiError::bad_field(
            name,
            format!("expected an object, found {other}"),
        )),
    };
    let budget = object(&mut fields, "budget")?;
    let tools = object(&mut fields, "tools")?;
    Ok(AgentRun {
        agent,
        input,
        files: fields.remove("files"),
        budget,
        tools,
        tenant: super::tenants::Tenant::anyone(),
        traceparent: None,
        inbox_capacity: agentry::DEFAULT_INBOX_CAPACITY,
        webhook,
        run_id: None,
        cost_cap_micros: None,
    })
}

/// A client may narrow the sandbox of the built-in process tools, never
/// loosen it (`TaskSpec::check_client_sandbox`).
fn refuse_a_wider_sandbox(spec: &TaskSpec) -> Result<(), ApiError> {
    let widened = spec.client_sandbox_widenings();
    if widened.is_empty() {
        return Ok(());
    }
    Err(ApiError::bad_request(format!(
        "{}: a client's task may only narrow the kernel sandbox (mode off, network, extra writable roots and limits above the defaults are the operator's to grant)",
        widened.join(", ")
    )))
}

/// Validates the body: a named agent's request, or an inline task whose
/// working directory is prepared with its initial files. Blocking: see the
/// module docs.
/// An inline task's working directory is made under `root` (`[serve]
/// workdir_root`), else in the private temp directory.
pub fn prepare(body: &[u8], root: Option<&Path>) -> Result<Prepared, ApiError> {
    let Value::Object(task) = super::body::parse_json(body)? else {
        return Err(ApiError::bad_request(
            "the body must be a JSON object: {\"agent\", \"input\", ...} for a named agent, or task fields (goal, artifacts, budget, tools, accept, progress, driver, tree, redact, trace) plus script and files",
        ));
    };
    if task.contains_key("agent") {
        return agent_request(task).map(|run| Prepared::Agent(Box::new(run)));
    }
    inline(task, root).map(|run| Prepared::Inline(Box::new(run)))
}

/// An inline task's own tools, refused: the runtime serves built-in tools
/// only; silently dropping a field would leave a task that "worked" without
/// the tools it declared.
fn refuse_own_tools(task: &serde_json::Map<String, Value>) -> Result<(), ApiError> {
    if let Some(tools) = task.get("tools").and_then(Value::as_object) {
        if tools.contains_key("command") {
            return Err(ApiError::bad_field(
                "tools.command",
                "command tools are not accepted by the service (each runs its own program as the service's user); grant built-in tools in tools.grant instead",
            ));
        }
        if tools.contains_key("mcp") {
            return Err(ApiError::bad_field(
                "tools.mcp",
                "MCP servers are not accepted by the service (it offers its built-in tools only, and a server the client names would get the service's header secrets); grant built-in tools in tools.grant instead",
            ));
        }
        if tools.contains_key("a2a") {
            return Err(ApiError::bad_field(
                "tools.a2a",
                "A2A agents are not accepted by the service (it offers its built-in tools only, and an agent the client names would get the service's header secrets); grant built-in tools in tools.grant instead",
            ));
        }
    }
    Ok(())
}

/// An inline task: validated, its working directory made and its files written.
fn inline(
    mut task: serde_json::Map<String, Value>,
    root: Option<&Path>,
) -> Result<NewRun, ApiError> {
    // Taken out first: neither is a task.toml field.
    let script = task.remove("script");
    let files = task.remove("files");
    let webhook = super::webhooks::field(&task)?;
    task.remove(super::webhooks::FIELD);
    // The tables that could name where the service's keys and headers go
    // (`TaskSpec::client_endpoints`: model servers, CA certificates, MCP
    // servers by URL, A2A agents) are `policy`, `tools.mcp` and `tools.a2a`,
    // and all are refused here outright: the service runs scripts and its
    // built-in tools only.
    if task.contains_key("policy") {
        return Err(ApiError::bad_request(
            "policy: not accepted here; pass the script inline as \"script\"",
        ));
    }
    refuse_own_tools(&task)?;

    let text = agentry::task::task_toml_from_json(task)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let workdir = private_workdir(root)?;
    // Parsed against the fresh, still empty directory, so nothing from the
    // service's own current directory (a script.json, a workspace/) is picked up.
    // `TaskError` is non_exhaustive: any other kind is the service's fault.
    #[allow(clippy::wildcard_enum_match_arm)]
    let spec = TaskSpec::parse(&text, workdir.path()).map_err(|e| match e {
        TaskError::Invalid { message, .. } => ApiError::bad_request(message),
        other @ (TaskError::Workdir { .. } | TaskError::Runtime(_) | TaskError::Mcp { .. } | _) => {
            ApiError::internal(other.to_string())
        }
    })?;
    refuse_a_wider_sandbox(&spec)?;
    let script = match script {
        None => {
            return Err(ApiError::bad_request(
                "script: missing; the service runs the scripted policy, so pass {\"turns\": [...]}",
            ));
        }
        Some(v) => {
            let script = Script::from_value(&v)
                .map_err(|m| ApiError::bad_request(format!("script: {m}")))?;
            (script, v)
        }
    };
    let (script, script_json) = script;
    if let Some(files) = files {
        write_files(workdir.path(), files)?;
    }

    let path = std::fs::canonicalize(workdir.path())
        .map_err(|e| ApiError::internal(format!("working directory: {e}")))?;
    let mut config = spec.run_config(path);
    config.task_id = TASK_ID.to_string();
    // With a store, a restarted service rebuilds the policy from this.
    config.policy_spec = Some(StoredPolicy::Root(RootSpec {
        script: Some(script_json),
        ..RootSpec::default()
    }));
    Ok(NewRun {
        config,
        script,
        workdir,
        webhook,
    })
}

/// A fresh working directory only this user can enter: `0700`, in
/// `<tmp>/agentry/service/` (`0700`, this user's and no link, as the CLI's
/// `<tmp>/agentry` is), so other users of the machine never see a run's files.
fn private_workdir(root: Option<&Path>) -> Result<TempDir, ApiError> {
    let unusable = |e: &dyn std::fmt::Display| {
        ApiError::internal(format!("cannot create a working directory: {e}"))
    };
    let parent = match root {
        // The operator's (shared storage, for a cluster): made if missing.
        Some(root) => {
            std::fs::create_dir_all(root).map_err(|e| unusable(&e))?;
            root.to_path_buf()
        }
        None => {
            let parent = agentry::runtime::tempdir::private_temp_dir()
                .map_err(|e| unusable(&e))?
                .join("service");
            agentry::runtime::tempdir::private_dir(&parent, "set TMPDIR")
                .map_err(|e| unusable(&e))?;
            parent
        }
    };
    tempfile::Builder::new()
        .prefix("run-")
        .permissions(std::fs::Permissions::from_mode(PRIVATE_DIR))
        .tempdir_in(&parent)
        .map_err(|e| unusable(&e))
}

/// Directories of a run's working directory, its own and `files`' (the
/// files are [`PRIVATE_FILE`]).
const PRIVATE_DIR: u32 = 0o700;
/// The request's `files`, as written.
const PRIVATE_FILE: u32 = 0o600;

/// Writes `files` (relative path → content) into `dir`, private like it.
/// Paths must stay inside: no absolute paths, no `..`. Blocking.
pub fn write_files(dir: &Path, files: Value) -> Result<(), ApiError> {
    let Value::Object(files) = files else {
        return Err(ApiError::bad_request(
            "files: expected an object of relative path → file content",
        ));
    };
    for (name, content) in files {
        let at = format!("files[{name:?}]");
        let inside = !name.is_empty()
            && Path::new(&name)
                .components()
                .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        if !inside {
            return Err(ApiError::bad_request(format!(
                "{at}: expected a relative path without \"..\""
            )));
        }
        let Value::String(content) = content else {
            return Err(ApiError::bad_request(format!(
                "{at}: expected the file content as a string"
            )));
        };
        let path = dir.join(&name);
        let written = match path.parent() {
            Some(parent) => std::fs::DirBuilder::new()
                .recursive(true)
                .mode(PRIVATE_DIR)
                .create(parent),
            None => Ok(()),
        }
        .and_then(|()| {
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(PRIVATE_FILE)
                .open(&path)
        })
        .and_then(|mut file| file.write_all(content.as_bytes()));
        written.map_err(|e| ApiError::bad_request(format!("{at}: cannot write: {e}")))?;
    }
    Ok(())
}

/// The request's `traceparent` header, when it is one valid W3C version-00
/// value (`00-<32 hex>-<16 hex>-<2 hex>`, lower case, neither id all zeros).
/// Anything else (absent, repeated, malformed, another version) is `None`: the
/// run starts a new trace, as W3C Trace Context asks of a receiver that cannot
/// parse the header, rather than refusing the request.
pub fn traceparent(headers: &HeaderMap) -> Option<String> {
    let mut values = headers.get_all("traceparent").iter();
    let value = values.next()?.to_str().ok()?;
    if values.next().is_some() {
        return None;
    }
    agentry_telemetry::TraceParent::parse(value).map(|_| value.to_string())
}

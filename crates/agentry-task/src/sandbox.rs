//! `[sandbox]` and a tool's `sandbox = {...}`: the kernel sandbox every
//! process a model drives runs under → [`SandboxSpec`] (the task's) and
//! [`SandboxOverride`] (a command tool's or a stdio MCP server's). Each key is
//! checked by hand, so an error names it (`sandbox.network[1]: ...`,
//! `tools.command[0].sandbox.mode: ...`).

use std::path::PathBuf;

use agentry_sandbox::{ByteSize, HostPort, Mode, Network, SandboxOverride, SandboxSpec};
use serde::Deserialize;
use toml::Value;

use crate::values::{FieldError, describe, field_error, positive, section};

/// The keys of `[sandbox]` and of a tool's `sandbox = {...}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSandbox {
    mode: Option<Value>,
    network: Option<Value>,
    write: Option<Value>,
    read_deny: Option<Value>,
    memory: Option<Value>,
    processes: Option<Value>,
    file_size: Option<Value>,
    cpu_time: Option<Value>,
}

/// `[sandbox]`; absent: the default (workspace-write, no network).
pub(crate) fn sandbox_table(v: Option<Value>) -> Result<SandboxSpec, FieldError> {
    match v {
        None => Ok(SandboxSpec::default()),
        Some(v) => Ok(SandboxSpec::default().with_override(&settings("sandbox", v)?)),
    }
}

/// A tool's `sandbox = {...}`; `at` names it (`tools.command[0].sandbox`).
pub(crate) fn sandbox_override(at: &str, v: Value) -> Result<SandboxOverride, FieldError> {
    settings(at, v)
}

fn settings(at: &str, v: Value) -> Result<SandboxOverride, FieldError> {
    let raw = section::<RawSandbox>(at, v)?;
    let key = |name: &str| format!("{at}.{name}");
    Ok(SandboxOverride {
        mode: raw.mode.map(|v| mode(&key("mode"), &v)).transpose()?,
        network: raw
            .network
            .map(|v| network(&key("network"), v))
            .transpose()?,
        write: raw.write.map(|v| paths(&key("write"), v)).transpose()?,
        read_deny: raw
            .read_deny
            .map(|v| paths(&key("read_deny"), v))
            .transpose()?,
        memory: raw.memory.map(|v| size(&key("memory"), &v)).transpose()?,
        processes: raw
            .processes
            .map(|v| positive(&key("processes"), &v))
            .transpose()?,
        file_size: raw
            .file_size
            .map(|v| size(&key("file_size"), &v))
            .transpose()?,
        cpu_time: raw
            .cpu_time
            .map(|v| crate::values::duration(&key("cpu_time"), &v))
            .transpose()?,
    })
}

fn mode(at: &str, v: &Value) -> Result<Mode, FieldError> {
    match v.as_str() {
        Some("workspace-write") => Ok(Mode::WorkspaceWrite),
        Some("read-only") => Ok(Mode::ReadOnly),
        Some("off") => Ok(Mode::Off),
        Some(_) | None => Err(field_error!(
            "{at}: expected \"workspace-write\", \"read-only\" or \"off\", found {}",
            describe(v)
        )),
    }
}

/// `false`, `true` or `["host:port", ...]`.
fn network(at: &str, v: Value) -> Result<Network, FieldError> {
    let items = match v {
        Value::Boolean(false) => return Ok(Network::Off),
        Value::Boolean(true) => return Ok(Network::On),
        Value::Array(items) => items,
        other @ (Value::String(_)
        | Value::Integer(_)
        | Value::Float(_)
        | Value::Datetime(_)
        | Value::Table(_)) => {
            return Err(field_error!(
                "{at}: expected false, true or an array of \"host:port\", found {}",
                describe(&other)
            ));
        }
    };
    let mut grants = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let grant = item
            .as_str()
            .ok_or_else(|| {
                field_error!(
                    "{at}[{i}]: expected a \"host:port\" string, found {}",
                    describe(item)
                )
            })?
            .parse::<HostPort>()
            .map_err(|e| field_error!("{at}[{i}]: {}", reason(&e)))?;
        grants.push(grant);
    }
    Ok(Network::Allow(grants))
}

/// Absolute paths (a sandbox has no "current directory" to take them from).
fn paths(at: &str, v: Value) -> Result<Vec<PathBuf>, FieldError> {
    let Value::Array(items) = v else {
        return Err(field_error!(
            "{at}: expected an array of absolute paths, found {}",
            describe(&v)
        ));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| match item.as_str() {
            Some(p) if PathBuf::from(p).is_absolute() => Ok(PathBuf::from(p)),
            Some(_) | None => Err(field_error!(
                "{at}[{i}]: expected an absolute path, found {}",
                describe(item)
            )),
        })
        .collect()
}

/// `"2GiB"`, `"512MiB"`, or a positive number of bytes.
fn size(at: &str, v: &Value) -> Result<ByteSize, FieldError> {
    let bad = || {
        field_error!(
            "{at}: expected a size such as \"2GiB\", \"512MiB\" or a number of bytes, found {}",
            describe(v)
        )
    };
    let size = match v {
        Value::String(s) => s.parse::<ByteSize>().map_err(|_| bad())?,
        Value::Integer(_) => ByteSize(positive(at, v)?),
        Value::Float(_)
        | Value::Boolean(_)
        | Value::Datetime(_)
        | Value::Array(_)
        | Value::Table(_) => return Err(bad()),
    };
    if size.0 == 0 {
        return Err(field_error!("{at}: must be more than zero bytes"));
    }
    Ok(size)
}

/// The crate's reason, without its own key prefix (the path says which key).
fn reason(e: &agentry_sandbox::SandboxError) -> String {
    match e {
        agentry_sandbox::SandboxError::InvalidSetting { value, reason, .. } => {
            format!("{value:?}: {reason}")
        }
        other @ (agentry_sandbox::SandboxError::Unsupported { .. }
        | agentry_sandbox::SandboxError::Resolve { .. }
        | agentry_sandbox::SandboxError::Path { .. }
        | agentry_sandbox::SandboxError::Landlock { .. }
        | agentry_sandbox::SandboxError::Seccomp { .. }) => other.to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<SandboxSpec, String> {
        let table: toml::Table = toml::from_str(text).unwrap();
        sandbox_table(table.get("sandbox").cloned()).map_err(|e| e.0)
    }

    #[test]
    fn absent_is_the_default_and_every_key_is_read() {
        assert_eq!(parse("").unwrap(), SandboxSpec::default());
        let spec = parse(
            r#"[sandbox]
mode = "read-only"
network = ["127.0.0.1:8080"]
write = ["/srv/cache"]
read_deny = ["/srv/secrets"]
memory = "1GiB"
processes = 64
file_size = 1048576
cpu_time = "30s"
"#,
        )
        .unwrap();
        assert_eq!(spec.mode, Mode::ReadOnly);
        assert_eq!(
            spec.network,
            Network::Allow(vec![HostPort {
                host: "127.0.0.1".into(),
                port: 8080
            }])
        );
        assert_eq!(spec.write, vec![PathBuf::from("/srv/cache")]);
        assert_eq!(spec.read_deny, vec![PathBuf::from("/srv/secrets")]);
        assert_eq!(spec.memory, Some(ByteSize(1 << 30)));
        assert_eq!(spec.processes, Some(64));
        assert_eq!(spec.file_size, Some(ByteSize(1 << 20)));
        assert_eq!(spec.cpu_time, Some(std::time::Duration::from_secs(30)));
    }

    #[test]
    fn each_error_names_its_key() {
        for (text, expected) in [
            (
                "[sandbox]\nmode = \"none\"",
                "sandbox.mode: expected \"workspace-write\", \"read-only\" or \"off\", found \"none\"",
            ),
            (
                "[sandbox]\nnetwork = \"yes\"",
                "sandbox.network: expected false, true or an array",
            ),
            (
                "[sandbox]\nnetwork = [\"localhost\"]",
                "sandbox.network[0]: \"localhost\": expected \"host:port\"",
            ),
            (
                "[sandbox]\nnetwork = [\"127.0.0.1:1\", 8080]",
                "sandbox.network[1]: expected a \"host:port\" string, found 8080",
            ),
            (
                "[sandbox]\nwrite = [\"cache\"]",
                "sandbox.write[0]: expected an absolute path, found \"cache\"",
            ),
            (
                "[sandbox]\nread_deny = \"/x\"",
                "sandbox.read_deny: expected an array of absolute paths",
            ),
            (
                "[sandbox]\nmemory = \"lots\"",
                "sandbox.memory: expected a size such as \"2GiB\"",
            ),
            (
                "[sandbox]\nprocesses = 0",
                "sandbox.processes: expected a positive integer, found 0",
            ),
            (
                "[sandbox]\ncpu_time = \"soon\"",
                "sandbox.cpu_time: expected a duration",
            ),
            (
                "[sandbox]\nnetwrok = true",
                "sandbox: unknown field `netwrok`",
            ),
            ("sandbox = 1", "sandbox: expected a table, found 1"),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.starts_with(expected), "{text}: {err}");
        }
    }

    #[test]
    fn an_override_is_named_by_its_tool() {
        let v: toml::Table = toml::from_str("s = { network = true, mode = \"bad\" }").unwrap();
        let err = sandbox_override("tools.command[2].sandbox", v["s"].clone()).unwrap_err();
        assert!(
            err.0.starts_with("tools.command[2].sandbox.mode: expected"),
            "{err}"
        );
        let v: toml::Table = toml::from_str("s = { network = true }").unwrap();
        let o = sandbox_override("t", v["s"].clone()).unwrap();
        assert_eq!(o.network, Some(Network::On));
        assert_eq!(o.mode, None);
    }

    #[test]
    fn a_tools_sandbox_overrides_the_tasks_and_an_http_server_may_not_have_one() {
        let text = "goal = \"g\"\n[sandbox]\nmode = \"read-only\"\n\
        [[tools.command]]\nname = \"fetch\"\ndescription = \"d\"\nargv = [\"curl\", \"-s\", \"http://127.0.0.1:8080\"]\n\
        sandbox = { network = [\"127.0.0.1:8080\"] }\n\
        [[tools.mcp]]\nname = \"local\"\ncommand = [\"server\"]\nsandbox = { network = true }\n";
        let spec = crate::TaskSpec::parse(text, std::path::Path::new("/nowhere/t")).unwrap();
        assert_eq!(spec.sandbox.mode, Mode::ReadOnly);
        let over = spec.command_tools[0].sandbox.clone().unwrap();
        assert_eq!(over.mode, None);
        let effective = spec.sandbox.with_override(&over);
        assert_eq!(effective.mode, Mode::ReadOnly);
        assert_eq!(effective.network.clone(), over.network.unwrap());
        assert_eq!(
            spec.mcp_servers[0]
                .sandbox
                .as_ref()
                .and_then(|s| s.network.clone()),
            Some(Network::On)
        );

        let http = "goal = \"g\"\n[[tools.mcp]]\nname = \"remote\"\nurl = \"http://127.0.0.1:1/mcp\"\nsandbox = { network = true }\n";
        let err = crate::TaskSpec::parse(http, std::path::Path::new("/nowhere/t"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("tools.mcp[0].sandbox: only for a server agentry starts (command)"),
            "{err}"
        );
        let bad = "goal = \"g\"\n[[tools.command]]\nname = \"x\"\ndescription = \"d\"\nargv = [\"true\"]\nsandbox = { mode = \"open\" }\n";
        let err = crate::TaskSpec::parse(bad, std::path::Path::new("/nowhere/t"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("tools.command[0].sandbox.mode: expected"),
            "{err}"
        );
    }
}

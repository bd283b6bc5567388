//! How a durable run's policy is rebuilt when it is resumed: the text its record
//! keeps (`RunConfig::policy_spec` in the runtime, `RunRecord::policy` in the
//! store), typed.
//!
//! The text has three shapes, each read as stores written before these types
//! hold it:
//! - a root run's description, a JSON object
//!   (`{"policy": "openai:gpt-4o", "base_url": null, ...}`, as the CLI writes
//!   it): [`RootSpec`];
//! - a child's, `child:` and a JSON object (as the runtime writes it at
//!   `agent.spawn`): [`ChildSpec`];
//! - anything else an embedder wrote, kept as is.
//!
//! Here (and not in the runtime) because the CLI and `agentry-insight` read it
//! from a store without a runtime.
//!
//! ```
//! use agentry_protocol::stored_policy::StoredPolicy;
//! let stored = StoredPolicy::parse(r#"{"policy": "openai:gpt-4o", "base_url": null}"#);
//! assert_eq!(stored.policy_name(), "openai:gpt-4o");
//! assert_eq!(StoredPolicy::parse(&stored.to_string()), stored);
//! ```

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::child::ChildRequest;

/// How a child's stored text starts; the JSON of its [`ChildSpec`] follows.
pub const CHILD_PREFIX: &str = "child:";

/// A stored run's policy description. Serialized as the text a record keeps
/// (a JSON string holding it inside `RunConfig`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum StoredPolicy {
    /// A root run's description (the CLI's, the service's).
    Root(RootSpec),
    /// A child started by `agent.spawn`.
    Child(ChildSpec),
    /// An embedder's own text (`script:/abs/script.json`, a name, empty),
    /// kept as written.
    Text(String),
}

impl StoredPolicy {
    /// Reads stored text: `child:` and a [`ChildSpec`], a JSON object as a
    /// [`RootSpec`], anything else (JSON that does not fit included) as text.
    pub fn parse(text: &str) -> StoredPolicy {
        match text.strip_prefix(CHILD_PREFIX) {
            Some(json) => serde_json::from_str(json).map(StoredPolicy::Child),
            None => serde_json::from_str(text).map(StoredPolicy::Root),
        }
        .unwrap_or_else(|_| StoredPolicy::Text(text.to_string()))
    }

    /// The policy it names, as its trace names it (`openai:gpt-4o`,
    /// `script:/abs/script.json`): a root's or a child's `policy`, else the
    /// text itself. Empty when none was named.
    pub fn policy_name(&self) -> &str {
        match self {
            StoredPolicy::Root(root) => &root.policy,
            StoredPolicy::Child(child) => &child.policy,
            StoredPolicy::Text(text) => text,
        }
    }
}

impl fmt::Display for StoredPolicy {
    /// The text a record keeps, which [`StoredPolicy::parse`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoredPolicy::Root(root) => write_json(f, root),
            StoredPolicy::Child(child) => {
                f.write_str(CHILD_PREFIX)?;
                write_json(f, child)
            }
            StoredPolicy::Text(text) => f.write_str(text),
        }
    }
}

/// Serializing these types cannot fail (strings, numbers, JSON values only).
fn write_json(f: &mut fmt::Formatter<'_>, value: &impl Serialize) -> fmt::Result {
    f.write_str(&serde_json::to_string(value).map_err(|_| fmt::Error)?)
}

impl From<String> for StoredPolicy {
    fn from(text: String) -> StoredPolicy {
        StoredPolicy::parse(&text)
    }
}

impl From<StoredPolicy> for String {
    fn from(stored: StoredPolicy) -> String {
        stored.to_string()
    }
}

/// A root run's policy as the CLI describes it, for `agentry resume`: the
/// policy and its model server, the fallback chain, the task it came from.
/// Every field may be absent (runs stored before it existed) and is left out
/// when empty; paths are UTF-8 text.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RootSpec {
    /// `openai:MODEL`, `anthropic:MODEL` or `script:/abs/script.json`; empty
    /// when the run named none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub policy: String,
    /// The model server, when not the provider's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The fallback chain after the primary, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallback: Vec<StoredFallback>,
    /// Whether requests carry prompt-cache marks; absent means on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_cache: Option<bool>,
    /// The task directory the run came from (absolute).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_dir: Option<String>,
    /// The CA file the run trusted besides the system's roots (absolute).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_cert: Option<String>,
    /// The context window the run was started with, in tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_tokens: Option<u64>,
    /// An inline script (the service's runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<Value>,
    /// Fields this version does not know (a newer writer's, an embedder's
    /// own), kept as written.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// One model of a stored fallback chain.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StoredFallback {
    /// `openai:MODEL` or `anthropic:MODEL`.
    #[serde(default)]
    pub model: String,
    /// Its server, when not the provider's default.
    #[serde(default)]
    pub base_url: Option<String>,
}

/// A child's request as its record keeps it, to rebuild its policy when its
/// tree is resumed, and the `agent.spawn` that started it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChildSpec {
    /// The name of the policy it ran with (its model, as the trace names it).
    #[serde(default)]
    pub policy: String,
    /// The operation id of the `agent.spawn` call that started it: a spawn
    /// re-run after a crash gets this child back.
    #[serde(default)]
    pub operation_id: String,
    /// Its goal.
    #[serde(default)]
    pub goal: String,
    /// The name its parent gave it.
    #[serde(default)]
    pub name: Option<String>,
    /// Its inline script, for the scripted policy.
    #[serde(default)]
    pub script: Option<Value>,
    /// The child model it named.
    #[serde(default)]
    pub model: Option<String>,
    /// Its grants; `None` inherited its parent's.
    #[serde(default)]
    pub grants: Option<Vec<String>>,
}

impl ChildSpec {
    /// What to store for a child started from `request` by the `agent.spawn`
    /// call `operation_id`, running the policy named `policy`.
    pub fn new(request: &ChildRequest, operation_id: &str, policy: &str) -> ChildSpec {
        ChildSpec {
            policy: policy.to_string(),
            operation_id: operation_id.to_string(),
            goal: request.goal.clone(),
            name: request.name.clone(),
            script: request.script.clone(),
            model: request.model.clone(),
            grants: request.grants.clone(),
        }
    }

    /// The request again, to rebuild the child's policy (its limits are not
    /// needed for that and are left at their defaults).
    pub fn request(&self) -> ChildRequest {
        ChildRequest {
            goal: self.goal.clone(),
            limits: Default::default(),
            grants: self.grants.clone(),
            script: self.script.clone(),
            name: self.name.clone(),
            model: self.model.clone(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Texts as the CLI, the runtime and the service wrote them before these
    /// types existed (including a run stored before fallbacks existed).
    const OLD_ROOT: &str = r#"{"base_url":null,"ca_cert":null,"context_tokens":8000,"fallback":[{"base_url":"http://127.0.0.1:9/v1","model":"openai:c"}],"policy":"openai:a","prompt_cache":false,"task_dir":"/t/sum"}"#;
    const OLDER_ROOT: &str = r#"{"policy": "openai:a", "base_url": null}"#;
    const OLD_CHILD: &str = r#"child:{"goal":"sum","grants":["fs.read"],"model":null,"name":"kid","operation_id":"op-1","policy":"script","script":{"steps":[]}}"#;
    const OLD_SERVICE: &str = r#"{"script":{"steps":[{"finish":"4"}]}}"#;

    #[test]
    fn texts_stored_before_are_read_typed() {
        let StoredPolicy::Root(root) = StoredPolicy::parse(OLD_ROOT) else {
            panic!("not a root: {OLD_ROOT}");
        };
        assert_eq!(
            root,
            RootSpec {
                policy: "openai:a".into(),
                fallback: vec![StoredFallback {
                    model: "openai:c".into(),
                    base_url: Some("http://127.0.0.1:9/v1".into()),
                }],
                prompt_cache: Some(false),
                task_dir: Some("/t/sum".into()),
                context_tokens: Some(8000),
                ..RootSpec::default()
            }
        );
        let StoredPolicy::Root(older) = StoredPolicy::parse(OLDER_ROOT) else {
            panic!("not a root: {OLDER_ROOT}");
        };
        assert_eq!(
            (older.policy.as_str(), older.fallback.len()),
            ("openai:a", 0)
        );
        assert_eq!(older.prompt_cache, None);

        let StoredPolicy::Child(child) = StoredPolicy::parse(OLD_CHILD) else {
            panic!("not a child: {OLD_CHILD}");
        };
        assert_eq!(child.operation_id, "op-1");
        let request = child.request();
        assert_eq!(request.goal, "sum");
        assert_eq!(request.grants, Some(vec!["fs.read".to_string()]));
        assert_eq!(request.name.as_deref(), Some("kid"));
        assert_eq!(request.script, Some(json!({"steps": []})));
        assert_eq!(request.model, None);

        let StoredPolicy::Root(service) = StoredPolicy::parse(OLD_SERVICE) else {
            panic!("not a root: {OLD_SERVICE}");
        };
        assert_eq!(service.script, Some(json!({"steps": [{"finish": "4"}]})));
        assert_eq!(service.policy, "");
    }

    #[test]
    fn what_is_written_reads_back_the_same_and_keeps_its_json_shape() {
        for text in [OLD_ROOT, OLD_CHILD, OLD_SERVICE] {
            let stored = StoredPolicy::parse(text);
            let written = stored.to_string();
            assert_eq!(StoredPolicy::parse(&written), stored, "{text}");
            // A root leaves out what is empty (null, absent: the same to a reader).
            let json = |t: &str| -> Value {
                let mut v: Value =
                    serde_json::from_str(t.strip_prefix(CHILD_PREFIX).unwrap_or(t)).unwrap();
                if !t.starts_with(CHILD_PREFIX) {
                    v.as_object_mut().unwrap().retain(|_, m| !m.is_null());
                }
                v
            };
            assert_eq!(json(&written), json(text), "{text}");
        }
    }

    #[test]
    fn other_text_and_unknown_fields_are_kept_as_written() {
        for text in [
            "script:/abs/script.json",
            "my-policy",
            "",
            "child:not json",
            "[1]",
        ] {
            let stored = StoredPolicy::parse(text);
            assert_eq!(stored, StoredPolicy::Text(text.to_string()));
            assert_eq!(stored.to_string(), text);
            assert_eq!(stored.policy_name(), text);
        }
        let newer = r#"{"policy":"openai:a","region":"eu"}"#;
        let StoredPolicy::Root(root) = StoredPolicy::parse(newer) else {
            panic!("not a root");
        };
        assert_eq!(root.other.get("region"), Some(&json!("eu")));
        let written: Value = serde_json::from_str(&StoredPolicy::Root(root).to_string()).unwrap();
        assert_eq!(written["region"], "eu");
    }

    /// Inside a `RunConfig` it is a JSON string, as `policy_spec` always was.
    #[test]
    fn it_serializes_as_the_stored_text() {
        let stored = StoredPolicy::parse(OLD_CHILD);
        let value = serde_json::to_value(&stored).unwrap();
        assert!(value.as_str().unwrap().starts_with(CHILD_PREFIX));
        let back: StoredPolicy = serde_json::from_value(value).unwrap();
        assert_eq!(back, stored);
        let old_config_field = Value::String(OLDER_ROOT.to_string());
        let read: StoredPolicy = serde_json::from_value(old_config_field).unwrap();
        assert_eq!(read.policy_name(), "openai:a");
    }
}

//! Grants: which tools a run may call, by name, auth scope or pattern.

use agentry_protocol::tool::ToolContract;

/// The permissions a run holds. A grant entry matches a tool by exact name, exact
/// auth scope, a `prefix.*` pattern on either, or `*` for everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Grants {
    entries: Vec<String>,
}

impl Grants {
    /// Grants from a list of patterns.
    pub fn new<I, S>(entries: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Grants {
            entries: entries.into_iter().map(Into::into).collect(),
        }
    }

    /// Everything.
    pub fn all() -> Self {
        Grants::new(["*"])
    }

    /// The patterns.
    pub fn entries(&self) -> &[String] {
        &self.entries
    }

    /// Whether the contract's tool may be called. `task.finish` is always allowed:
    /// a run must be able to end; so is `result.read`: it reads back only what
    /// the run's own tools already returned to the model.
    pub fn allows(&self, contract: &ToolContract) -> bool {
        contract.name == agentry_tools::FINISH_TOOL
            || contract.name == agentry_tools::RESULT_READ_TOOL
            || self.matches(contract)
    }

    /// Whether these grants hold at least what `pattern` grants (for carving a
    /// child's grants out of a parent's).
    pub fn covers(&self, pattern: &str) -> bool {
        self.entries.iter().any(|q| {
            q == "*"
                || q == pattern
                || q.strip_suffix('*')
                    .is_some_and(|prefix| prefix.ends_with('.') && pattern.starts_with(prefix))
        })
    }

    /// Whether any pattern names the tool (by name or scope), with no exception
    /// for `task.finish`.
    pub fn matches(&self, contract: &ToolContract) -> bool {
        self.entries
            .iter()
            .any(|g| pattern_matches(g, &contract.name) || pattern_matches(g, &contract.auth_scope))
    }
}

fn pattern_matches(pattern: &str, value: &str) -> bool {
    if pattern == "*" || pattern == value {
        return true;
    }
    match pattern.strip_suffix('*') {
        Some(prefix) if prefix.ends_with('.') => value.starts_with(prefix),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn grant_patterns() {
        let c = ToolContract::new("fs.write", "", json!({})).scope("fs.write");
        assert!(Grants::new(["fs.write"]).allows(&c));
        assert!(Grants::new(["fs.*"]).allows(&c));
        assert!(Grants::all().allows(&c));
        assert!(!Grants::new(["fs.read"]).allows(&c));
        assert!(!Grants::new(["f*"]).allows(&c));
        let finish = ToolContract::new("task.finish", "", json!({}));
        assert!(Grants::new(Vec::<String>::new()).allows(&finish));
    }
}

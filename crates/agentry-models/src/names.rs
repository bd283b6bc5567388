//! Reversible tool-name mapping at the provider boundary.
//!
//! Both APIs accept only `^[a-zA-Z0-9_-]{1,64}$` (a real OpenAI server rejects
//! `fs.read` with HTTP 400), while agentry names are dotted. Every other character
//! becomes `_`; the map remembers the canonical name so the trace and the executor
//! keep `fs.read`. Two names that would collide are refused up front.

use std::collections::HashMap;

use agentry_protocol::tool::ToolSpec;

use crate::ModelError;

/// Canonical ↔ wire tool names for one set of tools.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolNameMap {
    to_wire: HashMap<String, String>,
    to_canonical: HashMap<String, String>,
}

impl ToolNameMap {
    /// Builds the map, refusing names that collide or cannot be expressed.
    pub fn new(tools: &[ToolSpec]) -> Result<Self, ModelError> {
        let mut map = ToolNameMap::default();
        for t in tools {
            let wire = sanitize(&t.name);
            if wire.is_empty() || wire.chars().count() > 64 {
                return Err(ModelError::BadToolName {
                    name: t.name.clone(),
                });
            }
            if let Some(first) = map.to_canonical.get(&wire) {
                if first == &t.name {
                    continue;
                }
                return Err(ModelError::NameCollision {
                    first: first.clone(),
                    second: t.name.clone(),
                    wire,
                });
            }
            map.to_wire.insert(t.name.clone(), wire.clone());
            map.to_canonical.insert(wire, t.name.clone());
        }
        Ok(map)
    }

    /// The wire name of a canonical name. Names outside the map (a tool the model
    /// invented earlier) are sanitized the same way, so history stays sendable.
    pub fn wire(&self, canonical: &str) -> String {
        self.to_wire
            .get(canonical)
            .cloned()
            .unwrap_or_else(|| sanitize(canonical))
    }

    /// The canonical name of a wire name. Unknown names pass through unchanged so
    /// the executor answers `ENOTOOL` with the name the model actually used.
    pub fn canonical(&self, wire: &str) -> String {
        self.to_canonical
            .get(wire)
            .cloned()
            .unwrap_or_else(|| wire.to_string())
    }
}

fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: String::new(),
            input_schema: json!({"type": "object"}),
        }
    }

    #[test]
    fn dotted_names_round_trip() {
        let m = ToolNameMap::new(&[spec("fs.read"), spec("task.finish")]).unwrap();
        assert_eq!(m.wire("fs.read"), "fs_read");
        assert_eq!(m.canonical("fs_read"), "fs.read");
        assert_eq!(m.canonical("nope"), "nope");
    }

    #[test]
    fn colliding_names_are_refused() {
        let err = ToolNameMap::new(&[spec("fs.read"), spec("fs_read")]).unwrap_err();
        assert!(matches!(err, ModelError::NameCollision { .. }), "{err}");
        assert!(ToolNameMap::new(&[spec(&"a".repeat(65))]).is_err());
    }
}

//! Canonical hashing of JSON values.
//!
//! Keys are sorted recursively before hashing so the digest does not depend on
//! map ordering (serde_json may be built with `preserve_order` by another crate).

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Hex sha256 of the canonical JSON form of `value`.
pub fn digest(value: &Value) -> String {
    let mut hasher = Sha256::new();
    write_canonical(value, &mut hasher);
    hex::encode(hasher.finalize())
}

/// The first 16 hex digits of [`digest`]: short enough for a trace column.
pub fn short_digest(value: &Value) -> String {
    let mut d = digest(value);
    d.truncate(16);
    d
}

/// Hex sha256 of raw bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn write_canonical(value: &Value, h: &mut Sha256) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            h.update(b"{");
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    h.update(b",");
                }
                write_canonical(&Value::String(k.clone()), h);
                h.update(b":");
                if let Some(v) = map.get(k) {
                    write_canonical(v, h);
                }
            }
            h.update(b"}");
        }
        Value::Array(items) => {
            h.update(b"[");
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    h.update(b",");
                }
                write_canonical(v, h);
            }
            h.update(b"]");
        }
        // Scalars: serde_json's own rendering is already canonical.
        other => h.update(other.to_string().as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_does_not_matter() {
        let a: Value = serde_json::from_str(r#"{"b":1,"a":{"y":2,"x":[1,2]}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":{"x":[1,2],"y":2},"b":1}"#).unwrap();
        assert_eq!(digest(&a), digest(&b));
        assert_ne!(digest(&a), digest(&json!({"a":1})));
        assert_eq!(short_digest(&a).len(), 16);
    }
}

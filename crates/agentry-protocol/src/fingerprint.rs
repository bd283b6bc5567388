//! Canonical hashing of JSON values (fingerprints, idempotency keys) and content
//! hashes (sha256) of world objects.
//!
//! Keys are sorted recursively before hashing so the digest does not depend on
//! map ordering (serde_json may be built with `preserve_order` by another crate).

use serde_json::Value;
use sha2::{Digest, Sha256};
use xxhash_rust::xxh3::Xxh3;

/// Digest of the canonical form of `value` (keys sorted), as 32 hex digits.
pub fn digest(value: &Value) -> String {
    let mut f = Fingerprinter::new();
    f.value(value);
    f.finish()
}

/// The first 16 hex digits of [`digest`]: short enough for a trace column.
pub fn short_digest(value: &Value) -> String {
    let mut f = Fingerprinter::new();
    f.value(value);
    f.finish_short()
}

/// Hex sha256 of raw bytes: content hashes of world objects (file refs), which
/// other tools must be able to recompute.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Builds a digest from parts without first assembling them into one JSON value
/// (which would clone every part). Each part is tagged and length-delimited, so
/// different sequences of parts never collide by concatenation.
///
/// The hash is XXH3-128: fingerprints and idempotency keys need to be stable and
/// collision-resistant across honest inputs, not to resist an adversary, and this
/// sits on every step's hot path (sha256 cost a fifth of a step).
#[derive(Clone, Default)]
pub struct Fingerprinter(Xxh3);

impl std::fmt::Debug for Fingerprinter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Fingerprinter")
    }
}

impl Fingerprinter {
    /// An empty fingerprint.
    pub fn new() -> Self {
        Fingerprinter(Xxh3::new())
    }

    /// Adds a string.
    pub fn str(&mut self, s: &str) -> &mut Self {
        write_str(&mut self.0, s);
        self
    }

    /// Adds a JSON value in canonical form (keys sorted).
    pub fn value(&mut self, v: &Value) -> &mut Self {
        write_canonical(v, &mut self.0);
        self
    }

    /// Adds a number.
    pub fn u64(&mut self, n: u64) -> &mut Self {
        self.0.update(b"n");
        self.0.update(&n.to_le_bytes());
        self
    }

    /// The digest as a number (for comparisons that never leave the process).
    pub fn finish_u128(&self) -> u128 {
        self.0.digest128()
    }

    /// The digest as 32 hex digits.
    pub fn finish(&self) -> String {
        format!("{:032x}", self.0.digest128())
    }

    /// The first 16 hex digits.
    pub fn finish_short(&self) -> String {
        format!("{:016x}", (self.0.digest128() >> 64) as u64)
    }
}

fn write_str(h: &mut Xxh3, s: &str) {
    h.update(b"s");
    h.update(&(s.len() as u64).to_le_bytes());
    h.update(s.as_bytes());
}

fn write_canonical(value: &Value, h: &mut Xxh3) {
    match value {
        Value::Null => h.update(b"z"),
        Value::Bool(b) => h.update(if *b { b"t" } else { b"f" }),
        Value::Number(n) => {
            // serde_json's rendering of a number is canonical for that number.
            h.update(b"n");
            if let Some(u) = n.as_u64() {
                h.update(&u.to_le_bytes());
            } else if let Some(i) = n.as_i64() {
                h.update(b"-");
                h.update(&i.to_le_bytes());
            } else {
                write_str(h, &n.to_string());
            }
        }
        Value::String(s) => write_str(h, s),
        Value::Array(items) => {
            h.update(b"[");
            h.update(&(items.len() as u64).to_le_bytes());
            for v in items {
                write_canonical(v, h);
            }
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_unstable();
            h.update(b"{");
            h.update(&(keys.len() as u64).to_le_bytes());
            for k in keys {
                write_str(h, k);
                if let Some(v) = map.get(k) {
                    write_canonical(v, h);
                }
            }
        }
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
        assert_eq!(digest(&a).len(), 32);
        assert_ne!(digest(&json!(["ab", "c"])), digest(&json!(["a", "bc"])));
    }
}

//! Canonical hashing of JSON values.
//!
//! Keys are sorted recursively before hashing so the digest does not depend on
//! map ordering (serde_json may be built with `preserve_order` by another crate).

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Hex sha256 of the canonical JSON form of `value`.
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

/// Builds a digest from parts without first assembling them into one JSON value
/// (which would clone every part). Each part is tagged and length-delimited, so
/// different sequences of parts never collide by concatenation.
#[derive(Debug, Clone, Default)]
pub struct Fingerprinter(Sha256);

impl Fingerprinter {
    /// An empty fingerprint.
    pub fn new() -> Self {
        Fingerprinter(Sha256::new())
    }

    /// Adds a string.
    pub fn str(&mut self, s: &str) -> &mut Self {
        self.0.update(b"s");
        self.0.update((s.len() as u64).to_le_bytes());
        self.0.update(s.as_bytes());
        self
    }

    /// Adds a JSON value in canonical form (keys sorted).
    pub fn value(&mut self, v: &Value) -> &mut Self {
        self.0.update(b"v");
        write_canonical(v, &mut self.0);
        self
    }

    /// Adds a number.
    pub fn u64(&mut self, n: u64) -> &mut Self {
        self.0.update(b"n");
        self.0.update(n.to_le_bytes());
        self
    }

    /// Full hex digest.
    pub fn finish(self) -> String {
        hex::encode(self.0.finalize())
    }

    /// The first 16 hex digits.
    pub fn finish_short(self) -> String {
        let bytes = self.0.finalize();
        hex::encode(&bytes[..8])
    }
}

/// Lets serde_json render scalars straight into the hasher, without a String.
struct HashWriter<'a>(&'a mut Sha256);

impl std::io::Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
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
                let _ = serde_json::to_writer(HashWriter(h), k.as_str());
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
        // Scalars: serde_json's own rendering is already canonical. Writing into a
        // hasher cannot fail.
        other => {
            let _ = serde_json::to_writer(HashWriter(h), other);
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
    }
}

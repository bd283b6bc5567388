//! Canonical hashing of JSON values (fingerprints, idempotency keys) and content
//! hashes (sha256) of world objects.
//!
//! Keys are sorted recursively before hashing so the digest does not depend on
//! map ordering (serde_json may be built with `preserve_order` by another crate).

use serde_json::Value;
use sha2::{Digest, Sha256};
use xxhash_rust::xxh3::xxh3_128;

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
///
/// The parts are written into a byte buffer and hashed in one pass when the
/// digest is taken: the same digest as streaming them into an `Xxh3` state (the
/// hash of the concatenation), without that state's ~600 bytes to set up and move
/// for the few dozen bytes a call's name and arguments come to.
///
/// The buffer is borrowed from a per-thread spare and handed back on drop, so a
/// fingerprint allocates nothing once its thread has made one.
#[derive(Clone, Default)]
pub struct Fingerprinter(Vec<u8>);

thread_local! {
    static SPARE: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

impl Drop for Fingerprinter {
    fn drop(&mut self) {
        let mut buf = std::mem::take(&mut self.0);
        // A buffer grown by a huge value is not kept.
        if buf.capacity() <= 64 * 1024 {
            buf.clear();
            let _ = SPARE.try_with(|spare| spare.set(buf));
        }
    }
}

impl std::fmt::Debug for Fingerprinter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Fingerprinter")
    }
}

impl Fingerprinter {
    /// An empty fingerprint.
    pub fn new() -> Self {
        let mut buf = SPARE.try_with(|spare| spare.take()).unwrap_or_default();
        if buf.capacity() == 0 {
            buf.reserve(128);
        }
        Fingerprinter(buf)
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
        self.0.push(b'n');
        self.0.extend_from_slice(&n.to_le_bytes());
        self
    }

    /// The digest as a number (for comparisons that never leave the process).
    pub fn finish_u128(&self) -> u128 {
        xxh3_128(&self.0)
    }

    /// The digest as 32 hex digits.
    pub fn finish(&self) -> String {
        String::from(&*hex32(self.finish_u128()))
    }

    /// The first 16 hex digits.
    pub fn finish_short(&self) -> String {
        hex32(self.finish_u128())[..16].to_owned()
    }
}

/// `n` as 32 lowercase hex digits (what `format!("{n:032x}")` gives), without the
/// formatting machinery: ids and keys derived from digests are made on every call.
pub fn hex32(n: u128) -> HexDigits {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = DIGITS[((n >> (124 - 4 * i)) & 0xf) as usize];
    }
    HexDigits(out)
}

/// 32 hex digits on the stack; derefs to `&str`.
#[derive(Clone, Copy)]
pub struct HexDigits([u8; 32]);

impl std::ops::Deref for HexDigits {
    type Target = str;
    fn deref(&self) -> &str {
        // Only ASCII hex digits are ever written.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

fn write_str(h: &mut Vec<u8>, s: &str) {
    h.push(b's');
    h.extend_from_slice(&(s.len() as u64).to_le_bytes());
    h.extend_from_slice(s.as_bytes());
}

fn write_canonical(value: &Value, h: &mut Vec<u8>) {
    match value {
        Value::Null => h.push(b'z'),
        Value::Bool(b) => h.push(if *b { b't' } else { b'f' }),
        Value::Number(n) => {
            // serde_json's rendering of a number is canonical for that number.
            h.push(b'n');
            if let Some(u) = n.as_u64() {
                h.extend_from_slice(&u.to_le_bytes());
            } else if let Some(i) = n.as_i64() {
                h.push(b'-');
                h.extend_from_slice(&i.to_le_bytes());
            } else {
                write_str(h, &n.to_string());
            }
        }
        Value::String(s) => write_str(h, s),
        Value::Array(items) => {
            h.push(b'[');
            h.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for v in items {
                write_canonical(v, h);
            }
        }
        Value::Object(map) => {
            h.push(b'{');
            h.extend_from_slice(&(map.len() as u64).to_le_bytes());
            // A map iterates in key order unless serde_json keeps insertion order
            // (another crate may turn that on): only then sort.
            if map.keys().is_sorted() {
                for (k, v) in map {
                    write_str(h, k);
                    write_canonical(v, h);
                }
            } else {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort_unstable();
                for k in keys {
                    write_str(h, k);
                    if let Some(v) = map.get(k) {
                        write_canonical(v, h);
                    }
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

    /// Digests are stored (ledger keys, operation ids): buffering the parts must
    /// give what streaming them into an XXH3 state gave.
    #[test]
    fn digests_are_those_of_the_streamed_parts() {
        use xxhash_rust::xxh3::Xxh3;
        let mut streamed = Xxh3::new();
        streamed.update(b"s");
        streamed.update(&3u64.to_le_bytes());
        streamed.update(b"add");
        streamed.update(b"{");
        streamed.update(&2u64.to_le_bytes());
        for (k, v) in [("a", 4u64), ("b", 1)] {
            streamed.update(b"s");
            streamed.update(&1u64.to_le_bytes());
            streamed.update(k.as_bytes());
            streamed.update(b"n");
            streamed.update(&v.to_le_bytes());
        }
        let mut f = Fingerprinter::new();
        f.str("add").value(&json!({"b": 1, "a": 4}));
        assert_eq!(f.finish_u128(), streamed.digest128());
        assert_eq!(f.finish(), format!("{:032x}", streamed.digest128()));
        assert_eq!(
            f.finish_short(),
            format!("{:016x}", (streamed.digest128() >> 64) as u64)
        );
        assert_eq!(&*hex32(0xabc), format!("{:032x}", 0xabc));
        assert_eq!(&*hex32(u128::MAX), format!("{:032x}", u128::MAX));
    }
}

//! Security tests against the real binary: see `tests/security.rs`.

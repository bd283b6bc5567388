//! Security tests: see `mod.rs`.

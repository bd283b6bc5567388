//! The back-pressure tests, in a test process of their own: one measures
//! the process's resident memory, which other tests running beside it in
//! `all` would add to.

#[path = "suite/backpressure.rs"]
mod backpressure;

//! The hibernation tests, in a test process of their own: one wakes 10,000
//! agents from a SQLite file, a load that would starve the timed waits of
//! the tests running beside it in `all`.

#[path = "suite/hibernation.rs"]
mod hibernation;

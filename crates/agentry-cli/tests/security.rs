//! Attacks against the real `agentry` binary: a hostile model (scripted), hostile
//! workspace contents and hostile task files. Every test here failed before its
//! defence landed. Modules by area, one owner each.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]
mod security {
    mod cli;
    mod files;
    mod terminal;
    mod workspace;
}

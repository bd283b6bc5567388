//! Loading a task directory (`task.toml`, `script.json`, `workspace/`).
//! (Being written.)

use std::path::PathBuf;

/// A loaded task directory.
#[derive(Debug, Clone)]
pub struct TaskSpec {
    /// The directory.
    pub dir: PathBuf,
}

//! Looking at a task wherever its run is: in this node's table
//! (`task.rs`), or held by another node or only by the store (`remote.rs`).

use super::task::{Files, Observed, TaskRef, observe_held};
use super::wire::RpcError;

/// `task` as observed now, its declared files read (as `files` says) once
/// it completed.
pub(super) async fn observe(task: TaskRef<'_>, files: Files) -> Result<Observed, RpcError> {
    if task.app.holds(task.id) {
        observe_held(task, files).await
    } else {
        // Another node's run, or one only the store holds now.
        super::remote::observe(task, files).await
    }
}

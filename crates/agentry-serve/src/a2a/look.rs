//! Looking at a task wherever its run is: in this node's table
//! (`task.rs`), or held by another node or only by the store (`remote.rs`).

use super::super::table::App;
use super::super::tenants::Tenant;
use super::task::{Observed, observe_held};
use super::wire::RpcError;

/// Run `id` of `tenant` and of agent `agent` as a task, its declared files
/// read once it completed; any other run is TaskNotFound (never another
/// tenant's).
pub(super) async fn observe(
    app: &App,
    tenant: &Tenant,
    agent: &str,
    id: &str,
) -> Result<Observed, RpcError> {
    observe_with(app, tenant, agent, id, true).await
}

/// [`observe`], reading the declared files of a completed task only when
/// `files` says so (a listing without artifacts needs none).
pub(super) async fn observe_with(
    app: &App,
    tenant: &Tenant,
    agent: &str,
    id: &str,
    files: bool,
) -> Result<Observed, RpcError> {
    if app.holds(id) {
        observe_held(app, tenant, agent, id, files).await
    } else {
        // Another node's run, or one only the store holds now.
        super::remote::observe(app, tenant, agent, id, files).await
    }
}

//! One JSON-RPC call as the methods take it (a leaf: the methods and the
//! router both name it).

use std::sync::Arc;

use axum::http::HeaderMap;
use serde_json::Value;

use super::super::table::App;
use super::super::tenants::Tenant;
use super::push::Pushes;
use super::task::TaskRef;

/// One JSON-RPC call: who, to which agent, with what.
pub(super) struct Call {
    pub(super) app: App,
    pub(super) tenant: Tenant,
    pub(super) agent: String,
    pub(super) id: Value,
    pub(super) params: Value,
    pub(super) headers: HeaderMap,
    pub(super) pushes: Arc<Pushes>,
}

impl Call {
    /// Task `id` of this call's tenant and agent.
    pub(super) fn task<'a>(&'a self, id: &'a str) -> TaskRef<'a> {
        TaskRef {
            app: &self.app,
            tenant: &self.tenant,
            agent: &self.agent,
            id,
        }
    }
}

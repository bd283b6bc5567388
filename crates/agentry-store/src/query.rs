//! What [`Store::runs`](crate::Store::runs) and [`Store::list`](crate::Store::list)
//! give and take: a run's summary, and a page of one tenant's root runs.

use agentry_protocol::state::RunStatus;
use agentry_protocol::stop::StopReason;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The tenant and agent of a run an `agentry serve` started, as it keeps
/// them in the run's policy description (`{"serve": {"tenant", "agent"}}`,
/// see `agentry_serve::RunMeta`): the keys [`RunQuery`] filters on.
pub const SERVE_META_KEY: &str = "serve";

/// Which runs [`Store::list`](crate::Store::list) returns: root runs only (a child is listed with
/// its tree's root, never on its own), newest first (`created_at_ms`, then
/// `run_id`, both descending), at most `limit`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunQuery {
    /// Whose runs: every root run, or one tenant's ([`SERVE_META_KEY`]'s
    /// `tenant`; `None` for runs stored without one).
    pub tenant: TenantFilter,
    /// Only runs of this named agent.
    pub agent: Option<String>,
    /// Only stopped, or only unfinished, runs.
    pub status: Option<StatusFilter>,
    /// Only runs listed after this one (the last of the previous page).
    pub after: Option<RunKey>,
    /// At most this many.
    pub limit: usize,
}

/// Whose runs a [`RunQuery`] lists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum TenantFilter {
    /// Every root run.
    #[default]
    Any,
    /// The runs of one tenant (`None`: runs stored without a tenant).
    Of(Option<String>),
}

/// Stopped or unfinished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusFilter {
    /// Runs that have not stopped.
    Unfinished,
    /// Runs that stopped.
    Stopped,
}

/// Where a run stands in a listing: its creation time, then its id.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RunKey {
    /// Created (Unix ms).
    pub created_at_ms: u64,
    /// Run id.
    pub run_id: String,
}

/// One run of a [`Store::list`](crate::Store::list) page.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedRun {
    /// Its summary.
    pub summary: RunSummary,
    /// Its record's policy description (where a service keeps what it knows
    /// of the run, [`SERVE_META_KEY`]).
    pub policy: String,
}

impl ListedRun {
    /// Where the run stands in a listing.
    pub fn key(&self) -> RunKey {
        RunKey {
            created_at_ms: self.summary.created_at_ms,
            run_id: self.summary.run_id.clone(),
        }
    }

    /// The string at `field` of the policy description's [`SERVE_META_KEY`]
    /// object, if there is one.
    pub fn serve_field(&self, field: &str) -> Option<String> {
        serve_field(&self.policy, field)
    }
}

/// The string at `field` of `policy`'s [`SERVE_META_KEY`] object.
pub(crate) fn serve_field(policy: &str, field: &str) -> Option<String> {
    let value: Value = serde_json::from_str(policy).ok()?;
    value
        .get(SERVE_META_KEY)?
        .get(field)?
        .as_str()
        .map(str::to_string)
}

impl RunQuery {
    /// Whether `run` (a root run) is one this query lists, but for `after`
    /// and `limit`: the filter of the default [`Store::list`](crate::Store::list).
    pub(crate) fn admits(&self, summary: &RunSummary, policy: &str) -> bool {
        let tenant = match &self.tenant {
            TenantFilter::Any => true,
            TenantFilter::Of(tenant) => serve_field(policy, "tenant") == *tenant,
        };
        let agent = self
            .agent
            .as_ref()
            .is_none_or(|agent| serve_field(policy, "agent").as_ref() == Some(agent));
        let status = match self.status {
            None => true,
            Some(StatusFilter::Stopped) => !summary.unfinished(),
            Some(StatusFilter::Unfinished) => summary.unfinished(),
        };
        tenant && agent && status
    }
}

/// One line of a store's run list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    /// Run id.
    pub run_id: String,
    /// Task id.
    pub task_id: String,
    /// Parent run.
    pub parent_id: Option<String>,
    /// Status at the last checkpoint (`running` before the first).
    pub status: RunStatus,
    /// Why it stopped, if it did.
    pub stop_reason: Option<StopReason>,
    /// State version at the last checkpoint.
    pub version: u64,
    /// Created (Unix ms).
    pub created_at_ms: u64,
    /// Last commit (Unix ms).
    pub updated_at_ms: u64,
}

impl RunSummary {
    /// True until the run stopped.
    pub fn unfinished(&self) -> bool {
        self.status != RunStatus::Stopped
    }
}

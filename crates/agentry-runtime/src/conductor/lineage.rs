//! Where a run sits in an agent tree: its parent, its depth, its trace id.

use std::sync::Arc;

use agentry_protocol::fingerprint::Fingerprinter;
use ractor::ActorRef;
use tokio::time::Instant;

use crate::budget::BudgetMsg;

/// A child's parent: its run id, and the budget supervisor the child's
/// budget was carved from (and every spend is charged to).
#[derive(Debug, Clone)]
pub struct ParentRun {
    /// The parent's run id.
    pub run_id: Arc<str>,
    /// The parent's budget supervisor.
    pub budget: ActorRef<BudgetMsg>,
}

/// Where a run sits in an agent tree.
#[derive(Debug, Clone)]
pub struct Lineage {
    /// The parent run, for a child.
    pub parent: Option<ParentRun>,
    /// Depth in the tree (the root is 0).
    pub depth: u32,
    /// W3C trace id shared by the whole tree (32 hex digits).
    pub trace_id: String,
    /// The parent's absolute deadline, which bounds this run's.
    pub deadline_at: Option<Instant>,
}

impl Lineage {
    /// A root run's lineage. A durable run's trace id is derived from its id, so
    /// a resumed run keeps it; others get a fresh one.
    pub fn root(durable_id: Option<&String>) -> Lineage {
        let trace_id = match durable_id {
            Some(id) => {
                let mut f = Fingerprinter::new();
                f.str("trace").str(id);
                format!("{:032x}", f.finish_u128())
            }
            None => uuid::Uuid::now_v7().simple().to_string(),
        };
        Lineage {
            parent: None,
            depth: 0,
            trace_id,
            deadline_at: None,
        }
    }

    /// The W3C `traceparent` of run `run_id` in this tree.
    pub fn traceparent(&self, run_id: &str) -> String {
        let mut f = Fingerprinter::new();
        f.str(run_id);
        format!("00-{}-{}-01", self.trace_id, f.finish_short())
    }
}

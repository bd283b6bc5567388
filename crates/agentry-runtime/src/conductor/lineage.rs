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
    /// The parent's budget supervisor; `None` when the parent had stopped
    /// before this child was regrown under it (nothing is charged up then).
    pub budget: Option<ActorRef<BudgetMsg>>,
    /// The tree's root run id (`gen_ai.conversation.id` of every run in it).
    pub root_id: Arc<str>,
    /// The span the child's `invoke_agent` span nests under: the parent's
    /// `execute_tool agent.spawn` (disabled when spans are off, or for a
    /// child regrown after a restart, which rejoins through its stored
    /// `RunConfig::traceparent`).
    pub span: tracing::Span,
}

/// Where a run sits in an agent tree.
#[derive(Debug, Clone)]
pub struct Lineage {
    /// The parent run, for a child. Boxed: a root run (most of them, and
    /// every hibernated one) keeps a pointer, not ~80 bytes.
    pub parent: Option<Box<ParentRun>>,
    /// Depth in the tree (the root is 0).
    pub depth: u32,
    /// W3C trace id shared by the whole tree (32 hex digits).
    pub trace_id: String,
    /// The parent's absolute deadline, which bounds this run's.
    pub deadline_at: Option<Instant>,
}

impl Lineage {
    /// A root run's lineage. A run given a valid parent `traceparent` joins its
    /// trace; otherwise a durable run's trace id is derived from its id, so a
    /// resumed run keeps it, and others get a fresh one.
    pub fn root(durable_id: Option<&String>, parent: Option<&str>) -> Lineage {
        let trace_id = match (parent.and_then(trace_id_of), durable_id) {
            (Some(joined), _) => joined.to_string(),
            (None, Some(id)) => {
                let mut f = Fingerprinter::new();
                f.str("trace").str(id);
                format!("{:032x}", f.finish_u128())
            }
            (None, None) => uuid::Uuid::now_v7().simple().to_string(),
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

/// The trace id of a W3C `traceparent`, if it is one.
pub(crate) fn trace_id_of(traceparent: &str) -> Option<&str> {
    agentry_telemetry::TraceParent::parse(traceparent).map(|p| p.trace_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_joins_a_valid_parent_trace_and_ignores_an_invalid_one() {
        let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let joined = Lineage::root(None, Some(parent));
        assert_eq!(joined.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert!(
            joined
                .traceparent("r1")
                .starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-")
        );
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "garbage",
        ] {
            assert_ne!(
                Lineage::root(None, Some(bad)).trace_id,
                joined.trace_id,
                "{bad}"
            );
        }
        let id = "run-1".to_string();
        assert_eq!(
            Lineage::root(Some(&id), Some(parent)).trace_id,
            joined.trace_id,
            "a durable run joins its parent's trace too"
        );
    }
}

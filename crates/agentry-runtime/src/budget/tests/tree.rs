//! The tree property: random trees of real budget supervisors (depth ≤ 4,
//! fan-out ≤ 5) never overspend their root, checked against the model.

use std::time::Duration;

use proptest::prelude::*;

use super::{concurrent, plan, sequential, settle};

/// One case: the concurrent phase, its invariants, then the sequential phase
/// from where it left the tree, checked exactly against the model.
async fn run_case(plan: plan::TreePlan) -> Result<(), String> {
    let (reports, reservations) = concurrent::run(&plan).await?;
    let (model, runs) = settle::settle(reports, &reservations).await?;
    let mut tree = sequential::Tree::new(model, runs, plan.nodes.len());
    // What each live node has left to carve is what the algebra says: its
    // reservations survived the concurrent phase exactly.
    for v in tree.model.live() {
        tree.left_as_modelled(v).await?;
    }
    tree.run_all(&plan.sequential).await
}

proptest! {
    // 256 cases unless PROPTEST_CASES says otherwise.
    #![proptest_config(ProptestConfig::default())]

    /// Random trees (depth ≤ 4, fan-out ≤ 5) whose nodes step, tick, retry,
    /// carve children (in their own steps, and from outside at any moment) and
    /// end, all at once on two worker threads, never overspend the root nor any
    /// node its allowance on any dimension; every spend is answered; each node's
    /// total equals its subtree's spends; and in the sequential phase every
    /// answer is the model's.
    #[test]
    fn a_tree_never_overspends_its_root(plan in plan::tree()) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        // A case takes milliseconds; a hang fails it instead of the whole run.
        let outcome = rt.block_on(async { tokio::time::timeout(Duration::from_secs(20), run_case(plan)).await });
        match outcome {
            Ok(result) => result.map_err(TestCaseError::fail)?,
            Err(_) => return Err(TestCaseError::fail("the case did not finish within 20 s")),
        }
    }
}

//! After the concurrent phase: the invariants that hold for every
//! interleaving, then the model the sequential phase starts from.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use agentry_protocol::budget::Usage;

use super::concurrent::{NodeReport, Reservations};
use super::model::{Amounts, Model, Observed, add, within};
use super::standin::StandInRun;

/// Every reply was counted, granted or refused.
fn counted(reports: &[NodeReport], reservations: &Reservations) -> Result<(), String> {
    for r in reports {
        if r.asked != r.granted + r.refused {
            return Err(format!(
                "node {}: {} spends asked, {} granted, {} refused",
                r.id, r.asked, r.granted, r.refused
            ));
        }
    }
    let asked = reservations.asked.load(Ordering::Relaxed);
    let granted = reservations.granted.load(Ordering::Relaxed);
    let refused = reservations.refused.load(Ordering::Relaxed);
    if asked != granted + refused {
        return Err(format!(
            "{asked} reservations asked, {granted} granted, {refused} refused"
        ));
    }
    Ok(())
}

/// Per node: the own spends of its whole subtree, and its slack (the largest
/// turn of each node in it, summed).
fn subtree_sums(reports: &[NodeReport]) -> BTreeMap<usize, (Usage, Amounts)> {
    let parent: BTreeMap<usize, Option<usize>> = reports.iter().map(|r| (r.id, r.parent)).collect();
    let mut sums: BTreeMap<usize, (Usage, Amounts)> = BTreeMap::new();
    for r in reports {
        let mut at = Some(r.id);
        while let Some(v) = at {
            let (own, slack) = sums.entry(v).or_default();
            *own = add(own, &r.own);
            *slack = slack.plus(&r.largest_turn);
            at = parent.get(&v).copied().flatten();
        }
    }
    sums
}

/// Checks the tree after the concurrent phase and returns the model of its
/// live part with the live runs: every reply counted; each node's S (final for
/// an ended node, after a settle for a live one) equals the sum of its
/// subtree's own spends; S + R ≤ L at every live node (R as the algebra
/// says: per live child, its allowance minus what its subtree spent), so the
/// root never overspends; each live node counts its live children.
pub(crate) async fn settle(
    mut reports: Vec<NodeReport>,
    reservations: &Reservations,
) -> Result<(Model, BTreeMap<usize, StandInRun>), String> {
    counted(&reports, reservations)?;
    // A child's id is larger than its parent's: in descending order, every node's
    // snapshot is taken after its children's, so their charge-ups have arrived.
    reports.sort_by_key(|r| std::cmp::Reverse(r.id));
    let sums = subtree_sums(&reports);
    let mut observed = Vec::new();
    let mut runs = BTreeMap::new();
    for r in &mut reports {
        let (own, slack) = sums.get(&r.id).copied().unwrap_or_default();
        let spent = match (&r.run, &r.last) {
            (Some(run), _) => run.snapshot().await.map_err(|e| e.to_string())?.spent,
            (None, Some(last)) => last.spent,
            (None, None) => return Err(format!("node {} neither runs nor ended", r.id)),
        };
        if spent != own {
            return Err(format!(
                "node {}: spent {spent:?}, its subtree's own spends {own:?}",
                r.id
            ));
        }
        within(&r.limits, &Amounts::of(&spent), &slack)
            .map_err(|e| format!("node {} spent {e}", r.id))?;
        if let Some(run) = r.run.take() {
            observed.push(Observed {
                id: r.id,
                parent: r.parent,
                limits: r.limits,
                allowance: r.allowance,
                spent,
            });
            runs.insert(r.id, run);
        }
    }
    observed.reverse();
    let model = Model::observed(&observed);
    for (&v, run) in &runs {
        let (_, slack) = sums.get(&v).copied().unwrap_or_default();
        let limits = observed
            .iter()
            .find(|o| o.id == v)
            .map(|o| o.limits)
            .unwrap_or_default();
        within(&limits, &model.committed(v), &slack)
            .map_err(|e| format!("node {v}: spent + reserved {e}"))?;
        let live = run.live_children().await.map_err(|e| e.to_string())?;
        if live != model.children(v).len() {
            return Err(format!(
                "node {v} counts {live} live children, the tree has {:?}",
                model.children(v)
            ));
        }
    }
    Ok((model, runs))
}

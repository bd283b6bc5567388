//! A run's status changes as `agentry::metrics` events (DEBUG), for a
//! subscriber that counts parked, sleeping and paused runs (the
//! `agentry-metrics` crate). Only a run whose span is enabled is observed, and
//! the event's callsite check keeps it free when nobody listens.

use agentry_protocol::state::RunStatus;

use super::run_state::RunState;

/// Tells the run's status, and the one it had (`None`: the first word).
pub(super) fn status(state: &RunState, before: Option<RunStatus>) {
    let Some(run_id) = state.observed.as_deref() else {
        return;
    };
    tracing::event!(
        target: "agentry::metrics",
        tracing::Level::DEBUG,
        gen_ai.agent.id = run_id,
        agentry.status = state.status.as_str(),
        agentry.status.before = before.map(RunStatus::as_str),
        "run status"
    );
}

//! A durable run's record: written before a new run's handle is returned, read
//! back (with its checkpoint, timers and inbox) to resume it.

use agentry_store::{InboxRecord, RunRecord, TimerRecord, Write};

use crate::conductor::Restore;
use crate::config::RunConfig;
use crate::durable::RunLog;
use crate::error::RuntimeError;
use crate::owner::Claim;

/// A run read back from the store, ready to start.
pub(crate) struct Resumed {
    pub(crate) restore: Restore,
    pub(crate) timers: Vec<TimerRecord>,
    /// Inputs accepted but not applied before the restart.
    pub(crate) inbox: Vec<InboxRecord>,
    /// This process's claim on the run, committed.
    pub(crate) claim: Claim,
    /// It has stored children, which are adopted once it runs: its
    /// `agent.*` calls wait for that.
    pub(crate) adopting: bool,
}

/// The configuration a stored run was started with.
pub(super) fn config_of(record: &RunRecord) -> Result<RunConfig, RuntimeError> {
    serde_json::from_value(record.config.clone()).map_err(|e| RuntimeError::NotResumable {
        run_id: record.run_id.clone(),
        message: format!("its stored configuration does not parse: {e}"),
    })
}

/// Writes a new run's record and this process's claim on it; fails on a
/// duplicate id.
pub(super) async fn create_record(
    log: &RunLog,
    config: &RunConfig,
    claim: &Claim,
    parent_id: Option<&str>,
) -> Result<(), RuntimeError> {
    let now = agentry_protocol::now_millis();
    let config_json = serde_json::to_value(config).map_err(|e| RuntimeError::NotResumable {
        run_id: log.run_id.to_string(),
        message: format!("its configuration cannot be stored: {e}"),
    })?;
    let record = RunRecord {
        run_id: log.run_id.to_string(),
        task_id: config.task_id.clone(),
        parent_id: parent_id.map(str::to_string),
        created_at_ms: now,
        deadline_at_ms: config.limits.deadline_ms.map(|ms| now.saturating_add(ms)),
        config: config_json,
        policy: config
            .policy_spec
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
    };
    log.commit(vec![Write::CreateRun(record), claim.write(None)])
        .await?;
    Ok(())
}

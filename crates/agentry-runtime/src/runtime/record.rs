//! A durable run's record: written before a new run's handle is returned, read
//! back (with its checkpoint, timers and inbox) to resume it.

use std::sync::Arc;

use agentry_protocol::fingerprint::sha256_hex;
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
    /// The run's fence mark, read from its record ([`mark_of`]).
    pub(crate) mark: Arc<str>,
    /// Brought back hibernated (`ResumeOptions::dormant`, and it was
    /// asleep at rest).
    pub(crate) dormant: bool,
}

/// Where a run's record keeps its fence mark: a key of the stored
/// configuration, which is the runtime's own JSON (the store's schema is
/// untouched, and [`RunConfig`] ignores the key when it is read back).
const MARK_KEY: &str = "run_mark";

/// A new run's fence mark (`AGENTRY_RUN_MARK` on its processes): random, so no
/// run of another store shares it whatever its id; kept in the run's record,
/// so every later attempt carries, and fences by, the same one. An id's form,
/// like the run id beside it in the record.
pub(super) fn fresh_mark() -> Arc<str> {
    Arc::from(uuid::Uuid::now_v7().to_string())
}

/// The fence mark of a stored run. A record written before marks were kept
/// has none: its mark is derived from the run's id and creation time, so the
/// attempts that resume it agree on one (its first attempt's processes,
/// which carry no mark, are found by their recorded groups and spawn ids).
pub(super) fn mark_of(record: &RunRecord) -> Arc<str> {
    match record
        .config
        .get(MARK_KEY)
        .and_then(serde_json::Value::as_str)
    {
        Some(mark) => Arc::from(mark),
        None => Arc::from(format!(
            "{}-{}",
            record.created_at_ms,
            &sha256_hex(record.run_id.as_bytes())[..16]
        )),
    }
}

/// The configuration a stored run was started with.
pub(super) fn config_of(record: &RunRecord) -> Result<RunConfig, RuntimeError> {
    serde_json::from_value(record.config.clone()).map_err(|e| RuntimeError::NotResumable {
        run_id: record.run_id.clone(),
        message: format!("its stored configuration does not parse: {e}"),
    })
}

/// Writes a new run's record (with the log's fence mark) and this process's
/// claim on it; fails on a duplicate id.
pub(super) async fn create_record(
    log: &RunLog,
    config: &RunConfig,
    claim: &Claim,
    parent_id: Option<&str>,
) -> Result<(), RuntimeError> {
    let now = agentry_protocol::now_millis();
    let mut config_json = serde_json::to_value(config).map_err(|e| RuntimeError::NotResumable {
        run_id: log.run_id.to_string(),
        message: format!("its configuration cannot be stored: {e}"),
    })?;
    if let Some(fields) = config_json.as_object_mut() {
        fields.insert(MARK_KEY.to_string(), log.mark.to_string().into());
    }
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
    claim.lease().claimed();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(config: serde_json::Value, created_at_ms: u64) -> RunRecord {
        RunRecord {
            run_id: "run-205".into(),
            task_id: "task".into(),
            parent_id: None,
            created_at_ms,
            deadline_at_ms: None,
            config,
            policy: String::new(),
        }
    }

    /// A stored mark is the run's; a record without one (written before marks
    /// were kept) gets one from its id and creation time, the same at every
    /// resume, and another for a same-named run created at another time.
    #[test]
    fn a_run_s_mark_is_the_stored_one_or_derived_from_its_record() {
        let stored = record(serde_json::json!({ "run_mark": "m-1" }), 7);
        assert_eq!(&*mark_of(&stored), "m-1");
        let old = record(serde_json::json!({ "goal": "g" }), 7);
        assert_eq!(mark_of(&old), mark_of(&old.clone()));
        assert_ne!(mark_of(&old), mark_of(&record(serde_json::json!({}), 8)));
        assert_ne!(fresh_mark(), fresh_mark());
    }
}

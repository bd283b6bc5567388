//! The idempotency table (the call ledger, in memory), its rows as the store
//! keeps them, and the keys that name "the same action".

use std::collections::HashMap;
use std::sync::Arc;

use agentry_protocol::RemoteRef;
use agentry_protocol::envelope::ResultEnvelope;
use agentry_protocol::fingerprint::{Fingerprinter, hex32};
use agentry_protocol::now_millis;
use agentry_protocol::tool::Idempotency;
use agentry_store::{LedgerEntry, LedgerState, Write};
use ractor::ActorProcessingErr;

use super::prepared::Job;
use crate::durable::RunLog;
use crate::registry::ToolRegistry;

/// One row of the idempotency table.
pub(super) struct Row {
    /// Digest of name + normalized arguments.
    pub(super) digest: u128,
    pub(super) state: LedgerState,
    pub(super) outcome: Option<Arc<ResultEnvelope>>,
    /// The task the call started on another system, recorded with its intent
    /// (boxed: a row is kept for every call, and almost none has one).
    pub(super) remote: Option<Box<RemoteRef>>,
}

/// The call ledger, in memory: what each call id did, and which call id did
/// each keyed action.
#[derive(Default)]
pub(super) struct Ledger {
    /// call id → ledger row.
    table: HashMap<String, Row>,
    /// intent key → call id, for calls of `required_key` tools.
    intents: HashMap<u128, String>,
}

impl Ledger {
    /// The run's ledger: the rows its starter knew, else read back from the
    /// store after everything queued before has landed.
    pub(super) async fn load(
        log: &RunLog,
        known: &super::msg::KnownLedger,
        registry: &ToolRegistry,
    ) -> Result<Ledger, ActorProcessingErr> {
        let mut ledger = Ledger::default();
        let rows = match known.take() {
            Some(rows) => rows,
            None => {
                log.sync().await?;
                match log.store().load(&log.run_id)? {
                    Some(run) => run.ledger,
                    None => return Ok(ledger),
                }
            }
        };
        for entry in rows {
            let Ok(digest) = u128::from_str_radix(&entry.digest, 16) else {
                continue;
            };
            if let Ok(key) = u128::from_str_radix(&entry.intent_key, 16) {
                let keyed = registry
                    .get(&entry.call.name)
                    .is_some_and(|t| t.contract.idempotency == Idempotency::RequiredKey);
                if keyed {
                    ledger.intents.insert(key, entry.call_id.clone());
                }
            }
            ledger.table.insert(
                entry.call_id,
                Row {
                    digest,
                    state: entry.state,
                    outcome: entry.outcome.map(Arc::new),
                    remote: entry.remote,
                },
            );
        }
        Ok(ledger)
    }

    /// The row of a call id.
    #[inline]
    pub(super) fn row(&self, call_id: &str) -> Option<&Row> {
        self.table.get(call_id)
    }

    /// The row of the call that did this keyed action, by its intent key.
    #[inline]
    pub(super) fn keyed(&self, key: u128) -> Option<&Row> {
        self.intents.get(&key).and_then(|id| self.table.get(id))
    }

    /// The remote task a call interrupted by a crash had started (its row
    /// still at `intent`): the call follows it when run again.
    pub(super) fn follow(&self, call_id: &str) -> Option<&RemoteRef> {
        self.table
            .get(call_id)
            .filter(|row| row.state == LedgerState::Intent)
            .and_then(|row| row.remote.as_deref())
    }

    /// Keeps a call's outcome.
    #[inline]
    pub(super) fn remember(&mut self, call_id: &str, digest: u128, env: &Arc<ResultEnvelope>) {
        self.table.insert(
            call_id.to_string(),
            Row {
                digest,
                state: LedgerState::Outcome,
                outcome: Some(Arc::clone(env)),
                remote: None,
            },
        );
    }

    /// Notes which call id did a keyed action.
    #[inline]
    pub(super) fn remember_intent(&mut self, key: u128, call_id: String) {
        self.intents.insert(key, call_id);
    }
}

/// A call's ledger row as the store keeps it.
pub(super) fn entry(
    run_id: &str,
    job: &Job<'_>,
    state: LedgerState,
    outcome: Option<&ResultEnvelope>,
) -> LedgerEntry {
    let key = intent_key(run_id, job.digest);
    LedgerEntry {
        call_id: job.call.id.clone(),
        step: job.step,
        position: job.position as u32,
        call: job.call.clone(),
        digest: String::from(&*hex32(job.digest)),
        intent_key: String::from(&*hex32(key)),
        operation_id: operation_id(run_id, job.digest).to_string(),
        state,
        outcome: outcome.cloned(),
        updated_at_ms: now_millis(),
        processes: Vec::new(),
        remote: None,
    }
}

/// The host-issued operation id of an action: a digest of the run, the tool and
/// its normalized arguments, so a retry, a re-run after a crash and the same
/// action under a fresh call id all carry the same id.
pub fn operation_id(run_id: &str, call_digest: u128) -> Arc<str> {
    let mut id = [0u8; 35];
    id[..3].copy_from_slice(b"op-");
    id[3..].copy_from_slice(hex32(intent_key(run_id, call_digest)).as_bytes());
    // Only ASCII was written.
    Arc::from(std::str::from_utf8(&id).unwrap_or_default())
}

/// hash(tool, normalized arguments, operation scope = the run): the ledger's key
/// for "the same action".
pub fn intent_key(run_id: &str, call_digest: u128) -> u128 {
    let mut f = Fingerprinter::new();
    f.str(run_id).str(&hex32(call_digest));
    f.finish_u128()
}

/// A durable call's process groups, added to its ledger row as they start, so
/// that a resume after a crash kills them before it settles the call. The row
/// (with the call's intent) is queued at the same writer before the tool
/// runs, so the group lands on it.
pub(super) struct LedgerProcesses {
    log: RunLog,
    call_id: String,
}

impl LedgerProcesses {
    pub(super) fn new(log: &RunLog, call_id: &str) -> Self {
        LedgerProcesses {
            log: log.clone(),
            call_id: call_id.to_string(),
        }
    }
}

impl agentry_tools::ProcessLog for LedgerProcesses {
    fn started(&self, group: agentry_protocol::ProcessGroupRecord) {
        self.log.submit(vec![Write::LedgerProcess {
            run_id: self.log.run_id.to_string(),
            call_id: self.call_id.clone(),
            group,
        }]);
    }

    fn run_mark(&self) -> Option<&str> {
        Some(&self.log.mark)
    }
}

/// A durable run's acceptance checks: no ledger row holds their groups, so
/// the run's fence mark alone finds what a crash left of them.
pub(super) struct MarkedChecks(pub(super) Arc<str>);

impl agentry_tools::ProcessLog for MarkedChecks {
    fn started(&self, _group: agentry_protocol::ProcessGroupRecord) {}

    fn run_mark(&self) -> Option<&str> {
        Some(&self.0)
    }
}

/// A durable call's remote task, set on its ledger row when the other system
/// accepted it, so that a resume after a crash follows it ([`RemoteLog`]);
/// and the task a call run again after a crash follows.
///
/// [`RemoteLog`]: agentry_tools::RemoteLog
pub(super) struct LedgerRemote {
    log: RunLog,
    call_id: String,
    follow: Option<RemoteRef>,
}

impl LedgerRemote {
    pub(super) fn new(log: &RunLog, call_id: &str, follow: Option<RemoteRef>) -> Self {
        LedgerRemote {
            log: log.clone(),
            call_id: call_id.to_string(),
            follow,
        }
    }
}

impl agentry_tools::RemoteLog for LedgerRemote {
    fn started(&self, remote: RemoteRef) {
        // Queued behind the call's intent row at the same writer, so it
        // lands on that row.
        self.log.submit(vec![Write::LedgerRemote {
            run_id: self.log.run_id.to_string(),
            call_id: self.call_id.clone(),
            remote,
        }]);
    }

    fn follow(&self) -> Option<RemoteRef> {
        self.follow.clone()
    }
}

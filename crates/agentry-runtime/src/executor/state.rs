//! The executor's state: its arguments and the idempotency table, and how a
//! call's ledger row reaches the store.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use agentry_protocol::envelope::{ErrorCode, ResultEnvelope, ToolError};
use agentry_store::{LedgerState, Write};
use agentry_tools::{HumanDesk, ProcessLog, RunScope, ToolContext};
use ractor::ActorProcessingErr;

use super::human::RunHumans;
use super::ledger::{self, Ledger, MarkedChecks};
use super::msg::ExecutorArgs;
use super::prepared::Job;

/// Executor state: its arguments and the idempotency table.
pub struct ExecutorState {
    pub(super) args: ExecutorArgs,
    pub(super) ledger: Ledger,
    /// The current step's token (a child of the run's): a user's interrupt
    /// cancels it.
    pub(super) cut: tokio_util::sync::CancellationToken,
    /// Where the run's calls put questions to a human, made once.
    pub(super) humans: Arc<RunHumans>,
    /// What every call's context shares, made once.
    pub(super) scope: Arc<RunScope>,
}

impl ExecutorState {
    /// The state an executor starts with: a durable run's ledger read back from
    /// the store (a resumed run, or a restart after the executor died).
    pub(super) async fn start(args: ExecutorArgs) -> Result<ExecutorState, ActorProcessingErr> {
        let ledger = match &args.log {
            Some(log) => Ledger::load(log, &args.known_ledger, &args.registry.current()).await?,
            None => Ledger::default(),
        };
        let cut = args.run_token.child_token();
        let humans = Arc::new(RunHumans {
            state: args.state.clone(),
            events: args.events.clone(),
            timeout: args.approval.timeout,
            step: AtomicU64::new(0),
        });
        let scope = Arc::new(RunScope {
            run_id: Arc::clone(&args.run_id),
            workdir: Arc::clone(&args.workdir),
            root: Arc::clone(&args.root),
            artifacts: Arc::clone(&args.artifacts),
            agents: args.agents.clone(),
            human: Some(Arc::clone(&humans) as Arc<dyn HumanDesk>),
            // The run's event sink: progress reports become `tool_progress` events.
            progress: Some(Arc::new(args.events.clone()) as Arc<dyn agentry_tools::ProgressSink>),
            sandbox: Some(Arc::clone(&args.sandbox)),
        });
        Ok(ExecutorState {
            args,
            ledger,
            cut,
            humans,
            scope,
        })
    }

    /// What acceptance checks run with: the run's root, artifacts and token
    /// (each command check gets its own call id and a child token).
    pub(super) fn check_context(&self) -> ToolContext {
        // Checks start no child, put no question and report no progress.
        let run = Arc::new(RunScope {
            agents: None,
            human: None,
            progress: None,
            ..RunScope::clone(&self.scope)
        });
        ToolContext {
            run,
            call_id: "accept".to_string(),
            cancel: self.args.run_token.clone(),
            attempt: 1,
            operation_id: Arc::from("accept"),
            processes: self
                .args
                .log
                .as_ref()
                .map(|log| Arc::new(MarkedChecks(Arc::clone(&log.mark))) as Arc<dyn ProcessLog>),
            remote: None,
            deadlines: Default::default(),
            traceparent: Some(Arc::clone(&self.args.traceparent)),
        }
    }

    /// Records a call's ledger row (durable runs: in the store too). With `wait`
    /// the row is on disk when this returns.
    pub(super) async fn record(
        &self,
        job: &Job<'_>,
        state: LedgerState,
        outcome: Option<&ResultEnvelope>,
        wait: bool,
    ) -> Result<(), ToolError> {
        let Some(log) = &self.args.log else {
            return Ok(());
        };
        if let Some(outcome) = outcome {
            // Before the row is queued: the writer redacts with what is known.
            crate::redaction::register_result(
                self.args.events.redactor(),
                &job.tool.contract,
                outcome,
            );
        }
        let writes = vec![Write::Ledger {
            run_id: log.run_id.to_string(),
            entry: self.ledger_row(job, state, outcome),
        }];
        if !wait {
            log.submit(writes);
            return Ok(());
        }
        log.commit(writes).await.map_err(|e| {
            ToolError::new(
                ErrorCode::Einternal,
                format!("the call could not be recorded before it ran, so it was not run: {e}"),
            )
        })
    }

    /// A call's ledger row. Built here, not in `record`: a row held in a local
    /// there would stay in the future of every call (its storage lives across
    /// the await), ~500 bytes a call.
    fn ledger_row(
        &self,
        job: &Job<'_>,
        state: LedgerState,
        outcome: Option<&ResultEnvelope>,
    ) -> agentry_store::LedgerEntry {
        let mut entry = ledger::entry(&self.args.run_id, job, state, outcome);
        if state == LedgerState::Intent {
            // A call that follows its remote task keeps it on its new intent
            // row: a second crash follows the same task again.
            entry.remote = self.ledger.follow(&job.call.id).cloned().map(Box::new);
        }
        entry
    }
}

//! The pipeline each call goes through before anything runs: an id of its
//! own in the decision? → budget granted? → known tool? → arguments valid JSON
//! and schema-valid? → scope granted? → idempotency table.

use std::collections::HashSet;

use agentry_protocol::envelope::{ErrorCode, ResultEnvelope, ToolError};
use agentry_protocol::fingerprint::Fingerprinter;
use agentry_protocol::tool::{Idempotency, ToolCall};
use agentry_store::LedgerState;
use serde_json::Value;

use super::envelope::{conflict, duplicate, fail, is_recordable, no_id, replay};
use super::ledger::intent_key;
use super::prepared::{Mode, Prepared};
use super::state::ExecutorState;
use crate::durable::rerunnable;
use crate::registry::{RegisteredTool, ToolRegistry};

/// A call whose tool, arguments and grant are in order.
struct Checked<'a> {
    tool: &'a RegisteredTool,
    args: Value,
}

impl ExecutorState {
    /// Runs every call of a step through the pipeline. Only the first `granted`
    /// have tool-call budget; `again`: the step is acted on again after a
    /// restart.
    ///
    /// A call without an id, or with an id an earlier call of this decision
    /// already took, is `EINVAL` and never runs: its result could not be told
    /// from another's, nor replayed by id after a restart. (The adapters give
    /// an id to a call the model sent without one; this is the last line.)
    pub(super) fn prepare_all<'a>(
        &self,
        registry: &'a ToolRegistry,
        calls: &'a [ToolCall],
        granted: usize,
        again: bool,
    ) -> Vec<Prepared<'a>> {
        let mut prepared = Vec::with_capacity(calls.len());
        let mut seen: HashSet<&str> = HashSet::with_capacity(calls.len());
        for (i, call) in calls.iter().enumerate() {
            let p = if call.id.trim().is_empty() {
                Prepared::Done(no_id(call))
            } else if !seen.insert(call.id.as_str()) {
                Prepared::Done(duplicate(call))
            } else if i >= granted {
                Prepared::Done(budget_refusal(call))
            } else {
                self.prepare(registry, call, again)
            };
            prepared.push(p);
        }
        prepared
    }

    /// One call through the pipeline.
    fn prepare<'a>(
        &self,
        registry: &'a ToolRegistry,
        call: &ToolCall,
        again: bool,
    ) -> Prepared<'a> {
        let Checked { tool, args } = match self.check_call(registry, call) {
            Ok(checked) => checked,
            Err(refused) => return Prepared::Done(fail(call, refused)),
        };
        let mut f = Fingerprinter::new();
        f.str(&call.name).value(&args);
        let digest = f.finish_u128();
        self.ledger_verdict(tool, call, args, digest, again)
    }

    /// Known tool, scope granted, arguments valid JSON and schema-valid; or the
    /// error that says which is not.
    fn check_call<'a>(
        &self,
        registry: &'a ToolRegistry,
        call: &ToolCall,
    ) -> Result<Checked<'a>, ToolError> {
        let Some(tool) = registry.get(&call.name) else {
            return Err(ToolError::new(
                ErrorCode::Enotool,
                format!("no tool named \"{}\"", call.name),
            )
            .with_action(format!("call one of: {}", self.granted_names(registry))));
        };
        if !self.args.grants.allows(&tool.contract) {
            // Before the arguments are looked at: an ungranted tool's schema is
            // none of the model's business, and every attempt counts as a
            // denial. The scope is not named either.
            return Err(ToolError::new(
                ErrorCode::Eperm,
                format!("this run is not granted tool {}", call.name),
            )
            .with_action("use a granted tool or finish"));
        }
        let args = match call.arguments.to_value() {
            Ok(v) => v,
            Err(msg) => {
                return Err(ToolError::new(ErrorCode::Einval, msg)
                    .with_action("send the arguments as one valid JSON object"));
            }
        };
        if let Err(problems) = tool.validate(&args) {
            return Err(ToolError::new(
                ErrorCode::Einval,
                format!(
                    "arguments do not match the schema of {}: {problems}",
                    call.name
                ),
            )
            .with_action("fix the arguments to match the tool's input_schema and call again"));
        }
        Ok(Checked { tool, args })
    }

    /// The names of the tools this run may call, for an unknown tool's error:
    /// the ungranted ones are not the model's to know of.
    fn granted_names(&self, registry: &ToolRegistry) -> String {
        registry
            .names()
            .into_iter()
            .filter(|name| {
                registry
                    .get(name)
                    .is_some_and(|tool| self.args.grants.allows(&tool.contract))
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// What the idempotency table says about a checked call: its recorded
    /// outcome, a conflict, how to settle a call a crash interrupted, or run it.
    fn ledger_verdict<'a>(
        &self,
        tool: &'a RegisteredTool,
        call: &ToolCall,
        args: Value,
        digest: u128,
        again: bool,
    ) -> Prepared<'a> {
        let run = |mode| Prepared::Run {
            tool,
            args,
            digest,
            mode,
        };
        if let Some(row) = self.ledger.row(&call.id) {
            if row.digest != digest {
                return Prepared::Done(conflict(call));
            }
            match (row.state, &row.outcome) {
                // A transient failure may be tried again under the same id, except
                // when the step is acted on again: then it is that step's outcome.
                (LedgerState::Outcome | LedgerState::Denied, Some(recorded))
                    if again || is_recordable(recorded) =>
                {
                    return Prepared::Done(replay(recorded, call));
                }
                // Started and never finished: only a crash leaves a row like this
                // (every finished attempt records an outcome, even a cancelled
                // one), so whether it took effect is unknown, acted on again or not.
                // Unless the call recorded the remote task it started: then that
                // task is followed (not started again, nor put to a human).
                (LedgerState::Intent, _) if row.remote.is_some() => return run(Mode::Follow),
                (LedgerState::Intent | LedgerState::AwaitingDecision, _) => {
                    return run(if rerunnable(&tool.contract) {
                        Mode::Rerun
                    } else {
                        Mode::Unsettled
                    });
                }
                (LedgerState::Approved, _) if again => return run(Mode::Approved),
                (
                    LedgerState::Outcome
                    | LedgerState::Denied
                    | LedgerState::AwaitingApproval
                    | LedgerState::Approved,
                    _,
                ) => {}
            }
        }
        // The same action under a fresh call id: a keyed tool's recorded outcome.
        if tool.contract.idempotency == Idempotency::RequiredKey
            && let Some(row) = self.ledger.keyed(intent_key(&self.args.run_id, digest))
            && let Some(recorded) = row.outcome.as_ref().filter(|r| is_recordable(r))
        {
            return Prepared::Keyed {
                env: replay(recorded, call),
                digest,
            };
        }
        run(Mode::Fresh)
    }
}

/// The envelope of a call past the step's tool-call grant.
fn budget_refusal(call: &ToolCall) -> ResultEnvelope {
    fail(
        call,
        ToolError::new(
            ErrorCode::Ebudget,
            "tool-call budget exhausted; the call was not run",
        )
        .with_action("finish with what you have"),
    )
}

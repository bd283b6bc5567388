//! Whether the run goes on after a step (step 6): the stop acting decided, the
//! model's answer and its acceptance checks, or a run that stopped making
//! progress.

use std::sync::Arc;

use agentry_protocol::decision::Decision;
use agentry_protocol::envelope::ResultEnvelope;
use agentry_protocol::fingerprint::Fingerprinter;
use agentry_protocol::stop::StopReason;
use agentry_protocol::tool::ToolArguments;

use super::state::ConductorState;
use super::step_result::{Flow, StepResult, Stop};
use crate::ask::ask;
use crate::executor::ExecutorMsg;

impl ConductorState {
    /// Step 6, termination checks, after the step's effects are on record.
    pub(super) async fn check_end(&mut self, r: &mut StepResult) -> Flow {
        if let Some(stop) = r.acted.stop.take() {
            return Flow::Stop(stop);
        }
        if let Some(answer) = r.acted.answer.take()
            && answer.ends_run(self.wiring.config.driver)
        {
            // Boxed: the last step only; unboxed, the checks' future would be
            // copied with this one on every step.
            return Box::pin(self.verify(answer.into_text())).await;
        }
        let max_denied = self.wiring.config.max_denied;
        if max_denied > 0 && self.denied.len() >= max_denied {
            return Flow::stop(
                StopReason::PermissionDenied,
                format!(
                    "{} calls in a row were denied (EPERM): {}",
                    self.denied.len(),
                    self.denied.join(", ")
                ),
            );
        }
        if self.progress_stalled(r.fingerprint) {
            let window = self.wiring.config.progress_window;
            return Flow::stop(
                StopReason::NoProgress,
                format!(
                    "the last {window} steps repeated the same action, observation and world state"
                ),
            );
        }
        Flow::Continue
    }

    /// Runs the task's acceptance checks on the model's answer.
    pub(super) async fn verify(&mut self, answer: String) -> Flow {
        if self.wiring.config.accept.is_empty() {
            return Flow::stop(
                StopReason::Done,
                "the model finished; the task declares no acceptance checks",
            );
        }
        let checks = self.wiring.config.accept.clone();
        let token = self.wiring.run_token.clone();
        let outcomes = tokio::select! {
            biased;
            _ = token.cancelled() => {
                return Flow::Stop(self.cancelled_stop("acceptance checks were running").await);
            }
            r = ask(&self.children.executor, |reply| ExecutorMsg::Verify { checks, reply }) => match r {
                Ok(o) => o,
                Err(e) => return Flow::stop(StopReason::UnrecoverableError, e.to_string()),
            },
        };
        let failed: Vec<&str> = outcomes
            .iter()
            .filter(|o| !o.passed)
            .map(|o| o.detail.as_str())
            .collect();
        let (reason, detail) = if failed.is_empty() {
            (
                StopReason::Done,
                format!(
                    "answer {answer:?} accepted: {} checks passed",
                    outcomes.len()
                ),
            )
        } else {
            (
                StopReason::VerificationMissing,
                format!(
                    "the model finished but acceptance failed: {}",
                    failed.join("; ")
                ),
            )
        };
        Flow::Stop(Stop {
            reason,
            detail,
            checks: outcomes,
        })
    }

    /// Whether the last `progress_window` steps all had fingerprint `fp`.
    fn progress_stalled(&mut self, fp: u64) -> bool {
        let window = self.wiring.config.progress_window;
        if window < 2 {
            return false;
        }
        self.fingerprints.push_back(fp);
        while self.fingerprints.len() > window {
            self.fingerprints.pop_front();
        }
        self.fingerprints.len() == window
            && self.fingerprints.iter().all(|f| *f == self.fingerprints[0])
    }
}

/// hash(action, observation, world version, inputs applied). Call ids and
/// timings are left out so a model that repeats itself under fresh ids is
/// still seen repeating. Raw argument strings are hashed as sent (not
/// re-parsed): a looping model repeats them byte for byte. The count of
/// inputs applied so far is in: the same reply to a new message (an
/// event-driven agent's "ok") is an answer, not a loop.
#[inline]
pub(super) fn step_fingerprint(
    decision: &Decision,
    results: &[Arc<ResultEnvelope>],
    world: &str,
    inputs_applied: u64,
) -> u64 {
    let mut f = Fingerprinter::new();
    match decision {
        Decision::ToolCalls { calls } => {
            for c in calls {
                f.str(&c.name);
                match &c.arguments {
                    ToolArguments::Raw(raw) => f.str(raw.trim()),
                    ToolArguments::Parsed(v) => f.value(v),
                };
            }
        }
        Decision::Final { answer } => {
            f.str("final").str(answer);
        }
        Decision::Failed { message, .. } => {
            f.str("failed").str(message);
        }
    }
    for r in results {
        r.fingerprint_observation(&mut f);
    }
    f.str(world).u64(inputs_applied);
    (f.finish_u128() >> 64) as u64
}

//! A step's calls, group by group: consecutive parallel-safe calls run
//! together (at most `max_parallel` at a time), any other call alone, in request
//! order; the results are collected in request order and kept in the
//! idempotency table.

use std::ops::Range;
use std::sync::Arc;

use agentry_protocol::envelope::ResultEnvelope;
use agentry_protocol::tool::{Idempotency, ToolCall};
use agentry_protocol::trace::AttemptRecord;
use agentry_store::LedgerState;
use futures::StreamExt;
use serde_json::Value;

use super::envelope::{fail, is_recordable, lost};
use super::ledger::intent_key;
use super::msg::{AppliedInput, CallOutcome, CutShort, Executed};
use super::prepared::{Job, Mode, Prepared, is_parallel_safe};
use super::state::ExecutorState;
use crate::durable::rerunnable;
use crate::registry::ToolRegistry;

/// What a step's calls produced so far, by position.
struct StepRun {
    results: Vec<Option<ResultEnvelope>>,
    attempts: Vec<AttemptRecord>,
    approvals: Vec<AppliedInput>,
    /// Positions of the calls a user's interrupt cut short, and of those of
    /// them a human settled.
    interrupted: Vec<usize>,
    unsettled: Vec<usize>,
}

impl StepRun {
    /// Takes in the outcome of the call at position `k`.
    #[inline]
    fn absorb(&mut self, k: usize, outcome: CallOutcome) {
        self.results[k] = Some(outcome.envelope);
        self.attempts.extend(outcome.attempts);
        self.approvals.extend(outcome.applied);
        match outcome.cut {
            CutShort::No => {}
            CutShort::Cancelled => self.interrupted.push(k),
            CutShort::Unsettled => self.unsettled.push(k),
        }
    }
}

/// The ids of the calls at `positions`, in request order.
fn ids_at(mut positions: Vec<usize>, calls: &[ToolCall]) -> Vec<String> {
    positions.sort_unstable();
    positions.into_iter().map(|k| calls[k].id.clone()).collect()
}

/// A call of a group about to run, with its arguments (moved out of its
/// [`Prepared::Run`]).
struct Ready<'a> {
    job: Job<'a>,
    args: Value,
}

impl ExecutorState {
    /// Runs a batch through the pipeline.
    pub async fn execute(
        &mut self,
        step: u64,
        calls: &[ToolCall],
        granted: usize,
        again: bool,
    ) -> Executed {
        let registry = self.args.registry.current();
        let mut prepared = self.prepare_all(&registry, calls, granted, again);
        let side_effects = prepared
            .iter()
            .any(|p| matches!(p, Prepared::Run { tool, .. } if !rerunnable(&tool.contract)));
        let mut run = StepRun {
            results: vec![None; calls.len()],
            attempts: Vec::new(),
            approvals: Vec::new(),
            interrupted: Vec::new(),
            unsettled: Vec::new(),
        };
        let mut i = 0;
        while i < prepared.len() {
            let range = next_group(&prepared, i);
            i = range.end;
            let mut group = take_group(&mut prepared, range, step, calls);
            if group.is_empty() {
                continue;
            }
            // Calls not started when the step is cut (or the run cancelled)
            // never start.
            if self.cut.is_cancelled() {
                let cut = self.cut_short();
                for Ready { job, .. } in group {
                    let env = fail(job.call, self.cancelled_error());
                    run.absorb(job.position, CallOutcome::not_run(env, None).cut(cut));
                }
                continue;
            }
            // The common case, one call: awaited right here, with no stream
            // machinery and no future of its own in between (this future is
            // boxed and moved once per step; each nested one adds to it).
            if group.len() == 1
                && let Some(Ready { job, args }) = group.pop()
            {
                let k = job.position;
                let outcome = self.run_with_retries(job, args).await;
                run.absorb(k, outcome);
                continue;
            }
            self.run_parallel(group, &mut run).await;
        }
        let results = self
            .collect(prepared, &mut run.results, calls, step, &registry)
            .await;
        Executed {
            results,
            attempts: run.attempts,
            approvals: run.approvals,
            side_effects,
            interrupted: ids_at(run.interrupted, calls),
            unsettled: ids_at(run.unsettled, calls),
        }
    }

    /// Runs a group of parallel-safe calls, at most `max_parallel` at a time.
    async fn run_parallel(&self, group: Vec<Ready<'_>>, run: &mut StepRun) {
        let ks: Vec<usize> = group.iter().map(|ready| ready.job.position).collect();
        // Collected first: a lazy `map` closure inside the stream trips the
        // compiler's higher-ranked lifetime inference for the actor future.
        let runs: Vec<_> = group
            .into_iter()
            .map(|Ready { job, args }| self.run_with_retries(job, args))
            .collect();
        let done: Vec<CallOutcome> = futures::stream::iter(runs)
            .buffered(self.args.max_parallel.max(1))
            .collect()
            .await;
        for (k, outcome) in ks.into_iter().zip(done) {
            run.absorb(k, outcome);
        }
    }

    /// One envelope per call, in request order; outcomes worth keeping go into
    /// the idempotency table.
    async fn collect(
        &mut self,
        prepared: Vec<Prepared<'_>>,
        results: &mut [Option<ResultEnvelope>],
        calls: &[ToolCall],
        step: u64,
        registry: &ToolRegistry,
    ) -> Vec<Arc<ResultEnvelope>> {
        let mut out: Vec<Arc<ResultEnvelope>> = Vec::with_capacity(calls.len());
        for (k, p) in prepared.into_iter().enumerate() {
            let env = match p {
                Prepared::Done(env) => Arc::new(env),
                Prepared::Run { digest, tool, .. } => {
                    let env = Arc::new(results[k].take().unwrap_or_else(|| lost(&calls[k])));
                    // Before the result is recorded or published (a durable
                    // run's ledger row registered it already, as it was queued).
                    crate::redaction::register_result(
                        self.args.events.redactor(),
                        &tool.contract,
                        &env,
                    );
                    if is_recordable(&env) {
                        if tool.contract.idempotency == Idempotency::RequiredKey {
                            let key = intent_key(&self.args.run_id, digest);
                            self.ledger.remember_intent(key, calls[k].id.clone());
                        }
                        self.ledger.remember(&calls[k].id, digest, &env);
                    }
                    env
                }
                Prepared::Keyed { env, digest } => {
                    self.record_keyed(step, k, &calls[k], registry, env, digest)
                        .await
                }
            };
            out.push(env);
        }
        out
    }

    /// A keyed action's recorded outcome, recorded again under this call's id.
    async fn record_keyed(
        &mut self,
        step: u64,
        position: usize,
        call: &ToolCall,
        registry: &ToolRegistry,
        env: ResultEnvelope,
        digest: u128,
    ) -> Arc<ResultEnvelope> {
        let env = Arc::new(env);
        let Some(tool) = registry.get(&call.name) else {
            return env;
        };
        let job = Job {
            step,
            position,
            call,
            tool,
            digest,
            mode: Mode::Fresh,
        };
        let _ = self
            .record(&job, LedgerState::Outcome, Some(&env), false)
            .await;
        self.ledger.remember(&call.id, digest, &env);
        env
    }
}

/// The group starting at `i`: one call that must run alone, or a run of
/// consecutive parallel-safe calls.
fn next_group(prepared: &[Prepared<'_>], i: usize) -> Range<usize> {
    let mut end = i + 1;
    if is_parallel_safe(&prepared[i]) {
        while end < prepared.len() && is_parallel_safe(&prepared[end]) {
            end += 1;
        }
    }
    i..end
}

/// The calls of a group that are to run, each with its arguments (moved into
/// the run; `prepared` keeps the digest).
fn take_group<'a>(
    prepared: &mut [Prepared<'a>],
    range: Range<usize>,
    step: u64,
    calls: &'a [ToolCall],
) -> Vec<Ready<'a>> {
    let mut group: Vec<Ready<'a>> = Vec::with_capacity(range.len());
    for (k, p) in prepared
        .iter_mut()
        .enumerate()
        .take(range.end)
        .skip(range.start)
    {
        if let Prepared::Run {
            tool,
            args,
            digest,
            mode,
        } = p
        {
            let job = Job {
                step,
                position: k,
                call: &calls[k],
                tool,
                digest: *digest,
                mode: *mode,
            };
            group.push(Ready {
                job,
                args: std::mem::take(args),
            });
        }
    }
    group
}

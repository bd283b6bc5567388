//! The scripted model of WORKLOAD.md, as agentry [`Policy`]s.
//!
//! Each model keeps a per-agent turn counter, checks the feedback it is handed
//! (`ctx.session.last()` must be the previous turn's tool result) and stamps the
//! time of every turn into a shared [`Probe`], which the harness reads once the
//! run is over. Per turn the work is O(1) (W3 checks its K results).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentry::protocol::{SessionEntry, ToolArguments};
use agentry::{
    Decision, Policy, PolicyContext, PolicyOutput, ResultEnvelope, ToolCall, async_trait,
};

use crate::tools::{ADD, SLEEP_ECHO, SLEEP_SUBPROCESS};

/// What a model saw, shared with the harness: turn timestamps and the first
/// failed check.
#[derive(Debug)]
pub struct Probe {
    base: Instant,
    /// Nanoseconds after `base` at which each turn (1-based, stored at i−1) began.
    stamps: Box<[AtomicU64]>,
    turns: AtomicU64,
    results_seen: AtomicU64,
    last_result: AtomicU64,
    failure: Mutex<Option<String>>,
}

impl Probe {
    /// A probe recording timestamps for up to `turns` turns (0: none).
    pub fn new(turns: usize) -> Arc<Probe> {
        Arc::new(Probe {
            base: Instant::now(),
            stamps: (0..turns).map(|_| AtomicU64::new(0)).collect(),
            turns: AtomicU64::new(0),
            results_seen: AtomicU64::new(0),
            last_result: AtomicU64::new(0),
            failure: Mutex::new(None),
        })
    }

    fn stamp(&self, turn: u64) {
        self.turns.store(turn, Ordering::Relaxed);
        if let Some(slot) = self.stamps.get(turn as usize - 1) {
            slot.store(self.base.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
    }

    fn saw_result(&self, value: u64) {
        self.results_seen.fetch_add(1, Ordering::Relaxed);
        self.last_result.store(value, Ordering::Relaxed);
    }

    fn fail(&self, what: String) {
        if let Ok(mut f) = self.failure.lock()
            && f.is_none()
        {
            *f = Some(what);
        }
    }

    /// Model turns taken.
    pub fn turns(&self) -> u64 {
        self.turns.load(Ordering::Relaxed)
    }

    /// Tool results the model checked.
    pub fn results_seen(&self) -> u64 {
        self.results_seen.load(Ordering::Relaxed)
    }

    /// The value of the last `add` result the model checked.
    pub fn last_result(&self) -> u64 {
        self.last_result.load(Ordering::Relaxed)
    }

    /// The first failed check, if any.
    pub fn failure(&self) -> Option<String> {
        self.failure.lock().ok().and_then(|f| f.clone())
    }

    /// When turn `turn` (1-based) began, if it was stamped.
    pub fn turn_at(&self, turn: usize) -> Option<Duration> {
        let nanos = self
            .stamps
            .get(turn.checked_sub(1)?)?
            .load(Ordering::Relaxed);
        (nanos > 0).then(|| Duration::from_nanos(nanos))
    }

    /// Turns per second between the start of turn `from` and of turn `to`.
    pub fn rate(&self, from: usize, to: usize) -> Option<f64> {
        let span = self.turn_at(to)?.checked_sub(self.turn_at(from)?)?;
        (to > from && !span.is_zero()).then(|| (to - from) as f64 / span.as_secs_f64())
    }
}

fn output(decision: Decision) -> PolicyOutput {
    // An empty model name: the runtime fills in `Policy::name` for the trace.
    PolicyOutput::new(decision, String::new())
}

fn call(id: String, name: &str, arguments: String) -> ToolCall {
    ToolCall {
        id,
        name: name.to_string(),
        arguments: ToolArguments::Raw(arguments),
    }
}

/// `(tool_call_id, data as a string)` of a successful tool result entry.
fn tool_result(entry: Option<&SessionEntry>) -> Option<(&str, &str)> {
    match entry? {
        SessionEntry::Tool { result } => string_result(result),
        SessionEntry::User { .. }
        | SessionEntry::Assistant { .. }
        | SessionEntry::Event { .. }
        | SessionEntry::Note { .. } => None,
    }
}

fn string_result(result: &ResultEnvelope) -> Option<(&str, &str)> {
    if !result.ok {
        return None;
    }
    Some((&result.tool_call_id, result.data.as_ref()?.as_str()?))
}

/// The W1/W2 model: turns 1..M−1 call `add(i−1, 1)` with id `call_<i>`, turn M
/// answers `done:<M−1>`. At turn i > 1 it checks that the last session entry is
/// the result `str(i−1)` of `call_<i−1>`.
#[derive(Debug)]
pub struct AddModel {
    m: u64,
    turn: u64,
    probe: Arc<Probe>,
}

impl AddModel {
    /// A model for an M-step run.
    pub fn new(m: u64, probe: Arc<Probe>) -> Self {
        AddModel { m, turn: 0, probe }
    }

    /// `n` models for M-step runs (built outside the timed region), and their
    /// probes (which do not keep per-turn timestamps).
    pub fn many(n: usize, m: u64) -> (Vec<Arc<Probe>>, Vec<AddModel>) {
        let probes: Vec<Arc<Probe>> = (0..n).map(|_| Probe::new(0)).collect();
        let models = probes
            .iter()
            .map(|p| AddModel::new(m, Arc::clone(p)))
            .collect();
        (probes, models)
    }

    fn check_feedback(&self, session: &[SessionEntry]) -> Result<(), String> {
        let want = self.turn - 1;
        let Some((id, data)) = tool_result(session.last()) else {
            return Err(format!(
                "turn {}: the last session entry is not a successful tool result: {:?}",
                self.turn,
                session.last()
            ));
        };
        let id_ok = id.strip_prefix("call_").and_then(|n| n.parse::<u64>().ok()) == Some(want);
        if !id_ok || data.parse::<u64>().ok() != Some(want) {
            return Err(format!(
                "turn {}: expected result \"{want}\" of call_{want}, got {data:?} of {id}",
                self.turn
            ));
        }
        self.probe.saw_result(want);
        Ok(())
    }
}

#[async_trait]
impl Policy for AddModel {
    fn name(&self) -> String {
        "scripted-add".to_string()
    }

    async fn decide(&mut self, ctx: PolicyContext<'_>) -> PolicyOutput {
        self.turn += 1;
        let i = self.turn;
        self.probe.stamp(i);
        if i > 1
            && let Err(e) = self.check_feedback(ctx.session)
        {
            self.probe.fail(e.clone());
            return output(Decision::Final {
                answer: format!("check failed: {e}"),
            });
        }
        if i < self.m {
            let args = format!("{{\"a\": {}, \"b\": 1}}", i - 1);
            output(Decision::ToolCalls {
                calls: vec![call(format!("call_{i}"), ADD, args)],
            })
        } else {
            output(Decision::Final {
                answer: format!("done:{}", self.m - 1),
            })
        }
    }
}

/// The W3/parallel model: turns 1..=S each propose K `sleep_echo` calls with ids
/// `call_<s>_<j>`, turn S+1 answers `done`. At turn s > 1 it checks that the
/// last K entries are the results of turn s−1 in request order; at the last turn
/// it walks the whole session once and checks its shape and order.
#[derive(Debug)]
pub struct EchoModel {
    steps: u64,
    k: u64,
    /// Fixed sleep per call, or `None` for WORKLOAD.md's `50 − i`.
    ms: Option<u64>,
    turn: u64,
    probe: Arc<Probe>,
}

impl EchoModel {
    /// A model for `steps` parallel steps of `k` calls each.
    pub fn new(steps: u64, k: u64, ms: Option<u64>, probe: Arc<Probe>) -> Self {
        EchoModel {
            steps,
            k,
            ms,
            turn: 0,
            probe,
        }
    }

    fn check_results(&self, s: u64, entries: &[SessionEntry]) -> Result<(), String> {
        if entries.len() as u64 != self.k {
            return Err(format!(
                "step {s}: {} results, expected {}",
                entries.len(),
                self.k
            ));
        }
        for (j, entry) in entries.iter().enumerate() {
            let want_id = format!("call_{s}_{j}");
            let want_data = format!("{s}:{j}");
            match tool_result(Some(entry)) {
                Some((id, data)) if id == want_id && data == want_data => {}
                got => {
                    return Err(format!(
                        "step {s}: result {j} is {got:?}, expected ({want_id}, {want_data}): not in request order"
                    ));
                }
            }
        }
        Ok(())
    }

    /// The whole final session: the goal, then per step its decision and its K
    /// results in request order.
    fn check_session(&self, session: &[SessionEntry]) -> Result<(), String> {
        let per_step = 1 + self.k as usize;
        if session.len() != 1 + self.steps as usize * per_step {
            return Err(format!("final session has {} entries", session.len()));
        }
        for s in 1..=self.steps {
            let at = 1 + (s as usize - 1) * per_step;
            match &session[at] {
                SessionEntry::Assistant { step, .. } if *step == s => {}
                other @ (SessionEntry::Assistant { .. }
                | SessionEntry::User { .. }
                | SessionEntry::Tool { .. }
                | SessionEntry::Event { .. }
                | SessionEntry::Note { .. }) => {
                    return Err(format!("entry {at} is {other:?}, expected step {s}"));
                }
            }
            self.check_results(s, &session[at + 1..at + per_step])?;
        }
        Ok(())
    }
}

#[async_trait]
impl Policy for EchoModel {
    fn name(&self) -> String {
        "scripted-sleep-echo".to_string()
    }

    async fn decide(&mut self, ctx: PolicyContext<'_>) -> PolicyOutput {
        self.turn += 1;
        let s = self.turn;
        self.probe.stamp(s);
        let checked = if s > self.steps {
            self.check_session(ctx.session)
        } else if s > 1 {
            let from = ctx.session.len().saturating_sub(self.k as usize);
            self.check_results(s - 1, &ctx.session[from..])
        } else {
            Ok(())
        };
        if let Err(e) = checked {
            self.probe.fail(e.clone());
            return output(Decision::Final {
                answer: format!("check failed: {e}"),
            });
        }
        if s > self.steps {
            return output(Decision::Final {
                answer: "done".to_string(),
            });
        }
        let calls = (0..self.k)
            .map(|j| {
                let args = match self.ms {
                    Some(ms) => format!("{{\"step\": {s}, \"i\": {j}, \"ms\": {ms}}}"),
                    None => format!("{{\"step\": {s}, \"i\": {j}}}"),
                };
                call(format!("call_{s}_{j}"), SLEEP_ECHO, args)
            })
            .collect();
        output(Decision::ToolCalls { calls })
    }
}

/// The W4/cancel model: turn 1 calls the subprocess tool (`call_1`, args `{}`),
/// turn 2 would answer `done` but a deadline should stop the run first.
#[derive(Debug)]
pub struct SubprocessModel {
    tool: String,
    turn: u64,
}

impl SubprocessModel {
    /// A model calling `tool` (default [`SLEEP_SUBPROCESS`]).
    pub fn new(tool: Option<&str>) -> Self {
        SubprocessModel {
            tool: tool.unwrap_or(SLEEP_SUBPROCESS).to_string(),
            turn: 0,
        }
    }
}

#[async_trait]
impl Policy for SubprocessModel {
    fn name(&self) -> String {
        "scripted-subprocess".to_string()
    }

    async fn decide(&mut self, _ctx: PolicyContext<'_>) -> PolicyOutput {
        self.turn += 1;
        if self.turn == 1 {
            output(Decision::ToolCalls {
                calls: vec![call("call_1".to_string(), &self.tool, "{}".to_string())],
            })
        } else {
            output(Decision::Final {
                answer: "done".to_string(),
            })
        }
    }
}

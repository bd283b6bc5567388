//! The backlog an [`EventSink`](super::EventSink) keeps for its first
//! subscriber (`events_from_start`): the events emitted before anyone
//! subscribed, in a compact form, given back as the records a live subscriber
//! would have received.

use std::sync::Arc;

use agentry_protocol::budget::{BudgetLimits, BudgetSnapshot, Usage};
use agentry_protocol::decision::Decision;
use agentry_protocol::envelope::ResultEnvelope;
use agentry_protocol::event::{EventRecord, RunEvent};

/// One event of the backlog, without its run id (the sink's) and sequence
/// number (the backlog holds the events numbered right after the sink's
/// start, in order). A run nobody watches yet keeps ~6 events a step until
/// somebody subscribes (or, kept for a subscriber that may come, for as long
/// as its handle is held), so the common ones are
/// stored by their parts in 16 bytes instead of a 120-byte [`EventRecord`]; a
/// step's budget snapshot and a call's start as a few bytes in the backlog's
/// [`Packed`] bytes; anything else is boxed.
#[derive(Debug)]
enum Kept {
    StepStarted(u64),
    Decision(u32, Arc<Decision>),
    Finished(u32, Arc<ResultEnvelope>),
    StateUpdated(u64),
    /// A snapshot equal to `BudgetSnapshot::new(limits, spent, elapsed_ms)` with
    /// the backlog's limits: where its spend starts in [`Backlog::packed`].
    Budget(u32),
    /// A `tool_call_started`: where it starts in [`Backlog::packed`].
    Started(u32),
    /// A snapshot with other limits (not emitted today, kept exactly all the same).
    BudgetBoxed(Box<BudgetSnapshot>),
    Other(Box<RunEvent>),
}

#[derive(Debug, Default)]
pub(super) struct Backlog {
    kept: Vec<Kept>,
    /// The kept budget spends and call starts.
    packed: Packed,
    /// The limits of the first budget snapshot kept.
    limits: Option<BudgetLimits>,
}

impl Backlog {
    pub(super) fn len(&self) -> usize {
        self.kept.len()
    }

    pub(super) fn push(&mut self, event: RunEvent) {
        let stopped = matches!(event, RunEvent::RunStopped { .. });
        let kept = self.kept_of(event);
        self.kept.push(kept);
        if stopped {
            // Nothing follows a stop: what is kept for a subscriber that may
            // still come takes only the room it needs.
            self.kept.shrink_to_fit();
            self.packed.0.shrink_to_fit();
        }
    }

    fn kept_of(&mut self, event: RunEvent) -> Kept {
        // `RunEvent` is `#[non_exhaustive]`: every other event, known or new,
        // is kept whole.
        #[allow(clippy::wildcard_enum_match_arm)]
        match event {
            RunEvent::StepStarted { step } => Kept::StepStarted(step),
            RunEvent::DecisionMade { step, decision } => match u32::try_from(step) {
                Ok(step) => Kept::Decision(step, decision),
                Err(_) => Kept::Other(Box::new(RunEvent::DecisionMade { step, decision })),
            },
            RunEvent::ToolCallFinished { step, result } => match u32::try_from(step) {
                Ok(step) => Kept::Finished(step, result),
                Err(_) => Kept::Other(Box::new(RunEvent::ToolCallFinished { step, result })),
            },
            RunEvent::StateUpdated { version } => Kept::StateUpdated(version),
            RunEvent::BudgetSpent { budget } => {
                let limits = *self.limits.get_or_insert(budget.limits);
                let rebuilt = BudgetSnapshot::new(limits, budget.spent, budget.elapsed_ms);
                match self.packed.at() {
                    Some(at) if rebuilt == *budget => {
                        self.packed.spend(&budget.spent, budget.elapsed_ms);
                        Kept::Budget(at)
                    }
                    _ => Kept::BudgetBoxed(budget),
                }
            }
            RunEvent::ToolCallStarted {
                step,
                tool_call_id,
                tool,
                attempt,
            } => match self.packed.at() {
                Some(at) => {
                    self.packed.started(step, &tool_call_id, &tool, attempt);
                    Kept::Started(at)
                }
                None => Kept::Other(Box::new(RunEvent::ToolCallStarted {
                    step,
                    tool_call_id,
                    tool,
                    attempt,
                })),
            },
            other @ (RunEvent::TokenDelta { .. }
            | RunEvent::ToolProgress { .. }
            | RunEvent::InputApplied { .. }
            | RunEvent::AwaitingApproval { .. }
            | RunEvent::AwaitingDecision { .. }
            | RunEvent::StepInterrupted { .. }
            | RunEvent::TickSkipped { .. }
            | RunEvent::RunStopped { .. }
            | _) => Kept::Other(Box::new(other)),
        }
    }

    /// The kept events as the records a live subscriber would have received,
    /// numbered from `after + 1`.
    pub(super) fn into_records(
        self,
        run_id: &Arc<str>,
        after: u64,
    ) -> impl Iterator<Item = EventRecord> + '_ {
        let Backlog {
            kept,
            packed,
            limits,
        } = self;
        let first = after.saturating_add(1);
        kept.into_iter().zip(first..).map(move |(kept, seq)| {
            let event = match kept {
                Kept::StepStarted(step) => RunEvent::StepStarted { step },
                Kept::Decision(step, decision) => RunEvent::DecisionMade {
                    step: step.into(),
                    decision,
                },
                Kept::Finished(step, result) => RunEvent::ToolCallFinished {
                    step: step.into(),
                    result,
                },
                Kept::StateUpdated(version) => RunEvent::StateUpdated { version },
                Kept::Budget(at) => {
                    let (spent, elapsed_ms) = packed.spend_at(at);
                    RunEvent::BudgetSpent {
                        budget: Box::new(BudgetSnapshot::new(
                            limits.unwrap_or_default(),
                            spent,
                            elapsed_ms,
                        )),
                    }
                }
                Kept::Started(at) => packed.started_at(at),
                Kept::BudgetBoxed(budget) => RunEvent::BudgetSpent { budget },
                Kept::Other(event) => *event,
            };
            EventRecord {
                run_id: Arc::clone(run_id),
                seq,
                event,
            }
        })
    }
}

/// Budget spends and call starts packed as bytes: each number a LEB128
/// varint (a step's spend is ~12 bytes instead of 80), each text its length
/// and its bytes.
#[derive(Debug, Default)]
struct Packed(Vec<u8>);

impl Packed {
    /// Where the next value starts, while that fits a `u32`.
    fn at(&self) -> Option<u32> {
        u32::try_from(self.0.len()).ok()
    }

    fn number(&mut self, mut n: u64) {
        loop {
            let low = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                self.0.push(low);
                return;
            }
            self.0.push(low | 0x80);
        }
    }

    fn text(&mut self, text: &str) {
        self.number(text.len() as u64);
        self.0.extend_from_slice(text.as_bytes());
    }

    fn spend(&mut self, spent: &Usage, elapsed_ms: u64) {
        // Destructured whole: a field added to `Usage` must be packed too.
        let Usage {
            steps,
            tool_calls,
            tokens_in,
            tokens_out,
            cost_micros,
            retries,
            ticks,
            cache_read_tokens,
            cache_write_tokens,
        } = *spent;
        for n in [
            steps,
            tool_calls,
            tokens_in,
            tokens_out,
            cost_micros,
            retries,
            ticks,
            cache_read_tokens,
            cache_write_tokens,
            elapsed_ms,
        ] {
            self.number(n);
        }
    }

    fn started(&mut self, step: u64, tool_call_id: &str, tool: &str, attempt: u32) {
        self.number(step);
        self.number(attempt.into());
        self.text(tool_call_id);
        self.text(tool);
    }

    fn spend_at(&self, at: u32) -> (Usage, u64) {
        let mut r = Reader::new(&self.0, at);
        let spent = Usage {
            steps: r.number(),
            tool_calls: r.number(),
            tokens_in: r.number(),
            tokens_out: r.number(),
            cost_micros: r.number(),
            retries: r.number(),
            ticks: r.number(),
            cache_read_tokens: r.number(),
            cache_write_tokens: r.number(),
        };
        (spent, r.number())
    }

    fn started_at(&self, at: u32) -> RunEvent {
        let mut r = Reader::new(&self.0, at);
        let step = r.number();
        let attempt = u32::try_from(r.number()).unwrap_or(u32::MAX);
        RunEvent::ToolCallStarted {
            step,
            tool_call_id: r.text(),
            tool: r.text(),
            attempt,
        }
    }
}

/// Reads back what [`Packed`] wrote, from one position on.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8], at: u32) -> Self {
        Reader {
            bytes,
            pos: at as usize,
        }
    }

    fn number(&mut self) -> u64 {
        let mut n = 0u64;
        let mut shift = 0;
        while let Some(&byte) = self.bytes.get(self.pos) {
            self.pos += 1;
            if shift < 64 {
                n |= u64::from(byte & 0x7f) << shift;
            }
            shift += 7;
            if byte & 0x80 == 0 {
                break;
            }
        }
        n
    }

    fn text(&mut self) -> String {
        let len = usize::try_from(self.number()).unwrap_or(usize::MAX);
        let end = self.pos.saturating_add(len).min(self.bytes.len());
        let text = String::from_utf8_lossy(&self.bytes[self.pos..end]).into_owned();
        self.pos = end;
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_event_takes_sixteen_bytes() {
        assert_eq!(std::mem::size_of::<Kept>(), 16);
    }

    #[test]
    fn packed_numbers_and_texts_read_back_exactly() {
        let mut packed = Packed::default();
        let numbers = [
            0,
            1,
            127,
            128,
            300,
            u64::from(u32::MAX),
            u64::MAX - 1,
            u64::MAX,
        ];
        let spends: Vec<(Usage, u64)> = numbers
            .iter()
            .map(|&n| {
                let usage = Usage {
                    steps: n,
                    tool_calls: n / 2,
                    tokens_in: n / 3,
                    tokens_out: n / 5,
                    cost_micros: n / 7,
                    retries: n / 11,
                    ticks: n / 13,
                    cache_read_tokens: n / 17,
                    cache_write_tokens: n / 19,
                };
                (usage, n)
            })
            .collect();
        let mut at = Vec::new();
        for (i, (usage, elapsed)) in spends.iter().enumerate() {
            at.push(packed.at().unwrap());
            packed.spend(usage, *elapsed);
            at.push(packed.at().unwrap());
            let id = "ü".repeat(i * 40);
            packed.started(numbers[i], &id, "tool", i as u32);
        }
        for (i, (usage, elapsed)) in spends.iter().enumerate() {
            assert_eq!(packed.spend_at(at[2 * i]), (*usage, *elapsed));
            assert_eq!(
                packed.started_at(at[2 * i + 1]),
                RunEvent::ToolCallStarted {
                    step: numbers[i],
                    tool_call_id: "ü".repeat(i * 40),
                    tool: "tool".into(),
                    attempt: i as u32,
                }
            );
        }
    }
}

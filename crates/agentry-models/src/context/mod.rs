//! Context projection: which session entries a request carries so that the
//! whole request fits the model's window.
//!
//! The adapter measures what every request carries anyway (system prompt, tool
//! schemas, scaffolding), takes it and the reserved output off the window, and
//! gives the rest to [`project_session`] as a byte budget. The projection keeps
//! the goal (the first user message) and the newest entries that fit, walking
//! back from the newest and stopping at the first that does not: its cost grows
//! with what is kept, never with what is elided. It cuts only where no call is
//! separated from its results (an assistant turn with tool calls goes with every
//! result answering it), and one note says how many entries were left out.
//! Results are sized as they will be shown, cut at the per-result cap (see the
//! crate's `results` module); when even the newest turn does not fit, the cap is
//! lowered for this request, down to a floor.
//!
//! Sizes are estimated in bytes of JSON as sent (a result's text is escaped
//! once more inside its message) plus a fixed allowance per message; tokens are
//! bytes / [`CHARS_PER_TOKEN`] times a correction the adapter learns from the
//! prompt tokens the server reports ([`TokenEstimate`]).

use std::borrow::Cow;

use agentry_protocol::decision::Decision;
use agentry_protocol::state::SessionEntry;

use crate::ModelConfig;
use crate::results::{MIN_RESULT_CAP, result_text};

/// Bytes per token assumed before any server has reported its count.
pub const CHARS_PER_TOKEN: usize = 4;

/// Allowance per message for what the wire form adds (role, ids, block types).
const MESSAGE_OVERHEAD: usize = 96;

/// Allowance per tool call on top of its JSON (`type`, `function`, a wire id).
const CALL_OVERHEAD: usize = 64;

/// Room kept for the note that says entries were elided.
const NOTE_BYTES: usize = 256;

/// What a request may carry of the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionBudget {
    /// Bytes of the session's messages, as sent.
    pub bytes: usize,
    /// Results longer than this, in bytes of JSON, are shown cut.
    pub result_cap: usize,
}

/// The entries a request carries.
#[derive(Debug, Clone, PartialEq)]
pub struct Projection<'a> {
    /// The goal, a note if anything was elided, and the newest entries.
    pub entries: Cow<'a, [SessionEntry]>,
    /// How many entries were left out.
    pub elided: usize,
    /// The per-result cap to show results with: the budget's, or lower when the
    /// newest turn did not fit otherwise.
    pub result_cap: usize,
}

/// The entries to send: the whole session when it fits in `budget`, else the
/// goal, a note naming how many entries were elided, and the newest entries
/// that fit, never a call without its results. Only the entries kept (and the
/// first one that did not fit) are looked at.
pub fn project_session<'a>(session: &'a [SessionEntry], budget: SessionBudget) -> Projection<'a> {
    let head = usize::from(matches!(session.first(), Some(SessionEntry::User { .. })));
    let cut = cut(&session[..head], &session[head..], budget);
    if cut.keep_from == 0 {
        return Projection {
            entries: Cow::Borrowed(session),
            elided: 0,
            result_cap: cut.cap,
        };
    }
    assemble(&session[..head], &session[head..], cut)
}

/// `head` (always sent), then a note if anything was elided, then the newest
/// entries of `rest` that fit.
pub(crate) fn project_after<'a>(
    head: &[SessionEntry],
    rest: &[SessionEntry],
    budget: SessionBudget,
) -> Projection<'a> {
    assemble(head, rest, cut(head, rest, budget))
}

/// Where the kept part of `rest` starts when `head` is always sent: 0 when
/// all of it fits.
pub(crate) fn fits_from(
    head: &[SessionEntry],
    rest: &[SessionEntry],
    budget: SessionBudget,
) -> usize {
    cut(head, rest, budget).keep_from
}

fn assemble<'a>(head: &[SessionEntry], rest: &[SessionEntry], cut: Cut) -> Projection<'a> {
    let kept = &rest[cut.keep_from..];
    let mut entries: Vec<SessionEntry> = Vec::with_capacity(head.len() + 1 + kept.len());
    entries.extend_from_slice(head);
    if cut.keep_from > 0 {
        entries.push(SessionEntry::Note {
            text: format!(
                "[agentry] {} earlier session entries were elided to fit the context window",
                cut.keep_from
            ),
        });
    }
    entries.extend_from_slice(kept);
    Projection {
        entries: Cow::Owned(entries),
        elided: cut.keep_from,
        result_cap: cut.cap,
    }
}

/// Where the kept part of the rest starts, and the cap to show results with.
#[derive(Debug, Clone, Copy)]
struct Cut {
    keep_from: usize,
    cap: usize,
}

/// The newest entries of `rest` that fit after `head`, in whole turns (a call
/// is never sent without its results, nor a result without its call): when not
/// even the newest turn fits, results are shown shorter, down to a floor; a
/// turn that still does not fit (its calls' arguments alone are too large) is
/// elided with everything before it, so the request still fits.
fn cut(head: &[SessionEntry], rest: &[SessionEntry], budget: SessionBudget) -> Cut {
    let mut cap = budget.result_cap.max(MIN_RESULT_CAP);
    loop {
        let fixed: usize = head.iter().map(|e| entry_bytes(e, cap)).sum();
        let room = budget.bytes.saturating_sub(fixed + NOTE_BYTES);
        let walk = walk_back(rest, room, cap);
        let keep_from = match walk.clean {
            // Everything fits (the note's room was not needed).
            _ if walk.oldest == 0 => 0,
            Some(k) => k,
            None if cap > MIN_RESULT_CAP => {
                cap = (cap / 4).max(MIN_RESULT_CAP);
                continue;
            }
            None => rest.len(),
        };
        return Cut { keep_from, cap };
    }
}

/// Where a suffix of entries that fits can start.
struct Walk {
    /// The oldest index where a cut separates no call from its results.
    clean: Option<usize>,
    /// The oldest index that fits at all (`len` when none does; 0 when all do).
    oldest: usize,
}

/// Walks back from the newest entry while the entries fit in `room`.
fn walk_back(rest: &[SessionEntry], room: usize, cap: usize) -> Walk {
    let mut used = 0usize;
    // Results kept whose call is not kept yet.
    let mut waiting: Vec<&str> = Vec::new();
    let mut walk = Walk {
        clean: None,
        oldest: rest.len(),
    };
    for (i, entry) in rest.iter().enumerate().rev() {
        used = used.saturating_add(entry_bytes(entry, cap));
        if used > room {
            break;
        }
        walk.oldest = i;
        match entry {
            SessionEntry::Tool { result } => waiting.push(&result.tool_call_id),
            SessionEntry::Assistant { decision, .. } => {
                if let Decision::ToolCalls { calls } = &**decision {
                    waiting.retain(|id| !calls.iter().any(|c| c.id == *id));
                }
            }
            SessionEntry::User { .. } | SessionEntry::Event { .. } | SessionEntry::Note { .. } => {}
        }
        if waiting.is_empty() {
            walk.clean = Some(i);
        }
    }
    walk
}

/// The estimated bytes an entry adds to a request.
pub(crate) fn entry_bytes(entry: &SessionEntry, cap: usize) -> usize {
    match entry {
        // A result's text travels as a JSON string: escaped once more.
        SessionEntry::Tool { result } => escaped_len(&result_text(result, cap)) + MESSAGE_OVERHEAD,
        SessionEntry::Assistant { decision, .. } => {
            let calls = match &**decision {
                Decision::ToolCalls { calls } => calls.len(),
                Decision::Final { .. } | Decision::Failed { .. } => 0,
            };
            json_len(entry) + calls * CALL_OVERHEAD + MESSAGE_OVERHEAD
        }
        SessionEntry::User { .. } | SessionEntry::Event { .. } | SessionEntry::Note { .. } => {
            json_len(entry) + MESSAGE_OVERHEAD
        }
    }
}

fn json_len(entry: &SessionEntry) -> usize {
    serde_json::to_string(entry).map_or(0, |s| escaped_len(&s))
}

/// Length of `text` written as a JSON string (an upper bound for text that is
/// already JSON: quotes and backslashes double, control characters grow).
fn escaped_len(text: &str) -> usize {
    text.len()
        + text
            .bytes()
            .map(|b| match b {
                b'"' | b'\\' => 1,
                0..=0x1f => 5,
                _ => 0,
            })
            .sum::<usize>()
        + 2
}

impl SessionBudget {
    /// The budget of a request whose part independent of the session (system
    /// prompt, tools, scaffolding) is `fixed`: the session's room in bytes and
    /// the configured per-result cap.
    pub(crate) fn of_request(
        config: &ModelConfig,
        estimate: &TokenEstimate,
        fixed: &serde_json::Value,
    ) -> SessionBudget {
        SessionBudget {
            bytes: session_room(config, estimate, json_bytes(fixed)),
            result_cap: config.result_cap,
        }
    }
}

/// The bytes a request's session may take: the window less the reserved output,
/// in bytes by `estimate`, less a twentieth for what the estimate misses, less
/// the `fixed` bytes every request carries (system prompt, tools, scaffolding).
fn session_room(config: &ModelConfig, estimate: &TokenEstimate, fixed: usize) -> usize {
    let prompt = config
        .window_tokens()
        .saturating_sub(u64::from(config.max_output_tokens));
    let bytes = estimate.bytes_for(prompt);
    (bytes - bytes / 20).saturating_sub(fixed)
}

/// Bytes of a request as sent.
fn json_bytes(request: &serde_json::Value) -> usize {
    serde_json::to_vec(request).map_or(0, |b| b.len())
}

/// Tokens from bytes: bytes / [`CHARS_PER_TOKEN`], scaled by what the server
/// reported for the last request. The scale only goes up from 1 (a tokenizer
/// denser than four bytes a token), at most 4: a request is never estimated
/// smaller than bytes / 4.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenEstimate {
    scale: f64,
}

impl Default for TokenEstimate {
    fn default() -> Self {
        TokenEstimate { scale: 1.0 }
    }
}

impl TokenEstimate {
    /// The largest scale learned: a server claiming more is not believed further.
    const MAX_SCALE: f64 = 4.0;

    /// The bytes a request of `tokens` may have.
    pub fn bytes_for(&self, tokens: u64) -> usize {
        let bytes = tokens as f64 * CHARS_PER_TOKEN as f64 / self.scale;
        bytes as usize
    }

    /// The estimated tokens of a request of `bytes`.
    pub fn tokens_for(&self, bytes: usize) -> u64 {
        (bytes as f64 * self.scale / CHARS_PER_TOKEN as f64).ceil() as u64
    }

    /// Learns from a request of `bytes` the server counted as `reported` prompt
    /// tokens (0: the server reported nothing; nothing is learned).
    pub fn learn(&mut self, bytes: usize, reported: u64) {
        let estimated = bytes as f64 / CHARS_PER_TOKEN as f64;
        if reported == 0 || estimated < 1.0 {
            return;
        }
        self.scale = (reported as f64 / estimated).clamp(1.0, Self::MAX_SCALE);
    }
}

#[cfg(test)]
mod tests;

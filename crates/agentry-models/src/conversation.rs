//! The session as a provider-neutral conversation both adapters render: user
//! text, assistant text, and call groups (an assistant turn's calls, each with
//! its result). Built so that every provider's rules hold whatever the session
//! holds:
//! - a call group carries a result for each of its calls, in call order; a call
//!   whose result was never recorded gets one saying so;
//! - text that arrived while calls were open (a user message injected mid-step)
//!   comes after the group's last result;
//! - a tool result that answers no open call (a session recorded before failed
//!   turns stopped being stored as results, or a repeated result) is shown as a
//!   host note, never as a tool result;
//! - failed turns and host notes ([`SessionEntry::host_note`]) are user text;
//! - blank text is dropped (providers reject empty content);
//! - call ids on the wire are non-empty and unique in the request (a model that
//!   sent none, or repeated one, gets a stand-in on the call and its result).

use std::collections::HashSet;

use agentry_protocol::decision::Decision;
use agentry_protocol::envelope::ResultEnvelope;
use agentry_protocol::state::SessionEntry;
use agentry_protocol::tool::{ToolArguments, ToolCall};
use serde_json::json;

/// One piece of the conversation.
#[derive(Debug)]
pub(crate) enum Item<'a> {
    /// Text the model reads as the user's turn (user, event, host note).
    User(String),
    /// The model's own text.
    Assistant(&'a str),
    /// An assistant turn's calls, each with its result.
    Calls(CallGroup<'a>),
}

/// Calls and, in call order, their results.
#[derive(Debug)]
pub(crate) struct CallGroup<'a> {
    pub(crate) calls: &'a [ToolCall],
    /// The id each call goes by on the wire, in call order.
    pub(crate) ids: Vec<String>,
    /// `None`: no result was recorded for the call at this index.
    pub(crate) results: Vec<Option<&'a ResultEnvelope>>,
    /// Results longer than this, in bytes of JSON, are shown cut (see `results`).
    cap: usize,
}

impl CallGroup<'_> {
    /// The result text of call `i`: the envelope as JSON (cut past the cap), or
    /// a note that none was recorded.
    pub(crate) fn result_text(&self, i: usize) -> (String, bool) {
        match self.results.get(i).copied().flatten() {
            Some(r) => (crate::results::result_text(r, self.cap), !r.ok),
            None => (
                json!({"ok": false, "error": {"code": "EUNAVAIL",
                    "message": "no result was recorded for this call; its outcome is unknown"}})
                .to_string(),
                true,
            ),
        }
    }

    fn open(&self) -> bool {
        self.results.iter().any(Option::is_none)
    }
}

/// A call's arguments as text: raw model output is passed back verbatim.
pub(crate) fn arguments_text(arguments: &ToolArguments) -> String {
    match arguments {
        ToolArguments::Raw(s) => s.clone(),
        ToolArguments::Parsed(v) => v.to_string(),
    }
}

/// Walks the session into [`Item`]s; results longer than `cap` bytes of JSON
/// are shown cut.
pub(crate) fn conversation(session: &[SessionEntry], cap: usize) -> Vec<Item<'_>> {
    let mut b = Builder {
        cap,
        ..Builder::default()
    };
    for entry in session {
        if let Some(note) = entry.host_note() {
            b.user(note);
            continue;
        }
        match entry {
            SessionEntry::User { text } => b.user(text.clone()),
            SessionEntry::Event { name, payload } => b.user(format!("[event {name}] {payload}")),
            SessionEntry::Note { text } => b.user(text.clone()),
            SessionEntry::Assistant { decision, .. } => match &**decision {
                Decision::ToolCalls { calls } => b.calls(calls),
                Decision::Final { answer } => {
                    b.close();
                    if !answer.trim().is_empty() {
                        b.items.push(Item::Assistant(answer));
                    }
                }
                // Shown as host notes above.
                Decision::Failed { .. } => {}
            },
            SessionEntry::Tool { result } => b.result(result),
        }
    }
    b.close();
    b.items
}

#[derive(Default)]
struct Builder<'a> {
    items: Vec<Item<'a>>,
    /// The call group still waiting for results.
    open: Option<CallGroup<'a>>,
    /// User text that arrived while `open` waited.
    held: Vec<String>,
    /// Wire ids given out so far.
    used: HashSet<String>,
    /// The per-result cap, in bytes.
    cap: usize,
}

impl<'a> Builder<'a> {
    fn user(&mut self, text: String) {
        if text.trim().is_empty() {
            return;
        }
        if self.open.is_some() {
            self.held.push(text);
        } else {
            self.items.push(Item::User(text));
        }
    }

    fn calls(&mut self, calls: &'a [ToolCall]) {
        self.close();
        let ids = calls.iter().map(|c| self.wire_id(&c.id)).collect();
        self.open = Some(CallGroup {
            calls,
            ids,
            results: vec![None; calls.len()],
            cap: self.cap,
        });
    }

    fn result(&mut self, result: &'a ResultEnvelope) {
        let slot = self.open.as_mut().and_then(|g| {
            let i = g
                .calls
                .iter()
                .zip(&g.results)
                .position(|(c, r)| r.is_none() && c.id == result.tool_call_id)?;
            Some((g, i))
        });
        match slot {
            Some((group, i)) => {
                group.results[i] = Some(result);
                if !group.open() {
                    self.close();
                }
            }
            None => self.user(format!(
                "[agentry] a tool result that answers no call of your previous turn: {}",
                crate::results::result_text(result, self.cap)
            )),
        }
    }

    /// `id` if it is non-empty and not yet used in the request, else a fresh one.
    fn wire_id(&mut self, id: &str) -> String {
        let mut wire = id.to_string();
        let mut n = self.used.len();
        while wire.is_empty() || self.used.contains(&wire) {
            wire = format!("agentry_call_{n}");
            n += 1;
        }
        self.used.insert(wire.clone());
        wire
    }

    /// Ends the open group (results never recorded are said to be unknown) and
    /// places the text held behind it.
    fn close(&mut self) {
        if let Some(group) = self.open.take() {
            self.items.push(Item::Calls(group));
        }
        self.items
            .extend(std::mem::take(&mut self.held).into_iter().map(Item::User));
    }
}

//! The result envelope: what goes back to the model and into the trace for every call.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::UnixMillis;

/// Error classes a tool call can end with. Serialized as the upper-case code (`"EINVAL"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ErrorCode {
    /// The model named a tool that is not registered.
    #[serde(rename = "ENOTOOL")]
    Enotool,
    /// Arguments are not valid JSON, violate the schema, or conflict with a recorded call.
    #[serde(rename = "EINVAL")]
    Einval,
    /// The run's grants do not allow this tool, or the tool refused the action.
    #[serde(rename = "EPERM")]
    Eperm,
    /// A precondition of the tool does not hold.
    #[serde(rename = "EPRECOND")]
    Eprecond,
    /// The call ran past its timeout or the run's deadline.
    #[serde(rename = "ETIMEDOUT")]
    Etimedout,
    /// The call was cancelled (deadline, user abort, shutdown).
    #[serde(rename = "ECANCELED")]
    Ecanceled,
    /// A transient failure; retrying may help.
    #[serde(rename = "EUNAVAIL")]
    Eunavail,
    /// The call was refused because a budget dimension is exhausted.
    #[serde(rename = "EBUDGET")]
    Ebudget,
    /// The tool failed unexpectedly (it panicked, or broke its own contract).
    #[serde(rename = "EINTERNAL")]
    Einternal,
    /// The process a tool ran failed in a way the kernel sandbox caused: it was
    /// refused a write, a read or a connection the task's `[sandbox]` does not
    /// allow. The message names the path or address where it is known, the
    /// suggested action the `[sandbox]` key that would allow it.
    #[serde(rename = "ESANDBOX")]
    Esandbox,
}

impl ErrorCode {
    /// The wire name, e.g. `"EINVAL"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Enotool => "ENOTOOL",
            ErrorCode::Einval => "EINVAL",
            ErrorCode::Eperm => "EPERM",
            ErrorCode::Eprecond => "EPRECOND",
            ErrorCode::Etimedout => "ETIMEDOUT",
            ErrorCode::Ecanceled => "ECANCELED",
            ErrorCode::Eunavail => "EUNAVAIL",
            ErrorCode::Ebudget => "EBUDGET",
            ErrorCode::Einternal => "EINTERNAL",
            ErrorCode::Esandbox => "ESANDBOX",
        }
    }

    /// Whether an error of this class is worth retrying by default.
    pub fn default_retryable(self) -> bool {
        matches!(self, ErrorCode::Eunavail | ErrorCode::Etimedout)
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A structured tool error, as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolError {
    /// The error class.
    pub code: ErrorCode,
    /// A human- and model-readable explanation naming what is wrong.
    pub message: String,
    /// Whether retrying the same call may succeed.
    pub retryable: bool,
    /// What the caller should do next (e.g. "fix the arguments and call again").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suggested_action: Option<String>,
}

impl ToolError {
    /// An error with the code's default retryability and no suggested action.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ToolError {
            code,
            message: message.into(),
            retryable: code.default_retryable(),
            suggested_action: None,
        }
    }

    /// Sets the suggested action.
    pub fn with_action(mut self, action: impl Into<String>) -> Self {
        self.suggested_action = Some(action.into());
        self
    }

    /// Overrides retryability.
    pub fn retryable(mut self, retryable: bool) -> Self {
        self.retryable = retryable;
        self
    }
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ToolError {}

/// A versioned reference to something in the world (a file and its content hash),
/// so large results are stored by reference and changes are detectable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceRef {
    /// Path relative to the run's working directory, or a URI.
    pub path: String,
    /// Hex sha256 of the content.
    pub sha256: String,
    /// Content length in bytes.
    pub bytes: u64,
}

/// The default per-result cap, in bytes: a result whose `data` is larger as JSON
/// is saved whole; the envelope keeps only its head ([`CutData`]) and the ref,
/// which is what the model is shown, to read the rest back.
pub const DEFAULT_RESULT_CAP: usize = 16 * 1024;

/// How far back from the cap the end of a kept head looks for a token boundary.
const HEAD_BOUNDARY_WINDOW: usize = 256;

/// What a result whose `data` is longer than the run's result cap (as JSON)
/// keeps of it in memory, in the store and in the trace: the whole is in the
/// file the envelope's `saved` names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CutData {
    /// The first bytes of `data`'s JSON text: at most the cap (see [`cut_head`]).
    pub head: String,
    /// Length of the whole JSON text, in bytes.
    pub bytes: u64,
}

impl CutData {
    /// What a result keeps of `text` (its data's JSON text) cut at `cap` bytes.
    pub fn of(text: &str, cap: usize) -> CutData {
        CutData {
            head: cut_head(text, cap).to_string(),
            bytes: text.len() as u64,
        }
    }
}

/// The head of `text` a result cut at `cap` keeps: at most `cap` bytes, ending
/// before the last whitespace, quote, backslash or JSON punctuation of its last
/// 256 bytes (or half) when there is one, else on a character boundary. A token (and so a
/// secret a sink's redactor matches as a whole) is not split by the cut: it is
/// in the head whole, or not at all.
pub fn cut_head(text: &str, cap: usize) -> &str {
    if text.len() <= cap {
        return text;
    }
    let mut end = cap;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    // Never more than half the head is given up for a boundary.
    let from = end - HEAD_BOUNDARY_WINDOW.min(end / 2);
    let token_start = text.as_bytes()[from..=end]
        .iter()
        .rposition(|b| b.is_ascii_whitespace() || b"\"'\\,;()[]{}<>".contains(b))
        .map(|i| from + i);
    &text[..token_start.unwrap_or(end)]
}

/// What one call cost.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CallCost {
    /// Wall-clock latency of the call, in milliseconds.
    pub latency_ms: u64,
    /// Money spent, in micro-units of the run's currency.
    #[serde(default)]
    pub money_micros: u64,
    /// Tokens spent by the tool itself (e.g. a tool that calls a model).
    #[serde(default)]
    pub tokens: u64,
}

/// The result of one tool call, keyed by the call id the model gave.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultEnvelope {
    /// The model's call id this result answers.
    pub tool_call_id: String,
    /// The tool name as the model wrote it.
    pub tool: String,
    /// Whether the call succeeded.
    pub ok: bool,
    /// The tool's output, when `ok`; `None` when it was cut (`cut`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// When `ok` and `data` was longer than the run's result cap as JSON: the
    /// head of `data`, kept instead of it (the whole is in the file `saved`
    /// names, if it could be saved).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut: Option<CutData>,
    /// The error, when not `ok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
    /// References to world objects read or written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refs: Vec<ResourceRef>,
    /// Where the host saved `data` (as JSON text) because it is larger than the
    /// run's result cap: the envelope keeps its head (`cut`), the model reads
    /// the rest back in parts (`result.read`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saved: Option<ResourceRef>,
    /// What the call cost.
    pub cost: CallCost,
    /// When the result was observed.
    pub observed_at: UnixMillis,
    /// True when this is a recorded result returned for a repeated call id: nothing ran.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
    /// Attempt number (1 for the first execution).
    #[serde(default = "one")]
    pub attempt: u32,
}

fn one() -> u32 {
    1
}

impl ResultEnvelope {
    /// A successful result.
    pub fn success(call_id: &str, tool: &str, data: Value, refs: Vec<ResourceRef>) -> Self {
        ResultEnvelope {
            tool_call_id: call_id.to_string(),
            tool: tool.to_string(),
            ok: true,
            data: Some(data),
            cut: None,
            error: None,
            refs,
            saved: None,
            cost: CallCost::default(),
            observed_at: crate::now_millis(),
            replayed: false,
            attempt: 1,
        }
    }

    /// A failed result.
    pub fn failure(call_id: &str, tool: &str, error: ToolError) -> Self {
        ResultEnvelope {
            tool_call_id: call_id.to_string(),
            tool: tool.to_string(),
            ok: false,
            data: None,
            cut: None,
            error: Some(error),
            refs: Vec::new(),
            saved: None,
            cost: CallCost::default(),
            observed_at: crate::now_millis(),
            replayed: false,
            attempt: 1,
        }
    }

    /// The error code, if the call failed.
    pub fn error_code(&self) -> Option<ErrorCode> {
        self.error.as_ref().map(|e| e.code)
    }

    /// Adds what was observed (see [`ResultEnvelope::observation`]) to a fingerprint.
    pub fn fingerprint_observation(&self, f: &mut crate::fingerprint::Fingerprinter) {
        f.str(&self.tool).u64(u64::from(self.ok));
        if let Some(data) = &self.data {
            f.value(data);
        }
        if let Some(cut) = &self.cut {
            f.str(&cut.head).u64(cut.bytes);
        }
        if let Some(saved) = &self.saved {
            f.str(&saved.sha256);
        }
        if let Some(e) = &self.error {
            f.str(e.code.as_str()).str(&e.message);
        }
        for r in &self.refs {
            f.str(&r.path).str(&r.sha256);
        }
    }

    /// The part of the envelope that describes *what was observed*, without timing
    /// fields or the call id, so the same observation under a fresh call id hashes
    /// the same (a model that loops with new ids is still looping).
    pub fn observation(&self) -> Value {
        serde_json::json!({
            "tool": self.tool,
            "ok": self.ok,
            "data": self.data,
            "cut": self.cut,
            "error": self.error,
            "refs": self.refs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_envelope_has_the_documented_shape() {
        let env = ResultEnvelope::failure(
            "c1",
            "fs.read",
            ToolError::new(ErrorCode::Einval, "bad").with_action("fix it"),
        );
        let v = serde_json::to_value(&env).unwrap();
        assert_eq!(v["ok"], false);
        assert_eq!(v["error"]["code"], "EINVAL");
        assert_eq!(v["error"]["retryable"], false);
        assert_eq!(v["error"]["suggested_action"], "fix it");
        assert_eq!(v["tool_call_id"], "c1");
        assert!(v.get("data").is_none());
        assert!(v.get("replayed").is_none());
        let back: ResultEnvelope = serde_json::from_value(v).unwrap();
        assert_eq!(back, env);
    }

    #[test]
    fn a_cut_result_keeps_a_head_that_splits_no_token() {
        let text = format!(
            "{{\"content\":\"{} sk-secret-{}\"}}",
            "a".repeat(1000),
            "b".repeat(500)
        );
        let mut env =
            ResultEnvelope::success("c", "t", serde_json::from_str(&text).unwrap(), Vec::new());
        let cut = CutData::of(&text, 1100);
        env.data = None;
        env.cut = Some(cut.clone());
        assert_eq!(env.data, None);
        assert_eq!(cut.bytes, text.len() as u64);
        // The cap falls inside the last word: the head ends before its space.
        assert_eq!(cut.head, format!("{{\"content\":\"{}", "a".repeat(1000)));
        let v = serde_json::to_value(&env).unwrap();
        assert_eq!(v["cut"]["bytes"], text.len());
        assert_eq!(serde_json::from_value::<ResultEnvelope>(v).unwrap(), env);
        // No boundary near the cap: cut at the cap, on a character boundary.
        let wide = "é".repeat(1000);
        assert_eq!(cut_head(&wide, 1001).len(), 1000);
        assert_eq!(cut_head("short", 1000), "short");
        // Never more than half the head for a boundary.
        assert_eq!(cut_head(&format!(" {}", "x".repeat(100)), 50).len(), 50);
    }

    #[test]
    fn transient_codes_are_retryable_by_default() {
        assert!(ToolError::new(ErrorCode::Eunavail, "x").retryable);
        assert!(!ToolError::new(ErrorCode::Eperm, "x").retryable);
    }
}

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
/// is saved whole and shown to the model as its head and a ref to read back.
pub const DEFAULT_RESULT_CAP: usize = 16 * 1024;

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
    /// The tool's output, when `ok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// The error, when not `ok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
    /// References to world objects read or written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refs: Vec<ResourceRef>,
    /// Where the host saved `data` (as JSON text) because it is larger than the
    /// run's result cap: the model sees its head and reads the rest back in parts
    /// (`result.read`). Not part of the observation: the data is.
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
    fn transient_codes_are_retryable_by_default() {
        assert!(ToolError::new(ErrorCode::Eunavail, "x").retryable);
        assert!(!ToolError::new(ErrorCode::Eperm, "x").retryable);
    }
}

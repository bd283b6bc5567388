//! How one tool result is shown to the model: whole when its JSON is within the
//! per-result cap, else cut. A cut result shows the head of its `data` (as JSON
//! text), how long the whole is, and where to read the rest: the runtime saved
//! the whole `data` when it was larger than the run's cap
//! ([`ResultEnvelope::saved`]), and `result.read {ref, offset, limit}` reads it
//! back in parts from the offset the head ends at. The session keeps the whole
//! envelope; only what a request carries is cut.

use agentry_protocol::envelope::ResultEnvelope;
use serde_json::{Value, json};

/// The smallest per-result cap the projection goes down to when the newest
/// turn does not fit otherwise.
pub(crate) const MIN_RESULT_CAP: usize = 256;

/// The tool that reads a saved result back.
const READ_TOOL: &str = "result.read";

/// The envelope as the model sees it: its JSON, or its cut form when that is
/// longer than `cap` bytes.
pub(crate) fn result_text(envelope: &ResultEnvelope, cap: usize) -> String {
    let whole = serde_json::to_string(envelope).unwrap_or_default();
    if whole.len() <= cap {
        return whole;
    }
    let mut shown = json!({
        "tool_call_id": envelope.tool_call_id,
        "tool": envelope.tool,
        "ok": envelope.ok,
    });
    if let Some(data) = &envelope.data {
        let text = serde_json::to_string(data).unwrap_or_default();
        let head = head(&text, cap);
        shown["data_head"] = Value::String(head.to_string());
        shown["data_bytes"] = json!(text.len());
        shown["truncated"] = json!(format!(
            "data is {} bytes of JSON text; the first {} are shown",
            text.len(),
            head.len()
        ));
        shown["rest"] = match envelope.saved.as_ref().and_then(|r| file_name(&r.path)) {
            // A part of half the cap comes back whole even if every byte needs escaping.
            Some(name) => json!({"read_with": READ_TOOL, "ref": name, "offset": head.len(),
                "limit": (cap / 2).max(MIN_RESULT_CAP / 2)}),
            None => json!("not saved; repeat the call with a narrower request"),
        };
    }
    if let Some(error) = &envelope.error {
        let message = head(&error.message, cap);
        shown["error"] = json!({
            "code": error.code,
            "message": message,
            "retryable": error.retryable,
            "suggested_action": error.suggested_action,
        });
    }
    shown.to_string()
}

/// The longest prefix of `text` of at most `cap` bytes ending on a character
/// boundary.
pub(crate) fn head(text: &str, cap: usize) -> &str {
    let mut end = cap.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The last component of a saved result's path: what `result.read` takes.
fn file_name(path: &str) -> Option<&str> {
    path.rsplit('/').next().filter(|n| !n.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentry_protocol::envelope::ResourceRef;

    fn big(saved: bool) -> ResultEnvelope {
        let mut env = ResultEnvelope::success(
            "c1",
            "fs.read",
            json!({"content": "é".repeat(5_000)}),
            Vec::new(),
        );
        if saved {
            env.saved = Some(ResourceRef {
                path: ".agentry/results/ab.json".into(),
                sha256: "ab".into(),
                bytes: 10_015,
            });
        }
        env
    }

    #[test]
    fn a_small_result_is_shown_whole() {
        let env = ResultEnvelope::success("c", "t", json!({"x": 1}), Vec::new());
        assert_eq!(
            result_text(&env, 1024),
            serde_json::to_string(&env).unwrap()
        );
    }

    #[test]
    fn a_large_result_shows_its_head_and_where_the_rest_is() {
        let shown: Value = serde_json::from_str(&result_text(&big(true), 1000)).unwrap();
        let head = shown["data_head"].as_str().unwrap();
        assert!(head.len() <= 1000 && head.len() >= 998, "{}", head.len());
        let whole = serde_json::to_string(&big(true).data).unwrap();
        assert!(whole.starts_with(head));
        assert_eq!(shown["data_bytes"], whole.len());
        assert_eq!(
            shown["rest"],
            json!({"read_with": "result.read", "ref": "ab.json", "offset": head.len(), "limit": 500})
        );
        let unsaved: Value = serde_json::from_str(&result_text(&big(false), 1000)).unwrap();
        assert!(unsaved["rest"].as_str().unwrap().starts_with("not saved"));
    }
}

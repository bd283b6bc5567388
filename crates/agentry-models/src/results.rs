//! How one tool result is shown to the model: whole when its JSON is within the
//! per-result cap, else cut. A cut result shows the head of its `data` (as JSON
//! text), how long the whole is, and where to read the rest: the runtime saved
//! the whole `data` when it was larger than the run's cap
//! ([`ResultEnvelope::saved`]) and kept only its head in the envelope
//! ([`ResultEnvelope::cut`]); `result.read {ref, offset, limit}` reads it back
//! in parts from the offset the head ends at. A request may cut a result
//! further (a smaller cap when the newest turn does not fit otherwise).

use agentry_protocol::envelope::ResultEnvelope;
use serde_json::{Value, json};

/// The smallest per-result cap the projection goes down to when the newest
/// turn does not fit otherwise.
pub(crate) const MIN_RESULT_CAP: usize = 256;

/// The tool that reads a saved result back.
const READ_TOOL: &str = "result.read";

/// The envelope as the model sees it: its JSON, or its cut form when that is
/// longer than `cap` bytes or the runtime already cut its data.
pub(crate) fn result_text(envelope: &ResultEnvelope, cap: usize) -> String {
    if envelope.cut.is_none() {
        let whole = serde_json::to_string(envelope).unwrap_or_default();
        if whole.len() <= cap {
            return whole;
        }
    }
    let mut shown = json!({
        "tool_call_id": envelope.tool_call_id,
        "tool": envelope.tool,
        "ok": envelope.ok,
    });
    let whole;
    let data = match (&envelope.data, &envelope.cut) {
        (Some(data), _) => {
            whole = serde_json::to_string(data).unwrap_or_default();
            Some((whole.as_str(), whole.len() as u64))
        }
        (None, Some(cut)) => Some((cut.head.as_str(), cut.bytes)),
        (None, None) => None,
    };
    if let Some((text, bytes)) = data {
        let head = head(text, cap);
        shown["data_head"] = Value::String(head.to_string());
        shown["data_bytes"] = json!(bytes);
        shown["truncated"] = json!(format!(
            "data is {bytes} bytes of JSON text; the first {} are shown",
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
    use agentry_protocol::envelope::{CutData, ResourceRef};

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

    #[test]
    fn a_result_the_runtime_cut_shows_its_kept_head_and_whole_length() {
        let whole = serde_json::to_string(&big(true).data).unwrap();
        let mut env = big(true);
        env.data = None;
        env.cut = Some(CutData::of(&whole, 600));
        // The request's cap is above the head kept: the head is shown whole.
        let shown: Value = serde_json::from_str(&result_text(&env, 16 * 1024)).unwrap();
        let head = shown["data_head"].as_str().unwrap();
        assert_eq!(head, env.cut.as_ref().unwrap().head);
        assert_eq!(shown["data_bytes"], whole.len());
        assert_eq!(shown["rest"]["ref"], "ab.json");
        assert_eq!(shown["rest"]["offset"], head.len());
        // Below it, the head is cut further and the rest read from there.
        let shown: Value = serde_json::from_str(&result_text(&env, 300)).unwrap();
        let head = shown["data_head"].as_str().unwrap();
        assert!(head.len() <= 300 && whole.starts_with(head));
        assert_eq!(shown["rest"]["offset"], head.len());
    }
}

//! The page: the assets inlined, the model embedded as JSON.

use super::error::ViewError;
use super::model::Page;

const TEMPLATE: &str = include_str!("assets/view.html");
const CSS: &str = include_str!("assets/view.css");
const JS: &str = include_str!("assets/view.js");

/// The whole HTML document.
pub(super) fn render(model: &Page) -> Result<String, ViewError> {
    let data = serde_json::to_string(model).map_err(ViewError::Encode)?;
    let title = html_text(&model.title);
    Ok(TEMPLATE
        .replacen("{{SCRIPT_HASH}}", &script_hash(JS), 1)
        .replacen("{{TITLE}}", &title, 1)
        .replacen("{{CSS}}", CSS, 1)
        .replacen("{{JS}}", JS, 1)
        // Last: the data may contain any of the markers above.
        .replacen("{{DATA}}", &script_safe(&data), 1))
}

/// JSON that cannot end its `<script>` element: every `<` (so `</script>` and
/// `<!--`), and the two line separators older parsers choke on, as JSON
/// escapes. Outside strings JSON has none of these, so the text parses to the
/// same value.
pub(super) fn script_safe(json: &str) -> String {
    let mut out = String::with_capacity(json.len() + json.len() / 64);
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

/// The CSP source that allows exactly this inline script (and so no script
/// a trace might smuggle in, should the escaping above ever fail).
fn script_hash(script: &str) -> String {
    use base64::Engine;
    use sha2::Digest;
    let digest = sha2::Sha256::digest(script.as_bytes());
    let b64 = base64::engine::general_purpose::STANDARD.encode(digest);
    format!("'sha256-{b64}'")
}

/// Text for an HTML element's content.
fn html_text(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn embedded_json_cannot_close_its_script_and_parses_back() {
        let value = serde_json::json!({"a": "</script><script>alert(1)</script>", "b": "x\u{2028}y <!-- &"});
        let safe = script_safe(&value.to_string());
        assert!(!safe.contains('<'), "{safe}");
        assert!(!safe.contains('\u{2028}'));
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back, value);
    }
}

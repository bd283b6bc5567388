//! Which key of serve.toml a TOML parse error is about.

/// The dotted key a parse error at byte `at` is about: the table header
/// above it (or on its line) and the field serde names, else the key on the
/// error's line; `(file)` when neither is found.
pub(super) fn key_at(text: &str, at: usize, message: &str) -> String {
    let before = text.get(..at).unwrap_or(text);
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line_end = text
        .get(line_start..)
        .and_then(|rest| rest.find('\n'))
        .map_or(text.len(), |i| line_start + i);
    let line = text.get(line_start..line_end).unwrap_or("").trim();
    let header = |l: &str| {
        let l = l.trim();
        (l.starts_with('[') && l.ends_with(']'))
            .then(|| l.trim_matches(|c| c == '[' || c == ']').trim().to_string())
    };
    let named = ["unknown field `", "missing field `"]
        .iter()
        .find_map(|lead| message.trim().strip_prefix(lead))
        .and_then(|rest| rest.split('`').next())
        .map(str::to_string);
    if let Some(on_line) = header(line) {
        // The error is about this table: a table that should not be there
        // (its own name), or a field it lacks.
        return match named {
            Some(f) if on_line != f && !on_line.ends_with(&format!(".{f}")) => {
                format!("{on_line}.{f}")
            }
            Some(_) | None => on_line,
        };
    }
    let table = before.lines().rev().find_map(header);
    let field = named.or_else(|| {
        line.split_once('=')
            .map(|(k, _)| k.trim().trim_matches('"').to_string())
            .filter(|k| !k.is_empty())
    });
    match (table, field) {
        (Some(t), Some(f)) => format!("{t}.{f}"),
        (Some(t), None) => t,
        (None, Some(f)) => f,
        (None, None) => "(file)".to_string(),
    }
}

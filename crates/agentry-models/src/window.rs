//! The model's context window: configured, else looked up in a table of common
//! model families, else a conservative default. The CLI prints which one a run
//! uses ([`ContextWindow`]'s `Display`).

/// The window assumed for a model that is in no table and was not configured.
pub const DEFAULT_CONTEXT_TOKENS: u64 = 32_768;

/// Published context windows of common model families, matched by the longest
/// prefix of the lower-cased model name (after any `org/` part, so
/// `meta-llama/Llama-3.1-8B-Instruct` and Ollama's `llama3.1:8b` both match).
/// Where a family's window is larger than what it accepts as input (gpt-5: 400k
/// window, 272k input), the input limit is given.
const FAMILIES: &[(&str, u64)] = &[
    ("gpt-5", 272_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-4", 8_192),
    ("gpt-3.5-turbo", 16_385),
    ("o1-mini", 128_000),
    ("o1-preview", 128_000),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4-mini", 200_000),
    ("claude-", 200_000),
    ("llama-3.1", 131_072),
    ("llama3.1", 131_072),
    ("llama-3.2", 131_072),
    ("llama3.2", 131_072),
    ("llama-3.3", 131_072),
    ("llama3.3", 131_072),
    ("llama-3", 8_192),
    ("llama3", 8_192),
    ("qwen2.5", 32_768),
    ("qwen3", 32_768),
    ("mistral-large", 131_072),
    ("mistral-nemo", 131_072),
    ("mistral", 32_768),
    ("gemma-3", 32_768),
    ("gemma3", 32_768),
    ("gemma", 8_192),
    ("deepseek", 65_536),
];

/// Where a run's context window came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WindowSource {
    /// Set by the operator; the field or flag that set it (e.g.
    /// `policy.context_tokens`, `--context-tokens`).
    Configured(String),
    /// The built-in table; the family prefix that matched.
    Table(&'static str),
    /// Neither: [`DEFAULT_CONTEXT_TOKENS`].
    Default,
}

/// A context window in tokens and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextWindow {
    /// Tokens the model accepts per request, its output included.
    pub tokens: u64,
    /// Where `tokens` came from.
    pub source: WindowSource,
}

impl ContextWindow {
    /// `configured` (with the name of what set it), else the table's entry for
    /// `model`, else the default.
    pub fn resolve(model: &str, configured: Option<(u64, &str)>) -> ContextWindow {
        if let Some((tokens, by)) = configured {
            return ContextWindow {
                tokens,
                source: WindowSource::Configured(by.to_string()),
            };
        }
        match family(model) {
            Some((prefix, tokens)) => ContextWindow {
                tokens,
                source: WindowSource::Table(prefix),
            },
            None => ContextWindow {
                tokens: DEFAULT_CONTEXT_TOKENS,
                source: WindowSource::Default,
            },
        }
    }
}

impl std::fmt::Display for ContextWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} tokens (", self.tokens)?;
        match &self.source {
            WindowSource::Configured(by) => write!(f, "{by})"),
            WindowSource::Table(prefix) => write!(f, "model table: {prefix})"),
            WindowSource::Default => f.write_str(
                "default: the model is not in the table; set [policy] context_tokens or --context-tokens)",
            ),
        }
    }
}

/// The longest family prefix of `model`, and its window.
fn family(model: &str) -> Option<(&'static str, u64)> {
    let name = model
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .to_ascii_lowercase();
    FAMILIES
        .iter()
        .filter(|(prefix, _)| name.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_match_by_their_longest_prefix() {
        let tokens = |m: &str| ContextWindow::resolve(m, None).tokens;
        assert_eq!(tokens("gpt-4o-mini"), 128_000);
        assert_eq!(tokens("gpt-4"), 8_192);
        assert_eq!(tokens("gpt-4.1-mini"), 1_047_576);
        assert_eq!(tokens("o1-mini"), 128_000);
        assert_eq!(tokens("o3-mini"), 200_000);
        assert_eq!(tokens("claude-sonnet-4-5"), 200_000);
        assert_eq!(tokens("meta-llama/Llama-3.1-8B-Instruct"), 131_072);
        assert_eq!(tokens("llama3:8b"), 8_192);
        assert_eq!(tokens("qwen2.5:7b"), 32_768);
        assert_eq!(tokens("some-local-model"), DEFAULT_CONTEXT_TOKENS);
    }

    #[test]
    fn the_printed_line_says_where_the_window_came_from() {
        assert_eq!(
            ContextWindow::resolve("gpt-4o", None).to_string(),
            "128000 tokens (model table: gpt-4o)"
        );
        assert_eq!(
            ContextWindow::resolve("gpt-4o", Some((9000, "--context-tokens"))).to_string(),
            "9000 tokens (--context-tokens)"
        );
        assert!(
            ContextWindow::resolve("x", None)
                .to_string()
                .starts_with("32768 tokens (default")
        );
    }
}

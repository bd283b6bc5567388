//! Task-declared patterns (`[redact] patterns = [..]`), compiled as one alternation.

use regex::Regex;

use crate::error::RedactError;

/// The task's patterns: one regex, each pattern in its own capture group.
#[derive(Debug, Clone)]
pub(crate) struct TaskPatterns {
    /// The patterns as written (what a compiled set is found by).
    patterns: Vec<String>,
    regex: Regex,
    /// Capture-group index of pattern i.
    groups: Vec<usize>,
}

impl TaskPatterns {
    /// Compiles each pattern alone first, so a bad one is named by its index.
    pub(crate) fn compile(patterns: &[String]) -> Result<Option<Self>, RedactError> {
        if patterns.is_empty() {
            return Ok(None);
        }
        let mut groups = Vec::with_capacity(patterns.len());
        let mut next_group = 1;
        for (index, pattern) in patterns.iter().enumerate() {
            let alone = Regex::new(pattern).map_err(|source| RedactError::BadPattern {
                index,
                pattern: pattern.clone(),
                source,
            })?;
            groups.push(next_group);
            next_group += alone.captures_len();
        }
        let joined: Vec<String> = patterns.iter().map(|p| format!("({p})")).collect();
        let regex = Regex::new(&joined.join("|")).map_err(RedactError::PatternsTooLarge)?;
        Ok(Some(TaskPatterns {
            patterns: patterns.to_vec(),
            regex,
            groups,
        }))
    }

    pub(crate) fn patterns(&self) -> &[String] {
        &self.patterns
    }

    pub(crate) fn is_match(&self, text: &str) -> bool {
        self.regex.is_match(text)
    }

    /// (start, end, pattern index) of every non-empty match.
    pub(crate) fn find(&self, text: &str) -> Vec<(usize, usize, usize)> {
        let mut out = Vec::new();
        for caps in self.regex.captures_iter(text) {
            let Some(whole) = caps.get(0) else { continue };
            if whole.is_empty() {
                continue;
            }
            let index = self
                .groups
                .iter()
                .position(|g| caps.get(*g).is_some())
                .unwrap_or(0);
            out.push((whole.start(), whole.end(), index));
        }
        out
    }
}

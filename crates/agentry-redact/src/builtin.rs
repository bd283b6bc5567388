//! Built-in detectors: provider keys, tokens, JWTs, Authorization values, PEM keys.

use std::sync::LazyLock;

use regex::Regex;

/// One built-in detector. Group 1 of `regex` is the anchor kept in the output.
pub(crate) struct Detector {
    pub(crate) kind: &'static str,
    pub(crate) regex: Regex,
}

/// Literal anchors for the prefilter: every detector's match contains one
/// (compared ASCII case-insensitively).
pub(crate) const ANCHORS: &[&str] = &[
    "sk-",
    "AKIA",
    "ASIA",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "xoxa-",
    "xoxb-",
    "xoxp-",
    "xoxo-",
    "xoxs-",
    "xoxr-",
    "AIza",
    "eyJ",
    "bearer",
    "basic",
    "-----BEGIN",
];

// Order matters: on equal starts the earlier detector wins (anthropic before openai).
const TABLE: &[(&str, &str)] = &[
    ("anthropic_key", r"(sk-ant-)[A-Za-z0-9_-]{20,}"),
    ("openai_key", r"(sk-)(?:proj-)?[A-Za-z0-9_-]{20,}"),
    ("aws_access_key", r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"),
    (
        "github_token",
        r"(gh[pousr]_)[A-Za-z0-9]{36,}|(github_pat_)\w{22,}",
    ),
    ("slack_token", r"(xox[abposr]-)[A-Za-z0-9-]{10,}"),
    ("google_api_key", r"(AIza)[0-9A-Za-z_-]{35}"),
    ("jwt", r"(eyJ)[\w-]{8,}\.eyJ[\w-]{8,}\.[\w-]{8,}"),
    (
        "bearer",
        r"(?i)\b((?:bearer|basic)\s+)[A-Za-z0-9._~+/=-]{16,}",
    ),
    (
        "private_key",
        r"(-----BEGIN [A-Z ]*PRIVATE KEY-----)[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
    ),
];

/// Compiled once per process.
pub(crate) static DETECTORS: LazyLock<Vec<Detector>> = LazyLock::new(|| {
    TABLE
        .iter()
        .filter_map(|(kind, pattern)| {
            // The table is constant and covered by tests; a failure here is a
            // programming error caught by `every_builtin_compiles`.
            Regex::new(pattern)
                .ok()
                .map(|regex| Detector { kind, regex })
        })
        .collect()
});

/// The number of built-in detectors (for the test that all compiled).
#[cfg(test)]
pub(crate) const COUNT: usize = TABLE.len();

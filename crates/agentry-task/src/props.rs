//! Property tests of the task.toml loader: any text, and TOML made of
//! task.toml's own tables, keys and every kind of value (huge, negative,
//! non-finite, odd durations, any characters) — never a panic; a refusal is
//! [`TaskError::Invalid`] naming `task.toml`.

use std::path::Path;

use proptest::prelude::*;

use crate::{TaskError, TaskSpec};

/// 10,000 cases each; XorShift, not ChaCha: unoptimized, ChaCha costs more
/// per case than the parse.
fn cases() -> ProptestConfig {
    ProptestConfig {
        cases: 10_000,
        rng_algorithm: proptest::test_runner::RngAlgorithm::XorShift,
        ..ProptestConfig::default()
    }
}

/// task.toml's tables and the keys each takes (raw.rs), plus one unknown.
const TABLES: &[(&str, &[&str])] = &[
    (
        "[budget]",
        &[
            "max_steps",
            "max_tool_calls",
            "max_tokens",
            "max_cost",
            "deadline",
            "max_retries",
            "max_ticks",
        ],
    ),
    ("[tools]", &["grant", "approve", "approval_timeout"]),
    (
        "[[accept]]",
        &["file", "equals", "contains", "command", "timeout"],
    ),
    (
        "[policy]",
        &[
            "script",
            "model",
            "base_url",
            "context_tokens",
            "result_cap",
            "compaction",
            "ca_cert",
            "prompt_cache",
        ],
    ),
    ("[[policy.fallback]]", &["model", "base_url"]),
    ("[policy.models.small]", &["model", "base_url", "script"]),
    ("[progress]", &["window", "max_denied"]),
    ("[driver]", &["mode", "every"]),
    ("[tree]", &["max_depth", "max_children", "child_share"]),
    ("[tree.parent_reserve]", &["steps", "tool_calls"]),
    ("[redact]", &["patterns"]),
    ("[trace]", &["sample", "content"]),
    (
        "[[tools.command]]",
        &[
            "name",
            "description",
            "argv",
            "input_schema",
            "effect",
            "idempotency",
            "timeout",
            "stdin",
            "env",
            "auth_scope",
            "max_retries",
            "parallel_safe",
            "version",
            "redact",
            "volatile",
        ],
    ),
    (
        "[[tools.mcp]]",
        &[
            "name",
            "command",
            "env",
            "url",
            "headers",
            "ca_cert",
            "tools",
            "timeout",
            "startup_timeout",
        ],
    ),
    (
        "[[tools.a2a]]",
        &[
            "name",
            "url",
            "headers",
            "ca_cert",
            "timeout",
            "description",
            "effect",
            "input_required",
            "max_retries",
        ],
    ),
    (
        "[tools.mcp.overrides.t]",
        &["effect", "idempotency", "approve", "redact"],
    ),
    ("[nope]", &["x"]),
];

const KEYS: &[&str] = &[
    "goal",
    "url",
    "headers",
    "tools",
    "startup_timeout",
    "overrides",
    "accept",
    "approval_timeout",
    "approve",
    "argv",
    "auth_scope",
    "base_url",
    "budget",
    "ca_cert",
    "child_share",
    "command",
    "compaction",
    "contains",
    "context_tokens",
    "deadline",
    "description",
    "driver",
    "effect",
    "env",
    "equals",
    "every",
    "fallback",
    "file",
    "grant",
    "idempotency",
    "input_schema",
    "max_children",
    "max_cost",
    "max_denied",
    "max_depth",
    "max_retries",
    "max_steps",
    "max_ticks",
    "max_tokens",
    "max_tool_calls",
    "mode",
    "model",
    "models",
    "name",
    "parallel_safe",
    "parent_reserve",
    "policy",
    "progress",
    "prompt_cache",
    "result_cap",
    "script",
    "stdin",
    "steps",
    "timeout",
    "tool_calls",
    "tools",
    "tree",
    "version",
    "window",
    "redact",
    "volatile",
    "patterns",
    "trace",
    "sample",
    "content",
    "type",
    "properties",
    "provider",
    "\"é\"",
];

/// Short text: any characters.
fn any_text(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..max).prop_map(String::from_iter)
}

/// A TOML value as text.
fn value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        (-3i64..5).prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| format!("{f:?}")),
        prop::sample::select(
            &[
                "nan",
                "inf",
                "-inf",
                "1e999",
                "99999999999999999999",
                "0.0000001",
                "1e-300",
                "true",
                "false",
                "1979-05-27T07:32:00Z",
                "07:32:00",
                "\"\"",
                "\"  \"",
                "\"fs.*\"",
                "\"*\"",
                "\"../x\"",
                "\"/etc\"",
                "\"sum.txt\"",
                "\"script.json\"",
                "\"openai\"",
                "\"anthropic\"",
                "\"summarize\"",
                "\"elide\"",
                "\"required_key\"",
                "\"irreversible\"",
                "\"{path}\"",
                "\"{path...}\"",
                "\"tick\"",
                "\"event\"",
                "\"password\"",
                "\"(unclosed\"",
                "\"[0-9]{16}\"",
                "\"a{99999999}\"",
                "0.5",
            ][..]
        )
        .prop_map(str::to_string),
        // A duration: any amount of any unit, or nonsense.
        (
            any::<u64>(),
            prop::sample::select(&["s", "ms", "m", "h", "d", "y", "ns", "w", "", "x"][..])
        )
            .prop_map(|(n, unit)| format!("\"{n}{unit}\"")),
        (1u64..1000, prop::sample::select(&["s", "ms", "d"][..]))
            .prop_map(|(n, unit)| format!("\"{n}{unit}\"")),
        any_text(12).prop_map(|t| serde_json::Value::String(t).to_string()),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(", "))),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..4).prop_map(|kv| {
                let items: Vec<String> = kv.iter().map(|(k, v)| format!("{k} = {v}")).collect();
                format!("{{{}}}", items.join(", "))
            }),
        ]
    })
}

/// One table: its header, then lines of mostly its own keys.
fn table() -> impl Strategy<Value = String> {
    prop::sample::select(TABLES).prop_flat_map(|(header, keys)| {
        let key = prop_oneof![
            9 => prop::sample::select(keys),
            1 => prop::sample::select(KEYS),
        ];
        let line = prop_oneof![
            12 => (key, value()).prop_map(|(k, v)| format!("{k} = {v}")),
            1 => any_text(16),
        ];
        prop::collection::vec(line, 0..6)
            .prop_map(move |lines| format!("{header}\n{}", lines.join("\n")))
    })
}

/// A task.toml: mostly a goal first, then tables.
fn task_toml() -> impl Strategy<Value = String> {
    (any::<bool>(), prop::collection::vec(table(), 0..4)).prop_map(|(goal, tables)| {
        let mut text = if goal {
            "goal = \"g\"\n".to_string()
        } else {
            String::new()
        };
        text.push_str(&tables.join("\n"));
        text
    })
}

/// The verdict on `text`: a spec, or an `Invalid` error naming task.toml.
fn check(text: &str, dir: &Path) -> Result<(), TestCaseError> {
    match TaskSpec::parse(text, dir) {
        Ok(_) => Ok(()),
        Err(TaskError::Invalid { file, message }) => {
            prop_assert_eq!(file, dir.join("task.toml"));
            prop_assert!(!message.trim().is_empty());
            Ok(())
        }
        Err(e) => Err(TestCaseError::fail(format!("not an Invalid error: {e:?}"))),
    }
}

/// A task directory with the files a task.toml may name, one per thread (the
/// parser only looks at it).
fn with_task_dir(f: impl FnOnce(&Path) -> Result<(), TestCaseError>) -> Result<(), TestCaseError> {
    thread_local! {
        static DIR: Result<tempfile::TempDir, String> = task_dir().map_err(|e| e.to_string());
    }
    DIR.with(|dir| match dir {
        Ok(dir) => f(dir.path()),
        Err(e) => Err(TestCaseError::fail(e.clone())),
    })
}

fn task_dir() -> std::io::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("script.json"), r#"{"turns":[]}"#)?;
    std::fs::create_dir(dir.path().join("workspace"))?;
    Ok(dir)
}

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn any_text_loads_or_is_refused_naming_task_toml(text in any_text(96)) {
        with_task_dir(|dir| check(&text, dir))?;
    }

    #[test]
    fn any_task_toml_of_its_own_words_loads_or_is_refused_naming_task_toml(
        text in task_toml(),
    ) {
        with_task_dir(|dir| check(&text, dir))?;
    }
}

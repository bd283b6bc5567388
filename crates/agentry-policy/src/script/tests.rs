use std::path::Path;

use agentry_protocol::tool::{ToolArguments, ToolCall};
use serde_json::json;

use super::{Script, ScriptEnd, ScriptTurn};
use crate::error::ScriptError;

#[test]
fn parses_the_documented_format() {
    let s = Script::parse(
        r#"{"turns":[{"tool_calls":[{"id":"c1","name":"fs.read","arguments":{"path":"a"}}]},
                     {"tool_calls":[{"name":"x","arguments":"{broken"}]},
                     {"final":"ok"}],"then":"repeat_last"}"#,
    )
    .unwrap();
    assert_eq!(s.then, ScriptEnd::RepeatLast);
    assert_eq!(
        s.turns[0],
        ScriptTurn::ToolCalls(vec![ToolCall::new("c1", "fs.read", json!({"path":"a"}))])
    );
    match &s.turns[1] {
        ScriptTurn::ToolCalls(c) => {
            assert_eq!(c[0].id, "call_2_0");
            assert_eq!(c[0].arguments, ToolArguments::Raw("{broken".into()));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(s.turns[2], ScriptTurn::Final("ok".into()));
}

#[test]
fn errors_name_the_field() {
    let cases = [
        (r#"{"turns":[{"final":3}]}"#, "turns[0].final"),
        (
            r#"{"turns":[{"tool_calls":[{"id":"a"}]}]}"#,
            "turns[0].tool_calls[0].name",
        ),
        (r#"{"turns":[], "then":"loop"}"#, "then"),
        (r#"{"turn":[]}"#, "unknown field \"turn\""),
        (r#"{"turns":[{}]}"#, "turns[0]"),
        ("[", "not valid JSON"),
    ];
    for (text, want) in cases {
        let err = Script::parse(text).unwrap_err().to_string();
        assert!(err.contains(want), "{text}: {err}");
    }
}

#[test]
fn file_errors_name_the_file() {
    let dir = std::env::temp_dir().join(format!("agentry-policy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("script.json");
    std::fs::write(&bad, r#"{"turns":[{"final":3}]}"#).unwrap();
    let err = Script::load(&bad).unwrap_err();
    assert!(matches!(err, ScriptError::InvalidFile { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!("{}: turns[0].final: expected a string", bad.display())
    );
    let missing = Path::new("/nonexistent/agentry/script.json");
    let err = Script::load(missing).unwrap_err();
    assert!(matches!(err, ScriptError::Unreadable { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("/nonexistent/agentry/script.json: cannot read script: "),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A default id never collides with an id the script wrote in the same turn,
/// and a blank id is refused like an empty one.
#[test]
fn default_ids_are_fresh_and_blank_ids_are_refused() {
    let s =
        Script::parse(r#"{"turns":[{"tool_calls":[{"id":"call_1_1","name":"a"},{"name":"b"}]}]}"#)
            .unwrap();
    match &s.turns[0] {
        ScriptTurn::ToolCalls(c) => {
            let ids: Vec<&str> = c.iter().map(|c| c.id.as_str()).collect();
            assert_eq!(ids, ["call_1_1", "call_1_1_2"]);
        }
        other => panic!("{other:?}"),
    }
    let err = Script::parse(r#"{"turns":[{"tool_calls":[{"id":" ","name":"a"}]}]}"#).unwrap_err();
    assert!(
        err.to_string().contains("turns[0].tool_calls[0].id"),
        "{err}"
    );
}

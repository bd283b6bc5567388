//! Property tests of the script loader: any text, any JSON made of the
//! script's own words, any bytes in a file — never a panic; a refusal is a
//! [`ScriptError`] of the kind its entry point promises; a script that loads
//! has only calls the host can key (non-blank ids).

use proptest::prelude::*;
use serde_json::{Map, Value};

use super::{Script, ScriptTurn};
use crate::error::ScriptError;

/// 10,000 cases each; XorShift, not ChaCha: unoptimized, ChaCha costs more
/// per case than the parse.
fn cases() -> ProptestConfig {
    ProptestConfig {
        cases: 10_000,
        rng_algorithm: proptest::test_runner::RngAlgorithm::XorShift,
        ..ProptestConfig::default()
    }
}

/// What holds of every script that loads: each turn of calls holds some,
/// each with a name and an id the host can key on.
fn check_loaded(script: &Script) {
    for turn in &script.turns {
        if let ScriptTurn::ToolCalls(calls) = turn {
            assert!(!calls.is_empty());
            assert!(
                calls
                    .iter()
                    .all(|c| !c.id.trim().is_empty() && !c.name.is_empty()),
                "{calls:?}"
            );
        }
    }
}

/// Short text: the script's words, blank, or any characters.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(
            &[
                "turns",
                "then",
                "tool_calls",
                "final",
                "id",
                "name",
                "arguments",
                "stop",
                "repeat_last",
                "",
                "  ",
                "call_1_0",
                "call_1_1",
                "fs.read"
            ][..]
        )
        .prop_map(str::to_string),
        prop::collection::vec(any::<char>(), 0..8).prop_map(String::from_iter),
    ]
}

/// JSON values whose keys are mostly the script's own.
fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        text().prop_map(Value::from),
    ];
    leaf.prop_recursive(5, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((text(), inner), 0..5)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn any_text_parses_or_is_refused_as_invalid(
        text in prop::collection::vec(any::<char>(), 0..64).prop_map(String::from_iter),
    ) {
        match Script::parse(&text) {
            Ok(script) => check_loaded(&script),
            Err(e) => prop_assert!(matches!(e, ScriptError::Invalid { .. }), "{e:?}"),
        }
    }

    #[test]
    fn any_json_of_script_words_parses_or_is_refused_as_invalid(
        v in json(),
        // Half the time as the root object, so the turns are reached.
        wrap in any::<bool>(),
    ) {
        let v = if wrap { serde_json::json!({"turns": [v]}) } else { v };
        let text = v.to_string();
        let parsed = Script::parse(&text);
        match &parsed {
            Ok(script) => check_loaded(script),
            Err(e) => prop_assert!(matches!(e, ScriptError::Invalid { .. }), "{e:?}"),
        }
        // From text or from the value, the same verdict (not the same text:
        // a float's last digit may change on the way through JSON text).
        prop_assert_eq!(parsed.is_ok(), Script::from_value(&v).is_ok());
    }
}

proptest! {
    // Each case writes a file: 2,000 keep this under a few seconds here.
    #![proptest_config(ProptestConfig { cases: 2_000, ..cases() })]

    #[test]
    fn any_bytes_in_a_file_load_or_are_refused_naming_the_file(
        bytes in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let path = dir.path().join("script.json");
        std::fs::write(&path, &bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        match Script::load(&path) {
            Ok(script) => check_loaded(&script),
            Err(ScriptError::Unreadable { path: p, .. } | ScriptError::InvalidFile { path: p, .. }) => {
                prop_assert_eq!(p, path);
            }
            Err(e) => prop_assert!(false, "{e:?}"),
        }
    }
}

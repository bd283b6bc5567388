//! Property tests of the chat-completions stream: any bytes cut anywhere never
//! panic the SSE framing or the tool-call assembly, every failure is an
//! [`AttemptError`], and a well-framed stream assembles to the same decision
//! however its bytes are cut.

use agentry_protocol::decision::Decision;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::stream_props::{any_text, cases, cut, drive, eol, event, reader, soup, word};

/// What reading `chunks` comes to: the decision (host ids given), none for an
/// empty stream, or the error.
fn outcome(chunks: Vec<Vec<u8>>) -> Result<Option<Decision>, String> {
    let names = ToolNameMap::default();
    drive(read_turn(reader(chunks), None))
        .map(|turn| {
            turn.map(|t| {
                let mut decision = t.into_decision::<OpenAiWire>(&names);
                crate::ids::assign_host_ids(&mut decision, 1, &[]);
                decision
            })
        })
        .map_err(|e| {
            assert!(
                !matches!(e, AttemptError::Fatal(_)),
                "a stream is never fatal: {e:?}"
            );
            format!("{e:?}")
        })
}

/// Every call of a decision has an id the host can key on.
fn ids_are_usable(out: &Result<Option<Decision>, String>) {
    if let Ok(Some(Decision::ToolCalls { calls })) = out {
        assert!(calls.iter().all(|c| !c.id.trim().is_empty()), "{calls:?}");
    }
}

/// A tool-call index: the usual few, any, or one serde must refuse.
fn index() -> impl Strategy<Value = Value> {
    prop_oneof![
        6 => (0u64..4).prop_map(Value::from),
        1 => any::<u64>().prop_map(Value::from),
        1 => Just(json!(-1)),
        1 => Just(json!("0")),
    ]
}

/// Text as a model or a broken server may send it (empty and blank too).
fn text() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        Just(Some(String::new())),
        Just(Some("  ".to_string())),
        any_text().prop_map(Some),
        word().prop_map(Some),
    ]
}

/// One chunk of a stream.
fn chunk() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => (index(), text(), text(), text()).prop_map(|(index, id, name, args)| {
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": index, "id": id, "function": {"name": name, "arguments": args}}]}}]})
        }),
        2 => text().prop_map(|t| json!({"choices": [{"delta": {"content": t}}]})),
        1 => prop::option::of(word())
            .prop_map(|r| json!({"choices": [{"delta": {}, "finish_reason": r}]})),
        1 => (any::<u64>(), any::<u64>(), any::<Option<u64>>()).prop_map(|(i, o, c)| {
            json!({"choices": [], "usage": {"prompt_tokens": i, "completion_tokens": o,
                "prompt_tokens_details": {"cached_tokens": c}}})
        }),
        1 => any_text().prop_map(|e| json!({"error": e})),
        1 => Just(json!({"choices": [{"delta": null}]})),
        1 => Just(json!({"choices": "no"})),
    ]
}

/// A stream of chunks as SSE bytes, ending in `[DONE]` or not.
fn stream() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec((chunk(), eol()), 0..12),
        any::<bool>(),
        eol(),
    )
        .prop_map(|(chunks, done, end)| {
            let mut text: String = chunks
                .iter()
                .map(|(c, eol)| event(None, &c.to_string(), eol))
                .collect();
            if done {
                text.push_str(&event(None, "[DONE]", end));
            }
            text.into_bytes()
        })
}

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn any_bytes_cut_anywhere_never_panic(
        bytes in soup(&["{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0",
            "\"id\":\"\"", "\"function\":{\"name\":\"f\",\"arguments\":\"", "\"finish_reason\":\"stop\"",
            "\"usage\":{\"prompt_tokens\":1}", "\"content\":\"é\""]),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        ids_are_usable(&outcome(cut(&bytes, &cuts)));
    }

    #[test]
    fn a_stream_assembles_the_same_however_its_bytes_are_cut(
        bytes in stream(),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        let whole = outcome(vec![bytes.clone()]);
        ids_are_usable(&whole);
        prop_assert_eq!(outcome(cut(&bytes, &cuts)), whole);
    }
}

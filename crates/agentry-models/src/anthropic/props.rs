//! Property tests of the Messages stream: any bytes cut anywhere never panic
//! the SSE framing or the block assembly, every failure is an
//! [`AttemptError`], and a well-framed stream assembles to the same decision
//! however its bytes are cut.

use agentry_protocol::decision::Decision;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::stream_props::{any_text, cases, cut, drive, eol, event, reader, soup, word};

/// What reading `chunks` comes to: the decision (host ids given) or the error.
fn outcome(chunks: Vec<Vec<u8>>) -> Result<Decision, String> {
    let names = ToolNameMap::default();
    drive(read_turn(reader(chunks), None))
        .map(|turn| {
            let mut decision = turn.into_decision::<AnthropicWire>(&names);
            crate::ids::assign_host_ids(&mut decision, 1, &[]);
            decision
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
fn ids_are_usable(out: &Result<Decision, String>) {
    if let Ok(Decision::ToolCalls { calls }) = out {
        assert!(calls.iter().all(|c| !c.id.trim().is_empty()), "{calls:?}");
    }
}

/// A block index: the usual few, any, or one that is not a number.
fn index() -> impl Strategy<Value = Value> {
    prop_oneof![
        6 => (0u64..4).prop_map(Value::from),
        1 => any::<u64>().prop_map(Value::from),
        1 => Just(json!(-1)),
        1 => Just(json!(null)),
    ]
}

/// Text as a model or a broken server may send it (empty, blank, absent).
fn text() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        Just(json!("")),
        Just(json!("  ")),
        any_text().prop_map(Value::from),
        word().prop_map(Value::from),
        Just(json!(7)),
    ]
}

/// One event: its name and its data.
fn event_data() -> impl Strategy<Value = (String, Value)> {
    let named = |t: &str, v: Value| (t.to_string(), v);
    prop_oneof![
        1 => any::<u64>().prop_map(move |n| named("message_start",
            json!({"type": "message_start", "message": {"usage": {"input_tokens": n, "cache_read_input_tokens": n}}}))),
        3 => (index(), prop::sample::select(&["text", "tool_use", "thinking"][..]), text(), text())
            .prop_map(move |(index, kind, id, name)| named("content_block_start",
                json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": kind, "id": id, "name": name, "text": "", "input": {}}}))),
        4 => (index(), prop::sample::select(&["text_delta", "input_json_delta", "other"][..]), text())
            .prop_map(move |(index, kind, t)| named("content_block_delta",
                json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": kind, "text": t, "partial_json": t}}))),
        1 => (text(), any::<u64>()).prop_map(move |(r, n)| named("message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": r}, "usage": {"output_tokens": n}}))),
        1 => prop::sample::select(&["overloaded_error", "invalid_request_error", "x"][..])
            .prop_map(move |t| named("error", json!({"type": "error", "error": {"type": t}}))),
        1 => Just(named("ping", json!({"type": "ping"}))),
        1 => Just(named("odd", json!(["type"]))),
    ]
}

/// A stream of events as SSE bytes, ending in `message_stop` or not.
fn stream() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec((event_data(), eol()), 0..12),
        any::<bool>(),
        eol(),
    )
        .prop_map(|(events, stop, end)| {
            let mut text: String = events
                .iter()
                .map(|((name, data), eol)| event(Some(name), &data.to_string(), eol))
                .collect();
            if stop {
                text.push_str(&event(
                    Some("message_stop"),
                    r#"{"type":"message_stop"}"#,
                    end,
                ));
            }
            text.into_bytes()
        })
}

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn any_bytes_cut_anywhere_never_panic(
        bytes in soup(&["event: content_block_start", "{\"type\":\"content_block_start\"",
            "\"index\":0", "\"content_block\":{\"type\":\"tool_use\",\"id\":\"\",\"name\":\"f\"}",
            "{\"type\":\"content_block_delta\",\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"",
            "{\"type\":\"message_stop\"}", "\"text\":\"é\""]),
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

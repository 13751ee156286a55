use super::*;

/// Decodes `chunks` through the borrowed reading where it applies, and through the
/// `Value` reading alone.
fn both_ways(chunks: &[&str]) -> (Vec<StreamEvent>, Vec<StreamEvent>) {
    let ctx = || ErrorContext::new("openai", "m");
    let (mut fast, mut general) = (ChatDecoder::new(ctx()), ChatDecoder::new(ctx()));
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for chunk in chunks {
        fast.event(&SseEvent::new("message", *chunk), &mut a);
        let value: Value = serde_json::from_str(chunk).unwrap();
        general.chunk(&value, &mut b);
    }
    fast.end(&mut a);
    general.end(&mut b);
    (a, b)
}

#[test]
fn plain_chunks_decode_as_the_value_reading_does() {
    let chunks = [
        r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":null}"#,
        r#"{"choices":[{"index":0,"delta":{"reasoning_content":"think \"hard\"","reasoning":"think"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"reasoning":"","content":"Hel\u00e9\n"}}]}"#,
        r#"{"choices":[{"index":1,"delta":{"content":"other choice"}},{"delta":{"content":"lo"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"refusal":"no"}}]}"#,
        r#"{"choices":[]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4}}}"#,
    ];
    let (fast, general) = both_ways(&chunks);
    assert_eq!(fast, general);
    assert!(
        fast.iter()
            .any(|e| matches!(e, StreamEvent::TextDelta { .. }))
    );
}

fn decode(chunks: &[&str]) -> Vec<StreamEvent> {
    let mut decoder = ChatDecoder::new(ErrorContext::new("openai", "m"));
    let mut out = Vec::new();
    for chunk in chunks {
        decoder.event(&SseEvent::new("message", *chunk), &mut out);
    }
    decoder.end(&mut out);
    out
}

fn calls(events: &[StreamEvent]) -> Vec<(String, String, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCall {
                id,
                tool_name,
                args,
                ..
            } => Some((id.clone(), tool_name.clone(), args.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_new_id_at_a_reused_index_starts_a_new_call() {
    let events = decode(&[
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"read_file","arguments":""}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":\"a.txt\"}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"b","type":"function","function":{"name":"list_dir","arguments":"{}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"b","function":{"arguments":""}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
        "[DONE]",
    ]);
    assert_eq!(
        calls(&events),
        vec![
            ("a".into(), "read_file".into(), r#"{"path":"a.txt"}"#.into()),
            ("b".into(), "list_dir".into(), "{}".into()),
        ]
    );
}

#[test]
fn a_calls_extra_content_follows_it_as_metadata() {
    let events = decode(&[
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"f","arguments":"{}"},"extra_content":{"google":{"thought_signature":"sig"}}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"b","type":"function","function":{"name":"g","arguments":"{}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
        "[DONE]",
    ]);
    let metadata: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCallMetadata { id, metadata } => Some((id.as_str(), metadata)),
            _ => None,
        })
        .collect();
    assert_eq!(
        metadata,
        vec![(
            "a",
            &json!({"openai_chat": {"extra_content": {"google": {"thought_signature": "sig"}}}})
        )]
    );
    let at = |wanted: &StreamEvent| events.iter().position(|e| e == wanted).unwrap();
    let call = events
        .iter()
        .find(|e| matches!(e, StreamEvent::ToolCall { id, .. } if id == "a"))
        .unwrap();
    assert!(
        at(call)
            < events
                .iter()
                .position(|e| matches!(e, StreamEvent::ToolCallMetadata { .. }))
                .unwrap()
    );
    assert_eq!(calls(&events).len(), 2);
}

#[test]
fn other_shapes_are_left_to_the_value_reading() {
    let mut decoder = ChatDecoder::new(ErrorContext::new("openai", "m"));
    let mut out = Vec::new();
    for chunk in [
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":""}}]}}]}"#,
        r#"{"error":{"message":"boom"}}"#,
        r#"{"choices":[{"index":0,"delta":{"content":["not","text"]}}]}"#,
        r#"{"choices":{"index":0}}"#,
    ] {
        assert!(!decoder.plain_chunk(chunk, &mut out), "{chunk}");
    }
    assert!(out.is_empty());
}

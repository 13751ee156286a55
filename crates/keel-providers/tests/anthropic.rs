//! Anthropic Messages: decoder replays, chunking invariance, staged signatures, prompt
//! caching marks and request building.
//!
//! Longer than most files: Anthropic's stream has the most event kinds of the four
//! protocols, and each is replayed here.

mod common;

use common::{ctx, final_error, finish_of, has_finish, replay, transcript};
use keel_core::{
    CallOptions, Effort, ErrorKind, FinishReason, Message, ModelCall, Part, PartKind, Role,
    StreamEvent, Thinking, ToolChoice, ToolDefinition, Usage,
};
use keel_providers::anthropic::{AnthropicDecoder, build_request, mark_cache_breakpoints};
use proptest::prelude::*;
use serde_json::{Value, json};

fn decode(name: &str) -> Vec<StreamEvent> {
    replay(AnthropicDecoder::new(ctx()), &transcript(name))
}

const SIGNATURE: &str = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxZ8MbzZpWZJc1u4nMiMLfHhZ==";

#[test]
fn thinking_with_signature_text_and_a_tool_call() {
    let events = decode("anthropic_thinking_tools.sse");
    let expected = vec![
        // The `ping` after `message_start`: life, not content.
        StreamEvent::KeepAlive,
        StreamEvent::ReasoningStart {
            id: "reasoning-0".into(),
            metadata: None,
        },
        StreamEvent::ReasoningDelta {
            id: "reasoning-0".into(),
            delta: "The user wants the weather. ".into(),
            metadata: None,
        },
        StreamEvent::ReasoningDelta {
            id: "reasoning-0".into(),
            delta: "I'll call the tool — señor.".into(),
            metadata: None,
        },
        StreamEvent::ReasoningEnd {
            id: "reasoning-0".into(),
            metadata: Some(json!({"anthropic": {"signature": SIGNATURE}})),
        },
        StreamEvent::TextStart {
            id: "text-1".into(),
        },
        StreamEvent::TextDelta {
            id: "text-1".into(),
            delta: "Let me check.".into(),
        },
        StreamEvent::TextEnd {
            id: "text-1".into(),
        },
        StreamEvent::ToolInputStart {
            id: "toolu_01".into(),
            tool_name: "get_weather".into(),
            provider_executed: false,
        },
        StreamEvent::ToolInputDelta {
            id: "toolu_01".into(),
            delta: "{\"location\": \"San".into(),
        },
        StreamEvent::ToolInputDelta {
            id: "toolu_01".into(),
            delta: " Francisco, CA\"}".into(),
        },
        StreamEvent::ToolInputEnd {
            id: "toolu_01".into(),
        },
        StreamEvent::ToolCall {
            id: "toolu_01".into(),
            tool_name: "get_weather".into(),
            args: "{\"location\": \"San Francisco, CA\"}".into(),
            provider_executed: false,
        },
        StreamEvent::Finish {
            reason: FinishReason::ToolCalls,
            usage: Usage {
                input_tokens: 25,
                output_tokens: 89,
                cache_read_tokens: 2000,
                cache_write_tokens: 1000,
                reasoning_tokens: 0,
            },
            provider_metadata: None,
        },
    ];
    assert_eq!(events, expected);
}

#[test]
fn server_tool_use_and_its_result_are_provider_executed() {
    let events = decode("anthropic_web_search.sse");
    assert!(events.contains(&StreamEvent::ToolInputStart {
        id: "srvtoolu_01".into(),
        tool_name: "web_search".into(),
        provider_executed: true,
    }));
    assert!(events.contains(&StreamEvent::ToolCall {
        id: "srvtoolu_01".into(),
        tool_name: "web_search".into(),
        args: "{\"query\": \"rust 2024 edition\"}".into(),
        provider_executed: true,
    }));
    let result = events
        .iter()
        .find_map(|e| match e {
            StreamEvent::ToolResult {
                id,
                tool_name,
                result,
                is_error,
            } => Some((id.clone(), tool_name.clone(), result.clone(), *is_error)),
            _ => None,
        })
        .unwrap();
    assert_eq!(result.0, "srvtoolu_01");
    assert_eq!(result.1, "web_search");
    assert_eq!(
        result.2[0]["url"],
        "https://doc.rust-lang.org/edition-guide/rust-2024/"
    );
    assert!(!result.3);
    assert!(events.contains(&StreamEvent::Source {
        url: "https://doc.rust-lang.org/edition-guide/rust-2024/".into(),
        title: Some("Rust 2024".into()),
    }));
    assert_eq!(
        common::text_of(&events),
        "I'll search for that.It shipped with Rust 1.85."
    );
    assert!(matches!(
        events.last(),
        Some(StreamEvent::Finish {
            reason: FinishReason::Stop,
            usage: Usage {
                input_tokens: 400,
                output_tokens: 120,
                ..
            },
            ..
        })
    ));
}

#[test]
fn redacted_thinking_keeps_its_data_opaque() {
    let events = decode("anthropic_redacted.sse");
    let metadata = json!({"anthropic": {"redacted_data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}});
    assert_eq!(
        events[0],
        StreamEvent::ReasoningStart {
            id: "reasoning-0".into(),
            metadata: Some(metadata.clone()),
        }
    );
    assert_eq!(
        events[1],
        StreamEvent::ReasoningEnd {
            id: "reasoning-0".into(),
            metadata: Some(metadata),
        }
    );
    assert!(matches!(
        events.last(),
        Some(StreamEvent::Finish {
            reason: FinishReason::Length,
            ..
        })
    ));
}

#[test]
fn an_overloaded_error_event_mid_stream_is_retryable() {
    let events = decode("anthropic_overloaded.sse");
    assert_eq!(common::text_of(&events), "Hel");
    let error = final_error(&events);
    assert_eq!(error.kind, ErrorKind::Overloaded);
    assert_eq!(error.error_type.as_deref(), Some("overloaded_error"));
    assert!(error.retryable());
    assert!(!has_finish(&events));
}

#[test]
fn a_half_received_signature_is_never_emitted() {
    let events = decode("anthropic_signature_cut.sse");
    assert_eq!(final_error(&events).kind, ErrorKind::Connection);
    for event in &events {
        let debug = format!("{event:?}");
        assert!(!debug.contains("half-received"), "leaked: {debug}");
        assert!(!matches!(event, StreamEvent::ReasoningEnd { .. }));
    }
    assert!(
        matches!(&events[1], StreamEvent::ReasoningDelta { delta, .. } if delta == "Thinking hard.")
    );
}

#[test]
fn stream_cut_before_message_stop_is_a_retryable_connection_error() {
    let bytes = transcript("anthropic_thinking_tools.sse");
    let text = String::from_utf8(bytes).unwrap();
    let cut = text.find("event: message_stop").unwrap();
    let events = replay(AnthropicDecoder::new(ctx()), &text.as_bytes()[..cut]);
    let error = final_error(&events);
    assert_eq!(error.kind, ErrorKind::Connection);
    assert!(error.retryable());
    assert!(!has_finish(&events));
}

const TRANSCRIPTS: [&str; 5] = [
    "anthropic_thinking_tools.sse",
    "anthropic_web_search.sse",
    "anthropic_redacted.sse",
    "anthropic_overloaded.sse",
    "anthropic_signature_cut.sse",
];

#[test]
fn any_chunking_yields_the_same_events() {
    common::any_chunking_yields_the_same_events(|| AnthropicDecoder::new(ctx()), &TRANSCRIPTS);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn a_signature_cut_anywhere_is_never_emitted(cut in any::<usize>()) {
        let bytes = transcript("anthropic_thinking_tools.sse");
        let text = String::from_utf8(bytes.clone()).unwrap();
        let stop = text.find("event: content_block_stop").unwrap();
        let cut = cut % stop;
        let events = replay(AnthropicDecoder::new(ctx()), &bytes[..cut]);
        for event in &events {
            let debug = format!("{:?}", event);
            prop_assert!(!debug.contains("EqQBCg") && !debug.contains("GgxZ8Mbz"));
        }
    }
}

fn has_cache_control(block: &Value) -> bool {
    block.get("cache_control") == Some(&json!({"type": "ephemeral"}))
}

#[test]
fn prompt_caching_marks_the_system_block_end_and_the_last_two_messages() {
    let mut messages = vec![
        Message::system("sys-1"),
        Message::system("sys-2"),
        Message::user("hello"),
        Message::assistant("working"),
        Message::user("continue"),
    ];
    messages[2].cache_breakpoint = true;
    mark_cache_breakpoints(&mut messages);
    let marks: Vec<bool> = messages.iter().map(|m| m.cache_breakpoint).collect();
    assert_eq!(marks, vec![false, true, false, true, true]);

    let body = build_request(
        &ModelCall {
            messages,
            ..ModelCall::default()
        },
        "claude-test",
    );
    let system = body["system"].as_array().unwrap();
    assert_eq!(system.len(), 2);
    assert!(!has_cache_control(&system[0]));
    assert!(has_cache_control(&system[1]));
    let turns = body["messages"].as_array().unwrap();
    assert_eq!(turns.len(), 3);
    assert!(!has_cache_control(&turns[0]["content"][0]));
    assert!(has_cache_control(&turns[1]["content"][0]));
    assert!(has_cache_control(&turns[2]["content"][0]));
    let count = body.to_string().matches("cache_control").count();
    assert_eq!(count, 3);
}

#[test]
fn prompt_caching_with_short_prompts_stays_within_three_marks() {
    let mut one = vec![Message::user("only")];
    mark_cache_breakpoints(&mut one);
    assert!(one[0].cache_breakpoint);
    let mut two = vec![Message::system("s"), Message::user("u")];
    mark_cache_breakpoints(&mut two);
    assert!(two.iter().all(|m| m.cache_breakpoint));
    let mut none: Vec<Message> = Vec::new();
    mark_cache_breakpoints(&mut none);
}

#[test]
fn the_cache_mark_goes_on_the_last_block_of_a_marked_message() {
    let mut tool = Message::new(
        Role::Tool,
        vec![
            Part::tool_result("t1", "a", json!("one"), false, false),
            Part::tool_result("t2", "b", json!("two"), true, false),
        ],
    );
    tool.cache_breakpoint = true;
    let body = build_request(
        &ModelCall {
            messages: vec![Message::user("go"), tool],
            ..ModelCall::default()
        },
        "m",
    );
    // The user text and the tool results merge into one user turn.
    let content = body["messages"][0]["content"].as_array().unwrap().clone();
    assert_eq!(content.len(), 3);
    assert!(!has_cache_control(&content[0]));
    assert!(!has_cache_control(&content[1]));
    assert!(has_cache_control(&content[2]));
    assert_eq!(
        content[2],
        json!({"type": "tool_result", "tool_use_id": "t2", "content": "two", "is_error": true,
               "cache_control": {"type": "ephemeral"}})
    );
}

#[test]
fn thinking_signatures_and_provider_tools_round_trip_unchanged() {
    let assistant = Message::new(
        Role::Assistant,
        vec![
            Part::reasoning(
                "The user wants the weather.",
                Some(json!({"anthropic": {"signature": SIGNATURE}})),
            ),
            Part::reasoning("", Some(json!({"anthropic": {"redacted_data": "EmwK"}}))),
            Part::reasoning("no signature, not sendable", None),
            Part::reasoning(
                "openai's",
                Some(json!({"openai_responses": {"item_id": "rs_1"}})),
            ),
            Part::text("Let me check."),
            Part::tool_call("srvtoolu_01", "web_search", "{\"query\":\"q\"}", true),
            Part::tool_result(
                "srvtoolu_01",
                "web_search",
                json!([{"type": "web_search_result", "url": "https://x", "title": "X", "encrypted_content": "E"}]),
                false,
                true,
            ),
            Part::tool_call("toolu_01", "get_weather", "{\"location\":\"SF\"}", false),
            Part::tool_call("toolu_02", "broken", "{\"loc", false),
        ],
    );
    let body = build_request(
        &ModelCall {
            messages: vec![Message::user("weather?"), assistant],
            tools: vec![
                ToolDefinition::function("get_weather", "Weather", json!({})),
                ToolDefinition::provider("web_search", "web_search_20250305"),
            ],
            options: CallOptions {
                thinking_budget_tokens: Some(2048),
                max_output_tokens: Some(1024),
                temperature: Some(0.3),
                tool_choice: ToolChoice::Required,
                ..CallOptions::default()
            },
        },
        "claude-test",
    );
    assert_eq!(
        body["messages"][1]["content"],
        json!([
            {"type": "thinking", "thinking": "The user wants the weather.", "signature": SIGNATURE},
            {"type": "redacted_thinking", "data": "EmwK"},
            {"type": "text", "text": "Let me check."},
            {"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search", "input": {"query": "q"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01",
             "content": [{"type": "web_search_result", "url": "https://x", "title": "X", "encrypted_content": "E"}]},
            {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"location": "SF"}},
            {"type": "tool_use", "id": "toolu_02", "name": "broken", "input": {}},
        ])
    );
    assert_eq!(
        body["thinking"],
        json!({"type": "enabled", "budget_tokens": 2048})
    );
    assert!(body["max_tokens"].as_u64().unwrap() > 2048);
    assert!(body.get("temperature").is_none());
    assert_eq!(body["tool_choice"], json!({"type": "any"}));
    assert_eq!(
        body["tools"],
        json!([
            {"name": "get_weather", "description": "Weather", "input_schema": {"type": "object", "properties": {}}},
            {"type": "web_search_20250305", "name": "web_search"},
        ])
    );
    assert_eq!(body["stream"], true);
}

#[test]
fn a_trailing_assistant_message_is_sent_as_native_prefill() {
    let body = build_request(
        &ModelCall {
            messages: vec![
                Message::system("sys"),
                Message::user("write a poem"),
                Message::assistant("Roses are  \n"),
            ],
            options: CallOptions {
                temperature: Some(0.5),
                ..CallOptions::default()
            },
            ..ModelCall::default()
        },
        "m",
    );
    assert_eq!(body["system"], json!([{"type": "text", "text": "sys"}]));
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "write a poem"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Roses are"}]},
        ])
    );
    assert_eq!(body["max_tokens"], 8192);
    assert_eq!(body["temperature"], 0.5);
}

#[test]
fn with_continuation_by_prompt_a_trailing_assistant_message_gets_an_instruction() {
    let call = ModelCall {
        messages: vec![
            Message::user("write a poem"),
            Message::assistant("Roses are"),
        ],
        ..ModelCall::default()
    };
    let body = keel_providers::anthropic::build_continuing(&call, "m", false);
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3);
    assert_eq!(messages[2]["role"], "user");
}

#[test]
fn with_thinking_a_trailing_assistant_message_is_continued_by_instruction() {
    let body = build_request(
        &ModelCall {
            messages: vec![
                Message::user("write a poem"),
                Message::assistant("Roses are"),
            ],
            options: CallOptions {
                thinking_budget_tokens: Some(1024),
                ..CallOptions::default()
            },
            ..ModelCall::default()
        },
        "m",
    );
    let turns = body["messages"].as_array().unwrap();
    assert_eq!(turns.len(), 3);
    assert_eq!(turns[2]["role"], "user");
}

#[test]
fn adaptive_thinking_sends_no_budget_and_the_effort_in_output_config() {
    let body = build_request(
        &ModelCall {
            messages: vec![
                Message::user("write a poem"),
                Message::assistant("Roses are"),
            ],
            options: CallOptions {
                thinking: Some(Thinking::Adaptive),
                effort: Some(Effort::Max),
                max_output_tokens: Some(4096),
                temperature: Some(0.3),
                ..CallOptions::default()
            },
            ..ModelCall::default()
        },
        "claude-opus-4-6",
    );
    assert_eq!(body["thinking"], json!({"type": "adaptive"}));
    assert_eq!(body["output_config"], json!({"effort": "max"}));
    assert_eq!(body["max_tokens"], 4096, "no budget to make room for");
    assert!(body.get("temperature").is_none());
    let turns = body["messages"].as_array().unwrap();
    assert_eq!(turns.len(), 3, "thinking continues by instruction");
    assert_eq!(turns[2]["role"], "user");
    // The effort alone, without thinking, is sent as well.
    let effort_only = build_request(
        &ModelCall {
            messages: vec![Message::user("hi")],
            options: CallOptions {
                effort: Some(Effort::Low),
                ..CallOptions::default()
            },
            ..ModelCall::default()
        },
        "claude-sonnet-4-6",
    );
    assert_eq!(effort_only["output_config"], json!({"effort": "low"}));
    assert!(effort_only.get("thinking").is_none());
}

#[test]
fn images_and_documents_become_source_blocks() {
    let body = build_request(
        &ModelCall {
            messages: vec![Message::new(
                Role::User,
                vec![
                    Part::text("look"),
                    Part::new(PartKind::File {
                        media_type: "image/png".into(),
                        data: Some("iVBOR".into()),
                        url: None,
                    }),
                    Part::new(PartKind::File {
                        media_type: "application/pdf".into(),
                        data: None,
                        url: Some("https://example.com/a.pdf".into()),
                    }),
                ],
            )],
            ..ModelCall::default()
        },
        "m",
    );
    assert_eq!(
        body["messages"][0]["content"],
        json!([
            {"type": "text", "text": "look"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"}},
            {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}},
        ])
    );
}

fn stop_with(delta: Value) -> Vec<StreamEvent> {
    let data = format!(
        concat!(
            "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"usage\":{{\"input_tokens\":5,\"output_tokens\":1}}}}}}\n\n",
            "event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{{\"type\":\"text\",\"text\":\"\"}}}}\n\n",
            "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"Hello..\"}}}}\n\n",
            "event: content_block_stop\ndata: {{\"type\":\"content_block_stop\",\"index\":0}}\n\n",
            "event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{},\"usage\":{{\"output_tokens\":3}}}}\n\n",
            "event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n",
        ),
        delta
    );
    replay(AnthropicDecoder::new(ctx()), data.as_bytes())
}

fn refusal_text(events: &[StreamEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::RefusalDelta { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect()
}

#[test]
fn stop_reason_refusal_becomes_a_refusal_part_with_the_explanation() {
    let events = stop_with(json!({"stop_reason": "refusal", "stop_details": {
        "type": "refusal", "category": "cyber",
        "explanation": "This request was declined because it could enable cyber harm."}}));
    assert_eq!(
        refusal_text(&events),
        "This request was declined because it could enable cyber harm."
    );
    assert_eq!(finish_of(&events), Some(FinishReason::ContentFilter));
    // The text before the refusal stays text.
    assert!(
        events
            .iter()
            .any(|e| matches!(e, StreamEvent::TextDelta { delta, .. } if delta == "Hello.."))
    );
    // Without an explanation the part still says what happened.
    let events = stop_with(json!({"stop_reason": "refusal"}));
    assert!(!refusal_text(&events).is_empty());
}

#[test]
fn pause_turn_is_a_finish_reason_of_its_own() {
    let events = stop_with(json!({"stop_reason": "pause_turn"}));
    assert_eq!(finish_of(&events), Some(FinishReason::PauseTurn));
    assert!(refusal_text(&events).is_empty());
}

#[test]
fn a_refused_turn_is_left_out_of_later_requests() {
    let refused = Message::new(
        Role::Assistant,
        vec![Part::text("Hello.."), Part::refusal("declined")],
    );
    let call = ModelCall {
        messages: vec![
            Message::user("first"),
            Message::assistant("fine"),
            Message::user("bad"),
            refused,
            Message::user("something else"),
        ],
        ..ModelCall::default()
    };
    let body = build_request(&call, "m");
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "first"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "fine"}]},
            {"role": "user", "content": [{"type": "text", "text": "bad"},
                                         {"type": "text", "text": "something else"}]},
        ])
    );
}

#[test]
fn a_paused_turn_goes_back_as_it_is_even_with_thinking_or_continuation_by_prompt() {
    let call = ModelCall {
        messages: vec![
            Message::user("search"),
            Message::new(
                Role::Assistant,
                vec![
                    Part::text("Searching "),
                    Part::tool_call("srvtoolu_1", "web_search", r#"{"query":"q"}"#, true),
                ],
            ),
        ],
        options: CallOptions {
            thinking_budget_tokens: Some(1024),
            paused_turn: true,
            ..CallOptions::default()
        },
        ..ModelCall::default()
    };
    for body in [
        build_request(&call, "m"),
        keel_providers::anthropic::build_continuing(&call, "m", false),
    ] {
        let turns = body["messages"].as_array().unwrap();
        assert_eq!(turns.len(), 2, "no instruction to continue: {body}");
        assert_eq!(turns[1]["role"], "assistant");
        assert_eq!(turns[1]["content"][1]["type"], "server_tool_use");
    }
}

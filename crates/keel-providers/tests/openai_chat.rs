//! OpenAI Chat Completions: decoder replays, chunking invariance and request building.

mod common;

use common::{ctx, final_error, finish_of, has_finish, replay, transcript};
use keel_core::{
    CallOptions, ErrorKind, FinishReason, Message, ModelCall, Part, PartKind, Role, StreamEvent,
    ToolChoice, ToolDefinition, Usage,
};
use keel_providers::openai_chat::{ChatDecoder, ChatRequestOptions, build_request};
use keel_providers::{OutputLimitField, ReasoningContent};
use serde_json::json;

fn decode(name: &str) -> Vec<StreamEvent> {
    replay(ChatDecoder::new(ctx()), &transcript(name))
}

#[test]
fn reasoning_text_and_interleaved_tool_calls() {
    let events = decode("openai_chat_tools.sse");
    let expected = vec![
        // The transcript opens with an SSE comment: life, not content.
        StreamEvent::KeepAlive,
        StreamEvent::ReasoningStart {
            id: "reasoning-1".into(),
            metadata: None,
        },
        StreamEvent::ReasoningDelta {
            id: "reasoning-1".into(),
            delta: "Let me ".into(),
            metadata: None,
        },
        StreamEvent::ReasoningDelta {
            id: "reasoning-1".into(),
            delta: "check the weather ☀️.".into(),
            metadata: None,
        },
        StreamEvent::ReasoningEnd {
            id: "reasoning-1".into(),
            metadata: None,
        },
        StreamEvent::TextStart {
            id: "text-2".into(),
        },
        StreamEvent::TextDelta {
            id: "text-2".into(),
            delta: "Checking ".into(),
        },
        StreamEvent::TextDelta {
            id: "text-2".into(),
            delta: "both cities — ok.".into(),
        },
        StreamEvent::TextEnd {
            id: "text-2".into(),
        },
        StreamEvent::ToolInputStart {
            id: "call_a".into(),
            tool_name: "get_weather".into(),
            provider_executed: false,
        },
        StreamEvent::ToolInputStart {
            id: "call_b".into(),
            tool_name: "get_time".into(),
            provider_executed: false,
        },
        StreamEvent::ToolInputDelta {
            id: "call_a".into(),
            delta: "{\"city\":".into(),
        },
        StreamEvent::ToolInputDelta {
            id: "call_b".into(),
            delta: "{\"tz\":\"CET\"}".into(),
        },
        StreamEvent::ToolInputDelta {
            id: "call_a".into(),
            delta: "\"Paris\"}".into(),
        },
        StreamEvent::ToolInputEnd {
            id: "call_a".into(),
        },
        StreamEvent::ToolCall {
            id: "call_a".into(),
            tool_name: "get_weather".into(),
            args: "{\"city\":\"Paris\"}".into(),
            provider_executed: false,
        },
        StreamEvent::ToolInputEnd {
            id: "call_b".into(),
        },
        StreamEvent::ToolCall {
            id: "call_b".into(),
            tool_name: "get_time".into(),
            args: "{\"tz\":\"CET\"}".into(),
            provider_executed: false,
        },
        StreamEvent::Finish {
            reason: FinishReason::ToolCalls,
            usage: Usage {
                input_tokens: 20,
                output_tokens: 40,
                cache_read_tokens: 100,
                cache_write_tokens: 0,
                reasoning_tokens: 12,
            },
            provider_metadata: None,
        },
    ];
    assert_eq!(events, expected);
}

#[test]
fn vllm_reasoning_field_length_finish_and_usage_on_the_last_choice_chunk() {
    let events = decode("openai_chat_text.sse");
    assert!(matches!(&events[0], StreamEvent::ReasoningStart { .. }));
    assert!(
        matches!(&events[1], StreamEvent::ReasoningDelta { delta, .. } if delta == "Short thought.")
    );
    assert_eq!(common::text_of(&events), "Hello, world");
    assert_eq!(
        events.last(),
        Some(&StreamEvent::Finish {
            reason: FinishReason::Length,
            usage: Usage {
                input_tokens: 9,
                output_tokens: 3,
                ..Usage::default()
            },
            provider_metadata: None,
        })
    );
}

#[test]
fn error_object_inside_the_stream_ends_it_classified() {
    let events = decode("openai_chat_error.sse");
    assert_eq!(common::text_of(&events), "Par");
    let error = final_error(&events);
    assert_eq!(error.kind, ErrorKind::Server);
    assert!(error.retryable());
    assert_eq!(error.provider, "test-provider");
    assert_eq!(error.model, "test-model");
    assert!(error.message.contains("The server had an error"));
    assert!(!has_finish(&events));
}

#[test]
fn stream_cut_before_the_finish_is_a_retryable_connection_error() {
    let events = decode("openai_chat_truncated.sse");
    let error = final_error(&events);
    assert_eq!(error.kind, ErrorKind::Connection);
    assert!(error.retryable());
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, StreamEvent::ToolCall { .. })),
        "a half-streamed call is not reported complete"
    );
}

#[test]
fn a_finish_reason_without_done_still_finishes() {
    let bytes = transcript("openai_chat_text.sse");
    let text = String::from_utf8(bytes)
        .unwrap()
        .replace("data: [DONE]\n", "");
    let events = replay(ChatDecoder::new(ctx()), text.as_bytes());
    assert!(matches!(
        events.last(),
        Some(StreamEvent::Finish {
            reason: FinishReason::Length,
            ..
        })
    ));
}

#[test]
fn a_call_sent_whole_in_one_chunk_without_an_id() {
    let data = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"list_dir\",\"arguments\":\"{\\\"path\\\":\\\".\\\"}\"}}]},\"finish_reason\":\"stop\"}]}\n\n",
        "data: [DONE]\n\n"
    );
    let events = replay(ChatDecoder::new(ctx()), data.as_bytes());
    let Some(StreamEvent::ToolInputStart { id, .. }) = events.first() else {
        panic!("{events:?}");
    };
    // A synthesised id, unique for ever: never the index, which the next reply reuses.
    assert!(id.starts_with("call_") && id.len() > 20, "{id}");
    let id = id.clone();
    assert_eq!(
        events,
        vec![
            StreamEvent::ToolInputStart {
                id: id.clone(),
                tool_name: "list_dir".into(),
                provider_executed: false
            },
            StreamEvent::ToolInputDelta {
                id: id.clone(),
                delta: "{\"path\":\".\"}".into()
            },
            StreamEvent::ToolInputEnd { id: id.clone() },
            StreamEvent::ToolCall {
                id,
                tool_name: "list_dir".into(),
                args: "{\"path\":\".\"}".into(),
                provider_executed: false
            },
            StreamEvent::Finish {
                reason: FinishReason::ToolCalls,
                usage: Usage::default(),
                provider_metadata: None
            },
        ]
    );
    let again = replay(ChatDecoder::new(ctx()), data.as_bytes());
    assert!(!again.contains(&events[0]), "a second reply gets other ids");
}

const TRANSCRIPTS: [&str; 4] = [
    "openai_chat_tools.sse",
    "openai_chat_text.sse",
    "openai_chat_error.sse",
    "openai_chat_truncated.sse",
];

#[test]
fn any_chunking_yields_the_same_events() {
    common::any_chunking_yields_the_same_events(|| ChatDecoder::new(ctx()), &TRANSCRIPTS);
}

fn tool_conversation() -> Vec<Message> {
    vec![
        Message::system("be brief"),
        Message::new(
            Role::User,
            vec![
                Part::text("what is in this picture?"),
                Part::new(PartKind::File {
                    media_type: "image/png".into(),
                    data: Some("iVBORw0KGgo=".into()),
                    url: None,
                }),
                Part::new(PartKind::File {
                    media_type: "image/jpeg".into(),
                    data: None,
                    url: Some("https://example.com/cat.jpg".into()),
                }),
            ],
        ),
        Message::new(
            Role::Assistant,
            vec![
                Part::reasoning("hidden", None),
                Part::text("Let me look."),
                Part::tool_call("call_1", "read_file", "{\"path\":\"a.txt\"}", false),
                Part::tool_call("call_2", "list_dir", "", false),
            ],
        ),
        Message::new(
            Role::Tool,
            vec![
                Part::tool_result("call_1", "read_file", json!("contents"), false, false),
                Part::tool_result(
                    "call_2",
                    "list_dir",
                    json!({"entries": ["a.txt"]}),
                    true,
                    false,
                ),
            ],
        ),
    ]
}

#[test]
fn request_maps_messages_images_tool_calls_and_tool_results() {
    let call = ModelCall {
        messages: tool_conversation(),
        tools: vec![
            ToolDefinition::function(
                "read_file",
                "Reads a file",
                json!({"properties": {"path": {"type": "string"}}, "required": ["path"]}),
            ),
            ToolDefinition::provider("web_search", "web_search_preview"),
        ],
        options: CallOptions {
            temperature: Some(0.2),
            top_p: Some(0.9),
            max_output_tokens: Some(512),
            reasoning_effort: Some(keel_core::ReasoningEffort::Low),
            tool_choice: ToolChoice::Required,
            ..CallOptions::default()
        },
    };
    let deepseek_like = ChatRequestOptions {
        output_limit: OutputLimitField::MaxTokens,
        reasoning_content: ReasoningContent::Send,
        ..ChatRequestOptions::default()
    };
    let body = build_request(&call, "gpt-test", deepseek_like);
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [
                {"type": "text", "text": "what is in this picture?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
            ]},
            {"role": "assistant", "content": "Let me look.", "reasoning_content": "hidden", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a.txt\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "list_dir", "arguments": "{}"}},
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "contents"},
            {"role": "tool", "tool_call_id": "call_2", "content": "{\"entries\":[\"a.txt\"]}"},
        ])
    );
    assert_eq!(
        body["tools"],
        json!([{"type": "function", "function": {
            "name": "read_file",
            "description": "Reads a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        }}]),
        "provider-run tools are not offered over Chat Completions"
    );
    assert_eq!(body["tool_choice"], "required");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    assert_eq!(body["temperature"], 0.2);
    assert_eq!(body["top_p"], 0.9);
    assert_eq!(body["max_tokens"], 512);
    assert_eq!(body["reasoning_effort"], "low");
    assert_eq!(body["model"], "gpt-test");
}

#[test]
fn by_default_the_limit_is_max_completion_tokens_and_reasoning_stays_home() {
    let call = ModelCall {
        messages: vec![Message::user("hi")],
        options: CallOptions {
            max_output_tokens: Some(100),
            ..CallOptions::default()
        },
        ..ModelCall::default()
    };
    let body = build_request(
        &call,
        "m",
        ChatRequestOptions {
            include_usage: false,
            ..ChatRequestOptions::default()
        },
    );
    assert!(body.get("stream_options").is_none());
    assert!(body.get("max_tokens").is_none());
    assert_eq!(body["max_completion_tokens"], 100);
    assert!(body.get("tools").is_none() && body.get("tool_choice").is_none());
    assert_eq!(body["messages"], json!([{"role": "user", "content": "hi"}]));
}

#[test]
fn a_trailing_assistant_message_is_continued_by_instruction() {
    let call = ModelCall {
        messages: vec![
            Message::user("write a poem"),
            Message::assistant("Roses are"),
        ],
        ..ModelCall::default()
    };
    let body = build_request(&call, "m", ChatRequestOptions::default());
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3);
    assert_eq!(
        messages[1],
        json!({"role": "assistant", "content": "Roses are"})
    );
    assert_eq!(messages[2]["role"], "user");
    let instruction = messages[2]["content"].as_str().unwrap().to_lowercase();
    assert!(instruction.contains("continue") && instruction.contains("without repeating"));
}

#[test]
fn with_prefill_a_trailing_assistant_message_is_continued_natively() {
    let call = ModelCall {
        messages: vec![
            Message::user("write a poem"),
            Message::assistant("Roses are"),
        ],
        ..ModelCall::default()
    };
    let options = ChatRequestOptions {
        prefill: true,
        ..ChatRequestOptions::default()
    };
    let body = build_request(&call, "m", options);
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": "write a poem"},
            {"role": "assistant", "content": "Roses are", "prefix": true},
        ]),
        "DeepSeek's prefix; llama.cpp continues the last assistant message"
    );
    assert_eq!(body["continue_final_message"], true, "vLLM");
    assert_eq!(body["add_generation_prompt"], false, "vLLM");

    let fresh = ModelCall {
        messages: vec![Message::user("hi")],
        ..ModelCall::default()
    };
    let body = build_request(&fresh, "m", options);
    assert!(body.get("continue_final_message").is_none());
    assert!(body.get("add_generation_prompt").is_none());
}

#[test]
fn provider_options_pass_through() {
    let mut options = CallOptions::default();
    options.provider_options.insert("seed".into(), json!(7));
    let call = ModelCall {
        messages: vec![Message::user("hi")],
        options,
        ..ModelCall::default()
    };
    assert_eq!(
        build_request(&call, "m", ChatRequestOptions::default())["seed"],
        7
    );
}

#[test]
fn reasoning_sent_under_both_names_is_read_once() {
    let data = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"think\",\"reasoning\":\"think\"},\"finish_reason\":null}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\n",
        "data: [DONE]\n\n"
    );
    let events = replay(ChatDecoder::new(ctx()), data.as_bytes());
    let reasoning: Vec<_> = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::ReasoningDelta { .. }))
        .collect();
    assert_eq!(reasoning.len(), 1);
    assert!(matches!(
        events.last(),
        Some(StreamEvent::Finish {
            reason: FinishReason::Stop,
            ..
        })
    ));
}

#[test]
fn an_error_event_with_plain_text_data_is_an_error() {
    let data = "event: error\ndata: upstream timed out\n\n";
    let events = replay(ChatDecoder::new(ctx()), data.as_bytes());
    let error = final_error(&events);
    assert_eq!(error.message, "upstream timed out");
    assert_eq!(error.kind, ErrorKind::Timeout);
}

#[test]
fn reasoning_goes_back_as_reasoning_content_only_when_switched_on() {
    let call = ModelCall {
        messages: vec![
            Message::user("hi"),
            Message::new(
                Role::Assistant,
                vec![Part::tool_call("c1", "read_file", "{}", false)],
            ),
            Message::new(
                Role::Tool,
                vec![Part::tool_result(
                    "c1",
                    "read_file",
                    json!("x"),
                    false,
                    false,
                )],
            ),
            Message::new(
                Role::Assistant,
                vec![
                    Part::reasoning("a", None),
                    Part::reasoning("b", None),
                    Part::text("done"),
                ],
            ),
        ],
        ..ModelCall::default()
    };
    let deepseek = ChatRequestOptions {
        reasoning_content: ReasoningContent::Send,
        ..ChatRequestOptions::default()
    };
    let body = build_request(&call, "deepseek-reasoner", deepseek);
    // A tool turn without reasoning still carries the field DeepSeek requires.
    assert_eq!(body["messages"][1]["reasoning_content"], "");
    assert_eq!(body["messages"][3]["reasoning_content"], "ab");
    // The default suits OpenAI and servers that refuse the field (Cerebras).
    let body = build_request(&call, "gpt-4.1", ChatRequestOptions::default());
    assert!(body["messages"][1].get("reasoning_content").is_none());
    assert!(body["messages"][3].get("reasoning_content").is_none());
}

#[test]
fn a_refusal_streams_as_refusal_deltas_never_as_text() {
    let data = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null},\"finish_reason\":null}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"refusal\":\"I can't \"},\"finish_reason\":null}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"refusal\":\"help.\"},\"finish_reason\":null}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
        "data: [DONE]\n\n"
    );
    let events = replay(ChatDecoder::new(ctx()), data.as_bytes());
    let refusal: String = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::RefusalDelta { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(refusal, "I can't help.");
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, StreamEvent::TextDelta { .. }))
    );
    assert_eq!(finish_of(&events), Some(FinishReason::Stop));
}

#[test]
fn a_refusal_goes_back_as_a_refusal_content_part() {
    let refused = Message::new(
        Role::Assistant,
        vec![Part::text("Well,"), Part::refusal("I can't help.")],
    );
    let call = ModelCall {
        messages: vec![Message::user("hi"), refused, Message::user("why?")],
        ..ModelCall::default()
    };
    let body = build_request(&call, "m", ChatRequestOptions::default());
    assert_eq!(
        body["messages"][1],
        json!({"role": "assistant", "content": [
            {"type": "text", "text": "Well,"},
            {"type": "refusal", "refusal": "I can't help."},
        ]})
    );
}

//! OpenAI Responses: decoder replays, chunking invariance and request building, chain mode
//! included.

mod common;

use common::{ctx, final_error, finish_of, has_finish, replay, transcript};
use keel_core::{
    CallOptions, ErrorKind, FinishReason, Message, ModelCall, Part, PartKind, Role, StreamEvent,
    ToolChoice, ToolDefinition, Usage,
};
use keel_providers::openai_responses::{ResponsesDecoder, build_request, new_input};
use serde_json::json;

fn decode(name: &str) -> Vec<StreamEvent> {
    replay(ResponsesDecoder::new(ctx()), &transcript(name))
}

fn reasoning_metadata() -> serde_json::Value {
    json!({"openai_responses": {"item_id": "rs_1", "encrypted_content": "gAAAAABopaque-reasoning==",
        "next_item": {"type": "message", "id": "msg_1"}}})
}

#[test]
fn reasoning_text_and_a_function_call() {
    let events = decode("openai_responses_tools.sse");
    let expected = vec![
        StreamEvent::ResponseId {
            id: "resp_123".into(),
        },
        // `response.in_progress`: life, not content.
        StreamEvent::KeepAlive,
        StreamEvent::ReasoningStart {
            id: "rs_1".into(),
            metadata: None,
        },
        StreamEvent::ReasoningDelta {
            id: "rs_1".into(),
            delta: "**Planning** the lookup.".into(),
            metadata: None,
        },
        StreamEvent::ReasoningDelta {
            id: "rs_1".into(),
            delta: "\n\nNeed the weather.".into(),
            metadata: None,
        },
        StreamEvent::ReasoningEnd {
            id: "rs_1".into(),
            metadata: Some(reasoning_metadata()),
        },
        StreamEvent::TextStart {
            id: "msg_1:0".into(),
        },
        StreamEvent::TextDelta {
            id: "msg_1:0".into(),
            delta: "Looking it up — ".into(),
        },
        StreamEvent::TextDelta {
            id: "msg_1:0".into(),
            delta: "one moment.".into(),
        },
        StreamEvent::TextEnd {
            id: "msg_1:0".into(),
        },
        StreamEvent::ToolInputStart {
            id: "call_9".into(),
            tool_name: "get_weather".into(),
            provider_executed: false,
        },
        StreamEvent::ToolInputDelta {
            id: "call_9".into(),
            delta: "{\"city\":".into(),
        },
        StreamEvent::ToolInputDelta {
            id: "call_9".into(),
            delta: "\"Zürich\"}".into(),
        },
        StreamEvent::ToolInputEnd {
            id: "call_9".into(),
        },
        StreamEvent::ToolCall {
            id: "call_9".into(),
            tool_name: "get_weather".into(),
            args: "{\"city\":\"Zürich\"}".into(),
            provider_executed: false,
        },
        StreamEvent::Finish {
            reason: FinishReason::ToolCalls,
            usage: Usage {
                input_tokens: 100,
                output_tokens: 80,
                cache_read_tokens: 200,
                cache_write_tokens: 0,
                reasoning_tokens: 50,
            },
            provider_metadata: None,
        },
    ];
    assert_eq!(events, expected);
}

#[test]
fn provider_web_search_citations_and_an_incomplete_reply() {
    let events = decode("openai_responses_web_search.sse");
    assert!(events.contains(&StreamEvent::ToolCall {
        id: "ws_1".into(),
        tool_name: "web_search".into(),
        args: json!({"type": "search", "query": "rust 2024 edition"}).to_string(),
        provider_executed: true,
    }));
    assert!(events.iter().any(|e| matches!(
        e,
        StreamEvent::ToolResult { id, tool_name, is_error: false, .. } if id == "ws_1" && tool_name == "web_search"
    )));
    assert!(events.contains(&StreamEvent::Source {
        url: "https://doc.rust-lang.org/edition-guide/rust-2024/".into(),
        title: Some("Rust 2024".into()),
    }));
    assert_eq!(common::text_of(&events), "It shipped in Rust 1.85.");
    // Running out of output tokens is reported as such, never as a normal stop.
    assert_eq!(
        events.last(),
        Some(&StreamEvent::Finish {
            reason: FinishReason::Length,
            usage: Usage {
                input_tokens: 50,
                output_tokens: 16,
                ..Usage::default()
            },
            provider_metadata: None,
        })
    );
}

#[test]
fn an_incomplete_reply_for_an_unknown_reason_is_an_error() {
    let data = "event: response.incomplete\ndata: {\"type\":\"response.incomplete\",\"response\":{\"id\":\"r\",\"status\":\"incomplete\",\"incomplete_details\":{\"reason\":\"something_new\"}}}\n\n";
    let events = replay(ResponsesDecoder::new(ctx()), data.as_bytes());
    assert!(final_error(&events).message.contains("something_new"));
    assert!(!has_finish(&events));
}

#[test]
fn response_failed_is_an_error_never_a_success() {
    let events = decode("openai_responses_failed.sse");
    assert_eq!(common::text_of(&events), "Partial");
    let error = final_error(&events);
    assert_eq!(error.kind, ErrorKind::Server);
    assert_eq!(error.message, "The model failed to generate a response.");
    assert_eq!(error.error_code.as_deref(), Some("server_error"));
    assert!(!has_finish(&events));
}

#[test]
fn an_error_event_about_a_missing_previous_response_breaks_the_chain() {
    let events = decode("openai_responses_error.sse");
    assert_eq!(events.len(), 1);
    let error = final_error(&events);
    assert_eq!(error.kind, ErrorKind::ChainBroken);
    assert!(error.message.contains("resp_old"));
}

#[test]
fn a_rate_limit_error_event_is_retryable() {
    let data = "event: error\ndata: {\"type\":\"error\",\"code\":\"rate_limit_exceeded\",\"message\":\"Rate limit reached\",\"param\":null}\n\n";
    let events = replay(ResponsesDecoder::new(ctx()), data.as_bytes());
    assert_eq!(final_error(&events).kind, ErrorKind::RateLimit);
}

#[test]
fn stream_cut_before_response_completed_is_a_retryable_connection_error() {
    let events = decode("openai_responses_truncated.sse");
    let error = final_error(&events);
    assert_eq!(error.kind, ErrorKind::Connection);
    assert!(error.retryable());
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, StreamEvent::ToolCall { .. }))
    );
}

const TRANSCRIPTS: [&str; 5] = [
    "openai_responses_tools.sse",
    "openai_responses_web_search.sse",
    "openai_responses_failed.sse",
    "openai_responses_error.sse",
    "openai_responses_truncated.sse",
];

#[test]
fn any_chunking_yields_the_same_events() {
    common::any_chunking_yields_the_same_events(|| ResponsesDecoder::new(ctx()), &TRANSCRIPTS);
}

fn conversation() -> Vec<Message> {
    vec![
        Message::system("be brief"),
        Message::new(
            Role::User,
            vec![
                Part::text("weather in Zürich?"),
                Part::new(PartKind::File {
                    media_type: "image/png".into(),
                    data: Some("iVBORw0KGgo=".into()),
                    url: None,
                }),
            ],
        ),
        Message::new(
            Role::Assistant,
            vec![
                Part::reasoning("**Planning** the lookup.", Some(reasoning_metadata())),
                Part::reasoning(
                    "from another provider",
                    Some(json!({"anthropic": {"signature": "x"}})),
                ),
                Part::text("Looking it up."),
                Part::tool_call("call_9", "get_weather", "{\"city\":\"Zürich\"}", false),
            ],
        ),
        Message::new(
            Role::Tool,
            vec![Part::tool_result(
                "call_9",
                "get_weather",
                json!({"temp": 21}),
                false,
                false,
            )],
        ),
        Message::user("and tomorrow?"),
    ]
}

#[test]
fn request_maps_input_items_and_round_trips_encrypted_reasoning() {
    let call = ModelCall {
        messages: conversation(),
        tools: vec![
            ToolDefinition::function(
                "get_weather",
                "Weather",
                json!({"properties": {"city": {"type": "string"}}}),
            ),
            ToolDefinition::provider("web_search", "web_search_preview"),
        ],
        options: CallOptions {
            reasoning_effort: Some(keel_core::ReasoningEffort::Medium),
            max_output_tokens: Some(1000),
            tool_choice: ToolChoice::Auto,
            ..CallOptions::default()
        },
    };
    let body = build_request(&call, "gpt-test");
    assert_eq!(
        body["input"],
        json!([
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [
                {"type": "input_text", "text": "weather in Zürich?"},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="},
            ]},
            {"type": "reasoning", "id": "rs_1",
             "summary": [{"type": "summary_text", "text": "**Planning** the lookup."}],
             "encrypted_content": "gAAAAABopaque-reasoning=="},
            // The reasoning item's follower goes back with its id, so the API can pair them.
            {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "Looking it up.", "annotations": []}]},
            {"type": "function_call", "call_id": "call_9", "name": "get_weather", "arguments": "{\"city\":\"Zürich\"}"},
            {"type": "function_call_output", "call_id": "call_9", "output": "{\"temp\":21}"},
            {"role": "user", "content": [{"type": "input_text", "text": "and tomorrow?"}]},
        ])
    );
    assert_eq!(body["store"], false);
    assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(
        body["reasoning"],
        json!({"effort": "medium", "summary": "auto"})
    );
    assert_eq!(body["max_output_tokens"], 1000);
    assert_eq!(body["tool_choice"], "auto");
    assert_eq!(
        body["tools"],
        json!([
            {"type": "function", "name": "get_weather", "description": "Weather", "strict": false,
             "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
            {"type": "web_search_preview"},
        ])
    );
    assert!(body.get("previous_response_id").is_none());
}

#[test]
fn chain_mode_sends_the_previous_response_id_and_only_new_input() {
    let call = ModelCall {
        messages: conversation(),
        options: CallOptions {
            previous_response_id: Some("resp_123".into()),
            store: true,
            ..CallOptions::default()
        },
        ..ModelCall::default()
    };
    let body = build_request(&call, "gpt-test");
    assert_eq!(body["previous_response_id"], "resp_123");
    assert_eq!(body["store"], true);
    assert!(body.get("include").is_none());
    assert_eq!(
        body["input"],
        json!([
            {"type": "function_call_output", "call_id": "call_9", "output": "{\"temp\":21}"},
            {"role": "user", "content": [{"type": "input_text", "text": "and tomorrow?"}]},
        ])
    );
}

#[test]
fn new_input_keeps_a_trailing_partial_reply() {
    let messages = vec![
        Message::user("one"),
        Message::assistant("first answer"),
        Message::user("two"),
        Message::assistant("partial"),
    ];
    let new = new_input(&messages);
    assert_eq!(new, &messages[2..]);
    let call = ModelCall {
        messages: messages.clone(),
        options: CallOptions {
            previous_response_id: Some("resp_1".into()),
            store: true,
            ..CallOptions::default()
        },
        ..ModelCall::default()
    };
    let input = build_request(&call, "m")["input"].clone();
    let input = input.as_array().unwrap();
    assert_eq!(input.len(), 3);
    assert_eq!(input[1], json!({"role": "assistant", "content": "partial"}));
    assert_eq!(input[2]["role"], "user");
    assert!(input[2]["content"].as_str().unwrap().contains("Continue"));
    assert_eq!(new_input(&messages[..1]), &messages[..1]);
}

#[test]
fn stored_reasoning_without_encrypted_content_is_sent_by_id_only_when_stored() {
    let part = Part::reasoning(
        "",
        Some(json!({"openai_responses": {"item_id": "rs_9",
            "next_item": {"type": "message", "id": "msg_9"}}})),
    );
    let messages = vec![
        Message::user("q"),
        Message::new(Role::Assistant, vec![part, Part::text("a")]),
        Message::user("q2"),
    ];
    let stored = build_request(
        &ModelCall {
            messages: messages.clone(),
            options: CallOptions {
                store: true,
                ..CallOptions::default()
            },
            ..ModelCall::default()
        },
        "m",
    );
    assert_eq!(
        stored["input"][1],
        json!({"type": "reasoning", "id": "rs_9", "summary": []})
    );
    let unstored = build_request(
        &ModelCall {
            messages,
            ..ModelCall::default()
        },
        "m",
    );
    assert_eq!(
        unstored["input"][1],
        json!({"role": "assistant", "content": "a"})
    );
}

#[test]
fn a_reasoning_item_goes_back_only_with_its_follower_and_the_followers_id() {
    let reasoning = |next: serde_json::Value| {
        Part::reasoning(
            "r",
            Some(
                json!({"openai_responses": {"item_id": "rs_1", "encrypted_content": "e",
                "next_item": next}}),
            ),
        )
    };
    let input = |parts: Vec<Part>| {
        let call = ModelCall {
            messages: vec![
                Message::user("q"),
                Message::new(Role::Assistant, parts),
                Message::new(
                    Role::Tool,
                    vec![Part::tool_result("call_1", "f", json!("ok"), false, false)],
                ),
            ],
            ..ModelCall::default()
        };
        build_request(&call, "m")["input"].clone()
    };
    // Followed by a function call: the call carries its item id.
    let items = input(vec![
        reasoning(json!({"type": "function_call", "id": "fc_1", "call_id": "call_1"})),
        Part::tool_call("call_1", "f", "{}", false),
    ]);
    assert_eq!(items[1]["type"], "reasoning");
    assert_eq!(items[2]["id"], "fc_1");
    assert_eq!(items[2]["call_id"], "call_1");
    // The follower was lost (a cut reply): the reasoning item is left out.
    let items = input(vec![
        reasoning(json!({"type": "message", "id": "msg_1"})),
        Part::tool_call("call_1", "f", "{}", false),
    ]);
    assert_eq!(items[1]["type"], "function_call");
    assert!(items[1].get("id").is_none());
    assert!(
        items
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["type"] != "reasoning")
    );
}

#[test]
fn client_run_items_get_neither_a_call_nor_a_made_up_result() {
    let data = concat!(
        "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\"}}\n\n",
        "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"item\":{\"type\":\"computer_call\",\"id\":\"cu_1\",\"call_id\":\"call_1\",\"action\":{\"type\":\"screenshot\"}}}\n\n",
        "event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"item\":{\"type\":\"computer_call\",\"id\":\"cu_1\",\"call_id\":\"call_1\",\"action\":{\"type\":\"screenshot\"},\"status\":\"completed\"}}\n\n",
        "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"item\":{\"type\":\"web_search_call\",\"id\":\"ws_1\"}}\n\n",
        "event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"item\":{\"type\":\"web_search_call\",\"id\":\"ws_1\",\"status\":\"completed\",\"action\":{\"query\":\"q\"}}}\n\n",
        "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"usage\":{}}}\n\n",
    );
    let events = replay(ResponsesDecoder::new(ctx()), data.as_bytes());
    let ids: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCall { id, .. } | StreamEvent::ToolResult { id, .. } => {
                Some(id.as_str())
            }
            _ => None,
        })
        .collect();
    // The provider-run web search is kept with its result; the computer call is not.
    assert_eq!(ids, vec!["ws_1", "ws_1"]);
}

#[test]
fn a_refusal_content_part_streams_as_refusal_deltas() {
    let data = concat!(
        "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"id\":\"msg_1\",\"type\":\"message\",\"status\":\"in_progress\",\"role\":\"assistant\",\"content\":[]}}\n\n",
        "event: response.content_part.added\ndata: {\"type\":\"response.content_part.added\",\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"part\":{\"type\":\"refusal\",\"refusal\":\"\"}}\n\n",
        "event: response.refusal.delta\ndata: {\"type\":\"response.refusal.delta\",\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"No, \"}\n\n",
        "event: response.refusal.delta\ndata: {\"type\":\"response.refusal.delta\",\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"sorry.\"}\n\n",
        "event: response.refusal.done\ndata: {\"type\":\"response.refusal.done\",\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"refusal\":\"No, sorry.\"}\n\n",
        "event: response.content_part.done\ndata: {\"type\":\"response.content_part.done\",\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"part\":{\"type\":\"refusal\",\"refusal\":\"No, sorry.\"}}\n\n",
        "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"status\":\"completed\",\"output\":[]}}\n\n",
    );
    let events = replay(ResponsesDecoder::new(ctx()), data.as_bytes());
    let refusal: String = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::RefusalDelta { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(refusal, "No, sorry.");
    assert!(!events.iter().any(|e| matches!(
        e,
        StreamEvent::TextDelta { .. } | StreamEvent::TextStart { .. }
    )));
    assert_eq!(finish_of(&events), Some(FinishReason::Stop));
}

#[test]
fn a_refusal_goes_back_as_a_refusal_part_of_the_assistant_message() {
    let refused = Message::new(
        Role::Assistant,
        vec![Part::text("Well,"), Part::refusal("No, sorry.")],
    );
    let call = ModelCall {
        messages: vec![Message::user("hi"), refused, Message::user("why?")],
        ..ModelCall::default()
    };
    let body = build_request(&call, "m");
    assert_eq!(
        body["input"][1],
        json!({"role": "assistant", "content": [
            {"type": "output_text", "text": "Well,", "annotations": []},
            {"type": "refusal", "refusal": "No, sorry."},
        ]})
    );
    // Text alone keeps the short form.
    let plain = ModelCall {
        messages: vec![Message::user("hi"), Message::assistant("hello")],
        ..ModelCall::default()
    };
    let body = build_request(&plain, "m");
    assert_eq!(
        body["input"][1],
        json!({"role": "assistant", "content": "hello"})
    );
}

#[test]
fn a_finished_web_search_goes_back_as_its_item_and_a_cut_one_not_at_all() {
    let item = json!({"type": "web_search_call", "id": "ws_1", "status": "completed",
                      "action": {"type": "search", "query": "keel"}});
    let reasoning = json!({"openai_responses": {"item_id": "rs_1", "encrypted_content": "E",
        "next_item": {"type": "web_search_call", "id": "ws_1"}}});
    let searched = Message::new(
        Role::Assistant,
        vec![
            Part::reasoning("", Some(reasoning)),
            Part::tool_call("ws_1", "web_search", item["action"].to_string(), true),
            Part::tool_result("ws_1", "web_search", item.clone(), false, true),
            Part::text("Keel is a daemon."),
            // Cut while searching: no item to send back.
            Part::tool_call("ws_2", "web_search", "", true),
        ],
    );
    let call = ModelCall {
        messages: vec![
            Message::user("what is keel?"),
            searched,
            Message::user("more"),
        ],
        tools: vec![
            keel_providers::provider_tool(
                keel_providers::ProviderKind::OpenAiResponses,
                "web_search",
            )
            .unwrap(),
        ],
        options: CallOptions::default(),
    };
    let body = build_request(&call, "gpt-test");
    assert_eq!(
        body["input"],
        json!([
            {"role": "user", "content": [{"type": "input_text", "text": "what is keel?"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "E"},
            item,
            {"role": "assistant", "content": "Keel is a daemon."},
            {"role": "user", "content": [{"type": "input_text", "text": "more"}]},
        ])
    );
    assert_eq!(body["tools"], json!([{"type": "web_search"}]));
}

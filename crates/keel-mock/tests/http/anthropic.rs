//! Anthropic Messages.

use keel_mock::{Script, Step, Usage};
use serde_json::{Value, json};

use crate::common::*;

fn kinds(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .map(|e| e.event.clone().unwrap_or_default())
        .collect()
}

#[tokio::test]
async fn thinking_text_and_tool_use_blocks() {
    let server = server().await;
    let script = Script::new(
        Step::text("Checking.")
            .reasoning("The user wants files.")
            .call("list_dir", json!({"path": "src/deeply/nested"}))
            .usage(Usage {
                input_tokens: Some(150_000),
                cache_read_tokens: Some(20),
                cache_write_tokens: Some(30),
                ..Usage::default()
            }),
    );
    let events =
        read_events(post(&server, "/messages", &messages(&script.message("list"))).await).await;
    let kinds = kinds(&events);
    assert_eq!(&kinds[..2], ["message_start", "ping"]);
    assert_eq!(&kinds[kinds.len() - 2..], ["message_delta", "message_stop"]);

    let start = &named(&events, "message_start")[0]["message"];
    assert_eq!(start["usage"]["input_tokens"], 150_000);
    assert_eq!(start["usage"]["cache_read_input_tokens"], 20);
    assert_eq!(start["usage"]["cache_creation_input_tokens"], 30);

    let blocks = named(&events, "content_block_start");
    let types: Vec<&str> = blocks
        .iter()
        .map(|b| b["content_block"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["thinking", "text", "tool_use"]);
    assert_eq!(blocks[2]["content_block"]["name"], "list_dir");
    assert!(
        blocks[2]["content_block"]["id"]
            .as_str()
            .unwrap()
            .starts_with("toolu_")
    );

    let deltas = named(&events, "content_block_delta");
    let of = |kind: &str, field: &str| -> String {
        deltas
            .iter()
            .filter(|d| d["delta"]["type"] == kind)
            .map(|d| d["delta"][field].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(of("thinking_delta", "thinking"), "The user wants files.");
    assert!(!of("signature_delta", "signature").is_empty());
    assert_eq!(of("text_delta", "text"), "Checking.");
    let input: Value = serde_json::from_str(&of("input_json_delta", "partial_json")).unwrap();
    assert_eq!(input, json!({"path": "src/deeply/nested"}));
    assert!(
        deltas
            .iter()
            .filter(|d| d["delta"]["type"] == "input_json_delta")
            .count()
            > 1
    );
    assert_eq!(named(&events, "content_block_stop").len(), 3);

    let delta = &named(&events, "message_delta")[0];
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
    assert!(delta["usage"]["output_tokens"].as_u64().unwrap() > 1);
}

#[tokio::test]
async fn tool_results_advance_to_the_next_step() {
    let server = server().await;
    let script = Script::new(Step::tool_call("read_file", json!({"path": "a"})))
        .then(Step::text("Read it."));
    let body = json!({"model": "mock", "max_tokens": 100, "stream": true, "messages": [
        {"role": "user", "content": [{"type": "text", "text": script.message("go")}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "contents"}]},
    ]});
    let events = read_events(post(&server, "/messages", &body).await).await;
    let text: String = named(&events, "content_block_delta")
        .iter()
        .filter_map(|d| d["delta"]["text"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(text, "Read it.");
    assert_eq!(
        named(&events, "message_delta")[0]["delta"]["stop_reason"],
        "end_turn"
    );
}

#[tokio::test]
async fn text_next_to_tool_results_restarts_the_steps() {
    let server = server().await;
    let first = Script::new(Step::tool_call("read_file", json!({}))).then(Step::text("old script"));
    let second = Script::new(Step::text("new instructions"));
    let body = json!({"model": "mock", "max_tokens": 100, "stream": true, "messages": [
        {"role": "user", "content": first.message("go")},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "x"}]},
            {"type": "text", "text": "stop that"},
            {"type": "text", "text": second.directive()},
        ]},
    ]});
    let events = read_events(post(&server, "/messages", &body).await).await;
    let text: String = named(&events, "content_block_delta")
        .iter()
        .filter_map(|d| d["delta"]["text"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(text, "new instructions");
}

#[tokio::test]
async fn non_streaming_message() {
    let server = server().await;
    let script = Script::new(Step::text("Hi.").reasoning("hm").call("t", json!({"a": 1})));
    let mut body = messages(&script.message("x"));
    body["stream"] = json!(false);
    let response = post(&server, "/messages", &body).await;
    assert_eq!(response.status(), 200);
    let message: Value = response.json().await.unwrap();
    assert_eq!(message["type"], "message");
    assert_eq!(message["content"][0]["type"], "thinking");
    assert!(message["content"][0]["signature"].is_string());
    assert_eq!(message["content"][1]["text"], "Hi.");
    assert_eq!(message["content"][2]["input"], json!({"a": 1}));
    assert_eq!(message["stop_reason"], "tool_use");
}

#[tokio::test]
async fn continues_a_prefilled_reply() {
    let server = server().await;
    let script = Script::new(Step::text("one two three four"));
    let body = json!({
        "model": "mock",
        "max_tokens": 100,
        "stream": true,
        "messages": [
            {"role": "user", "content": script.message("q")},
            {"role": "assistant", "content": "one two"}
        ]
    });
    let events = read_events(post(&server, "/messages", &body).await).await;
    let text: String = events
        .iter()
        .filter_map(|e| e.json()["delta"]["text"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(text, " three four");
}

/// Keel's Anthropic adapter sends consecutive user messages as one turn of text blocks:
/// the echo holds every block, one per line.
#[tokio::test]
async fn echoes_every_text_block_of_the_user_turn() {
    let server = server().await;
    let mut body = messages("second");
    body["stream"] = json!(false);
    body["messages"] = json!([{"role": "user", "content": [
        {"type": "text", "text": "first"},
        {"type": "text", "text": "second"},
    ]}]);
    let message: Value = post(&server, "/messages", &body)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(message["content"][0]["text"], "first\nsecond");
}

//! OpenAI Chat Completions.

use keel_mock::{Script, Step, Usage};
use serde_json::{Value, json};

use crate::common::*;

#[tokio::test]
async fn echoes_word_by_word_without_a_directive() {
    let server = server().await;
    let events =
        read_events(post(&server, "/chat/completions", &chat("Hello brave new world")).await).await;
    let deltas: Vec<String> = events
        .iter()
        .filter_map(|e| {
            e.json()["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .filter(|d| !d.is_empty())
        .collect();
    assert_eq!(deltas, ["Hello", " brave", " new", " world"]);
    let first = events[0].json();
    assert_eq!(first["object"], "chat.completion.chunk");
    assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
    let finish = &events[events.len() - 3].json();
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    let usage = &events[events.len() - 2].json();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 4);
    assert_eq!(events.last().unwrap().data, "[DONE]");
}

#[tokio::test]
async fn usage_chunk_only_when_asked() {
    let server = server().await;
    let mut body = chat("hi");
    body.as_object_mut().unwrap().remove("stream_options");
    let events = read_events(post(&server, "/chat/completions", &body).await).await;
    assert!(events.iter().all(|e| e.json().get("usage").is_none()));
    assert_eq!(events.last().unwrap().data, "[DONE]");
}

#[tokio::test]
async fn scripted_text_reasoning_and_usage() {
    let server = server().await;
    let script = Script::new(
        Step::text("The answer is 42.")
            .reasoning("Let me think.")
            .usage(Usage {
                input_tokens: Some(900_000),
                cache_read_tokens: Some(100),
                ..Usage::default()
            }),
    );
    let events =
        read_events(post(&server, "/chat/completions", &chat(&script.message("q"))).await).await;
    let reasoning: String = events
        .iter()
        .filter_map(|e| {
            e.json()["choices"][0]["delta"]["reasoning_content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(reasoning, "Let me think.");
    assert_eq!(chat_text(&events), "The answer is 42.");
    let usage = events[events.len() - 2].json()["usage"].clone();
    assert_eq!(usage["prompt_tokens"], 900_100);
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 100);
    assert_eq!(usage["completion_tokens_details"]["reasoning_tokens"], 3);
}

#[tokio::test]
async fn token_count_cycles_the_text() {
    let server = server().await;
    let script = Script::new(Step::text("").tokens(50));
    let events =
        read_events(post(&server, "/chat/completions", &chat(&script.message(""))).await).await;
    assert_eq!(chat_text(&events).split_whitespace().count(), 50);
}

#[tokio::test]
async fn tool_loop_follows_the_steps() {
    let server = server().await;
    let script = Script::new(
        Step::text("Let me look.").call("read_file", json!({"path": "notes/today.txt"})),
    )
    .then(Step::text("All done."));
    let user = json!({"role": "user", "content": script.message("read my notes")});
    let tools = json!([{"type": "function", "function": {"name": "read_file", "parameters": {}}}]);

    let first = json!({"model": "mock", "stream": true, "messages": [user], "tools": tools});
    let events = read_events(post(&server, "/chat/completions", &first).await).await;
    assert_eq!(chat_text(&events), "Let me look.");
    let start = events
        .iter()
        .map(Event::json)
        .find(|e| e["choices"][0]["delta"]["tool_calls"][0]["id"].is_string())
        .unwrap();
    let call = &start["choices"][0]["delta"]["tool_calls"][0];
    assert_eq!(call["index"], 0);
    assert_eq!(call["function"]["name"], "read_file");
    let args: Value = serde_json::from_str(&chat_args(&events)).unwrap();
    assert_eq!(args, json!({"path": "notes/today.txt"}));
    let finish = events
        .iter()
        .map(Event::json)
        .find(|e| e["choices"][0]["finish_reason"].is_string());
    assert_eq!(finish.unwrap()["choices"][0]["finish_reason"], "tool_calls");

    let call_id = call["id"].as_str().unwrap();
    let assistant = json!({"role": "assistant", "content": "Let me look.", "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": "read_file", "arguments": chat_args(&events)}}
    ]});
    let result = json!({"role": "tool", "tool_call_id": call_id, "content": "buy milk"});
    let second = json!({"model": "mock", "stream": true, "tools": tools,
                        "messages": [user, assistant, result]});
    let events2 = read_events(post(&server, "/chat/completions", &second).await).await;
    assert_eq!(chat_text(&events2), "All done.");

    // Past the last step, the mock summarises the tool results it was just given.
    let third = json!({"model": "mock", "stream": true, "tools": tools,
                       "messages": [user, assistant, result, assistant, result]});
    let events3 = read_events(post(&server, "/chat/completions", &third).await).await;
    assert_eq!(chat_text(&events3), "Tool read_file returned: buy milk");
}

#[tokio::test]
async fn offered_tools_can_be_called_without_a_script() {
    let server = server().await;
    let body = json!({"model": "demo", "stream": true,
        "tools": [{"type": "function", "function": {"name": "list_dir"}}],
        "messages": [{"role": "user", "content": "/list_dir {\"path\": \".\"}"}]});
    let events = read_events(post(&server, "/chat/completions", &body).await).await;
    assert_eq!(chat_args(&events), r#"{"path":"."}"#);
}

#[tokio::test]
async fn non_streaming_completion() {
    let server = server().await;
    let script = Script::new(
        Step::text("Sure.")
            .reasoning("ok")
            .call("list_dir", json!({})),
    );
    let mut body = chat(&script.message("x"));
    body["stream"] = json!(false);
    let response = post(&server, "/chat/completions", &body).await;
    assert_eq!(response.status(), 200);
    let completion: Value = response.json().await.unwrap();
    let message = &completion["choices"][0]["message"];
    assert_eq!(message["content"], "Sure.");
    assert_eq!(message["reasoning_content"], "ok");
    assert_eq!(message["tool_calls"][0]["function"]["name"], "list_dir");
    assert_eq!(completion["choices"][0]["finish_reason"], "tool_calls");
    assert!(completion["usage"]["total_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn a_bad_directive_is_a_400_that_names_it() {
    let server = server().await;
    let response = post(&server, "/chat/completions", &chat("#mock {\"txt\": 1}")).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("#mock") && message.contains("txt"),
        "{message}"
    );
}

#[tokio::test]
async fn lists_models() {
    let server = server().await;
    let models: Value = client()
        .get(format!("{}/models", server.base_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&"mock") && ids.contains(&"demo"));
    assert_eq!(models["object"], "list");
}

#[tokio::test]
async fn continues_a_partial_reply_after_an_instruction() {
    let server = server().await;
    let script = Script::new(Step::text("one two three four"));
    let body = json!({
        "model": "mock",
        "stream": true,
        "messages": [
            {"role": "user", "content": script.message("q")},
            {"role": "assistant", "content": "one two"},
            {"role": "user", "content": "Continue exactly where you stopped, without repeating anything you already wrote."}
        ]
    });
    let events = read_events(post(&server, "/chat/completions", &body).await).await;
    assert_eq!(chat_text(&events), " three four");
}

/// Two user messages in a row (the first never answered) are two messages here, unlike in
/// Anthropic Messages, whose single user turn holds both: the echo is the last one alone.
#[tokio::test]
async fn echoes_only_the_last_of_consecutive_user_messages() {
    let server = server().await;
    let mut body = chat("second");
    body["messages"] = json!([
        {"role": "user", "content": "first"},
        {"role": "user", "content": "second"},
    ]);
    let events = read_events(post(&server, "/chat/completions", &body).await).await;
    assert_eq!(chat_text(&events), "second");
}

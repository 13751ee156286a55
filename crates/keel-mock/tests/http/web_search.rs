//! The `web_search` step option on both APIs that have provider-run searches, and the rules
//! a search sent back must pass.

use keel_mock::{Script, SearchResult, Step, WebSearch};
use serde_json::{Value, json};

use crate::common::*;

fn searching(text: &str) -> Script {
    Script::new(Step {
        web_search: Some(WebSearch {
            query: "keel".into(),
            results: vec![SearchResult {
                url: "https://keel.example/".into(),
                title: "Keel".into(),
            }],
        }),
        ..Step::text(text)
    })
}

#[tokio::test]
async fn anthropic_searches_first_then_cites_the_result_in_its_text() {
    let server = server().await;
    let request = messages(&searching("Keel is a daemon.").message("what is keel?"));
    let events = read_events(post(&server, "/messages", &request).await).await;
    let blocks: Vec<Value> = named(&events, "content_block_start")
        .iter()
        .map(|e| e["content_block"].clone())
        .collect();
    let types: Vec<&str> = blocks.iter().map(|b| b["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["server_tool_use", "web_search_tool_result", "text"]);
    assert_eq!(blocks[1]["tool_use_id"], blocks[0]["id"]);
    let page = &blocks[1]["content"][0];
    assert_eq!(page["url"], "https://keel.example/");
    let citation = named(&events, "content_block_delta")
        .into_iter()
        .find(|d| d["delta"]["type"] == "citations_delta")
        .unwrap();
    assert_eq!(
        citation["delta"]["citation"]["url"],
        "https://keel.example/"
    );
    let stop = &named(&events, "message_delta")[0]["delta"]["stop_reason"];
    assert_eq!(
        stop, "end_turn",
        "the provider ran the tool: nothing for the client"
    );

    // The next turn: the blocks as they came are accepted, a changed page is not.
    let turn = |content: Value| {
        json!({"model": "mock", "max_tokens": 64, "messages": [
            {"role": "user", "content": "what is keel?"},
            {"role": "assistant", "content": content},
            {"role": "user", "content": "thanks"}]})
    };
    let call = json!({"type": "server_tool_use", "id": blocks[0]["id"], "name": "web_search",
                      "input": {"query": "keel"}});
    let response = post(&server, "/messages", &turn(json!([call, blocks[1]]))).await;
    assert_eq!(response.status(), 200);
    let mut changed = blocks[1].clone();
    changed["content"][0]["encrypted_content"] = json!("edited");
    let response = post(&server, "/messages", &turn(json!([call, changed]))).await;
    assert_eq!(response.status(), 400);
    let response = post(&server, "/messages", &turn(json!([blocks[1]]))).await;
    assert_eq!(response.status(), 400, "a result without its call");
}

#[tokio::test]
async fn responses_searches_first_then_annotates_its_text() {
    let server = server().await;
    let request = responses(&searching("Keel is a daemon.").message("what is keel?"));
    let events = read_events(post(&server, "/responses", &request).await).await;
    let done: Vec<Value> = named(&events, "response.output_item.done")
        .iter()
        .map(|e| e["item"].clone())
        .collect();
    assert_eq!(done[0]["type"], "web_search_call");
    assert_eq!(
        done[0]["action"],
        json!({"type": "search", "query": "keel"})
    );
    assert_eq!(done[1]["type"], "message");
    let annotation = &named(&events, "response.output_text.annotation.added")[0]["annotation"];
    assert_eq!(annotation["type"], "url_citation");
    assert_eq!(annotation["url"], "https://keel.example/");
    assert_eq!(
        done[1]["content"][0]["annotations"][0]["url"],
        "https://keel.example/"
    );

    // An unknown tool type is refused as the API refuses it.
    let mut unknown = responses("hi");
    unknown["tools"] = json!([{"type": "web_search_20250305"}]);
    let response = post(&server, "/responses", &unknown).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["param"], "tools[0].type");
}
